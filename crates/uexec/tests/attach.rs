//! The person's way to the sessions: `uexec sessions`, `uexec attach` (driven under tmux: `send-keys`,
//! `capture-pane`), `uexec kill`, and the control socket's must-fail probes (a sandboxed command, another user, the
//! proxy's network namespace), each paired with an allowed twin.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{McpServer, Workspace, exit_code, output, session_id, uexec, uexec_command};
use serde_json::{Value, json};

const PYTHON: &str = "/usr/bin/python3";
const DEADLINE: Duration = Duration::from_secs(30);

/// The runtime directory of the servers and clients of one test (outside every writable root: the control
/// sockets go there).
fn runtime_dir(ws: &Workspace) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = ws.outside.path().join("run");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).unwrap();
    dir
}

fn server(ws: &Workspace, args: &[&str]) -> McpServer {
    let run = runtime_dir(ws);
    let mut server = McpServer::start_with_env(ws, args, &[("XDG_RUNTIME_DIR", run.to_str().unwrap())]);
    server.initialize(false);
    server
}

/// The control socket of the server with `pid`, once it exists.
fn socket_of(ws: &Workspace, pid: u32) -> PathBuf {
    let path = runtime_dir(ws).join("uexec/control").join(format!("{pid}.sock"));
    let deadline = Instant::now() + DEADLINE;
    while !path.exists() {
        assert!(Instant::now() < deadline, "no control socket at {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    path
}

/// `uexec <args>` as the person, with the test's runtime directory.
fn person(ws: &Workspace, args: &[&str]) -> Output {
    uexec_command(ws, args).env("XDG_RUNTIME_DIR", runtime_dir(ws)).output().unwrap()
}

fn listing(ws: &Workspace) -> Vec<Value> {
    let out = person(ws, &["sessions", "--json"]);
    assert!(out.status.success(), "uexec sessions failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

/// The listed session `id` of the server with `pid`.
fn listed(ws: &Workspace, pid: u32, id: u64) -> Option<Value> {
    listing(ws)
        .into_iter()
        .filter(|s| s["server"]["pid"] == json!(pid))
        .flat_map(|s| s["sessions"].as_array().cloned().unwrap_or_default())
        .find(|s| s["session_id"] == json!(id))
}

fn wait_listed(ws: &Workspace, pid: u32, id: u64, state: &str) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let found = listed(ws, pid, id);
        if let Some(session) = found.as_ref().filter(|s| s["state"] == json!(state)) {
            return session.clone();
        }
        assert!(Instant::now() < deadline, "session {id} never {state}: {found:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Poll the model's side of session `id` until its output holds `needle`; everything it read.
fn model_until(server: &mut McpServer, id: u64, needle: &str) -> (String, Option<i64>) {
    let deadline = Instant::now() + DEADLINE;
    let mut seen = String::new();
    loop {
        let result =
            server.call("write_stdin", json!({ "session_id": id, "chars": "", "yield_time_ms": 5000 }));
        seen.push_str(&output(&result));
        let code = exit_code(&result);
        if seen.contains(needle) || code.is_some() || Instant::now() > deadline {
            return (seen, code);
        }
    }
}

/// A tmux server of its own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// A detached 100x30 session running `command` (then a shell that waits, so the pane stays readable).
    fn start(command: &str) -> Tmux {
        let socket = format!("uexec-attach-{}-{}", std::process::id(), rand_suffix());
        let tmux = Tmux { socket };
        let script = format!("{command}; echo PANE-DONE; sleep 120");
        let status = tmux
            .cmd(&["-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "100", "-y", "30", &script])
            .status()
            .unwrap();
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-L").arg(&self.socket).args(args);
        command
    }

    fn capture(&self) -> String {
        let out = self.cmd(&["capture-pane", "-p", "-t", "t"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until the pane shows `needle`; the pane's text.
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let screen = self.capture();
            if screen.contains(needle) {
                return screen;
            }
            assert!(Instant::now() < deadline, "the pane never showed {needle:?}:\n{screen}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status().unwrap().success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        % 1_000_000_007
}

/// The shell command line that runs `uexec <args>` as the person, with the test's environment.
fn person_line(ws: &Workspace, args: &str) -> String {
    format!(
        "env HOME={home} XDG_CONFIG_HOME={home}/.no-config XDG_RUNTIME_DIR={run} {uexec} {args}",
        home = ws.path().display(),
        run = runtime_dir(ws).display(),
        uexec = uexec(),
    )
}

#[test]
fn a_person_attaches_to_a_repl_types_a_line_detaches_and_the_model_reads_the_result() {
    let ws = Workspace::new();
    let mut server = server(&ws, &["--sandbox", "danger-full-access"]);
    let first = server.call(
        "exec_command",
        json!({ "cmd": format!("{PYTHON} -q"), "tty": true, "login": false, "yield_time_ms": 10_000 }),
    );
    let id = session_id(&first);
    assert!(output(&first).contains(">>>"), "{first}");
    wait_listed(&ws, server.pid(), id, "waiting_for_input");

    let tmux = Tmux::start(&person_line(&ws, &format!("attach --write {id}")));
    tmux.wait_for("Ctrl-] detaches");
    tmux.wait_for(">>>");
    // A second watcher at the same time, read-only.
    let watcher = Tmux::start(&person_line(&ws, &format!("attach {id}")));
    watcher.wait_for("read-only");
    tmux.keys(&["x = 6 * 7", "Enter"]);
    tmux.keys(&["print('answer', x + 0)", "Enter"]);
    tmux.wait_for("answer 42");
    watcher.wait_for("answer 42");
    // Typing into the read-only watcher reaches nobody; Ctrl-C there only detaches it.
    watcher.keys(&["print('never typed')", "Enter", "C-c"]);
    watcher.wait_for("detached from session");
    tmux.keys(&["C-]"]);
    let screen = tmux.wait_for("PANE-DONE");
    assert!(screen.contains("detached from session"), "{screen}");

    let (seen, code) = model_until(&mut server, id, "answer 42");
    assert!(seen.contains("answer 42"), "the model reads what the person's line printed: {seen:?}");
    assert_eq!(code, None, "the REPL still runs");
    assert!(!seen.contains("never typed"), "{seen:?}");
    assert!(!seen.contains('\u{1d}'), "the detach key never reached the program: {seen:?}");
    let after = server.call(
        "write_stdin",
        json!({ "session_id": id, "chars": "print('model', 1)\n", "yield_time_ms": 2000 }),
    );
    assert!(output(&after).contains("model 1"), "the model keeps the session: {after}");
}

#[test]
fn a_password_typed_by_the_person_at_an_echo_off_prompt_never_reaches_the_model_nor_the_audit_log() {
    let ws = Workspace::new();
    let audit = ws.outside.path().join("audit.jsonl");
    let mut server =
        server(&ws, &["--sandbox", "danger-full-access", "--audit-log", audit.to_str().unwrap()]);
    let script = format!("{PYTHON} -c 'import getpass; print(\"len\", len(getpass.getpass()))'");
    let first = server
        .call("exec_command", json!({ "cmd": script, "tty": true, "login": false, "yield_time_ms": 10_000 }));
    let id = session_id(&first);
    assert!(output(&first).contains("Password:"), "{first}");

    let tmux = Tmux::start(&person_line(&ws, &format!("attach --write {id}")));
    tmux.wait_for("Password:");
    tmux.keys(&["hunter2-swordfish", "Enter"]);
    let screen = tmux.wait_for("PANE-DONE");
    assert!(screen.contains("len 17") && screen.contains("exited with code 0"), "{screen}");
    assert!(!screen.contains("hunter2"), "no echo: {screen}");

    let (seen, code) = model_until(&mut server, id, "len 17");
    assert!(seen.contains("len 17"), "{seen:?}");
    assert_eq!(code, Some(0));
    assert!(!seen.contains("hunter2"), "the model never reads the password: {seen:?}");
    drop(server);
    let log = std::fs::read_to_string(&audit).unwrap();
    assert!(!log.contains("hunter2"), "nor does the audit log: {log}");
    let records: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = records.iter().filter_map(|r| r["event"].as_str()).collect();
    assert!(events.contains(&"operator_attach") && events.contains(&"operator_detach"), "{events:?}");
    let typed: u64 =
        records.iter().filter(|r| r["event"] == "operator_input").filter_map(|r| r["bytes"].as_u64()).sum();
    assert_eq!(typed, "hunter2-swordfish\r".len() as u64, "how much was typed is recorded: {log}");
}

/// The model's `stty size` of PTY session `id`.
fn stty_size(server: &mut McpServer, id: u64, marker: &str) -> String {
    let (seen, code) = model_until_sent(server, id, &format!("echo {marker} $(stty size)\n"), marker);
    assert_eq!(code, None, "{seen:?}");
    seen.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{marker} ")).map(str::to_owned))
        .unwrap_or_else(|| panic!("no size in {seen:?}"))
}

/// Send `chars` to session `id`, then poll until its output holds `needle` after them.
fn model_until_sent(server: &mut McpServer, id: u64, chars: &str, needle: &str) -> (String, Option<i64>) {
    let first =
        server.call("write_stdin", json!({ "session_id": id, "chars": chars, "yield_time_ms": 2000 }));
    let mut seen = output(&first);
    if let Some(at) = seen.find(chars.trim_end()) {
        seen = seen[at + chars.trim_end().len()..].to_owned();
    }
    // The echoed command line holds the needle too: wait for a line that begins with it.
    let printed = |seen: &str| seen.lines().any(|l| l.trim().starts_with(needle));
    if printed(&seen) {
        return (seen, exit_code(&first));
    }
    let (more, code) = model_until(server, id, needle);
    seen.push_str(&more);
    (seen, code)
}

#[test]
fn a_pipe_session_shows_its_output_and_a_watchers_size_never_resizes_a_session() {
    let ws = Workspace::new();
    let mut server = server(&ws, &["--sandbox", "danger-full-access"]);
    // A pipe session (stdin closed): what it printed before the person attached, and what it prints once the
    // test lets it go on.
    let script = "echo pipe-before; until [ -e go ]; do sleep 0.05; done; echo pipe-after-go; sleep 60";
    let pipe = server.call("exec_command", json!({ "cmd": script, "login": false, "yield_time_ms": 500 }));
    let pipe_id = session_id(&pipe);
    assert!(output(&pipe).contains("pipe-before"), "{pipe}");
    let watcher = Tmux::start(&person_line(&ws, &format!("attach {pipe_id}")));
    watcher.wait_for("pipe-before");
    std::fs::write(ws.path().join("go"), "").unwrap();
    let screen = watcher.wait_for("pipe-after-go");
    // Each line starts at the left edge: the program's bare line feeds return the carriage on the person's raw
    // terminal (no staircase).
    for line in ["pipe-before", "pipe-after-go"] {
        assert!(screen.lines().any(|l| l.starts_with(line)), "{line:?} is not at the left edge:\n{screen}");
    }
    let (seen, _) = model_until(&mut server, pipe_id, "pipe-after-go");
    assert!(seen.contains("pipe-after-go"), "the model still reads it: {seen:?}");
    // The keyboard is a terminal's only: a pipe session refuses `--write`, saying why.
    let typed = person(&ws, &["attach", "--write", &pipe_id.to_string()]);
    assert!(!typed.status.success(), "{typed:?}");
    assert!(String::from_utf8_lossy(&typed.stderr).contains("no terminal to type into"), "{typed:?}");

    // A PTY session keeps its own size whatever the watchers' terminals are, and however they change.
    let shell = server.call(
        "exec_command",
        json!({ "cmd": "bash --norc --noprofile", "tty": true, "login": false, "yield_time_ms": 1000 }),
    );
    let shell_id = session_id(&shell);
    let before = stty_size(&mut server, shell_id, "SIZE-A");
    let keyboard = Tmux::start(&person_line(&ws, &format!("attach --write {shell_id}")));
    keyboard.wait_for("Ctrl-] detaches");
    let pane =
        keyboard.cmd(&["display-message", "-p", "-t", "t", "#{pane_height} #{pane_width}"]).output().unwrap();
    let pane = String::from_utf8_lossy(&pane.stdout).trim().to_owned();
    assert_ne!(pane, before, "the watcher's terminal differs from the session's");
    assert_eq!(stty_size(&mut server, shell_id, "SIZE-B"), before, "attaching resized the session");
    assert!(keyboard.cmd(&["resize-window", "-t", "t", "-x", "61", "-y", "17"]).status().unwrap().success());
    let deadline = Instant::now() + DEADLINE;
    loop {
        let out = keyboard.cmd(&["display-message", "-p", "-t", "t", "#{pane_width}"]).output().unwrap();
        if String::from_utf8_lossy(&out.stdout).trim() == "61" {
            break;
        }
        assert!(Instant::now() < deadline, "tmux never resized its window");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The person types through the resized terminal, and the session still reports its own size.
    keyboard.keys(&["echo SIZE-C $(stty size)", "Enter"]);
    keyboard.wait_for(&format!("SIZE-C {before}"));
    assert_eq!(
        stty_size(&mut server, shell_id, "SIZE-D"),
        before,
        "the watcher's resize reached the session"
    );
}

#[test]
fn an_exited_pipe_session_shows_its_last_output_and_its_exit_code_and_a_live_twin_streams() {
    let ws = Workspace::new();
    let mut server = server(&ws, &["--sandbox", "danger-full-access"]);
    let script = "for i in 1 2 3; do echo exited-line-$i; done; until [ -e go ]; do sleep 0.05; done; exit 3";
    let ended = session_id(
        &server.call("exec_command", json!({ "cmd": script, "login": false, "yield_time_ms": 300 })),
    );
    let live = session_id(&server.call(
        "exec_command",
        json!({ "cmd": "for i in 1 2 3; do echo live-line-$i; done; sleep 60", "login": false, "yield_time_ms": 300 }),
    ));
    std::fs::write(ws.path().join("go"), "").unwrap();
    // Exited, and still held for the model's next call: listed as such.
    let listed = wait_listed(&ws, server.pid(), ended, "exited");
    assert_eq!(listed["exit_code"], json!(3), "{listed}");

    let watcher = Tmux::start(&person_line(&ws, &format!("attach {ended}")));
    let screen = watcher.wait_for("PANE-DONE");
    for line in ["exited-line-1", "exited-line-2", "exited-line-3"] {
        assert!(
            screen.lines().any(|l| l.starts_with(line)),
            "{line:?} not shown at the left edge:\n{screen}"
        );
    }
    assert!(screen.contains(&format!("session {ended} exited with code 3")), "{screen}");

    // The live twin: the same output, and no exit.
    let twin = Tmux::start(&person_line(&ws, &format!("attach {live}")));
    let screen = twin.wait_for("live-line-3");
    assert!(screen.lines().any(|l| l.starts_with("live-line-2")), "{screen}");
    assert!(!screen.contains("exited with code"), "{screen}");
    twin.keys(&["C-]"]);
    twin.wait_for("PANE-DONE");

    // The model still reads the exited session's end.
    let (seen, code) = model_until(&mut server, ended, "exited-line-3");
    assert_eq!(code, Some(3), "{seen:?}");
}

/// Send `exec_command` for `cmd` without waiting for its answer; the request's id.
fn exec_in_flight(server: &mut McpServer, cmd: &str) -> Value {
    let id = json!(server.fresh_id());
    let params =
        json!({ "name": "exec_command", "arguments": { "cmd": cmd, "login": false, "yield_time_ms": 2000 } });
    server.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }));
    id
}

/// The questions `uexec sessions --json` lists for the server with `pid`.
fn questions_of(ws: &Workspace, pid: u32) -> Vec<Value> {
    listing(ws)
        .into_iter()
        .filter(|s| s["server"]["pid"] == json!(pid))
        .flat_map(|s| s["questions"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn a_question_waiting_for_a_person_is_listed_and_answered_once_from_the_terminal() {
    let ws = Workspace::new();
    let audit = ws.outside.path().join("audit.jsonl");
    let mut server = McpServer::start_with_env(
        &ws,
        &["--approval-policy", "untrusted", "--audit-log", audit.to_str().unwrap()],
        &[("XDG_RUNTIME_DIR", runtime_dir(&ws).to_str().unwrap())],
    );
    server.initialize(true);
    let pid = server.pid();
    let _ = socket_of(&ws, pid);

    // Denied from the terminal: the command does not run.
    let first = exec_in_flight(&mut server, "echo denied-ran > denied.txt");
    let asked = server.wait_method("elicitation/create");
    let questions = questions_of(&ws, pid);
    assert_eq!(questions.len(), 1, "{questions:?}");
    let question = &questions[0];
    assert_eq!(question["kind"], json!("run"));
    assert_eq!(question["command"], json!("echo denied-ran > denied.txt"));
    assert_eq!(question["cwd"], json!(ws.path().to_str().unwrap()));
    assert!(question["text"].as_str().unwrap().contains("echo denied-ran"), "{question}");
    // The table shows every fact and how to answer.
    let table = person(&ws, &["sessions"]);
    let table = String::from_utf8_lossy(&table.stdout);
    let qid = question["id"].as_u64().unwrap();
    assert!(table.contains(&format!("QUESTION {qid} of server {pid}")), "{table}");
    assert!(table.contains("command:   echo denied-ran > denied.txt"), "{table}");
    assert!(table.contains(&format!("directory: {}", ws.path().display())), "{table}");
    // The answers are the client's form's: under untrusted, a sandboxed run's rerun without the sandbox is its own.
    assert!(
        table.contains(&format!("uexec answer {pid} {qid} approve|approve-retry|approve-session|deny")),
        "{table}"
    );
    assert!(
        table.contains("approve-retry    Approve once, and if the sandbox blocks it, rerun it WITHOUT"),
        "{table}"
    );
    let denied = person(&ws, &["answer", &pid.to_string(), &qid.to_string(), "deny"]);
    assert!(denied.status.success(), "{denied:?}");
    let response = server.wait_response(&first);
    assert!(response.to_string().contains("rejected"), "{response}");
    assert!(!ws.path().join("denied.txt").exists(), "a denied command ran");
    // The client is told to withdraw its form: the question was answered elsewhere.
    let withdrawn = server.wait_method("notifications/cancelled");
    assert_eq!(withdrawn["params"]["requestId"], asked["id"], "{withdrawn} {asked}");
    // Answered once: the same question again is refused, and the client's late answer decides nothing.
    let again = person(&ws, &["answer", &pid.to_string(), &qid.to_string(), "approve"]);
    assert!(!again.status.success(), "{again:?}");
    assert!(String::from_utf8_lossy(&again.stderr).contains("answered already"), "{again:?}");
    server.answer_elicitation(&asked);
    assert!(!ws.path().join("denied.txt").exists(), "the client's late answer ran it");
    assert!(questions_of(&ws, pid).is_empty());

    // Its allowed twin: approved from the terminal, it runs.
    let second = exec_in_flight(&mut server, "echo approved-ran > approved.txt; cat approved.txt");
    server.wait_method("elicitation/create");
    let qid = questions_of(&ws, pid)[0]["id"].as_u64().unwrap();
    let approved = person(&ws, &["answer", &pid.to_string(), &qid.to_string(), "approve"]);
    assert!(approved.status.success(), "{approved:?}");
    let response = server.wait_response(&second);
    assert!(response.to_string().contains("approved-ran"), "{response}");

    // The history says who decided what, and so does the audit log.
    let history = person(&ws, &["sessions", "--history"]);
    let history = String::from_utf8_lossy(&history.stdout);
    let denied_line =
        history.lines().find(|l| l.contains("denied-ran")).unwrap_or_else(|| panic!("{history}"));
    assert!(denied_line.contains("denied") && denied_line.contains("by control"), "{history}");
    let approved_line =
        history.lines().find(|l| l.contains("approved-ran")).unwrap_or_else(|| panic!("{history}"));
    assert!(approved_line.contains("approved ") && approved_line.contains("by control"), "{history}");
    drop(server);
    let log = std::fs::read_to_string(&audit).unwrap();
    let answered: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "question_answered")
        .collect();
    let by: Vec<(&str, &str)> =
        answered.iter().map(|r| (r["decision"].as_str().unwrap(), r["by"].as_str().unwrap())).collect();
    assert_eq!(by, vec![("denied", "control"), ("approved", "control")], "{log}");
}

#[test]
fn sessions_lists_every_server_and_kill_ends_one_session_or_all_of_a_server() {
    let ws = Workspace::new();
    let audit_one = ws.outside.path().join("one.jsonl");
    let audit_two = ws.outside.path().join("two.jsonl");
    let mut one =
        server(&ws, &["--sandbox", "danger-full-access", "--audit-log", audit_one.to_str().unwrap()]);
    let mut two = server(&ws, &["--audit-log", audit_two.to_str().unwrap()]);
    let a = session_id(&one.call(
        "exec_command",
        json!({ "cmd": "echo alpha; sleep 60", "tty": true, "login": false, "yield_time_ms": 500 }),
    ));
    let b =
        session_id(&two.call("exec_command", json!({ "cmd": "echo beta; sleep 61", "yield_time_ms": 500 })));
    let c = session_id(&two.call("exec_command", json!({ "cmd": "sleep 62", "yield_time_ms": 250 })));
    let la = wait_listed(&ws, one.pid(), a, "running");
    assert_eq!(la["cmd"], "echo alpha; sleep 60");
    assert_eq!(la["tty"], true);
    assert_eq!(la["sandbox"], "none");
    assert!(la["output_bytes"].as_u64().unwrap() >= 6, "{la}");
    let lb = wait_listed(&ws, two.pid(), b, "running");
    assert_ne!(lb["sandbox"], "none", "the second server's commands are sandboxed: {lb}");
    assert_eq!(lb["cwd"], json!(ws.path().canonicalize().unwrap()));
    // The table says the same for people.
    let table = String::from_utf8(person(&ws, &["sessions"]).stdout).unwrap();
    for needle in ["SERVER", "SESSION", &a.to_string(), &b.to_string(), "echo alpha; sleep 60", "(stdio)"] {
        assert!(table.contains(needle), "{needle:?} in\n{table}");
    }

    let killed = person(&ws, &["kill", &a.to_string()]);
    assert!(killed.status.success(), "{}", String::from_utf8_lossy(&killed.stderr));
    let after = one.call("write_stdin", json!({ "session_id": a, "chars": "", "yield_time_ms": 5000 }));
    assert!(exit_code(&after).is_some(), "the model reads that the session ended: {after}");

    let all = person(&ws, &["kill", "--server", &two.pid().to_string()]);
    assert!(String::from_utf8_lossy(&all.stdout).contains("killed 2 sessions"), "{all:?}");
    for id in [b, c] {
        let after = two.call("write_stdin", json!({ "session_id": id, "chars": "", "yield_time_ms": 5000 }));
        assert!(exit_code(&after).is_some(), "{after}");
    }
    // Each kill is the server's audit record: which session, whose request, how it ended.
    let kills = |audit: &Path| -> Vec<Value> {
        std::fs::read_to_string(audit)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["event"] == "operator_kill")
            .collect()
    };
    let by_one = kills(&audit_one);
    assert_eq!(by_one.len(), 1, "{by_one:?}");
    assert_eq!(by_one[0]["session_id"], json!(a), "{by_one:?}");
    assert_eq!(by_one[0]["client"], 0, "{by_one:?}");
    assert!(by_one[0]["peer_pid"].as_u64().is_some_and(|p| p > 0), "the person's uexec: {by_one:?}");
    assert!(by_one[0]["exit_code"].is_i64(), "{by_one:?}");
    let by_two = kills(&audit_two);
    let mut ids: Vec<u64> = by_two.iter().map(|r| r["session_id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    let mut expected = vec![b, c];
    expected.sort_unstable();
    assert_eq!(ids, expected, "{by_two:?}");
    assert!(by_two.iter().all(|r| r["all"] == true), "{by_two:?}");
    let unknown = person(&ws, &["attach", "99999"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no live session 99999"), "{unknown:?}");
}

/// A probe that connects to the unix socket `argv[1]`, asks for the listing and says what happened: `ANSWER`,
/// `NOANSWER` (connected, then closed without a word) or `REFUSED <error>`.
const PROBE: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("REFUSED", type(e).__name__, e.errno); sys.exit(0)
try:
    s.sendall(b'{"op":"list"}\n')
except OSError:
    pass  # closed before the request was read: the answer below is then none
data = b""
while True:
    try:
        piece = s.recv(65536)
    except OSError:
        break
    if not piece:
        break
    data += piece
print("ANSWER" if b'"ok":true' in data else "NOANSWER")
"#;

/// A listener in `dir` that answers like a control socket (the allowed twin of a sandboxed probe).
fn twin_listener(dir: &Path) -> PathBuf {
    let path = dir.join("twin.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut byte = [0u8; 1];
            while stream.read(&mut byte).map(|n| n == 1 && byte[0] != b'\n').unwrap_or(false) {}
            let _ = stream.write_all(b"{\"ok\":true}\n");
        }
    });
    path
}

fn probe_in_session(server: &mut McpServer, ws: &Workspace, target: &Path) -> String {
    std::fs::write(ws.path().join("probe.py"), PROBE).unwrap();
    let result = server.call(
        "exec_command",
        json!({ "cmd": format!("{PYTHON} probe.py {}", target.display()), "login": false, "yield_time_ms": 20_000 }),
    );
    output(&result)
}

#[test]
fn a_sandboxed_command_cannot_reach_any_control_socket_but_reaches_its_own() {
    let ws = Workspace::new();
    let mut server = server(&ws, &[]);
    let socket = socket_of(&ws, server.pid());
    let twin = twin_listener(ws.path());
    let denied = probe_in_session(&mut server, &ws, &socket);
    assert!(denied.contains("REFUSED"), "a sandboxed command reached the control socket: {denied}");
    let allowed = probe_in_session(&mut server, &ws, &twin);
    assert!(allowed.contains("ANSWER") && !allowed.contains("NOANSWER"), "the twin: {allowed}");
    // The directory is there, and empty, for the sandbox.
    let dir = socket.parent().unwrap();
    let listed = server.call("exec_command", json!({ "cmd": format!("ls -a {} | wc -l; ls -a {}", dir.display(), ws.path().display()), "login": false }));
    let text = output(&listed);
    assert!(text.trim_start().starts_with("2\n") && text.contains("twin.sock"), "{text}");
    // And the person reaches it.
    let out = Command::new(PYTHON).arg("-c").arg(PROBE).arg(&socket).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ANSWER");
}

#[test]
fn the_proxys_network_namespace_does_not_reach_the_control_socket() {
    let ws = Workspace::new();
    let mut server = server(&ws, &["--allow-domain", "example.com"]);
    let socket = socket_of(&ws, server.pid());
    let twin = twin_listener(ws.path());
    let env = server.call("exec_command", json!({ "cmd": "echo $HTTPS_PROXY", "login": false }));
    assert!(output(&env).contains("127.0.0.1:"), "the command runs behind the proxy: {env}");
    let denied = probe_in_session(&mut server, &ws, &socket);
    assert!(denied.contains("REFUSED"), "{denied}");
    let allowed = probe_in_session(&mut server, &ws, &twin);
    assert!(allowed.contains("ANSWER") && !allowed.contains("NOANSWER"), "{allowed}");
}

fn probe_as(uid: Option<u32>, target: &Path) -> String {
    let mut command = Command::new(PYTHON);
    command.arg("-c").arg(PROBE).arg(target).current_dir("/");
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let out = command.output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn another_user_cannot_use_the_control_socket_even_through_a_link_it_can_open() {
    const NOBODY: u32 = 65534;
    let ws = Workspace::new();
    let server = server(&ws, &[]);
    let socket = socket_of(&ws, server.pid());
    // The directory (0700) stops another user.
    assert!(
        probe_as(Some(NOBODY), &socket).starts_with("REFUSED PermissionError"),
        "{}",
        probe_as(Some(NOBODY), &socket)
    );
    assert_eq!(probe_as(None, &socket), "ANSWER");
    // A link to the socket where anyone may open it: the server's peer check still refuses another user.
    use std::os::unix::fs::PermissionsExt;
    let open = ws.outside.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(ws.outside.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = open.join("link.sock");
    std::fs::hard_link(&socket, &link).unwrap();
    std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(
        probe_as(Some(NOBODY), &link),
        "NOANSWER",
        "another user connected and was refused without a word"
    );
    assert_eq!(probe_as(None, &link), "ANSWER", "the twin: the same user through the same link");
    drop(server);
}

/// The bytes the attach's skip notes in `text` add up to.
fn skipped_in(text: &str) -> u64 {
    text.split("[uexec: ")
        .skip(1)
        .filter(|note| note.contains(" bytes of output skipped: this attach fell behind]"))
        .filter_map(|note| note.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
#[allow(clippy::print_stderr)]
fn a_stalled_attach_to_a_flooding_session_costs_the_server_a_bounded_queue_and_is_told_what_it_missed() {
    let ws = Workspace::new();
    let mut server = server(&ws, &["--sandbox", "danger-full-access"]);
    socket_of(&ws, server.pid());
    let id = session_id(&server.call(
        "exec_command",
        json!({ "cmd": "exec cat /dev/zero", "login": false, "yield_time_ms": 250, "max_output_tokens": 16 }),
    ));
    let output_bytes = || listed(&ws, server.pid(), id).unwrap()["output_bytes"].as_u64().unwrap();
    // The flood alone: the session's own buffers, then steady.
    let start = output_bytes();
    let flood_deadline = Instant::now() + Duration::from_secs(300);
    while output_bytes() < start + (64 << 20) {
        assert!(Instant::now() < flood_deadline, "the flood stalled");
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = rss_kib(server.pid());
    // A person attaches and stops reading (a terminal stopped with Ctrl-S): nothing reads the attach's stdout.
    let mut attach = uexec_command(&ws, &["attach", &id.to_string()])
        .env("XDG_RUNTIME_DIR", runtime_dir(&ws))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Past what a queue of 4096 whole read chunks (64 KiB each) could hold.
    let attached_at = output_bytes();
    let mut peak = before;
    while output_bytes() < attached_at + (320 << 20) {
        assert!(Instant::now() < flood_deadline, "the flood stalled");
        peak = peak.max(rss_kib(server.pid()));
        std::thread::sleep(Duration::from_millis(20));
    }
    peak = peak.max(rss_kib(server.pid()));
    eprintln!(
        "server RSS with a stalled attach: {before} KiB before, {peak} KiB at most over 320 MiB of output"
    );
    assert!(
        peak <= before + 32 * 1024,
        "the server grew from {before} KiB to {peak} KiB with a stalled watcher (bound: + 32 MiB)"
    );
    // Reading again, the person is told how much output it missed (in one note or several: while the attach was
    // stalling, the pipes may have taken a little more now and then).
    let mut stdout = attach.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buffer = vec![0u8; 1 << 16];
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline {
            let n = stdout.read(&mut buffer).unwrap_or(0);
            if n == 0 {
                break;
            }
            // Only the notes between the zeros matter: keep what is not a NUL.
            seen.extend(buffer[..n].iter().copied().filter(|b| *b != 0));
            let text = String::from_utf8_lossy(&seen).into_owned();
            if skipped_in(&text) >= 64 << 20 {
                return text;
            }
        }
        panic!("the attach never said it skipped 64 MiB: {:?}", String::from_utf8_lossy(&seen));
    });
    let seen = reader.join().unwrap();
    assert!(seen.contains("bytes of output skipped: this attach fell behind]"), "{seen:?}");
    let closed = server.call("close_session", json!({ "session_id": id }));
    assert!(exit_code(&closed).is_some(), "{closed}");
    // Its reader is gone: the attach ends on its next write, or now.
    let _ = attach.kill();
    let _ = attach.wait();
}

/// Sends SIGCONT to a stopped server when dropped (the test fails or not), so it can end.
struct Stopped(u32);

impl Stopped {
    fn stop(pid: u32) -> Stopped {
        assert!(Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap().success());
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0.to_string()]).status();
    }
}

#[test]
fn sessions_lists_the_servers_that_answer_and_names_a_stopped_one() {
    let ws = Workspace::new();
    let mut live = server(&ws, &["--sandbox", "danger-full-access"]);
    let mut stopped = server(&ws, &["--sandbox", "danger-full-access"]);
    let id = session_id(
        &live.call("exec_command", json!({ "cmd": "exec cat", "tty": true, "yield_time_ms": 250 })),
    );
    let other = session_id(
        &stopped.call("exec_command", json!({ "cmd": "exec cat", "tty": true, "yield_time_ms": 250 })),
    );
    socket_of(&ws, live.pid());
    socket_of(&ws, stopped.pid());
    wait_listed(&ws, stopped.pid(), other, "waiting_for_input");
    let _stopped = Stopped::stop(stopped.pid());
    for json in [false, true] {
        let mut args = vec!["sessions"];
        if json {
            args.push("--json");
        }
        let mut child = uexec_command(&ws, &args)
            .env("XDG_RUNTIME_DIR", runtime_dir(&ws))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let (out, err, status) = common::collect_output(&mut child, DEADLINE);
        let status = status.unwrap_or_else(|| panic!("`uexec {args:?}` never ended with a stopped server"));
        assert!(status.success(), "{status}: {err}");
        let note = format!("server {} did not answer", stopped.pid());
        if json {
            let servers: Vec<Value> = serde_json::from_str(&out).unwrap();
            let pids: Vec<&Value> = servers.iter().map(|s| &s["server"]["pid"]).collect();
            assert_eq!(pids, [&json!(live.pid())], "{out}");
            assert_eq!(servers[0]["sessions"][0]["session_id"], json!(id));
            assert!(err.contains(&note), "{err}");
        } else {
            assert!(out.contains(&format!("{} (stdio)", live.pid())), "{out}");
            assert!(out.contains(&note), "{out}");
        }
    }
}

/// Reaching a control socket is not a credential: a sandboxed command that reaches the server's socket (here
/// through a hard link in the workspace) is refused without an answer, while the person through the same link
/// is answered; and a socket a sandboxed command serves where the person's tools look (an `$XDG_RUNTIME_DIR`
/// inside the workspace) is not used by `uexec sessions`, which says why, while a real server there is.
#[test]
fn neither_side_of_a_control_socket_trusts_a_sandboxed_peer() {
    let ws = Workspace::new();
    let mut server = server(&ws, &[]);
    let socket = socket_of(&ws, server.pid());
    let link = ws.path().join("link.sock");
    std::fs::hard_link(&socket, &link).unwrap();
    let denied = probe_in_session(&mut server, &ws, &link);
    assert!(denied.contains("NOANSWER"), "a sandboxed command was answered: {denied}");
    assert_eq!(probe_as(None, &link), "ANSWER", "the twin: the person through the same link");

    // A fake server, served from inside the sandbox, in a runtime directory inside the workspace.
    let planted_run = ws.path().join("run");
    let control = planted_run.join("uexec/control");
    let fake = r#"
import os, socket, sys
os.makedirs(sys.argv[1], mode=0o700, exist_ok=True)
os.chmod(sys.argv[1], 0o700)
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(sys.argv[1], "4242.sock"))
s.listen(8)
print("SERVING", flush=True)
while True:
    c, _ = s.accept()
    c.recv(65536)
    c.sendall(b'{"ok":true,"server":{"pid":4242,"kind":"stdio","cwd":"/fake","listen":null},"clients":[]}\n')
    c.close()
"#;
    std::fs::write(ws.path().join("fake.py"), fake).unwrap();
    let started = server.call(
        "exec_command",
        json!({ "cmd": format!("{PYTHON} fake.py {}", control.display()), "login": false, "yield_time_ms": 5_000 }),
    );
    assert!(output(&started).contains("SERVING"), "{started}");
    let sock = control.join("4242.sock");
    let deadline = Instant::now() + DEADLINE;
    while !sock.exists() {
        assert!(Instant::now() < deadline, "the planted socket never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out =
        uexec_command(&ws, &["sessions", "--json"]).env("XDG_RUNTIME_DIR", &planted_run).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert!(
        !listed.iter().any(|s| s["server"]["pid"] == json!(4242)),
        "the planted server was listed: {listed:?}"
    );
    assert!(stderr.contains("4242.sock is not used") && stderr.contains("sandboxed command"), "{stderr}");
    // The twin: the person's own server is listed from its runtime directory.
    assert!(listing(&ws).iter().any(|s| s["server"]["pid"] == json!(server.pid())));
}

/// Every directory uexec hides as its own (the control sockets' and the generated tokens' directories) exists,
/// private, before the first command starts, so a long-running sandboxed command started before another
/// server made its socket or token there never sees them; its twin, a directory of the workspace written the
/// same way at the same time, is seen.
#[test]
fn what_uexec_hides_exists_before_any_command_starts() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    let mut server = server(&ws, &[]);
    let run = runtime_dir(&ws);
    let tokens = run.join("uexec/listen-tokens");
    for dir in [run.join("uexec/control"), tokens.clone()] {
        let meta =
            std::fs::metadata(&dir).unwrap_or_else(|e| panic!("{} not made in advance: {e}", dir.display()));
        assert_eq!(meta.permissions().mode() & 0o777, 0o700, "{}", dir.display());
    }
    let visible = ws.path().join("shared");
    std::fs::create_dir(&visible).unwrap();
    // A command that keeps looking, started before anything is written there.
    let watch = format!(
        "for i in $(seq 1 100); do if [ -e {t}/x.token ]; then echo SAW-TOKEN; fi; if [ -e {v}/x.token ]; then \
         echo SAW-TWIN; break; fi; sleep 0.1; done; echo DONE",
        t = tokens.display(),
        v = visible.display()
    );
    let started = server.call("exec_command", json!({ "cmd": watch, "login": false, "yield_time_ms": 300 }));
    let id = session_id(&started);
    // Another server's token appears, then the twin.
    std::fs::write(tokens.join("x.token"), "secret\n").unwrap();
    std::fs::write(visible.join("x.token"), "twin\n").unwrap();
    let (text, _) = model_until(&mut server, id, "DONE");
    assert!(text.contains("SAW-TWIN"), "the twin was seen: {text}");
    assert!(!text.contains("SAW-TOKEN"), "a token made after the command started was seen: {text}");
}
