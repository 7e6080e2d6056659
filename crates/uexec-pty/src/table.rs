//! The system's process table, as the tree scan needs it: every process with its parent, group, session and
//! start time, and whether a process's environment carries an entry. Linux reads `/proc`; macOS asks
//! `libproc` and `sysctl(KERN_PROCARGS2)`. Every reader returns `None`/`false` when the process is gone or
//! unreadable: processes come and go while we look, and that is never an error.

/// One process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcEntry {
    /// The process id.
    pub(crate) pid: i32,
    /// Parent pid.
    pub(crate) ppid: i32,
    /// Process group id.
    pub(crate) pgid: i32,
    /// Session id.
    pub(crate) sid: i32,
    /// Start time in the table's own unit (see [`start_time_floor`]): with the pid, identifies the process
    /// (pids are reused).
    pub(crate) start_time: u64,
    /// A zombie or dead entry (nothing left to signal).
    pub(crate) dead: bool,
}

/// Every process but init (pid 1) and this one.
pub(crate) fn snapshot() -> Vec<ProcEntry> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let mut buffer = Vec::with_capacity(4096);
    platform::all_pids()
        .into_iter()
        .filter(|pid| *pid > 1 && *pid != me)
        .filter_map(|pid| platform::entry(pid, &mut buffer))
        .collect()
}

/// The entry of `pid` now.
pub(crate) fn entry(pid: i32) -> Option<ProcEntry> {
    platform::entry(pid, &mut Vec::with_capacity(512))
}

/// True when the environment of `pid` contains `entry` (`NAME=value`) as a whole entry. `buffer` is scratch.
pub(crate) fn environ_contains(pid: i32, entry: &[u8], buffer: &mut Vec<u8>) -> bool {
    platform::environ(pid, buffer).is_some_and(|environ| crate::token::environ_contains(environ, entry))
}

/// Now, in the unit of [`ProcEntry::start_time`], minus one unit: every process started from now on has a
/// start time at least this.
pub(crate) fn start_time_floor() -> u64 {
    platform::start_time_floor()
}

/// The environment in a `KERN_PROCARGS2` image (macOS): argc (a native `i32`), the executable path, NUL
/// padding, argc NUL-terminated arguments, then the `NAME=value` entries, NUL-separated. Pure, so that it is
/// tested on every platform.
#[cfg(any(target_os = "macos", test))]
fn procargs_environ(image: &[u8]) -> Option<&[u8]> {
    let argc = usize::try_from(i32::from_ne_bytes(image.get(..4)?.try_into().ok()?)).ok()?;
    let mut rest = image.get(4..)?;
    // The executable path, then any number of NULs.
    let path_end = rest.iter().position(|byte| *byte == 0)?;
    rest = rest.get(path_end..)?;
    let first = rest.iter().position(|byte| *byte != 0)?;
    rest = rest.get(first..)?;
    for _ in 0..argc {
        let end = rest.iter().position(|byte| *byte == 0)?;
        rest = rest.get(end + 1..)?;
    }
    Some(rest)
}

#[cfg(target_os = "linux")]
mod platform {
    use super::ProcEntry;
    use crate::procfs;

    pub(super) fn all_pids() -> Vec<i32> {
        procfs::all_pids()
    }

    pub(super) fn entry(pid: i32, buffer: &mut Vec<u8>) -> Option<ProcEntry> {
        let stat = procfs::read_stat(pid, buffer)?;
        Some(ProcEntry {
            pid,
            ppid: stat.ppid,
            pgid: stat.pgid,
            sid: stat.sid,
            start_time: stat.start_time,
            dead: stat.is_dead(),
        })
    }

    pub(super) fn environ(pid: i32, buffer: &mut Vec<u8>) -> Option<&[u8]> {
        procfs::read_environ(pid, buffer)?;
        Some(buffer.as_slice())
    }

