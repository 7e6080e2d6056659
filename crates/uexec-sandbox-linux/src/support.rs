//! What the running kernel and process can enforce, probed without running anything.
//!
//! [`KernelSupport::detect`] asks the kernel (Landlock ABI through `landlock_create_ruleset` with
//! `LANDLOCK_CREATE_RULESET_VERSION`, seccomp through `prctl(PR_GET_SECCOMP)` and
//! `/proc/sys/kernel/seccomp/actions_avail`, mount namespaces through the effective capabilities and the user
//! namespace sysctls). The value is plain data so tests can inject a weaker kernel (for example Landlock ABI 0)
//! and check that the adapter fails closed.
#![allow(unsafe_code)] // Reason: the probes are raw system calls (landlock_create_ruleset, prctl, capget).

use std::fs;

use crate::sys;

/// Whether a mechanism can be used, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// It can be used.
    Available,
    /// It cannot; the reason, for reports and errors.
    Unavailable(String),
}

impl Availability {
    /// True when available.
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

/// How the child gets the private mount namespace that makes the filesystem read-only outside the writable
/// roots and protects `.git`/`.uexec` inside them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountNamespace {
    /// The process has `CAP_SYS_ADMIN`: `unshare(CLONE_NEWNS)` directly (works in a `vfork`-like child).
    Privileged,
    /// Unprivileged: `unshare(CLONE_NEWUSER | CLONE_NEWNS)` with the caller's uid and gid mapped to themselves.
    /// Needs a real `fork` (the kernel refuses a new user namespace to a task sharing its memory).
    UserNamespace,
    /// Neither is possible; the reason.
    Unavailable(String),
}

/// What this kernel and process can enforce. Build it with [`KernelSupport::detect`], or by hand to simulate
/// another machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSupport {
    /// The Landlock ABI version; 0 when Landlock is unavailable.
    pub landlock_abi: u32,
    /// Why Landlock is unavailable, when `landlock_abi` is 0.
    pub landlock_missing: Option<String>,
    /// Whether a seccomp filter can be installed.
    pub seccomp: Availability,
    /// How to get a private mount namespace.
    pub mount_namespace: MountNamespace,
}

impl KernelSupport {
    /// Probe the running kernel and process. Runs no program and changes nothing.
    pub fn detect() -> Self {
        let (landlock_abi, landlock_missing) = match landlock_abi() {
            Ok(abi) => (abi, None),
            Err(reason) => (0, Some(reason)),
        };
        KernelSupport {
            landlock_abi,
            landlock_missing,
            seccomp: seccomp_availability(),
            mount_namespace: mount_namespace_support(),
        }
    }
}

/// The Landlock ABI version, or why there is none.
fn landlock_abi() -> Result<u32, String> {
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag, the kernel only returns the ABI version.
    let ret = unsafe {
        sys::syscall(sys::SYS_LANDLOCK_CREATE_RULESET, [0, 0, sys::LANDLOCK_CREATE_RULESET_VERSION, 0, 0, 0])
    };
    match ret {
        Ok(abi) => Ok(u32::try_from(abi).unwrap_or(u32::MAX)),
        Err(libc::ENOSYS) => Err("this kernel is built without Landlock (CONFIG_SECURITY_LANDLOCK)".into()),
        Err(libc::EOPNOTSUPP) => {
            Err("Landlock is disabled at boot (add `landlock` to the `lsm=` kernel parameter)".into())
        }
        Err(errno) => Err(format!("landlock_create_ruleset failed: {}", errno_text(errno))),
    }
}

/// Whether a seccomp filter can be installed here.
fn seccomp_availability() -> Availability {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return Availability::Unavailable(format!(
            "the seccomp filter is only built for x86_64 and aarch64, not {}",
            std::env::consts::ARCH
        ));
    }
    // SAFETY: PR_GET_SECCOMP takes no pointer arguments.
    match unsafe { sys::syscall(libc::SYS_prctl, [libc::PR_GET_SECCOMP as usize, 0, 0, 0, 0, 0]) } {
        Ok(1) => {
            return Availability::Unavailable("this process runs in strict seccomp mode".into());
        }
        Ok(_) => {}
        Err(errno) => {
            return Availability::Unavailable(format!(
                "this kernel has no seccomp (prctl(PR_GET_SECCOMP): {})",
                errno_text(errno)
            ));
        }
    }
    match fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail") {
        Ok(actions) if !actions.split_whitespace().any(|a| a == "errno") => Availability::Unavailable(
            format!("the seccomp ERRNO action is unavailable (actions_avail: {})", actions.trim()),
        ),
        // Missing file: kernels before 4.14 have filters with ERRNO but not this file.
        _ => Availability::Available,
    }
}

/// How a private mount namespace can be had.
fn mount_namespace_support() -> MountNamespace {
    // SAFETY: a mount_setattr on fd -1 with no attributes only returns EBADF/EINVAL, or ENOSYS before Linux 5.12.
    if let Err(libc::ENOSYS) = unsafe { sys::syscall(libc::SYS_mount_setattr, [usize::MAX, 0, 0, 0, 0, 0]) } {
        return MountNamespace::Unavailable("this kernel lacks mount_setattr (Linux 5.12)".into());
    }
    if has_effective_capability(sys::CAP_SYS_ADMIN) {
        return MountNamespace::Privileged;
    }
    if read_number("/proc/sys/user/max_user_namespaces") == Some(0) {
        return MountNamespace::Unavailable(
            "user namespaces are disabled (user.max_user_namespaces = 0)".into(),
        );
    }
    if read_number("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return MountNamespace::Unavailable(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)".into(),
        );
    }
    if read_number("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        return MountNamespace::Unavailable(
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)"
                .into(),
        );
    }
    MountNamespace::UserNamespace
}

/// True when the calling thread has capability `cap` in its effective set.
pub(crate) fn has_effective_capability(cap: u32) -> bool {
    let mut header = sys::CapHeader { version: sys::CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [sys::CapData::default(); 2];
    // SAFETY: capget with a version-3 header writes two CapData structs, which `data` holds.
    let ret = unsafe {
        sys::syscall(libc::SYS_capget, [&raw mut header as usize, data.as_mut_ptr() as usize, 0, 0, 0, 0])
    };
    if ret.is_err() {
        return false;
    }
    let word = (cap / 32) as usize;
    data.get(word).is_some_and(|d| d.effective & (1 << (cap % 32)) != 0)
}

/// The effective user and group ids of this process.
pub(crate) fn effective_ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid take no arguments and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// A number from a sysctl-like file, if readable.
fn read_number(path: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `ENOSYS (Function not implemented)`-style text for an errno.
pub(crate) fn errno_text(errno: i32) -> String {
    format!("{} (errno {errno})", std::io::Error::from_raw_os_error(errno))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn detects_this_machine() {
        // This machine (and CI) runs a kernel with Landlock, seccomp and as root.
        let support = KernelSupport::detect();
        assert!(support.landlock_abi >= 1, "{support:?}");
        assert_eq!(support.seccomp, Availability::Available);
    }
}
