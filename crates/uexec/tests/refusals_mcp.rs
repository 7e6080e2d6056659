//! What the sandbox refused, end to end through `uexec mcp` and `uexec run`: with the network off a lookup fails
//! at once and the response carries one note naming the name and how to allow it; writes outside the roots, to
//! a protected entry, to another tool's file (with the key that allows it) and reads of a hidden path are noted
//! with the path and the rule, a signal to a process outside the sandbox with the process; each refusal is an
//! audit record; under `on-failure` a denial whose wording the keywords miss is retried only through a question
//! that shows the sandbox's evidence. Each denied probe is paired with an allowed twin that gets no note.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::{Value, json};

/// A name no resolver answers for, looked up by curl.
const LOOKUP: &str = "curl -sS https://pkgs.example.org/";
/// How `uexec run` begins its note (the person's: what was refused and what would allow it).
const NOTE: &str = "sandbox refused: ";

/// The refusal notes of a tool result (the model's: a few words each, on one `[uexec] ` line of their own,
/// beside the result's other uexec lines).
fn refusal_notes(said: &str) -> Vec<&str> {
    said.lines()
        .filter(|l| l.starts_with("[uexec] "))
        .filter(|l| {
            !["[uexec] Sandbox:", "[uexec] Warning:", "[uexec] Process is"].iter().any(|p| l.starts_with(p))
        })
        .collect()
}

/// The audit log's records of `event`.
fn records(audit: &std::path::Path, event: &str) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["event"] == event)
        .collect()
}

