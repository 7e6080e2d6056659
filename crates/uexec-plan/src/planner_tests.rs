//! Unit tests of the git half of a command's plan, on the host held in memory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use uexec_domain::gitdir::MAX_NESTED_READ_ONLY;

use super::*;
use crate::FakeHost;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

fn repo(host: FakeHost, git: &str) -> FakeHost {
    host.file(format!("{git}/HEAD")).dir(format!("{git}/objects"))
}

fn roots(paths: &[&str]) -> Vec<(PathBuf, PathBuf)> {
    paths.iter().map(|path| (p(path), p(path))).collect()
}

fn nested(host: &FakeHost, ws: &str) -> GitPlan {
    let mut planner = GitPlanner::new(host, Mechanism::Mounts, roots(&[ws]));
    let top = (host as &dyn HostView).list(Path::new(ws), MAX_NESTED_SCAN_ENTRIES);
    planner.nested(Path::new(ws), &top, &|_| false);
    planner.finish()
}

#[test]
fn repositories_nested_at_the_workspace_top_level_are_protected_and_links_are_not_followed() {
    let host = repo(repo(repo(FakeHost::new(), "/ws/vendored/.git"), "/ws/deep/er/.git"), "/elsewhere/.git")
        .link("/ws/link", "/elsewhere")
        .pipe(|h| repo(h, "/ws/seps/x/.git"))
        .content("/ws/worktree/.git", "gitdir: ../seps/x/.git\n")
        .link("/ws/linked/.git", "/elsewhere/.git");
    let plan = nested(&host, "/ws");
    let paths: Vec<&Path> = plan.paths().collect();
    for entry in ["config", "hooks", "info", "commondir"] {
        assert!(paths.contains(&p("/ws/vendored/.git").join(entry).as_path()), "{entry}: {paths:?}");
    }
    assert!(!paths.contains(&Path::new("/ws/vendored/.git")), "entry by entry: {paths:?}");
    assert!(
        paths.contains(&Path::new("/ws/worktree/.git"))
            && paths.contains(&Path::new("/ws/seps/x/.git/config"))
    );
    assert!(paths.contains(&Path::new("/ws/linked/.git")));
    assert!(plan.notes.iter().any(|n| n.contains("linked/.git: a symlink")), "{:?}", plan.notes);
    // Not followed through the symlinked directory, not looked for deeper down.
    assert!(!paths.iter().any(|p| p.starts_with("/elsewhere") || p.starts_with("/ws/deep")), "{paths:?}");
    assert!(plan.unexamined.is_none());
}

#[test]
fn beyond_the_budget_planted_repositories_push_none_of_the_person_s_out() {
    // The person's repository first, named to come last in name order; then 40 planted ones.
    let mut host = repo(FakeHost::new(), "/ws/zz-vendorlib/.git").born("/ws/zz-vendorlib/.git", 10);
    for i in 0..40 {
        host = repo(host, &format!("/ws/a{i:02}/.git")).born(format!("/ws/a{i:02}/.git"), 1000 + i);
    }
    let plan = nested(&host, "/ws");
    let paths: Vec<&Path> = plan.paths().collect();
    assert!(paths.contains(&Path::new("/ws/zz-vendorlib/.git/config")), "{paths:?}");
    assert!(plan.unexamined.is_none());
    let whole = (0..40).filter(|i| paths.contains(&p(&format!("/ws/a{i:02}/.git")).as_path())).count();
    assert_eq!(whole, 41 - MAX_NESTED_REPOSITORIES);
    for i in 0..40 {
        let dot_git = p(&format!("/ws/a{i:02}/.git"));
        assert!(paths.contains(&dot_git.as_path()) || paths.contains(&dot_git.join("config").as_path()));
    }
    assert!(plan.notes.iter().any(|n| n.contains("read-only as a whole")), "{:?}", plan.notes);
    // Beyond what can be protected at all, or beyond the listing: refused.
    let mut many = FakeHost::new();
    for i in 0..=MAX_NESTED_READ_ONLY {
        many = many.dir(format!("/ws/r{i}/.git"));
    }
    assert_eq!(
        nested(&many, "/ws").unexamined,
        Some(NestedUnexamined::TooManyRepositories(MAX_NESTED_READ_ONLY + 1))
    );
    let mut full = FakeHost::new();
    for i in 0..MAX_NESTED_SCAN_ENTRIES + 1 {
        full = full.file(format!("/ws/f{i}"));
    }
    assert_eq!(nested(&full, "/ws").unexamined, Some(NestedUnexamined::TooManyEntries));
}

