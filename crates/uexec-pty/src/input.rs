//! Is the terminal's foreground process waiting for input (spec B4)?
//!
//! The foreground process group comes from `tcgetpgrp` on the master. A process of that group is
//! *reading the terminal* when its main thread sleeps (`S` in `/proc/<pid>/stat`) in a system call
//! (`/proc/<pid>/syscall`) that waits for the slave: `read`/`readv` on an fd that is the slave (or `/dev/tty`
//! when the slave is its controlling terminal, as for password prompts);
//! `select`/`pselect6`, `poll`/`ppoll` or `epoll_wait`/`epoll_pwait`/`epoll_pwait2` waiting for the slave and
//! for nothing else: no timeout (a timer, `read -t` or an event loop's next tick ends the wait without input), no
//! other fd in the sets (a socket as in `ssh -t` or `docker exec -it`, a pipe, a timerfd: events that can make
//! the program print), no write set. The sets are read from `/proc/<pid>/mem` (if that is not allowed, fd 0
//! being the slave counts), an epoll instance's watched fds from its `fdinfo` (`tfd:` lines). A process in
//! `wait4`/`waitid` is neutral (a shell waiting for its job); anything else, running or blocked elsewhere,
//! is busy.
//!
//! The group leader decides alone when it is reading the terminal or busy; otherwise every member of the
//! group is looked at: waiting for input when one reads the terminal and none is busy. Then, input
//! written but not yet consumed (`FIONREAD` on the slave) means the process is about to run: busy. Finally,
//! output not yet read from the master (after a `poll` that flushes the kernel's PTY buffer) means the
//! reader still has bytes to deliver: busy. So `WaitingForInput` also promises that every byte the process
//! wrote before blocking is already in the reader's hands.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{Mode, OFlags};
use uexec_ports::process::InputState;

use crate::procfs::{self, SyscallState};

/// The slave side of a session's terminal.
#[derive(Debug, Clone)]
pub(crate) struct Terminal {
    /// `/dev/pts/<n>`.
    path: CString,
    /// Its device number.
    rdev: u64,
}

impl Terminal {
    /// Look up the slave of `master`.
    pub(crate) fn of_master(master: BorrowedFd<'_>) -> Option<Terminal> {
        let path = rustix::pty::ptsname(master, Vec::new()).ok()?;
        let stat = rustix::fs::stat(path.as_c_str()).ok()?;
        Some(Terminal { path, rdev: stat.st_rdev })
    }

    /// True when `pid`'s `fd` is this terminal: the slave itself, or `/dev/tty` (as password prompts such as
    /// `getpass`, `sudo` and `ssh` open it) while this terminal is `pid`'s controlling terminal.
    fn is(&self, pid: i32, fd: u64) -> bool {
        match procfs::fd_char_device(pid, fd) {
            Some(rdev) if rdev == self.rdev => true,
            Some(rdev) if rdev == rustix::fs::makedev(5, 0) => self.controls(pid),
            _ => false,
        }
    }

    /// True when this terminal is `pid`'s controlling terminal (`tty_nr` of `/proc/<pid>/stat`).
    fn controls(&self, pid: i32) -> bool {
        let Some(stat) = procfs::read_stat(pid, &mut Vec::with_capacity(512)) else { return false };
        // tty_nr: minor in bits 0-7 and 20-31, major in bits 8-19.
        let major = (stat.tty_nr >> 8) & 0xfff;
        let minor = (stat.tty_nr & 0xff) | ((stat.tty_nr >> 12) & 0xf_ff00);
        stat.tty_nr != 0
            && major == u64::from(rustix::fs::major(self.rdev))
            && minor == u64::from(rustix::fs::minor(self.rdev))
    }

    /// Bytes written to the terminal that its reader has not consumed yet.
    fn pending_input(&self) -> Option<u64> {
        let fd = rustix::fs::open(
            self.path.as_c_str(),
            OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        // Input written to the master reaches the slave through the same asynchronous kernel buffer as output
        // does the other way; `poll` flushes it first (see `master_has_unread_output`), so input still in flight
        // is counted rather than missed.
        if poll_readable(fd.as_fd()) {
            return Some(1);
        }
        rustix::io::ioctl_fionread(&fd).ok()
    }
}

/// What one process of the foreground group is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activity {
    ReadingTerminal,
    WaitingForChildren,
    Busy,
}

