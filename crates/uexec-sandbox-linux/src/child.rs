//! The child side: everything prepared in the parent, applied between fork and exec with raw system calls.
//!
//! Order (see `docs/sandbox.md` for the reasons):
//! 0. Without `CAP_SYS_ADMIN`, when the sandbox has its user namespace (`crate::userns`): `setns` into it first
//!    (the owner's uid has every capability there). Then the network namespace (domain-allowlist mode, or the
//!    offline one): `setns` into the proxy's namespace, where only loopback exists.
//! 1. Mount namespace (when planned): `unshare(CLONE_NEWNS | CLONE_NEWUTS)` (with `CAP_SYS_ADMIN`, or in the
//!    sandbox's user namespace entered at step 0; else with `CLONE_NEWUSER` plus the id maps), make every mount private, clone each writable root's mount tree (made `nodev`), make the whole tree
//!    read-only and `/dev/pts` `nodev`, attach the writable clones over their roots, bind the directories leading
//!    from a root to a protected subpath over themselves (pinned), bind each protected subpath read-only over
//!    itself, attach a copy of each copy-on-write overlay over its directory (writable: the tree is read-only
//!    already), cover the hidden paths (after the overlays, so those inside one stay hidden), `chdir` to the cwd
//!    again so it resolves through the new mounts. Or, when the sandbox holds a
//!    namespace already built from the same plan (`crate::template`), `setns` into it and
//!    `unshare(CLONE_NEWUTS)`. Either way the command has a UTS namespace of its own, which no process of it can
//!    leave: the process adapter finds the session's processes by it (a mount namespace may be shared).
//! 2. Capabilities: clear the ambient set, mask the effective/permitted/inheritable sets to a small set (with
//!    `no_new_privs`, nothing can raise them again).
//! 3. `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
//! 4. A rule for the command's own terminal (read/write, so `/dev/stdout` can be reopened), then
//!    `landlock_restrict_self(ruleset_fd, 0)`.
//! 5. `seccomp(SECCOMP_SET_MODE_FILTER)` for each program (last: the filter denies `mount` and `unshare`).
//!
//! Nothing here allocates, locks or panics: the data lives in [`SandboxChild`], built by the parent, and every
//! call is a [`sys::syscall`].
#![allow(unsafe_code)] // Reason: `ChildSetup` is an unsafe trait and every step is a raw system call.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use uexec_ports::process::{ChildSetup, ChildSetupFailure};

use crate::seccomp::SeccompPrograms;
use crate::sys;

/// The most writable roots one command can have mounted (their clone descriptors are held on the child's stack).
pub(crate) const MAX_MOUNT_ROOTS: usize = 32;

/// The capabilities a sandboxed root keeps (Docker's default set minus `MKNOD` and `SETFCAP`): file ownership,
/// changing ids, binding low ports, raw sockets for `ping` (network still filtered), `chroot`, signals (scoped by
/// Landlock). Everything else (`SYS_ADMIN`, `NET_ADMIN`, `SYS_MODULE`, `SYS_RAWIO`, `SYS_PTRACE`, `SYS_TIME`,
/// `DAC_READ_SEARCH`, `BPF`, `PERFMON`, ...) leaves the permitted set for good.
pub(crate) const KEPT_CAPABILITIES: [(u32, &str); 12] = [
    (0, "chown"),
    (1, "dac_override"),
    (3, "fowner"),
    (4, "fsetid"),
    (5, "kill"),
    (6, "setgid"),
    (7, "setuid"),
    (8, "setpcap"),
    (10, "net_bind_service"),
    (13, "net_raw"),
    (18, "sys_chroot"),
    (29, "audit_write"),
];

/// The kept capabilities as a mask.
pub(crate) fn kept_mask() -> u64 {
    KEPT_CAPABILITIES.iter().fold(0, |mask, (cap, _)| mask | (1u64 << cap))
}

/// How the child gets its mount namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MountMode {
    /// `unshare(CLONE_NEWNS)` with `CAP_SYS_ADMIN`.
    Privileged,
    /// `unshare(CLONE_NEWUSER | CLONE_NEWNS)`, mapping the caller's ids to themselves.
    UserNamespace,
    /// `unshare(CLONE_NEWNS)` in the sandbox's user namespace (`crate::userns`), which the child entered first
    /// ([`SandboxChild::userns`]): where the network namespaces and overlays it may use were made.
    SandboxUserNamespace,
}

