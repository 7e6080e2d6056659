//! The login environment is loaded once per server and replayed from a snapshot, end to end
//! through `uexec mcp`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use common::{McpServer, Workspace, exit_code, output};
use serde_json::json;

/// A `.profile` that announces itself, counts its runs in `counter`, and defines a variable, a function and an
/// alias.
fn profile(counter: &Path, extra: &str) -> String {
    format!(
        "echo PROFILE-SAYS-HELLO\necho PROFILE-ERR >&2\necho run >> '{}'\nexport SNAP_VAR=from-profile\n\
         snapfn() {{ echo \"fn:$1\"; }}\nalias snapalias='echo aliased'\n{extra}",
        counter.display()
    )
}

fn runs(counter: &Path) -> usize {
    std::fs::read_to_string(counter).map(|s| s.lines().count()).unwrap_or(0)
}

/// The snapshot files of both placements (`snapshots/sandboxed`, `snapshots/host`).
fn snapshot_files(state: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for place in ["sandboxed", "host"] {
        if let Ok(entries) = std::fs::read_dir(state.join("uexec/snapshots").join(place)) {
            files.extend(
                entries.map(|e| e.unwrap().path()).filter(|p| !p.to_string_lossy().contains(".partial")),
            );
        }
    }
    files
}

/// With HOME and the state directory outside every writable root, the profile runs once for many commands;
/// its variable, function and alias reach every `login: true` command (not a `login: false` one), what it
/// prints never reaches a command's output, a change to it refreshes the snapshot, and sandboxed commands
/// cannot write the snapshot.
#[test]
fn the_login_environment_is_captured_once_and_refreshed_when_a_startup_file_changes() {
    let ws = Workspace::new();
    let home = ws.outside.path().join("home");
    let state = ws.outside.path().join("state");
    std::fs::create_dir(&home).unwrap();
    let counter = ws.path().join("profile-runs");
    std::fs::write(home.join(".profile"), profile(&counter, "")).unwrap();
    let env = [("HOME", home.to_str().unwrap()), ("XDG_STATE_HOME", state.to_str().unwrap())];
    let mut server = McpServer::start_with_env(&ws, &[], &env);
    server.initialize(false);

    for round in 0..3 {
        let r = server.call("exec_command", json!({ "cmd": "echo \"[$SNAP_VAR]\"; snapfn x; snapalias" }));
        let out = output(&r);
        assert_eq!(exit_code(&r), Some(0), "{r}");
        assert!(out.contains("[from-profile]") && out.contains("fn:x") && out.contains("aliased"), "{out}");
        assert!(!out.contains("PROFILE-SAYS-HELLO") && !out.contains("PROFILE-ERR"), "round {round}: {out}");
    }
    assert_eq!(runs(&counter), 1, "the profile ran once for three commands");

    let r =
        server.call("exec_command", json!({ "cmd": "echo \"[$SNAP_VAR]\"; type snapfn", "login": false }));
    assert!(output(&r).contains("[]") && exit_code(&r) != Some(0), "login: false replays nothing: {r}");

    // A script the command starts does not source the snapshot again.
    let r =
        server.call("exec_command", json!({ "cmd": "echo \"[${BASH_ENV-unset}]\"; bash -c 'type snapfn'" }));
    assert!(output(&r).contains("[unset]") && exit_code(&r) != Some(0), "{r}");

    let files = snapshot_files(&state);
    assert_eq!(files.len(), 1, "{files:?}");
    let r = server.call(
        "exec_command",
        json!({ "cmd": format!("echo planted >> '{}' && echo WROTE", files[0].display()) }),
    );
    assert!(!output(&r).contains("WROTE"), "a sandboxed command wrote the snapshot: {r}");
    assert!(!std::fs::read_to_string(&files[0]).unwrap().contains("planted"));

    // The pair to the denial: the twin write to the workspace works.
    let r = server.call("exec_command", json!({ "cmd": "echo ok > written && echo WROTE" }));
    assert!(output(&r).contains("WROTE"), "{r}");

    std::fs::write(home.join(".profile"), profile(&counter, "export SNAP_NEW=after-change\n")).unwrap();
    let r = server.call("exec_command", json!({ "cmd": "echo \"[$SNAP_NEW]\"" }));
    assert!(output(&r).contains("[after-change]"), "the snapshot was refreshed: {r}");
    assert_eq!(runs(&counter), 2);
    let r = server.call("exec_command", json!({ "cmd": "echo \"[$SNAP_NEW]\"" }));
    assert!(output(&r).contains("[after-change]"), "{r}");
    assert_eq!(runs(&counter), 2, "and reused after the refresh");
}

