//! Raw Linux system calls and kernel constants for the child side of the sandbox.
//!
//! The child runs between `fork`/`vfork` and `exec`, possibly sharing the parent's memory: it must not allocate,
//! lock or even touch `errno` (in a `vfork`-like child `errno` is the parent thread's). So the calls here go to the
//! kernel directly (inline `syscall`/`svc`) and return the error number as a value. Only constants that the `libc`
//! crate lacks are defined here, with their kernel header names.
#![allow(unsafe_code)] // Reason: issuing system calls by number is inherently unsafe; the wrappers are `unsafe fn`.

use libc::c_long;

/// `landlock_restrict_self(2)` (same number on every architecture since Linux 5.13).
pub(crate) const SYS_LANDLOCK_RESTRICT_SELF: c_long = libc::SYS_landlock_restrict_self;
/// `landlock_create_ruleset(2)`.
pub(crate) const SYS_LANDLOCK_CREATE_RULESET: c_long = libc::SYS_landlock_create_ruleset;
/// `open_tree_attr(2)` (Linux 6.15); not in `libc` yet. The number is shared by every architecture.
pub(crate) const SYS_OPEN_TREE_ATTR: c_long = 467;

/// `landlock_add_rule(2)`.
pub(crate) const SYS_LANDLOCK_ADD_RULE: c_long = libc::SYS_landlock_add_rule;
/// `LANDLOCK_RULE_PATH_BENEATH`.
pub(crate) const LANDLOCK_RULE_PATH_BENEATH: usize = 1;
/// `LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE`.
pub(crate) const LANDLOCK_ACCESS_FS_READ_WRITE_FILE: u64 = (1 << 1) | (1 << 2);
/// `LANDLOCK_ACCESS_FS_IOCTL_DEV` (ABI 5).
pub(crate) const LANDLOCK_ACCESS_FS_IOCTL_DEV: u64 = 1 << 15;

/// `struct landlock_path_beneath_attr` (packed, as in `linux/landlock.h`).
#[repr(C, packed)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathBeneathAttr {
    /// Rights granted.
    pub(crate) allowed_access: u64,
    /// The file or directory.
    pub(crate) parent_fd: i32,
}

/// `LANDLOCK_CREATE_RULESET_VERSION`: ask `landlock_create_ruleset` for the ABI version.
pub(crate) const LANDLOCK_CREATE_RULESET_VERSION: usize = 1;

/// `OPEN_TREE_CLONE` (`linux/mount.h`).
pub(crate) const OPEN_TREE_CLONE: usize = 1;
/// `OPEN_TREE_CLOEXEC` (= `O_CLOEXEC`).
pub(crate) const OPEN_TREE_CLOEXEC: usize = libc::O_CLOEXEC as usize;
/// `MOVE_MOUNT_F_EMPTY_PATH`: the source of `move_mount` is the descriptor itself.
pub(crate) const MOVE_MOUNT_F_EMPTY_PATH: usize = 0x0000_0004;
/// `MOUNT_ATTR_RDONLY` (`struct mount_attr.attr_set`).
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
/// `MOUNT_ATTR_NOSUID`: setuid bits and file capabilities on the mount grant nothing.
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
/// `MOUNT_ATTR_NODEV`: device nodes on the mount cannot be opened.
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
/// `MOUNT_ATTR_NOEXEC`: nothing on the mount can be executed.
pub(crate) const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;
/// `AT_RECURSIVE`: apply to the whole mount subtree.
pub(crate) const AT_RECURSIVE: usize = 0x8000;

/// `_LINUX_CAPABILITY_VERSION_3`.
pub(crate) const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// `CAP_SYS_ADMIN`.
pub(crate) const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_SETPCAP`.
pub(crate) const CAP_SETPCAP: u32 = 8;

/// `struct mount_attr` (`linux/mount.h`), the argument of `mount_setattr(2)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MountAttr {
    /// Attributes to set.
    pub(crate) attr_set: u64,
    /// Attributes to clear.
    pub(crate) attr_clr: u64,
    /// Propagation type (`MS_PRIVATE`, ...), 0 to leave it.
    pub(crate) propagation: u64,
    /// User namespace fd for id-mapped mounts.
    pub(crate) userns_fd: u64,
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct CapHeader {
    /// `_LINUX_CAPABILITY_VERSION_3`.
    pub(crate) version: u32,
    /// 0: the calling thread.
    pub(crate) pid: i32,
}

/// `struct __user_cap_data_struct`; version 3 uses two of them (capabilities 0-31 and 32-63).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CapData {
    /// Effective set.
    pub(crate) effective: u32,
    /// Permitted set.
    pub(crate) permitted: u32,
    /// Inheritable set.
    pub(crate) inheritable: u32,
}

