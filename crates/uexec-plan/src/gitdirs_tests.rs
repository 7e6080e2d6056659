//! Unit tests of the git-directory walk, on the host held in memory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use uexec_domain::gitdir::{MAX_MODULE_NAME_DEPTH, MAX_PINNED_LOOSE_OBJECTS, MAX_PINNED_PACK_FILES};

use super::*;
use crate::FakeHost;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

/// A repository's git directory at `git`: `HEAD`, `config`, `objects/info/`, `refs/`.
fn git_dir(host: FakeHost, git: &str) -> FakeHost {
    host.content(format!("{git}/HEAD"), "ref: refs/heads/main\n")
        .content(format!("{git}/config"), "[core]\n")
        .dir(format!("{git}/objects/info"))
        .dir(format!("{git}/refs"))
}

fn allow(common: &Path) -> Result<PathBuf, UnprotectedGitdir> {
    Ok(common.to_path_buf())
}

fn plan(host: &FakeHost, git: &str, mechanism: Mechanism) -> GitDirPlan {
    let mut loose = LooseBudget::per_git_dir();
    plan_git_dir(host, Path::new(git), GitDirKind::Repository, mechanism, false, &allow, &mut loose)
}

/// Every path the plan keeps read-only (entries present or absent, whole parts, pins).
fn read_only(plan: &GitDirPlan) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for part in &plan.parts {
        if part.whole {
            out.push(part.dir.clone());
        }
        out.extend(part.entries.iter().map(|e| e.path().to_path_buf()));
        out.extend(part.read_only.iter().cloned());
    }
    out
}

#[test]
fn the_walk_finds_worktrees_and_nested_modules_and_fails_closed_beyond_its_bounds() {
    let g = p("/w/.git");
    let host = FakeHost::new()
        .dir(g.join("worktrees/wt"))
        .dir(g.join("worktrees/orphan"))
        .dir(g.join("modules/a"))
        .file(g.join("modules/a/b/HEAD"))
        .file(g.join("modules/a/b/modules/c/HEAD"))
        .content(g.join("worktrees/wt/commondir"), "../..\n");
    let mut notes = Vec::new();
    let found = git_dirs_below(&host, &g, GitDirKind::Repository, &allow, &mut notes).unwrap();
    assert_eq!(
        found,
        vec![
            (g.clone(), GitDirKind::Repository),
            (g.join("worktrees/orphan"), GitDirKind::Repository),
            (g.join("worktrees/wt"), GitDirKind::LinkedWorktree),
            (g.join("modules/a/b"), GitDirKind::Repository),
            (g.join("modules/a/b/modules/c"), GitDirKind::Repository),
        ]
    );
    assert!(notes.is_empty(), "{notes:?}");
    // A worktree naming a common dir elsewhere: the rule is asked, and its refusal is noted.
    let wt = p("/w/gitdirs/wt");
    let host = FakeHost::new().content(wt.join("commondir"), "/elsewhere\n");
    let refuse = |_: &Path| Err(UnprotectedGitdir::ReadOnlyAnyway);
    let found = git_dirs_below(&host, &wt, GitDirKind::LinkedWorktree, &refuse, &mut notes).unwrap();
    assert_eq!(found.len(), 1);
    assert!(notes.iter().any(|n| n.contains("commondir names /elsewhere")), "{notes:?}");
    // Submodule names deeper than the bound fail closed.
    let deep: PathBuf = (0..MAX_MODULE_NAME_DEPTH).map(|i| format!("d{i}")).collect();
    let host = FakeHost::new().dir(g.join("modules").join(deep));
    assert!(git_dirs_below(&host, &g, GitDirKind::Repository, &allow, &mut notes).is_err());
    // A `worktrees` that is no real directory is not looked through: the walk fails closed.
    let host = FakeHost::new().link(g.join("worktrees"), "/elsewhere").dir("/elsewhere/wt");
    assert!(git_dirs_below(&host, &g, GitDirKind::Repository, &allow, &mut notes).is_err());
}

