//! The Linux fast path for creating a child: `clone(CLONE_VM | CLONE_VFORK)` with a stack prepared in the
//! parent, plus the PID-namespace init and the reaper's `waitid(P_ALL)`.
//!
//! Why `clone(CLONE_VM | CLONE_VFORK)` and not `fork`: `fork` copies the parent's page tables, so its cost
//! grows with the parent's memory (a server holding a few hundred MB pays milliseconds per spawn), and in a
//! multi-threaded parent the child may only make async-signal-safe calls anyway. Sharing the address space
//! like glibc's `posix_spawn` does costs the same for every parent, and unlike `posix_spawn` it lets the
//! [`ChildSetup`](uexec_ports::process::ChildSetup) hooks of a sandbox run in the child. On top of the rules
//! in the `sys` module doc:
//!
//! 1. The child runs on its own stack (mapped here), in the parent's memory, while the parent thread is
//!    suspended (`CLONE_VFORK`) until the child calls `execve` or exits; the failure report lives in the
//!    stack mapping.
//! 2. `errno` is the suspended parent thread's, which the parent does not read afterwards.
//! 3. With a hook that needs its own address space (`ChildSetup::requires_fork`) the same code runs in a
//!    `clone(CLONE_VFORK)` child without `CLONE_VM` (a fork whose parent still waits for the exec); the
//!    failure report then lives in a `MAP_SHARED` page so that the parent sees it.

use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use rustix::process::{Pid, WaitId, WaitIdOptions};

use super::{ChildContext, ChildFailure, ChildPlan, ParentDeath, SpawnFailure, child_main, errno_of};

/// Size of the stack the child runs on (only the touched pages cost memory).
const CHILD_STACK_SIZE: usize = 256 * 1024;

/// The size of the kernel's signal set in bytes (64 signals).
pub(super) const KERNEL_SIGSET_SIZE: usize = 8;

/// An anonymous mapping: page 0 holds the failure report, page 1 is a guard page, the rest is the stack.
struct ChildStack {
    base: *mut c_void,
    len: usize,
    shared: bool,
}

// SAFETY: a `ChildStack` exclusively owns its mapping (nothing else points into it between spawns), so it
// may be moved to, and dropped on, another thread.
unsafe impl Send for ChildStack {}

/// Private stacks kept for the next spawns: mapping and unmapping one per spawn costs syscalls and, in a
/// parent with many threads, a TLB shootdown on every CPU they ran on.
static STACK_POOL: Mutex<Vec<ChildStack>> = Mutex::new(Vec::new());

/// How many stacks the pool keeps (concurrent spawns beyond that map their own).
const STACK_POOL_SIZE: usize = 4;

impl ChildStack {
    /// A stack from the pool, or a new one.
    fn take(shared: bool) -> io::Result<Self> {
        if !shared && let Some(stack) = STACK_POOL.lock().unwrap_or_else(PoisonError::into_inner).pop() {
            return Ok(stack);
        }
        Self::new(shared)
    }

    /// Return a stack whose child has exec'd or exited to the pool.
    fn give_back(self) {
        if self.shared {
            return;
        }
        let mut pool = STACK_POOL.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < STACK_POOL_SIZE {
            pool.push(self);
        }
    }

    fn new(shared: bool) -> io::Result<Self> {
        let page = rustix::param::page_size();
        let len = CHILD_STACK_SIZE + 2 * page;
        let sharing = if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
        // SAFETY: a new anonymous mapping at an address the kernel picks; it aliases nothing.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                sharing | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base, len, shared };
        // SAFETY: page 1 lies inside the mapping created above, which nothing references yet.
        let rc = unsafe { libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_NONE) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The report slot, at the start of page 0 (page aligned, so aligned for any type).
    fn report(&self) -> *mut Option<ChildFailure> {
        self.base.cast()
    }

    /// The initial stack pointer: the end of the mapping, 16-byte aligned.
    fn top(&self) -> *mut c_void {
        let end = self.base as usize + self.len;
        (end & !15usize) as *mut c_void
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`; the child that used it has exec'd or exited
        // (vfork semantics), or has its own copy of it (fork).
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// Blocks every signal of the calling thread (including the ones glibc reserves, as `posix_spawn` does)
/// and restores the previous mask when dropped.
struct AllSignalsBlocked {
    previous: u64,
}

impl AllSignalsBlocked {
    fn new() -> io::Result<Self> {
        let all: u64 = !0;
        let mut previous: u64 = 0;
        // SAFETY: rt_sigprocmask reads and writes one 8-byte kernel sigset each, both valid locals.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &raw const all,
                &raw mut previous,
                KERNEL_SIGSET_SIZE,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(AllSignalsBlocked { previous })
    }
}

impl Drop for AllSignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new` from a valid local.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &raw const self.previous,
                ptr::null_mut::<u64>(),
                KERNEL_SIGSET_SIZE,
            );
        }
    }
}

