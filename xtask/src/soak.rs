//! `cargo xtask soak [--sessions N] [--secs N] [--streamers N] [--stream-mib N] [--only engine|mcp|load]`:
//! the soak and load measurements of RELIABILITY.md, on the release build.
//!
//! Builds `uexec` and the `soak` binary of the `tests` package in release mode, then runs it
//! (`tests/soak/main.rs`): N short sessions through the engine directly and through `uexec mcp` over stdio,
//! then streaming and idle sessions over MCP. The driver prints one row per figure with its bound and exits 1
//! when a bound did not hold; this command fails then. The defaults are the full sizes (10,000 sessions, 64
//! streamers of 16 MiB, a 60 s idle window); the machine it runs on should be otherwise quiet.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

pub fn run(root: &Path, passthrough: &[String]) -> Result<()> {
    crate::cargo(root, &["build", "--release", "-p", "uexec", "--bin", "uexec"])?;
    crate::cargo(root, &["build", "--release", "-p", "tests", "--bin", "soak"])?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), Into::into);
    let release = Path::new(&target).join("release");
    let uexec = release.join("uexec");
    let soak = release.join("soak");
    // Before any shell starts: a stale pyenv lock makes every `bash -l` wait 60 s.
    if let Some(home) = std::env::var_os("HOME") {
        let _ = std::fs::remove_file(Path::new(&home).join(".pyenv/shims/.pyenv-shim"));
    }
    let status = Command::new(&soak)
        .arg("--uexec")
        .arg(&uexec)
        .args(passthrough)
        .current_dir(root)
        .status()
        .with_context(|| format!("running {}", soak.display()))?;
    if !status.success() {
        bail!("soak: a bound did not hold (or the run failed): {status}");
    }
    Ok(())
}
