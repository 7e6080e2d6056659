//! Orchestration tests of the engine against mocked ports: approvals, sandbox choice, retry, ids, events,
//! sessions and pruning. Processes are small in-memory fakes (mockall is awkward for async output streams);
//! the spawner, the sandbox, the approver and the event sink are `mockall` mocks.
//!
//! Time is paused (`start_paused`): windows, the early-exit grace and fake process delays advance virtually,
//! so the tests are exact and fast.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};
use uexec_domain::denial::Refusal;
use uexec_domain::rules::{CommandRules, PrefixRule, RuleDecision};
use uexec_domain::{
    ApprovalPolicy, EscapeReason, ExitStatus, ProtectionReport, ReviewDecision, SandboxKind,
    SandboxPermissions, SandboxPolicy, SessionId,
};
use uexec_domain::{Protection, ProtectionStatus};
use uexec_engine::{
    Engine, EngineConfig, EngineDeps, ExecCommandRequest, ExecError, ExecResponse, SessionState,
    WriteStdinRequest,
};
use uexec_ports::process::{
    InputState, IoMode, MockProcessSpawner, OutputStream, ProcessControl, ProcessError, PtySize, Signal,
    SpawnError, SpawnRequest, SpawnedProcess,
};
use uexec_ports::{
    ApprovalError, ApprovalKind, ApprovalRequest, ExecEvent, MockApprover, MockEventSink, MockSandbox,
    NetworkAccessRequest, SandboxError, SandboxLease, SandboxedSpawn,
};

// ---------------------------------------------------------------------------------------------------------------
// A fake process: output through a channel, exit through a watch, input echoed (tty) or refused (pipes).
// ---------------------------------------------------------------------------------------------------------------

/// What a fake process does.
#[derive(Clone, Debug)]
struct Script {
    /// Printed at spawn.
    output: Vec<u8>,
    /// Exit after this delay (None: run until killed or signalled).
    exit_after: Option<(Duration, i32)>,
    /// Exit on SIGINT with 130.
    dies_on_interrupt: bool,
    /// Echo what is written (tty).
    echo: bool,
    /// What `input_state` reports.
    input_state: InputState,
}

impl Script {
    fn exits(output: &str, code: i32) -> Script {
        Script {
            output: output.as_bytes().to_vec(),
            exit_after: Some((Duration::ZERO, code)),
            dies_on_interrupt: true,
            echo: false,
            input_state: InputState::Unknown,
        }
    }

    fn runs(output: &str) -> Script {
        Script {
            output: output.as_bytes().to_vec(),
            exit_after: None,
            dies_on_interrupt: true,
            echo: false,
            input_state: InputState::Busy,
        }
    }
}

struct FakeControl {
    tty: bool,
    script: Script,
    out: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    exit: watch::Sender<Option<ExitStatus>>,
    writes: Mutex<Vec<Vec<u8>>>,
    signals: Mutex<Vec<Signal>>,
    kills: AtomicUsize,
}

impl FakeControl {
    fn finish(&self, status: ExitStatus) {
        let mut first = false;
        self.exit.send_if_modified(|s| {
            if s.is_none() {
                *s = Some(status);
                first = true;
            }
            first
        });
        // Closing the output stream: the fake's output ends with the process.
        self.out.lock().unwrap().take();
    }

    fn status(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }
}

#[async_trait]
impl ProcessControl for FakeControl {
    fn pid(&self) -> u32 {
        4242
    }
    fn is_tty(&self) -> bool {
        self.tty
    }
    async fn write(&self, bytes: &[u8]) -> Result<(), ProcessError> {
        if !self.tty {
            return Err(ProcessError::StdinClosed);
        }
        if self.status().is_some() {
            return Err(ProcessError::Exited);
        }
        self.writes.lock().unwrap().push(bytes.to_vec());
        if self.script.echo
            && let Some(out) = self.out.lock().unwrap().as_ref()
        {
            let _ = out.send(bytes.to_vec());
        }
        if bytes == b"\x04" {
            self.finish(ExitStatus::Code(0));
        }
        Ok(())
    }
    fn resize(&self, _size: PtySize) -> Result<(), ProcessError> {
        Ok(())
    }
    fn signal(&self, signal: Signal) -> Result<(), ProcessError> {
        self.signals.lock().unwrap().push(signal);
        if signal == Signal::Interrupt && self.script.dies_on_interrupt {
            self.finish(ExitStatus::Signal(2));
        }
        Ok(())
    }
    fn input_state(&self) -> InputState {
        if self.status().is_some() { InputState::Unknown } else { self.script.input_state }
    }
    fn try_wait(&self) -> Result<Option<ExitStatus>, ProcessError> {
        Ok(self.status())
    }
    async fn wait(&self) -> Result<ExitStatus, ProcessError> {
        let mut rx = self.exit.subscribe();
        // The sender lives in the script: a closed channel means the script is gone, like a process reaped
        // elsewhere (`waitid` failing with ECHILD, 10 on Linux and macOS).
        let gone = || ProcessError::Os(uexec_ports::process::OsError::new("waitid", 10));
        let status = rx.wait_for(Option::is_some).await.map_err(|_| gone())?;
        status.ok_or_else(gone)
    }
    async fn kill_tree(&self) -> Result<ExitStatus, ProcessError> {
        self.kills.fetch_add(1, Ordering::SeqCst);
        self.finish(ExitStatus::Signal(9));
        Ok(self.status().unwrap())
    }
}

struct FakeOutput {
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
}

#[async_trait]
impl OutputStream for FakeOutput {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, ProcessError> {
        Ok(self.rx.recv().await)
    }
}

/// Start a fake process for `request` following `script`.
fn fake_process(request: &SpawnRequest, script: Script) -> (SpawnedProcess, Arc<FakeControl>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (exit, _) = watch::channel(None);
    let tty = matches!(request.mode, IoMode::Pty(_));
    if !script.output.is_empty() {
        tx.send(script.output.clone()).unwrap();
    }
    let control = Arc::new(FakeControl {
        tty,
        script: script.clone(),
        out: Mutex::new(Some(tx)),
        exit,
        writes: Mutex::new(Vec::new()),
        signals: Mutex::new(Vec::new()),
        kills: AtomicUsize::new(0),
    });
    if let Some((delay, code)) = script.exit_after {
        let control = Arc::clone(&control);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            control.finish(ExitStatus::Code(code));
        });
    }
    let process = SpawnedProcess {
        control: Arc::clone(&control) as Arc<dyn ProcessControl>,
        output: Box::new(FakeOutput { rx }),
    };
    (process, control)
}

// ---------------------------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------------------------

#[derive(Default)]
struct Spawned {
    requests: Mutex<Vec<SpawnRequest>>,
    controls: Mutex<Vec<Arc<FakeControl>>>,
}

/// A spawner mock whose processes follow `scripts` in order (the last one repeats).
fn spawner(scripts: Vec<Script>, record: Arc<Spawned>) -> MockProcessSpawner {
    let mut spawner = MockProcessSpawner::new();
    let next = AtomicUsize::new(0);
    spawner.expect_spawn().returning(move |request| {
        let n = next.fetch_add(1, Ordering::SeqCst);
        let script = scripts.get(n).or(scripts.last()).cloned().unwrap();
        let (process, control) = fake_process(&request, script);
        record.requests.lock().unwrap().push(request);
        record.controls.lock().unwrap().push(control);
        Ok(process)
    });
    spawner
}

fn no_spawn() -> MockProcessSpawner {
    let mut spawner = MockProcessSpawner::new();
    spawner.expect_spawn().times(0);
    spawner
}

fn sandbox_report() -> ProtectionReport {
    ProtectionReport {
        sandbox: SandboxKind::LinuxLandlockSeccomp,
        policy: "workspace-write".into(),
        protections: vec![Protection {
            name: "filesystem".into(),
            status: ProtectionStatus::Enforced,
            detail: "landlock ABI 7".into(),
        }],
        escape_reason: None,
    }
}

/// A sandbox that wraps nothing and reports Landlock; counts prepares.
fn sandbox_ok(prepares: Arc<AtomicUsize>) -> MockSandbox {
    let mut sandbox = MockSandbox::new();
    sandbox.expect_refusal_mark().returning(|| 0);
    sandbox.expect_refusals().returning(|_| None);
    sandbox.expect_denial_hint().returning(|_, _| None);
    sandbox.expect_replan_after_setup_failure().returning(|_, _| false);
    sandbox.expect_kind().return_const(SandboxKind::LinuxLandlockSeccomp);
    sandbox.expect_prepare().returning(move |request| {
        prepares.fetch_add(1, Ordering::SeqCst);
        let mut spawn = request.spawn;
        spawn.env.push((OsString::from("UEXEC_SANDBOX"), OsString::from("linux-landlock-seccomp")));
        Ok(SandboxedSpawn { spawn, report: sandbox_report(), lease: SandboxLease::NONE })
    });
    sandbox
}

/// A sandbox like [`sandbox_ok`] that records what it refused itself (its DNS responder's lookup of
/// `pypi.org`): the evidence of a denial is then the sandbox's, not only the command's output.
fn sandbox_recording() -> MockSandbox {
    let mut sandbox = MockSandbox::new();
    sandbox.expect_refusal_mark().returning(|| 0);
    sandbox.expect_refusals().returning(|_| Some(vec![Refusal::Lookup { name: "pypi.org".into() }]));
    sandbox.expect_denial_hint().returning(|_, _| None);
    sandbox.expect_replan_after_setup_failure().returning(|_, _| false);
    sandbox.expect_kind().return_const(SandboxKind::LinuxLandlockSeccomp);
    sandbox.expect_prepare().returning(move |request| {
        Ok(SandboxedSpawn { spawn: request.spawn, report: sandbox_report(), lease: SandboxLease::NONE })
    });
    sandbox
}

/// Everything a question shows of the engine's text: its reason and its warnings.
fn shown(request: &ApprovalRequest) -> String {
    let mut text = request.reason.clone().unwrap_or_default();
    for warning in &request.warnings {
        text.push('\n');
        text.push_str(warning);
    }
    text
}

fn sandbox_never() -> MockSandbox {
    let mut sandbox = MockSandbox::new();
    sandbox.expect_refusal_mark().returning(|| 0);
    sandbox.expect_refusals().returning(|_| None);
    sandbox.expect_denial_hint().returning(|_, _| None);
    sandbox.expect_kind().return_const(SandboxKind::LinuxLandlockSeccomp);
    sandbox.expect_prepare().times(0);
    sandbox
}

fn approver_never() -> MockApprover {
    let mut approver = MockApprover::new();
    approver.expect_request_approval().times(0);
    approver
}

/// An approver answering `decision` exactly `times` times, recording the requests.
fn approver(decision: ReviewDecision, times: usize, asked: Arc<Mutex<Vec<ApprovalRequest>>>) -> MockApprover {
    let mut approver = MockApprover::new();
    approver.expect_request_approval().times(times).returning(move |request| {
        asked.lock().unwrap().push(request);
        Ok(decision)
    });
    approver
}

type Events = Arc<Mutex<Vec<ExecEvent>>>;

fn recorder(events: Events) -> MockEventSink {
    let mut sink = MockEventSink::new();
    sink.expect_emit().returning(move |event| events.lock().unwrap().push(event));
    sink
}

fn config(approval: ApprovalPolicy, sandbox: SandboxPolicy) -> EngineConfig {
    let mut config = EngineConfig::new(std::env::temp_dir());
    config.approval_policy = approval;
    config.sandbox_policy = sandbox;
    config.id_seed = Some(7);
    config.base_env = vec![(OsString::from("HOME"), OsString::from("/home/test"))];
    config
}

fn engine(
    config: EngineConfig,
    spawner: MockProcessSpawner,
    sandbox: MockSandbox,
    approver: MockApprover,
    events: Events,
) -> Engine {
    Engine::new(
        config,
        EngineDeps {
            spawner: Arc::new(spawner),
            sandbox: Arc::new(sandbox),
            approver: Arc::new(approver),
            events: Arc::new(recorder(events)),
        },
    )
}

/// The processes a case's spawner starts.
enum Processes {
    /// Spawning fails the test.
    None,
    /// Each spawn follows the next script (the last one repeats).
    Run(Vec<Script>),
    /// A spawner of the case's own.
    Mock(MockProcessSpawner),
}

/// A case's sandbox.
enum Sandboxing {
    /// Preparing fails the test.
    Never,
    /// Wraps nothing, reports Landlock, counts its prepares ([`Checked::prepares`]).
    Prepares,
    /// A sandbox of the case's own.
    Mock(MockSandbox),
}

/// A case's person.
enum Answers {
    /// Asking fails the test.
    Never,
    /// Answers this decision exactly this many times.
    Always(ReviewDecision, usize),
    /// An approver of the case's own.
    Mock(MockApprover),
}

/// One orchestration case, data first (in the style of rust-analyzer's `check` helpers): the engine's
/// configuration and what each mocked port does. [`check`] builds the engine and hands back what the ports
/// record.
struct Case {
    config: EngineConfig,
    processes: Processes,
    sandbox: Sandboxing,
    answers: Answers,
}

/// The engine of a [`Case`] and what its ports recorded.
struct Checked {
    engine: Engine,
    events: Events,
    /// The questions the person was asked.
    asked: Arc<Mutex<Vec<ApprovalRequest>>>,
    /// The spawn requests and the fake processes started.
    spawned: Arc<Spawned>,
    /// How many times the sandbox prepared a spawn.
    prepares: Arc<AtomicUsize>,
}

/// The engine for `case`, on mocks whose expectations are checked when it is dropped.
fn check(case: Case) -> Checked {
    let Case { config, processes, sandbox, answers } = case;
    let (events, asked) = (Events::default(), Arc::new(Mutex::new(Vec::new())));
    let (spawned, prepares) = (Arc::new(Spawned::default()), Arc::new(AtomicUsize::new(0)));
    let spawner = match processes {
        Processes::None => no_spawn(),
        Processes::Run(scripts) => spawner(scripts, Arc::clone(&spawned)),
        Processes::Mock(spawner) => spawner,
    };
    let sandbox = match sandbox {
        Sandboxing::Never => sandbox_never(),
        Sandboxing::Prepares => sandbox_ok(Arc::clone(&prepares)),
        Sandboxing::Mock(sandbox) => sandbox,
    };
    let approver = match answers {
        Answers::Never => approver_never(),
        Answers::Always(decision, times) => approver(decision, times, Arc::clone(&asked)),
        Answers::Mock(approver) => approver,
    };
    let engine = engine(config, spawner, sandbox, approver, Arc::clone(&events));
    Checked { engine, events, asked, spawned, prepares }
}

fn exec(cmd: &str) -> ExecCommandRequest {
    ExecCommandRequest { cmd: cmd.into(), call_id: Some(format!("call-{cmd}")), ..Default::default() }
}

fn write(id: SessionId, chars: &str) -> WriteStdinRequest {
    WriteStdinRequest {
        session_id: id,
        chars: chars.into(),
        yield_time_ms: None,
        max_output_tokens: None,
        max_wait: None,
    }
}

fn count(events: &Events, pred: impl Fn(&ExecEvent) -> bool) -> usize {
    events.lock().unwrap().iter().filter(|e| pred(e)).count()
}

fn begins(events: &Events) -> Vec<ProtectionReport> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ExecEvent::Begin { protections, .. } => Some(protections.clone()),
            _ => None,
        })
        .collect()
}

fn ends(events: &Events) -> Vec<(SessionId, i32, String)> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ExecEvent::End { session_id, exit_code, aggregated_output, .. } => {
                Some((*session_id, *exit_code, aggregated_output.clone()))
            }
            _ => None,
        })
        .collect()
}

fn is_begin(e: &ExecEvent) -> bool {
    matches!(e, ExecEvent::Begin { .. })
}

fn is_end(e: &ExecEvent) -> bool {
    matches!(e, ExecEvent::End { .. })
}

