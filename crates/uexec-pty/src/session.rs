//! A spawned process as two halves: [`PtyControl`] (write, resize, signal, wait, kill) and [`PtyOutput`]
//! (the output, in order), and [`PtySpawner`], which creates them with the Linux fast path or the portable
//! POSIX core.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
#[cfg(target_os = "linux")]
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rustix::process::Pid;
use rustix::termios::Winsize;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use uexec_domain::ExitStatus;
use uexec_ports::process::{
    InputState, IoMode, OsError, OutputStream, PidScope, ProcessControl, ProcessError, ProcessSpawner,
    PtySize, Signal, SpawnError, SpawnRequest, SpawnedProcess,
};

use crate::command::Command;
use crate::contain::{self, OwnNamespace};
use crate::error::{io_error, os_error, spawn_io_error};
use crate::exit::ExitWatch;
#[cfg(target_os = "linux")]
use crate::input::{self, Terminal};
use crate::kill::{self, Chore, KILL_GRACE, KILL_WAIT_LIMIT, Sweep, Target};
use crate::prepare::prepare;
use crate::reap::{self, LeaderRef, Reap, lock};
use crate::spawn;
use crate::stdio;
use crate::sys::{self, Backend, CStringArray, ChildPlan, ChildStage, ChildStdio, SpawnFailure};
use crate::table;
use crate::token::SessionToken;
use crate::tree::{Pinning, PrivateNamespace};

/// Largest chunk [`PtyOutput::next_chunk`] returns.
pub const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// How long to wait before trying again to reap a leader whose slot a scan holds.
const REAP_RETRY: Duration = Duration::from_millis(2);

/// Starts commands in a PTY or with pipes. Needs a tokio runtime with IO enabled (it registers fds with
/// its reactor); spawning itself is synchronous.
///
/// Two implementations sit behind it. [`PtySpawner::default`] picks the platform's best: on Linux the fast
/// path (a `vfork`-like `clone` whose cost does not grow with the host's memory, pidfds, a parent-death
/// signal, input-wait detection); elsewhere the portable POSIX core. [`PtySpawner::portable`] asks for the
/// portable core explicitly: `fork`/`execve`, `waitpid`, exit seen through `SIGCHLD` (a `kqueue` on macOS),
/// signals by pid checked against the process's start time, and [`InputState::Unavailable`]. Both keep the
/// same contract (the process port's), and both run on Linux, where the portable core is what macOS runs.
#[derive(Debug, Clone)]
pub struct PtySpawner {
    backend: Backend,
    /// The sandbox PID namespace of this spawner's own ([`PtySpawner::with_own_sandbox_namespace`]), made on
    /// first use and shared by its clones; `None`: sandbox-scope processes go to the default one.
    own_namespace: Option<Arc<std::sync::Mutex<Option<Arc<OwnNamespace>>>>>,
}

impl Default for PtySpawner {
    /// The fast path on Linux, the portable core elsewhere.
    fn default() -> Self {
        #[cfg(target_os = "linux")]
        {
            PtySpawner { backend: Backend::Linux, own_namespace: None }
        }
        #[cfg(not(target_os = "linux"))]
        {
            PtySpawner { backend: Backend::Portable, own_namespace: None }
        }
    }
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
    /// The portable POSIX core, on any platform: what macOS runs. On Linux it gives up the fast path's
    /// constant-time spawn, its pidfds (pid reuse is guarded by start times instead), its parent-death signal
    /// (a SIGKILL of the host leaves the sessions running unless [`contain_descendants`] put them in a PID
    /// namespace) and input-wait detection; it needs no pidfd (kernels before 5.3).
    ///
    /// [`contain_descendants`]: crate::contain_descendants
    pub fn portable() -> Self {
        PtySpawner { backend: Backend::Portable, own_namespace: None }
    }

