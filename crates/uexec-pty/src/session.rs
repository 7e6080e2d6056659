//! A spawned process as two halves: [`PtyControl`] (write, resize, signal, wait, kill) and [`PtyOutput`]
//! (the output, in order), and [`PtySpawner`], which creates them.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, TryLockError};
use std::time::Duration;

use async_trait::async_trait;
use rustix::fs::OFlags;
use rustix::process::{Pid, WaitId, WaitIdOptions, WaitIdStatus};
use rustix::pty::OpenptFlags;
use rustix::termios::{InputModes, OptionalActions, Winsize};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use uexec_domain::ExitStatus;
use uexec_ports::process::{
    InputState, IoMode, OutputStream, ProcessControl, ProcessError, ProcessSpawner, PtySize, Signal,
    SpawnError, SpawnRequest, SpawnedProcess,
};

use crate::command::Command;
use crate::contain::{self, StatusSlot, lock};
use crate::input::{self, Terminal};
use crate::prepare::prepare;
use crate::sys::{self, CStringArray, ChildPlan, ChildStage, ChildStdio, SpawnFailure};
use crate::token::SessionToken;
use crate::tree::{self, SessionIdentity};

/// Largest chunk [`PtyOutput::next_chunk`] returns.
pub const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// How long `kill_tree` lets the processes left handle SIGHUP/SIGTERM before SIGKILL (it moves on as soon as
/// they are gone, and does not wait at all when nothing is left).
const KILL_GRACE: Duration = Duration::from_millis(150);

/// How often `kill_tree` checks whether a process whose pidfd the reactor cannot watch is gone.
const KILL_POLL: Duration = Duration::from_millis(1);

/// At most this many rounds of "scan again, SIGKILL what is new" after the first SIGKILL (processes forked
/// between a scan and their parent's SIGKILL).
const KILL_SWEEPS: usize = 20;

/// How long `kill_tree` waits for killed processes to be gone before returning anyway.
const KILL_WAIT_LIMIT: Duration = Duration::from_secs(5);

/// Starts commands in a PTY or with pipes. Needs a tokio runtime with IO enabled (it registers fds with
/// its reactor); spawning itself is synchronous and does not depend on the size of the calling process.
#[derive(Debug, Clone, Default)]
pub struct PtySpawner {
    _private: (),
}

/// A started process: its two halves.
#[derive(Debug)]
pub struct PtyProcess {
    /// Write, resize, signal, wait, kill. Dropping the last reference kills the process tree.
    pub control: Arc<PtyControl>,
    /// The output (PTY: everything the terminal shows; pipes: stdout and stderr merged; inherited streams:
    /// nothing, it ends at once).
    pub output: PtyOutput,
}

impl PtySpawner {
    /// Start `command`.
    pub fn spawn_command(&self, command: Command) -> Result<PtyProcess, SpawnError> {
        self.spawn_request(command.into_request()?)
    }

