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

/// Run `script` with bash in the workspace under `sandbox` (workspace-write, only the workspace writable), each
/// call a command of its own (prepared again, as the server does).
fn command(sandbox: &LinuxSandbox, s: &Scratch, script: &str) -> crate::common::Probe {
    let prepared =
        sandbox.prepare(request(workspace_only(vec![], false), &["bash", "-c", script], &s.ws)).unwrap();
    let out = run_long(&prepared);
    assert!(out.ok(), "{out:?}");
    out
}

/// Run a prepared spawn with up to five minutes to finish (creating or removing 101,000 files on a loaded
/// machine).
fn run_long(prepared: &uexec_ports::SandboxedSpawn) -> crate::common::Probe {
    use std::process::Stdio;
    let mut child = crate::common::command(&prepared.spawn, &[], &[]);
    child.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = child.spawn().unwrap();
    let (status, stdout, stderr) =
        crate::common::finish(child, std::time::Duration::from_secs(300)).expect("finished within 5 minutes");
    crate::common::Probe { code: status.code().unwrap_or(-1), stdout, stderr }
}

/// A sandbox hiding the workspace patterns `patterns` (no home).
fn hiding(patterns: &[&str]) -> LinuxSandbox {
    let patterns = patterns.iter().map(|p| HiddenPattern::parse(p).unwrap()).collect();
    LinuxSandbox::default().with_hidden(HiddenPaths { home: None, patterns, reachable: Vec::new() })
}

/// `cat` each of `paths` (relative to the cwd) and say `read P` or `fail P`.
fn cat_each(paths: &[&str]) -> String {
    paths
        .iter()
        .map(|p| format!("if cat '{p}' >/dev/null 2>&1; then echo 'read {p}'; else echo 'fail {p}'; fi\n"))
        .collect()
}

#[test]
fn a_literal_hidden_path_stays_hidden_after_a_command_renames_its_parent() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join("config/prod")).unwrap();
    fs::write(s.ws.join("config/prod/db.secret"), "SECRET\n").unwrap();
    fs::write(s.ws.join("config/prod.secret"), "SECRET\n").unwrap();
    fs::create_dir_all(s.ws.join("other")).unwrap();
    fs::write(s.ws.join("other/plain"), "twin\n").unwrap();
    let sandbox = hiding(&["config/prod.secret", "config/prod/db.secret"]);
    // First command: the directories above the hidden entries cannot be renamed; the twin directory can.
    let out = command(
        &sandbox,
        &s,
        "mv config config2 2>/dev/null && echo 'moved config'; mv config/prod config/prod2 2>/dev/null && \
         echo 'moved prod'; mkdir -p x && mv config x/.git 2>/dev/null && echo 'moved into .git'; \
         mv other other2 && echo 'moved other'; true",
    );
    assert!(!out.stdout.contains("moved config") && !out.stdout.contains("moved prod"), "{out:?}");
    assert!(!out.stdout.contains("moved into .git"), "{out:?}");
    assert!(out.stdout.contains("moved other"), "{out:?}");
    // Next command: the secret is unreadable at its path and under every name a rename could have given it.
    let out = command(
        &sandbox,
        &s,
        &cat_each(&[
            "config/prod.secret",
            "config2/prod.secret",
            "x/.git/prod.secret",
            "config/prod/db.secret",
            "config/prod2/db.secret",
            "other2/plain",
        ]),
    );
    for denied in ["config/prod.secret", "config/prod/db.secret"] {
        assert!(out.stdout.contains(&format!("fail {denied}")), "{denied}: {out:?}");
    }
    assert!(!out.stdout.contains("read config2") && !out.stdout.contains("read x/"), "{out:?}");
    assert!(out.stdout.contains("read other2/plain"), "{out:?}");
    assert_eq!(fs::read_to_string(s.ws.join("config/prod.secret")).unwrap(), "SECRET\n");
}

#[test]
fn a_glob_hidden_file_stays_hidden_after_a_command_moves_its_directory_into_a_dot_git() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join("app/keys")).unwrap();
    fs::write(s.ws.join("app/.env"), "SECRET\n").unwrap();
    fs::write(s.ws.join("app/keys/server.pem"), "SECRET\n").unwrap();
    fs::create_dir_all(s.ws.join("lib")).unwrap();
    fs::write(s.ws.join("lib/plain"), "twin\n").unwrap();
    let sandbox = hiding(&[".env*", "*.pem"]);
    let out = command(
        &sandbox,
        &s,
        "mkdir -p x y; mv app x/.git 2>/dev/null && echo 'moved app'; mv app/keys x/.git 2>/dev/null && \
         echo 'moved keys'; mv app app.node_modules 2>/dev/null && echo 'renamed app'; \
         mv lib y/.git && echo 'moved lib'; true",
    );
    for what in ["moved app", "moved keys", "renamed app"] {
        assert!(!out.stdout.contains(what), "{what}: {out:?}");
    }
    assert!(out.stdout.contains("moved lib"), "{out:?}");
    let out = command(
        &sandbox,
        &s,
        &cat_each(&[
            "app/.env",
            "app/keys/server.pem",
            "x/.git/.env",
            "x/.git/keys/server.pem",
            "y/.git/plain",
        ]),
    );
    assert!(
        out.stdout.contains("fail app/.env") && out.stdout.contains("fail app/keys/server.pem"),
        "{out:?}"
    );
    assert!(!out.stdout.contains("read x/.git/.env") && !out.stdout.contains("read x/.git/keys"), "{out:?}");
    assert!(out.stdout.contains("read y/.git/plain"), "{out:?}");
}

