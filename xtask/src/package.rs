//! `cargo xtask package`: `cargo package`, verification included, for every publishable crate of the workspace,
//! together (cargo resolves their dependencies on each other through a local overlay of the packaged crates).
//!
//! Publishable means `cargo metadata` reports `publish` as `null` (any registry) or a non-empty list: the
//! library crates. The app, `tests`, `uexec-examples` and `xtask` set `publish = false` and are left out.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The names of the publishable workspace members in `cargo metadata --no-deps` JSON, in metadata order.
pub(crate) fn publishable(metadata: &Value) -> Result<Vec<String>> {
    let packages = metadata["packages"].as_array().context("cargo metadata has no `packages` array")?;
    let mut names = Vec::new();
    for package in packages {
        let name = package["name"].as_str().context("package without a name")?;
        let publish = &package["publish"];
        if publish.is_null() || publish.as_array().is_some_and(|registries| !registries.is_empty()) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

pub(crate) fn run(root: &Path) -> Result<()> {
    let metadata = crate::metadata(root)?;
    let crates = publishable(&metadata)?;
    if crates.is_empty() {
        bail!("no workspace crate is publishable: the package step would check nothing");
    }
    forget_unpacked_copies(&metadata, &crates)?;
    let target = package_target_dir(root)?;
    forget_built_copies(&target, &crates)?;
    let target = target.to_str().context("the target directory is not UTF-8")?;
    let mut args = vec!["package", "--target-dir", target];
    for name in &crates {
        args.extend(["-p", name.as_str()]);
    }
    crate::cargo(root, &args)?;
    eprintln!("package: {} crates packaged and verified: {}", crates.len(), crates.join(", "));
    Ok(())
}

/// Removes the copies of our crates that an earlier `cargo package` unpacked from its local overlay registry.
///
/// Cargo unpacks each packaged crate into `$CARGO_HOME/registry/src/-<hash of the overlay's path>/NAME-VERSION`
/// and, finding that directory on a later run, reuses it without comparing contents. Our versions stay at 0.0.0
/// while the code changes, so a second run from the same target directory (CI's fixed target directory, a
/// developer's checkout) would verify a crate against a stale copy of its dependency. Overlay registries are the
/// `src` subdirectories whose name starts with `-` (a registry without a name); crates.io's is `index.crates.io-*`
/// and is never touched.
fn forget_unpacked_copies(metadata: &Value, crates: &[String]) -> Result<()> {
    let Some(home) = cargo_home() else { return Ok(()) };
    let src = home.join("registry").join("src");
    let Ok(registries) = std::fs::read_dir(&src) else { return Ok(()) };
    let names = unpacked_names(metadata, crates)?;
    for registry in registries {
        let registry = registry.with_context(|| format!("could not list {}", src.display()))?;
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for name in &names {
            let copy = registry.path().join(name);
            if copy.exists() {
                std::fs::remove_dir_all(&copy)
                    .with_context(|| format!("could not remove the stale copy {}", copy.display()))?;
            }
        }
    }
    Ok(())
}

/// The target directory of the package step: `package-verify` inside the workspace's target directory, used for
/// nothing else, so every `uexec*` artifact in it was built from the overlay registry.
fn package_target_dir(root: &Path) -> Result<std::path::PathBuf> {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => root.join("target"),
    };
    Ok(target.join("package-verify"))
}

/// Removes what an earlier verification built from our crates in `target`.
///
/// Cargo treats a registry crate as immutable, so a build of `uexec-domain 0.0.0` from the overlay registry
/// counts as fresh whatever the new tarball holds; external dependencies stay built.
fn forget_built_copies(target: &Path, crates: &[String]) -> Result<()> {
    let stems: Vec<String> = crates.iter().map(|c| c.replace('-', "_")).collect();
    for profile in ["debug", "release"] {
        for (dir, dashed) in [(".fingerprint", true), ("build", true), ("deps", false)] {
            let dir = target.join(profile).join(dir);
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries {
                let entry = entry.with_context(|| format!("could not list {}", dir.display()))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let ours = if dashed {
                    crates.iter().any(|c| name.starts_with(&format!("{c}-")))
                } else {
                    stems
                        .iter()
                        .any(|s| name.starts_with(&format!("lib{s}-")) || name.starts_with(&format!("{s}-")))
                };
                if ours {
                    let path = entry.path();
                    let removed = if path.is_dir() {
                        std::fs::remove_dir_all(&path)
                    } else {
                        std::fs::remove_file(&path)
                    };
                    removed.with_context(|| format!("could not remove {}", path.display()))?;
                }
            }
        }
    }
    Ok(())
}

/// `NAME-VERSION` of every crate in `crates`, as cargo names its unpacked directory.
fn unpacked_names(metadata: &Value, crates: &[String]) -> Result<Vec<String>> {
    let packages = metadata["packages"].as_array().context("cargo metadata has no `packages` array")?;
    let mut names = Vec::new();
    for package in packages {
        let name = package["name"].as_str().context("package without a name")?;
        if crates.iter().any(|c| c == name) {
            let version = package["version"].as_str().context("package without a version")?;
            names.push(format!("{name}-{version}"));
        }
    }
    Ok(names)
}

/// `$CARGO_HOME`, else `$HOME/.cargo`.
fn cargo_home() -> Option<std::path::PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn unpacked_copies_are_named_name_dash_version_and_only_for_the_packaged_crates() {
        let metadata = serde_json::json!({"packages": [
            {"name": "lib", "version": "0.0.0", "publish": null},
            {"name": "app", "version": "1.2.3", "publish": []},
        ]});
        assert_eq!(unpacked_names(&metadata, &["lib".to_owned()]).unwrap(), ["lib-0.0.0"]);
    }

    #[test]
    fn publish_false_is_left_out_and_the_rest_is_kept() {
        let metadata = serde_json::json!({"packages": [
            {"name": "lib", "publish": null},
            {"name": "app", "publish": []},
            {"name": "mirror", "publish": ["my-registry"]},
        ]});
        assert_eq!(publishable(&metadata).unwrap(), ["lib", "mirror"]);
    }

    #[test]
    fn the_library_crates_are_publishable_and_the_app_tests_examples_and_xtask_are_not() {
        let metadata = crate::metadata(&crate::workspace_root().unwrap()).unwrap();
        let names = publishable(&metadata).unwrap();
        for library in [
            "uexec-domain",
            "uexec-ports",
            "uexec-plan",
            "uexec-sandbox-linux",
            "uexec-sandbox-macos",
            "uexec-engine",
        ] {
            assert!(names.iter().any(|n| n == library), "{library} is missing from {names:?}");
        }
        for private in ["uexec", "tests", "uexec-examples", "xtask"] {
            assert!(!names.iter().any(|n| n == private), "{private} must not be publishable: {names:?}");
        }
    }
}
