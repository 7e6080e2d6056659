//! Fail-closed behaviour with a simulated weaker kernel, the report, and the user-namespace mount strategy.

use std::fs;

use uexec_domain::ProtectionStatus;
use uexec_domain::{ProtectionReport, SandboxPolicy};
use uexec_ports::{Sandbox, SandboxError, SandboxRequest};
use uexec_sandbox_linux::{Availability, DEGRADED_SETTING, KernelSupport, LinuxSandbox, MountNamespace};

use crate::common::{Scratch, denied, request, run, workspace_only};

fn status(report: &ProtectionReport, name: &str) -> ProtectionStatus {
    report.protections.iter().find(|p| p.name == name).map(|p| p.status).expect("protection listed")
}

fn write_probe(s: &Scratch) -> Vec<String> {
    vec![
        "bash".into(),
        "-c".into(),
        format!("echo in > ok.txt; echo out > {}/secret.txt || echo refused", s.outside.display()),
    ]
}

fn request_for(policy: SandboxPolicy, argv: &[String], s: &Scratch, allow_degraded: bool) -> SandboxRequest {
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    SandboxRequest { allow_degraded, ..request(policy, &argv, &s.ws) }
}

#[test]
fn report_on_this_machine_is_fully_enforced_without_running_anything() {
    let sandbox = LinuxSandbox::default();
    let report = sandbox.report(&SandboxPolicy::default());
    assert!(!report.is_degraded(), "{report}");
    let line = report.summary_line();
    assert!(
        line.starts_with(
            "sandbox: linux-landlock-seccomp (workspace-write); filesystem: enforced (landlock ABI"
        ),
        "{line}"
    );
    for name in [
        "metadata",
        "read_only_subpaths",
        "network",
        "no_new_privs",
        "ptrace",
        "io_uring",
        "syscalls",
        "scopes",
    ] {
        assert_eq!(status(&report, name), ProtectionStatus::Enforced, "{name}: {line}");
    }
    let open = sandbox.report(&SandboxPolicy::ReadOnly { network_access: true });
    assert_eq!(status(&open, "network"), ProtectionStatus::NotRequested);
}

#[test]
fn missing_landlock_fails_closed_and_runs_degraded_only_when_accepted() {
    let s = Scratch::new();
    let support = KernelSupport {
        landlock_abi: 0,
        landlock_missing: Some("simulated: no Landlock".into()),
        ..KernelSupport::detect()
    };
    let sandbox = LinuxSandbox::with_support(support);
    let argv = write_probe(&s);

    let refused = sandbox.prepare(request_for(workspace_only(vec![], false), &argv, &s, false));
    match refused {
        Err(SandboxError::Unenforceable { missing, setting }) => {
            assert!(
                missing.contains("filesystem: partial") && missing.contains("simulated: no Landlock"),
                "{missing}"
            );
            assert!(missing.contains("scopes: off"), "{missing}");
            assert_eq!(setting.as_deref(), Some(DEGRADED_SETTING));
        }
        other => panic!("expected Unenforceable, got {other:?}"),
    }
    assert!(!s.ws.join("ok.txt").exists(), "nothing may run when the sandbox is refused");

    let degraded = sandbox.prepare(request_for(workspace_only(vec![], false), &argv, &s, true)).unwrap();
    assert!(degraded.report.is_degraded());
    assert_eq!(status(&degraded.report, "filesystem"), ProtectionStatus::Partial);
    let probe = run(&degraded);
    // The read-only mounts still stop the outside write.
    assert!(probe.stdout.contains("refused") && denied(&probe.stderr), "{probe:?}");
    assert_eq!(Scratch::read(&s.ws.join("ok.txt")), "in\n");
    assert_eq!(Scratch::read(&s.outside.join("secret.txt")), "original\n");
}

#[test]
fn missing_seccomp_or_old_landlock_fail_closed() {
    let s = Scratch::new();
    let argv = write_probe(&s);
    let no_seccomp = LinuxSandbox::with_support(KernelSupport {
        seccomp: Availability::Unavailable("simulated".into()),
        ..KernelSupport::detect()
    });
    match no_seccomp.prepare(request_for(workspace_only(vec![], false), &argv, &s, false)) {
        Err(SandboxError::Unenforceable { missing, .. }) => {
            assert!(missing.contains("network: partial") && missing.contains("io_uring: off"), "{missing}");
        }
        other => panic!("expected Unenforceable, got {other:?}"),
    }
    let status_probe: Vec<String> =
        ["bash", "-c", "grep Seccomp: /proc/self/status"].map(String::from).into();
    let degraded =
        no_seccomp.prepare(request_for(workspace_only(vec![], false), &status_probe, &s, true)).unwrap();
    assert!(degraded.report.is_degraded());
    let probe = run(&degraded);
    assert!(probe.stdout.contains("Seccomp:\t0"), "no filter is installed when seccomp is off: {probe:?}");

    let abi5 = LinuxSandbox::with_support(KernelSupport { landlock_abi: 5, ..KernelSupport::detect() });
    match abi5.prepare(request_for(workspace_only(vec![], false), &argv, &s, false)) {
        Err(SandboxError::Unenforceable { missing, .. }) => {
            assert!(missing.starts_with("scopes: off"), "{missing}")
        }
        other => panic!("expected Unenforceable, got {other:?}"),
    }
    let no_mounts = LinuxSandbox::with_support(KernelSupport {
        mount_namespace: MountNamespace::Unavailable("simulated".into()),
        ..KernelSupport::detect()
    });
    match no_mounts.prepare(request_for(workspace_only(vec![], false), &argv, &s, false)) {
        Err(SandboxError::Unenforceable { missing, .. }) => {
            assert!(
                missing.contains("metadata: off") && missing.contains("read_only_subpaths: off"),
                "{missing}"
            );
        }
        other => panic!("expected Unenforceable, got {other:?}"),
    }
}

