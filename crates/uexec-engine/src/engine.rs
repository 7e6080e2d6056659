//! The engine: `exec_command` and `write_stdin` (spec A3, A6), the session tools (B7), shutdown.
//!
//! `exec_command` is a pipeline of named stages, each with its home:
//!
//! 1. **validate** ([`Orchestrator::validate`]): the command, working directory, shell and how it starts, an
//!    `apply_patch` call, and the facts every later decision trusts (`crate::trust`), gathered once; an
//!    escalation is checked for what could have been planted (`crate::outside`);
//! 2. **reserve** a session id (released by [`Reservation`] on every failure, a dropped future included);
//! 3. **approve** ([`approve`]): bypass, remembered, or a person;
//! 4. **place** ([`Orchestrator::place_call`]): where it runs, the login snapshot captured now that it is
//!    approved ([`login`]), the spawn request;
//! 5. **spawn and store** ([`Orchestrator::spawn_and_store`], `crate::attempt`): the sandbox transforms the
//!    request, the spawner starts it, the session becomes reachable;
//! 6. **grace and retry** (`crate::retry`): a denial seen within the early-exit grace may be retried outside the
//!    sandbox, with a person's approval;
//! 7. **collect** the window's output and 8. **respond** ([`Orchestrator::collect_and_respond`]).
//!
//! The approval step and the login snapshots are its submodules: they use the [`Orchestrator`]'s types and it
//! holds the login snapshots' state; what a person decided for the session has its own owner outside that
//! circle (`crate::approvals`), and no module outside `engine` is part of it (`cargo xtask layering` checks
//! that modules form no cycle).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use uexec_domain::command::{ApplyPatchForm, ParsedCommand};
use uexec_domain::env::{build_env, with_terminal_type};
use uexec_domain::ids::chunk_id;
use uexec_domain::limits::{MAX_ARG_STRLEN, clamp_exec_yield, clamp_write_yield, resolve_max_output_tokens};
use uexec_domain::response::session_count_warning;
use uexec_domain::snapshot::SnapshotShell;
use uexec_domain::startup::{ShellStart, guard_env};
use uexec_domain::truncate::truncate_segments;
use uexec_domain::trust::SandboxWrites;
use uexec_domain::{EscapeReason, ProtectionReport, SandboxPermissions, SandboxPolicy, SessionId};
use uexec_ports::ExecEvent;
use uexec_ports::process::{InputState, IoMode, ProcessError, PtySize, Signal, SpawnError, SpawnRequest};

use crate::api::{
    ExecCommandRequest, ExecResponse, LiveState, SessionState, SessionSummary, SessionView, WriteStdinRequest,
};
use crate::collect::{Collected, Mark, collect};
use crate::config::{EngineConfig, EngineDeps};
use crate::error::ExecError;
use crate::outside::OutsideRun;
use crate::placement::{Placement, tmpdir_of};
use crate::session::{Session, SessionSpec};
use crate::store::Store;
use crate::trust::{decide_shell_start, writes_for};
use crate::watch::Watch;

/// How long a person's write waits for the program to take it in before it goes on in the background.
const PERSON_WRITE_WAIT: Duration = Duration::from_secs(1);

pub(crate) mod approve;
mod login;
pub(crate) mod refusals;

use approve::Approval;

use crate::approvals::Approvals;
use login::Snapshots;
use refusals::{RefusalWatch, join_notes};

/// The unified exec engine. Cheap to clone (all clones share one engine); `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Orchestrator>,
}

/// An [`Engine`] that does not keep it alive ([`Engine::downgrade`]): for a part the engine's own adapters hold
/// (the proxy, whose questions the engine answers), which must not outlive the engine's last owner.
#[derive(Debug, Clone)]
pub struct WeakEngine {
    inner: std::sync::Weak<Orchestrator>,
}