    /// Start `request`: either the process runs with exactly its argv, cwd, env and mode (and every setup
    /// hook succeeded), or an error says why and nothing is left behind.
    pub fn spawn_request(&self, request: SpawnRequest) -> Result<PtyProcess, SpawnError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(SpawnError::Os("spawning needs a tokio runtime (with IO enabled)".to_owned()));
        }
        let token = SessionToken::new().map_err(|e| os_error("getrandom", &e))?;
        let prepared = prepare(&request, &token)?;
        let argv = CStringArray::new(prepared.argv);
        let envp = CStringArray::new(prepared.envp);
        let fork = request.setup.iter().any(|hook| hook.requires_fork());

        let (stream, child_ends) = match request.mode {
            IoMode::Pty(size) => {
                let (master, slave) = open_pty(size).map_err(|e| os_error("opening a PTY", &e))?;
                (Some(master), ChildEnds::Pty { slave })
            }
            IoMode::Pipes => {
                let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                    .map_err(|e| os_error("pipe", &e.into()))?;
                set_nonblocking(&read).map_err(|e| os_error("fcntl", &e))?;
                let null = rustix::fs::open(
                    c"/dev/null",
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_err(|e| os_error("opening /dev/null", &e.into()))?;
                let read = sys::fd_at_least_3(read).map_err(|e| os_error("fcntl", &e))?;
                let write = sys::fd_at_least_3(write).map_err(|e| os_error("fcntl", &e))?;
                let null = sys::fd_at_least_3(null).map_err(|e| os_error("fcntl", &e))?;
                (Some(read), ChildEnds::Pipes { null, write })
            }
            IoMode::Inherit => (None, ChildEnds::Inherit),
        };
        let tty = matches!(child_ends, ChildEnds::Pty { .. });
        let interest = if tty { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
        let stream = match stream {
            Some(fd) => {
                Some(sys::register(fd, interest).map_err(|e| os_error("registering with tokio", &e))?)
            }
            None => None,
        };
        // Nothing to read when the child writes to the host's own streams: the output ends at once.
        let inherited = stream.is_none();
        let stream = Arc::new(Stream { fd: stream });

        let stdio = match &child_ends {
            ChildEnds::Pty { slave } => ChildStdio::Pty { slave: slave.as_fd() },
            ChildEnds::Pipes { null, write } => {
                ChildStdio::Pipes { stdin: null.as_fd(), output: write.as_fd() }
            }
            ChildEnds::Inherit => ChildStdio::Inherit,
        };
        let plan = ChildPlan {
            program: &prepared.program,
            argv: &argv,
            envp: &envp,
            cwd: &prepared.cwd,
            stdio,
            setup: &request.setup,
        };
        let born_after = tree::start_time_floor();
        let started = contain::start(&plan, fork)
            .map_err(|failure| spawn_error(failure, &request, &prepared.program))?;
        drop(child_ends);
        // Read through the leader's pid while it cannot be reaped (the reaper thread may otherwise reap a leader
        // that exited at once, and the pid could name another session's process by now).
        let mount_ns = {
            let status = lock(&started.status);
            status.is_none().then(|| tree::MountNamespace::of(started.pid.as_raw_nonzero().get())).flatten()
        };

        let pidfd = match sys::register(started.pidfd, Interest::READABLE) {
            Ok(pidfd) => pidfd,
            Err(error) => {
                // The child runs but cannot be watched: kill and reap it, leave nothing behind.
                let mut status = lock(&started.status);
                let _ = rustix::process::kill_process_group(started.pid, rustix::process::Signal::KILL);
                if let Ok(fd) = rustix::process::pidfd_open(started.pid, rustix::process::PidfdFlags::empty())
                {
                    *status = sys::reap_blocking(fd.as_fd());
                }
                contain::forget_leader(started.pid.as_raw_nonzero().get());
                return Err(os_error("registering the pidfd with tokio", &error));
            }
        };
        tracing::debug!(pid = started.pid.as_raw_nonzero().get(), tty, argv = ?request.argv, "spawned");
        let control = Arc::new(PtyControl {
            pid: started.pid,
            pidfd,
            master: tty.then(|| Arc::clone(&stream)),
            status: started.status,
            token,
            born_after,
            mount_ns,
            terminal: OnceLock::new(),
            write_lock: tokio::sync::Mutex::new(()),
            kill_result: tokio::sync::Mutex::new(None),
            tree_killed: AtomicBool::new(false),
        });
        let output = PtyOutput { stream, chunk: Vec::new(), done: inherited, tty, pending_error: None };
        Ok(PtyProcess { control, output })
    }
}

impl ProcessSpawner for PtySpawner {
    fn spawn(&self, request: SpawnRequest) -> Result<SpawnedProcess, SpawnError> {
        let process = self.spawn_request(request)?;
        Ok(SpawnedProcess { control: process.control, output: Box::new(process.output) })
    }
}

/// The child's ends of its streams, closed in the parent right after the spawn.
enum ChildEnds {
    Pty {
        slave: OwnedFd,
    },
    Pipes {
        null: OwnedFd,
        write: OwnedFd,
    },
    /// The host's own fds 0, 1, 2: nothing of ours to close.
    Inherit,
}

fn os_error(what: &str, error: &io::Error) -> SpawnError {
    SpawnError::Os(format!("{what}: {error}"))
}

fn errno_text(errno: i32) -> String {
    io::Error::from_raw_os_error(errno).to_string()
}

