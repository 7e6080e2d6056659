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
    let mut args = vec!["package"];
    for name in &crates {
        args.extend(["-p", name.as_str()]);
    }
    crate::cargo(root, &args)?;
    eprintln!("package: {} crates packaged and verified: {}", crates.len(), crates.join(", "));
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
        for library in
            ["uexec-domain", "uexec-ports", "uexec-sandbox-linux", "uexec-sandbox-macos", "uexec-engine"]
        {
            assert!(names.iter().any(|n| n == library), "{library} is missing from {names:?}");
        }
        for private in ["uexec", "tests", "uexec-examples", "xtask"] {
            assert!(!names.iter().any(|n| n == private), "{private} must not be publishable: {names:?}");
        }
    }
}
