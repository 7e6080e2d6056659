//! Bad input through `uexec mcp`, table-driven: malformed lines, envelopes, ids, params and tool arguments,
//! every field in turn. Each row gets a clear answer (a JSON-RPC error with its code, a tool result with
//! `isError` naming the problem, or, for a notification or a stray response, no answer at all), and afterwards
//! the session started before the first row still answers. RELIABILITY.md carries the table.
// The table of what each row got is printed (`--nocapture` shows it): RELIABILITY.md is made from it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stderr)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// What a row must get back.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A JSON-RPC error with this code, carrying the row's id (or `null` when `id_null`).
    Rpc { code: i64, id_null: bool },
    /// A tool result with `isError: true` whose text contains this.
    Tool(&'static str),
    /// A successful tool result or response for the row's id.
    Fine,
    /// No answer at all.
    Silence,
}

/// Builds a row's line from its request id.
type LineOf<'a> = Box<dyn Fn(i64) -> Vec<u8> + 'a>;

struct Case {
    kind: &'static str,
    line: Vec<u8>,
    expect: Expect,
}

fn call_line(id: i64, name: &str, arguments: &Value) -> Vec<u8> {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": name, "arguments": arguments } })
        .to_string()
        .into_bytes()
}

fn rpc(code: i64) -> Expect {
    Expect::Rpc { code, id_null: false }
}

fn rpc_null(code: i64) -> Expect {
    Expect::Rpc { code, id_null: true }
}

