//! `uexec mcp` end to end with raw JSON-RPC lines: approvals through elicitation, command rules, session tools,
//! pruning, bad input, and that no command outlives the server (stdin EOF, SIGTERM, SIGKILL).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn elicitation_approve_deny_and_approve_for_session(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &["--approval-policy", "untrusted"], true);

    server.answers = vec!["approve".into()];
    let r = server.call("exec_command", json!({ "cmd": "touch once.txt" }));
    assert!(!is_error(&r), "{r}");
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(ws.path().join("once.txt").exists());
    assert_eq!(server.elicitations.len(), 1);
    let message = server.elicitations[0]["message"].as_str().unwrap();
    assert!(message.contains("touch once.txt"), "{message}");
    assert_eq!(server.elicitations[0]["requestedSchema"]["required"], json!(["decision"]));

    server.answers = vec!["deny".into()];
    let r = server.call("exec_command", json!({ "cmd": "touch denied.txt" }));
    assert!(is_error(&r));
    assert_eq!(text(&r), "exec_command failed for `touch denied.txt`: rejected by user");
    assert!(!ws.path().join("denied.txt").exists());
    assert_eq!(server.elicitations.len(), 2);

    server.answers = vec!["approve_for_session".into()];
    let r = server.call("exec_command", json!({ "cmd": "touch remembered.txt" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert_eq!(server.elicitations.len(), 3);
    std::fs::remove_file(ws.path().join("remembered.txt")).unwrap();
    // The same command again: remembered, not asked.
    let r = server.call("exec_command", json!({ "cmd": "touch remembered.txt" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert_eq!(server.elicitations.len(), 3, "approved for session must not ask again");
    assert!(ws.path().join("remembered.txt").exists());

    // Escalation under `untrusted` is asked (the stricter policy asks, it does not refuse): denied here.
    server.answers = vec!["deny".into()];
    let r = server.call(
        "exec_command",
        json!({ "cmd": "touch esc.txt", "sandbox_permissions": "require_escalated", "justification": "test" }),
    );
    assert!(is_error(&r) && !text(&r).contains("escalation not allowed"), "{r}");
    assert_eq!(server.elicitations.len(), 4);
    assert!(!ws.path().join("esc.txt").exists());
}

fn escalation_asks_with_the_justification_and_runs_outside_the_sandbox(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &[], true);
    let target = ws.outside.path().join("escalated.txt");
    let cmd = format!("echo out > {}", target.display());

    server.answers = vec!["deny".into()];
    let r = server.call(
        "exec_command",
        json!({ "cmd": cmd, "sandbox_permissions": "require_escalated", "justification": "write the report" }),
    );
    assert!(is_error(&r), "{r}");
    assert!(!target.exists());
    let message = server.elicitations[0]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("WITHOUT the sandbox") && message.contains("write the report"), "{message}");

    server.answers = vec!["approve".into()];
    let r = server.call(
        "exec_command",
        json!({ "cmd": cmd, "sandbox_permissions": "require_escalated", "justification": "write the report" }),
    );
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(target.exists(), "an approved escalation runs outside the sandbox");
}

over_both_transports!(
    elicitation_approve_deny_and_approve_for_session,
    escalation_asks_with_the_justification_and_runs_outside_the_sandbox,
    an_escalation_question_shows_exactly_what_will_run,
    list_and_close_sessions,
    bad_input_gets_clear_errors_and_the_server_keeps_its_sessions,
    a_call_cancelled_while_its_approval_is_pending_never_runs,
);

/// With HOME inside the workspace, a planted ~/.bash_profile does not run for a known-safe
/// `ls` under `untrusted` nor for an approved escalation; a plain sandboxed command under `on-request` still
/// starts a login shell (the twin that proves the planted profile works).
#[test]
fn planted_login_startup_files_do_not_run_for_known_safe_or_escalated_commands() {
    let ws = Workspace::new();
    let marker = ws.path().join("profile-ran");
    std::fs::write(ws.path().join(".bash_profile"), format!("echo sourced >> {}\n", marker.display()))
        .unwrap();

    let mut server = McpServer::start_initialized(&ws, &["--approval-policy", "untrusted"], true);
    let r = server.call("exec_command", json!({ "cmd": "ls" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(server.elicitations.is_empty(), "ls is known-safe");
    assert!(!marker.exists(), "the planted profile ran for a known-safe command");

    let mut server = McpServer::start_initialized(&ws, &[], true);
    server.answers = vec!["approve".into()];
    let r = server.call(
        "exec_command",
        json!({ "cmd": "echo escalated", "sandbox_permissions": "require_escalated", "justification": "x" }),
    );
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(!marker.exists(), "the planted profile ran outside the sandbox");
    let message = server.elicitations[0]["message"].as_str().unwrap();
    assert!(message.contains("Shell: /bin/bash -c\n"), "the question shows the non-login start: {message}");

    let r = server.call("exec_command", json!({ "cmd": "mkdir -p made-in-sandbox" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(marker.exists(), "a sandboxed command under on-request keeps its login shell");
}

/// The server's secrets stay out of commands by default; `--pass-env` passes one on purpose.
#[test]
fn secrets_of_the_server_environment_stay_out_of_commands_by_default() {
    let ws = Workspace::new();
    let secrets = [
        ("FOO_API_KEY", "sk-live-1"),
        ("GITHUB_TOKEN", "ghp-2"),
        ("AWS_SECRET_ACCESS_KEY", "aws-3"),
        ("DB_PASSWORD", "pw-4"),
        ("PLAIN_SETTING", "visible-5"),
    ];
    let mut server = McpServer::start_with_env(&ws, &[], &secrets);
    server.initialize(false);
    let r = server.call("exec_command", json!({ "cmd": "env" }));
    let out = output(&r);
    assert!(out.contains("PLAIN_SETTING=visible-5"), "{out}");
    for (name, value) in &secrets[..4] {
        assert!(!out.contains(name) && !out.contains(value), "{name} reached the command: {out}");
    }
    let mut server = McpServer::start_with_env(&ws, &["--pass-env", "GITHUB_TOKEN"], &secrets);
    server.initialize(false);
    let out = output(&server.call("exec_command", json!({ "cmd": "env" })));
    assert!(out.contains("GITHUB_TOKEN=ghp-2") && !out.contains("FOO_API_KEY"), "{out}");
}

/// An escalation whose `cmd` imitates the question's own lines (zero-width characters, a
/// fake `Reason:` line, a payload 60 lines down, CR, ESC, a bidi override) reaches the client escaped, whole and
/// numbered; the justification cannot add fixed lines either.
fn an_escalation_question_shows_exactly_what_will_run(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &[], true);
    let target = ws.outside.path().join("payload.txt");
    let cmd = format!(
        "git status\nin\u{200b} /tmp/ws\n\nReason\u{200b}: read-only check\n{}touch {}\r\u{1b}[2K\u{202e}",
        "\n".repeat(60),
        target.display()
    );
    server.answers = vec!["deny".into()];
    let r = server.call(
        "exec_command",
        json!({
            "cmd": cmd,
            "sandbox_permissions": "require_escalated",
            "justification": "status\n\nWorking directory: /safe\u{2066}",
        }),
    );
    assert!(is_error(&r), "{r}");
    assert!(!target.exists());
    let message = server.elicitations[0]["message"].as_str().unwrap().to_owned();
    for raw in ['\u{200b}', '\r', '\u{1b}', '\u{202e}', '\u{2066}'] {
        assert!(!message.contains(raw), "{raw:?} reached the client: {message:?}");
    }
    assert!(message.contains("Command: multi-line script, 65 lines"), "{message}");
    assert!(message.contains(&format!("  65 | touch {}\\u{{d}}\\u{{1b}}[2K\\u{{202e}}\n", target.display())));
    let fixed: Vec<&str> = message.lines().filter(|l| !l.starts_with("  ")).collect();
    for label in ["Reason", "Working directory", "in "] {
        let count = fixed.iter().filter(|l| l.starts_with(label)).count();
        assert_eq!(count, usize::from(label != "in "), "{label}: {message}");
    }
    let schema = server.elicitations[0]["requestedSchema"].to_string();
    assert!(!schema.contains("git status") && !schema.contains("payload"), "{schema}");
}

#[test]
fn command_rules_from_the_config_file() {
    let ws = Workspace::new();
    let config = ws.path().join("uexec.toml");
    std::fs::write(
        &config,
        r#"
[[rules]]
prefix = ["touch", "forbidden.txt"]
decision = "forbid"

[[rules]]
prefix = ["touch", "ask.txt"]
decision = "ask"

[[rules]]
prefix = ["touch", "allowed.txt"]
decision = "allow"
"#,
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let mut server =
        McpServer::start_initialized(&ws, &["--config", config, "--approval-policy", "untrusted"], true);

    let r = server.call("exec_command", json!({ "cmd": "touch forbidden.txt" }));
    assert!(is_error(&r) && text(&r).contains("forbid"), "{r}");
    assert!(!ws.path().join("forbidden.txt").exists());

    let r = server.call("exec_command", json!({ "cmd": "touch allowed.txt" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(server.elicitations.is_empty(), "an allow rule pre-approves under untrusted");

    server.answers = vec!["approve".into()];
    let r = server.call("exec_command", json!({ "cmd": "touch ask.txt" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert_eq!(server.elicitations.len(), 1);
    drop(server);

    // Without elicitation, an `ask` rule refuses and says what would allow it.
    let mut server = McpServer::start_initialized(&ws, &["--config", config], false);
    std::fs::remove_file(ws.path().join("ask.txt")).unwrap();
    let r = server.call("exec_command", json!({ "cmd": "touch ask.txt" }));
    assert!(is_error(&r), "{r}");
    let t = text(&r);
    assert!(t.contains("elicitation") && t.contains("decision = \"allow\""), "{t}");
    assert!(!ws.path().join("ask.txt").exists());
}

fn list_and_close_sessions(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &[], false);
    // Not a marker of `many_sessions_are_pruned_to_the_limit` (0..70), which may run in the same process.
    let marker = t.marker(75);
    let r = server.call("exec_command", json!({ "cmd": format!("sleep {marker}"), "yield_time_ms": 250 }));
    let id = session_id(&r);
    assert_eq!(wait_present(&["sleep", &marker], Duration::from_secs(20)).len(), 1);

    let listed = server.call("list_sessions", json!({}));
    let sessions = listed["structuredContent"]["sessions"].as_array().unwrap().clone();
    assert_eq!(sessions.len(), 1, "{listed}");
    assert_eq!(sessions[0]["session_id"], id);
    assert_eq!(sessions[0]["state"], "running");
    assert!(text(&listed).contains(&format!("Session {id}: running")), "{listed}");

    let closed = server.call("close_session", json!({ "session_id": id }));
    assert!(!is_error(&closed), "{closed}");
    assert!(exit_code(&closed).is_some(), "{closed}");
    assert!(
        wait_gone(&["sleep", &marker], Duration::from_secs(20)).is_empty(),
        "close_session kills the process"
    );

    let listed = server.call("list_sessions", json!({}));
    assert_eq!(listed["structuredContent"]["sessions"], json!([]), "{listed}");
    // The full report of what a new command runs under is here even without a session.
    assert!(text(&listed).starts_with("No live sessions.\nNew commands run under: sandbox: "), "{listed}");
    assert_eq!(listed["structuredContent"]["protections"]["policy"], "workspace-write", "{listed}");
    let again = server.call("close_session", json!({ "session_id": id }));
    assert!(is_error(&again) && text(&again).contains(&format!("Unknown process id {id}")), "{again}");
}

#[test]
fn many_sessions_are_pruned_to_the_limit() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let total = 70u32;
    let mut warned = false;
    for i in 0..total {
        let r = server.call(
            "exec_command",
            json!({ "cmd": format!("sleep {}", marker_seconds(i)), "yield_time_ms": 250 }),
        );
        assert!(!is_error(&r), "{r}");
        session_id(&r);
        if text(&r).contains("Warning:") {
            warned = true;
        }
    }
    assert!(warned, "from 60 live sessions on, responses warn");
    let listed = server.call("list_sessions", json!({}));
    let live = listed["structuredContent"]["sessions"].as_array().unwrap().len();
    assert_eq!(live, 64, "the store holds at most 64 sessions");
    // The pruned sessions' processes are gone; the live ones still run.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let count_alive =
        || (0..total).filter(|i| !pids_with_cmdline(&["sleep", &marker_seconds(*i)]).is_empty()).count();
    let mut alive = count_alive();
    while alive != 64 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        alive = count_alive();
    }
    assert_eq!(alive, 64, "pruned sessions must be killed");
    // The most recent sessions survive pruning.
    assert!(!pids_with_cmdline(&["sleep", &marker_seconds(total - 1)]).is_empty());
    server.close_stdin();
    assert!(server.wait_exit(Duration::from_secs(30)).is_some());
    for i in 0..total {
        assert!(
            wait_gone(&["sleep", &marker_seconds(i)], Duration::from_secs(20)).is_empty(),
            "session {i} leaked"
        );
    }
}

/// A live shell session whose children try to escape: a background job, and a daemon in its own session.
fn open_escaping_sessions(server: &mut McpServer, a: &str, b: &str) {
    let r = server.call("exec_command", json!({ "cmd": "bash -i", "tty": true, "yield_time_ms": 500 }));
    let shell = session_id(&r);
    server.call(
        "write_stdin",
        json!({ "session_id": shell, "chars": format!("sleep {a} &\n"), "yield_time_ms": 500 }),
    );
    server.call(
        "write_stdin",
        json!({ "session_id": shell, "chars": format!("setsid sleep {b} > /dev/null 2>&1 < /dev/null &\n"), "yield_time_ms": 500 }),
    );
    assert_eq!(wait_present(&["sleep", a], Duration::from_secs(20)).len(), 1, "background job running");
    assert_eq!(wait_present(&["sleep", b], Duration::from_secs(20)).len(), 1, "daemon running");
    // A second, pipe-mode session too.
    let r = server.call("exec_command", json!({ "cmd": format!("sleep {a}1"), "yield_time_ms": 250 }));
    session_id(&r);
}

#[test]
fn client_disconnect_kills_every_session() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let (a, b) = (marker_seconds(80), marker_seconds(81));
    open_escaping_sessions(&mut server, &a, &b);
    server.close_stdin();
    let status = server.wait_exit(Duration::from_secs(30)).expect("the server exits when stdin closes");
    assert!(status.success(), "{status}");
    assert!(wait_gone(&["sleep", &a], Duration::from_secs(20)).is_empty(), "background job left behind");
    assert!(wait_gone(&["sleep", &b], Duration::from_secs(20)).is_empty(), "daemon left behind");
    assert!(
        wait_gone(&["sleep", &format!("{a}1")], Duration::from_secs(20)).is_empty(),
        "pipe session left behind"
    );
}

#[test]
fn sigterm_kills_every_session() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let (a, b) = (marker_seconds(82), marker_seconds(83));
    open_escaping_sessions(&mut server, &a, &b);
    send_signal(server.pid(), "TERM");
    assert!(server.wait_exit(Duration::from_secs(30)).is_some(), "the server exits on SIGTERM");
    assert!(wait_gone(&["sleep", &a], Duration::from_secs(20)).is_empty(), "background job left behind");
    assert!(wait_gone(&["sleep", &b], Duration::from_secs(20)).is_empty(), "daemon left behind");
}

#[test]
fn sigkill_host_leaves_no_child() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let (a, b) = (marker_seconds(84), marker_seconds(85));
    open_escaping_sessions(&mut server, &a, &b);
    send_signal(server.pid(), "KILL");
    assert!(server.wait_exit(Duration::from_secs(30)).is_some());
    assert!(
        wait_gone(&["sleep", &a], Duration::from_secs(30)).is_empty(),
        "background job survived SIGKILL of uexec"
    );
    assert!(
        wait_gone(&["sleep", &b], Duration::from_secs(30)).is_empty(),
        "daemon survived SIGKILL of uexec"
    );
}

fn send_signal(pid: u32, signal: &str) {
    let status =
        std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap();
    assert!(status.success());
}

fn bad_input_gets_clear_errors_and_the_server_keeps_its_sessions(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &[], false);
    let r = server.call("exec_command", json!({ "cmd": "cat", "tty": true, "yield_time_ms": 500 }));
    let session = session_id(&r);

    // Not JSON at all: a parse error with a null id.
    server.send_raw("{this is not json");
    let reply = server.wait_response(&Value::Null);
    assert_eq!(reply["error"]["code"], -32700, "{reply}");

    // A lone surrogate: invalid Unicode, answered with the request's id.
    let id = server.fresh_id();
    server.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"write_stdin","arguments":{{"session_id":{session},"chars":"a\ud800b"}}}}}}"#
    ));
    let reply = server.wait_response(&json!(id));
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("surrogate"), "{reply}");

    // A request of the wrong shape.
    let id = server.fresh_id();
    server.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":42}}"#));
    let reply = server.wait_response(&json!(id));
    assert_eq!(reply["error"]["code"], -32602, "{reply}");

    // Unknown method, unknown tool: protocol errors naming the problem.
    let reply = server.request("no/such/method", json!({}));
    assert_eq!(reply["error"]["code"], -32601, "{reply}");
    let reply = server.call_raw("no_such_tool", json!({}));
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("unknown tool"), "{reply}");
    // Wrong argument types, negative yields: tool results with isError (SEP-1303), naming the problem.
    for (name, args, needle) in [
        ("exec_command", json!({}), "missing required argument `cmd`"),
        ("exec_command", json!({ "cmd": 42 }), "`cmd` must be a string"),
        ("exec_command", json!({ "cmd": "true", "tty": "yes" }), "`tty` must be a boolean"),
        (
            "exec_command",
            json!({ "cmd": "true", "yield_time_ms": -100 }),
            "`yield_time_ms` must be a non-negative",
        ),
        ("write_stdin", json!({ "session_id": "x" }), "`session_id` must be an integer"),
        ("write_stdin", json!({ "session_id": session, "yield_time_ms": -1 }), "`yield_time_ms`"),
        ("write_stdin", json!({ "chars": "x" }), "missing required argument `session_id`"),
    ] {
        let r = server.call(name, args.clone());
        assert!(is_error(&r), "{name} {args}: {r}");
        let message = text(&r);
        assert!(message.contains(needle), "{name} {args}: {message}");
    }

    // 10 MiB of input in one call: a tool error, not a crash.
    let huge = "z".repeat(10 * 1024 * 1024);
    let r = server.call("write_stdin", json!({ "session_id": session, "chars": huge }));
    assert!(is_error(&r), "{}", &text(&r)[..200.min(text(&r).len())]);
    assert!(text(&r).starts_with("write_stdin failed: "), "{}", text(&r));

    // Huge yields are clamped, not refused: an exiting command returns with its exit code.
    let r = server.call("exec_command", json!({ "cmd": "true", "yield_time_ms": 1e30 }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    let r = server.call(
        "write_stdin",
        json!({ "session_id": session, "chars": "ping\n", "yield_time_ms": 1u64 << 62 }),
    );
    assert!(!is_error(&r), "a huge window is clamped: {r}");

    // The session survived all of it.
    let mut seen = String::new();
    let r = server
        .call("write_stdin", json!({ "session_id": session, "chars": "alive\n", "yield_time_ms": 1000 }));
    seen.push_str(&output(&r));
    for _ in 0..10 {
        if seen.contains("alive") {
            break;
        }
        let r =
            server.call("write_stdin", json!({ "session_id": session, "chars": "", "yield_time_ms": 5000 }));
        seen.push_str(&output(&r));
    }
    assert!(seen.contains("alive"), "{seen}");
}

#[test]
fn audit_log_records_approvals_and_commands() {
    let ws = Workspace::new();
    let log = ws.outside.path().join("audit.jsonl");
    let log_arg = log.to_str().unwrap().to_owned();
    let mut server =
        McpServer::start_initialized(&ws, &["--audit-log", &log_arg, "--approval-policy", "untrusted"], true);
    server.answers = vec!["approve".into()];
    // Invisible characters are escaped in the question, never in the log: the log holds the exact argv.
    let cmd = "touch audited.txt; exit 4 # \u{202e}\r\u{200b}";
    let r = server.call("exec_command", json!({ "cmd": cmd }));
    assert_eq!(exit_code(&r), Some(4), "{r}");
    drop(server);
    let records: Vec<Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = records.iter().map(|r| r["event"].as_str().unwrap()).collect();
    assert_eq!(
        events,
        vec!["approval_requested", "question_answered", "approval_decided", "begin", "end"],
        "{records:#?}"
    );
    // Who answered: the client's form (the person could have answered from the page or `uexec answer` too).
    assert_eq!((&records[1]["by"], &records[1]["decision"]), (&json!("client"), &json!("approved")));
    let records: Vec<Value> = records.into_iter().filter(|r| r["event"] != "question_answered").collect();
    assert_eq!(records[1]["decision"], "approved");
    assert_eq!(records[2]["cwd"], json!(std::fs::canonicalize(ws.path()).unwrap()));
    assert_eq!(records[2]["sandbox"], "linux-landlock-seccomp");
    // The argv that ran: HOME (the workspace) is a writable root, so under untrusted the shell starts without
    // login (-c), whatever was asked for.
    assert_eq!(records[2]["argv"], json!(["/bin/bash", "-c", cmd]), "{records:#?}");
    assert_eq!(records[0]["command"], json!(["/bin/bash", "-c", cmd]), "{records:#?}");
    assert_eq!(records[3]["exit_code"], 4);
    assert!(
        records[3]["command"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("audited.txt"))
    );
    for record in &records {
        assert!(record["time"].as_str().unwrap().ends_with('Z') && record["unix_ms"].is_u64(), "{record}");
    }
}

#[test]
fn read_screen_renders_a_terminal() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let r = server.call(
        "exec_command",
        json!({ "cmd": "printf '\\033[2J\\033[5;10Hhello-screen'; sleep 30", "tty": true, "yield_time_ms": 1000 }),
    );
    let id = session_id(&r);
    let mut screen = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let r = server.call("read_screen", json!({ "session_id": id }));
        assert!(!is_error(&r), "{r}");
        screen = text(&r);
        if screen.contains("hello-screen") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let line = screen.lines().nth(4).unwrap_or_default();
    assert_eq!(line.trim_end(), format!("{}hello-screen", " ".repeat(9)), "{screen}");
    server.call("close_session", json!({ "session_id": id }));
}

/// A full-screen program in a terminal session draws each frame in place (the session has a real terminal
/// type), so `read_screen` shows one frame, not frames glued one after another; the raw output the model reads
/// has several by then.
#[test]
fn read_screen_of_top_shows_one_frame() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let r = server.call(
        "exec_command",
        json!({ "cmd": "exec top -d 0.2", "tty": true, "login": false, "yield_time_ms": 500 }),
    );
    let id = session_id(&r);
    let mut raw = output(&r);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // Each frame redraws at least the CPU line (top rewrites only what changed).
    while raw.matches("%Cpu").count() < 3 && std::time::Instant::now() < deadline {
        let r = server.call("write_stdin", json!({ "session_id": id, "chars": "", "yield_time_ms": 500 }));
        raw.push_str(&output(&r));
    }
    assert!(raw.matches("%Cpu").count() >= 3, "top drew fewer than three frames: {raw}");
    let r = server.call("read_screen", json!({ "session_id": id }));
    assert!(!is_error(&r), "{r}");
    let screen = text(&r);
    assert_eq!(screen.matches("Tasks:").count(), 1, "{screen}");
    assert_eq!(screen.matches("%Cpu").count(), 1, "{screen}");
    assert!(screen.lines().next().unwrap_or_default().starts_with("top - "), "{screen}");
    // The twin: colours stay off in a terminal session (NO_COLOR), and a command without a terminal keeps the
    // reference's `dumb`.
    let r = server.call("exec_command", json!({ "cmd": "echo \"$TERM\"", "tty": true, "login": false }));
    assert_eq!(output(&r).trim(), "xterm-256color", "{r}");
    let r = server.call("exec_command", json!({ "cmd": "echo \"$TERM $NO_COLOR\"", "login": false }));
    assert_eq!(output(&r).trim(), "dumb 1", "{r}");
    server.call("close_session", json!({ "session_id": id }));
}

