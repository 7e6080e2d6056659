//! Unit tests of the adapter: host gating, environment and the protection report.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsString;
use std::path::PathBuf;

use uexec_domain::ProtectionStatus;
use uexec_domain::{SandboxKind, SandboxPolicy};
use uexec_ports::process::{IoMode, SpawnRequest};
use uexec_ports::{Sandbox, SandboxRequest};

use super::*;

fn available() -> SeatbeltSandbox {
    SeatbeltSandbox { host: Host::Available, ..SeatbeltSandbox::default() }
}

fn statuses(report: &ProtectionReport) -> Vec<(&str, ProtectionStatus)> {
    report.protections.iter().map(|p| (p.name.as_str(), p.status)).collect()
}

#[test]
fn on_macos_every_protection_is_enforced() {
    let report = available().report(&SandboxPolicy::default());
    assert_eq!(report.sandbox, SandboxKind::MacosSeatbelt);
    assert_eq!(report.policy, "workspace-write");
    assert_eq!(
        statuses(&report),
        [
            ("seatbelt", ProtectionStatus::Enforced),
            ("filesystem", ProtectionStatus::Enforced),
            ("network", ProtectionStatus::Enforced),
            ("process", ProtectionStatus::Enforced),
            ("system_services", ProtectionStatus::Enforced),
            ("refusal_evidence", ProtectionStatus::NotRequested),
            ("keychain", ProtectionStatus::Enforced),
        ]
    );
    let evidence = report.protections.iter().find(|p| p.name == "refusal_evidence").unwrap();
    assert!(evidence.detail.starts_with("keyword heuristic only (the fallback)"), "{evidence:?}");
    assert!(!report.is_degraded());
    // The twin: the person's opt-in shows as not requested, not as enforced.
    let open = available().with_keychain(true).report(&SandboxPolicy::default());
    let keychain = open.protections.iter().find(|p| p.name == "keychain").unwrap();
    assert_eq!(keychain.status, ProtectionStatus::NotRequested, "{keychain:?}");
}

#[test]
fn network_allowed_by_policy_is_not_requested() {
    let report = available().report(&SandboxPolicy::ReadOnly { network_access: true });
    let network = report.protections.iter().find(|p| p.name == "network").unwrap();
    assert_eq!(network.status, ProtectionStatus::NotRequested);
    let filesystem = report.protections.iter().find(|p| p.name == "filesystem").unwrap();
    assert!(filesystem.detail.contains("no writes except /dev/null"), "{}", filesystem.detail);
    // The network part's services are counted when network is on.
    let services = |r: &ProtectionReport| r.protections.iter().find(|p| p.name == "system_services").cloned();
    let off = available().report(&SandboxPolicy::ReadOnly { network_access: false });
    assert_ne!(services(&report), services(&off));
}

#[test]
fn an_unavailable_host_turns_everything_off_and_says_why() {
    let sandbox =
        SeatbeltSandbox { host: Host::Unavailable("sandbox-exec is macOS-only".into()), ..available() };
    let report = sandbox.report(&SandboxPolicy::ReadOnly { network_access: false });
    // What protects is off; how a refusal is known (the keywords) is no protection, and stays as it is.
    assert!(
        report.protections.iter().all(|p| p.status == ProtectionStatus::Off || p.name == "refusal_evidence"),
        "{report}"
    );
    assert!(report.protections[0].detail.contains("sandbox-exec is unavailable here"), "{report}");
    assert!(report.protections[1].detail.starts_with("would enforce: reads everywhere"), "{report}");
    assert!(report.is_degraded());
}

