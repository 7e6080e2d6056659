//! Tree membership: which processes belong to a session, and signalling them without hitting a recycled pid.
//!
//! A session's processes are: its leader (while not reaped), every process in the leader's process group
//! or session, every process whose environment carries the session token, every process in the leader's
//! private namespace (Linux: a sandboxed command's UTS or mount namespace, see [`PrivateNamespace`]; nothing
//! in it can leave it, whatever it does to its environment, group or parent), and every descendant of those
//! (by parent links). The process table is the platform's ([`crate::table`]).
//!
//! Each process found is pinned, so later signals go to exactly that process even if its pid is reused: on the
//! Linux fast path by a pidfd (then checked to still be the process we read: same start time); in the portable
//! core by its start time, checked again right before each signal (a pid recycled in between is not signalled).
//!
//! After the leader is reaped its pid may be recycled once its group and session are empty, so group and
//! session matches then count only while some token-carrying process is still in that group or session
//! (a group id cannot be recycled while the group has a member).

use std::collections::{HashMap, HashSet};
#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;
#[cfg(target_os = "linux")]
use std::os::fd::{AsFd, BorrowedFd};

use rustix::process::{Pid, Signal};

use crate::table::{self, ProcEntry};

/// How members are pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pinning {
    /// By a pidfd (Linux fast path).
    #[cfg(target_os = "linux")]
    PidFd,
    /// By the start time, checked again before every signal (portable core).
    StartTime,
}

/// One process of the session, pinned.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) pid: i32,
    start_time: u64,
    #[cfg(target_os = "linux")]
    pidfd: Option<OwnedFd>,
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
    /// A start time (see [`table::start_time_floor`]) taken before the leader was created: processes started
    /// earlier cannot carry the token, so their environments are not read.
    pub(crate) born_after: u64,
    /// The leader's private namespace, when it has one (see [`PrivateNamespace`]).
    pub(crate) private_ns: Option<(NamespaceKind, (u64, u64))>,
    /// How members are pinned.
    pub(crate) pinning: Pinning,
}

/// Which namespace marks a session's processes (Linux only: elsewhere there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) enum NamespaceKind {
    /// The UTS namespace: the Linux sandbox gives each command one of its own (commands of one mount plan
    /// may share a mount namespace, see the sandbox's templates; their UTS namespaces stay theirs).
    Uts,
    /// The mount namespace: a sandbox that makes one per command and no UTS namespace.
    Mnt,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl NamespaceKind {
    /// Its name under `/proc/<pid>/ns/`.
    fn name(self) -> &'static str {
        match self {
            NamespaceKind::Uts => "uts",
            NamespaceKind::Mnt => "mnt",
        }
    }
}

/// The private namespace a sandboxed leader runs in, pinned by an open `/proc/<pid>/ns/...` so that its
/// identity cannot be recycled for another namespace while the session may still be killed. Every process in
/// it belongs to the session: a sandboxed command cannot create or enter another namespace, so a daemon that
/// scrubbed its environment, left the group and was re-parented is still found. The leader's UTS namespace
/// when it differs from this process's, else its mount namespace when that differs (a mount namespace can
/// be shared by several commands, a UTS namespace of its own marks one command); `None` when both are this
/// process's (an unsandboxed command: every process of the host would match). Linux only (elsewhere there
/// is no such namespace: always `None`).
#[derive(Debug)]
pub(crate) struct PrivateNamespace {
    #[cfg(target_os = "linux")]
    _pin: OwnedFd,
    kind: NamespaceKind,
    id: (u64, u64),
}

impl PrivateNamespace {
    /// The leader's private namespace among `pins`, if any. Always `None` off Linux.
    pub(crate) fn from_pins(pins: crate::sys::NamespacePins) -> Option<PrivateNamespace> {
        #[cfg(target_os = "linux")]
        {
            let own = |kind: NamespaceKind, pin: OwnedFd| {
                let stat = rustix::fs::fstat(&pin).ok()?;
                let id = (stat.st_dev, stat.st_ino);
                let ours = crate::procfs::namespace_id(&format!("/proc/self/ns/{}", kind.name()))?;
                (ours != id).then_some(PrivateNamespace { _pin: pin, kind, id })
            };
            let crate::sys::NamespacePins { uts, mnt } = pins;
            uts.and_then(|pin| own(NamespaceKind::Uts, pin))
                .or_else(|| mnt.and_then(|pin| own(NamespaceKind::Mnt, pin)))
        }
        #[cfg(not(target_os = "linux"))]
        {
            drop(pins);
            None
        }
    }

    /// Which namespace, and its identity (device, inode).
    pub(crate) fn identity(&self) -> (NamespaceKind, (u64, u64)) {
        (self.kind, self.id)
    }
}

