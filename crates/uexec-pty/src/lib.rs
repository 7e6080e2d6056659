//! Async PTY and pipe process sessions on rustix and tokio: no leaked process, fd or byte.
//!
//! This crate implements uexec's process port ([`ProcessSpawner`]) for Linux, and is meant to be usable
//! alone by anyone who wants a solid async PTY:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use uexec_pty::{Command, OutputStream, ProcessControl, PtySpawner};
//!
//! let process = PtySpawner::default().spawn_command(Command::new("bash").arg("-i"))?;
//! let (control, mut output) = (process.control, process.output);
//! control.write(b"echo hello; exit 3\n").await?;
//! while let Some(chunk) = output.next_chunk().await? {
//!     print!("{}", String::from_utf8_lossy(&chunk));
//! }
//! assert_eq!(control.wait().await?.code(), 3);
//! # Ok(())
//! # }
//! ```
//!
//! # What a spawned process gets
//! - PTY mode: a new PTY (24x80 unless asked otherwise, `IUTF8` on); the slave is its stdin, stdout,
//!   stderr and controlling terminal; it leads a new session and process group.
//! - Pipe mode: stdin is `/dev/null`; stdout and stderr are one pipe, so they arrive merged in order.
//! - Inherit mode: fds 0, 1 and 2 are the host's own (a pipeline's pipes, a redirected file, the terminal),
//!   unchanged; the output half ends at once and the control half cannot write or resize.
//! - Exactly the request's argv, cwd and environment, plus [`SESSION_TOKEN_VAR`]; default signal
//!   dispositions and an empty signal mask; none of the host's fds; `PR_SET_PDEATHSIG(SIGKILL)`.
//!
//! The parent-death signal fires when the *thread* that created the process ends, so every process is
//! created by one dedicated thread that lives as long as the host (`uexec-spawner`, or `uexec-pidns` after
//! [`contain_descendants`]); the calling thread waits for it, for the same time the spawn would take.
//!
//! # Session lifecycle
//! 1. **Spawning** ([`PtySpawner::spawn_request`]): the request is checked (typed errors, nothing created),
//!    the PTY or pipe is opened, and the child is created with `clone(CLONE_VM | CLONE_VFORK)`; the call
//!    returns once the child has called `execve`, or reports the failing step with nothing left behind.
//! 2. **Live**: the output half reads the master (or pipe) only when asked; the control half writes, resizes,
//!    signals the process group, reports whether the foreground process waits for input.
//! 3. **Exited**: the leader has exited; the output half still delivers everything written before the
//!    exit, then ends (EOF, or EIO on the master once every slave fd is closed). Writes fail with
//!    [`ProcessError::Exited`].
//! 4. **Reaped**: `try_wait`/`wait` reaped the leader and keep its status.
//! 5. **Killed**: `kill_tree` (or dropping the control half) killed every process of the session, including
//!    those that left its group or session (found through the session token), and reaped what is ours.
//!    The PTY master closes when both halves are dropped.
//!
//! Layering: this crate depends only on `uexec-domain` and `uexec-ports`; all unsafe code is in one module
//! (`sys`), which documents the rules the code in the child follows.

#![deny(unsafe_code)]

mod command;
mod contain;
mod error;
mod exit;
#[cfg(target_os = "linux")]
mod input;
mod kill;
mod prepare;
#[cfg(target_os = "linux")]
mod procfs;
mod reap;
mod session;
mod spawn;
mod stdio;
mod sys;
mod table;
mod token;
mod tree;

pub use command::Command;
pub use contain::{
    ContainError, Containment, NamespacePolicy, contain_descendants, contain_descendants_with, containment,
};
pub use session::{MAX_CHUNK_BYTES, PtyControl, PtyOutput, PtyProcess, PtySpawner};
pub use token::{SESSION_TOKEN_VAR, SessionToken};
pub use uexec_domain::ExitStatus;
pub use uexec_ports::process::{
    ChildSetup, ChildSetupFailure, InputState, IoMode, OsError, OutputStream, ProcessControl, ProcessError,
    ProcessSpawner, PtySize, Signal, SpawnError, SpawnRequest, SpawnedProcess,
};
