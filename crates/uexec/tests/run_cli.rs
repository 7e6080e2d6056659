//! `uexec run` driven from a real PTY (spawned with uexec-pty), in pipe mode, and the other subcommands' CLI:
//! exit codes, signals, resize, the sandbox refusing a write, help, reports, config errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use uexec_domain::ExitStatus;
use uexec_ports::{IoMode, OutputStream, ProcessControl, ProcessSpawner, PtySize, Signal, SpawnRequest};

/// `uexec <args>` running in a PTY of `size`, as a person's terminal would run it.
struct InTerminal {
    control: Arc<dyn ProcessControl>,
    output: Box<dyn OutputStream>,
    seen: String,
}

impl InTerminal {
    fn start(ws: &Workspace, args: &[&str], size: PtySize) -> InTerminal {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| k != "TMPDIR" && k != "XDG_CONFIG_HOME" && k != "SHELL")
            .collect();
        env.push(("SHELL".into(), "/bin/bash".into()));
        env.push(("XDG_CONFIG_HOME".into(), ws.path().join(".no-config").into()));
        env.push(("TERM".into(), "xterm".into()));
        let mut argv: Vec<OsString> = vec![uexec().into()];
        argv.extend(args.iter().map(OsString::from));
        let spawned = uexec_pty::PtySpawner::default()
            .spawn(SpawnRequest {
                argv,
                cwd: ws.path().to_path_buf(),
                env,
                mode: IoMode::Pty(size),
                setup: Vec::new(),
            })
            .expect("spawn uexec in a PTY");
        InTerminal { control: spawned.control, output: spawned.output, seen: String::new() }
    }

    /// Read until `needle` appears (or fail after a generous timeout).
    async fn expect(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.seen.contains(needle) {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, self.output.next_chunk()).await {
                Ok(Ok(Some(chunk))) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(Ok(None)) | Ok(Err(_)) => panic!("output ended before {needle:?}: {:?}", self.seen),
                Err(_) => panic!("no {needle:?} within 30 s: {:?}", self.seen),
            }
        }
    }

    /// Read what arrives within `d`.
    async fn read_for(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, self.output.next_chunk()).await {
                Ok(Ok(Some(chunk))) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return,
            }
        }
    }

    async fn exit(mut self) -> (ExitStatus, String) {
        let status = tokio::time::timeout(Duration::from_secs(30), self.control.wait())
            .await
            .expect("uexec run did not exit within 30 s")
            .unwrap();
        self.read_for(Duration::from_millis(200)).await;
        (status, self.seen)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn run_in_a_terminal_relays_input_and_exits_with_the_code() {
    let ws = Workspace::new();
    runtime().block_on(async {
        let mut t = InTerminal::start(
            &ws,
            &[
                "run",
                "--",
                "bash",
                "-c",
                "echo ready; read x; echo \"got:$x\"; test -t 0 && echo tty-inside; exit 5",
            ],
            PtySize::default(),
        );
        t.expect("ready").await;
        t.control.write(b"hello\r").await.unwrap();
        t.expect("got:hello").await;
        let (status, seen) = t.exit().await;
        assert_eq!(status, ExitStatus::Code(5), "{seen}");
        assert!(seen.contains("tty-inside"), "the command gets a terminal: {seen}");
    });
}

#[test]
fn run_reports_death_by_signal_as_128_plus_n() {
    let ws = Workspace::new();
    runtime().block_on(async {
        let t = InTerminal::start(&ws, &["run", "--", "bash", "-c", "kill -TERM $$"], PtySize::default());
        let (status, seen) = t.exit().await;
        assert_eq!(status, ExitStatus::Code(143), "{seen}");
    });
}

#[test]
fn run_forwards_sigterm_to_the_command() {
    let ws = Workspace::new();
    runtime().block_on(async {
        let marker = marker_seconds(90);
        let script = format!("echo ready; sleep {marker}");
        let mut t = InTerminal::start(&ws, &["run", "--", "bash", "-c", &script], PtySize::default());
        t.expect("ready").await;
        assert_eq!(wait_present(&["sleep", &marker], Duration::from_secs(20)).len(), 1);
        // The PTY's process group is uexec's: only uexec gets this signal, and it forwards it.
        t.control.signal(Signal::Terminate).unwrap();
        let (status, seen) = t.exit().await;
        assert_eq!(status, ExitStatus::Code(143), "{seen}");
        assert!(wait_gone(&["sleep", &marker], Duration::from_secs(20)).is_empty());
    });
}

#[test]
fn run_forwards_window_resizes() {
    let ws = Workspace::new();
    runtime().block_on(async {
        let mut t = InTerminal::start(
            &ws,
            &["run", "--", "bash", "-c", "stty size; echo ready; while read l; do stty size; done"],
            PtySize { rows: 24, cols: 80 },
        );
        t.expect("24 80").await;
        t.expect("ready").await;
        t.control.resize(PtySize { rows: 33, cols: 101 }).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !t.seen.contains("33 101") && Instant::now() < deadline {
            t.control.write(b"\r").await.unwrap();
            t.read_for(Duration::from_millis(500)).await;
        }
        assert!(t.seen.contains("33 101"), "{}", t.seen);
        t.control.write(b"\x04").await.unwrap();
        let (status, seen) = t.exit().await;
        assert_eq!(status, ExitStatus::Code(0), "{seen}");
    });
}

#[test]
fn run_refuses_a_write_outside_the_workspace() {
    let ws = Workspace::new();
    let target = ws.outside.path().join("escaped.txt");
    let inside = ws.path().join("inside.txt");
    let script = format!("echo x > {}; echo rc=$?; echo y > {}", target.display(), inside.display());
    runtime().block_on(async {
        let t = InTerminal::start(&ws, &["run", "--", "bash", "-c", &script], PtySize::default());
        let (status, seen) = t.exit().await;
        assert_eq!(status, ExitStatus::Code(0), "{seen}");
        assert!(seen.contains("rc=1"), "{seen}");
        let lower = seen.to_lowercase();
        assert!(lower.contains("permission denied") || lower.contains("read-only file system"), "{seen}");
    });
    assert!(!target.exists(), "the sandbox let a write outside the workspace through");
    assert!(inside.exists(), "the workspace is writable");
}

#[test]
fn run_without_a_terminal_uses_pipes() {
    let ws = Workspace::new();
    let out = uexec_command(
        &ws,
        &["run", "--", "sh", "-c", "echo out; echo err >&2; test -t 0 || echo no-tty; exit 4"],
    )
    .stdin(Stdio::null())
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("out\n") && stdout.contains("err\n") && stdout.contains("no-tty"), "{stdout}");

    let target = ws.outside.path().join("piped.txt");
    let out = uexec_command(&ws, &["run", "--", "sh", "-c", &format!("echo x > {}", target.display())])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(!target.exists());

    let out = uexec_command(
        &ws,
        &[
            "run",
            "--sandbox",
            "danger-full-access",
            "--",
            "sh",
            "-c",
            &format!("echo x > {}", target.display()),
        ],
    )
    .stdin(Stdio::null())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(target.exists(), "danger-full-access runs unsandboxed");
}