#[test]
fn prepare_wraps_the_command_and_counts_the_roots() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    let request = SandboxRequest {
        spawn: SpawnRequest {
            argv: vec!["ls".into(), "-l".into()],
            cwd: cwd.clone(),
            env: vec![("UEXEC_SANDBOX_NETWORK_DISABLED".into(), "0".into()), ("HOME".into(), "/h".into())],
            mode: IoMode::Pipes,
            setup: Vec::new(),
            pid_scope: Default::default(),
        },
        workspace: cwd.clone(),
        policy: SandboxPolicy::WorkspaceWrite {
            writable_roots: Vec::new(),
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        },
        tmpdir: None,
        allow_degraded: false,
    };
    let prepared = available().prepare(request).unwrap();
    assert_eq!(prepared.spawn.argv[0], OsString::from(SANDBOX_EXEC));
    assert_eq!(
        prepared.spawn.argv[prepared.spawn.argv.len() - 3..],
        [OsString::from("--"), "ls".into(), "-l".into()]
    );
    assert_eq!(prepared.spawn.cwd, cwd);
    // With the network off, package managers are told not to retry (`uexec_domain::env::NETWORK_OFF_ENV`).
    let mut expected: Vec<(OsString, OsString)> = vec![
        (OsString::from("HOME"), OsString::from("/h")),
        (ENV_SANDBOX.into(), "macos-seatbelt".into()),
        (ENV_NETWORK_DISABLED.into(), "1".into()),
    ];
    expected.extend(
        uexec_domain::env::NETWORK_OFF_ENV.iter().map(|(n, v)| (OsString::from(n), OsString::from(v))),
    );
    assert_eq!(prepared.spawn.env, expected);
    let filesystem = prepared.report.protections.iter().find(|p| p.name == "filesystem").unwrap();
    // The temporary workspace has no .git and no .uexec: nothing to protect, and the report says so; the other
    // tools' files are denied by path whether present or not.
    let tools = uexec_domain::tool_files::TOOL_ENTRIES.len();
    assert!(
        filesystem.detail.contains(&format!("under 1 writable roots minus {tools} read-only subpaths"))
            && filesystem.detail.contains("(absent, so not protected: ")
            && filesystem.detail.contains("/.git, "),
        "{}",
        filesystem.detail
    );
    // The twin: once .git exists it is protected, entry by entry (its configuration, hooks, ...; it has no
    // linked worktree, submodule or object yet).
    let git = uexec_domain::gitdir::protected_git_entries(uexec_domain::gitdir::GitDirKind::Repository).len();
    std::fs::create_dir(cwd.join(".git")).unwrap();
    let again = available().prepare(SandboxRequest { ..request_in(&cwd) }).unwrap();
    let filesystem = again.report.protections.iter().find(|p| p.name == "filesystem").unwrap();
    assert!(
        filesystem
            .detail
            .contains(&format!("under 1 writable roots minus {} read-only subpaths", tools + git))
            && filesystem.detail.contains("other tools' files that run code without asking"),
        "{}",
        filesystem.detail
    );
}

fn request_in(cwd: &Path) -> SandboxRequest {
    SandboxRequest {
        spawn: SpawnRequest {
            argv: vec!["ls".into()],
            cwd: cwd.to_path_buf(),
            env: Vec::new(),
            mode: IoMode::Pipes,
            setup: Vec::new(),
            pid_scope: Default::default(),
        },
        workspace: cwd.to_path_buf(),
        policy: SandboxPolicy::WorkspaceWrite {
            writable_roots: Vec::new(),
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        },
        tmpdir: None,
        allow_degraded: false,
    }
}