/// The state of the terminal whose master is `master`.
pub(crate) fn input_state(master: BorrowedFd<'_>, terminal: &Terminal) -> InputState {
    let Ok(foreground) = rustix::termios::tcgetpgrp(master) else {
        return InputState::Unknown;
    };
    let group = foreground.as_raw_nonzero().get();
    let verdict = match activity(group, terminal) {
        Some(Activity::Busy) => return InputState::Busy,
        Some(Activity::ReadingTerminal) => Activity::ReadingTerminal,
        Some(Activity::WaitingForChildren) | None => match group_activity(group, terminal) {
            Some(verdict) => verdict,
            None => return InputState::Unknown,
        },
    };
    if verdict != Activity::ReadingTerminal {
        return InputState::Busy;
    }
    match terminal.pending_input() {
        Some(0) => {}
        Some(_) => return InputState::Busy,
        None => return InputState::Unknown,
    }
    // The process is blocked reading the terminal, so everything it wrote before has been handed to the
    // kernel. The kernel moves PTY output to the master asynchronously (a workqueue flushes the "flip buffer");
    // `poll` on the master runs that flush synchronously when no output is available yet (n_tty_poll calls
    // tty_buffer_flush_work). So when the master is not readable now, every byte written before the process
    // blocked has already been read by the output reader: the response can be complete without waiting.
    if master_has_unread_output(master) { InputState::Busy } else { InputState::WaitingForInput }
}

/// True when the master has output that the reader has not read yet (after flushing the kernel's buffer).
fn master_has_unread_output(master: BorrowedFd<'_>) -> bool {
    poll_readable(master)
}

/// True when `fd` is readable now; `poll` on a terminal first runs the kernel's pending buffer flush.
fn poll_readable(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
    match rustix::event::poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })) {
        Ok(0) => false,
        Ok(_) => fds[0].revents().contains(rustix::event::PollFlags::IN),
        // Cannot tell: say busy, the engine looks again shortly.
        Err(_) => true,
    }
}

/// The verdict over every member of process group `group`; `None` when the group has no readable member.
fn group_activity(group: i32, terminal: &Terminal) -> Option<Activity> {
    let mut buffer = Vec::with_capacity(512);
    let mut seen = false;
    let mut reading = false;
    for pid in procfs::all_pids() {
        let Some(stat) = procfs::read_stat(pid, &mut buffer) else { continue };
        if stat.pgid != group || stat.is_dead() {
            continue;
        }
        match activity(pid, terminal) {
            Some(Activity::Busy) => return Some(Activity::Busy),
            Some(Activity::ReadingTerminal) => reading = true,
            Some(Activity::WaitingForChildren) => {}
            None => continue,
        }
        seen = true;
    }
    seen.then_some(if reading { Activity::ReadingTerminal } else { Activity::Busy })
}

fn activity(pid: i32, terminal: &Terminal) -> Option<Activity> {
    let stat = procfs::read_stat(pid, &mut Vec::with_capacity(512))?;
    match stat.state {
        b'S' => {}
        b'Z' | b'X' | b'x' => return None,
        _ => return Some(Activity::Busy),
    }
    let (number, args) = match procfs::read_syscall(pid)? {
        SyscallState::Blocked { number, args } => (number, args),
        SyscallState::Running | SyscallState::NotInSyscall => return Some(Activity::Busy),
    };
    // A wait with a timeout ends by itself (a timer, `read -t`, an event loop's next tick), so the program may
    // print without any input: it is not waiting for input. So is a wait on anything besides the terminal (a
    // socket as in `ssh -t` or `docker exec -it`, a pipe, a timerfd).
    let reading = match number {
        libc::SYS_read | libc::SYS_readv => terminal.is(pid, args[0]),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_select => args[4] == 0 && select_waits_only_for_terminal(pid, terminal, args),
        libc::SYS_pselect6 => args[4] == 0 && select_waits_only_for_terminal(pid, terminal, args),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll => {
            infinite_milliseconds(args[2]) && poll_waits_only_for_terminal(pid, terminal, args[0], args[1])
        }
        libc::SYS_ppoll => args[2] == 0 && poll_waits_only_for_terminal(pid, terminal, args[0], args[1]),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait => {
            infinite_milliseconds(args[3]) && epoll_waits_only_for_terminal(pid, terminal, args[0])
        }
        libc::SYS_epoll_pwait => {
            infinite_milliseconds(args[3]) && epoll_waits_only_for_terminal(pid, terminal, args[0])
        }
        libc::SYS_epoll_pwait2 => args[3] == 0 && epoll_waits_only_for_terminal(pid, terminal, args[0]),
        libc::SYS_wait4 | libc::SYS_waitid => return Some(Activity::WaitingForChildren),
        _ => false,
    };
    Some(if reading { Activity::ReadingTerminal } else { Activity::Busy })
}