#[test]
fn protects_configuration_marks_absent_entries_for_inert_placeholders_and_leaves_the_rest_writable() {
    let host = git_dir(git_dir(FakeHost::new(), "/w/.git"), "/w/.git/modules/lib/inner")
        .content("/w/.git/worktrees/wt/commondir", "../..\n")
        .content("/w/.git/worktrees/wt/gitdir", "/w/wt/.git\n")
        .link("/w/.git/worktrees/link", "/etc");
    let g = p("/w/.git");
    let plan = plan(&host, "/w/.git", Mechanism::Mounts);
    let paths = read_only(&plan);
    for entry in [
        "config",
        "config.worktree",
        "hooks",
        "info",
        "objects/info/alternates",
        "commondir",
        "worktrees/wt/config.worktree",
        "worktrees/wt/commondir",
        "worktrees/wt/gitdir",
        "modules/lib/inner/config",
        "modules/lib/inner/hooks",
    ] {
        assert!(paths.contains(&g.join(entry)), "{entry}: {plan:?}");
    }
    assert!(!paths.iter().any(|e| e == &g || e.ends_with("index") || e.ends_with("refs")), "{paths:?}");
    // What is absent gets an inert placeholder: an empty directory or file, a commondir naming the git dir itself.
    let main = &plan.parts[0];
    let absent = |name: &str| {
        main.entries.iter().find_map(|e| match e {
            Entry::Absent(path, when) if path == &g.join(name) => *when,
            _ => None,
        })
    };
    assert_eq!(absent("hooks"), Some(WhenAbsent::EmptyDir));
    assert_eq!(absent("config.worktree"), Some(WhenAbsent::EmptyFile));
    assert_eq!(absent("objects/info/alternates"), Some(WhenAbsent::EmptyFile));
    assert_eq!(absent("commondir"), Some(WhenAbsent::SelfCommonDir));
    assert_eq!(absent("shallow"), Some(WhenAbsent::AbsentLink));
    assert!(main.entries.contains(&Entry::Present(g.join("config"))));
    // `modules/` (absent: made empty) and the directories of submodule names in it take no new entry.
    assert_eq!(main.closed, vec![(g.join("modules"), Closed::Dir), (g.join("modules/lib"), Closed::Dir)]);
    assert!(plan.notes.iter().any(|n| n.contains("worktrees/link")), "{:?}", plan.notes);
    assert_eq!(plan.worktrees, vec![g.join("worktrees/wt")]);
    // With path rules the same entries are denied, present or not.
    assert_eq!(read_only(&self::plan(&host, "/w/.git", Mechanism::PathRules)), paths);
}

#[test]
fn linked_worktrees_are_told_by_their_commondir_and_their_common_dir_is_followed() {
    let g = p("/b/.git");
    // A worktree admin dir without a gitdir back-pointer, one without commondir (a repository of its own to git),
    // one whose commondir names another repository of the same root, one naming a directory the rule refuses.
    let host = git_dir(git_dir(FakeHost::new(), "/b/.git"), "/b/other.git")
        .file(g.join("worktrees/wt/HEAD"))
        .content(g.join("worktrees/wt/commondir"), "../..\n")
        .file(g.join("worktrees/lost/HEAD"))
        .content(g.join("worktrees/redirected/commondir"), "../../../other.git\n")
        .content(g.join("worktrees/refused/commondir"), "/elsewhere\n");
    let within = |common: &Path| {
        if common.starts_with("/b") {
            Ok(common.to_path_buf())
        } else {
            Err(UnprotectedGitdir::ReadOnlyAnyway)
        }
    };
    let mut loose = LooseBudget::per_git_dir();
    let walk = |host: &FakeHost, loose: &mut LooseBudget| {
        plan_git_dir(host, &g, GitDirKind::Repository, Mechanism::Mounts, false, &within, loose)
    };
    let plan = walk(&host, &mut loose);
    let paths = read_only(&plan);
    for entry in ["worktrees/wt/gitdir", "worktrees/wt/commondir", "worktrees/wt/config.worktree"] {
        assert!(paths.contains(&g.join(entry)), "{entry}: {paths:?}");
    }
    let lost = g.join("worktrees/lost");
    assert!(paths.contains(&lost) && !paths.iter().any(|e| e.starts_with(&lost) && e != &lost), "{paths:?}");
    for entry in ["config", "hooks", "info", "commondir"] {
        assert!(paths.contains(&p("/b/other.git").join(entry)), "{entry}: {paths:?}");
    }
    assert!(plan.notes.iter().any(|n| n.contains("refused/commondir names /elsewhere")), "{:?}", plan.notes);
    // The main git dir itself stays writable entry by entry.
    assert!(!paths.contains(&g) && paths.contains(&g.join("config")), "{paths:?}");
    // A commondir that is a symlink is not followed: the directory counts as a repository of its own, here one
    // git cannot use, so it stays read-only as a whole.
    let redirected = g.join("worktrees/redirected");
    let host = host.without(redirected.join("commondir")).link(redirected.join("commondir"), "/b/x");
    let plan = walk(&host, &mut loose);
    assert!(read_only(&plan).contains(&redirected), "{plan:?}");
    assert!(plan.notes.iter().any(|n| n.contains("redirected: read-only as a whole")), "{:?}", plan.notes);
}