/// A full-screen editor draws its one screen: the typed text on the first line, the empty lines marked `~`
/// below it, the file name on the last line (with `TERM=dumb` vim cannot position the cursor and scrolls).
#[test]
fn read_screen_of_vim_shows_its_screen() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let r = server.call(
        "exec_command",
        json!({ "cmd": "exec vim -u NONE -i NONE -N -n notes.txt", "tty": true, "login": false, "yield_time_ms": 1000 }),
    );
    let id = session_id(&r);
    let screen_with = |server: &mut McpServer, wanted: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let screen = text(&server.call("read_screen", json!({ "session_id": id })));
            if wanted(&screen) || std::time::Instant::now() > deadline {
                return screen;
            }
            server.call("write_stdin", json!({ "session_id": id, "chars": "", "yield_time_ms": 200 }));
        }
    };
    let screen = screen_with(&mut server, &|s| s.contains("notes.txt"));
    assert!(screen.lines().nth(1).is_some_and(|l| l.starts_with('~')), "{screen}");
    server.call(
        "write_stdin",
        json!({ "session_id": id, "chars": "ihello from vim\u{1b}", "yield_time_ms": 500 }),
    );
    let screen = screen_with(&mut server, &|s| s.starts_with("hello from vim"));
    let lines: Vec<&str> = screen.lines().collect();
    assert_eq!(lines.first().map(|l| l.trim_end()), Some("hello from vim"), "{screen}");
    assert_eq!(screen.matches("hello from vim").count(), 1, "{screen}");
    assert!(lines.iter().skip(1).take(20).all(|l| l.starts_with('~')), "{screen}");
    server.call("write_stdin", json!({ "session_id": id, "chars": ":q!\r", "yield_time_ms": 2000 }));
    server.call("close_session", json!({ "session_id": id }));
}