/// Start the child described by `plan`. Returns its pid and a pidfd (close-on-exec) once it has called
/// `execve`; on failure nothing is left: the child, if one was created, has exited and been reaped.
///
/// `fork`: give the child its own address space (for hooks that require it). `parent_outside_namespace`:
/// the calling thread has unshared a PID namespace, so the child is in a namespace its parent is not in.
pub(super) fn spawn_child(
    plan: &ChildPlan<'_>,
    fork: bool,
    parent_outside_namespace: bool,
) -> Result<(Pid, OwnedFd), SpawnFailure> {
    let stack = ChildStack::take(fork).map_err(|e| SpawnFailure::Os { call: "mmap", errno: errno_of(&e) })?;
    // SAFETY: the report slot is inside the fresh mapping, aligned, and nothing else references it.
    unsafe { ptr::write_volatile(stack.report(), None) };
    let expected_parent = if parent_outside_namespace { None } else { Some(rustix::process::getpid()) };
    let context = ChildContext::new(plan, stack.report(), fork, ParentDeath::Armed { expected_parent });
    let mut flags = libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD;
    if !fork {
        flags |= libc::CLONE_VM;
    }
    let mut pidfd: c_int = -1;
    let (pid, clone_error) = {
        let _blocked = AllSignalsBlocked::new()
            .map_err(|e| SpawnFailure::Os { call: "sigprocmask", errno: errno_of(&e) })?;
        // SAFETY: `child_entry` only reads `context` (alive on this frame until clone returns, which with
        // CLONE_VFORK is after the child exec'd or exited) and follows the rules in the module doc; the stack
        // is a private mapping of CHILD_STACK_SIZE bytes with a guard page below it; with CLONE_PIDFD the
        // kernel writes the pidfd into `pidfd`.
        let pid = unsafe {
            libc::clone(
                child_entry,
                stack.top(),
                flags,
                (&raw const context).cast_mut().cast(),
                &raw mut pidfd,
            )
        };
        let error = if pid < 0 { Some(io::Error::last_os_error()) } else { None };
        (pid, error)
    };
    if let Some(error) = clone_error {
        return Err(SpawnFailure::Os { call: "clone", errno: errno_of(&error) });
    }
    // SAFETY: clone succeeded, so the kernel stored a new pidfd that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: the child has exec'd or exited (CLONE_VFORK), so nothing writes the slot any more.
    let report = unsafe { ptr::read_volatile(stack.report()) };
    let moved_to = context.moved_to();
    stack.give_back();
    let Some(pid) = Pid::from_raw(pid) else {
        return Err(SpawnFailure::Os { call: "clone", errno: libc::ESRCH });
    };
    if let Some(command) = moved_to {
        // The child created the command in another PID namespace as our child, and exited: the command is the
        // process to report (see `super::move_into_pid_namespace`).
        reap_exited(pidfd.as_fd());
        return match report {
            None => rustix::process::pidfd_open(command, rustix::process::PidfdFlags::empty())
                .map(|pidfd| (command, pidfd))
                .map_err(|errno| {
                    let _ = rustix::process::kill_process(command, rustix::process::Signal::KILL);
                    reap_pid(command);
                    SpawnFailure::Os { call: "pidfd_open", errno: errno.raw_os_error() }
                }),
            Some(failure) => {
                reap_pid(command);
                Err(SpawnFailure::Child(failure))
            }
        };
    }
    match report {
        None => Ok((pid, pidfd)),
        Some(failure) => {
            reap_exited(pidfd.as_fd());
            Err(SpawnFailure::Child(failure))
        }
    }
}

