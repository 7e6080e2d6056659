//! Who reaps which process: the one owner of the reaping lock protocol.
//!
//! 1. A session leader is reaped only by a holder of its [`StatusSlot`]'s lock, which records the status in
//!    the slot before letting go: its session's control (its waiter, `kill_tree`, the sweep after a drop) or
//!    the reaper thread (Linux, [`Containment::Subreaper`](crate::Containment::Subreaper)). So the first to
//!    reap it hands the status to everyone else, and nobody finds it "reaped by someone else".
//! 2. Everything that relies on the leader's pid still naming the leader (signalling its process group,
//!    scanning for its group, session and descendants) holds the same lock and checks that the slot is empty:
//!    the leader cannot be reaped in the middle, so its pid, group id and session id cannot be recycled for
//!    another process (another session's leader) that the scan would then kill and reap.
//! 3. Live leaders are registered in a table by pid ([`live_leaders`]); reaping "adopted" processes after a
//!    kill (orphans that re-parented to this process, `tree::reap_adopted`) skips every registered leader,
//!    whatever the scan found.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, TryLockError};

use rustix::process::{Pid, WaitOptions};
use uexec_domain::ExitStatus;
use uexec_ports::process::ProcessError;

use crate::error::os_error;

/// The exit-status slot of a session leader, filled by whoever reaps it, under its lock (see the module
/// documentation: the lock also keeps the leader unreaped while its pid is used).
pub(crate) type StatusSlot = Arc<Mutex<Option<ExitStatus>>>;

/// Session leaders not yet reaped, by pid. Lock order: a leader's slot before this table, never the reverse.
static LEADERS: LazyLock<Mutex<HashMap<i32, StatusSlot>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Lock `mutex`, whether or not a holder panicked (the data it guards stays consistent at every step).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The table of live leaders, locked: while it is held no leader is registered or forgotten.
pub(crate) fn live_leaders() -> MutexGuard<'static, HashMap<i32, StatusSlot>> {
    lock(&LEADERS)
}

/// Take a reaped leader out of the table of live leaders. Called with its slot's lock held (or when nobody
/// else can know the leader: a spawn that failed after the child was created).
pub(crate) fn forget_leader(pid: i32) {
    lock(&LEADERS).remove(&pid);
}

/// How a leader is named for `waitid`/`waitpid`: by pidfd on the Linux fast path, else by pid (which stays
/// the leader's until it is reaped, since the leader is our child).
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaderRef<'a> {
    /// A pidfd of the leader.
    #[cfg(target_os = "linux")]
    PidFd(BorrowedFd<'a>),
    /// The leader's pid.
    Pid(Pid, std::marker::PhantomData<BorrowedFd<'a>>),
}

impl LeaderRef<'_> {
    /// The leader by pid.
    pub(crate) fn pid(pid: Pid) -> Self {
        LeaderRef::Pid(pid, std::marker::PhantomData)
    }

    /// Reap the leader if it has exited (`block`: wait for it). `Ok(None)`: still running.
    fn wait(self, block: bool) -> Result<Option<ExitStatus>, rustix::io::Errno> {
        loop {
            let result = match self {
                #[cfg(target_os = "linux")]
                LeaderRef::PidFd(pidfd) => {
                    use rustix::process::{WaitId, WaitIdOptions};
                    let options = if block {
                        WaitIdOptions::EXITED
                    } else {
                        WaitIdOptions::EXITED | WaitIdOptions::NOHANG
                    };
                    rustix::process::waitid(WaitId::PidFd(pidfd), options)
                        .map(|status| status.map(|status| from_waitid(&status)))
                }
                LeaderRef::Pid(pid, _) => {
                    let options = if block { WaitOptions::empty() } else { WaitOptions::NOHANG };
                    rustix::process::waitpid(Some(pid), options)
                        .map(|status| status.map(|(_, status)| from_wait_status(status)))
                }
            };
            match result {
                Err(rustix::io::Errno::INTR) => {}
                other => return other,
            }
        }
    }
}

