//! Nothing of uexec's is left in the person's project: after `uexec run` and after a `uexec mcp`
//! session, a listing of the workspace and its `.git` equals the one before but for what the command itself
//! wrote (the allowed twins); a server killed with SIGKILL while a command ran leaves its placeholders, and the
//! next start removes them. The placeholders' protection itself is tested in `uexec-sandbox-linux`'s
//! `tests/sandbox/leftovers.rs`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// Every entry under `dir` (its `.git` included), as `d path`, `f path` or `l path`, sorted. An entry removed
/// while it is read (the server removing its placeholders) is left out: the caller polls.
fn listing(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Ok(kind) = entry.file_type() else { continue };
            let name = entry.path().strip_prefix(root).unwrap().display().to_string();
            if kind.is_dir() {
                out.push(format!("d {name}"));
                walk(root, &entry.path(), out);
            } else {
                out.push(format!("{} {name}", if kind.is_symlink() { 'l' } else { 'f' }));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A workspace holding a repository with one commit, and a state directory outside every writable root.
fn workspace() -> (Workspace, tempfile::TempDir) {
    let ws = Workspace::new();
    git(ws.path(), &["init", "-q", "-b", "main"]);
    git(
        ws.path(),
        &["-c", "user.name=P", "-c", "user.email=p@e.invalid", "commit", "-q", "--allow-empty", "-m", "one"],
    );
    let state = tempfile::Builder::new().prefix("uexec-test-state-").tempdir_in(ws.outside.path()).unwrap();
    (ws, state)
}

/// `listing(dir)` plus `added`, sorted.
fn with(mut listing: Vec<String>, added: &[&str]) -> Vec<String> {
    listing.extend(added.iter().map(|a| (*a).to_owned()));
    listing.sort();
    listing
}

/// Poll until `dir`'s listing is `expected` (the server finishes a session's lease once its tree is gone,
/// right after the response); panics with the difference at the deadline.
fn wait_listing(dir: &Path, expected: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = listing(dir);
        if now == expected {
            return;
        }
        if Instant::now() > deadline {
            let extra: Vec<&String> = now.iter().filter(|e| !expected.contains(e)).collect();
            let missing: Vec<&String> = expected.iter().filter(|e| !now.contains(e)).collect();
            panic!("{} still differs: extra {extra:?}, missing {missing:?}", dir.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(ws: &Workspace, state: &Path, script: &str) -> std::process::Output {
    uexec_command(ws, &["run", "--", "sh", "-c", script]).env("XDG_STATE_HOME", state).output().unwrap()
}

#[test]
fn uexec_run_leaves_nothing_in_the_workspace_or_its_git_dir() {
    let (ws, state) = workspace();
    let before = listing(ws.path());
    let out = run(&ws, state.path(), "mkdir .vscode/x; echo '{}' > .mcp.json; ls -a; touch twin");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(".vscode") && stdout.contains(".mcp.json"),
        "the placeholders were there: {stdout}"
    );
    assert_eq!(
        listing(ws.path()),
        with(before.clone(), &["f twin"]),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The twin of the refused writes: the same command writes beside them.
    let out = run(&ws, state.path(), "mkdir vscode && echo '{}' > mcp.json");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(listing(ws.path()), with(before, &["f twin", "d vscode", "f mcp.json"]));
}

#[test]
fn a_uexec_mcp_session_leaves_nothing_and_a_killed_server_is_cleaned_at_the_next_start() {
    let (ws, state) = workspace();
    let before = listing(ws.path());
    let env = [("XDG_STATE_HOME", state.path().to_str().unwrap())];
    let mut server = McpServer::start_with_env(&ws, &[], &env);
    server.initialize(false);
    let r = server
        .call("exec_command", json!({ "cmd": "touch twin; echo '{}' > .mcp.json", "yield_time_ms": 10000 }));
    assert!(exit_code(&r).is_some_and(|code| code != 0), "{}", output(&r));
    wait_listing(ws.path(), &with(before.clone(), &["f twin"]));
    // A daemon that left its session dies with it, so nothing runs under a mount the clean-up detaches.
    let daemon = marker_seconds(62);
    let cmd = format!("setsid sleep {daemon} > /dev/null 2>&1 < /dev/null & echo started");
    let r = server.call("exec_command", json!({ "cmd": cmd, "yield_time_ms": 10000 }));
    assert_eq!(exit_code(&r), Some(0), "{}", output(&r));
    wait_listing(ws.path(), &with(before.clone(), &["f twin"]));
    assert!(
        wait_gone(&["sleep", &daemon], Duration::from_secs(30)).is_empty(),
        "the daemon ended with its session"
    );

    // A long command, then the server dies with SIGKILL: its placeholders stay, as nobody can clean them.
    let marker = marker_seconds(61);
    let r =
        server.call("exec_command", json!({ "cmd": format!("exec sleep {marker}"), "yield_time_ms": 250 }));
    assert!(exit_code(&r).is_none(), "{}", output(&r));
    assert!(ws.path().join(".vscode").is_dir());
    let pid = server.pid();
    assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
    assert!(server.wait_exit(Duration::from_secs(30)).is_some());
    assert!(wait_gone(&["sleep", &marker], Duration::from_secs(30)).is_empty(), "its command died with it");
    assert!(ws.path().join(".vscode").is_dir() && ws.path().join(".git/objects/info/alternates").exists());
    // The next start (a `uexec run` here; a server the same) cleans what the dead one left.
    let out = run(&ws, state.path(), "true");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(listing(ws.path()), with(before, &["f twin"]));
}

#[test]
fn every_loose_commit_survives_rm_of_the_objects_inside_uexec_run() {
    // The project and the state directory on one file system (as a project in the home and
    // `~/.local/state` usually are), outside every default writable root but the project itself.
    let ws = Workspace::new();
    let project = ws.outside.path().join("project");
    std::fs::create_dir(&project).unwrap();
    git(&project, &["init", "-q", "-b", "main"]);
    let commits = "for i in $(seq 300); do git -c user.name=P -c user.email=p@e.invalid commit -q --allow-empty -m c$i \
                   || exit 1; done";
    assert!(Command::new("sh").args(["-c", commits]).current_dir(&project).status().unwrap().success());
    let state = ws.outside.path().join("state");
    let out = Command::new(uexec())
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "rm -f .git/objects/??/*; find .git/objects/?? -type f | wc -l; touch twin",
        ])
        .current_dir(&project)
        .env("HOME", ws.path())
        .env("XDG_CONFIG_HOME", ws.path().join(".no-config"))
        .env("XDG_STATE_HOME", &state)
        .env_remove("TMPDIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let left: usize = stdout.lines().find_map(|l| l.trim().parse().ok()).unwrap_or(usize::MAX);
    assert!(left < 100, "most loose objects were removed inside: {stdout}");
    assert!(project.join("twin").exists(), "the twin wrote beside them");
    let fsck =
        Command::new("git").args(["fsck", "--full", "--strict"]).current_dir(&project).output().unwrap();
    assert!(fsck.status.success(), "{}", String::from_utf8_lossy(&fsck.stderr));
    let log = Command::new("git").args(["log", "--oneline"]).current_dir(&project).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout).lines().count(), 300);
}

#[test]
fn from_the_home_directory_nothing_is_left_in_the_home() {
    // The workspace is the home: the state directory (`~/.local/state`) lies in it, so the record goes to the
    // runtime directory instead, and the placeholders still go.
    let ws = Workspace::new();
    git(ws.path(), &["init", "-q", "-b", "main"]);
    let runtime = ws.outside.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let before = listing(ws.path());
    let out = uexec_command(&ws, &["run", "--", "sh", "-c", "ls -a; mkdir .vscode/x; touch twin"])
        .env_remove("XDG_STATE_HOME")
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(".vscode") && stdout.contains(".idea"), "the placeholders were there: {stdout}");
    // uexec's own state lives in the home's `.local/state/uexec` (the package cache, the copy-on-write layers):
    // where a person's state belongs, not a placeholder.
    let after: Vec<String> =
        listing(ws.path()).into_iter().filter(|e| !e[2..].starts_with(".local")).collect();
    assert_eq!(after, with(before, &["f twin"]), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(runtime.join("uexec/sandbox-leftovers").is_dir());
}