/// Wait (virtual time) until `pred` holds.
async fn eventually(what: &str, mut pred: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if pred() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// True when `wall` is the window `ms` (virtual time: at most a few timer ticks late).
fn within(wall: Duration, ms: u64) -> bool {
    wall >= Duration::from_millis(ms) && wall < Duration::from_millis(ms + 20)
}

const SANDBOXED: fn() -> SandboxPolicy = SandboxPolicy::default;

// ---------------------------------------------------------------------------------------------------------------
// Approvals
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn untrusted_asks_exactly_once_per_call_for_an_unsafe_command_and_not_for_a_safe_one() {
    let Checked { engine, events, asked, spawned: record, .. } = check(Case {
        config: config(ApprovalPolicy::Untrusted, SANDBOXED()),
        processes: Processes::Run(vec![Script::exits("done\n", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 2),
    });
    let response = engine.exec_command(exec("rm -rf build")).await.unwrap();
    assert_eq!(response.exit_code, Some(0));
    assert_eq!(response.output, "done\n");
    // Approved once is not remembered: the same command asks again. A justification does not replace the
    // reason a person is asked (it is the question of an escalation only).
    engine
        .exec_command(ExecCommandRequest { justification: Some("harmless".into()), ..exec("rm -rf build") })
        .await
        .unwrap();
    // Known-safe commands run without asking.
    engine.exec_command(exec("ls -la")).await.unwrap();
    engine.exec_command(exec("pwd && cat README.md")).await.unwrap();

    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].kind, ApprovalKind::Run);
    assert_eq!(asked[0].command, vec!["/bin/bash".to_owned(), "-lc".into(), "rm -rf build".into()]);
    assert_eq!(asked[0].call_id, "call-rm -rf build");
    assert!(asked[0].reason.as_deref().unwrap().contains("untrusted"));
    assert!(asked[1].reason.as_deref().unwrap().contains("untrusted"), "{:?}", asked[1]);
    assert_eq!(count(&events, |e| matches!(e, ExecEvent::ApprovalRequested { .. })), 2);
    assert_eq!(
        count(&events, |e| matches!(
            e,
            ExecEvent::ApprovalDecided { decision: Some(ReviewDecision::Approved), error: None, .. }
        )),
        2
    );
    assert_eq!(record.requests.lock().unwrap().len(), 4);
}

/// Git reads configuration that names programs (`core.fsmonitor`, `diff.external`, pagers, filters) from the
/// repository it discovers upward from the working directory: in a directory sandboxed commands can write (here
/// `/tmp`, a writable root of `workspace-write`) git is not known safe and asks; with nothing writable
/// (`read-only`) it runs without asking. Other known-safe commands are unaffected.
#[tokio::test(start_paused = true)]
async fn untrusted_asks_for_git_where_sandboxed_commands_can_write_its_repository() {
    let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    for cmd in ["git status", "git diff HEAD", "ls && git log -n 1", "git cat-file --filters HEAD:x"] {
        let mut cfg = config(ApprovalPolicy::Untrusted, SANDBOXED());
        cfg.cwd = tmp.clone();
        let Checked { engine, asked, .. } = check(Case {
            config: cfg,
            processes: Processes::None,
            sandbox: Sandboxing::Never,
            answers: Answers::Always(ReviewDecision::Denied, 1),
        });
        assert_eq!(engine.exec_command(exec(cmd)).await.unwrap_err(), ExecError::Rejected, "{cmd}");
        let asked = asked.lock().unwrap();
        assert_eq!(asked[0].kind, ApprovalKind::Run);
        // The question says why a read-only command asks.
        let reason = asked[0].reason.as_deref().unwrap();
        assert!(
            reason.contains("the working directory") && reason.contains("can be written by sandboxed"),
            "{reason}"
        );
    }
    // Outside every place a sandboxed command may ever have written (whatever today's mode: files written
    // under workspace-write yesterday are still there), git runs without asking; in the workspace it asks even
    // under read-only.
    let outside = PathBuf::from(format!("/var/tmp/uexec-orchestration-git-{}", std::process::id()));
    std::fs::create_dir_all(&outside).unwrap();
    for cmd in ["git status", "ls && git log -n 1"] {
        let mut cfg = config(ApprovalPolicy::Untrusted, SandboxPolicy::ReadOnly { network_access: false });
        cfg.cwd = tmp.clone();
        let Checked { engine: outside_engine, .. } = check(Case {
            config: cfg,
            processes: Processes::Run(vec![Script::exits("", 0)]),
            sandbox: Sandboxing::Prepares,
            answers: Answers::Never,
        });
        let request = ExecCommandRequest { workdir: Some(outside.clone()), ..exec(cmd) };
        outside_engine.exec_command(request).await.unwrap();
        let mut cfg = config(ApprovalPolicy::Untrusted, SandboxPolicy::ReadOnly { network_access: false });
        cfg.cwd = tmp.clone();
        let Checked { engine: in_workspace, .. } = check(Case {
            config: cfg,
            processes: Processes::None,
            sandbox: Sandboxing::Never,
            answers: Answers::Always(ReviewDecision::Denied, 1),
        });
        assert_eq!(in_workspace.exec_command(exec(cmd)).await.unwrap_err(), ExecError::Rejected, "{cmd}");
    }
    std::fs::remove_dir_all(&outside).unwrap();
    // A PATH directory in a writable root makes even `ls` ask: a sandboxed command could plant `ls` there.
    let mut cfg = config(ApprovalPolicy::Untrusted, SANDBOXED());
    cfg.base_env.push((OsString::from("PATH"), OsString::from(format!("{}/bin:/usr/bin", tmp.display()))));
    let Checked { engine, .. } = check(Case {
        config: cfg,
        processes: Processes::None,
        sandbox: Sandboxing::Never,
        answers: Answers::Always(ReviewDecision::Denied, 1),
    });
    assert_eq!(engine.exec_command(exec("ls")).await.unwrap_err(), ExecError::Rejected);
}

#[tokio::test(start_paused = true)]
async fn approved_for_session_is_remembered_per_canonical_command_cwd_and_tty() {
    let Checked { engine, asked, .. } = check(Case {
        config: config(ApprovalPolicy::Untrusted, SANDBOXED()),
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::ApprovedForSession, 2),
    });
    engine.exec_command(exec("touch a")).await.unwrap();
    engine.exec_command(exec("touch a")).await.unwrap();
    // `-c` instead of `-lc` is the same canonical command.
    engine.exec_command(ExecCommandRequest { login: Some(false), ..exec("touch a") }).await.unwrap();
    // A different tty setting is a different key: asked again (second and last question).
    engine.exec_command(ExecCommandRequest { tty: true, ..exec("touch a") }).await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_approved_prefix_admits_later_commands_starting_with_it_and_nothing_else() {
    let mut cfg = config(ApprovalPolicy::OnRequest, SANDBOXED());
    // A configured `ask` rule longer than the approved prefix still asks.
    cfg.rules = CommandRules {
        rules: vec![PrefixRule {
            prefix: vec!["git".into(), "pull".into(), "--force".into()],
            decision: RuleDecision::Ask,
        }],
    };
    let Checked { engine, asked, .. } = check(Case {
        config: cfg,
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::ApprovedPrefixForSession, 6),
    });
    let escalated = |cmd: &str, prefix: Option<&[&str]>| ExecCommandRequest {
        sandbox_permissions: SandboxPermissions::RequireEscalated,
        prefix_rule: prefix.map(|p| p.iter().map(|w| (*w).to_owned()).collect()),
        ..exec(cmd)
    };
    // Asked once, with the prefix offered; then commands starting with it run without asking.
    engine.exec_command(escalated("git pull --rebase", Some(&["git", "pull"]))).await.unwrap();
    assert_eq!(asked.lock().unwrap()[0].prefix_offer, Some(vec!["git".to_owned(), "pull".to_owned()]));
    engine.exec_command(escalated("git pull origin main", None)).await.unwrap();
    engine.exec_command(escalated("git pull", None)).await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 1);
    // Not covered: another command, a script with any other command in it (even `cd`), a longer `ask` rule.
    engine.exec_command(escalated("git push", None)).await.unwrap();
    engine.exec_command(escalated("git pull && rm -rf x", None)).await.unwrap();
    engine.exec_command(escalated("cd sub && git pull", None)).await.unwrap();
    engine.exec_command(escalated("git pull --force", None)).await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 5);
    // A prefix that is not one of the command, or a bare shell: not offered (and so not remembered).
    engine.exec_command(escalated("bash -c 'rm -rf x'", Some(&["bash"]))).await.unwrap();
    let questions = asked.lock().unwrap().clone();
    assert_eq!(questions.len(), 6);
    assert!(questions[1..].iter().all(|q| q.prefix_offer.is_none()), "{questions:?}");
}

