//! `cargo xtask environments`: the environment-aware tests (`crates/uexec/tests/environments.rs`) where people
//! run uexec, not only as root: as an ordinary user with user namespaces (the user `uexec-ci`, created when
//! missing; with it the end-to-end suites of [`USER_SUITES`]) and in a container-like environment where new namespaces and mounts fail as under Docker's default
//! seccomp profile (`container-sim`, the `tests` package's binary, as root without `CAP_SYS_ADMIN` and as the
//! ordinary user). The root run is the suite's own (nextest runs every test as root on these machines); a
//! machine where xtask is not root runs the user and container runs as the current user, and says that the root
//! run was not made here.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The ordinary user the tests run as.
const USER: &str = "uexec-ci";

/// The test binaries that run in every environment.
const SUITES: [(&str, &str); 1] = [("uexec", "environments")];

/// The end-to-end and real-process suites that also run as the ordinary user, unchanged: what they check holds
/// for a person without privileges as it does for root. (In the container they would meet the sandbox's refusal
/// to run without `--allow-degraded-sandbox`, which they do not pass; `environments` covers the container.)
/// Suites left out need root for their own set-up, not for what they check (a private mount namespace, a tmpfs,
/// a cgroup, another user's files), or check what only root gets (commands of one plan sharing one mount
/// namespace): `planted`, `faults`, `attach`, `secrets_mcp`, `network_mcp`, `known_safe`, `shared_sandbox_mcp`,
/// `cargo_cache`, uexec-pty's `session`, `namespace`, `namespace_here`, `reaping`, `host_death`, and the
/// sandbox crate's `sandbox`.
const USER_SUITES: [(&str, &str); 18] = [
    ("uexec", "apply_patch"),
    ("uexec", "bad_input"),
    ("uexec", "bounds"),
    ("uexec", "known_safe_mcp"),
    ("uexec", "leftovers"),
    ("uexec", "login_snapshot"),
    ("uexec", "mcp_http"),
    ("uexec", "mcp_protocol"),
    ("uexec", "mcp_server"),
    ("uexec", "package_caches"),
    ("uexec", "refusals_mcp"),
    ("uexec", "run_cli"),
    ("uexec", "trust_mcp"),
    ("tests", "engine_real"),
    ("tests", "watch_real"),
    ("uexec-pty", "fd_leak"),
    ("uexec-pty", "input_state"),
    ("uexec-pty", "subreaper"),
];

pub(crate) fn run(root: &Path) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(&cargo)
        .args(["build", "-p", "uexec", "--bin", "uexec", "-p", "tests", "--bin", "container-sim"])
        .current_dir(root)
        .status()
        .context("could not run cargo build")?;
    if !status.success() {
        bail!("cargo build of uexec and container-sim failed ({status})");
    }
    let target = target_dir(root)?;
    let sim = target.join("debug/container-sim");
    let binaries =
        SUITES.iter().map(|(package, test)| test_binary(root, package, test)).collect::<Result<Vec<_>>>()?;
    let user_binaries = USER_SUITES
        .iter()
        .map(|(package, test)| test_binary(root, package, test))
        .collect::<Result<Vec<_>>>()?;

    let is_root = effective_uid() == 0;
    let user = if is_root {
        ensure_user()?;
        for binary in binaries.iter().chain(&user_binaries) {
            make_reachable(binary)?;
        }
        make_reachable(&target.join("debug/uexec"))?;
        make_reachable(&sim)?;
        Some(USER)
    } else {
        eprintln!(
            "xtask environments: not root here, so the root run is not made; user and container run as you"
        );
        None
    };
    for binary in &binaries {
        run_in(binary, "user", user, None)?;
        run_in(binary, "container", None, Some(&sim))?;
        if user.is_some() {
            run_in(binary, "container", user, Some(&sim))?;
        }
    }
    // Not as root here: nextest ran them as root already.
    if user.is_some() {
        for binary in &user_binaries {
            run_in(binary, "user", user, None)?;
        }
    }
    Ok(())
}