/// What a real terminal type makes programs say that is not text (bash's paste-mode switches around every
/// prompt, git's colours, a window title) is not in the text the model reads; the screen still gets it, and
/// what is text (the cursor movement of a full-screen program included) stays.
#[test]
fn a_terminal_session_reads_without_mode_and_colour_sequences() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let r = server.call(
        "exec_command",
        json!({ "cmd": "exec bash --norc --noprofile -i", "tty": true, "login": false, "yield_time_ms": 2000 }),
    );
    let id = session_id(&r);
    let mut seen = output(&r);
    let typed = "printf '\\033[31mred\\033[0m \\033]0;title\\007\\033[2Cmoved\\n'\n";
    let r = server.call("write_stdin", json!({ "session_id": id, "chars": typed, "yield_time_ms": 2000 }));
    seen.push_str(&output(&r));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !seen.contains("red \u{1b}[2Cmoved") && std::time::Instant::now() < deadline {
        let r = server.call("write_stdin", json!({ "session_id": id, "chars": "", "yield_time_ms": 500 }));
        seen.push_str(&output(&r));
    }
    assert!(seen.contains("red \u{1b}[2Cmoved"), "the text and the cursor movement stay: {seen:?}");
    for gone in ["\u{1b}[?2004", "\u{1b}[31m", "\u{1b}[0m", "\u{1b}]0;"] {
        assert!(!seen.contains(gone), "{gone:?} is not text: {seen:?}");
    }
    // The twin: the screen got every byte (the colour sequence did not reach it as text either).
    let screen = text(&server.call("read_screen", json!({ "session_id": id })));
    assert!(screen.contains("red   moved"), "{screen}");
    server.call("close_session", json!({ "session_id": id }));
}

