//! Hidden secret locations: every default credential store under the home and a workspace glob cannot be read
//! from inside the sandbox, each next to a twin that stays readable.

use std::fs;
use std::path::Path;

use uexec_domain::hidden::{DEFAULT_SECRETS, HiddenPaths, HiddenPattern};
use uexec_ports::Sandbox;
use uexec_sandbox_linux::LinuxSandbox;

use crate::common::{Scratch, request, run, workspace_only};

/// The default locations that are files in a real home (the others are directories).
const SECRET_FILES: [&str; 15] = [
    ".docker/config.json",
    ".config/containers/auth.json",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh/hosts.yml",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".pgpass",
];

/// A fake home holding every default location (directories get a `key` file inside) plus a twin beside each:
/// `<name>.twin` (readable), and the workspace's `.env`, `sub/.env.local` (hidden) and `env.example` (readable).
fn fixture(s: &Scratch) -> std::path::PathBuf {
    let home = s.base.join("home");
    for rel in DEFAULT_SECRETS {
        let path = home.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        if SECRET_FILES.contains(&rel) {
            fs::write(&path, "SECRET\n").unwrap();
        } else {
            fs::create_dir_all(&path).unwrap();
            fs::write(path.join("key"), "SECRET\n").unwrap();
        }
        fs::write(format!("{}.twin", path.display()), "twin\n").unwrap();
    }
    fs::write(s.ws.join(".env"), "SECRET\n").unwrap();
    fs::create_dir_all(s.ws.join("sub")).unwrap();
    fs::write(s.ws.join("sub/.env.local"), "SECRET\n").unwrap();
    fs::write(s.ws.join("env.example"), "twin\n").unwrap();
    home
}

/// The file a probe reads for a hidden location: the location itself, or its `key` for a directory.
fn target(home: &Path, rel: &str) -> std::path::PathBuf {
    let path = home.join(rel);
    if path.is_dir() { path.join("key") } else { path }
}

#[test]
fn default_secrets_and_workspace_globs_are_unreadable_and_their_twins_are_not() {
    let s = Scratch::new();
    let home = fixture(&s);
    let mut patterns = HiddenPattern::defaults();
    patterns.push(HiddenPattern::parse(".env*").unwrap());
    let sandbox = LinuxSandbox::default().with_hidden(HiddenPaths {
        home: Some(home.clone()),
        patterns,
        reachable: Vec::new(),
    });

    let mut script = String::new();
    let mut denied = Vec::new();
    let mut twins = Vec::new();
    for rel in DEFAULT_SECRETS {
        denied.push(target(&home, rel));
        twins.push(home.join(format!("{rel}.twin")));
    }
    denied.push(s.ws.join(".env"));
    denied.push(s.ws.join("sub/.env.local"));
    twins.push(s.ws.join("env.example"));
    for path in denied.iter().chain(&twins) {
        script.push_str(&format!(
            "if cat '{0}' >/dev/null 2>&1; then echo 'read {0}'; else echo 'fail {0}'; fi\n",
            path.display()
        ));
    }
    // Hidden files cannot be renamed, removed or linked away either.
    script.push_str("mv .env moved.env 2>/dev/null && echo 'moved .env'; ln .env linked.env 2>/dev/null && echo 'linked .env'; true\n");
    let prepared =
        sandbox.prepare(request(workspace_only(vec![], false), &["bash", "-c", &script], &s.ws)).unwrap();
    let out = run(&prepared);
    assert!(out.ok(), "{out:?}");
    for path in &denied {
        assert!(
            out.stdout.contains(&format!("fail {}", path.display())),
            "{} readable: {out:?}",
            path.display()
        );
    }
    for path in &twins {
        assert!(
            out.stdout.contains(&format!("read {}", path.display())),
            "{} unreadable: {out:?}",
            path.display()
        );
    }
    assert!(!out.stdout.contains("moved .env") && !out.stdout.contains("linked .env"), "{out:?}");
    // Outside the sandbox the same files are readable and unchanged.
    for path in &denied {
        assert_eq!(fs::read_to_string(path).unwrap(), "SECRET\n");
    }
    // The report names what is hidden.
    let hidden = prepared.report.protections.iter().find(|p| p.name == "hidden_paths").unwrap();
    assert_eq!(hidden.status, uexec_domain::ProtectionStatus::Enforced);
    assert!(hidden.detail.contains(&home.join(".ssh").display().to_string()), "{hidden:?}");
    assert!(hidden.detail.contains(&s.ws.join(".env").display().to_string()), "{hidden:?}");
}

