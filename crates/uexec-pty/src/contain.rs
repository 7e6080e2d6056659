//! Containing descendants beyond the life of the host, and who reaps which process.
//!
//! Which thread and namespace the host's sessions live in, set up once at the start of `main`: see
//! [`contain_descendants`]. Who may reap a session leader in each mode is written down in `reap`; which thread
//! creates sessions, in `spawn`.

use std::sync::Mutex;
#[cfg(target_os = "linux")]
use std::sync::{OnceLock, mpsc};

#[cfg(target_os = "linux")]
use rustix::process::Pid;
use uexec_ports::process::OsError;

use crate::reap::lock;
use crate::sys::SpawnFailure;
#[cfg(target_os = "linux")]
use crate::sys::{self, Job};

/// Which mechanism keeps the host's descendants from outliving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Containment {
    /// Sandboxed sessions ([`PidScope::Sandbox`](uexec_ports::process::PidScope::Sandbox)) run in one PID
    /// namespace whose init dies with the host: a SIGKILL of the host kills every process in it, including
    /// daemons. The other sessions run in the host's namespace (they see and signal the host's processes as the
    /// person could); a watchdog process kills what is left of them when the host dies, found by their session
    /// token.
    PidNamespace {
        /// The namespace's init process, as seen from the host.
        init_pid: u32,
    },
    /// The host is a child subreaper and reaps adopted orphans; escaped descendants are killed by
    /// `kill_tree`, and when the host dies, even by SIGKILL, a watchdog (started before the first session) kills
    /// every process that still carries one of its session tokens; one that cleared its environment survives a
    /// SIGKILL of the host (no privilege for a PID namespace). Every session runs in the host's PID namespace.
    Subreaper,
}

/// Whether [`contain_descendants_with`] may create a PID namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NamespacePolicy {
    /// Use a PID namespace when the host is privileged enough, else fall back to [`Containment::Subreaper`].
    #[default]
    IfPrivileged,
    /// Never create a PID namespace.
    Never,
    /// As [`NamespacePolicy::IfPrivileged`], but the calling thread itself enters the namespace (its future
    /// children are created in it) and forks the init, instead of a helper thread that every spawn is handed
    /// to: no thread is started and a spawn costs no hand-off. For a host that spawns from this one thread
    /// only and starts no thread afterwards (`uexec run` without a terminal): the kernel refuses new threads
    /// to this thread from now on, and a spawn from any other thread fails (its child would escape the
    /// namespace). The thread must live as long as the host (the init's parent-death signal follows it).
    OnCallingThread,
}

/// Why containment could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContainError {
    /// `prctl(PR_SET_CHILD_SUBREAPER)` failed.
    #[error("cannot become a child subreaper: {0}")]
    Subreaper(OsError),
    /// The calling thread entered a PID namespace but its init process could not be started.
    #[error("cannot start the init of the sessions' PID namespace: {0}")]
    NamespaceInit(OsError),
    /// A helper thread could not be started.
    #[error("cannot start the {name} thread: {error}")]
    Thread {
        /// Which thread.
        name: &'static str,
        /// Why.
        error: OsError,
    },
    /// This platform has neither child subreapers nor PID namespaces: sessions are still killed as a whole
    /// by `kill_tree` and when dropped, but a descendant that left its session survives a SIGKILL of the host.
    #[error("no descendant containment on {0} (no subreaper, no PID namespace)")]
    Unsupported(&'static str),
}

