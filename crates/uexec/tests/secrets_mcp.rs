//! Hidden secret locations end to end through `uexec mcp`: the default credential stores under `$HOME` and a
//! configured workspace glob cannot be read by a sandboxed command, each beside a twin that stays readable; the
//! protection report names what is hidden; `hide_secrets = false` turns the defaults off.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::json;

/// `HOME` is the workspace in this harness: plant secrets and twins there, and write a config outside it.
fn plant(ws: &Workspace, config: &str) -> String {
    let home = ws.path();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "SSH-KEY\n").unwrap();
    std::fs::create_dir_all(home.join(".sshx")).unwrap();
    std::fs::write(home.join(".sshx/id_ed25519"), "twin-ssh\n").unwrap();
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(home.join(".aws/credentials"), "AWS-KEY\n").unwrap();
    std::fs::write(home.join(".netrc"), "NETRC\n").unwrap();
    std::fs::write(home.join("netrc.example"), "twin-netrc\n").unwrap();
    std::fs::create_dir_all(home.join("certs")).unwrap();
    std::fs::write(home.join("certs/server.pem"), "PEM-KEY\n").unwrap();
    std::fs::write(home.join("certs/server.crt"), "twin-crt\n").unwrap();
    let path = ws.outside.path().join("config.toml");
    std::fs::write(&path, config).unwrap();
    path.display().to_string()
}

const PROBE: &str = "for f in ~/.ssh/id_ed25519 ~/.aws/credentials ~/.netrc certs/server.pem ~/.sshx/id_ed25519 \
                     netrc.example certs/server.crt; do cat \"$f\" 2>/dev/null || echo \"denied $f\"; done";

#[test]
fn default_secrets_and_a_configured_glob_are_hidden_from_sandboxed_commands() {
    let ws = Workspace::new();
    let config = plant(&ws, "hidden_paths = [\"*.pem\"]\n");
    let mut server = McpServer::start_initialized(&ws, &["--config", &config], false);
    let r = server.call("exec_command", json!({ "cmd": PROBE, "login": false }));
    let out = output(&r);
    for secret in ["SSH-KEY", "AWS-KEY", "NETRC", "PEM-KEY"] {
        assert!(!out.contains(secret), "{secret} was readable: {out}");
    }
    for denied in ["~/.ssh/id_ed25519", "~/.aws/credentials", "~/.netrc", "certs/server.pem"] {
        let shown = denied.replace('~', &ws.path().display().to_string());
        assert!(out.contains(&format!("denied {shown}")), "{denied}: {out}");
    }
    for twin in ["twin-ssh", "twin-netrc", "twin-crt"] {
        assert!(out.contains(twin), "{twin} was not readable: {out}");
    }
    // The full protection report of a live session lists what is hidden.
    let r = server.call("exec_command", json!({ "cmd": "sleep 60", "login": false, "yield_time_ms": 250 }));
    let id = session_id(&r);
    let sessions = server.call("list_sessions", json!({})).to_string();
    assert!(sessions.contains("hidden_paths"), "{sessions}");
    assert!(sessions.contains(&ws.path().join(".ssh").display().to_string()), "{sessions}");
    assert!(sessions.contains(&ws.path().join("certs/server.pem").display().to_string()), "{sessions}");
    server.call("close_session", json!({ "session_id": id }));
}

#[test]
fn hide_secrets_false_leaves_the_defaults_readable() {
    let ws = Workspace::new();
    let config = plant(&ws, "hide_secrets = false\n");
    let mut server = McpServer::start_initialized(&ws, &["--config", &config], false);
    let out = output(&server.call("exec_command", json!({ "cmd": PROBE, "login": false })));
    for readable in ["SSH-KEY", "AWS-KEY", "NETRC", "PEM-KEY", "twin-ssh"] {
        assert!(out.contains(readable), "{readable}: {out}");
    }
}

