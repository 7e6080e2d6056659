//! Finding every process of a session, and signalling them without hitting a recycled pid.
//!
//! A session's processes are: its leader (while not reaped), every process in the leader's process group
//! or session, every process whose environment carries the session token, every process in the leader's
//! private mount namespace (a sandboxed command's: nothing in it can leave it, whatever it does to its
//! environment, group or parent), and every descendant of those (by `/proc` parent links). Each one found is pinned with a pidfd, then checked to still be the process
//! we read (same start time), so later signals go to exactly that process even if the pid is reused.
//!
//! After the leader is reaped its pid may be recycled once its group and session are empty, so group and
//! session matches then count only while some token-carrying process is still in that group or session
//! (a group id cannot be recycled while the group has a member).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};

use crate::contain::StatusSlot;
use crate::procfs::{self, ProcStat};
use crate::token::environ_contains;

/// One process of the session, pinned by a pidfd.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) pid: i32,
    pidfd: OwnedFd,
}

/// What identifies a session's processes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionIdentity<'a> {
    /// The leader's pid (also its process group id and session id).
    pub(crate) leader: i32,
    /// True while the leader has not been reaped (its pid cannot be recycled yet).
    pub(crate) leader_unreaped: bool,
    /// The `UEXEC_SESSION_TOKEN=...` environment entry.
    pub(crate) token_entry: &'a [u8],
    /// A start time (see [`start_time_floor`]) taken before the leader was created: processes started
    /// earlier cannot carry the token, so their environments are not read.
    pub(crate) born_after: u64,
    /// The leader's mount namespace when it is not the host's (see [`MountNamespace`]).
    pub(crate) mount_ns: Option<(u64, u64)>,
}

/// The private mount namespace a sandboxed leader runs in, pinned by an open `/proc/<pid>/ns/mnt` so that its
/// identity cannot be recycled for another namespace while the session may still be killed. Every process in
/// it belongs to the session: a sandboxed command cannot create or enter another namespace, so a daemon that
/// scrubbed its environment, left the group and was re-parented is still found.
#[derive(Debug)]
pub(crate) struct MountNamespace {
    _pin: OwnedFd,
    pub(crate) id: (u64, u64),
}

impl MountNamespace {
    /// The mount namespace of `pid` if it differs from this process's (an unsandboxed command shares the host's:
    /// `None`, or every process of the host would match).
    pub(crate) fn of(pid: i32) -> Option<MountNamespace> {
        let path = format!("/proc/{pid}/ns/mnt");
        let pin = rustix::fs::open(
            path.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()?;
        let stat = rustix::fs::fstat(&pin).ok()?;
        let id = (stat.st_dev, stat.st_ino);
        (procfs::namespace_id("/proc/self/ns/mnt")? != id).then_some(MountNamespace { _pin: pin, id })
    }
}

/// Now, in the unit of the start times in `/proc/<pid>/stat` (clock ticks since boot), minus one tick.
pub(crate) fn start_time_floor() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let ticks_per_second = rustix::param::clock_ticks_per_second().max(1);
    let nanos =
        u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0);
    (nanos / (1_000_000_000 / ticks_per_second).max(1)).saturating_sub(1)
}

/// Snapshot the live processes of the session (zombies excluded: they cannot be signalled).
pub(crate) fn members(identity: SessionIdentity<'_>) -> Vec<Member> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let mut buffer = Vec::with_capacity(4096);
    let stats: Vec<ProcStat> = procfs::all_pids()
        .into_iter()
        .filter(|pid| *pid > 1 && *pid != me)
        .filter_map(|pid| procfs::read_stat(pid, &mut buffer))
        .collect();

    let mut selected: HashSet<i32> = HashSet::new();
    for stat in &stats {
        if stat.is_dead() || stat.start_time < identity.born_after {
            continue;
        }
        if procfs::read_environ(stat.pid, &mut buffer).is_some()
            && environ_contains(&buffer, identity.token_entry)
        {
            selected.insert(stat.pid);
        } else if let Some(ns) = identity.mount_ns
            && procfs::namespace_id(&format!("/proc/{}/ns/mnt", stat.pid)) == Some(ns)
        {
            selected.insert(stat.pid);
        }
    }
    let leader = identity.leader;
    let leader_ids_are_ours = identity.leader_unreaped
        || stats
            .iter()
            .any(|stat| selected.contains(&stat.pid) && (stat.pgid == leader || stat.sid == leader));
    if leader_ids_are_ours {
        for stat in &stats {
            if stat.pid == leader || stat.pgid == leader || stat.sid == leader {
                selected.insert(stat.pid);
            }
        }
    }

    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for stat in &stats {
        children.entry(stat.ppid).or_default().push(stat.pid);
    }
    let mut queue: Vec<i32> = selected.iter().copied().collect();
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if selected.insert(*child) {
                queue.push(*child);
            }
        }
    }

    stats
        .iter()
        .filter(|stat| selected.contains(&stat.pid) && !stat.is_dead())
        .filter_map(|stat| pin(stat, &mut buffer))
        .collect()
}

impl Member {
    /// The pidfd pinning this process (readable once it has exited).
    pub(crate) fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }
}

