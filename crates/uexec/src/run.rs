//! `uexec run`: one command under the sandbox, in the place of the command run directly, exiting with its exit
//! status.
//!
//! - stdin and stdout are both terminals (a person at a terminal): the command gets its own PTY of the
//!   terminal's size; the terminal is put in raw mode (restored on every exit path) and bytes are relayed both
//!   ways; SIGWINCH is forwarded as a resize.
//! - otherwise (a pipeline, a redirection, a CI job): the command's stdin, stdout and stderr are uexec's own
//!   fds 0, 1 and 2, handed over as they are ([`IoMode::Inherit`]): no PTY, no relay. It reads uexec's
//!   stdin up to its end, its stdout and stderr stay apart, a file stays a file and a pipe a pipe, bytes pass
//!   unchanged, and SIGPIPE has its default action in the command, so `uexec run -- yes | head -n1` ends as
//!   `yes | head -n1` does. (stdin a terminal and stdout a pipe, `uexec run -- ls | grep x`: the command reads
//!   the terminal itself, without becoming its controlling process.) One exception: a standard error that is a
//!   pipe is handed over through a pipe of uexec's own that it copies, so that the note of what the sandbox
//!   refused can name a refused write (`crate::tap`).
//!
//! After the command, one line names what the sandbox refused (`[uexec] sandbox refused: ...`), on standard
//! error: the lookups and connections it recorded, and the writes its plan refuses that the command's output
//! names (read from the relayed terminal, or from the copied standard error), with the remedy for `uexec run`.
//!
//! SIGTERM, SIGHUP and SIGINT sent to uexec are forwarded to the command's process group. When the command
//! exits, whatever it left behind (background jobs, daemons) is killed at once: nothing outlives `uexec run`,
//! and when nothing is left uexec does not wait at all. In a terminal the relayed output is then drained to its
//! end (the PTY reports end of file once no process holds it: no timer). Exit status: the command's code,
//! 128+N for signal N, 125 when nothing ran, 126 not executable, 127 not found.
//!
//! Where the command runs (sandbox or not, the writable roots, `$TMPDIR`) is decided by
//! [`uexec_engine::place`], the function the MCP engine uses too.
//!
//! The environment is this process's, filtered by the configured environment policy (`inherit`,
//! `exclude_secrets`, `set`) but without the variables forced on MCP commands (`TERM=dumb`, `NO_COLOR`, ...):
//! a person is watching this terminal.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::signal::unix::{SignalKind, signal};
use uexec_domain::env::EnvPolicy;
use uexec_domain::{ExitStatus, ProtectionReport, SessionId};
use uexec_engine::{Placement, SandboxContext};
use uexec_ports::process::{
    IoMode, OutputStream, ProcessControl, Signal, SpawnError, SpawnRequest, SpawnedProcess,
};
use uexec_ports::{EventSink, ExecEvent};

use crate::cli::RunArgs;
use crate::settings::{ProcessContext, Settings};
use crate::terminal::{self, RawMode};
use crate::{EXIT_NOTHING_RAN, report_error};

/// Why nothing ran.
#[derive(Debug)]
struct NothingRan {
    code: u8,
    error: anyhow::Error,
}

fn nothing_ran(error: anyhow::Error) -> NothingRan {
    NothingRan { code: EXIT_NOTHING_RAN, error }
}

/// `uexec run`.
pub fn main(args: &RunArgs) -> ExitCode {
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(NothingRan { code, error }) => {
            report_error(&error);
            ExitCode::from(code)
        }
    }
}

/// True when the command gets its own PTY relayed to the person's terminal: stdin and stdout are both
/// terminals. Otherwise it runs on uexec's own streams, and uexec starts no thread (see `main`; a copied standard
/// error is a task, `crate::tap`).
pub fn uses_terminal() -> bool {
    terminal::is_terminal(terminal::stdin_fd()) && terminal::is_terminal(terminal::stdout_fd())
}

