//! `uexec mcp` against the MCP protocol itself, with raw JSON-RPC messages: cancellation and client timeouts,
//! progress during long polls, argument errors as tool results, elicitation per negotiated protocol version,
//! and JSON-RPC conformance (ids, batches, the initialize handshake). Every test runs over both transports
//! (`stdio` lines and Streamable HTTP, module `over_http`): one behaviour on every transport.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// `--config` with a file (outside the workspace) that lets a call's window be longer than the harness waits for
/// an answer (`common::ANSWER_TIMEOUT`): a call stuck behind such a window fails the test on that deadline,
/// and a call that answers shows the window no longer holds it (no timing is asserted).
fn windows_past_the_answer_deadline(ws: &Workspace) -> [String; 2] {
    let config = ws.outside.path().join("long-windows.toml");
    std::fs::write(&config, format!("[limits]\nmax_yield_time_ms = {LONGER_THAN_AN_ANSWER_MS}\n")).unwrap();
    ["--config".to_owned(), config.to_str().unwrap().to_owned()]
}

/// A window longer than the harness waits for an answer.
const LONGER_THAN_AN_ANSWER_MS: u64 = 300_000;
const _: () = assert!(LONGER_THAN_AN_ANSWER_MS > ANSWER_TIMEOUT.as_secs() * 1000);

/// Start `uexec mcp <args>` and initialize it with `version`, declaring elicitation when asked to.
fn start_with_version(
    t: Transport,
    ws: &Workspace,
    args: &[&str],
    version: &str,
    elicitation: bool,
) -> McpServer {
    let mut server = McpServer::start_over(t, ws, args);
    let capabilities = if elicitation { json!({ "elicitation": {} }) } else { json!({}) };
    let reply = server.request(
        "initialize",
        json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "clientInfo": { "name": "uexec-protocol-tests", "version": "0" }
        }),
    );
    assert_eq!(reply["result"]["protocolVersion"], version, "{reply}");
    server.notify("notifications/initialized", json!({}));
    server
}

over_both_transports!(
    ids_rmcp_cannot_hold_are_echoed_exactly_and_a_null_id_is_refused,
    a_cancelled_or_timed_out_poll_releases_its_session_at_once,
    a_cancelled_exec_command_keeps_its_process_as_a_session,
    long_polls_report_progress_when_the_client_asks_for_it,
    argument_errors_are_tool_results_and_every_codex_argument_is_accepted,
    elicitation_follows_the_negotiated_protocol_version,
    json_rpc_conformance_ids_handshake_and_batches,
    batches_are_refused_after_2025_03_26,
    totals_past_the_buffer_errors_and_the_argument_limit_describe_the_whole_command,
    a_codex_prefix_rule_is_offered_and_an_approved_prefix_is_not_asked_again,
    an_id_in_use_is_refused_and_a_message_cut_after_its_id_is_answered_with_it,
);

fn an_id_in_use_is_refused_and_a_message_cut_after_its_id_is_answered_with_it(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &["--sandbox", "danger-full-access"], false);
    let seconds = t.marker(3);
    let call = server.fresh_id();
    server.send(&tool_call(
        call,
        "exec_command",
        json!({ "cmd": format!("exec sleep {seconds}"), "yield_time_ms": 30_000 }),
    ));
    let pids = wait_present(&["sleep", &seconds], ANSWER_TIMEOUT);
    assert_eq!(pids.len(), 1, "the command never ran");
    // The same id while the call is in progress: refused, with that id.
    server.send(&json!({ "jsonrpc": "2.0", "id": call, "method": "ping" }));
    let refused = server.wait_response(&json!(call));
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("in progress"), "{refused}");
    // The call itself still gets its answer.
    assert!(Command::new("kill").args(["-TERM", &pids[0].to_string()]).status().unwrap().success());
    let answered = server.wait_response(&json!(call));
    assert_eq!(exit_code(&answered["result"]), Some(143), "{answered}");
    // Answered, the id is free again.
    server.send(&json!({ "jsonrpc": "2.0", "id": call, "method": "ping" }));
    let pong = server.wait_response(&json!(call));
    assert!(pong.get("result").is_some(), "{pong}");
    // A message cut after its id.
    let cut = server.fresh_id();
    server.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":{cut},"method":"tools/call","params":{{"name":"exec_comm"#
    ));
    let error = server.wait_response(&json!(cut));
    assert_eq!(error["error"]["code"], -32700, "{error}");
}

