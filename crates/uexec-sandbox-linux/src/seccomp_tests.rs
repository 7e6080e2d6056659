//! Tests of the seccomp compiler: a small classic-BPF interpreter runs the program against an oracle written from
//! the rules, and against the same rules compiled by `seccompiler` (an independent compiler).

use std::collections::BTreeMap;

use proptest::prelude::*;
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, sock_filter,
};

use super::*;

/// `struct seccomp_data`, as the filter sees it.
#[derive(Debug, Clone, Copy)]
struct Data {
    nr: u32,
    arch: u32,
    args: [u64; 6],
}

impl Data {
    /// The 32-bit word at byte `offset` (little-endian layout).
    fn word(&self, offset: u32) -> u32 {
        match offset {
            0 => self.nr,
            4 => self.arch,
            o if (16..64).contains(&o) && o % 4 == 0 => {
                let arg = self.args[((o - 16) / 8) as usize];
                if (o - 16) % 8 == 0 { arg as u32 } else { (arg >> 32) as u32 }
            }
            o => panic!("load from offset {o}"),
        }
    }
}

/// Run `program` on `data`: the return value and the number of instructions executed.
fn run(program: &[sock_filter], data: &Data) -> (u32, usize) {
    let (mut pc, mut acc, mut steps) = (0usize, 0u32, 0usize);
    loop {
        let i = &program[pc];
        steps += 1;
        let jump = |cond: bool| pc + 1 + usize::from(if cond { i.jt } else { i.jf });
        pc = match i.code {
            0x20 => {
                acc = data.word(i.k);
                pc + 1
            }
            0x54 => {
                acc &= i.k;
                pc + 1
            }
            0x05 => pc + 1 + i.k as usize,
            0x15 => jump(acc == i.k),
            0x25 => jump(acc > i.k),
            0x35 => jump(acc >= i.k),
            0x45 => jump(acc & i.k != 0),
            0x06 => return (i.k, steps),
            code => panic!("unknown opcode {code:#x}"),
        };
        assert!(pc < program.len(), "ran off the end of the program");
    }
}

/// What the rules say (the oracle).
fn expected(rules: &[Rule], arch: u32, data: &Data) -> u32 {
    if data.arch != arch {
        return RET_KILL_PROCESS;
    }
    if arch == 0xC000_003E && data.nr >= 0x4000_0000 {
        return ret_errno(libc::ENOSYS);
    }
    let Some(rule) = rules.iter().find(|r| r.nr == data.nr) else { return RET_ALLOW };
    let low = |arg: &u8| data.args[usize::from(*arg)] as u32;
    let applies = match &rule.check {
        Check::Always => true,
        Check::AnyBit { arg, mask } => low(arg) & mask != 0,
        Check::OneOf { arg, values } => values.contains(&low(arg)),
        Check::NoneOf { arg, values } => !values.contains(&low(arg)),
    };
    if applies { ret_errno(rule.errno) } else { RET_ALLOW }
}

/// The same rules compiled by seccompiler: one linear filter per action, combined as the kernel does.
struct Reference {
    filters: Vec<Vec<sock_filter>>,
}

impl Reference {
    fn new(rules: &[Rule]) -> Reference {
        let arch = std::env::consts::ARCH.try_into().unwrap();
        let mut by_action: BTreeMap<u32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
        for rule in rules {
            let errno = rule.errno as u32;
            let cond = |arg: u8, op, value: u32| {
                SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, u64::from(value)).unwrap()
            };
            let chain = match &rule.check {
                Check::Always => vec![],
                Check::AnyBit { arg, mask } => (0..32)
                    .map(|b| 1u32 << b)
                    .filter(|bit| mask & bit != 0)
                    .map(|bit| {
                        SeccompRule::new(vec![cond(*arg, SeccompCmpOp::MaskedEq(u64::from(bit)), bit)])
                            .unwrap()
                    })
                    .collect(),
                Check::OneOf { arg, values } => values
                    .iter()
                    .map(|v| SeccompRule::new(vec![cond(*arg, SeccompCmpOp::Eq, *v)]).unwrap())
                    .collect(),
                Check::NoneOf { arg, values } => {
                    vec![
                        SeccompRule::new(values.iter().map(|v| cond(*arg, SeccompCmpOp::Ne, *v)).collect())
                            .unwrap(),
                    ]
                }
            };
            by_action.entry(errno).or_default().insert(i64::from(rule.nr), chain);
        }
        let filters = by_action
            .into_iter()
            .map(|(errno, map)| {
                let filter =
                    SeccompFilter::new(map, SeccompAction::Allow, SeccompAction::Errno(errno), arch).unwrap();
                BpfProgram::try_from(filter).unwrap()
            })
            .collect();
        Reference { filters }
    }

    /// The strictest answer of all filters (kill > errno > allow; the rules' errnos never overlap).
    fn run(&self, data: &Data) -> u32 {
        let answers: Vec<u32> = self.filters.iter().map(|f| run(f, data).0).collect();
        if answers.contains(&RET_KILL_PROCESS) {
            return RET_KILL_PROCESS;
        }
        answers.into_iter().find(|a| a & 0xffff_0000 == RET_ERRNO).unwrap_or(RET_ALLOW)
    }
}