/// The mount work, as C strings and byte buffers prepared in the parent.
#[derive(Debug)]
pub(crate) struct MountPlan {
    /// How to get the namespace.
    pub(crate) mode: MountMode,
    /// `"<uid> <uid> 1\n"` and `"<gid> <gid> 1\n"` for [`MountMode::UserNamespace`].
    pub(crate) uid_map: Vec<u8>,
    /// See `uid_map`.
    pub(crate) gid_map: Vec<u8>,
    /// Make every mount read-only before attaching the writable roots (false only when `/` is writable).
    pub(crate) readonly_everything: bool,
    /// Writable roots to attach read-write, shallowest first (at most [`MAX_MOUNT_ROOTS`]).
    pub(crate) roots: Vec<MountRoot>,
    /// Directories on the way from a writable root to a protected entry, bound over themselves (after the roots,
    /// before the protected entries), shallowest first: as mount points they cannot be renamed or removed.
    pub(crate) pinned: Vec<CString>,
    /// Directories that take no new entry (`uexec_domain::gitdir::closed_dirs`: a git directory's `modules/`),
    /// each bound over itself with only its own mount made read-only (after the pinned directories, before the
    /// protected entries), shallowest first: the git directories pinned below one stay writable.
    pub(crate) closed: Vec<CString>,
    /// Protected entries to bind read-only over themselves, shallowest first.
    pub(crate) protected: Vec<CString>,
    /// Mount points to make `nodev` (`/dev/pts`: other terminals cannot be opened by path; the inherited terminal
    /// and `/dev/tty` keep working).
    pub(crate) nodev: Vec<CString>,
    /// Directories above a hidden entry in a writable place, bound over themselves (after the copy-on-write
    /// views, before the hidden paths), shallowest first: no command can rename a hidden entry's directories.
    pub(crate) hidden_pinned: Vec<CString>,
    /// Hidden directories: each gets an empty, read-only tmpfs (after the protected entries).
    pub(crate) hidden_dirs: Vec<CString>,
    /// The sandbox's empty read-only tmpfs (a detached mount made once in the parent), when there are hidden
    /// directories and it could be made: each hidden directory gets a copy of it. Without it (or when the kernel
    /// cannot copy it, before Linux 6.15), the first hidden directory gets a tmpfs of its own and the others
    /// copies of that one.
    pub(crate) empty_dir: Option<Arc<OwnedFd>>,
    /// Hidden files: each gets a read-only, `nodev` copy of `/dev/null`, so opening it fails with `EACCES`.
    pub(crate) hidden_files: Vec<CString>,
    /// Copy-on-write views: a copy of each detached overlay (made once in the parent) is attached over its
    /// directory, after the protected entries and before the hidden paths.
    pub(crate) copy_on_write: Vec<(CString, Arc<OwnedFd>)>,
    /// The working directory, entered again after the mounts.
    pub(crate) cwd: CString,
    /// Mount the fresh `/proc` with `hidepid=ptraceable` (false in the shared sandbox PID namespace, whose
    /// processes are all this server's sandboxed commands: they see each other).
    pub(crate) proc_hidepid: bool,
    /// The shared sandbox PID namespace's procfs (a detached mount made once in the parent), copied onto
    /// `/proc` instead of mounting a new one; the child has checked it runs in that namespace.
    pub(crate) procfs: Option<Arc<OwnedFd>>,
    /// Mount a fresh procfs of the command's own PID namespace on `/proc`, failing the command when it cannot
    /// (an ordinary user's sandbox, whose commands run in the PID namespace of the sandbox's user namespace:
    /// the report says `/proc` shows this sandbox's commands only).
    pub(crate) fresh_proc: bool,
}

/// How the child gets its mount namespace.
#[derive(Debug)]
pub(crate) enum Mounts {
    /// Build a private one from the plan.
    Build(Box<MountPlan>),
    /// Enter a namespace built earlier from the same plan (see `crate::template`), then the working directory.
    Enter {
        /// The namespace (an `nsfs` descriptor).
        namespace: Arc<OwnedFd>,
        /// The working directory, entered after the namespace.
        cwd: CString,
        /// When the template's `/proc` is a fresh procfs of one PID namespace (the per-command sandbox): that
        /// namespace (device, inode), and the plan to build instead when the command runs in another one.
        proc_for: Option<((u64, u64), Box<MountPlan>)>,
    },
}

/// One writable root to re-attach.
#[derive(Debug)]
pub(crate) struct MountRoot {
    /// Its canonical path.
    pub(crate) path: CString,
    /// Mount it `nodev`: a device node already inside a writable root (an extracted root filesystem, say) must not
    /// open the raw device. False only for a root that contains `/dev`.
    pub(crate) nodev: bool,
}

/// The prepared sandbox for one command: the [`ChildSetup`] hook added to the spawn request.
#[derive(Debug)]
pub(crate) struct SandboxChild {
    /// The sandbox's user namespace to enter before anything else (no `CAP_SYS_ADMIN`; see `crate::userns`).
    pub(crate) userns: Option<Arc<OwnedFd>>,
    /// The PID namespace (owned by `userns`) the command runs in: the child enters `userns` and then it in
    /// `enter_pid_namespace`, and the process adapter creates the command in it (see `crate::userns`).
    pub(crate) pid_namespace: Option<Arc<OwnedFd>>,
    /// The proxy's network namespace to enter first (domain-allowlist mode), kept open by this hook.
    pub(crate) netns: Option<Arc<OwnedFd>>,
    /// Mount namespace work, if any.
    pub(crate) mounts: Option<Mounts>,
    /// Capabilities to keep (a mask of capability numbers).
    pub(crate) keep_capabilities: u64,
    /// The Landlock ruleset, if Landlock is used.
    pub(crate) landlock: Option<OwnedFd>,
    /// The rights of the rule for the command's own terminal: read and write, plus device ioctls when the
    /// ruleset handles them (ABI >= 5; a right the ruleset does not handle would make the rule fail).
    pub(crate) terminal_access: u64,
    /// The seccomp programs, if seccomp is used.
    pub(crate) seccomp: Option<Arc<SeccompPrograms>>,
    /// The shared sandbox PID namespace (device, inode) the command must run in (its Landlock domain relies
    /// on it for scoping signals, and its `/proc` is that namespace's): the child checks first that it does,
    /// and fails otherwise.
    pub(crate) in_pid_namespace: Option<(u64, u64)>,
}

/// Turn a raw result into a [`ChildSetupFailure`] naming `stage`.
fn check(stage: &'static str, result: Result<usize, i32>) -> Result<usize, ChildSetupFailure> {
    result.map_err(|errno| ChildSetupFailure { stage, errno })
}

/// A C string's address as a system call argument.
fn ptr(s: &CStr) -> usize {
    s.as_ptr() as usize
}

/// `AT_FDCWD` as a system call argument (sign-extended, as the kernel reads an `int`).
const AT_FDCWD: usize = libc::AT_FDCWD as isize as usize;