fn spawn_error(failure: SpawnFailure, request: &SpawnRequest, program: &std::ffi::CStr) -> SpawnError {
    match failure {
        SpawnFailure::Os { call, errno } => SpawnError::Os(format!("{call}: {}", errno_text(errno))),
        SpawnFailure::Child(failure) => match (failure.stage, failure.errno) {
            (ChildStage::Chdir, libc::ENOENT | libc::ENOTDIR | libc::EACCES) => {
                SpawnError::BadCwd { cwd: request.cwd.clone() }
            }
            (ChildStage::Setup(stage), errno) => SpawnError::ChildSetup { stage, message: errno_text(errno) },
            (ChildStage::Exec, libc::ENOENT) => SpawnError::ProgramNotFound {
                program: request.argv.first().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            },
            (ChildStage::Exec, libc::EACCES | libc::EPERM | libc::EISDIR) => SpawnError::NotExecutable {
                path: std::path::PathBuf::from(std::ffi::OsStr::from_bytes(program.to_bytes())),
            },
            (ChildStage::Exec, errno) => SpawnError::Exec(errno_text(errno)),
            (stage, errno) => SpawnError::Os(format!("child setup ({stage:?}): {}", errno_text(errno))),
        },
    }
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | OFlags::NONBLOCK)?;
    Ok(())
}

/// A new PTY of `size`: the master (non-blocking, close-on-exec) and the slave (close-on-exec, not our
/// controlling terminal), both `>= 3`. The line discipline is the kernel's default plus `IUTF8`.
fn open_pty(size: PtySize) -> io::Result<(OwnedFd, OwnedFd)> {
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let slave = rustix::pty::ioctl_tiocgptpeer(
        &master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    )?;
    rustix::termios::tcsetwinsize(
        &slave,
        Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 },
    )?;
    let mut termios = rustix::termios::tcgetattr(&slave)?;
    termios.input_modes |= InputModes::IUTF8;
    rustix::termios::tcsetattr(&slave, OptionalActions::Now, &termios)?;
    set_nonblocking(&master)?;
    Ok((sys::fd_at_least_3(master)?, sys::fd_at_least_3(slave)?))
}

/// Convert a `waitid` status.
pub(crate) fn exit_status(status: &WaitIdStatus) -> ExitStatus {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(signal)) => ExitStatus::Signal(signal),
        (None, None) => ExitStatus::Code(-1),
    }
}

/// The PTY master or the pipe's read end, shared by the two halves. When the last half is dropped it is
/// deregistered from the reactor and closed on the background thread: closing a PTY master can take a
/// millisecond, which the dropping task should not wait for.
struct Stream {
    /// `Some` until dropped; `None` from the start for a child that inherited the host's streams.
    fd: Option<AsyncFd<OwnedFd>>,
}

impl Stream {
    fn get(&self) -> Result<&AsyncFd<OwnedFd>, ProcessError> {
        self.fd.as_ref().ok_or_else(|| ProcessError::Os("the terminal is closed".to_owned()))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            tree::in_background(tree::Chore::Close(fd.into_inner()));
        }
    }
}

/// The control half of a process. Shared (`Arc`); dropping the last reference kills the whole process
/// tree at once (SIGKILL, no grace) unless [`ProcessControl::kill_tree`] already did, and reaps it.
pub struct PtyControl {
    pid: Pid,
    pidfd: AsyncFd<OwnedFd>,
    /// The PTY master (shared with the output half); `None` in pipe mode.
    master: Option<Arc<Stream>>,
    /// The leader's exit status once reaped (by us, or by the reaper thread).
    status: StatusSlot,
    token: SessionToken,
    /// A start time before the leader's (see [`SessionIdentity::born_after`]).
    born_after: u64,
    /// The leader's private mount namespace (a sandboxed command's), if it has one.
    mount_ns: Option<tree::MountNamespace>,
    /// The slave's path and device, looked up on first use.
    terminal: OnceLock<Option<Terminal>>,
    write_lock: tokio::sync::Mutex<()>,
    kill_result: tokio::sync::Mutex<Option<ExitStatus>>,
    tree_killed: AtomicBool,
}

