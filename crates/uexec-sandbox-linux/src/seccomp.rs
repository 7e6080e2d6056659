//! The seccomp filters: built once per network setting in the parent, installed in the child.
//!
//! Two classic-BPF programs, both default-allow:
//! 1. The deny list, compiled with `seccompiler`: every listed call fails with `EPERM`, so programs print
//!    "Operation not permitted" (a text the denial heuristic knows). It checks the architecture first and kills
//!    the process (exit 159, `128 + SIGSYS`) for any other (32-bit `int 0x80` calls cannot sneak past).
//! 2. A small hand-written program for what `seccompiler` cannot express: `clone3` fails with `ENOSYS`, because
//!    its flags sit behind a pointer the filter cannot read, so libc falls back to `clone`, whose flags the first
//!    program checks; and on x86_64 every x32 system call (number with bit 30 set) fails with `ENOSYS`, because
//!    x32 calls share the x86_64 audit architecture and would otherwise bypass the number-based rules.
//!
//! With several filters the kernel applies the strictest answer, so the order does not matter.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch, sock_filter,
};

/// The programs to install, in order.
#[derive(Debug)]
pub(crate) struct SeccompPrograms {
    /// Each program; every one is installed with its own `seccomp(SECCOMP_SET_MODE_FILTER)`.
    pub(crate) programs: Vec<BpfProgram>,
}

/// The namespace flags of `clone(2)`/`unshare(2)` that are denied: a new user namespace would give a process
/// every capability inside it, and new mount/pid/net namespaces are the building blocks of escapes.
const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// `CLONE_NEWTIME`, only meaningful for `unshare` (in `clone` the bit belongs to the exit signal).
const CLONE_NEWTIME: u64 = 0x80;

/// `TIOCLINUX`: the Linux console ioctl (its subcommand 2 pastes the selection: keystroke injection).
const TIOCLINUX: u64 = 0x541C;

/// System calls denied in every sandbox, with the reason for each group.
fn always_denied() -> Vec<(i64, &'static str)> {
    let mut calls = vec![
        // Inspecting or changing other processes.
        (libc::SYS_ptrace, "ptrace"),
        (libc::SYS_process_vm_readv, "process_vm_readv"),
        (libc::SYS_process_vm_writev, "process_vm_writev"),
        (libc::SYS_pidfd_getfd, "pidfd_getfd"),
        // io_uring performs I/O the filter cannot see.
        (libc::SYS_io_uring_setup, "io_uring_setup"),
        (libc::SYS_io_uring_enter, "io_uring_enter"),
        (libc::SYS_io_uring_register, "io_uring_register"),
        // Kernel attack surface and kernel state.
        (libc::SYS_bpf, "bpf"),
        (libc::SYS_perf_event_open, "perf_event_open"),
        (libc::SYS_userfaultfd, "userfaultfd"),
        (libc::SYS_kexec_load, "kexec_load"),
        (libc::SYS_kexec_file_load, "kexec_file_load"),
        (libc::SYS_init_module, "init_module"),
        (libc::SYS_finit_module, "finit_module"),
        (libc::SYS_delete_module, "delete_module"),
        (libc::SYS_add_key, "add_key"),
        (libc::SYS_keyctl, "keyctl"),
        (libc::SYS_request_key, "request_key"),
        (libc::SYS_fanotify_init, "fanotify_init"),
        // The mount table (the sandbox's own mounts are done before the filter is installed).
        (libc::SYS_mount, "mount"),
        (libc::SYS_umount2, "umount2"),
        (libc::SYS_pivot_root, "pivot_root"),
        (libc::SYS_open_tree, "open_tree"),
        (crate::sys::SYS_OPEN_TREE_ATTR, "open_tree_attr"),
        (libc::SYS_move_mount, "move_mount"),
        (libc::SYS_fsopen, "fsopen"),
        (libc::SYS_fsconfig, "fsconfig"),
        (libc::SYS_fsmount, "fsmount"),
        (libc::SYS_fspick, "fspick"),
        (libc::SYS_mount_setattr, "mount_setattr"),
        (libc::SYS_setns, "setns"),
        // Host state: swap, power, clock, accounting, quotas, names.
        (libc::SYS_swapon, "swapon"),
        (libc::SYS_swapoff, "swapoff"),
        (libc::SYS_reboot, "reboot"),
        (libc::SYS_settimeofday, "settimeofday"),
        (libc::SYS_clock_settime, "clock_settime"),
        (libc::SYS_clock_adjtime, "clock_adjtime"),
        (libc::SYS_adjtimex, "adjtimex"),
        (libc::SYS_acct, "acct"),
        (libc::SYS_quotactl, "quotactl"),
        (libc::SYS_quotactl_fd, "quotactl_fd"),
        (libc::SYS_sethostname, "sethostname"),
        (libc::SYS_setdomainname, "setdomainname"),
        // Opening files by handle bypasses path-based checks.
        (libc::SYS_name_to_handle_at, "name_to_handle_at"),
        (libc::SYS_open_by_handle_at, "open_by_handle_at"),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([(libc::SYS_iopl, "iopl"), (libc::SYS_ioperm, "ioperm"), (libc::SYS_uselib, "uselib")]);
    calls
}

/// The names of the unconditionally denied calls, for the report.
pub(crate) fn denied_names() -> Vec<&'static str> {
    always_denied().into_iter().map(|(_, name)| name).collect()
}

