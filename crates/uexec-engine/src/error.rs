//! The engine's error type: why an `exec_command` or `write_stdin` call failed.

use uexec_domain::{ApprovalPolicy, SessionId};
use uexec_ports::process::{ProcessError, SpawnError};
use uexec_ports::{ApprovalError, SandboxError};

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
    /// The task writing the input ended without finishing (it panicked, or the runtime is shutting down); the
    /// text is the task's error.
    #[error("failed to write to stdin: the input writer failed: {0}")]
    InputWriterFailed(String),
    /// Sending SIGINT (a `write_stdin` of only Ctrl-C to a session without a terminal) failed.
    #[error("failed to write to stdin: sending SIGINT failed: {0}")]
    InterruptFailed(ProcessError),
    /// `cmd` is empty.
    #[error("missing command line")]
    MissingCommand,
    /// `cmd` or `workdir` contains a NUL byte, which no argument or path can hold.
    #[error("invalid input: {field} contains a NUL byte")]
    NulByte {
        /// `cmd` or `workdir`.
        field: &'static str,
    },
    /// `cmd` is longer than one argument may be (the shell gets it as one): nothing was run.
    #[error(
        "invalid input: cmd is {bytes} bytes, over the kernel's limit for one argument (MAX_ARG_STRLEN: {max} \
         bytes including its terminating NUL); cmd is passed to the shell as one argument, so nothing was run. \
         Write the script to a file in smaller pieces (or through write_stdin to `cat > script.sh` in a tty \
         session) and run the file"
    )]
    CommandTooLong {
        /// Bytes of `cmd`.
        bytes: usize,
        /// The kernel's limit for one argument, its terminating NUL included.
        max: usize,
    },
    /// `chars` is larger than one write may be (`max_write_bytes`): nothing was written.
    #[error("invalid input: chars is {bytes} bytes; at most {max} bytes can be written at once")]
    WriteTooLarge {
        /// Bytes of `chars`.
        bytes: usize,
        /// The most one write may carry.
        max: usize,
    },
    /// The script is an `apply_patch` patch without the `apply_patch` call that would apply it (run as a
    /// script, its first line would be a command).
    #[error(
        "invalid input: patch detected without explicit call to apply_patch. Rerun as [\"apply_patch\", \"<patch>\"]"
    )]
    BarePatch,
    /// The script calls `apply_patch` among other commands, in a form that is not intercepted, and no
    /// `apply_patch` program is on the `PATH` (the shell would answer "command not found").
    #[error(
        "invalid input: apply_patch must be the whole command: `apply_patch <<'EOF'` with the patch as the \
         heredoc (or `apply_patch '<patch>'`), optionally after `cd <dir> &&` or `;` and `set -e`, and nothing \
         after it. Run other commands in a call of their own"
    )]
    ApplyPatchNotWholeCommand,
    /// A screen was asked of a session without a terminal.
    #[error(
        "invalid input: session {0} has no terminal (it was started with tty=false), so it has no screen"
    )]
    NoScreen(SessionId),
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
    /// The caller asked for escalation under a policy that asks nobody (`never`).
    #[error(
        "escalation not allowed under approval policy {}, which asks nobody; sandbox_permissions=require_escalated \
         needs a person to approve it (approval policy on-request, on-failure or untrusted)",
        .0.as_str()
    )]
    EscalationNotAllowed(ApprovalPolicy),
    /// Approval was needed but no decision could be had: nobody could be asked, asking failed, or nobody
    /// answered in time (each its own [`ApprovalError`]).
    #[error("{0}")]
    ApprovalUnavailable(ApprovalError),
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
    /// Every session a budget shared with other engines allows is in use (a server's limit across its clients).
    #[error(
        "refused: this server holds {limit} sessions across its clients (live sessions and calls in progress), \
         its limit; close sessions you no longer need (close_session), or wait for running commands to end, then \
         retry"
    )]
    SessionBudgetFull {
        /// The budget's limit.
        limit: usize,
    },
}