/// `struct sock_fprog`: a classic BPF program for `seccomp(SECCOMP_SET_MODE_FILTER)`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct SockFprog {
    /// Number of instructions.
    pub(crate) len: u16,
    /// The instructions (`seccompiler::sock_filter` has the kernel's layout).
    pub(crate) filter: *const seccompiler::sock_filter,
}

/// Issue system call `nr` with six arguments; `Ok(return value)` or `Err(errno)`. Never touches `errno`.
///
/// # Safety
/// The arguments must be valid for system call `nr` (pointers to live memory of the right type and size).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) unsafe fn syscall(nr: c_long, args: [usize; 6]) -> Result<usize, i32> {
    let ret: isize;
    // SAFETY: the x86_64 Linux syscall convention (number in rax, arguments in rdi, rsi, rdx, r10, r8, r9; rcx and
    // r11 clobbered; result in rax). The caller guarantees the arguments are valid for `nr`.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    decode(ret)
}

/// Issue system call `nr` with six arguments; `Ok(return value)` or `Err(errno)`. Never touches `errno`.
///
/// # Safety
/// The arguments must be valid for system call `nr` (pointers to live memory of the right type and size).
#[cfg(target_arch = "aarch64")]
#[inline]
pub(crate) unsafe fn syscall(nr: c_long, args: [usize; 6]) -> Result<usize, i32> {
    let ret: isize;
    // SAFETY: the aarch64 Linux syscall convention (number in x8, arguments in x0-x5, result in x0). The caller
    // guarantees the arguments are valid for `nr`.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") nr,
            inlateout("x0") args[0] => ret,
            in("x1") args[1],
            in("x2") args[2],
            in("x3") args[3],
            in("x4") args[4],
            in("x5") args[5],
            options(nostack),
        );
    }
    decode(ret)
}

/// Issue system call `nr` through `libc::syscall` (architectures without an inline path: this one does write
/// `errno`, which a `fork`ed child may do; the seccomp filter is not built for these architectures anyway).
///
/// # Safety
/// The arguments must be valid for system call `nr`.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) unsafe fn syscall(nr: c_long, args: [usize; 6]) -> Result<usize, i32> {
    // SAFETY: forwarded as is; the caller guarantees the arguments are valid for `nr`.
    let ret = unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4], args[5]) };
    if ret < 0 {
        // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for reading.
        Err(unsafe { *libc::__errno_location() })
    } else {
        Ok(ret as usize)
    }
}

/// Open `path` (canonical) as an `O_PATH` directory descriptor without following any symbolic link on the way
/// (`openat2` with `RESOLVE_NO_SYMLINKS`; every Landlock kernel has it). For the parent side: a writable root
/// whose component was swapped for a symlink after it was canonicalised fails with `ELOOP` instead of naming
/// another directory.
pub(crate) fn open_dir_no_symlinks(path: &std::ffi::CStr) -> std::io::Result<std::os::fd::OwnedFd> {
    open_no_symlinks(path, libc::O_PATH | libc::O_DIRECTORY)
}

