//! `uexec run`: one command under the sandbox, attached to the user's terminal, exiting with its exit code.
//!
//! - stdin is a terminal: the command gets its own PTY of the terminal's size; the terminal is put in raw mode
//!   (restored on every exit path) and bytes are relayed both ways; SIGWINCH is forwarded as a resize.
//! - stdin is not a terminal: the command runs with pipes; its stdin is `/dev/null` (the process port gives a
//!   pipe-mode command no stdin: relaying through a PTY instead would echo the input into the output and
//!   apply line discipline to it), and its stdout and stderr are merged into uexec's stdout.
//!
//! SIGTERM, SIGHUP and SIGINT sent to uexec are forwarded to the command's process group. When the command
//! exits, output still in flight is drained briefly and then whatever it left behind (background jobs,
//! daemons) is killed: nothing outlives `uexec run`. Exit status: the command's code, 128+N for signal N, 125
//! when nothing ran, 126 not executable, 127 not found.
//!
//! The environment is this process's, filtered by the configured environment policy (`inherit`,
//! `exclude_secrets`, `set`) but without the variables forced on MCP commands (`TERM=dumb`, `NO_COLOR`, ...):
//! a person is watching this terminal.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::signal::unix::{SignalKind, signal};
use uexec_domain::env::EnvPolicy;
use uexec_domain::{EscapeReason, ExitStatus, ProtectionReport, SessionId};
use uexec_ports::{
    EventSink, ExecEvent, IoMode, ProcessControl, SandboxRequest, Signal, SpawnError, SpawnRequest,
    SpawnedProcess,
};

use crate::cli::RunArgs;
use crate::settings::{ProcessContext, Settings};
use crate::terminal::{self, RawMode};
use crate::{EXIT_NOTHING_RAN, report_error};

/// How long output may keep arriving after the command exited.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(300);

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

fn run(args: &RunArgs) -> Result<u8, NothingRan> {
    let ctx = ProcessContext::current().map_err(nothing_ran)?;
    let settings = Settings::resolve(&args.policy, args.audit_log.as_deref(), &ctx).map_err(nothing_ran)?;
    let sinks = crate::event_sink(&settings).map_err(nothing_ran)?;

    let tty = terminal::is_terminal(terminal::stdin_fd());
    let mode = if tty {
        let size = terminal::window_size(terminal::stdin_fd())
            .or_else(|| terminal::window_size(terminal::stdout_fd()))
            .unwrap_or_default();
        IoMode::Pty(size)
    } else {
        IoMode::Pipes
    };
    let env = run_env(std::env::vars_os(), &settings.env_policy);
    let tmpdir = env.iter().find(|(k, _)| k == "TMPDIR").map(|(_, v)| PathBuf::from(v));
    let spawn =
        SpawnRequest { argv: args.command.clone(), cwd: settings.cwd.clone(), env, mode, setup: Vec::new() };

    let (spawn, protections) = if settings.sandbox_policy.is_unrestricted() {
        (
            spawn,
            ProtectionReport::unsandboxed(settings.sandbox_policy.mode_str(), EscapeReason::FullAccessPolicy),
        )
    } else {
        let sandbox = crate::platform::sandbox();
        let prepared = sandbox
            .prepare(SandboxRequest {
                workspace: spawn.cwd.clone(),
                spawn,
                policy: settings.sandbox_policy.clone(),
                tmpdir,
                allow_degraded: settings.allow_degraded_sandbox,
            })
            .map_err(|e| nothing_ran(anyhow!("{e}; nothing was run")))?;
        (prepared.spawn, prepared.report)
    };
    if protections.is_degraded() {
        tracing::warn!("running with degraded protection: {}", protections.summary_line());
    }
    tracing::info!("{}", protections.summary_line());

    let rt = crate::runtime().map_err(nothing_ran)?;
    let outcome = rt.block_on(relay(spawn, tty, &settings, protections, sinks.events.clone()));
    // The stdin relay may be blocked in a read(2) that never returns: do not wait for it.
    rt.shutdown_background();
    sinks.report_failures();
    outcome
}

async fn relay(
    spawn: SpawnRequest,
    tty: bool,
    settings: &Settings,
    protections: ProtectionReport,
    events: Arc<dyn EventSink>,
) -> Result<u8, NothingRan> {
    let command: Vec<String> = spawn.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let program = command.first().cloned().unwrap_or_default();
    let spawner = crate::platform::spawner();
    let SpawnedProcess { control, mut output } =
        spawner.spawn(spawn).map_err(|e| spawn_failed(&program, e))?;
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

    let raw = if tty {
        match RawMode::enable(terminal::stdin_fd()) {
            Ok(raw) => Some(raw),
            Err(e) => {
                tracing::warn!("cannot put the terminal in raw mode: {e}");
                None
            }
        }
    } else {
        None
    };

    if tty {
        tokio::spawn(relay_stdin(control.clone()));
        tokio::spawn(forward_resizes(control.clone()));
    }
    tokio::spawn(forward_signals(control.clone()));

    let mut output_task = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Ok(Some(chunk)) = output.next_chunk().await {
            if stdout.write_all(&chunk).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });

    let status = control.wait().await;
    // Let output already produced reach the terminal, then kill whatever the command left behind.
    // (A finished JoinHandle must not be polled again.)
    let mut drained = tokio::time::timeout(DRAIN_AFTER_EXIT, &mut output_task).await.is_ok();
    let _ = control.kill_tree().await;
    if !drained {
        drained = tokio::time::timeout(DRAIN_AFTER_EXIT, &mut output_task).await.is_ok();
    }
    if !drained {
        output_task.abort();
    }
    drop(raw);

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

fn spawn_failed(program: &str, e: SpawnError) -> NothingRan {
    let code = match &e {
        SpawnError::ProgramNotFound { .. } => 127,
        SpawnError::NotExecutable { .. } => 126,
        _ => EXIT_NOTHING_RAN,
    };
    NothingRan { code, error: anyhow!("cannot run {program}: {e}") }
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
