//! `cargo xtask examples`: builds every example of the workspace and runs each one non-interactively.
//!
//! The examples are found in `cargo metadata` (targets of kind `example` in any workspace member), so an
//! example added to any crate is run without touching this file. Each runs from the workspace root with stdin at
//! `/dev/null`, must exit 0, and is killed (with its process group) and reported when it runs longer than
//! [`TIME_LIMIT`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The longest an example may run: each takes a few seconds; the bound only stops one that hangs.
pub(crate) const TIME_LIMIT: Duration = Duration::from_secs(120);

/// One example target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Example {
    /// The package it belongs to.
    pub(crate) package: String,
    /// The example's name (its binary's name).
    pub(crate) name: String,
}

/// The example targets of the workspace members in `cargo metadata --no-deps` JSON, and the target directory.
pub(crate) fn examples_from_metadata(metadata: &Value) -> Result<(Vec<Example>, PathBuf)> {
    let packages = metadata["packages"].as_array().context("cargo metadata has no `packages` array")?;
    let mut examples = Vec::new();
    for package in packages {
        let name = package["name"].as_str().context("package without a name")?;
        for target in package["targets"].as_array().into_iter().flatten() {
            let is_example = target["kind"].as_array().into_iter().flatten().any(|k| k == "example");
            if is_example {
                let example = target["name"].as_str().context("target without a name")?;
                examples.push(Example { package: name.to_owned(), name: example.to_owned() });
            }
        }
    }
    let target_dir =
        metadata["target_directory"].as_str().context("cargo metadata has no `target_directory`")?;
    Ok((examples, PathBuf::from(target_dir)))
}

pub(crate) fn run(root: &Path) -> Result<()> {
    let metadata = crate::metadata(root)?;
    let (examples, target_dir) = examples_from_metadata(&metadata)?;
    if examples.is_empty() {
        bail!("cargo metadata lists no example: the examples step would test nothing");
    }
    crate::cargo(root, &["build", "--workspace", "--examples"])?;
    let mut failed = Vec::new();
    for example in &examples {
        let binary = target_dir.join("debug").join("examples").join(&example.name);
        eprintln!("--> example {} ({})", example.name, example.package);
        let started = Instant::now();
        let mut command = Command::new(&binary);
        command.current_dir(root);
        match run_bounded(command, TIME_LIMIT) {
            Ok(()) => {
                eprintln!("<-- example {} passed in {:.1}s", example.name, started.elapsed().as_secs_f64())
            }
            Err(err) => {
                eprintln!("<-- example {} FAILED: {err:#}", example.name);
                failed.push(example.name.clone());
            }
        }
    }
    if !failed.is_empty() {
        bail!("{} of {} examples failed: {}", failed.len(), examples.len(), failed.join(", "));
    }
    eprintln!("examples: all {} ran and exited 0", examples.len());
    Ok(())
}

/// Runs `command` with stdin at `/dev/null` in its own process group; fails unless it exits 0 within `limit`
/// (past it, the group is killed).
fn run_bounded(mut command: Command, limit: Duration) -> Result<()> {
    use std::os::unix::process::CommandExt;

    let program = command.get_program().to_owned();
    let mut child = command
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .with_context(|| format!("could not start {}", program.to_string_lossy()))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().context("waiting for the example")? {
            if status.success() {
                return Ok(());
            }
            bail!("exited with {status}");
        }
        if started.elapsed() > limit {
            // The example leads its own group: kill the group, so that nothing it started outlives it.
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.kill();
            let _ = child.wait();
            bail!("still running after {}s: killed", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn examples_are_read_from_every_member_and_nothing_else() {
        let metadata = serde_json::json!({
            "target_directory": "/w/target",
            "packages": [
                {"name": "a", "targets": [{"kind": ["lib"], "name": "a"}, {"kind": ["example"], "name": "one"}]},
                {"name": "b", "targets": [{"kind": ["test"], "name": "t"}, {"kind": ["example"], "name": "two"}]},
                {"name": "c", "targets": [{"kind": ["bin"], "name": "c"}]},
            ],
        });
        let (examples, target) = examples_from_metadata(&metadata).unwrap();
        assert_eq!(target, PathBuf::from("/w/target"));
        assert_eq!(
            examples,
            vec![
                Example { package: "a".into(), name: "one".into() },
                Example { package: "b".into(), name: "two".into() },
            ]
        );
    }

    #[test]
    fn the_real_workspace_has_the_examples_the_docs_name() {
        let metadata = crate::metadata(&crate::workspace_root().unwrap()).unwrap();
        let (examples, _) = examples_from_metadata(&metadata).unwrap();
        let names: Vec<&str> = examples.iter().map(|e| e.name.as_str()).collect();
        for name in ["sandboxed_command", "engine_approver", "agent_loop"] {
            assert!(names.contains(&name), "{name} is missing from {names:?}");
        }
    }

    #[test]
    fn a_failing_or_hanging_program_fails_and_a_passing_one_passes() {
        assert!(run_bounded(Command::new("true"), Duration::from_secs(30)).is_ok());
        let err = run_bounded(Command::new("false"), Duration::from_secs(30)).unwrap_err();
        assert!(err.to_string().contains("exited with"), "{err}");
        let mut sleeper = Command::new("sleep");
        sleeper.arg("30");
        let err = run_bounded(sleeper, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("killed"), "{err}");
    }
}
