//! Under workspace-write, package managers' caches point at the sandbox's own cache
//! directory (writable there), the person's own caches stay read-only, and a command outside the sandbox uses
//! the person's caches, never the sandbox's; end to end through `uexec mcp` with the real npm and pip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{McpServer, Workspace, exit_code, output};
use serde_json::json;

#[test]
fn package_caches_are_the_sandboxes_own_and_the_persons_stay_read_only() {
    let ws = Workspace::new();
    let home = ws.outside.path().join("home");
    let state = ws.outside.path().join("state");
    for own in [".npm", ".cache/pip"] {
        std::fs::create_dir_all(home.join(own)).unwrap();
    }
    // A profile that names the person's own cache: the login snapshot must not override the sandbox's.
    std::fs::write(home.join(".profile"), "export npm_config_cache=\"$HOME/.npm\"\nexport PROFILE_RAN=1\n")
        .unwrap();
    // The person has no cargo home at all (`CARGO_HOME` names a directory that does not exist): sandboxed
    // commands get one of the sandbox's own (`tests/cargo_cache.rs` covers the person who has one).
    let missing_cargo = home.join(".cargo-none");
    let env = [
        ("HOME", home.to_str().unwrap()),
        ("XDG_STATE_HOME", state.to_str().unwrap()),
        ("CARGO_HOME", missing_cargo.to_str().unwrap()),
    ];
    let mut server = McpServer::start_with_env(&ws, &[], &env);
    server.initialize(true);
    let cache = std::fs::canonicalize(&state).unwrap().join("uexec/sandbox-cache");

    let r = server.call(
        "exec_command",
        json!({ "cmd": "npm config get cache 2>&1; python3 -m pip cache dir; echo \"[$PROFILE_RAN]\"; echo \"$CARGO_HOME\"; echo \"pnpm:$pnpm_config_store_dir\"" }),
    );
    let out = output(&r);
    assert!(out.contains("[1]"), "the login environment was loaded: {out}");
    // npm is given no variable it does not know (it warned `Unknown env config "store-dir"` on every command,
    // for pnpm's store); pnpm gets the variable pnpm 11 reads.
    assert!(!out.contains("npm warn"), "{out}");
    assert!(out.contains(&format!("pnpm:{}\n", cache.join("pnpm-store").display())), "{out}");
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(out.contains(&format!("{}\n", cache.join("npm").display())), "{out}");
    assert!(out.contains(&format!("{}\n", cache.join("pip").display())), "{out}");
    assert!(out.contains(&format!("{}\n", cache.join("cargo").display())), "{out}");

    // npm writes its cache index there; pip's cache directory is writable too.
    let r = server.call(
        "exec_command",
        json!({ "cmd": "npm cache verify >/dev/null && mkdir -p \"$PIP_CACHE_DIR/http\" && echo > \"$PIP_CACHE_DIR/http/probe\" && echo CACHES-WRITABLE" }),
    );
    assert!(output(&r).contains("CACHES-WRITABLE"), "{r}");
    assert!(cache.join("npm/_cacache").is_dir(), "npm wrote its cache in the sandbox's cache");
    assert!(cache.join("pip/http/probe").is_file());

    // The person's own caches stay read-only to sandboxed commands.
    for own in [".npm", ".cache/pip"] {
        let probe = home.join(own).join("probe");
        let r = server.call(
            "exec_command",
            json!({ "cmd": format!("echo poison > '{}' && echo WROTE", probe.display()) }),
        );
        assert!(!output(&r).contains("WROTE"), "{own}: {r}");
        assert!(!probe.exists(), "{own}");
    }

    // Outside the sandbox (an approved escalation), the person's cache: nothing a sandboxed command wrote.
    server.answers = vec!["approve".into()];
    let r = server.call(
        "exec_command",
        json!({ "cmd": "npm config get cache; echo \"[${PIP_CACHE_DIR-unset}]\"; echo \"$CARGO_HOME\"",
                "sandbox_permissions": "require_escalated", "justification": "x" }),
    );
    let out = output(&r);
    assert!(out.contains(&format!("{}\n", home.join(".npm").display())), "{out}");
    assert!(out.contains("[unset]") && !out.contains("sandbox-cache"), "{out}");
    assert!(out.contains(&format!("{}\n", missing_cargo.display())), "{out}");
}
