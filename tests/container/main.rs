//! `container-sim`: runs a command the way a container runtime's default profile would let it run, so the
//! suite can test what people in `docker run`, a devcontainer or a CI job's container get.
//!
//! Usage: `container-sim COMMAND [ARG...]`. Before it executes COMMAND it installs a seccomp filter that, like
//! Docker's default profile, makes every way to a new namespace or a new mount fail: `unshare`, `setns`,
//! `mount`, `umount2`, `pivot_root`, the new mount API (`open_tree`, `move_mount`, `fsopen`, `fsconfig`,
//! `fsmount`, `fspick`, `mount_setattr`) and `clone` with a namespace flag fail with `EPERM`; `clone3` fails with
//! `ENOSYS` (its flags sit behind a pointer, so libc falls back to `clone`). As root it also drops
//! `CAP_SYS_ADMIN` from the bounding set, so COMMAND (root without `CAP_SYS_ADMIN`, as in a CI container) cannot
//! get it back. The filter is inherited by every descendant and cannot be removed: what runs below is in the
//! container for good, and the process running this (the test runner) is not.

// A command-line tool: printing is its job.
#![allow(clippy::print_stderr)]

#[cfg(target_os = "linux")]
fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: container-sim COMMAND [ARG...]");
        std::process::exit(2);
    };
    if let Err(error) = linux::enter() {
        eprintln!("container-sim: {error}");
        std::process::exit(125);
    }
    use std::os::unix::process::CommandExt;
    let error = std::process::Command::new(program).args(rest).exec();
    eprintln!("container-sim: could not run {}: {error}", program.to_string_lossy());
    std::process::exit(127);
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("container-sim: Linux only");
    std::process::exit(2);
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };

    /// Every namespace flag of `clone` (`CLONE_NEWTIME` shares its bit with `CSIGNAL`'s range, so it is left out
    /// as Docker's profile does).
    const NAMESPACE_FLAGS: [i32; 7] = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ];

    /// `CAP_SYS_ADMIN` (linux/capability.h).
    const CAP_SYS_ADMIN: libc::c_ulong = 21;

    /// The calls that always fail with `EPERM`.
    const DENIED: [libc::c_long; 13] = [
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_chroot,
    ];

    /// Installs the filters and drops `CAP_SYS_ADMIN`; the caller then executes the command.
    pub(super) fn enter() -> Result<(), String> {
        let arch = std::env::consts::ARCH.try_into().map_err(|e| format!("unknown architecture: {e:?}"))?;
        let mut denied: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for nr in DENIED {
            denied.insert(nr, Vec::new());
        }
        let mut clone_rules = Vec::new();
        for flag in NAMESPACE_FLAGS {
            let bit = u64::from(flag as u32);
            let condition =
                SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(bit), bit)
                    .map_err(|e| format!("clone rule: {e}"))?;
            clone_rules.push(SeccompRule::new(vec![condition]).map_err(|e| format!("clone rule: {e}"))?);
        }
        denied.insert(libc::SYS_clone, clone_rules);
        let eperm =
            SeccompFilter::new(denied, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
                .map_err(|e| format!("filter: {e}"))?;
        let enosys = SeccompFilter::new(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .map_err(|e| format!("filter: {e}"))?;
        let programs: Vec<BpfProgram> = [eperm, enosys]
            .into_iter()
            .map(BpfProgram::try_from)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("compiling the filter: {e}"))?;
        // SAFETY: geteuid takes no arguments and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            // SAFETY: PR_CAPBSET_DROP takes a capability number; it only lowers this process's bounding set.
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) } != 0 {
                return Err(format!("dropping CAP_SYS_ADMIN: {}", std::io::Error::last_os_error()));
            }
        } else {
            // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integers; an unprivileged process needs it for a filter.
            if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
                return Err(format!("no_new_privs: {}", std::io::Error::last_os_error()));
            }
        }
        for program in &programs {
            seccompiler::apply_filter(program).map_err(|e| format!("installing the filter: {e}"))?;
        }
        Ok(())
    }
}
