//! Containing descendants beyond the life of the host, and who reaps which process.
//!
//! Without [`contain_descendants`] the crate behaves like any library sharing a process with others: it
//! reaps only the session leaders it started (by pidfd), which the `uexec-spawner` thread creates; an
//! escaped descendant (one that left its session and whose parent died) is reparented to the system's
//! init, still found and killed by [`kill_tree`] through its session token, but not when the host itself
//! is killed with SIGKILL (the leaders do die then: their parent-death signal is SIGKILL).
//!
//! [`contain_descendants`], called by the application at the start of `main`, makes the host own its
//! descendants:
//!
//! 1. The host becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): orphans of its sessions are
//!    reparented to it rather than to the system's init.
//! 2. When the host may create PID namespaces (root or `CAP_SYS_ADMIN`), a dedicated thread unshares a new
//!    PID namespace (only that thread's future children enter it, so the rest of the application can keep
//!    creating threads) and forks the namespace's init: a tiny process that reaps orphans forever and gets
//!    SIGKILL when that thread dies (`PR_SET_PDEATHSIG`). From then on every session is spawned by that
//!    thread, inside the namespace. When the host dies, even by SIGKILL, the init dies and the kernel kills
//!    every process of the namespace: nothing survives. Orphans are reparented to the namespace's init,
//!    which reaps them.
//!    With [`NamespacePolicy::OnCallingThread`] the calling thread itself does this, for a host that spawns
//!    from that thread only and starts no thread afterwards: no helper thread, no hand-off per spawn.
//! 3. Otherwise (not privileged) a reaper thread collects every exited child of the host: the session
//!    leaders (handing their status to their session) and the adopted orphans. It waits for "any child"
//!    (`waitid(P_ALL, WNOWAIT)`), which is only acceptable because the application asked for this mode: it
//!    must then start its other children through this crate too, since the reaper would reap a child
//!    started with `std::process` before its `wait`. In this mode an escaped descendant survives a SIGKILL
//!    of the host ([`Containment::Subreaper`] says so).
//!
//! Who may reap a session leader, in every mode:
//!
//! 1. A leader is reaped only by a holder of its [`StatusSlot`]'s lock, which records the status in the slot
//!    before letting go: its session's control (its waiter, `kill_tree`, the sweep after a drop) or the reaper
//!    thread. So the first to reap it hands the status to everyone else, and nobody finds it "reaped by someone
//!    else".
//! 2. Everything that relies on the leader's pid still naming the leader (signalling its process group,
//!    scanning for its group, session and descendants) holds the same lock and checks that the slot is empty:
//!    the leader cannot be reaped in the middle, so its pid, group id and session id cannot be recycled for
//!    another process (another session's leader) that the scan would then kill and reap.
//! 3. Live leaders are registered in a table by pid; reaping "adopted" processes after a kill (orphans that
//!    re-parented to this process) skips every registered leader, whatever the scan found.
//!
//! [`kill_tree`]: uexec_ports::process::ProcessControl::kill_tree

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, OnceLock, PoisonError, mpsc};
use std::time::Duration;

use rustix::pipe::PipeFlags;
use rustix::process::{Pid, WaitId, WaitIdOptions};
use uexec_domain::ExitStatus;

use crate::sys::{self, ChildPlan, SpawnFailure, SpawnJob};

/// Which mechanism keeps the host's descendants from outliving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Containment {
    /// Sessions run in a PID namespace whose init dies with the host: a SIGKILL of the host kills every
    /// descendant, including daemons. The host is also a subreaper.
    PidNamespace {
        /// The namespace's init process, as seen from the host.
        init_pid: u32,
    },
    /// The host is a child subreaper and reaps adopted orphans; escaped descendants are killed by
    /// `kill_tree` but survive a SIGKILL of the host (no privilege for a PID namespace).
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
    Subreaper(String),
    /// The calling thread entered a PID namespace but its init process could not be started.
    #[error("cannot start the init of the sessions' PID namespace: {0}")]
    NamespaceInit(String),
    /// A helper thread could not be started.
    #[error("cannot start the {name} thread: {message}")]
    Thread {
        /// Which thread.
        name: &'static str,
        /// Why.
        message: String,
    },
}

/// Make this process own its descendants (see the module documentation): call it at the start of `main`,
/// before starting a runtime or any session. Returns the mechanism now active; a second call returns the
/// first one's result.
pub fn contain_descendants() -> Result<Containment, ContainError> {
    contain_descendants_with(NamespacePolicy::IfPrivileged)
}

/// [`contain_descendants`], choosing whether a PID namespace may be used.
pub fn contain_descendants_with(policy: NamespacePolicy) -> Result<Containment, ContainError> {
    let mut active = lock(&ACTIVE);
    if let Some(containment) = *active {
        return Ok(containment);
    }
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| ContainError::Subreaper(std::io::Error::from(e).to_string()))?;
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

/// The containment set up by [`contain_descendants`], if any.
pub fn containment() -> Option<Containment> {
    *lock(&ACTIVE)
}

