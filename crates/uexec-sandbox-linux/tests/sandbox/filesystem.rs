//! Filesystem probes: every allowed write has a denied twin.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use uexec_domain::SandboxPolicy;

use crate::common::{Scratch, bash, denied, py, workspace_only};

#[test]
fn writes_inside_the_root_and_not_outside() {
    let s = Scratch::new();
    let inside = bash(
        workspace_only(vec![], false),
        &s.ws,
        "echo new > new.txt && echo more >> inside.txt && mkdir d && echo piped | tee /dev/stderr > /dev/stdout",
    );
    assert!(inside.ok() && inside.stdout == "piped\n" && inside.stderr == "piped\n", "{inside:?}");
    assert_eq!(Scratch::read(&s.ws.join("new.txt")), "new\n");
    assert!(s.ws.join("d").is_dir());

    let script = format!("echo pwned > {}/secret.txt", s.outside.display());
    let outside = bash(workspace_only(vec![], false), &s.ws, &script);
    assert!(!outside.ok() && denied(&outside.text()), "{outside:?}");
    assert_eq!(Scratch::read(&s.outside.join("secret.txt")), "original\n");

    let create = bash(workspace_only(vec![], false), &s.ws, &format!("touch {}/new", s.outside.display()));
    assert!(!create.ok() && denied(&create.text()), "{create:?}");
    assert!(!s.outside.join("new").exists());
}

#[test]
fn git_directory_stays_read_only_and_cannot_be_moved_away() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join(".git/hooks")).unwrap();
    fs::write(s.ws.join(".git/config"), "[core]\n").unwrap();
    fs::create_dir_all(s.ws.join("src")).unwrap();
    let policy = || workspace_only(vec![], false);

    let allowed = bash(policy(), &s.ws, "echo x >> src/lib.rs && cat .git/config");
    assert!(allowed.ok() && allowed.stdout.contains("[core]"), "{allowed:?}");

    for attack in [
        "echo '[core] fsmonitor = evil' >> .git/config",
        "touch .git/hooks/pre-commit",
        "mv .git .git-away",
        "rm -rf .git",
        "mv .git/config .git/config.old",
        "chmod 777 .git/config",
    ] {
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok(), "{attack}: {probe:?}");
        let text = probe.text().to_lowercase();
        assert!(denied(&text) || text.contains("busy"), "{attack}: {probe:?}");
    }
    // The rename fails with EBUSY: .git is a mount point in the sandbox.
    let rename = py(
        policy(),
        &s.ws,
        "import os\ntry:\n os.rename('.git', 'gone')\nexcept OSError as e: print(e.errno)",
    );
    assert_eq!(rename.stdout.trim(), libc::EBUSY.to_string(), "{rename:?}");
    assert_eq!(Scratch::read(&s.ws.join(".git/config")), "[core]\n");
    assert!(!s.ws.join(".git/hooks/pre-commit").exists());
    assert!(!s.ws.join(".git-away").exists() && !s.ws.join("gone").exists());
}

