//! The unsafe core: the code that runs in a new child up to `execve`, the two ways of creating that child
//! (the Linux `clone` fast path in `clone`, the portable `fork` in `fork`), the platform calls without a safe
//! API (the Linux PID-namespace init and reaper `waitid`, macOS `kqueue` and `libproc`), and handing file
//! descriptors to tokio's reactor.
//!
//! The rules for the code that runs in the child, whichever way it was created:
//!
//! 1. It only reads data the parent prepared (C strings, pointer arrays, fds) and writes two things: the
//!    failure report in a page the parent reads afterwards, and (after setup hooks) its namespaces on a
//!    socket the parent reads once it has exec'd.
//! 2. It never allocates, never takes a lock, never panics, never touches thread-locals other than `errno`
//!    (the parent is multi-threaded: another thread may hold any lock, and with `CLONE_VM` the memory is the
//!    parent's own).
//! 3. All signals are blocked from before the child is created until it has reset every disposition to the
//!    default, so no handler of the parent ever runs in the child.
#![allow(
    unsafe_code,
    reason = "fork, clone, execve, signal masks, kqueue, libproc and the code running in the new child have no safe API"
)]

#[cfg(target_os = "linux")]
mod clone;
mod fork;
#[cfg(target_os = "macos")]
mod macos;

use std::convert::Infallible;
use std::ffi::{CStr, CString, c_char, c_int};
use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::AsFd;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::{Arc, mpsc};

use rustix::process::Pid;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use uexec_ports::process::{ChildSetup, PidScope};

use crate::error::errno_of;

#[cfg(target_os = "linux")]
pub(crate) use clone::{
    NewNamespace, PidNamespaces, Target, spawn_host_watchdog, spawn_namespace_init, unshare_pid_namespace,
    wait_any_exited_nowait,
};
#[cfg(target_os = "macos")]
pub(crate) use macos::{all_pids, bsd_info, drain_kqueue, kqueue_for_exit, process_arguments};

/// How a session's processes are created and watched: the Linux fast path or the portable POSIX core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `clone(CLONE_VM | CLONE_VFORK)`, pidfds, the parent-death signal, input-wait detection.
    #[cfg(target_os = "linux")]
    Linux,
    /// `fork` and `execve`, `waitpid`, exit seen through `SIGCHLD` (`kqueue` on macOS), signals by pid.
    Portable,
}

/// A list of C strings plus the null-terminated pointer array `execve` wants.
pub(crate) struct CStringArray {
    /// Owns the bytes the pointers point to (moving the `Vec` does not move them).
    _strings: Vec<CString>,
    pointers: Vec<*const c_char>,
}

impl CStringArray {
    /// Build the pointer array for `strings`.
    pub(crate) fn new(strings: Vec<CString>) -> Self {
        let mut pointers: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        pointers.push(ptr::null());
        CStringArray { _strings: strings, pointers }
    }

    fn as_ptr(&self) -> *const *const c_char {
        self.pointers.as_ptr()
    }
}

/// The step of the child's setup that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildStage {
    /// `setsid`.
    Setsid,
    /// `dup2` of the standard streams.
    Stdio,
    /// `ioctl(TIOCSCTTY)`.
    ControllingTerminal,
    /// `chdir`.
    Chdir,
    /// `prctl(PR_SET_PDEATHSIG)`.
    #[cfg(target_os = "linux")]
    ParentDeathSignal,
    /// The parent died before the parent-death signal was armed.
    #[cfg(target_os = "linux")]
    ParentGone,
    /// Marking the inherited fds close-on-exec.
    CloseFds,
    /// A [`ChildSetup`] hook, with the stage it named.
    Setup(&'static str),
    /// Creating the command in the PID namespace a hook pointed the child's children at
    /// (`ChildSetup::enter_pid_namespace`).
    PidNamespace,
    /// `execve`.
    Exec,
}

