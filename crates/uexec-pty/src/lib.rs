//! Async PTY and pipe process sessions on rustix and tokio: no leaked process, fd or byte.
//!
//! This crate starts commands in a new pseudo-terminal (or with pipes), lets you write to them, resize
//! them, read everything they print in order, tell when a prompt waits for input, and kill them with
//! everything they started. It implements uexec's process port ([`ProcessSpawner`], [`ProcessControl`],
//! [`OutputStream`]) and is usable alone, without the rest of uexec:
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use uexec_pty::{Command, ExitStatus, OutputStream, ProcessControl, PtySize, PtySpawner};
//!
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! runtime.block_on(async {
//!     let script = "read line; echo \"got $line at $(stty size)\"; exit 3";
//!     let process = PtySpawner::default().spawn_command(Command::new("sh").args(["-c", script]))?;
//!     let (control, mut output) = (process.control, process.output);
//!     control.resize(PtySize { rows: 40, cols: 100 })?;
//!     control.write(b"hello\n").await?;
//!     let mut text = Vec::new();
//!     while let Some(chunk) = output.next_chunk().await? {
//!         text.extend_from_slice(&chunk);
//!     }
//!     assert!(String::from_utf8_lossy(&text).contains("got hello at 40 100"));
//!     assert_eq!(control.wait().await?, ExitStatus::Code(3));
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })?;
//! # Ok(())
//! # }
//! ```
//!
//! `examples/pty_bash.rs` drives an interactive `bash -i` the same way (`cargo run -p uexec-pty --example
//! pty_bash`).
//!
//! # What it is for, and what not
//! - For: programs that run commands for someone else (agents, CI runners, terminal multiplexers) and must
//!   not lose output, leak fds or leave processes behind, with a few sessions or thousands, in a host that
//!   may be large and multi-threaded (spawning does not get slower with the host's memory on Linux).
//! - Not a terminal emulator: the output is the raw byte stream (escape sequences included); put a parser
//!   such as `vt100` behind it for a screen.
//! - Not a sandbox: a sandbox plugs in as [`ChildSetup`] hooks (run in the child before `exec`) or by
//!   rewriting the argv; this crate restricts nothing itself.
//! - Not a general `std::process` replacement: pipe mode merges stdout and stderr into one stream and gives
//!   the child `/dev/null` as stdin; there is no Windows support.
//!
//! # Platforms: the Linux fast path and the portable core
//! [`PtySpawner::default`] picks the platform's implementation; [`PtySpawner::portable`] asks for the
//! portable one explicitly. Both keep the same contract and both run on Linux, where the test suite runs
//! every contract test against each of them.
//!
//! | | Linux fast path | portable POSIX core (macOS; Linux on request) |
//! |---|---|---|
//! | spawning | `clone(CLONE_VM \| CLONE_VFORK)`: cost independent of the host's size | `fork` + `execve` |
//! | exit | pidfd readiness | `SIGCHLD` through tokio (`kqueue` `EVFILT_PROC` on macOS), `waitpid` |
//! | the session's processes | `/proc`, pinned by pidfds | `/proc` on Linux, `libproc` on macOS; pinned by start time |
//! | host death | `PR_SET_PDEATHSIG`, PID namespace ([`contain_descendants`]) | PID namespace on Linux; none on macOS |
//! | [`ProcessControl::input_state`] | detected (`/proc/<pid>/syscall`) | [`InputState::Unavailable`] |
//!
//! # What a spawned process gets
//! - PTY mode: a new PTY (24x80 unless asked otherwise, `IUTF8` on); the slave is its stdin, stdout,
//!   stderr and controlling terminal; it leads a new session and process group.
//! - Pipe mode: stdin is `/dev/null`; stdout and stderr are one pipe, so they arrive merged in order.
//! - Inherit mode: fds 0, 1 and 2 are the host's own (a pipeline's pipes, a redirected file, the terminal),
//!   unchanged; the output half ends at once and the control half cannot write or resize.
//! - Exactly the request's argv, cwd and environment, plus [`SESSION_TOKEN_VAR`]; default signal
//!   dispositions and an empty signal mask; none of the host's fds; on the Linux fast path
//!   `PR_SET_PDEATHSIG(SIGKILL)`.
//!
//! The parent-death signal fires when the *thread* that created the process ends, so every process is
//! created by one dedicated thread that lives as long as the host (`uexec-spawner`, or `uexec-pidns` after
//! [`contain_descendants`]); the calling thread waits for it, for the same time the spawn would take.
//!
//! # Session lifecycle
//! 1. **Spawning** ([`PtySpawner::spawn_request`]): the request is checked (typed errors, nothing created),
//!    the PTY or pipe is opened, and the child is created; the call returns once the child has called
//!    `execve`, or reports the failing step with nothing left behind.
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
//! Errors are typed: [`SpawnError`] and [`ProcessError`] keep the failing call and the OS error number
//! ([`OsError`]) instead of text.
//!
//! Layering: this crate depends only on `uexec-domain` and `uexec-ports`; all unsafe code is in one module
//! (`sys`), which documents the rules the code in the child follows.

#![deny(unsafe_code)]
#![deny(missing_docs)]

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
    sandbox_pid_namespace,
};
pub use session::{MAX_CHUNK_BYTES, PtyControl, PtyOutput, PtyProcess, PtySpawner};
pub use token::{SESSION_TOKEN_VAR, SessionToken};
pub use uexec_domain::ExitStatus;
pub use uexec_ports::process::{
    ChildSetup, ChildSetupFailure, InputState, IoMode, OsError, OutputStream, PidScope, ProcessControl,
    ProcessError, ProcessSpawner, PtySize, Signal, SpawnError, SpawnRequest, SpawnedProcess,
};
