//! The sandbox's user namespace, for a process without `CAP_SYS_ADMIN`: made once per process by a forked
//! helper, it owns the network namespaces of the domain allowlist and of the offline mode and the copy-on-write
//! overlays, which an ordinary user could not make otherwise.
//!
//! Why a forked helper: the kernel gives a new user namespace (`unshare(CLONE_NEWUSER)`) and entry into one
//! (`setns(fd, CLONE_NEWUSER)`) only to a single-threaded process that shares neither its memory nor its
//! file-system context; the server is multi-threaded. A forked child is single-threaded, so it can:
//! 1. make the namespace (`unshare(CLONE_NEWUSER)`, `setgroups` denied, the caller's uid and gid mapped to
//!    themselves, one id each), or enter the one made before (`setns`); the owner's uid has every capability
//!    in it;
//! 2. do the work that needs them (a network namespace with `lo` up and a socket bound in it, an overlay
//!    mounted detached), with raw system calls only (a fork of a multi-threaded process must not allocate);
//! 3. send the descriptors (`/proc/self/ns/user`, `/proc/self/ns/net`, the sockets, the mount) over a unix
//!    socketpair (`SCM_RIGHTS`) and exit.
//!
//! The namespaces then live as long as those descriptors: no helper process outlives its call. A command's child
//! (forked too) enters the user namespace first (`crate::child`), then a network namespace made here, then makes
//! its mount namespace with the capabilities it holds there, like the privileged path.
#![allow(unsafe_code)] // Reason: fork, unshare/setns, the id maps and SCM_RIGHTS are raw system calls.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use crate::sys;

/// A failing step of a helper and its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepFailure {
    /// The step, as the helper names it.
    pub(crate) stage: &'static str,
    /// Its errno.
    pub(crate) errno: i32,
}

impl StepFailure {
    /// A failure of `stage` with `errno`.
    pub(crate) fn new(stage: &'static str, errno: i32) -> Self {
        StepFailure { stage, errno }
    }

    /// `stage failed with EPERM (...) (likely cause: ...)`, for reports and errors.
    pub(crate) fn text(&self) -> String {
        format!(
            "{} failed with {} ({})",
            self.stage,
            crate::support::errno_text(self.errno),
            crate::support::likely_cause(self.errno)
        )
    }
}

/// The steps of this module, as a helper names them.
const UNSHARE_USER: &str = "unshare(CLONE_NEWUSER)";
const SETNS_USER: &str = "setns(CLONE_NEWUSER)";
const WRITE_SETGROUPS: &str = "write /proc/self/setgroups";
const WRITE_UID_MAP: &str = "write /proc/self/uid_map";
const WRITE_GID_MAP: &str = "write /proc/self/gid_map";
const OPEN_USER_NS: &str = "open /proc/self/ns/user";
const HELPER_STEPS: [&str; 6] =
    [UNSHARE_USER, SETNS_USER, WRITE_SETGROUPS, WRITE_UID_MAP, WRITE_GID_MAP, OPEN_USER_NS];

/// The sandbox's user namespace of this process, once made (or why it could not be).
static SHARED: Mutex<Option<Result<Arc<OwnedFd>, StepFailure>>> = Mutex::new(None);

/// The sandbox's user namespace, made on the first call by a forked helper (later calls return it, or the
/// failure of that first try: a kernel or a filter that refused it once refuses it again).
pub(crate) fn shared() -> Result<Arc<OwnedFd>, StepFailure> {
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = shared.as_ref() {
        return known.clone();
    }
    let made = make_user_namespace();
    *shared = Some(made.clone());
    made
}

/// Whether this process gets the sandbox's user namespace (made by this call if need be), which commands
/// without `CAP_SYS_ADMIN` enter for the domain allowlist, the offline namespace and the copy-on-write views:
/// `Unavailable` names the refused step, its errno and the likely cause.
pub fn user_namespace_availability() -> crate::Availability {
    match shared() {
        Ok(_) => crate::Availability::Available,
        Err(failure) => crate::Availability::Unavailable(failure.text()),
    }
}

