//! Where a command runs: in the sandbox (writable roots from the workspace and `$TMPDIR`), or outside it for a
//! named reason. One decision for every caller: the engine's `exec_command` and the app's `uexec run` both call
//! [`place`], so the two cannot drift (which `TMPDIR` counts, which directory is the workspace).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use uexec_domain::caches::with_cache_vars;
use uexec_domain::{EscapeReason, ProtectionReport, SandboxPolicy};
use uexec_ports::process::SpawnRequest;
use uexec_ports::{Sandbox, SandboxError, SandboxLease, SandboxRequest};

/// Whether a command runs in the sandbox, or outside it for an explicit reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// In the sandbox the policy describes.
    Sandboxed,
    /// The only way to run without a sandbox: every use names its reason, and is logged.
    Unsandboxed(EscapeReason),
}

impl Placement {
    /// Where `policy` puts a command: outside the sandbox under `danger-full-access`, or when a person approved
    /// running it outside (`escalated`); in the sandbox otherwise.
    pub fn for_policy(policy: &SandboxPolicy, escalated: bool) -> Placement {
        if policy.is_unrestricted() {
            Placement::Unsandboxed(EscapeReason::FullAccessPolicy)
        } else if escalated {
            Placement::Unsandboxed(EscapeReason::ApprovedEscalation)
        } else {
            Placement::Sandboxed
        }
    }
}

/// What the sandbox needs besides the command: the policy, the workspace whose directory is the writable "cwd"
/// root (the server's or `uexec run`'s working directory, never a command's `workdir`: a workdir grants nothing),
/// and whether degraded protection is accepted.
#[derive(Clone, Copy)]
pub struct SandboxContext<'a> {
    /// The sandbox adapter of this platform.
    pub sandbox: &'a dyn Sandbox,
    /// The policy in force.
    pub policy: &'a SandboxPolicy,
    /// The workspace (the writable "cwd" root).
    pub workspace: &'a Path,
    /// Accept protections that are partial or off instead of refusing.
    pub allow_degraded: bool,
    /// The sandbox's own package-cache directory (`uexec_domain::caches`): used when it is one of the
    /// policy's writable roots under `workspace-write`.
    pub cache: Option<&'a Path>,
}

impl std::fmt::Debug for SandboxContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxContext")
            .field("sandbox", &self.sandbox.kind())
            .field("policy", &self.policy.mode_str())
            .field("workspace", &self.workspace)
            .field("allow_degraded", &self.allow_degraded)
            .field("cache", &self.cache)
            .finish()
    }
}

/// Make `base` runnable under `placement`: the sandbox transforms it (its `$TMPDIR` is the last non-empty
/// `TMPDIR` of `base.env`, the one the command sees), or it runs as is for the named reason, logged. The lease is
/// the caller's to pass to [`Sandbox::finish`] once the command's process tree is gone or it was not spawned
/// ([`SandboxLease::NONE`] when unsandboxed).
pub fn place(
    context: SandboxContext<'_>,
    placement: Placement,
    base: SpawnRequest,
) -> Result<(SpawnRequest, ProtectionReport, SandboxLease), SandboxError> {
    match placement {
        Placement::Unsandboxed(reason) => {
            let argv: Vec<_> = base.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
            match reason {
                EscapeReason::FullAccessPolicy => {
                    tracing::info!(?argv, ?reason, "running without a sandbox (danger-full-access policy)");
                }
                EscapeReason::ApprovedEscalation | EscapeReason::RetryAfterDenial => {
                    tracing::warn!(?argv, ?reason, "running outside the sandbox");
                }
            }
            Ok((base, ProtectionReport::unsandboxed(context.policy.mode_str(), reason), SandboxLease::NONE))
        }
        Placement::Sandboxed => {
            let mut base = base;
            if let Some(root) = sandbox_cache(&context) {
                let network = context.policy.has_network_access();
                base.env = with_cache_vars(base.env, root, network, &|dir| dir.is_dir());
            }
            let tmpdir = tmpdir_of(&base.env);
            let request = SandboxRequest {
                spawn: base,
                workspace: context.workspace.to_path_buf(),
                policy: context.policy.clone(),
                tmpdir,
                allow_degraded: context.allow_degraded,
            };
            let sandboxed = context.sandbox.prepare(request)?;
            Ok((sandboxed.spawn, sandboxed.report, sandboxed.lease))
        }
    }
}

/// The sandbox's package-cache root, when the policy makes it writable for sandboxed commands
/// (`workspace-write` with it among the writable roots): only then do package managers get pointed at it.
fn sandbox_cache<'a>(context: &SandboxContext<'a>) -> Option<&'a Path> {
    let root = context.cache?;
    match context.policy {
        SandboxPolicy::WorkspaceWrite { writable_roots, .. } if writable_roots.iter().any(|r| r == root) => {
            Some(root)
        }
        _ => None,
    }
}