impl fmt::Debug for PtyControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtyControl")
            .field("pid", &self.pid)
            .field("tty", &self.master.is_some())
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl PtyControl {
    /// The session token in the environment of this process and its descendants.
    pub fn token(&self) -> &SessionToken {
        &self.token
    }

    fn raw_pid(&self) -> i32 {
        self.pid.as_raw_nonzero().get()
    }

    /// What identifies the session's processes. `status` is the leader's slot, locked by the caller for as long
    /// as the identity (and the leader's pid in it) is used: the leader cannot be reaped meanwhile.
    fn identity(&self, status: &Option<ExitStatus>) -> SessionIdentity<'_> {
        SessionIdentity {
            leader: self.raw_pid(),
            leader_unreaped: status.is_none(),
            token_entry: self.token.environ_entry(),
            born_after: self.born_after,
            mount_ns: self.mount_ns.as_ref().map(|ns| ns.id),
        }
    }

    /// Reap the leader if it has exited, without blocking. [`Reap::Busy`] while the slot is held by a scan of
    /// the session (it takes milliseconds; the caller retries).
    fn reap(&self) -> Result<Reap, ProcessError> {
        let mut slot = match self.status.try_lock() {
            Ok(slot) => slot,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(Reap::Busy),
        };
        if let Some(status) = *slot {
            return Ok(Reap::Exited(status));
        }
        loop {
            let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
            match rustix::process::waitid(WaitId::PidFd(self.pidfd.get_ref().as_fd()), options) {
                Ok(Some(raw)) => {
                    let status = exit_status(&raw);
                    *slot = Some(status);
                    contain::forget_leader(self.raw_pid());
                    return Ok(Reap::Exited(status));
                }
                Ok(None) => return Ok(Reap::Running),
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::CHILD) => {
                    // Cannot happen while every reaper of a leader holds its slot (see `contain`).
                    return Err(ProcessError::Os(
                        "the process was reaped by someone else (a waitpid(-1) elsewhere in this process)"
                            .to_owned(),
                    ));
                }
                Err(error) => return Err(ProcessError::Os(format!("waitid: {error}"))),
            }
        }
    }

    /// The leader's status if it was reaped (now or before); `None` while it runs or a scan holds it.
    fn reaped(&self) -> Result<Option<ExitStatus>, ProcessError> {
        Ok(match self.reap()? {
            Reap::Exited(status) => Some(status),
            Reap::Running | Reap::Busy => None,
        })
    }

    fn exited(&self) -> Result<bool, ProcessError> {
        Ok(self.reaped()?.is_some())
    }

    /// Send each of `signals` to the session: to its process group while the leader is unreaped, and to every
    /// member found by one scan; returns the members. The leader's slot is held throughout, so the leader's pid
    /// names the leader for the whole time (see `contain`).
    fn signal_session(&self, signals: &[rustix::process::Signal]) -> Vec<tree::Member> {
        let status = lock(&self.status);
        let identity = self.identity(&status);
        let members = tree::members(identity);
        for &signal in signals {
            if identity.leader_unreaped {
                let _ = rustix::process::kill_process_group(self.pid, signal);
            }
            tree::signal_all(&members, signal);
        }
        members
    }

    /// Kill everything now: SIGKILL to the group (while the leader is unreaped) and to every member.
    fn kill_now(&self) -> Vec<tree::Member> {
        self.signal_session(&[rustix::process::Signal::KILL])
    }
}

/// The outcome of one attempt to reap a leader.
enum Reap {
    Exited(ExitStatus),
    Running,
    /// A scan of the session holds the leader's slot.
    Busy,
}

/// How long to wait before trying again to reap a leader whose slot a scan holds.
const REAP_RETRY: Duration = Duration::from_millis(2);

fn os(error: &io::Error) -> ProcessError {
    ProcessError::Os(error.to_string())
}

fn raw_signal(signal: Signal) -> rustix::process::Signal {
    match signal {
        Signal::Interrupt => rustix::process::Signal::INT,
        Signal::Hangup => rustix::process::Signal::HUP,
        Signal::Terminate => rustix::process::Signal::TERM,
        Signal::Kill => rustix::process::Signal::KILL,
    }
}

#[async_trait]
impl ProcessControl for PtyControl {
    fn pid(&self) -> u32 {
        self.raw_pid().unsigned_abs()
    }

    fn is_tty(&self) -> bool {
        self.master.is_some()
    }