/// What [`create_placeholder_at`] creates.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Placeholder<'a> {
    /// An empty directory (`mkdirat`, mode 0755).
    Dir,
    /// A file holding these bytes (`openat` with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0644).
    File(&'a [u8]),
    /// A symbolic link to this target (`symlinkat`).
    Link(&'a std::ffi::CStr),
}

/// Create the placeholder `name` in `dir` (see [`Placeholder`]), owned like `dir` (best effort); `EEXIST` is
/// success (something is there to protect). The inode of the placeholder when this call made it (`None`:
/// something was there already; `Some(0)`: made, but its inode could not be read, so it is never removed).
pub(crate) fn create_placeholder_at(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::CStr,
    placeholder: Placeholder<'_>,
) -> std::io::Result<Option<u64>> {
    use std::os::fd::AsRawFd;
    let dirfd = dir.as_raw_fd() as isize as usize;
    let name_ptr = name.as_ptr() as usize;
    let result = match placeholder {
        // SAFETY: mkdirat on a live directory descriptor and a NUL-terminated name.
        Placeholder::Dir => unsafe { syscall(libc::SYS_mkdirat, [dirfd, name_ptr, 0o755, 0, 0, 0]) },
        // SAFETY: symlinkat with a NUL-terminated target, a live directory descriptor and a NUL-terminated name.
        Placeholder::Link(target) => unsafe {
            syscall(libc::SYS_symlinkat, [target.as_ptr() as usize, dirfd, name_ptr, 0, 0, 0])
        },
        Placeholder::File(bytes) => {
            let flags =
                (libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC) as usize;
            // SAFETY: openat on a live directory descriptor and a NUL-terminated name; the descriptor is written
            // and closed below.
            unsafe { syscall(libc::SYS_openat, [dirfd, name_ptr, flags, 0o644, 0, 0]) }.and_then(|fd| {
                let mut written = 0usize;
                let mut outcome = Ok(fd);
                while written < bytes.len() {
                    let rest = &bytes[written..];
                    // SAFETY: write from a live slice to the descriptor just opened.
                    match unsafe {
                        syscall(libc::SYS_write, [fd, rest.as_ptr() as usize, rest.len(), 0, 0, 0])
                    } {
                        Ok(0) => {
                            outcome = Err(libc::EIO);
                            break;
                        }
                        Ok(n) => written += n,
                        Err(libc::EINTR) => {}
                        Err(errno) => {
                            outcome = Err(errno);
                            break;
                        }
                    }
                }
                // SAFETY: closing the descriptor just opened.
                let _ = unsafe { syscall(libc::SYS_close, [fd, 0, 0, 0, 0, 0]) };
                outcome
            })
        }
    };
    match result {
        Ok(_) => {}
        Err(libc::EEXIST) => return Ok(None),
        Err(errno) => return Err(std::io::Error::from_raw_os_error(errno)),
    }
    // SAFETY: an all-zero `stat` is a valid value for the kernel to overwrite.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat with AT_EMPTY_PATH on a live descriptor into a local buffer.
    let owner = unsafe {
        syscall(
            libc::SYS_newfstatat,
            [dirfd, c"".as_ptr() as usize, &raw mut stat as usize, libc::AT_EMPTY_PATH as usize, 0, 0],
        )
    };
    if owner.is_ok() {
        // SAFETY: fchownat on a live descriptor and a NUL-terminated name, not following a symlink. Best effort:
        // an unprivileged server owns what it creates already.
        let _ = unsafe {
            syscall(
                libc::SYS_fchownat,
                [
                    dirfd,
                    name_ptr,
                    stat.st_uid as usize,
                    stat.st_gid as usize,
                    libc::AT_SYMLINK_NOFOLLOW as usize,
                    0,
                ],
            )
        };
    }
    // SAFETY: an all-zero `stat` is a valid value for the kernel to overwrite.
    let mut made: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat of a NUL-terminated name in a live directory descriptor, not following a symlink, into a
    // local buffer.
    let inode = unsafe {
        syscall(
            libc::SYS_newfstatat,
            [dirfd, name_ptr, &raw mut made as usize, libc::AT_SYMLINK_NOFOLLOW as usize, 0, 0],
        )
    }
    .map_or(0, |_| made.st_ino);
    Ok(Some(inode))
}

/// `openat2(AT_FDCWD, path, {flags | O_CLOEXEC, RESOLVE_NO_SYMLINKS})`.
fn open_no_symlinks(path: &std::ffi::CStr, flags: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    /// `struct open_how` (`libc`'s is non-exhaustive).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how =
        OpenHow { flags: (flags | libc::O_CLOEXEC) as u64, mode: 0, resolve: libc::RESOLVE_NO_SYMLINKS };
    let at_fdcwd = libc::AT_FDCWD as isize as usize;
    let args = [at_fdcwd, path.as_ptr() as usize, &raw const how as usize, size_of::<OpenHow>(), 0, 0];
    // SAFETY: `path` is NUL-terminated and `how` a live `open_how` of the size passed, both alive for the call.
    let fd = unsafe { syscall(libc::SYS_openat2, args) }.map_err(std::io::Error::from_raw_os_error)?;
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: `fd` was just returned by openat2 and is owned by nobody else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// An empty, read-only tmpfs (`size=4k`, `nr_inodes=1`, `mode=555`: empty and listable by anyone, superblock and mount read-only, `nosuid`,
/// `nodev`, `noexec`) as a detached mount: `fsopen`, `fsconfig`, `fsmount`. Made once per sandbox in the parent;
/// each child attaches copies of it over the hidden directories instead of creating a tmpfs of its own.
pub(crate) fn empty_read_only_tmpfs() -> std::io::Result<std::os::fd::OwnedFd> {
    detached_read_only_mount(c"tmpfs", |context| {
        fsconfig(context, FSCONFIG_SET_STRING, c"size", Some(c"4k"), 0)?;
        fsconfig(context, FSCONFIG_SET_STRING, c"nr_inodes", Some(c"1"), 0)?;
        fsconfig(context, FSCONFIG_SET_STRING, c"mode", Some(c"555"), 0)?;
        fsconfig(context, FSCONFIG_SET_FLAG, c"ro", None, 0)
    })
}

/// A read-only procfs for the PID namespace `namespace` (`fsconfig` `pidns=`, Linux 6.15), as a detached mount
/// (`fsmount` with `RDONLY|NOSUID|NODEV|NOEXEC`): made once, copied onto each command's `/proc`.
pub(crate) fn procfs_for(namespace: std::os::fd::BorrowedFd<'_>) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    detached_read_only_mount(c"proc", |context| {
        fsconfig(context, FSCONFIG_SET_FD, c"pidns", None, namespace.as_raw_fd() as usize)
    })
}

