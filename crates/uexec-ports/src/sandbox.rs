//! The sandbox port: turns a spawn request plus a policy into something spawnable, and says what it enforces.

use std::path::{Path, PathBuf};

use uexec_domain::denial::Refusal;
use uexec_domain::{ProtectionReport, SandboxKind, SandboxPolicy};

use crate::process::SpawnRequest;

/// What the engine asks a sandbox for.
#[derive(Debug, Clone)]
pub struct SandboxRequest {
    /// The command as it would run unsandboxed. Its `cwd` is only where the command starts: it grants nothing.
    pub spawn: SpawnRequest,
    /// The workspace: the directory the policy's "cwd" writable root stands for (the server's configured
    /// working directory). Deliberately not `spawn.cwd`: a caller chooses `workdir` per command, and a
    /// `workdir` of `/etc` must not make `/etc` writable.
    pub workspace: PathBuf,
    /// The policy to enforce. Never `DangerFullAccess`: the engine does not call a sandbox for that.
    pub policy: SandboxPolicy,
    /// `$TMPDIR` as the command will see it, if set (it becomes a writable root under `workspace-write`).
    pub tmpdir: Option<PathBuf>,
    /// Accept protections that can only be partly enforced. Off by default: fail closed.
    pub allow_degraded: bool,
}

/// A request made spawnable: possibly rewritten argv and env, possibly a hook for the child, and the report.
#[derive(Debug, Clone)]
pub struct SandboxedSpawn {
    /// What to spawn (the sandbox may wrap the argv, and adds `UEXEC_SANDBOX*` variables to the env).
    pub spawn: SpawnRequest,
    /// What this enforces.
    pub report: ProtectionReport,
    /// What the sandbox made on the host for this command and keeps until [`Sandbox::finish`] is called with it
    /// ([`SandboxLease::NONE`] when it made nothing that outlives the command).
    pub lease: SandboxLease,
}

/// A prepared command's claim on what its sandbox made or keeps on the host for it (placeholders under
/// read-only mounts, a private copy of the repository's loose objects): the sandbox undoes what nobody needs
/// any more when the last command holding a claim is [finished](Sandbox::finish). A plain value the sandbox
/// issued, so that a mock can check which command was finished; [`SandboxLease::NONE`] claims nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SandboxLease(pub u64);

impl SandboxLease {
    /// The lease of a command for which the sandbox keeps nothing.
    pub const NONE: SandboxLease = SandboxLease(0);
}

/// Why a command cannot run under the requested sandbox. Every variant means: nothing was spawned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// This platform or kernel cannot enforce the policy; `missing` says what is missing and `setting` which
    /// setting would accept degraded protection (if any would).
    #[error("sandbox cannot be enforced: {missing}{}", .setting.as_ref().map(|s| format!(" (to accept degraded protection: {s})")).unwrap_or_default())]
    Unenforceable {
        /// What is missing (e.g. "Landlock is not supported by this kernel").
        missing: String,
        /// The setting that accepts degradation, e.g. `allow_degraded_sandbox = true`.
        setting: Option<String>,
    },
    /// No sandbox exists for this platform (the explicit stub; never a silent fallback).
    #[error("no sandbox is available on this platform: {0}")]
    Unsupported(String),
    /// A path in the policy is unusable (does not exist, cannot be canonicalised, cannot be opened).
    #[error("invalid sandbox path {path}: {reason}")]
    InvalidPath {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The policy is `danger-full-access`: it runs without a sandbox, so there is nothing to prepare.
    #[error("danger-full-access runs without a sandbox: there is no sandbox to prepare for it")]
    Unrestricted,
    /// The command line is empty.
    #[error("missing command line: argv is empty")]
    EmptyCommand,
    /// The command's working directory or workspace lies in a hidden secret location, which stays hidden
    /// (`uexec_domain::hidden::check_directories`, the same rule on every platform).
    #[error("{0}")]
    InHiddenLocation(uexec_domain::hidden::InHiddenLocation),
    /// The policy names more separate writable roots than the mechanism can hold.
    #[error("{count} separate writable roots; at most {max} are supported")]
    TooManyWritableRoots {
        /// Writable roots after merging nested ones.
        count: usize,
        /// The most the mechanism supports.
        max: usize,
    },
}