impl WeakEngine {
    /// The engine, while some [`Engine`] still holds it.
    pub fn upgrade(&self) -> Option<Engine> {
        self.inner.upgrade().map(|inner| Engine { inner })
    }
}

pub(crate) struct Orchestrator {
    pub(crate) config: EngineConfig,
    pub(crate) deps: EngineDeps,
    pub(crate) store: Store,
    /// What a person decided for the session (`crate::approvals`).
    pub(crate) approvals: Approvals,
    /// The environment every command starts from: the server's, filtered by the policy, with the forced
    /// variables (`uexec_domain::env::build_env`), built once.
    pub(crate) command_env: Vec<(OsString, OsString)>,
    /// The login snapshots (`crate::login`).
    pub(crate) snapshots: Snapshots,
    /// What the sandbox refused each live sandboxed session so far ([`refusals`]).
    pub(crate) watches: Mutex<HashMap<SessionId, RefusalWatch>>,
}

impl std::fmt::Debug for Orchestrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Drop for Orchestrator {
    /// Last resort for an engine dropped without [`Engine::shutdown`]: SIGKILL every live process group.
    fn drop(&mut self) {
        for listed in self.store.list() {
            if listed.session.snapshot().exit_code.is_none() {
                let _ = listed.session.control.signal(Signal::Kill);
            }
        }
    }
}

/// One `exec_command` call, validated (stage 1): what the person is asked about and what will be spawned.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) call_id: String,
    pub(crate) cmd: String,
    pub(crate) shell: String,
    /// The working directory (resolved).
    pub(crate) cwd: PathBuf,
    /// The command's environment (startup variables removed when its startup files are not trusted).
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Where sandboxed commands may have written, gathered once for everything this call trusts.
    pub(crate) writes: SandboxWrites,
    pub(crate) start: ShellStart,
    /// The command the person approves, parsed once: every rule, question and refusal reads this.
    pub(crate) command: ParsedCommand,
    /// An `apply_patch` call, spawned as the patch program.
    pub(crate) patch: bool,
    pub(crate) spawn_argv: Vec<OsString>,
    /// What will run, parsed once: `command` itself, or the patch program's argv for an `apply_patch` call.
    pub(crate) spawned: ParsedCommand,
    pub(crate) spawn_cwd: PathBuf,
    pub(crate) spawn_tty: bool,
    /// The session's terminal as the caller asked for it.
    pub(crate) tty: bool,
    pub(crate) permissions: SandboxPermissions,
    pub(crate) justification: Option<String>,
    pub(crate) prefix_rule: Option<Vec<String>>,
    /// What the caller's client waits for this call (`ExecCommandRequest::max_wait`): a question ends then too.
    pub(crate) max_wait: Option<Duration>,
    /// An escalation, checked for what could have been planted (`crate::outside`).
    pub(crate) outside: Option<OutsideRun>,
}

/// An approved call, placed (stage 4).
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) spec: SessionSpec,
    pub(crate) base: SpawnRequest,
    /// `base.argv` as parsed (from [`Call::spawned`]: without `-l` when a login snapshot replays the shell).
    pub(crate) spawned: ParsedCommand,
    pub(crate) snapshot: Option<SnapshotShell>,
    pub(crate) placement: Placement,
}

/// A spawned, stored attempt: its session, its call lock, the end of its window, and the note of a denial that
/// was not retried.
pub(crate) struct Attempt {
    pub(crate) session: Arc<Session>,
    pub(crate) guard: tokio::sync::OwnedMutexGuard<()>,
    pub(crate) deadline: Instant,
    pub(crate) note: Option<String>,
    /// The attempt ran in the sandbox (its failure may be the sandbox's: `Sandbox::denial_hint`).
    pub(crate) sandboxed: bool,
    /// What to ask the sandbox about what it refused the attempt (`None` outside the sandbox).
    pub(crate) watch: Option<RefusalWatch>,
}