impl ChildStage {
    /// The call that failed, as the error reports it.
    pub(crate) fn call(self) -> &'static str {
        match self {
            ChildStage::Setsid => "setsid",
            ChildStage::Stdio => "dup2",
            ChildStage::ControllingTerminal => "ioctl(TIOCSCTTY)",
            ChildStage::Chdir => "chdir",
            #[cfg(target_os = "linux")]
            ChildStage::ParentDeathSignal => "prctl(PR_SET_PDEATHSIG)",
            #[cfg(target_os = "linux")]
            ChildStage::ParentGone => "getppid",
            ChildStage::CloseFds => "fcntl(FD_CLOEXEC)",
            ChildStage::Setup(stage) => stage,
            ChildStage::PidNamespace => "clone(CLONE_PARENT) into the command's PID namespace",
            ChildStage::Exec => "execve",
        }
    }
}

/// A failure in the child before `execve` took over: the stage and the errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChildFailure {
    pub(crate) stage: ChildStage,
    pub(crate) errno: i32,
}

/// How the child's standard streams are connected. The fds are all `>= 3` (see [`fd_at_least_3`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ChildStdio<'a> {
    /// The PTY slave becomes fds 0, 1, 2 and the controlling terminal.
    Pty { slave: BorrowedFd<'a> },
    /// `stdin` becomes fd 0, `output` fds 1 and 2.
    Pipes { stdin: BorrowedFd<'a>, output: BorrowedFd<'a> },
    /// Fds 0, 1 and 2 stay the parent's own (the child's copy of the fd table has them already); only their
    /// close-on-exec flag is cleared. One that the parent has closed stays closed.
    Inherit,
}

/// Everything the child needs, prepared by the parent.
pub(crate) struct ChildPlan<'a> {
    pub(crate) program: &'a CStr,
    pub(crate) argv: &'a CStringArray,
    pub(crate) envp: &'a CStringArray,
    pub(crate) cwd: &'a CStr,
    pub(crate) stdio: ChildStdio<'a>,
    pub(crate) setup: &'a [Arc<dyn ChildSetup>],
    /// Where the child sends its UTS and mount namespaces once the hooks ran (set by [`spawn_child`]; Linux
    /// only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) namespace_report: Option<BorrowedFd<'a>>,
}

/// Why [`spawn_child`] failed. Either way no child is left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpawnFailure {
    /// A call in the parent failed.
    Os { call: &'static str, errno: i32 },
    /// The child failed before `execve` succeeded (it has been reaped).
    Child(ChildFailure),
}

/// A child that has called `execve`: its pid, on the Linux fast path a pidfd (close-on-exec), and on Linux
/// pins of the namespaces that can mark it as a sandboxed command's (its `ns/uts` and `ns/mnt`, which the
/// child itself opens after its setup hooks and sends to the parent before `execve`: a command that exits at
/// once has no namespace to read later, while a daemon it left may still live in it).
#[derive(Debug)]
pub(crate) struct Spawned {
    pub(crate) pid: Pid,
    pub(crate) pidfd: Option<OwnedFd>,
    pub(crate) namespaces: NamespacePins,
}

/// See [`Spawned`]: the child's UTS and mount namespaces, where they could be opened (Linux only).
#[derive(Debug, Default)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct NamespacePins {
    pub(crate) uts: Option<OwnedFd>,
    pub(crate) mnt: Option<OwnedFd>,
}

/// Whether the child arms a parent-death signal (Linux only: no portable equivalent exists).
#[derive(Debug, Clone, Copy)]
enum ParentDeath {
    /// `PR_SET_PDEATHSIG(SIGKILL)`, then check that `getppid()` still returns `expected_parent` (`None`: the
    /// parent is outside the child's PID namespace, where `getppid` returns 0).
    #[cfg(target_os = "linux")]
    Armed { expected_parent: Option<Pid> },
    /// Nothing: the child outlives a SIGKILL of its parent.
    NotArmed,
}

/// What the child reads: the plan plus what the parent prepared for the signal reset and the report.
struct ChildContext<'a> {
    plan: &'a ChildPlan<'a>,
    report: *mut Option<ChildFailure>,
    /// Where a child that created the command in another PID namespace (`ChildSetup::enter_pid_namespace`)
    /// writes the command's pid (as the parent sees it) before it exits: [`MOVED_OFFSET`] bytes into the
    /// report's page, shared with the parent. 0 when the child is the command.
    moved_to: *mut i32,
    /// True when the child has an address space of its own (a fork), false when it shares the spawner's.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    own_memory: bool,
    parent_death: ParentDeath,
    default_action: libc::sigaction,
}

