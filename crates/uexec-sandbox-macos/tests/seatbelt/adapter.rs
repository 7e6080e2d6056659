//! The command line's layout and the adapter on this (non-macOS) host.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(not(target_os = "macos"))]
use uexec_domain::ProtectionStatus;
use uexec_domain::SandboxPolicy;
use uexec_ports::Sandbox;
#[cfg(not(target_os = "macos"))]
use uexec_ports::SandboxError;
use uexec_sandbox_macos::{SANDBOX_EXEC, SeatbeltSandbox, build_launch};

use crate::fake_fs::FakeFs;

#[test]
fn argv_is_sandbox_exec_profile_params_separator_then_the_command() {
    let fs = FakeFs::macos().dir("/Users/dev/p");
    let argv: Vec<OsString> = vec!["git".into(), "commit".into(), "-m".into(), "-- not an option".into()];
    let launch =
        build_launch(&SandboxPolicy::default(), Path::new("/Users/dev/p"), None, &argv, &fs).unwrap();

    assert_eq!(launch.argv[0], OsString::from(SANDBOX_EXEC));
    assert_eq!(launch.argv[0], OsString::from("/usr/bin/sandbox-exec"));
    assert_eq!(launch.argv[1], OsString::from("-p"));
    assert_eq!(launch.argv[2], OsString::from(&launch.profile));
    let params_end = 3 + launch.params.len();
    assert!(!launch.params.is_empty());
    for ((name, value), arg) in launch.params.iter().zip(&launch.argv[3..params_end]) {
        let mut expected = OsString::from(format!("-D{name}="));
        expected.push(value);
        assert_eq!(*arg, expected);
    }
    assert_eq!(launch.argv[params_end], OsString::from("--"));
    assert_eq!(launch.argv[params_end + 1..], argv[..]);
    assert_eq!(launch.argv.len(), params_end + 1 + argv.len());
}

#[cfg(not(target_os = "macos"))]
#[test]
fn off_macos_the_enforcing_adapter_refuses_and_reports_off() {
    let sandbox = SeatbeltSandbox::default();
    let reason = sandbox.unavailable_reason().unwrap();
    assert!(reason.starts_with("sandbox-exec is macOS-only"), "{reason}");

    let err = sandbox.prepare(crate::request(PathBuf::from("/"), SandboxPolicy::default())).unwrap_err();
    assert!(
        matches!(err, SandboxError::Unsupported(ref m) if m.starts_with("sandbox-exec is macOS-only;")),
        "{err}"
    );

    let report = sandbox.report(&SandboxPolicy::default());
    // What protects is off; how a refusal is known (the keywords here) is no protection and stays as it is.
    assert!(
        report.protections.iter().all(|p| p.status == ProtectionStatus::Off || p.name == "refusal_evidence"),
        "{report}"
    );
    let line = report.summary_line();
    assert!(line.contains("seatbelt: off (sandbox-exec is unavailable here"), "{line}");
    assert!(line.contains("filesystem: off (would enforce: reads everywhere"), "{line}");
}

#[cfg(not(target_os = "macos"))]
#[test]
fn off_macos_the_inspection_adapter_prepares_the_wrapped_command() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    let sandbox = SeatbeltSandbox::for_inspection();
    let prepared = sandbox.prepare(crate::request(cwd.clone(), SandboxPolicy::default())).unwrap();
    assert_eq!(prepared.spawn.argv[0], OsString::from(SANDBOX_EXEC));
    assert!(prepared.spawn.argv.contains(&OsString::from(format!("-DWRITABLE_ROOT_0={}", cwd.display()))));
    assert!(prepared.spawn.env.contains(&("UEXEC_SANDBOX".into(), "macos-seatbelt".into())));
    assert!(prepared.spawn.env.contains(&("UEXEC_SANDBOX_NETWORK_DISABLED".into(), "1".into())));
    assert!(prepared.report.is_degraded());
}

#[test]
fn a_fake_filesystem_can_be_injected_into_the_adapter() {
    let sandbox =
        SeatbeltSandbox::for_inspection().with_view(Arc::new(FakeFs::macos().dir("/private/tmp/w")));
    let launch =
        sandbox.launch(&SandboxPolicy::default(), Path::new("/tmp/w"), None, &["true".into()]).unwrap();
    assert_eq!(launch.params[0], ("WRITABLE_ROOT_0".to_owned(), OsString::from("/private/tmp/w")));
    let prepared = sandbox
        .prepare(crate::request(PathBuf::from("/tmp/w"), SandboxPolicy::ReadOnly { network_access: true }))
        .unwrap();
    assert!(!prepared.spawn.env.iter().any(|(name, _)| name == "UEXEC_SANDBOX_NETWORK_DISABLED"));
}