#[test]
fn loose_objects_are_pinned_up_to_the_bound_and_temporary_files_are_not() {
    let name = |i: usize| format!("{i:038x}");
    let mut host = git_dir(FakeHost::new(), "/w/.git").dir("/w/.git/objects/pack");
    for i in 0..MAX_PINNED_LOOSE_OBJECTS + 6 {
        host = host.file(format!("/w/.git/objects/{:02x}/{}", i % 7, name(i)));
    }
    let host = host.file("/w/.git/objects/00/tmp_obj_abcdef").link("/w/.git/objects/0f", "/etc");
    let plan = plan(&host, "/w/.git", Mechanism::Mounts);
    let paths = read_only(&plan);
    let loose: Vec<&PathBuf> = paths
        .iter()
        .filter(|path| {
            path.parent().and_then(Path::file_name).is_some_and(|d| is_fan_out_name(d.as_encoded_bytes()))
        })
        .collect();
    assert_eq!(loose.len(), MAX_PINNED_LOOSE_OBJECTS, "{loose:?}");
    assert!(!paths.contains(&p("/w/.git/objects/00/tmp_obj_abcdef")));
    assert!(plan.notes.iter().any(|n| n.contains("only the first")), "{:?}", plan.notes);
    // Under the bound: every one, and no note.
    let small = git_dir(FakeHost::new(), "/w/.git").file(format!("/w/.git/objects/ab/{}", name(1)));
    let plan = self::plan(&small, "/w/.git", Mechanism::Mounts);
    assert!(read_only(&plan).contains(&p(&format!("/w/.git/objects/ab/{}", name(1)))));
    assert!(!plan.notes.iter().any(|n| n.contains("only the first")), "{:?}", plan.notes);
    // One budget for a whole command, said so.
    let mut shared = LooseBudget::per_command();
    let walk = |loose: &mut LooseBudget| {
        plan_git_dir(
            &host,
            Path::new("/w/.git"),
            GitDirKind::Repository,
            Mechanism::PathRules,
            false,
            &allow,
            loose,
        )
    };
    assert!(walk(&mut shared).notes.iter().any(|n| n.contains("not every loose object is pinned")));
    assert!(walk(&mut shared).parts[0].read_only.iter().all(|p| !p.starts_with("/w/.git/objects/0")));
}

#[test]
fn pack_files_are_pinned_one_by_one_up_to_the_budget() {
    let pack = p("/w/.git/objects/pack");
    let host = git_dir(FakeHost::new(), "/w/.git")
        .file(pack.join("pack-1.pack"))
        .file(pack.join("pack-1.idx"))
        .file(pack.join("pack-1.rev"))
        .dir(pack.join("subdir"));
    let paths = read_only(&plan(&host, "/w/.git", Mechanism::Mounts));
    for ext in ["pack", "idx", "rev"] {
        assert!(paths.contains(&pack.join(format!("pack-1.{ext}"))), "{paths:?}");
    }
    assert!(!paths.contains(&pack) && !paths.contains(&pack.join("subdir")), "{paths:?}");
    // A symlinked objects/pack is not followed: the link itself is protected.
    let linked = git_dir(FakeHost::new(), "/w/.git").link(&pack, "/elsewhere").file("/elsewhere/x.pack");
    let paths = read_only(&plan(&linked, "/w/.git", Mechanism::Mounts));
    assert!(paths.contains(&pack) && !paths.iter().any(|e| e.ends_with("x.pack")), "{paths:?}");
    let mut many = host;
    for i in 0..MAX_PINNED_PACK_FILES {
        many = many.file(pack.join(format!("pack-x{i}.pack")));
    }
    let plan = plan(&many, "/w/.git", Mechanism::Mounts);
    let paths = read_only(&plan);
    assert!(paths.contains(&pack) && !paths.contains(&pack.join("pack-1.pack")), "{paths:?}");
    assert!(plan.notes.iter().any(|n| n.contains("more than 64 pack files")), "{:?}", plan.notes);
}

#[test]
fn beyond_the_budget_mounts_freeze_the_git_directory_and_path_rules_its_worktrees_and_modules() {
    let deep: PathBuf = (0..MAX_MODULE_NAME_DEPTH + 1).map(|i| format!("d{i}")).collect();
    let host = git_dir(FakeHost::new(), "/w/.git").dir(p("/w/.git/modules").join(deep));
    let plan = plan(&host, "/w/.git", Mechanism::Mounts);
    assert_eq!(read_only(&plan), vec![p("/w/.git")]);
    assert!(plan.notes[0].contains("read-only as a whole"), "{:?}", plan.notes);
    let plan = self::plan(&host, "/w/.git", Mechanism::PathRules);
    let paths = read_only(&plan);
    assert!(paths.contains(&p("/w/.git/config")) && !paths.contains(&p("/w/.git")), "{paths:?}");
    assert!(paths.contains(&p("/w/.git/worktrees")) && paths.contains(&p("/w/.git/modules")), "{paths:?}");
    assert!(plan.notes[0].contains("worktrees/ and modules/ read-only as a whole"), "{:?}", plan.notes);
}

#[test]
fn a_git_directory_without_objects_is_whole_with_mounts_or_when_named() {
    let host = FakeHost::new().file("/w/.git/HEAD");
    assert_eq!(read_only(&plan(&host, "/w/.git", Mechanism::Mounts)), vec![p("/w/.git")]);
    // A root's own `.git` (`git init` under way) stays entry by entry with path rules.
    let paths = read_only(&plan(&host, "/w/.git", Mechanism::PathRules));
    assert!(paths.contains(&p("/w/.git/hooks")) && !paths.contains(&p("/w/.git")), "{paths:?}");
    let mut loose = LooseBudget::per_command();
    let named = plan_git_dir(
        &host,
        Path::new("/w/.git"),
        GitDirKind::Repository,
        Mechanism::PathRules,
        true,
        &allow,
        &mut loose,
    );
    assert_eq!(read_only(&named), vec![p("/w/.git")]);
    assert_eq!(named.notes, ["/w/.git: read-only as a whole (no objects directory)"]);
}