/// Wait (with a deadline) until the audit log holds `n` records of `event`.
fn wait_records(audit: &std::path::Path, event: &str, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let found = records(audit, event);
        if found.len() >= n || std::time::Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_lookup_with_the_network_off_fails_at_once_with_one_note_and_a_record() {
    let ws = Workspace::new();
    let audit = ws.outside.path().join("audit.jsonl");
    let mut server = McpServer::start_initialized(&ws, &["--audit-log", audit.to_str().unwrap()], false);
    let r = server.call("exec_command", json!({ "cmd": LOOKUP, "login": false }));
    assert_eq!(exit_code(&r), Some(6), "{r}");
    // The note names the lookup: the offline namespace's responder answered it (REFUSED, at once), instead of
    // a resolver waiting out its timeouts.
    let said = text(&r);
    assert_eq!(
        refusal_notes(&said),
        ["[uexec] network off: pkgs.example.org"],
        "one note, a few words: {said}"
    );
    let refused = wait_records(&audit, "sandbox_refused", 1);
    assert_eq!(refused.len(), 1, "{refused:?}");
    let refusal = &refused[0];
    assert_eq!(refusal["kind"], "lookup", "{refusal}");
    assert_eq!(refusal["target"], "pkgs.example.org", "{refusal}");
    assert_eq!(refusal["reason"], "network off", "{refusal}");
    assert!(refusal["allow"].as_str().unwrap().starts_with("--allow-domain pkgs.example.org"), "{refusal}");
    assert_eq!(refusal["source"], "sandbox", "{refusal}");
    // The twin: a name the machine knows itself resolves, and nothing is noted or recorded.
    let r = server.call("exec_command", json!({ "cmd": "getent hosts localhost", "login": false }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(refusal_notes(&text(&r)).is_empty(), "{r}");
    assert_eq!(records(&audit, "sandbox_refused").len(), 1);
}

#[test]
fn file_and_ptrace_refusals_name_the_path_and_the_rule() {
    let ws = Workspace::new();
    let git = std::process::Command::new("git").args(["init", "-q"]).current_dir(ws.path()).status().unwrap();
    assert!(git.success());
    // HOME is the workspace (see `uexec_command`): its `.ssh` is a hidden location inside the workspace.
    for dir in [".ssh", "public"] {
        std::fs::create_dir_all(ws.path().join(dir)).unwrap();
        std::fs::write(ws.path().join(dir).join("id_rsa"), "KEY\n").unwrap();
    }
    let audit = ws.outside.path().join("audit.jsonl");
    let mut server = McpServer::start_initialized(&ws, &["--audit-log", audit.to_str().unwrap()], false);
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let outside = std::fs::canonicalize(ws.outside.path()).unwrap().join("new.txt");
    // (what is denied, the model's note, the audit record's text, its allowed twin)
    let cases = [
        (
            format!("echo x > {}", outside.display()),
            format!("read-only: {} [from output]", outside.display()),
            format!("write to {} (outside the writable roots)", outside.display()),
            "echo x > inside.txt".to_owned(),
        ),
        (
            "echo '[x]' >> .git/config".to_owned(),
            format!("protected: {}/.git/config", ws_path.display()),
            format!("write to {}/.git/config (protected entry)", ws_path.display()),
            "echo x > .git/description".to_owned(),
        ),
        (
            "echo '{}' > .vscode/tasks.json".to_owned(),
            format!("protected: {}/.vscode/tasks.json [from output]", ws_path.display()),
            format!("write to {}/.vscode/tasks.json (tool file rule .vscode)", ws_path.display()),
            "mkdir -p src/.vscode && echo '{}' > src/.vscode/tasks.json".to_owned(),
        ),
        (
            "strace -f true".to_owned(),
            "ptrace refused [from output]".to_owned(),
            "ptrace (debuggers and tracers are denied)".to_owned(),
            "strace -V".to_owned(),
        ),
        (
            "cat .ssh/id_rsa".to_owned(),
            format!("hidden: {}/.ssh/id_rsa", ws_path.display()),
            format!("access to {0}/.ssh/id_rsa (hidden secret location {0}/.ssh)", ws_path.display()),
            "cat public/id_rsa".to_owned(),
        ),
    ];
    for (i, (denied, note, record_text, allowed)) in cases.iter().enumerate() {
        let r = server.call("exec_command", json!({ "cmd": denied, "login": false }));
        assert_ne!(exit_code(&r), Some(0), "{r}");
        let said = text(&r);
        let notes = refusal_notes(&said);
        assert_eq!(notes.len(), 1, "{said}");
        assert!(notes[0].contains(note.as_str()), "{note}: {said}");
        assert!(!said.contains("KEY"), "{said}");
        let records = wait_records(&audit, "sandbox_refused", i + 1);
        assert_eq!(records.len(), i + 1, "{records:?}");
        let kind = match i {
            3 => "ptrace",
            4 => "access",
            _ => "write",
        };
        assert_eq!(records[i]["kind"], kind, "{records:?}");
        assert_eq!(records[i]["source"], "output", "{records:?}");
        assert_eq!(records[i]["text"].as_str().unwrap(), record_text, "{records:?}");
        let r = server.call("exec_command", json!({ "cmd": allowed, "login": false }));
        assert_eq!(exit_code(&r), Some(0), "{allowed}: {r}");
        assert!(refusal_notes(&text(&r)).is_empty(), "{r}");
    }
    assert!(!outside.exists());
}

/// Under `on-failure` a denial the keywords miss (`Could not resolve host`) is one the sandbox recorded: the
/// retry is asked about with that evidence (here declined: the output comes back with the note). Runs are judged
/// only when they end within the early-exit grace: here it is the whole yield window, so this run is.
#[test]
fn on_failure_asks_to_retry_a_denial_the_keywords_miss_showing_the_evidence() {
    let ws = Workspace::new();
    let grace = whole_window_grace(&ws);
    let mut server =
        McpServer::start_initialized(&ws, &[&grace[0], &grace[1], "--approval-policy", "on-failure"], true);
    server.answers = vec!["deny".into()];
    let r = server.call("exec_command", json!({ "cmd": LOOKUP, "login": false }));
    assert_eq!(exit_code(&r), Some(6), "{r}");
    assert_eq!(server.elicitations.len(), 1, "a run with evidence was not asked about: {r}");
    let message = server.elicitations[0]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("the sandbox refused: lookup of pkgs.example.org (network off)"), "{message}");
    assert!(message.contains("FULL ACCESS"), "{message}");
    let said = text(&r);
    assert!(
        said.contains("[uexec] network off: pkgs.example.org") && said.contains("a person declined"),
        "{said}"
    );
}

#[test]
fn uexec_run_prints_the_note_on_stderr() {
    let ws = Workspace::new();
    let out = uexec_command(&ws, &["run", "--", "bash", "-c", LOOKUP]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert_eq!(
        stderr.matches("[uexec] sandbox refused: lookup of pkgs.example.org (network off)").count(),
        1,
        "{stderr}"
    );
    // The twin: a command that looks nothing up gets no note.
    let out = uexec_command(&ws, &["run", "--", "bash", "-c", "getent hosts localhost"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !stderr.contains(NOTE), "{stderr}");
}

/// A signal to a process outside the sandbox finds none: a server, privileged or not (without CAP_SYS_ADMIN, as
/// most people run it, the sandbox's own user namespace holds the PID namespace), runs its commands in a PID
/// namespace that holds no process outside the sandbox, so the kernel answers "No such process", and there is
/// nothing to note or record. Where no PID namespace can be made, Landlock's signal scope refuses it and the note
/// names it: `environments.rs`, in the container. The twin: a signal to the command's own process is delivered.
#[test]
fn a_signal_to_a_process_outside_the_sandbox_finds_none() {
    let ws = Workspace::new();
    let outside = std::process::id();
    let unprivileged = {
        let mut command = std::process::Command::new("setpriv");
        command.args([
            "--bounding-set=-sys_admin",
            "--inh-caps=-sys_admin",
            "--",
            uexec(),
            "mcp",
            "--network",
        ]);
        command
    };
    let mut privileged = std::process::Command::new(uexec());
    privileged.args(["mcp", "--network"]);
    for (name, mut command) in [("without CAP_SYS_ADMIN", unprivileged), ("privileged", privileged)] {
        let audit = ws.outside.path().join(format!("audit-{}.jsonl", name.len()));
        command.args(["--audit-log", audit.to_str().unwrap()]);
        let mut server = McpServer::start_command(&ws, command);
        server.initialize(false);
        let r = server.call("exec_command", json!({ "cmd": format!("kill -0 {outside}"), "login": false }));
        assert_eq!(exit_code(&r), Some(1), "{name}: {r}");
        assert!(text(&r).contains("No such process") && refusal_notes(&text(&r)).is_empty(), "{name}: {r}");
        let r = server.call("exec_command", json!({ "cmd": "kill -0 $$ && echo delivered", "login": false }));
        assert!(exit_code(&r) == Some(0) && text(&r).contains("delivered"), "{name}: {r}");
        assert!(refusal_notes(&text(&r)).is_empty(), "{name}: {r}");
        drop(server);
        assert!(records(&audit, "sandbox_refused").is_empty(), "{name}");
    }
}

/// The protections a response lists (`list_sessions`) say where the notes come from, and the runs agree: a
/// privileged server records lookups itself and notes one; so does a server without CAP_SYS_ADMIN, whose offline
/// namespace is made in the sandbox's user namespace. Each beside its twin, an ordinary failure that is not
/// noted. (Where no namespace can be made, the keyword fallback: `environments.rs` in the container.)
#[test]
fn the_protections_say_where_refusals_are_known_from() {
    let evidence = |server: &mut McpServer| -> Value {
        let listed = server.call("list_sessions", json!({}));
        let protections = listed["structuredContent"]["protections"]["protections"].as_array().cloned();
        protections
            .unwrap_or_default()
            .into_iter()
            .find(|p| p["name"] == "refusal_evidence")
            .unwrap_or_else(|| panic!("{listed}"))
    };
    let ws = Workspace::new();
    let mut privileged = McpServer::start_initialized(&ws, &[], false);
    let known = evidence(&mut privileged);
    assert_eq!(known["status"], "enforced", "{known}");
    assert!(
        known["detail"].as_str().unwrap().contains("name lookups (the offline namespace's responder)"),
        "{known}"
    );
    let r = privileged.call("exec_command", json!({ "cmd": LOOKUP, "login": false }));
    assert_eq!(refusal_notes(&text(&r)).len(), 1, "{r}");

    let mut command = std::process::Command::new("setpriv");
    command.args(["--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--", uexec(), "mcp"]);
    let mut unprivileged = McpServer::start_command(&ws, command);
    unprivileged.initialize(false);
    let known = evidence(&mut unprivileged);
    assert_eq!(known["status"], "enforced", "{known}");
    assert!(
        known["detail"].as_str().unwrap().contains("name lookups (the offline namespace's responder)"),
        "{known}"
    );
    let r = unprivileged.call("exec_command", json!({ "cmd": LOOKUP, "login": false }));
    assert_ne!(exit_code(&r), Some(0), "{r}");
    let said = text(&r);
    assert_eq!(
        refusal_notes(&said),
        ["[uexec] network off: pkgs.example.org"],
        "the sandbox's own record: {r}"
    );
    // The twin: a file the person cannot read either (the sandbox lets every command read it) is not the
    // sandbox's refusal: no note, whatever the wording.
    let denied = "echo 'cat: /etc/shadow: Permission denied' >&2; exit 1";
    let r = unprivileged.call("exec_command", json!({ "cmd": denied, "login": false }));
    assert_ne!(exit_code(&r), Some(0), "{r}");
    assert!(refusal_notes(&text(&r)).is_empty(), "{r}");
}