// SAFETY: `run_in_child` only reads `self` (prepared by the parent, never written after construction), builds small
// structs on its own stack and issues raw system calls (no allocation, no lock, no errno, no panic: every fallible
// step returns an error value).
unsafe impl ChildSetup for SandboxChild {
    fn run_in_child(&self) -> Result<(), ChildSetupFailure> {
        if let (Some(userns), Some(_)) = (&self.userns, &self.pid_namespace)
            && !in_namespace_of(userns.as_raw_fd(), c"/proc/self/ns/user")?
        {
            // A process adapter that did not call `enter_pid_namespace` (a `std::process::Command` with this hook
            // in `pre_exec`): enter the namespaces here, and this process stays behind as a relay.
            self.enter_pid_namespace()?;
            relay_to_child()?;
        }
        if let Some(expected) = self.in_pid_namespace {
            check_pid_namespace(expected)?;
        }
        if let Some(userns) = &self.userns
            && self.pid_namespace.is_none()
        {
            let fd = userns.as_raw_fd() as usize;
            // SAFETY: setns on a namespace descriptor owned by `self`, with an integer flag; the child is a real
            // fork (`requires_fork`), single-threaded and sharing no file-system context, as the kernel requires.
            let ret =
                unsafe { sys::syscall(libc::SYS_setns, [fd, libc::CLONE_NEWUSER as usize, 0, 0, 0, 0]) };
            check(SETNS_USER, ret)?;
        }
        if let Some(ns) = &self.netns {
            let fd = ns.as_raw_fd() as usize;
            // SAFETY: setns on a namespace descriptor owned by `self`, with an integer flag.
            let ret = unsafe { sys::syscall(libc::SYS_setns, [fd, libc::CLONE_NEWNET as usize, 0, 0, 0, 0]) };
            check("setns(CLONE_NEWNET)", ret)?;
        }
        match &self.mounts {
            Some(Mounts::Build(plan)) => apply_mounts(plan)?,
            Some(Mounts::Enter { namespace, cwd, proc_for: None }) => {
                enter_mounts(namespace.as_raw_fd(), cwd)?
            }
            Some(Mounts::Enter { namespace, cwd, proc_for: Some((pid_namespace, otherwise)) }) => {
                if in_pid_namespace(*pid_namespace)? {
                    enter_mounts(namespace.as_raw_fd(), cwd)?;
                } else {
                    apply_mounts(otherwise)?;
                }
            }
            None => {}
        }
        drop_capabilities(self.keep_capabilities)?;
        // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
        let nnp =
            unsafe { sys::syscall(libc::SYS_prctl, [libc::PR_SET_NO_NEW_PRIVS as usize, 1, 0, 0, 0, 0]) };
        check("prctl(PR_SET_NO_NEW_PRIVS)", nnp)?;
        if let Some(ruleset) = &self.landlock {
            allow_own_terminal(ruleset.as_raw_fd(), self.terminal_access);
            let fd = ruleset.as_raw_fd() as usize;
            // SAFETY: `fd` is the open ruleset descriptor owned by `self`; flags 0.
            let restrict = unsafe { sys::syscall(sys::SYS_LANDLOCK_RESTRICT_SELF, [fd, 0, 0, 0, 0, 0]) };
            check("landlock_restrict_self", restrict)?;
        }
        if let Some(programs) = &self.seccomp {
            for program in &programs.programs {
                install_filter(program)?;
            }
        }
        Ok(())
    }

    fn enter_pid_namespace(&self) -> Result<bool, ChildSetupFailure> {
        let (Some(userns), Some(pid_namespace)) = (&self.userns, &self.pid_namespace) else {
            return Ok(false);
        };
        let fd = userns.as_raw_fd() as usize;
        // SAFETY: setns on namespace descriptors owned by `self`, with integer flags; the child is a real fork
        // (`requires_fork`: `userns` is set), single-threaded and sharing no file-system context.
        let ret = unsafe { sys::syscall(libc::SYS_setns, [fd, libc::CLONE_NEWUSER as usize, 0, 0, 0, 0]) };
        check(SETNS_USER, ret)?;
        let fd = pid_namespace.as_raw_fd() as usize;
        // SAFETY: as above; only this process's future children go to the namespace.
        let ret = unsafe { sys::syscall(libc::SYS_setns, [fd, libc::CLONE_NEWPID as usize, 0, 0, 0, 0]) };
        check("setns(CLONE_NEWPID) into the sandbox's PID namespace", ret)?;
        Ok(true)
    }

    fn requires_fork(&self) -> bool {
        // A task sharing its parent's memory can neither make nor enter a user namespace.
        self.userns.is_some()
            || matches!(&self.mounts, Some(Mounts::Build(plan)) if plan.mode == MountMode::UserNamespace)
    }
}

/// Let the command reopen its own terminal by path (`/dev/stdout`, `/proc/self/fd/1`, `/dev/pts/N`: `tee
/// /dev/stderr` does): a read/write rule on each standard stream that is a terminal. Only the child knows which
/// terminal it got, so the rule is added here, to this spawn's ruleset, before `landlock_restrict_self` copies
/// it into the domain. A failure only leaves the terminal reachable through its descriptors and `/dev/tty`, so
/// it is ignored. (Other terminals stay closed: no rule for them, and `/dev/pts` is `nodev`.)
fn allow_own_terminal(ruleset: i32, access: u64) {
    for fd in 0..=2usize {
        let mut termios = [0u8; 64];
        // SAFETY: TCGETS writes a `struct termios` (60 bytes) into the 64-byte buffer, or fails.
        let is_tty = unsafe {
            sys::syscall(libc::SYS_ioctl, [fd, libc::TCGETS as usize, termios.as_mut_ptr() as usize, 0, 0, 0])
        };
        if is_tty.is_err() {
            continue;
        }
        let attr = sys::PathBeneathAttr { allowed_access: access, parent_fd: fd as i32 };
        // SAFETY: the attribute lives on this stack frame for the call; `ruleset` is the open ruleset.
        let _ = unsafe {
            sys::syscall(
                sys::SYS_LANDLOCK_ADD_RULE,
                [ruleset as usize, sys::LANDLOCK_RULE_PATH_BENEATH, &raw const attr as usize, 0, 0, 0],
            )
        };
    }
}

