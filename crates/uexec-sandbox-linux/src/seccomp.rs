//! The seccomp filter: one classic-BPF program, built once per network setting in the parent, installed in the
//! child.
//!
//! Default allow; every listed call fails with `EPERM`, so programs print "Operation not permitted" (a text the
//! denial heuristic knows). The program:
//! 1. checks the architecture and kills the process (exit 159, `128 + SIGSYS`) for any other: 32-bit
//!    `int 0x80` calls cannot sneak past the x86_64 numbers;
//! 2. on x86_64, fails every x32 call (number with bit 30 set) with `ENOSYS`: x32 calls share the x86_64 audit
//!    architecture and would otherwise bypass number-based rules;
//! 3. finds the call's rule by binary search over the sorted syscall numbers (a run of consecutive numbers that
//!    always fail with the same errno is one range; the always-denied rules of a leaf share one return), and
//!    applies it: deny always, deny when an argument has a namespace flag (`clone`, `unshare`), deny for some
//!    argument values (`ioctl` `TIOCSTI`, `TIOCLINUX`, `TIOCSETD`, `TIOCCONS`, `TIOCVHANGUP`) or for all but some
//!    (`socket`/`socketpair` other than `AF_UNIX`, `personality` other than the default). `clone3` fails with
//!    `ENOSYS`: its flags sit behind a pointer the filter cannot read, and libc then falls back to `clone`, whose
//!    flags the filter checks.
//!
//! Why a search tree rather than `seccompiler`'s linear chains: when a filter is attached, the kernel emulates it
//! for every system call number to build its action cache, so attaching costs about (number of syscalls) x
//! (instructions walked). A linear chain walks every rule for most numbers, a cost every spawn pays (BENCHMARKS.md
//! has it); the tree walks about a dozen. The kernel also converts and JIT-compiles the whole program on every
//! attach, so its length counts too: the ranges, the shared returns and direct jumps over a left subtree keep it
//! short. The instructions are `seccompiler::sock_filter`s (a `seccompiler::BpfProgram`), and the tests compile
//! the same rules with `seccompiler` and check both programs agree on every syscall number.

use seccompiler::{BpfProgram, sock_filter};

/// `SECCOMP_RET_ERRNO | errno`: the call fails with `errno`.
fn ret_errno(errno: i32) -> u32 {
    RET_ERRNO | (errno as u32 & 0xffff)
}

/// When a rule's action applies, looking at the low 32 bits of one argument (the kernel reads these arguments as
/// `int`/`unsigned int`, so the upper half must not matter to the filter either).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Check {
    /// Always.
    Always,
    /// When `arg & mask != 0`.
    AnyBit {
        /// Argument index.
        arg: u8,
        /// The bits.
        mask: u32,
    },
    /// When the argument is one of `values`.
    OneOf {
        /// Argument index.
        arg: u8,
        /// The values.
        values: Vec<u32>,
    },
    /// When the argument is none of `values`.
    NoneOf {
        /// Argument index.
        arg: u8,
        /// The values.
        values: Vec<u32>,
    },
}

/// One system call's rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    /// The system call number.
    pub(crate) nr: u32,
    /// Its name, for errors and debugging.
    pub(crate) name: &'static str,
    /// When the action applies.
    pub(crate) check: Check,
    /// The errno the call fails with when the check applies (otherwise it is allowed).
    pub(crate) errno: i32,
}

/// The compiled filter.
#[derive(Debug)]
pub(crate) struct SeccompPrograms {
    /// The programs to install, in order (one today).
    pub(crate) programs: Vec<BpfProgram>,
}

/// The namespace flags of `clone(2)` that are denied: a new user namespace would give a process every capability
/// inside it, and new mount/pid/net namespaces are the building blocks of escapes.
const CLONE_NAMESPACES: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// `CLONE_NEWTIME`, only meaningful for `unshare` (in `clone` the bit belongs to the exit signal).
const CLONE_NEWTIME: u32 = 0x80;

/// `TIOCLINUX`: the Linux console ioctl (its subcommand 2 pastes the selection: keystroke injection).
const TIOCLINUX: u32 = 0x541C;

/// `TIOCSETD`: set the terminal's line discipline. `N_NULL` discards everything the command writes, so the
/// server (and the person reading it) would see nothing; other disciplines (`N_GSM0710`, `N_HDLC`, ...) are
/// kernel attack surface no command needs. (`TIOCGETD`, the query, stays allowed.)
const TIOCSETD: u32 = 0x5423;