/// The sandbox's user namespace if it was made already (never makes it).
pub(crate) fn made_yet() -> Option<Arc<OwnedFd>> {
    SHARED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|made| made.as_ref().ok().cloned())
}

/// True when `fd` is the sandbox's user namespace of this process.
pub(crate) fn is_shared(fd: &Arc<OwnedFd>) -> bool {
    made_yet().is_some_and(|shared| Arc::ptr_eq(&shared, fd))
}

/// Make the user namespace in a helper: the caller's ids mapped to themselves, one each, `setgroups` denied.
fn make_user_namespace() -> Result<Arc<OwnedFd>, StepFailure> {
    let (uid, gid) = crate::support::effective_ids();
    let (uid_map, gid_map) = (id_map(uid), id_map(gid));
    let [userns] = fork_helper(&[], || {
        // SAFETY: unshare takes an integer flag set; this helper is single-threaded (a fork).
        let ret = unsafe { sys::syscall(libc::SYS_unshare, [libc::CLONE_NEWUSER as usize, 0, 0, 0, 0, 0]) };
        ret.map_err(|errno| StepFailure::new(UNSHARE_USER, errno))?;
        write_file(c"/proc/self/setgroups", b"deny", WRITE_SETGROUPS)?;
        write_file(c"/proc/self/uid_map", uid_map.as_bytes(), WRITE_UID_MAP)?;
        write_file(c"/proc/self/gid_map", gid_map.as_bytes(), WRITE_GID_MAP)?;
        Ok([open_read_only(c"/proc/self/ns/user", OPEN_USER_NS)?])
    })?;
    Ok(Arc::new(userns))
}

/// `"<id> <id> 1\n"`: the id mapped to itself, one id.
pub(crate) fn id_map(id: u32) -> String {
    format!("{id} {id} 1\n")
}

/// Run `work` in a forked helper that entered the sandbox's user namespace (made first if need be), and return
/// the `N` descriptors it opened. `steps` are the stage names `work` may fail with.
///
/// `work` runs in a fork of this (multi-threaded) process: it may only issue system calls on data prepared
/// before the call (no allocation, no lock), and it must not panic.
pub(crate) fn in_user_namespace<const N: usize>(
    steps: &[&'static str],
    work: impl FnOnce() -> Result<[i32; N], StepFailure>,
) -> Result<[OwnedFd; N], StepFailure> {
    let userns = shared()?;
    let fd = userns.as_raw_fd() as usize;
    fork_helper(steps, move || {
        // SAFETY: setns on a namespace descriptor this helper inherited, with an integer flag; the helper is
        // single-threaded and shares no file-system context (a fork), as the kernel requires.
        let ret = unsafe { sys::syscall(libc::SYS_setns, [fd, libc::CLONE_NEWUSER as usize, 0, 0, 0, 0]) };
        ret.map_err(|errno| StepFailure::new(SETNS_USER, errno))?;
        work()
    })
}

/// The answer of a helper: its errno (0: success), the length of its stage name and the name (cut at the
/// message's end).
const MESSAGE_LEN: usize = 128;

/// The most descriptors a helper sends.
const MAX_FDS: usize = 4;

/// Fork a helper that runs `work`, sends the descriptors it returns (or its failure) over a socketpair, and
/// exits; wait for it.
fn fork_helper<const N: usize>(
    steps: &[&'static str],
    work: impl FnOnce() -> Result<[i32; N], StepFailure>,
) -> Result<[OwnedFd; N], StepFailure> {
    const { assert!(N <= MAX_FDS) };
    let mut pair = [-1i32; 2];
    // SAFETY: socketpair writes two descriptors into the two-element array.
    let ret = unsafe {
        libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, pair.as_mut_ptr())
    };
    if ret != 0 {
        return Err(StepFailure::new("socketpair", last_errno()));
    }
    // SAFETY: both descriptors were just returned by socketpair and are owned by nobody else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    // SAFETY: the child runs `work` (raw system calls on data prepared before the fork, by its contract),
    // `sendmsg` from its stack and `_exit`: nothing that needs a lock another thread of this process might hold.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut message = [0u8; MESSAGE_LEN];
        let fds = match work() {
            Ok(fds) => fds,
            Err(failure) => {
                let stage = failure.stage.as_bytes();
                let len = stage.len().min(MESSAGE_LEN - 8);
                message[..4].copy_from_slice(&failure.errno.to_le_bytes());
                message[4..8].copy_from_slice(&(len as u32).to_le_bytes());
                message[8..8 + len].copy_from_slice(&stage[..len]);
                [-1; N]
            }
        };
        let count = if message[..4] == [0; 4] { N } else { 0 };
        send(theirs.as_raw_fd(), &message, &fds[..count]);
        // SAFETY: _exit ends the helper without running anything of the parent's (no atexit, no destructors).
        unsafe { libc::_exit(0) }
    }
    if pid < 0 {
        return Err(StepFailure::new("fork", last_errno()));
    }
    drop(theirs);
    let received = receive(&ours);
    let mut status = 0;
    // SAFETY: waitpid on the helper forked above, into a local. ECHILD: another thread of the host reaped it
    // already (uexec-pty's subreaper), which is fine: the socket has said how it went.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && last_errno() == libc::EINTR {}
    let (message, fds) =
        received.map_err(|errno| StepFailure::new("receiving the helper's answer", errno))?;
    let errno = i32::from_le_bytes([message[0], message[1], message[2], message[3]]);
    if errno != 0 {
        let len = u32::from_le_bytes([message[4], message[5], message[6], message[7]]) as usize;
        let named = message.get(8..8 + len).unwrap_or_default();
        // The stage names are known here: the caller's and this module's.
        let stage = steps
            .iter()
            .chain(HELPER_STEPS.iter())
            .find(|s| s.as_bytes() == named)
            .copied()
            .unwrap_or("a step of the helper");
        return Err(StepFailure::new(stage, errno));
    }
    <[OwnedFd; N]>::try_from(fds)
        .map_err(|_| StepFailure::new("the helper's answer (a descriptor is missing)", libc::EPROTO))
}