/// True when the command would run in the domain-allowlist mode (an unreadable config counts as no: `run` then
/// reports the error).
pub fn needs_proxy(args: &RunArgs) -> bool {
    // Silently: `run` resolves the settings again and reports what there is to report once.
    tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
        ProcessContext::current()
            .and_then(|ctx| Settings::resolve(&args.policy, args.audit_log.as_deref(), &ctx))
            .is_ok_and(|s| matches!(s.network, uexec_domain::network::NetworkPolicy::Proxied(_)))
    })
}

fn run(args: &RunArgs) -> Result<u8, NothingRan> {
    if let Some(policy) = args.policy.approval_policy {
        return Err(nothing_ran(anyhow::anyhow!(
            "--approval-policy {} does nothing for `uexec run`: nobody is asked about a command you typed (the \
             approval policy applies to `uexec mcp`); leave it out",
            clap::ValueEnum::to_possible_value(&policy).map(|v| v.get_name().to_owned()).unwrap_or_default()
        )));
    }
    let ctx = ProcessContext::current().map_err(nothing_ran)?;
    let settings = Settings::resolve(&args.policy, args.audit_log.as_deref(), &ctx).map_err(nothing_ran)?;
    let sinks = crate::compose::event_sink(&settings).map_err(nothing_ran)?;

    let stdin = terminal::stdin_fd();
    let stdout = terminal::stdout_fd();
    let mode = if uses_terminal() {
        IoMode::Pty(
            terminal::window_size(stdin).or_else(|| terminal::window_size(stdout)).unwrap_or_default(),
        )
    } else {
        IoMode::Inherit
    };
    let base = SpawnRequest {
        argv: crate::apply_patch::direct_call(&args.command).unwrap_or_else(|| args.command.clone()),
        cwd: settings.cwd.clone(),
        env: run_env(std::env::vars_os(), &settings.env_policy),
        mode,
        setup: Vec::new(),
        pid_scope: Default::default(),
    };
    let (setup, proxy) = crate::proxy::prepare(&settings, sinks.audit.clone(), None).map_err(nothing_ran)?;
    let sandbox = crate::platform::sandbox_with(&setup);
    let context = SandboxContext {
        sandbox: sandbox.as_ref(),
        policy: &settings.sandbox_policy,
        workspace: &settings.cwd,
        allow_degraded: settings.allow_degraded_sandbox,
        cache: settings.sandbox_cache.as_deref(),
    };
    let placement = Placement::for_policy(&settings.sandbox_policy, false);
    let mark = sandbox.refusal_mark();
    let (spawn, protections, lease) = uexec_engine::place(context, placement, base)
        .map_err(|e| nothing_ran(anyhow!("{e}; nothing was run")))?;
    if protections.is_degraded() {
        tracing::warn!("running with degraded protection: {}", protections.summary_line());
    }
    tracing::info!("{}", protections.summary_line());
    if uses_terminal() && placement == Placement::Sandboxed {
        // A person at an interactive shell is told once where they are (`UEXEC_SANDBOX` says it to programs).
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{}", sandbox_banner(&protections.compact_line()));
        }
    }

    // One thread is enough: the command runs on its own, uexec only waits for it (and relays a terminal).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(nothing_ran)?;
    let refusals = proxy.as_ref().map(crate::proxy::Pending::refusals);
    // The newest output, for the note of what the sandbox refused (`crate::tap`).
    let tail = crate::tap::Tail::default();
    let outcome = rt.block_on(async {
        if let Some(proxy) = proxy {
            proxy.spawn();
        }
        supervise(spawn, &settings, protections, sinks.events.clone(), &tail).await
    });
    // `supervise` returns once the command's whole tree is gone (killed and reaped) or it never started: the
    // sandbox may now undo what it made for it (placeholders, restored git objects).
    sandbox.finish(lease);
    // What the sandbox refused (lookups with the network off, connections the proxy refused, writes its plan
    // refuses that the output names), in the note every mode uses.
    let output = tail.bytes();
    let mut refused = refusals.map(|r| r.since(0)).unwrap_or_default();
    if placement == Placement::Sandboxed {
        let query = uexec_ports::RefusalQuery {
            mark,
            policy: &settings.sandbox_policy,
            workspace: &settings.cwd,
            tmpdir: None,
            cwd: &settings.cwd,
            output: &output,
            exit_code: outcome.as_ref().ok().map(|&code| i32::from(code)),
        };
        refused.extend(sandbox.refusals(&query).unwrap_or_default());
    }
    if !refused.is_empty() {
        sinks.events.emit(ExecEvent::Refused {
            call_id: format!("run-{}", std::process::id()),
            session_id: SessionId(0),
            refusals: refused.clone(),
        });
    }
    if let Some(note) = uexec_domain::denial::refusal_note(&refused) {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{note}");
        }
    }
    // The stdin relay may be blocked in a read(2) that never returns: do not wait for it.
    rt.shutdown_background();
    sinks.report_failures();
    outcome
}