/// `TIOCCONS`: redirect the system console's output to this terminal (needs `CAP_SYS_ADMIN`, which the sandbox
/// drops; denied anyway, as defence in depth).
const TIOCCONS: u32 = 0x541D;

/// `TIOCVHANGUP`: hang up the terminal as `vhangup(2)` does (needs `CAP_SYS_ADMIN`; denied anyway).
const TIOCVHANGUP: u32 = 0x5437;

/// The terminal ioctls denied: keystroke injection, output hiding, console redirection, forced hangups.
pub(crate) const DENIED_IOCTLS: [(u32, &str); 5] = [
    (libc::TIOCSTI as u32, "TIOCSTI"),
    (TIOCLINUX, "TIOCLINUX"),
    (TIOCSETD, "TIOCSETD"),
    (TIOCCONS, "TIOCCONS"),
    (TIOCVHANGUP, "TIOCVHANGUP"),
];

/// A syscall number as `u32` (all are small and positive).
fn nr(n: libc::c_long) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Which sockets a command may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sockets {
    /// `AF_UNIX` only (network off).
    UnixOnly,
    /// `AF_UNIX`, `AF_INET` and `AF_INET6` (network through the proxy: the command's network namespace has only
    /// loopback, so an IP socket reaches nothing but the proxy and the command's own local servers; netlink,
    /// packet and the other families stay denied).
    UnixAndIp,
    /// Every family (network on).
    Any,
}

/// The rules for a sandbox with network access `network` (off: unix sockets only; on: every socket).
#[cfg(test)]
pub(crate) fn rules(network: bool) -> Vec<Rule> {
    rules_with(if network { Sockets::Any } else { Sockets::UnixOnly })
}