/// In the helper: `sendmsg` of `message` with `fds` attached (`SCM_RIGHTS`). A failure leaves the parent an
/// answer without descriptors, which it reports.
fn send(socket: i32, message: &[u8; MESSAGE_LEN], fds: &[i32]) {
    #[repr(C, align(8))]
    struct Control([u8; 64]);
    let mut control = Control([0; 64]);
    let mut iov = libc::iovec { iov_base: message.as_ptr().cast_mut().cast(), iov_len: message.len() };
    // SAFETY: an all-zero msghdr is valid (no name, no control).
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &raw mut iov;
    header.msg_iovlen = 1;
    let bytes = size_of_val(fds);
    if !fds.is_empty() && bytes <= MAX_FDS * 4 {
        header.msg_control = control.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is arithmetic on a length.
        header.msg_controllen = unsafe { libc::CMSG_SPACE(bytes as u32) } as _;
        // SAFETY: the control buffer holds CMSG_SPACE(16) = 32 bytes at least, aligned for cmsghdr; CMSG_FIRSTHDR
        // and CMSG_DATA point into it, and `bytes` bytes of descriptors fit after the header.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&raw const header);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast::<i32>(), fds.len());
        }
    }
    // SAFETY: sendmsg reads the header, the message and the control buffer, all alive on this stack frame.
    let _ = unsafe { libc::sendmsg(socket, &raw const header, libc::MSG_NOSIGNAL) };
}

