//! The layering check: dependencies point inward (domain <- ports <- plan <- sandbox adapters <- app; domain <-
//! ports <- adapters/engine <- app).
//!
//! It reads `cargo metadata` and fails when a workspace crate depends (normal, dev or build dependency) on a
//! layer it must not:
//! - `uexec-domain` depends on no internal crate;
//! - `uexec-ports` only on `uexec-domain`;
//! - `uexec-plan` (the sandbox plan, one reader of the host for every platform) only on domain and ports;
//! - adapters (`uexec-pty`, `uexec-sandbox-*`) and `uexec-engine` only on domain and ports, never on each other;
//!   the sandbox adapters (`uexec-sandbox-*`) also on `uexec-plan`, which they render (the engine and the process
//!   adapter do not: the engine asks the sandbox through the port and decides nothing about the host's files);
//! - the app (the composition root) on every inner layer, the plan included (`uexec sandbox-report` reads the
//!   host the way the sandbox does, through the plan);
//! - nothing depends on the app `uexec`, except the cross-crate `tests` package and the runnable examples
//!   (`uexec-examples`), which may use everything;
//! - nothing depends on `xtask`, `tests` or `uexec-examples`.
//!
//! Inside each crate, the modules form no cycle (`modules.rs` says what counts as a use).

use std::fmt;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Where a crate sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    Domain,
    Ports,
    /// The sandbox plan: between the ports and the sandbox adapters.
    Plan,
    /// Adapters and the engine: the ring around the ports.
    Ring,
    App,
    /// The cross-crate test package.
    Tests,
    /// The runnable examples that compose several crates (`examples/`): like `tests`, they may use everything.
    Examples,
    /// Tooling (xtask).
    Tooling,
}

pub(crate) fn layer_of(name: &str) -> Option<Layer> {
    Some(match name {
        "uexec-domain" => Layer::Domain,
        "uexec-ports" => Layer::Ports,
        "uexec-plan" => Layer::Plan,
        "uexec" => Layer::App,
        "tests" => Layer::Tests,
        "uexec-examples" => Layer::Examples,
        "xtask" => Layer::Tooling,
        "uexec-pty" | "uexec-engine" => Layer::Ring,
        n if n.starts_with("uexec-sandbox-") => Layer::Ring,
        _ => return None,
    })
}

/// One dependency edge between workspace crates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edge {
    pub(crate) from: String,
    pub(crate) to: String,
    /// `normal`, `dev` or `build`.
    pub(crate) kind: String,
}

/// A forbidden edge and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) edge: Edge,
    pub(crate) rule: &'static str,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {} ({} dependency): {}", self.edge.from, self.edge.to, self.edge.kind, self.rule)
    }
}

/// Checks every edge; `workspace` names the workspace members (edges to other crates are ignored).
pub(crate) fn check(workspace: &[String], edges: &[Edge]) -> Vec<Violation> {
    let mut violations = Vec::new();
    for edge in edges {
        if !workspace.contains(&edge.to) {
            continue;
        }
        let (Some(from), Some(to)) = (layer_of(&edge.from), layer_of(&edge.to)) else {
            violations.push(Violation {
                edge: edge.clone(),
                rule: "every workspace crate must have a known layer: add it to xtask/src/layering.rs",
            });
            continue;
        };
        let rule = match (from, to) {
            (Layer::Domain, _) => Some("uexec-domain depends on no internal crate"),
            (Layer::Ports, Layer::Domain) => None,
            (Layer::Ports, _) => Some("uexec-ports depends only on uexec-domain"),
            (Layer::Plan, Layer::Domain | Layer::Ports) => None,
            (Layer::Plan, _) => Some("uexec-plan depends only on domain and ports"),
            (Layer::Ring, Layer::Domain | Layer::Ports) => None,
            (Layer::Ring, Layer::Plan) if edge.from.starts_with("uexec-sandbox-") => None,
            (Layer::Ring, Layer::Plan) => Some(
                "only the sandbox adapters depend on uexec-plan (the engine asks the sandbox through the port)",
            ),
            (Layer::Ring, Layer::Ring) => {
                Some("adapters and the engine never depend on each other: inject through the ports")
            }
            (Layer::Ring, _) => Some("adapters and the engine depend only on domain and ports"),
            (Layer::App, Layer::Domain | Layer::Ports | Layer::Plan | Layer::Ring) => None,
            (
                Layer::Tests | Layer::Examples,
                Layer::Domain | Layer::Ports | Layer::Plan | Layer::Ring | Layer::App,
            ) => None,
            (_, Layer::App) => Some("nothing depends on the app crate"),
            (_, Layer::Tests | Layer::Examples | Layer::Tooling) => {
                Some("nothing depends on tests, the examples or xtask")
            }
            (Layer::Tooling, _) => Some("xtask uses no workspace crate"),
        };
        if let Some(rule) = rule {
            violations.push(Violation { edge: edge.clone(), rule });
        }
    }
    violations
}