/// A condition on argument `arg` (32-bit comparison: the kernel reads these arguments as `int`/`unsigned int`,
/// so the upper half must not matter to the filter either).
fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
}

/// One rule from its conditions (all must hold).
fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| e.to_string())
}

/// The target architecture of this build.
fn target_arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())
}

/// The `AUDIT_ARCH_*` value of this build's architecture, for the hand-written program.
fn audit_arch() -> Result<u32, String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(0xC000_003E),
        "aarch64" => Ok(0xC000_00B7),
        other => Err(format!("no seccomp filter for architecture {other}")),
    }
}

/// Build the programs for a sandbox with network access `network` (pure: no system call).
pub(crate) fn build(network: bool) -> Result<SeccompPrograms, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _) in always_denied() {
        rules.insert(nr, Vec::new());
    }
    // New namespaces: any namespace flag in clone(2)/unshare(2).
    let mut clone_rules = Vec::new();
    for flag in NAMESPACE_FLAGS {
        clone_rules.push(rule(vec![cond(0, SeccompCmpOp::MaskedEq(flag), flag)?])?);
    }
    let mut unshare_rules = Vec::new();
    for flag in NAMESPACE_FLAGS.into_iter().chain([CLONE_NEWTIME]) {
        unshare_rules.push(rule(vec![cond(0, SeccompCmpOp::MaskedEq(flag), flag)?])?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    rules.insert(libc::SYS_unshare, unshare_rules);
    // Keystroke injection into the terminal.
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, SeccompCmpOp::Eq, libc::TIOCSTI)?])?,
            rule(vec![cond(1, SeccompCmpOp::Eq, TIOCLINUX)?])?,
        ],
    );
    // personality(2): only the default persona (0) and the query (0xffffffff).
    rules.insert(
        libc::SYS_personality,
        vec![rule(vec![cond(0, SeccompCmpOp::Ne, 0)?, cond(0, SeccompCmpOp::Ne, 0xFFFF_FFFF)?])?],
    );
    if !network {
        // Sockets other than AF_UNIX cannot be created, so connect/bind/listen/accept/send on a network socket
        // cannot happen; unix sockets keep every call (spec B8).
        let not_unix = || -> Result<Vec<SeccompRule>, String> {
            Ok(vec![rule(vec![cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?])?])
        };
        rules.insert(libc::SYS_socket, not_unix()?);
        rules.insert(libc::SYS_socketpair, not_unix()?);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target_arch()?,
    )
    .map_err(|e| e.to_string())?;
    let deny_list = BpfProgram::try_from(filter).map_err(|e| e.to_string())?;
    Ok(SeccompPrograms { programs: vec![deny_list, enosys_program()?] })
}

/// `BPF_LD | BPF_W | BPF_ABS`.
const LD_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
const JEQ: u16 = 0x15;
/// `BPF_JMP | BPF_JGE | BPF_K`.
#[cfg(target_arch = "x86_64")]
const JGE: u16 = 0x35;
/// `BPF_RET | BPF_K`.
const RET: u16 = 0x06;
/// `SECCOMP_RET_ERRNO | ENOSYS`.
const RET_ENOSYS: u32 = 0x0005_0000 | libc::ENOSYS as u32;
/// `SECCOMP_RET_ALLOW`.
const RET_ALLOW: u32 = 0x7fff_0000;
/// `SECCOMP_RET_KILL_PROCESS`.
const RET_KILL_PROCESS: u32 = 0x8000_0000;
/// Bit 30 of the system call number marks x32 calls on x86_64.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// One BPF instruction.
fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The `ENOSYS` program: `clone3` and (x86_64) x32 calls.
fn enosys_program() -> Result<BpfProgram, String> {
    let clone3 = u32::try_from(libc::SYS_clone3).map_err(|e| e.to_string())?;
    let mut program = vec![
        insn(LD_ABS, 0, 0, 4), // seccomp_data.arch
        insn(JEQ, 1, 0, audit_arch()?),
        insn(RET, 0, 0, RET_KILL_PROCESS),
        insn(LD_ABS, 0, 0, 0), // seccomp_data.nr
    ];
    #[cfg(target_arch = "x86_64")]
    program.extend([insn(JGE, 0, 1, X32_SYSCALL_BIT), insn(RET, 0, 0, RET_ENOSYS)]);
    program.extend([insn(JEQ, 0, 1, clone3), insn(RET, 0, 0, RET_ENOSYS), insn(RET, 0, 0, RET_ALLOW)]);
    Ok(program)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn programs_build_for_both_network_settings() {
        let off = build(false).unwrap();
        let on = build(true).unwrap();
        assert_eq!(off.programs.len(), 2);
        // The network rules make the "off" deny list longer.
        assert!(off.programs[0].len() > on.programs[0].len());
        assert_eq!(off.programs[1], on.programs[1]);
    }

    #[test]
    fn enosys_program_ends_in_allow_and_checks_the_arch_first() {
        let program = enosys_program().unwrap();
        assert_eq!(program[0], insn(LD_ABS, 0, 0, 4));
        assert_eq!(program.last(), Some(&insn(RET, 0, 0, RET_ALLOW)));
    }
}