#[test]
fn danger_full_access_is_refused_and_bad_paths_are_errors() {
    let s = Scratch::new();
    let sandbox = LinuxSandbox::default();
    let argv = write_probe(&s);
    assert!(matches!(
        sandbox.prepare(request_for(SandboxPolicy::DangerFullAccess, &argv, &s, true)),
        Err(SandboxError::Unrestricted)
    ));
    let mut bad = request_for(workspace_only(vec![], false), &argv, &s, false);
    bad.spawn.cwd = s.base.join("does-not-exist");
    assert!(matches!(sandbox.prepare(bad), Err(SandboxError::InvalidPath { .. })));
    let mut bad = request_for(workspace_only(vec![], false), &argv, &s, false);
    bad.workspace = s.base.join("no-such-workspace");
    assert!(matches!(sandbox.prepare(bad), Err(SandboxError::InvalidPath { .. })));
}

#[test]
fn user_namespace_strategy_confines_the_same_way() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join(".git")).unwrap();
    fs::write(s.ws.join(".git/config"), "[core]\n").unwrap();
    let sandbox = LinuxSandbox::with_support(KernelSupport {
        mount_namespace: MountNamespace::UserNamespace,
        ..KernelSupport::detect()
    });
    let script = format!(
        "echo in > ok.txt && (echo x >> .git/config || echo git-refused) \
         && (echo out > {}/secret.txt || echo out-refused)",
        s.outside.display()
    );
    let prepared = sandbox
        .prepare(request(workspace_only(vec![], false), &["bash", "-c", &script], &s.ws))
        .expect("user namespace strategy");
    assert!(prepared.spawn.setup.iter().any(|h| h.requires_fork()), "a user namespace needs a real fork");
    assert!(prepared.report.summary_line().contains("user namespace"), "{}", prepared.report);
    let probe = run(&prepared);
    assert!(probe.stdout.contains("git-refused") && probe.stdout.contains("out-refused"), "{probe:?}");
    assert_eq!(Scratch::read(&s.ws.join("ok.txt")), "in\n");
    assert_eq!(Scratch::read(&s.ws.join(".git/config")), "[core]\n");
    assert_eq!(Scratch::read(&s.outside.join("secret.txt")), "original\n");
}

#[test]
fn privileged_strategy_runs_in_a_vfork_compatible_hook() {
    let s = Scratch::new();
    let prepared = crate::common::prepare(workspace_only(vec![], false), &["true"], &s.ws);
    assert!(prepared.spawn.setup.iter().all(|h| !h.requires_fork()));
    assert!(run(&prepared).ok());
}

/// A mount namespace refused at spawn time (the machine changed since the probe): the sandbox takes it out of
/// every later plan and says why, so the next prepare is refused naming the cause and the remedies (nothing
/// runs), or, accepted, runs under Landlock and seccomp; the twins: a failure of another step, or a missing
/// path (a race, not a refusal), changes nothing.
#[test]
fn a_mount_namespace_refused_at_spawn_time_is_planned_without() {
    let s = Scratch::new();
    let argv = write_probe(&s);
    let sandbox = LinuxSandbox::default();
    assert!(!sandbox.replan_after_setup_failure("seccomp(SECCOMP_SET_MODE_FILTER)", libc::EPERM));
    assert!(!sandbox.replan_after_setup_failure("open_tree(OPEN_TREE_CLONE)", libc::ENOENT));
    assert!(sandbox.prepare(request_for(workspace_only(vec![], false), &argv, &s, false)).is_ok());

    assert!(sandbox.replan_after_setup_failure("unshare(CLONE_NEWUSER|CLONE_NEWNS)", libc::EPERM));
    assert!(!sandbox.support().mount_namespace.is_available());
    match sandbox.prepare(request_for(workspace_only(vec![], false), &argv, &s, false)) {
        Err(SandboxError::Unenforceable { missing, setting }) => {
            assert!(
                missing.contains("a command's setup failed at unshare(CLONE_NEWUSER|CLONE_NEWNS)"),
                "{missing}"
            );
            assert!(missing.contains("likely cause") && missing.contains("for full protection"), "{missing}");
            assert_eq!(setting.as_deref(), Some(DEGRADED_SETTING));
        }
        other => panic!("expected Unenforceable, got {other:?}"),
    }
    let degraded = sandbox.prepare(request_for(workspace_only(vec![], false), &argv, &s, true)).unwrap();
    assert!(degraded.report.is_degraded());
    let probe = run(&degraded);
    assert!(probe.stdout.contains("refused"), "Landlock still holds the outside: {probe:?}");
    assert_eq!(Scratch::read(&s.ws.join("ok.txt")), "in\n");
    // Said once: a second failure finds the plan made without the namespace already.
    assert!(!sandbox.replan_after_setup_failure("unshare(CLONE_NEWUSER|CLONE_NEWNS)", libc::EPERM));
}