    /// This spawner with a sandbox PID namespace of its own: its [`PidScope::Sandbox`] processes (and its
    /// clones') share that namespace, made on the first such spawn, and see and signal each other but not the
    /// default sandbox namespace's processes nor another spawner's (one sandbox per client of a server that
    /// serves several). The namespace lives while the spawner or one of its processes does; then its init is
    /// killed, and every process left in it with it. Where there are no PID namespaces (see
    /// [`contain_descendants`]) nothing changes: every process runs in the host's. Making the namespace can
    /// fail ([`SpawnError::Os`]); the spawn then fails, it does not fall back to the default namespace.
    ///
    /// [`contain_descendants`]: crate::contain_descendants
    #[must_use]
    pub fn with_own_sandbox_namespace(mut self) -> Self {
        self.own_namespace = Some(Arc::new(std::sync::Mutex::new(None)));
        self
    }

    /// The PID namespace this spawner's [`PidScope::Sandbox`] processes run in (its own, made now if needed, or
    /// the default one), as a new descriptor: for a sandbox that must know it (`uexec-sandbox-linux`'s
    /// `with_pid_namespace`). `None` where there are no PID namespaces (see [`contain_descendants`]).
    ///
    /// # Errors
    /// The spawner's own namespace cannot be made, or the descriptor cannot be duplicated.
    ///
    /// [`contain_descendants`]: crate::contain_descendants
    pub fn sandbox_pid_namespace(&self) -> Result<Option<OwnedFd>, SpawnError> {
        let dup = |e: io::Error| SpawnError::Os(OsError::new("dup", crate::error::errno_of(&e)));
        #[cfg(target_os = "linux")]
        if let Some(own) = self.own_namespace()? {
            return own.namespace().try_clone_to_owned().map(Some).map_err(dup);
        }
        contain::sandbox_pid_namespace().map_err(dup)
    }

    /// The spawner's own sandbox namespace, made now if needed; `None` when it has none (or there are no PID
    /// namespaces here).
    fn own_namespace(&self) -> Result<Option<Arc<OwnNamespace>>, SpawnError> {
        let Some(slot) = &self.own_namespace else {
            return Ok(None);
        };
        let mut slot = lock(slot);
        if let Some(namespace) = slot.as_ref() {
            return Ok(Some(Arc::clone(namespace)));
        }
        let made = contain::new_sandbox_namespace().map_err(SpawnError::Os)?.map(Arc::new);
        slot.clone_from(&made);
        Ok(made)
    }

    /// Start `command`.
    pub fn spawn_command(&self, command: Command) -> Result<PtyProcess, SpawnError> {
        self.spawn_request(command.into_request()?)
    }