/// Where [`ChildContext::moved_to`] lies in the report's page (the report is at its start, and smaller).
const MOVED_OFFSET: usize = 64;

impl<'a> ChildContext<'a> {
    /// `report` is the start of a page shared with the child (or of its address space).
    fn new(
        plan: &'a ChildPlan<'a>,
        report: *mut Option<ChildFailure>,
        own_memory: bool,
        parent_death: ParentDeath,
    ) -> Self {
        const { assert!(size_of::<Option<ChildFailure>>() <= MOVED_OFFSET) };
        // SAFETY: an all-zero `sigaction` is a valid value: handler SIG_DFL (0), empty mask, no flags.
        let mut default_action: libc::sigaction = unsafe { std::mem::zeroed() };
        default_action.sa_sigaction = libc::SIG_DFL;
        let moved_to = report.cast::<u8>().wrapping_add(MOVED_OFFSET).cast::<i32>();
        // SAFETY: the report's page is at least MOVED_OFFSET + 4 bytes long, aligned, and nothing reads it yet.
        unsafe { ptr::write_volatile(moved_to, 0) };
        ChildContext { plan, report, moved_to, own_memory, parent_death, default_action }
    }

    /// The pid of the command, when the child created it in another PID namespace and exited (read by the
    /// parent once the child has exec'd or exited).
    fn moved_to(&self) -> Option<Pid> {
        // SAFETY: the slot lies in the report's page, written by the child only before it exited.
        Pid::from_raw(unsafe { ptr::read_volatile(self.moved_to) })
    }
}

/// The highest signal number whose disposition the child resets.
#[cfg(target_os = "linux")]
const LAST_SIGNAL: c_int = 64;
#[cfg(not(target_os = "linux"))]
const LAST_SIGNAL: c_int = 31;

/// Start the child described by `plan` with `backend`. Returns once it has called `execve`; on failure nothing
/// is left: the child, if one was created, has exited and been reaped.
///
/// `fork`: give the child its own address space (for hooks that require it; the portable core always does).
/// `outside_namespace`: the calling thread has unshared a PID namespace, so the child is in a namespace its
/// parent is not in.
pub(crate) fn spawn_child(
    plan: &ChildPlan<'_>,
    backend: Backend,
    fork: bool,
    outside_namespace: bool,
) -> Result<Spawned, SpawnFailure> {
    let _ = (fork, outside_namespace);
    // Without setup hooks the child runs in the spawner's namespaces (only a hook, such as a sandbox's, gives it
    // others before `exec`): nothing to pin. With hooks, the child reports its namespaces on a socket.
    #[cfg(target_os = "linux")]
    let report = match plan.setup.is_empty() {
        true => None,
        false => Some(namespace_socket().map_err(os("socketpair"))?),
    };
    #[cfg(target_os = "linux")]
    let plan = &ChildPlan {
        namespace_report: report.as_ref().map(|(_, child_end)| child_end.as_fd()),
        program: plan.program,
        argv: plan.argv,
        envp: plan.envp,
        cwd: plan.cwd,
        stdio: plan.stdio,
        setup: plan.setup,
    };
    let (pid, pidfd) = match backend {
        #[cfg(target_os = "linux")]
        Backend::Linux => {
            clone::spawn_child(plan, fork, outside_namespace).map(|(pid, pidfd)| (pid, Some(pidfd)))?
        }
        Backend::Portable => (fork::spawn_child(plan)?, None),
    };
    #[cfg(target_os = "linux")]
    let namespaces = match report {
        None => NamespacePins::default(),
        Some((ours, _)) => receive_namespaces(ours.as_fd()).unwrap_or_else(|| {
            // The child could not send them (no procfs of its own namespace): read them now. The child is
            // unreaped and not yet registered (the reaper thread, if any, waits for the leaders table the
            // spawning thread holds), so `pid` still names it, exited or not.
            let open = |kind: &str| {
                rustix::fs::open(
                    format!("/proc/{}/ns/{kind}", pid.as_raw_nonzero()).as_str(),
                    rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .ok()
            };
            NamespacePins { uts: open("uts"), mnt: open("mnt") }
        }),
    };
    #[cfg(not(target_os = "linux"))]
    let namespaces = NamespacePins::default();
    Ok(Spawned { pid, pidfd, namespaces })
}

/// A close-on-exec datagram socket pair: the parent's end and the child's.
#[cfg(target_os = "linux")]
fn namespace_socket() -> Result<(OwnedFd, OwnedFd), rustix::io::Errno> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};
    socketpair(AddressFamily::UNIX, SocketType::DGRAM, SocketFlags::CLOEXEC, None)
}