/// In the parent: the helper's message and the descriptors it attached (close-on-exec), or an errno (`EPROTO`
/// when the helper ended without an answer).
fn receive(socket: &OwnedFd) -> Result<([u8; MESSAGE_LEN], Vec<OwnedFd>), i32> {
    #[repr(C, align(8))]
    struct Control([u8; 128]);
    let mut control = Control([0; 128]);
    let mut message = [0u8; MESSAGE_LEN];
    let mut iov = libc::iovec { iov_base: message.as_mut_ptr().cast(), iov_len: message.len() };
    // SAFETY: an all-zero msghdr is valid.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &raw mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.0.as_mut_ptr().cast();
    header.msg_controllen = control.0.len() as _;
    let got = loop {
        // SAFETY: recvmsg writes into the message and control buffers the header describes, alive here.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &raw mut header, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let errno = last_errno();
        if errno != libc::EINTR {
            return Err(errno);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `header.msg_control` with well-formed cmsghdrs up to `msg_controllen`; each
    // SCM_RIGHTS payload holds descriptors now owned by this process, each wrapped once.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<i32>();
                for i in 0..payload / 4 {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&raw const header, cmsg);
        }
    }
    if usize::try_from(got).ok() != Some(MESSAGE_LEN) {
        return Err(libc::EPROTO);
    }
    Ok((message, fds))
}

/// In a helper: write `data` to the file at `path` (`/proc/self/{setgroups,uid_map,gid_map}`).
fn write_file(path: &CStr, data: &[u8], stage: &'static str) -> Result<(), StepFailure> {
    let flags = (libc::O_WRONLY | libc::O_CLOEXEC) as usize;
    let at = libc::AT_FDCWD as isize as usize;
    // SAFETY: openat on a NUL-terminated path.
    let fd = unsafe { sys::syscall(libc::SYS_openat, [at, path.as_ptr() as usize, flags, 0, 0, 0]) }
        .map_err(|errno| StepFailure::new(stage, errno))?;
    // SAFETY: write from a live slice of `data.len()` bytes.
    let written = unsafe { sys::syscall(libc::SYS_write, [fd, data.as_ptr() as usize, data.len(), 0, 0, 0]) };
    // SAFETY: closing the descriptor opened above.
    let _ = unsafe { sys::syscall(libc::SYS_close, [fd, 0, 0, 0, 0, 0]) };
    match written {
        Ok(n) if n == data.len() => Ok(()),
        Ok(_) => Err(StepFailure::new(stage, libc::EIO)),
        Err(errno) => Err(StepFailure::new(stage, errno)),
    }
}

/// In a helper: open `path` read-only (close-on-exec), as a raw descriptor to send.
pub(crate) fn open_read_only(path: &CStr, stage: &'static str) -> Result<i32, StepFailure> {
    let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as usize;
    let at = libc::AT_FDCWD as isize as usize;
    // SAFETY: openat on a NUL-terminated path.
    let fd = unsafe { sys::syscall(libc::SYS_openat, [at, path.as_ptr() as usize, flags, 0, 0, 0]) }
        .map_err(|errno| StepFailure::new(stage, errno))?;
    i32::try_from(fd).map_err(|_| StepFailure::new(stage, libc::EBADF))
}

/// The steps of [`UserPidNamespace::make`], as its helper names them.
const UNSHARE_PID: &str = "unshare(CLONE_NEWPID) in the sandbox's user namespace";
const FORK_INIT: &str = "fork (the init of the sandbox's PID namespace)";
const OPEN_PID_NS: &str = "open /proc/self/ns/pid_for_children";
const PIDFD_INIT: &str = "pidfd_open (the init of the sandbox's PID namespace)";
const PID_STEPS: [&str; 4] = [UNSHARE_PID, FORK_INIT, OPEN_PID_NS, PIDFD_INIT];

/// One PID namespace for a sandbox's commands, for a process without `CAP_SYS_ADMIN`: owned by the sandbox's
/// user namespace, so that a command's child, once it entered that user namespace, may enter it
/// (`setns(CLONE_NEWPID)` needs `CAP_SYS_ADMIN` in the namespace's owner and in the caller's user namespace)
/// and mount a procfs of it (`crate::child`). Made by a helper that unshares it in the user namespace and
/// forks its init (`uexec-init`, pid 1 there), then sends the namespace and a pidfd of the init and exits. The
/// init reaps the namespace's orphans and exits when the last copy of the pipe's write end this value holds
/// is closed: when the sandbox is dropped, or the server dies, even by SIGKILL; the kernel then kills every
/// process of the namespace. Dropping it also kills the init at once.
#[derive(Debug)]
pub(crate) struct UserPidNamespace {
    /// The namespace (an `nsfs` descriptor).
    pub(crate) namespace: Arc<OwnedFd>,
    /// Its device and inode.
    pub(crate) id: (u64, u64),
    /// The init, as a pidfd.
    init: OwnedFd,
    /// The write end of the pipe the init watches (close-on-exec: no command keeps it).
    _alive: OwnedFd,
}