#[test]
fn a_command_that_fills_the_workspace_does_not_stop_the_next_one() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join("aaa")).unwrap();
    fs::write(s.ws.join("aaa/ok.txt"), "twin\n").unwrap();
    fs::create_dir_all(s.ws.join("zzz")).unwrap();
    fs::write(s.ws.join("zzz/.env"), "SECRET\n").unwrap();
    fs::write(s.ws.join("zzz/plain"), "twin\n").unwrap();
    let fill = "mkdir junk && cd junk && python3 -c 'import os\nfor i in range(101000): os.close(os.open(f\"f{i}\", \
                os.O_CREAT | os.O_WRONLY))' && ls | wc -l";
    // The README's example pattern, the default budget: everything is searched, the secret stays hidden, and
    // the files can be removed.
    let sandbox = hiding(&[".env*"]);
    let out = command(&sandbox, &s, fill);
    assert_eq!(out.stdout.trim(), "101000", "{out:?}");
    let script = format!("{}rm -rf junk && echo removed", cat_each(&["zzz/.env", "zzz/plain", "aaa/ok.txt"]));
    let prepared =
        sandbox.prepare(request(workspace_only(vec![], false), &["bash", "-c", &script], &s.ws)).unwrap();
    let hidden = prepared.report.protections.iter().find(|p| p.name == "hidden_paths").unwrap();
    assert_eq!(hidden.status, uexec_domain::ProtectionStatus::Enforced, "{hidden:?}");
    let out = run_long(&prepared);
    assert!(out.stdout.contains("fail zzz/.env"), "{out:?}");
    assert!(out.stdout.contains("read zzz/plain") && out.stdout.contains("read aaa/ok.txt"), "{out:?}");
    assert!(out.stdout.contains("removed") && !s.ws.join("junk").exists(), "{out:?}");
    // A budget these files exceed (the old cap): the next command still runs, the files can still be removed,
    // and what the search did not reach is hidden as a whole (the secret and its readable twin with it).
    let sandbox = hiding(&[".env*"]).with_hidden_search_budget(100_000);
    command(&sandbox, &s, fill);
    let prepared =
        sandbox.prepare(request(workspace_only(vec![], false), &["bash", "-c", &script], &s.ws)).unwrap();
    let hidden = prepared.report.protections.iter().find(|p| p.name == "hidden_paths").unwrap();
    assert_eq!(hidden.status, uexec_domain::ProtectionStatus::Enforced, "{hidden:?}");
    assert!(
        hidden.detail.contains(&format!("did not get through {}", s.ws.join("zzz").display())),
        "{hidden:?}"
    );
    let out = run_long(&prepared);
    assert!(out.stdout.contains("fail zzz/.env") && out.stdout.contains("fail zzz/plain"), "{out:?}");
    assert!(out.stdout.contains("read aaa/ok.txt"), "{out:?}");
    assert!(out.stdout.contains("removed") && !s.ws.join("junk").exists(), "{out:?}");
    // Once they are gone the whole workspace is searched again: the twin is back, the secret is not.
    let out = command(&sandbox, &s, &cat_each(&["zzz/.env", "zzz/plain"]));
    assert!(out.stdout.contains("fail zzz/.env") && out.stdout.contains("read zzz/plain"), "{out:?}");
}

#[test]
fn a_hard_link_to_a_hidden_file_does_not_expose_it() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join("config")).unwrap();
    fs::write(s.ws.join("config/prod.secret"), "SECRET\n").unwrap();
    fs::write(s.ws.join(".env"), "SECRET\n").unwrap();
    fs::write(s.ws.join("plain"), "twin\n").unwrap();
    let sandbox = hiding(&["config/prod.secret", ".env*"]);
    // linkat needs no read permission, but the name resolves to the mount over it: another file system.
    let out = command(
        &sandbox,
        &s,
        "ln .env x 2>/dev/null && echo 'linked .env'; ln config/prod.secret y 2>/dev/null && echo 'linked secret'; \
         ln -s .env z; ln plain twin && echo 'linked plain'; true",
    );
    assert!(!out.stdout.contains("linked .env") && !out.stdout.contains("linked secret"), "{out:?}");
    assert!(out.stdout.contains("linked plain"), "{out:?}");
    let out = command(&sandbox, &s, &cat_each(&["x", "y", "z", ".env", "twin"]));
    for denied in ["x", "y", "z", ".env"] {
        assert!(out.stdout.contains(&format!("fail {denied}")), "{denied}: {out:?}");
    }
    assert!(out.stdout.contains("read twin"), "{out:?}");
    // A hard link made while a file was not hidden (before the pattern named it, or by the person) is another
    // name for the same content: it is hidden too, found by its inode.
    fs::hard_link(s.ws.join(".env"), s.ws.join("sub-link")).unwrap();
    fs::create_dir_all(s.ws.join("deep")).unwrap();
    fs::hard_link(s.ws.join("config/prod.secret"), s.ws.join("deep/copy")).unwrap();
    let out = command(&sandbox, &s, &cat_each(&["sub-link", "deep/copy", "twin"]));
    assert!(out.stdout.contains("fail sub-link") && out.stdout.contains("fail deep/copy"), "{out:?}");
    assert!(out.stdout.contains("read twin"), "{out:?}");
}
