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