#[cfg(target_os = "linux")]
fn os(call: &'static str) -> impl Fn(rustix::io::Errno) -> SpawnFailure {
    move |errno| SpawnFailure::Os { call, errno: errno.raw_os_error() }
}

/// In the child, after the hooks: open its own UTS and mount namespaces and send them on `socket`. Nothing is
/// allocated (the paths are literals, the control buffer is on the stack); a failure sends nothing, and the
/// parent then reads the namespaces from `/proc/<pid>` itself.
#[cfg(target_os = "linux")]
fn send_namespaces(socket: BorrowedFd<'_>) {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let open = |path: &CStr| {
        rustix::fs::open(
            path,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
    };
    let (Ok(uts), Ok(mnt)) = (open(c"/proc/self/ns/uts"), open(c"/proc/self/ns/mnt")) else { return };
    let fds = [uts.as_fd(), mnt.as_fd()];
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if control.push(SendAncillaryMessage::ScmRights(&fds)) {
        let _ = sendmsg(socket, &[io::IoSlice::new(b"n")], &mut control, SendFlags::empty());
    }
}

/// In the parent, once the child has exec'd or exited: the namespaces it sent, if it sent them.
#[cfg(target_os = "linux")]
fn receive_namespaces(socket: BorrowedFd<'_>) -> Option<NamespacePins> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let flags = RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC;
    recvmsg(socket, &mut [io::IoSliceMut::new(&mut byte)], &mut control, flags).ok()?;
    let mut received: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            received.extend(fds);
        }
    }
    let mut received = received.into_iter();
    match (received.next(), received.next()) {
        (Some(uts), Some(mnt)) => Some(NamespacePins { uts: Some(uts), mnt: Some(mnt) }),
        _ => None,
    }
}

fn fail(stage: ChildStage) -> impl Fn(rustix::io::Errno) -> ChildFailure {
    move |errno| ChildFailure { stage, errno: errno.raw_os_error() }
}