/// A working directory (or a workspace) inside a hidden location does not make the location
/// visible: the command is refused with a typed error that says why, and nothing runs. The twin: a working
/// directory beside the hidden ones reads its files.
#[test]
fn a_working_directory_or_workspace_in_a_hidden_location_is_refused() {
    let ws = Workspace::new();
    let home = ws.path();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "SSH-PRIVATE-KEY\n").unwrap();
    std::fs::create_dir_all(home.join(".aws/sso/cache")).unwrap();
    std::fs::write(home.join(".aws/credentials"), "AWS-SECRET\n").unwrap();
    std::fs::create_dir_all(home.join("notes")).unwrap();
    std::fs::write(home.join("notes/id_rsa"), "twin-readable\n").unwrap();
    std::fs::write(home.join("notes/credentials"), "twin-readable\n").unwrap();
    std::os::unix::fs::symlink(home.join(".ssh"), ws.outside.path().join("ssh-link")).unwrap();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let probe = "cat id_rsa credentials ../credentials ../../credentials 2>&1; touch RAN-MARKER; echo done";
    for workdir in [
        home.join(".ssh"),
        home.join(".aws"),
        home.join(".aws/sso/cache"),
        ws.outside.path().join("ssh-link"),
    ] {
        let r = server.call("exec_command", json!({ "cmd": probe, "login": false, "workdir": workdir }));
        let shown = text(&r);
        assert!(is_error(&r), "{}: {shown}", workdir.display());
        assert!(!shown.contains("SSH-PRIVATE-KEY") && !shown.contains("AWS-SECRET"), "{shown}");
        assert!(
            shown.contains("working directory")
                && shown.contains("hidden secret location")
                && shown.contains("nothing was run"),
            "{shown}"
        );
    }
    assert!(!home.join(".ssh/RAN-MARKER").exists() && !home.join(".aws/RAN-MARKER").exists());
    // The twin: a working directory that holds no secret location runs and reads.
    let r =
        server.call("exec_command", json!({ "cmd": probe, "login": false, "workdir": home.join("notes") }));
    assert!(!is_error(&r), "{r}");
    let out = output(&r);
    assert_eq!(out.matches("twin-readable").count(), 2, "{out}");
    assert!(out.contains("done") && !out.contains("SSH-PRIVATE-KEY"), "{out}");

    // The workspace itself (`--cd`) inside a hidden location: every sandboxed command is refused.
    let mut server = McpServer::start_initialized(&ws, &["--cd", home.join(".ssh").to_str().unwrap()], false);
    let r = server.call("exec_command", json!({ "cmd": "cat id_rsa; echo done", "login": false }));
    let shown = text(&r);
    assert!(is_error(&r) && !shown.contains("SSH-PRIVATE-KEY"), "{shown}");
    assert!(shown.contains("workspace") || shown.contains("working directory"), "{shown}");
    let r = server.call(
        "exec_command",
        json!({ "cmd": "cat ../.ssh/id_rsa; echo done", "login": false, "workdir": home.join("notes") }),
    );
    let shown = text(&r);
    assert!(is_error(&r) && shown.contains("workspace") && !shown.contains("SSH-PRIVATE-KEY"), "{shown}");
    // The twin: a workspace beside it.
    let mut server =
        McpServer::start_initialized(&ws, &["--cd", home.join("notes").to_str().unwrap()], false);
    let r = server
        .call("exec_command", json!({ "cmd": "cat id_rsa; cat ../.ssh/id_rsa; echo done", "login": false }));
    let out = output(&r);
    assert!(
        out.contains("twin-readable") && out.contains("done") && !out.contains("SSH-PRIVATE-KEY"),
        "{out}"
    );
}

/// A writable root that holds a hidden location keeps it hidden inside (the root is made
/// writable first, the location covered on top); the twin beside it is readable and writable.
#[test]
fn a_writable_root_that_holds_a_hidden_location_keeps_it_hidden() {
    let ws = Workspace::new();
    let home = ws.outside.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "SSH-PRIVATE-KEY\n").unwrap();
    std::fs::write(home.join("plain.txt"), "twin-readable\n").unwrap();
    let env = [("HOME", home.to_str().unwrap())];
    let mut server = McpServer::start_with_env(&ws, &["--writable-root", home.to_str().unwrap()], &env);
    server.initialize(false);
    let probe = format!(
        "cd {0}; cat .ssh/id_rsa; echo x > .ssh/new && echo WROTE-INSIDE; cat plain.txt; echo y > made.txt && echo WROTE-TWIN",
        home.display()
    );
    let out = output(&server.call("exec_command", json!({ "cmd": probe, "login": false })));
    assert!(!out.contains("SSH-PRIVATE-KEY") && !out.contains("WROTE-INSIDE"), "{out}");
    assert!(out.contains("twin-readable") && out.contains("WROTE-TWIN"), "{out}");
}

