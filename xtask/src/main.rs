//! Project automation, one binary with subcommands: `cargo xtask ci`, `cargo xtask layering`,
//! `cargo xtask tidy`, `cargo xtask deploy`, `cargo xtask environments`, `cargo xtask examples`, `cargo xtask package`, `cargo xtask bench`,
//! `cargo xtask fuzz`, `cargo xtask soak`, `cargo xtask soak-fleet`.
//!
//! `ci` is what `.ci/run` calls and what the README names as the test command: formatting, clippy with
//! warnings denied (for this machine, for both macOS targets, and for Windows the domain, the ports and the
//! engine, whose standard libraries it installs with rustup when missing; linking needs the platform's SDK,
//! checking does not), cargo-deny, the layering and tidy
//! checks, the Kubernetes manifests' schema check, every test (nextest plus doctests; the environment-aware
//! tests again as an ordinary user and in a container-like environment), every example of the
//! workspace run to exit 0, `cargo package` of the publishable crates, and a check that no process of
//! uexec's (a namespace's init, a watchdog, a server) was left orphaned by the suite.

// A command-line tool: printing is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod deploy;
mod environments;
mod examples;
mod fuzz;
mod layering;
mod leftovers;
mod modules;
mod package;
mod soak;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci          setup (xtask/setup.sh: what the suite needs, installed when missing), fmt --check, clippy -D warnings (here, for macOS, and for Windows: domain, ports, plan, engine),
              cargo deny, layering, tidy, deploy,
              nextest, environments, doctests, examples, package, and no process of uexec's left behind
  layering    fail when a crate depends on a layer it must not (reads `cargo metadata`), or when the
              modules of a crate form a cycle
  tidy        fail when a source file lacks its `//!` line, the tree holds a stub, a poisoned lock is skipped,
              `$TMPDIR` is read or a script split outside its one place, a comment names an issue, or a
              claim of ARCHITECTURE.md or a crate README that it holds (unsafe, environment reads, the
              engine's files, xtask commands, dependencies) no longer matches the tree
  deploy      validate deploy/kubernetes/*.yaml against the Kubernetes API schemas (kubernetes-validate from PyPI)
  environments  the environment-aware tests (crates/uexec/tests/environments.rs) as an ordinary user (uexec-ci,
              created when missing) and in a container-like environment (container-sim: no new namespaces, no
              mounts, no CAP_SYS_ADMIN), as root and as that user; the root run is nextest's
  examples    build every example of the workspace and run each (stdin /dev/null, must exit 0 in 120 s)
  package     cargo package (verified) of every publishable crate, together
  soak-fleet  16 uexec servers on loopback ports, 64 concurrent clients with interactive scenarios, isolation and
              memory (RSS) bounds checked (release build; --servers N, --clients N, --rounds N go to
              crates/uexec/examples/soak_fleet.rs)
  bench       run every benchmark, then print each target (met / NOT met) and the peer table
              (--quick for a short run; --only pty|sandbox|engine|login|run|clients for one of them)
  soak        soak and load of the engine and the MCP server on the release build, each figure against its
              bound (--sessions N, default 10000; --secs N idle window, default 60; --streamers N, default 64;
              --stream-mib N, default 16; --only engine|mcp|load)
  fuzz        run every cargo-fuzz target of fuzz/ on nightly for a bounded time (--secs N per target,
              default 30; --only TARGET)
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        print_usage();
        bail!("missing command")
    };
    if matches!(command.as_str(), "help" | "--help" | "-h") {
        print_usage();
        return Ok(());
    }
    if !commands().contains(&command.as_str()) {
        print_usage();
        bail!("unknown command `{command}`");
    }
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        print!("{}", command_help(command));
        return Ok(());
    }
    let root = workspace_root()?;
    let no_flags = || match rest.first() {
        Some(flag) => bail!("`cargo xtask {command}` takes no argument (got `{flag}`; see --help)"),
        None => Ok(()),
    };
    let value = |flag: &str| -> Result<Option<&str>> {
        match rest.iter().position(|a| a == flag) {
            Some(i) => match rest.get(i + 1) {
                Some(v) if !v.starts_with("--") => Ok(Some(v.as_str())),
                _ => bail!("{flag} needs a value (see `cargo xtask {command} --help`)"),
            },
            None => Ok(None),
        }
    };
    match command.as_str() {
        "ci" => no_flags().and_then(|()| ci(&root)),
        "layering" => no_flags().and_then(|()| layering::run(&root)),
        "tidy" => no_flags().and_then(|()| tidy::run(&root)),
        "examples" => no_flags().and_then(|()| examples::run(&root)),
        "package" => no_flags().and_then(|()| package::run(&root)),
        "deploy" => no_flags().and_then(|()| deploy::run(&root)),
        "environments" => no_flags().and_then(|()| environments::run(&root)),
        "soak-fleet" => {
            known_flags(command, rest, &[], &["--servers", "--clients", "--rounds"])?;
            soak_fleet(&root, rest)
        }
        "bench" => {
            let only = value("--only")?;
            known_flags(command, rest, &["--quick"], &["--only"])?;
            bench::run(&root, rest.iter().any(|a| a == "--quick"), only)
        }
        "soak" => {
            known_flags(
                command,
                rest,
                &[],
                &["--sessions", "--secs", "--streamers", "--stream-mib", "--only"],
            )?;
            soak::run(&root, rest)
        }
        "fuzz" => {
            known_flags(command, rest, &[], &["--secs", "--only"])?;
            let secs = match value("--secs")? {
                Some(s) => s.parse().with_context(|| format!("--secs {s:?} is not a number of seconds"))?,
                None => fuzz::DEFAULT_SECS,
            };
            fuzz::run(&root, secs, value("--only")?)
        }
        other => bail!("`{other}` is listed but not dispatched: add it to xtask/src/main.rs"),
    }
}

/// Fails on an argument that is none of `switches` and `valued` (each followed by its value).
fn known_flags(command: &str, rest: &[String], switches: &[&str], valued: &[&str]) -> Result<()> {
    let mut args = rest.iter();
    while let Some(arg) = args.next() {
        if valued.contains(&arg.as_str()) {
            if args.next().is_none_or(|v| v.starts_with("--")) {
                bail!("{arg} needs a value (see `cargo xtask {command} --help`)");
            }
        } else if !switches.contains(&arg.as_str()) {
            bail!("`cargo xtask {command}` does not take `{arg}` (see --help)");
        }
    }
    Ok(())
}

/// The commands [`USAGE`] lists, in its order.
fn commands() -> Vec<&'static str> {
    USAGE
        .lines()
        .skip_while(|line| *line != "commands:")
        .filter_map(|line| line.strip_prefix("  ").filter(|l| !l.starts_with(' ')))
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

/// `cargo xtask <command> --help`: the command's entry of [`USAGE`].
fn command_help(command: &str) -> String {
    let mut out = format!("usage: cargo xtask {command} [flags]\n\n");
    let mut inside = false;
    for line in USAGE.lines().skip_while(|line| *line != "commands:") {
        let starts = line.strip_prefix("  ").is_some_and(|l| !l.starts_with(' '));
        if starts {
            inside = line.split_whitespace().next() == Some(command);
        }
        if inside {
            out.push_str(line.trim_start_matches(' ').strip_prefix(command).unwrap_or(line).trim_start());
            out.push('\n');
        }
    }
    out
}

fn print_usage() {
    print!("{USAGE}");
}

fn workspace_root() -> Result<PathBuf> {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().map(Path::to_path_buf).context("xtask has no parent directory")
}

fn ci(root: &Path) -> Result<()> {
    let started = Instant::now();
    // What the suite needs on a fresh machine, installed only when missing (a no-op once it is there).
    step("setup", || {
        let status = Command::new("bash")
            .arg(root.join("xtask/setup.sh"))
            .current_dir(root)
            .status()
            .context("could not run bash xtask/setup.sh")?;
        if !status.success() {
            bail!("xtask/setup.sh failed ({status})");
        }
        Ok(())
    })?;
    let orphans_before = leftovers::scan();
    step("fmt", || cargo(root, &["fmt", "--all", "--", "--check"]))?;
    step("clippy", || {
        cargo(root, &["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"])
    })?;
    step("clippy (macOS targets)", || {
        ensure_rust_targets(root, &MACOS_TARGETS)?;
        let mut args = vec!["clippy"];
        for target in MACOS_TARGETS {
            args.extend(["--target", target]);
        }
        args.extend(["--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"]);
        cargo(root, &args)
    })?;
    step("clippy (Windows: domain, ports, plan, engine)", || {
        ensure_rust_targets(root, &[WINDOWS_TARGET])?;
        let mut args = vec!["clippy", "--target", WINDOWS_TARGET];
        for krate in PORTABLE_CRATES {
            args.extend(["-p", krate]);
        }
        args.extend(["--all-features", "--", "-D", "warnings"]);
        cargo(root, &args)
    })?;
    step("deny", || {
        ensure_cargo_tool(root, "cargo-deny", &["deny", "--version"])?;
        // Advisories need GitHub, which CI cannot reach: see deny.toml.
        cargo(root, &["deny", "--log-level", "error", "check", "bans", "licenses", "sources"])
    })?;
    step("layering", || layering::run(root))?;
    step("tidy", || tidy::run(root))?;
    step("deploy", || deploy::run(root))?;
    step("nextest", || cargo(root, &["nextest", "run", "--workspace", "--all-features", "--no-fail-fast"]))?;
    step("environments (ordinary user, container)", || environments::run(root))?;
    step("doctests", || cargo(root, &["test", "--workspace", "--all-features", "--doc"]))?;
    step("examples", || examples::run(root))?;
    step("package", || package::run(root))?;
    step("no process left behind", || leftovers::check(&orphans_before))?;
    eprintln!("xtask ci: all steps passed in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `cargo metadata --no-deps` of the workspace, as JSON.
fn metadata(root: &Path) -> Result<serde_json::Value> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root)
        .output()
        .context("could not run cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).context("cargo metadata printed no JSON")
}

/// The Apple targets the workspace must type-check for (the binary is built there with Apple's SDK).
const MACOS_TARGETS: [&str; 2] = ["aarch64-apple-darwin", "x86_64-apple-darwin"];

/// A target outside the Unix family: the pure crates and the engine must type-check there too, so nothing
/// OS-specific enters them unnoticed (their unit tests build fixtures with Unix calls and are not checked).
const WINDOWS_TARGET: &str = "x86_64-pc-windows-msvc";

/// The crates that hold no OS-specific code beyond a `cfg`-gated edge (`uexec-engine`'s `os.rs`, `uexec-plan`'s
/// real host, Unix only): a Windows sandbox would render the same plan.
const PORTABLE_CRATES: [&str; 4] = ["uexec-domain", "uexec-ports", "uexec-plan", "uexec-engine"];

/// Installs the standard library of each of `targets` that `rustup target list --installed` does not list
/// (for the toolchain `rust-toolchain.toml` pins, since rustup runs in the workspace root).
fn ensure_rust_targets(root: &Path, targets: &[&str]) -> Result<()> {
    let listed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(root)
        .output()
        .context("could not run rustup target list --installed")?;
    if !listed.status.success() {
        bail!("rustup target list --installed exited with {}", listed.status);
    }
    let installed = String::from_utf8_lossy(&listed.stdout);
    let missing: Vec<&str> = targets
        .iter()
        .copied()
        .filter(|target| !installed.lines().any(|line| line.trim() == *target))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing the standard library for {}", missing.join(", "));
    let status = Command::new("rustup")
        .args(["target", "add"])
        .args(&missing)
        .current_dir(root)
        .status()
        .context("could not run rustup target add")?;
    if !status.success() {
        bail!("rustup target add {} exited with {status}", missing.join(" "));
    }
    Ok(())
}

/// Build uexec and the fleet driver in release mode, then run the driver against that uexec.
fn soak_fleet(root: &Path, extra: &[String]) -> Result<()> {
    cargo(
        root,
        &["build", "--release", "--locked", "-p", "uexec", "--bin", "uexec", "--example", "soak_fleet"],
    )?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let target = if target.is_absolute() { target } else { root.join(target) };
    let status = Command::new(target.join("release/examples/soak_fleet"))
        .arg("--uexec")
        .arg(target.join("release/uexec"))
        .args(extra)
        .current_dir(root)
        .status()
        .context("could not run the fleet driver")?;
    if !status.success() {
        bail!("the fleet simulation failed ({status})");
    }
    Ok(())
}

fn step<T>(name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    eprintln!("==> xtask: {name}");
    let result = f().with_context(|| format!("step `{name}` failed"));
    eprintln!("<== xtask: {name} ({:.1}s)", started.elapsed().as_secs_f64());
    result
}

fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .current_dir(root)
        .status()
        .with_context(|| format!("could not run cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} exited with {status}", args.join(" "));
    }
    Ok(())
}

/// Installs a cargo tool with `cargo install --locked` when `cargo <probe>` does not run.
fn ensure_cargo_tool(root: &Path, krate: &str, probe: &[&str]) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let present = Command::new(&cargo)
        .args(probe)
        .current_dir(root)
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false);
    if present {
        return Ok(());
    }
    eprintln!("xtask: {krate} is missing; installing it with cargo install --locked");
    crate::cargo(root, &["install", "--locked", krate])
}