/// What a response says besides the output: when its wall time starts, the live session, the warning, and
/// whether it reports the protections (an `exec_command` does; later calls on the session do not repeat them).
#[derive(Debug)]
struct Reply {
    started: Instant,
    session_id: Option<SessionId>,
    refused: Option<String>,
    warning: Option<String>,
    protections: bool,
}

/// Releases the reserved id when `exec_command` fails or is dropped before the session is stored; admits the
/// stored session (keeps it reachable, pruning as an answered call does) when the call is dropped mid-window.
pub(crate) struct Reservation<'a> {
    store: &'a Store,
    /// The cap [`Store::admit`] prunes to.
    max_sessions: usize,
    id: SessionId,
    session: Option<Arc<Session>>,
    done: bool,
}

impl Reservation<'_> {
    /// Store the session; refused once the engine shuts down.
    pub(crate) fn stored(&mut self, session: &Arc<Session>) -> Result<(), ExecError> {
        if !self.store.insert_provisional(Arc::clone(session)) {
            return Err(ExecError::ShuttingDown);
        }
        self.session = Some(Arc::clone(session));
        Ok(())
    }

    pub(crate) fn detached(&mut self, session: &Arc<Session>) {
        self.store.detach(session);
        self.session = None;
    }

    pub(crate) fn remove(&mut self, session: &Arc<Session>) {
        self.store.remove(session);
        self.session = None;
        self.done = true;
    }

    pub(crate) fn done(&mut self) {
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
            Some(session) => {
                let (pruned, _) = self.store.admit(session, self.max_sessions);
                kill_pruned(pruned);
            }
        }
    }
}

