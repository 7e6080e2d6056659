//! `uexec mcp` end to end under `untrusted`: git where sandboxed commands can write its repository is asked
//! about, the retry question after a sandbox denial shows the denial and says full access, and a denial that
//! nobody can approve a retry for returns the command's output with a note instead of a tool error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use common::*;
use serde_json::json;

/// `uexec mcp` under `policy`, judging every sandboxed run that ends within its yield window for a denial.
fn start(ws: &Workspace, policy: &str, elicitation: bool) -> McpServer {
    let grace = whole_window_grace(ws);
    McpServer::start_initialized(ws, &[&grace[0], &grace[1], "--approval-policy", policy], elicitation)
}

#[test]
fn git_in_a_writable_repository_is_asked_about_and_echo_is_not() {
    let ws = Workspace::new();
    let repo = ws.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let status = Command::new("git").args(["init", "-q"]).current_dir(&repo).status().unwrap();
    assert!(status.success());
    let marker = ws.path().join("marker");
    let hook = ws.path().join("fsmonitor.sh");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch '{}'\n", marker.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let status = Command::new("git")
        .args(["config", "core.fsmonitor", hook.to_str().unwrap()])
        .current_dir(&repo)
        .status()
        .unwrap();
    assert!(status.success());

    let mut server = McpServer::start_initialized(&ws, &["--approval-policy", "untrusted"], true);
    server.answers = vec!["deny".into()];
    let r = server.call("exec_command", json!({ "cmd": "git status", "workdir": "repo" }));
    assert!(is_error(&r) && text(&r).contains("rejected by user"), "{r}");
    assert_eq!(server.elicitations.len(), 1);
    assert!(server.elicitations[0]["message"].as_str().unwrap().contains("git status"));
    assert!(!marker.exists(), "the planted core.fsmonitor ran without approval");

    let r = server.call("exec_command", json!({ "cmd": "echo hi" }));
    assert_eq!(output(&r), "hi\n", "{r}");
    assert_eq!(server.elicitations.len(), 1, "echo is known safe");
}

#[test]
fn the_retry_question_shows_the_denial_escaped_and_says_full_access() {
    let ws = Workspace::new();
    let mut server = start(&ws, "untrusted", true);
    // Known safe, so nobody approved it: its retry outside the sandbox must be asked about. A read only the
    // sandbox refuses (the kernel stack needs CAP_SYS_ADMIN, which the sandbox drops; this test runs as root).
    server.answers = vec!["deny".into()];
    let r = server.call("exec_command", json!({ "cmd": "cat /proc/self/stack" }));
    assert!(!is_error(&r), "{r}");
    assert_eq!(exit_code(&r), Some(1), "{r}");
    assert_eq!(output(&r), "cat: /proc/self/stack: Permission denied\n", "{r}");
    assert_eq!(server.elicitations.len(), 1, "the retry was not asked about: {r}");
    let message = server.elicitations[0]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("FULL ACCESS (no sandbox)"), "{message}");
    assert!(
        message
            .contains("exit code 1; the sandbox refused: access to /proc/self/stack (the sandbox's /proc)"),
        "{message}"
    );
    assert!(
        text(&r).contains("[uexec] hidden: /proc/self/stack [from output]")
            && text(&r).contains("the sandbox appears to have blocked this command")
            && text(&r).contains("a person declined"),
        "{r}"
    );
}

/// Over-blocking regression: a failing command whose output merely contains "permission denied" is an ordinary
/// failure (the sandbox refused nothing): under `untrusted` and `on-failure` it is neither retried nor asked
/// about nor noted, even when it ends within the early-exit grace. Its twin, a read the sandbox does refuse,
/// with a client that cannot ask a person, returns its output and a note (not a tool error).
#[test]
fn an_ordinary_failure_is_not_a_denial_and_a_real_one_returns_the_output_and_a_note() {
    for policy in ["untrusted", "on-failure"] {
        let ws = Workspace::new();
        // Every run is judged (the grace is the whole window), so the ordinary failure below is one the
        // heuristic looked at.
        let mut server = start(&ws, policy, false);
        let r = server
            .call("exec_command", json!({ "cmd": "echo 'ls: cannot open x: Permission denied' && false" }));
        assert!(!is_error(&r), "{policy}: {r}");
        assert_eq!(exit_code(&r), Some(1), "{r}");
        assert_eq!(output(&r), "ls: cannot open x: Permission denied\n", "{r}");
        assert!(!text(&r).contains("Warning:"), "{policy}: an ordinary failure was taken for a denial: {r}");
        let r = server.call("exec_command", json!({ "cmd": "cat /proc/self/stack" }));
        assert!(!is_error(&r), "{policy}: {r}");
        assert_eq!(exit_code(&r), Some(1), "{r}");
        let text = text(&r);
        assert!(text.contains("[uexec] hidden: /proc/self/stack [from output]"), "{policy}: {text}");
        assert!(
            text.contains("it was not run again without the sandbox (approval unavailable: retrying it without the sandbox needs a person"),
            "{policy}: {text}"
        );
    }
}
