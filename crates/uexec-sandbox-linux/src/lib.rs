//! Linux sandbox adapter for uexec: Landlock, seccomp and a private read-only mount namespace, applied to the
//! child between fork and exec; fail-closed, with a report of what is enforced.
//!
//! **For:** restricting a command you start yourself, with any spawner that can run a hook between fork and
//! exec (`uexec-pty`, or `std::process::Command` with `pre_exec` as below): writes only under the writable roots
//! (`.git` and `.uexec` inside them stay read-only), no network unless the policy allows it, no ptrace, no new
//! namespaces or mounts, no keystroke injection into the terminal. [`LinuxSandbox`] implements the
//! `uexec_ports::Sandbox` port, so the engine uses it as is.
//!
//! **Not for:** spawning (it never starts a process: it returns a spawn request plus a hook), other operating
//! systems (the crate is empty outside Linux; `uexec-sandbox-macos` is the macOS adapter), or containing a
//! process tree after the command exits (the process adapter owns that). `docs/sandbox.md` in the repository
//! lists the exact sequence of operations, the trust model and what is not protected.
//!
//! Why it has this shape:
//! - The `uexec_ports::Sandbox` port returns a spawn request plus a report; the work in the child is a
//!   `uexec_ports::process::ChildSetup` hook, because the spawner owns fork and exec. Everything that allocates
//!   (paths, the Landlock ruleset file descriptor, the BPF programs, C strings for the mounts) is built in
//!   `prepare`, in the parent; the hook only issues raw system calls on that data (see `child.rs` for the order).
//! - Three mechanisms, each covering what the others cannot: Landlock (which paths may be written; signal and
//!   abstract-socket scoping), a private mount namespace (read-only mounts outside the writable roots, so file
//!   metadata cannot change either, and read-only bind mounts over `.git` and `.uexec`, which Landlock, being
//!   allow-only, cannot exempt from a writable root, and an empty mount over each hidden secret location), and
//!   seccomp (network sockets, ptrace, io_uring, mounts, namespaces, keystroke injection, ...). In the
//!   domain-allowlist mode a fourth: the proxy's loopback-only network namespace ([`ProxyNamespace`]), made once
//!   per server and entered by each command (without `CAP_SYS_ADMIN`, made in the sandbox's user namespace,
//!   which the command enters first: `userns.rs`).
//! - Fail closed: [`KernelSupport`] says what the kernel offers; the plan and the report follow from it; a report
//!   with anything `partial` or `off` refuses to run unless the request accepts degradation
//!   (`SandboxError::Unenforceable`, naming [`DEGRADED_SETTING`]). The support is injectable
//!   ([`LinuxSandbox::with_support`]), so the refusal is tested on a machine that has everything.
//!
//! # Example
//!
//! Prepare a shell command under `workspace-write`, start it with `std::process::Command` running the
//! sandbox's hooks in `pre_exec`, and see a write inside the workspace succeed and one beside it fail
//! (`examples/sandboxed_command.rs` is the same as a program):
//!
//! ```
//! use std::os::unix::process::CommandExt;
//! use std::path::Path;
//! use std::process::{Command, ExitStatus};
//!
//! use uexec_domain::SandboxPolicy;
//! use uexec_ports::process::{IoMode, SpawnRequest};
//! use uexec_ports::{Sandbox, SandboxRequest};
//! use uexec_sandbox_linux::LinuxSandbox;
//!
//! fn run_sandboxed(script: &str, workspace: &Path) -> Result<ExitStatus, Box<dyn std::error::Error>> {
//!     let policy = SandboxPolicy::WorkspaceWrite {
//!         writable_roots: Vec::new(),
//!         network_access: false,
//!         exclude_slash_tmp: true,
//!         exclude_tmpdir_env_var: true,
//!     };
//!     let request = SandboxRequest {
//!         spawn: SpawnRequest {
//!             argv: vec!["sh".into(), "-c".into(), script.into()],
//!             cwd: workspace.to_path_buf(),
//!             env: std::env::vars_os().collect(),
//!             mode: IoMode::Pipes,
//!             setup: Vec::new(),
//!             pid_scope: Default::default(),
//!         },
//!         workspace: workspace.to_path_buf(),
//!         policy,
//!         tmpdir: None,
//!         allow_degraded: false,
//!     };
//!     // Fails closed: an error here means the kernel cannot enforce the policy, and nothing may run.
//!     let prepared = LinuxSandbox::default().prepare(request)?;
//!     let spawn = prepared.spawn;
//!     let mut command = Command::new(&spawn.argv[0]);
//!     command.args(&spawn.argv[1..]).current_dir(&spawn.cwd).env_clear().envs(spawn.env.iter().cloned());
//!     let hooks = spawn.setup.clone();
//!     // SAFETY: the closure runs in the forked child before exec; the hooks only make system calls on data
//!     // prepared in `prepare` (the `ChildSetup` contract).
//!     unsafe {
//!         command.pre_exec(move || {
//!             for hook in &hooks {
//!                 hook.run_in_child().map_err(|failure| std::io::Error::from_raw_os_error(failure.errno))?;
//!             }
//!             Ok(())
//!         });
//!     }
//!     Ok(command.status()?)
//! }
//!
//! let base = tempfile::tempdir()?;
//! let workspace = base.path().join("workspace");
//! std::fs::create_dir(&workspace)?;
//! assert!(run_sandboxed("echo ok > inside.txt", &workspace)?.success());
//! assert!(workspace.join("inside.txt").exists());
//! assert!(!run_sandboxed("echo no > ../outside.txt", &workspace)?.success());
//! assert!(!base.path().join("outside.txt").exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Architecture invariant: depends on `uexec-domain`, `uexec-plan` and `uexec-ports` only (what stays read-only in
//! git directories is the plan's, rendered here); never starts a program itself (its only forks are short-lived
//! probes and helpers that make namespaces, send descriptors back and exit: `userns.rs`; the init of an
//! unprivileged sandbox's PID namespace, which lives as long as the sandbox; and, for a caller that runs the hook
//! in `pre_exec` without `ChildSetup::enter_pid_namespace`, the relay its own child stays as).
#![deny(missing_docs)]
#![cfg(target_os = "linux")]
#![deny(unsafe_code)]

mod child;
mod copy_on_write;
mod hidden;
mod keep;
mod landlock_rules;
mod layout;
mod netns;
mod placeholders;
mod plan;
mod refusals;
mod sandbox;
mod seccomp;
mod support;
mod sys;
mod template;
mod userns;

pub use copy_on_write::CopyOnWriteDir;
pub use netns::{OfflineNamespace, ProxyNamespace, ProxyNamespaceError};
pub use plan::DEGRADED_SETTING;
pub use sandbox::LinuxSandbox;
pub use support::{Availability, KernelSupport, MountNamespace};
pub use userns::user_namespace_availability;
