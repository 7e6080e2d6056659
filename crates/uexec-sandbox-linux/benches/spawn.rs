//! Spawn-to-exit of `/bin/true` in a fresh PTY: unsandboxed, under the Linux sandbox (workspace-write, network
//! off, cwd a git repository; `prepare` included), and under bubblewrap. Interleaved, medians, ratios; plus the
//! hooks with one mechanism left out, to show where the time goes.
//!
//! `cargo bench -p uexec-sandbox-linux --bench spawn` (`-- --quick` for 60 samples, `SPAWN_BENCH_ITERATIONS=n`
//! for any count; 300 by default).
//! The spawner is a minimal `fork` + PTY + `execve` kept in `spawn/linux.rs` (the crate cannot depend on
//! uexec-pty).
//!
//! The bench measures the Linux sandbox: it runs on Linux only (`spawn/linux.rs`); elsewhere it does nothing.

#[cfg(target_os = "linux")]
#[path = "spawn/linux.rs"]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
}