/// Start `spawn`, relay a terminal if it has one, wait for it, kill what it left behind.
async fn supervise(
    spawn: SpawnRequest,
    settings: &Settings,
    protections: ProtectionReport,
    events: Arc<dyn EventSink>,
    tail: &crate::tap::Tail,
) -> Result<u8, NothingRan> {
    let command: Vec<String> = spawn.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let program = command.first().cloned().unwrap_or_default();
    let tty = matches!(spawn.mode, IoMode::Pty(_));
    let spawner = crate::platform::spawner();
    let interposed = if tty { None } else { crate::tap::interpose() };
    let spawned = spawner.spawn(spawn);
    // uexec's own streams are its own again whether the spawn worked or not; the command keeps the pipe.
    let copy = interposed.map(|interposed| interposed.start(tail.clone()));
    let SpawnedProcess { control, output } = spawned.map_err(|e| spawn_failed(&program, e))?;
    let started = Instant::now();
    let call_id = format!("run-{}", std::process::id());
    events.emit(ExecEvent::Begin {
        call_id: call_id.clone(),
        session_id: SessionId(0),
        argv: command.clone(),
        command,
        cwd: settings.cwd.clone(),
        tty,
        protections,
    });

    let relay = tty.then(|| Relay::start(&control, output, tail.clone()));
    let signals = tokio::spawn(forward_signals(control.clone()));

    let status = control.wait().await;
    // Whatever the command left behind dies now (without any wait when nothing is left); then no process holds
    // the PTY any more, so the relayed output reaches its end of file.
    let killed = control.kill_tree().await;
    if let Err(e) = &killed {
        tracing::warn!("cannot kill what the command left behind: {e}");
    }
    if let Some(relay) = relay {
        relay.finish(killed.is_ok()).await;
    }
    if let Some(copy) = copy {
        copy.finish().await;
    }
    signals.abort();

    let status = status.unwrap_or(ExitStatus::Code(1));
    let code = status.code();
    events.emit(ExecEvent::End {
        call_id,
        session_id: SessionId(0),
        exit_code: code,
        aggregated_output: String::new(),
        duration: started.elapsed(),
    });
    Ok(u8::try_from(code).unwrap_or(1))
}

/// The person's terminal relayed to the command's PTY: raw mode, input, resizes, output.
struct Relay {
    raw: Option<RawMode>,
    output: tokio::task::JoinHandle<()>,
    input: tokio::task::JoinHandle<()>,
    resizes: tokio::task::JoinHandle<()>,
}

impl Relay {
    fn start(
        control: &Arc<dyn ProcessControl>,
        mut output: Box<dyn OutputStream>,
        tail: crate::tap::Tail,
    ) -> Relay {
        let raw = match RawMode::enable(terminal::stdin_fd()) {
            Ok(raw) => Some(raw),
            Err(e) => {
                tracing::warn!("cannot put the terminal in raw mode: {e}");
                None
            }
        };
        let output = tokio::spawn(async move {
            let mut stdout = tokio::io::stdout();
            while let Ok(Some(chunk)) = output.next_chunk().await {
                tail.push(&chunk);
                if stdout.write_all(&chunk).await.is_err() || stdout.flush().await.is_err() {
                    break;
                }
            }
        });
        Relay {
            raw,
            output,
            input: tokio::spawn(relay_stdin(control.clone())),
            resizes: tokio::spawn(forward_resizes(control.clone())),
        }
    }