/// The rules for a sandbox whose commands may create `sockets`.
pub(crate) fn rules_with(sockets: Sockets) -> Vec<Rule> {
    let eperm = libc::EPERM;
    let deny =
        |n: libc::c_long, name: &'static str| Rule { nr: nr(n), name, check: Check::Always, errno: eperm };
    let mut rules = vec![
        // Inspecting or changing other processes.
        deny(libc::SYS_ptrace, "ptrace"),
        deny(libc::SYS_process_vm_readv, "process_vm_readv"),
        deny(libc::SYS_process_vm_writev, "process_vm_writev"),
        deny(libc::SYS_pidfd_getfd, "pidfd_getfd"),
        // io_uring performs I/O the filter cannot see.
        deny(libc::SYS_io_uring_setup, "io_uring_setup"),
        deny(libc::SYS_io_uring_enter, "io_uring_enter"),
        deny(libc::SYS_io_uring_register, "io_uring_register"),
        // Kernel attack surface and kernel state.
        deny(libc::SYS_bpf, "bpf"),
        deny(libc::SYS_perf_event_open, "perf_event_open"),
        deny(libc::SYS_userfaultfd, "userfaultfd"),
        deny(libc::SYS_kexec_load, "kexec_load"),
        deny(libc::SYS_kexec_file_load, "kexec_file_load"),
        deny(libc::SYS_init_module, "init_module"),
        deny(libc::SYS_finit_module, "finit_module"),
        deny(libc::SYS_delete_module, "delete_module"),
        deny(libc::SYS_add_key, "add_key"),
        deny(libc::SYS_keyctl, "keyctl"),
        deny(libc::SYS_request_key, "request_key"),
        deny(libc::SYS_fanotify_init, "fanotify_init"),
        // The mount table (the sandbox's own mounts are done before the filter is installed).
        deny(libc::SYS_mount, "mount"),
        deny(libc::SYS_umount2, "umount2"),
        deny(libc::SYS_pivot_root, "pivot_root"),
        deny(libc::SYS_open_tree, "open_tree"),
        deny(crate::sys::SYS_OPEN_TREE_ATTR, "open_tree_attr"),
        deny(libc::SYS_move_mount, "move_mount"),
        deny(libc::SYS_fsopen, "fsopen"),
        deny(libc::SYS_fsconfig, "fsconfig"),
        deny(libc::SYS_fsmount, "fsmount"),
        deny(libc::SYS_fspick, "fspick"),
        deny(libc::SYS_mount_setattr, "mount_setattr"),
        deny(libc::SYS_setns, "setns"),
        // Host state: swap, power, clock, accounting, quotas, names.
        deny(libc::SYS_swapon, "swapon"),
        deny(libc::SYS_swapoff, "swapoff"),
        deny(libc::SYS_reboot, "reboot"),
        deny(libc::SYS_settimeofday, "settimeofday"),
        deny(libc::SYS_clock_settime, "clock_settime"),
        deny(libc::SYS_clock_adjtime, "clock_adjtime"),
        deny(libc::SYS_adjtimex, "adjtimex"),
        deny(libc::SYS_acct, "acct"),
        deny(libc::SYS_quotactl, "quotactl"),
        deny(libc::SYS_quotactl_fd, "quotactl_fd"),
        deny(libc::SYS_sethostname, "sethostname"),
        deny(libc::SYS_setdomainname, "setdomainname"),
        // Opening files by handle bypasses path-based checks.
        deny(libc::SYS_name_to_handle_at, "name_to_handle_at"),
        deny(libc::SYS_open_by_handle_at, "open_by_handle_at"),
        // New namespaces; clone3 hides its flags, so it reports "not implemented" and libc uses clone.
        Rule {
            nr: nr(libc::SYS_clone),
            name: "clone",
            check: Check::AnyBit { arg: 0, mask: CLONE_NAMESPACES },
            errno: eperm,
        },
        Rule {
            nr: nr(libc::SYS_unshare),
            name: "unshare",
            check: Check::AnyBit { arg: 0, mask: CLONE_NAMESPACES | CLONE_NEWTIME },
            errno: eperm,
        },
        Rule { nr: nr(libc::SYS_clone3), name: "clone3", check: Check::Always, errno: libc::ENOSYS },
        // Keystroke injection into the terminal, hiding output from it (line disciplines), console redirection
        // and forced hangups. Taking a controlling terminal (`TIOCSCTTY`) and giving it up (`TIOCNOTTY`) stay
        // allowed: without `CAP_SYS_ADMIN` neither can take a terminal away from another session.
        Rule {
            nr: nr(libc::SYS_ioctl),
            name: "ioctl",
            check: Check::OneOf { arg: 1, values: DENIED_IOCTLS.iter().map(|(value, _)| *value).collect() },
            errno: eperm,
        },
        deny(libc::SYS_vhangup, "vhangup"),
        // Resource limits of other processes (pid 0 is the caller): same-uid processes outside the sandbox, the
        // uexec server included, could otherwise be starved of file descriptors or memory.
        Rule {
            nr: nr(libc::SYS_prlimit64),
            name: "prlimit64",
            check: Check::NoneOf { arg: 0, values: vec![0] },
            errno: eperm,
        },
        // Only the default persona (0) and the query (0xffffffff).
        Rule {
            nr: nr(libc::SYS_personality),
            name: "personality",
            check: Check::NoneOf { arg: 0, values: vec![0, 0xFFFF_FFFF] },
            errno: eperm,
        },
    ];
    #[cfg(target_arch = "x86_64")]
    rules.extend([
        deny(libc::SYS_iopl, "iopl"),
        deny(libc::SYS_ioperm, "ioperm"),
        deny(libc::SYS_uselib, "uselib"),
    ]);
    if sockets != Sockets::Any {
        // Sockets other than AF_UNIX (and, through the proxy, AF_INET/AF_INET6) cannot be created, so
        // connect/bind/listen/accept/send on another socket cannot happen; unix sockets keep every call (spec B8).
        let unix_only = || Check::NoneOf { arg: 0, values: vec![libc::AF_UNIX as u32] };
        let families = match sockets {
            Sockets::UnixAndIp => vec![libc::AF_UNIX as u32, libc::AF_INET as u32, libc::AF_INET6 as u32],
            _ => vec![libc::AF_UNIX as u32],
        };
        let socket = Check::NoneOf { arg: 0, values: families };
        rules.push(Rule { nr: nr(libc::SYS_socket), name: "socket", check: socket, errno: eperm });
        rules.push(Rule {
            nr: nr(libc::SYS_socketpair),
            name: "socketpair",
            check: unix_only(),
            errno: eperm,
        });
    }
    rules.sort_by_key(|r| r.nr);
    rules
}