    async fn write(&self, bytes: &[u8]) -> Result<(), ProcessError> {
        let Some(master) = &self.master else {
            return Err(ProcessError::StdinClosed);
        };
        let _serialised = self.write_lock.lock().await;
        if self.exited()? {
            return Err(ProcessError::Exited);
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let mut guard = tokio::select! {
                guard = master.get()?.writable() => guard.map_err(|e| os(&e))?,
                exited = self.pidfd.readable() => {
                    let mut exited = exited.map_err(|e| os(&e))?;
                    if self.exited()? {
                        return Err(ProcessError::Exited);
                    }
                    exited.clear_ready();
                    continue;
                }
            };
            match guard.try_io(|fd| rustix::io::write(fd.get_ref(), rest).map_err(io::Error::from)) {
                Ok(Ok(written)) => rest = rest.get(written..).unwrap_or_default(),
                Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(error)) if error.raw_os_error() == Some(libc::EIO) => {
                    return Err(ProcessError::Exited);
                }
                Ok(Err(error)) => return Err(os(&error)),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }

    fn resize(&self, size: PtySize) -> Result<(), ProcessError> {
        let Some(master) = &self.master else {
            return Err(ProcessError::NotATerminal);
        };
        let winsize = Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
        rustix::termios::tcsetwinsize(master.get()?.get_ref(), winsize).map_err(|e| os(&e.into()))
    }

    fn signal(&self, signal: Signal) -> Result<(), ProcessError> {
        if self.exited()? {
            return Err(ProcessError::Exited);
        }
        // The group id is the leader's pid: only ours while the leader is unreaped, which holding its slot
        // guarantees.
        let status = lock(&self.status);
        if status.is_some() {
            return Err(ProcessError::Exited);
        }
        match rustix::process::kill_process_group(self.pid, raw_signal(signal)) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::SRCH) => Err(ProcessError::Exited),
            Err(error) => Err(os(&error.into())),
        }
    }

    fn input_state(&self) -> InputState {
        let Some(Ok(master)) = self.master.as_ref().map(|master| master.get()) else {
            return InputState::Unknown;
        };
        if !matches!(self.reap(), Ok(Reap::Running)) {
            return InputState::Unknown;
        }
        let terminal = self.terminal.get_or_init(|| Terminal::of_master(master.get_ref().as_fd()));
        match terminal {
            Some(terminal) => input::input_state(master.get_ref().as_fd(), terminal),
            None => InputState::Unknown,
        }
    }

    fn try_wait(&self) -> Result<Option<ExitStatus>, ProcessError> {
        self.reaped()
    }

    async fn wait(&self) -> Result<ExitStatus, ProcessError> {
        loop {
            match self.reap()? {
                Reap::Exited(status) => return Ok(status),
                Reap::Busy => {
                    tokio::time::sleep(REAP_RETRY).await;
                    continue;
                }
                Reap::Running => {}
            }
            let mut ready = self.pidfd.readable().await.map_err(|e| os(&e))?;
            match self.reap()? {
                Reap::Exited(status) => return Ok(status),
                // Readiness is kept: the next round tries again.
                Reap::Busy => tokio::time::sleep(REAP_RETRY).await,
                Reap::Running => ready.clear_ready(),
            }
        }
    }

    async fn kill_tree(&self) -> Result<ExitStatus, ProcessError> {
        let mut result = self.kill_result.lock().await;
        if let Some(status) = *result {
            return Ok(status);
        }
        // Reap an exited leader first: then its pid only counts while something of the session remains. (A
        // failure to reap must not stop the kill; `wait` below reports it.)
        let _ = self.reap();
        let leader_reaped = lock(&self.status).is_some();
        // A reaped leader with no orphan in the sessions' PID namespace leaves nothing behind: when the leader
        // exited, its living descendants were reparented to that namespace's init.
        let members = if leader_reaped && contain::namespace_has_no_orphans() {
            Vec::new()
        } else {
            self.signal_session(&[
                rustix::process::Signal::HUP,
                rustix::process::Signal::TERM,
                rustix::process::Signal::CONT,
            ])
        };
        let pids: Vec<i32> = members.iter().map(|member| member.pid).collect();
        tracing::debug!(leader = self.raw_pid(), ?pids, "killing the session's processes");
        // Nothing alive (no member: a process that could still fork would be one): no wait.
        let mut killed = Vec::new();
        if !members.is_empty() {
            all_gone(&members, KILL_GRACE).await;
            killed = members;
            // SIGKILL what is left, then scan again until a scan finds nothing new: a process that forked
            // between a scan and its SIGKILL shows up in the next scan, and one with SIGKILL pending cannot
            // fork any more (the kernel aborts the fork), so this ends without waiting.
            for _ in 0..KILL_SWEEPS {
                let found = self.kill_now();
                let fresh = found.iter().any(|member| killed.iter().all(|known| known.pid != member.pid));
                killed.extend(found);
                if !fresh {
                    break;
                }
            }
        }
        let status = tokio::time::timeout(KILL_WAIT_LIMIT, self.wait())
            .await
            .map_err(|_| ProcessError::Os("the process did not die after SIGKILL".to_owned()))??;
        all_gone(&killed, KILL_WAIT_LIMIT).await;
        tree::reap_adopted(&killed);
        self.tree_killed.store(true, Ordering::Release);
        *result = Some(status);
        Ok(status)
    }
}

