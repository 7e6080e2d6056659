//! `cargo xtask deploy`: validate the Kubernetes manifests under `deploy/kubernetes` against the API schemas of
//! the oldest Kubernetes version they need (1.30: `appArmorProfile`, user namespaces) and of the newest the
//! validator knows, rejecting unknown fields (`--strict`: a misspelt `hostUsers` would otherwise be dropped
//! silently by the API server, and the pod would run without its user namespace).
//!
//! The validator is `kubernetes-validate` from PyPI, installed once into `target/k8s-venv` (it bundles the
//! schemas: no network is needed after the install).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The validator, pinned.
const REQUIREMENT: &str = "kubernetes-validate==1.37.0";

/// The Kubernetes versions validated against.
const VERSIONS: [&str; 2] = ["1.30", "1.37"];

pub fn run(root: &Path) -> Result<()> {
    let manifests = manifests(root)?;
    let validator = ensure_validator(root)?;
    for version in VERSIONS {
        let status = Command::new(&validator)
            .args(["--strict", "--quiet", "--kubernetes-version", version])
            .args(&manifests)
            .status()
            .with_context(|| format!("could not run {}", validator.display()))?;
        if !status.success() {
            bail!("deploy/kubernetes does not validate against Kubernetes {version} (see above)");
        }
    }
    eprintln!("xtask deploy: {} manifests valid for Kubernetes {}", manifests.len(), VERSIONS.join(" and "));
    Ok(())
}

fn manifests(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no manifests in {}", dir.display());
    }
    Ok(files)
}

/// `target/k8s-venv/bin/kubernetes-validate`, installed from PyPI when missing or not the pinned version.
fn ensure_validator(root: &Path) -> Result<PathBuf> {
    let venv = root.join("target/k8s-venv");
    let validator = venv.join("bin/kubernetes-validate");
    let marker = venv.join(".uexec-requirement");
    if validator.exists() && std::fs::read_to_string(&marker).is_ok_and(|m| m.trim() == REQUIREMENT) {
        return Ok(validator);
    }
    eprintln!("xtask deploy: installing {REQUIREMENT} into {}", venv.display());
    run_checked(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))
        .context("python3 with the venv module is needed (apt-get install python3-venv)")?;
    run_checked(Command::new(venv.join("bin/pip")).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        REQUIREMENT,
    ]))?;
    std::fs::write(&marker, format!("{REQUIREMENT}\n"))?;
    Ok(validator)
}

fn run_checked(command: &mut Command) -> Result<()> {
    let status = command.status().with_context(|| format!("could not run {command:?}"))?;
    if !status.success() {
        bail!("{command:?} exited with {status}");
    }
    Ok(())
}