/// What the engine knows of a sandboxed command that ran, for [`Sandbox::refusals`].
#[derive(Debug, Clone, Copy)]
pub struct RefusalQuery<'a> {
    /// [`Sandbox::refusal_mark`] taken right before the command was prepared.
    pub mark: u64,
    /// The policy it ran under.
    pub policy: &'a SandboxPolicy,
    /// Its workspace, as in [`SandboxRequest::workspace`].
    pub workspace: &'a Path,
    /// Its `$TMPDIR`, as in [`SandboxRequest::tmpdir`].
    pub tmpdir: Option<&'a Path>,
    /// Where it started (relative paths in its output are taken from there).
    pub cwd: &'a Path,
    /// Its output so far (empty when the caller has none, as `uexec run` on the person's terminal).
    pub output: &'a [u8],
    /// Its exit code, once it exited.
    pub exit_code: Option<i32>,
}

/// A sandbox mechanism. Contract: `prepare` either returns a spawn that enforces every protection its report
/// lists as enforced, or an error; it never returns a weaker spawn silently.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait Sandbox: Send + Sync {
    /// The mechanism.
    fn kind(&self) -> SandboxKind;

    /// What this machine can enforce for `policy`, without running anything (for `uexec sandbox-report`).
    fn report(&self, policy: &SandboxPolicy) -> ProtectionReport;

    /// Make `request.spawn` run under `request.policy`.
    fn prepare(&self, request: SandboxRequest) -> Result<SandboxedSpawn, SandboxError>;

    /// The command prepared with `lease` has ended and its whole process tree is gone (or it was never
    /// spawned): nothing of it can use its mounts any more. The sandbox restores what the command removed of
    /// what it keeps (loose git objects) and, when no command of any server still holds a lease on the same
    /// workspace, removes the placeholders it made there. Called exactly once per prepared spawn, by whoever
    /// prepared it; [`SandboxLease::NONE`] and the default do nothing. Never fails the caller: what cannot be
    /// undone now is undone at the next start (the sandbox's record).
    fn finish(&self, lease: SandboxLease) {
        let _ = lease;
    }

    /// What it means, when this mechanism knows, that a command it sandboxed (`argv`, as the caller asked for
    /// it) failed with `output`: one sentence naming the switch that avoids the failure (macOS: a tool whose own
    /// sandbox cannot start inside Seatbelt, `swift build --disable-sandbox`). `None` (the default): nothing to
    /// say.
    fn denial_hint(&self, argv: &[std::ffi::OsString], output: &[u8]) -> Option<String> {
        let _ = (argv, output);
        None
    }

    /// Where the record of refusals this sandbox keeps itself stands now (name lookups it answered with the
    /// network off); pass it in [`RefusalQuery::mark`]. The default, for a sandbox that keeps none: 0.
    fn refusal_mark(&self) -> u64 {
        0
    }

    /// What this sandbox refused a command it prepared, from its own record since `query.mark` (attributed by
    /// time: every command running then shares it) and from its plan for the paths the output names as
    /// failing (each [`Refusal`] says which). `Some` (even empty) means the sandbox can say what it refused,
    /// and the engine decides on that alone; `None` (the default) means it cannot, and the engine falls back
    /// to the keyword heuristic (`uexec_domain::denial::denial_evidence`).
    fn refusals<'a>(&self, query: &RefusalQuery<'a>) -> Option<Vec<Refusal>> {
        let _ = query;
        None
    }

    /// The child's setup of a command this sandbox prepared failed at `stage` with `errno` (nothing ran).
    /// `true` when that shows a mechanism of the plan does not work here after all (a namespace the machine
    /// refused since it was probed) and the sandbox has taken it out of every later plan: the caller prepares
    /// the command again, and the new plan decides (degraded, or refused naming the cause). `false` (the
    /// default): the failure is the caller's.
    fn replan_after_setup_failure(&self, stage: &str, errno: i32) -> bool {
        let _ = (stage, errno);
        false
    }
}