/// `FSCONFIG_SET_FLAG`, `FSCONFIG_SET_STRING`, `FSCONFIG_SET_FD`.
const FSCONFIG_SET_FLAG: usize = 0;
const FSCONFIG_SET_STRING: usize = 1;
const FSCONFIG_SET_FD: usize = 5;

/// A writable overlayfs (`lowerdir`, `upperdir`, `workdir`: canonical directories whose paths hold no `:`, `,`
/// or `\`; `index=off`, `metacopy=off`, `volatile`, and `userxattr` when `user_xattr`) as a detached mount (`fsmount` with `NOSUID|NODEV`): made once per sandbox in the
/// parent, copied over the lower directory in each command's mount namespace (a copy-on-write view of it).
pub(crate) fn overlay_mount(
    lower: &std::ffi::CStr,
    upper: &std::ffi::CStr,
    work: &std::ffi::CStr,
    user_xattr: bool,
) -> std::io::Result<std::os::fd::OwnedFd> {
    detached_mount(c"overlay", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, |context| {
        if user_xattr {
            // In a user namespace: `user.overlay.*` attributes (the `trusted.*` ones need CAP_SYS_ADMIN in the
            // initial user namespace).
            fsconfig(context, FSCONFIG_SET_FLAG, c"userxattr", None, 0)?;
        }
        fsconfig(context, FSCONFIG_SET_STRING, c"lowerdir", Some(lower), 0)?;
        fsconfig(context, FSCONFIG_SET_STRING, c"upperdir", Some(upper), 0)?;
        fsconfig(context, FSCONFIG_SET_STRING, c"workdir", Some(work), 0)?;
        fsconfig(context, FSCONFIG_SET_STRING, c"index", Some(c"off"), 0)?;
        // Never follow metadata-only copy-ups: the upper layer holds what sandboxed commands wrote.
        fsconfig(context, FSCONFIG_SET_STRING, c"metacopy", Some(c"off"), 0)?;
        // No syncs of the upper layer (see `copy_on_write::overlay` for what happens after a crash).
        fsconfig(context, FSCONFIG_SET_FLAG, c"volatile", None, 0)
    })
}

/// A new file system of type `name` (`fsopen`), configured by `configure`, created, and mounted detached with
/// `RDONLY|NOSUID|NODEV|NOEXEC` (`fsmount`); close-on-exec descriptors throughout.
fn detached_read_only_mount(
    name: &std::ffi::CStr,
    configure: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> std::io::Result<()>,
) -> std::io::Result<std::os::fd::OwnedFd> {
    let attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    detached_mount(name, attrs, configure)
}