/// With the startup files in a writable root (HOME is the workspace), a sandboxed command may replay them, but
/// a command that runs outside the sandbox (an approved escalation) neither sources them nor the sandbox's
/// snapshot. With the state directory in a writable root, snapshots are off and every command starts a login
/// shell.
#[test]
fn writable_startup_files_or_state_never_reach_a_command_outside_the_sandbox() {
    let ws = Workspace::new();
    let state = ws.outside.path().join("state");
    let counter = ws.path().join("profile-runs");
    std::fs::write(ws.path().join(".profile"), profile(&counter, "")).unwrap();
    let mut server = McpServer::start_with_env(&ws, &[], &[("XDG_STATE_HOME", state.to_str().unwrap())]);
    server.initialize(true);
    for _ in 0..2 {
        let r = server.call("exec_command", json!({ "cmd": "echo \"[$SNAP_VAR]\"" }));
        assert!(output(&r).contains("[from-profile]"), "{r}");
    }
    assert_eq!(runs(&counter), 1, "sandboxed commands share one snapshot");

    server.answers = vec!["approve".into()];
    let r = server.call(
        "exec_command",
        json!({ "cmd": "echo \"[$SNAP_VAR]\"; type snapfn", "sandbox_permissions": "require_escalated",
                "justification": "x" }),
    );
    let out = output(&r);
    assert!(
        out.contains("[]") && !out.contains("is a function"),
        "the escalated command got the sandbox's login state: {out}"
    );
    assert_eq!(runs(&counter), 1, "the planted profile ran outside the sandbox");
    let message = server.elicitations[0]["message"].as_str().unwrap();
    assert!(message.contains("Shell: /bin/bash -c\n"), "{message}");

    // The state directory inside the workspace: no snapshots, a login shell per command.
    let ws = Workspace::new();
    let counter = ws.path().join("profile-runs");
    std::fs::write(ws.path().join(".profile"), profile(&counter, "")).unwrap();
    let inside = ws.path().join("state");
    let mut server = McpServer::start_with_env(&ws, &[], &[("XDG_STATE_HOME", inside.to_str().unwrap())]);
    server.initialize(false);
    for _ in 0..2 {
        let r = server.call("exec_command", json!({ "cmd": "echo \"[$SNAP_VAR]\"" }));
        assert!(output(&r).contains("[from-profile]"), "{r}");
    }
    assert_eq!(runs(&counter), 2, "without a safe state directory every command starts a login shell");
    assert!(snapshot_files(&inside).is_empty());
}

/// A secret-named variable the startup files export (`SVC_API_KEY`) is not restored by the
/// snapshot, and its value is on no file a sandboxed command can read: not in the sandbox's snapshot, and the
/// snapshots of unsandboxed shells are hidden. The twin: a plain variable of the same profile is restored.
#[test]
fn a_secret_the_startup_files_export_is_neither_restored_nor_stored_where_sandboxed_commands_read() {
    let ws = Workspace::new();
    let home = ws.outside.path().join("home");
    let state = ws.outside.path().join("state");
    std::fs::create_dir(&home).unwrap();
    let counter = ws.path().join("profile-runs");
    let extra = "export SVC_API_KEY=sk-live-0123456789\nexport SSH_AUTH_SOCK=/nonexistent/agent.sock\n";
    std::fs::write(home.join(".profile"), profile(&counter, extra)).unwrap();
    let env = [("HOME", home.to_str().unwrap()), ("XDG_STATE_HOME", state.to_str().unwrap())];
    let mut server = McpServer::start_with_env(&ws, &[], &env);
    server.initialize(true);
    let probe = format!(
        "echo \"[$SNAP_VAR] key=[$SVC_API_KEY] sock=[$SSH_AUTH_SOCK]\"; \
         grep -rl sk-live {0} 2>/dev/null | grep -v profile; ls -A {0}/uexec/snapshots/host; echo done",
        state.display()
    );
    let r = server.call("exec_command", json!({ "cmd": probe }));
    let out = output(&r);
    assert!(out.contains("[from-profile] key=[] sock=[]"), "{out}");
    assert!(out.contains("done") && !out.contains("sk-live") && !out.contains(".sh"), "{out}");
    let files = snapshot_files(&state);
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(!text.contains("sk-live") && !text.contains("SVC_API_KEY"), "{}: {text}", files[0].display());
    assert!(text.contains("SNAP_VAR"), "the twin is restored: {text}");
    // What lies among the snapshots of unsandboxed shells (a login shell outside the sandbox may have read what
    // sandboxed commands cannot) is hidden from them; the twin outside reads it.
    let host = state.join("uexec/snapshots/host");
    std::fs::write(host.join("bash-host-1-0.sh"), "export READ_OUTSIDE=HOST-ONLY\n").unwrap();
    let r = server.call("exec_command", json!({ "cmd": probe }));
    let out = output(&r);
    assert!(
        !out.contains("bash-host") && out.contains("done"),
        "a sandboxed command listed the host snapshots: {out}"
    );
    assert!(std::fs::read_to_string(host.join("bash-host-1-0.sh")).unwrap().contains("HOST-ONLY"));
}
