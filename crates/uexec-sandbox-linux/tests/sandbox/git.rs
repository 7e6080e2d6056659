//! Git in a sandboxed command: everyday git works in a repository inside a writable root, a linked worktree and
//! a submodule (and `worktree add`, `fetch` from a readable remote), while what
//! git executes or takes configuration from (config, config.worktree, hooks/, info/, objects/info/alternates)
//! cannot be written nor created, also when absent, through a symlink or after a rename. Each denied probe has an
//! allowed twin; the repositories are made and checked by a real git outside the sandbox.

use std::fs;
use std::path::Path;
use std::process::Command;

use uexec_domain::SandboxPolicy;

use crate::common::{Scratch, bash, denied, workspace_only};

/// Run git outside the sandbox in `dir`; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository at `dir` with one commit on `main` and an identity in its config.
fn repository(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Sandboxed"]);
    git(dir, &["config", "user.email", "s@example.invalid"]);
    git(dir, &["config", "commit.gpgsign", "false"]);
    fs::write(dir.join("a.txt"), "one\n").unwrap();
    git(dir, &["add", "a.txt"]);
    git(dir, &["commit", "-q", "-m", "one"]);
}

fn policy() -> SandboxPolicy {
    workspace_only(vec![], false)
}

/// True when a failed probe failed because the sandbox refused a write (or a rename of a mount point).
fn refused(text: &str) -> bool {
    let lower = text.to_lowercase();
    denied(&lower) || lower.contains("busy") || lower.contains("could not lock config file")
}

/// Everyday git, one sandboxed command per step, in the repository `repo` (a work tree, on branch `trunk`) with
/// the sandbox's working directory `cwd` under `policy`; then checked by a real git outside the sandbox, and the
/// denied twin: the same sandbox refuses to write the repository's configuration. The one list of operations
/// every setting (a repository, a linked worktree, a submodule) runs.
fn everyday_git_works(policy: &dyn Fn() -> SandboxPolicy, cwd: &Path, repo: &Path, trunk: &str) {
    let steps = [
        "echo two >> a.txt && git add a.txt && git commit -q -m two".to_owned(),
        "git commit -q --amend -m two-amended".to_owned(),
        "git branch topic && git tag v1 && git notes add -m noted HEAD".to_owned(),
        "git checkout -q -b feature && echo f > f.txt && git add f.txt && git commit -q -m feature"
            .to_owned(),
        format!("git switch -q {trunk} && echo m > m.txt && git add m.txt && git commit -q -m main-side"),
        "git merge -q --no-edit feature".to_owned(),
        "git reset -q --hard HEAD~1".to_owned(),
        "echo dirty >> a.txt && git stash -q && git stash pop -q && git checkout -q -- a.txt".to_owned(),
        format!("git switch -q feature && git rebase -q {trunk}"),
        format!("git switch -q {trunk} && git cherry-pick feature"),
    ];
    let into = format!("cd '{}'", repo.display());
    for step in &steps {
        let probe = bash(policy(), cwd, &format!("{into} && {step}"));
        assert!(probe.ok(), "{step} in {}: {probe:?}", repo.display());
    }
    // The history is the real repository's, seen by git outside the sandbox.
    let log = git(repo, &["log", "--format=%s", "--all"]);
    for subject in ["two-amended", "feature", "main-side"] {
        assert!(log.lines().any(|l| l == subject), "{subject}: {log}");
    }
    assert_eq!(git(repo, &["log", "-1", "--format=%s", trunk]).trim(), "feature", "the cherry-pick");
    assert!(git(repo, &["tag"]).lines().any(|t| t == "v1"));
    assert_eq!(git(repo, &["notes", "list"]).lines().count(), 1);
    assert_eq!(git(repo, &["status", "--porcelain", "--untracked-files=no"]).trim(), "");
    // The denied twin: the same sandbox refuses git's own configuration.
    let config = bash(policy(), cwd, &format!("{into} && git config core.fsmonitor 'touch pwned'"));
    assert!(!config.ok() && refused(&config.text()), "{config:?}");
    assert!(!git(repo, &["config", "--list"]).contains("fsmonitor"));
}

#[test]
fn everyday_git_works_in_a_sandboxed_command() {
    let s = Scratch::new();
    repository(&s.ws);
    everyday_git_works(&policy, &s.ws, &s.ws, "main");
    assert!(git(&s.ws, &["log", "--format=%s", "--all"]).lines().any(|l| l == "one"));
}