#[test]
fn a_hidden_file_fails_with_eacces_and_a_hidden_directory_is_empty() {
    let s = Scratch::new();
    let home = fixture(&s);
    let sandbox = LinuxSandbox::default().with_hidden(HiddenPaths {
        home: Some(home.clone()),
        patterns: HiddenPattern::defaults(),
        reachable: Vec::new(),
    });
    let code = format!(
        r#"
import os
try:
    open({netrc:?}).read(); print("netrc read")
except OSError as e:
    print("netrc errno", e.errno)
print("ssh entries", os.listdir({ssh:?}))
"#,
        netrc = home.join(".netrc").display().to_string(),
        ssh = home.join(".ssh").display().to_string(),
    );
    let python = crate::common::python();
    let prepared = sandbox
        .prepare(request(workspace_only(vec![], false), &[python.to_str().unwrap(), "-c", &code], &s.ws))
        .unwrap();
    let out = run(&prepared);
    assert!(out.stdout.contains(&format!("netrc errno {}", libc::EACCES)), "{out:?}");
    assert!(out.stdout.contains("ssh entries []"), "{out:?}");
    // The twin: without hidden paths, the same probe reads both.
    let prepared = LinuxSandbox::default()
        .prepare(request(workspace_only(vec![], false), &[python.to_str().unwrap(), "-c", &code], &s.ws))
        .unwrap();
    let out = run(&prepared);
    assert!(out.stdout.contains("netrc read") && out.stdout.contains("'key'"), "{out:?}");
}

#[test]
fn every_hidden_directory_in_a_writable_root_is_empty_read_only_and_pinned() {
    // The home sits in the (writable) workspace, so only the mounts stop writes, renames and removals. The first
    // hidden directory gets a tmpfs of its own, the others copies of its mount: each is checked.
    let s = Scratch::new();
    let home = s.ws.join("home");
    let dirs = [".ssh", ".aws", ".kube", ".gnupg"];
    for dir in dirs {
        fs::create_dir_all(home.join(dir)).unwrap();
        fs::write(home.join(dir).join("key"), "SECRET\n").unwrap();
        fs::create_dir_all(home.join(format!("{dir}.twin"))).unwrap();
        fs::write(home.join(format!("{dir}.twin")).join("key"), "twin\n").unwrap();
    }
    let mut script = String::new();
    for dir in dirs {
        for name in [dir.to_owned(), format!("{dir}.twin")] {
            let path = home.join(&name);
            script.push_str(&format!(
                "d='{p}'; echo \"{name} entries $(ls -A \"$d\" | tr '\\n' ' ')\"; \
                 touch \"$d/new\" 2>/dev/null && echo '{name} written'; \
                 mv \"$d\" \"$d.moved\" 2>/dev/null && echo '{name} moved' && mv \"$d.moved\" \"$d\"; \
                 rmdir \"$d\" 2>/dev/null && echo '{name} removed'; true\n",
                p = path.display()
            ));
        }
    }
    let patterns = dirs.iter().map(|d| HiddenPattern::parse(&format!("~/{d}")).unwrap()).collect();
    let sandbox = LinuxSandbox::default().with_hidden(HiddenPaths {
        home: Some(home.clone()),
        patterns,
        reachable: Vec::new(),
    });
    let prepared =
        sandbox.prepare(request(workspace_only(vec![], false), &["bash", "-c", &script], &s.ws)).unwrap();
    let out = run(&prepared);
    assert!(out.ok(), "{out:?}");
    for dir in dirs {
        assert!(out.stdout.contains(&format!("{dir} entries \n")), "{dir} not empty: {out:?}");
        for what in ["written", "moved", "removed"] {
            assert!(!out.stdout.contains(&format!("{dir} {what}")), "{dir} {what}: {out:?}");
        }
        // The twin, in the same writable root, can be written and moved (it is not empty, so not removed).
        let twin = format!("{dir}.twin");
        assert!(out.stdout.contains(&format!("{twin} entries key \n")), "{twin}: {out:?}");
        assert!(out.stdout.contains(&format!("{twin} written")), "{twin}: {out:?}");
        assert!(out.stdout.contains(&format!("{twin} moved")), "{twin}: {out:?}");
        assert_eq!(fs::read_to_string(home.join(dir).join("key")).unwrap(), "SECRET\n");
        assert!(!home.join(dir).join("new").exists());
    }
}