/// Install one seccomp program.
fn install_filter(program: &[seccompiler::sock_filter]) -> Result<(), ChildSetupFailure> {
    let len = u16::try_from(program.len())
        .map_err(|_| ChildSetupFailure { stage: "seccomp", errno: libc::E2BIG })?;
    let fprog = sys::SockFprog { len, filter: program.as_ptr() };
    let fprog_addr = &raw const fprog as usize;
    // SAFETY: `fprog` points at `program`, alive for the call; SECCOMP_SET_MODE_FILTER with flags 0.
    let ret = unsafe {
        sys::syscall(libc::SYS_seccomp, [libc::SECCOMP_SET_MODE_FILTER as usize, 0, fprog_addr, 0, 0, 0])
    };
    match ret {
        Err(libc::ENOSYS) => {
            // Kernels before 3.17: the prctl interface.
            // SAFETY: as above, through PR_SET_SECCOMP.
            let ret = unsafe {
                sys::syscall(
                    libc::SYS_prctl,
                    [libc::PR_SET_SECCOMP as usize, libc::SECCOMP_MODE_FILTER as usize, fprog_addr, 0, 0, 0],
                )
            };
            check("prctl(PR_SET_SECCOMP)", ret).map(drop)
        }
        other => check("seccomp(SECCOMP_SET_MODE_FILTER)", other).map(drop),
    }
}

/// Step 1: the private, read-only mount namespace (and a UTS namespace of the command's own).
fn apply_mounts(plan: &MountPlan) -> Result<(), ChildSetupFailure> {
    new_namespace(plan, libc::CLONE_NEWUTS)?;
    build_tree(plan, false)?;
    // The cwd still points into the mount it was entered on (now read-only or shadowed): enter it again.
    // SAFETY: chdir on a NUL-terminated path owned by the plan.
    let ret = unsafe { sys::syscall(libc::SYS_chdir, [ptr(&plan.cwd), 0, 0, 0, 0, 0]) };
    check("chdir", ret)?;
    Ok(())
}

/// Why [`try_mounts`] failed: the step and its errno, as the forked child saw them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeFailure {
    /// The step (a [`ChildSetupFailure`] stage, or the probe's own `pipe2`/`fork`).
    pub(crate) stage: String,
    /// Its errno.
    pub(crate) errno: i32,
}

/// Try step 1 for `plan` in a forked child that then exits: what a command would get, learnt by doing it (a
/// container's seccomp profile, an outer sandbox or an AppArmor rule refuse it where sysctls and capabilities
/// say nothing). The child only issues raw system calls on data prepared here, so forking a threaded process
/// is safe; it reports the failing step through a pipe and is reaped before this returns. Nothing it did
/// outlives it: its namespaces die with it.
pub(crate) fn try_mounts(plan: &MountPlan) -> Result<(), ProbeFailure> {
    let fail = |stage: &str| ProbeFailure { stage: stage.to_owned(), errno: last_errno() };
    let mut fds = [-1i32; 2];
    // SAFETY: pipe2 writes two descriptors into the two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(fail("pipe2"));
    }
    let [read_end, write_end] = fds;
    // SAFETY: the child runs only `apply_mounts` (raw system calls on `plan`, which the fork copied), a raw
    // `write` and `_exit`: nothing that needs a lock another thread might hold.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // The answer is a message, never the exit status alone: a host that reaps every child (uexec-pty's
        // subreaper thread) may collect this one before `waitpid` below.
        let mut message = [0u8; 128];
        let len = match apply_mounts(plan) {
            Ok(()) => 4,
            Err(failure) => {
                let stage = failure.stage.as_bytes();
                let len = stage.len().min(message.len() - 4);
                message[..4].copy_from_slice(&failure.errno.to_le_bytes());
                message[4..4 + len].copy_from_slice(&stage[..len]);
                4 + len
            }
        };
        // SAFETY: write from a stack buffer of at least `len` bytes to the pipe's write end.
        let _ = unsafe {
            sys::syscall(libc::SYS_write, [write_end as usize, message.as_ptr() as usize, len, 0, 0, 0])
        };
        // SAFETY: _exit ends the child without running anything of the parent's (no atexit, no destructors).
        unsafe { libc::_exit(0) }
    }
    let forked = if pid < 0 { Err(fail("fork")) } else { Ok(pid) };
    // SAFETY: closing the write end this process holds (the child has its own copy).
    unsafe { libc::close(write_end) };
    let mut message = [0u8; 128];
    let mut filled = 0;
    while forked.is_ok() && filled < message.len() {
        // SAFETY: read into the unfilled part of a stack buffer.
        let n =
            unsafe { libc::read(read_end, message[filled..].as_mut_ptr().cast(), message.len() - filled) };
        match n {
            n if n > 0 => filled += n as usize,
            n if n < 0 && last_errno() == libc::EINTR => continue,
            _ => break,
        }
    }
    // SAFETY: closing the read end opened above.
    unsafe { libc::close(read_end) };
    let pid = forked?;
    let mut status = 0;
    // SAFETY: waitpid on the child forked above, into a local. ECHILD: another thread reaped it already, which
    // is fine: the pipe has said how it went.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && last_errno() == libc::EINTR {}
    let Some(errno) = message.get(..4).filter(|_| filled >= 4) else {
        return Err(ProbeFailure {
            stage: "the probe child, which ended without an answer".into(),
            errno: libc::ECHILD,
        });
    };
    match i32::from_le_bytes([errno[0], errno[1], errno[2], errno[3]]) {
        0 => Ok(()),
        errno => {
            Err(ProbeFailure { stage: String::from_utf8_lossy(&message[4..filled]).into_owned(), errno })
        }
    }
}

