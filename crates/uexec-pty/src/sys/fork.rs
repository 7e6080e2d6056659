//! The portable way to create a child: `fork`, then the common child code up to `execve`.
//!
//! The child reports a failing step in a `MAP_SHARED` page (its memory is a copy: a report in its own pages
//! would never reach the parent). The parent learns that the child is done (exec'd or exited) from a
//! close-on-exec pipe: the child holds the write end until `execve` closes it or the child exits.

use std::io;
use std::os::fd::AsFd;
use std::ptr;

use libc::c_void;
use rustix::process::{Pid, WaitOptions};

use super::{ChildContext, ChildFailure, ChildPlan, ParentDeath, SpawnFailure, child_main, errno_of};

/// One anonymous shared page holding the child's failure report.
struct ReportPage {
    base: *mut c_void,
    len: usize,
}

impl ReportPage {
    fn new() -> io::Result<Self> {
        let len = rustix::param::page_size();
        // SAFETY: a new anonymous shared mapping at an address the kernel picks; it aliases nothing.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(ReportPage { base, len })
    }

    /// The report slot, at the start of the page (page aligned, so aligned for any type).
    fn report(&self) -> *mut Option<ChildFailure> {
        self.base.cast()
    }
}

impl Drop for ReportPage {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`; the child has its own mapping of the page.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// Blocks every signal of the calling thread and restores the previous mask when dropped.
struct SignalsBlocked {
    previous: libc::sigset_t,
}

impl SignalsBlocked {
    fn new() -> io::Result<Self> {
        // SAFETY: all-zero sigset_t values are valid storage; sigfillset initialises `all`, and
        // pthread_sigmask reads `all` and writes `previous`, both valid locals.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&raw mut all);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut previous);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(SignalsBlocked { previous })
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new` from a valid field.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &raw const self.previous, ptr::null_mut());
        }
    }
}

/// Start the child described by `plan` with `fork`. Returns its pid once it has called `execve`; on failure
/// the child, if one was created, has exited and been reaped.
pub(super) fn spawn_child(plan: &ChildPlan<'_>) -> Result<Pid, SpawnFailure> {
    let os = |call: &'static str| move |error: io::Error| SpawnFailure::Os { call, errno: errno_of(&error) };
    let page = ReportPage::new().map_err(os("mmap"))?;
    // SAFETY: the report slot is inside the fresh mapping, aligned, and nothing else references it.
    unsafe { ptr::write_volatile(page.report(), None) };
    // The portable core arms no parent-death signal, on Linux either: it runs what macOS runs.
    let context = ChildContext::new(plan, page.report(), true, ParentDeath::NotArmed);
    let (done_reader, done_writer) = super::pipe_cloexec().map_err(os("pipe"))?;
    let blocked = SignalsBlocked::new().map_err(os("pthread_sigmask"))?;
    // SAFETY: the child runs only `child_main` and `_exit`, which follow the rules in the module doc of `sys`
    // (async-signal-safe calls on data prepared here); the parent continues normally.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let failure = match child_main(&context) {
            Err(failure) => failure,
            Ok(never) => match never {},
        };
        // SAFETY: the report slot is in the shared page, mapped in the child too; `_exit` runs no atexit
        // handlers and touches no shared state.
        unsafe {
            ptr::write_volatile(context.report, Some(failure));
            libc::_exit(127)
        }
    }
    let fork_error = (pid < 0).then(io::Error::last_os_error);
    drop(blocked);
    drop(done_writer);
    if let Some(error) = fork_error {
        return Err(SpawnFailure::Os { call: "fork", errno: errno_of(&error) });
    }
    let Some(pid) = Pid::from_raw(pid) else {
        return Err(SpawnFailure::Os { call: "fork", errno: libc::ESRCH });
    };
    // The write end closes when the child execs or exits: then the report is final.
    let waited = super::wait_for_eof(done_reader.as_fd());
    // SAFETY: the child has exec'd or exited (or the read failed, and then the report is not trusted below).
    let report = unsafe { ptr::read_volatile(page.report()) };
    // The child created the command in another PID namespace as our child, and exited: the command is the
    // process to report (see `super::move_into_pid_namespace`).
    let pid = match (&waited, context.moved_to()) {
        (Ok(()), Some(command)) => {
            reap(pid);
            command
        }
        _ => pid,
    };
    match (waited, report) {
        (Ok(()), None) => Ok(pid),
        (Ok(()), Some(failure)) => {
            reap(pid);
            Err(SpawnFailure::Child(failure))
        }
        (Err(error), _) => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            reap(pid);
            Err(SpawnFailure::Os { call: "read", errno: errno_of(&error) })
        }
    }
}

/// Reap the child `pid`, which has exited or is about to.
fn reap(pid: Pid) {
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Err(rustix::io::Errno::INTR) => {}
            _ => return,
        }
    }
}