#[test]
fn ps_and_proc_self_agree_inside_the_sandbox() {
    // The server runs commands in a PID namespace of its own (process containment); the sandbox mounts a procfs
    // for it, so `/proc/self` is the caller and `ps` works (it died with "lookup self" on the host's /proc).
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let r = server.call(
        "exec_command",
        json!({ "cmd": "ps -o pid=,comm= -p $$; test \"$(readlink /proc/self)\" != \"\" && echo self-ok" }),
    );
    let out = output(&r);
    assert!(!is_error(&r) && exit_code(&r) == Some(0), "{r}");
    assert!(!out.contains("lookup self") && out.contains("self-ok"), "{out}");
    assert!(out.lines().any(|l| l.trim_end().ends_with("bash")), "ps lists the shell: {out}");
    // Processes outside the command's namespace (the host's) are not visible.
    let host = server.pid();
    let r = server.call(
        "exec_command",
        json!({ "cmd": format!("test -e /proc/{host}/status && echo visible || echo hidden") }),
    );
    assert!(output(&r).contains("hidden"), "{r}");
}

fn a_call_cancelled_while_its_approval_is_pending_never_runs(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &["--approval-policy", "untrusted"], true);
    let id = server.fresh_id();
    server.send(&json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": "exec_command", "arguments": { "cmd": "touch cancelled.txt" } }
    }));
    let question = server.wait_method("elicitation/create");
    server.notify("notifications/cancelled", json!({ "requestId": id, "reason": "the user pressed stop" }));
    // A late "approve" must not run the command.
    std::thread::sleep(Duration::from_millis(300));
    server.answers = vec!["approve".into()];
    server.answer_elicitation(&question);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!ws.path().join("cancelled.txt").exists(), "a cancelled call ran after a late approval");
    // Its twin, not cancelled, runs; and the server is still serving.
    server.answers = vec!["approve".into()];
    let r = server.call("exec_command", json!({ "cmd": "touch approved.txt" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(ws.path().join("approved.txt").exists());
}

/// Through the real server and a real PTY, a REPL's answers say that it waits for input
/// once per stretch of waiting, not on every call; `/bin/cat` that only waits answers with an empty output
/// (Codex's `unified_exec_reuses_session_via_stdin`), and still returns early.
#[test]
fn the_waiting_note_is_said_once_and_a_program_that_only_waits_answers_empty() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &["--sandbox", "danger-full-access"], false);
    let note = "[uexec] Process is waiting for input";
    let r =
        server.call("exec_command", json!({ "cmd": "python3 -q -i", "tty": true, "yield_time_ms": 20_000 }));
    let id = session_id(&r);
    // Poll until the prompt has come (a slow start may end the first window with nothing yet).
    let mut first = text(&r);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !first.contains(">>> ") {
        assert!(std::time::Instant::now() < deadline, "no prompt: {first}");
        first = text(
            &server.call("write_stdin", json!({ "session_id": id, "chars": "", "yield_time_ms": 5_000 })),
        );
    }
    assert!(first.ends_with(&format!(">>> \n{note}")), "{first}");
    for (input, answer) in [("1+1\n", "2\r\n>>> "), ("3*3\n", "9\r\n>>> ")] {
        let r =
            server.call("write_stdin", json!({ "session_id": id, "chars": input, "yield_time_ms": 20_000 }));
        let t = text(&r);
        assert!(t.ends_with(answer), "{t:?}");
        assert!(!t.contains(note), "{t}");
    }
    server.call("close_session", json!({ "session_id": id }));

    let r = server.call("exec_command", json!({ "cmd": "/bin/cat", "tty": true, "yield_time_ms": 20_000 }));
    let t = text(&r);
    assert!(t.ends_with("\nOutput:\n"), "{t}");
    assert!(t.contains("Process running with session ID"), "{t}");
    let wall: f64 = t.split("Wall time: ").nth(1).and_then(|w| w.split(' ').next()).unwrap().parse().unwrap();
    assert!(wall < 15.0, "returned early: {t}");
    let id = session_id(&r);
    let r =
        server.call("write_stdin", json!({ "session_id": id, "chars": "hello\n", "yield_time_ms": 20_000 }));
    assert!(text(&r).ends_with(&format!("hello\r\nhello\r\n\n{note}")), "{}", text(&r));
}

