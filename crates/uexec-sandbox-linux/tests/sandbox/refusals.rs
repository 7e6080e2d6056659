//! `Sandbox::refusals`: what the sandbox says it refused a command that ran, for each kind of refusal, each
//! denied probe beside an allowed twin that the same rule lets through (and that is then not reported).

use std::path::Path;

use uexec_domain::SandboxPolicy;
use uexec_domain::denial::{FileRule, Refusal};
use uexec_domain::hidden::{HiddenPaths, HiddenPattern};
use uexec_domain::tool_files::ToolFiles;
use uexec_ports::{RefusalQuery, Sandbox};
use uexec_sandbox_linux::LinuxSandbox;

use crate::common::{Probe, Scratch, request, run, workspace_only};

/// Run `bash -c script` under `policy` in `ws` with `sandbox`; its probe and what the sandbox says it refused.
fn refused(sandbox: &LinuxSandbox, policy: SandboxPolicy, ws: &Path, script: &str) -> (Probe, Vec<Refusal>) {
    let mark = sandbox.refusal_mark();
    let prepared = sandbox.prepare(request(policy.clone(), &["bash", "-c", script], ws)).unwrap();
    let probe = run(&prepared);
    let output = probe.text();
    let query = RefusalQuery {
        mark,
        policy: &policy,
        workspace: ws,
        tmpdir: None,
        cwd: ws,
        output: output.as_bytes(),
        exit_code: Some(probe.code),
    };
    let refusals = sandbox.refusals(&query).expect("the Linux sandbox can say what it refused");
    (probe, refusals)
}

#[test]
fn a_write_outside_the_roots_names_the_path_and_the_rule() {
    let s = Scratch::new();
    let sandbox = LinuxSandbox::default();
    let target = s.outside.join("new.txt");
    let script = format!("echo x > {}", target.display());
    let (probe, refusals) = refused(&sandbox, workspace_only(vec![], false), &s.ws, &script);
    assert!(!probe.ok(), "{probe:?}");
    let path = target.to_string_lossy().into_owned();
    assert_eq!(refusals, vec![Refusal::File { path, rule: FileRule::OutsideRoots }], "{probe:?}");
    // The twin: the same write inside the workspace works and reports nothing; under read-only it is the
    // policy's refusal.
    let (probe, refusals) = refused(&sandbox, workspace_only(vec![], false), &s.ws, "echo x > new.txt");
    assert!(probe.ok() && refusals.is_empty(), "{probe:?} {refusals:?}");
    let read_only = SandboxPolicy::ReadOnly { network_access: false };
    let (probe, refusals) = refused(&sandbox, read_only, &s.ws, "echo x > again.txt");
    let path = s.ws.join("again.txt").to_string_lossy().into_owned();
    assert_eq!(refusals, vec![Refusal::File { path, rule: FileRule::ReadOnlyPolicy }], "{probe:?}");
}

#[test]
fn a_write_to_a_protected_entry_names_the_entry() {
    let s = Scratch::new();
    let git = std::process::Command::new("git").args(["init", "-q"]).current_dir(&s.ws).status().unwrap();
    assert!(git.success());
    let sandbox = LinuxSandbox::default();
    let (probe, refusals) =
        refused(&sandbox, workspace_only(vec![], false), &s.ws, "echo '[x]' >> .git/config");
    assert!(!probe.ok(), "{probe:?}");
    let config = s.ws.join(".git/config").to_string_lossy().into_owned();
    let rule = FileRule::Protected { entry: config.clone() };
    assert_eq!(refusals, vec![Refusal::File { path: config, rule }], "{probe:?}");
    // The twin: what git writes in the same directory is writable, and nothing is reported.
    let (probe, refusals) =
        refused(&sandbox, workspace_only(vec![], false), &s.ws, "echo x > .git/description");
    assert!(probe.ok() && refusals.is_empty(), "{probe:?} {refusals:?}");
}