/// True for a `poll`/`epoll_wait` timeout argument (an `int` of milliseconds in a 64-bit register) that means
/// "no timeout": any negative value.
fn infinite_milliseconds(register: u64) -> bool {
    // The kernel reads the low 32 bits as a C int.
    #[allow(clippy::cast_possible_truncation)]
    let timeout = register as u32 as i32;
    timeout < 0
}

/// The fds whose bits are set in an `fd_set` image of `nfds` bits.
fn fd_set_members(set: &[u8], nfds: u64) -> impl Iterator<Item = u64> + '_ {
    (0..nfds).filter(move |fd| {
        let byte = set.get(usize::try_from(fd / 8).unwrap_or(usize::MAX)).copied().unwrap_or(0);
        byte & (1 << (fd % 8)) != 0
    })
}

/// `select(nfds, readfds, writefds, exceptfds, timeout)` without a timeout: is the terminal in the read set and
/// nothing else watched? A write set means the program waits to write (it will run without input); an fd other
/// than the terminal in the read or exception set is another source of events. Without access to the
/// process's memory the sets cannot be read: then fd 0 being the terminal decides.
fn select_waits_only_for_terminal(pid: i32, terminal: &Terminal, args: [u64; 6]) -> bool {
    let (nfds, readfds, writefds, exceptfds) = (args[0].min(65_536), args[1], args[2], args[3]);
    if readfds == 0 {
        return false;
    }
    let bytes = usize::try_from(nfds.div_ceil(64) * 8).unwrap_or(0);
    let Some(read) = procfs::read_memory(pid, readfds, bytes) else {
        return terminal.is(pid, 0);
    };
    let set = |address: u64| -> Option<Vec<u8>> {
        if address == 0 { Some(Vec::new()) } else { procfs::read_memory(pid, address, bytes) }
    };
    let (Some(write), Some(except)) = (set(writefds), set(exceptfds)) else { return false };
    if fd_set_members(&write, nfds).next().is_some() {
        return false;
    }
    fd_set_members(&read, nfds).next().is_some()
        && fd_set_members(&read, nfds).chain(fd_set_members(&except, nfds)).all(|fd| terminal.is(pid, fd))
}

/// `poll(fds, nfds, ...)` without a timeout: does every entry watch the terminal, one of them for input?
/// (Entries with a negative fd are ignored, as the kernel ignores them.)
fn poll_waits_only_for_terminal(pid: i32, terminal: &Terminal, fds: u64, nfds: u64) -> bool {
    const POLLFD_SIZE: u64 = 8;
    let nfds = nfds.min(4096);
    let Some(array) = procfs::read_memory(pid, fds, usize::try_from(nfds * POLLFD_SIZE).unwrap_or(0)) else {
        return terminal.is(pid, 0);
    };
    let input = u16::try_from(libc::POLLIN | libc::POLLPRI).unwrap_or(1);
    let entries: Vec<(u64, u16)> = array
        .chunks_exact(8)
        .filter_map(|entry| {
            let fd = i32::from_ne_bytes([entry[0], entry[1], entry[2], entry[3]]);
            let events = u16::from_ne_bytes([entry[4], entry[5]]);
            u64::try_from(fd).ok().map(|fd| (fd, events))
        })
        .collect();
    entries.iter().any(|&(_, events)| events & input != 0)
        && entries.iter().all(|&(fd, _)| terminal.is(pid, fd))
}

/// `epoll_wait(epfd, ...)` without a timeout: does the epoll instance watch the terminal and nothing else
/// (its `fdinfo` lists every registered fd)?
fn epoll_waits_only_for_terminal(pid: i32, terminal: &Terminal, epfd: u64) -> bool {
    match procfs::epoll_targets(pid, epfd) {
        Some(targets) => !targets.is_empty() && targets.into_iter().all(|fd| terminal.is(pid, fd)),
        None => terminal.is(pid, 0),
    }
}
