//! `apply_patch` through `exec_command`, end to end: the forms Codex-trained models use, the reference's texts
//! and exit codes, and the same policy as any command (sandboxed writes, protected paths, approvals).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::fs;

use common::*;
use serde_json::{Value, json};

fn heredoc(patch: &str) -> String {
    format!("apply_patch <<'EOF'\n*** Begin Patch\n{patch}\n*** End Patch\nEOF\n")
}

fn apply(server: &mut McpServer, cmd: &str) -> Value {
    let r = server.call("exec_command", json!({ "cmd": cmd }));
    assert!(!is_error(&r), "{r}");
    r
}

#[test]
fn add_update_move_and_delete_with_the_reference_texts() {
    let ws = Workspace::new();
    let audit = ws.outside.path().join("audit.jsonl");
    let mut server = McpServer::start_initialized(&ws, &["--audit-log", audit.to_str().unwrap()], false);

    let r = apply(&mut server, &heredoc("*** Add File: src/hello.txt\n+hello\n+world"));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert_eq!(output(&r), "Success. Updated the following files:\nA src/hello.txt\n");
    assert_eq!(fs::read_to_string(ws.path().join("src/hello.txt")).unwrap(), "hello\nworld\n");
    let log = fs::read_to_string(&audit).unwrap();
    assert!(log.contains("*** Add File: src/hello.txt"), "the audit log records the call: {log}");

    fs::write(ws.path().join("code.py"), "def f():\n    return 1\n\ndef g():\n    return 1\n").unwrap();
    let r =
        apply(&mut server, &heredoc("*** Update File: code.py\n@@ def g():\n-    return 1\n+    return 2"));
    assert_eq!(output(&r), "Success. Updated the following files:\nM code.py\n", "{r}");
    assert_eq!(
        fs::read_to_string(ws.path().join("code.py")).unwrap(),
        "def f():\n    return 1\n\ndef g():\n    return 2\n"
    );

    // `cd dir &&`, `applypatch`, another delimiter.
    let r = apply(
        &mut server,
        "cd src && applypatch <<PATCH\n*** Begin Patch\n*** Update File: hello.txt\n*** Move to: bye.txt\n@@\n \
         hello\n-world\n+moon\n*** End Patch\nPATCH",
    );
    assert_eq!(output(&r), "Success. Updated the following files:\nM bye.txt\n", "{r}");
    assert!(!ws.path().join("src/hello.txt").exists());
    assert_eq!(fs::read_to_string(ws.path().join("src/bye.txt")).unwrap(), "hello\nmoon\n");

    // The argument form.
    let r = apply(&mut server, "apply_patch '*** Begin Patch\n*** Delete File: src/bye.txt\n*** End Patch'");
    assert_eq!(output(&r), "Success. Updated the following files:\nD src/bye.txt\n", "{r}");
    assert!(!ws.path().join("src/bye.txt").exists());
}

#[test]
fn a_patch_that_does_not_apply_exits_1_with_the_reference_text_and_changes_nothing() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    fs::write(ws.path().join("f.txt"), "one\ntwo\n").unwrap();
    let r = apply(&mut server, &heredoc("*** Add File: new.txt\n+x\n*** Update File: f.txt\n@@\n-three\n+3"));
    assert_eq!(exit_code(&r), Some(1), "{r}");
    assert_eq!(output(&r), "Failed to find expected lines in f.txt:\nthree\n");
    assert_eq!(fs::read_to_string(ws.path().join("f.txt")).unwrap(), "one\ntwo\n");
    assert!(!ws.path().join("new.txt").exists(), "a failing patch applies nothing");

    let r = apply(&mut server, "apply_patch <<'EOF'\n*** Begin Patch\n*** Frob File: x\n*** End Patch\nEOF");
    assert_eq!(exit_code(&r), Some(1), "{r}");
    assert!(
        output(&r).starts_with("Invalid patch hunk on line 2: '*** Frob File: x' is not a valid hunk header")
    );
}

