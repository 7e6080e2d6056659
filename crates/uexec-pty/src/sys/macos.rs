//! macOS calls without a safe API: a `kqueue` that reports a process's exit (`EVFILT_PROC`/`NOTE_EXIT`), and
//! the process table through `libproc` (`proc_listallpids`, `proc_pidinfo(PROC_PIDTBSDINFO)`) and
//! `sysctl(KERN_PROCARGS2)` (a process's arguments and environment).

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;

use rustix::process::Pid;

/// A kqueue watching `pid` for its exit. `Ok(None)` when the process has already exited (the kernel refuses
/// to watch a process that is exiting): then there is nothing to wait for.
pub(crate) fn kqueue_for_exit(pid: Pid) -> io::Result<Option<OwnedFd>> {
    // SAFETY: kqueue takes no argument and returns a new fd or -1.
    let raw = unsafe { libc::kqueue() };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new fd that nothing else owns.
    let queue = unsafe { OwnedFd::from_raw_fd(raw) };
    rustix::io::fcntl_setfd(&queue, rustix::io::FdFlags::CLOEXEC)?;
    // SAFETY: an all-zero kevent is a valid value; the fields that matter are set below.
    let mut change: libc::kevent = unsafe { std::mem::zeroed() };
    change.ident = usize::try_from(pid.as_raw_nonzero().get()).unwrap_or(0);
    change.filter = libc::EVFILT_PROC;
    change.flags = libc::EV_ADD | libc::EV_ONESHOT;
    change.fflags = libc::NOTE_EXIT;
    // SAFETY: one valid change, no event buffer, a zero timeout.
    let rc =
        unsafe { libc::kevent(queue.as_raw_fd(), &raw const change, 1, ptr::null_mut(), 0, ptr::null()) };
    if rc < 0 {
        let error = io::Error::last_os_error();
        return if error.raw_os_error() == Some(libc::ESRCH) { Ok(None) } else { Err(error) };
    }
    Ok(Some(queue))
}

/// Take the pending events off `queue` without blocking (so that it stops being readable).
pub(crate) fn drain_kqueue(queue: BorrowedFd<'_>) {
    // SAFETY: an all-zero kevent is valid storage for the kernel to fill.
    let mut event: libc::kevent = unsafe { std::mem::zeroed() };
    let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: no changes, room for one event, a zero timeout; all pointers are valid locals.
    while unsafe { libc::kevent(queue.as_raw_fd(), ptr::null(), 0, &raw mut event, 1, &raw const zero) } > 0 {
    }
}

/// Every process id in the system.
pub(crate) fn all_pids() -> Vec<i32> {
    // SAFETY: a null buffer asks for the number of pids.
    let count = unsafe { libc::proc_listallpids(ptr::null_mut(), 0) };
    let Ok(count) = usize::try_from(count) else { return Vec::new() };
    // Room for processes started in between.
    let mut pids = vec![0 as libc::pid_t; count + 64];
    let bytes = c_int::try_from(pids.len() * size_of::<libc::pid_t>()).unwrap_or(c_int::MAX);
    // SAFETY: the buffer holds `bytes` bytes of pid_t.
    let filled = unsafe { libc::proc_listallpids(pids.as_mut_ptr().cast(), bytes) };
    let Ok(filled) = usize::try_from(filled) else { return Vec::new() };
    pids.truncate(filled.min(pids.len()));
    pids
}

/// The fields of `proc_bsdinfo` the process table uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BsdInfo {
    pub(crate) ppid: i32,
    pub(crate) pgid: i32,
    pub(crate) zombie: bool,
    /// Start time in microseconds since the epoch.
    pub(crate) start_micros: u64,
}

/// `proc_pidinfo(pid, PROC_PIDTBSDINFO)`; `None` when the process is gone or not visible.
pub(crate) fn bsd_info(pid: i32) -> Option<BsdInfo> {
    // SAFETY: an all-zero proc_bsdinfo is valid storage for the kernel to fill.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = c_int::try_from(size_of::<libc::proc_bsdinfo>()).ok()?;
    // SAFETY: `info` has room for `size` bytes.
    let filled = unsafe { libc::proc_pidinfo(pid, libc::PROC_PIDTBSDINFO, 0, (&raw mut info).cast(), size) };
    if filled != size {
        return None;
    }
    Some(BsdInfo {
        ppid: i32::try_from(info.pbi_ppid).ok()?,
        pgid: i32::try_from(info.pbi_pgid).ok()?,
        zombie: info.pbi_status == libc::SZOMB,
        start_micros: info.pbi_start_tvsec.saturating_mul(1_000_000).saturating_add(info.pbi_start_tvusec),
    })
}

/// `sysctl(KERN_PROCARGS2)` of `pid` into `buffer`: argc, the executable path, the arguments and the
/// environment, NUL-separated. `None` when the process is gone or not readable.
pub(crate) fn process_arguments(pid: i32, buffer: &mut Vec<u8>) -> Option<()> {
    let mut mib = [libc::CTL_KERN, libc::KERN_PROCARGS2, pid];
    let mut size: libc::size_t = 0;
    let mib_len = libc::c_uint::try_from(mib.len()).ok()?;
    // SAFETY: asks for the size only (null output buffer).
    let rc = unsafe {
        libc::sysctl(mib.as_mut_ptr(), mib_len, ptr::null_mut(), &raw mut size, ptr::null_mut(), 0)
    };
    if rc != 0 {
        return None;
    }
    buffer.clear();
    buffer.resize(size, 0);
    // SAFETY: `buffer` holds `size` bytes; the kernel writes at most that and updates `size`.
    let rc = unsafe {
        libc::sysctl(mib.as_mut_ptr(), mib_len, buffer.as_mut_ptr().cast(), &raw mut size, ptr::null_mut(), 0)
    };
    if rc != 0 {
        return None;
    }
    buffer.truncate(size);
    Some(())
}
