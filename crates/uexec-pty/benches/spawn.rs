//! Spawn latency and PTY throughput of uexec-pty, side by side with the limits (minimal raw loops: a
//! fork-based PTY spawn, a glibc `posix_spawn` PTY spawn, a blocking read loop) and with portable-pty; the
//! spawn part also times uexec-pty's portable core (`PtySpawner::portable()`, what macOS runs).
//!
//! Run with `cargo bench -p uexec-pty --bench spawn`; add `-- --quick` (or set `UEXEC_BENCH_QUICK=1`) for a
//! short run. Every variant runs in the same process, interleaved round by round (the order rotates), and
//! the table reports medians. The process is made realistically large first (a few hundred MB of touched
//! memory and several threads), because that is what makes fork-based spawning slow.
//!
//! The bench measures the Linux fast path against raw fork/posix_spawn baselines written with Linux-only
//! libc calls: it runs on Linux only (`spawn/linux.rs`); elsewhere it does nothing.

#[cfg(target_os = "linux")]
#[path = "spawn/linux.rs"]
mod linux;

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
}