/// Make this process own its descendants. Returns the mechanism now active; a second call returns the first
/// one's result.
///
/// Without it the crate behaves like any library sharing a process with others: it reaps only the session
/// leaders it started, which the `uexec-spawner` thread creates, all in the host's PID namespace; an escaped
/// descendant (one that left its session and whose parent died) is reparented to the system's init, still
/// found and killed by [`kill_tree`] through its session token, but not when the host itself is killed with
/// SIGKILL (the leaders do die then on the Linux fast path: their parent-death signal is SIGKILL).
///
/// Called by the application at the start of `main`, before starting a runtime or any session, it makes the
/// host own its descendants:
///
/// 1. When the host may create PID namespaces (root or `CAP_SYS_ADMIN`), a dedicated thread unshares a new
///    PID namespace (only that thread's future children enter it, so the rest of the application can keep
///    creating threads) and forks the namespace's init: a tiny process that reaps orphans forever and gets
///    SIGKILL when that thread dies (`PR_SET_PDEATHSIG`). From then on every session is spawned by that
///    thread: a [`PidScope::Sandbox`] session inside the namespace, shared by all of them (they see and
///    signal each other and nothing else), a [`PidScope::Host`] session in the host's namespace (the thread
///    switches its children's namespace with `setns` before each spawn). When the host dies, even by SIGKILL,
///    the init dies and the kernel kills every process of the namespace; the host-scope sessions' processes
///    are killed by a watchdog (a process forked before the first host-scope session, which waits for the
///    host's end and then kills every process carrying one of its session tokens). Orphans in the namespace are reparented to its init,
///    which reaps them; host-scope orphans go to the system's init.
///    With [`NamespacePolicy::OnCallingThread`] the calling thread itself does this, for a host that spawns
///    from that thread only and starts no thread afterwards: no helper thread, no hand-off per spawn.
/// 2. Otherwise (not privileged) the host becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): orphans of
///    its sessions are reparented to it rather than to the system's init, and a reaper thread collects every
///    exited child of the host: the session leaders (handing their status to their session) and the adopted
///    orphans. It waits for "any child" (`waitid(P_ALL, WNOWAIT)`), which is only acceptable because the
///    application asked for this mode: it must then start its other children through this crate too, since
///    the reaper would reap a child started with `std::process` before its `wait`. Before the first session
///    the host's watchdog is forked, as for host-scope sessions above: when the host dies, even by SIGKILL, it
///    kills every process carrying one of the host's session tokens. An escaped descendant that cleared its
///    environment survives a SIGKILL of the host ([`Containment::Subreaper`] says so), and there is one PID
///    namespace for all: the host's.
///
/// All of this is Linux's: on other platforms nothing changes and the call says so
/// ([`ContainError::Unsupported`]).
///
/// [`kill_tree`]: uexec_ports::process::ProcessControl::kill_tree
/// [`PidScope::Sandbox`]: uexec_ports::process::PidScope::Sandbox
/// [`PidScope::Host`]: uexec_ports::process::PidScope::Host
pub fn contain_descendants() -> Result<Containment, ContainError> {
    contain_descendants_with(NamespacePolicy::IfPrivileged)
}

/// [`contain_descendants`], choosing whether a PID namespace may be used.
pub fn contain_descendants_with(policy: NamespacePolicy) -> Result<Containment, ContainError> {
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut, reason = "nothing is set up there"))]
    let mut active = lock(&ACTIVE);
    if let Some(containment) = *active {
        return Ok(containment);
    }
    #[cfg(target_os = "linux")]
    {
        let containment = match policy {
            NamespacePolicy::IfPrivileged => match start_namespace_thread()? {
                Some(init_pid) => Containment::PidNamespace { init_pid },
                None => start_reaper()?,
            },
            NamespacePolicy::Never => start_reaper()?,
            NamespacePolicy::OnCallingThread => match enter_namespace_here()? {
                Some(init_pid) => Containment::PidNamespace { init_pid },
                None => start_reaper()?,
            },
        };
        tracing::info!(?containment, "descendants contained");
        *active = Some(containment);
        Ok(containment)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = policy;
        Err(ContainError::Unsupported(std::env::consts::OS))
    }
}

/// The containment set up by [`contain_descendants`], if any.
pub fn containment() -> Option<Containment> {
    *lock(&ACTIVE)
}

static ACTIVE: Mutex<Option<Containment>> = Mutex::new(None);

/// The sender of spawn jobs to the PID-namespace thread, once it runs.
#[cfg(target_os = "linux")]
static NAMESPACE_JOBS: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();

/// True once the reaper thread runs ([`Containment::Subreaper`]).
#[cfg(target_os = "linux")]
static REAPER_ACTIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Bumped after every spawn, so that a reaper with no children wakes up.
#[cfg(target_os = "linux")]
static SPAWNS: (Mutex<u64>, std::sync::Condvar) = (Mutex::new(0), std::sync::Condvar::new());

/// The thread that entered the PID namespace itself ([`NamespacePolicy::OnCallingThread`]) and what it set up
/// (kept for the life of the process).
#[cfg(target_os = "linux")]
static NAMESPACE_HERE: OnceLock<(std::thread::ThreadId, NamespaceSetup)> = OnceLock::new();