/// Wait until every member has exited (its pidfd turns readable), for at most `limit`; true when all are gone.
/// Woken by the exits themselves, not by a timer.
async fn all_gone(members: &[tree::Member], limit: Duration) -> bool {
    let exits = async {
        for member in members {
            // A duplicate, so that the reactor owns what it watches.
            let watched = rustix::io::fcntl_dupfd_cloexec(member.pidfd(), 3)
                .map_err(io::Error::from)
                .and_then(|pidfd| sys::register(pidfd, Interest::READABLE));
            match watched {
                Ok(exit) => {
                    let _ = exit.readable().await;
                }
                // Not watchable (out of fds, or the reactor is out of resources): check at a short interval.
                Err(_) => {
                    while !tree::all_exited(std::slice::from_ref(member)) {
                        tokio::time::sleep(KILL_POLL).await;
                    }
                }
            }
        }
    };
    tokio::time::timeout(limit, exits).await.is_ok()
}

impl Drop for PtyControl {
    fn drop(&mut self) {
        if self.tree_killed.load(Ordering::Acquire) {
            return;
        }
        let leader_unreaped = {
            let status = lock(&self.status);
            if status.is_none() {
                // The bulk of the tree, at once; the sweep finds the rest.
                let _ = rustix::process::kill_process_group(self.pid, rustix::process::Signal::KILL);
            }
            status.is_none()
        };
        let leader_pidfd =
            leader_unreaped.then(|| rustix::io::fcntl_dupfd_cloexec(self.pidfd.get_ref(), 3).ok()).flatten();
        tree::in_background(tree::Chore::Sweep(tree::Sweep {
            leader: self.raw_pid(),
            status: Arc::clone(&self.status),
            token_entry: self.token.environ_entry().to_vec(),
            born_after: self.born_after,
            mount_ns: self.mount_ns.take(),
            leader_pidfd,
        }));
    }
}

/// The output half: chunks of at most [`MAX_CHUNK_BYTES`], in order, read from the PTY master (or the
/// pipe) only when asked, so an unread session costs no CPU and its output waits in the kernel.
pub struct PtyOutput {
    stream: Arc<Stream>,
    /// The chunk being filled: read into directly (no copy), handed out when full or nothing more is
    /// available, then trimmed to its length.
    chunk: Vec<u8>,
    done: bool,
    tty: bool,
    pending_error: Option<ProcessError>,
}

impl fmt::Debug for PtyOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtyOutput").field("tty", &self.tty).field("done", &self.done).finish_non_exhaustive()
    }
}

impl PtyOutput {
    /// Read what is available now into `self.chunk`, up to [`MAX_CHUNK_BYTES`].
    fn read_available(&mut self) -> Result<Available, ProcessError> {
        if self.chunk.capacity() < MAX_CHUNK_BYTES {
            self.chunk = Vec::with_capacity(MAX_CHUNK_BYTES);
        }
        let mut end = false;
        let mut would_block = false;
        while self.chunk.len() < self.chunk.capacity() {
            // Reads into the spare capacity and extends the length by what was read.
            match rustix::io::read(
                self.stream.get()?.get_ref(),
                rustix::buffer::spare_capacity(&mut self.chunk),
            ) {
                Ok(0) => {
                    end = true;
                    break;
                }
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    would_block = true;
                    break;
                }
                // EIO on a PTY master: every slave fd is closed, the output has ended.
                Err(rustix::io::Errno::IO) if self.tty => {
                    end = true;
                    break;
                }
                Err(error) => {
                    let error = ProcessError::Os(format!("read: {error}"));
                    if self.chunk.is_empty() {
                        return Err(error);
                    }
                    self.pending_error = Some(error);
                    break;
                }
            }
        }
        Ok(Available { end, would_block })
    }
}

/// The result of one [`PtyOutput::read_available`] (the bytes are in `chunk`).
struct Available {
    /// The output has ended (EOF, or EIO on a PTY master).
    end: bool,
    /// The last read found nothing more: readiness must be cleared.
    would_block: bool,
}