/// The child, between its creation and `execve`. Only returns on failure.
fn child_main(context: &ChildContext<'_>) -> Result<Infallible, ChildFailure> {
    let plan = context.plan;
    for signal in 1..=LAST_SIGNAL {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installs SIG_DFL from a valid `sigaction`; this child has its own handler table (no
        // CLONE_SIGHAND). Errors (glibc's reserved signals) are irrelevant: exec resets handlers anyway.
        unsafe {
            libc::sigaction(signal, &raw const context.default_action, ptr::null_mut());
        }
    }
    let mut moved = false;
    for hook in plan.setup {
        moved |= hook.enter_pid_namespace().map_err(|failure| ChildFailure {
            stage: ChildStage::Setup(failure.stage),
            errno: failure.errno,
        })?;
    }
    if moved {
        return move_into_pid_namespace(context);
    }
    child_rest(context, context.parent_death)
}

/// The rest of the child's work, in the process that becomes the command (the child, or the process it
/// created in another PID namespace). Only returns on failure.
fn child_rest(context: &ChildContext<'_>, parent_death: ParentDeath) -> Result<Infallible, ChildFailure> {
    let plan = context.plan;
    rustix::process::setsid().map_err(fail(ChildStage::Setsid))?;
    match plan.stdio {
        ChildStdio::Pty { slave } => {
            rustix::stdio::dup2_stdin(slave).map_err(fail(ChildStage::Stdio))?;
            rustix::stdio::dup2_stdout(slave).map_err(fail(ChildStage::Stdio))?;
            rustix::stdio::dup2_stderr(slave).map_err(fail(ChildStage::Stdio))?;
            rustix::process::ioctl_tiocsctty(slave).map_err(fail(ChildStage::ControllingTerminal))?;
        }
        ChildStdio::Pipes { stdin, output } => {
            rustix::stdio::dup2_stdin(stdin).map_err(fail(ChildStage::Stdio))?;
            rustix::stdio::dup2_stdout(output).map_err(fail(ChildStage::Stdio))?;
            rustix::stdio::dup2_stderr(output).map_err(fail(ChildStage::Stdio))?;
        }
        ChildStdio::Inherit => {
            for fd in [rustix::stdio::stdin(), rustix::stdio::stdout(), rustix::stdio::stderr()] {
                match rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()) {
                    Ok(()) | Err(rustix::io::Errno::BADF) => {}
                    Err(errno) => return Err(fail(ChildStage::Stdio)(errno)),
                }
            }
        }
    }
    rustix::process::chdir(plan.cwd).map_err(fail(ChildStage::Chdir))?;
    match parent_death {
        #[cfg(target_os = "linux")]
        ParentDeath::Armed { expected_parent } => {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(fail(ChildStage::ParentDeathSignal))?;
            if rustix::process::getppid() != expected_parent {
                return Err(ChildFailure { stage: ChildStage::ParentGone, errno: libc::ESRCH });
            }
        }
        ParentDeath::NotArmed => {}
    }
    mark_fds_cloexec_from(3).map_err(fail(ChildStage::CloseFds))?;
    for hook in plan.setup {
        hook.run_in_child().map_err(|failure| ChildFailure {
            stage: ChildStage::Setup(failure.stage),
            errno: failure.errno,
        })?;
    }
    #[cfg(target_os = "linux")]
    if let Some(socket) = plan.namespace_report {
        send_namespaces(socket);
    }
    unblock_all_signals();
    // SAFETY: program, argv and envp are NUL-terminated strings and null-terminated pointer arrays that
    // the parent keeps alive until we exec or exit.
    unsafe {
        libc::execve(plan.program.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr());
    }
    let errno = io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOEXEC);
    Err(ChildFailure { stage: ChildStage::Exec, errno })
}

