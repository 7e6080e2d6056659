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
    ApprovalInput, ApprovalKey, RETRY_QUESTION, Requirement, RetryDecision, initial_requirement,
    retry_after_denial,
};
use uexec_domain::command::is_known_safe_command;
use uexec_domain::denial::is_likely_sandbox_denied;
use uexec_domain::env::build_env;
use uexec_domain::ids::chunk_id;
use uexec_domain::limits::{
    EARLY_EXIT_GRACE_MS, MAX_ARG_STRLEN, clamp_exec_yield, clamp_write_yield, resolve_max_output_tokens,
};
use uexec_domain::protection::{Protection, ProtectionStatus};
use uexec_domain::response::session_count_warning;
use uexec_domain::rules::{PrefixRule, RuleDecision, session_prefix_offer};
use uexec_domain::startup::{GUARDED_DETAIL, guard_env};
use uexec_domain::truncate::truncate_output_with_dropped;
use uexec_domain::{
    ApprovalPolicy, EscapeReason, ProtectionReport, ReviewDecision, SandboxPermissions, SandboxPolicy,
    SessionId,
};
use uexec_ports::{
    ApprovalKind, ApprovalRequest, ExecEvent, IoMode, ProcessError, PtySize, SandboxRequest, Signal,
    SpawnError, SpawnRequest,
};

use crate::api::{ExecCommandRequest, ExecResponse, SessionSummary, WriteStdinRequest};
use crate::collect::{Collected, Mark, collect};
use crate::config::{EngineConfig, EngineDeps};
use crate::error::ExecError;
use crate::session::{Session, SessionSpec};
use crate::store::Store;
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

/// Whether a command runs in the sandbox, or outside it for an explicit reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    Sandboxed,
    /// The only way to run without a sandbox: every use names its reason, and is logged.
    Unsandboxed(EscapeReason),
}

/// The outcome of the approval step.
#[derive(Debug)]
struct Approval {
    /// A person approved this call's command just now.
    by_person: bool,
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

fn seed_from_time_and_pid() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or_default();
    nanos ^ (u64::from(std::process::id()) << 40) ^ u64::from(std::process::id())
}