/// The calling thread's errno.
fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// The stages of step 1 (the mount namespace), as [`ChildSetupFailure::stage`] names them: the calls below
/// name their failures with these, and [`is_mount_stage`] knows a step-1 failure by them.
const UNSHARE_NS: &str = "unshare(CLONE_NEWNS)";
const UNSHARE_USER_NS: &str = "unshare(CLONE_NEWUSER|CLONE_NEWNS)";
const UNSHARE_UTS: &str = "unshare(CLONE_NEWUTS)";
const SETNS_NS: &str = "setns(CLONE_NEWNS)";
const SETNS_USER: &str = "setns(CLONE_NEWUSER)";
const WRITE_SETGROUPS: &str = "write /proc/self/setgroups";
const WRITE_UID_MAP: &str = "write /proc/self/uid_map";
const WRITE_GID_MAP: &str = "write /proc/self/gid_map";
const MOUNT_PRIVATE: &str = "mount(/, MS_REC|MS_PRIVATE)";
const OPEN_TREE: &str = "open_tree(OPEN_TREE_CLONE)";
const MOUNT_SETATTR: &str = "mount_setattr";
const MOVE_MOUNT: &str = "move_mount";
const MOUNT_HIDDEN_TMPFS: &str = "mount(tmpfs) over a hidden directory";
const MOUNT_STAGES: [&str; 13] = [
    UNSHARE_NS,
    SETNS_USER,
    UNSHARE_USER_NS,
    UNSHARE_UTS,
    SETNS_NS,
    WRITE_SETGROUPS,
    WRITE_UID_MAP,
    WRITE_GID_MAP,
    MOUNT_PRIVATE,
    OPEN_TREE,
    MOUNT_SETATTR,
    MOVE_MOUNT,
    MOUNT_HIDDEN_TMPFS,
];

/// True when `stage` is one of step 1's: the mount namespace or a mount in it.
pub(crate) fn is_mount_stage(stage: &str) -> bool {
    MOUNT_STAGES.iter().any(|known| stage.starts_with(known))
}

/// Step 1 with a namespace built earlier: `setns` into it (the root and the working directory become its root),
/// `unshare` a UTS namespace of the command's own, then enter the working directory again.
fn enter_mounts(namespace: i32, cwd: &CStr) -> Result<(), ChildSetupFailure> {
    // SAFETY: setns on a namespace descriptor owned by the hook, with an integer flag.
    let ret = unsafe {
        sys::syscall(libc::SYS_setns, [namespace as isize as usize, libc::CLONE_NEWNS as usize, 0, 0, 0, 0])
    };
    check(SETNS_NS, ret)?;
    // SAFETY: unshare takes an integer flag set.
    let ret = unsafe { sys::syscall(libc::SYS_unshare, [libc::CLONE_NEWUTS as usize, 0, 0, 0, 0, 0]) };
    check(UNSHARE_UTS, ret)?;
    // SAFETY: chdir on a NUL-terminated path owned by the hook.
    let ret = unsafe { sys::syscall(libc::SYS_chdir, [ptr(cwd), 0, 0, 0, 0, 0]) };
    check("chdir", ret).map(drop)
}

/// For `crate::template`: give the calling thread a new mount namespace for `plan` (privileged mode only):
/// `unshare(CLONE_NEWNS)`, which also gives the thread a file-system context of its own. [`build_template`]
/// then builds the tree.
pub(crate) fn template_namespace(plan: &MountPlan) -> Result<(), ChildSetupFailure> {
    if plan.mode != MountMode::Privileged {
        return Err(ChildSetupFailure { stage: "building a mount namespace template", errno: libc::EINVAL });
    }
    new_namespace(plan, 0)
}

/// For `crate::template`, in the namespace of [`template_namespace`]: everything [`apply_mounts`] does but
/// entering the working directory. In the server-wide sandbox the `/proc` must be the copy of the shared PID
/// namespace's procfs (the calling thread's own PID namespace is not the commands', so a procfs mounted here
/// would show the wrong processes: an error instead); otherwise it is a fresh procfs of the calling thread's
/// PID namespace, which a command enters only when it runs in that namespace too (`Mounts::Enter::proc_for`).
pub(crate) fn build_template(plan: &MountPlan) -> Result<(), ChildSetupFailure> {
    build_tree(plan, plan.procfs.is_some())
}

/// `unshare` the mount namespace plus `also` (and, in user-namespace mode, the user namespace with its id maps).
fn new_namespace(plan: &MountPlan, also: i32) -> Result<(), ChildSetupFailure> {
    match plan.mode {
        MountMode::Privileged | MountMode::SandboxUserNamespace => {
            let flags = (libc::CLONE_NEWNS | also) as usize;
            // SAFETY: unshare takes an integer flag set.
            let ret = unsafe { sys::syscall(libc::SYS_unshare, [flags, 0, 0, 0, 0, 0]) };
            check(UNSHARE_NS, ret)?;
        }
        MountMode::UserNamespace => {
            let flags = (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | also) as usize;
            // SAFETY: unshare takes an integer flag set.
            let ret = unsafe { sys::syscall(libc::SYS_unshare, [flags, 0, 0, 0, 0, 0]) };
            check(UNSHARE_USER_NS, ret)?;
            write_file(c"/proc/self/setgroups", b"deny", WRITE_SETGROUPS)?;
            write_file(c"/proc/self/uid_map", &plan.uid_map, WRITE_UID_MAP)?;
            write_file(c"/proc/self/gid_map", &plan.gid_map, WRITE_GID_MAP)?;
        }
    }
    Ok(())
}

