//! The budgets a sandboxed command can fill fail closed, and no command chooses what falls outside them
//! (`uexec_domain::gitdir`: `nested_modes`, `closed_dirs`, the `shallow` entry): planted repositories or files at
//! the workspace's top level leave the person's nested repository read-only and the report honest; a planted
//! `.git/shallow` and a new `.git/modules/<name>` are refused. Each denied probe has an allowed twin; the
//! repositories are made and checked by a real git outside the sandbox.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use uexec_domain::gitdir::{MAX_NESTED_REPOSITORIES, MAX_NESTED_SCAN_ENTRIES};
use uexec_domain::{ProtectionStatus, SandboxPolicy};
use uexec_ports::{Sandbox, SandboxError};
use uexec_sandbox_linux::LinuxSandbox;

use crate::common::{Scratch, bash, denied, prepare, request, workspace_only};

/// Run git outside the sandbox in `dir`; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository at `dir` with `commits` commits on `main` and an identity in its config.
fn repository(dir: &Path, commits: usize) {
    fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Sandboxed"]);
    git(dir, &["config", "user.email", "s@example.invalid"]);
    git(dir, &["config", "commit.gpgsign", "false"]);
    for n in 0..commits {
        fs::write(dir.join("a.txt"), format!("{n}\n")).unwrap();
        git(dir, &["add", "a.txt"]);
        git(dir, &["commit", "-q", "-m", &format!("c{n}")]);
    }
}

fn policy() -> SandboxPolicy {
    workspace_only(vec![], false)
}

/// True when a failed probe failed because the sandbox refused a write (or a rename of a mount point).
fn refused(text: &str) -> bool {
    let lower = text.to_lowercase();
    denied(&lower) || lower.contains("busy") || lower.contains("could not lock config file")
}

/// Wait (bounded) until a directory created in `dir` now is born after `path`: what a command creates from then
/// on is younger than `path` on this file system's clock, however coarse.
fn wait_for_a_later_birth(dir: &Path, path: &Path) {
    let born =
        |p: &Path| fs::symlink_metadata(p).unwrap().created().expect("this file system has birth times");
    let before: SystemTime = born(path);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let probe = dir.join(".birth-probe");
        fs::create_dir(&probe).unwrap();
        let later = born(&probe) > before;
        fs::remove_dir(&probe).unwrap();
        if later {
            return;
        }
        assert!(Instant::now() < deadline, "the birth clock never moved");
        std::thread::yield_now();
    }
}