/// The child has pointed its children at another PID namespace (`ChildSetup::enter_pid_namespace`): it creates
/// the command there as the spawner's other child (`clone(CLONE_PARENT | CLONE_VFORK)`, a copy of this address
/// space on a stack of its own: this child's stack may be shared with the spawner), waits until the command has
/// exec'd or failed (its failure goes to the report slot), writes the command's pid where the spawner reads it
/// and exits. Before `setsid`, so that the command leads its own session and this child leaves no session or
/// terminal behind. Only returns on failure.
#[cfg(target_os = "linux")]
fn move_into_pid_namespace(context: &ChildContext<'_>) -> Result<Infallible, ChildFailure> {
    let failed = |errno: Option<i32>| ChildFailure {
        stage: ChildStage::PidNamespace,
        errno: errno.unwrap_or(libc::EIO),
    };
    if !context.own_memory {
        // The command would be created from memory the spawner shares: a hook that moves it must ask for a fork.
        return Err(failed(Some(libc::EINVAL)));
    }
    const STACK: usize = 256 * 1024;
    // SAFETY: a new private anonymous mapping at an address the kernel picks (this child's own address space).
    let stack = unsafe {
        libc::mmap(
            ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(failed(io::Error::last_os_error().raw_os_error()));
    }
    let top = ((stack as usize + STACK) & !15usize) as *mut libc::c_void;
    let flags = libc::CLONE_PARENT | libc::CLONE_VFORK | libc::SIGCHLD;
    // SAFETY: `moved_entry` runs on the fresh stack in a copy of this address space (no CLONE_VM) and only reads
    // `context`, which this process keeps until it exits, after the command has exec'd or exited.
    let pid = unsafe {
        libc::clone(
            moved_entry,
            top,
            flags,
            ptr::from_ref(context).cast_mut().cast(),
            ptr::null_mut::<c_int>(),
        )
    };
    if pid < 0 {
        return Err(failed(io::Error::last_os_error().raw_os_error()));
    }
    // SAFETY: the slot is in the page shared with the spawner (see `ChildContext::moved_to`); `_exit` runs no
    // atexit handlers. The command has exec'd or exited (CLONE_VFORK); a failure it had is in the report slot.
    unsafe {
        ptr::write_volatile(context.moved_to, pid);
        libc::_exit(0)
    }
}

/// The command created by [`move_into_pid_namespace`]: the rest of the child's work, a failure in the report.
#[cfg(target_os = "linux")]
extern "C" fn moved_entry(argument: *mut libc::c_void) -> c_int {
    // SAFETY: `argument` is the `ChildContext` of the process that created this one, copied with its memory.
    let context = unsafe { &*argument.cast::<ChildContext<'_>>() };
    // Its parent (the spawner) lies outside its PID namespace, where `getppid` gives 0.
    let parent_death = match context.parent_death {
        ParentDeath::Armed { .. } => ParentDeath::Armed { expected_parent: None },
        ParentDeath::NotArmed => ParentDeath::NotArmed,
    };
    let failure = match child_rest(context, parent_death) {
        Err(failure) => failure,
        Ok(never) => match never {},
    };
    // SAFETY: the report slot is in the page shared with the spawner; `_exit` runs no atexit handlers.
    unsafe {
        ptr::write_volatile(context.report, Some(failure));
        libc::_exit(127)
    }
}

/// Elsewhere no process can be created as its parent's other child: the hook's request fails the spawn.
#[cfg(not(target_os = "linux"))]
fn move_into_pid_namespace(_context: &ChildContext<'_>) -> Result<Infallible, ChildFailure> {
    Err(ChildFailure { stage: ChildStage::PidNamespace, errno: libc::ENOSYS })
}

/// Unblock every signal of the calling thread (in the child, just before `execve`).
fn unblock_all_signals() {
    #[cfg(target_os = "linux")]
    {
        let empty: u64 = 0;
        // SAFETY: unblocks every signal, glibc's reserved ones included; reads one valid 8-byte kernel sigset.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &raw const empty,
                ptr::null_mut::<u64>(),
                clone::KERNEL_SIGSET_SIZE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        // SAFETY: an all-zero sigset_t is valid storage; sigemptyset initialises it and sigprocmask reads it.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &raw const empty, ptr::null_mut());
        }
    }
}

/// Mark every fd from `first` on close-on-exec (the hooks may still use theirs until exec). On Linux one
/// `close_range(CLOSE_RANGE_CLOEXEC)` (kernel 5.11); elsewhere, or when that fails, a `fcntl` per fd up to
/// the fd limit.
fn mark_fds_cloexec_from(first: RawFd) -> Result<(), rustix::io::Errno> {
    let first = first.unsigned_abs();
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range only changes flags of this process's fd table (the child's own copy).
        let rc = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
        if rc == 0 {
            return Ok(());
        }
    }
    // Up to the fd limit, at most 2^20 fds on Linux (its `nr_open` default) and 2^16 elsewhere (macOS allows
    // about 24,000 per process; an unlimited soft limit would otherwise cost a million calls per spawn).
    #[cfg(target_os = "linux")]
    const MOST: u64 = 1 << 20;
    #[cfg(not(target_os = "linux"))]
    const MOST: u64 = 1 << 16;
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(MOST);
    let limit = c_int::try_from(limit.min(MOST)).unwrap_or(c_int::MAX);
    let first = c_int::try_from(first).unwrap_or(c_int::MAX);
    for fd in first..limit {
        // SAFETY: F_SETFD on a number that may or may not be an open fd: EBADF is ignored.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    Ok(())
}

