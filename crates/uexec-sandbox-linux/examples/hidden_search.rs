//! How long preparing a sandboxed command takes when a workspace glob (`.env*`) has to search a tree:
//! `cargo run --release -p uexec-sandbox-linux --example hidden_search -- <workspace> [runs]`.
//!
//! Prints the median and the slowest `prepare` (which expands the patterns; nothing is spawned) with the
//! pattern and without any, and what the report says about hidden paths.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use uexec_domain::SandboxPolicy;
use uexec_domain::hidden::{HiddenPaths, HiddenPattern};
use uexec_ports::process::{IoMode, SpawnRequest};
use uexec_ports::{Sandbox, SandboxRequest};
use uexec_sandbox_linux::LinuxSandbox;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let workspace =
        std::fs::canonicalize(PathBuf::from(args.next().ok_or("usage: hidden_search <workspace> [runs]")?))?;
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