/// The outcome of one attempt to reap a leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reap {
    /// Reaped (now or before): its status.
    Exited(ExitStatus),
    /// Still running.
    Running,
    /// A scan of the session holds the leader's slot (it takes milliseconds; the caller retries).
    Busy,
}

/// Reap the leader if it has exited, without blocking, under its slot's lock.
pub(crate) fn try_reap(slot: &StatusSlot, leader: LeaderRef<'_>, pid: i32) -> Result<Reap, ProcessError> {
    let mut slot = match slot.try_lock() {
        Ok(slot) => slot,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return Ok(Reap::Busy),
    };
    if let Some(status) = *slot {
        return Ok(Reap::Exited(status));
    }
    match leader.wait(false) {
        Ok(Some(status)) => {
            *slot = Some(status);
            forget_leader(pid);
            Ok(Reap::Exited(status))
        }
        Ok(None) => Ok(Reap::Running),
        // ECHILD cannot happen while every reaper of a leader holds its slot (a `waitpid(-1)` elsewhere in
        // this process would cause it): reported with the call and errno.
        Err(errno) => Err(os_error("waitid", errno)),
    }
}

/// Reap the leader, waiting for its exit (it has been sent SIGKILL), unless someone did already. The caller
/// holds the slot's lock (`slot`).
pub(crate) fn reap_killed_leader(slot: &mut Option<ExitStatus>, leader: LeaderRef<'_>, pid: i32) {
    if slot.is_none() {
        // SIGKILLed with its group: this returns as soon as the kernel has finished it.
        *slot = leader.wait(true).ok().flatten();
        forget_leader(pid);
    }
}

/// Reap a child that is not a registered leader and has exited, if it is ours (`waitpid` on its pid only).
pub(crate) fn reap_orphan(pid: Pid) -> bool {
    matches!(rustix::process::waitpid(Some(pid), WaitOptions::NOHANG), Ok(Some(_)))
}

/// Convert a `waitid` status.
#[cfg(target_os = "linux")]
pub(crate) fn from_waitid(status: &rustix::process::WaitIdStatus) -> ExitStatus {
    exit_status(status.exit_status(), status.terminating_signal())
}

/// Convert a `waitpid` status.
fn from_wait_status(status: rustix::process::WaitStatus) -> ExitStatus {
    exit_status(status.exit_status(), status.terminating_signal())
}

fn exit_status(code: Option<i32>, signal: Option<i32>) -> ExitStatus {
    match (code, signal) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(signal)) => ExitStatus::Signal(signal),
        (None, None) => ExitStatus::Code(-1),
    }
}

/// The reaper thread's loop ([`Containment::Subreaper`](crate::Containment::Subreaper)): wait for any exited
/// child, then reap it: an orphan under the leaders table's lock (so that no leader being spawned is mistaken
/// for one), a leader under its slot's lock, handing its status to its session. `spawns` is bumped after every
/// spawn, so that a reaper with no children wakes up.
#[cfg(target_os = "linux")]
pub(crate) fn reap_forever(spawns: &'static (Mutex<u64>, std::sync::Condvar)) -> ! {
    use std::time::Duration;

    let (count, changed) = spawns;
    loop {
        let spawns_seen = *lock(count);
        match crate::sys::wait_any_exited_nowait() {
            Ok(Some(pid)) => {
                let raw = pid.as_raw_nonzero().get();
                let leaders = live_leaders();
                match leaders.get(&raw).map(Arc::clone) {
                    Some(slot) => {
                        drop(leaders);
                        // Registered leaders are reaped only by a holder of their slot's lock. It is not reaped
                        // yet (the slot is empty), so `raw` still names it.
                        let mut status = lock(&slot);
                        if status.is_none()
                            && let Ok(Some(reaped)) = LeaderRef::pid(pid).wait(false)
                        {
                            *status = Some(reaped);
                            forget_leader(raw);
                        }
                    }
                    None => {
                        let reaped = reap_orphan(pid);
                        drop(leaders);
                        if reaped {
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