/// Every row, numbered from `first_id`; `session` is a live session, `flag` a file no row may create.
fn cases(first_id: i64, session: u64, flag: &str) -> Vec<Case> {
    let mut rows: Vec<(&'static str, LineOf<'_>, Expect)> = Vec::new();
    let text = |s: String| s.into_bytes();
    // The wire.
    rows.push(("not JSON", Box::new(|_| b"{this is not json".to_vec()), rpc_null(-32700)));
    rows.push((
        "invalid UTF-8 inside a string",
        Box::new(move |id| {
            let mut line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"write_stdin","arguments":{{"session_id":{session},"chars":"a"#).into_bytes();
            line.extend_from_slice(b"\xff\xfe");
            line.extend_from_slice(br#"b"}}}"#);
            line
        }),
        rpc(-32700),
    ));
    rows.push((
        "invalid UTF-8 before the JSON",
        Box::new(|id| {
            let mut line = b"\xff\xfe".to_vec();
            line.extend_from_slice(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).as_bytes());
            line
        }),
        rpc_null(-32700),
    ));
    rows.push((
        "a lone UTF-16 surrogate escape",
        Box::new(move |id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"write_stdin","arguments":{{"session_id":{session},"chars":"\udc00"}}}}}}"#))),
        rpc(-32700),
    ));
    rows.push(("an overlong line (17 MiB)", Box::new(|_| vec![b' '; 17 * 1024 * 1024]), rpc_null(-32600)));
    rows.push((
        "arguments nested 10,000 deep",
        Box::new(|id| {
            let mut line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"exec_command","arguments":{{"cmd":"#).into_bytes();
            line.extend(std::iter::repeat_n(b'[', 10_000));
            line.extend(std::iter::repeat_n(b']', 10_000));
            line.extend_from_slice(b"}}}");
            line
        }),
        rpc(-32700),
    ));
    rows.push(("a JSON string", Box::new(|_| b"\"hello\"".to_vec()), rpc_null(-32600)));
    rows.push(("a JSON number", Box::new(|_| b"42".to_vec()), rpc_null(-32600)));
    rows.push(("JSON null", Box::new(|_| b"null".to_vec()), rpc_null(-32600)));
    rows.push(("an empty batch", Box::new(|_| b"[]".to_vec()), rpc_null(-32600)));
    rows.push((
        "a batch after 2025-03-26",
        Box::new(|id| text(format!(r#"[{{"jsonrpc":"2.0","id":{id},"method":"ping"}}]"#))),
        rpc_null(-32600),
    ));
    rows.push((
        "a byte-order mark and CRLF",
        Box::new(|id| {
            let mut line = b"\xEF\xBB\xBF".to_vec();
            line.extend_from_slice(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).as_bytes());
            line.push(b'\r');
            line
        }),
        Expect::Fine,
    ));
    // The envelope.
    rows.push((
        "jsonrpc \"1.0\"",
        Box::new(|id| text(format!(r#"{{"jsonrpc":"1.0","id":{id},"method":"ping"}}"#))),
        rpc(-32600),
    ));
    rows.push((
        "jsonrpc missing",
        Box::new(|id| text(format!(r#"{{"id":{id},"method":"ping"}}"#))),
        rpc(-32600),
    ));
    rows.push((
        "jsonrpc a number",
        Box::new(|id| text(format!(r#"{{"jsonrpc":2.0,"id":{id},"method":"ping"}}"#))),
        rpc(-32600),
    ));
    rows.push((
        "method a number",
        Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":5}}"#))),
        rpc(-32600),
    ));
    rows.push((
        "method missing",
        Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"params":{{}}}}"#))),
        rpc(-32600),
    ));
    rows.push((
        "an unknown method",
        Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"no/such"}}"#))),
        rpc(-32601),
    ));
    rows.push((
        "a method name of 1 MiB",
        Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{}"}}"#, "m".repeat(1 << 20)))),
        rpc(-32601),
    ));
    rows.push((
        "id an object",
        Box::new(|_| br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#.to_vec()),
        rpc_null(-32600),
    ));
    rows.push((
        "id an array",
        Box::new(|_| br#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#.to_vec()),
        rpc_null(-32600),
    ));
    rows.push((
        "id a boolean",
        Box::new(|_| br#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#.to_vec()),
        rpc_null(-32600),
    ));
    rows.push((
        "a notification method sent with an id",
        Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"notifications/initialized"}}"#))),
        rpc(-32601),
    ));
    rows.push((
        "tools/call sent as a notification (no id)",
        Box::new(move |_| text(json!({ "jsonrpc": "2.0", "method": "tools/call", "params": { "name": "exec_command", "arguments": { "cmd": format!("touch {flag}") } } }).to_string())),
        Expect::Silence,
    ));
    rows.push((
        "an unknown notification",
        Box::new(|_| br#"{"jsonrpc":"2.0","method":"notifications/bogus","params":{}}"#.to_vec()),
        Expect::Silence,
    ));
    rows.push((
        "a cancellation of an unknown request",
        Box::new(|_| {
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":987654}}"#.to_vec()
        }),
        Expect::Silence,
    ));
    rows.push((
        "a response to nothing",
        Box::new(|_| br#"{"jsonrpc":"2.0","id":777777,"result":{}}"#.to_vec()),
        Expect::Silence,
    ));
    rows.push((
        "an error response to nothing",
        Box::new(|_| br#"{"jsonrpc":"2.0","id":777778,"error":{"code":1,"message":"x"}}"#.to_vec()),
        Expect::Silence,
    ));
    rows.push(("a second initialize", Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"x","version":"0"}}}}}}"#))), rpc(-32600)));
    // tools/call params.
    rows.push((
        "params an array",
        Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":[1,2]}}"#))),
        rpc(-32602),
    ));
    rows.push((
        "params null",
        Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":null}}"#))),
        rpc(-32602),
    ));
    rows.push((
        "params missing",
        Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call"}}"#))),
        rpc(-32602),
    ));
    rows.push((
        "tool name missing",
        Box::new(|id| {
            text(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"arguments":{{}}}}}}"#
            ))
        }),
        rpc(-32602),
    ));
    rows.push((
        "tool name a number",
        Box::new(|id| {
            text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":7}}}}"#))
        }),
        rpc(-32602),
    ));
    rows.push(("an unknown tool", Box::new(|id| call_line(id, "no_such_tool", &json!({}))), rpc(-32602)));
    rows.push(("arguments a string", Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"list_sessions","arguments":"x"}}}}"#))), rpc(-32602)));
    rows.push(("arguments an array", Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"list_sessions","arguments":[]}}}}"#))), rpc(-32602)));
    // Tool arguments, field by field.
    let tool = |name: &'static str, args: Value| -> LineOf<'static> {
        Box::new(move |id| call_line(id, name, &args))
    };
    rows.push((
        "exec_command: cmd missing",
        tool("exec_command", json!({})),
        Expect::Tool("missing required argument `cmd`"),
    ));
    rows.push((
        "exec_command: cmd a number",
        tool("exec_command", json!({ "cmd": 42 })),
        Expect::Tool("`cmd` must be a string"),
    ));
    rows.push((
        "exec_command: cmd an object",
        tool("exec_command", json!({ "cmd": { "a": 1 } })),
        Expect::Tool("`cmd` must be a string"),
    ));
    rows.push((
        "exec_command: cmd with a NUL byte",
        tool("exec_command", json!({ "cmd": "echo a\u{0}b" })),
        Expect::Tool("NUL"),
    ));
    rows.push((
        "exec_command: tty a string",
        tool("exec_command", json!({ "cmd": "true", "tty": "yes" })),
        Expect::Tool("`tty` must be a boolean"),
    ));
    rows.push((
        "exec_command: login a number",
        tool("exec_command", json!({ "cmd": "true", "login": 1 })),
        Expect::Tool("`login` must be a boolean"),
    ));
    rows.push((
        "exec_command: yield_time_ms negative",
        tool("exec_command", json!({ "cmd": "true", "yield_time_ms": -100 })),
        Expect::Tool("`yield_time_ms` must be a non-negative"),
    ));
    rows.push((
        "exec_command: yield_time_ms a string",
        tool("exec_command", json!({ "cmd": "true", "yield_time_ms": "100" })),
        Expect::Tool("`yield_time_ms`"),
    ));
    rows.push((
        "exec_command: yield_time_ms fractional (rounded down)",
        tool("exec_command", json!({ "cmd": "true", "yield_time_ms": 1.5 })),
        Expect::Fine,
    ));
    rows.push((
        "exec_command: max_output_tokens negative",
        tool("exec_command", json!({ "cmd": "true", "max_output_tokens": -5 })),
        Expect::Tool("`max_output_tokens`"),
    ));
    rows.push(("exec_command: max_output_tokens 2^64 (clamped)", Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"exec_command","arguments":{{"cmd":"true","max_output_tokens":18446744073709551616}}}}}}"#))), Expect::Fine));
    rows.push(("exec_command: a number beyond f64 (1e400)", Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"exec_command","arguments":{{"cmd":"true","yield_time_ms":1e400}}}}}}"#))), rpc(-32700)));
    rows.push((
        "exec_command: workdir missing on disk",
        tool("exec_command", json!({ "cmd": "true", "workdir": "/no/such/dir" })),
        Expect::Tool("/no/such/dir"),
    ));
    rows.push((
        "exec_command: workdir a number",
        tool("exec_command", json!({ "cmd": "true", "workdir": 5 })),
        Expect::Tool("`workdir` must be a string"),
    ));
    rows.push((
        "exec_command: shell missing on disk",
        tool("exec_command", json!({ "cmd": "true", "shell": "/no/such/shell" })),
        Expect::Tool("/no/such/shell"),
    ));
    rows.push((
        "exec_command: sandbox_permissions unknown",
        tool("exec_command", json!({ "cmd": "true", "sandbox_permissions": "root" })),
        Expect::Tool("`sandbox_permissions` must be"),
    ));
    rows.push((
        "exec_command: additional_permissions an array",
        tool("exec_command", json!({ "cmd": "true", "additional_permissions": [] })),
        Expect::Tool("`additional_permissions` must be an object"),
    ));
    rows.push((
        "exec_command: prefix_rule of numbers",
        tool("exec_command", json!({ "cmd": "true", "prefix_rule": [1, 2] })),
        Expect::Tool("`prefix_rule`"),
    ));
    rows.push((
        "exec_command: prefix_rule a string",
        tool("exec_command", json!({ "cmd": "true", "prefix_rule": "git" })),
        Expect::Tool("`prefix_rule`"),
    ));
    rows.push((
        "exec_command: justification a number",
        tool("exec_command", json!({ "cmd": "true", "justification": 3 })),
        Expect::Tool("`justification` must be a string"),
    ));
    rows.push((
        "exec_command: an unknown argument (ignored)",
        tool("exec_command", json!({ "cmd": "true", "bogus": [1] })),
        Expect::Fine,
    ));
    rows.push(("exec_command: duplicate keys (the last wins)", Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"exec_command","arguments":{{"cmd":5,"cmd":"true"}}}}}}"#))), Expect::Fine));
    rows.push((
        "write_stdin: session_id missing",
        tool("write_stdin", json!({ "chars": "x" })),
        Expect::Tool("missing required argument `session_id`"),
    ));
    rows.push((
        "write_stdin: session_id a string",
        tool("write_stdin", json!({ "session_id": "x" })),
        Expect::Tool("`session_id` must be an integer"),
    ));
    rows.push((
        "write_stdin: session_id negative",
        tool("write_stdin", json!({ "session_id": -1 })),
        Expect::Tool("`session_id`"),
    ));
    rows.push((
        "write_stdin: session_id fractional",
        tool("write_stdin", json!({ "session_id": 1000.5 })),
        Expect::Tool("`session_id`"),
    ));
    rows.push(("write_stdin: session_id 2^64", Box::new(|id| text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"write_stdin","arguments":{{"session_id":18446744073709551616}}}}}}"#))), Expect::Tool("`session_id`")));
    rows.push((
        "write_stdin: an unknown session",
        tool("write_stdin", json!({ "session_id": 99_999, "chars": "" })),
        Expect::Tool("Unknown process id 99999"),
    ));
    rows.push((
        "write_stdin: chars a number",
        tool("write_stdin", json!({ "session_id": session, "chars": 5 })),
        Expect::Tool("`chars` must be a string"),
    ));
    rows.push((
        "write_stdin: yield_time_ms negative",
        tool("write_stdin", json!({ "session_id": session, "yield_time_ms": -1 })),
        Expect::Tool("`yield_time_ms`"),
    ));
    rows.push((
        "close_session: an unknown session",
        tool("close_session", json!({ "session_id": 0 })),
        Expect::Tool("Unknown process id 0"),
    ));
    rows.push((
        "close_session: session_id null",
        tool("close_session", json!({ "session_id": null })),
        Expect::Tool("`session_id`"),
    ));
    rows.push((
        "read_screen: an unknown session",
        tool("read_screen", json!({ "session_id": 4_294_967_295u64 })),
        Expect::Tool("Unknown process id"),
    ));
    rows.push((
        "list_sessions: junk arguments (ignored)",
        tool("list_sessions", json!({ "x": [[[]]] })),
        Expect::Fine,
    ));
    rows.into_iter()
        .zip(first_id..)
        .map(|((kind, line, expect), id)| Case { kind, line: line(id), expect })
        .collect()
}

