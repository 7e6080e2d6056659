//! Spawn-to-exit of `/bin/true` in a fresh PTY: unsandboxed, under the Linux sandbox (workspace-write, network
//! off, cwd a git repository; `prepare` included), and under bubblewrap. Interleaved, medians, ratios; plus the
//! hooks with one mechanism left out, to show where the time goes.
//!
//! One more mode runs the sandbox as the product does by default, hiding the default secret locations (over a
//! home with four credential directories and two files). Each mode reports wall time and CPU time (the bench
//! thread plus the child): on a loaded machine the wall time mostly measures waiting for a CPU.
//!
//! `cargo bench -p uexec-sandbox-linux --bench spawn` (`-- --quick` for 60 samples, `SPAWN_BENCH_ITERATIONS=n`
//! for any count; 300 by default). `SPAWN_BENCH_PROFILE=n` (plus `SPAWN_BENCH_PROFILE_HIDDEN=1` for the hidden
//! locations) runs only the sandboxed spawn `n` times, for `perf record`, `perf stat` or `strace -f -T`.
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
