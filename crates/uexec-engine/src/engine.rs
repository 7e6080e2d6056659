//! The engine: `exec_command` and `write_stdin` (spec A3, A6), the session tools (B7), shutdown.
//!
//! `exec_command` runs, in order: validate -> reserve an id -> approval (bypass / remembered / ask) -> choose
//! the sandbox -> spawn -> early-exit grace with the denial heuristic (maybe retry outside the sandbox) ->
//! store the live session -> collect the window -> respond. Every failure path releases the id, including a
//! caller that drops the future (a guard does it).

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use uexec_domain::approval::{
    ApprovalInput, ApprovalKey, AskReason, Requirement, RetryDecision, initial_requirement, no_retry_note,
    retry_after_denial, retry_question,
};
use uexec_domain::denial::denial_evidence;
use uexec_domain::env::build_env;
use uexec_domain::ids::chunk_id;
use uexec_domain::known_safe::NotKnownSafe;
use uexec_domain::limits::{
    EARLY_EXIT_GRACE_MS, MAX_ARG_STRLEN, clamp_exec_yield, clamp_write_yield, resolve_max_output_tokens,
};
use uexec_domain::response::session_count_warning;
use uexec_domain::rules::{PrefixRule, RuleDecision, session_prefix_offer};
use uexec_domain::snapshot::{SnapshotShell, capture_script, end_marker, parse_capture, render_bash};
use uexec_domain::startup::{GUARDED_DETAIL, guard_env};
use uexec_domain::truncate::truncate_segments;
use uexec_domain::{
    ApprovalPolicy, EscapeReason, ProtectionReport, ReviewDecision, SandboxPermissions, SandboxPolicy,
    SessionId,
};
use uexec_domain::{Protection, ProtectionStatus};
use uexec_ports::process::{IoMode, ProcessError, PtySize, Signal, SpawnError, SpawnRequest, SpawnedProcess};
use uexec_ports::{ApprovalKind, ApprovalRequest, ExecEvent};

use crate::api::{ExecCommandRequest, ExecResponse, SessionSummary, WriteStdinRequest};
use crate::collect::{Collected, Mark, collect};
use crate::config::{EngineConfig, EngineDeps};
use crate::error::ExecError;
use crate::known_safe::{known_safe_verdict, writable_dirs};
use crate::login::{CAPTURE_DEADLINE, CAPTURE_MAX_BYTES, SnapshotKey, Snapshots, log_startup_output};
use crate::placement::{self, Placement, SandboxContext, tmpdir_of};
use crate::session::{Session, SessionSpec};
use crate::store::Store;

/// How many times a sandboxed spawn is prepared when its setup finds a planned path gone (see
/// `Engine::place_and_spawn`): the first attempt and two more.
const SETUP_RACE_ATTEMPTS: u32 = 3;
use crate::trust::decide_shell_start;

/// The unified exec engine. Cheap to clone (all clones share one engine); `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    config: EngineConfig,
    deps: EngineDeps,
    store: Store,
    /// Remembered "approved for session" decisions.
    approvals: Mutex<HashSet<ApprovalKey>>,
    /// Prefixes a person approved for the session, each for the sandbox permissions it was asked with.
    prefixes: Mutex<Vec<(SandboxPermissions, Vec<String>)>>,
    /// The login snapshots (`crate::login`).
    snapshots: Snapshots,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    /// Last resort for an engine dropped without [`Engine::shutdown`]: SIGKILL every live process group.
    fn drop(&mut self) {
        for listed in self.store.list() {
            if listed.session.snapshot().exit_code.is_none() {
                let _ = listed.session.control.signal(Signal::Kill);
            }
        }
    }
}

/// What a response says besides the output: when its wall time starts, the live session, the warning, and
/// whether it reports the protections (an `exec_command` does; later calls on the session do not repeat them).
#[derive(Debug)]
struct Reply {
    started: Instant,
    session_id: Option<SessionId>,
    warning: Option<String>,
    protections: bool,
}

/// The outcome of the approval step.
#[derive(Debug)]
struct Approval {
    /// A person approved this call's command just now.
    by_person: bool,
    /// Set when the command's words are read-only but something it runs could have been planted by a sandboxed
    /// command (a writable repository's config, a `PATH` directory), saying what: a denial may be that planted
    /// program asking to be let out, so no earlier approval covers a retry outside the sandbox. Only worked out
    /// under `untrusted` here; under `on-failure` at the retry.
    plantable: Option<NotKnownSafe>,
    /// The command was approved to run outside the sandbox.
    escalate: bool,
    key: ApprovalKey,
}

/// Releases the reserved id when `exec_command` fails or is dropped before the session is stored; commits the
/// stored session (keeps it reachable) when the call is dropped mid-window.
struct Reservation<'a> {
    store: &'a Store,
    id: SessionId,
    session: Option<Arc<Session>>,
    done: bool,
}