fn tool_call(id: i64, name: &str, arguments: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": name, "arguments": arguments } })
}

fn a_cancelled_or_timed_out_poll_releases_its_session_at_once(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &[], false);
    // A program that does not read its terminal: a poll waits out its whole window (the terminal still echoes
    // what is typed).
    let cmd = format!("exec sleep {}", t.marker(1));
    let r = server.call("exec_command", json!({ "cmd": cmd, "tty": true, "yield_time_ms": 500 }));
    let session = session_id(&r);

    // Cancelled by the person (Esc), then timed out by the client (the TypeScript SDK sends the same
    // notification with this reason): both release the session.
    for reason in ["the user pressed Esc", "Request timed out"] {
        let poll = server.fresh_id();
        // The longest empty poll (300 s): were the session still held, the next write would wait past the
        // harness's answer deadline.
        server.send(&tool_call(
            poll,
            "write_stdin",
            json!({ "session_id": session, "chars": "", "yield_time_ms": LONGER_THAN_AN_ANSWER_MS }),
        ));
        std::thread::sleep(Duration::from_millis(300));
        server.notify("notifications/cancelled", json!({ "requestId": poll, "reason": reason }));

        let r = server
            .call("write_stdin", json!({ "session_id": session, "chars": "hello\n", "yield_time_ms": 2000 }));
        assert!(!is_error(&r), "{r}");
        assert!(output(&r).contains("hello"), "{r}");
        assert_eq!(session_id(&r), session, "the process keeps running: {r}");
    }

    let r = server.call("list_sessions", json!({}));
    let sessions = r["structuredContent"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{r}");
    assert_eq!(sessions[0]["cmd"], cmd.as_str(), "{r}");
}

fn a_cancelled_exec_command_keeps_its_process_as_a_session(t: Transport) {
    let ws = Workspace::new();
    let long = windows_past_the_answer_deadline(&ws);
    let mut server = McpServer::start_initialized_over(t, &ws, &[&long[0], &long[1]], false);
    let seconds = t.marker(2);
    let cmd = format!("echo started; exec sleep {seconds}");
    let call = server.fresh_id();
    // A window past the harness's answer deadline: were the session still held by this call once it is
    // cancelled, the Ctrl-C below would get no answer in time.
    server.send(&tool_call(
        call,
        "exec_command",
        json!({ "cmd": cmd, "tty": true, "yield_time_ms": LONGER_THAN_AN_ANSWER_MS }),
    ));
    assert!(!wait_present(&["sleep", &seconds], Duration::from_secs(30)).is_empty(), "the command never ran");
    server.notify("notifications/cancelled", json!({ "requestId": call, "reason": "interrupted" }));

    let r = server.call("list_sessions", json!({}));
    let sessions = r["structuredContent"]["sessions"].as_array().unwrap().clone();
    assert_eq!(sessions.len(), 1, "the process stays a session: {r}");
    assert_eq!(sessions[0]["cmd"], cmd.as_str(), "{r}");
    let session = sessions[0]["session_id"].as_u64().unwrap();
    // Ctrl-C ends it: the answer comes as soon as the process exits, with the first window's output.
    let r = server
        .call("write_stdin", json!({ "session_id": session, "chars": "\u{3}", "yield_time_ms": 10_000 }));
    assert!(output(&r).contains("started"), "the output of the first window is kept: {r}");
    assert!(exit_code(&r).is_some(), "{r}");

    // No answer to the cancelled call ever comes.
    while let Some(message) = server.next_message(Duration::from_millis(500)) {
        assert_ne!(message.get("id"), Some(&json!(call)), "a cancelled request was answered: {message}");
    }
}

