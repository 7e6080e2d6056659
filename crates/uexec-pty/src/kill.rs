//! Killing a session's processes: the one sweep that both `kill_tree` and dropping a session use, and the
//! background thread that runs the sweep after a drop (and closes PTY masters, whose close can be slow).
//!
//! A sweep: SIGKILL to the leader's group (while the leader is unreaped) and to every member one scan finds,
//! then scan again until a scan finds nothing new: a process that forked between a scan and its SIGKILL shows
//! up in the next scan, and one with SIGKILL pending cannot fork any more (the kernel aborts the fork), so this
//! ends without waiting. `kill_tree` precedes it with SIGHUP, SIGTERM and SIGCONT and a short grace.

use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::reap::{self, LeaderRef, StatusSlot, lock};
use crate::tree::{self, Member, Pinning, PrivateNamespace, SessionIdentity};

/// How long `kill_tree` lets the processes left handle SIGHUP/SIGTERM before SIGKILL (it moves on as soon as
/// they are gone, and does not wait at all when nothing is left).
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(150);

/// How often a wait for killed processes checks those it cannot watch (no pidfd, or the reactor cannot take
/// one).
pub(crate) const KILL_POLL: Duration = Duration::from_millis(1);

/// At most this many rounds of "scan again, SIGKILL what is new" after the first SIGKILL.
const KILL_SWEEPS: usize = 20;

/// How long a kill waits for killed processes to be gone before returning anyway.
pub(crate) const KILL_WAIT_LIMIT: Duration = Duration::from_secs(5);

/// What finds a session's processes: everything but the leader's pidfd.
#[derive(Debug)]
pub(crate) struct Target {
    /// The leader (its pid is also its group and session id).
    pub(crate) leader: Pid,
    /// The leader's status slot: held during every scan, so the leader is not reaped while its pid is used
    /// (see `reap`).
    pub(crate) status: StatusSlot,
    /// The `UEXEC_SESSION_TOKEN=...` environment entry.
    pub(crate) token_entry: Vec<u8>,
    /// A start time before the leader's (see [`SessionIdentity::born_after`]).
    pub(crate) born_after: u64,
    /// The leader's private namespace (a sandboxed command's), pinned while the session may be killed.
    pub(crate) private_ns: Option<PrivateNamespace>,
    /// How members are pinned.
    pub(crate) pinning: Pinning,
    /// The init of the sandbox PID namespace the session runs in (see `contain`); `None` in the host's.
    pub(crate) namespace_init: Option<u32>,
}

impl Target {
    /// A copy for the sweep after a drop: the same slot and token, and the private namespace's pin (taken:
    /// the dropped control no longer needs it).
    pub(crate) fn take_for_sweep(&mut self) -> Target {
        Target {
            leader: self.leader,
            status: std::sync::Arc::clone(&self.status),
            token_entry: self.token_entry.clone(),
            born_after: self.born_after,
            private_ns: self.private_ns.take(),
            pinning: self.pinning,
            namespace_init: self.namespace_init,
        }
    }

    fn raw_leader(&self) -> i32 {
        self.leader.as_raw_nonzero().get()
    }

    /// What identifies the session's processes, with the leader's slot (`status`) locked by the caller for as
    /// long as the identity (and the leader's pid in it) is used: the leader cannot be reaped meanwhile.
    pub(crate) fn identity(&self, status: &Option<uexec_domain::ExitStatus>) -> SessionIdentity<'_> {
        SessionIdentity {
            leader: self.raw_leader(),
            leader_unreaped: status.is_none(),
            token_entry: &self.token_entry,
            born_after: self.born_after,
            private_ns: self.private_ns.as_ref().map(PrivateNamespace::identity),
            pinning: self.pinning,
        }
    }

    /// Send each of `signals` to the session: to its process group while the leader is unreaped, and to every
    /// member found by one scan; returns the members. The leader's slot is held throughout.
    pub(crate) fn signal_session(&self, signals: &[Signal]) -> Vec<Member> {
        let status = lock(&self.status);
        let identity = self.identity(&status);
        let members = tree::members(identity);
        for &signal in signals {
            if identity.leader_unreaped {
                let _ = rustix::process::kill_process_group(self.leader, signal);
            }
            tree::signal_all(&members, signal);
        }
        members
    }

    /// The sweep (see the module doc): SIGKILL everything found, scan again until nothing new shows up. Adds
    /// what it killed to `killed`.
    pub(crate) fn sweep(&self, killed: &mut Vec<Member>) {
        for _ in 0..KILL_SWEEPS {
            let found = self.signal_session(&[Signal::KILL]);
            let fresh = found.iter().any(|member| killed.iter().all(|known| known.pid != member.pid));
            killed.extend(found);
            if !fresh {
                break;
            }
        }
    }
}