#[test]
fn run_exit_codes_when_nothing_ran() {
    let ws = Workspace::new();
    let code = |args: &[&str]| {
        let out = uexec_command(&ws, args).stdin(Stdio::null()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (c, err) = code(&["run", "--config", "/definitely/missing.toml", "--", "true"]);
    assert_eq!(c, Some(125), "{err}");
    assert!(err.contains("missing.toml"), "{err}");
    let (c, err) = code(&["run", "--sandbox", "read-only", "--writable-root", "/tmp", "--", "true"]);
    assert_eq!(c, Some(125), "{err}");
    let (c, err) = code(&["run", "--", "/definitely/not/a/program"]);
    assert_eq!(c, Some(127), "{err}");
    std::fs::write(ws.path().join("not-exec"), "data").unwrap();
    let (c, err) = code(&["run", "--", "./not-exec"]);
    assert_eq!(c, Some(126), "{err}");
}

#[test]
fn help_version_and_no_arguments() {
    let ws = Workspace::new();
    let out = uexec_command(&ws, &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(all.contains("Usage") && all.contains("mcp") && all.contains("run"), "{all}");

    let out = uexec_command(&ws, &["--version"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("uexec "), "{out:?}");

    for sub in ["mcp", "run", "sandbox-report", "sandbox-profile"] {
        let out = uexec_command(&ws, &[sub, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{sub}");
        assert!(help.contains("Examples:"), "{sub} --help has examples: {help}");
        if sub != "sandbox-profile" {
            for flag in [
                "--sandbox",
                "--writable-root",
                "--network",
                "--approval-policy",
                "--config",
                "--allow-degraded-sandbox",
            ] {
                assert!(help.contains(flag), "{sub} --help lacks {flag}");
            }
        }
    }
}

#[test]
fn sandbox_report_text_and_json() {
    let ws = Workspace::new();
    let out = uexec_command(&ws, &["sandbox-report"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("linux-landlock-seccomp") && text.contains("workspace-write"), "{text}");
    assert!(text.contains("Protections:") && text.contains("Verdict:"), "{text}");

    let out = uexec_command(&ws, &["sandbox-report", "--json", "--sandbox", "read-only", "--network"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["policy"]["mode"], "read-only");
    assert_eq!(json["policy"]["network_access"], true);
    assert_eq!(json["mechanism"], "linux-landlock-seccomp");
    assert!(json["report"]["protections"].as_array().is_some_and(|p| !p.is_empty()), "{json}");
    assert!(json["verdict"].is_string());
}

#[test]
fn sandbox_profile_for_macos_on_any_platform() {
    let ws = Workspace::new();
    let out = uexec_command(
        &ws,
        &["sandbox-profile", "--platform", "macos", "--writable-root", "/tmp", "--", "make", "test"],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("(deny default)"), "{text}");
    assert!(text.contains("WRITABLE_ROOT_0="), "{text}");
    assert!(text.contains("/usr/bin/sandbox-exec -p <profile>") && text.contains("-- make test"), "{text}");
}

#[test]
fn invalid_config_names_key_and_line() {
    let ws = Workspace::new();
    let config = ws.path().join("bad.toml");
    std::fs::write(&config, "network = false\nsandbox = \"somewhat\"\n").unwrap();
    let out = uexec_command(&ws, &["sandbox-report", "--config", config.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:2:") && err.contains("sandbox") && err.contains("somewhat"), "{err}");

    std::fs::write(&config, "[limits]\nmax_sessions = 5\nbogus = 1\n").unwrap();
    let out = uexec_command(&ws, &["mcp", "--config", config.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:3:") && err.contains("bogus"), "{err}");
}

/// Issue 10, class 7a: a config file a sandboxed command could have planted ($HOME/.config or
/// $XDG_CONFIG_HOME under the workspace or /tmp, or a symlink into one) is refused at startup; an explicit
/// `--config` is read and reported.
#[test]
fn a_config_planted_in_a_writable_root_is_refused_unless_explicit() {
    let ws = Workspace::new();
    let target = ws.outside.path().join("escaped.txt");
    let script = format!("touch {}", target.display());
    let planted = ws.path().join(".config/uexec/config.toml");
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    std::fs::write(&planted, "sandbox = \"danger-full-access\"\n").unwrap();
    let xdg = ws.path().join("xdg");
    std::fs::create_dir_all(xdg.join("uexec")).unwrap();
    std::fs::write(xdg.join("uexec/config.toml"), "sandbox = \"danger-full-access\"\n").unwrap();
    // $XDG_CONFIG_HOME outside every root, its config a symlink into the workspace.
    let linked = ws.outside.path().join("xdg-linked");
    std::fs::create_dir_all(linked.join("uexec")).unwrap();
    std::os::unix::fs::symlink(&planted, linked.join("uexec/config.toml")).unwrap();
    for (xdg_config_home, shown) in [
        (None, &planted),
        (Some(&xdg), &xdg.join("uexec/config.toml")),
        (Some(&linked), &linked.join("uexec/config.toml")),
    ] {
        let mut cmd = uexec_command(&ws, &["run", "--", "sh", "-c", &script]);
        match xdg_config_home {
            Some(dir) => cmd.env("XDG_CONFIG_HOME", dir),
            None => cmd.env_remove("XDG_CONFIG_HOME"),
        };
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(
            err.contains("refusing the config file") && err.contains(&shown.display().to_string()),
            "{err}"
        );
        assert!(err.contains("writable root"), "{err}");
        assert!(!target.exists(), "a planted config turned the sandbox off");
    }
    let out = uexec_command(&ws, &["run", "--config", planted.to_str().unwrap(), "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("given with --config although") && err.contains("writable root"), "{err}");
    assert!(target.exists(), "the explicit config was read");
}

#[test]
fn run_writes_begin_and_end_to_the_audit_log() {
    let ws = Workspace::new();
    let log = ws.outside.path().join("run-audit.jsonl");
    let out = uexec_command(&ws, &["run", "--audit-log", log.to_str().unwrap(), "--", "sh", "-c", "exit 6"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    let records: Vec<serde_json::Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), 2, "{records:#?}");
    assert_eq!(records[0]["event"], "begin");
    assert_eq!(records[0]["command"], serde_json::json!(["sh", "-c", "exit 6"]));
    assert_eq!(records[0]["argv"], serde_json::json!(["sh", "-c", "exit 6"]), "the exact argv executed");
    assert_eq!(records[0]["sandbox"], "linux-landlock-seccomp");
    assert_eq!(records[0]["tty"], false);
    assert_eq!(records[1]["event"], "end");
    assert_eq!(records[1]["exit_code"], 6);
}