/// Open a pidfd for the process `stat` describes, if it is still that process.
fn pin(stat: &ProcStat, buffer: &mut Vec<u8>) -> Option<Member> {
    let pid = Pid::from_raw(stat.pid)?;
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok()?;
    let again = procfs::read_stat(stat.pid, buffer)?;
    (again.start_time == stat.start_time).then_some(Member { pid: stat.pid, pidfd })
}

/// Send `signal` to every member (errors mean the process is already gone).
pub(crate) fn signal_all(members: &[Member], signal: Signal) {
    for member in members {
        let _ = rustix::process::pidfd_send_signal(&member.pidfd, signal);
    }
}

/// True when every member has exited (its pidfd is readable).
pub(crate) fn all_exited(members: &[Member]) -> bool {
    let mut fds: Vec<PollFd<'_>> = members.iter().map(|m| PollFd::new(&m.pidfd, PollFlags::IN)).collect();
    if fds.is_empty() {
        return true;
    }
    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    match rustix::event::poll(&mut fds, Some(&zero)) {
        Ok(ready) => ready == fds.len(),
        Err(_) => false,
    }
}

/// Reap the members that have exited and are children of this process (orphans adopted because this
/// process is a subreaper). Waits only on these specific processes, never on "any child", and never on a
/// live session leader (its own session reaps it and records its status; see `contain`).
pub(crate) fn reap_adopted(members: &[Member]) {
    let leaders = crate::contain::live_leaders();
    for member in members {
        if leaders.contains_key(&member.pid) {
            continue;
        }
        let _ = rustix::process::waitid(
            WaitId::PidFd(member.pidfd.as_fd()),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        );
    }
}

/// Rounds of "scan, SIGKILL what is found" in a sweep (a process may fork while we look).
const SWEEP_ROUNDS: usize = 20;

/// Pause between sweep rounds, and between checks that the killed processes are gone.
const SWEEP_PAUSE: Duration = Duration::from_millis(5);

/// How long a sweep waits for the killed processes to be gone before reaping what it can.
const SWEEP_WAIT_LIMIT: Duration = Duration::from_secs(5);

/// What is left of a session whose control half was dropped: killed and reaped by [`in_background`].
#[derive(Debug)]
pub(crate) struct Sweep {
    pub(crate) leader: i32,
    /// The leader's status slot: held during every scan, so the leader is not reaped (by the reaper thread)
    /// while its pid is used (see `contain`).
    pub(crate) status: StatusSlot,
    pub(crate) token_entry: Vec<u8>,
    pub(crate) born_after: u64,
    /// The leader's private mount namespace, pinned until the sweep ends.
    pub(crate) mount_ns: Option<MountNamespace>,
    /// The leader's pidfd, to reap it after the kill unless someone did already.
    pub(crate) leader_pidfd: Option<OwnedFd>,
}

impl Sweep {
    fn run(self) {
        let mut killed = Vec::new();
        for _ in 0..SWEEP_ROUNDS {
            let found = {
                let status = crate::contain::lock(&self.status);
                let identity = SessionIdentity {
                    leader: self.leader,
                    leader_unreaped: status.is_none(),
                    token_entry: &self.token_entry,
                    born_after: self.born_after,
                    mount_ns: self.mount_ns.as_ref().map(|ns| ns.id),
                };
                let found = members(identity);
                signal_all(&found, Signal::KILL);
                found
            };
            if found.is_empty() {
                break;
            }
            killed.extend(found);
            std::thread::sleep(SWEEP_PAUSE);
        }
        if let Some(pidfd) = &self.leader_pidfd {
            let mut status = crate::contain::lock(&self.status);
            if status.is_none() {
                // SIGKILLed with its group above: this returns as soon as the kernel has finished it.
                *status = crate::sys::reap_blocking(pidfd.as_fd());
                crate::contain::forget_leader(self.leader);
            }
        }
        let deadline = Instant::now() + SWEEP_WAIT_LIMIT;
        while Instant::now() < deadline && !all_exited(&killed) {
            std::thread::sleep(SWEEP_PAUSE);
        }
        reap_adopted(&killed);
    }
}

/// Work done off the caller's thread.
#[derive(Debug)]
pub(crate) enum Chore {
    /// Kill and reap what is left of a dropped session.
    Sweep(Sweep),
    /// Close an fd (a PTY master, whose close may wait for the kernel's tty work).
    Close(OwnedFd),
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
/// on a `/proc` scan or a slow close; synchronously if that thread cannot be started.
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
            if let Err(mpsc::SendError(chore)) = crate::contain::lock(sender).send(chore) {
                chore.run();
            }
        }
        None => chore.run(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn start_time_floor_precedes_processes_started_after_it() {
        let floor = start_time_floor();
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let stat = procfs::read_stat(pid, &mut Vec::new()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(stat.start_time >= floor, "{} < {floor}", stat.start_time);
        // And it is not far behind: within a second (100 ticks on Linux) plus the slack tick.
        assert!(stat.start_time <= floor + rustix::param::clock_ticks_per_second() + 1);
        // Our own process started before the floor, so its environment would not be read.
        let me = rustix::process::getpid().as_raw_nonzero().get();
        assert!(procfs::read_stat(me, &mut Vec::new()).unwrap().start_time <= floor + 1);
    }
}