/// A new file system of type `name` (`fsopen`), configured by `configure`, created, and mounted detached with
/// the mount attributes `attrs` (`fsmount`); close-on-exec descriptors throughout.
fn detached_mount(
    name: &std::ffi::CStr,
    attrs: u64,
    configure: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> std::io::Result<()>,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
    /// `FSOPEN_CLOEXEC`, `FSMOUNT_CLOEXEC`.
    const CLOEXEC: usize = 1;
    /// `FSCONFIG_CMD_CREATE`.
    const CMD_CREATE: usize = 6;
    let own = |ret: Result<usize, i32>| -> std::io::Result<OwnedFd> {
        let fd = ret.map_err(std::io::Error::from_raw_os_error)?;
        let fd = i32::try_from(fd).map_err(|_| std::io::Error::from_raw_os_error(libc::EBADF))?;
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    // SAFETY: fsopen with a NUL-terminated file system name.
    let context = own(unsafe { syscall(libc::SYS_fsopen, [name.as_ptr() as usize, CLOEXEC, 0, 0, 0, 0]) })?;
    configure(context.as_fd())?;
    // SAFETY: FSCONFIG_CMD_CREATE takes no key or value.
    unsafe { syscall(libc::SYS_fsconfig, [context.as_raw_fd() as usize, CMD_CREATE, 0, 0, 0, 0]) }
        .map_err(std::io::Error::from_raw_os_error)?;
    // SAFETY: fsmount on the created context, with integer flags.
    own(unsafe {
        syscall(libc::SYS_fsmount, [context.as_raw_fd() as usize, CLOEXEC, attrs as usize, 0, 0, 0])
    })
}

/// `fsconfig(context, command, key, value, aux)`: a string value, or none, and an integer (a descriptor for
/// `FSCONFIG_SET_FD`).
fn fsconfig(
    context: std::os::fd::BorrowedFd<'_>,
    command: usize,
    key: &std::ffi::CStr,
    value: Option<&std::ffi::CStr>,
    aux: usize,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = value.map_or(0, |v| v.as_ptr() as usize);
    let args = [context.as_raw_fd() as usize, command, key.as_ptr() as usize, value, aux, 0];
    // SAFETY: fsconfig on an open context with NUL-terminated key and value strings (or none) and an integer,
    // all alive for the call.
    unsafe { syscall(libc::SYS_fsconfig, args) }.map(drop).map_err(std::io::Error::from_raw_os_error)
}

/// The kernel returns `-errno` in the range -4095..-1 on failure.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline]
fn decode(ret: isize) -> Result<usize, i32> {
    if (-4095..0).contains(&ret) { Err(-ret as i32) } else { Ok(ret as usize) }
}

/// `flock(fd, operation)` (`LOCK_SH`, `LOCK_EX`, `LOCK_UN`, optionally `| LOCK_NB`), retried on `EINTR`.
pub(crate) fn flock(file: &std::fs::File, operation: i32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a live descriptor the caller owns.
        match unsafe { syscall(libc::SYS_flock, [file.as_raw_fd() as usize, operation as usize, 0, 0, 0, 0]) }
        {
            Ok(_) => return Ok(()),
            Err(libc::EINTR) => {}
            Err(errno) => return Err(std::io::Error::from_raw_os_error(errno)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn raw_syscall_returns_values_and_errnos() {
        // SAFETY: getpid takes no arguments.
        let pid = unsafe { syscall(libc::SYS_getpid, [0; 6]) };
        assert_eq!(pid, Ok(std::process::id() as usize));
        // SAFETY: close on an fd that cannot be open only returns EBADF.
        let bad = unsafe { syscall(libc::SYS_close, [100_000, 0, 0, 0, 0, 0]) };
        assert_eq!(bad, Err(libc::EBADF));
    }

    #[test]
    fn open_dir_no_symlinks_refuses_a_symlink_on_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        let c =
            |p: std::path::PathBuf| std::ffi::CString::new(p.into_os_string().into_encoded_bytes()).unwrap();
        assert!(open_dir_no_symlinks(&c(base.join("real"))).is_ok());
        let err = open_dir_no_symlinks(&c(base.join("link"))).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
    }
}
