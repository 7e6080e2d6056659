//! How long preparing a sandboxed command takes when a workspace glob (`.env*`) has to search a tree:
//! `cargo run --release -p uexec-sandbox-linux --example hidden_search -- <workspace> [runs]`. Without a
//! workspace it measures a small tree it makes itself (2,000 files in 200 directories), so `cargo xtask
//! examples` runs it too. Linux only (elsewhere it says so and exits 0).
//!
//! Prints the median and the slowest `prepare` (which expands the patterns; nothing is spawned) with the
//! pattern and without any, and what the report says about hidden paths.

#[cfg(not(target_os = "linux"))]
fn main() -> std::io::Result<()> {
    use std::io::Write;
    writeln!(std::io::stdout(), "hidden_search measures the Linux sandbox: nothing to do on this system")
}

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    linux::main()
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io::Write;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};
    use uexec_domain::SandboxPolicy;
    use uexec_domain::hidden::{HiddenPaths, HiddenPattern};
    use uexec_ports::process::{IoMode, SpawnRequest};
    use uexec_ports::{Sandbox, SandboxRequest};
    use uexec_sandbox_linux::LinuxSandbox;

    /// A small tree for a run without arguments: 200 directories of 10 files, one `.env` in every tenth.
    fn small_tree() -> Result<tempfile::TempDir, Box<dyn std::error::Error>> {
        let dir = tempfile::Builder::new().prefix("uexec-hidden-search-").tempdir_in("/var/tmp")?;
        for d in 0..200 {
            let sub = dir.path().join(format!("d{d}"));
            std::fs::create_dir(&sub)?;
            for f in 0..10 {
                std::fs::write(sub.join(format!("f{f}")), b"x")?;
            }
            if d % 10 == 0 {
                std::fs::write(sub.join(".env"), b"K=V\n")?;
            }
        }
        Ok(dir)
    }

    pub(super) fn main() -> Result<(), Box<dyn std::error::Error>> {
        let mut args = std::env::args_os().skip(1);
        let made = match args.next() {
            Some(_) => None,
            None => Some(small_tree()?),
        };
        let given = std::env::args_os().nth(1).map(PathBuf::from);
        let workspace = match (&made, given) {
            (Some(tree), _) => std::fs::canonicalize(tree.path())?,
            (None, Some(path)) => std::fs::canonicalize(path)?,
            (None, None) => return Err("usage: hidden_search [<workspace> [runs]]".into()),
        };
        let runs: usize = args.next().and_then(|r| r.to_str()?.parse().ok()).unwrap_or(11);
        let request = || SandboxRequest {
            spawn: SpawnRequest {
                argv: vec!["true".into()],
                cwd: workspace.clone(),
                env: Vec::new(),
                mode: IoMode::Pipes,
                setup: Vec::new(),
                pid_scope: Default::default(),
            },
            workspace: workspace.clone(),
            policy: SandboxPolicy::WorkspaceWrite {
                writable_roots: Vec::new(),
                network_access: false,
                exclude_tmpdir_env_var: true,
                exclude_slash_tmp: true,
            },
            tmpdir: None,
            allow_degraded: false,
        };
        let glob = LinuxSandbox::default().with_hidden(HiddenPaths {
            home: None,
            patterns: vec![HiddenPattern::parse(".env*")?],
            reachable: Vec::new(),
        });
        let plain = LinuxSandbox::default();
        for (name, sandbox) in [("no hidden paths", &plain), ("hidden_paths = [\".env*\"]", &glob)] {
            let mut times: Vec<Duration> = Vec::new();
            let mut detail = String::new();
            for _ in 0..runs {
                let started = Instant::now();
                let prepared = sandbox.prepare(request())?;
                times.push(started.elapsed());
                if let Some(p) = prepared.report.protections.iter().find(|p| p.name == "hidden_paths") {
                    detail = format!("{}: {}", p.status, p.detail);
                }
            }
            times.sort();
            writeln!(
                std::io::stdout(),
                "{name}: median {:?}, slowest {:?} over {runs} prepares\n  {}",
                times[times.len() / 2],
                times[times.len() - 1],
                detail.chars().take(300).collect::<String>()
            )?;
        }
        Ok(())
    }
}
