//! What the sandbox leaves on the host (`uexec_domain::leftovers`, `LinuxSandbox::with_state_dir`): the
//! placeholders it makes under read-only mounts are gone once the last command ends, stay while any command
//! (of this sandbox or of another one on the same workspace) runs, and are removed at the next start after a
//! crash; the loose objects a command removes are put back when it ends. Each refused probe has an allowed twin.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use uexec_ports::{Sandbox, SandboxLease, SandboxedSpawn};
use uexec_sandbox_linux::LinuxSandbox;

use crate::common::{Scratch, denied, finish, request, run, workspace_only};

/// Every entry under `dir` (its `.git` included), as `d path`, `f path` or `l path`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
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

/// Run git outside the sandbox in `dir`; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository at `dir` with `commits` loose commits on `main`.
fn repository(dir: &Path, commits: usize) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Person"]);
    git(dir, &["config", "user.email", "p@example.invalid"]);
    git(dir, &["config", "commit.gpgsign", "false"]);
    git(dir, &["config", "gc.auto", "0"]);
    let script = format!("for i in $(seq {commits}); do git commit -q --allow-empty -m c$i || exit 1; done");
    let made = Command::new("sh").arg("-c").arg(script).current_dir(dir).status().unwrap();
    assert!(made.success());
}

/// A sandbox keeping its record in `state` (as a server would in its state directory).
fn sandbox(state: &Path) -> LinuxSandbox {
    LinuxSandbox::default().with_state_dir(state.to_path_buf())
}

fn prepare(sandbox: &LinuxSandbox, ws: &Path, script: &str) -> SandboxedSpawn {
    sandbox
        .prepare(request(workspace_only(vec![], false), &["bash", "-c", script], ws))
        .expect("this machine enforces every protection")
}

fn refused(text: &str) -> bool {
    denied(text) || text.to_lowercase().contains("busy") || text.contains("Not a directory")
}

#[test]
fn nothing_is_left_in_the_workspace_or_its_git_dir_after_the_last_command() {
    let s = Scratch::new();
    repository(&s.ws, 1);
    let state = s.base.join("state");
    let before = listing(&s.ws);
    let sandbox = sandbox(&state);
    let prepared = prepare(
        &sandbox,
        &s.ws,
        "echo '{\"mcpServers\":{\"x\":{}}}' > .mcp.json; a=$?; mkdir .vscode/x; b=$?; \
         echo '{}' > mcp.json && mkdir vscode && echo twins=$? a=$a b=$b",
    );
    assert_ne!(prepared.lease, SandboxLease::NONE);
    // While it may run, the placeholders are there: the directories empty, the absent file a link to nowhere.
    assert_eq!(fs::read_dir(s.ws.join(".vscode")).unwrap().count(), 0);
    assert!(fs::symlink_metadata(s.ws.join(".mcp.json")).unwrap().file_type().is_symlink());
    assert!(s.ws.join(".git/hooks").is_dir() && s.ws.join(".git/objects/info/alternates").exists());
    let probe = run(&prepared);
    assert!(
        probe.stdout.contains("twins=0") && !probe.stdout.contains("a=0") && !probe.stdout.contains("b=0")
    );
    assert!(refused(&probe.stderr), "{probe:?}");
    sandbox.finish(prepared.lease);
    let mut expected = before.clone();
    expected.extend(["f mcp.json".to_owned(), "d vscode".to_owned()]);
    expected.sort();
    assert_eq!(listing(&s.ws), expected, "only the twins' files are new");
    // Later commands make them again, protected again (the second one's plan makes a mount template, which
    // must not outlive its placeholders: the third finds new ones, `crate::template`), and they go again.
    for round in 0..3 {
        let again =
            prepare(&sandbox, &s.ws, "mkdir .vscode/x; echo '{}' > .envrc; mkdir -p t/x && echo twin=$?");
        assert!(s.ws.join(".vscode").is_dir());
        let probe = run(&again);
        assert!(probe.stdout.contains("twin=0") && refused(&probe.stderr), "round {round}: {probe:?}");
        assert!(!s.ws.join(".vscode/x").exists() && fs::symlink_metadata(s.ws.join(".envrc")).is_ok());
        sandbox.finish(again.lease);
        fs::remove_dir_all(s.ws.join("t")).unwrap();
        assert_eq!(listing(&s.ws), expected, "round {round}");
    }
}

#[test]
fn a_placeholder_the_person_used_or_replaced_stays() {
    let s = Scratch::new();
    let sandbox = sandbox(&s.base.join("state"));
    let prepared = prepare(&sandbox, &s.ws, "true");
    assert!(run(&prepared).ok());
    // Outside the sandbox, while the command's lease is live: the person starts using two of them.
    fs::write(s.ws.join(".vscode/settings.json"), "{}").unwrap();
    fs::remove_file(s.ws.join(".mcp.json")).unwrap();
    fs::write(s.ws.join(".mcp.json"), "{\"mcpServers\":{}}").unwrap();
    sandbox.finish(prepared.lease);
    assert_eq!(Scratch::read(&s.ws.join(".vscode/settings.json")), "{}");
    assert_eq!(Scratch::read(&s.ws.join(".mcp.json")), "{\"mcpServers\":{}}");
    // The twins: the ones nobody touched are gone.
    assert!(!s.ws.join(".idea").exists() && fs::symlink_metadata(s.ws.join(".envrc")).is_err());
}

