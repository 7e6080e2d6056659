//! The process port: spawn a command in a PTY or with pipes, then talk to it.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uexec_domain::ExitStatus;
use uexec_domain::limits::{PTY_COLS, PTY_ROWS};

/// Terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PtySize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl Default for PtySize {
    /// 24 rows x 80 columns, as the reference.
    fn default() -> Self {
        PtySize { rows: PTY_ROWS, cols: PTY_COLS }
    }
}

/// How the child's standard streams are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoMode {
    /// A new PTY: the slave is stdin, stdout, stderr and the controlling terminal.
    Pty(PtySize),
    /// stdin is `/dev/null`; stdout and stderr are one pipe, merged in arrival order.
    Pipes,
    /// The child's stdin, stdout and stderr are the spawning process's own fds 0, 1 and 2, whatever they are
    /// (a terminal, a pipe, a file): no PTY, no pipe, no relay. For a command run in the place of the host
    /// (`uexec run` in a pipeline), so that it sees exactly what it would see without the host. Its output
    /// stream ends at once (there is nothing to read), writes fail with [`ProcessError::StdinClosed`] and
    /// resizes with [`ProcessError::NotATerminal`]. Never for a server whose standard streams carry a protocol.
    Inherit,
}

/// A failure inside the child before `exec`: which step failed and its errno. `Copy` and allocation-free,
/// because it is produced where allocating is not allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildSetupFailure {
    /// The step, e.g. `"landlock_restrict_self"`.
    pub stage: &'static str,
    /// The errno.
    pub errno: i32,
}

/// Work done in the child between fork and exec, after the standard streams are in place and before `execve`
/// (a sandbox restricting the child, for instance).
///
/// # Safety
/// `run_in_child` runs in a child created by `vfork`-like `clone` of a possibly multi-threaded parent: it
/// shares the parent's memory and the parent's other threads may hold any lock. An implementation must only
/// make async-signal-safe system calls on data prepared beforehand: no allocation, no locks, no panics, no
/// writes to memory the parent reads later.
#[allow(unsafe_code)]
pub unsafe trait ChildSetup: Send + Sync + fmt::Debug {
    /// Apply the setup to the calling (child) process.
    fn run_in_child(&self) -> Result<(), ChildSetupFailure>;

    /// True when the hook needs a child with its own address space (a real `fork`, not a `vfork`-like clone):
    /// for example to call `unshare(CLONE_NEWUSER)`, which the kernel refuses while memory is shared. The
    /// spawner then forks; the hook still must not allocate or lock (the parent may be multi-threaded).
    fn requires_fork(&self) -> bool {
        false
    }

    /// Called first in the child, before its session, streams and working directory are set up and before any
    /// hook's [`ChildSetup::run_in_child`], under the same rules. Returns true when it pointed the child's
    /// future children at another PID namespace (`setns(fd, CLONE_NEWPID)`, possible only after entering the
    /// user namespace that owns it, which needs [`ChildSetup::requires_fork`]): the process adapter then
    /// creates the command as a new process in that namespace, a sibling of the child (a child of the
    /// adapter), and the child only exits; the new process carries on with the session, the streams and every
    /// hook's `run_in_child` (which runs in the namespaces entered here), and is the process the adapter
    /// reports, waits for and signals. A process adapter that cannot do so fails the spawn. The default does
    /// nothing.
    fn enter_pid_namespace(&self) -> Result<bool, ChildSetupFailure> {
        Ok(false)
    }
}

/// Which processes a new process sees and may signal: which PID namespace a process adapter that keeps one
/// for sandboxed commands puts it in. An adapter without such a namespace starts every process on the host's
/// (both values then mean the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PidScope {
    /// The host's PID namespace: the process sees and signals the host's processes as the person could, and
    /// `ps`, `kill`, `$$` and `/proc` all use the host's numbering. For commands that run without a sandbox.
    #[default]
    Host,
    /// The one PID namespace the adapter keeps for every sandboxed command it starts: they see and signal each
    /// other (across sessions) and nothing outside it. A sandbox asks for it ([`SandboxedSpawn`] sets it).
    ///
    /// [`SandboxedSpawn`]: crate::sandbox::SandboxedSpawn
    Sandbox,
}

/// Everything needed to start one process.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// Program and arguments. `argv[0]` without a `/` is looked up in the `PATH` of `env`.
    pub argv: Vec<OsString>,
    /// Working directory (absolute).
    pub cwd: PathBuf,
    /// The complete environment of the child (nothing else is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// PTY or pipes.
    pub mode: IoMode,
    /// Hooks run in the child just before `exec`, in order.
    pub setup: Vec<Arc<dyn ChildSetup>>,
    /// Which PID namespace the process runs in.
    pub pid_scope: PidScope,
}

/// Why a process could not be started. Every variant means: nothing was spawned and nothing leaked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// `argv` is empty.
    #[error("missing command line: argv is empty")]
    EmptyArgv,
    /// An argument, env name or value contains a NUL byte.
    #[error("{what} contains a NUL byte")]
    NulByte {
        /// Which: `argument 2`, `environment variable FOO`, `cwd`.
        what: String,
    },
    /// The program does not exist (not found on `PATH`, or the path does not exist).
    #[error("program not found: {program}")]
    ProgramNotFound {
        /// As given.
        program: String,
    },
    /// The program exists but cannot be executed.
    #[error("program is not executable: {path}")]
    NotExecutable {
        /// The resolved path.
        path: PathBuf,
    },
    /// The working directory does not exist or is not a directory.
    #[error("working directory does not exist or is not a directory: {cwd}")]
    BadCwd {
        /// As given.
        cwd: PathBuf,
    },
    /// A child setup hook failed; the child exited without running the program.
    #[error("child setup failed at {stage}: {}", OsError::describe(*errno))]
    ChildSetup {
        /// The step.
        stage: &'static str,
        /// The OS error number.
        errno: i32,
    },
    /// `execve` failed for another reason than a missing or non-executable program.
    #[error("exec failed: {}", OsError::describe(*errno))]
    Exec {
        /// The OS error number.
        errno: i32,
    },
    /// Spawning was called outside a tokio runtime with IO enabled (the adapter registers fds with it).
    #[error("spawning needs a tokio runtime with IO enabled")]
    NoRuntime,
    /// Any other OS error (opening the PTY, creating pipes, forking), with the call that failed.
    #[error("spawn failed: {0}")]
    Os(OsError),
}