impl Engine {
    /// An engine with `config` talking to `deps`.
    pub fn new(config: EngineConfig, deps: EngineDeps) -> Self {
        let seed = config.id_seed.unwrap_or_else(seed_from_time_and_pid);
        Engine {
            inner: Arc::new(Inner {
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
        session.screen_contents().ok_or_else(|| {
            ExecError::InvalidInput(format!(
                "session {id} has no terminal (it was started with tty=false), so it has no screen"
            ))
        })
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

    /// Number of ids currently reserved (stored sessions plus calls in progress).
    #[doc(hidden)]
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
            return Err(ExecError::InvalidInput("workdir contains a NUL byte".to_owned()));
        }
        let path: PathBuf = path.components().collect();
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => Ok(path),
            _ => Err(ExecError::Spawn(SpawnError::BadCwd { cwd: path })),
        }
    }

    /// Ask a person; remembers "approved for session".
    async fn ask(&self, request: ApprovalRequest, key: &ApprovalKey) -> Result<(), ExecError> {
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
                match decision {
                    ReviewDecision::Approved => Ok(()),
                    ReviewDecision::ApprovedForSession => {
                        self.approvals().insert(key.clone());
                        Ok(())
                    }
                    ReviewDecision::ApprovedPrefixForSession => {
                        if let Some(prefix) = prefix_offer {
                            tracing::info!(?prefix, "a person approved a command prefix for the session");
                            self.prefixes
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push((key.permissions, prefix));
                        }
                        Ok(())
                    }
                    ReviewDecision::Denied | ReviewDecision::Abort => Err(ExecError::Rejected),
                }
            }
            Err(err) => {
                let text = err.to_string();
                self.deps.events.emit(ExecEvent::ApprovalDecided {
                    call_id,
                    decision: None,
                    error: Some(text.clone()),
                });
                Err(ExecError::ApprovalUnavailable(text))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn approve(
        &self,
        call_id: &str,
        id: SessionId,
        argv: &[String],
        cwd: &Path,
        tty: bool,
        permissions: SandboxPermissions,
        justification: Option<&str>,
        prefix_rule: Option<&[String]>,
    ) -> Result<Approval, ExecError> {
        let policy = self.config.approval_policy;
        let key = ApprovalKey::new(argv, cwd, tty, permissions);
        let input = ApprovalInput {
            policy,
            permissions,
            known_safe: is_known_safe_command(argv),
            rule: self.config.rules.evaluate(argv),
        };
        let reason = match initial_requirement(&input) {
            Requirement::Skip => return Ok(Approval { by_person: false, escalate: false, key }),
            Requirement::Forbidden(text) => return Err(ExecError::Forbidden(text)),
            Requirement::EscalationNotAllowed => return Err(ExecError::EscalationNotAllowed(policy)),
            Requirement::Ask(reason) => reason,
        };
        let escalate = permissions == SandboxPermissions::RequireEscalated;
        if self.is_remembered(&key) || self.prefix_admits(argv, permissions) {
            return Ok(Approval { by_person: false, escalate, key });
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
        let question = match justification {
            Some(text) if escalate => text.to_owned(),
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
        };
        self.ask(request, &key).await?;
        Ok(Approval { by_person: true, escalate, key })
    }

    /// Make `base` runnable under `placement`: the sandbox transforms it, or it runs as is for a named reason.
    fn place(
        &self,
        placement: Placement,
        base: SpawnRequest,
    ) -> Result<(SpawnRequest, ProtectionReport), ExecError> {
        let policy = &self.config.sandbox_policy;
        match placement {
            Placement::Unsandboxed(reason) => {
                let argv: Vec<_> = base.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
                match reason {
                    EscapeReason::FullAccessPolicy => {
                        tracing::info!(
                            ?argv,
                            ?reason,
                            "running without a sandbox (danger-full-access policy)"
                        );
                    }
                    EscapeReason::ApprovedEscalation | EscapeReason::RetryAfterDenial => {
                        tracing::warn!(?argv, ?reason, "running outside the sandbox");
                    }
                }
                Ok((base, ProtectionReport::unsandboxed(policy.mode_str(), reason)))
            }
            Placement::Sandboxed => {
                let tmpdir = base
                    .env
                    .iter()
                    .rev()
                    .find(|(name, _)| name == "TMPDIR")
                    .map(|(_, value)| PathBuf::from(value))
                    .filter(|p| !p.as_os_str().is_empty());
                let request = SandboxRequest {
                    spawn: base,
                    // The workspace, not the command's workdir: a workdir grants no write access.
                    workspace: self.config.cwd.clone(),
                    policy: policy.clone(),
                    tmpdir,
                    allow_degraded: self.config.allow_degraded_sandbox,
                };
                let sandboxed = self.deps.sandbox.prepare(request).map_err(ExecError::Sandbox)?;
                Ok((sandboxed.spawn, sandboxed.report))
            }
        }
    }

    /// Spawn one attempt, emit `Begin`, start its tasks.
    fn start_attempt(
        &self,
        spec: &SessionSpec,
        spawn: SpawnRequest,
        mut report: ProtectionReport,
    ) -> Result<Arc<Session>, ExecError> {
        if spec.startup_guarded {
            report.protections.push(Protection {
                name: "login_startup_files".to_owned(),
                status: ProtectionStatus::Enforced,
                detail: GUARDED_DETAIL.to_owned(),
            });
        }
        let argv = spawn.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let process = self.deps.spawner.spawn(spawn).map_err(ExecError::Spawn)?;
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
        let started = Instant::now();
        if req.cmd.trim().is_empty() {
            return Err(ExecError::MissingCommand);
        }
        if req.cmd.contains('\0') {
            return Err(ExecError::InvalidInput("cmd contains a NUL byte".to_owned()));
        }
        if req.cmd.len() >= MAX_ARG_STRLEN {
            return Err(ExecError::InvalidInput(format!(
                "cmd is {} bytes, over the kernel's limit for one argument (MAX_ARG_STRLEN: {MAX_ARG_STRLEN} bytes \
                 including its terminating NUL); cmd is passed to the shell as one argument, so nothing was run. \
                 Write the script to a file in smaller pieces (or through write_stdin to `cat > script.sh` in a \
                 tty session) and run the file",
                req.cmd.len()
            )));
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
        let flag = if start.login { "-lc" } else { "-c" };
        let argv = vec![shell, flag.to_owned(), req.cmd.clone()];
        let call_id = req.call_id.clone().unwrap_or_else(|| self.new_call_id());
        let limits = &self.config.limits;

        let id = self.store.reserve()?;
        let mut reservation = Reservation { store: &self.store, id, session: None, done: false };

        let approval = self
            .approve(
                &call_id,
                id,
                &argv,
                &cwd,
                req.tty,
                req.sandbox_permissions,
                req.justification.as_deref(),
                req.prefix_rule.as_deref(),
            )
            .await?;
        let placement = if self.config.sandbox_policy == SandboxPolicy::DangerFullAccess {
            Placement::Unsandboxed(EscapeReason::FullAccessPolicy)
        } else if approval.escalate {
            Placement::Unsandboxed(EscapeReason::ApprovedEscalation)
        } else {
            Placement::Sandboxed
        };
        let base = SpawnRequest {
            argv: argv.iter().map(OsString::from).collect(),
            cwd: cwd.clone(),
            env,
            mode: if req.tty { IoMode::Pty(PtySize::default()) } else { IoMode::Pipes },
            setup: Vec::new(),
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
        let (spawn, report) = self.place(placement, base.clone())?;
        let mut session = self.start_attempt(&spec, spawn, report)?;
        let mut call_guard = Arc::clone(&session.call_lock).lock_owned().await;
        if let Err(error) = reservation.stored(&session) {
            session.terminate().await;
            return Err(error);
        }

        let window = Duration::from_millis(clamp_exec_yield(req.yield_time_ms, limits));
        let mut deadline = session.started + window;
        let policy = self.config.approval_policy;
        if placement == Placement::Sandboxed
            && retry_after_denial(policy, false, false) != RetryDecision::NoRetry
        {
            let grace_end = (session.started + Duration::from_millis(EARLY_EXIT_GRACE_MS)).min(deadline);
            if session.wait_finished(grace_end).await {
                let exit_code = session.snapshot().exit_code.unwrap_or(-1);
                let denied = exit_code != 0 && is_likely_sandbox_denied(exit_code, &session.peek_output());
                let decision =
                    retry_after_denial(policy, approval.by_person, self.is_remembered(&approval.key));
                if denied && decision != RetryDecision::NoRetry {
                    tracing::info!(session_id = %id, exit_code, "sandbox denial detected within the grace");
                    if decision == RetryDecision::AskThenRetry {
                        let request = ApprovalRequest {
                            call_id: call_id.clone(),
                            session_id: id,
                            command: spec.command.clone(),
                            cwd: spec.cwd.clone(),
                            kind: ApprovalKind::RetryWithoutSandbox,
                            reason: Some(RETRY_QUESTION.to_owned()),
                            prefix_offer: None,
                        };
                        if let Err(err) = self.ask(request, &approval.key).await {
                            reservation.remove(&session);
                            return Err(err);
                        }
                    }
                    reservation.detached(&session);
                    drop(call_guard);
                    let (spawn, report) =
                        self.place(Placement::Unsandboxed(EscapeReason::RetryAfterDenial), base)?;
                    session = self.start_attempt(&spec, spawn, report)?;
                    call_guard = Arc::clone(&session.call_lock).lock_owned().await;
                    if let Err(error) = reservation.stored(&session) {
                        session.terminate().await;
                        return Err(error);
                    }
                    deadline = session.started + window;
                }
            }
        }

        let mark = Mark { at: session.started, output_seq: 0 };
        let collected = collect(&session, mark, deadline).await;
        let (session_id, warning) = if collected.exit_code.is_some() {
            reservation.remove(&session);
            (None, None)
        } else {
            let (pruned, live) = self.store.commit(&session, limits.max_sessions);
            reservation.done();
            for victim in pruned {
                tracing::info!(session_id = %victim.spec.id, "pruning the least recently used session");
                victim.terminate().await;
            }
            (Some(id), session_count_warning(live, limits))
        };
        drop(call_guard);
        Ok(self.respond(started, &session, collected, session_id, warning, req.max_output_tokens))
    }

    async fn write_stdin(&self, req: WriteStdinRequest) -> Result<ExecResponse, ExecError> {
        let started = Instant::now();
        let limits = &self.config.limits;
        let id = req.session_id;
        let session = self.store.touch(id).ok_or(ExecError::UnknownSession(id))?;
        if req.chars.len() > limits.max_write_bytes {
            return Err(ExecError::InvalidInput(format!(
                "chars is {} bytes; at most {} bytes can be written at once",
                req.chars.len(),
                limits.max_write_bytes
            )));
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
                    Some(Err(err)) => return Err(ExecError::WriteFailed(err.to_string())),
                }
            } else if req.chars.chars().all(|c| c == '\u{3}') {
                match session.control.signal(Signal::Interrupt) {
                    Ok(()) | Err(ProcessError::Exited) => {}
                    Err(err) => return Err(ExecError::WriteFailed(format!("sending SIGINT failed: {err}"))),
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
        Ok(self.respond(started, &session, collected, session_id, warning, req.max_output_tokens))
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
                }
            })
            .collect()
    }

    async fn close_session(&self, id: SessionId) -> Result<ExecResponse, ExecError> {
        let started = Instant::now();
        let session = self.store.remove_id(id).ok_or(ExecError::UnknownSession(id))?;
        let exit_code = session.terminate().await;
        let (bytes, dropped) = session.take_output();
        let collected = Collected { bytes, dropped, exit_code: Some(exit_code), waiting_for_input: false };
        Ok(self.respond(started, &session, collected, None, None, None))
    }

    fn respond(
        &self,
        started: Instant,
        session: &Session,
        collected: Collected,
        session_id: Option<SessionId>,
        warning: Option<String>,
        max_output_tokens: Option<usize>,
    ) -> ExecResponse {
        let max_tokens = resolve_max_output_tokens(max_output_tokens, &self.config.limits);
        let text = String::from_utf8_lossy(&collected.bytes);
        let truncated = truncate_output_with_dropped(&text, max_tokens, collected.dropped);
        ExecResponse {
            chunk_id: chunk_id(self.store.next_random()),
            wall_time: started.elapsed(),
            exit_code: collected.exit_code,
            session_id,
            original_token_count: truncated.original_token_count,
            output: truncated.text,
            waiting_for_input: collected.waiting_for_input,
            warning,
            protections: self.config.report_protections.then(|| session.protections.clone()),
        }
    }
}