impl UserPidNamespace {
    /// Make the namespace and its init, in the sandbox's user namespace (made first if need be).
    pub(crate) fn make() -> Result<Self, StepFailure> {
        let mut pipe = [-1i32; 2];
        // SAFETY: pipe2 writes two descriptors into the two-element array.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(StepFailure::new("pipe2", last_errno()));
        }
        // SAFETY: both descriptors were just returned by pipe2 and are owned by nobody else.
        let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
        let (read_fd, write_fd) = (reader.as_raw_fd(), writer.as_raw_fd());
        let [namespace, init] = in_user_namespace(&PID_STEPS, move || {
            unshare(libc::CLONE_NEWPID, UNSHARE_PID)?;
            // SAFETY: a plain fork (clone without CLONE_VM, returning twice on copies of this stack) of this
            // single-threaded helper; the child runs `init_loop`, raw system calls only, and never returns.
            let pid = unsafe { sys::syscall(libc::SYS_clone, [libc::SIGCHLD as usize, 0, 0, 0, 0, 0]) }
                .map_err(|errno| StepFailure::new(FORK_INIT, errno))?;
            if pid == 0 {
                init_loop(read_fd, write_fd);
            }
            let namespace = open_read_only(c"/proc/self/ns/pid_for_children", OPEN_PID_NS)?;
            // SAFETY: pidfd_open on the pid of this helper's own child, flags 0.
            let pidfd = unsafe { sys::syscall(libc::SYS_pidfd_open, [pid, 0, 0, 0, 0, 0]) }
                .map_err(|errno| StepFailure::new(PIDFD_INIT, errno))?;
            Ok([namespace, i32::try_from(pidfd).map_err(|_| StepFailure::new(PIDFD_INIT, libc::EBADF))?])
        })?;
        drop(reader);
        let id = {
            use std::os::unix::fs::MetadataExt;
            let file = std::fs::File::from(
                namespace
                    .try_clone()
                    .map_err(|e| StepFailure::new("dup", e.raw_os_error().unwrap_or(libc::EIO)))?,
            );
            let meta = file
                .metadata()
                .map_err(|e| StepFailure::new("fstat", e.raw_os_error().unwrap_or(libc::EIO)))?;
            (meta.dev(), meta.ino())
        };
        Ok(UserPidNamespace { namespace: Arc::new(namespace), id, init, _alive: writer })
    }
}

impl Drop for UserPidNamespace {
    fn drop(&mut self) {
        // The init dies, and the kernel kills every process of the namespace with it. Its parent (the helper)
        // is gone: whoever adopted it reaps it (uexec-pty's reaper in a subreaper host).
        // SAFETY: pidfd_send_signal on the pidfd owned by `self`, no siginfo, flags 0.
        let _ = unsafe {
            sys::syscall(
                libc::SYS_pidfd_send_signal,
                [self.init.as_raw_fd() as usize, libc::SIGKILL as usize, 0, 0, 0, 0],
            )
        };
    }
}