#[test]
fn everyday_git_works_in_a_linked_worktree() {
    let s = Scratch::new();
    repository(&s.ws);
    git(&s.ws, &["worktree", "add", "-q", "-b", "wt-branch", "wt"]);
    let wt = s.ws.join("wt");
    // The worktree is the cwd; the main repository (its common dir) is a writable root too.
    let policy = || workspace_only(vec![s.ws.clone()], false);
    everyday_git_works(&policy, &wt, &wt, "wt-branch");
    // The main worktree's branch is untouched.
    assert_eq!(git(&s.ws, &["log", "--format=%s", "main"]).trim(), "one");
}

/// A repository at `base/main` (outside every writable root) and its linked worktree `base/wtree` on
/// `wt-branch`, made by a real git: the worktree is the workspace, its git dir and common dir are not in it.
fn worktree_of_an_outside_repository(base: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let main = base.join("main");
    repository(&main);
    let wt = base.join("wtree");
    git(&main, &["worktree", "add", "-q", "-b", "wt-branch", wt.to_str().unwrap()]);
    (main, wt)
}

#[test]
fn everyday_git_works_in_a_linked_worktree_whose_repository_is_outside_the_writable_roots() {
    let s = Scratch::new();
    let (main, wt) = worktree_of_an_outside_repository(&s.base);
    // The person's other checkout of the same repository.
    git(&main, &["worktree", "add", "-q", "-b", "other", s.base.join("other").to_str().unwrap()]);
    let index_before = fs::read(main.join(".git/index")).unwrap();
    // The only writable root is the worktree (the cwd): the repository is granted for it, nothing else.
    let policy = || workspace_only(vec![], false);
    everyday_git_works(&policy, &wt, &wt, "wt-branch");
    // The main worktree's branch, checkout and staged state are untouched.
    assert_eq!(git(&main, &["log", "--format=%s", "main"]).trim(), "one");
    assert_eq!(fs::read(main.join(".git/index")).unwrap(), index_before);
    // A second worktree added from inside the sandbox commits too.
    let add = bash(
        policy(),
        &wt,
        "git worktree add -q -b wt3 wt3 && cd wt3 && echo 3 > 3.txt && git add 3.txt && git commit -q -m three",
    );
    assert!(add.ok(), "{add:?}");
    assert!(git(&main, &["log", "--format=%s", "wt3"]).contains("three"));
    // Denied twins: what the grant leaves read-only, and the main work tree itself.
    let common = main.join(".git");
    let admin = common.join("worktrees/wtree");
    for attack in [
        format!("echo x >> {}/a.txt", main.display()),
        format!("cp /dev/null {}/index", common.display()),
        format!("echo 'ref: refs/heads/x' > {}/HEAD", common.display()),
        format!("echo 'ref: refs/heads/x' > {}/worktrees/other/HEAD", common.display()),
        format!("cp /dev/null {}/worktrees/other/index", common.display()),
        format!("echo '[core]' >> {}/config", common.display()),
        format!("touch {}/hooks/post-checkout", common.display()),
        format!("echo /tmp/evil > {}/commondir", admin.display()),
        format!("echo /tmp/evil > {}/gitdir", admin.display()),
        format!("echo '[core]' > {}/config.worktree", admin.display()),
        format!("echo '* filter=x' > {}/info/attributes", common.display()),
        format!("mv {}/objects {}/objects.x", common.display(), common.display()),
        format!("mv {0}/worktrees/other {0}/worktrees/moved", common.display()),
        format!("mv {0}/hooks {0}/hooks.x", common.display()),
        format!("ln -sfn {} via && echo '[core]' >> via/config", common.display()),
        format!("ln -sfn {} via2 && touch via2/hooks/pre-commit", common.display()),
        format!("touch {}/../outside.txt", common.display()),
    ] {
        let probe = bash(policy(), &wt, &attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert!(!common.join("hooks/post-checkout").exists());
    assert!(!main.join("outside.txt").exists());
    let twin = bash(
        policy(),
        &wt,
        &format!("touch {}/ORIG_HEAD.test {}/refs/heads/x.test", admin.display(), common.display()),
    );
    assert!(twin.ok(), "{twin:?}");
    // The report names the grant.
    let report = crate::common::prepare(policy(), &["true"], &wt).report;
    let fs_line = report.protections.iter().find(|p| p.name == "filesystem").unwrap().detail.clone();
    assert!(
        fs_line
            .contains(&format!("{} is writable as the repository of the linked worktree", common.display())),
        "{fs_line}"
    );
    assert_eq!(
        uexec_plan::linked_worktree_repository(&uexec_plan::RealHost, &wt, std::slice::from_ref(&wt)),
        Some(Ok(common.clone()))
    );
    assert_eq!(
        uexec_plan::linked_worktree_repository(&uexec_plan::RealHost, &main, std::slice::from_ref(&main)),
        None,
        "no worktree"
    );
}

#[test]
fn a_git_file_naming_a_worktree_of_another_directory_grants_nothing() {
    let s = Scratch::new();
    let (main, _wt) = worktree_of_an_outside_repository(&s.base);
    let common = main.join(".git");
    // A workspace whose `.git` file (planted, or copied) names the worktree of another directory: the repository
    // lists `wtree`, not this one, as its worktree, so it stays read-only.
    fs::write(s.ws.join(".git"), format!("gitdir: {}\n", common.join("worktrees/wtree").display())).unwrap();
    let probe = bash(policy(), &s.ws, &format!("touch {}/objects/planted", common.display()));
    assert!(!probe.ok() && denied(&probe.text()), "{probe:?}");
    let report = crate::common::prepare(policy(), &["true"], &s.ws).report;
    let subpaths = report.protections.iter().find(|p| p.name == "read_only_subpaths").unwrap().detail.clone();
    assert!(subpaths.contains("another work tree"), "{subpaths}");
    let said =
        uexec_plan::linked_worktree_repository(&uexec_plan::RealHost, &s.ws, std::slice::from_ref(&s.ws));
    assert!(matches!(&said, Some(Err(why)) if why.contains("another work tree")), "{said:?}");
    // The allowed twin: the workspace itself is writable.
    let twin = bash(policy(), &s.ws, "touch mine.txt");
    assert!(twin.ok(), "{twin:?}");
}

#[test]
fn everyday_git_works_in_a_submodule() {
    let s = Scratch::new();
    let upstream = s.outside.join("lib");
    repository(&upstream);
    repository(&s.ws);
    submodule_add(&s.ws, &upstream, "lib");
    let sub = s.ws.join("lib");
    git(&sub, &["config", "user.name", "Sandboxed"]);
    git(&sub, &["config", "user.email", "s@example.invalid"]);
    everyday_git_works(&policy, &s.ws, &sub, "main");
    // The superproject sees the submodule's new commit.
    assert!(git(&s.ws, &["status", "--porcelain"]).contains("lib"), "the gitlink moved");
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
fn a_worktree_added_inside_the_sandbox_commits_and_its_admin_files_are_protected_next_time() {
    let s = Scratch::new();
    repository(&s.ws);
    let add = bash(policy(), &s.ws, "git worktree add -q -b wt2 wt2");
    assert!(add.ok(), "{add:?}");
    let wt2 = s.ws.join("wt2");
    let commit =
        bash(policy(), &s.ws, "cd wt2 && echo w > w.txt && git add w.txt && git commit -q -m in-wt2");
    assert!(commit.ok(), "{commit:?}");
    assert_eq!(git(&wt2, &["log", "-1", "--format=%s"]).trim(), "in-wt2");
    assert!(git(&s.ws, &["worktree", "list"]).contains("wt2"));
    // The next command sees a linked worktree: its redirection files are read-only; beside them is writable.
    let admin = s.ws.join(".git/worktrees/wt2");
    let twin = bash(policy(), &s.ws, "touch .git/worktrees/wt2/ORIG_HEAD.test");
    assert!(twin.ok(), "{twin:?}");
    for attack in [
        "echo /tmp/evil > .git/worktrees/wt2/commondir",
        "echo /tmp/evil > .git/worktrees/wt2/gitdir",
        "echo '[core]' > .git/worktrees/wt2/config.worktree",
    ] {
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(Scratch::read(&admin.join("commondir")), "../..\n");
}

#[test]
fn fetch_from_a_readable_bare_remote_outside_the_roots_works_and_push_to_it_is_refused() {
    let s = Scratch::new();
    let remote = s.outside.join("remote.git");
    let out = Command::new("git").args(["init", "-q", "--bare", "-b", "main"]).arg(&remote).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    repository(&s.ws);
    git(&s.ws, &["remote", "add", "origin", &remote.display().to_string()]);
    git(&s.ws, &["push", "-q", "origin", "main"]);
    // Someone else pushes to the remote (outside the sandbox).
    let other = s.outside.join("other");
    let out = Command::new("git").arg("clone").arg("-q").arg(&remote).arg(&other).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    git(
        &other,
        &[
            "-c",
            "user.name=O",
            "-c",
            "user.email=o@example.invalid",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "upstream",
        ],
    );
    git(&other, &["push", "-q", "origin", "main"]);
    let remote_before = git(&remote, &["rev-parse", "main"]);
    let fetch = bash(policy(), &s.ws, "git fetch -q origin && git merge -q --ff-only origin/main");
    assert!(fetch.ok(), "{fetch:?}");
    assert_eq!(git(&s.ws, &["log", "-1", "--format=%s"]).trim(), "upstream");
    // The denied twin: the remote lies outside the writable roots, so a push to it is refused (git says the
    // receiving side could not write its objects), while the same push outside the sandbox goes through.
    let push = bash(policy(), &s.ws, "git commit -q --allow-empty -m local && git push -q origin main");
    assert!(!push.ok() && push.stderr.contains("unable to create temporary object directory"), "{push:?}");
    assert_eq!(git(&remote, &["rev-parse", "main"]), remote_before);
    git(&s.ws, &["push", "-q", "origin", "main"]);
    assert_eq!(git(&remote, &["log", "-1", "--format=%s", "main"]).trim(), "local");
}

/// Attacks on what git runs or reads as configuration, each with an allowed twin writing beside it.
const ATTACKS: [(&str, &str); 9] = [
    ("echo '[core] fsmonitor = evil' >> .git/config", "echo 'a description' >> .git/description"),
    (
        "printf '[core]\\n' > .git/config.new && mv .git/config.new .git/config",
        "touch .git/new && mv .git/new .git/new2",
    ),
    ("touch .git/hooks/post-checkout", "touch .git/hooks-nearby"),
    ("echo '[core]' > .git/config.worktree", "echo x > .git/ORIG_HEAD.test"),
    ("echo '* filter=evil' > .git/info/attributes", "echo '* -text' > .gitattributes"),
    ("echo /tmp/evil/objects > .git/objects/info/alternates", "touch .git/objects/info/other"),
    ("rm -rf .git/hooks", "mkdir -p .git/rr-cache && rm -r .git/rr-cache"),
    ("ln -s ../../evil .git/hooks/pre-commit", "ln -s a.txt link-in-tree"),
    ("mv .git/hooks .git/hooks-away", "mkdir .git/x && mv .git/x .git/y"),
];

/// Run every attack and its twin in `repo`, then check nothing git reads changed.
fn attacks_fail_and_twins_succeed(repo: &Path, hooks_before: usize) {
    let config_before = fs::read(repo.join(".git/config")).unwrap();
    for (attack, twin) in ATTACKS {
        let allowed = bash(policy(), repo, twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(policy(), repo, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(fs::read(repo.join(".git/config")).unwrap(), config_before);
    assert_eq!(fs::read_dir(repo.join(".git/hooks")).unwrap().count(), hooks_before);
    for inert in [".git/config.worktree", ".git/objects/info/alternates"] {
        assert_eq!(fs::read(repo.join(inert)).unwrap(), b"", "{inert}");
    }
    assert!(!repo.join(".git/info/attributes").exists());
    assert!(!repo.join(".git/hooks-away").exists());
}

#[test]
fn git_configuration_and_hooks_cannot_be_written_when_present() {
    let s = Scratch::new();
    repository(&s.ws);
    fs::write(s.ws.join(".git/hooks/pre-push"), "#!/bin/sh\n").unwrap();
    let hooks = fs::read_dir(s.ws.join(".git/hooks")).unwrap().count();
    attacks_fail_and_twins_succeed(&s.ws, hooks);
}

#[test]
fn absent_hooks_config_worktree_info_and_alternates_cannot_be_created() {
    let s = Scratch::new();
    repository(&s.ws);
    for absent in ["hooks", "info"] {
        fs::remove_dir_all(s.ws.join(".git").join(absent)).unwrap();
    }
    assert!(
        !s.ws.join(".git/config.worktree").exists() && !s.ws.join(".git/objects/info/alternates").exists()
    );
    let create = bash(policy(), &s.ws, "mkdir -p .git/hooks && touch .git/hooks/post-checkout");
    assert!(!create.ok() && refused(&create.text()), "{create:?}");
    assert!(!s.ws.join(".git/hooks/post-checkout").exists());
    // An absent commondir would redirect git to a common dir (its config, its hooks) a command chose: its
    // placeholder names the git dir itself and is read-only; the legacy remote directories are placeholders too.
    assert!(!s.ws.join(".git/commondir").exists() || Scratch::read(&s.ws.join(".git/commondir")) == ".\n");
    for attack in
        ["echo /tmp/evil > .git/commondir", "touch .git/remotes/origin", "touch .git/branches/origin"]
    {
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(Scratch::read(&s.ws.join(".git/commondir")), ".\n");
    assert_eq!(git(&s.ws, &["rev-parse", "--git-dir"]).trim(), ".git");
    // The empty placeholders the sandbox made are what git reads as none: everyday git still works.
    let commit = bash(policy(), &s.ws, "echo b > b.txt && git add b.txt && git commit -q -m b && git status");
    assert!(commit.ok(), "{commit:?}");
    attacks_fail_and_twins_succeed(&s.ws, 0);
}

#[test]
fn protected_git_entries_hold_through_symlinks_and_renames() {
    let s = Scratch::new();
    repository(&s.ws);
    let base = s.base.clone();
    // The workspace's parent is writable too, so a command could try to move the repository aside.
    let wide = || workspace_only(vec![base.clone()], false);
    for (attack, twin) in [
        ("ln -s .git/hooks h && touch h/post-checkout", "ln -s .git/refs r && ls r/heads"),
        ("ln -s ws/.git ../g && echo x >> ../g/config", "ln -s ws/.git ../g2 && touch ../g2/newfile"),
        ("ln -s ws/.git/info ../i && echo '* diff=evil' > ../i/attributes", "ln -s ws ../w && touch ../w/t"),
        ("mv .git .git-away", "touch .git/x && mv .git/x .git/y"),
        ("mv .git/objects/info .git/objects/info-away", "touch .git/objects/info/y"),
        ("mv .git/objects .git/objects-away", "mkdir .git/z && mv .git/z .git/z2"),
        ("mv ../ws ../ws-away && touch ../ws-away/.git/hooks/post-checkout", "mkdir ../d && mv ../d ../e"),
    ] {
        let allowed = bash(wide(), &s.ws, twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(wide(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert!(!s.ws.join(".git/hooks/post-checkout").exists() && !s.ws.join(".git/info/attributes").exists());
    assert!(!s.ws.join(".git-away").exists() && !s.base.join("ws-away").exists());
    assert!(!git(&s.ws, &["config", "--list", "--local"]).contains("=x"));
    let log = bash(wide(), &s.ws, "git log --oneline");
    assert!(log.ok() && log.stdout.contains("one"), "{log:?}");
}

#[test]
fn a_linked_worktree_commits_and_its_admin_files_stay_read_only() {
    let s = Scratch::new();
    repository(&s.ws);
    git(&s.ws, &["worktree", "add", "-q", "-b", "wt-branch", "wt"]);
    let admin = s.ws.join(".git/worktrees/wt");
    assert!(admin.join("commondir").exists());
    let wt = s.ws.join("wt");
    // The worktree is the cwd; the main repository (its common dir) is a writable root too.
    let policy = || workspace_only(vec![s.ws.clone()], false);
    let commit = bash(
        policy(),
        &wt,
        "echo w > w.txt && git add w.txt && git commit -q -m in-worktree && git stash list",
    );
    assert!(commit.ok(), "{commit:?}");
    assert!(git(&s.ws, &["log", "--format=%s", "wt-branch"]).contains("in-worktree"));
    for attack in [
        format!("echo /tmp/evil > {}/commondir", admin.display()),
        format!("echo /tmp/evil > {}/gitdir", admin.display()),
        format!("echo '[core]' > {}/config.worktree", admin.display()),
        "echo 'gitdir: /tmp/evil' > .git".to_owned(),
        format!("touch {}/.git/hooks/post-commit", s.ws.display()),
    ] {
        let probe = bash(policy(), &wt, &attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    let twin = bash(policy(), &wt, &format!("touch {}/ORIG_HEAD.test", admin.display()));
    assert!(twin.ok(), "{twin:?}");
    assert_eq!(Scratch::read(&admin.join("commondir")), "../..\n");
}

#[test]
fn a_linked_worktree_cannot_get_back_a_commondir_or_gitdir_it_lacked() {
    let s = Scratch::new();
    repository(&s.ws);
    git(&s.ws, &["worktree", "add", "-q", "-b", "wt-branch", "wt"]);
    let admin = s.ws.join(".git/worktrees/wt");
    // The back-pointer is gone (moved by hand): git reads an empty one the same way.
    fs::remove_file(admin.join("gitdir")).unwrap();
    // An administrative directory without commondir is a repository of its own to git (its config, its hooks).
    let orphan = s.ws.join(".git/worktrees/orphan");
    fs::create_dir_all(&orphan).unwrap();
    fs::write(orphan.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    repository(&s.ws.join("evil"));
    let wt = s.ws.join("wt");
    let policy = || workspace_only(vec![s.ws.clone()], false);
    for (attack, twin) in [
        (
            format!("echo {}/x/.git > {}/gitdir", s.ws.display(), admin.display()),
            format!("touch {}/ORIG_HEAD.t", admin.display()),
        ),
        (
            format!("echo ../../../evil/.git > {}/commondir", orphan.display()),
            format!("touch {}/.git/orphan-twin", s.ws.display()),
        ),
        (
            format!("echo '[core]' > {}/config", orphan.display()),
            format!("echo x > {}/logs-twin", admin.display()),
        ),
        (
            format!("mkdir -p {0}/hooks && touch {0}/hooks/post-checkout", orphan.display()),
            format!("mkdir {}/rr-twin", admin.display()),
        ),
        (
            format!("mv {} {}/moved", orphan.display(), s.ws.display()),
            format!(
                "mkdir {0}/.git/worktrees/x && mv {0}/.git/worktrees/x {0}/.git/worktrees/y",
                s.ws.display()
            ),
        ),
    ] {
        let allowed = bash(policy(), &wt, &twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(policy(), &wt, &attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(fs::read(admin.join("gitdir")).unwrap(), b"");
    assert!(
        !orphan.join("commondir").exists()
            && !orphan.join("config").exists()
            && !orphan.join("hooks").exists()
    );
    // Git in the worktree still works, inside the sandbox and outside it.
    let commit =
        bash(policy(), &wt, "echo w > w.txt && git add w.txt && git commit -q -m in-worktree && git status");
    assert!(commit.ok(), "{commit:?}");
    assert!(git(&wt, &["log", "--format=%s"]).contains("in-worktree"));
    assert_eq!(git(&wt, &["rev-parse", "--git-common-dir"]).trim(), s.ws.join(".git").display().to_string());
}

#[test]
fn a_submodule_commits_and_its_git_dir_configuration_stays_read_only() {
    let s = Scratch::new();
    let upstream = s.outside.join("lib");
    repository(&upstream);
    repository(&s.ws);
    submodule_add(&s.ws, &upstream, "lib");
    let module = s.ws.join(".git/modules/lib");
    assert!(module.join("HEAD").is_file());
    let sub = s.ws.join("lib");
    git(&sub, &["config", "user.name", "Sandboxed"]);
    git(&sub, &["config", "user.email", "s@example.invalid"]);
    let commit =
        bash(policy(), &s.ws, "cd lib && echo s > s.txt && git add s.txt && git commit -q -m in-sub");
    assert!(commit.ok(), "{commit:?}");
    assert!(git(&sub, &["log", "--format=%s"]).contains("in-sub"));
    let config_before = fs::read(module.join("config")).unwrap();
    for attack in [
        "echo '[core] fsmonitor = evil' >> .git/modules/lib/config",
        "touch .git/modules/lib/hooks/post-checkout",
        "echo '* filter=evil' > .git/modules/lib/info/attributes",
        "mv .git/modules/lib/hooks .git/modules/lib/hooks-away",
        "cd lib && git config core.fsmonitor evil",
        // The submodule's work tree `.git` file (a nested entry of the workspace) cannot be redirected.
        "echo 'gitdir: /tmp/evil' > lib/.git",
    ] {
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    // The twin: the rest of the submodule's git dir and its work tree are writable.
    let twin = bash(
        policy(),
        &s.ws,
        "touch .git/modules/lib/ORIG_HEAD.test && mkdir .git/modules/lib/x && touch lib/y",
    );
    assert!(twin.ok(), "{twin:?}");
    assert_eq!(fs::read(module.join("config")).unwrap(), config_before);
    assert!(!module.join("hooks/post-checkout").exists() && !module.join("hooks-away").exists());
}

/// A repository nested in the workspace (a vendored checkout at its top level): what git runs or reads as
/// configuration stays read-only, present or absent, also through a symlink and a rename of its directory; the
/// rest of its git directory is writable and git works in it. Each probe has a twin.
#[test]
fn a_nested_repository_s_configuration_and_hooks_stay_read_only_present_or_absent() {
    let s = Scratch::new();
    repository(&s.ws);
    let nested = s.ws.join("nested");
    repository(&nested);
    fs::write(nested.join(".git/hooks/pre-push"), "#!/bin/sh\n").unwrap();
    fs::remove_dir_all(nested.join(".git/info")).unwrap();
    // Another one with no hooks directory.
    let bare_hooks = s.ws.join("other");
    repository(&bare_hooks);
    fs::remove_dir_all(bare_hooks.join(".git/hooks")).unwrap();
    let config_before = fs::read(nested.join(".git/config")).unwrap();
    for (attack, twin) in [
        ("echo '[core] fsmonitor = evil' >> nested/.git/config", "echo x >> nested/.git/description"),
        (
            "cd nested && git config core.fsmonitor evil",
            "cd nested && echo c > c.txt && git add c.txt && git commit -q -m c",
        ),
        ("touch nested/.git/hooks/post-checkout", "touch nested/.git/hooks-nearby"),
        ("echo evil > nested/.git/hooks/pre-push", "echo y > nested/.git/ORIG_HEAD.test"),
        ("mkdir -p other/.git/hooks && touch other/.git/hooks/post-checkout", "mkdir -p other/.git/rr-cache"),
        ("echo '* filter=evil' > nested/.git/info/attributes", "echo '* -text' > nested/.gitattributes"),
        ("echo '[core]' > nested/.git/config.worktree", "echo z > nested/.git/FETCH_HEAD.test"),
        ("ln -s nested/.git/hooks h && touch h/post-commit", "ln -s nested/.git/refs r && ls r/heads"),
        ("mv nested nested-away && touch nested-away/.git/hooks/post-checkout", "mkdir d && mv d d2"),
        ("mv nested/.git nested/git-away", "touch nested/.git/x && mv nested/.git/x nested/.git/y"),
    ] {
        let allowed = bash(policy(), &s.ws, twin);
        assert!(allowed.ok(), "{twin}: {allowed:?}");
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert_eq!(fs::read(nested.join(".git/config")).unwrap(), config_before);
    assert_eq!(Scratch::read(&nested.join(".git/hooks/pre-push")), "#!/bin/sh\n");
    assert!(
        !nested.join(".git/hooks/post-checkout").exists() && !nested.join(".git/info/attributes").exists()
    );
    assert_eq!(fs::read_dir(bare_hooks.join(".git/hooks")).unwrap().count(), 0);
    assert!(!s.ws.join("nested-away").exists() && !nested.join("git-away").exists());
    assert_eq!(git(&nested, &["log", "-1", "--format=%s"]).trim(), "c");
}

/// A repository made by a sandboxed command (`git init`, `git clone`) in a workspace that is no repository, at
/// its top level or the workspace itself, is protected from the next command on.
#[test]
fn a_repository_created_inside_the_sandbox_is_protected_from_the_next_command() {
    let s = Scratch::new();
    let init = bash(policy(), &s.ws, "git init -q made && echo x > made/.git/description");
    assert!(init.ok(), "{init:?}");
    let twin = bash(policy(), &s.ws, "echo y > made/.git/description && touch made/.git/ORIG_HEAD.test");
    assert!(twin.ok(), "{twin:?}");
    for attack in
        ["echo '[core] fsmonitor = evil' >> made/.git/config", "touch made/.git/hooks/post-checkout"]
    {
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && refused(&probe.text()), "{attack}: {probe:?}");
    }
    assert!(!Scratch::read(&s.ws.join("made/.git/config")).contains("fsmonitor"));
    // The same for the workspace's own repository, made during the session.
    let init = bash(policy(), &s.ws, "git init -q . && echo x > .git/description");
    assert!(init.ok(), "{init:?}");
    let twin = bash(policy(), &s.ws, "echo y > .git/description");
    assert!(twin.ok(), "{twin:?}");
    let probe = bash(policy(), &s.ws, "echo '[core] fsmonitor = evil' >> .git/config");
    assert!(!probe.ok() && refused(&probe.text()), "{probe:?}");
    assert!(!Scratch::read(&s.ws.join(".git/config")).contains("fsmonitor"));
}

#[test]
fn destroying_refs_inside_the_sandbox_leaves_every_packed_commit_recoverable() {
    let s = Scratch::new();
    repository(&s.ws);
    for n in ["two", "three"] {
        fs::write(s.ws.join("a.txt"), n).unwrap();
        git(&s.ws, &["commit", "-q", "-am", n]);
    }
    git(&s.ws, &["branch", "side"]);
    // The person's history, packed (as after a clone or a gc).
    git(&s.ws, &["gc", "-q"]);
    let commits: Vec<String> = git(&s.ws, &["rev-list", "--all"]).lines().map(str::to_owned).collect();
    assert_eq!(commits.len(), 3);
    let packs = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir.join(".git/objects/pack"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = packs(&s.ws);
    assert!(before.iter().any(|n| n.ends_with(".pack")), "{before:?}");
    // Inside the sandbox: refs destroyed, reflogs expired, and gc told to prune everything unreachable.
    let destroy = bash(
        policy(),
        &s.ws,
        "git checkout -q --orphan wiped && git rm -q -rf . && git commit -q --allow-empty -m wiped && \
         git branch -D main side && git reflog expire --expire=now --all; rm -f .git/objects/pack/*; \
         git gc -q --prune=now; git rev-list --all --count",
    );
    assert_eq!(destroy.stdout.lines().last(), Some("1"), "the refs are gone inside: {destroy:?}");
    assert!(refused(&destroy.stderr), "the pack files could not be removed: {destroy:?}");
    // The twins: a new object and a new pack can still be written.
    let write = bash(
        policy(),
        &s.ws,
        "echo new > n.txt && git add n.txt && git commit -q -m new && git repack -q && ls .git/objects/pack",
    );
    assert!(write.ok(), "{write:?}");
    // Outside: every pack file is still there, and every commit the person had is recoverable.
    let after = packs(&s.ws);
    for name in &before {
        assert!(after.contains(name), "{name} was removed: {after:?}");
    }
    assert!(after.len() > before.len(), "no new pack was written: {after:?}");
    for commit in &commits {
        git(&s.ws, &["cat-file", "-e", &format!("{commit}^{{commit}}")]);
    }
    git(&s.ws, &["branch", "recovered", &commits[0]]);
    assert_eq!(git(&s.ws, &["rev-list", "--count", "recovered"]).trim(), "3");
}

#[test]
fn destroying_refs_inside_the_sandbox_leaves_every_loose_commit_recoverable() {
    let s = Scratch::new();
    repository(&s.ws);
    for n in ["two", "three"] {
        fs::write(s.ws.join("a.txt"), n).unwrap();
        git(&s.ws, &["commit", "-q", "-am", n]);
    }
    // The person's recent work, not packed yet (loose objects, as between two gc runs).
    let commits: Vec<String> = git(&s.ws, &["rev-list", "--all"]).lines().map(str::to_owned).collect();
    assert_eq!(commits.len(), 3);
    assert!(!s.ws.join(".git/objects/pack").read_dir().unwrap().any(|_| true), "nothing packed yet");
    // Inside the sandbox: refs destroyed, reflogs expired, loose objects pruned and removed by hand.
    let destroy = bash(
        policy(),
        &s.ws,
        "rm -f .git/objects/??/*; git checkout -q --orphan wiped && git rm -q -rf . && \
         git commit -q --allow-empty -m wiped && git branch -D main; git reflog expire --expire=now --all && \
         git prune --expire=now; git gc -q --prune=now; git rev-list --all --count",
    );
    assert_eq!(destroy.stdout.lines().last(), Some("1"), "the refs are gone inside: {destroy:?}");
    assert!(refused(&destroy.stderr), "the loose objects could not be removed: {destroy:?}");
    // The twin: new objects are still written, and commits made inside are seen outside.
    let write = bash(policy(), &s.ws, "echo new > n.txt && git add n.txt && git commit -q -m new");
    assert!(write.ok(), "{write:?}");
    assert!(git(&s.ws, &["log", "--format=%s", "wiped"]).contains("new"));
    // Outside: every commit the person had is still there and can be brought back.
    for commit in &commits {
        git(&s.ws, &["cat-file", "-e", &format!("{commit}^{{commit}}")]);
    }
    git(&s.ws, &["branch", "recovered", &commits[0]]);
    assert_eq!(git(&s.ws, &["rev-list", "--count", "recovered"]).trim(), "3");
    assert_eq!(git(&s.ws, &["show", "recovered:a.txt"]), "three");
}
