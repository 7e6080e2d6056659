//! `uexec run` driven from a real PTY (spawned with uexec-pty) and in pipelines (the command on uexec's own
//! stdin, stdout and stderr), and the other subcommands' CLI: exit codes, signals, resize, the sandbox refusing
//! a write, help, reports, config errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use uexec_domain::ExitStatus;
use uexec_ports::process::{
    IoMode, OutputStream, ProcessControl, ProcessSpawner, PtySize, Signal, SpawnRequest,
};

/// `uexec <args>` running in a PTY of `size`, as a person's terminal would run it.
struct InTerminal {
    control: Arc<dyn ProcessControl>,
    output: Box<dyn OutputStream>,
    seen: String,
}

impl InTerminal {
    fn start(ws: &Workspace, args: &[&str], size: PtySize) -> InTerminal {
        let mut argv: Vec<OsString> = vec![uexec().into()];
        argv.extend(args.iter().map(OsString::from));
        InTerminal::start_argv(ws, argv, size)
    }

    /// Any command line in the terminal (a shell running a pipeline with uexec in it).
    fn start_argv(ws: &Workspace, argv: Vec<OsString>, size: PtySize) -> InTerminal {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| k != "TMPDIR" && k != "XDG_CONFIG_HOME" && k != "SHELL")
            .collect();
        env.push(("SHELL".into(), "/bin/bash".into()));
        env.push(("XDG_CONFIG_HOME".into(), ws.path().join(".no-config").into()));
        env.push(("TERM".into(), "xterm".into()));
        let spawned = uexec_pty::PtySpawner::default()
            .spawn(SpawnRequest {
                argv,
                cwd: ws.path().to_path_buf(),
                env,
                mode: IoMode::Pty(size),
                setup: Vec::new(),
                pid_scope: Default::default(),
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
        // The person is told once that the shell runs inside the sandbox, before anything of the command's.
        let banner = seen.find("[uexec] inside the sandbox: linux-landlock-seccomp (workspace-write)");
        assert!(banner.is_some_and(|at| at < seen.find("ready").unwrap_or(0)), "{seen}");
        assert!(seen.contains("programs see UEXEC_SANDBOX"), "{seen}");
    });
    // The twin: without the sandbox there is no such line.
    runtime().block_on(async {
        let mut t = InTerminal::start(
            &ws,
            &["run", "--sandbox", "danger-full-access", "--", "bash", "-c", "echo ready"],
            PtySize::default(),
        );
        t.expect("ready").await;
        let (_, seen) = t.exit().await;
        assert!(!seen.contains("inside the sandbox"), "{seen}");
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

/// `bash -o pipefail -c script` in the workspace, with `UEXEC` naming the binary under test; its output.
fn shell(ws: &Workspace, script: &str) -> std::process::Output {
    std::process::Command::new("bash")
        .args(["-o", "pipefail", "-c", script])
        .current_dir(ws.path())
        .env("UEXEC", uexec())
        .env("XDG_CONFIG_HOME", ws.path().join(".no-config"))
        .env_remove("RUST_LOG")
        .env_remove("TMPDIR")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn run_in_a_pipeline_reads_its_stdin_to_the_end() {
    let ws = Workspace::new();
    let out = shell(&ws, r#"echo hello | "$UEXEC" run -- cat"#);
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "hello\n".to_owned()),
        "{}",
        text(&out.stderr)
    );

    // A script on stdin runs to its end, and its exit status is uexec's.
    let out = shell(&ws, r#"echo 'echo hi; exit 7' | "$UEXEC" run -- bash"#);
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(7), "hi\n".to_owned()), "{}", text(&out.stderr));

    let out = shell(&ws, r#""$UEXEC" run -- bash -c 'read x; echo got:$x' <<< abc"#);
    assert_eq!(text(&out.stdout), "got:abc\n", "{}", text(&out.stderr));

    // End of input is end of file: `wc` counts every line and returns.
    let out = shell(&ws, r#"seq 1 5000 | "$UEXEC" run -- wc -l"#);
    assert_eq!(text(&out.stdout).trim(), "5000", "{}", text(&out.stderr));

    // No stdin at all (/dev/null) is an immediate end of file, not the terminal's.
    let out = uexec_command(&ws, &["run", "--", "sh", "-c", "cat; test -t 0 || echo no-tty; exit 4"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(4), "no-tty\n".to_owned()),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn run_in_a_pipeline_keeps_stdout_and_stderr_apart_and_their_kinds() {
    let ws = Workspace::new();
    let out = uexec_command(
        &ws,
        &[
            "run",
            "--",
            "sh",
            "-c",
            "echo out1; echo err1 >&2; echo out2; echo err2 >&2; [ -p /dev/stdout ] && echo stdout-pipe; \
             [ -p /dev/stdin ] && echo stdin-pipe; test -t 1 || echo no-tty",
        ],
    )
    .stdin(Stdio::piped())
    .output()
    .unwrap();
    assert_eq!(text(&out.stdout), "out1\nout2\nstdout-pipe\nstdin-pipe\nno-tty\n", "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("err1\nerr2\n") && !stderr.contains("out"), "{stderr}");

    // `2>file` and `>file`: the command writes to the files themselves, and sees regular files.
    let out = shell(
        &ws,
        r#""$UEXEC" run -- sh -c '[ -f /dev/stdout ] && echo stdout-file; [ -f /dev/stderr ] && echo e >&2; echo done' >out.txt 2>err.txt; echo rc=$?"#,
    );
    assert_eq!(text(&out.stdout), "rc=0\n", "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(ws.path().join("out.txt")).unwrap(), "stdout-file\ndone\n");
    assert_eq!(std::fs::read_to_string(ws.path().join("err.txt")).unwrap(), "e\n");
}

/// A refused write is named after the command, with the remedy for `uexec run`, whether the person watches a
/// terminal or the output goes down a pipe (a CI log, a program capturing it); the standard error keeps its
/// kind (a pipe) and its order beside standard output when both are one pipe. The twins: a write the sandbox
/// allows gets no note, and neither does a refused write when standard error is a file (uexec hands a file over
/// as it is and does not read it).
#[test]
fn run_names_a_refused_write_in_a_terminal_and_in_a_pipeline() {
    let ws = Workspace::new();
    let target = ws.outside.path().join("refused.txt");
    let refused = format!("echo x > {}; [ -p /dev/stderr ] && echo err-pipe >&2; exit 1", target.display());
    let note = "[uexec] sandbox refused: write to";
    let remedy = "--writable-root";
    // Standard error a pipe of its own.
    let out = uexec_command(&ws, &["run", "--", "sh", "-c", &refused]).stdin(Stdio::null()).output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(note) && stderr.contains(&target.display().to_string()), "{stderr}");
    assert!(stderr.contains(remedy) && !stderr.contains("sandbox_permissions"), "{stderr}");
    assert!(stderr.contains("err-pipe"), "standard error stays a pipe: {stderr}");
    // Both streams one pipe: the order is the command's, the note comes last.
    let out = shell(
        &ws,
        &format!(
            r#""$UEXEC" run -- sh -c 'echo first; echo x > {}; echo last; exit 1' 2>&1 | cat"#,
            target.display()
        ),
    );
    let both = text(&out.stdout);
    let first = both.find("first").unwrap_or(usize::MAX);
    let failed = both.find("refused.txt").unwrap_or(usize::MAX);
    let last = both.find("last").unwrap_or(usize::MAX);
    let noted = both.find(note).unwrap_or(usize::MAX);
    assert!(first < failed && failed < last && last < noted && noted < usize::MAX, "{both}");
    // In a terminal.
    runtime().block_on(async {
        let t = InTerminal::start(&ws, &["run", "--", "sh", "-c", &refused], PtySize::default());
        let (status, seen) = t.exit().await;
        assert_eq!(status, ExitStatus::Code(1), "{seen}");
        assert!(seen.contains(note) && seen.contains(remedy), "{seen}");
    });
    assert!(!target.exists());

    // The twins: an allowed write, and a file as standard error.
    let allowed = "echo x > inside.txt; exit 1";
    let out = uexec_command(&ws, &["run", "--", "sh", "-c", allowed]).stdin(Stdio::null()).output().unwrap();
    assert!(!text(&out.stderr).contains("[uexec] sandbox refused"), "{}", text(&out.stderr));
    assert!(ws.path().join("inside.txt").exists());
    let out = shell(&ws, &format!(r#""$UEXEC" run -- sh -c '{refused}' 2>err.txt; echo rc=$?"#));
    assert_eq!(text(&out.stdout), "rc=1\n", "{}", text(&out.stderr));
    let in_file = std::fs::read_to_string(ws.path().join("err.txt")).unwrap();
    assert!(
        !in_file.contains("err-pipe") && !in_file.contains(note),
        "a file stays a file, unread: {in_file}"
    );
}

#[test]
fn run_in_a_pipeline_is_sandboxed_unless_the_policy_says_otherwise() {
    let ws = Workspace::new();
    let target = ws.outside.path().join("piped.txt");
    let write = format!("echo x > {}", target.display());
    let out = uexec_command(&ws, &["run", "--", "sh", "-c", &write]).stdin(Stdio::null()).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(!target.exists(), "the sandbox let a write outside the workspace through");

    let out = uexec_command(&ws, &["run", "--sandbox", "danger-full-access", "--", "sh", "-c", &write])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(target.exists(), "danger-full-access runs unsandboxed");
}

#[test]
fn run_writes_through_a_redirection_the_person_made_but_cannot_open_that_file_itself() {
    // The file is outside every writable root: the person opened it for the command (as bwrap's caller would),
    // so writes through the inherited fd succeed; opening the same path from inside the sandbox does not.
    let ws = Workspace::new();
    let outside = ws.outside.path().join("redirected.txt");
    let script = format!(
        r#""$UEXEC" run -- sh -c 'echo through-fd; echo by-name 2>/dev/null >> {0} || echo refused >&2' >{0} 2>err.txt"#,
        outside.display()
    );
    let out = shell(&ws, &script);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "through-fd\n");
    assert_eq!(std::fs::read_to_string(ws.path().join("err.txt")).unwrap(), "refused\n");
}

#[test]
fn run_in_a_pipeline_passes_binary_data_unchanged() {
    let ws = Workspace::new();
    // Every byte value, including CR, LF, ^C, ^D and NUL, which a PTY would translate or act on.
    let all: Vec<u8> = (0..=255u8).cycle().take(256 * 64).collect();
    std::fs::write(ws.path().join("all.bin"), &all).unwrap();
    let out = shell(&ws, r#""$UEXEC" run -- cat < all.bin"#);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        out.stdout == all,
        "{} bytes back, first difference at {:?}",
        out.stdout.len(),
        out.stdout.iter().zip(&all).position(|(a, b)| a != b)
    );
}

#[test]
fn run_streams_100_mb_through_cat_byte_for_byte() {
    let ws = Workspace::new();
    let out = shell(
        &ws,
        r#"head -c 100M /dev/urandom > in.bin && want=$(sha256sum < in.bin) \
           && got=$("$UEXEC" run -- cat < in.bin | sha256sum) && size=$("$UEXEC" run -- cat < in.bin | wc -c) \
           && echo "$want" && echo "$got" && echo "$size""#,
    );
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(out.status.code(), Some(0), "{stdout} {}", text(&out.stderr));
    assert_eq!(lines.len(), 3, "{stdout}");
    assert_eq!(lines[0], lines[1], "the stream changed on its way through uexec");
    assert_eq!(lines[2].trim(), "104857600");
}

#[test]
fn run_in_a_pipeline_dies_of_sigpipe_like_the_command_itself() {
    let ws = Workspace::new();
    // `timeout` only guards the test against a hang; the statuses are what `yes | head -n1` gives directly.
    let out = shell(
        &ws,
        r#"timeout 60 bash -o pipefail -c '"$UEXEC" run -- yes | head -n1'; echo "uexec=$?"; yes | head -n1; echo "direct=${PIPESTATUS[0]}""#,
    );
    assert_eq!(text(&out.stdout), "y\nuexec=141\ny\ndirect=141\n", "{}", text(&out.stderr));
}

#[test]
fn run_in_a_pipeline_exits_128_plus_the_signal_and_kills_what_it_left() {
    let ws = Workspace::new();
    for (signal, code) in [("KILL", 137), ("TERM", 143), ("INT", 130)] {
        let out = uexec_command(&ws, &["run", "--", "sh", "-c", &format!("kill -{signal} $$")])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{signal}: {}", text(&out.stderr));
    }
    // A daemon that left the command's session and ignores SIGHUP/SIGTERM, holding stdout open: uexec exits
    // (the pipe reaches end of file) and the daemon is gone.
    let marker = marker_seconds(91);
    let script =
        format!("trap '' HUP TERM; setsid sh -c 'trap \"\" HUP TERM; exec sleep {marker}' & echo started");
    let out = shell(
        &ws,
        &format!(r#"timeout 60 "$UEXEC" run -- sh -c "{script}" | cat; echo "rc=${{PIPESTATUS[0]}}""#),
    );
    assert_eq!(text(&out.stdout), "started\nrc=0\n", "{}", text(&out.stderr));
    assert!(
        wait_gone(&["sleep", &marker], Duration::from_secs(20)).is_empty(),
        "the daemon outlived uexec run"
    );
}

#[test]
fn run_in_a_pipeline_killed_with_sigkill_takes_its_command_and_daemons_along() {
    // Without a terminal uexec contains the command from its main thread (no helper thread): a SIGKILL of uexec
    // still kills the command and a daemon that left its session.
    let ws = Workspace::new();
    let marker = marker_seconds(92);
    let script = format!("setsid sleep {marker} & sleep {marker} & echo started; wait");
    let mut uexec = uexec_command(&ws, &["run", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(uexec.stdout.take().unwrap()), &mut line)
        .unwrap();
    assert_eq!(line, "started\n");
    // `echo started` can run before both sleeps have exec'd: wait for the two of them.
    let deadline = Instant::now() + Duration::from_secs(20);
    while pids_with_cmdline(&["sleep", &marker]).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let running = pids_with_cmdline(&["sleep", &marker]).len();
    uexec.kill().unwrap();
    uexec.wait().unwrap();
    assert_eq!(running, 2, "both sleeps ran");
    assert!(wait_gone(&["sleep", &marker], Duration::from_secs(20)).is_empty(), "a process outlived uexec");
}

#[test]
fn run_with_a_terminal_stdin_and_a_pipe_stdout_gives_the_command_both() {
    // `uexec run -- cmd | cat` typed at a terminal: the command reads the terminal itself (it can ask it its size,
    // an ioctl the sandbox allows on the inherited terminal), writes to the pipe, and the terminal's settings are
    // the same afterwards.
    let ws = Workspace::new();
    let script = format!(
        r#"before=$(stty -g); echo ready; {} run -- sh -c 'test -t 0 && echo stdin-tty; test -p /dev/stdout && echo stdout-pipe; stty size; read x; echo "got:$x"' | tr a-z A-Z; echo "rc=${{PIPESTATUS[0]}}"; [ "$(stty -g)" = "$before" ] && echo same-modes"#,
        uexec()
    );
    runtime().block_on(async {
        let argv = vec![OsString::from("bash"), OsString::from("-c"), OsString::from(script)];
        let mut t = InTerminal::start_argv(&ws, argv, PtySize { rows: 31, cols: 97 });
        t.expect("ready").await;
        t.control.write(b"hello\r").await.unwrap();
        let (status, seen) = t.exit().await;
        assert_eq!(status, ExitStatus::Code(0), "{seen}");
        for expected in ["STDIN-TTY", "STDOUT-PIPE", "31 97", "GOT:HELLO", "rc=0", "same-modes"] {
            assert!(seen.contains(expected), "{expected} missing: {seen}");
        }
    });
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
    // A git directory is writable but for what git runs or reads as configuration.
    assert!(text.contains("as a git directory only config, config.worktree, hooks, info"), "{text}");
    // Where the notes of refusals come from: here (privileged, network off) the offline namespace's responder.
    let evidence =
        text.lines().find(|l| l.trim_start().starts_with("refusal_evidence")).unwrap_or_else(|| {
            panic!("no refusal_evidence entry in\n{text}");
        });
    assert!(evidence.contains("enforced"), "{evidence}");
    assert!(
        text.contains("recorded by the sandbox: name lookups (the offline namespace's responder)")
            && text.contains("no keyword heuristic"),
        "{text}"
    );

    let out = uexec_command(&ws, &["sandbox-report", "--json", "--sandbox", "read-only", "--network"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["policy"]["mode"], "read-only");
    assert_eq!(json["policy"]["network_access"], true);
    assert_eq!(json["mechanism"], "linux-landlock-seccomp");
    assert!(json["report"]["protections"].as_array().is_some_and(|p| !p.is_empty()), "{json}");
    let evidence = json["report"]["protections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "refusal_evidence")
        .unwrap_or_else(|| panic!("{json}"));
    assert!(
        evidence["detail"].as_str().unwrap().starts_with("no network refusal to record (network allowed)"),
        "{evidence}"
    );
    assert!(json["verdict"].is_string());
    assert!(json["git_directory_protection"].as_str().is_some_and(|t| t.contains("hooks")), "{json}");
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

/// `sandbox-profile` prints the profile that runs, hidden locations and the allowlist mode's network
/// part included (it showed the open network part and no hidden rule), and the keychain choice.
#[test]
fn sandbox_profile_for_macos_prints_the_hidden_locations_and_the_allowlist_network_part() {
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path().join(".ssh")).unwrap();
    let allowlist = uexec_command(
        &ws,
        &[
            "sandbox-profile",
            "--platform",
            "macos",
            "--allow-domain",
            "pypi.org",
            "--",
            "pip",
            "install",
            "x",
        ],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&allowlist.stdout);
    assert!(allowlist.status.success(), "{}", String::from_utf8_lossy(&allowlist.stderr));
    assert!(text.contains("(allow network-outbound (remote ip \"localhost:0\"))"), "{text}");
    assert!(!text.contains("(remote ip \"*:*\")"), "{text}");
    assert!(text.contains("(regex (param \"HIDDEN_0_ANY\"))"), "{text}");
    let ssh = std::fs::canonicalize(ws.path().join(".ssh")).unwrap();
    assert!(text.contains(&format!("HIDDEN_0={}", ssh.display())), "{text}");
    assert!(!text.contains("com.apple.SecurityServer\")"), "{text}");
    // The twins: the open network part with --network, and the keychain when the config opts in.
    std::fs::write(ws.path().join("uexec.toml"), "macos_keychain = true\n").unwrap();
    let open = uexec_command(
        &ws,
        &["sandbox-profile", "--platform", "macos", "--network", "--config", "uexec.toml", "--", "true"],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&open.stdout);
    assert!(open.status.success(), "{}", String::from_utf8_lossy(&open.stderr));
    assert!(text.contains("(allow network-outbound (remote ip \"*:*\"))"), "{text}");
    assert!(text.contains("(global-name \"com.apple.SecurityServer\")"), "{text}");
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

/// A config file a sandboxed command could have planted ($HOME/.config or
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

/// The mistakes a person makes get a message that says what to do: a misspelled flag is a flag (with clap's
/// suggestion), not the program; `--approval-policy` on `run` is refused and not offered; a config value of the
/// wrong shape says what is allowed there, with the line, never a Rust type; an error names the program once; and
/// a stdio MCP server that cannot start answers its client's `initialize` with the error instead of closing.
#[test]
fn a_persons_mistakes_get_messages_that_say_what_to_do() {
    use std::io::{BufRead, BufReader, Write};
    let ws = Workspace::new();
    let run = |args: &[&str]| {
        let out = uexec_command(&ws, args).stdin(Stdio::null()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["run", "--sandbx", "read-only", "--", "true"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unexpected argument '--sandbx'") && err.contains("--sandbox"), "{err}");
    // Its twin: the same words after `--` are the command's.
    let (code, err) = run(&["run", "--", "/bin/sh", "-c", "exit 3", "--sandbx"]);
    assert_eq!(code, Some(3), "{err}");

    let (code, err) = run(&["run", "--approval-policy", "never", "--", "true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("--approval-policy never does nothing for `uexec run`"), "{err}");
    let help = uexec_command(&ws, &["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(!help.contains("--approval-policy <POLICY>"), "not offered: {help}");

    let (code, err) = run(&["run", "--", "/definitely/not/a/program"]);
    assert_eq!(code, Some(127));
    assert_eq!(err.matches("/definitely/not/a/program").count(), 1, "{err}");

    let config = ws.path().join(".no-config/uexec/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "network = \"yes\"\n").unwrap();
    let named = config.to_str().unwrap();
    let (code, err) = run(&["run", "--config", named, "--", "true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("config.toml:1:11") && err.contains("expected `network = true`"), "{err}");
    assert!(!err.contains("untagged") && !err.contains("NetworkConfig") && !err.contains('\u{1b}'), "{err}");

    let mut server = uexec_command(&ws, &["mcp", "--config", named])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}\n").unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["id"], 1);
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("uexec cannot start") && message.contains("expected `network = true`"),
        "{line}"
    );
    drop(stdin);
    assert_eq!(server.wait().unwrap().code(), Some(1));
    // Its twin: with a valid file the server initializes.
    std::fs::write(&config, "network = false\n").unwrap();
    let mut server = McpServer::start(&ws, &["--config", named]);
    server.initialize(false);
}