#[test]
fn with_a_proxy_port_a_networked_command_gets_the_proxy_only_and_hidden_paths_are_denied() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(cwd.join("home/.ssh")).unwrap();
    let request = |network_access: bool| SandboxRequest {
        spawn: SpawnRequest {
            argv: vec!["curl".into(), "https://pypi.org".into()],
            cwd: cwd.clone(),
            env: vec![("HTTPS_PROXY".into(), "http://elsewhere:1".into())],
            mode: IoMode::Pipes,
            setup: Vec::new(),
            pid_scope: Default::default(),
        },
        workspace: cwd.clone(),
        policy: SandboxPolicy::ReadOnly { network_access },
        tmpdir: None,
        allow_degraded: false,
    };
    let hidden = HiddenPaths {
        home: Some(cwd.join("home")),
        patterns: uexec_domain::hidden::HiddenPattern::defaults(),
        reachable: Vec::new(),
    };
    let sandbox = available().with_proxy_port(40001).with_hidden(hidden);
    let prepared = sandbox.prepare(request(true)).unwrap();
    let profile = prepared.spawn.argv[2].to_string_lossy().into_owned();
    assert!(profile.contains("(allow network-outbound (remote ip \"localhost:40001\"))"), "{profile}");
    assert!(!profile.contains("(remote ip \"*:*\")"), "{profile}");
    let env: Vec<(String, String)> = prepared
        .spawn
        .env
        .iter()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
        .collect();
    assert!(env.contains(&("HTTPS_PROXY".into(), "http://127.0.0.1:40001".into())), "{env:?}");
    // Dual-stack runtimes are told to use IPv4, so they reach the proxy as 127.0.0.1.
    assert!(env.contains(&("JAVA_TOOL_OPTIONS".into(), "-Djava.net.preferIPv4Stack=true".into())), "{env:?}");
    assert!(env.contains(&("DOTNET_SYSTEM_NET_DISABLEIPV6".into(), "1".into())), "{env:?}");
    assert_eq!(env.iter().filter(|(k, _)| k == "HTTPS_PROXY").count(), 1);
    let network = prepared.report.protections.iter().find(|p| p.name == "network").unwrap();
    assert!(network.detail.contains("localhost:40001"), "{network:?}");
    let hidden = prepared.report.protections.iter().find(|p| p.name == "hidden_paths").unwrap();
    assert!(hidden.detail.contains(".ssh"), "{hidden:?}");
    // The twin: without network access, neither the proxy part nor its variables.
    let offline = sandbox.prepare(request(false)).unwrap();
    assert!(!offline.spawn.argv[2].to_string_lossy().contains("40001"));
    assert!(!offline.spawn.env.iter().any(|(_, v)| v.to_string_lossy().contains("40001")));
    assert!(!offline.spawn.env.iter().any(|(k, _)| k == "JAVA_TOOL_OPTIONS"));
}

#[test]
fn prepare_on_an_unavailable_host_refuses_unless_inspecting() {
    let unavailable = Host::Unavailable("sandbox-exec is macOS-only; this host runs plan9".into());
    let request = || SandboxRequest {
        spawn: SpawnRequest {
            argv: vec!["true".into()],
            cwd: PathBuf::from("/"),
            env: Vec::new(),
            mode: IoMode::Pipes,
            setup: Vec::new(),
            pid_scope: Default::default(),
        },
        workspace: PathBuf::from("/"),
        policy: SandboxPolicy::ReadOnly { network_access: true },
        tmpdir: None,
        allow_degraded: true,
    };
    let enforcing = SeatbeltSandbox { host: unavailable.clone(), ..SeatbeltSandbox::default() };
    let err = enforcing.prepare(request()).unwrap_err();
    assert!(
        matches!(err, SandboxError::Unsupported(ref m) if m.starts_with("sandbox-exec is macOS-only; this host runs plan9")),
        "{err}"
    );

    let inspecting = SeatbeltSandbox { host: unavailable, ..SeatbeltSandbox::for_inspection() };
    let prepared = inspecting.prepare(request()).unwrap();
    assert_eq!(prepared.spawn.argv[0], OsString::from(SANDBOX_EXEC));
    assert!(prepared.report.protections.iter().all(|p| p.status != ProtectionStatus::Enforced));
    assert_eq!(prepared.spawn.env, [(OsString::from(ENV_SANDBOX), OsString::from("macos-seatbelt"))]);
}

#[test]
fn the_forced_c_utf8_locale_becomes_one_every_macos_has_and_the_persons_own_stays() {
    let env: Vec<(OsString, OsString)> = vec![
        ("LANG".into(), "C.UTF-8".into()),
        ("LC_CTYPE".into(), "C.UTF-8".into()),
        ("LC_ALL".into(), "C.UTF-8".into()),
        ("LC_MESSAGES".into(), "C.UTF-8".into()),
        ("MY_VAR".into(), "C.UTF-8".into()),
    ];
    let out = sandbox_env(env, true);
    for name in ["LANG", "LC_CTYPE", "LC_ALL"] {
        assert!(out.contains(&(name.into(), MACOS_UTF8_LOCALE.into())), "{name}: {out:?}");
    }
    // The twin: other variables and other values are the person's.
    assert!(out.contains(&("MY_VAR".into(), "C.UTF-8".into())));
    assert!(out.contains(&("LC_MESSAGES".into(), "C.UTF-8".into())));
    let own = sandbox_env(vec![("LANG".into(), "fr_FR.UTF-8".into())], true);
    assert!(own.contains(&("LANG".into(), "fr_FR.UTF-8".into())));
}