/// Where new sessions must be created, given the containment in force.
#[derive(Debug)]
pub(crate) enum Placement {
    /// On the calling thread, which entered the sessions' PID namespace ([`NamespacePolicy::OnCallingThread`])
    /// and switches its children between these namespaces.
    #[cfg(target_os = "linux")]
    CallingThreadInNamespace(&'static sys::PidNamespaces),
    /// Nowhere from this thread: its children would be created outside the sessions' PID namespace.
    #[cfg(target_os = "linux")]
    Refused,
    /// By the PID-namespace thread.
    #[cfg(target_os = "linux")]
    NamespaceThread(mpsc::Sender<Job>),
    /// Anywhere: no PID namespace.
    Anywhere,
}

impl Placement {
    /// True when sessions are created in a PID namespace of their own (sandbox-scope ones, at least).
    pub(crate) fn has_namespaces(&self) -> bool {
        !matches!(self, Placement::Anywhere)
    }
}

/// Where the calling thread's new sessions must be created.
pub(crate) fn placement() -> Placement {
    #[cfg(target_os = "linux")]
    {
        if let Some((owner, setup)) = NAMESPACE_HERE.get() {
            return if std::thread::current().id() == *owner {
                Placement::CallingThreadInNamespace(&setup.namespaces)
            } else {
                Placement::Refused
            };
        }
        if let Some(jobs) = NAMESPACE_JOBS.get() {
            return Placement::NamespaceThread(lock(jobs).clone());
        }
    }
    Placement::Anywhere
}

/// Held from before a child is created until it is registered as a leader, when the reaper thread runs: the
/// leaders table, so that the reaper never mistakes a fresh leader for an orphan. `None` otherwise.
pub(crate) fn hold_for_spawn()
-> Option<std::sync::MutexGuard<'static, std::collections::HashMap<i32, crate::reap::StatusSlot>>> {
    #[cfg(target_os = "linux")]
    if REAPER_ACTIVE.load(std::sync::atomic::Ordering::Acquire) {
        return Some(crate::reap::live_leaders());
    }
    None
}

/// The pipe the subreaper host's watchdog waits on (both ends kept open for the host's life), or the errno of
/// the failure to start it.
#[cfg(target_os = "linux")]
static SUBREAPER_WATCHDOG: OnceLock<Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd), i32>> =
    OnceLock::new();

/// Before the first session of a subreaper host (an ordinary user's: no PID namespace), start the host's
/// watchdog (`sys::spawn_host_watchdog`): when the host dies, even by SIGKILL, it kills every process that
/// still carries one of the host's session tokens (background jobs, dev servers, a sandboxed command's
/// children), which the subreaper alone leaves to the system's init. A descendant that cleared its environment
/// escapes it (`Containment::Subreaper`). A host that is no subreaper needs none (`Ok`). An error when it
/// cannot be started: the caller spawns nothing, rather than a session whose processes could outlive the host.
pub(crate) fn ensure_subreaper_watchdog() -> Result<(), SpawnFailure> {
    #[cfg(target_os = "linux")]
    if REAPER_ACTIVE.load(std::sync::atomic::Ordering::Acquire) {
        use std::os::fd::AsFd;
        let started = SUBREAPER_WATCHDOG.get_or_init(|| {
            let errno = |e: std::io::Error| crate::error::errno_of(&e);
            let entry = crate::token::host_entry_prefix().map_err(errno)?;
            let (reader, writer) = sys::pipe_cloexec().map_err(errno)?;
            sys::spawn_host_watchdog(reader.as_fd(), writer.as_fd(), entry.as_bytes()).map_err(errno)?;
            Ok((reader, writer))
        });
        if let Err(errno) = started {
            return Err(SpawnFailure::Os { call: "clone (the host's watchdog)", errno: *errno });
        }
    }
    Ok(())
}

/// Tell the reaper thread a child was created (it sleeps while the host has none).
pub(crate) fn spawned() {
    #[cfg(target_os = "linux")]
    {
        let (count, changed) = &SPAWNS;
        *lock(count) += 1;
        changed.notify_all();
    }
}

#[cfg(target_os = "linux")]
fn thread_error(name: &'static str, error: &std::io::Error) -> ContainError {
    ContainError::Thread { name, error: OsError::new("pthread_create", crate::error::errno_of(error)) }
}

/// What a thread that unshared the sandbox's PID namespace keeps: the init's pid, and the namespaces with the
/// pipe that tells the inits and the watchdog the host is alive.
#[cfg(target_os = "linux")]
struct NamespaceSetup {
    init: Pid,
    namespaces: sys::PidNamespaces,
}

