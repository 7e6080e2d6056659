//! Bounds that must hold on every path, through the real binary: the session cap for calls a client cancelled,
//! the server-wide session limit under concurrent clients.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

fn listed(server: &mut McpServer) -> usize {
    let listed = server.call("list_sessions", json!({}));
    listed["structuredContent"]["sessions"].as_array().unwrap().len()
}

fn close_all(server: &mut McpServer) {
    let listed = server.call("list_sessions", json!({}));
    for s in listed["structuredContent"]["sessions"].as_array().unwrap() {
        let r = server.call("close_session", json!({ "session_id": s["session_id"] }));
        assert!(!is_error(&r), "{r}");
    }
}

/// Live processes among `argvs`.
fn live_count(argvs: &[Vec<String>]) -> usize {
    argvs
        .iter()
        .filter(|argv| {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            !pids_with_cmdline(&argv).is_empty()
        })
        .count()
}

#[test]
fn cancelled_exec_calls_are_pruned_to_the_64_session_cap() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &["--sandbox", "danger-full-access"], false);
    let base = marker_seconds(36);
    let mut argvs = Vec::new();
    for i in 0..80 {
        let seconds = format!("{base}{i:02}");
        let id = server.fresh_id();
        server.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "exec_command",
                        "arguments": { "cmd": format!("exec sleep {seconds}"), "yield_time_ms": 30_000 } } }));
        // Cancelled once its command runs: the call is mid-window and its session stored.
        let argv = vec!["sleep".to_owned(), seconds];
        assert!(!wait_present(&[&argv[0], &argv[1]], ANSWER_TIMEOUT).is_empty(), "call {i} never started");
        server.notify("notifications/cancelled", json!({ "requestId": id }));
        argvs.push(argv);
    }
    // Each cancelled call past the 64th prunes the least recently used session and kills its command.
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    let mut counts = (listed(&mut server), live_count(&argvs));
    while counts != (64, 64) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        counts = (listed(&mut server), live_count(&argvs));
    }
    assert_eq!(counts, (64, 64), "(listed sessions, live commands) after 80 cancelled calls");
    // The oldest were pruned, the newest kept.
    let oldest: Vec<&str> = argvs[0].iter().map(String::as_str).collect();
    let newest: Vec<&str> = argvs[79].iter().map(String::as_str).collect();
    assert!(pids_with_cmdline(&oldest).is_empty() && !pids_with_cmdline(&newest).is_empty());
    // An answered call at the cap says so.
    let r = server.call("exec_command", json!({ "cmd": "exec cat", "tty": true, "yield_time_ms": 500 }));
    assert!(text(&r).contains("64 exec sessions are open"), "{r}");
    assert_eq!(listed(&mut server), 64);
    close_all(&mut server);
    for argv in &argvs {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        assert!(wait_gone(&argv, ANSWER_TIMEOUT).is_empty(), "{argv:?} survived close_session");
    }
}
