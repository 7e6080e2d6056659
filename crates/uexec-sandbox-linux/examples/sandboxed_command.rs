//! The Linux sandbox alone, with `std::process::Command`: prepare a command under `workspace-write`, run the
//! sandbox's hooks in `pre_exec`, and pair an allowed action with a denied one for each protection shown.
//!
//! ```sh
//! cargo run -p uexec-sandbox-linux --example sandboxed_command
//! ```
//!
//! It uses only this crate, the request types of `uexec-domain` and `uexec-ports`, and `std`. It exits non-zero
//! when an allowed action fails or a denied one succeeds (or when this kernel cannot enforce the policy: the
//! sandbox fails closed).

// An example program: printing is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("uexec-sandbox-linux works on Linux only; see uexec-sandbox-macos for macOS");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::error::Error;
    use std::os::unix::process::CommandExt;
    use std::path::Path;
    use std::process::{Command, Output};

    use uexec_domain::SandboxPolicy;
    use uexec_ports::process::{IoMode, SpawnRequest};
    use uexec_ports::{Sandbox, SandboxRequest};
    use uexec_sandbox_linux::LinuxSandbox;

    /// Runs `sh -c script` in `workspace` under `workspace-write` (the workspace is the only writable root,
    /// no network) and returns its output.
    fn run_sandboxed(script: &str, workspace: &Path) -> Result<Output, Box<dyn Error>> {
        let policy = SandboxPolicy::WorkspaceWrite {
            writable_roots: Vec::new(),
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        };
        let request = SandboxRequest {
            spawn: SpawnRequest {
                argv: vec!["sh".into(), "-c".into(), script.into()],
                cwd: workspace.to_path_buf(),
                env: std::env::vars_os().collect(),
                mode: IoMode::Pipes,
                setup: Vec::new(),
                pid_scope: Default::default(),
            },
            workspace: workspace.to_path_buf(),
            policy,
            tmpdir: None,
            allow_degraded: false,
        };
        // Fails closed: an error means this kernel cannot enforce the policy, and nothing may run.
        let prepared = LinuxSandbox::default().prepare(request)?;
        let spawn = prepared.spawn;
        let mut command = Command::new(&spawn.argv[0]);
        command.args(&spawn.argv[1..]).current_dir(&spawn.cwd).env_clear().envs(spawn.env.iter().cloned());
        let hooks = spawn.setup.clone();
        // SAFETY: the closure runs in the forked child before exec; the hooks only make system calls on data
        // prepared in `prepare` (the `ChildSetup` contract).
        unsafe {
            command.pre_exec(move || {
                for hook in &hooks {
                    hook.run_in_child()
                        .map_err(|failure| std::io::Error::from_raw_os_error(failure.errno))?;
                }
                Ok(())
            });
        }
        Ok(command.output()?)
    }

    pub(crate) fn main() -> Result<(), Box<dyn Error>> {
        let base = std::env::temp_dir().join(format!("uexec-sandbox-example-{}", std::process::id()));
        let workspace = base.join("workspace");
        // A repository's `.git` stays read-only even inside a writable root (when it exists before the command).
        std::fs::create_dir_all(workspace.join(".git"))?;
        let result = show_pairs(&base, &workspace);
        std::fs::remove_dir_all(&base)?;
        result
    }

    fn show_pairs(base: &Path, workspace: &Path) -> Result<(), Box<dyn Error>> {
        let pairs = [
            (
                "write inside the workspace",
                "echo ok > inside.txt",
                "write beside it",
                "echo no > ../outside.txt",
            ),
            ("create a directory inside", "mkdir made-here", "write into its .git", "echo x > .git/config"),
            (
                "a unix socket pair",
                "python3 -c 'import socket; socket.socketpair()'",
                "reach an internet address",
                "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 443), timeout=5)'",
            ),
        ];
        let mut wrong = Vec::new();
        for (allowed_what, allowed, denied_what, denied) in pairs {
            let ok = run_sandboxed(allowed, workspace)?;
            let refused = run_sandboxed(denied, workspace)?;
            println!("allowed: {allowed_what:<28} `{allowed}` -> {}", verdict(&ok));
            println!("denied:  {denied_what:<28} `{denied}` -> {}", verdict(&refused));
            if !ok.status.success() {
                wrong.push(format!("`{allowed}` failed"));
            }
            if refused.status.success() {
                wrong.push(format!("`{denied}` succeeded"));
            }
        }
        if base.join("outside.txt").exists() {
            wrong.push("outside.txt exists".to_owned());
        }
        if !wrong.is_empty() {
            return Err(format!("the sandbox did not hold: {}", wrong.join("; ")).into());
        }
        println!("every allowed action ran and every denied one failed");
        Ok(())
    }

    /// `exit 0`, or the exit code and the last line the command printed.
    fn verdict(output: &Output) -> String {
        if output.status.success() {
            return "exit 0".to_owned();
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        format!("{} ({last})", output.status)
    }
}