/// On the calling thread: unshare a PID namespace and fork its init into it (the host's watchdog is forked
/// later, before the first host-scope child). `Ok(None)` when a PID namespace cannot be created here (nothing
/// changed); an error when the thread is in the namespace already but the rest failed (that cannot be undone).
#[cfg(target_os = "linux")]
fn set_up_namespace_here() -> Result<Option<NamespaceSetup>, ContainError> {
    use std::os::fd::AsFd;

    let failed = |call: &'static str| {
        move |e: std::io::Error| ContainError::NamespaceInit(OsError::new(call, crate::error::errno_of(&e)))
    };
    let host = match sys::PidNamespaces::open_active() {
        Ok(host) => host,
        Err(error) => {
            tracing::info!(%error, "no PID namespace for sessions: the host's cannot be opened");
            return Ok(None);
        }
    };
    let entry = crate::token::host_entry_prefix().map_err(failed("getrandom"))?;
    if let Err(error) = sys::unshare_pid_namespace() {
        tracing::info!(%error, "no PID namespace for sessions");
        return Ok(None);
    }
    // The thread is in the namespace already: a failure from here on cannot be undone, so it is an error.
    let (reader, writer) = sys::pipe_cloexec().map_err(failed("pipe"))?;
    let init = sys::spawn_namespace_init(reader.as_fd(), writer.as_fd()).map_err(failed("clone"))?;
    let namespaces = sys::PidNamespaces::after_unshare(host, reader, writer, entry.into_bytes())
        .map_err(failed("open(pid_for_children)"))?;
    let _ = DEFAULT_SANDBOX_NAMESPACE
        .set(namespaces.default_sandbox().try_clone_to_owned().map_err(failed("dup"))?);
    Ok(Some(NamespaceSetup { init, namespaces }))
}

/// The calling thread unshares a PID namespace and forks its init; `Ok(None)` when a PID namespace cannot be
/// created here (nothing changed).
#[cfg(target_os = "linux")]
fn enter_namespace_here() -> Result<Option<u32>, ContainError> {
    let Some(setup) = set_up_namespace_here()? else {
        return Ok(None);
    };
    let init = setup.init;
    let _ = NAMESPACE_HERE.set((std::thread::current().id(), setup));
    Ok(Some(init.as_raw_nonzero().get().unsigned_abs()))
}

/// Starts the namespace thread; `Ok(None)` when a PID namespace cannot be created here.
#[cfg(target_os = "linux")]
fn start_namespace_thread() -> Result<Option<u32>, ContainError> {
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<Option<Pid>, ContainError>>(1);
    let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("uexec-pidns".to_owned())
        .spawn(move || match set_up_namespace_here() {
            Ok(Some(setup)) => {
                let _ = ready_tx.send(Ok(Some(setup.init)));
                // This thread must live as long as the process: it is the parent of the init, the watchdog and
                // every session leader, whose parent-death signal fires when it ends; `setup` holds the write
                // end of the pipe that keeps the init and the watchdog waiting.
                sys::serve_spawn_jobs(&jobs_rx, Some(&setup.namespaces));
                loop {
                    std::thread::park();
                }
            }
            other => {
                let _ = ready_tx.send(other.map(|_| None));
            }
        })
        .map_err(|e| thread_error("uexec-pidns", &e))?;
    let init =
        ready_rx.recv().map_err(|_| ContainError::NamespaceInit(OsError::new("thread", libc::ESRCH)))??;
    let Some(init) = init else {
        return Ok(None);
    };
    let _ = NAMESPACE_JOBS.set(Mutex::new(jobs_tx));
    Ok(Some(init.as_raw_nonzero().get().unsigned_abs()))
}

#[cfg(target_os = "linux")]
fn start_reaper() -> Result<Containment, ContainError> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(|e| {
        ContainError::Subreaper(OsError::new("prctl(PR_SET_CHILD_SUBREAPER)", e.raw_os_error()))
    })?;
    std::thread::Builder::new()
        .name("uexec-reaper".to_owned())
        .spawn(|| crate::reap::reap_forever(&SPAWNS))
        .map_err(|e| thread_error("uexec-reaper", &e))?;
    REAPER_ACTIVE.store(true, std::sync::atomic::Ordering::Release);
    Ok(Containment::Subreaper)
}

/// A sandbox PID namespace of its own (beside the default one), for one spawner's sandboxed commands: they see
/// and signal each other and nothing else, not even the default namespace's commands. Dropping it kills its init
/// and with it every process in it.
#[derive(Debug)]
pub(crate) struct OwnNamespace {
    #[cfg(target_os = "linux")]
    namespace: std::os::fd::OwnedFd,
    #[cfg(target_os = "linux")]
    init: Pid,
    #[cfg(target_os = "linux")]
    init_pidfd: std::os::fd::OwnedFd,
}