/// Wait until every member has exited, for at most `limit`; true when all are gone. Woken by the exits
/// themselves where a pidfd pins the member, else by checking every [`KILL_POLL`].
pub(crate) async fn all_gone(members: &[Member], limit: Duration) -> bool {
    let exits = async {
        for member in members {
            #[cfg(target_os = "linux")]
            if let Some(pidfd) = member.pidfd() {
                // A duplicate, so that the reactor owns what it watches.
                let watched = rustix::io::fcntl_dupfd_cloexec(pidfd, 3)
                    .map_err(std::io::Error::from)
                    .and_then(|pidfd| crate::sys::register(pidfd, tokio::io::Interest::READABLE));
                if let Ok(exit) = watched {
                    let _ = exit.readable().await;
                    continue;
                }
            }
            // Not watchable (no pidfd, out of fds, or the reactor is out of resources): check at a short
            // interval.
            while !member.exited() {
                tokio::time::sleep(KILL_POLL).await;
            }
        }
    };
    tokio::time::timeout(limit, exits).await.is_ok()
}

/// [`all_gone`] for a thread without a runtime.
fn all_gone_blocking(members: &[Member], limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline && !tree::all_exited(members) {
        std::thread::sleep(KILL_POLL);
    }
}

/// What is left of a session whose control half was dropped: killed and reaped by [`in_background`].
#[derive(Debug)]
pub(crate) struct Sweep {
    pub(crate) target: Target,
    /// The leader's pidfd (Linux fast path), to reap it after the kill unless someone did already.
    #[cfg(target_os = "linux")]
    pub(crate) leader_pidfd: Option<std::os::fd::OwnedFd>,
}

impl Sweep {
    fn run(self) {
        let mut killed = Vec::new();
        self.target.sweep(&mut killed);
        {
            let mut status = lock(&self.target.status);
            let pid = self.target.raw_leader();
            #[cfg(target_os = "linux")]
            let leader = match &self.leader_pidfd {
                Some(pidfd) => LeaderRef::PidFd(std::os::fd::AsFd::as_fd(pidfd)),
                None => LeaderRef::pid(self.target.leader),
            };
            #[cfg(not(target_os = "linux"))]
            let leader = LeaderRef::pid(self.target.leader);
            reap::reap_killed_leader(&mut status, leader, pid);
        }
        all_gone_blocking(&killed, KILL_WAIT_LIMIT);
        tree::reap_adopted(&killed);
    }
}

/// Work done off the caller's thread.
#[derive(Debug)]
pub(crate) enum Chore {
    /// Kill and reap what is left of a dropped session.
    Sweep(Sweep),
    /// Close an fd (a PTY master, whose close may wait for the kernel's tty work).
    Close(std::os::fd::OwnedFd),
}

impl Chore {
    fn run(self) {
        match self {
            Chore::Sweep(sweep) => sweep.run(),
            Chore::Close(fd) => drop(fd),
        }
    }
}

/// Run `chore` on the background thread (started on first use), so that dropping a session never blocks
/// on a process scan or a slow close; synchronously if that thread cannot be started.
pub(crate) fn in_background(chore: Chore) {
    static BACKGROUND: OnceLock<Option<Mutex<mpsc::Sender<Chore>>>> = OnceLock::new();
    let sender = BACKGROUND.get_or_init(|| {
        let (sender, chores) = mpsc::channel::<Chore>();
        let started = std::thread::Builder::new().name("uexec-sweeper".to_owned()).spawn(move || {
            for chore in chores {
                chore.run();
            }
        });
        match started {
            Ok(_) => Some(Mutex::new(sender)),
            Err(error) => {
                tracing::warn!(%error, "no background thread: dropped sessions are swept synchronously");
                None
            }
        }
    });
    match sender {
        Some(sender) => {
            if let Err(mpsc::SendError(chore)) = lock(sender).send(chore) {
                chore.run();
            }
        }
        None => chore.run(),
    }
}
