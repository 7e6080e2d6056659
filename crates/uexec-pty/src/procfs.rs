//! Reading `/proc`: the process list, a process's status line, environment, blocked system call, fds and
//! memory. Every reader returns `None` when the process is gone or unreadable: processes come and go while
//! we look, and that is never an error.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// The process id.
    pub(crate) pid: i32,
    /// The state letter: `R` running, `S` sleeping, `D` disk sleep, `Z` zombie, `T`/`t` stopped, ...
    pub(crate) state: u8,
    /// Parent pid.
    pub(crate) ppid: i32,
    /// Process group id.
    pub(crate) pgid: i32,
    /// Session id.
    pub(crate) sid: i32,
    /// The controlling terminal, as the kernel encodes it in `tty_nr` (0: none).
    pub(crate) tty_nr: u64,
    /// Start time in clock ticks since boot: with the pid, identifies the process (pids are reused).
    pub(crate) start_time: u64,
}

impl ProcStat {
    /// True for zombies and dead entries (nothing left to signal).
    pub(crate) fn is_dead(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// Every numeric entry of `/proc`.
pub(crate) fn all_pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()))
        .collect()
}

/// Read the whole of `path` into `buffer` (cleared first).
fn read_into(path: &str, buffer: &mut Vec<u8>) -> Option<()> {
    buffer.clear();
    File::open(path).ok()?.read_to_end(buffer).ok()?;
    Some(())
}

/// `/proc/<pid>/stat`, parsed.
pub(crate) fn read_stat(pid: i32, buffer: &mut Vec<u8>) -> Option<ProcStat> {
    read_into(&format!("/proc/{pid}/stat"), buffer)?;
    parse_stat(pid, buffer)
}

fn parse_stat(pid: i32, text: &[u8]) -> Option<ProcStat> {
    // The command name is in parentheses and may itself contain spaces and parentheses: the fields we
    // want come after the last `)`.
    let close = text.iter().rposition(|byte| *byte == b')')?;
    let rest = std::str::from_utf8(text.get(close + 1..)?).ok()?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let state = *fields.first()?.as_bytes().first()?;
    Some(ProcStat {
        pid,
        state,
        ppid: fields.get(1)?.parse().ok()?,
        pgid: fields.get(2)?.parse().ok()?,
        sid: fields.get(3)?.parse().ok()?,
        tty_nr: fields.get(4)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// `/proc/<pid>/environ` (NUL-separated `NAME=value` entries) into `buffer`.
pub(crate) fn read_environ(pid: i32, buffer: &mut Vec<u8>) -> Option<()> {
    read_into(&format!("/proc/{pid}/environ"), buffer)
}

/// What `/proc/<pid>/syscall` says about the main thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyscallState {
    /// On a CPU, or runnable.
    Running,
    /// Blocked in system call `number` with these arguments.
    Blocked { number: i64, args: [u64; 6] },
    /// Blocked outside any system call (stopped, for example).
    NotInSyscall,
}

/// `/proc/<pid>/syscall`, parsed (needs the right to ptrace-read the process, as for `/proc/<pid>/mem`).
pub(crate) fn read_syscall(pid: i32) -> Option<SyscallState> {
    let mut buffer = Vec::with_capacity(128);
    read_into(&format!("/proc/{pid}/syscall"), &mut buffer)?;
    parse_syscall(std::str::from_utf8(&buffer).ok()?)
}

fn parse_syscall(text: &str) -> Option<SyscallState> {
    let mut fields = text.split_ascii_whitespace();
    let first = fields.next()?;
    if first == "running" {
        return Some(SyscallState::Running);
    }
    let number: i64 = first.parse().ok()?;
    if number < 0 {
        return Some(SyscallState::NotInSyscall);
    }
    let mut args = [0u64; 6];
    for arg in &mut args {
        let field = fields.next()?;
        *arg = u64::from_str_radix(field.strip_prefix("0x").unwrap_or(field), 16).ok()?;
    }
    Some(SyscallState::Blocked { number, args })
}

/// The identity (device, inode) of the namespace `path` (`/proc/<pid>/ns/...`) names.
pub(crate) fn namespace_id(path: &str) -> Option<(u64, u64)> {
    let stat = rustix::fs::stat(path).ok()?;
    Some((stat.st_dev, stat.st_ino))
}

/// The device number of what `/proc/<pid>/fd/<fd>` refers to, if it is a character device.
pub(crate) fn fd_char_device(pid: i32, fd: u64) -> Option<u64> {
    let stat = rustix::fs::stat(format!("/proc/{pid}/fd/{fd}").as_str()).ok()?;
    (rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::CharacterDevice)
        .then_some(stat.st_rdev)
}

/// The fds registered in epoll instance `epfd` of `pid` (the `tfd:` lines of its fdinfo).
pub(crate) fn epoll_targets(pid: i32, epfd: u64) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{epfd}")).ok()?;
    Some(
        text.lines()
            .filter_map(|line| line.strip_prefix("tfd:"))
            .filter_map(|rest| rest.split_ascii_whitespace().next())
            .filter_map(|fd| fd.parse().ok())
            .collect(),
    )
}

/// `len` bytes of `pid`'s memory at `address` (`/proc/<pid>/mem`).
pub(crate) fn read_memory(pid: i32, address: u64, len: usize) -> Option<Vec<u8>> {
    let file = File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, address).ok()?;
    Some(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_name() {
        let line = b"42 (a) b (c)) S 1 42 42 34816 42 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10 18446744073709551615";
        let stat = parse_stat(42, line).unwrap();
        assert_eq!(
            stat,
            ProcStat { pid: 42, state: b'S', ppid: 1, pgid: 42, sid: 42, tty_nr: 34816, start_time: 123_456 }
        );
    }

    #[test]
    fn own_stat_is_readable() {
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let stat = read_stat(me, &mut Vec::new()).unwrap();
        assert_eq!(stat.pid, me);
        assert!(b"RS".contains(&stat.state), "{}", stat.state as char);
        assert_eq!(stat.ppid, rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()));
    }

    #[test]
    fn syscall_lines() {
        assert_eq!(parse_syscall("running\n"), Some(SyscallState::Running));
        assert_eq!(parse_syscall("-1 0x7ffd 0x7f00\n"), Some(SyscallState::NotInSyscall));
        assert_eq!(
            parse_syscall("0 0x3 0x7ffc 0x1 0x0 0x0 0x0 0x7ffd 0x7f00\n"),
            Some(SyscallState::Blocked { number: 0, args: [3, 0x7ffc, 1, 0, 0, 0] })
        );
    }
}