    /// Write the rest of the output (to its end when `complete`: every process is gone), then restore the
    /// terminal.
    async fn finish(self, complete: bool) {
        self.input.abort();
        self.resizes.abort();
        if complete {
            let _ = self.output.await;
        } else {
            self.output.abort();
        }
        drop(self.raw);
    }
}

/// The one line a person at an interactive `uexec run` reads before the command starts: that it runs inside the
/// sandbox, under what, and how programs can tell (`UEXEC_SANDBOX`).
fn sandbox_banner(protections: &str) -> String {
    format!("[uexec] inside the sandbox: {protections}; programs see UEXEC_SANDBOX; exit to leave")
}

fn spawn_failed(program: &str, e: SpawnError) -> NothingRan {
    let code = match &e {
        SpawnError::ProgramNotFound { .. } => 127,
        SpawnError::NotExecutable { .. } => 126,
        _ => EXIT_NOTHING_RAN,
    };
    // The port's error names the program already (`program not found: X`): say it once.
    let error = match &e {
        SpawnError::ProgramNotFound { .. } | SpawnError::NotExecutable { .. } => anyhow!("cannot run: {e}"),
        _ => anyhow!("cannot run {program}: {e}"),
    };
    NothingRan { code, error }
}

async fn relay_stdin(control: Arc<dyn ProcessControl>) {
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 8192];
    loop {
        match stdin.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if control.write(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
}

async fn forward_resizes(control: Arc<dyn ProcessControl>) {
    let Ok(mut winch) = signal(SignalKind::window_change()) else { return };
    while winch.recv().await.is_some() {
        if let Some(size) = terminal::window_size(terminal::stdin_fd()) {
            let _ = control.resize(size);
        }
    }
}

async fn forward_signals(control: Arc<dyn ProcessControl>) {
    let install = || -> Result<_> {
        Ok((
            signal(SignalKind::terminate()).context("SIGTERM")?,
            signal(SignalKind::hangup()).context("SIGHUP")?,
            signal(SignalKind::interrupt()).context("SIGINT")?,
        ))
    };
    let Ok((mut term, mut hup, mut int)) = install() else { return };
    loop {
        let signal = tokio::select! {
            _ = term.recv() => Signal::Terminate,
            _ = hup.recv() => Signal::Hangup,
            _ = int.recv() => Signal::Interrupt,
        };
        let _ = control.signal(signal);
    }
}

/// The environment of a `uexec run` command: `inherited` filtered by `policy`, then `policy.set` (no forced
/// variables: the person's terminal keeps its colours and pager).
pub fn run_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    policy: &EnvPolicy,
) -> Vec<(OsString, OsString)> {
    uexec_domain::env::filter_env(inherited, policy)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use uexec_domain::env::EnvInherit;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    #[test]
    fn run_env_keeps_the_terminal_variables_and_applies_the_policy() {
        let inherited = vars(&[("TERM", "xterm-256color"), ("PATH", "/bin"), ("GITHUB_TOKEN", "t")]);
        let everything = EnvPolicy { exclude_secrets: false, ..EnvPolicy::default() };
        let env = run_env(inherited.clone(), &everything);
        assert_eq!(env, vars(&[("GITHUB_TOKEN", "t"), ("PATH", "/bin"), ("TERM", "xterm-256color")]));
        let policy = EnvPolicy {
            inherit: EnvInherit::All,
            exclude_secrets: true,
            pass_through: Vec::new(),
            set: vec![("A".into(), "1".into())],
        };
        let env = run_env(inherited.clone(), &policy);
        assert_eq!(env, vars(&[("A", "1"), ("PATH", "/bin"), ("TERM", "xterm-256color")]));
        let policy = EnvPolicy { inherit: EnvInherit::Only(vec!["PATH".into()]), ..EnvPolicy::default() };
        assert_eq!(run_env(inherited, &policy), vars(&[("PATH", "/bin")]));
    }
}