/// Extracts the workspace members and their internal edges from `cargo metadata --no-deps` JSON.
pub(crate) fn edges_from_metadata(metadata: &Value) -> Result<(Vec<String>, Vec<Edge>)> {
    let packages = metadata["packages"].as_array().context("cargo metadata has no `packages` array")?;
    let members: Vec<String> =
        packages.iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect();
    let mut edges = Vec::new();
    for package in packages {
        let from = package["name"].as_str().context("package without a name")?;
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let to = dep["name"].as_str().context("dependency without a name")?;
            if members.iter().any(|m| m == to) {
                let kind = dep["kind"].as_str().unwrap_or("normal").to_owned();
                edges.push(Edge { from: from.to_owned(), to: to.to_owned(), kind });
            }
        }
    }
    Ok((members, edges))
}

pub(crate) fn run(root: &Path) -> Result<()> {
    let metadata = crate::metadata(root)?;
    let (members, edges) = edges_from_metadata(&metadata)?;
    let violations = check(&members, &edges);
    let cycles = crate::modules::check(&metadata)?;
    if violations.is_empty() && cycles.is_empty() {
        eprintln!(
            "layering: {} internal edges between {} crates, all allowed; no module cycle in any crate",
            edges.len(),
            members.len()
        );
        return Ok(());
    }
    for v in &violations {
        eprintln!("layering violation: {v}");
    }
    for c in &cycles {
        eprintln!("layering: {c}");
    }
    bail!("{} forbidden dependency edge(s), {} module cycle(s)", violations.len(), cycles.len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::process::Command;

    use super::*;

    fn members() -> Vec<String> {
        [
            "uexec-domain",
            "uexec-ports",
            "uexec-plan",
            "uexec-pty",
            "uexec-sandbox-linux",
            "uexec-sandbox-macos",
            "uexec-engine",
            "uexec",
            "tests",
            "uexec-examples",
            "xtask",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn edge(from: &str, to: &str, kind: &str) -> Edge {
        Edge { from: from.into(), to: to.into(), kind: kind.into() }
    }

    #[test]
    fn allowed_edges_pass() {
        let edges = [
            edge("uexec-ports", "uexec-domain", "normal"),
            edge("uexec-pty", "uexec-ports", "normal"),
            edge("uexec-engine", "uexec-ports", "dev"),
            edge("uexec", "uexec-engine", "normal"),
            edge("uexec", "uexec-pty", "normal"),
            edge("tests", "uexec", "dev"),
            edge("tests", "uexec-pty", "normal"),
            edge("uexec-examples", "uexec-engine", "normal"),
            edge("uexec-examples", "uexec-pty", "normal"),
            edge("uexec-examples", "uexec-sandbox-linux", "normal"),
            edge("uexec-plan", "uexec-domain", "normal"),
            edge("uexec-sandbox-linux", "uexec-plan", "normal"),
            edge("uexec-sandbox-macos", "uexec-plan", "dev"),
            edge("uexec", "uexec-plan", "normal"),
            edge("uexec-domain", "serde", "normal"),
        ];
        assert_eq!(check(&members(), &edges), vec![]);
    }

    #[test]
    fn each_forbidden_edge_is_reported() {
        let forbidden = [
            edge("uexec-domain", "uexec-ports", "normal"),
            edge("uexec-ports", "uexec-pty", "normal"),
            edge("uexec-engine", "uexec-pty", "dev"),
            edge("uexec-sandbox-linux", "uexec-pty", "normal"),
            edge("uexec-pty", "uexec", "normal"),
            edge("uexec", "tests", "dev"),
            edge("tests", "uexec-examples", "normal"),
            edge("uexec-engine", "uexec-examples", "dev"),
            edge("xtask", "uexec-domain", "normal"),
            edge("uexec-mystery", "uexec-domain", "normal"),
            edge("uexec-engine", "uexec-plan", "normal"),
            edge("uexec-pty", "uexec-plan", "normal"),
            edge("uexec-plan", "uexec-sandbox-linux", "normal"),
            edge("uexec-plan", "uexec-engine", "normal"),
            edge("uexec-domain", "uexec-plan", "normal"),
        ];
        for e in forbidden {
            let violations = check(&members(), std::slice::from_ref(&e));
            assert_eq!(violations.len(), 1, "edge {e:?} must be forbidden");
        }
    }

    #[test]
    fn the_real_workspace_passes_and_a_forbidden_edge_added_to_it_fails() {
        let root = crate::workspace_root().unwrap();
        let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(output.status.success());
        let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
        let (members, mut edges) = edges_from_metadata(&metadata).unwrap();
        assert!(members.contains(&"uexec-domain".to_owned()));
        assert!(edges.iter().any(|e| e.from == "uexec-ports" && e.to == "uexec-domain"));
        let violations = check(&members, &edges);
        assert!(violations.is_empty(), "workspace violates layering: {violations:?}");
        edges.push(edge("uexec-sandbox-linux", "uexec-pty", "normal"));
        let violations = check(&members, &edges);
        assert_eq!(violations.len(), 1);
        assert!(violations[0].to_string().contains("never depend on each other"));
    }
}