/// The `$TMPDIR` a command with environment `env` sees: the last `TMPDIR` entry (later entries override earlier
/// ones, as in the engine's environment building), unless it is empty.
pub(crate) fn tmpdir_of(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    env.iter()
        .rev()
        .find(|(name, _)| name == "TMPDIR")
        .map(|(_, value)| PathBuf::from(value))
        .filter(|path| !path.as_os_str().is_empty())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::sync::{Arc, Mutex};

    use uexec_domain::SandboxKind;
    use uexec_ports::SandboxedSpawn;
    use uexec_ports::process::IoMode;

    use super::*;

    /// A sandbox that records the requests it prepares.
    #[derive(Debug, Default)]
    struct Recording {
        requests: Mutex<Vec<SandboxRequest>>,
    }

    impl Sandbox for Recording {
        fn kind(&self) -> SandboxKind {
            SandboxKind::None
        }

        fn report(&self, policy: &SandboxPolicy) -> ProtectionReport {
            ProtectionReport::unsandboxed(policy.mode_str(), EscapeReason::FullAccessPolicy)
        }

        fn prepare(&self, request: SandboxRequest) -> Result<SandboxedSpawn, SandboxError> {
            let spawn = request.spawn.clone();
            let report = self.report(&request.policy);
            self.requests.lock().unwrap().push(request);
            Ok(SandboxedSpawn { spawn, report, lease: SandboxLease::NONE })
        }
    }

    fn request(env: &[(&str, &str)]) -> SpawnRequest {
        SpawnRequest {
            argv: vec!["true".into()],
            cwd: "/work/sub".into(),
            env: env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect(),
            mode: IoMode::Pipes,
            setup: Vec::new(),
            pid_scope: Default::default(),
        }
    }

    fn placed(env: &[(&str, &str)]) -> SandboxRequest {
        let sandbox = Arc::new(Recording::default());
        let policy = SandboxPolicy::default();
        let context = SandboxContext {
            sandbox: sandbox.as_ref(),
            policy: &policy,
            workspace: Path::new("/work"),
            allow_degraded: false,
            cache: None,
        };
        place(context, Placement::Sandboxed, request(env)).unwrap();
        sandbox.requests.lock().unwrap().pop().unwrap()
    }

    #[test]
    fn the_last_non_empty_tmpdir_is_the_writable_one() {
        assert_eq!(placed(&[("TMPDIR", "/a"), ("TMPDIR", "/b")]).tmpdir, Some(PathBuf::from("/b")));
        assert_eq!(placed(&[("TMPDIR", "/a"), ("TMPDIR", "")]).tmpdir, None);
        assert_eq!(placed(&[("TMPDIR", "")]).tmpdir, None);
        assert_eq!(placed(&[("PATH", "/bin")]).tmpdir, None);
    }

    #[test]
    fn package_caches_point_at_the_sandbox_cache_only_when_it_is_a_writable_root() {
        let sandbox = Recording::default();
        let env_of = |policy: &SandboxPolicy, placement: Placement| {
            let context = SandboxContext {
                sandbox: &sandbox,
                policy,
                workspace: Path::new("/work"),
                allow_degraded: false,
                cache: Some(Path::new("/state/cache")),
            };
            let (spawn, _, _) =
                place(context, placement, request(&[("npm_config_cache", "/home/me/.npm")])).unwrap();
            spawn.env.iter().rev().find(|(n, _)| n == "npm_config_cache").map(|(_, v)| v.clone())
        };
        let with_root = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![PathBuf::from("/state/cache")],
            network_access: false,
            exclude_slash_tmp: false,
            exclude_tmpdir_env_var: false,
        };
        assert_eq!(env_of(&with_root, Placement::Sandboxed), Some("/state/cache/npm".into()));
        // Outside the sandbox, the person's own cache: nothing a sandboxed command wrote is read there.
        let outside = Placement::Unsandboxed(EscapeReason::ApprovedEscalation);
        assert_eq!(env_of(&with_root, outside), Some("/home/me/.npm".into()));
        // Not a writable root (read-only, or not listed): the person's cache, read-only.
        assert_eq!(env_of(&SandboxPolicy::default(), Placement::Sandboxed), Some("/home/me/.npm".into()));
        let read_only = SandboxPolicy::ReadOnly { network_access: false };
        assert_eq!(env_of(&read_only, Placement::Sandboxed), Some("/home/me/.npm".into()));
    }

    #[test]
    fn the_workspace_not_the_commands_cwd_is_the_writable_root() {
        let request = placed(&[]);
        assert_eq!(request.workspace, PathBuf::from("/work"));
        assert_eq!(request.spawn.cwd, PathBuf::from("/work/sub"));
        assert!(!request.allow_degraded);
    }

    #[test]
    fn full_access_and_escalation_run_outside_with_their_reason_and_never_ask_the_sandbox() {
        assert_eq!(
            Placement::for_policy(&SandboxPolicy::DangerFullAccess, false),
            Placement::Unsandboxed(EscapeReason::FullAccessPolicy)
        );
        assert_eq!(
            Placement::for_policy(&SandboxPolicy::default(), true),
            Placement::Unsandboxed(EscapeReason::ApprovedEscalation)
        );
        assert_eq!(Placement::for_policy(&SandboxPolicy::default(), false), Placement::Sandboxed);
        let sandbox = Recording::default();
        let policy = SandboxPolicy::DangerFullAccess;
        let context = SandboxContext {
            sandbox: &sandbox,
            policy: &policy,
            workspace: Path::new("/"),
            allow_degraded: false,
            cache: Some(Path::new("/")),
        };
        let placement = Placement::for_policy(&policy, false);
        let (spawn, report, _) = place(context, placement, request(&[])).unwrap();
        assert_eq!(spawn.argv, vec![OsString::from("true")]);
        assert_eq!(report.escape_reason, Some(EscapeReason::FullAccessPolicy));
        assert!(sandbox.requests.lock().unwrap().is_empty());
    }
}