#[test]
fn git_file_gitdir_and_uexec_are_protected() {
    let s = Scratch::new();
    // A worktree: ws/.git is a file naming a gitdir inside another writable root.
    let main = s.base.join("main");
    let gitdir = main.join(".git/worktrees/ws");
    fs::create_dir_all(&gitdir).unwrap();
    fs::write(gitdir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(s.ws.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
    fs::create_dir_all(s.ws.join(".uexec")).unwrap();
    let policy = || workspace_only(vec![main.clone()], false);

    let allowed = bash(policy(), &s.ws, &format!("echo x > {}/file && echo y > local", main.display()));
    assert!(allowed.ok(), "{allowed:?}");
    for attack in [
        format!("echo evil > {}/HEAD", gitdir.display()),
        "echo 'gitdir: /tmp/evil' > .git".to_owned(),
        "rm .git".to_owned(),
        "touch .uexec/config.toml".to_owned(),
        format!("echo evil > {}/.git/config", main.display()),
    ] {
        let probe = bash(policy(), &s.ws, &attack);
        assert!(!probe.ok(), "{attack}: {probe:?}");
    }
    assert_eq!(Scratch::read(&gitdir.join("HEAD")), "ref: refs/heads/main\n");
    assert!(Scratch::read(&s.ws.join(".git")).starts_with("gitdir: "));
    assert!(!s.ws.join(".uexec/config.toml").exists());
}

#[test]
fn symlinks_out_of_the_root_do_not_grant_writes() {
    let s = Scratch::new();
    std::os::unix::fs::symlink(s.outside.join("secret.txt"), s.ws.join("escape")).unwrap();
    std::os::unix::fs::symlink(&s.outside, s.ws.join("escape-dir")).unwrap();
    std::os::unix::fs::symlink(s.ws.join("inside.txt"), s.ws.join("stay")).unwrap();
    let policy = || workspace_only(vec![], false);

    let allowed = bash(policy(), &s.ws, "echo through-link > stay");
    assert!(allowed.ok(), "{allowed:?}");
    assert_eq!(Scratch::read(&s.ws.join("inside.txt")), "through-link\n");

    for attack in ["echo pwned > escape", "echo pwned > escape-dir/secret.txt", "touch escape-dir/new"] {
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && denied(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(Scratch::read(&s.outside.join("secret.txt")), "original\n");
    assert!(!s.outside.join("new").exists());
}

#[test]
fn hard_links_and_renames_across_the_root_boundary_fail() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join("sub")).unwrap();
    let secret = s.outside.join("secret.txt");
    let code = format!(
        r#"
import os
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno)
attempt("link-in", lambda: os.link({secret:?}, "stolen"))
attempt("write-link", lambda: open("stolen", "r+").write("pwned"))
attempt("rename-in", lambda: os.rename({secret:?}, "moved-in"))
attempt("rename-out", lambda: os.rename("inside.txt", {out:?}))
attempt("link-within", lambda: os.link("inside.txt", "sub/linked"))
attempt("rename-within", lambda: os.rename("sub/linked", "renamed"))
"#,
        out = s.outside.join("moved-out").display().to_string(),
    );
    let probe = py(workspace_only(vec![], false), &s.ws, &code);
    let lines: Vec<&str> = probe.stdout.lines().collect();
    assert!(lines.contains(&"link-within ok") && lines.contains(&"rename-within ok"), "{probe:?}");
    for attack in ["link-in", "write-link", "rename-in", "rename-out"] {
        assert!(lines.iter().any(|l| l.starts_with(attack) && l.contains("errno")), "{attack}: {probe:?}");
    }
    assert_eq!(Scratch::read(&secret), "original\n");
    assert!(!s.outside.join("moved-out").exists() && s.ws.join("inside.txt").exists());
}

#[test]
fn metadata_and_truncation_outside_the_root_fail() {
    let s = Scratch::new();
    let secret = s.outside.join("secret.txt");
    let mode_before = fs::metadata(&secret).unwrap().permissions().mode();
    let mtime_before = fs::metadata(&secret).unwrap().modified().unwrap();
    let policy = || workspace_only(vec![], false);

    let allowed = bash(
        policy(),
        &s.ws,
        "chmod 600 inside.txt && touch -d 2001-01-01 inside.txt && truncate -s 0 inside.txt",
    );
    assert!(allowed.ok(), "{allowed:?}");
    assert_eq!(fs::metadata(s.ws.join("inside.txt")).unwrap().permissions().mode() & 0o777, 0o600);

    let path = secret.display();
    for attack in [
        format!("chmod 4777 {path}"),
        format!("chown nobody {path}"),
        format!("touch -d 2001-01-01 {path}"),
        format!("truncate -s 0 {path}"),
        format!(
            "setfattr -n user.x -v 1 {path} 2>&1 || python3 -c 'import os; os.setxattr(\"{path}\", \"user.x\", b\"1\")'"
        ),
    ] {
        let probe = bash(policy(), &s.ws, &attack);
        assert!(!probe.ok() && denied(&probe.text()), "{attack}: {probe:?}");
    }
    let meta = fs::metadata(&secret).unwrap();
    assert_eq!(meta.permissions().mode(), mode_before);
    assert_eq!(meta.modified().unwrap(), mtime_before);
    assert_eq!(Scratch::read(&secret), "original\n");
}

#[test]
fn device_nodes_cannot_be_created_even_by_root() {
    let s = Scratch::new();
    let allowed = bash(workspace_only(vec![], false), &s.ws, "mkfifo fifo && test -p fifo");
    assert!(allowed.ok(), "{allowed:?}");
    // A block device node inside a writable root would give raw access to the disk.
    let probe = bash(workspace_only(vec![], false), &s.ws, "mknod disk b 8 0");
    assert!(!probe.ok() && denied(&probe.text()), "{probe:?}");
    assert!(!s.ws.join("disk").exists());
}

#[test]
fn device_nodes_already_inside_a_root_cannot_be_opened() {
    let s = Scratch::new();
    // An extracted root filesystem in the workspace, say: a copy of /dev/null and of /dev/zero made outside.
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg("mknod null-copy c 1 3 && mknod zero-copy c 1 5")
        .current_dir(&s.ws)
        .status()
        .unwrap();
    assert!(made.success());
    let allowed =
        bash(workspace_only(vec![], false), &s.ws, "echo x > /dev/null && head -c1 /dev/zero | wc -c");
    assert!(allowed.ok() && allowed.stdout.trim() == "1", "{allowed:?}");
    for attack in ["echo x > null-copy", "head -c1 zero-copy"] {
        let probe = bash(workspace_only(vec![], false), &s.ws, attack);
        assert!(!probe.ok() && denied(&probe.text()), "{attack}: {probe:?}");
    }
}

#[test]
fn read_only_policy_writes_nothing_but_dev_null() {
    let s = Scratch::new();
    let policy = || SandboxPolicy::ReadOnly { network_access: false };
    let allowed = bash(policy(), &s.ws, "cat inside.txt && echo discard > /dev/null && ls / > /dev/null");
    assert!(allowed.ok() && allowed.stdout.contains("inside"), "{allowed:?}");
    let tmp_target = PathBuf::from(format!("/tmp/uexec-ro-probe-{}", std::process::id()));
    for attack in [
        "echo x > inside.txt".to_owned(),
        "touch new".to_owned(),
        format!("touch {}", tmp_target.display()),
        "mkdir /dev/shm/uexec-probe".to_owned(),
        "chmod 000 inside.txt".to_owned(),
        "echo x > /dev/zero".to_owned(),
    ] {
        let probe = bash(policy(), &s.ws, &attack);
        assert!(!probe.ok() && denied(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(Scratch::read(&s.ws.join("inside.txt")), "inside\n");
    assert!(!tmp_target.exists() && !s.ws.join("new").exists());
}

#[test]
fn tmp_is_a_writable_root_unless_excluded() {
    let s = Scratch::new();
    let target = PathBuf::from(format!("/tmp/uexec-tmp-probe-{}", std::process::id()));
    let _ = fs::remove_file(&target);
    let script = format!("echo x > {}", target.display());
    let excluded = bash(workspace_only(vec![], false), &s.ws, &script);
    assert!(!excluded.ok() && denied(&excluded.text()), "{excluded:?}");
    assert!(!target.exists());
    let default = bash(SandboxPolicy::default(), &s.ws, &script);
    assert!(default.ok(), "{default:?}");
    assert_eq!(Scratch::read(&target), "x\n");
    let _ = fs::remove_file(&target);
}

#[test]
fn sandbox_mounts_never_reach_the_host() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join(".git")).unwrap();
    let before = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let probe = bash(workspace_only(vec![], false), &s.ws, "grep -c . /proc/self/mountinfo");
    assert!(probe.ok(), "{probe:?}");
    let after = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert_eq!(before, after, "the sandbox's mounts leaked into the host namespace");
    assert!(!after.contains(&s.ws.display().to_string()));
}

#[test]
fn shared_memory_is_writable_with_tmp_and_not_without() {
    let s = Scratch::new();
    let with_tmp = SandboxPolicy::WorkspaceWrite {
        writable_roots: vec![],
        network_access: false,
        exclude_slash_tmp: false,
        exclude_tmpdir_env_var: true,
    };
    // Python's multiprocessing locks are POSIX semaphores in /dev/shm.
    let lock = py(
        with_tmp,
        &s.ws,
        "import multiprocessing as m; l = m.Lock(); l.acquire(); l.release(); print('locked')",
    );
    assert!(lock.ok() && lock.stdout == "locked\n", "{lock:?}");

    let name = format!("/dev/shm/uexec-probe-{}", std::process::id());
    let without_tmp = bash(workspace_only(vec![], false), &s.ws, &format!("echo x > {name}"));
    assert!(!without_tmp.ok() && denied(&without_tmp.text()), "{without_tmp:?}");
    let read_only =
        bash(SandboxPolicy::ReadOnly { network_access: false }, &s.ws, &format!("echo x > {name}"));
    assert!(!read_only.ok() && denied(&read_only.text()), "{read_only:?}");
    assert!(!PathBuf::from(&name).exists());
}

#[test]
fn the_spawn_cwd_grants_nothing_only_the_workspace_is_writable() {
    let s = Scratch::new();
    // The command starts outside the workspace (a caller's `workdir`): its cwd stays read-only.
    let mut request = crate::common::request(
        workspace_only(vec![], false),
        &["bash", "-c", "echo pwned > here.txt; echo ok > \"$WS/inside.txt\""],
        &s.outside,
    );
    request.workspace = s.ws.clone();
    request.spawn.env.push(("WS".into(), s.ws.clone().into_os_string()));
    let prepared =
        uexec_ports::Sandbox::prepare(&uexec_sandbox_linux::LinuxSandbox::default(), request).unwrap();
    let probe = crate::common::run(&prepared);
    assert!(denied(&probe.text()), "{probe:?}");
    assert!(!s.outside.join("here.txt").exists(), "the spawn cwd became writable");
    assert_eq!(Scratch::read(&s.ws.join("inside.txt")), "ok\n");
}

#[test]
fn a_workspace_nested_in_a_writable_root_cannot_be_swapped_for_a_decoy() {
    // /base is writable and the workspace is /base/a/proj (a project under /tmp with /tmp writable). Renaming the
    // workspace (or a directory above it) away and putting a decoy in its place would leave the next command's
    // read-only mounts on the decoy and the real .git writable at its new path.
    let s = Scratch::new();
    let proj = s.base.join("a/proj");
    fs::create_dir_all(proj.join(".git/hooks")).unwrap();
    fs::write(proj.join(".git/config"), "[core]\n").unwrap();
    fs::create_dir_all(s.base.join("sibling")).unwrap();
    let policy = || workspace_only(vec![s.base.clone()], false);

    // Allowed twins: the workspace and the rest of the outer root stay writable, siblings can be renamed.
    let allowed = bash(
        policy(),
        &proj,
        &format!(
            "echo x > file && mkdir sub && mv sub sub2 && rmdir sub2 && mv {0}/sibling {0}/sibling2 && echo y > {0}/new",
            s.base.display()
        ),
    );
    assert!(allowed.ok(), "{allowed:?}");
    assert!(s.base.join("sibling2").is_dir() && proj.join("file").exists());

    for (from, to) in [(proj.clone(), s.base.join("a/away")), (s.base.join("a"), s.base.join("away"))] {
        let code = format!(
            "import os\ntry:\n os.rename({:?}, {:?})\nexcept OSError as e: print(e.errno)",
            from.display().to_string(),
            to.display().to_string()
        );
        let rename = py(policy(), &proj, &code);
        assert_eq!(rename.stdout.trim(), libc::EBUSY.to_string(), "{from:?}: {rename:?}");
    }
    let attack =
        bash(policy(), &proj, &format!("mv {0}/a {0}/away && mkdir -p {0}/a/proj/.git", s.base.display()));
    assert!(!attack.ok(), "{attack:?}");
    // A second command, prepared by path as the server would, still finds the real repository there.
    let write = bash(policy(), &proj, "touch .git/hooks/pre-commit");
    assert!(!write.ok() && denied(&write.text()), "{write:?}");
    assert_eq!(Scratch::read(&proj.join(".git/config")), "[core]\n");
    assert!(!proj.join(".git/hooks/pre-commit").exists() && !s.base.join("away").exists());
}

#[test]
fn a_tmpdir_swapped_for_a_symlink_by_a_command_grants_nothing() {
    use uexec_ports::Sandbox;
    // $TMPDIR sits in a writable root (here the workspace; /tmp/user/1000 under /tmp alike). One command replaces
    // it with a symlink to a directory outside every root; the next command must not get that directory.
    let s = Scratch::new();
    let tmpdir = s.ws.join("tmp");
    fs::create_dir(&tmpdir).unwrap();
    let policy = || SandboxPolicy::WorkspaceWrite {
        writable_roots: vec![],
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: false,
    };
    let probe = |script: &str| {
        let mut request = crate::common::request(policy(), &["bash", "-c", script], &s.ws);
        request.tmpdir = Some(tmpdir.clone());
        crate::common::run(&uexec_sandbox_linux::LinuxSandbox::default().prepare(request).unwrap())
    };
    let swap = probe(&format!(
        "echo x > {0}/allowed && rm -r {0} && ln -s {1} {0} && echo swapped",
        tmpdir.display(),
        s.outside.display()
    ));
    assert!(swap.ok() && swap.stdout.contains("swapped"), "{swap:?}");
    let attack = probe(&format!("echo pwned > {}/secret.txt", tmpdir.display()));
    assert!(!attack.ok() && denied(&attack.text()), "{attack:?}");
    assert_eq!(Scratch::read(&s.outside.join("secret.txt")), "original\n");
}
