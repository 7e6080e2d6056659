//! The engine's error type: why an `exec_command` or `write_stdin` call failed.

use uexec_domain::{ApprovalPolicy, SessionId};
use uexec_ports::SandboxError;
use uexec_ports::process::{ProcessError, SpawnError};

/// Why a call failed. The app renders it as ``exec_command failed for `<cmd>`: <this>`` or
/// `write_stdin failed: <this>` (see `uexec_domain::response`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// No session has this id (never existed, exited and was reported, pruned or closed).
    #[error("Unknown process id {0}")]
    UnknownSession(SessionId),
    /// A write to a session without a terminal (`tty=false`): its stdin is `/dev/null`.
    #[error("stdin is closed for this session; rerun exec_command with tty=true to keep stdin open")]
    StdinClosed,
    /// Writing to the terminal failed.
    #[error("failed to write to stdin: {0}")]
    WriteFailed(ProcessError),
    /// Sending SIGINT (a `write_stdin` of only Ctrl-C to a session without a terminal) failed.
    #[error("failed to write to stdin: sending SIGINT failed: {0}")]
    InterruptFailed(ProcessError),
    /// `cmd` is empty.
    #[error("missing command line")]
    MissingCommand,
    /// An argument is unusable (too large, a NUL byte, ...); the text says which and why.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Earlier input still waits for the process to read it, and this input would take the waiting input past
    /// its limit: nothing of it was written.
    #[error(
        "the process has not read {waiting} bytes of earlier input yet, and at most {limit} bytes may wait for \
         it; nothing was written: poll with empty chars until it reads, or close the session"
    )]
    InputBacklogFull {
        /// Bytes of earlier input still waiting.
        waiting: usize,
        /// The most that may wait.
        limit: usize,
    },
    /// A person denied (or aborted) the command.
    #[error("rejected by user")]
    Rejected,
    /// A command rule or the `never` policy refuses the command; the text says what would need approval and
    /// which setting would allow it.
    #[error("{0}")]
    Forbidden(String),
    /// The caller asked for escalation under a policy that does not accept it.
    #[error(
        "escalation not allowed under approval policy {}; sandbox_permissions=require_escalated needs approval policy on-request",
        .0.as_str()
    )]
    EscalationNotAllowed(ApprovalPolicy),
    /// Approval was needed but nobody could be asked (or asking failed).
    #[error("{0}")]
    ApprovalUnavailable(String),
    /// The sandbox the policy asks for cannot be set up: nothing ran.
    #[error("{0}; nothing was run")]
    Sandbox(SandboxError),
    /// The process could not be started.
    #[error("failed to create process: {0}")]
    Spawn(SpawnError),
    /// The engine is shutting down: no new command is started.
    #[error("the server is shutting down; no new command is started")]
    ShuttingDown,
    /// Every session id is in use.
    #[error("too many sessions: every session id is in use; close sessions that are no longer needed")]
    TooManySessions,
}