/// Kill sessions pruned where nothing can wait for them (a dropped call): on the runtime when there is one,
/// else by dropping them (the process adapter's drop sweep kills a session's tree on a thread of its own).
fn kill_pruned(pruned: Vec<Arc<Session>>) {
    for victim in pruned {
        tracing::info!(session_id = %victim.spec.id, "pruning the least recently used session");
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { victim.terminate().await });
            }
            Err(_) => drop(victim),
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
        let env = build_env(config.base_env.iter().cloned(), &config.env_policy);
        let snapshots = Snapshots::new(&config, &writes_for(&config, &env));
        Engine {
            inner: Arc::new(Orchestrator {
                snapshots,
                store: Store::new(seed, config.session_budget.clone()),
                config,
                deps,
                approvals: Approvals::default(),
                command_env: env,
                watches: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A handle that does not keep the engine alive.
    pub fn downgrade(&self) -> WeakEngine {
        WeakEngine { inner: Arc::downgrade(&self.inner) }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The domain allowlist's question about `host` (asked for on `port`; `rules`: the allowlist in words), for
    /// the proxy: `Some(true)` allowed for the session by a person, `Some(false)` refused by a person, `None`
    /// when nobody can be asked. Asked once per host, through the approver port, and only under `on-request`.
    pub async fn network_access(&self, host: &str, port: u16, rules: &str) -> Option<bool> {
        self.inner.network_access(host, port, rules).await
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

    /// Every session in the store as a person sees it (`crate::watch`): state (waiting for input asked of the
    /// process adapter), age, output size. Touches no session's recency or buffers.
    pub fn session_views(&self) -> Vec<SessionView> {
        self.inner
            .store
            .list()
            .into_iter()
            .map(|listed| {
                let session = listed.session;
                let state = match session.state() {
                    SessionState::Exited { exit_code } => LiveState::Exited { exit_code },
                    SessionState::Running
                        if session.spec.tty
                            && session.control.input_state() == InputState::WaitingForInput =>
                    {
                        LiveState::WaitingForInput
                    }
                    SessionState::Running => LiveState::Running,
                };
                SessionView {
                    session_id: session.spec.id,
                    cmd: session.spec.cmd.clone(),
                    cwd: session.spec.cwd.clone(),
                    tty: session.spec.tty,
                    sandbox: session.protections.sandbox,
                    state,
                    age: session.started.elapsed(),
                    output_bytes: session.output_bytes(),
                }
            })
            .collect()
    }

    /// Watch a session for a person: its present, then its output as it arrives (`crate::watch`). The model's
    /// calls read what they would read without the watcher.
    pub fn watch(&self, id: SessionId) -> Result<Watch, ExecError> {
        let session = self.inner.store.get(id).ok_or(ExecError::UnknownSession(id))?;
        Ok(session.watch())
    }

    /// Type `bytes` into a PTY session's terminal on behalf of a person, without waiting for the model's call on
    /// it (nor holding it): the write joins the session's input queue (after input still in flight) and goes
    /// on in the background when the program does not take it within a second. No event carries the bytes
    /// (a person may type a password; the app records that input was typed and how much, not what).
    pub async fn write_for_person(&self, id: SessionId, bytes: Vec<u8>) -> Result<(), ExecError> {
        let session = self.inner.store.get(id).ok_or(ExecError::UnknownSession(id))?;
        if !session.spec.tty {
            return Err(ExecError::StdinClosed);
        }
        if bytes.len() > self.inner.config.limits.max_write_bytes {
            return Err(ExecError::WriteTooLarge {
                bytes: bytes.len(),
                max: self.inner.config.limits.max_write_bytes,
            });
        }
        match session.write_input(bytes, Instant::now() + PERSON_WRITE_WAIT).await? {
            None | Some(Ok(()) | Err(ProcessError::Exited)) => Ok(()),
            Some(Err(ProcessError::StdinClosed)) => Err(ExecError::StdinClosed),
            Some(Err(err)) => Err(ExecError::WriteFailed(err)),
        }
    }

    /// Kill a session's process tree for a person; returns its exit code. The session stays in the store as
    /// exited, so the model's next call on it reads its last output and that it ended (then it is reaped).
    pub async fn kill_session(&self, id: SessionId) -> Result<i32, ExecError> {
        let session = self.inner.store.get(id).ok_or(ExecError::UnknownSession(id))?;
        Ok(session.terminate().await)
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

impl Orchestrator {
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

    /// The `PATH` of the server's environment (`EngineConfig::base_env`).
    fn base_path(&self) -> Option<&OsStr> {
        self.config.base_env.iter().rev().find(|(name, _)| name == "PATH").map(|(_, value)| value.as_os_str())
    }

    /// When `command` (`[shell, -c|-lc, script]`) is an `apply_patch` call and a patch program is configured:
    /// that program's argv with the patch (in pieces well under the kernel's 128 KiB limit on one argument) and
    /// the directory it runs in (`cwd`, or the script's `cd <dir>` under it).
    fn apply_patch_spawn(
        &self,
        command: &ParsedCommand,
        cwd: &Path,
    ) -> Result<Option<(Vec<OsString>, PathBuf)>, ExecError> {
        const PIECE: usize = 64 * 1024;
        let Some(program) = &self.config.apply_patch_program else { return Ok(None) };
        let call = match command.apply_patch() {
            ApplyPatchForm::Whole(call) => call,
            ApplyPatchForm::Absent => return Ok(None),
            // A bare patch as the script would run its first line (`***`, a glob) as a command.
            ApplyPatchForm::BarePatch => return Err(ExecError::BarePatch),
            // An apply_patch call inside a longer script would get "command not found" from the shell.
            ApplyPatchForm::AmongOthers
                if !on_path(self.base_path(), "apply_patch") && !on_path(self.base_path(), "applypatch") =>
            {
                return Err(ExecError::ApplyPatchNotWholeCommand);
            }
            ApplyPatchForm::AmongOthers => return Ok(None),
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

    /// `exec_command` as its stages (the module documentation names them): each failure releases the id.
    async fn exec_command(&self, req: ExecCommandRequest) -> Result<ExecResponse, ExecError> {
        let call = self.validate(&req).await?;
        let id = self.store.reserve()?;
        let mut reservation = Reservation {
            store: &self.store,
            max_sessions: self.config.limits.max_sessions,
            id,
            session: None,
            done: false,
        };
        let approval = self.approve(&call, id).await?;
        let run = self.place_call(&call, id, &approval).await;
        let window = capped(clamp_exec_yield(req.yield_time_ms, &self.config.limits), req.max_wait);
        let first = self.with_snapshot(run.snapshot, &call.shell, run.placement, run.base.clone()).await;
        // The window counts from here, not from the spawn's end: under load a spawn waits for the spawner, and
        // that wait is part of the caller's window (`RELIABILITY.md`, load).
        let deadline = Instant::now() + window;
        let attempt =
            self.spawn_and_store(&run.spec, run.placement, first, &mut reservation, deadline).await?;
        let attempt = self.grace_and_retry(&call, &approval, &run, &mut reservation, attempt, window).await?;
        self.collect_and_respond(reservation, attempt, req.max_output_tokens).await
    }

    /// Stage 1: everything about the call that can be checked before an id is reserved or a person asked (the
    /// command, the working directory, the shell and how it starts, an `apply_patch` call), and the facts every
    /// later decision trusts (`crate::trust`), gathered once; an escalation is checked for what a sandboxed
    /// command could have planted (`crate::outside`).
    async fn validate(&self, req: &ExecCommandRequest) -> Result<Call, ExecError> {
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
        let env = with_terminal_type(self.command_env.clone(), req.tty);
        let writes = writes_for(&self.config, &env);
        // The command, parsed once for every decision below and after.
        let requested = ParsedCommand::new(vec![
            shell.clone(),
            if login_requested { "-lc" } else { "-c" }.to_owned(),
            req.cmd.clone(),
        ]);
        let start = decide_shell_start(
            &self.config,
            &writes,
            &requested,
            login_requested,
            req.sandbox_permissions,
            &env,
        );
        let env = if start.guarded { guard_env(env, &shell) } else { env };
        let patch_call = self.apply_patch_spawn(&requested, &cwd)?;
        // The shell gets `cmd` as one argument (an apply_patch call goes in pieces to the patch program).
        if patch_call.is_none() && req.cmd.len() >= MAX_ARG_STRLEN {
            return Err(ExecError::CommandTooLong { bytes: req.cmd.len(), max: MAX_ARG_STRLEN });
        }
        // The argv a person approves: a login shell when one was asked for and the startup files are trusted
        // (replaying a snapshot of its environment, decided after the approval, is the same login shell).
        let command = requested.with_login(start.login);
        // An apply_patch call runs as the configured patch program: approved, placed and audited as the
        // command line it came as.
        let patch = patch_call.is_some();
        let (spawn_argv, spawn_cwd, spawn_tty) = match patch_call {
            Some((program, dir)) => (program, dir, false),
            None => (command.iter().map(OsString::from).collect(), cwd.clone(), req.tty),
        };
        let spawned = if patch {
            ParsedCommand::new(spawn_argv.iter().map(|a| a.to_string_lossy().into_owned()).collect())
        } else {
            command.clone()
        };
        let escalating = req.sandbox_permissions == SandboxPermissions::RequireEscalated
            && !self.config.sandbox_policy.is_unrestricted();
        let outside = if escalating {
            Some(OutsideRun::check(&spawned, &spawn_cwd, &env, &writes).await)
        } else {
            None
        };
        Ok(Call {
            call_id: req.call_id.clone().unwrap_or_else(|| self.new_call_id()),
            cmd: req.cmd.clone(),
            shell,
            cwd,
            env,
            writes,
            start,
            command,
            patch,
            spawn_argv,
            spawned,
            spawn_cwd,
            spawn_tty,
            tty: req.tty,
            permissions: req.sandbox_permissions,
            justification: req.justification.clone(),
            prefix_rule: req.prefix_rule.clone(),
            max_wait: req.max_wait,
            outside,
        })
    }

    /// Stage 4: where the approved call runs, and the request to spawn there. Only now may the login environment
    /// be captured (it runs the shell); the spawn's argv is the shell without login when a snapshot replays it,
    /// and an escalation gets the environment it was checked with.
    async fn place_call(&self, call: &Call, id: SessionId, approval: &Approval) -> Run {
        let placement = Placement::for_policy(&self.config.sandbox_policy, approval.escalate);
        let snapshot = match call.patch {
            false if call.start.login => {
                self.login_snapshot(&call.shell, &call.env, placement, &call.writes).await
            }
            _ => None,
        };
        let (argv, spawned) = match (call.patch, &snapshot) {
            (false, Some(_)) => (
                vec![OsString::from(&call.shell), OsString::from("-c"), OsString::from(&call.cmd)],
                call.spawned.clone().with_login(false),
            ),
            _ => (call.spawn_argv.clone(), call.spawned.clone()),
        };
        let env = match (&call.outside, placement) {
            (Some(checked), Placement::Unsandboxed(EscapeReason::ApprovedEscalation)) => checked.env.clone(),
            _ => call.env.clone(),
        };
        let limits = &self.config.limits;
        let base = SpawnRequest {
            argv,
            cwd: call.spawn_cwd.clone(),
            env,
            mode: if call.spawn_tty { IoMode::Pty(PtySize::default()) } else { IoMode::Pipes },
            setup: Vec::new(),
            pid_scope: Default::default(),
        };
        let spec = SessionSpec {
            id,
            call_id: call.call_id.clone(),
            command: call.command.to_vec(),
            cmd: call.cmd.clone(),
            cwd: call.cwd.clone(),
            tty: call.tty,
            buffer_bytes: limits.output_buffer_bytes,
            startup_guarded: call.start.guarded,
            input_backlog_bytes: limits.max_write_bytes,
        };
        Run { spec, base, spawned, snapshot, placement }
    }

    /// Stage 5: spawn an attempt and store its session (reachable by id), holding its call lock.
    pub(crate) async fn spawn_and_store(
        &self,
        spec: &SessionSpec,
        placement: Placement,
        spawn: SpawnRequest,
        reservation: &mut Reservation<'_>,
        deadline: Instant,
    ) -> Result<Attempt, ExecError> {
        let sandboxed = placement == Placement::Sandboxed;
        let watch = sandboxed.then(|| RefusalWatch {
            mark: self.deps.sandbox.refusal_mark(),
            tmpdir: tmpdir_of(&spawn.env),
            cwd: spawn.cwd.clone(),
            noted: Vec::new(),
        });
        let session = self.start_attempt(spec, placement, spawn)?;
        let guard = Arc::clone(&session.call_lock).lock_owned().await;
        if let Err(error) = reservation.stored(&session) {
            session.terminate().await;
            return Err(error);
        }
        Ok(Attempt { session, guard, deadline, note: None, sandboxed, watch })
    }

    /// Stages 7 and 8: collect the window's output, keep a live session (pruning the least recently used) or
    /// remove an exited one, and respond.
    async fn collect_and_respond(
        &self,
        mut reservation: Reservation<'_>,
        attempt: Attempt,
        max_output_tokens: Option<usize>,
    ) -> Result<ExecResponse, ExecError> {
        let limits = &self.config.limits;
        let Attempt { session, guard, deadline, note, sandboxed, mut watch } = attempt;
        let mark = Mark { at: session.started, output_seq: 0 };
        let collected = collect(&session, mark, deadline).await;
        // A sandboxed command that failed: what the sandbox knows of such failures (a nested sandbox that
        // cannot start) joins the note.
        let failed = collected.exit_code.is_some_and(|code| code != 0);
        let output =
            if sandboxed && (failed || watch.is_some()) { collected.output.to_bytes() } else { Vec::new() };
        let hint = if failed && sandboxed {
            let argv: Vec<OsString> = session.spec.command.iter().map(OsString::from).collect();
            self.deps.sandbox.denial_hint(&argv, &output)
        } else {
            None
        };
        // What the sandbox refused comes first, once: the note of a denial that was not retried says only why.
        let refused =
            watch.as_mut().and_then(|w| self.note_refusals(&session, w, &output, collected.exit_code));
        let note = join_notes(note, hint);
        let (session_id, warning) = if collected.exit_code.is_some() {
            reservation.remove(&session);
            (None, note)
        } else {
            if let Some(watch) = watch {
                self.keep_watch(session.spec.id, watch);
            }
            let (pruned, live) = self.store.admit(&session, limits.max_sessions);
            reservation.done();
            for victim in pruned {
                tracing::info!(session_id = %victim.spec.id, "pruning the least recently used session");
                victim.terminate().await;
            }
            let warning = match (note, session_count_warning(live, limits)) {
                (Some(note), Some(count)) => Some(format!("{note} {count}")),
                (note, count) => note.or(count),
            };
            (Some(session.spec.id), warning)
        };
        drop(guard);
        // Wall time counts from the spawn of the process whose output this is (as the reference does), not
        // from the call's start: time spent waiting for a person's approval is not the command's.
        let reply = Reply { started: session.started, session_id, refused, warning, protections: true };
        Ok(self.respond(reply, &session, collected, max_output_tokens))
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
        let window = capped(clamp_write_yield(req.yield_time_ms, req.chars.is_empty(), limits), req.max_wait);
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
        // What the sandbox refused since the last response (the output of this window only: what earlier
        // windows showed was noted then).
        let refused = self.take_watch(id).and_then(|mut watch| {
            let note =
                self.note_refusals(&session, &mut watch, &collected.output.to_bytes(), collected.exit_code);
            if collected.exit_code.is_none() {
                self.keep_watch(id, watch);
            }
            note
        });
        let session_id = if collected.exit_code.is_some() {
            self.store.remove(&session);
            None
        } else {
            Some(id)
        };
        let warning = session_count_warning(self.store.len(), limits);
        let reply = Reply { started, session_id, refused, warning, protections: false };
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
        let reply = Reply { started, session_id: None, refused: None, warning: None, protections: false };
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
        let Reply { started, session_id, refused, warning, protections } = reply;
        let max_tokens = resolve_max_output_tokens(max_output_tokens, &self.config.limits);
        // Cut straight from the buffer's chunks: the output is never copied whole.
        let dropped = collected.output.dropped();
        let truncated =
            collected.output.with_segments(|segments| truncate_segments(segments, max_tokens, dropped));
        let says_waiting = session.note_waiting(collected.waiting_for_input, !truncated.text.is_empty());
        ExecResponse {
            chunk_id: chunk_id(self.store.next_random()),
            wall_time: started.elapsed(),
            exit_code: collected.exit_code,
            session_id,
            original_token_count: truncated.original_token_count,
            output: truncated.text,
            waiting_for_input: collected.waiting_for_input,
            says_waiting,
            refused,
            warning,
            protections: (protections && self.reports(&session.protections))
                .then(|| session.protections.clone()),
        }
    }
}

/// A clamped window of `window_ms`, at most `max_wait` (what the caller's client waits for a call).
fn capped(window_ms: u64, max_wait: Option<Duration>) -> Duration {
    let window = Duration::from_millis(window_ms);
    max_wait.map_or(window, |max| window.min(max))
}

/// Whether an executable file `name` is in a directory of `path` (the `PATH` of the server's environment,
/// `EngineConfig::base_env`, which sandboxed commands get).
fn on_path(path: Option<&OsStr>, name: &str) -> bool {
    path.is_some_and(|path| {
        std::env::split_paths(path)
            .any(|dir| std::fs::metadata(dir.join(name)).is_ok_and(|m| crate::os::is_executable(&m)))
    })
}