/// The row's answer and any other answer that came meanwhile. A row with an id waits for the answer carrying
/// it (tool calls run concurrently, so answers may overtake each other); a row that must get no answer is
/// fenced by a ping sent after it (answered in order by the transport).
fn answer_to(
    server: &mut McpServer,
    expect: Expect,
    id: &Value,
    ping_id: i64,
) -> (Option<Value>, Vec<Value>) {
    let silent = matches!(expect, Expect::Silence);
    if silent {
        server.send(&json!({ "jsonrpc": "2.0", "id": ping_id, "method": "ping" }));
    }
    let mut others = Vec::new();
    loop {
        let message = server.next_message(ANSWER_TIMEOUT).expect("the server answers");
        if message.get("method").is_some() {
            continue;
        }
        if silent && message["id"] == json!(ping_id) {
            return (None, others);
        }
        if !silent && message["id"] == *id {
            return (Some(message), others);
        }
        others.push(message);
    }
}

#[test]
fn every_malformed_request_gets_a_clear_answer_and_the_sessions_survive() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let r = server.call("exec_command", json!({ "cmd": "cat", "tty": true, "yield_time_ms": 500 }));
    let session = session_id(&r);
    let flag = ws.path().join("notification-ran");
    let first_id = 100_000;
    let cases = cases(first_id, session, flag.to_str().unwrap());
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for (case, id) in cases.iter().zip(first_id..) {
        server.send_bytes(&case.line);
        let expected_id = match case.expect {
            Expect::Rpc { id_null: true, .. } => Value::Null,
            _ => json!(id),
        };
        let (answer, others) = answer_to(&mut server, case.expect, &expected_id, 900_000 + id);
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match (&case.expect, &answer) {
                (Expect::Silence, None) => "no answer".to_owned(),
                (Expect::Rpc { code, .. }, Some(a)) => {
                    assert_eq!(a["error"]["code"], json!(code), "{}: {a}", case.kind);
                    let message = a["error"]["message"].as_str().unwrap_or_default();
                    assert!(!message.is_empty(), "{}: {a}", case.kind);
                    format!("error {code}: {}", message.chars().take(90).collect::<String>())
                }
                (Expect::Tool(needle), Some(a)) => {
                    let result = &a["result"];
                    assert!(is_error(result), "{}: {a}", case.kind);
                    let t = text(result);
                    assert!(t.contains(needle), "{}: {t}", case.kind);
                    format!("isError: {}", t.chars().take(90).collect::<String>())
                }
                (Expect::Fine, Some(a)) => {
                    assert!(a.get("result").is_some(), "{}: {a}", case.kind);
                    assert!(!is_error(&a["result"]), "{}: {a}", case.kind);
                    "answered".to_owned()
                }
                (expect, answer) => panic!("{}: expected {expect:?}, got {answer:?}", case.kind),
            }));
        match outcome {
            Ok(_) if !others.is_empty() => {
                eprintln!("{}: answers nobody asked for: {others:?}", case.kind);
                failures.push(case.kind);
            }
            Ok(seen) => {
                table.push(format!("| {} | {} |", case.kind, seen.replace('|', "\\|").replace('\n', " ")))
            }
            Err(_) => failures.push(case.kind),
        }
    }
    eprintln!("bad-input table ({} rows):\n{}", table.len(), table.join("\n"));
    assert!(failures.is_empty(), "rows without the expected answer: {failures:?}");
    assert!(!flag.exists(), "a tools/call notification ran its command");
    // The session started before the first row still echoes what it is sent.
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
    let listed = server.call("list_sessions", json!({}));
    let live = listed["structuredContent"]["sessions"].as_array().unwrap().len();
    assert_eq!(live, 1, "only the session started before: {listed}");
    let _ = Duration::ZERO;
}