#[async_trait]
impl OutputStream for PtyOutput {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, ProcessError> {
        if let Some(error) = self.pending_error.take() {
            self.done = true;
            return Err(error);
        }
        if self.done {
            return Ok(None);
        }
        loop {
            // Cancel-safe: the only await is the readiness wait; bytes are read and returned without
            // yielding in between.
            let stream = Arc::clone(&self.stream);
            let mut ready = stream.get()?.readable().await.map_err(|e| os(&e))?;
            let Available { end, would_block } = self.read_available()?;
            if would_block {
                ready.clear_ready();
            }
            if end {
                self.done = true;
            }
            if !self.chunk.is_empty() {
                // Trimming a heap block in place costs no copy; the next read allocates a fresh chunk.
                let mut chunk = std::mem::take(&mut self.chunk);
                chunk.shrink_to_fit();
                return Ok(Some(chunk));
            }
            if end {
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::ffi::OsString;
    use std::path::PathBuf;
    use std::time::Instant;

    use super::*;

    fn sh(script: &str) -> SpawnRequest {
        SpawnRequest {
            argv: ["sh", "-c", script].iter().map(OsString::from).collect(),
            cwd: PathBuf::from("/"),
            env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
            mode: IoMode::Pipes,
            setup: Vec::new(),
        }
    }

    /// The state letter of `pid` in `/proc` (`Z` for a zombie), `None` once it is gone (reaped).
    fn state(pid: i32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next())
    }

    async fn until(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !check() {
            assert!(Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kill_sweep_never_reaps_another_sessions_leader() {
        // A sweep reaps the processes it killed that are this process's children. A session leader is one of
        // them; had a scan ever counted it as a member of another session, that session reaped it first and
        // the leader's own waiter found it gone: exit code -1, "reaped by someone else".
        let spawner = PtySpawner::default();
        let other = spawner.spawn_request(sh("sleep 600")).unwrap();
        let pid = other.control.raw_pid();
        let found = {
            let status = lock(&other.control.status);
            tree::members(other.control.identity(&status))
        };
        assert!(found.iter().any(|member| member.pid == pid), "the scan finds the leader");
        rustix::process::kill_process(other.control.pid, rustix::process::Signal::KILL).unwrap();
        until("the leader is a zombie", || state(pid) == Some('Z')).await;
        tree::reap_adopted(&found);
        assert_eq!(state(pid), Some('Z'), "a live session's leader is left to its session");
        let status = other.control.wait().await.unwrap();
        assert_eq!(status, ExitStatus::Signal(libc::SIGKILL));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The test plays a scan that holds the slot while the waiter runs; the waiter only ever tries the lock.
    #[allow(clippy::await_holding_lock)]
    async fn the_leader_stays_unreaped_while_a_scan_uses_its_pid() {
        // A scan matches the leader, its group and its session by the leader's pid. Were the leader reaped in
        // the middle, the pid could name a new process (another session's leader), which the scan would kill
        // and reap. Holding the slot (as every scan does) keeps the leader a zombie, so its pid stays ours.
        let spawner = PtySpawner::default();
        let process = spawner.spawn_request(sh("exit 7")).unwrap();
        let pid = process.control.raw_pid();
        let control = Arc::clone(&process.control);
        let scan = lock(&control.status);
        until("the leader exited", || state(pid) == Some('Z')).await;
        let waiter = tokio::spawn({
            let control = Arc::clone(&control);
            async move { control.wait().await }
        });
        assert_eq!(control.try_wait().unwrap(), None, "not reaped while the scan holds it");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        assert_eq!(state(pid), Some('Z'), "the pid still names the exited leader");
        drop(scan);
        assert_eq!(waiter.await.unwrap().unwrap(), ExitStatus::Code(7));
        assert_eq!(state(pid), None);
        assert_eq!(control.try_wait().unwrap(), Some(ExitStatus::Code(7)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn signalling_an_exited_session_is_refused_and_never_reaches_its_old_group_id() {
        let spawner = PtySpawner::default();
        let process = spawner.spawn_request(sh("exit 3")).unwrap();
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(3));
        // The group id is free now and may name someone else's group: nothing is sent to it.
        assert!(matches!(process.control.signal(Signal::Terminate), Err(ProcessError::Exited)));
    }
}