/// Everything in the new mount namespace: private, writable roots cloned, everything else read-only, protected
/// entries, hidden paths, `/proc` (`strict_proc`: only the copy of the shared procfs will do).
fn build_tree(plan: &MountPlan, strict_proc: bool) -> Result<(), ChildSetupFailure> {
    // Private first: nothing done below may propagate to the parent namespace.
    let private = (libc::MS_REC | libc::MS_PRIVATE) as usize;
    // SAFETY: mount with null source/type/data and a static target string.
    let ret = unsafe { sys::syscall(libc::SYS_mount, [0, ptr(c"/"), 0, private, 0, 0]) };
    check(MOUNT_PRIVATE, ret)?;

    // Clone each writable root's mount tree while it still has the host's mount flags.
    if plan.roots.len() > MAX_MOUNT_ROOTS {
        return Err(ChildSetupFailure { stage: OPEN_TREE, errno: libc::E2BIG });
    }
    let mut clones = [-1i32; MAX_MOUNT_ROOTS];
    for (slot, root) in clones.iter_mut().zip(&plan.roots) {
        let fd = open_tree(&root.path, 0)?;
        if root.nodev {
            set_attr(fd as usize, c"", libc::AT_EMPTY_PATH as usize, sys::MOUNT_ATTR_NODEV)?;
        }
        *slot = fd;
    }
    if plan.readonly_everything {
        set_attr(AT_FDCWD, c"/", 0, sys::MOUNT_ATTR_RDONLY)?;
    }
    for path in &plan.nodev {
        set_attr(AT_FDCWD, path, 0, sys::MOUNT_ATTR_NODEV)?;
    }
    for (fd, root) in clones.iter().zip(&plan.roots) {
        attach(*fd, &root.path)?;
    }
    for path in &plan.pinned {
        // A copy of the (writable, nodev) mount it sits in, attached over itself: it keeps its flags and becomes
        // a mount point, so renaming or removing it fails with EBUSY.
        let fd = open_tree(path, 0)?;
        attach(fd, path)?;
    }
    for path in &plan.closed {
        // A copy of the mount with the mounts below it (the submodules' git dirs, pinned above), only its own
        // made read-only: nothing can be created, renamed or removed in it, the git dirs below stay writable.
        let fd = open_tree(path, 0)?;
        set_own_attr(fd as usize, sys::MOUNT_ATTR_RDONLY)?;
        attach(fd, path)?;
    }
    for path in &plan.protected {
        let fd = open_tree(path, libc::AT_SYMLINK_NOFOLLOW as usize)?;
        set_attr(fd as usize, c"", libc::AT_EMPTY_PATH as usize, sys::MOUNT_ATTR_RDONLY)?;
        attach(fd, path)?;
    }
    for (path, overlay) in &plan.copy_on_write {
        let fd = clone_detached(overlay.as_raw_fd())?;
        attach(fd, path)?;
    }
    for path in &plan.hidden_pinned {
        // As `pinned`, for the directories above a hidden entry (after the views: some lie inside one).
        let fd = open_tree(path, 0)?;
        attach(fd, path)?;
    }
    hide(plan)?;
    if strict_proc {
        let procfs = plan.procfs.as_deref().map_or(-1, AsRawFd::as_raw_fd);
        let fd = clone_detached(procfs)?;
        attach(fd, c"/proc")?;
    } else if plan.fresh_proc {
        let flags = (libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC) as usize;
        // SAFETY: mount with static NUL-terminated source, target and type strings, no data.
        let ret = unsafe {
            sys::syscall(libc::SYS_mount, [ptr(c"proc"), ptr(c"/proc"), ptr(c"proc"), flags, 0, 0])
        };
        check("mount a procfs of the sandbox's PID namespace on /proc", ret)?;
    } else if plan.mode == MountMode::Privileged {
        mount_own_proc(plan.proc_hidepid, plan.procfs.as_deref());
    }
    Ok(())
}

/// Cover the hidden secret locations: an empty read-only tmpfs (mode 555: listable, empty, for root and everyone else) over each directory, a read-only
/// `nodev`/`noexec` copy of `/dev/null` over each file. Opening a hidden file then fails with `EACCES` (a device
/// on a `nodev` mount), whoever asks; a hidden directory is empty. Both are mount points, so a command cannot
/// rename, remove or hard-link them away (`EBUSY`, `EXDEV`).
///
/// Only the first hidden directory gets a new tmpfs; the others get a copy of that mount (`open_tree` clone and
/// `move_mount`), which shares its superblock: the same empty, read-only directory, without creating and
/// later tearing down one filesystem per directory. Nothing can be written to it, so sharing it shares nothing.
fn hide(plan: &MountPlan) -> Result<(), ChildSetupFailure> {
    let flags = (libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC) as usize;
    // The sandbox's own empty tmpfs, copied: no file system is created (and later torn down) per command.
    let copied = match (&plan.empty_dir, plan.hidden_dirs.split_first()) {
        (Some(empty), Some((first, others))) => match clone_detached(empty.as_raw_fd()) {
            Ok(fd) => {
                attach(fd, first)?;
                for dir in others {
                    let fd = clone_detached(empty.as_raw_fd())?;
                    attach(fd, dir)?;
                }
                true
            }
            // Before Linux 6.15 a detached mount cannot be copied from another mount namespace.
            Err(_) => false,
        },
        _ => false,
    };
    if !copied && let Some((first, others)) = plan.hidden_dirs.split_first() {
        // SAFETY: mount with static NUL-terminated source, type and data strings and a target owned by the plan.
        let ret = unsafe {
            sys::syscall(
                libc::SYS_mount,
                [ptr(c"tmpfs"), ptr(first), ptr(c"tmpfs"), flags, ptr(c"size=4k,nr_inodes=1,mode=555"), 0],
            )
        };
        check(MOUNT_HIDDEN_TMPFS, ret)?;
        for dir in others {
            // A copy of the tmpfs just mounted on `first` (its flags included), attached over `dir`.
            let fd = open_tree(first, 0)?;
            attach(fd, dir)?;
        }
    }
    for file in &plan.hidden_files {
        let fd = open_tree(c"/dev/null", 0)?;
        let attrs =
            sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOEXEC;
        set_attr(fd as usize, c"", libc::AT_EMPTY_PATH as usize, attrs)?;
        attach(fd, file)?;
    }
    Ok(())
}