/// Relocated credential stores are hidden where their variables put them, also inside the
/// copy-on-write view of the cargo home (`--network`); the twins in the same directories stay readable.
#[test]
fn credential_stores_moved_by_their_variables_are_hidden() {
    let ws = Workspace::new();
    let base = ws.outside.path();
    let cargo = base.join("cargo");
    let docker = base.join("docker");
    let gnupg = base.join("gnupg");
    let kube = base.join("kube");
    for dir in [&cargo, &docker, &gnupg, &kube] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(cargo.join("credentials.toml"), "CARGO-TOKEN\n").unwrap();
    std::fs::write(cargo.join("config.toml"), "twin-cargo\n").unwrap();
    std::fs::write(docker.join("config.json"), "DOCKER-AUTH\n").unwrap();
    std::fs::write(docker.join("daemon.json"), "twin-docker\n").unwrap();
    std::fs::write(gnupg.join("private.key"), "GPG-KEY\n").unwrap();
    std::fs::write(kube.join("prod"), "KUBE-A\n").unwrap();
    std::fs::write(kube.join("dev"), "KUBE-B\n").unwrap();
    std::fs::write(kube.join("README"), "twin-kube\n").unwrap();
    std::fs::write(base.join("adc.json"), "GOOGLE-ADC\n").unwrap();
    std::fs::write(base.join("pw-file"), "RESTIC-PW\n").unwrap();
    let kubeconfig = format!("{}:{}", kube.join("prod").display(), kube.join("dev").display());
    let (adc, pw) = (base.join("adc.json"), base.join("pw-file"));
    let env = [
        ("CARGO_HOME", cargo.to_str().unwrap()),
        ("DOCKER_CONFIG", docker.to_str().unwrap()),
        ("GNUPGHOME", gnupg.to_str().unwrap()),
        ("KUBECONFIG", kubeconfig.as_str()),
        ("GOOGLE_APPLICATION_CREDENTIALS", adc.to_str().unwrap()),
        ("RESTIC_PASSWORD_FILE", pw.to_str().unwrap()),
    ];
    let probe = format!(
        "cd {}; cat cargo/credentials.toml docker/config.json gnupg/private.key kube/prod kube/dev adc.json pw-file \
         cargo/config.toml docker/daemon.json kube/README 2>&1; echo done",
        base.display()
    );
    for args in [&[][..], &["--network"][..]] {
        let mut server = McpServer::start_with_env(&ws, args, &env);
        server.initialize(false);
        let out = output(&server.call("exec_command", json!({ "cmd": probe, "login": false })));
        for secret in ["CARGO-TOKEN", "DOCKER-AUTH", "GPG-KEY", "KUBE-A", "KUBE-B", "GOOGLE-ADC", "RESTIC-PW"]
        {
            assert!(!out.contains(secret), "{args:?}: {secret} was readable: {out}");
        }
        for twin in ["twin-cargo", "twin-docker", "twin-kube", "done"] {
            assert!(out.contains(twin), "{args:?}: {twin} was not readable: {out}");
        }
    }
    // The twin of the whole: outside the sandbox every file reads (the test process itself).
    assert_eq!(std::fs::read_to_string(cargo.join("credentials.toml")).unwrap(), "CARGO-TOKEN\n");
}