/// Interesting argument values: flags, families, ioctls, with and without garbage in the upper half.
fn samples() -> Vec<u64> {
    let mut values = vec![
        0,
        1,
        2,
        10,
        16,
        0x11,
        0x80,
        0xFFFF_FFFF,
        libc::TIOCSTI as u64,
        0x541C,
        0x541D,
        0x5422,
        0x5423,
        0x5424,
        0x540E,
        0x5437,
        0x5413,
        libc::CLONE_NEWUSER as u64,
        libc::CLONE_NEWNS as u64,
        (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64,
        0x0040_0000,
    ];
    let upper: Vec<u64> = values.iter().map(|v| v | 0x1_0000_0000).collect();
    values.extend(upper);
    values
}

fn arch() -> u32 {
    audit_arch().unwrap()
}

#[test]
fn every_syscall_number_gets_the_oracles_answer_and_seccompilers() {
    for (network, sockets) in [(false, Sockets::UnixOnly), (true, Sockets::Any), (true, Sockets::UnixAndIp)] {
        let rules = rules_with(sockets);
        let program = compile(&rules, arch()).unwrap();
        let reference = Reference::new(&rules);
        for nr in 0..1024 {
            for (i, value) in samples().into_iter().enumerate() {
                let data = Data { nr, arch: arch(), args: [value, value, value, 0, 0, (i as u64) << 33] };
                let want = expected(&rules, arch(), &data);
                assert_eq!(run(&program, &data).0, want, "nr {nr} arg {value:#x} network {network}");
                assert_eq!(reference.run(&data), want, "seccompiler disagrees: nr {nr} arg {value:#x}");
            }
        }
    }
}

#[test]
fn the_rules_deny_what_the_report_says() {
    let arch = arch();
    let program = compile(&rules(false), arch).unwrap();
    let call = |nr: libc::c_long, args: [u64; 6]| run(&program, &Data { nr: nr as u32, arch, args }).0;
    let eperm = RET_ERRNO | libc::EPERM as u32;
    assert_eq!(call(libc::SYS_ptrace, [0; 6]), eperm);
    assert_eq!(call(libc::SYS_io_uring_setup, [0; 6]), eperm);
    assert_eq!(call(libc::SYS_socket, [libc::AF_INET as u64, 0, 0, 0, 0, 0]), eperm);
    assert_eq!(call(libc::SYS_socket, [libc::AF_UNIX as u64, 0, 0, 0, 0, 0]), RET_ALLOW);
    // Upper-half garbage does not turn AF_UNIX into something else, nor the other way round.
    assert_eq!(call(libc::SYS_socket, [(1 << 32) | libc::AF_UNIX as u64, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(libc::SYS_socket, [(1 << 32) | libc::AF_INET as u64, 0, 0, 0, 0, 0]), eperm);
    assert_eq!(call(libc::SYS_sendto, [3, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(libc::SYS_clone3, [0; 6]), RET_ERRNO | libc::ENOSYS as u32);
    assert_eq!(call(libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(libc::SYS_clone, [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0]), eperm);
    assert_eq!(call(libc::SYS_ioctl, [0, libc::TIOCSTI as u64, 0, 0, 0, 0]), eperm);
    assert_eq!(call(libc::SYS_ioctl, [0, libc::TIOCGWINSZ as u64, 0, 0, 0, 0]), RET_ALLOW);
    for denied in [libc::TIOCSETD, libc::TIOCCONS, 0x5437] {
        assert_eq!(call(libc::SYS_ioctl, [1, denied as u64, 0, 0, 0, 0]), eperm, "{denied:#x}");
        assert_eq!(call(libc::SYS_ioctl, [1, (1 << 32) | denied as u64, 0, 0, 0, 0]), eperm, "{denied:#x}");
    }
    for allowed in [libc::TIOCGETD, libc::TIOCSCTTY, libc::TIOCNOTTY, libc::TIOCSWINSZ] {
        assert_eq!(call(libc::SYS_ioctl, [1, allowed as u64, 0, 0, 0, 0]), RET_ALLOW, "{allowed:#x}");
    }
    assert_eq!(call(libc::SYS_vhangup, [0; 6]), eperm);
    assert_eq!(call(libc::SYS_personality, [0xFFFF_FFFF, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(libc::SYS_prlimit64, [0, 7, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(libc::SYS_prlimit64, [1, 7, 0, 0, 0, 0]), eperm);
    assert_eq!(call(libc::SYS_personality, [0x0040_0000, 0, 0, 0, 0, 0]), eperm);
    let other_arch = Data { nr: 0, arch: 0x4000_0003, args: [0; 6] };
    assert_eq!(run(&program, &other_arch).0, RET_KILL_PROCESS);
    if arch == 0xC000_003E {
        let x32_socket = Data { nr: 0x4000_0000 + 41, arch, args: [libc::AF_INET as u64, 0, 0, 0, 0, 0] };
        assert_eq!(run(&program, &x32_socket).0, RET_ERRNO | libc::ENOSYS as u32);
    }
    let on = compile(&rules(true), arch).unwrap();
    let inet = Data { nr: libc::SYS_socket as u32, arch, args: [libc::AF_INET as u64, 0, 0, 0, 0, 0] };
    assert_eq!(run(&on, &inet).0, RET_ALLOW);
    // Through the proxy: unix and IP sockets, nothing else (netlink, packet), and only unix socket pairs.
    let proxied = compile(&rules_with(Sockets::UnixAndIp), arch).unwrap();
    let socket =
        |family: i32| Data { nr: libc::SYS_socket as u32, arch, args: [family as u64, 0, 0, 0, 0, 0] };
    for family in [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6] {
        assert_eq!(run(&proxied, &socket(family)).0, RET_ALLOW, "{family}");
    }
    for family in [libc::AF_NETLINK, libc::AF_PACKET, libc::AF_VSOCK, libc::AF_BLUETOOTH] {
        assert_eq!(run(&proxied, &socket(family)).0, eperm, "{family}");
    }
    let pair = Data { nr: libc::SYS_socketpair as u32, arch, args: [libc::AF_INET as u64, 0, 0, 0, 0, 0] };
    assert_eq!(run(&proxied, &pair).0, eperm);
}

#[test]
fn every_number_is_decided_in_a_few_instructions() {
    // The kernel emulates the filter for every syscall number when it is attached: a short walk keeps that cheap.
    let program = compile(&rules(false), arch()).unwrap();
    let longest =
        (0..1024).map(|nr| run(&program, &Data { nr, arch: arch(), args: [0; 6] }).1).max().unwrap();
    assert!(longest <= 24, "a syscall number walks {longest} instructions");
    // The kernel also converts and JIT-compiles every instruction on each attach.
    assert!(program.len() < 130, "{} instructions", program.len());
}

#[test]
fn a_tree_too_wide_for_short_jumps_still_decides_every_number() {
    // 300 separate rules: the left subtrees near the top exceed 255 instructions, so they are skipped with `ja`.
    let rules: Vec<Rule> = (0..300)
        .map(|i| Rule { nr: 2 * i, name: "synthetic", check: Check::Always, errno: libc::EPERM })
        .collect();
    let program = compile(&rules, arch()).unwrap();
    assert!(program.iter().any(|i| i.code == JA), "no long jump was needed");
    for nr in 0..700 {
        let data = Data { nr, arch: arch(), args: [0; 6] };
        assert_eq!(run(&program, &data).0, expected(&rules, arch(), &data), "nr {nr}");
    }
}

#[test]
fn unsorted_rules_are_rejected() {
    let mut rules = rules(false);
    rules.reverse();
    assert!(compile(&rules, arch()).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_calls_agree_with_the_oracle_and_seccompiler(
        nr in prop_oneof![0u32..600, Just(libc::SYS_socket as u32), Just(libc::SYS_ioctl as u32),
                          Just(libc::SYS_clone as u32), Just(libc::SYS_unshare as u32)],
        args in proptest::array::uniform6(any::<u64>()),
        network in any::<bool>(),
    ) {
        let rules = rules(network);
        let program = compile(&rules, arch()).unwrap();
        let data = Data { nr, arch: arch(), args };
        let want = expected(&rules, arch(), &data);
        prop_assert_eq!(run(&program, &data).0, want);
        prop_assert_eq!(Reference::new(&rules).run(&data), want);
    }
}