/// A fresh, read-only procfs on `/proc` for the child's own PID namespace, mounted `hidepid=ptraceable`.
///
/// The host may spawn commands into a PID namespace of their own (uexec-pty's containment); the inherited `/proc`
/// then shows the host's numbering, so `/proc/self` and `getpid()` disagree and `ps` dies with "lookup self". The
/// fresh mount shows the command's namespace only. `hidepid=ptraceable` then hides every process the command could
/// not `ptrace` (read mode; unlike `hidepid=2` it exempts no group, and root is in group 0): with the Landlock domain in force, every process outside that domain, that is the uexec
/// server, other servers' commands, other sessions and the rest of the host (their `cmdline` carries arguments
/// such as `--password=...`). The command keeps seeing its own process tree. Since Linux 5.8 procfs options
/// belong to the mount, never to the host's `/proc` (this sandbox needs 5.12 for `mount_setattr` anyway). A
/// failure (inside some containers procfs cannot be mounted) leaves the inherited read-only `/proc` in place,
/// where those command lines stay visible (`docs/sandbox.md`, "What one command can see of others").
///
/// In the shared sandbox PID namespace (`hidepid` false) every process is one of this server's sandboxed
/// commands, which may see and signal each other: nothing is hidden there (their environments, open files and
/// memory stay out of reach: reading them needs `ptrace` access, which Landlock denies across domains).
fn mount_own_proc(hidepid: bool, procfs: Option<&OwnedFd>) {
    // The shared namespace's procfs, copied (no file system is created, and later torn down, per command).
    if let Some(procfs) = procfs
        && let Ok(fd) = clone_detached(procfs.as_raw_fd())
        && attach(fd, c"/proc").is_ok()
    {
        return;
    }
    let flags = (libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC) as usize;
    let data = if hidepid { ptr(c"hidepid=ptraceable") } else { 0 };
    // SAFETY: mount with static NUL-terminated source, target, type and data strings (or no data).
    let _ =
        unsafe { sys::syscall(libc::SYS_mount, [ptr(c"proc"), ptr(c"/proc"), ptr(c"proc"), flags, data, 0]) };
}

/// True when the namespace file `path` of the calling process (`/proc/self/ns/...`) is the namespace `fd`.
fn in_namespace_of(fd: i32, path: &CStr) -> Result<bool, ChildSetupFailure> {
    const STAGE: &str = "comparing the sandbox's user namespace with the child's";
    // SAFETY: all-zero `stat`s are valid values for the kernel to overwrite.
    let (mut ours, mut theirs): (libc::stat, libc::stat) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: fstat of a descriptor and stat of a NUL-terminated path, into local buffers.
    let ret = unsafe { sys::syscall(libc::SYS_fstat, [fd as usize, &raw mut ours as usize, 0, 0, 0, 0]) };
    check(STAGE, ret)?;
    // SAFETY: as above.
    let ret = unsafe {
        sys::syscall(libc::SYS_newfstatat, [AT_FDCWD, ptr(path), &raw mut theirs as usize, 0, 0, 0])
    };
    check(STAGE, ret)?;
    Ok((ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino))
}

/// For a process adapter that only calls `run_in_child` after `enter_pid_namespace` pointed this process's
/// children at the sandbox's PID namespace: fork, and return in the child (the command, in the namespace). This
/// process becomes a relay: it closes every descriptor but the standard streams (the adapter's exec-report pipe
/// among them, so that the adapter sees the command's `exec`), waits for the command and exits with its exit
/// code, or 128 + the signal that ended it. A signal sent to the relay's pid alone does not reach the command
/// (one sent to the process group does); uexec-pty creates the command in the namespace itself instead.
fn relay_to_child() -> Result<(), ChildSetupFailure> {
    // SAFETY: a plain fork (clone without CLONE_VM, returning twice on copies of this stack) of this child.
    let pid = unsafe { sys::syscall(libc::SYS_clone, [libc::SIGCHLD as usize, 0, 0, 0, 0, 0]) };
    let pid = check("fork (the command, in the sandbox's PID namespace)", pid)?;
    if pid == 0 {
        return Ok(());
    }
    // SAFETY: close_range on this process's own descriptors, flags 0.
    let _ = unsafe { sys::syscall(libc::SYS_close_range, [3, u32::MAX as usize, 0, 0, 0, 0]) };
    let mut status: i32 = 0;
    loop {
        // SAFETY: wait4 for this process's child, into a local; no rusage.
        let waited = unsafe { sys::syscall(libc::SYS_wait4, [pid, &raw mut status as usize, 0, 0, 0, 0]) };
        match waited {
            Err(libc::EINTR) => {}
            Ok(_) => break,
            Err(_) => {
                status = 127 << 8;
                break;
            }
        }
    }
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
    // SAFETY: exit_group ends this process without running anything of the parent's.
    let _ = unsafe { sys::syscall(libc::SYS_exit_group, [code as usize, 0, 0, 0, 0, 0]) };
    Err(ChildSetupFailure { stage: "exit_group", errno: libc::EIO })
}

/// Fail unless the calling process runs in the PID namespace `expected` (device and inode).
fn check_pid_namespace(expected: (u64, u64)) -> Result<(), ChildSetupFailure> {
    if in_pid_namespace(expected)? {
        Ok(())
    } else {
        Err(ChildSetupFailure { stage: PID_NAMESPACE_STAGE, errno: libc::EPERM })
    }
}

/// The stage named when the PID namespace cannot be read or is not the expected one.
const PID_NAMESPACE_STAGE: &str = "checking that the command runs in the sandbox's PID namespace";

/// True when the calling process runs in the PID namespace `expected` (device and inode).
fn in_pid_namespace(expected: (u64, u64)) -> Result<bool, ChildSetupFailure> {
    const STAGE: &str = PID_NAMESPACE_STAGE;
    // SAFETY: an all-zero `stat` is a valid value for the kernel to overwrite.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: stat on a static NUL-terminated path into a local buffer.
    let ret = unsafe {
        sys::syscall(
            libc::SYS_newfstatat,
            [AT_FDCWD, ptr(c"/proc/self/ns/pid"), &raw mut stat as usize, 0, 0, 0],
        )
    };
    check(STAGE, ret)?;
    Ok((stat.st_dev, stat.st_ino) == expected)
}