#[test]
fn a_long_command_keeps_its_placeholders_while_short_ones_of_either_server_end() {
    let s = Scratch::new();
    repository(&s.ws, 1);
    let before = listing(&s.ws);
    let state = s.base.join("state");
    // Two servers on one workspace: two sandboxes with the same state directory (a lock each).
    let (first, second) = (sandbox(&state), sandbox(&state));
    let long = prepare(
        &first,
        &s.ws,
        "for i in $(seq 3000); do [ -e go ] && break; sleep 0.01; done; [ -e go ] || exit 9; \
         mkdir .vscode/x; echo vscode=$?; echo '{}' > .envrc; echo envrc=$?; echo '[x]' > .git/hooks/pre-commit; \
         echo hooks=$?; mkdir twin && echo twin=$?",
    );
    let mut child = crate::common::command(&long.spawn, &[], &[]);
    child.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = child.spawn().unwrap();
    for sandbox in [&second, &first] {
        let short = prepare(sandbox, &s.ws, "true");
        assert!(run(&short).ok());
        sandbox.finish(short.lease);
        assert!(s.ws.join(".vscode").is_dir() && s.ws.join(".git/hooks").is_dir(), "kept for the long one");
    }
    fs::write(s.ws.join("go"), "").unwrap();
    let (status, stdout, stderr) = finish(child, Duration::from_secs(60)).expect("the long command ends");
    assert!(status.success(), "{stdout}{stderr}");
    for refused_write in ["vscode=0", "envrc=0", "hooks=0"] {
        assert!(!stdout.contains(refused_write), "{refused_write}: {stdout}{stderr}");
    }
    assert!(stdout.contains("twin=0"), "{stdout}{stderr}");
    first.finish(long.lease);
    let mut expected = before;
    expected.extend(["f go".to_owned(), "d twin".to_owned()]);
    expected.sort();
    assert_eq!(listing(&s.ws), expected);
}

#[test]
fn a_crashed_server_s_placeholders_go_and_its_objects_come_back_at_the_next_start() {
    let s = Scratch::new();
    repository(&s.ws, 100);
    let before = listing(&s.ws);
    let state = s.base.join("state");
    let crashed = sandbox(&state);
    let prepared = prepare(&crashed, &s.ws, "rm -f .git/objects/??/*; rm -f twin-file; echo done");
    fs::write(s.ws.join("twin-file"), "").unwrap();
    let probe = run(&prepared);
    assert!(probe.stdout.contains("done") && !s.ws.join("twin-file").exists(), "{probe:?}");
    assert!(listing(&s.ws).len() < before.len(), "objects were removed inside");
    // The server dies without finishing (its lock goes with it); its command died with it.
    drop(crashed);
    assert!(s.ws.join(".vscode").is_dir(), "nobody cleaned yet");
    let _next = sandbox(&state);
    assert_eq!(listing(&s.ws), before);
    assert_eq!(git(&s.ws, &["rev-list", "--count", "main"]).trim(), "100");
}

#[test]
fn three_hundred_loose_objects_removed_inside_are_all_back_after_the_command() {
    let s = Scratch::new();
    repository(&s.ws, 300);
    let objects =
        |ws: &Path| listing(&ws.join(".git/objects")).iter().filter(|e| e.starts_with("f ")).count();
    let loose = objects(&s.ws);
    assert!(loose > 300, "{loose}");
    let sandbox = sandbox(&s.base.join("state"));
    let prepared =
        prepare(&sandbox, &s.ws, "rm -f .git/objects/??/*; ls .git/objects/??/ | wc -l; touch t && rm t");
    let detail = &prepared.report.protections.iter().find(|p| p.name == "read_only_subpaths").unwrap().detail;
    assert!(detail.contains("every loose object present is kept aside"), "{detail}");
    let probe = run(&prepared);
    assert!(refused(&probe.stderr), "the pinned ones could not be removed: {probe:?}");
    assert!(!s.ws.join("t").exists(), "the twin removed its own file");
    let left = objects(&s.ws);
    assert!(left < 100, "{left} loose objects left inside");
    sandbox.finish(prepared.lease);
    assert_eq!(objects(&s.ws), loose);
    git(&s.ws, &["fsck", "--full", "--strict"]);
    assert_eq!(git(&s.ws, &["log", "--oneline"]).lines().count(), 300);
}

#[test]
fn the_store_is_pruned_of_objects_the_person_s_git_packed() {
    let s = Scratch::new();
    repository(&s.ws, 20);
    let state = s.base.join("state");
    let stored = |state: &Path| {
        let is_object =
            |e: &String| e.starts_with("f ") && e.rsplit('/').next().is_some_and(|n| n.len() == 38);
        listing(state).iter().filter(|e| is_object(e)).count()
    };
    let sandbox = sandbox(&state);
    let first = prepare(&sandbox, &s.ws, "true");
    sandbox.finish(first.lease);
    assert!(stored(&state) > 20);
    git(&s.ws, &["gc", "-q", "--prune=now"]);
    let second = prepare(&sandbox, &s.ws, "true");
    sandbox.finish(second.lease);
    assert_eq!(stored(&state), 0, "{:?}", listing(&state));
}