static ACTIVE: Mutex<Option<Containment>> = Mutex::new(None);

/// The sender of spawn jobs to the PID-namespace thread, once it runs.
static NAMESPACE_JOBS: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();

/// True once the reaper thread runs ([`Containment::Subreaper`]).
static REAPER_ACTIVE: AtomicBool = AtomicBool::new(false);

/// The exit-status slot of a session leader, filled by whoever reaps it, under its lock (see the module
/// documentation: the lock also keeps the leader unreaped while its pid is used).
pub(crate) type StatusSlot = Arc<Mutex<Option<ExitStatus>>>;

/// Session leaders not yet reaped, by pid. Lock order: a leader's slot before this table, never the reverse.
static LEADERS: LazyLock<Mutex<HashMap<i32, StatusSlot>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Bumped after every spawn, so that a reaper with no children wakes up.
static SPAWNS: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The thread that entered the PID namespace itself ([`NamespacePolicy::OnCallingThread`]), and the write end of
/// the pipe that tells its init the host is alive (kept open for the life of the process).
static NAMESPACE_HERE: OnceLock<(std::thread::ThreadId, OwnedFd)> = OnceLock::new();

/// The calling thread unshares a PID namespace and forks its init; `Ok(None)` when a PID namespace cannot be
/// created here (nothing changed).
fn enter_namespace_here() -> Result<Option<u32>, ContainError> {
    if let Err(error) = sys::unshare_pid_namespace() {
        tracing::info!(%error, "no PID namespace for sessions");
        return Ok(None);
    }
    // The thread is in the namespace already: a failure from here on cannot be undone, so it is an error.
    let namespace_error = |error: std::io::Error| ContainError::NamespaceInit(error.to_string());
    let (reader, writer) =
        rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(|e| namespace_error(e.into()))?;
    let init = sys::spawn_namespace_init(reader.as_fd(), writer.as_fd()).map_err(namespace_error)?;
    let _ = NAMESPACE_HERE.set((std::thread::current().id(), writer));
    Ok(Some(init.as_raw_nonzero().get().unsigned_abs()))
}

/// Starts the namespace thread; `Ok(None)` when a PID namespace cannot be created here.
fn start_namespace_thread() -> Result<Option<u32>, ContainError> {
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Option<Pid>>(1);
    let (jobs_tx, jobs_rx) = mpsc::channel::<SpawnJob>();
    std::thread::Builder::new()
        .name("uexec-pidns".to_owned())
        .spawn(move || {
            let setup = || -> std::io::Result<(Pid, OwnedFd)> {
                sys::unshare_pid_namespace()?;
                let (reader, writer) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
                let init = sys::spawn_namespace_init(reader.as_fd(), writer.as_fd())?;
                Ok((init, writer))
            };
            match setup() {
                Ok((init, _host_alive_writer)) => {
                    let _ = ready_tx.send(Some(init));
                    // This thread must live as long as the process: it is the parent of the init and of
                    // every session leader, whose parent-death signal fires when it ends.
                    sys::serve_spawn_jobs(&jobs_rx, true);
                    loop {
                        std::thread::park();
                    }
                }
                Err(error) => {
                    tracing::info!(%error, "no PID namespace for sessions");
                    let _ = ready_tx.send(None);
                }
            }
        })
        .map_err(|e| ContainError::Thread { name: "uexec-pidns", message: e.to_string() })?;
    let init = ready_rx.recv().ok().flatten();
    let Some(init) = init else {
        return Ok(None);
    };
    let _ = NAMESPACE_JOBS.set(Mutex::new(jobs_tx));
    Ok(Some(init.as_raw_nonzero().get().unsigned_abs()))
}

fn start_reaper() -> Result<Containment, ContainError> {
    std::thread::Builder::new()
        .name("uexec-reaper".to_owned())
        .spawn(reap_forever)
        .map_err(|e| ContainError::Thread { name: "uexec-reaper", message: e.to_string() })?;
    REAPER_ACTIVE.store(true, Ordering::Release);
    Ok(Containment::Subreaper)
}

