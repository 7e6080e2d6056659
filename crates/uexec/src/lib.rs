//! The `uexec` app as a library: the composition root's parts (flags, the config file, settings, the MCP server
//! over stdio and Streamable HTTP, `uexec run`, the control socket, the proxy, the reports), which the binary
//! (`main.rs`) starts and the fuzz targets (`fuzz/`) reach. It alone reads flags, config files and the
//! environment and picks the adapters for this platform; the libraries it composes stay typed.

pub mod apply_patch;
pub mod audit;
pub mod cli;
pub mod compose;
pub mod config;
pub mod control;
pub mod fdlimit;
#[cfg(any(test, fuzzing))]
pub mod fuzz_bodies;
pub mod mcp;
pub mod metrics;
pub mod platform;
pub mod proxy;
pub mod report;
pub mod run;
pub mod settings;
pub mod tap;
pub mod terminal;

use anyhow::{Context, Result};

/// Exit code when uexec itself failed before running anything (as `env`, `timeout` and `docker run` do).
pub const EXIT_NOTHING_RAN: u8 = 125;

/// Print an error chain to stderr.
pub fn report_error(e: &anyhow::Error) {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("uexec: error: {e:#}");
    }
}

/// A multi-threaded runtime (the MCP server serves calls in parallel).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