#[test]
fn the_sandbox_keeps_patches_inside_the_writable_roots() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let outside = ws.outside.path();
    fs::write(outside.join("target.txt"), "original\n").unwrap();

    // An absolute path outside every writable root.
    let escaped = outside.join("escaped.txt");
    let r = apply(&mut server, &heredoc(&format!("*** Add File: {}\n+x", escaped.display())));
    assert_eq!(exit_code(&r), Some(1), "{r}");
    assert_eq!(output(&r), format!("Failed to write file {}\n", escaped.display()));
    assert!(!escaped.exists());

    // A protected path inside the workspace.
    fs::create_dir(ws.path().join(".git")).unwrap();
    fs::write(ws.path().join(".git/config"), "[core]\n").unwrap();
    let r =
        apply(&mut server, &heredoc("*** Update File: .git/config\n@@\n-[core]\n+[core]\n+\thooksPath = /x"));
    assert_eq!(exit_code(&r), Some(1), "{r}");
    assert_eq!(output(&r), "Failed to write file .git/config\n");
    assert_eq!(fs::read_to_string(ws.path().join(".git/config")).unwrap(), "[core]\n");

    // Symlinks inside the workspace that lead out of it: to a file, and to a directory.
    std::os::unix::fs::symlink(outside.join("target.txt"), ws.path().join("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside, ws.path().join("linkdir")).unwrap();
    let r = apply(&mut server, &heredoc("*** Update File: link.txt\n@@\n-original\n+changed"));
    assert_eq!(exit_code(&r), Some(1), "{r}");
    assert_eq!(output(&r), "Failed to write file link.txt\n");
    assert_eq!(fs::read_to_string(outside.join("target.txt")).unwrap(), "original\n");
    let r = apply(&mut server, &heredoc("*** Add File: linkdir/planted.txt\n+x"));
    assert_eq!(exit_code(&r), Some(1), "{r}");
    assert!(!outside.join("planted.txt").exists());
    let r = apply(&mut server, &heredoc("*** Delete File: linkdir/target.txt"));
    assert_eq!(exit_code(&r), Some(1), "{r}");
    assert!(outside.join("target.txt").exists());

    // The paired allowed write: inside the workspace the same patch works.
    let r = apply(&mut server, &heredoc("*** Add File: inside.txt\n+x"));
    assert_eq!(exit_code(&r), Some(0), "{r}");
}

#[test]
fn full_access_writes_anywhere_and_untrusted_asks_first() {
    let ws = Workspace::new();
    let escaped = ws.outside.path().join("allowed.txt");
    {
        let mut server = McpServer::start_initialized(&ws, &["--sandbox", "danger-full-access"], false);
        let r = apply(&mut server, &heredoc(&format!("*** Add File: {}\n+x", escaped.display())));
        assert_eq!(exit_code(&r), Some(0), "{r}");
        assert_eq!(fs::read_to_string(&escaped).unwrap(), "x\n");
    }

    let mut server = McpServer::start_initialized(&ws, &["--approval-policy", "untrusted"], true);
    server.answers = vec!["deny".into()];
    let r = server.call("exec_command", json!({ "cmd": heredoc("*** Add File: asked.txt\n+x") }));
    assert!(is_error(&r), "{r}");
    assert!(text(&r).ends_with("rejected by user"), "{r}");
    assert_eq!(server.elicitations.len(), 1);
    assert!(server.elicitations[0]["message"].as_str().unwrap().contains("*** Add File: asked.txt"));
    assert!(!ws.path().join("asked.txt").exists());
    server.answers = vec!["approve".into()];
    let r = apply(&mut server, &heredoc("*** Add File: asked.txt\n+x"));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert!(ws.path().join("asked.txt").exists());
}

#[test]
fn a_bare_patch_as_the_command_is_refused_with_the_reference_text() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    // As a script, its first line would run `***`, a glob of the directory's files, as a command.
    fs::write(ws.path().join("f.txt"), "x\n").unwrap();
    let r = server
        .call("exec_command", json!({ "cmd": "*** Begin Patch\n*** Delete File: f.txt\n*** End Patch" }));
    assert!(is_error(&r), "{r}");
    assert!(
        text(&r).ends_with(
            "patch detected without explicit call to apply_patch. Rerun as [\"apply_patch\", \"<patch>\"]"
        ),
        "{r}"
    );
    assert!(ws.path().join("f.txt").exists());
}

#[test]
fn uexec_run_takes_the_direct_form() {
    let ws = Workspace::new();
    let patch = "*** Begin Patch\n*** Add File: direct.txt\n+direct\n*** End Patch";
    let out = uexec_command(&ws, &["run", "--", "apply_patch", patch]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Success. Updated the following files:\nA direct.txt\n");
    assert_eq!(fs::read_to_string(ws.path().join("direct.txt")).unwrap(), "direct\n");
    // Sandboxed as any command: the same call cannot write outside the workspace.
    let escaped = ws.outside.path().join("direct.txt");
    let patch = format!("*** Begin Patch\n*** Add File: {}\n+x\n*** End Patch", escaped.display());
    let out = uexec_command(&ws, &["run", "--", "applypatch", &patch]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!escaped.exists());
}

/// The forms models send with a prelude (`cd x;`, `set -e;`) apply the patch in that
/// directory; one inside a longer script gets a clear error instead of the shell's "command not found", and
/// changes nothing.
#[test]
fn a_prelude_of_cd_and_set_applies_and_a_longer_script_is_told_why_not() {
    let ws = Workspace::new();
    fs::create_dir_all(ws.path().join("sub")).unwrap();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let r = apply(
        &mut server,
        "cd sub; apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch\nEOF\n",
    );
    assert_eq!(output(&r), "Success. Updated the following files:\nA a.txt\n", "{r}");
    assert_eq!(fs::read_to_string(ws.path().join("sub/a.txt")).unwrap(), "a\n");
    let r = apply(
        &mut server,
        "set -euo pipefail\ncd sub && apply_patch <<EOF\n*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\nEOF\n",
    );
    assert_eq!(output(&r), "Success. Updated the following files:\nA b.txt\n", "{r}");
    assert!(ws.path().join("sub/b.txt").is_file());

    let r = server.call(
        "exec_command",
        json!({ "cmd": "cd sub && apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: c.txt\n+c\n*** End Patch\nEOF\ngit status" }),
    );
    assert!(is_error(&r), "{r}");
    assert!(text(&r).contains("apply_patch must be the whole command"), "{r}");
    assert!(!text(&r).contains("command not found"), "{r}");
    assert!(!ws.path().join("sub/c.txt").exists());
}