/// `BPF_LD | BPF_W | BPF_ABS`.
pub(crate) const LD_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JA`.
pub(crate) const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
pub(crate) const JEQ: u16 = 0x15;
/// `BPF_JMP | BPF_JGE | BPF_K`.
pub(crate) const JGE: u16 = 0x35;
/// `BPF_JMP | BPF_JSET | BPF_K`.
pub(crate) const JSET: u16 = 0x45;
/// `BPF_RET | BPF_K`.
pub(crate) const RET: u16 = 0x06;
/// `SECCOMP_RET_ERRNO`.
pub(crate) const RET_ERRNO: u32 = 0x0005_0000;
/// `SECCOMP_RET_ALLOW`.
pub(crate) const RET_ALLOW: u32 = 0x7fff_0000;
/// `SECCOMP_RET_KILL_PROCESS`.
pub(crate) const RET_KILL_PROCESS: u32 = 0x8000_0000;
/// Offset of `seccomp_data.nr`.
const OFFSET_NR: u32 = 0;
/// Offset of `seccomp_data.arch`.
const OFFSET_ARCH: u32 = 4;
/// Offset of `seccomp_data.args[0]` (little-endian: the low half of each argument comes first).
const OFFSET_ARGS: u32 = 16;
/// Groups of rules searched linearly at the bottom of the tree.
const LEAF_RULES: usize = 4;

/// One instruction.
fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The `AUDIT_ARCH_*` value of this build's architecture.
fn audit_arch() -> Result<u32, String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(0xC000_003E),
        "aarch64" => Ok(0xC000_00B7),
        other => Err(format!("no seccomp filter for architecture {other}")),
    }
}

/// A jump offset that must fit in 8 bits.
fn short(offset: usize) -> Result<u8, String> {
    u8::try_from(offset).map_err(|_| format!("seccomp: jump of {offset} instructions is too long"))
}

/// Build the filter for a sandbox whose commands may create `sockets` (pure: no system call).
pub(crate) fn build(sockets: Sockets) -> Result<SeccompPrograms, String> {
    Ok(SeccompPrograms { programs: vec![compile(&rules_with(sockets), audit_arch()?)?] })
}

/// Compile `rules` (sorted by number, unique) for architecture `arch`.
pub(crate) fn compile(rules: &[Rule], arch: u32) -> Result<BpfProgram, String> {
    if let Some(pair) = rules.windows(2).find(|w| w[0].nr >= w[1].nr) {
        return Err(format!(
            "seccomp: rules must be sorted by number and unique ({} before {})",
            pair[0].name, pair[1].name
        ));
    }
    let mut program = vec![
        insn(LD_ABS, 0, 0, OFFSET_ARCH),
        insn(JEQ, 1, 0, arch),
        insn(RET, 0, 0, RET_KILL_PROCESS),
        insn(LD_ABS, 0, 0, OFFSET_NR),
    ];
    if arch == 0xC000_003E {
        // x32: any number with bit 30 set.
        program.extend([insn(JGE, 0, 1, 0x4000_0000), insn(RET, 0, 0, ret_errno(libc::ENOSYS))]);
    }
    program.extend(tree(rules)?);
    Ok(program)
}

/// Rules searched as one unit: a single rule, or a run of consecutive numbers that all fail with the same errno
/// whatever their arguments (`mount` ... `ioperm`, `io_uring_setup` ... `fspick`), checked as one range.
#[derive(Debug, Clone, Copy)]
struct Group<'a> {
    /// The lowest number.
    lo: u32,
    /// The highest number.
    hi: u32,
    /// The first rule (for a range, every rule has its check, `Always`, and errno).
    rule: &'a Rule,
}

/// `rules` (sorted, unique) as groups: consecutive `Always` rules with the same errno are merged.
fn groups(rules: &[Rule]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for rule in rules {
        if let Some(last) = groups.last_mut()
            && rule.check == Check::Always
            && last.rule.check == Check::Always
            && last.rule.errno == rule.errno
            && last.hi.checked_add(1) == Some(rule.nr)
        {
            last.hi = rule.nr;
            continue;
        }
        groups.push(Group { lo: rule.nr, hi: rule.nr, rule });
    }
    groups
}

/// The search tree over `rules`; the accumulator holds the syscall number on entry. Every path ends in a return,
/// so blocks can be concatenated.
fn tree(rules: &[Rule]) -> Result<Vec<sock_filter>, String> {
    group_tree(&groups(rules))
}

/// The search tree over `groups` (sorted, disjoint).
fn group_tree(groups: &[Group<'_>]) -> Result<Vec<sock_filter>, String> {
    if groups.len() <= LEAF_RULES {
        return leaf(groups);
    }
    let mid = groups.len() / 2;
    let left = group_tree(&groups[..mid])?;
    let right = group_tree(&groups[mid..])?;
    let pivot = groups[mid].lo;
    let mut block = match u8::try_from(left.len()) {
        // nr >= pivot: jump over the left block into the right one; else fall into the left one.
        Ok(skip_left) => vec![insn(JGE, skip_left, 0, pivot)],
        Err(_) => {
            let skip_left = u32::try_from(left.len()).map_err(|e| e.to_string())?;
            // nr >= pivot: take the `ja` over the left block into the right one; else skip the `ja`.
            vec![insn(JGE, 0, 1, pivot), insn(JA, 0, 0, skip_left)]
        }
    };
    block.extend(left);
    block.extend(right);
    Ok(block)
}

/// A linear search over a few groups, then `allow`; the groups that always fail share one return per errno,
/// placed after the `allow`.
fn leaf(groups: &[Group<'_>]) -> Result<Vec<sock_filter>, String> {
    let mut block = Vec::new();
    // (index of a jump whose true branch goes to the shared return, errno; for a range, its false branch).
    let mut to_shared: Vec<(usize, i32, bool)> = Vec::new();
    for group in groups {
        let rule = group.rule;
        if rule.check != Check::Always {
            let body = body(rule)?;
            block.push(insn(JEQ, 0, short(body.len())?, rule.nr));
            block.extend(body);
        } else if group.lo == group.hi {
            to_shared.push((block.len(), rule.errno, true));
            block.push(insn(JEQ, 0, 0, group.lo));
        } else {
            // nr < lo: on to the next group; nr > hi: likewise; else the shared return.
            let above = group.hi.checked_add(1).ok_or("seccomp: range ends at u32::MAX")?;
            block.push(insn(JGE, 0, 1, group.lo));
            to_shared.push((block.len(), rule.errno, false));
            block.push(insn(JGE, 0, 0, above));
        }
    }
    block.push(insn(RET, 0, 0, RET_ALLOW));
    let mut shared: Vec<(i32, usize)> = Vec::new();
    for (at, errno, on_true) in to_shared {
        let target = match shared.iter().find(|(e, _)| *e == errno) {
            Some((_, target)) => *target,
            None => {
                shared.push((errno, block.len()));
                block.push(insn(RET, 0, 0, ret_errno(errno)));
                block.len() - 1
            }
        };
        let offset = short(target - at - 1)?;
        if on_true {
            block[at].jt = offset;
        } else {
            block[at].jf = offset;
        }
    }
    Ok(block)
}

/// The instructions for one rule once its number matched; every path returns.
fn body(rule: &Rule) -> Result<Vec<sock_filter>, String> {
    let hit = insn(RET, 0, 0, ret_errno(rule.errno));
    let allow = insn(RET, 0, 0, RET_ALLOW);
    let load = |arg: u8| insn(LD_ABS, 0, 0, OFFSET_ARGS + 8 * u32::from(arg));
    Ok(match &rule.check {
        Check::Always => vec![hit],
        Check::AnyBit { arg, mask } => vec![load(*arg), insn(JSET, 0, 1, *mask), hit, allow],
        Check::OneOf { arg, values } => {
            // jeq v_i -> hit (past the remaining compares and the allow); all fail -> allow.
            let mut block = vec![load(*arg)];
            for (i, value) in values.iter().enumerate() {
                block.push(insn(JEQ, short(values.len() - i)?, 0, *value));
            }
            block.extend([allow, hit]);
            block
        }
        Check::NoneOf { arg, values } => {
            let mut block = vec![load(*arg)];
            for (i, value) in values.iter().enumerate() {
                block.push(insn(JEQ, short(values.len() - i)?, 0, *value));
            }
            block.extend([hit, allow]);
            block
        }
    })
}

#[cfg(test)]
// `Ioctl` is `u64` on glibc and `i32` on musl: the casts are needed on one of them.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::unnecessary_cast)]
#[path = "seccomp_tests.rs"]
mod tests;