/// The reaper thread: wait for any exited child, then reap it: an orphan under the leaders table's lock (so
/// that no leader being spawned is mistaken for one), a leader under its slot's lock, handing its status to its
/// session.
fn reap_forever() {
    let (count, changed) = &SPAWNS;
    loop {
        let spawns_seen = *lock(count);
        match sys::wait_any_exited_nowait() {
            Ok(Some(pid)) => {
                let raw = pid.as_raw_nonzero().get();
                let leaders = lock(&LEADERS);
                match leaders.get(&raw).map(Arc::clone) {
                    Some(slot) => {
                        drop(leaders);
                        // Registered leaders are reaped only by a holder of their slot's lock. It is not reaped
                        // yet (the slot is empty), so `raw` still names it.
                        let mut status = lock(&slot);
                        if status.is_none()
                            && let Ok(Some(reaped)) = rustix::process::waitid(
                                WaitId::Pid(pid),
                                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
                            )
                        {
                            *status = Some(crate::session::exit_status(&reaped));
                            forget_leader(raw);
                        }
                    }
                    None => {
                        let reaped = rustix::process::waitid(
                            WaitId::Pid(pid),
                            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
                        );
                        drop(leaders);
                        if let Ok(Some(_)) = reaped {
                            tracing::debug!(pid = raw, "reaped an adopted orphan");
                        }
                    }
                }
            }
            Ok(None) => {
                // No children at all: sleep until the next spawn (or a second, for children started by other
                // means, whose orphans could be adopted too).
                let guard = lock(count);
                let waited =
                    changed.wait_timeout_while(guard, Duration::from_secs(1), |now| *now == spawns_seen);
                drop(waited.unwrap_or_else(PoisonError::into_inner));
            }
            Err(error) => {
                tracing::warn!(%error, "reaper: waitid failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The thread that spawns every session when there is no PID-namespace thread, started on first use.
///
/// The parent-death signal of a child fires when the *thread* that created it ends, not the process: a
/// child spawned from a short-lived thread (a tokio `spawn_blocking` thread, which ends after ten idle
/// seconds) would be killed with it. Spawning from this thread, which lives as long as the process, ties
/// every session to the life of the process. `None` (spawn on the calling thread) if it cannot start.
fn spawner_thread() -> &'static Option<Mutex<mpsc::Sender<SpawnJob>>> {
    static SPAWNER: OnceLock<Option<Mutex<mpsc::Sender<SpawnJob>>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (jobs_tx, jobs_rx) = mpsc::channel::<SpawnJob>();
        let started = std::thread::Builder::new().name("uexec-spawner".to_owned()).spawn(move || {
            sys::serve_spawn_jobs(&jobs_rx, false);
            // Every sender is gone (it lives in a static, so never): stay, we are the children's parent.
            loop {
                std::thread::park();
            }
        });
        match started {
            Ok(_) => Some(Mutex::new(jobs_tx)),
            Err(error) => {
                tracing::warn!(%error, "no spawner thread: spawning on the calling thread");
                None
            }
        }
    })
}

/// A started child: pid, pidfd and the slot its exit status goes to.
pub(crate) struct Started {
    pub(crate) pid: Pid,
    pub(crate) pidfd: OwnedFd,
    pub(crate) status: StatusSlot,
}

/// Start the child of `plan`, in the PID namespace when there is one, registered as a live leader.
pub(crate) fn start(plan: &ChildPlan<'_>, fork: bool) -> Result<Started, SpawnFailure> {
    let status: StatusSlot = Arc::new(Mutex::new(None));
    // With the reaper running, hold the leaders lock from before the clone until the leader is registered,
    // so that the reaper never mistakes a fresh leader for an orphan.
    let held = REAPER_ACTIVE.load(Ordering::Acquire).then(|| lock(&LEADERS));
    let spawned = if let Some((owner, _)) = NAMESPACE_HERE.get() {
        if std::thread::current().id() == *owner {
            sys::spawn_child(plan, fork, true)
        } else {
            // Its child would be created outside the namespace: refuse rather than leave it uncontained.
            Err(SpawnFailure::Os {
                call: "spawning from a thread outside the sessions' PID namespace",
                errno: libc::EPERM,
            })
        }
    } else {
        match NAMESPACE_JOBS.get().or_else(|| spawner_thread().as_ref()) {
            Some(jobs) => {
                let jobs = lock(jobs).clone();
                sys::spawn_via(&jobs, plan, fork)
            }
            None => sys::spawn_child(plan, fork, false),
        }
    };
    let (pid, pidfd) = spawned?;
    let mut leaders = held.unwrap_or_else(|| lock(&LEADERS));
    leaders.insert(pid.as_raw_nonzero().get(), Arc::clone(&status));
    drop(leaders);
    let (count, changed) = &SPAWNS;
    *lock(count) += 1;
    changed.notify_all();
    Ok(Started { pid, pidfd, status })
}

/// Take a reaped leader out of the table of live leaders. Called with its slot's lock held (or when nobody
/// else can know the leader: a spawn that failed after the clone).
pub(crate) fn forget_leader(pid: i32) {
    lock(&LEADERS).remove(&pid);
}

/// The table of live leaders, locked: while it is held no leader is registered or forgotten.
pub(crate) fn live_leaders() -> MutexGuard<'static, HashMap<i32, StatusSlot>> {
    lock(&LEADERS)
}

/// True when nothing has been orphaned into the sessions' PID namespace: its init has no child. Then a session
/// whose leader has been reaped has no process left (when the leader exited, its living descendants were
/// reparented to that init: no subreaper outside the namespace adopts them), and `kill_tree` can skip scanning
/// `/proc`. False when unknown (no PID namespace, or a kernel that does not list children).
pub(crate) fn namespace_has_no_orphans() -> bool {
    let Some(Containment::PidNamespace { init_pid }) = containment() else {
        return false;
    };
    match std::fs::read(format!("/proc/{init_pid}/task/{init_pid}/children")) {
        Ok(children) => children.iter().all(u8::is_ascii_whitespace),
        Err(_) => false,
    }
}
