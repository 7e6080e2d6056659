//! Spawn-to-exit of `/bin/true` in a fresh PTY: unsandboxed, under the Linux sandbox (workspace-write, network
//! off, cwd a git repository; `prepare` included), and under bubblewrap. Interleaved, medians, ratios; plus the
//! hooks with one mechanism left out, to show where the time goes.
//!
//! More modes run the sandbox hiding the default secret locations (over a home with four credential
//! directories and two files), and as a server-wide sandbox (commands in a PID namespace shared by the server's
//! sandboxed commands, each command of a plan seen before entering the mount namespace built for it), with and
//! without the hidden locations: the last is what `uexec mcp` runs by default. Each mode reports wall time and
//! CPU time (the bench thread plus the child): on a loaded machine the wall time mostly measures waiting for a
//! CPU.
//!
//! `cargo bench -p uexec-sandbox-linux --bench spawn` (`-- --quick` for 60 samples, `SPAWN_BENCH_ITERATIONS=n`
//! for any count; 300 by default). `SPAWN_BENCH_PROFILE=n` (plus `SPAWN_BENCH_PROFILE_HIDDEN=1` for the hidden
//! locations, `SPAWN_BENCH_PROFILE_SHARED=1` for the server-wide sandbox) runs only the sandboxed spawn `n`
//! times, for `perf record`, `perf stat` or `strace -f -T`.
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
