//! What the examples share: the adapters of this platform, built the way the `uexec` app builds them.
//!
//! The programs themselves are `engine_approver.rs` (the engine with an approver written in the example) and
//! `agent_loop.rs` (a minimal agent loop driving `exec_command` / `write_stdin` against a Python REPL). Run
//! them with `cargo run -p uexec-examples --example <name>`; `cargo xtask ci` runs every example of the
//! workspace and requires each to exit 0.

use std::sync::Arc;

use uexec_ports::Sandbox;
use uexec_ports::process::ProcessSpawner;

/// The process adapter: PTY and pipe sessions.
pub fn spawner() -> Arc<dyn ProcessSpawner> {
    Arc::new(uexec_pty::PtySpawner::default())
}

/// The sandbox of this platform: Landlock + seccomp + mount namespace on Linux, Seatbelt on macOS. It fails
/// closed: a policy it cannot enforce is refused, never run unsandboxed.
#[cfg(target_os = "linux")]
pub fn sandbox() -> Arc<dyn Sandbox> {
    Arc::new(uexec_sandbox_linux::LinuxSandbox::default())
}

/// The sandbox of this platform: Landlock + seccomp + mount namespace on Linux, Seatbelt on macOS. It fails
/// closed: a policy it cannot enforce is refused, never run unsandboxed.
#[cfg(target_os = "macos")]
pub fn sandbox() -> Arc<dyn Sandbox> {
    Arc::new(uexec_sandbox_macos::SeatbeltSandbox::default())
}