#[tokio::test(start_paused = true)]
async fn denied_and_aborted_fail_with_rejected_by_user_and_spawn_nothing() {
    for decision in [ReviewDecision::Denied, ReviewDecision::Abort] {
        let Checked { engine, events, .. } = check(Case {
            config: config(ApprovalPolicy::Untrusted, SANDBOXED()),
            processes: Processes::None,
            sandbox: Sandboxing::Never,
            answers: Answers::Always(decision, 1),
        });
        let err = engine.exec_command(exec("rm -rf /tmp/x")).await.unwrap_err();
        assert_eq!(err, ExecError::Rejected);
        assert_eq!(err.to_string(), "rejected by user");
        assert_eq!(engine.reserved_id_count(), 0, "the reserved id is released");
        assert_eq!(count(&events, is_begin), 0);
        assert_eq!(count(&events, is_end), 0);
        assert!(engine.list_sessions().await.is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn never_refuses_what_would_need_asking_and_says_which_setting_allows_it() {
    let rules = CommandRules {
        rules: vec![PrefixRule { prefix: vec!["git".into(), "push".into()], decision: RuleDecision::Ask }],
    };
    let mut cfg = config(ApprovalPolicy::Never, SANDBOXED());
    cfg.rules = rules;
    let Checked { engine, .. } = check(Case {
        config: cfg,
        processes: Processes::None,
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    let err = engine.exec_command(exec("git push origin main")).await.unwrap_err();
    let ExecError::Forbidden(text) = &err else { panic!("expected Forbidden, got {err:?}") };
    assert!(text.contains("never") && text.contains("on-request"), "{text}");
    let err = engine
        .exec_command(ExecCommandRequest {
            sandbox_permissions: SandboxPermissions::RequireEscalated,
            ..exec("ls")
        })
        .await
        .unwrap_err();
    assert_eq!(err, ExecError::EscalationNotAllowed(ApprovalPolicy::Never));
    assert!(err.to_string().contains("escalation not allowed under approval policy never"));
    assert_eq!(engine.reserved_id_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn command_rules_forbid_always_ask_under_on_request_allow_skips_untrusted() {
    let rules = CommandRules {
        rules: vec![
            PrefixRule { prefix: vec!["rm".into()], decision: RuleDecision::Forbid },
            PrefixRule { prefix: vec!["git".into(), "push".into()], decision: RuleDecision::Ask },
            PrefixRule { prefix: vec!["cargo".into()], decision: RuleDecision::Allow },
        ],
    };
    let mut cfg = config(ApprovalPolicy::OnRequest, SANDBOXED());
    cfg.rules = rules.clone();
    let Checked { engine: on_request, asked, .. } = check(Case {
        config: cfg,
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 1),
    });
    let err = on_request.exec_command(exec("rm -rf target")).await.unwrap_err();
    assert!(matches!(err, ExecError::Forbidden(ref t) if t.contains("forbid")), "{err:?}");
    on_request.exec_command(exec("git push")).await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 1);

    let mut cfg = config(ApprovalPolicy::Untrusted, SANDBOXED());
    cfg.rules = rules;
    let Checked { engine: untrusted, .. } = check(Case {
        config: cfg,
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Never,
    });
    untrusted.exec_command(exec("cargo build")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn escalation_asks_under_every_policy_that_asks_and_runs_unsandboxed() {
    let Checked { engine, events, asked, prepares, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SANDBOXED()),
        processes: Processes::Run(vec![Script::exits("ok", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 1),
    });
    let request = ExecCommandRequest {
        sandbox_permissions: SandboxPermissions::RequireEscalated,
        justification: Some("needs the network".into()),
        ..exec("ls")
    };
    let response = engine.exec_command(request).await.unwrap();
    assert_eq!(prepares.load(Ordering::SeqCst), 0, "an approved escalation runs without the sandbox");
    let question = asked.lock().unwrap()[0].clone();
    assert_eq!(question.kind, ApprovalKind::Escalation);
    assert_eq!(question.reason.as_deref(), Some("needs the network"));
    let report = response.protections.unwrap();
    assert_eq!(report.escape_reason, Some(EscapeReason::ApprovedEscalation));
    assert_eq!(report.sandbox, SandboxKind::None);
    assert_eq!(begins(&events)[0].escape_reason, Some(EscapeReason::ApprovedEscalation));

    // The stricter policies ask too (a person decides), and deny when the person does.
    for policy in [ApprovalPolicy::Untrusted, ApprovalPolicy::OnFailure] {
        let Checked { engine, asked, prepares, .. } = check(Case {
            config: config(policy, SANDBOXED()),
            processes: Processes::Run(vec![Script::exits("ok", 0)]),
            sandbox: Sandboxing::Prepares,
            answers: Answers::Always(ReviewDecision::Approved, 1),
        });
        let escalated = ExecCommandRequest {
            sandbox_permissions: SandboxPermissions::RequireEscalated,
            justification: Some("needs the network".into()),
            ..exec("ls")
        };
        assert_eq!(engine.exec_command(escalated).await.unwrap().output, "ok", "{policy:?}");
        assert_eq!(asked.lock().unwrap()[0].kind, ApprovalKind::Escalation, "{policy:?}");
        assert_eq!(prepares.load(Ordering::SeqCst), 0, "{policy:?}");
    }
}

fn engine_for_policy(policy: ApprovalPolicy) -> Engine {
    engine(config(policy, SANDBOXED()), no_spawn(), sandbox_never(), approver_never(), Events::default())
}

#[tokio::test(start_paused = true)]
async fn approver_errors_become_approval_unavailable_and_release_the_id() {
    let mut approver = MockApprover::new();
    approver
        .expect_request_approval()
        .times(1)
        .returning(|_| Err(ApprovalError::Unavailable("no interactive client to ask".into())));
    let Checked { engine, events, .. } = check(Case {
        config: config(ApprovalPolicy::Untrusted, SANDBOXED()),
        processes: Processes::None,
        sandbox: Sandboxing::Never,
        answers: Answers::Mock(approver),
    });
    let err = engine.exec_command(exec("make install")).await.unwrap_err();
    // Typed: nobody could be asked (not a broken channel, not an unanswered question).
    let ExecError::ApprovalUnavailable(ApprovalError::Unavailable(text)) = &err else { panic!("{err:?}") };
    assert!(text.contains("no interactive client to ask"), "{text}");
    assert_eq!(engine.reserved_id_count(), 0);
    assert_eq!(
        count(&events, |e| matches!(e, ExecEvent::ApprovalDecided { decision: None, error: Some(_), .. })),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_gives_up_during_approval_releases_the_id() {
    // An approver that answers after an hour.
    struct Slow;
    #[async_trait]
    impl uexec_ports::Approver for Slow {
        async fn request_approval(&self, _r: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(ReviewDecision::Approved)
        }
    }
    let engine = Engine::new(
        config(ApprovalPolicy::Untrusted, SANDBOXED()),
        EngineDeps {
            spawner: Arc::new(no_spawn()),
            sandbox: Arc::new(sandbox_never()),
            approver: Arc::new(Slow),
            events: Arc::new(recorder(Events::default())),
        },
    );
    let call = engine.exec_command(exec("make"));
    let timed_out = tokio::time::timeout(Duration::from_secs(5), call).await;
    assert!(timed_out.is_err());
    assert_eq!(engine.reserved_id_count(), 0);
}

// ---------------------------------------------------------------------------------------------------------------
// Sandbox choice and retry
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn sandbox_prepare_error_fails_the_call_and_spawns_nothing() {
    let mut sandbox = MockSandbox::new();
    sandbox.expect_refusal_mark().returning(|| 0);
    sandbox.expect_refusals().returning(|_| None);
    sandbox.expect_denial_hint().returning(|_, _| None);
    sandbox.expect_kind().return_const(SandboxKind::LinuxLandlockSeccomp);
    sandbox.expect_prepare().times(1).returning(|_| {
        Err(SandboxError::Unenforceable {
            missing: "Landlock is not supported by this kernel".into(),
            setting: Some("allow_degraded_sandbox = true".into()),
        })
    });
    let Checked { engine, events, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SANDBOXED()),
        processes: Processes::None,
        sandbox: Sandboxing::Mock(sandbox),
        answers: Answers::Never,
    });
    let err = engine.exec_command(exec("ls")).await.unwrap_err();
    assert!(matches!(err, ExecError::Sandbox(SandboxError::Unenforceable { .. })));
    let text = err.to_string();
    assert!(text.contains("Landlock is not supported") && text.contains("nothing was run"), "{text}");
    assert_eq!(engine.reserved_id_count(), 0);
    assert_eq!(count(&events, is_begin), 0);
}

#[tokio::test(start_paused = true)]
async fn the_sandbox_gets_the_policy_tmpdir_and_degradation_setting_and_full_access_skips_it() {
    let mut cfg = config(ApprovalPolicy::OnRequest, SANDBOXED());
    cfg.allow_degraded_sandbox = true;
    cfg.report_protections = true;
    cfg.base_env.push((OsString::from("TMPDIR"), OsString::from("/var/tmp/x")));
    let mut sandbox = MockSandbox::new();
    sandbox.expect_refusal_mark().returning(|| 0);
    sandbox.expect_refusals().returning(|_| None);
    sandbox.expect_denial_hint().returning(|_, _| None);
    sandbox.expect_kind().return_const(SandboxKind::LinuxLandlockSeccomp);
    sandbox
        .expect_prepare()
        .times(1)
        .withf(|r| {
            r.allow_degraded
                && r.tmpdir == Some(PathBuf::from("/var/tmp/x"))
                && r.policy == SandboxPolicy::default()
        })
        .returning(|r| {
            Ok(SandboxedSpawn { spawn: r.spawn, report: sandbox_report(), lease: SandboxLease::NONE })
        });
    let Checked { engine, .. } = check(Case {
        config: cfg,
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Mock(sandbox),
        answers: Answers::Never,
    });
    let response = engine.exec_command(exec("ls")).await.unwrap();
    assert_eq!(response.protections, Some(sandbox_report()));
    assert!(response.to_text().ends_with(
        "\n[uexec] Sandbox: linux-landlock-seccomp (workspace-write): all 1 protections enforced"
    ));

    let events = Events::default();
    let mut cfg = config(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess);
    cfg.report_protections = true;
    let open = engine_with(cfg, vec![Script::exits("", 0)], Arc::clone(&events));
    let response = open.exec_command(exec("ls")).await.unwrap();
    let report = response.protections.unwrap();
    assert_eq!(report.escape_reason, Some(EscapeReason::FullAccessPolicy));
    assert_eq!(begins(&events), vec![report]);
}

#[tokio::test(start_paused = true)]
async fn by_default_only_news_about_the_sandbox_is_reported_and_only_by_exec_command() {
    // The sandbox the policy selects is in the server's instructions: not repeated on every call.
    let events = Events::default();
    let open = engine_with(
        config(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess),
        vec![Script::exits("", 0)],
        Arc::clone(&events),
    );
    let response = open.exec_command(exec("ls")).await.unwrap();
    assert_eq!(response.protections, None);
    assert!(!response.to_text().contains("[uexec]"), "{}", response.to_text());
    assert_eq!(begins(&events).len(), 1, "the audit trail still has the report");
}

/// An engine with a never-called sandbox and approver.
fn engine_with(cfg: EngineConfig, scripts: Vec<Script>, events: Events) -> Engine {
    engine(cfg, spawner(scripts, Arc::default()), sandbox_never(), approver_never(), events)
}

fn denial() -> Script {
    Script::exits("bash: /etc/x: Permission denied\n", 1)
}

#[tokio::test(start_paused = true)]
async fn on_failure_asks_to_retry_a_sandbox_denial_and_reruns_unsandboxed() {
    let Checked { engine, events, asked, spawned: record, prepares, .. } = check(Case {
        config: config(ApprovalPolicy::OnFailure, SANDBOXED()),
        processes: Processes::Run(vec![denial(), Script::exits("written\n", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 1),
    });
    let response = engine.exec_command(exec("echo x > /etc/x")).await.unwrap();
    assert_eq!(response.exit_code, Some(0));
    assert_eq!(response.output, "written\n");
    assert_eq!(response.protections.unwrap().escape_reason, Some(EscapeReason::RetryAfterDenial));
    let asked = asked.lock().unwrap();
    assert_eq!(asked[0].kind, ApprovalKind::RetryWithoutSandbox);
    // The spec's question, what the denial was, and that the retry has full access.
    let reason = asked[0].reason.as_deref().unwrap();
    assert!(reason.starts_with("command failed; retry without sandbox?"), "{reason}");
    assert!(reason.contains("FULL ACCESS"), "{reason}");
    // The evidence is the output's word only, and the question says so in a warning of its own.
    assert!(asked[0].warnings.iter().any(|w| w.contains("only the command's own output")), "{:?}", asked[0]);
    let denial = asked[0].denial.clone().unwrap();
    assert_eq!((denial.exit_code, denial.line.as_deref()), (1, Some("bash: /etc/x: Permission denied")));
    assert_eq!(prepares.load(Ordering::SeqCst), 1);
    let requests = record.requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].env.iter().any(|(k, _)| k == "UEXEC_SANDBOX"));
    assert!(!requests[1].env.iter().any(|(k, _)| k == "UEXEC_SANDBOX"));
    // Each spawned attempt has its Begin and its End, same call and session id.
    let begins = begins(&events);
    assert_eq!(begins.len(), 2);
    assert_eq!(begins[0].escape_reason, None);
    assert_eq!(begins[1].escape_reason, Some(EscapeReason::RetryAfterDenial));
    let ends = ends(&events);
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[0].1, 1);
    assert_eq!(ends[1].1, 0);
    assert_eq!(ends[0].0, ends[1].0);
    assert_eq!(engine.reserved_id_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_declined_retry_returns_the_sandboxed_output_with_a_note_and_an_abort_fails() {
    let Checked { engine: declining, events, spawned: record, .. } = check(Case {
        config: config(ApprovalPolicy::OnFailure, SANDBOXED()),
        processes: Processes::Run(vec![denial()]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Denied, 1),
    });
    let response = declining.exec_command(exec("echo x > /etc/x")).await.unwrap();
    assert_eq!(response.exit_code, Some(1));
    assert_eq!(response.output, "bash: /etc/x: Permission denied\n");
    let note = response.warning.unwrap();
    assert!(note.contains("not run again without the sandbox (a person declined"), "{note}");
    // Sandboxed as the policy says: nothing new to report about the sandbox, and the one Begin has no escape.
    assert_eq!(response.protections, None);
    assert_eq!(begins(&events)[0].escape_reason, None);
    assert_eq!(record.requests.lock().unwrap().len(), 1);
    assert_eq!(declining.reserved_id_count(), 0);
    assert!(declining.list_sessions().await.is_empty());
    assert_eq!(count(&events, is_begin), 1);
    assert_eq!(count(&events, is_end), 1);

    // Abort ("stop the task") fails the call as a rejection, and cleans up.
    let Checked { engine: aborting, events, .. } = check(Case {
        config: config(ApprovalPolicy::OnFailure, SANDBOXED()),
        processes: Processes::Run(vec![denial()]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Abort, 1),
    });
    assert_eq!(aborting.exec_command(exec("echo x > /etc/x")).await.unwrap_err(), ExecError::Rejected);
    assert_eq!(aborting.reserved_id_count(), 0);
    assert!(aborting.list_sessions().await.is_empty());
    assert_eq!(count(&events, is_begin), 1);
    assert_eq!(count(&events, is_end), 1);
}

/// Over-blocking regression: under `untrusted`/`on-failure` with nobody to ask, a failing command whose output
/// merely contains "permission denied" became a tool error and its output was lost. The caller always gets the
/// output, with a note saying no retry was possible and why.
#[tokio::test(start_paused = true)]
async fn with_nobody_to_ask_a_denial_returns_its_output_and_a_note_instead_of_an_error() {
    for policy in [ApprovalPolicy::OnFailure, ApprovalPolicy::Untrusted] {
        let record = Arc::new(Spawned::default());
        let mut nobody = MockApprover::new();
        nobody
            .expect_request_approval()
            .times(1)
            .withf(|r| r.kind == ApprovalKind::RetryWithoutSandbox && r.denial.is_some())
            .returning(|_| Err(ApprovalError::Unavailable("this MCP client cannot ask a person".into())));
        let Checked { engine, events, .. } = check(Case {
            config: config(policy, SANDBOXED()),
            processes: Processes::Mock(spawner(
                vec![Script::exits("grep: secret: Permission denied\nresult 42\n", 2)],
                Arc::clone(&record),
            )),
            sandbox: Sandboxing::Prepares,
            answers: Answers::Mock(nobody),
        });
        // `grep` is known safe (no person approved it): the retry must ask, and cannot.
        let response = engine.exec_command(exec("grep -r result .")).await.unwrap();
        assert_eq!(response.exit_code, Some(2), "{policy:?}");
        assert_eq!(response.output, "grep: secret: Permission denied\nresult 42\n");
        let note = response.warning.clone().unwrap();
        assert!(note.contains("exit code 2, output line \"grep: secret: Permission denied\""), "{note}");
        assert!(
            note.contains("not run again without the sandbox (approval unavailable: ")
                && note.contains("cannot ask a person"),
            "{note}"
        );
        assert!(response.to_text().contains("Warning: the sandbox appears to have blocked this command"));
        assert_eq!(record.requests.lock().unwrap().len(), 1, "never retried: {policy:?}");
        assert_eq!(begins(&events).len(), 1);
        assert_eq!(engine.reserved_id_count(), 0);
    }
}

/// A command admitted as known safe (nobody approved it) is never retried outside the sandbox without a
/// person approving that retry, under either retrying policy; a session approval of the retry covers later ones.
#[tokio::test(start_paused = true)]
async fn a_known_safe_command_is_retried_outside_the_sandbox_only_after_a_person_approves_the_retry() {
    for policy in [ApprovalPolicy::Untrusted, ApprovalPolicy::OnFailure] {
        let Checked { engine, asked, spawned: record, .. } = check(Case {
            config: config(policy, SANDBOXED()),
            processes: Processes::Run(vec![denial(), Script::exits("ok", 0)]),
            sandbox: Sandboxing::Prepares,
            answers: Answers::Always(ReviewDecision::Approved, 1),
        });
        let response = engine.exec_command(exec("cat /etc/x")).await.unwrap();
        assert_eq!(response.output, "ok");
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].kind, ApprovalKind::RetryWithoutSandbox, "{policy:?}");
        assert!(asked[0].reason.as_deref().unwrap().contains("FULL ACCESS"));
        assert_eq!(record.requests.lock().unwrap().len(), 2);
    }
}

#[tokio::test(start_paused = true)]
async fn untrusted_retries_without_asking_again_when_a_person_approved_the_first_run() {
    // The person chose "approve, and rerun it without the sandbox if it is blocked", and the sandbox recorded
    // the refusal itself: the run goes on outside it, unasked.
    let Checked { engine, asked, spawned: record, .. } = check(Case {
        config: config(ApprovalPolicy::Untrusted, SANDBOXED()),
        processes: Processes::Run(vec![denial(), Script::exits("ok", 0)]),
        sandbox: Sandboxing::Mock(sandbox_recording()),
        answers: Answers::Always(ReviewDecision::ApprovedWithRetry, 1),
    });
    let response = engine.exec_command(exec("cp a /etc/b")).await.unwrap();
    assert_eq!(response.output, "ok");
    assert_eq!(asked.lock().unwrap()[0].kind, ApprovalKind::Run);
    assert_eq!(record.requests.lock().unwrap().len(), 2);

    // Its twin: "approve" (in the sandbox only) and "approve for session" make the rerun its own question.
    for decision in [ReviewDecision::Approved, ReviewDecision::ApprovedForSession] {
        let Checked { engine, asked, spawned: record, .. } = check(Case {
            config: config(ApprovalPolicy::Untrusted, SANDBOXED()),
            processes: Processes::Run(vec![denial(), Script::exits("ok", 0)]),
            sandbox: Sandboxing::Mock(sandbox_recording()),
            answers: Answers::Always(decision, 2),
        });
        assert_eq!(engine.exec_command(exec("cp a /etc/b")).await.unwrap().output, "ok", "{decision:?}");
        let kinds: Vec<_> = asked.lock().unwrap().iter().map(|r| r.kind).collect();
        assert_eq!(kinds, [ApprovalKind::Run, ApprovalKind::RetryWithoutSandbox], "{decision:?}");
        assert_eq!(record.requests.lock().unwrap().len(), 2);
    }
}

/// A denial that only the command's output shows (it can print any "Permission denied") never takes an
/// approved command outside the sandbox unasked: the retry is its own question, which says so.
#[tokio::test(start_paused = true)]
async fn a_denial_only_the_output_shows_asks_before_its_retry() {
    let Checked { engine, asked, spawned: record, .. } = check(Case {
        config: config(ApprovalPolicy::Untrusted, SANDBOXED()),
        processes: Processes::Run(vec![denial(), Script::exits("ok", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 2),
    });
    let response = engine.exec_command(exec("cp a /etc/b")).await.unwrap();
    assert_eq!(response.output, "ok");
    let asked = asked.lock().unwrap();
    assert_eq!(
        asked.iter().map(|r| r.kind).collect::<Vec<_>>(),
        [ApprovalKind::Run, ApprovalKind::RetryWithoutSandbox]
    );
    assert!(asked[1].warnings.iter().any(|w| w.contains("only the command's own output")), "{:?}", asked[1]);
    assert_eq!(record.requests.lock().unwrap().len(), 2);
}

/// `make install` in the workspace runs a Makefile the sandboxed run itself could have rewritten (then printed a
/// denial to be let out): its retry outside the sandbox asks even after the person approved the run.
#[tokio::test(start_paused = true)]
async fn a_runner_of_writable_project_files_asks_before_its_retry() {
    let Checked { engine, asked, .. } = check(Case {
        config: config(ApprovalPolicy::Untrusted, SANDBOXED()),
        processes: Processes::Run(vec![denial(), Script::exits("ok", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 2),
    });
    engine.exec_command(exec("make install")).await.unwrap();
    let asked = asked.lock().unwrap();
    assert_eq!(
        asked.iter().map(|r| r.kind).collect::<Vec<_>>(),
        [ApprovalKind::Run, ApprovalKind::RetryWithoutSandbox]
    );
    assert!(shown(&asked[1]).contains("Makefile"), "{:?}", asked[1]);
}

/// A read-only command that asked only because what it runs could have been planted (git in a writable
/// repository): approving its run does not approve leaving the sandbox, since the "denial" may come from the
/// planted program itself. The retry asks, even after "approve for session".
#[tokio::test(start_paused = true)]
async fn a_plantable_command_asks_before_every_retry_even_after_its_run_was_approved() {
    let record = Arc::new(Spawned::default());
    let mut cfg = config(ApprovalPolicy::Untrusted, SANDBOXED());
    cfg.cwd = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    let Checked { engine: untrusted, asked, .. } = check(Case {
        config: cfg,
        processes: Processes::Mock(spawner(
            vec![denial(), Script::exits("ok", 0), denial(), Script::exits("ok", 0)],
            Arc::clone(&record),
        )),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::ApprovedForSession, 3),
    });
    assert_eq!(untrusted.exec_command(exec("git status")).await.unwrap().output, "ok");
    // Remembered for the run, but the retry asks again.
    assert_eq!(untrusted.exec_command(exec("git status")).await.unwrap().output, "ok");
    let kinds: Vec<_> = asked.lock().unwrap().iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [ApprovalKind::Run, ApprovalKind::RetryWithoutSandbox, ApprovalKind::RetryWithoutSandbox]
    );
    let retry_reason = shown(&asked.lock().unwrap()[1]);
    assert!(retry_reason.contains("Beware: the working directory"), "{retry_reason}");
    assert_eq!(record.requests.lock().unwrap().len(), 4);

    // Under on-failure (which runs it sandboxed without asking) the retry question warns the same way.
    let asked = Arc::new(Mutex::new(Vec::new()));
    let mut cfg = config(ApprovalPolicy::OnFailure, SANDBOXED());
    cfg.cwd = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    let on_failure = engine(
        cfg,
        spawner(vec![denial()], Arc::default()),
        sandbox_ok(Arc::default()),
        approver(ReviewDecision::Denied, 1, Arc::clone(&asked)),
        Events::default(),
    );
    let response = on_failure.exec_command(exec("git status")).await.unwrap();
    assert!(response.warning.unwrap().contains("a person declined"));
    let asked = asked.lock().unwrap();
    assert_eq!(asked[0].kind, ApprovalKind::RetryWithoutSandbox);
    assert!(shown(&asked[0]).contains("Beware: the working directory"), "{:?}", asked[0]);
}

#[tokio::test(start_paused = true)]
async fn a_session_approval_covers_the_retry() {
    let record = Arc::new(Spawned::default());
    let Checked { engine, asked, .. } = check(Case {
        config: config(ApprovalPolicy::OnFailure, SANDBOXED()),
        processes: Processes::Mock(spawner(
            vec![denial(), Script::exits("ok", 0), denial(), Script::exits("ok", 0)],
            Arc::clone(&record),
        )),
        sandbox: Sandboxing::Mock(sandbox_recording()),
        answers: Answers::Always(ReviewDecision::ApprovedForSession, 1),
    });
    engine.exec_command(exec("touch /etc/x")).await.unwrap();
    // Second time: denied again (the sandbox recorded it), retried without asking.
    let response = engine.exec_command(exec("touch /etc/x")).await.unwrap();
    assert_eq!(response.output, "ok");
    assert_eq!(asked.lock().unwrap().len(), 1);
    assert_eq!(record.requests.lock().unwrap().len(), 4);

    // Its twin: the same, but only the output says so: the session approval does not cover the retry.
    let record = Arc::new(Spawned::default());
    let Checked { engine, asked, .. } = check(Case {
        config: config(ApprovalPolicy::OnFailure, SANDBOXED()),
        processes: Processes::Mock(spawner(
            vec![denial(), Script::exits("ok", 0), denial(), Script::exits("ok", 0)],
            Arc::clone(&record),
        )),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::ApprovedForSession, 2),
    });
    engine.exec_command(exec("touch /etc/x")).await.unwrap();
    engine.exec_command(exec("touch /etc/x")).await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn on_request_and_never_return_the_denial_as_ordinary_output() {
    for policy in [ApprovalPolicy::OnRequest, ApprovalPolicy::Never] {
        let Checked { engine, spawned: record, .. } = check(Case {
            config: config(policy, SANDBOXED()),
            processes: Processes::Run(vec![denial()]),
            sandbox: Sandboxing::Prepares,
            answers: Answers::Never,
        });
        let response = engine.exec_command(exec("touch /etc/x")).await.unwrap();
        assert_eq!(response.exit_code, Some(1));
        assert!(response.output.contains("Permission denied"));
        assert_eq!(record.requests.lock().unwrap().len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn retry_happens_only_inside_the_early_exit_grace_and_only_for_denials() {
    let late = Script { exit_after: Some((Duration::from_millis(400), 1)), ..denial() };
    let not_a_denial = Script::exits("error: file not found\n", 2);
    for script in [late, not_a_denial] {
        let Checked { engine, spawned: record, .. } = check(Case {
            config: config(ApprovalPolicy::OnFailure, SANDBOXED()),
            processes: Processes::Run(vec![script]),
            sandbox: Sandboxing::Prepares,
            answers: Answers::Never,
        });
        let response =
            engine.exec_command(ExecCommandRequest { yield_time_ms: Some(2000), ..exec("x") }).await.unwrap();
        assert!(response.exit_code.is_some_and(|c| c != 0));
        assert_eq!(record.requests.lock().unwrap().len(), 1);
    }
    // The grace is the configured one: a longer grace covers the same late denial, whose retry is asked about.
    let mut longer = config(ApprovalPolicy::OnFailure, SANDBOXED());
    longer.limits.early_exit_grace_ms = 500;
    let late = Script { exit_after: Some((Duration::from_millis(400), 1)), ..denial() };
    let Checked { engine, asked, spawned: record, .. } = check(Case {
        config: longer,
        processes: Processes::Run(vec![late, Script::exits("written\n", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 1),
    });
    let response =
        engine.exec_command(ExecCommandRequest { yield_time_ms: Some(2000), ..exec("x") }).await.unwrap();
    assert_eq!(response.exit_code, Some(0));
    assert_eq!(asked.lock().unwrap()[0].kind, ApprovalKind::RetryWithoutSandbox);
    assert_eq!(record.requests.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn spawn_errors_release_the_id_and_emit_no_begin() {
    let mut spawner = MockProcessSpawner::new();
    spawner
        .expect_spawn()
        .times(1)
        .returning(|_| Err(SpawnError::ProgramNotFound { program: "/bin/nosuchshell".into() }));
    let Checked { engine, events, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess),
        processes: Processes::Mock(spawner),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    let err = engine.exec_command(exec("ls")).await.unwrap_err();
    assert_eq!(err.to_string(), "failed to create process: program not found: /bin/nosuchshell");
    assert_eq!(engine.reserved_id_count(), 0);
    assert_eq!(count(&events, is_begin), 0);
    assert_eq!(count(&events, is_end), 0);
}

// ---------------------------------------------------------------------------------------------------------------
// Validation, argv, env
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn validation_happens_before_approval() {
    let engine = engine_for_policy(ApprovalPolicy::Untrusted);
    assert_eq!(engine.exec_command(exec("  ")).await.unwrap_err(), ExecError::MissingCommand);
    let err = engine
        .exec_command(ExecCommandRequest { workdir: Some("/no/such/dir/anywhere".into()), ..exec("rm x") })
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to create process: working directory does not exist or is not a directory: /no/such/dir/anywhere"
    );
    // `cmd` is one argument of execve: past MAX_ARG_STRLEN it would fail with E2BIG; refused first, naming it.
    let limit = uexec_domain::limits::MAX_ARG_STRLEN;
    let err = engine.exec_command(exec(&"x".repeat(limit))).await.unwrap_err().to_string();
    assert!(err.contains(&format!("cmd is {limit} bytes")) && err.contains("MAX_ARG_STRLEN"), "{err}");
    assert!(err.len() < 1000, "{err}");
    assert_eq!(engine.reserved_id_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn argv_env_workdir_and_mode_are_built_from_the_request() {
    let root = std::env::temp_dir().join(format!("uexec-engine-argv-{}", std::process::id()));
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let mut cfg = config(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess);
    cfg.cwd = root.clone();
    cfg.default_shell = "/bin/zsh".into();
    let Checked { engine, spawned: record, .. } = check(Case {
        config: cfg,
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    engine.exec_command(ExecCommandRequest { workdir: Some("sub".into()), ..exec("echo hi") }).await.unwrap();
    engine
        .exec_command(ExecCommandRequest {
            shell: Some("/bin/sh".into()),
            login: Some(false),
            tty: true,
            ..exec("echo hi")
        })
        .await
        .unwrap();
    let requests = record.requests.lock().unwrap();
    assert_eq!(requests[0].argv, vec![OsString::from("/bin/zsh"), "-lc".into(), "echo hi".into()]);
    assert_eq!(requests[0].cwd, root.join("sub"));
    assert_eq!(requests[0].mode, IoMode::Pipes);
    let env = &requests[0].env;
    let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(get("HOME"), Some("/home/test".into()));
    assert_eq!(get("TERM"), Some("dumb".into()));
    assert_eq!(get("NO_COLOR"), Some("1".into()));
    assert_eq!(requests[1].argv, vec![OsString::from("/bin/sh"), "-c".into(), "echo hi".into()]);
    assert_eq!(requests[1].cwd, root);
    assert_eq!(requests[1].mode, IoMode::Pty(PtySize { rows: 24, cols: 80 }));
    // The terminal session gets a real terminal type (full-screen programs draw in place), colours stay off.
    let env = &requests[1].env;
    let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(get("TERM"), Some("xterm-256color".into()));
    assert_eq!(get("NO_COLOR"), Some("1".into()));
    std::fs::remove_dir_all(&root).unwrap();
}

// ---------------------------------------------------------------------------------------------------------------
// Sessions, write_stdin, events
// ---------------------------------------------------------------------------------------------------------------

fn full_access() -> EngineConfig {
    config(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess)
}

/// `max_wait` (what the caller's client waits) cuts the default exec window (10 s) and an empty poll below its
/// 5 s minimum, and the command runs on in its session. Paired: the same poll without `max_wait` waits its full
/// minimum. On tokio's paused clock, so the windows are measured exactly, whatever the machine's load.
#[tokio::test(start_paused = true)]
async fn max_wait_cuts_every_window_below_its_minimum() {
    let engine = engine_with(full_access(), vec![Script::runs("")], Events::default());
    let max_wait = Some(Duration::from_millis(700));
    let cut = Duration::from_millis(700)..Duration::from_secs(1);
    let started = tokio::time::Instant::now();
    let first = engine.exec_command(ExecCommandRequest { max_wait, ..exec("sleep 30") }).await.unwrap();
    let id = first.session_id.expect("the command still runs in its session");
    assert!(cut.contains(&started.elapsed()), "the 10 s window was not cut: {:?}", started.elapsed());
    let started = tokio::time::Instant::now();
    let poll = engine
        .write_stdin(WriteStdinRequest { max_wait, yield_time_ms: Some(5_000), ..write(id, "") })
        .await
        .unwrap();
    assert_eq!(poll.session_id, Some(id));
    assert!(cut.contains(&started.elapsed()), "the 5 s poll was not cut: {:?}", started.elapsed());
    let started = tokio::time::Instant::now();
    let full =
        engine.write_stdin(WriteStdinRequest { yield_time_ms: Some(5_000), ..write(id, "") }).await.unwrap();
    assert_eq!(full.session_id, Some(id));
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "uncut, the poll waits 5 s: {:?}",
        started.elapsed()
    );
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_live_session_returns_only_new_output_and_is_reaped_after_it_exits() {
    let Checked { engine, events, .. } = check(Case {
        config: full_access(),
        processes: Processes::Run(vec![Script { echo: true, ..Script::runs("$ ") }]),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    let first = engine.exec_command(ExecCommandRequest { tty: true, ..exec("cat") }).await.unwrap();
    let id = first.session_id.expect("alive after the window");
    assert_eq!(first.exit_code, None);
    assert_eq!(first.output, "$ ");
    assert!(first.to_text().contains(&format!("Process running with session ID {id}")));
    assert!(within(first.wall_time, 10_000), "the default window: {:?}", first.wall_time);

    let second = engine.write_stdin(write(id, "hello\n")).await.unwrap();
    assert_eq!(second.output, "hello\n");
    assert_eq!(second.session_id, Some(id));
    let poll = engine.write_stdin(write(id, "")).await.unwrap();
    assert_eq!(poll.output, "");
    assert!(within(poll.wall_time, 5_000), "empty polls wait at least 5 s: {:?}", poll.wall_time);

    let last = engine.write_stdin(write(id, "\u{4}")).await.unwrap();
    assert_eq!(last.exit_code, Some(0));
    assert_eq!(last.session_id, None);
    assert_eq!(last.output, "\u{4}");
    assert_eq!(engine.write_stdin(write(id, "")).await.unwrap_err(), ExecError::UnknownSession(id));
    assert_eq!(ExecError::UnknownSession(id).to_string(), format!("Unknown process id {id}"));
    assert!(engine.list_sessions().await.is_empty());
    assert_eq!(engine.reserved_id_count(), 0);

    assert_eq!(count(&events, is_begin), 1);
    let ends = ends(&events);
    assert_eq!(ends, vec![(id, 0, "$ hello\n\u{4}".to_owned())]);
    let interactions: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ExecEvent::TerminalInteraction { call_id, chars, .. } => {
                assert_eq!(call_id, "call-cat");
                Some(chars.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(interactions, vec!["hello\n", "", "\u{4}"]);
}

#[tokio::test(start_paused = true)]
async fn pipe_sessions_refuse_stdin_but_ctrl_c_interrupts_the_group() {
    let Checked { engine, spawned: record, .. } = check(Case {
        config: full_access(),
        processes: Processes::Run(vec![Script::runs("")]),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    let id = engine.exec_command(exec("sleep 100")).await.unwrap().session_id.unwrap();
    let err = engine.write_stdin(write(id, "y\n")).await.unwrap_err();
    assert_eq!(err, ExecError::StdinClosed);
    assert_eq!(
        err.to_string(),
        "stdin is closed for this session; rerun exec_command with tty=true to keep stdin open"
    );
    let stopped = engine.write_stdin(write(id, "\u{3}")).await.unwrap();
    assert_eq!(stopped.exit_code, Some(130));
    let control = &record.controls.lock().unwrap()[0];
    assert_eq!(*control.signals.lock().unwrap(), vec![Signal::Interrupt]);
    assert!(control.writes.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_short_command_returns_at_once_with_exit_code_and_no_session() {
    let events = Events::default();
    let engine = engine_with(full_access(), vec![Script::exits("hi\n", 3)], Arc::clone(&events));
    let response =
        engine.exec_command(ExecCommandRequest { yield_time_ms: Some(31_000), ..exec("x") }).await.unwrap();
    assert_eq!(response.exit_code, Some(3));
    assert_eq!(response.session_id, None);
    assert!(response.wall_time < Duration::from_millis(200), "{:?}", response.wall_time);
    assert_eq!(response.original_token_count, 1);
    assert_eq!(response.chunk_id.len(), 6);
    assert_eq!(ends(&events), vec![(response_session(&events), 3, "hi\n".to_owned())]);
    assert_eq!(engine.reserved_id_count(), 0);
}

fn response_session(events: &Events) -> SessionId {
    events
        .lock()
        .unwrap()
        .iter()
        .find_map(|e| match e {
            ExecEvent::Begin { session_id, .. } => Some(*session_id),
            _ => None,
        })
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn output_is_truncated_to_the_token_budget() {
    // The spec's worked example: 999 lines `EXEC-LINE-NNNN ` + 20 `x`, 36 bytes each.
    let lines: String = (1..=999).map(|n| format!("EXEC-LINE-{n:04} {}\n", "x".repeat(20))).collect();
    let engine = engine_with(full_access(), vec![Script::exits(&lines, 0)], Events::default());
    let response =
        engine.exec_command(ExecCommandRequest { max_output_tokens: Some(50), ..exec("x") }).await.unwrap();
    assert_eq!(response.original_token_count, 8991);
    assert!(response.output.starts_with("Total output lines: 999\n\n"));
    let head = &lines[..100];
    let tail = &lines[lines.len() - 100..];
    assert_eq!(response.output, format!("Total output lines: 999\n\n{head}…8941 tokens truncated…{tail}"));
}

#[tokio::test(start_paused = true)]
async fn output_deltas_are_small_and_utf8_safe() {
    let events = Events::default();
    let text = "é".repeat(10_000);
    let engine = engine_with(full_access(), vec![Script::exits(&text, 0)], Arc::clone(&events));
    engine.exec_command(exec("x")).await.unwrap();
    let deltas: Vec<Vec<u8>> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ExecEvent::OutputDelta { chunk, .. } => Some(chunk.clone()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 3);
    assert!(deltas.iter().all(|d| d.len() <= 8192 && std::str::from_utf8(d).is_ok()));
    assert_eq!(deltas.concat(), text.as_bytes());
}

#[tokio::test(start_paused = true)]
async fn a_pty_waiting_for_input_returns_early_and_says_so() {
    let prompt = Script { echo: true, input_state: InputState::WaitingForInput, ..Script::runs(">>> ") };
    let engine = engine_with(full_access(), vec![prompt], Events::default());
    let response = engine
        .exec_command(ExecCommandRequest { tty: true, yield_time_ms: Some(10_000), ..exec("python3 -i") })
        .await
        .unwrap();
    assert!(response.waiting_for_input);
    assert!(response.wall_time < Duration::from_millis(100), "{:?}", response.wall_time);
    assert!(response.to_text().ends_with("\n[uexec] Process is waiting for input"), "{}", response.to_text());
    let id = response.session_id.unwrap();
    let answer = engine
        .write_stdin(WriteStdinRequest { yield_time_ms: Some(10_000), ..write(id, "1+1\n") })
        .await
        .unwrap();
    assert!(answer.waiting_for_input);
    assert_eq!(answer.output, "1+1\n");
    assert!(answer.wall_time < Duration::from_millis(100), "{:?}", answer.wall_time);
    // Said once per stretch of waiting: the next prompts of the REPL do not repeat the note.
    assert!(!answer.says_waiting);
    assert!(answer.to_text().ends_with("\nOutput:\n1+1\n"), "{}", answer.to_text());
    let again = engine
        .write_stdin(WriteStdinRequest { yield_time_ms: Some(10_000), ..write(id, "2\n") })
        .await
        .unwrap();
    assert!(again.waiting_for_input && !again.says_waiting, "{}", again.to_text());
    // A busy pipe session never returns early.
    let engine = engine_with(full_access(), vec![Script::runs("")], Events::default());
    let response = engine
        .exec_command(ExecCommandRequest { yield_time_ms: Some(1000), ..exec("sleep 5") })
        .await
        .unwrap();
    assert!(!response.waiting_for_input);
    assert!(within(response.wall_time, 1000), "{:?}", response.wall_time);
}

#[tokio::test(start_paused = true)]
async fn a_program_that_only_waits_answers_with_an_empty_output() {
    // The Codex scenario `unified_exec_reuses_session_via_stdin`: `/bin/cat` on a terminal prints nothing and
    // waits; the reference answers with an empty output, and so does uexec (it still returns early).
    let cat = Script { echo: true, input_state: InputState::WaitingForInput, ..Script::runs("") };
    let engine = engine_with(full_access(), vec![cat], Events::default());
    let response = engine
        .exec_command(ExecCommandRequest { tty: true, yield_time_ms: Some(10_000), ..exec("/bin/cat") })
        .await
        .unwrap();
    assert!(response.waiting_for_input);
    assert!(response.wall_time < Duration::from_millis(100), "{:?}", response.wall_time);
    assert_eq!(response.output, "");
    assert!(response.to_text().ends_with("\nOutput:\n"), "{}", response.to_text());
    // Its first answer with output is the first that says it waits.
    let id = response.session_id.unwrap();
    let answer = engine
        .write_stdin(WriteStdinRequest { yield_time_ms: Some(10_000), ..write(id, "hello\n") })
        .await
        .unwrap();
    assert_eq!(answer.output, "hello\n");
    assert!(
        answer.to_text().ends_with("\nhello\n\n[uexec] Process is waiting for input"),
        "{}",
        answer.to_text()
    );
}

/// A sandbox like [`sandbox_ok`] whose every prepare issues a new lease (1, 2, ...) and records each `finish`
/// with whether the command's process had exited by then (`exited` says, for the lease).
fn sandbox_leasing(
    finished: Arc<Mutex<Vec<(SandboxLease, bool)>>>,
    exited: Arc<dyn Fn(SandboxLease) -> bool + Send + Sync>,
) -> MockSandbox {
    let mut sandbox = MockSandbox::new();
    sandbox.expect_refusal_mark().returning(|| 0);
    sandbox.expect_refusals().returning(|_| None);
    sandbox.expect_denial_hint().returning(|_, _| None);
    sandbox.expect_replan_after_setup_failure().returning(|_, _| false);
    sandbox.expect_kind().return_const(SandboxKind::LinuxLandlockSeccomp);
    let issued = AtomicUsize::new(0);
    sandbox.expect_prepare().returning(move |request| {
        let lease = SandboxLease(issued.fetch_add(1, Ordering::SeqCst) as u64 + 1);
        Ok(SandboxedSpawn { spawn: request.spawn, report: sandbox_report(), lease })
    });
    sandbox.expect_finish().returning(move |lease| finished.lock().unwrap().push((lease, exited(lease))));
    sandbox
}

#[tokio::test(start_paused = true)]
async fn the_sandbox_finishes_each_lease_once_after_its_process_ended() {
    // An exited command's lease, and a running command's only once it is closed (its tree killed).
    let finished = Arc::new(Mutex::new(Vec::new()));
    let spawned = Arc::new(Spawned::default());
    let record = Arc::clone(&spawned);
    let exited: Arc<dyn Fn(SandboxLease) -> bool + Send + Sync> = Arc::new(move |lease: SandboxLease| {
        let controls = record.controls.lock().unwrap();
        controls.get(lease.0 as usize - 1).is_some_and(|control| control.status().is_some())
    });
    let Checked { engine, .. } = check(Case {
        config: config(ApprovalPolicy::Never, SANDBOXED()),
        processes: Processes::Mock(spawner(
            vec![Script::exits("done\n", 0), Script::runs("serving\n")],
            Arc::clone(&spawned),
        )),
        sandbox: Sandboxing::Mock(sandbox_leasing(Arc::clone(&finished), exited)),
        answers: Answers::Never,
    });
    let quick = engine.exec_command(exec("true")).await.unwrap();
    assert_eq!(quick.exit_code, Some(0));
    eventually("the exited command's lease is finished", || finished.lock().unwrap().len() == 1).await;
    let id = engine.exec_command(exec("server")).await.unwrap().session_id.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(*finished.lock().unwrap(), vec![(SandboxLease(1), true)], "a running command keeps its lease");
    engine.close_session(id).await.unwrap();
    eventually("the closed command's lease is finished", || finished.lock().unwrap().len() == 2).await;
    assert_eq!(*finished.lock().unwrap(), vec![(SandboxLease(1), true), (SandboxLease(2), true)]);
    drop(engine);
    assert_eq!(finished.lock().unwrap().len(), 2, "never finished twice");
}

#[tokio::test(start_paused = true)]
async fn a_spawn_that_fails_finishes_its_lease_at_once() {
    let finished = Arc::new(Mutex::new(Vec::new()));
    let mut failing = MockProcessSpawner::new();
    failing.expect_spawn().times(1).returning(|_| Err(SpawnError::ChildSetup { stage: "execve", errno: 13 }));
    let Checked { engine, .. } = check(Case {
        config: config(ApprovalPolicy::Never, SANDBOXED()),
        processes: Processes::Mock(failing),
        sandbox: Sandboxing::Mock(sandbox_leasing(Arc::clone(&finished), Arc::new(|_| true))),
        answers: Answers::Never,
    });
    assert!(engine.exec_command(exec("nope")).await.is_err());
    assert_eq!(*finished.lock().unwrap(), vec![(SandboxLease(1), true)]);
}

#[tokio::test(start_paused = true)]
async fn close_session_kills_the_tree_and_emits_one_end() {
    let Checked { engine, events, spawned: record, .. } = check(Case {
        config: full_access(),
        processes: Processes::Run(vec![Script::runs("started\n")]),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    let id = engine.exec_command(exec("server")).await.unwrap().session_id.unwrap();
    let summary = engine.list_sessions().await;
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0].session_id, id);
    assert_eq!(summary[0].cmd, "server");
    assert_eq!(summary[0].state, SessionState::Running);
    assert_eq!(summary[0].sandbox, SandboxKind::None);
    let closed = engine.close_session(id).await.unwrap();
    assert_eq!(closed.exit_code, Some(137));
    assert_eq!(record.controls.lock().unwrap()[0].kills.load(Ordering::SeqCst), 1);
    assert_eq!(engine.close_session(id).await.unwrap_err(), ExecError::UnknownSession(id));
    assert_eq!(ends(&events), vec![(id, 137, "started\n".to_owned())]);
    assert_eq!(engine.reserved_id_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_kills_everything_once() {
    let Checked { engine, events, spawned: record, .. } = check(Case {
        config: full_access(),
        processes: Processes::Run(vec![Script::runs("")]),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    for n in 0..3 {
        engine.exec_command(exec(&format!("server {n}"))).await.unwrap();
    }
    engine.shutdown().await;
    engine.shutdown().await;
    assert!(engine.list_sessions().await.is_empty());
    assert_eq!(ends(&events).len(), 3);
    assert!(record.controls.lock().unwrap().iter().all(|c| c.kills.load(Ordering::SeqCst) == 1));
}

#[tokio::test(start_paused = true)]
async fn screen_renders_pty_output_and_refuses_pipe_sessions() {
    let engine = engine_with(
        full_access(),
        vec![
            Script {
                input_state: InputState::WaitingForInput,
                ..Script::runs("\x1b[2J\x1b[5;10Hhello\x1b[1;1Htop")
            },
            Script::runs("plain"),
        ],
        Events::default(),
    );
    let tty = engine.exec_command(ExecCommandRequest { tty: true, ..exec("vim") }).await.unwrap();
    let screen = engine.screen(tty.session_id.unwrap()).await.unwrap();
    assert!(screen.starts_with("top\n"), "{screen:?}");
    assert!(screen.contains("\n         hello"), "{screen:?}");
    let pipe =
        engine.exec_command(ExecCommandRequest { yield_time_ms: Some(250), ..exec("x") }).await.unwrap();
    assert!(matches!(engine.screen(pipe.session_id.unwrap()).await, Err(ExecError::NoScreen(_))));
    assert!(matches!(engine.screen(SessionId(1)).await, Err(ExecError::UnknownSession(_))));
}

// ---------------------------------------------------------------------------------------------------------------
// Pruning and the warning
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_65th_session_prunes_the_least_recently_used_one_and_warnings_start_at_60() {
    let Checked { engine, events, spawned: record, .. } = check(Case {
        config: full_access(),
        processes: Processes::Run(vec![Script::runs("")]),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    let mut ids = Vec::new();
    let mut warnings = Vec::new();
    for n in 0..64 {
        let response = engine
            .exec_command(ExecCommandRequest { yield_time_ms: Some(250), ..exec(&format!("s{n}")) })
            .await
            .unwrap();
        ids.push(response.session_id.unwrap());
        warnings.push(response.warning.is_some());
    }
    assert!(warnings[..59].iter().all(|w| !w), "no warning below 60 sessions");
    assert!(warnings[59..].iter().all(|w| *w), "warnings from 60 sessions on");
    // Use the oldest session: the second oldest becomes the least recently used.
    engine.write_stdin(WriteStdinRequest { yield_time_ms: Some(5000), ..write(ids[0], "") }).await.unwrap();
    let response =
        engine.exec_command(ExecCommandRequest { yield_time_ms: Some(250), ..exec("s64") }).await.unwrap();
    assert!(response.warning.unwrap().contains("64"));
    let listed: Vec<SessionId> = engine.list_sessions().await.iter().map(|s| s.session_id).collect();
    assert_eq!(listed.len(), 64);
    assert!(!listed.contains(&ids[1]), "the least recently used session was pruned");
    assert!(listed.contains(&ids[0]));
    assert_eq!(record.controls.lock().unwrap()[1].kills.load(Ordering::SeqCst), 1);
    assert_eq!(ends(&events), vec![(ids[1], 137, String::new())]);
    assert_eq!(engine.write_stdin(write(ids[1], "")).await.unwrap_err(), ExecError::UnknownSession(ids[1]));
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pruning_prefers_an_exited_session_over_a_less_recent_live_one() {
    let mut scripts: Vec<Script> = (0..64).map(|_| Script::runs("")).collect();
    // Session 10 exits a while after its window; nobody polls it.
    scripts[10] = Script { exit_after: Some((Duration::from_secs(1), 0)), ..Script::runs("") };
    let Checked { engine, .. } = check(Case {
        config: full_access(),
        processes: Processes::Run(scripts),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    let mut ids = Vec::new();
    for n in 0..64 {
        let response = engine
            .exec_command(ExecCommandRequest { yield_time_ms: Some(250), ..exec(&format!("s{n}")) })
            .await
            .unwrap();
        ids.push(response.session_id.unwrap());
    }
    let summary = engine.list_sessions().await;
    assert!(
        summary.iter().any(|s| s.session_id == ids[10] && s.state == SessionState::Exited { exit_code: 0 })
    );
    engine.exec_command(ExecCommandRequest { yield_time_ms: Some(250), ..exec("s64") }).await.unwrap();
    let listed: Vec<SessionId> = engine.list_sessions().await.iter().map(|s| s.session_id).collect();
    assert!(!listed.contains(&ids[10]));
    assert!(listed.contains(&ids[0]));
    engine.shutdown().await;
}

// ---------------------------------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn calls_on_different_sessions_run_in_parallel_and_calls_on_one_session_are_serialised() {
    let engine =
        engine_with(full_access(), vec![Script { echo: true, ..Script::runs("") }], Events::default());
    let a = engine
        .exec_command(ExecCommandRequest { tty: true, yield_time_ms: Some(250), ..exec("a") })
        .await
        .unwrap()
        .session_id
        .unwrap();
    let b = engine
        .exec_command(ExecCommandRequest { tty: true, yield_time_ms: Some(250), ..exec("b") })
        .await
        .unwrap()
        .session_id
        .unwrap();
    let start = tokio::time::Instant::now();
    let long_poll = {
        let engine = engine.clone();
        tokio::spawn(async move {
            engine.write_stdin(WriteStdinRequest { yield_time_ms: Some(20_000), ..write(a, "") }).await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Another session is not blocked by the long poll on `a`.
    let other =
        engine.write_stdin(WriteStdinRequest { yield_time_ms: Some(300), ..write(b, "x") }).await.unwrap();
    assert_eq!(other.output, "x");
    assert!(start.elapsed() < Duration::from_secs(1));
    // A second call on `a` waits for the first one.
    let same =
        engine.write_stdin(WriteStdinRequest { yield_time_ms: Some(300), ..write(a, "y") }).await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(20));
    let first = long_poll.await.unwrap().unwrap();
    assert_eq!(first.output, "");
    assert_eq!(same.output, "y");
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_exec_call_dropped_mid_window_leaves_a_reachable_session() {
    let dropped = Arc::new(AtomicBool::new(false));
    let Checked { engine, spawned: record, .. } = check(Case {
        config: full_access(),
        processes: Processes::Run(vec![Script::runs("partial")]),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    let call = engine.exec_command(ExecCommandRequest { yield_time_ms: Some(10_000), ..exec("server") });
    if tokio::time::timeout(Duration::from_secs(1), call).await.is_err() {
        dropped.store(true, Ordering::SeqCst);
    }
    assert!(dropped.load(Ordering::SeqCst));
    let sessions = engine.list_sessions().await;
    assert_eq!(sessions.len(), 1, "the live process stays in the store");
    let id = sessions[0].session_id;
    let poll = engine.write_stdin(write(id, "")).await.unwrap();
    assert_eq!(poll.output, "partial");
    engine.shutdown().await;
    eventually("the process to be killed", || {
        record.controls.lock().unwrap()[0].kills.load(Ordering::SeqCst) == 1
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn exec_calls_dropped_mid_window_are_pruned_to_the_cap_like_answered_ones() {
    let Checked { engine, events, spawned: record, .. } = check(Case {
        config: full_access(),
        processes: Processes::Run(vec![Script::runs("")]),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    for n in 0..70 {
        let call =
            engine.exec_command(ExecCommandRequest { yield_time_ms: Some(10_000), ..exec(&format!("s{n}")) });
        assert!(tokio::time::timeout(Duration::from_secs(1), call).await.is_err(), "the window is 10 s");
        assert!(engine.list_sessions().await.len() <= 64, "after {} dropped calls", n + 1);
    }
    assert_eq!(engine.list_sessions().await.len(), 64);
    assert_eq!(engine.reserved_id_count(), 64, "the pruned sessions' ids are released");
    // The six least recently used were pruned, and their processes killed.
    eventually("the pruned processes to be killed", || {
        let controls = record.controls.lock().unwrap();
        controls.iter().filter(|c| c.kills.load(Ordering::SeqCst) == 1).count() == 6
    })
    .await;
    eventually("the pruned sessions to end", || ends(&events).len() == 6).await;
    let response =
        engine.exec_command(ExecCommandRequest { yield_time_ms: Some(250), ..exec("s70") }).await.unwrap();
    assert!(response.warning.unwrap().contains("64"), "the answered call warns at the cap");
    assert_eq!(engine.list_sessions().await.len(), 64);
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_write_stdin_call_dropped_mid_window_releases_the_session_at_once() {
    // A cancelled MCP call drops the engine future: the call lock must go with it, and the session stay.
    let engine =
        engine_with(full_access(), vec![Script { echo: true, ..Script::runs("") }], Events::default());
    let id = engine
        .exec_command(ExecCommandRequest { tty: true, yield_time_ms: Some(250), ..exec("cat") })
        .await
        .unwrap()
        .session_id
        .unwrap();
    for chars in ["", "typed"] {
        let poll = engine.write_stdin(WriteStdinRequest { yield_time_ms: Some(20_000), ..write(id, chars) });
        assert!(tokio::time::timeout(Duration::from_secs(1), poll).await.is_err(), "the window is 20 s");
        let start = tokio::time::Instant::now();
        let next = engine
            .write_stdin(WriteStdinRequest { yield_time_ms: Some(300), ..write(id, "x") })
            .await
            .unwrap();
        assert!(start.elapsed() <= Duration::from_millis(300), "the next call waited {:?}", start.elapsed());
        assert_eq!(next.session_id, Some(id));
        // What the dropped call would have returned is not lost.
        assert_eq!(next.output, format!("{chars}x"));
    }
    let sessions = engine.list_sessions().await;
    assert_eq!((sessions.len(), sessions[0].cmd.as_str()), (1, "cat"));
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn writes_larger_than_the_limit_are_refused() {
    let engine =
        engine_with(full_access(), vec![Script { echo: true, ..Script::runs("") }], Events::default());
    let id = engine
        .exec_command(ExecCommandRequest { tty: true, yield_time_ms: Some(250), ..exec("cat") })
        .await
        .unwrap()
        .session_id
        .unwrap();
    let big = "x".repeat(engine.config().limits.max_write_bytes + 1);
    assert!(matches!(engine.write_stdin(write(id, &big)).await, Err(ExecError::WriteTooLarge { .. })));
    engine.shutdown().await;
}

/// Keeps `ExecResponse` in the imports used (the type is part of the API the tests pin).
#[allow(dead_code)]
fn _response_type(r: ExecResponse) -> Option<SessionId> {
    r.session_id
}

#[tokio::test(start_paused = true)]
async fn shutdown_kills_live_sessions_and_refuses_new_commands() {
    let Checked { engine, events, spawned: record, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess),
        processes: Processes::Run(vec![Script::runs("")]),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    let open = engine.exec_command(exec("sleep 100")).await.unwrap();
    let id = open.session_id.expect("still running after the window");
    engine.shutdown().await;
    assert!(engine.list_sessions().await.is_empty());
    assert_eq!(ends(&events).len(), 1, "the live session ended exactly once");
    assert_eq!(engine.write_stdin(write(id, "")).await.unwrap_err(), ExecError::UnknownSession(id));
    assert_eq!(record.controls.lock().unwrap()[0].kills.load(Ordering::SeqCst), 1, "its tree was killed");
    let err = engine.exec_command(exec("ls")).await.unwrap_err();
    assert_eq!(err, ExecError::ShuttingDown);
    assert_eq!(record.requests.lock().unwrap().len(), 1, "nothing is spawned after shutdown");
    assert_eq!(engine.reserved_id_count(), 0);
    assert_eq!(count(&events, is_begin), 1);
}

#[tokio::test(start_paused = true)]
async fn a_workdir_is_where_the_command_starts_and_the_workspace_stays_the_writable_cwd() {
    let workspace = std::env::temp_dir();
    let elsewhere = PathBuf::from("/");
    let expected_workspace = workspace.clone();
    let mut sandbox = MockSandbox::new();
    sandbox.expect_refusal_mark().returning(|| 0);
    sandbox.expect_refusals().returning(|_| None);
    sandbox.expect_denial_hint().returning(|_, _| None);
    sandbox.expect_kind().return_const(SandboxKind::LinuxLandlockSeccomp);
    sandbox
        .expect_prepare()
        .times(1)
        .withf(move |r| r.workspace == expected_workspace && r.spawn.cwd == std::path::Path::new("/"))
        .returning(|r| {
            Ok(SandboxedSpawn { spawn: r.spawn, report: sandbox_report(), lease: SandboxLease::NONE })
        });
    let Checked { engine, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SANDBOXED()),
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Mock(sandbox),
        answers: Answers::Never,
    });
    let request = ExecCommandRequest { workdir: Some(elsewhere), ..exec("ls") };
    let response = engine.exec_command(request).await.unwrap();
    assert_eq!(response.exit_code, Some(0));
}

// ---------------------------------------------------------------------------------------------------------------
// Login-shell startup files a sandboxed command could have written
// ---------------------------------------------------------------------------------------------------------------

/// A config (workspace: the temporary directory) whose commands get `env`.
fn config_with_env(approval: ApprovalPolicy, sandbox: SandboxPolicy, env: &[(&str, &str)]) -> EngineConfig {
    let mut cfg = config(approval, sandbox);
    cfg.base_env = env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect();
    cfg
}

/// HOME inside a writable root (/tmp): the startup files are writable by sandboxed commands.
const HOME_IN_TMP: [(&str, &str); 3] =
    [("HOME", "/tmp/uexec-no-such-home"), ("BASH_ENV", "/etc/b"), ("ENV", "/etc/e")];
/// HOME outside every writable root.
const HOME_OUTSIDE: [(&str, &str); 1] = [("HOME", "/nonexistent/home")];

fn flag(request: &SpawnRequest) -> String {
    request.argv[1].to_string_lossy().into_owned()
}

fn has_var(request: &SpawnRequest, name: &str) -> bool {
    request.env.iter().any(|(k, _)| k == name)
}

fn startup_note(report: &ProtectionReport) -> bool {
    report
        .protections
        .iter()
        .any(|p| p.name == "login_startup_files" && p.status == ProtectionStatus::Enforced)
}

#[tokio::test(start_paused = true)]
async fn an_approved_escalation_does_not_source_writable_startup_files() {
    for (env, guarded) in [(&HOME_IN_TMP[..], true), (&HOME_OUTSIDE[..], false)] {
        let Checked { engine, events, asked, spawned: record, .. } = check(Case {
            config: config_with_env(ApprovalPolicy::OnRequest, SANDBOXED(), env),
            processes: Processes::Run(vec![Script::exits("ok\n", 0)]),
            sandbox: Sandboxing::Never,
            answers: Answers::Always(ReviewDecision::Approved, 1),
        });
        let request = ExecCommandRequest {
            sandbox_permissions: SandboxPermissions::RequireEscalated,
            justification: Some("deploy".into()),
            ..exec("make deploy")
        };
        let response = engine.exec_command(request).await.unwrap();
        let spawned = record.requests.lock().unwrap()[0].clone();
        let expected = if guarded { "-c" } else { "-lc" };
        assert_eq!(flag(&spawned), expected, "{env:?}");
        // The person was asked about the argv that runs.
        assert_eq!(asked.lock().unwrap()[0].command[1], expected);
        for name in ["BASH_ENV", "ENV"] {
            assert_eq!(has_var(&spawned, name), !guarded && env.iter().any(|(k, _)| *k == name), "{name}");
        }
        assert_eq!(startup_note(&response.protections.unwrap()), guarded);
        assert_eq!(startup_note(&begins(&events)[0]), guarded);
    }
}

#[tokio::test(start_paused = true)]
async fn a_known_safe_command_under_untrusted_does_not_source_writable_startup_files() {
    for (env, expected) in [(&HOME_IN_TMP[..], "-c"), (&HOME_OUTSIDE[..], "-c")] {
        // Under untrusted a denied command may be retried outside the sandbox: with writable startup files,
        // no command starts a login shell; with trusted ones, every command does.
        let expected = if env == &HOME_OUTSIDE[..] { "-lc" } else { expected };
        let Checked { engine, spawned: record, .. } = check(Case {
            config: config_with_env(ApprovalPolicy::Untrusted, SANDBOXED(), env),
            processes: Processes::Run(vec![Script::exits("a\n", 0)]),
            sandbox: Sandboxing::Prepares,
            answers: Answers::Never,
        });
        engine.exec_command(exec("ls")).await.unwrap();
        assert_eq!(flag(&record.requests.lock().unwrap()[0]), expected, "{env:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn startup_guard_covers_full_access_retries_bash_env_and_zsh_but_not_plain_sandboxed_runs() {
    // danger-full-access: every command runs unsandboxed.
    let record = Arc::new(Spawned::default());
    let cfg = config_with_env(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess, &HOME_IN_TMP);
    engine_with_record(cfg, &record).exec_command(exec("make")).await.unwrap();
    assert_eq!(flag(&record.requests.lock().unwrap()[0]), "-c");

    // A retry after a denial (on-failure) runs the same non-login argv on both attempts.
    let record = Arc::new(Spawned::default());
    let retrying = engine(
        config_with_env(ApprovalPolicy::OnFailure, SANDBOXED(), &HOME_IN_TMP),
        spawner(vec![denial(), Script::exits("written\n", 0)], Arc::clone(&record)),
        sandbox_ok(Arc::default()),
        approver(ReviewDecision::Approved, 1, Arc::default()),
        Events::default(),
    );
    retrying.exec_command(exec("echo x > /etc/x")).await.unwrap();
    let requests = record.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| flag(r) == "-c" && !has_var(r, "BASH_ENV")));

    // HOME outside, but BASH_ENV names a file in /tmp: guarded too.
    let record = Arc::new(Spawned::default());
    let env = [("HOME", "/nonexistent/home"), ("BASH_ENV", "/tmp/planted-bash-env")];
    let cfg = config_with_env(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess, &env);
    engine_with_record(cfg, &record).exec_command(exec("make")).await.unwrap();
    let spawned = record.requests.lock().unwrap()[0].clone();
    assert!(flag(&spawned) == "-c" && !has_var(&spawned, "BASH_ENV"));

    // zsh reads $ZDOTDIR/.zshenv even without login: ZDOTDIR points at /dev/null.
    let record = Arc::new(Spawned::default());
    let env = [("HOME", "/nonexistent/home"), ("ZDOTDIR", "/tmp/planted-zdotdir")];
    let cfg = config_with_env(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess, &env);
    let request = ExecCommandRequest { shell: Some("/bin/zsh".into()), ..exec("make") };
    engine_with_record(cfg, &record).exec_command(request).await.unwrap();
    let spawned = record.requests.lock().unwrap()[0].clone();
    assert_eq!(flag(&spawned), "-c");
    assert!(spawned.env.iter().any(|(k, v)| k == "ZDOTDIR" && v == "/dev/null"), "{:?}", spawned.env);

    // The twin: a sandboxed command under on-request that never leaves the sandbox keeps its login shell.
    let record = Arc::new(Spawned::default());
    let sandboxed = engine(
        config_with_env(ApprovalPolicy::OnRequest, SANDBOXED(), &HOME_IN_TMP),
        spawner(vec![Script::exits("", 0)], Arc::clone(&record)),
        sandbox_ok(Arc::default()),
        approver_never(),
        Events::default(),
    );
    sandboxed.exec_command(exec("make")).await.unwrap();
    assert_eq!(flag(&record.requests.lock().unwrap()[0]), "-lc");
}

fn engine_with_record(cfg: EngineConfig, record: &Arc<Spawned>) -> Engine {
    engine(
        cfg,
        spawner(vec![Script::exits("", 0)], Arc::clone(record)),
        sandbox_never(),
        approver_never(),
        Events::default(),
    )
}

/// The Begin event (and so the audit log) carries the exact argv that was executed,
/// including the sandbox's wrapper, next to the command as approved.
#[tokio::test(start_paused = true)]
async fn begin_records_the_exact_argv_that_ran() {
    let mut sandbox = MockSandbox::new();
    sandbox.expect_refusal_mark().returning(|| 0);
    sandbox.expect_refusals().returning(|_| None);
    sandbox.expect_denial_hint().returning(|_, _| None);
    sandbox.expect_kind().return_const(SandboxKind::MacosSeatbelt);
    sandbox.expect_prepare().returning(|request| {
        let mut spawn = request.spawn;
        let mut argv: Vec<OsString> = vec!["/usr/bin/sandbox-exec".into(), "-p".into(), "(profile)".into()];
        argv.append(&mut spawn.argv);
        spawn.argv = argv;
        Ok(SandboxedSpawn { spawn, report: sandbox_report(), lease: SandboxLease::NONE })
    });
    let Checked { engine, events, .. } = check(Case {
        config: config_with_env(ApprovalPolicy::OnRequest, SANDBOXED(), &HOME_OUTSIDE),
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Mock(sandbox),
        answers: Answers::Never,
    });
    let request = ExecCommandRequest { shell: Some("/bin/bash".into()), ..exec("ls\nrm x") };
    engine.exec_command(request).await.unwrap();
    let (command, argv) = events
        .lock()
        .unwrap()
        .iter()
        .find_map(|e| match e {
            ExecEvent::Begin { command, argv, .. } => Some((command.clone(), argv.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(command, vec!["/bin/bash", "-lc", "ls\nrm x"]);
    assert_eq!(argv, vec!["/usr/bin/sandbox-exec", "-p", "(profile)", "/bin/bash", "-lc", "ls\nrm x"]);
}

/// A person who takes `delay` to approve.
struct SlowPerson {
    delay: Duration,
}

#[async_trait]
impl uexec_ports::Approver for SlowPerson {
    async fn request_approval(&self, _request: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
        tokio::time::sleep(self.delay).await;
        Ok(ReviewDecision::Approved)
    }
}

#[tokio::test(start_paused = true)]
async fn wall_time_counts_from_the_spawn_not_from_the_question() {
    let events = Events::default();
    let engine = Engine::new(
        config(ApprovalPolicy::Untrusted, SandboxPolicy::DangerFullAccess),
        EngineDeps {
            spawner: Arc::new(spawner(
                vec![Script { exit_after: Some((Duration::from_secs(2), 0)), ..Script::exits("done\n", 0) }],
                Arc::default(),
            )),
            sandbox: Arc::new(sandbox_never()),
            approver: Arc::new(SlowPerson { delay: Duration::from_secs(60) }),
            events: Arc::new(recorder(Arc::clone(&events))),
        },
    );
    let started = tokio::time::Instant::now();
    let response = engine.exec_command(exec("touch x")).await.unwrap();
    assert_eq!(response.exit_code, Some(0));
    assert!(started.elapsed() >= Duration::from_secs(62), "{:?}", started.elapsed());
    assert!(
        response.wall_time >= Duration::from_secs(2) && response.wall_time < Duration::from_secs(3),
        "the minute the person took is not the command's: {:?}",
        response.wall_time
    );
}

#[tokio::test(start_paused = true)]
async fn an_apply_patch_call_runs_as_the_patch_program_under_the_same_approval() {
    let record = Arc::new(Spawned::default());
    let mut cfg = config(ApprovalPolicy::Untrusted, SandboxPolicy::DangerFullAccess);
    let sub = std::env::temp_dir().join(format!("uexec-orch-{}", std::process::id()));
    std::fs::create_dir_all(&sub).unwrap();
    cfg.cwd = std::env::temp_dir();
    cfg.apply_patch_program = Some(vec![OsString::from("/opt/uexec"), OsString::from("apply-patch")]);
    let Checked { engine, asked, .. } = check(Case {
        config: cfg,
        processes: Processes::Mock(spawner(
            vec![Script::exits("Success. Updated the following files:\nA a.txt\n", 0)],
            Arc::clone(&record),
        )),
        sandbox: Sandboxing::Never,
        answers: Answers::Always(ReviewDecision::Approved, 1),
    });
    let big = "x".repeat(200_000);
    let patch = format!("*** Begin Patch\n*** Add File: a.txt\n+{big}\n*** End Patch");
    let cmd =
        format!("cd {} && apply_patch <<'EOF'\n{patch}\nEOF\n", sub.file_name().unwrap().to_str().unwrap());
    let request = ExecCommandRequest { tty: true, ..exec(&cmd) };
    let response = engine.exec_command(request).await.unwrap();
    assert_eq!(response.exit_code, Some(0));
    assert_eq!(response.output, "Success. Updated the following files:\nA a.txt\n");

    let spawned = record.requests.lock().unwrap()[0].clone();
    assert_eq!(spawned.argv[..2], [OsString::from("/opt/uexec"), OsString::from("apply-patch")]);
    let pieces: Vec<&str> = spawned.argv[2..].iter().map(|a| a.to_str().unwrap()).collect();
    assert!(pieces.len() >= 4 && pieces.iter().all(|p| p.len() <= 64 * 1024), "{}", pieces.len());
    assert_eq!(pieces.concat(), patch);
    assert_eq!(spawned.cwd, sub);
    assert!(matches!(spawned.mode, IoMode::Pipes), "a patch needs no terminal");
    // The person was asked about the command line as the model wrote it.
    let question = asked.lock().unwrap()[0].clone();
    assert_eq!(question.command[2], cmd);
    std::fs::remove_dir(&sub).unwrap();

    // Without a patch program the shell runs it as any command.
    let record = Arc::new(Spawned::default());
    let plain = engine_with_record(config(ApprovalPolicy::Never, SandboxPolicy::DangerFullAccess), &record);
    plain.exec_command(exec("apply_patch <<'EOF'\n*** Begin Patch\n*** End Patch\nEOF")).await.unwrap();
    assert_eq!(record.requests.lock().unwrap()[0].argv[0], OsString::from("/bin/bash"));
}

/// The forms models send (`cd x; apply_patch`, a leading `set -e;`) run as the patch
/// program in the `cd`'s directory; a script that calls apply_patch among other commands gets a typed error
/// saying apply_patch must be the whole command (the shell would say "command not found"), and spawns nothing.
#[tokio::test(start_paused = true)]
async fn apply_patch_after_a_prelude_runs_and_inside_a_longer_script_is_a_clear_error() {
    let sub = std::env::temp_dir().join(format!("uexec-orch-prelude-{}", std::process::id()));
    std::fs::create_dir_all(&sub).unwrap();
    let name = sub.file_name().unwrap().to_str().unwrap().to_owned();
    let patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch";
    for cmd in [
        format!("cd {name}; apply_patch <<'EOF'\n{patch}\nEOF\n"),
        format!("set -e; cd {name} && apply_patch <<'EOF'\n{patch}\nEOF\n"),
        format!("set -euo pipefail\ncd {name}\napply_patch <<EOF\n{patch}\nEOF\n"),
    ] {
        let record = Arc::new(Spawned::default());
        let mut cfg = config(ApprovalPolicy::Never, SandboxPolicy::DangerFullAccess);
        cfg.cwd = std::env::temp_dir();
        cfg.apply_patch_program = Some(vec![OsString::from("/opt/uexec"), OsString::from("apply-patch")]);
        let engine = engine_with_record(cfg, &record);
        engine.exec_command(exec(&cmd)).await.unwrap();
        let spawned = record.requests.lock().unwrap()[0].clone();
        assert_eq!(
            spawned.argv[..3],
            [OsString::from("/opt/uexec"), "apply-patch".into(), patch.into()],
            "{cmd}"
        );
        assert_eq!(spawned.cwd, sub, "{cmd}");
    }
    std::fs::remove_dir(&sub).unwrap();
    for cmd in [
        format!("echo start && apply_patch <<'EOF'\n{patch}\nEOF\n"),
        format!("apply_patch <<'EOF'\n{patch}\nEOF\ngit diff --stat\n"),
    ] {
        let record = Arc::new(Spawned::default());
        let mut cfg = config(ApprovalPolicy::Never, SandboxPolicy::DangerFullAccess);
        cfg.apply_patch_program = Some(vec![OsString::from("/opt/uexec"), OsString::from("apply-patch")]);
        let engine = engine_with_record(cfg, &record);
        let error = engine.exec_command(exec(&cmd)).await.unwrap_err();
        assert!(matches!(error, ExecError::ApplyPatchNotWholeCommand), "{cmd}: {error}");
        assert!(error.to_string().contains("apply_patch must be the whole command"), "{error}");
        assert!(record.requests.lock().unwrap().is_empty(), "{cmd}");
    }
    // A script that only mentions apply_patch runs as it is.
    let record = Arc::new(Spawned::default());
    let mut cfg = config(ApprovalPolicy::Never, SandboxPolicy::DangerFullAccess);
    cfg.apply_patch_program = Some(vec![OsString::from("/opt/uexec"), OsString::from("apply-patch")]);
    let engine = engine_with_record(cfg, &record);
    engine.exec_command(exec(&format!("echo apply_patch; cat <<'EOF'\n{patch}\nEOF"))).await.unwrap();
    assert_eq!(record.requests.lock().unwrap()[0].argv[0], OsString::from("/bin/bash"));
}

/// A spawner whose first `failures` spawns fail with `error`, then runs `script`; counts the spawn calls.
fn spawner_failing_first(
    failures: usize,
    error: SpawnError,
    script: Script,
    calls: Arc<AtomicUsize>,
) -> MockProcessSpawner {
    let mut spawner = MockProcessSpawner::new();
    spawner.expect_spawn().returning(move |request| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        if n < failures {
            return Err(error.clone());
        }
        Ok(fake_process(&request, script.clone()).0)
    });
    spawner
}

const ENOENT: i32 = 2;
const EACCES: i32 = 13;

fn setup_failed(errno: i32) -> SpawnError {
    SpawnError::ChildSetup { stage: "open_tree(OPEN_TREE_CLONE)", errno }
}

#[tokio::test(start_paused = true)]
async fn a_sandboxed_spawn_whose_planned_path_vanished_is_prepared_again_and_runs() {
    let events = Events::default();
    let (prepares, calls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let engine = engine(
        config(ApprovalPolicy::OnRequest, SANDBOXED()),
        spawner_failing_first(2, setup_failed(ENOENT), Script::exits("ok\n", 0), Arc::clone(&calls)),
        sandbox_ok(Arc::clone(&prepares)),
        approver_never(),
        Arc::clone(&events),
    );
    let response = engine.exec_command(exec("ls")).await.unwrap();
    assert_eq!(response.exit_code, Some(0));
    assert!(response.output.contains("ok"), "{}", response.output);
    // Each attempt is planned from the file system as it is then: a prepare per spawn.
    assert_eq!((prepares.load(Ordering::SeqCst), calls.load(Ordering::SeqCst)), (3, 3));
    assert_eq!(count(&events, is_begin), 1);
}

#[tokio::test(start_paused = true)]
async fn a_setup_race_that_persists_and_other_setup_failures_fail_the_call_without_more_tries() {
    for (failures, errno, expected_calls) in [(usize::MAX, ENOENT, 3), (usize::MAX, EACCES, 1)] {
        let events = Events::default();
        let (prepares, calls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let engine = engine(
            config(ApprovalPolicy::OnRequest, SANDBOXED()),
            spawner_failing_first(failures, setup_failed(errno), Script::exits("", 0), Arc::clone(&calls)),
            sandbox_ok(Arc::clone(&prepares)),
            approver_never(),
            Arc::clone(&events),
        );
        let err = engine.exec_command(exec("ls")).await.unwrap_err();
        assert!(
            matches!(err, ExecError::Spawn(SpawnError::ChildSetup { errno: e, .. }) if e == errno),
            "{err}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), expected_calls, "errno {errno}");
        assert_eq!(prepares.load(Ordering::SeqCst), expected_calls, "errno {errno}");
        assert_eq!(engine.reserved_id_count(), 0, "errno {errno}");
        assert_eq!(count(&events, is_begin), 0, "errno {errno}");
    }
}

/// A setup the machine refused at spawn time (a namespace refused since the sandbox probed): the sandbox says it
/// planned without it, and the command is prepared again with the new plan, once; a sandbox that has not
/// re-planned gets no second prepare.
#[tokio::test(start_paused = true)]
async fn a_setup_the_machine_refused_is_prepared_again_when_the_sandbox_replanned() {
    const EPERM: i32 = 1;
    let refused = SpawnError::ChildSetup { stage: "unshare(CLONE_NEWUSER|CLONE_NEWNS)", errno: EPERM };
    for (replans, expected_calls) in [(true, 2), (false, 1)] {
        let (prepares, calls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut sandbox = MockSandbox::new();
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&asked);
        sandbox.expect_refusal_mark().returning(|| 0);
        sandbox.expect_refusals().returning(|_| None);
        sandbox.expect_denial_hint().returning(|_, _| None);
        sandbox.expect_kind().return_const(SandboxKind::LinuxLandlockSeccomp);
        sandbox.expect_replan_after_setup_failure().returning(move |stage, errno| {
            assert_eq!((stage, errno), ("unshare(CLONE_NEWUSER|CLONE_NEWNS)", EPERM));
            counted.fetch_add(1, Ordering::SeqCst);
            replans
        });
        let counting = Arc::clone(&prepares);
        sandbox.expect_prepare().returning(move |request| {
            counting.fetch_add(1, Ordering::SeqCst);
            Ok(SandboxedSpawn { spawn: request.spawn, report: sandbox_report(), lease: SandboxLease::NONE })
        });
        let engine = engine(
            config(ApprovalPolicy::OnRequest, SANDBOXED()),
            spawner_failing_first(1, refused.clone(), Script::exits("ok\n", 0), Arc::clone(&calls)),
            sandbox,
            approver_never(),
            Events::default(),
        );
        let result = engine.exec_command(exec("ls")).await;
        assert_eq!(result.is_ok(), replans, "{result:?}");
        assert_eq!(calls.load(Ordering::SeqCst), expected_calls);
        assert_eq!(prepares.load(Ordering::SeqCst), expected_calls);
        assert_eq!(asked.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn an_unsandboxed_spawn_is_not_retried_on_a_setup_failure() {
    let calls = Arc::new(AtomicUsize::new(0));
    let Checked { engine, .. } = check(Case {
        config: config(ApprovalPolicy::Never, SandboxPolicy::DangerFullAccess),
        processes: Processes::Mock(spawner_failing_first(
            usize::MAX,
            setup_failed(ENOENT),
            Script::exits("", 0),
            Arc::clone(&calls),
        )),
        sandbox: Sandboxing::Never,
        answers: Answers::Never,
    });
    assert!(engine.exec_command(exec("ls")).await.is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A fresh directory outside every place sandboxed commands may write (`/var/tmp` is none of them).
fn outside_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(format!("/var/tmp/uexec-orch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::canonicalize(dir).unwrap()
}

/// A prefix approval covers the prefix in the working directory and repository where it was given: the same
/// prefix in another repository (one a sandboxed command could have set up under `/tmp`) asks again, and so does
/// a form of the prefix that runs other code. Its twin, the same command in the same place, runs unasked.
#[tokio::test(start_paused = true)]
async fn a_prefix_approval_holds_only_where_it_was_given_and_never_for_code_running_forms() {
    let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    let other = tmp.join(format!("uexec-orch-other-repo-{}", std::process::id()));
    std::fs::create_dir_all(other.join(".git")).unwrap();
    let Checked { engine, asked, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SANDBOXED()),
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::ApprovedPrefixForSession, 4),
    });
    let escalated = |cmd: &str, prefix: Option<&[&str]>, workdir: Option<&PathBuf>| ExecCommandRequest {
        sandbox_permissions: SandboxPermissions::RequireEscalated,
        prefix_rule: prefix.map(|p| p.iter().map(|w| (*w).to_owned()).collect()),
        workdir: workdir.cloned(),
        ..exec(cmd)
    };
    engine.exec_command(escalated("git status", Some(&["git", "status"]), None)).await.unwrap();
    // The twin: the same place, a longer form: covered.
    engine.exec_command(escalated("git status --short", None, None)).await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 1);
    // Another repository: asked.
    engine.exec_command(escalated("git status", None, Some(&other))).await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 2);
    assert_eq!(asked.lock().unwrap()[1].cwd, other);
    // A form that runs other code: asked, and a bare `git` is never offered.
    engine.exec_command(escalated("git status --exec=x", None, None)).await.unwrap();
    engine.exec_command(escalated("git -c alias.x=!sh x", Some(&["git"]), None)).await.unwrap();
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 4);
    assert_eq!(asked[3].prefix_offer, None);
    std::fs::remove_dir_all(&other).unwrap();
}

/// A command placed outside the sandbox gets no PATH directory a sandboxed command could have written (an active
/// `.venv/bin` in the workspace), and the question says so; a program named by a path in a writable root is
/// named in the question. The twin, a PATH outside every writable root, is left as it is and says nothing.
#[tokio::test(start_paused = true)]
async fn an_escalation_drops_plantable_path_entries_and_names_a_plantable_program() {
    let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    let venv = tmp.join(format!("uexec-orch-venv-{}", std::process::id()));
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(venv.join("bin/git"), "#!/bin/sh\n").unwrap();
    let safe = outside_dir("safe-bin");
    let path = format!("{}:{}:/usr/bin:/bin", venv.join("bin").display(), safe.display());
    let mut cfg = config(ApprovalPolicy::OnRequest, SANDBOXED());
    cfg.base_env.push((OsString::from("PATH"), OsString::from(&path)));
    let Checked { engine: escalating, asked, spawned: record, .. } = check(Case {
        config: cfg,
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Never,
        answers: Answers::Always(ReviewDecision::Approved, 2),
    });
    let escalated = |cmd: &str| ExecCommandRequest {
        sandbox_permissions: SandboxPermissions::RequireEscalated,
        workdir: Some(safe.clone()),
        ..exec(cmd)
    };
    escalating.exec_command(escalated("git status --short")).await.unwrap();
    let spawned_path = |n: usize| {
        let requests = record.requests.lock().unwrap();
        requests[n].env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).unwrap()
    };
    assert_eq!(spawned_path(0), OsString::from(format!("{}:/usr/bin:/bin", safe.display())));
    let reason = shown(&asked.lock().unwrap()[0]);
    assert!(
        reason.contains("Left out of its environment") && reason.contains(&venv.display().to_string()),
        "{reason}"
    );
    // A program named by its path in a writable root is named in the question.
    escalating.exec_command(escalated(&format!("{}/bin/git status", venv.display()))).await.unwrap();
    let reason = shown(&asked.lock().unwrap()[1]);
    assert!(
        reason.contains("Beware: the program") && reason.contains("can be written by sandboxed"),
        "{reason}"
    );

    // The twin: nothing plantable on PATH, nothing left out, nothing to beware of.
    let mut cfg = config(ApprovalPolicy::OnRequest, SANDBOXED());
    let clean = format!("{}:/usr/bin:/bin", safe.display());
    cfg.base_env.push((OsString::from("PATH"), OsString::from(&clean)));
    let Checked { engine: twin, asked, spawned: record, .. } = check(Case {
        config: cfg,
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Never,
        answers: Answers::Always(ReviewDecision::Approved, 1),
    });
    twin.exec_command(escalated("ls")).await.unwrap();
    let requests = record.requests.lock().unwrap();
    let path = requests[0].env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).unwrap();
    assert_eq!(path, OsString::from(&clean));
    let reason = shown(&asked.lock().unwrap()[0]);
    assert!(!reason.contains("Left out") && !reason.contains("Beware"), "{reason}");
    std::fs::remove_dir_all(&venv).unwrap();
    std::fs::remove_dir_all(&safe).unwrap();
}

/// An escalated command runs without the loader entries and shell startup files a sandboxed command could have
/// written (`LD_PRELOAD`, `LD_LIBRARY_PATH` entries, `BASH_ENV`, `ENV` in a writable root): the question names
/// the loader entries left out (the startup files are unset by the guarded start of `uexec_domain::startup`,
/// which the protection report says); the twin's entries outside every writable root are kept.
#[tokio::test(start_paused = true)]
async fn an_escalation_drops_plantable_loader_and_startup_entries() {
    let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    let planted = tmp.join(format!("uexec-orch-ld-{}", std::process::id()));
    std::fs::create_dir_all(planted.join("lib")).unwrap();
    std::fs::write(planted.join("lib/evil.so"), "").unwrap();
    std::fs::write(planted.join("rc"), "").unwrap();
    let safe = outside_dir("safe-ld");
    std::fs::create_dir_all(safe.join("lib")).unwrap();
    std::fs::write(safe.join("lib/good.so"), "").unwrap();
    std::fs::write(safe.join("rc"), "").unwrap();
    let run = |vars: Vec<(&str, String)>| {
        let mut cfg = config(ApprovalPolicy::OnRequest, SANDBOXED());
        cfg.base_env.push((OsString::from("PATH"), OsString::from("/usr/bin:/bin")));
        for (name, value) in vars {
            cfg.base_env.push((OsString::from(name), OsString::from(value)));
        }
        check(Case {
            config: cfg,
            processes: Processes::Run(vec![Script::exits("", 0)]),
            sandbox: Sandboxing::Never,
            answers: Answers::Always(ReviewDecision::Approved, 1),
        })
    };
    let escalated = ExecCommandRequest {
        sandbox_permissions: SandboxPermissions::RequireEscalated,
        workdir: Some(safe.clone()),
        ..exec("ls")
    };
    let value = |record: &Arc<Spawned>, name: &str| {
        let requests = record.requests.lock().unwrap();
        requests[0].env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    };
    let Checked { engine, asked, spawned: record, .. } = run(vec![
        ("LD_PRELOAD", planted.join("lib/evil.so").display().to_string()),
        ("LD_LIBRARY_PATH", format!("{}:{}", planted.join("lib").display(), safe.join("lib").display())),
        ("BASH_ENV", planted.join("rc").display().to_string()),
        ("ENV", planted.join("rc").display().to_string()),
    ]);
    engine.exec_command(escalated.clone()).await.unwrap();
    assert_eq!(value(&record, "LD_PRELOAD"), None);
    assert_eq!(value(&record, "BASH_ENV"), None);
    assert_eq!(value(&record, "ENV"), None);
    assert_eq!(value(&record, "LD_LIBRARY_PATH"), Some(OsString::from(safe.join("lib"))));
    let reason = shown(&asked.lock().unwrap()[0]);
    assert!(reason.contains("Left out of its environment"), "{reason}");
    for name in ["LD_PRELOAD", "LD_LIBRARY_PATH"] {
        assert!(reason.contains(name), "{name}: {reason}");
    }

    // The twin: the same variables naming files outside every writable root are kept as they are.
    let kept = vec![
        ("LD_PRELOAD", safe.join("lib/good.so").display().to_string()),
        ("LD_LIBRARY_PATH", safe.join("lib").display().to_string()),
        ("BASH_ENV", safe.join("rc").display().to_string()),
    ];
    let Checked { engine: twin, asked, spawned: record, .. } = run(kept.clone());
    twin.exec_command(escalated).await.unwrap();
    for (name, expected) in kept {
        assert_eq!(value(&record, name), Some(OsString::from(expected)), "{name}");
    }
    let reason = shown(&asked.lock().unwrap()[0]);
    assert!(!reason.contains("Left out"), "{reason}");
    std::fs::remove_dir_all(&planted).unwrap();
    std::fs::remove_dir_all(&safe).unwrap();
}

/// Capturing a login snapshot runs the shell: nothing is spawned before the person approves (a denied command
/// with snapshots on spawns nothing, not even the capture), and a shell a sandboxed command could have written
/// is never captured. The twin: an approved command with a trusted shell is captured after the approval.
#[tokio::test(start_paused = true)]
async fn no_login_snapshot_before_the_approval_nor_for_a_planted_shell() {
    let state = outside_dir("snapshots");
    let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    let planted = tmp.join(format!("uexec-orch-bash-{}", std::process::id()));
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("bash"), "#!/bin/sh\n").unwrap();
    let planted_shell = planted.join("bash").display().to_string();
    let with_snapshots = || {
        let mut cfg = config(ApprovalPolicy::Untrusted, SANDBOXED());
        cfg.snapshot_dir = Some(state.clone());
        cfg
    };
    // Denied: nothing at all is spawned.
    let Checked { engine: denied, .. } = check(Case {
        config: with_snapshots(),
        processes: Processes::None,
        sandbox: Sandboxing::Never,
        answers: Answers::Always(ReviewDecision::Denied, 1),
    });
    let request = ExecCommandRequest { shell: Some(planted_shell.clone()), ..exec("touch x") };
    assert_eq!(denied.exec_command(request.clone()).await.unwrap_err(), ExecError::Rejected);
    // Approved with the planted shell: the command itself runs (a login shell), no capture first.
    let Checked { engine: approved, spawned: record, .. } = check(Case {
        config: with_snapshots(),
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 1),
    });
    approved.exec_command(request).await.unwrap();
    {
        let requests = record.requests.lock().unwrap();
        assert_eq!(requests.len(), 1, "no capture for a planted shell");
        assert_eq!(requests[0].argv[1], OsString::from("-lc"));
    }
    // The twin: a system shell is captured, after the approval, before the command.
    let Checked { engine: trusted, asked, spawned: record, .. } = check(Case {
        config: with_snapshots(),
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 1),
    });
    let _ =
        trusted.exec_command(ExecCommandRequest { shell: Some("/bin/bash".into()), ..exec("touch x") }).await;
    let requests = record.requests.lock().unwrap();
    assert!(requests.len() >= 2, "the capture, then the command: {requests:?}");
    assert_eq!(asked.lock().unwrap()[0].command[1], "-lc", "the person approves the login shell");
    drop(requests);
    std::fs::remove_dir_all(&planted).unwrap();
    let _ = std::fs::remove_dir_all(&state);
}

/// A sandboxed command that fails gets what the sandbox knows of such failures (a tool whose own sandbox cannot
/// start inside it, macOS) in its note; a command that succeeds, or one that ran outside the sandbox, does not.
#[tokio::test(start_paused = true)]
async fn a_failed_sandboxed_command_gets_the_sandboxs_hint_and_no_other_does() {
    let hinting = || {
        let mut sandbox = MockSandbox::new();
        sandbox.expect_kind().return_const(SandboxKind::MacosSeatbelt);
        sandbox.expect_prepare().returning(|request| {
            Ok(SandboxedSpawn { spawn: request.spawn, report: sandbox_report(), lease: SandboxLease::NONE })
        });
        sandbox.expect_refusal_mark().returning(|| 0);
        sandbox.expect_refusals().returning(|_| None);
        sandbox.expect_denial_hint().returning(|argv, output| {
            let nested = String::from_utf8_lossy(output).contains("sandbox_apply");
            (nested && argv.iter().any(|a| a.to_string_lossy().contains("swift")))
                .then(|| "add --disable-sandbox".to_owned())
        });
        sandbox
    };
    let failing = Script::exits("sandbox_apply: Operation not permitted\n", 1);
    let Checked { engine: hinted, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SANDBOXED()),
        processes: Processes::Run(vec![failing.clone()]),
        sandbox: Sandboxing::Mock(hinting()),
        answers: Answers::Never,
    });
    let response = hinted.exec_command(exec("swift build")).await.unwrap();
    assert!(response.warning.as_deref().is_some_and(|w| w.contains("--disable-sandbox")), "{response:?}");
    // The twins: the same output with exit code 0, and the failure outside the sandbox.
    let Checked { engine: ok, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SANDBOXED()),
        processes: Processes::Run(vec![Script::exits("sandbox_apply: Operation not permitted\n", 0)]),
        sandbox: Sandboxing::Mock(hinting()),
        answers: Answers::Never,
    });
    assert_eq!(ok.exec_command(exec("swift build")).await.unwrap().warning, None);
    let Checked { engine: outside, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SandboxPolicy::DangerFullAccess),
        processes: Processes::Run(vec![failing]),
        sandbox: Sandboxing::Mock(hinting()),
        answers: Answers::Never,
    });
    assert_eq!(outside.exec_command(exec("swift build")).await.unwrap().warning, None);
}

/// `make test` outside the sandbox runs the workspace's Makefile, which a sandboxed command may have rewritten
/// since the person approved it: no prefix is offered and no earlier approval covers it. The twin, the same in a
/// directory out of every sandbox's reach, is covered by the prefix the person approved.
#[tokio::test(start_paused = true)]
async fn no_approval_covers_a_runner_of_writable_project_files_outside_the_sandbox() {
    let Checked { engine, asked, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SANDBOXED()),
        processes: Processes::Run(vec![Script::exits("", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::ApprovedPrefixForSession, 3),
    });
    let escalated = |workdir: Option<PathBuf>| ExecCommandRequest {
        sandbox_permissions: SandboxPermissions::RequireEscalated,
        prefix_rule: Some(vec!["make".into(), "test".into()]),
        workdir,
        ..exec("make test")
    };
    engine.exec_command(escalated(None)).await.unwrap();
    engine.exec_command(escalated(None)).await.unwrap();
    {
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 2, "asked every time in the workspace");
        assert!(asked.iter().all(|q| q.prefix_offer.is_none()), "{asked:?}");
        let reason = shown(&asked[0]);
        assert!(
            reason.contains("Makefile") && reason.contains("may differ from what was approved"),
            "{reason}"
        );
    }
    let outside = outside_dir("make");
    engine.exec_command(escalated(Some(outside.clone()))).await.unwrap();
    engine.exec_command(escalated(Some(outside.clone()))).await.unwrap();
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 3, "the twin is asked once, then covered");
    assert_eq!(asked[2].prefix_offer, Some(vec!["make".to_owned(), "test".to_owned()]));
    std::fs::remove_dir_all(&outside).unwrap();
}

/// A person who takes ten seconds to answer about a host: allows `allowed.example`, refuses
/// `refused.example`, and cannot be reached about anything else.
#[derive(Default)]
struct SlowAboutHosts {
    asked: Mutex<Vec<NetworkAccessRequest>>,
}

#[async_trait]
impl uexec_ports::Approver for SlowAboutHosts {
    async fn request_approval(&self, _r: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
        panic!("no command question expected");
    }

    async fn request_network_access(
        &self,
        request: NetworkAccessRequest,
    ) -> Result<ReviewDecision, ApprovalError> {
        self.asked.lock().unwrap().push(request.clone());
        tokio::time::sleep(Duration::from_secs(10)).await;
        match request.host.as_str() {
            "allowed.example" => Ok(ReviewDecision::ApprovedForSession),
            "refused.example" => Ok(ReviewDecision::Denied),
            _ => Err(ApprovalError::Unavailable("nobody".into())),
        }
    }
}

/// The domain allowlist's question about a host (which the proxy asks through the engine) goes through the
/// approver port, once per host: the answer, allow or refuse, is remembered with the session's approvals, a
/// burst of connections to one host asks once, and nobody to ask is not an answer (the next connection asks).
#[tokio::test(start_paused = true)]
async fn a_host_off_the_allowlist_is_asked_about_once_through_the_approver_port() {
    let person = Arc::new(SlowAboutHosts::default());
    let engine = Engine::new(
        config(ApprovalPolicy::OnRequest, SANDBOXED()),
        EngineDeps {
            spawner: Arc::new(no_spawn()),
            sandbox: Arc::new(sandbox_never()),
            approver: Arc::clone(&person) as Arc<dyn uexec_ports::Approver>,
            events: Arc::new(recorder(Events::default())),
        },
    );
    // A burst of connections to one host while the person is still reading the question: one question.
    let burst: Vec<_> = (0..4)
        .map(|_| {
            let engine = engine.clone();
            tokio::spawn(async move { engine.network_access("allowed.example", 443, "pypi.org").await })
        })
        .collect();
    for call in burst {
        assert_eq!(call.await.unwrap(), Some(true));
    }
    assert_eq!(engine.network_access("refused.example", 443, "pypi.org").await, Some(false));
    assert_eq!(engine.network_access("refused.example", 80, "pypi.org").await, Some(false), "remembered");
    assert_eq!(engine.network_access("allowed.example", 8080, "pypi.org").await, Some(true), "any port");
    // Nobody could be asked: no answer, and not remembered as one.
    assert_eq!(engine.network_access("unasked.example", 443, "pypi.org").await, None);
    assert_eq!(engine.network_access("unasked.example", 443, "pypi.org").await, None);
    let asked = person.asked.lock().unwrap();
    let hosts: Vec<&str> = asked.iter().map(|r| r.host.as_str()).collect();
    assert_eq!(hosts, ["allowed.example", "refused.example", "unasked.example", "unasked.example"]);
    assert_eq!((asked[0].port, asked[0].rules.as_str()), (443, "pypi.org"));
}

/// Under every policy but `on-request` the allowlist is the answer: nobody is asked about a host.
#[tokio::test(start_paused = true)]
async fn only_on_request_asks_about_a_host_off_the_allowlist() {
    for policy in [ApprovalPolicy::Untrusted, ApprovalPolicy::OnFailure, ApprovalPolicy::Never] {
        let mut approver = MockApprover::new();
        approver.expect_request_approval().times(0);
        approver.expect_request_network_access().times(0);
        let Checked { engine, .. } = check(Case {
            config: config(policy, SANDBOXED()),
            processes: Processes::None,
            sandbox: Sandboxing::Never,
            answers: Answers::Mock(approver),
        });
        assert_eq!(engine.network_access("example.com", 443, "pypi.org").await, None, "{policy:?}");
    }
}

/// A session approval of a command whose program hides behind a wrapper, a shell or git's `-C` never covers it
/// when what it runs lies in a writable root (a sandboxed command can rewrite `./build.sh` or plant
/// `core.fsmonitor` in `/tmp/evil` after the approval): asked every time. Its twin, the same shapes on files
/// outside every root, is asked once and then covered.
#[tokio::test(start_paused = true)]
async fn session_approvals_never_cover_wrapped_code_a_sandboxed_command_can_write() {
    let evil = std::fs::canonicalize(std::env::temp_dir())
        .unwrap()
        .join(format!("uexec-evil-{}", std::process::id()));
    std::fs::create_dir_all(evil.join(".git")).unwrap();
    let evil_git = format!("git -C {} status", evil.display());
    let outside = outside_dir("wrapped");
    std::fs::create_dir_all(outside.join(".git")).unwrap();
    let safe_git = format!("git -C {} status", outside.display());
    let safe_script = outside.join("build.sh").display().to_string();
    let wrapped_safe = format!("timeout 20 {safe_script}");
    for (command, covered) in [
        ("timeout 20 ./build.sh", false),
        ("bash ./run-tests.sh", false),
        ("nice -n 5 ./build.sh", false),
        ("python3 -m pip --version", false),
        (evil_git.as_str(), false),
        (safe_git.as_str(), true),
        (wrapped_safe.as_str(), true),
    ] {
        let Checked { engine, asked, .. } = check(Case {
            config: config(ApprovalPolicy::OnRequest, SANDBOXED()),
            processes: Processes::Run(vec![Script::exits("", 0)]),
            sandbox: Sandboxing::Prepares,
            answers: Answers::Always(ReviewDecision::ApprovedForSession, if covered { 1 } else { 2 }),
        });
        let escalated = || ExecCommandRequest {
            sandbox_permissions: SandboxPermissions::RequireEscalated,
            ..exec(command)
        };
        engine.exec_command(escalated()).await.unwrap();
        engine.exec_command(escalated()).await.unwrap();
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), if covered { 1 } else { 2 }, "{command}: {asked:?}");
        if !covered {
            assert!(asked[0].warnings.iter().any(|w| w.starts_with("Beware:")), "{command}: {asked:?}");
        }
    }
    std::fs::remove_dir_all(&evil).unwrap();
    std::fs::remove_dir_all(&outside).unwrap();
}

/// A person who never answers (the question sits in a client nobody looks at).
struct NeverAnswers;

#[async_trait]
impl uexec_ports::Approver for NeverAnswers {
    async fn request_approval(&self, _r: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
        std::future::pending().await
    }

    async fn request_network_access(
        &self,
        _r: NetworkAccessRequest,
    ) -> Result<ReviewDecision, ApprovalError> {
        std::future::pending().await
    }
}

/// An unanswered question does not hold the call as long as the client waits: after its deadline (the
/// configured one, or sooner when the caller's client gives up sooner) the call is refused with a text the
/// model can act on, nothing ran and the id is released. Its twin, an answered question, runs.
#[tokio::test(start_paused = true)]
async fn an_unanswered_question_ends_at_its_deadline_with_a_clear_refusal() {
    let mut cfg = config(ApprovalPolicy::OnRequest, SANDBOXED());
    cfg.limits.approval_timeout_ms = 90_000;
    let engine = Engine::new(
        cfg,
        EngineDeps {
            spawner: Arc::new(no_spawn()),
            sandbox: Arc::new(sandbox_never()),
            approver: Arc::new(NeverAnswers),
            events: Arc::new(recorder(Events::default())),
        },
    );
    let escalated = |max_wait: Option<Duration>| ExecCommandRequest {
        sandbox_permissions: SandboxPermissions::RequireEscalated,
        max_wait,
        ..exec("make deploy")
    };
    let started = tokio::time::Instant::now();
    let err = engine.exec_command(escalated(None)).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(90), "the configured deadline");
    assert!(matches!(err, ExecError::ApprovalUnavailable(ApprovalError::Unanswered(90))), "{err:?}");
    assert!(err.to_string().contains("nobody answered the approval question within 90 s"), "{err}");
    assert!(err.to_string().contains("did not run"), "{err}");
    assert_eq!(engine.reserved_id_count(), 0);
    // The caller's client gives up after 50 s: the question ends then.
    let started = tokio::time::Instant::now();
    engine.exec_command(escalated(Some(Duration::from_secs(50)))).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(50));
    // The domain allowlist's question about a host has the same deadline: the host is refused then, and not
    // remembered (a later connection may ask again).
    let started = tokio::time::Instant::now();
    assert_eq!(engine.network_access("unanswered.example", 443, "pypi.org").await, None);
    assert_eq!(started.elapsed(), Duration::from_secs(90), "the configured deadline");

    // The twin: a person who answers.
    let Checked { engine, .. } = check(Case {
        config: config(ApprovalPolicy::OnRequest, SANDBOXED()),
        processes: Processes::Run(vec![Script::exits("ok", 0)]),
        sandbox: Sandboxing::Prepares,
        answers: Answers::Always(ReviewDecision::Approved, 1),
    });
    assert_eq!(engine.exec_command(escalated(None)).await.unwrap().output, "ok");
}
