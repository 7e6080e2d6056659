//! What the running kernel and process can enforce: asked of the kernel, and namespaces tried where something
//! unseen may refuse them.
//!
//! [`KernelSupport::detect`] asks the kernel (Landlock ABI through `landlock_create_ruleset` with
//! `LANDLOCK_CREATE_RULESET_VERSION`, seccomp through `prctl(PR_GET_SECCOMP)` and
//! `/proc/sys/kernel/seccomp/actions_avail`; mount namespaces from the capabilities and the user namespace
//! sysctls, and, under a seccomp filter or a confining LSM profile, by trying them in a forked child). The value
//! is plain data so tests can inject a weaker kernel (for example Landlock ABI 0) and check that the adapter
//! fails closed.
#![allow(unsafe_code)] // Reason: the probes are raw system calls (landlock_create_ruleset, prctl, capget).

use std::fs;

use crate::child::{self, MountMode, MountPlan, MountRoot, ProbeFailure};
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

impl MountNamespace {
    /// True when commands get a private mount namespace (either way).
    pub fn is_available(&self) -> bool {
        !matches!(self, MountNamespace::Unavailable(_))
    }
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
    /// Probe the running kernel and process. Runs no program and changes nothing (where the mount namespace is
    /// tried, that happens in a forked child that exits).
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

/// How a private mount namespace can be had: the sysctls that forbid one outright are read first (their
/// reason is the clearest); then, where a seccomp filter or a confining LSM profile could refuse what
/// capabilities and sysctls allow, the strategy is tried in a forked child ([`child::try_mounts`]): the
/// namespaces, the id maps and the mounts a plan needs. A refusal there (a container's seccomp profile, an
/// outer sandbox, an AppArmor rule) makes it unavailable, with the step, the errno and the likely cause.
fn mount_namespace_support() -> MountNamespace {
    // SAFETY: a mount_setattr on fd -1 with no attributes only returns EBADF/EINVAL, or ENOSYS before Linux 5.12.
    if let Err(libc::ENOSYS) = unsafe { sys::syscall(libc::SYS_mount_setattr, [usize::MAX, 0, 0, 0, 0, 0]) } {
        return MountNamespace::Unavailable("this kernel lacks mount_setattr (Linux 5.12)".into());
    }
    let privileged = has_effective_capability(sys::CAP_SYS_ADMIN);
    // Nothing but capabilities and sysctls can refuse it here: no filter, no confining LSM profile. The fork of
    // a trial (about 0.8 ms, paid by every `uexec run`) buys nothing then; a refusal the first command meets
    // after all re-plans (`Sandbox::replan_after_setup_failure`).
    let unconfined = !under_seccomp_filter() && lsm_unconfined();
    if privileged && unconfined {
        return MountNamespace::Privileged;
    }
    let mut refused = Vec::new();
    if privileged {
        match try_strategy(MountMode::Privileged) {
            Ok(()) => return MountNamespace::Privileged,
            Err(failure) => refused.push(failure),
        }
    }
    if let Some(why) = user_namespaces_disabled() {
        return MountNamespace::Unavailable(match refused.first() {
            Some(first) => format!("{}; {why}", failed_text(MountMode::Privileged, first)),
            None => why,
        });
    }
    let userns_sysctls_allow = read_number("/proc/sys/user/max_user_namespaces").is_some_and(|n| n > 0)
        && read_number("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").unwrap_or(0) == 0;
    if refused.is_empty() && unconfined && userns_sysctls_allow {
        return MountNamespace::UserNamespace;
    }
    match try_strategy(MountMode::UserNamespace) {
        Ok(()) => MountNamespace::UserNamespace,
        Err(failure) => {
            let mut text: Vec<String> =
                refused.iter().map(|first| failed_text(MountMode::Privileged, first)).collect();
            text.push(failed_text(MountMode::UserNamespace, &failure));
            MountNamespace::Unavailable(format!("{} ({})", text.join("; "), likely_cause(failure.errno)))
        }
    }
}

/// True when this process runs under a seccomp filter (a container runtime's profile, another sandbox).
fn under_seccomp_filter() -> bool {
    fs::read_to_string("/proc/self/status")
        .map(|status| {
            status.lines().any(|line| line.starts_with("Seccomp:") && line.trim_end().ends_with('2'))
        })
        .unwrap_or(true)
}

/// True when no LSM profile confines this process: AppArmor says `unconfined` (or is absent), SELinux names an
/// unconfined domain. A profile (Docker's `docker-default`, a snap's) may deny mounts whatever the
/// capabilities.
fn lsm_unconfined() -> bool {
    let label = fs::read_to_string("/proc/self/attr/apparmor/current")
        .or_else(|_| fs::read_to_string("/proc/self/attr/current"))
        .unwrap_or_default();
    let label = label.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    label.is_empty() || label == "unconfined" || label.contains(":unconfined_t:")
}

/// The sysctl that disables unprivileged user namespaces here, if one does.
fn user_namespaces_disabled() -> Option<String> {
    if read_number("/proc/sys/user/max_user_namespaces") == Some(0) {
        return Some("user namespaces are disabled (user.max_user_namespaces = 0)".into());
    }
    if read_number("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return Some(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)".into(),
        );
    }
    // `kernel.apparmor_restrict_unprivileged_userns = 1` is not read here: a profile with `userns` may still
    // allow this binary, so the probe decides, and `likely_cause` names the sysctl when it refuses.
    None
}