fn long_polls_report_progress_when_the_client_asks_for_it(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &[], false);
    let cmd = format!("exec sleep {}", t.marker(3));
    let r = server.call("exec_command", json!({ "cmd": cmd, "yield_time_ms": 500 }));
    let session = session_id(&r);

    // With a progress token: notifications for it while the poll waits, increasing, then the result.
    let poll = server.fresh_id();
    server.send(&json!({
        "jsonrpc": "2.0", "id": poll, "method": "tools/call",
        "params": {
            "name": "write_stdin",
            "arguments": { "session_id": session, "chars": "", "yield_time_ms": 12_000 },
            "_meta": { "progressToken": "poll-1" }
        }
    }));
    let mut progress = Vec::new();
    let response = loop {
        let message = server.next_message(ANSWER_TIMEOUT).expect("no answer to the poll");
        if message.get("method") == Some(&json!("notifications/progress")) {
            assert_eq!(message["params"]["progressToken"], "poll-1", "{message}");
            progress.push(message["params"]["progress"].as_f64().unwrap());
        } else if message.get("id") == Some(&json!(poll)) {
            break message;
        }
    };
    assert!(response.get("result").is_some(), "{response}");
    assert!(!progress.is_empty(), "no progress during a 12 s poll");
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "progress must increase: {progress:?}");

    // Without one: none.
    let poll = server.fresh_id();
    server.send(&tool_call(
        poll,
        "write_stdin",
        json!({ "session_id": session, "chars": "", "yield_time_ms": 7000 }),
    ));
    loop {
        let message = server.next_message(ANSWER_TIMEOUT).expect("no answer to the poll");
        assert_ne!(
            message.get("method"),
            Some(&json!("notifications/progress")),
            "unasked progress: {message}"
        );
        if message.get("id") == Some(&json!(poll)) {
            break;
        }
    }
}

fn argument_errors_are_tool_results_and_every_codex_argument_is_accepted(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &[], false);

    for (name, args, needle) in [
        ("exec_command", json!({}), "missing required argument `cmd`"),
        ("exec_command", json!({ "cmd": ["ls"] }), "`cmd` must be a string"),
        (
            "exec_command",
            json!({ "cmd": "true", "max_output_tokens": -3 }),
            "`max_output_tokens` must be a non-negative",
        ),
        (
            "exec_command",
            json!({ "cmd": "true", "prefix_rule": "git" }),
            "`prefix_rule` must be an array of strings",
        ),
        ("exec_command", json!({ "cmd": "true", "login": 1 }), "`login` must be a boolean"),
        ("write_stdin", json!({}), "missing required argument `session_id`"),
        ("write_stdin", json!({ "session_id": -5 }), "`session_id` must be a non-negative integer"),
        ("close_session", json!({ "session_id": true }), "`session_id` must be an integer"),
        ("read_screen", json!({}), "missing required argument `session_id`"),
    ] {
        let reply = server.call_raw(name, args.clone());
        let r = reply.get("result").unwrap_or_else(|| panic!("{name} {args}: a protocol error: {reply}"));
        assert!(is_error(r), "{name} {args}: {r}");
        assert!(text(r).contains(needle), "{name} {args}: {}", text(r));
    }

    // The whole Codex exec_command schema, plus arguments no version of it has: accepted, run.
    let r = server.call(
        "exec_command",
        json!({
            "cmd": "echo codex-args", "workdir": ".", "shell": "/bin/bash", "tty": false, "login": false,
            "yield_time_ms": 5000, "max_output_tokens": 100, "sandbox_permissions": "with_additional_permissions",
            "additional_permissions": { "file_system": { "write": ["/var/tmp"] }, "network": { "enabled": true } },
            "justification": "because", "prefix_rule": ["echo"], "with_additional_permissions": true,
            "some_future_argument": { "x": 1 }
        }),
    );
    assert!(!is_error(&r), "{r}");
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert_eq!(output(&r), "codex-args\n");
    let r = server.call("list_sessions", json!({ "verbose": true }));
    assert!(!is_error(&r), "{r}");

    let tools = server.request("tools/list", json!({}));
    let exec =
        tools["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "exec_command").unwrap();
    let schema = &exec["inputSchema"];
    for name in
        ["prefix_rule", "additional_permissions", "justification", "sandbox_permissions", "login", "shell"]
    {
        assert!(schema["properties"].get(name).is_some(), "{name} missing from {schema}");
    }
    assert_ne!(schema["additionalProperties"], json!(false), "unknown arguments are ignored: {schema}");
}

