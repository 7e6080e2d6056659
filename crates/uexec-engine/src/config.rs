//! What the engine is built from: its configuration (policies, limits, environment) and its adapters.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use uexec_domain::env::EnvPolicy;
use uexec_domain::limits::Limits;
use uexec_domain::rules::CommandRules;
use uexec_domain::{ApprovalPolicy, SandboxPolicy};
use uexec_ports::process::ProcessSpawner;
use uexec_ports::{Approver, EventSink, Sandbox};

use crate::budget::SessionBudget;

/// The adapters the engine talks to, injected as trait objects.
#[derive(Clone)]
pub struct EngineDeps {
    /// Starts processes (PTY or pipes).
    pub spawner: Arc<dyn ProcessSpawner>,
    /// The platform sandbox; an unsupported platform's sandbox returns `SandboxError::Unsupported`.
    pub sandbox: Arc<dyn Sandbox>,
    /// Asks a person.
    pub approver: Arc<dyn Approver>,
    /// Receives events.
    pub events: Arc<dyn EventSink>,
}

impl fmt::Debug for EngineDeps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineDeps").field("sandbox", &self.sandbox.kind()).finish_non_exhaustive()
    }
}

/// How the engine behaves. [`EngineConfig::new`] gives the reference's defaults.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// When to ask a person (default `on-request`).
    pub approval_policy: ApprovalPolicy,
    /// What sandboxed commands may touch (default `workspace-write`, network off).
    pub sandbox_policy: SandboxPolicy,
    /// Accept protections the sandbox can only partly enforce (default false: fail closed).
    pub allow_degraded_sandbox: bool,
    /// Which variables commands inherit, and which are set.
    pub env_policy: EnvPolicy,
    /// The environment commands inherit from (the app passes `std::env::vars_os()`).
    pub base_env: Vec<(OsString, OsString)>,
    /// Session, buffer and window limits.
    pub limits: Limits,
    /// Command rules (allow / ask / forbid by prefix).
    pub rules: CommandRules,
    /// The shell when a call names none (the app resolves `$SHELL`, else `/bin/bash`).
    pub default_shell: String,
    /// The server's working directory: relative workdirs resolve against it.
    pub cwd: PathBuf,
    /// Report the protections in force in every `exec_command` response (a `[uexec] Sandbox: ...` note after the
    /// output). Default false: then only a command that ran outside the sandbox after an approval or a denial,
    /// or under a sandbox not fully enforced, gets the note. `write_stdin` and `close_session` never repeat it.
    pub report_protections: bool,
    /// `None` seeds session and chunk ids from the time and the pid; `Some` makes them reproducible (tests).
    pub id_seed: Option<u64>,
    /// The program an `apply_patch` call runs as, with its leading arguments (the app: `[uexec, "apply-patch",
    /// "--"]`); the patch follows as further arguments. `None` (the default): `apply_patch` calls run in the
    /// shell like any command.
    pub apply_patch_program: Option<Vec<OsString>>,
    /// Where login snapshots are written (`crate::login`): a directory outside every writable root (the app:
    /// `$XDG_STATE_HOME/uexec/snapshots`). `None` (the default): every `login: true` command starts a login
    /// shell.
    pub snapshot_dir: Option<PathBuf>,
    /// The sandbox's own package-cache directory (`uexec_domain::caches`): sandboxed commands get npm, pip,
    /// uv, yarn, pnpm, go and XDG cache variables pointing into it when it is one of the policy's writable
    /// roots (the app adds it under `workspace-write`). `None` (the default): no cache variables.
    pub sandbox_cache: Option<PathBuf>,
    /// Directories beyond the policy's roots that the sandbox adapter lets sandboxed commands write (the copy-on-
    /// write views' upper layers): counted as written by sandboxed commands (`uexec_domain::trust`).
    pub sandbox_written_dirs: Vec<PathBuf>,
    /// A limit on sessions shared with other engines (a server's limit across its clients), counted from the
    /// reservation of a call's id to the session's removal. `None` (the default): only `limits.max_sessions`.
    pub session_budget: Option<SessionBudget>,
}

impl EngineConfig {
    /// The defaults: `on-request`, `workspace-write` without network, fail closed, inherit the whole (empty)
    /// base environment, reference limits, no rules, `/bin/bash`, protections noted only when news, random ids, no
    /// `apply_patch` interception, no login snapshots, no sandbox cache.
    pub fn new(cwd: PathBuf) -> Self {
        EngineConfig {
            approval_policy: ApprovalPolicy::default(),
            sandbox_policy: SandboxPolicy::default(),
            allow_degraded_sandbox: false,
            env_policy: EnvPolicy::default(),
            base_env: Vec::new(),
            limits: Limits::default(),
            rules: CommandRules::default(),
            default_shell: "/bin/bash".to_owned(),
            cwd,
            report_protections: false,
            id_seed: None,
            apply_patch_program: None,
            snapshot_dir: None,
            sandbox_cache: None,
            sandbox_written_dirs: Vec::new(),
            session_budget: None,
        }
    }

    /// The sandbox's own directories that sandboxed commands write: its package cache and
    /// [`EngineConfig::sandbox_written_dirs`].
    pub fn sandbox_dirs(&self) -> Vec<PathBuf> {
        self.sandbox_cache.iter().chain(&self.sandbox_written_dirs).cloned().collect()
    }
}