    /// Start `request`: either the process runs with exactly its argv, cwd, env and mode (and every setup
    /// hook succeeded), or an error says why and nothing is left behind.
    pub fn spawn_request(&self, request: SpawnRequest) -> Result<PtyProcess, SpawnError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(SpawnError::NoRuntime);
        }
        let backend = self.backend;
        let token = SessionToken::new().map_err(|e| spawn_io_error("getrandom", &e))?;
        let prepared = prepare(&request, &token)?;
        let argv = CStringArray::new(prepared.argv);
        let envp = CStringArray::new(prepared.envp);
        let fork = request.setup.iter().any(|hook| hook.requires_fork());
        let failed = |(call, error): (&'static str, io::Error)| spawn_io_error(call, &error);

        let (stream, child_ends) = match request.mode {
            IoMode::Pty(size) => {
                let (master, slave) = stdio::open_pty(size, backend).map_err(failed)?;
                (Some(master), ChildEnds::Pty { slave })
            }
            IoMode::Pipes => {
                let (read, write, null) = stdio::open_pipes().map_err(failed)?;
                (Some(read), ChildEnds::Pipes { null, write })
            }
            IoMode::Inherit => (None, ChildEnds::Inherit),
        };
        let tty = matches!(child_ends, ChildEnds::Pty { .. });
        let interest = if tty { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
        let stream = match stream {
            Some(fd) => {
                Some(sys::register(fd, interest).map_err(|e| spawn_io_error("registering with tokio", &e))?)
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
            namespace_report: None,
        };
        let born_after = table::start_time_floor();
        let namespace = match request.pid_scope {
            PidScope::Sandbox => self.own_namespace()?,
            PidScope::Host => None,
        };
        let started = spawn::start(&plan, backend, fork, request.pid_scope, namespace.as_deref())
            .map_err(|failure| spawn_error(failure, &request, &prepared.program))?;
        drop(child_ends);
        let raw_pid = started.pid.as_raw_nonzero().get();
        let private_ns = PrivateNamespace::from_pins(started.namespaces);

        let exit = match ExitWatch::new(backend, started.pid, started.pidfd) {
            Ok(exit) => exit,
            Err(error) => {
                // The child runs but cannot be watched: kill and reap it, leave nothing behind.
                let mut status = lock(&started.status);
                if status.is_none() {
                    let _ = rustix::process::kill_process_group(started.pid, rustix::process::Signal::KILL);
                }
                reap::reap_killed_leader(&mut status, LeaderRef::pid(started.pid), raw_pid);
                return Err(spawn_io_error("watching the process's exit", &error));
            }
        };
        tracing::debug!(pid = raw_pid, tty, ?backend, argv = ?request.argv, "spawned");
        let pinning = match backend {
            #[cfg(target_os = "linux")]
            Backend::Linux => Pinning::PidFd,
            Backend::Portable => Pinning::StartTime,
        };
        let target = Target {
            leader: started.pid,
            status: started.status,
            token_entry: token.environ_entry().to_vec(),
            born_after,
            private_ns,
            pinning,
            namespace_init: started.namespace_init,
        };
        let control = Arc::new(PtyControl {
            backend,
            pid: started.pid,
            exit,
            master: tty.then(|| Arc::clone(&stream)),
            target,
            token,
            #[cfg(target_os = "linux")]
            terminal: OnceLock::new(),
            _namespace: namespace,
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

fn spawn_error(failure: SpawnFailure, request: &SpawnRequest, program: &std::ffi::CStr) -> SpawnError {
    match failure {
        SpawnFailure::Os { call, errno } => SpawnError::Os(OsError::new(call, errno)),
        SpawnFailure::Child(failure) => match (failure.stage, failure.errno) {
            (ChildStage::Chdir, libc::ENOENT | libc::ENOTDIR | libc::EACCES) => {
                SpawnError::BadCwd { cwd: request.cwd.clone() }
            }
            (ChildStage::Setup(stage), errno) => SpawnError::ChildSetup { stage, errno },
            (ChildStage::Exec, libc::ENOENT) => SpawnError::ProgramNotFound {
                program: request.argv.first().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            },
            (ChildStage::Exec, libc::EACCES | libc::EPERM | libc::EISDIR) => SpawnError::NotExecutable {
                path: std::path::PathBuf::from(std::ffi::OsStr::from_bytes(program.to_bytes())),
            },
            (ChildStage::Exec, errno) => SpawnError::Exec { errno },
            (stage, errno) => SpawnError::Os(OsError::new(stage.call(), errno)),
        },
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
        self.fd.as_ref().ok_or_else(|| os_error("read", rustix::io::Errno::BADF))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            kill::in_background(Chore::Close(fd.into_inner()));
        }
    }
}

/// The control half of a process. Shared (`Arc`); dropping the last reference kills the whole process
/// tree at once (SIGKILL, no grace) unless [`ProcessControl::kill_tree`] already did, and reaps it.
pub struct PtyControl {
    backend: Backend,
    pid: Pid,
    /// What wakes waiters when the leader exits.
    exit: ExitWatch,
    /// The PTY master (shared with the output half); `None` in pipe mode.
    master: Option<Arc<Stream>>,
    /// What finds the session's processes, with the leader's status slot.
    target: Target,
    token: SessionToken,
    /// The slave's path and device, looked up on first use.
    #[cfg(target_os = "linux")]
    terminal: OnceLock<Option<Terminal>>,
    /// The spawner's own sandbox PID namespace the process runs in, kept alive while the session lives.
    _namespace: Option<Arc<OwnNamespace>>,
    write_lock: tokio::sync::Mutex<()>,
    kill_result: tokio::sync::Mutex<Option<ExitStatus>>,
    tree_killed: AtomicBool,
}

impl fmt::Debug for PtyControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtyControl")
            .field("pid", &self.pid)
            .field("backend", &self.backend)
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

    /// How `waitid`/`waitpid` names the leader.
    fn leader(&self) -> LeaderRef<'_> {
        #[cfg(target_os = "linux")]
        if let Some(pidfd) = self.exit.pidfd() {
            return LeaderRef::PidFd(pidfd);
        }
        LeaderRef::pid(self.pid)
    }

    /// Reap the leader if it has exited, without blocking. [`Reap::Busy`] while the slot is held by a scan of
    /// the session (it takes milliseconds; the caller retries).
    fn reap(&self) -> Result<Reap, ProcessError> {
        reap::try_reap(&self.target.status, self.leader(), self.raw_pid())
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

    fn still_running(&self) -> bool {
        matches!(self.reap(), Ok(Reap::Running))
    }
}

fn raw_signal(signal: Signal) -> rustix::process::Signal {
    match signal {
        Signal::Interrupt => rustix::process::Signal::INT,
        Signal::Hangup => rustix::process::Signal::HUP,
        Signal::Terminate => rustix::process::Signal::TERM,
        Signal::Kill => rustix::process::Signal::KILL,
    }
}

/// The call named in errors from the exit watch.
const EXIT_WATCH: &str = "waiting for the process's exit";

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
            let armed = self.exit.arm().map_err(|e| io_error(EXIT_WATCH, &e))?;
            let mut guard = tokio::select! {
                guard = master.get()?.writable() => guard.map_err(|e| io_error("poll", &e))?,
                changed = self.exit.changed(armed, || self.still_running()) => {
                    changed.map_err(|e| io_error(EXIT_WATCH, &e))?;
                    if self.exited()? {
                        return Err(ProcessError::Exited);
                    }
                    continue;
                }
            };
            match guard.try_io(|fd| rustix::io::write(fd.get_ref(), rest).map_err(io::Error::from)) {
                Ok(Ok(written)) => rest = rest.get(written..).unwrap_or_default(),
                Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(error)) if error.raw_os_error() == Some(libc::EIO) => {
                    return Err(ProcessError::Exited);
                }
                Ok(Err(error)) => return Err(io_error("write", &error)),
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
        rustix::termios::tcsetwinsize(master.get()?.get_ref(), winsize)
            .map_err(|e| os_error("tcsetwinsize", e))
    }

    fn signal(&self, signal: Signal) -> Result<(), ProcessError> {
        if self.exited()? {
            return Err(ProcessError::Exited);
        }
        // The group id is the leader's pid: only ours while the leader is unreaped, which holding its slot
        // guarantees.
        let status = lock(&self.target.status);
        if status.is_some() {
            return Err(ProcessError::Exited);
        }
        match rustix::process::kill_process_group(self.pid, raw_signal(signal)) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::SRCH) => Err(ProcessError::Exited),
            Err(error) => Err(os_error("killpg", error)),
        }
    }

    fn input_state(&self) -> InputState {
        let Some(Ok(master)) = self.master.as_ref().map(|master| master.get()) else {
            return InputState::Unknown;
        };
        match self.backend {
            #[cfg(target_os = "linux")]
            Backend::Linux => {
                if !matches!(self.reap(), Ok(Reap::Running)) {
                    return InputState::Unknown;
                }
                let terminal = self.terminal.get_or_init(|| Terminal::of_master(master.get_ref().as_fd()));
                match terminal {
                    Some(terminal) => input::input_state(master.get_ref().as_fd(), terminal),
                    None => InputState::Unknown,
                }
            }
            Backend::Portable => {
                let _ = master;
                InputState::Unavailable
            }
        }
    }

    fn try_wait(&self) -> Result<Option<ExitStatus>, ProcessError> {
        self.reaped()
    }

    async fn wait(&self) -> Result<ExitStatus, ProcessError> {
        loop {
            // Armed before the check, so that an exit right after it still wakes this waiter.
            let armed = self.exit.arm().map_err(|e| io_error(EXIT_WATCH, &e))?;
            match self.reap()? {
                Reap::Exited(status) => return Ok(status),
                Reap::Busy => {
                    tokio::time::sleep(REAP_RETRY).await;
                    continue;
                }
                Reap::Running => {}
            }
            // Readiness is kept when the leader is no longer running: the next round reaps it (or retries).
            self.exit.changed(armed, || self.still_running()).await.map_err(|e| io_error(EXIT_WATCH, &e))?;
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
        let leader_reaped = lock(&self.target.status).is_some();
        // A reaped leader of the sandbox's PID namespace with no orphan there leaves nothing behind: when the
        // leader exited, its living descendants were reparented to that namespace's init. (A host-scope
        // session's orphans go to the system's init: they are always looked for.)
        let members =
            if leader_reaped && self.target.namespace_init.is_some_and(contain::namespace_has_no_orphans) {
                Vec::new()
            } else {
                self.target.signal_session(&[
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
            kill::all_gone(&members, KILL_GRACE).await;
            killed = members;
            self.target.sweep(&mut killed);
        }
        let status = tokio::time::timeout(KILL_WAIT_LIMIT, self.wait())
            .await
            .map_err(|_| ProcessError::Unkillable)??;
        kill::all_gone(&killed, KILL_WAIT_LIMIT).await;
        reap::reap_adopted(&killed);
        self.tree_killed.store(true, Ordering::Release);
        *result = Some(status);
        Ok(status)
    }
}

impl Drop for PtyControl {
    fn drop(&mut self) {
        if self.tree_killed.load(Ordering::Acquire) {
            return;
        }
        let leader_unreaped = {
            let status = lock(&self.target.status);
            if status.is_none() {
                // The bulk of the tree, at once; the sweep finds the rest.
                let _ = rustix::process::kill_process_group(self.pid, rustix::process::Signal::KILL);
            }
            status.is_none()
        };
        #[cfg(target_os = "linux")]
        let leader_pidfd = leader_unreaped
            .then(|| self.exit.pidfd().and_then(|pidfd| rustix::io::fcntl_dupfd_cloexec(pidfd, 3).ok()))
            .flatten();
        #[cfg(not(target_os = "linux"))]
        let _ = leader_unreaped;
        kill::in_background(Chore::Sweep(Sweep {
            target: self.target.take_for_sweep(),
            #[cfg(target_os = "linux")]
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
                    let error = os_error("read", error);
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
            let mut ready = stream.get()?.readable().await.map_err(|e| io_error("poll", &e))?;
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
// The tests read process states from /proc.
#[cfg(target_os = "linux")]
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
            pid_scope: Default::default(),
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
        for spawner in [PtySpawner::default(), PtySpawner::portable()] {
            let other = spawner.spawn_request(sh("sleep 600")).unwrap();
            let pid = other.control.raw_pid();
            let found = {
                let status = lock(&other.control.target.status);
                crate::tree::members(other.control.target.identity(&status))
            };
            assert!(found.iter().any(|member| member.pid == pid), "the scan finds the leader");
            rustix::process::kill_process(other.control.pid, rustix::process::Signal::KILL).unwrap();
            until("the leader is a zombie", || state(pid) == Some('Z')).await;
            reap::reap_adopted(&found);
            assert_eq!(state(pid), Some('Z'), "{spawner:?}: a live session's leader is left to its session");
            let status = other.control.wait().await.unwrap();
            assert_eq!(status, ExitStatus::Signal(libc::SIGKILL));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The test plays a scan that holds the slot while the waiter runs; the waiter only ever tries the lock.
    #[allow(clippy::await_holding_lock)]
    async fn the_leader_stays_unreaped_while_a_scan_uses_its_pid() {
        // A scan matches the leader, its group and its session by the leader's pid. Were the leader reaped in
        // the middle, the pid could name a new process (another session's leader), which the scan would kill
        // and reap. Holding the slot (as every scan does) keeps the leader a zombie, so its pid stays ours.
        for spawner in [PtySpawner::default(), PtySpawner::portable()] {
            let process = spawner.spawn_request(sh("exit 7")).unwrap();
            let pid = process.control.raw_pid();
            let control = Arc::clone(&process.control);
            let scan = lock(&control.target.status);
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
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn signalling_an_exited_session_is_refused_and_never_reaches_its_old_group_id() {
        for spawner in [PtySpawner::default(), PtySpawner::portable()] {
            let process = spawner.spawn_request(sh("exit 3")).unwrap();
            assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(3));
            // The group id is free now and may name someone else's group: nothing is sent to it.
            assert!(matches!(process.control.signal(Signal::Terminate), Err(ProcessError::Exited)));
        }
    }
}