#[test]
fn a_write_to_another_tools_file_names_the_tool_file_rule_and_the_key() {
    let s = Scratch::new();
    std::fs::write(s.ws.join(".mcp.json"), "{}\n").unwrap();
    let sandbox = LinuxSandbox::default();
    let policy = || workspace_only(vec![], false);
    // An absent directory (its placeholder) and a present file.
    let vscode = s.ws.join(".vscode");
    let mcp = s.ws.join(".mcp.json").to_string_lossy().into_owned();
    for (script, path, entry, name) in [
        (
            "echo '{}' > .vscode/tasks.json",
            vscode.join("tasks.json").to_string_lossy().into_owned(),
            vscode.to_string_lossy().into_owned(),
            ".vscode",
        ),
        ("echo '{\"mcpServers\":{}}' > .mcp.json", mcp.clone(), mcp.clone(), ".mcp.json"),
    ] {
        let (probe, refusals) = refused(&sandbox, policy(), &s.ws, script);
        assert!(!probe.ok(), "{script}: {probe:?}");
        let rule = FileRule::ToolFile { entry, name: name.into() };
        assert_eq!(refusals, vec![Refusal::File { path, rule }], "{script}: {probe:?}");
        let note = uexec_domain::denial::refusal_note(&refusals).unwrap();
        assert!(note.contains(&format!("allow: allow_tool_files = [\"{name}\"]")), "{note}");
        assert!(note.contains("tool file rule"), "{note}");
    }
    // The twins: the same names deeper in the tree are writable and nothing is reported; allowed by the key,
    // the entry is writable and nothing is reported either.
    let (probe, refusals) =
        refused(&sandbox, policy(), &s.ws, "mkdir -p src/.vscode && echo '{}' > src/.vscode/tasks.json");
    assert!(probe.ok() && refusals.is_empty(), "{probe:?} {refusals:?}");
    let allowing = LinuxSandbox::default().with_tool_files(ToolFiles::allowing(&[".mcp.json"]).unwrap());
    let (probe, refusals) = refused(&allowing, policy(), &s.ws, "echo '{}' > .mcp.json");
    assert!(probe.ok() && refusals.is_empty(), "{probe:?} {refusals:?}");
}

#[test]
fn a_read_of_a_hidden_path_names_the_location() {
    let s = Scratch::new();
    let home = s.base.join("home");
    for dir in [".ssh", "public"] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
        std::fs::write(home.join(dir).join("id_rsa"), "KEY\n").unwrap();
    }
    let hidden = HiddenPaths {
        home: Some(home.clone()),
        patterns: vec![HiddenPattern::parse("~/.ssh").unwrap()],
        reachable: Vec::new(),
    };
    let sandbox = LinuxSandbox::default().with_hidden(hidden);
    let script = format!("cat {}/.ssh/id_rsa", home.display());
    let (probe, refusals) = refused(&sandbox, workspace_only(vec![], false), &s.ws, &script);
    assert!(!probe.ok() && !probe.stdout.contains("KEY"), "{probe:?}");
    let location = home.join(".ssh").to_string_lossy().into_owned();
    let path = home.join(".ssh/id_rsa").to_string_lossy().into_owned();
    assert_eq!(refusals, vec![Refusal::File { path, rule: FileRule::Hidden { location } }], "{probe:?}");
    // The twin: the same file name elsewhere is read; a missing file elsewhere is an ordinary failure.
    let script = format!("cat {0}/public/id_rsa; cat {0}/public/nope", home.display());
    let (probe, refusals) = refused(&sandbox, workspace_only(vec![], false), &s.ws, &script);
    assert!(probe.stdout.contains("KEY") && !probe.ok(), "{probe:?}");
    assert!(refusals.is_empty(), "{refusals:?}");
}

#[test]
fn a_signal_or_a_trace_of_a_process_outside_is_named() {
    let s = Scratch::new();
    let sandbox = LinuxSandbox::default();
    let outside = std::process::id();
    let script = format!("kill -0 {outside}");
    let (probe, refusals) = refused(&sandbox, workspace_only(vec![], false), &s.ws, &script);
    assert!(!probe.ok(), "{probe:?}");
    assert_eq!(refusals, vec![Refusal::Signal { target: outside.to_string() }], "{probe:?}");
    // The twin: its own process.
    let (probe, refusals) = refused(&sandbox, workspace_only(vec![], false), &s.ws, "kill -0 $$");
    assert!(probe.ok() && refusals.is_empty(), "{probe:?} {refusals:?}");
    let (probe, refusals) = refused(&sandbox, workspace_only(vec![], false), &s.ws, "strace -f true");
    assert!(!probe.ok(), "{probe:?}");
    assert_eq!(refusals, vec![Refusal::Trace], "{probe:?}");
    let (probe, refusals) = refused(&sandbox, workspace_only(vec![], false), &s.ws, "true");
    assert!(probe.ok() && refusals.is_empty(), "{probe:?} {refusals:?}");
}

/// An ordinary failure whose output names a path and says "Permission denied" (a file this user could not read
/// anyway, a test's own message) is not the sandbox's: nothing is reported.
#[test]
fn an_ordinary_failure_is_not_reported() {
    let s = Scratch::new();
    let sandbox = LinuxSandbox::default();
    let script = "echo 'open /etc/shadow: Permission denied'; echo \"cat: $PWD/nope: No such file or directory\"; exit 1";
    let (probe, refusals) = refused(&sandbox, workspace_only(vec![], false), &s.ws, script);
    assert_eq!(probe.code, 1, "{probe:?}");
    assert!(refusals.is_empty(), "{refusals:?}");
}