/// "a new mount namespace (CAP_SYS_ADMIN): unshare(...) failed with EPERM ...".
fn failed_text(mode: MountMode, failure: &ProbeFailure) -> String {
    let how = match mode {
        MountMode::Privileged => "with CAP_SYS_ADMIN",
        MountMode::UserNamespace => "in a user namespace",
        MountMode::SandboxUserNamespace => "in the sandbox's user namespace",
    };
    format!(
        "a private mount namespace {how} was refused: {} failed with {}",
        failure.stage,
        errno_text(failure.errno)
    )
}

/// Step 1 of the child for a plan like every command's (a writable root re-attached, the rest read-only, a
/// hidden directory covered), tried in a forked child.
fn try_strategy(mode: MountMode) -> Result<(), ProbeFailure> {
    let (uid, gid) = effective_ids();
    let scratch = ["/tmp", "/var/tmp", "/dev/shm"]
        .into_iter()
        .find(|dir| fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()))
        .and_then(|dir| std::ffi::CString::new(dir).ok());
    let plan = MountPlan {
        mode,
        uid_map: format!("{uid} {uid} 1\n").into_bytes(),
        gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        readonly_everything: true,
        roots: scratch.iter().map(|path| MountRoot { path: path.clone(), nodev: true }).collect(),
        pinned: Vec::new(),
        closed: Vec::new(),
        protected: Vec::new(),
        nodev: Vec::new(),
        hidden_pinned: Vec::new(),
        hidden_dirs: scratch.iter().cloned().collect(),
        empty_dir: None,
        hidden_files: Vec::new(),
        copy_on_write: Vec::new(),
        cwd: c"/".to_owned(),
        proc_hidepid: true,
        fresh_proc: false,
        procfs: None,
    };
    child::try_mounts(&plan)
}

/// The likely reason the kernel refused a namespace or a mount with `errno`, from what this process can see of
/// its surroundings, for reports and errors.
pub(crate) fn likely_cause(errno: i32) -> String {
    if errno == libc::ENOSPC {
        return "likely cause: the limit of user namespaces is reached (user.max_user_namespaces)".into();
    }
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let filters = status
        .lines()
        .find_map(|line| line.strip_prefix("Seccomp_filters:"))
        .and_then(|n| n.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let filtered = status.lines().any(|line| line.starts_with("Seccomp:") && line.trim_end().ends_with('2'));
    let mut causes = Vec::new();
    if filtered {
        let whose = match container_runtime() {
            Some(runtime) => format!("the container's ({runtime}) default profile, or another sandbox's"),
            None => {
                "a container runtime's profile, or another sandbox's (uexec's own, an agent's, bubblewrap, \
                     firejail)"
                    .into()
            }
        };
        causes.push(format!("this process runs under {filters} seccomp filter(s): {whose}"));
    } else if let Some(runtime) = container_runtime() {
        causes.push(format!("uexec runs in a container ({runtime}) that refuses new namespaces"));
    }
    if read_number("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        causes.push(
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1) \
             and no profile grants `userns` to this binary"
                .to_owned(),
        );
    }
    if causes.is_empty() {
        causes.push(if errno == libc::EPERM {
            "an LSM or a seccomp filter of this environment refuses it".to_owned()
        } else {
            "the kernel refused it".to_owned()
        });
    }
    format!("likely cause: {}", causes.join("; "))
}

/// The container runtime this process seems to run under, from the files runtimes leave.
fn container_runtime() -> Option<String> {
    if fs::symlink_metadata("/.dockerenv").is_ok() {
        return Some("Docker".into());
    }
    if fs::symlink_metadata("/run/.containerenv").is_ok() {
        return Some("Podman".into());
    }
    let cgroup = fs::read_to_string("/proc/1/cgroup").unwrap_or_default();
    ["kubepods", "docker", "containerd", "libpod", "lxc"]
        .into_iter()
        .find(|needle| cgroup.contains(needle))
        .map(|needle| format!("cgroup {needle}"))
}

/// What restores the protections a missing mount namespace takes away, for the error that refuses to run
/// without them.
pub(crate) const FULL_PROTECTION_REMEDIES: &str = "for full protection, let uexec make namespaces: in Docker or \
     Podman run the container with `--security-opt seccomp=unconfined` (or a profile that allows unshare, clone \
     with namespace flags, setns and the mount calls) or `--cap-add SYS_ADMIN`; on Ubuntu 24.04 install an \
     AppArmor profile granting `userns` to the uexec binary (or set kernel.apparmor_restrict_unprivileged_userns \
     = 0); elsewhere set user.max_user_namespaces above 0; nested in another sandbox, run uexec outside it \
     (docs/deploy.md, \"Where uexec runs\")";

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

/// `EPERM (Operation not permitted)`-style text for an errno.
pub(crate) fn errno_text(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::ECHILD => "ECHILD",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::EUSERS => "EUSERS",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => return format!("errno {errno} ({})", describe(errno)),
    };
    format!("{name} ({})", describe(errno))
}

/// The C library's description of `errno`, without Rust's "(os error N)" suffix.
fn describe(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// The trial itself, on this machine (root, no filter): both strategies work in the forked child. Its denied
    /// twin runs where a filter refuses them: `crates/uexec/tests/environments.rs` under `container-sim`.
    #[test]
    fn both_strategies_are_tried_in_a_child_and_work_here() {
        assert_eq!(try_strategy(MountMode::Privileged), Ok(()));
        assert_eq!(try_strategy(MountMode::UserNamespace), Ok(()));
        assert_eq!(errno_text(libc::EPERM), "EPERM (Operation not permitted)");
    }

    #[test]
    fn detects_this_machine() {
        // This machine (and CI) runs a kernel with Landlock, seccomp and as root.
        let support = KernelSupport::detect();
        assert!(support.landlock_abi >= 1, "{support:?}");
        assert_eq!(support.seccomp, Availability::Available);
    }
}