    /// Clock ticks since boot, as in `/proc/<pid>/stat`.
    pub(super) fn start_time_floor() -> u64 {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let ticks_per_second = rustix::param::clock_ticks_per_second().max(1);
        let nanos =
            u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0);
        (nanos / (1_000_000_000 / ticks_per_second).max(1)).saturating_sub(1)
    }
}

#[cfg(target_os = "macos")]
mod platform {
    use super::ProcEntry;
    use crate::sys;

    pub(super) fn all_pids() -> Vec<i32> {
        sys::all_pids()
    }

    pub(super) fn entry(pid: i32, _buffer: &mut Vec<u8>) -> Option<ProcEntry> {
        let info = sys::bsd_info(pid)?;
        let sid = rustix::process::getsid(rustix::process::Pid::from_raw(pid))
            .map_or(0, |sid| sid.as_raw_nonzero().get());
        Some(ProcEntry {
            pid,
            ppid: info.ppid,
            pgid: info.pgid,
            sid,
            start_time: info.start_micros,
            dead: info.zombie,
        })
    }

    pub(super) fn environ(pid: i32, buffer: &mut Vec<u8>) -> Option<&[u8]> {
        sys::process_arguments(pid, buffer)?;
        super::procargs_environ(buffer)
    }

    /// Microseconds since the epoch, minus a second (`proc_bsdinfo`'s start time has that resolution; the
    /// second covers a clock step).
    pub(super) fn start_time_floor() -> u64 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        u64::try_from(now.as_micros()).unwrap_or(u64::MAX).saturating_sub(1_000_000)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod platform {
    //! No process table known here: a session is its process group only.
    use super::ProcEntry;

    pub(super) fn all_pids() -> Vec<i32> {
        Vec::new()
    }

    pub(super) fn entry(_pid: i32, _buffer: &mut Vec<u8>) -> Option<ProcEntry> {
        None
    }

    pub(super) fn environ(_pid: i32, _buffer: &mut Vec<u8>) -> Option<&[u8]> {
        None
    }

    pub(super) fn start_time_floor() -> u64 {
        0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_found_after_the_path_and_the_arguments_of_a_procargs_image() {
        let mut image = 2i32.to_ne_bytes().to_vec();
        image.extend_from_slice(
            b"/bin/sleep\0\0\0\0sleep\0UEXEC_SESSION_TOKEN=fake\0A=1\0UEXEC_SESSION_TOKEN=ab\0\0ptr=x\0",
        );
        let environ = procargs_environ(&image).unwrap();
        // The second argument looks like the token: it must not count as an environment entry.
        assert!(environ.starts_with(b"A=1\0"), "{:?}", String::from_utf8_lossy(environ));
        assert!(crate::token::environ_contains(environ, b"UEXEC_SESSION_TOKEN=ab"));
        assert!(!crate::token::environ_contains(environ, b"UEXEC_SESSION_TOKEN=fake"));
        // Truncated or malformed images give nothing rather than a wrong answer.
        assert_eq!(procargs_environ(&image[..3]), None);
        assert_eq!(procargs_environ(&5i32.to_ne_bytes()), None);
        let mut too_many = 9i32.to_ne_bytes().to_vec();
        too_many.extend_from_slice(b"/bin/sleep\0sleep\0");
        assert_eq!(procargs_environ(&too_many), None);
    }

    // The process table under test is Linux's /proc.
    #[cfg(target_os = "linux")]
    #[test]
    fn start_time_floor_precedes_processes_started_after_it() {
        let floor = start_time_floor();
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let stat = entry(pid).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(stat.start_time >= floor, "{} < {floor}", stat.start_time);
        // And it is not far behind: within a second (100 ticks on Linux) plus the slack tick.
        assert!(stat.start_time <= floor + rustix::param::clock_ticks_per_second() + 1);
        // Our own process started before the floor, so its environment would not be read.
        let me = rustix::process::getpid().as_raw_nonzero().get();
        assert!(entry(me).unwrap().start_time <= floor + 1);
    }
}