/// The namespace of kind `kind` of `pid`, if it can be read (Linux only).
fn namespace_id(pid: i32, kind: NamespaceKind) -> Option<(u64, u64)> {
    #[cfg(target_os = "linux")]
    {
        crate::procfs::namespace_id(&format!("/proc/{pid}/ns/{}", kind.name()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (pid, kind);
        None
    }
}

/// Snapshot the live processes of the session (zombies excluded: they cannot be signalled).
pub(crate) fn members(identity: SessionIdentity<'_>) -> Vec<Member> {
    let entries = table::snapshot();
    let mut buffer = Vec::with_capacity(4096);
    let mut selected: HashSet<i32> = HashSet::new();
    for entry in &entries {
        if entry.dead || entry.start_time < identity.born_after {
            continue;
        }
        if table::environ_contains(entry.pid, identity.token_entry, &mut buffer) {
            selected.insert(entry.pid);
        } else if let Some((kind, ns)) = identity.private_ns
            && namespace_id(entry.pid, kind) == Some(ns)
        {
            selected.insert(entry.pid);
        }
    }
    let leader = identity.leader;
    let leader_ids_are_ours = identity.leader_unreaped
        || entries
            .iter()
            .any(|entry| selected.contains(&entry.pid) && (entry.pgid == leader || entry.sid == leader));
    if leader_ids_are_ours {
        for entry in &entries {
            if entry.pid == leader || entry.pgid == leader || entry.sid == leader {
                selected.insert(entry.pid);
            }
        }
    }

    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in &entries {
        children.entry(entry.ppid).or_default().push(entry.pid);
    }
    let mut queue: Vec<i32> = selected.iter().copied().collect();
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if selected.insert(*child) {
                queue.push(*child);
            }
        }
    }

    entries
        .iter()
        .filter(|entry| selected.contains(&entry.pid) && !entry.dead)
        .filter_map(|entry| Member::pin(entry, identity.pinning))
        .collect()
}

impl Member {
    /// Pin the process `entry` describes, if it is still that process.
    fn pin(entry: &ProcEntry, pinning: Pinning) -> Option<Member> {
        match pinning {
            #[cfg(target_os = "linux")]
            Pinning::PidFd => {
                let pid = Pid::from_raw(entry.pid)?;
                let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
                let again = table::entry(entry.pid)?;
                (again.start_time == entry.start_time).then_some(Member {
                    pid: entry.pid,
                    start_time: entry.start_time,
                    pidfd: Some(pidfd),
                })
            }
            Pinning::StartTime => Some(Member {
                pid: entry.pid,
                start_time: entry.start_time,
                #[cfg(target_os = "linux")]
                pidfd: None,
            }),
        }
    }

    /// The pidfd pinning this process (readable once it has exited), on the Linux fast path.
    #[cfg(target_os = "linux")]
    pub(crate) fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(AsFd::as_fd)
    }

    /// True while the pid still names the process we found, alive or a zombie.
    fn still_there(&self) -> Option<ProcEntry> {
        table::entry(self.pid).filter(|entry| entry.start_time == self.start_time)
    }

    /// Send `signal` (errors mean the process is already gone).
    pub(crate) fn signal(&self, signal: Signal) {
        #[cfg(target_os = "linux")]
        if let Some(pidfd) = &self.pidfd {
            let _ = rustix::process::pidfd_send_signal(pidfd, signal);
            return;
        }
        if self.still_there().is_some_and(|entry| !entry.dead)
            && let Some(pid) = Pid::from_raw(self.pid)
        {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// True once the process has exited.
    pub(crate) fn exited(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(pidfd) = &self.pidfd {
            let mut fds = [rustix::event::PollFd::new(pidfd, rustix::event::PollFlags::IN)];
            let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
            return matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(1));
        }
        self.still_there().is_none_or(|entry| entry.dead)
    }

    /// Reap the process if it has exited and is a child of this process.
    pub(crate) fn reap_if_ours(&self) {
        #[cfg(target_os = "linux")]
        if let Some(pidfd) = &self.pidfd {
            use rustix::process::{WaitId, WaitIdOptions};
            let _ = rustix::process::waitid(
                WaitId::PidFd(pidfd.as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            );
            return;
        }
        // A zombie's pid is not reused until it is reaped: if it is still the process we found, it is the one
        // reaped here.
        if self.still_there().is_some()
            && let Some(pid) = Pid::from_raw(self.pid)
        {
            crate::reap::reap_orphan(pid);
        }
    }
}

/// Reap the members that have exited and are children of this process (orphans adopted because this
/// process is a subreaper). Waits only on these specific processes, never on "any child", and never on a
/// live session leader (its own session reaps it and records its status).
pub(crate) fn reap_adopted(members: &[Member]) {
    let leaders = crate::reap::live_leaders();
    for member in members {
        if leaders.contains_key(&member.pid) {
            continue;
        }
        member.reap_if_ours();
    }
}

/// Send `signal` to every member.
pub(crate) fn signal_all(members: &[Member], signal: Signal) {
    for member in members {
        member.signal(signal);
    }
}

/// True when every member has exited.
pub(crate) fn all_exited(members: &[Member]) -> bool {
    members.iter().all(Member::exited)
}