/// Reap the child `pid`, which has exited or is about to (`ECHILD`: the reaper thread did).
fn reap_pid(pid: Pid) {
    while let Err(rustix::io::Errno::INTR) =
        rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
    {}
}

/// Reap the child behind `pidfd`, which has exited or is about to.
fn reap_exited(pidfd: BorrowedFd<'_>) {
    while let Err(rustix::io::Errno::INTR) =
        rustix::process::waitid(WaitId::PidFd(pidfd), WaitIdOptions::EXITED)
    {}
}

extern "C" fn child_entry(argument: *mut c_void) -> c_int {
    // SAFETY: `argument` is the `ChildContext` on the suspended parent's frame (see `spawn_child`).
    let context = unsafe { &*argument.cast::<ChildContext<'_>>() };
    let failure = match child_main(context) {
        Err(failure) => failure,
        Ok(never) => match never {},
    };
    // SAFETY: the report slot is page 0 of the stack mapping, kept mapped by the parent until we are gone;
    // `_exit` runs no atexit handlers and touches no shared state.
    unsafe {
        ptr::write_volatile(context.report, Some(failure));
        libc::_exit(127)
    }
}

/// Make the calling thread create its future children in a new PID namespace (`unshare(CLONE_NEWPID)`).
/// Only this thread is affected: other threads keep creating threads and processes as before.
pub(crate) fn unshare_pid_namespace() -> io::Result<()> {
    // SAFETY: CLONE_NEWPID only changes the namespace of this thread's future children; it does not
    // unshare the fd table or anything other threads rely on.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWPID) }?;
    Ok(())
}

/// The PID namespaces of a spawning thread that unshared the sandbox's: its own active one (the host's), the
/// default sandbox namespace (where its children go between spawns), and any other sandbox namespace it made
/// (see [`Target`]). Before a child of another namespace it points its children's namespace
/// (`pid_for_children`) there with `setns(CLONE_NEWPID)` and back to the default one right after: entering the
/// active namespace or a child of it is what the kernel allows, and only this thread is affected.
#[derive(Debug)]
pub(crate) struct PidNamespaces {
    host: OwnedFd,
    sandbox: OwnedFd,
    /// True while this thread's children would not go to the default sandbox namespace (a switch back failed).
    displaced: AtomicBool,
    /// The pipe whose write end the host keeps open for its whole life: the inits and the watchdog wait for its
    /// end of file.
    host_alive: OwnedFd,
    host_alive_writer: OwnedFd,
    /// `UEXEC_SESSION_TOKEN=<host prefix>`, for the watchdog.
    token_entry: Vec<u8>,
    /// True once the watchdog runs (started before the first host-scope child: a host that never starts one,
    /// `uexec run` of a sandboxed command, pays nothing for it).
    watchdog: AtomicBool,
}

/// Where a child is created.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// The host's PID namespace.
    Host,
    /// The default sandbox namespace.
    DefaultSandbox,
    /// Another sandbox namespace made by [`PidNamespaces::create_sandbox`].
    Sandbox(BorrowedFd<'a>),
}

/// A sandbox PID namespace made by [`PidNamespaces::create_sandbox`]: the namespace and its init.
#[derive(Debug)]
pub(crate) struct NewNamespace {
    pub(crate) namespace: OwnedFd,
    pub(crate) init: Pid,
    pub(crate) init_pidfd: OwnedFd,
}

impl PidNamespaces {
    /// The calling thread's namespaces: `host` is its active one (opened before it unshared the sandbox's);
    /// the sandbox's is where its children go now, and needs that namespace's init to exist already.
    pub(crate) fn after_unshare(
        host: OwnedFd,
        host_alive: OwnedFd,
        host_alive_writer: OwnedFd,
        token_entry: Vec<u8>,
    ) -> io::Result<Self> {
        let sandbox = open_children_namespace()?;
        Ok(PidNamespaces {
            host,
            sandbox,
            displaced: AtomicBool::new(false),
            host_alive,
            host_alive_writer,
            token_entry,
            watchdog: AtomicBool::new(false),
        })
    }

    /// Start the host's watchdog (see [`spawn_host_watchdog`]) unless it runs; the calling thread's children go
    /// to the host's namespace.
    pub(crate) fn ensure_watchdog(&self) -> Result<(), SpawnFailure> {
        if self.watchdog.load(Ordering::Relaxed) {
            return Ok(());
        }
        spawn_host_watchdog(self.host_alive.as_fd(), self.host_alive_writer.as_fd(), &self.token_entry)
            .map_err(|e| SpawnFailure::Os { call: "clone (the host's watchdog)", errno: errno_of(&e) })?;
        self.watchdog.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The default sandbox namespace.
    pub(crate) fn default_sandbox(&self) -> BorrowedFd<'_> {
        self.sandbox.as_fd()
    }

    /// The calling thread's active PID namespace (`/proc/thread-self/ns/pid`), to keep before unsharing.
    pub(crate) fn open_active() -> io::Result<OwnedFd> {
        Ok(rustix::fs::open(
            "/proc/thread-self/ns/pid",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?)
    }

    /// Create the calling thread's next children in `target`'s namespace. Then [`Self::back_to_default`].
    pub(crate) fn enter(&self, target: Target<'_>) -> Result<(), SpawnFailure> {
        let fd = match target {
            Target::Host => self.host.as_fd(),
            Target::Sandbox(fd) => fd,
            Target::DefaultSandbox if self.displaced.load(Ordering::Relaxed) => self.sandbox.as_fd(),
            Target::DefaultSandbox => return Ok(()),
        };
        self.displaced.store(true, Ordering::Relaxed);
        set_pid_namespace(fd)?;
        if matches!(target, Target::DefaultSandbox) {
            self.displaced.store(false, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Back to the default sandbox namespace (a failure leaves the thread marked displaced: the next spawn for
    /// the default namespace enters it again, or fails).
    pub(crate) fn back_to_default(&self) {
        if set_pid_namespace(self.sandbox.as_fd()).is_ok() {
            self.displaced.store(false, Ordering::Relaxed);
        }
    }

    /// A new sandbox namespace beside the default one: from the host's namespace, unshare a PID namespace and
    /// fork its init (as for the default one: `host_alive` is the pipe the host keeps open), then open it. The
    /// thread is back in the default sandbox namespace afterwards.
    pub(crate) fn create_sandbox(&self) -> io::Result<NewNamespace> {
        let (host_alive, host_alive_writer) = (self.host_alive.as_fd(), self.host_alive_writer.as_fd());
        let to_io = |failure: SpawnFailure| match failure {
            SpawnFailure::Os { errno, .. } => io::Error::from_raw_os_error(errno),
            SpawnFailure::Child(child) => io::Error::from_raw_os_error(child.errno),
        };
        self.enter(Target::Host).map_err(to_io)?;
        let made = (|| {
            unshare_pid_namespace()?;
            let init = spawn_namespace_init(host_alive, host_alive_writer)?;
            let init_pidfd = rustix::process::pidfd_open(init, rustix::process::PidfdFlags::empty())?;
            let namespace = open_children_namespace()?;
            Ok(NewNamespace { namespace, init, init_pidfd })
        })();
        self.back_to_default();
        made
    }
}

/// `/proc/thread-self/ns/pid_for_children`: where the calling thread's children go (needs that namespace's
/// init to exist).
fn open_children_namespace() -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        "/proc/thread-self/ns/pid_for_children",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// `setns(fd, CLONE_NEWPID)`.
fn set_pid_namespace(fd: BorrowedFd<'_>) -> Result<(), SpawnFailure> {
    // SAFETY: setns with a namespace descriptor borrowed for the call and the matching type; for CLONE_NEWPID
    // it only changes the namespace of this thread's future children.
    let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWPID) };
    if rc != 0 {
        let errno = errno_of(&io::Error::last_os_error());
        return Err(SpawnFailure::Os { call: "setns(CLONE_NEWPID)", errno });
    }
    Ok(())
}

/// What the watchdog needs, copied into its own address space.
struct WatchdogContext {
    host_alive: RawFd,
    host_alive_writer: RawFd,
    /// `UEXEC_SESSION_TOKEN=<host prefix>`: the start of every session token of this host.
    entry: [u8; WATCHDOG_ENTRY_MAX],
    entry_len: usize,
}

/// Room for `UEXEC_SESSION_TOKEN=` and the host's 16 hex digits.
const WATCHDOG_ENTRY_MAX: usize = 64;

/// Fork the host's watchdog, in the calling thread's children's namespace (the host's): a process that blocks
/// every signal but SIGKILL, leaves the host's session, and waits for the end of file on `host_alive` (the
/// host keeps the write end open for its whole life, so the end of file means the host is gone, however it
/// died). It then kills, with SIGKILL, every process whose environment carries a token of this host
/// (`entry_prefix`: `UEXEC_SESSION_TOKEN=<host's 16 hex digits>`), scanning `/proc` again until a scan finds
/// none, and exits. This is what kills the processes of host-scope sessions (which do not live in the
/// sandbox's PID namespace, whose init takes everything in it along) when the host dies: a descendant that
/// cleared its environment escapes it.
pub(crate) fn spawn_host_watchdog(
    host_alive: BorrowedFd<'_>,
    host_alive_writer: BorrowedFd<'_>,
    entry_prefix: &[u8],
) -> io::Result<Pid> {
    let mut entry = [0u8; WATCHDOG_ENTRY_MAX];
    let Some(slot) = entry.get_mut(..entry_prefix.len()) else {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    };
    slot.copy_from_slice(entry_prefix);
    let context = WatchdogContext {
        host_alive: host_alive.as_raw_fd(),
        host_alive_writer: host_alive_writer.as_raw_fd(),
        entry,
        entry_len: entry_prefix.len(),
    };
    let stack = ChildStack::new(false)?;
    let pid = {
        let _blocked = AllSignalsBlocked::new()?;
        // SAFETY: as for the init: the child gets its own copy of the address space (no CLONE_VM), including
        // `context` and the stack mapping, and runs only `watchdog_entry`, which makes plain system calls on
        // buffers of its own stack.
        unsafe {
            libc::clone(watchdog_entry, stack.top(), libc::SIGCHLD, (&raw const context).cast_mut().cast())
        }
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Pid::from_raw(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
}

/// How many times the watchdog scans `/proc` at most (it stops at the first scan that kills nothing).
const WATCHDOG_SCANS: usize = 50;

extern "C" fn watchdog_entry(argument: *mut c_void) -> c_int {
    // SAFETY: our private copy of the parent's `WatchdogContext` (see `spawn_host_watchdog`).
    let context = unsafe { &*argument.cast::<WatchdogContext>() };
    let entry = context.entry.get(..context.entry_len).unwrap_or_default();
    let name = c"uexec-watchdog";
    replace_arguments(name.to_bytes());
    // SAFETY: plain system calls on values of this process: name it, leave the host's session (a terminal's
    // hang-up or ^C must not reach it; every signal but SIGKILL stays blocked anyway, as inherited), drop the
    // copy of the pipe's write end and every fd but the read end.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        libc::setsid();
        libc::close(context.host_alive_writer);
        let keep = context.host_alive as u32;
        if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
    }
    let mut byte = [0u8; 1];
    loop {
        // SAFETY: reads into a local one-byte buffer.
        let n = unsafe { libc::read(context.host_alive, byte.as_mut_ptr().cast(), 1) };
        if n == 0 || (n < 0 && errno_now() != libc::EINTR) {
            break;
        }
    }
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    for _ in 0..WATCHDOG_SCANS {
        if !kill_carriers(entry, me) {
            break;
        }
        let pause = libc::timespec { tv_sec: 0, tv_nsec: 5_000_000 };
        // SAFETY: sleeps on a valid timespec; the remainder pointer may be null.
        unsafe { libc::nanosleep(&raw const pause, ptr::null_mut()) };
    }
    // SAFETY: `_exit` runs no atexit handlers.
    unsafe { libc::_exit(0) }
}

/// Overwrite this process's command line (what `/proc/<pid>/cmdline`, `ps` and `pgrep -f` show) with `name`
/// alone (followed by NULs up to the area's old end). A process forked from the host without `exec` (the inits, the watchdog) would otherwise show the
/// host's arguments, to the sandboxed commands that share a namespace with an init among others. Only this
/// process's copy of the memory changes. Best effort: nothing is written unless `/proc/self/stat` names the
/// area.
fn replace_arguments(name: &[u8]) {
    let mut stat = [0u8; 2048];
    // SAFETY: open and read of a static path into a local buffer, then close.
    let n = unsafe {
        let fd = libc::open(c"/proc/self/stat".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return;
        }
        let n = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        n
    };
    let Ok(n) = usize::try_from(n) else { return };
    let stat = stat.get(..n).unwrap_or_default();
    // Fields after the command name (which may hold spaces and parentheses): the last ')' ends it. From there
    // `arg_start` and `arg_end` are fields 48 and 49 of the line, the 46th and 47th after the ')'.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else { return };
    let mut fields =
        stat.get(close + 1..).unwrap_or_default().split(|&b| b == b' ').filter(|f| !f.is_empty());
    let (Some(start), Some(end)) =
        (fields.nth(45).and_then(parse_address), fields.next().and_then(parse_address))
    else {
        return;
    };
    let Some(length) = end.checked_sub(start).filter(|&len| len > name.len() && len < 1 << 20) else {
        return;
    };
    // SAFETY: [arg_start, arg_end) is this process's argument area, mapped and writable (the initial stack);
    // only this process's private copy of it is written, within its bounds (`length` > the name).
    unsafe {
        let area = start as *mut u8;
        ptr::write_bytes(area, 0, length);
        ptr::copy_nonoverlapping(name.as_ptr(), area, name.len());
    }
}

/// A decimal address from `/proc/self/stat`.
fn parse_address(field: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(field).ok()?;
    text.trim().parse().ok()
}

/// The calling thread's `errno`.
fn errno_now() -> c_int {
    // SAFETY: `__errno_location` returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// One scan of `/proc`: SIGKILL to every process (other than `me`) whose environment has an entry starting
/// with `entry`. True when it killed one.
fn kill_carriers(entry: &[u8], me: c_int) -> bool {
    // SAFETY: open on a static NUL-terminated path.
    let dir = unsafe { libc::open(c"/proc".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if dir < 0 {
        return false;
    }
    let mut killed = false;
    let mut entries = [0u8; 8192];
    loop {
        // SAFETY: getdents64 fills the local buffer with at most its length.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, entries.as_mut_ptr(), entries.len()) };
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        let mut at = 0;
        // A `linux_dirent64`: inode (8), offset (8), record length (2), type (1), then the NUL-terminated name.
        while let Some(record) = entries.get(at..n.min(entries.len())) {
            let Some(&[low, high]) = record.get(16..18) else { break };
            let length = usize::from(u16::from_ne_bytes([low, high]));
            if length == 0 {
                break;
            }
            let name = record.get(19..length.min(record.len())).unwrap_or_default();
            let name = name.split(|&b| b == 0).next().unwrap_or_default();
            if let Some(pid) = parse_pid(name)
                && pid != me
                && environ_has(name, entry)
            {
                // SAFETY: kill with a plain pid and signal.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                killed = true;
            }
            at += length;
        }
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(dir) };
    killed
}

/// A `/proc` entry's name as a pid (`None` for the other entries).
fn parse_pid(name: &[u8]) -> Option<c_int> {
    if name.is_empty() || name.len() > 10 {
        return None;
    }
    let mut pid: c_int = 0;
    for &digit in name {
        if !digit.is_ascii_digit() {
            return None;
        }
        pid = pid.checked_mul(10)?.checked_add(c_int::from(digit - b'0'))?;
    }
    (pid > 0).then_some(pid)
}

/// Whether `/proc/<pid>/environ` has an entry starting with `entry` (streamed through a stack buffer).
fn environ_has(pid: &[u8], entry: &[u8]) -> bool {
    let mut path = [0u8; 32];
    let parts: [&[u8]; 3] = [b"/proc/", pid, b"/environ"];
    let mut len = 0;
    for part in parts {
        let Some(slot) = path.get_mut(len..len + part.len()) else { return false };
        slot.copy_from_slice(part);
        len += part.len();
    }
    // `path[len]` is still 0: the terminator (the buffer holds 6 + 10 + 8 bytes at most).
    // SAFETY: open on the NUL-terminated path built above.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut matcher = EntryMatcher::new(entry);
    let mut buffer = [0u8; 4096];
    let found = loop {
        // SAFETY: reads into the local buffer, at most its length.
        let n = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        let Ok(n) = usize::try_from(n) else { break false };
        if n == 0 {
            break false;
        }
        if matcher.feed(buffer.get(..n).unwrap_or_default()) {
            break true;
        }
    };
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    found
}

/// Finds an entry of a NUL-separated list that starts with `entry`, fed in pieces.
struct EntryMatcher<'a> {
    entry: &'a [u8],
    /// How much of `entry` the current list entry has matched so far; `None` once it differs.
    matched: Option<usize>,
}

impl<'a> EntryMatcher<'a> {
    fn new(entry: &'a [u8]) -> Self {
        EntryMatcher { entry, matched: Some(0) }
    }

    /// Feed the next bytes; true once an entry started with `entry`.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        for &byte in bytes {
            if byte == 0 {
                self.matched = Some(0);
                continue;
            }
            if let Some(k) = self.matched {
                if self.entry.get(k) == Some(&byte) {
                    if k + 1 == self.entry.len() {
                        return true;
                    }
                    self.matched = Some(k + 1);
                } else {
                    self.matched = None;
                }
            }
        }
        false
    }
}

struct InitContext {
    host_alive: RawFd,
    host_alive_writer: RawFd,
}

/// Fork the init process of the PID namespace the calling thread has unshared: it becomes PID 1 of the
/// namespace, gets SIGKILL when this thread dies (and then the kernel kills everything in the namespace),
/// and reaps the orphans that are reparented to it. `host_alive` is the read end of a pipe whose write end
/// (`host_alive_writer`) the host keeps open for its whole life: the init watches it for as long as it runs and
/// exits at its end of file, so a host that died before the parent-death signal was armed takes the namespace
/// along too.
pub(crate) fn spawn_namespace_init(
    host_alive: BorrowedFd<'_>,
    host_alive_writer: BorrowedFd<'_>,
) -> io::Result<Pid> {
    let stack = ChildStack::new(false)?;
    let context =
        InitContext { host_alive: host_alive.as_raw_fd(), host_alive_writer: host_alive_writer.as_raw_fd() };
    let pid = {
        let _blocked = AllSignalsBlocked::new()?;
        // SAFETY: the child gets its own copy of the address space (no CLONE_VM), including `context` and
        // the stack mapping, and runs only `init_entry`, which makes plain system calls. The parent unmaps its
        // copy of the stack when `stack` drops; the child's copy is unaffected.
        unsafe { libc::clone(init_entry, stack.top(), libc::SIGCHLD, (&raw const context).cast_mut().cast()) }
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Pid::from_raw(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
}

extern "C" fn init_entry(argument: *mut c_void) -> c_int {
    // SAFETY: our private copy of the parent's `InitContext` (see `spawn_namespace_init`).
    let context = unsafe { &*argument.cast::<InitContext>() };
    let name = c"uexec-init";
    replace_arguments(name.to_bytes());
    // SAFETY: plain system calls on values of this process: name the process, arm the parent-death signal,
    // drop the copy of the pipe's write end, close every fd but the pipe's read end.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            libc::_exit(1);
        }
        libc::close(context.host_alive_writer);
        let keep = context.host_alive as u32;
        if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
    }
    // SAFETY: an empty sigset plus SIGCHLD, built in a local; every signal stays blocked (as inherited from
    // the parent) and SIGCHLD is only consumed through the signalfd.
    let mut child_signal: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `child_signal` is a valid sigset_t; signalfd reads it and returns a new descriptor or -1.
    let signals = unsafe {
        libc::sigemptyset(&raw mut child_signal);
        libc::sigaddset(&raw mut child_signal, libc::SIGCHLD);
        libc::signalfd(-1, &raw const child_signal, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
    };
    // The host's end of the pipe is watched for good, not only once: the parent-death signal misses a host
    // that died before it was armed, and a check right then misses it too while another of the host's
    // children (one being spawned, another init) still held a copy of the write end. The end of file comes
    // once every copy is gone, and then this init exits, taking the namespace with it. Without the signalfd
    // (it cannot fail short of a descriptor limit) the loop wakes every 100 ms instead.
    let timeout = if signals < 0 { 100 } else { -1 };
    let mut drained = [0u8; 1024];
    loop {
        // SAFETY: reaps any exited child of ours (orphans of the namespace are reparented to us).
        while unsafe { libc::waitpid(-1, ptr::null_mut(), libc::WNOHANG) } > 0 {}
        let mut watched = [
            libc::pollfd { fd: context.host_alive, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: signals, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: poll on a local array of two pollfds (a negative fd is ignored).
        let ready = unsafe { libc::poll(watched.as_mut_ptr(), 2, timeout) };
        if ready < 0 && errno_now() != libc::EINTR {
            // SAFETY: `_exit` runs no atexit handlers.
            unsafe { libc::_exit(1) }
        }
        if watched[0].revents != 0 {
            // Readable or hung up: nobody writes to it, so every copy of the write end is gone: the host died.
            // SAFETY: `_exit` runs no atexit handlers.
            unsafe { libc::_exit(0) }
        }
        if watched[1].revents != 0 {
            // SAFETY: reads queued signal records into a local buffer (non-blocking).
            while unsafe { libc::read(signals, drained.as_mut_ptr().cast(), drained.len()) } > 0 {}
        }
    }
}

/// Block until some child of this process has exited and return its pid, without reaping it
/// (`waitid(P_ALL, WEXITED | WNOWAIT)`). `Ok(None)`: no children at all (`ECHILD`).
pub(crate) fn wait_any_exited_nowait() -> io::Result<Option<Pid>> {
    loop {
        // SAFETY: an all-zero siginfo_t is valid; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid siginfo_t for waitid to fill.
        let rc = unsafe { libc::waitid(libc::P_ALL, 0, &raw mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 {
            // SAFETY: waitid succeeded with WEXITED, so the siginfo holds a child's SIGCHLD data.
            let pid = unsafe { info.si_pid() };
            return Ok(Pid::from_raw(pid));
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECHILD) => return Ok(None),
            _ => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_matcher_finds_an_entry_at_any_position_and_across_pieces() {
        let entry = b"UEXEC_SESSION_TOKEN=0123";
        let list = b"A=1\0UEXEC_SESSION_TOKEN=0123abcd\0B=2\0";
        assert!(EntryMatcher::new(entry).feed(list));
        for cut in 0..list.len() {
            let mut matcher = EntryMatcher::new(entry);
            let (head, tail) = list.split_at(cut);
            assert!(matcher.feed(head) || matcher.feed(tail), "cut at {cut}");
        }
        assert!(EntryMatcher::new(entry).feed(b"UEXEC_SESSION_TOKEN=0123"));
        assert!(!EntryMatcher::new(entry).feed(b"X_UEXEC_SESSION_TOKEN=0123\0"));
        assert!(!EntryMatcher::new(entry).feed(b"A=UEXEC_SESSION_TOKEN=0123\0"));
        assert!(!EntryMatcher::new(entry).feed(b"UEXEC_SESSION_TOKEN=0124\0UEXEC_SESSION_TOKEN=012"));
        assert!(!EntryMatcher::new(entry).feed(b""));
    }

    #[test]
    fn parse_pid_takes_positive_decimal_numbers_only() {
        assert_eq!(parse_pid(b"1"), Some(1));
        assert_eq!(parse_pid(b"4194304"), Some(4_194_304));
        for name in [&b""[..], b"0", b"self", b"12a", b"-1", b"99999999999"] {
            assert_eq!(parse_pid(name), None, "{name:?}");
        }
    }
}