impl OwnNamespace {
    /// The namespace's descriptor (to spawn into it).
    #[cfg(target_os = "linux")]
    pub(crate) fn namespace(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.namespace.as_fd()
    }

    /// Its init, as seen from the host.
    #[cfg(target_os = "linux")]
    pub(crate) fn init_pid(&self) -> u32 {
        self.init.as_raw_nonzero().get().unsigned_abs()
    }
}

#[cfg(target_os = "linux")]
impl Drop for OwnNamespace {
    fn drop(&mut self) {
        use std::os::fd::AsFd;
        // The init dies, and the kernel kills every process of the namespace with it.
        let _ = rustix::process::pidfd_send_signal(self.init_pidfd.as_fd(), rustix::process::Signal::KILL);
        // Reap it (it is the spawning thread's child) once the namespace is empty, without blocking the caller.
        let pidfd = self.init_pidfd.try_clone();
        let reaped = pidfd.map(|pidfd| {
            std::thread::Builder::new().name("uexec-ns-reaper".to_owned()).spawn(move || {
                while let Err(rustix::io::Errno::INTR) = rustix::process::waitid(
                    rustix::process::WaitId::PidFd(pidfd.as_fd()),
                    rustix::process::WaitIdOptions::EXITED,
                ) {}
            })
        });
        if !matches!(reaped, Ok(Ok(_))) {
            tracing::warn!(init = %self.init.as_raw_nonzero(), "a sandbox namespace's init is left unreaped");
        }
    }
}

/// A new sandbox PID namespace of its own, made by the thread that creates every session; `Ok(None)` when there
/// are no PID namespaces here (every process then runs in the host's).
pub(crate) fn new_sandbox_namespace() -> Result<Option<OwnNamespace>, OsError> {
    #[cfg(target_os = "linux")]
    {
        let made = match placement() {
            Placement::CallingThreadInNamespace(_) => match NAMESPACE_HERE.get() {
                Some((_, setup)) => setup.namespaces.create_sandbox(),
                None => return Ok(None),
            },
            Placement::NamespaceThread(jobs) => {
                let (reply, answer) = mpsc::sync_channel(1);
                let gone = OsError::new("sending to the PID-namespace thread", libc::ESRCH);
                jobs.send(Job::NewNamespace(reply)).map_err(|_| gone)?;
                answer.recv().map_err(|_| gone)?
            }
            Placement::Refused => {
                return Err(OsError::new("making a PID namespace from a thread outside them", libc::EPERM));
            }
            Placement::Anywhere => return Ok(None),
        };
        let made =
            made.map_err(|e| OsError::new("making a sandbox PID namespace", crate::error::errno_of(&e)))?;
        Ok(Some(OwnNamespace { namespace: made.namespace, init: made.init, init_pidfd: made.init_pidfd }))
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(None)
    }
}

/// The default sandbox PID namespace, once made (see [`sandbox_pid_namespace`]).
#[cfg(target_os = "linux")]
static DEFAULT_SANDBOX_NAMESPACE: OnceLock<std::os::fd::OwnedFd> = OnceLock::new();

/// The default sandbox PID namespace (where [`PidScope::Sandbox`] processes run), when
/// [`contain_descendants`] made one: a new descriptor of it, for a sandbox that must know the namespace its
/// commands run in (to check it, and to make a procfs of it once).
///
/// [`PidScope::Sandbox`]: uexec_ports::process::PidScope::Sandbox
pub fn sandbox_pid_namespace() -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    #[cfg(target_os = "linux")]
    {
        DEFAULT_SANDBOX_NAMESPACE.get().map(std::os::fd::OwnedFd::try_clone).transpose()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(None)
    }
}

/// The default sandbox namespace's init, if there is one.
pub(crate) fn default_namespace_init() -> Option<u32> {
    match containment() {
        Some(Containment::PidNamespace { init_pid }) => Some(init_pid),
        _ => None,
    }
}

/// True when nothing has been orphaned into the sessions' PID namespace whose init is `init_pid`: its init has no child. Then a session
/// whose leader has been reaped has no process left (when the leader exited, its living descendants were
/// reparented to that init: no subreaper outside the namespace adopts them), and `kill_tree` can skip scanning
/// for them. False when unknown (no PID namespace, or a kernel that does not list children).
pub(crate) fn namespace_has_no_orphans(init_pid: u32) -> bool {
    match std::fs::read(format!("/proc/{init_pid}/task/{init_pid}/children")) {
        Ok(children) => children.iter().all(u8::is_ascii_whitespace),
        Err(_) => false,
    }
}