/// The init of a [`UserPidNamespace`] (pid 1 there): closes every descriptor but the pipe's read end, then reaps
/// orphans until the pipe has no writer left, and exits. Raw system calls only (a fork of a helper).
fn init_loop(read_fd: i32, write_fd: i32) -> ! {
    // SAFETY: plain system calls on values of this process: block every signal (SIGCHLD is read from a
    // signalfd; the others, sent from inside the namespace, would be ignored by an init anyway), name the
    // process, close every descriptor but the read end, make the signalfd.
    let signals = unsafe {
        let all: u64 = !0;
        let _ = sys::syscall(
            libc::SYS_rt_sigprocmask,
            [libc::SIG_SETMASK as usize, &raw const all as usize, 0, 8, 0, 0],
        );
        let _ = sys::syscall(
            libc::SYS_prctl,
            [libc::PR_SET_NAME as usize, c"uexec-init".as_ptr() as usize, 0, 0, 0, 0],
        );
        replace_arguments(b"uexec-init");
        let _ = sys::syscall(libc::SYS_close, [write_fd as usize, 0, 0, 0, 0, 0]);
        let keep = read_fd as u32;
        if keep > 0 {
            let _ = sys::syscall(libc::SYS_close_range, [0, (keep - 1) as usize, 0, 0, 0, 0]);
        }
        let _ = sys::syscall(libc::SYS_close_range, [(keep + 1) as usize, u32::MAX as usize, 0, 0, 0, 0]);
        let child: u64 = 1 << (libc::SIGCHLD - 1);
        sys::syscall(
            libc::SYS_signalfd4,
            [
                usize::MAX,
                &raw const child as usize,
                8,
                (libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) as usize,
                0,
                0,
            ],
        )
        .map_or(-1, |fd| fd as i32)
    };
    // Without the signalfd (a descriptor limit) the loop wakes every 100 ms instead.
    let timeout = if signals < 0 { 100 } else { -1 };
    let mut drained = [0u8; 1024];
    loop {
        // SAFETY: reaps any exited child (orphans of the namespace are reparented to this init).
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        let mut watched = [
            libc::pollfd { fd: read_fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: signals, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: poll on a local array of two pollfds (a negative fd is ignored).
        let ready = unsafe { libc::poll(watched.as_mut_ptr(), 2, timeout) };
        if (ready < 0 && last_errno() != libc::EINTR) || watched[0].revents != 0 {
            // Readable or hung up: nobody writes to it, so every copy of the write end is gone.
            // SAFETY: `_exit` runs nothing of the parent's.
            unsafe { libc::_exit(0) }
        }
        if watched[1].revents != 0 {
            // SAFETY: reads queued signal records into a local buffer (non-blocking).
            while unsafe { libc::read(signals, drained.as_mut_ptr().cast(), drained.len()) } > 0 {}
        }
    }
}

/// Overwrite this process's command line (what `/proc/<pid>/cmdline` and `ps` show) with `name` alone, so that
/// an init forked from the server without `exec` does not show the server's arguments to the commands of its
/// namespace (as uexec-pty's inits do). Only this process's copy of the memory changes. Best effort: nothing is
/// written unless `/proc/self/stat` names the area. Raw system calls only.
fn replace_arguments(name: &[u8]) {
    let mut stat = [0u8; 2048];
    let Ok(fd) = open_read_only(c"/proc/self/stat", "open /proc/self/stat") else { return };
    // SAFETY: read into a local buffer, then close the descriptor opened above.
    let read = unsafe {
        sys::syscall(libc::SYS_read, [fd as usize, stat.as_mut_ptr() as usize, stat.len(), 0, 0, 0])
    };
    // SAFETY: closing the descriptor opened above.
    let _ = unsafe { sys::syscall(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
    let Ok(n) = read else { return };
    let stat = stat.get(..n).unwrap_or_default();
    // After the command name (which may hold spaces and parentheses; the last ')' ends it), `arg_start` and
    // `arg_end` are the 46th and 47th fields.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else { return };
    let mut fields =
        stat.get(close + 1..).unwrap_or_default().split(|&b| b == b' ').filter(|f| !f.is_empty());
    let address = |field: &[u8]| std::str::from_utf8(field).ok().and_then(|t| t.trim().parse::<usize>().ok());
    let (Some(start), Some(end)) = (fields.nth(45).and_then(address), fields.next().and_then(address)) else {
        return;
    };
    let Some(length) = end.checked_sub(start).filter(|&len| len > name.len() && len < 1 << 20) else {
        return;
    };
    // SAFETY: [arg_start, arg_end) is this process's argument area, mapped and writable (the initial stack); only
    // this process's private copy of it is written, within its bounds (`length` > the name).
    unsafe {
        let area = start as *mut u8;
        std::ptr::write_bytes(area, 0, length);
        std::ptr::copy_nonoverlapping(name.as_ptr(), area, name.len());
    }
}

/// In a helper: `unshare(flags)`, failing as `stage`.
pub(crate) fn unshare(flags: i32, stage: &'static str) -> Result<(), StepFailure> {
    // SAFETY: unshare takes an integer flag set.
    let ret = unsafe { sys::syscall(libc::SYS_unshare, [flags as usize, 0, 0, 0, 0, 0]) };
    ret.map(drop).map_err(|errno| StepFailure::new(stage, errno))
}

/// The calling thread's errno.
fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// The device and inode of a namespace file.
    fn id(path: &str) -> (u64, u64) {
        let meta = std::fs::metadata(path).unwrap();
        (meta.dev(), meta.ino())
    }

    /// True once the process behind `pidfd` has exited (polled until `deadline`).
    fn exited_by(pidfd: &OwnedFd, deadline: std::time::Instant) -> bool {
        loop {
            let mut watched = [libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            // SAFETY: poll on a local array of one pollfd, no wait.
            if unsafe { libc::poll(watched.as_mut_ptr(), 1, 0) } > 0 {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_pid_namespace_is_made_in_the_user_namespace_and_its_init_ends_with_it() {
        let made = UserPidNamespace::make().unwrap();
        // Another namespace than this process's, with a running init.
        assert_ne!(made.id, id("/proc/self/ns/pid"));
        let init = made.init.try_clone().unwrap();
        assert!(!exited_by(&init, std::time::Instant::now()), "the init runs while the namespace is held");
        // A helper in the user namespace enters it (what a command's child does, which an ordinary user can only
        // do from there: `CAP_SYS_ADMIN` in the namespace's owner is needed), and its children go there.
        const ENTER: &str = "setns(CLONE_NEWPID) in the helper";
        let fd = made.namespace.as_raw_fd() as usize;
        let entered = in_user_namespace(&[ENTER], move || {
            // SAFETY: setns on an inherited namespace descriptor, with an integer flag.
            unsafe { sys::syscall(libc::SYS_setns, [fd, libc::CLONE_NEWPID as usize, 0, 0, 0, 0]) }
                .map_err(|errno| StepFailure::new(ENTER, errno))?;
            Ok([open_read_only(c"/proc/self/ns/pid_for_children", OPEN_PID_NS)?])
        });
        let [children] = entered.unwrap();
        let children = std::fs::File::from(children).metadata().unwrap();
        assert_eq!((children.dev(), children.ino()), made.id, "the helper's children go to the namespace");
        drop(made);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        assert!(exited_by(&init, deadline), "the init ends when the namespace is dropped");
    }

    #[test]
    fn a_helper_sends_descriptors_back_and_a_failing_step_is_named() {
        // Allowed: the user namespace is made (root and an ordinary user alike), is not this process's own, and
        // a helper that entered it sends a descriptor of its own back.
        let userns = shared().unwrap();
        let file = std::fs::File::from(userns.try_clone().unwrap());
        let made = (file.metadata().unwrap().dev(), file.metadata().unwrap().ino());
        assert_ne!(made, id("/proc/self/ns/user"));
        const OPEN: &str = "open /proc/self/ns/user in the helper";
        let [inside] =
            in_user_namespace(&[OPEN], || Ok([open_read_only(c"/proc/self/ns/user", OPEN)?])).unwrap();
        let inside = std::fs::File::from(inside).metadata().unwrap();
        assert_eq!((inside.dev(), inside.ino()), made, "the helper ran in the sandbox's user namespace");
        assert!(is_shared(&userns));
        // Denied: a step that fails is named with its errno, and no descriptor comes back.
        const MISSING: &str = "open a file that does not exist";
        let failed = in_user_namespace(&[MISSING], || Ok([open_read_only(c"/nonexistent/uexec", MISSING)?]));
        assert_eq!(failed.unwrap_err(), StepFailure::new(MISSING, libc::ENOENT));
    }
}