/// A system call that failed: which call (or step) and the OS error number (`errno`), kept as numbers so that
/// a caller can tell `EPERM` from `ENOMEM` without parsing text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{call}: {}", OsError::describe(*errno))]
pub struct OsError {
    /// The call or step that failed, e.g. `"openpt"`, `"fork"`, `"waitid"`.
    pub call: &'static str,
    /// The OS error number.
    pub errno: i32,
}

impl OsError {
    /// The error `errno` returned by `call`.
    pub fn new(call: &'static str, errno: i32) -> Self {
        OsError { call, errno }
    }

    /// The error as a [`std::io::Error`] (its kind and text).
    pub fn to_io_error(&self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno)
    }

    /// The operating system's text for `errno`.
    fn describe(errno: i32) -> String {
        std::io::Error::from_raw_os_error(errno).to_string()
    }
}

/// Why talking to a running process failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// The process has exited; nothing can be written to it.
    #[error("process has exited")]
    Exited,
    /// This process has no writable stdin (pipe mode: stdin is /dev/null).
    #[error("stdin is closed for this process")]
    StdinClosed,
    /// Resizing is only possible for PTY processes.
    #[error("not a terminal")]
    NotATerminal,
    /// The process was sent SIGKILL but had not exited within the adapter's limit (a process stuck in the
    /// kernel, for example on a hung network file system).
    #[error("the process did not exit after SIGKILL")]
    Unkillable,
    /// An OS error, with the call that failed.
    #[error("{0}")]
    Os(OsError),
}

/// Signals the engine sends. Sent to the whole process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Signal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGHUP.
    Hangup,
    /// SIGTERM.
    Terminate,
    /// SIGKILL.
    Kill,
}

/// What the process in the terminal's foreground is doing, for early return (spec B4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum InputState {
    /// The foreground process group is blocked reading the terminal: a prompt is waiting for input. An adapter
    /// reports this only when every byte the foreground wrote before blocking has already been read from the
    /// terminal by the [`OutputStream`], so a caller that has drained the stream holds the complete output.
    WaitingForInput,
    /// Something in the foreground is running (or the adapter cannot tell it is waiting).
    Busy,
    /// Not knowable for this process (pipe mode, or the process is gone).
    Unknown,
    /// The adapter cannot detect input waits at all on this platform (it needs Linux's `/proc`): callers must
    /// not expect [`InputState::WaitingForInput`] from it, ever.
    Unavailable,
}

/// The read half of a process: one owner (the engine's reader task) pulls chunks in order.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait OutputStream: Send {
    /// The next chunk of output, in order. `Ok(None)` once all output has been read (EOF, or EIO on a PTY
    /// after exit). Cancel-safe: dropping the future loses no bytes. Never busy-polls.
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, ProcessError>;
}

/// The control half of a process, shared by everyone who talks to it.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait ProcessControl: Send + Sync {
    /// The OS process id of the command (leader of its own session and process group).
    fn pid(&self) -> u32;

    /// True for PTY processes.
    fn is_tty(&self) -> bool;

    /// Write `bytes` verbatim to the terminal (PTY mode), all of them. [`ProcessError::StdinClosed`] in pipe
    /// mode, [`ProcessError::Exited`] when the process is gone.
    async fn write(&self, bytes: &[u8]) -> Result<(), ProcessError>;

    /// Resize the terminal; the foreground process group gets SIGWINCH.
    fn resize(&self, size: PtySize) -> Result<(), ProcessError>;

    /// Send `signal` to the process group.
    fn signal(&self, signal: Signal) -> Result<(), ProcessError>;

    /// Whether the terminal's foreground process is blocked reading it.
    fn input_state(&self) -> InputState;

    /// The exit status if the process has exited (reaping it), else `None`.
    fn try_wait(&self) -> Result<Option<ExitStatus>, ProcessError>;

    /// Wait for the process to exit. Cancel-safe.
    async fn wait(&self) -> Result<ExitStatus, ProcessError>;

    /// Kill the whole tree: SIGHUP/SIGTERM to the group, SIGKILL after a short grace, and every descendant that
    /// left the group too; reap. Returns the leader's exit status. Idempotent.
    async fn kill_tree(&self) -> Result<ExitStatus, ProcessError>;
}

/// A started process, as its two halves.
pub struct SpawnedProcess {
    /// Control: write, resize, signal, wait, kill.
    pub control: Arc<dyn ProcessControl>,
    /// Output, in order.
    pub output: Box<dyn OutputStream>,
}

impl fmt::Debug for SpawnedProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpawnedProcess").field("pid", &self.control.pid()).finish_non_exhaustive()
    }
}

/// Starts processes. Contract: either the process runs with exactly the request's argv, cwd, env and mode (and
/// its setup hooks all succeeded), or an error is returned and nothing is left behind. Must be called inside
/// the async runtime the adapter uses.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait ProcessSpawner: Send + Sync {
    /// Start `request`.
    fn spawn(&self, request: SpawnRequest) -> Result<SpawnedProcess, SpawnError>;
}