impl Reservation<'_> {
    /// Store the session; refused once the engine shuts down.
    fn stored(&mut self, session: &Arc<Session>) -> Result<(), ExecError> {
        if !self.store.insert_provisional(Arc::clone(session)) {
            return Err(ExecError::ShuttingDown);
        }
        self.session = Some(Arc::clone(session));
        Ok(())
    }

    fn detached(&mut self, session: &Arc<Session>) {
        self.store.detach(session);
        self.session = None;
    }

    fn remove(&mut self, session: &Arc<Session>) {
        self.store.remove(session);
        self.session = None;
        self.done = true;
    }

    fn done(&mut self) {
        self.done = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        match &self.session {
            None => self.store.release(self.id),
            Some(session) => self.store.commit_quietly(session),
        }
    }
}

/// What could have been planted, when `verdict` says a command with read-only words is not known safe.
fn plantable_reason(verdict: &Result<(), NotKnownSafe>) -> Option<NotKnownSafe> {
    match verdict {
        Err(why) if *why != NotKnownSafe::NotReadOnly => Some(why.clone()),
        _ => None,
    }
}

fn seed_from_time_and_pid() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or_default();
    nanos ^ (u64::from(std::process::id()) << 40) ^ u64::from(std::process::id())
}

impl Engine {
    /// An engine with `config` talking to `deps`.
    pub fn new(config: EngineConfig, deps: EngineDeps) -> Self {
        let seed = config.id_seed.unwrap_or_else(seed_from_time_and_pid);
        let env = build_env(config.base_env.iter().cloned(), &config.env_policy);
        let snapshots = Snapshots::new(&config, &env);
        Engine {
            inner: Arc::new(Inner {
                snapshots,
                store: Store::new(seed),
                config,
                deps,
                approvals: Mutex::new(HashSet::new()),
                prefixes: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Run a command (spec A1 `exec_command`).
    pub async fn exec_command(&self, req: ExecCommandRequest) -> Result<ExecResponse, ExecError> {
        self.inner.exec_command(req).await
    }

    /// Write to (or poll) a session (spec A1 `write_stdin`).
    pub async fn write_stdin(&self, req: WriteStdinRequest) -> Result<ExecResponse, ExecError> {
        self.inner.write_stdin(req).await
    }

    /// What the sandbox enforces for a new command under the configured policy (no sandbox under
    /// `danger-full-access`).
    pub fn protections(&self) -> ProtectionReport {
        let policy = &self.inner.config.sandbox_policy;
        if *policy == SandboxPolicy::DangerFullAccess {
            ProtectionReport::unsandboxed(policy.mode_str(), EscapeReason::FullAccessPolicy)
        } else {
            self.inner.deps.sandbox.report(policy)
        }
    }

    /// Every session in the store, by id.
    pub async fn list_sessions(&self) -> Vec<SessionSummary> {
        self.inner.list_sessions()
    }

    /// Kill a session's process tree; returns its last output and exit code.
    pub async fn close_session(&self, id: SessionId) -> Result<ExecResponse, ExecError> {
        self.inner.close_session(id).await
    }

    /// The rendered 24x80 screen of a PTY session (spec B5).
    pub async fn screen(&self, id: SessionId) -> Result<String, ExecError> {
        let session = self.inner.store.get(id).ok_or(ExecError::UnknownSession(id))?;
        session.screen_contents().ok_or(ExecError::NoScreen(id))
    }

    /// Kill every session (idempotent). Each gets its `End` event.
    pub async fn shutdown(&self) {
        let sessions = self.inner.store.drain();
        let mut kills = tokio::task::JoinSet::new();
        for session in sessions {
            kills.spawn(async move { session.terminate().await });
        }
        while kills.join_next().await.is_some() {}
    }

    /// Number of session ids in use: stored sessions plus calls in progress (a capacity figure for a host's
    /// monitoring; `exec_command` fails with [`ExecError::TooManySessions`] when every id is in use). Every call
    /// releases the id it reserved when it ends without a live session, cancelled or failed.
    pub fn reserved_id_count(&self) -> usize {
        self.inner.store.reserved_count()
    }
}

impl Inner {
    fn approvals(&self) -> MutexGuard<'_, HashSet<ApprovalKey>> {
        self.approvals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_remembered(&self, key: &ApprovalKey) -> bool {
        self.approvals().contains(key)
    }

    /// Whether a prefix a person approved for the session admits `argv` run with `permissions`: the approved
    /// prefixes are added to the configured rules as `allow` rules, so a longer configured `ask` rule still
    /// asks, and a script is admitted only when every one of its commands is.
    fn prefix_admits(&self, argv: &[String], permissions: SandboxPermissions) -> bool {
        let prefixes = self.prefixes.lock().unwrap_or_else(PoisonError::into_inner);
        if !prefixes.iter().any(|(p, _)| *p == permissions) {
            return false;
        }
        let mut rules = self.config.rules.clone();
        rules.rules.extend(
            prefixes
                .iter()
                .filter(|(p, _)| *p == permissions)
                .map(|(_, prefix)| PrefixRule { prefix: prefix.clone(), decision: RuleDecision::Allow }),
        );
        rules.evaluate(argv) == Some(RuleDecision::Allow)
    }

    fn new_call_id(&self) -> String {
        format!("call_{:012x}", self.store.next_random() & 0xFFFF_FFFF_FFFF)
    }

    fn resolve_workdir(&self, workdir: Option<&Path>) -> Result<PathBuf, ExecError> {
        let path: PathBuf = match workdir {
            Some(dir) if !dir.as_os_str().is_empty() => self.config.cwd.join(dir),
            _ => self.config.cwd.clone(),
        };
        if path.to_string_lossy().contains('\0') {
            return Err(ExecError::NulByte { field: "workdir" });
        }
        let path: PathBuf = path.components().collect();
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => Ok(path),
            _ => Err(ExecError::Spawn(SpawnError::BadCwd { cwd: path })),
        }
    }

    /// When `argv` (`[shell, -c|-lc, script]`) is an `apply_patch` call and a patch program is configured: that
    /// program's argv with the patch (in pieces well under the kernel's 128 KiB limit on one argument) and the
    /// directory it runs in (`cwd`, or the script's `cd <dir>` under it).
    fn apply_patch_spawn(
        &self,
        argv: &[String],
        cwd: &Path,
    ) -> Result<Option<(Vec<OsString>, PathBuf)>, ExecError> {
        const PIECE: usize = 64 * 1024;
        let Some(program) = &self.config.apply_patch_program else { return Ok(None) };
        let [shell, _, script] = argv else { return Ok(None) };
        let shell_name = Path::new(shell).file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !matches!(shell_name, "bash" | "zsh" | "sh") {
            return Ok(None);
        }
        let Some(call) = uexec_domain::patch::shell_invocation(script) else {
            // A bare patch as the script would run its first line (`***`, a glob) as a command.
            if uexec_domain::patch::parse_patch(script).is_ok() {
                return Err(ExecError::BarePatch);
            }
            return Ok(None);
        };
        let dir = match &call.workdir {
            Some(dir) => self.resolve_workdir(Some(&cwd.join(dir)))?,
            None => cwd.to_path_buf(),
        };
        let mut spawn = program.clone();
        let mut rest = call.patch.as_str();
        while !rest.is_empty() {
            let mut end = rest.len().min(PIECE);
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            spawn.push(OsString::from(&rest[..end]));
            rest = &rest[end..];
        }
        tracing::info!(cwd = %dir.display(), bytes = call.patch.len(), "apply_patch call runs as the patch program");
        Ok(Some((spawn, dir)))
    }

    /// Ask a person; remembers "approved for session".
    async fn ask(&self, request: ApprovalRequest, key: &ApprovalKey) -> Result<(), ExecError> {
        match self.ask_decision(request, key).await {
            Ok(decision) if decision.is_approved() => Ok(()),
            Ok(_) => Err(ExecError::Rejected),
            Err(text) => Err(ExecError::ApprovalUnavailable(text)),
        }
    }

    /// Ask a person and return the decision (or why none could be had); remembers "approved for session".
    async fn ask_decision(
        &self,
        request: ApprovalRequest,
        key: &ApprovalKey,
    ) -> Result<ReviewDecision, String> {
        let call_id = request.call_id.clone();
        let prefix_offer = request.prefix_offer.clone();
        self.deps.events.emit(ExecEvent::ApprovalRequested { request: request.clone() });
        let answer = self.deps.approver.request_approval(request).await;
        match answer {
            Ok(decision) => {
                self.deps.events.emit(ExecEvent::ApprovalDecided {
                    call_id,
                    decision: Some(decision),
                    error: None,
                });
                if decision == ReviewDecision::ApprovedForSession {
                    self.approvals().insert(key.clone());
                }
                if decision == ReviewDecision::ApprovedPrefixForSession
                    && let Some(prefix) = prefix_offer
                {
                    tracing::info!(?prefix, "a person approved a command prefix for the session");
                    self.prefixes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((key.permissions, prefix));
                }
                Ok(decision)
            }
            Err(err) => {
                let text = err.to_string();
                self.deps.events.emit(ExecEvent::ApprovalDecided {
                    call_id,
                    decision: None,
                    error: Some(text.clone()),
                });
                Err(text)
            }
        }
    }

    /// Whether `argv` run in `cwd` with `env` is known safe (`Ok`): read-only words, and nothing it runs chosen
    /// by a file that a sandboxed command can write (`uexec_domain::known_safe`).
    async fn known_safe(
        &self,
        argv: &[String],
        cwd: &Path,
        env: &[(OsString, OsString)],
    ) -> Result<(), NotKnownSafe> {
        let tmpdir = tmpdir_of(env);
        let writable = writable_dirs(&self.config.sandbox_policy, &self.config.cwd, tmpdir.as_deref());
        known_safe_verdict(argv, cwd, env, writable).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn approve(
        &self,
        call_id: &str,
        id: SessionId,
        argv: &[String],
        cwd: &Path,
        env: &[(OsString, OsString)],
        tty: bool,
        permissions: SandboxPermissions,
        justification: Option<&str>,
        prefix_rule: Option<&[String]>,
    ) -> Result<Approval, ExecError> {
        let policy = self.config.approval_policy;
        let key = ApprovalKey::new(argv, cwd, tty, permissions);
        // Only `untrusted` consults it (and it costs a few file-system lookups).
        let verdict = match policy {
            ApprovalPolicy::Untrusted => self.known_safe(argv, cwd, env).await,
            _ => Err(NotKnownSafe::NotReadOnly),
        };
        let plantable = plantable_reason(&verdict);
        let input = ApprovalInput {
            policy,
            permissions,
            known_safe: verdict.is_ok(),
            rule: self.config.rules.evaluate(argv),
        };
        let reason = match initial_requirement(&input) {
            Requirement::Skip => {
                return Ok(Approval { by_person: false, escalate: false, plantable, key });
            }
            Requirement::Forbidden(text) => return Err(ExecError::Forbidden(text)),
            Requirement::EscalationNotAllowed => return Err(ExecError::EscalationNotAllowed(policy)),
            Requirement::Ask(reason) => reason,
        };
        let escalate = permissions == SandboxPermissions::RequireEscalated;
        if self.is_remembered(&key) || self.prefix_admits(argv, permissions) {
            return Ok(Approval { by_person: false, escalate, plantable, key });
        }
        if policy == ApprovalPolicy::Never {
            return Err(ExecError::Forbidden(format!(
                "the command needs approval ({}) but the approval policy is `never`; use approval policy \
                 `on-request` to be asked",
                reason.default_question()
            )));
        }
        let kind = if escalate { ApprovalKind::Escalation } else { ApprovalKind::Run };
        // The caller's justification is the question for an escalation only (spec: `justification`); for a run
        // that a command rule or the untrusted policy sends to a person, the engine's reason stays what is shown.
        let question = match (justification, &verdict) {
            (Some(text), _) if escalate => text.to_owned(),
            // Read-only words, but something it runs could have been planted: say what.
            (_, Err(why)) if reason == AskReason::Untrusted && *why != NotKnownSafe::NotReadOnly => format!(
                "this read-only command could run a program chosen by a file that sandboxed commands can write: \
                 {why} (approval policy untrusted); run it?"
            ),
            _ => reason.default_question().to_owned(),
        };
        let request = ApprovalRequest {
            call_id: call_id.to_owned(),
            session_id: id,
            command: argv.to_vec(),
            cwd: cwd.to_path_buf(),
            kind,
            reason: Some(question),
            prefix_offer: prefix_rule.and_then(|prefix| session_prefix_offer(prefix, argv)),
            denial: None,
        };
        self.ask(request, &key).await?;
        Ok(Approval { by_person: true, escalate, plantable, key })
    }

    /// Make `base` runnable under `placement` (see [`placement::place`], which `uexec run` calls too).
    fn place(
        &self,
        placement: Placement,
        base: SpawnRequest,
    ) -> Result<(SpawnRequest, ProtectionReport), ExecError> {
        let context = SandboxContext {
            sandbox: self.deps.sandbox.as_ref(),
            policy: &self.config.sandbox_policy,
            workspace: &self.config.cwd,
            allow_degraded: self.config.allow_degraded_sandbox,
            cache: self.config.sandbox_cache.as_deref(),
        };
        placement::place(context, placement, base).map_err(ExecError::Sandbox)
    }

    /// Whether a `login: true` command of `shell` with `env` and `permissions` starts without login, its login
    /// environment replayed from a snapshot (`crate::login`): bash, snapshots on, and a command that runs in the
    /// sandbox or under `danger-full-access` (an escalation keeps its login shell: its startup files run after
    /// the person's approval, not before). The snapshot for where the command will run is captured now.
    async fn login_snapshot(
        &self,
        shell: &str,
        env: &[(OsString, OsString)],
        permissions: SandboxPermissions,
    ) -> Option<SnapshotShell> {
        let kind = SnapshotShell::of(shell)?;
        if !self.snapshots.enabled() {
            return None;
        }
        let placement = Placement::for_policy(
            &self.config.sandbox_policy,
            permissions == SandboxPermissions::RequireEscalated,
        );
        if placement == Placement::Unsandboxed(EscapeReason::ApprovedEscalation) {
            return None;
        }
        self.snapshot_file(kind, shell, env, placement).await.map(|_| kind)
    }

    /// The snapshot file of `shell` for commands placed at `placement`, captured under that placement when
    /// missing or stale.
    async fn snapshot_file(
        &self,
        kind: SnapshotShell,
        shell: &str,
        env: &[(OsString, OsString)],
        placement: Placement,
    ) -> Option<PathBuf> {
        let key = SnapshotKey {
            shell: kind,
            shell_path: shell.to_owned(),
            sandboxed: placement == Placement::Sandboxed,
        };
        self.snapshots.get(&key, env, || self.capture_snapshot(&key, env, placement)).await
    }

    /// Run the login shell with the capture script under `placement` and render the snapshot file's text.
    async fn capture_snapshot(
        &self,
        key: &SnapshotKey,
        env: &[(OsString, OsString)],
        placement: Placement,
    ) -> Result<Vec<u8>, String> {
        let nonce = self.store.next_random();
        let base = SpawnRequest {
            argv: vec![
                OsString::from(&key.shell_path),
                OsString::from("-lc"),
                OsString::from(capture_script(key.shell, nonce)),
            ],
            cwd: self.config.cwd.clone(),
            env: env.to_vec(),
            mode: IoMode::Pipes,
            setup: Vec::new(),
            pid_scope: Default::default(),
        };
        let mut started_with = Vec::new();
        let (mut process, _) = self
            .place_and_spawn(placement, base, |spawn| started_with.clone_from(&spawn.env))
            .map_err(|e| e.to_string())?;
        // What the placement set (the sandbox's variables, its package caches) it sets again for every command.
        let last = |env: &[(OsString, OsString)], name: &OsString| {
            env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone())
        };
        let mut pinned: Vec<OsString> = started_with
            .iter()
            .map(|(name, _)| name)
            .filter(|name| last(&started_with, name) != last(env, name))
            .cloned()
            .collect();
        pinned.dedup();
        let end = end_marker(nonce);
        let mut output = Vec::new();
        let read = async {
            loop {
                match process.output.next_chunk().await {
                    Ok(Some(chunk)) => {
                        let from = output.len().saturating_sub(end.len());
                        output.extend_from_slice(&chunk);
                        if output[from..].windows(end.len()).any(|w| w == end.as_slice()) {
                            return Ok(());
                        }
                        if output.len() > CAPTURE_MAX_BYTES {
                            return Err(format!(
                                "the login shell printed more than {CAPTURE_MAX_BYTES} bytes"
                            ));
                        }
                    }
                    Ok(None) => return Ok(()),
                    Err(error) => return Err(error.to_string()),
                }
            }
        };
        let read = tokio::time::timeout(CAPTURE_DEADLINE, read).await;
        // Nothing the startup files started outlives the capture.
        let _ = process.control.kill_tree().await;
        match read {
            Ok(result) => result?,
            Err(_) => return Err(format!("the login shell took longer than {CAPTURE_DEADLINE:?}")),
        }
        let captured = parse_capture(&output, nonce).map_err(|e| e.to_string())?;
        log_startup_output(key, &captured.startup_output);
        let own = env.iter().rev().find(|(name, _)| name == key.shell.loader_var()).map(|(_, v)| v);
        Ok(render_bash(&captured, &started_with, &pinned, own, &self.config.env_policy))
    }

    /// `base` with the snapshot for `placement` as its shell's loader (`BASH_ENV`), when the command replays
    /// one (`snapshot`). A snapshot that cannot be had at this point (an unsandboxed retry whose capture
    /// failed) leaves the command without its login environment, logged.
    async fn with_snapshot(
        &self,
        snapshot: Option<SnapshotShell>,
        shell: &str,
        placement: Placement,
        mut base: SpawnRequest,
    ) -> SpawnRequest {
        let Some(kind) = snapshot else { return base };
        match self.snapshot_file(kind, shell, &base.env, placement).await {
            Some(path) => {
                base.env.retain(|(name, _)| name != kind.loader_var());
                base.env.push((OsString::from(kind.loader_var()), path.into_os_string()));
            }
            None => tracing::warn!(
                ?placement,
                "no login snapshot for this placement: the command runs without its login environment"
            ),
        }
        base
    }

    /// Place `base` and spawn it: [`Engine::place`], then the spawner.
    ///
    /// A sandbox plans its mounts from the file system as `prepare` saw it; a path of that plan that vanishes
    /// before the child mounts it (a directory another program removes from a shared `/tmp`) fails the child's
    /// setup with `ENOENT`, closed: nothing ran. Such a spawn is prepared again from the file system as it is now,
    /// at most [`SETUP_RACE_ATTEMPTS`] times in all; any other failure, or the same one again, is the caller's.
    /// `placed` sees each placed request right before it is spawned (the last call is the one that ran).
    fn place_and_spawn(
        &self,
        placement: Placement,
        base: SpawnRequest,
        mut placed: impl FnMut(&SpawnRequest),
    ) -> Result<(SpawnedProcess, ProtectionReport), ExecError> {
        let mut attempt = 1;
        loop {
            let (spawn, report) = self.place(placement, base.clone())?;
            placed(&spawn);
            match blocking(|| self.deps.spawner.spawn(spawn)) {
                Ok(process) => return Ok((process, report)),
                Err(SpawnError::ChildSetup { stage, errno })
                    if placement == Placement::Sandboxed
                        && attempt < SETUP_RACE_ATTEMPTS
                        && std::io::Error::from_raw_os_error(errno).kind()
                            == std::io::ErrorKind::NotFound =>
                {
                    tracing::debug!(
                        stage,
                        attempt,
                        "sandbox setup found a planned path gone; preparing again"
                    );
                    attempt += 1;
                }
                Err(error) => return Err(ExecError::Spawn(error)),
            }
        }
    }

    /// Place and spawn one attempt, emit `Begin`, start its tasks.
    fn start_attempt(
        &self,
        spec: &SessionSpec,
        placement: Placement,
        base: SpawnRequest,
    ) -> Result<Arc<Session>, ExecError> {
        let mut argv = Vec::new();
        let (process, mut report) = self.place_and_spawn(placement, base, |spawn| {
            argv = spawn.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        })?;
        if spec.startup_guarded {
            report.protections.push(Protection {
                name: "login_startup_files".to_owned(),
                status: ProtectionStatus::Enforced,
                detail: GUARDED_DETAIL.to_owned(),
            });
        }
        self.deps.events.emit(ExecEvent::Begin {
            call_id: spec.call_id.clone(),
            session_id: spec.id,
            command: spec.command.clone(),
            argv,
            cwd: spec.cwd.clone(),
            tty: spec.tty,
            protections: report.clone(),
        });
        Ok(Session::start(spec.clone(), report, process, Arc::clone(&self.deps.events)))
    }

    async fn exec_command(&self, req: ExecCommandRequest) -> Result<ExecResponse, ExecError> {
        if req.cmd.trim().is_empty() {
            return Err(ExecError::MissingCommand);
        }
        if req.cmd.contains('\0') {
            return Err(ExecError::NulByte { field: "cmd" });
        }
        let cwd = self.resolve_workdir(req.workdir.as_deref())?;
        let shell = req
            .shell
            .clone()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| self.config.default_shell.clone());
        // A login shell reads startup files a sandboxed command may have written: see uexec_domain::startup.
        let login_requested = req.login.unwrap_or(true);
        let env = build_env(self.config.base_env.iter().cloned(), &self.config.env_policy);
        let requested =
            [shell.clone(), if login_requested { "-lc" } else { "-c" }.to_owned(), req.cmd.clone()];
        let start =
            decide_shell_start(&self.config, &requested, login_requested, req.sandbox_permissions, &env);
        let env = if start.guarded { guard_env(env, &shell) } else { env };
        let call_id = req.call_id.clone().unwrap_or_else(|| self.new_call_id());
        let limits = &self.config.limits;
        // Validated before anything is reserved or asked, like the rest of the call.
        let patch_call = self.apply_patch_spawn(&requested, &cwd)?;
        // The shell gets `cmd` as one argument (an apply_patch call goes in pieces to the patch program).
        if patch_call.is_none() && req.cmd.len() >= MAX_ARG_STRLEN {
            return Err(ExecError::CommandTooLong { bytes: req.cmd.len(), max: MAX_ARG_STRLEN });
        }

        // A login shell whose environment can be replayed from a snapshot starts without login: decided (and the
        // snapshot captured) before the question, so the argv a person approves is the argv that runs.
        let snapshot = match patch_call {
            None if start.login => self.login_snapshot(&shell, &env, req.sandbox_permissions).await,
            _ => None,
        };
        let flag = if start.login && snapshot.is_none() { "-lc" } else { "-c" };
        let argv = vec![shell.clone(), flag.to_owned(), req.cmd.clone()];

        let id = self.store.reserve()?;
        let mut reservation = Reservation { store: &self.store, id, session: None, done: false };

        let approval = self
            .approve(
                &call_id,
                id,
                &argv,
                &cwd,
                &env,
                req.tty,
                req.sandbox_permissions,
                req.justification.as_deref(),
                req.prefix_rule.as_deref(),
            )
            .await?;
        let placement = Placement::for_policy(&self.config.sandbox_policy, approval.escalate);
        // An `apply_patch` call runs as the configured patch program: approved, placed and audited as the
        // command line it came as.
        let (spawn_argv, spawn_cwd, tty) = match patch_call {
            Some((program, dir)) => (program, dir, false),
            None => (argv.iter().map(OsString::from).collect(), cwd.clone(), req.tty),
        };
        let base = SpawnRequest {
            argv: spawn_argv,
            cwd: spawn_cwd,
            env,
            mode: if tty { IoMode::Pty(PtySize::default()) } else { IoMode::Pipes },
            setup: Vec::new(),
            pid_scope: Default::default(),
        };
        let spec = SessionSpec {
            id,
            call_id: call_id.clone(),
            command: argv,
            cmd: req.cmd.clone(),
            cwd,
            tty: req.tty,
            buffer_bytes: limits.output_buffer_bytes,
            startup_guarded: start.guarded,
            input_backlog_bytes: limits.max_write_bytes,
        };
        let first = self.with_snapshot(snapshot, &shell, placement, base.clone()).await;
        // The window counts from here, not from the spawn's end: under load a spawn waits for the spawner, and
        // that wait is part of the caller's window (`RELIABILITY.md`, load).
        let window_start = Instant::now();
        let mut session = self.start_attempt(&spec, placement, first)?;
        let mut call_guard = Arc::clone(&session.call_lock).lock_owned().await;
        if let Err(error) = reservation.stored(&session) {
            session.terminate().await;
            return Err(error);
        }

        let window = Duration::from_millis(clamp_exec_yield(req.yield_time_ms, limits));
        let mut deadline = window_start + window;
        // Set when a sandbox denial is not retried outside the sandbox: returned with the sandboxed output.
        let mut note = None;
        let policy = self.config.approval_policy;
        if placement == Placement::Sandboxed
            && retry_after_denial(policy, false, false) != RetryDecision::NoRetry
        {
            let grace_end = (session.started + Duration::from_millis(EARLY_EXIT_GRACE_MS)).min(deadline);
            if session.wait_finished(grace_end).await {
                let exit_code = session.snapshot().exit_code.unwrap_or(-1);
                let evidence = denial_evidence(exit_code, &session.peek_output());
                let plantable = match (&approval.plantable, &evidence) {
                    (Some(why), _) => Some(why.clone()),
                    (None, Some(_)) if policy == ApprovalPolicy::OnFailure => {
                        plantable_reason(&self.known_safe(&spec.command, &spec.cwd, &base.env).await)
                    }
                    (None, _) => None,
                };
                let decision = retry_after_denial(
                    policy,
                    approval.by_person && plantable.is_none(),
                    plantable.is_none() && self.is_remembered(&approval.key),
                );
                if let Some(evidence) = evidence
                    && decision != RetryDecision::NoRetry
                {
                    tracing::info!(session_id = %id, exit_code, "sandbox denial detected within the grace");
                    // Leaving the sandbox is a decision about this command: unless a person already approved it
                    // (the run question said a retry follows), a person approves this retry, shown the denial
                    // and told it runs with full access. A command only admitted as known safe always asks.
                    let retry = match decision {
                        RetryDecision::AskThenRetry => {
                            let request = ApprovalRequest {
                                call_id: call_id.clone(),
                                session_id: id,
                                command: spec.command.clone(),
                                cwd: spec.cwd.clone(),
                                kind: ApprovalKind::RetryWithoutSandbox,
                                reason: Some(match &plantable {
                                    Some(why) => format!(
                                        "{} Beware: {why}, so the denial may come from a program planted there.",
                                        retry_question(&evidence)
                                    ),
                                    None => retry_question(&evidence),
                                }),
                                denial: Some(evidence.clone()),
                                prefix_offer: None,
                            };
                            match self.ask_decision(request, &approval.key).await {
                                Ok(answer) if answer.is_approved() => true,
                                // "Stop the task": the call fails as a rejection.
                                Ok(ReviewDecision::Abort) => {
                                    reservation.remove(&session);
                                    return Err(ExecError::Rejected);
                                }
                                // The command ran: its output is returned, with what happened to the retry.
                                Ok(_) => {
                                    note = Some(no_retry_note(
                                        &evidence,
                                        "a person declined to run it without the sandbox",
                                    ));
                                    false
                                }
                                Err(text) => {
                                    note = Some(no_retry_note(&evidence, &text));
                                    false
                                }
                            }
                        }
                        RetryDecision::RetryWithoutAsking | RetryDecision::NoRetry => true,
                    };
                    if retry {
                        reservation.detached(&session);
                        drop(call_guard);
                        let outside = Placement::Unsandboxed(EscapeReason::RetryAfterDenial);
                        let retry_spawn = self.with_snapshot(snapshot, &shell, outside, base).await;
                        session = self.start_attempt(&spec, outside, retry_spawn)?;
                        call_guard = Arc::clone(&session.call_lock).lock_owned().await;
                        if let Err(error) = reservation.stored(&session) {
                            session.terminate().await;
                            return Err(error);
                        }
                        deadline = session.started + window;
                    }
                }
            }
        }

        let mark = Mark { at: session.started, output_seq: 0 };
        let collected = collect(&session, mark, deadline).await;
        let (session_id, warning) = if collected.exit_code.is_some() {
            reservation.remove(&session);
            (None, note)
        } else {
            let (pruned, live) = self.store.commit(&session, limits.max_sessions);
            reservation.done();
            for victim in pruned {
                tracing::info!(session_id = %victim.spec.id, "pruning the least recently used session");
                victim.terminate().await;
            }
            let warning = match (note, session_count_warning(live, limits)) {
                (Some(note), Some(count)) => Some(format!("{note} {count}")),
                (note, count) => note.or(count),
            };
            (Some(id), warning)
        };
        drop(call_guard);
        // Wall time counts from the spawn of the process whose output this is (as the reference does), not
        // from the call's start: time spent waiting for a person's approval is not the command's.
        let reply = Reply { started: session.started, session_id, warning, protections: true };
        Ok(self.respond(reply, &session, collected, req.max_output_tokens))
    }

    async fn write_stdin(&self, req: WriteStdinRequest) -> Result<ExecResponse, ExecError> {
        let started = Instant::now();
        let limits = &self.config.limits;
        let id = req.session_id;
        let session = self.store.touch(id).ok_or(ExecError::UnknownSession(id))?;
        if req.chars.len() > limits.max_write_bytes {
            return Err(ExecError::WriteTooLarge { bytes: req.chars.len(), max: limits.max_write_bytes });
        }
        let _call_guard = Arc::clone(&session.call_lock).lock_owned().await;
        if session.is_removed() {
            return Err(ExecError::UnknownSession(id));
        }
        let mark = Mark::now(&session);
        let window =
            Duration::from_millis(clamp_write_yield(req.yield_time_ms, req.chars.is_empty(), limits));
        let deadline = mark.at + window;
        if !req.chars.is_empty() {
            if session.spec.tty {
                // A process that does not read its terminal must not hold this call past its window.
                match session.write_input(req.chars.as_bytes().to_vec(), deadline).await? {
                    None | Some(Ok(()) | Err(ProcessError::Exited)) => {}
                    Some(Err(ProcessError::StdinClosed)) => return Err(ExecError::StdinClosed),
                    Some(Err(err)) => return Err(ExecError::WriteFailed(err)),
                }
            } else if req.chars.chars().all(|c| c == '\u{3}') {
                match session.control.signal(Signal::Interrupt) {
                    Ok(()) | Err(ProcessError::Exited) => {}
                    Err(err) => return Err(ExecError::InterruptFailed(err)),
                }
            } else {
                return Err(ExecError::StdinClosed);
            }
        }
        self.deps.events.emit(ExecEvent::TerminalInteraction {
            call_id: session.spec.call_id.clone(),
            session_id: id,
            chars: req.chars.clone(),
        });
        let collected = collect(&session, mark, deadline).await;
        let session_id = if collected.exit_code.is_some() {
            self.store.remove(&session);
            None
        } else {
            Some(id)
        };
        let warning = session_count_warning(self.store.len(), limits);
        let reply = Reply { started, session_id, warning, protections: false };
        Ok(self.respond(reply, &session, collected, req.max_output_tokens))
    }

    fn list_sessions(&self) -> Vec<SessionSummary> {
        self.store
            .list()
            .into_iter()
            .map(|listed| {
                let session = listed.session;
                SessionSummary {
                    session_id: session.spec.id,
                    command: session.spec.command.clone(),
                    cmd: session.spec.cmd.clone(),
                    tty: session.spec.tty,
                    age: session.started.elapsed(),
                    idle: listed.last_used_at.elapsed(),
                    state: session.state(),
                    sandbox: session.protections.sandbox,
                    protections: session.protections.clone(),
                }
            })
            .collect()
    }

    async fn close_session(&self, id: SessionId) -> Result<ExecResponse, ExecError> {
        let started = Instant::now();
        let session = self.store.remove_id(id).ok_or(ExecError::UnknownSession(id))?;
        let exit_code = session.terminate().await;
        let output = session.take_output();
        let collected = Collected { output, exit_code: Some(exit_code), waiting_for_input: false };
        let reply = Reply { started, session_id: None, warning: None, protections: false };
        Ok(self.respond(reply, &session, collected, None))
    }

    /// Whether an `exec_command` response reports `report`: always with `report_protections`, and otherwise when
    /// it is news the server's instructions did not already give: a command that ran outside the sandbox after an
    /// approval or a denial, or a sandbox that is not fully enforced.
    fn reports(&self, report: &ProtectionReport) -> bool {
        self.config.report_protections
            || report.is_degraded()
            || matches!(
                report.escape_reason,
                Some(EscapeReason::ApprovedEscalation | EscapeReason::RetryAfterDenial)
            )
    }

    fn respond(
        &self,
        reply: Reply,
        session: &Session,
        collected: Collected,
        max_output_tokens: Option<usize>,
    ) -> ExecResponse {
        let Reply { started, session_id, warning, protections } = reply;
        let max_tokens = resolve_max_output_tokens(max_output_tokens, &self.config.limits);
        // Cut straight from the buffer's chunks: the output is never copied whole.
        let dropped = collected.output.dropped();
        let truncated =
            collected.output.with_segments(|segments| truncate_segments(segments, max_tokens, dropped));
        ExecResponse {
            chunk_id: chunk_id(self.store.next_random()),
            wall_time: started.elapsed(),
            exit_code: collected.exit_code,
            session_id,
            original_token_count: truncated.original_token_count,
            output: truncated.text,
            waiting_for_input: collected.waiting_for_input,
            warning,
            protections: (protections && self.reports(&session.protections))
                .then(|| session.protections.clone()),
        }
    }
}

/// Run `work`, which blocks (a spawn waits for the spawner's thread and the child's setup), without holding up
/// the runtime's other tasks: on a multi-threaded runtime this worker hands its other tasks to the rest first
/// (`block_in_place`), so that a burst of spawns does not stall the output readers and the calls already
/// running; elsewhere it simply runs.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|handle| handle.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}