/// Return `fd` itself if it is `>= 3`, else a close-on-exec duplicate `>= 3`, so that the child's `dup2`s
/// onto 0, 1 and 2 never overwrite a source they still need.
pub(crate) fn fd_at_least_3(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() >= 3 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

/// Register `fd` with the current tokio reactor. The caller has checked that a runtime is current.
pub(crate) fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is a valid open fd; the `AsyncFd` owns it, so it stays open and unchanged until
    // the `AsyncFd` is dropped.
    let registered = unsafe { AsyncFd::register_with_interest(fd, interest) };
    registered.map_err(io::Error::from)
}

/// What the spawning thread answers to a [`SpawnJob`].
pub(crate) type SpawnReply = Result<Spawned, SpawnFailure>;

/// A spawn handed to the thread that creates every session (see `spawn`): the plan stays on the requesting
/// thread's stack, and that thread blocks in [`spawn_via`] until the reply arrives.
pub(crate) struct SpawnJob {
    plan: *const ChildPlan<'static>,
    backend: Backend,
    fork: bool,
    scope: JobScope,
    reply: mpsc::SyncSender<SpawnReply>,
}

/// Which PID namespace a spawn job's child goes to.
#[derive(Debug, Clone)]
pub(crate) enum JobScope {
    /// As [`PidScope`] says, the sandbox scope meaning the default sandbox namespace.
    Scope(
        #[cfg_attr(not(target_os = "linux"), allow(dead_code, reason = "one PID namespace there"))] PidScope,
    ),
    /// A sandbox namespace of its own (a descriptor of it, kept open by the requester while it waits).
    #[cfg(target_os = "linux")]
    Namespace(RawFd),
}

// SAFETY: the plan pointer is only dereferenced by the serving thread while the requesting thread is blocked
// in `spawn_via` waiting for the reply (or for the job to be dropped), so the plan outlives every use, and
// the plan is only read (as is the namespace descriptor of `JobScope::Namespace`, kept open meanwhile).
unsafe impl Send for SpawnJob {}

/// What the thread that creates every session is asked for.
pub(crate) enum Job {
    /// Create a child.
    Spawn(SpawnJob),
    /// Make a new sandbox PID namespace (Linux, on the namespace thread).
    #[cfg(target_os = "linux")]
    NewNamespace(mpsc::SyncSender<io::Result<NewNamespace>>),
}