/// The attacks on the person's `vendorlib` after a command filled the top level, and their twins.
fn vendorlib_stays_protected(ws: &Path) {
    let config_before = fs::read(ws.join("vendorlib/.git/config")).unwrap();
    for (attack, twin) in [
        ("echo '[core] fsmonitor = evil' >> vendorlib/.git/config", "echo x >> vendorlib/.git/description"),
        (
            "cd vendorlib && git config core.fsmonitor evil",
            "cd vendorlib && echo c > c.txt && git add c.txt && git commit -q -m in-vendorlib",
        ),
        ("touch vendorlib/.git/hooks/post-checkout", "touch vendorlib/new.txt"),
    ] {
        let allowed = bash(policy(), ws, twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(policy(), ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(fs::read(ws.join("vendorlib/.git/config")).unwrap(), config_before);
    assert!(!ws.join("vendorlib/.git/hooks/post-checkout").exists());
    assert_eq!(git(&ws.join("vendorlib"), &["log", "-1", "--format=%s"]).trim(), "in-vendorlib");
    // The report is honest: enforced, with nothing said to be left unprotected.
    let report = prepare(policy(), &["/bin/true"], ws).report;
    let read_only = report.protections.iter().find(|p| p.name == "read_only_subpaths").unwrap();
    assert_eq!(read_only.status, ProtectionStatus::Enforced, "{report}");
    assert!(read_only.detail.contains(&ws.join("vendorlib/.git/config").display().to_string()), "{report}");
}

#[test]
fn forty_planted_repositories_leave_the_person_s_nested_repository_read_only() {
    let s = Scratch::new();
    repository(&s.ws.join("vendorlib"), 1);
    wait_for_a_later_birth(&s.ws, &s.ws.join("vendorlib/.git"));
    // A sandboxed command plants 40 repositories, named to come first, each with objects.
    let plant = bash(policy(), &s.ws, "for i in $(seq -w 1 40); do git init -q aa$i || exit 1; done");
    assert!(plant.ok(), "{plant:?}");
    vendorlib_stays_protected(&s.ws);
    // The planted ones are protected too, as a whole beyond the budget: none is writable, all are readable.
    let planted_config = bash(
        policy(),
        &s.ws,
        "for i in $(seq -w 1 40); do echo '[core] fsmonitor = evil' >> aa$i/.git/config 2>/dev/null && exit 1; \
         done; exit 0",
    );
    assert!(planted_config.ok(), "a planted repository's config was writable: {planted_config:?}");
    let read = bash(policy(), &s.ws, "git -C aa40 rev-parse --git-dir");
    assert!(read.ok(), "{read:?}");
    let report = prepare(policy(), &["/bin/true"], &s.ws).report;
    assert!(report.to_string().contains(&format!("more than {MAX_NESTED_REPOSITORIES}")), "{report}");
}

#[test]
fn eleven_hundred_planted_files_leave_the_person_s_nested_repository_read_only() {
    let s = Scratch::new();
    repository(&s.ws.join("vendorlib"), 1);
    let plant = bash(policy(), &s.ws, "for i in $(seq 1 1100); do : > 0planted$i || exit 1; done");
    assert!(plant.ok(), "{plant:?}");
    vendorlib_stays_protected(&s.ws);
}

#[test]
fn a_top_level_beyond_the_listing_budget_is_refused_and_the_error_says_what_to_do() {
    let s = Scratch::new();
    repository(&s.ws.join("vendorlib"), 1);
    for i in 0..=MAX_NESTED_SCAN_ENTRIES {
        fs::write(s.ws.join(format!("f{i}")), "").unwrap();
    }
    let refused = LinuxSandbox::default().prepare(request(policy(), &["/bin/true"], &s.ws));
    match refused {
        Err(SandboxError::Unenforceable { missing, setting }) => {
            assert!(missing.contains("MAX_NESTED_SCAN_ENTRIES") && missing.contains("remove"), "{missing}");
            assert!(setting.is_some());
        }
        other => panic!("a top level beyond the budget must be refused: {other:?}"),
    }
    // With degradation accepted, the command runs and the report says partial, never enforced.
    let mut degraded = request(policy(), &["/bin/true"], &s.ws);
    degraded.allow_degraded = true;
    let report = LinuxSandbox::default().prepare(degraded).unwrap().report;
    let read_only = report.protections.iter().find(|p| p.name == "read_only_subpaths").unwrap();
    assert_eq!(read_only.status, ProtectionStatus::Partial, "{report}");
    // The twin: with the planted files gone, the same workspace runs, its nested repository protected.
    for i in 0..=MAX_NESTED_SCAN_ENTRIES {
        fs::remove_file(s.ws.join(format!("f{i}"))).unwrap();
    }
    vendorlib_stays_protected(&s.ws);
}

#[test]
fn a_planted_shallow_is_refused_while_commits_work_and_gc_outside_keeps_history() {
    let s = Scratch::new();
    repository(&s.ws, 3);
    let commits: Vec<String> = git(&s.ws, &["rev-list", "--all"]).lines().map(str::to_owned).collect();
    let head = commits[0].clone();
    for attack in [
        format!("echo {head} > .git/shallow"),
        format!("echo {head} > .git/shallow.lock && mv .git/shallow.lock .git/shallow"),
        "rm -f .git/shallow".to_owned(),
    ] {
        let twin = bash(policy(), &s.ws, "echo n >> a.txt && git commit -q -am next");
        assert!(twin.ok(), "{twin:?}");
        let probe = bash(policy(), &s.ws, &attack);
        // Written through, the placeholder link resolves below /dev/null: "Not a directory".
        let through = probe.text().to_lowercase().contains("not a directory");
        assert!(!probe.ok() && (refused(&probe.text()) || through), "{attack}: {probe:?}");
        assert_eq!(
            fs::read_link(s.ws.join(".git/shallow")).unwrap(),
            Path::new(uexec_domain::gitdir::ABSENT_LINK_TARGET)
        );
    }
    // git outside reads the placeholder as no shallow file: the repository is complete, and gc keeps it all.
    assert_eq!(git(&s.ws, &["rev-parse", "--is-shallow-repository"]).trim(), "false");
    git(&s.ws, &["gc", "-q", "--prune=now"]);
    for commit in &commits {
        git(&s.ws, &["cat-file", "-e", &format!("{commit}^{{commit}}")]);
    }
    assert_eq!(git(&s.ws, &["rev-list", "--count", "main"]).trim(), "6");
    // A present shallow file (a shallow clone's) cannot be changed either; reading it works.
    let upstream = s.outside.join("upstream");
    repository(&upstream, 3);
    let clone = s.ws.join("shallow-clone");
    let out = Command::new("git")
        .args(["clone", "-q", "--depth", "1", "--no-local"])
        .arg(format!("file://{}", upstream.display()))
        .arg(&clone)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let before = fs::read(clone.join(".git/shallow")).unwrap();
    let twin = bash(policy(), &s.ws, "cat shallow-clone/.git/shallow && git -C shallow-clone log --oneline");
    assert!(twin.ok(), "{twin:?}");
    let probe =
        bash(policy(), &s.ws, "echo 0000000000000000000000000000000000000000 >> shallow-clone/.git/shallow");
    assert!(!probe.ok() && refused(&probe.text()), "{probe:?}");
    assert_eq!(fs::read(clone.join(".git/shallow")).unwrap(), before);
}

/// `git submodule add upstream name` in `repo`, outside the sandbox, and its commit.
fn submodule_add(repo: &Path, upstream: &Path, name: &str) {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "protocol.file.allow=always", "submodule", "add", "-q"])
        .arg(upstream)
        .arg(name)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    git(repo, &["commit", "-q", "-m", &format!("add {name}")]);
}

#[test]
fn a_new_module_git_dir_is_refused_while_existing_submodules_work() {
    let s = Scratch::new();
    let upstream = s.outside.join("lib");
    repository(&upstream, 1);
    repository(&s.ws, 1);
    submodule_add(&s.ws, &upstream, "lib");
    submodule_add(&s.ws, &upstream, "deep/er/lib");
    git(&s.ws.join("lib"), &["config", "user.name", "Sandboxed"]);
    git(&s.ws.join("lib"), &["config", "user.email", "s@example.invalid"]);
    // A repository without submodules: its modules/ is absent until the first command.
    let plain = s.ws.join("plain");
    repository(&plain, 1);
    for (attack, twin) in [
        (
            "mkdir -p .git/modules/evil/hooks && touch .git/modules/evil/hooks/post-checkout",
            "cd lib && echo s > s.txt && git add s.txt && git commit -q -m in-sub",
        ),
        (
            "cp -r .git/modules/lib .git/modules/evil",
            "git submodule status && git submodule foreach -q 'git log -1 --format=%s'",
        ),
        ("mkdir .git/modules/deep/evil", "cd deep/er/lib && git log -1 --format=%s"),
        (
            "mkdir -p .git/modules/deep/er/evil",
            "touch .git/modules/lib/ORIG_HEAD.test && mkdir .git/modules/lib/x",
        ),
        ("mv .git/modules .git/modules-away", "git -C lib status --porcelain"),
        (
            "mkdir -p plain/.git/modules/evil/hooks",
            "cd plain && echo p > p.txt && git add p.txt && git commit -q -m p",
        ),
    ] {
        let allowed = bash(policy(), &s.ws, twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert!(!s.ws.join(".git/modules/evil").exists() && !s.ws.join(".git/modules/deep/evil").exists());
    assert!(!s.ws.join(".git/modules/deep/er/evil").exists());
    assert!(!plain.join(".git/modules/evil").exists());
    assert!(git(&s.ws.join("lib"), &["log", "--format=%s"]).contains("in-sub"));
    // A new submodule's git dir is made outside the sandbox: the refusal of `git submodule add` inside.
    let add = bash(
        policy(),
        &s.ws,
        &format!("git -c protocol.file.allow=always submodule add -q {} lib2", upstream.display()),
    );
    assert!(!add.ok() && refused(&add.text()), "{add:?}");
    assert!(!s.ws.join(".git/modules/lib2").exists());
}
