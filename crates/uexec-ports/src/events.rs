//! The event-sink port: facts about commands, for library users, UIs and the audit log (spec A7).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uexec_domain::{ProtectionReport, ReviewDecision, SessionId};

use crate::approval::ApprovalRequest;

/// One fact about a command. `call_id` is the id of the `exec_command` call that started the command; every
/// event of that command carries it, including those caused by later `write_stdin` calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExecEvent {
    /// The command was spawned. Exactly once per spawned command; never when approval or spawn failed.
    Begin {
        /// The exec call.
        call_id: String,
        /// The session id (also for commands that exit within the first window).
        session_id: SessionId,
        /// The command as asked for and approved: `[shell, "-lc" | "-c", script]`, or the argv of `uexec run`.
        command: Vec<String>,
        /// The exact argv that was executed: `command` as placed (the sandbox's wrapper, when it has one, in
        /// front). Non-UTF-8 bytes are replaced (U+FFFD).
        argv: Vec<String>,
        /// Its working directory.
        cwd: PathBuf,
        /// Whether it runs in a PTY.
        tty: bool,
        /// The protections in force.
        protections: ProtectionReport,
    },
    /// A piece of output: at most 8192 bytes, never split inside a UTF-8 sequence.
    OutputDelta {
        /// The exec call.
        call_id: String,
        /// The session.
        session_id: SessionId,
        /// The bytes.
        chunk: Vec<u8>,
    },
    /// The caller wrote to (or polled) the session.
    TerminalInteraction {
        /// The original exec call.
        call_id: String,
        /// The session.
        session_id: SessionId,
        /// What was written (`""` for a poll).
        chars: String,
    },
    /// The command ended: exited, was pruned or was killed. Exactly once per `Begin`.
    End {
        /// The exec call.
        call_id: String,
        /// The session.
        session_id: SessionId,
        /// The exit code; -1 when unknown.
        exit_code: i32,
        /// The aggregated output, capped head/tail like every session buffer.
        aggregated_output: String,
        /// From spawn to end.
        duration: Duration,
    },
    /// The sandbox refused something the command tried (the same refusals as the response's note, each
    /// emitted once per session).
    Refused {
        /// The exec call.
        call_id: String,
        /// The session.
        session_id: SessionId,
        /// What was refused, why, and how it is known.
        refusals: Vec<uexec_domain::denial::Refusal>,
    },
    /// A person was asked.
    ApprovalRequested {
        /// The question.
        request: ApprovalRequest,
    },
    /// A person answered (or the approver failed: `decision` is then `None` and `error` says why).
    ApprovalDecided {
        /// The exec call.
        call_id: String,
        /// The answer.
        decision: Option<ReviewDecision>,
        /// Why there is no answer.
        error: Option<String>,
    },
}

/// Receives events. Contract: must not block and must not fail the command; an implementation that writes
/// (an audit log) records its own failures.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait EventSink: Send + Sync {
    /// Record one event.
    fn emit(&self, event: ExecEvent);
}