/// Run [`spawn_child`] on the thread serving `jobs`, in the PID namespace of `scope` when that thread keeps
/// several.
pub(crate) fn spawn_via(
    jobs: &mpsc::Sender<Job>,
    plan: &ChildPlan<'_>,
    backend: Backend,
    fork: bool,
    scope: JobScope,
) -> SpawnReply {
    let gone = SpawnFailure::Os { call: "sending to the spawner thread", errno: libc::ESRCH };
    let (reply, answer) = mpsc::sync_channel(1);
    let job =
        SpawnJob { plan: ptr::from_ref(plan).cast::<ChildPlan<'static>>(), backend, fork, scope, reply };
    jobs.send(Job::Spawn(job)).map_err(|_| gone)?;
    answer.recv().map_err(|_| gone)?
}

/// Serve jobs until every sender is gone. `namespaces`: the PID namespaces this thread keeps (it unshared the
/// default sandbox's), if any; each child is then created in the one its scope names. Without them every child
/// is created where this thread's children go.
#[cfg(target_os = "linux")]
pub(crate) fn serve_spawn_jobs(jobs: &mpsc::Receiver<Job>, namespaces: Option<&PidNamespaces>) {
    for job in jobs {
        match job {
            Job::Spawn(job) => {
                // SAFETY: see `SpawnJob`: the requester is blocked until we reply or drop the job.
                let plan = unsafe { &*job.plan };
                let result = spawn_in_scope(namespaces, plan, job.backend, job.fork, &job.scope);
                let _ = job.reply.send(result);
            }
            Job::NewNamespace(reply) => {
                let made = match namespaces {
                    Some(namespaces) => namespaces.create_sandbox(),
                    None => Err(io::Error::from_raw_os_error(libc::ENOTSUP)),
                };
                let _ = reply.send(made);
            }
        }
    }
}

/// Serve jobs until every sender is gone (no PID namespaces here).
#[cfg(not(target_os = "linux"))]
pub(crate) fn serve_spawn_jobs(jobs: &mpsc::Receiver<Job>, _namespaces: Option<&Infallible>) {
    for job in jobs {
        let Job::Spawn(job) = job;
        // SAFETY: see `SpawnJob`: the requester is blocked until we reply or drop the job.
        let plan = unsafe { &*job.plan };
        // One PID namespace here: every scope is the host's.
        let _ = job.scope;
        let result = spawn_child(plan, job.backend, job.fork, false);
        let _ = job.reply.send(result);
    }
}

/// [`spawn_child`] from the calling thread, which keeps `namespaces` (if any): its children are created in the
/// namespace `scope` names, and it goes back to the default sandbox namespace afterwards.
#[cfg(target_os = "linux")]
pub(crate) fn spawn_in_scope(
    namespaces: Option<&PidNamespaces>,
    plan: &ChildPlan<'_>,
    backend: Backend,
    fork: bool,
    scope: &JobScope,
) -> SpawnReply {
    let Some(namespaces) = namespaces else {
        return spawn_child(plan, backend, fork, false);
    };
    let target = match scope {
        JobScope::Scope(PidScope::Host) => Target::Host,
        JobScope::Scope(PidScope::Sandbox) => Target::DefaultSandbox,
        // SAFETY: the requester keeps the descriptor open until it has the reply (see `SpawnJob`).
        JobScope::Namespace(fd) => Target::Sandbox(unsafe { BorrowedFd::borrow_raw(*fd) }),
    };
    namespaces.enter(target)?;
    if matches!(target, Target::Host)
        && let Err(failure) = namespaces.ensure_watchdog()
    {
        // Without the watchdog the child's daemons could outlive a SIGKILL of the host: nothing is spawned.
        namespaces.back_to_default();
        return Err(failure);
    }
    let spawned = spawn_child(plan, backend, fork, !matches!(target, Target::Host));
    if !matches!(target, Target::DefaultSandbox) {
        namespaces.back_to_default();
    }
    spawned
}

/// A pipe whose two ends are close-on-exec: `(read, write)`.
pub(crate) fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    #[cfg(target_os = "linux")]
    {
        Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        // No pipe2 here: the flag is set right after (a fork in between by another thread gets a copy that its
        // child closes at exec, as every spawn of this crate marks inherited fds close-on-exec).
        let (read, write) = rustix::pipe::pipe()?;
        for fd in [&read, &write] {
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
        }
        Ok((read, write))
    }
}

/// Wait until `fd` (a pipe's read end) reports end of file, discarding anything read.
fn wait_for_eof(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(fd, &mut byte) {
            Ok(0) => return Ok(()),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn inode(fd: BorrowedFd<'_>) -> u64 {
        rustix::fs::fstat(fd).unwrap().st_ino
    }

    /// The child's namespaces reach the parent even when the child is gone (reaped, so `/proc/<pid>` names
    /// nothing) before the parent looks: a leader that exits at once still leaves its pins.
    #[test]
    fn a_child_that_is_gone_at_once_still_leaves_its_namespaces() {
        let (ours, child_end) = namespace_socket().unwrap();
        // SAFETY: the child only makes system calls (unshare, open, sendmsg) and `_exit`s; it allocates nothing
        // and touches no lock of this multi-threaded test process.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: in the forked child only.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWUTS) };
            if rc == 0 {
                send_namespaces(child_end.as_fd());
            }
            // SAFETY: ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(rc) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
        assert_eq!(status, 0, "the child could not unshare its UTS namespace");
        let pins = receive_namespaces(ours.as_fd()).expect("the child sent its namespaces");
        let own_uts = std::fs::metadata("/proc/self/ns/uts").unwrap().ino();
        let own_mnt = std::fs::metadata("/proc/self/ns/mnt").unwrap().ino();
        assert_ne!(inode(pins.uts.as_ref().unwrap().as_fd()), own_uts, "the child's own UTS namespace");
        assert_eq!(inode(pins.mnt.as_ref().unwrap().as_fd()), own_mnt, "the mount namespace it shares");
        // Twin: a child that sends nothing leaves nothing to receive (and the parent falls back).
        assert!(receive_namespaces(ours.as_fd()).is_none());
    }
}