/// The person's ssh-agent (a real one) is out of reach of sandboxed commands: its variable is
/// dropped and its socket hidden, even to a command that names the socket itself. Passed on purpose
/// (`--pass-env SSH_AUTH_SOCK`), the agent is reachable and the report says so. The twin: the test process lists
/// the key through the same socket.
#[test]
fn the_ssh_agent_is_reachable_only_when_passed_on_purpose() {
    use std::process::{Command, Stdio};
    for socket_dir in [tempfile::Builder::new().prefix("uexec-agent-").tempdir_in("/var/tmp").unwrap(), {
        // ssh-agent's own default place: under /tmp, a writable root of sandboxed commands.
        tempfile::Builder::new().prefix("ssh-uexec-").tempdir_in("/tmp").unwrap()
    }] {
        let ws = Workspace::new();
        let key = ws.outside.path().join("id_test");
        let made = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "uexec-agent-test-key", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(made.success());
        let socket = socket_dir.path().join("agent.sock");
        let mut agent = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
        while !socket.exists() {
            assert!(std::time::Instant::now() < deadline, "ssh-agent made no socket");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let added =
            Command::new("ssh-add").arg(&key).env("SSH_AUTH_SOCK", &socket).stderr(Stdio::null()).status();
        assert!(added.unwrap().success());
        // The twin outside the sandbox: the key is listed.
        let listed = Command::new("ssh-add").arg("-L").env("SSH_AUTH_SOCK", &socket).output().unwrap();
        assert!(String::from_utf8_lossy(&listed.stdout).contains("uexec-agent-test-key"));

        let probe = format!(
            "echo \"var=[$SSH_AUTH_SOCK]\"; ssh-add -L 2>&1; SSH_AUTH_SOCK={0} ssh-add -L 2>&1; echo done",
            socket.display()
        );
        let env = [("SSH_AUTH_SOCK", socket.to_str().unwrap())];
        let mut server = McpServer::start_with_env(&ws, &[], &env);
        server.initialize(false);
        let out = output(&server.call("exec_command", json!({ "cmd": probe, "login": false })));
        assert!(out.contains("var=[]") && out.contains("done"), "{out}");
        assert!(!out.contains("uexec-agent-test-key"), "the agent was reachable: {out}");

        let mut server = McpServer::start_with_env(&ws, &["--pass-env", "SSH_AUTH_SOCK"], &env);
        server.initialize(false);
        let out = output(&server.call("exec_command", json!({ "cmd": probe, "login": false })));
        assert!(out.contains(&format!("var=[{}]", socket.display())), "{out}");
        assert_eq!(
            out.matches("uexec-agent-test-key").count(),
            2,
            "passed on purpose, it is reachable: {out}"
        );
        let r =
            server.call("exec_command", json!({ "cmd": "sleep 60", "login": false, "yield_time_ms": 250 }));
        let id = session_id(&r);
        let sessions = server.call("list_sessions", json!({})).to_string();
        assert!(
            sessions.contains("reachable on purpose") && sessions.contains("SSH_AUTH_SOCK"),
            "{sessions}"
        );
        server.call("close_session", json!({ "session_id": id }));
        drop(server);
        let _ = agent.kill();
        let _ = agent.wait();
    }
}

/// The server's own state (the audit log with other sessions' command lines, the snapshots
/// of unsandboxed shells, the copy-on-write layers) cannot be read by sandboxed commands. The twins: a file
/// beside the audit log is readable inside, and the log itself outside holds the command lines.
#[test]
fn the_audit_log_and_the_state_directory_are_hidden_from_sandboxed_commands() {
    let ws = Workspace::new();
    let logs = ws.outside.path().join("logs");
    let state = ws.outside.path().join("state");
    std::fs::create_dir_all(&logs).unwrap();
    let log = logs.join("audit.jsonl");
    std::fs::write(logs.join("audit.jsonl.1"), "ROTATED-RECORD\n").unwrap();
    std::fs::write(logs.join("notes.txt"), "twin-readable\n").unwrap();
    let env = [("XDG_STATE_HOME", state.to_str().unwrap())];
    let mut server =
        McpServer::start_with_env(&ws, &["--audit-log", log.to_str().unwrap(), "--network"], &env);
    server.initialize(false);
    let first =
        server.call("exec_command", json!({ "cmd": "echo FIRST-COMMAND-LINE-MARKER", "login": false }));
    assert!(output(&first).contains("FIRST-COMMAND-LINE-MARKER"));
    let probe = format!(
        "cat {0}/audit.jsonl {0}/audit.jsonl.1 2>&1 | grep -c MARKER; cat {0}/audit.jsonl.1; \
         ls -AR {1}/uexec/snapshots/host {1}/uexec/sandbox-overlays 2>&1; cat {0}/notes.txt",
        logs.display(),
        state.display()
    );
    let out = output(&server.call("exec_command", json!({ "cmd": probe, "login": false })));
    assert!(!out.contains("FIRST-COMMAND") && !out.contains("ROTATED-RECORD"), "{out}");
    assert!(out.starts_with("0\n"), "{out}");
    assert!(out.contains("twin-readable"), "{out}");
    // Outside the sandbox the log is there and holds the first command line; the state directories exist.
    let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("FIRST-COMMAND-LINE-MARKER") {
        assert!(std::time::Instant::now() < deadline, "the audit log never held the command");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(state.join("uexec/snapshots/host").is_dir());
    // The copy-on-write layers: the twin outside holds the slot's lock and upper layer; inside none is listed.
    assert!(state.join("uexec/sandbox-overlays/0/lock").exists());
    assert!(!out.contains("lock") && !out.contains("upper"), "{out}");
}