/// `open_tree(path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | extra)`: a detached copy of the mount tree.
fn open_tree(path: &CStr, extra: usize) -> Result<i32, ChildSetupFailure> {
    let flags = sys::OPEN_TREE_CLONE | sys::OPEN_TREE_CLOEXEC | sys::AT_RECURSIVE | extra;
    // SAFETY: open_tree on a NUL-terminated path owned by the plan.
    let ret = unsafe { sys::syscall(libc::SYS_open_tree, [AT_FDCWD, ptr(path), flags, 0, 0, 0]) };
    let fd = check(OPEN_TREE, ret)?;
    i32::try_from(fd).map_err(|_| ChildSetupFailure { stage: OPEN_TREE, errno: libc::EBADF })
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)`: a copy of the detached mount `fd`.
fn clone_detached(fd: i32) -> Result<i32, ChildSetupFailure> {
    let flags = sys::OPEN_TREE_CLONE | sys::OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as usize;
    // SAFETY: open_tree on a descriptor owned by the plan with an empty static path.
    let ret = unsafe { sys::syscall(libc::SYS_open_tree, [fd as isize as usize, ptr(c""), flags, 0, 0, 0]) };
    let fd = check("open_tree(OPEN_TREE_CLONE) of a detached mount", ret)?;
    i32::try_from(fd).map_err(|_| ChildSetupFailure { stage: OPEN_TREE, errno: libc::EBADF })
}

/// `mount_setattr(dirfd, path, AT_RECURSIVE | flags, {attr_set})`.
fn set_attr(dirfd: usize, path: &CStr, flags: usize, attr_set: u64) -> Result<(), ChildSetupFailure> {
    let attr = sys::MountAttr { attr_set, ..sys::MountAttr::default() };
    let size = size_of::<sys::MountAttr>();
    // SAFETY: `attr` lives on this stack frame for the call; `path` is NUL-terminated.
    let ret = unsafe {
        sys::syscall(
            libc::SYS_mount_setattr,
            [dirfd, ptr(path), sys::AT_RECURSIVE | flags, &raw const attr as usize, size, 0],
        )
    };
    check(MOUNT_SETATTR, ret).map(drop)
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH, {attr_set})`: the detached mount `fd` itself, not those below it.
fn set_own_attr(fd: usize, attr_set: u64) -> Result<(), ChildSetupFailure> {
    let attr = sys::MountAttr { attr_set, ..sys::MountAttr::default() };
    let size = size_of::<sys::MountAttr>();
    // SAFETY: `attr` lives on this stack frame for the call; the path is a static empty string.
    let ret = unsafe {
        sys::syscall(
            libc::SYS_mount_setattr,
            [fd, ptr(c""), libc::AT_EMPTY_PATH as usize, &raw const attr as usize, size, 0],
        )
    };
    check(MOUNT_SETATTR, ret).map(drop)
}

/// `move_mount(fd, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH)`, then close `fd`.
fn attach(fd: i32, path: &CStr) -> Result<(), ChildSetupFailure> {
    let from = fd as isize as usize;
    // SAFETY: `fd` is a detached mount tree from open_tree; `path` is NUL-terminated. The final component of
    // `path` is not followed (no MOVE_MOUNT_T_SYMLINKS), so a protected symlink is covered, not its target.
    let ret = unsafe {
        sys::syscall(
            libc::SYS_move_mount,
            [from, ptr(c""), AT_FDCWD, ptr(path), sys::MOVE_MOUNT_F_EMPTY_PATH, 0],
        )
    };
    check(MOVE_MOUNT, ret)?;
    // SAFETY: closing the descriptor this child opened.
    let _ = unsafe { sys::syscall(libc::SYS_close, [from, 0, 0, 0, 0, 0]) };
    Ok(())
}

/// Write `data` to the file at `path` (for `/proc/self/{setgroups,uid_map,gid_map}`).
fn write_file(path: &CStr, data: &[u8], stage: &'static str) -> Result<(), ChildSetupFailure> {
    let flags = (libc::O_WRONLY | libc::O_CLOEXEC) as usize;
    // SAFETY: openat on a static NUL-terminated path.
    let fd = check(stage, unsafe { sys::syscall(libc::SYS_openat, [AT_FDCWD, ptr(path), flags, 0, 0, 0]) })?;
    // SAFETY: write from a live slice of `data.len()` bytes.
    let written = unsafe { sys::syscall(libc::SYS_write, [fd, data.as_ptr() as usize, data.len(), 0, 0, 0]) };
    // SAFETY: closing the descriptor opened above.
    let _ = unsafe { sys::syscall(libc::SYS_close, [fd, 0, 0, 0, 0, 0]) };
    match check(stage, written)? {
        n if n == data.len() => Ok(()),
        _ => Err(ChildSetupFailure { stage, errno: libc::EIO }),
    }
}

/// Step 2: mask the effective, permitted and inheritable sets to `keep` (one `capset`) and clear the ambient set.
///
/// The bounding set is left alone on purpose: with `no_new_privs` (step 3) `execve` never raises the permitted
/// set (the kernel intersects it with the old one, even for root and for setuid or file-capability binaries),
/// and `capset` can only lower it, so nothing outside `keep` can come back; each `PR_CAPBSET_DROP` would cost a
/// credential commit for no added protection.
fn drop_capabilities(keep: u64) -> Result<(), ChildSetupFailure> {
    let mut header = sys::CapHeader { version: sys::CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [sys::CapData::default(); 2];
    let header_addr = &raw mut header as usize;
    // SAFETY: capget with a version-3 header writes two CapData structs, which `data` holds.
    let ret =
        unsafe { sys::syscall(libc::SYS_capget, [header_addr, data.as_mut_ptr() as usize, 0, 0, 0, 0]) };
    check("capget", ret)?;
    let clear_ambient = [libc::PR_CAP_AMBIENT as usize, libc::PR_CAP_AMBIENT_CLEAR_ALL as usize, 0, 0, 0, 0];
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes integer arguments only.
    match unsafe { sys::syscall(libc::SYS_prctl, clear_ambient) } {
        Ok(_) | Err(libc::EINVAL) => {}
        Err(errno) => return Err(ChildSetupFailure { stage: "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", errno }),
    }
    for (word, half) in data.iter_mut().enumerate() {
        let mask = (keep >> (32 * word)) as u32;
        half.effective &= mask;
        half.permitted &= mask;
        half.inheritable &= mask;
    }
    // SAFETY: capset with a version-3 header reads two CapData structs from `data`.
    let ret = unsafe { sys::syscall(libc::SYS_capset, [header_addr, data.as_ptr() as usize, 0, 0, 0, 0]) };
    check("capset", ret).map(drop)
}