fn elicitation_follows_the_negotiated_protocol_version(t: Transport) {
    // 2025-11-25: oneOf + const, mode "form".
    let ws = Workspace::new();
    let mut server = start_with_version(t, &ws, &["--approval-policy", "untrusted"], "2025-11-25", true);
    server.answers = vec!["approve".into()];
    let r = server.call("exec_command", json!({ "cmd": "touch new.txt" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    let params = &server.elicitations[0];
    assert_eq!(params["mode"], "form", "{params}");
    assert!(params["requestedSchema"]["properties"]["decision"]["oneOf"].is_array(), "{params}");
    drop(server);

    // 2025-06-18: enum + enumNames, no mode; the answer works the same.
    let ws = Workspace::new();
    let mut server = start_with_version(t, &ws, &["--approval-policy", "untrusted"], "2025-06-18", true);
    server.answers = vec!["approve_for_session".into()];
    let r = server.call("exec_command", json!({ "cmd": "touch old.txt" }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(ws.path().join("old.txt").exists());
    let params = &server.elicitations[0];
    assert!(params.get("mode").is_none(), "2025-06-18 has no elicitation mode: {params}");
    let decision = &params["requestedSchema"]["properties"]["decision"];
    // Under untrusted a run question offers the sandbox-only approval and the rerun as its own choice.
    assert_eq!(
        decision["enum"],
        json!(["approve", "approve_with_retry", "approve_for_session", "deny"]),
        "{params}"
    );
    assert_eq!(decision["enumNames"].as_array().map(Vec::len), Some(4), "{params}");
    assert!(decision.get("oneOf").is_none(), "{params}");
    drop(server);

    // 2025-03-26 has no elicitation, whatever the client declares: the policy decides alone.
    let ws = Workspace::new();
    let mut server = start_with_version(t, &ws, &["--approval-policy", "untrusted"], "2025-03-26", true);
    let r = server.call("exec_command", json!({ "cmd": "touch never.txt" }));
    assert!(is_error(&r), "{r}");
    assert!(text(&r).contains("cannot ask a person"), "{}", text(&r));
    assert!(server.elicitations.is_empty(), "an elicitation was sent under 2025-03-26");
    assert!(!ws.path().join("never.txt").exists());
}

/// The next line from the server that is not a notification or a server request, as raw JSON text.
fn next_answer(server: &mut McpServer) -> Value {
    loop {
        let message = server.next_message(ANSWER_TIMEOUT).expect("no answer from the server");
        if message.get("method").is_none() {
            return message;
        }
    }
}

fn json_rpc_conformance_ids_handshake_and_batches(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_over(t, &ws, &[]);
    // Before initialize: a clear message, not one about missing _meta fields; ping is answered.
    server.send_raw(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    let r = next_answer(&mut server);
    assert_eq!(r["id"], 1, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("server not initialized: send initialize first"),
        "{r}"
    );
    server.send_raw(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#);
    assert_eq!(next_answer(&mut server), json!({ "jsonrpc": "2.0", "id": 2, "result": {} }));

    // initialize under 2025-03-26 with an id rmcp cannot hold as an i64; then a second initialize is refused.
    let init = r#"{"jsonrpc":"2.0","id":9223372036854775813,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    server.send_raw(init);
    let (line, r) = server.next_raw_line(ANSWER_TIMEOUT).expect("no answer to initialize");
    assert!(line.contains(r#""id":9223372036854775813"#), "{line}");
    assert_eq!(r["result"]["protocolVersion"], "2025-03-26", "{r}");
    server.notify("notifications/initialized", json!({}));
    server.send_raw(&init.replace("9223372036854775813", "3"));
    let r = next_answer(&mut server);
    assert_eq!(r["id"], 3);
    assert!(r["error"]["message"].as_str().unwrap().contains("already initialized"), "{r}");

    // Ids far beyond i64 come back exactly as written, on results and on errors.
    server.send_raw(r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"tools/list"}"#);
    let (line, r) = server.next_raw_line(ANSWER_TIMEOUT).unwrap();
    assert!(line.contains(r#""id":123456789012345678901234567890"#), "{line}");
    assert!(r["result"]["tools"].is_array(), "{r}");
    server.send_raw(r#"{"jsonrpc":"2.0","id":-123456789012345678901234567890,"method":"no/such"}"#);
    let (line, _) = server.next_raw_line(ANSWER_TIMEOUT).unwrap();
    assert!(line.contains(r#""id":-123456789012345678901234567890"#) && line.contains("error"), "{line}");

    // An id that is no id: an error with `"id": null`.
    server.send_raw(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#);
    let r = next_answer(&mut server);
    assert_eq!(r.get("id"), Some(&Value::Null), "{r}");
    assert_eq!(r["error"]["code"], -32600, "{r}");

    // A batch: one array of answers, none for the notification; a tool call inside it runs.
    server.send_raw(
        r#"[{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"exec_command","arguments":{"cmd":"echo in-a-batch"}}},{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}},{"jsonrpc":"2.0","id":"eleven","method":"ping"},{"jsonrpc":"2.0","id":12345678901234567890123,"method":"tools/list"}]"#,
    );
    let (line, r) = server.next_raw_line(ANSWER_TIMEOUT).unwrap();
    let answers = r.as_array().unwrap_or_else(|| panic!("a batch is answered with an array: {line}"));
    assert_eq!(answers.len(), 3, "{line}");
    assert!(line.contains(r#""id":12345678901234567890123"#), "{line}");
    let call = answers.iter().find(|a| a["id"] == 10).unwrap();
    assert!(output(&call["result"]).contains("in-a-batch"), "{call}");
    assert!(answers.iter().any(|a| a["id"] == "eleven" && a["result"] == json!({})), "{line}");
    server.send_raw("[]");
    let r = next_answer(&mut server);
    assert_eq!((r["id"].clone(), r["error"]["code"].clone()), (Value::Null, json!(-32600)), "{r}");
    server.send_raw(r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#);
    server.send_raw(r#"{"jsonrpc":"2.0","id":13,"method":"ping"}"#);
    assert_eq!(next_answer(&mut server)["id"], 13, "a batch of notifications gets no answer");
}

fn batches_are_refused_after_2025_03_26(t: Transport) {
    let ws = Workspace::new();
    let mut server = start_with_version(t, &ws, &[], "2025-06-18", false);
    server.send_raw(r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#);
    let r = next_answer(&mut server);
    assert_eq!(r.get("id"), Some(&Value::Null), "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("not supported under protocol 2025-06-18"),
        "{r}"
    );
}

fn totals_past_the_buffer_errors_and_the_argument_limit_describe_the_whole_command(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &["--approval-policy", "never"], false);

    // seq 1 3000000 prints 22,888,896 bytes in 3,000,000 lines: both totals count all of it.
    let r = server.call(
        "exec_command",
        json!({ "cmd": "seq 1 3000000", "yield_time_ms": 30_000, "max_output_tokens": 100 }),
    );
    assert_eq!(exit_code(&r), Some(0), "{r}");
    let text = text(&r);
    assert!(text.contains("Original token count: 5722224\n"), "{text}");
    assert!(text.contains("\nOutput:\nTotal output lines: 3000000\n\n"), "{text}");
    // One 10 MB line is one line, and the buffer's marker adds no token.
    let r = server.call(
        "exec_command",
        json!({ "cmd": "head -c 10000000 /dev/zero | tr '\\0' x", "yield_time_ms": 30_000, "max_output_tokens": 100 }),
    );
    let text = common::text(&r);
    assert!(text.contains("Original token count: 2500000\n"), "{text}");
    assert!(text.contains("\nOutput:\nTotal output lines: 1\n\n"), "{text}");

    // A 10 MB command: the error repeats its start and says its length, not all of it.
    let huge = format!("echo {}", "y".repeat(10_000_000));
    let r = server.call("exec_command", json!({ "cmd": huge }));
    assert!(is_error(&r), "{r}");
    let message = common::text(&r);
    assert!(message.len() < 2000, "an error of {} bytes", message.len());
    assert!(message.contains(&format!("({} bytes in all)", huge.len())), "{message}");
    assert!(message.contains("MAX_ARG_STRLEN"), "{message}");

    // Right at the kernel's limit for one argument: runs; one byte more: refused before anything runs.
    let fits = format!("#{}", "z".repeat(128 * 1024 - 2));
    let r = server.call("exec_command", json!({ "cmd": fits }));
    assert_eq!(exit_code(&r), Some(0), "{}", &common::text(&r)[..300.min(common::text(&r).len())]);
    let over = format!("#{}", "z".repeat(128 * 1024 - 1));
    let r = server.call("exec_command", json!({ "cmd": over }));
    assert!(is_error(&r));
    assert!(
        common::text(&r).contains("cmd is 131072 bytes, over the kernel's limit"),
        "{}",
        common::text(&r)
    );

    // Without a way to ask, the refusal also caps the command it names.
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &["--approval-policy", "untrusted"], false);
    let long = format!("touch {}", "w".repeat(100_000));
    let r = server.call("exec_command", json!({ "cmd": long }));
    assert!(is_error(&r), "{r}");
    assert!(common::text(&r).len() < 2000, "{}", common::text(&r).len());
}

fn a_codex_prefix_rule_is_offered_and_an_approved_prefix_is_not_asked_again(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &[], true);
    let outside = ws.outside.path().to_str().unwrap().to_owned();
    let escalated = |cmd: String, prefix: Value| json!({ "cmd": cmd, "sandbox_permissions": "require_escalated", "justification": "why", "prefix_rule": prefix });

    server.answers = vec!["approve_prefix_for_session".into()];
    let r = server.call("exec_command", escalated(format!("touch {outside}/one.txt"), json!(["touch"])));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    let choices = &server.elicitations[0]["requestedSchema"]["properties"]["decision"]["oneOf"];
    assert_eq!(choices.as_array().map(Vec::len), Some(4), "{choices}");
    assert_eq!(choices[2]["const"], "approve_prefix_for_session", "{choices}");
    assert!(choices[2]["title"].as_str().unwrap().contains("`touch`"), "{choices}");

    // Starts with the approved prefix: runs without a question.
    let r = server.call("exec_command", escalated(format!("touch {outside}/two.txt"), Value::Null));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(ws.outside.path().join("two.txt").exists());
    assert_eq!(server.elicitations.len(), 1, "an approved prefix was asked again");

    // Anything else is asked; a bare shell as prefix is not offered.
    server.answers = vec!["deny".into()];
    let r = server.call("exec_command", escalated(format!("rm {outside}/one.txt"), json!(["bash"])));
    assert!(is_error(&r), "{r}");
    assert_eq!(server.elicitations.len(), 2);
    let choices = &server.elicitations[1]["requestedSchema"]["properties"]["decision"]["oneOf"];
    assert_eq!(choices.as_array().map(Vec::len), Some(3), "{choices}");
    assert!(ws.outside.path().join("one.txt").exists());
}

/// A `ping` with an id beyond `u64`, a fraction or `null`: the same answer on both transports (over HTTP rmcp
/// alone refused the first two with `415 fail to deserialize request body`).
fn ids_rmcp_cannot_hold_are_echoed_exactly_and_a_null_id_is_refused(t: Transport) {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized_over(t, &ws, &[], false);
    for id in ["18446744073709551617", "1.5", "-0.25", "\"uexec-rpc-id:1\""] {
        server.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        let (line, r) = server.next_raw_line(ANSWER_TIMEOUT).expect("no answer to the ping");
        assert!(line.contains(&format!(r#""id":{id}"#)), "{id}: {line}");
        assert_eq!(r["result"], json!({}), "{id}: {line}");
    }
    // A tool call under such an id: its result comes back under it.
    server.send_raw(
        r#"{"jsonrpc":"2.0","id":18446744073709551618,"method":"tools/call","params":{"name":"exec_command","arguments":{"cmd":"echo big-id"}}}"#,
    );
    let (line, r) = loop {
        let (line, r) = server.next_raw_line(ANSWER_TIMEOUT).expect("no answer to the call");
        if r.get("method").is_none() {
            break (line, r);
        }
    };
    assert!(line.contains(r#""id":18446744073709551618"#), "{line}");
    assert!(output(&r["result"]).contains("big-id"), "{line}");
    // `null` is no id: refused, with `"id": null`.
    server.send_raw(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#);
    let r = next_answer(&mut server);
    assert_eq!(r.get("id"), Some(&Value::Null), "{r}");
    assert_eq!(r["error"]["code"], -32600, "{r}");
}