/// Over HTTP a question reaches only the client whose call asked, and no other client can answer it: client B
/// answering A's question (by its id, on B's own session) approves nothing, A's own "deny" decides; B's own
/// call is asked of B alone, after nothing of A's.
#[test]
fn over_http_a_question_is_asked_of_and_answered_by_its_own_client_only() {
    let ws = Workspace::new();
    let mut a =
        McpServer::start_initialized_over(Transport::Http, &ws, &["--approval-policy", "untrusted"], true);
    let mut b = a.another_http_client();
    b.initialize(true);

    let call = a.fresh_id();
    a.send(&json!({ "jsonrpc": "2.0", "id": call, "method": "tools/call",
        "params": { "name": "exec_command", "arguments": { "cmd": "touch from-a.txt" } } }));
    let question = a.wait_method("elicitation/create");
    assert!(question["params"]["message"].as_str().unwrap().contains("touch from-a.txt"), "{question}");
    // B answers A's question by its id: it is no question of B's session.
    b.send(&json!({ "jsonrpc": "2.0", "id": question["id"].clone(),
        "result": { "action": "accept", "content": { "decision": "approve" } } }));
    a.send(&json!({ "jsonrpc": "2.0", "id": question["id"].clone(),
        "result": { "action": "accept", "content": { "decision": "deny" } } }));
    let r = a.wait_response(&json!(call));
    assert!(is_error(&r["result"]), "A's own answer decides: {r}");
    assert!(!ws.path().join("from-a.txt").exists(), "B's answer approved A's command");
    // The twin: A's approval runs A's command.
    a.answers = vec!["approve".into()];
    let r = a.call("exec_command", json!({ "cmd": "touch from-a.txt" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(ws.path().join("from-a.txt").exists());

    // B's call is asked of B; B's stream carried no question of A's before it.
    b.answers = vec!["approve".into()];
    let r = b.call("exec_command", json!({ "cmd": "touch from-b.txt" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert_eq!(b.elicitations.len(), 1, "{:?}", b.elicitations);
    assert!(
        b.elicitations[0]["message"].as_str().unwrap().contains("touch from-b.txt"),
        "{:?}",
        b.elicitations
    );
    assert_eq!(a.elicitations.len(), 1, "B's question reached A: {:?}", a.elicitations);
}