/// The repository `/home/main` with the linked worktree `/ws/wt` (its admin dir naming it back with `back`).
fn outside_repository(back: &str) -> FakeHost {
    let git = "/home/main/.git";
    repo(FakeHost::new(), git)
        .file(format!("{git}/index"))
        .file(format!("{git}/worktrees/wt/HEAD"))
        .content(format!("{git}/worktrees/wt/commondir"), "../..\n")
        .content(format!("{git}/worktrees/wt/gitdir"), back)
        .file(format!("{git}/worktrees/other/HEAD"))
        .content(format!("{git}/worktrees/other/commondir"), "../..\n")
        .content("/ws/wt/.git", "gitdir: /home/main/.git/worktrees/wt\n")
}

#[test]
fn a_linked_worktree_s_repository_is_granted_with_the_other_checkouts_read_only() {
    let host = outside_repository("/ws/wt/.git\n");
    let mut planner = GitPlanner::new(&host, Mechanism::PathRules, roots(&["/ws/wt"]));
    planner.named_gitdir(Path::new("/home/main/.git/worktrees/wt"), Path::new("/ws/wt"), true);
    let plan = planner.finish();
    assert_eq!(plan.grants, vec![(p("/home/main/.git"), p("/ws/wt"))]);
    let paths: Vec<&Path> = plan.paths().collect();
    for path in ["/home/main/.git/config", "/home/main/.git/HEAD", "/home/main/.git/index"] {
        assert!(paths.contains(&Path::new(path)), "{path}: {paths:?}");
    }
    // The other worktree's checkout stays read-only (absent or not, with path rules); this one's is writable.
    assert!(paths.contains(&Path::new("/home/main/.git/worktrees/other/index")), "{paths:?}");
    assert!(!paths.contains(&Path::new("/home/main/.git/worktrees/wt/index")), "{paths:?}");
    // With mounts only what exists can be bound: the other worktree's absent index is not.
    let mut planner = GitPlanner::new(&host, Mechanism::Mounts, roots(&["/ws/wt"]));
    planner.named_gitdir(Path::new("/home/main/.git/worktrees/wt"), Path::new("/ws/wt"), true);
    let plan = planner.finish();
    assert!(
        plan.items.contains(&GitItem::Path(Entry::Absent(p("/home/main/.git/worktrees/other/index"), None)))
    );
    // A planted `.git` file naming a repository that does not list this root grants nothing, and says why.
    let host = outside_repository("/home/elsewhere/.git\n");
    let mut planner = GitPlanner::new(&host, Mechanism::PathRules, roots(&["/ws/wt"]));
    planner.named_gitdir(Path::new("/home/main/.git/worktrees/wt"), Path::new("/ws/wt"), true);
    let plan = planner.finish();
    assert!(plan.grants.is_empty() && plan.items.is_empty());
    assert!(
        plan.notes[0].contains("outside every writable root, left read-only (its gitdir file names"),
        "{:?}",
        plan.notes
    );
    // Nor does a nested repository's `.git` file (only a root's own is granted).
    let host = outside_repository("/ws/wt/.git\n");
    let mut planner = GitPlanner::new(&host, Mechanism::PathRules, roots(&["/ws/wt"]));
    planner.named_gitdir(Path::new("/home/main/.git/worktrees/wt"), Path::new("/ws/wt"), false);
    let plan = planner.finish();
    assert!(plan.grants.is_empty());
    assert_eq!(
        plan.notes,
        ["gitdir /home/main/.git/worktrees/wt: outside every writable root (read-only anyway)"]
    );
}

/// `FakeHost` built through a function (for chains that call helpers).
trait Pipe: Sized {
    fn pipe(self, f: impl FnOnce(Self) -> Self) -> Self {
        f(self)
    }
}

impl Pipe for FakeHost {}