/// Run `binary` (a libtest binary) with `UEXEC_TEST_ENVIRONMENT=environment`, as `user` (else as this process's
/// user) and under `sim` when given.
fn run_in(binary: &Path, environment: &str, user: Option<&str>, sim: Option<&Path>) -> Result<()> {
    let mut command = match user {
        Some(user) => {
            let mut command = Command::new("setpriv");
            command.args(["--reuid", user, "--regid", user, "--init-groups", "--"]);
            command.arg("env").arg("-i");
            command
                .arg(format!("HOME=/home/{user}"))
                .arg(format!("USER={user}"))
                .arg(format!("LOGNAME={user}"));
            command.arg("PATH=/usr/local/bin:/usr/bin:/bin").arg("LANG=C.UTF-8");
            command
        }
        None => {
            let mut command = Command::new("env");
            command.arg("-u").arg("RUST_LOG");
            command
        }
    };
    command.arg(format!("UEXEC_TEST_ENVIRONMENT={environment}"));
    if let Some(sim) = sim {
        command.arg(sim);
    }
    command.arg(binary).arg("--test-threads=2");
    let who = user.unwrap_or("this user");
    eprintln!("xtask environments: {} as {who} in the {environment} environment", binary.display());
    let status = command.status().with_context(|| format!("could not run {}", binary.display()))?;
    if !status.success() {
        bail!("{} failed as {who} in the {environment} environment ({status})", binary.display());
    }
    Ok(())
}

/// The path of the test binary `test` of `package`, built now if it is not.
fn test_binary(root: &Path, package: &str, test: &str) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["test", "-p", package, "--test", test, "--no-run", "--message-format=json"])
        .current_dir(root)
        .output()
        .context("could not run cargo test --no-run")?;
    if !output.status.success() {
        bail!("building the test {test} of {package} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if message["reason"] == "compiler-artifact"
            && message["target"]["name"] == test
            && let Some(executable) = message["executable"].as_str()
        {
            return Ok(PathBuf::from(executable));
        }
    }
    bail!("cargo named no executable for the test {test} of {package}")
}

/// The target directory (`CARGO_TARGET_DIR`, else `target` in the workspace).
fn target_dir(root: &Path) -> Result<PathBuf> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    Ok(if target.is_absolute() { target } else { root.join(target) })
}

/// Create the ordinary user unless it exists.
fn ensure_user() -> Result<()> {
    let exists = Command::new("id").arg(USER).output().is_ok_and(|o| o.status.success());
    if exists {
        return Ok(());
    }
    let status = Command::new("useradd")
        .args(["--create-home", "--shell", "/bin/bash", USER])
        .status()
        .context("could not run useradd")?;
    if !status.success() {
        bail!("useradd {USER} failed ({status})");
    }
    Ok(())
}

/// Let other users reach `path`: every directory above it gets the search bit for others where it lacks it
/// (nothing is made readable or writable), and `path` itself is readable and executable by others.
fn make_reachable(path: &Path) -> Result<()> {
    let mut dirs: Vec<&Path> = path.ancestors().skip(1).collect();
    dirs.reverse();
    for dir in dirs {
        let mode =
            std::fs::metadata(dir).with_context(|| format!("stat {}", dir.display()))?.permissions().mode();
        if mode & 0o001 == 0 {
            eprintln!(
                "xtask environments: adding o+x to {} so that {USER} can reach the test binaries",
                dir.display()
            );
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o001))
                .with_context(|| format!("chmod o+x {}", dir.display()))?;
        }
    }
    let mode =
        std::fs::metadata(path).with_context(|| format!("stat {}", path.display()))?.permissions().mode();
    if mode & 0o005 != 0o005 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | 0o005))
            .with_context(|| format!("chmod o+rx {}", path.display()))?;
    }
    Ok(())
}

/// This process's effective user id, from `/proc/self/status` (xtask keeps its dependencies few).
fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).and_then(|euid| euid.parse().ok()))
        })
        .unwrap_or(u32::MAX)
}
