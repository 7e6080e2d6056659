//! `cargo xtask fuzz [--secs N] [--only TARGET]`: every cargo-fuzz target of `fuzz/` for a bounded time, then
//! one line per target (runs, corpus size, peak RSS, result).
//!
//! The targets build on the nightly toolchain (`cargo +nightly fuzz`, installed with `cargo install cargo-fuzz`
//! when missing). libFuzzer reads the committed seeds of `fuzz/corpus/<target>` and writes what it finds to
//! `fuzz/corpus-work/<target>` (ignored by git), so a run leaves the tree clean. A crash leaves its input in
//! `fuzz/artifacts/<target>/`; turn it into a regression test beside the code, fix, and add it to the corpus.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Every target, in the order they run.
pub const TARGETS: [&str; 10] = [
    "tool_args",
    "config",
    "jsonrpc_lines",
    "proxy_head",
    "proxy_body",
    "buffer",
    "shell_split",
    "patch",
    "screen",
    "dns_question",
];

/// The default time per target.
pub const DEFAULT_SECS: u64 = 30;

/// What one target's run gave.
struct Outcome {
    target: &'static str,
    runs: Option<u64>,
    peak_rss_mb: Option<u64>,
    corpus: usize,
    crashed: bool,
}

pub fn run(root: &Path, secs: u64, only: Option<&str>) -> Result<()> {
    let fuzz_dir = root.join("fuzz");
    if let Some(only) = only
        && !TARGETS.contains(&only)
    {
        bail!("unknown fuzz target {only:?}: one of {}", TARGETS.join(", "));
    }
    ensure_cargo_fuzz(root)?;
    let started = Instant::now();
    eprintln!("xtask fuzz: building the targets (cargo +nightly fuzz build)");
    let status =
        nightly_cargo(&fuzz_dir).args(["fuzz", "build", "-O"]).status().context("cargo fuzz build")?;
    if !status.success() {
        bail!("cargo +nightly fuzz build exited with {status}");
    }
    let mut outcomes = Vec::new();
    for target in TARGETS.into_iter().filter(|t| only.is_none_or(|o| o == *t)) {
        outcomes.push(run_target(&fuzz_dir, target, secs)?);
    }
    println!("fuzz results ({secs} s per target, {:.0} s in all):", started.elapsed().as_secs_f64());
    println!("| target | runs | corpus (work + seeds) | peak RSS MiB | result |");
    println!("|---|---|---|---|---|");
    for o in &outcomes {
        let show = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
        let result = if o.crashed { "CRASH (see fuzz/artifacts)" } else { "no crash" };
        println!("| {} | {} | {} | {} | {result} |", o.target, show(o.runs), o.corpus, show(o.peak_rss_mb));
    }
    let crashed: Vec<&str> = outcomes.iter().filter(|o| o.crashed).map(|o| o.target).collect();
    if !crashed.is_empty() {
        bail!("fuzz targets crashed: {}", crashed.join(", "));
    }
    Ok(())
}

fn run_target(fuzz_dir: &Path, target: &'static str, secs: u64) -> Result<Outcome> {
    let work = fuzz_dir.join("corpus-work").join(target);
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let logs = fuzz_dir.join("target").join("fuzz-logs");
    fs::create_dir_all(&logs)?;
    let log_path = logs.join(format!("{target}.log"));
    let log = fs::File::create(&log_path)?;
    eprintln!("xtask fuzz: {target} for {secs} s (log: {})", log_path.display());
    let status = nightly_cargo(fuzz_dir)
        .args(["fuzz", "run", "-O", target])
        .arg(&work)
        .arg(fuzz_dir.join("corpus").join(target))
        .arg("--")
        .arg(format!("-max_total_time={secs}"))
        .args(["-rss_limit_mb=2048", "-max_len=65536", "-print_final_stats=1", "-timeout=10"])
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .with_context(|| format!("cargo fuzz run {target}"))?;
    let text = fs::read_to_string(&log_path).unwrap_or_default();
    let stat = |name: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix(name))
            .filter_map(|rest| rest.trim().parse::<u64>().ok())
            .next_back()
    };
    let corpus = fs::read_dir(&work).map(Iterator::count).unwrap_or(0)
        + fs::read_dir(fuzz_dir.join("corpus").join(target)).map(Iterator::count).unwrap_or(0);
    if !status.success() {
        for line in
            text.lines().filter(|l| l.contains("panicked") || l.contains("ERROR") || l.contains("artifact"))
        {
            eprintln!("  {target}: {line}");
        }
    }
    Ok(Outcome {
        target,
        runs: stat("stat::number_of_executed_units:"),
        peak_rss_mb: stat("stat::peak_rss_mb:"),
        corpus,
        crashed: !status.success(),
    })
}

/// `cargo +nightly` from the rustup proxy, whatever toolchain runs the xtask.
fn nightly_cargo(dir: &Path) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly").current_dir(dir).env_remove("RUSTUP_TOOLCHAIN").env_remove("CARGO");
    cmd
}

fn ensure_cargo_fuzz(root: &Path) -> Result<()> {
    let present = nightly_cargo(root)
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    eprintln!("xtask fuzz: cargo-fuzz is missing; installing it with cargo install --locked cargo-fuzz");
    crate::cargo(root, &["install", "--locked", "cargo-fuzz"])
}