#[test]
fn the_ipv4_preference_is_appended_to_the_persons_java_options_once() {
    let env = ipv4_loopback_env(vec![
        ("JAVA_TOOL_OPTIONS".into(), "-Xmx2g".into()),
        ("DOTNET_SYSTEM_NET_DISABLEIPV6".into(), "0".into()),
    ]);
    assert!(env.contains(&("JAVA_TOOL_OPTIONS".into(), "-Xmx2g -Djava.net.preferIPv4Stack=true".into())));
    assert_eq!(env.iter().filter(|(k, _)| k == "DOTNET_SYSTEM_NET_DISABLEIPV6").count(), 1);
    assert!(env.contains(&("DOTNET_SYSTEM_NET_DISABLEIPV6".into(), "1".into())));
    let twice = ipv4_loopback_env(env.clone());
    assert_eq!(twice.iter().filter(|(k, _)| k == "JAVA_TOOL_OPTIONS").count(), 1);
    assert!(twice.contains(&("JAVA_TOOL_OPTIONS".into(), "-Xmx2g -Djava.net.preferIPv4Stack=true".into())));
}

#[test]
fn the_macos_secret_stores_join_the_defaults_and_leave_with_them() {
    use uexec_domain::hidden::HiddenPattern;
    let with = with_macos_secrets(&HiddenPaths {
        home: Some("/Users/dev".into()),
        patterns: HiddenPattern::defaults(),
        reachable: Vec::new(),
    });
    for text in [
        "~/Library/Keychains",
        "~/Library/Cookies",
        "~/Library/Application Support/Google/Chrome",
        "~/Library/Mail",
        "~/Library/Messages",
    ] {
        assert!(with.patterns.iter().any(|p| p.text == text), "{text}");
    }
    // hide_secrets = false with one pattern of the person's: only that pattern.
    let own = HiddenPaths {
        home: Some("/Users/dev".into()),
        patterns: vec![HiddenPattern::parse(".env").unwrap()],
        reachable: Vec::new(),
    };
    assert_eq!(with_macos_secrets(&own), own);
}

#[test]
fn the_keychain_is_out_unless_the_person_opts_in() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    for network in [false, true] {
        let policy = SandboxPolicy::ReadOnly { network_access: network };
        let closed = available().launch(&policy, &cwd, None, &["true".into()]).unwrap();
        assert!(!closed.profile.contains("com.apple.SecurityServer\")\n"), "network {network}");
        let open = available().with_keychain(true).launch(&policy, &cwd, None, &["true".into()]).unwrap();
        assert!(open.profile.contains("(global-name \"com.apple.SecurityServer\")"), "network {network}");
    }
}

/// A tool whose own sandbox cannot start inside Seatbelt: the failure names its switch (the script's words name
/// the tool); any other failure, or the same output from another tool, says nothing more.
#[test]
fn a_nested_sandbox_failure_names_the_tools_switch() {
    let sandbox = SeatbeltSandbox::for_inspection();
    let argv: Vec<OsString> = ["/bin/bash", "-lc", "swift build -c release"].map(OsString::from).to_vec();
    let nested = b"sandbox-exec: sandbox_apply: Operation not permitted\n";
    let hint = sandbox.denial_hint(&argv, nested).unwrap();
    assert!(hint.contains("--disable-sandbox"), "{hint}");
    assert_eq!(sandbox.denial_hint(&argv, b"error: no such module 'Foo'\n"), None);
    let other: Vec<OsString> = ["/bin/bash", "-lc", "make"].map(OsString::from).to_vec();
    assert!(!sandbox.denial_hint(&other, nested).unwrap().contains("--disable-sandbox"));
}
