//! Git inside the sandbox on a fake Mac (`docs/sandbox.md`, "Git inside the sandbox"), checked with the SBPL
//! evaluator: the git dirs of linked worktrees and submodules are writable but for their protected entries, the
//! gitdir a root's `.git` file names is protected by its kind, the repository of a linked worktree outside every
//! root becomes writable for it (and a planted `.git` file grants nothing), and the loose objects present cannot
//! be removed. Every denied probe has an allowed twin.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use uexec_domain::gitdir::{MAX_MODULE_NAME_DEPTH, MAX_PINNED_LOOSE_OBJECTS};
use uexec_domain::{GitEntry, SandboxPolicy};
use uexec_plan::linked_worktree_repository;
use uexec_sandbox_macos::{SeatbeltLaunch, build_launch_with};

use crate::fake_fs::FakeFs;
use crate::sexpr::Request;
use crate::{check_profile, sexpr};

/// A loose object's name in the fan-out directory `ab` (38 hexadecimal digits).
const LOOSE: &str = "0123456789abcdef0123456789abcdef012345";

/// `workspace-write` without `/tmp` and `$TMPDIR`, the command in `cwd`, no other tool's file protected.
fn launch_in(fs: &FakeFs, cwd: &str) -> SeatbeltLaunch {
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    };
    let names: Vec<&str> = uexec_domain::tool_files::TOOL_ENTRIES.iter().map(|e| e.name).collect();
    let tools = uexec_domain::tool_files::ToolFiles::allowing(&names).unwrap();
    build_launch_with(&policy, Path::new(cwd), None, &[OsString::from("true")], fs, &tools).unwrap()
}

fn check(launch: &SeatbeltLaunch, probes: &[(Request, bool)], case: &str) {
    let forms = check_profile(launch);
    for (request, expected) in probes {
        let allowed = sexpr::decide(&forms, request, &launch.params).unwrap();
        assert_eq!(allowed, *expected, "{case}: {request:?}; ignored {:?}", launch.ignored);
    }
}

fn write(path: &str) -> Request {
    Request::file("file-write-data", path)
}

fn create(path: &str) -> Request {
    Request::file("file-write-create", path)
}

fn unlink(path: &str) -> Request {
    Request::file("file-write-unlink", path)
}

/// A repository's git directory at `git`: `HEAD`, `config`, `objects/`.
fn repository(fs: FakeFs, git: &str) -> FakeFs {
    fs.file(format!("{git}/HEAD")).file(format!("{git}/config")).dir(format!("{git}/objects"))
}

/// The workspace `/Users/dev/ws` with its repository, a linked worktree, a submodule (and one of its own, and
/// one whose name holds a slash), and the odd `worktrees/<id>` git makes no use of.
fn workspace_with_worktrees_and_submodules() -> FakeFs {
    let git = "/Users/dev/ws/.git";
    let fs =
        repository(FakeFs::macos().dir("/Users/dev/ws/src"), git).git("/Users/dev/ws", GitEntry::Directory);
    // git worktree add ../wt: its admin dir names the common dir and the work tree back.
    let fs = fs
        .file(format!("{git}/worktrees/wt/HEAD"))
        .file(format!("{git}/worktrees/wt/index"))
        .content(format!("{git}/worktrees/wt/commondir"), "../..\n")
        .content(format!("{git}/worktrees/wt/gitdir"), "/Users/dev/wt/.git\n");
    // A worktrees/<id> without commondir and without objects: a repository git cannot use yet.
    let fs = fs.file(format!("{git}/worktrees/lost/HEAD"));
    // One whose commondir names itself: a repository of its own to git, with objects.
    let fs = repository(fs, &format!("{git}/worktrees/own"))
        .content(format!("{git}/worktrees/own/commondir"), ".\n");
    let fs = repository(fs, &format!("{git}/modules/sub"))
        .file(format!("{git}/modules/sub/objects/pack/pack-1.pack"))
        .dir(format!("{git}/modules/sub/hooks"));
    let fs = repository(fs, &format!("{git}/modules/sub/modules/inner"));
    repository(fs, &format!("{git}/modules/a/b"))
}

#[test]
fn linked_worktrees_and_submodules_commit_while_their_protected_entries_stay_read_only() {
    let launch = launch_in(&workspace_with_worktrees_and_submodules(), "/Users/dev/ws");
    let g = |rest: &str| format!("/Users/dev/ws/.git/{rest}");
    check(
        &launch,
        &[
            // A linked worktree: its index, HEAD and refs are written by commit ...
            (write(&g("worktrees/wt/index")), true),
            (write(&g("worktrees/wt/HEAD")), true),
            (create(&g("worktrees/wt/index.lock")), true),
            // ... its commondir (present), config.worktree (absent) and gitdir are not, nor can the directory or
            // worktrees/ be renamed away.
            (write(&g("worktrees/wt/commondir")), false),
            (unlink(&g("worktrees/wt/commondir")), false),
            (create(&g("worktrees/wt/config.worktree")), false),
            (write(&g("worktrees/wt/gitdir")), false),
            (unlink(&g("worktrees/wt")), false),
            (unlink(&g("worktrees")), false),
            // git worktree add: a new admin dir can be made (protected from the next command on).
            (create(&g("worktrees/new")), true),
            (create(&g("worktrees/new/commondir")), true),
            // Without commondir or objects: read-only as a whole; with a commondir naming itself: a repository.
            (write(&g("worktrees/lost/HEAD")), false),
            (create(&g("worktrees/lost/config")), false),
            (create(&g("worktrees/lost/commondir")), false),
            (create(&g("worktrees/own/commondir.lock")), true),
            (write(&g("worktrees/own/index")), true),
            (write(&g("worktrees/own/config")), false),
            (create(&g("worktrees/own/hooks/pre-commit")), false),
            // A submodule: HEAD, index and objects written, config, hooks and its packs not.
            (write(&g("modules/sub/HEAD")), true),
            (write(&g("modules/sub/index")), true),
            (create(&g("modules/sub/objects/ab/new")), true),
            (create(&g("modules/sub/objects/pack/pack-2.pack")), true),
            (write(&g("modules/sub/config")), false),
            (create(&g("modules/sub/hooks/x")), false),
            (create(&g("modules/sub/info/attributes")), false),
            (unlink(&g("modules/sub/objects/pack/pack-1.pack")), false),
            (unlink(&g("modules/sub")), false),
            // Recursively, and with a slash in the name.
            (write(&g("modules/sub/modules/inner/index")), true),
            (write(&g("modules/sub/modules/inner/config")), false),
            (write(&g("modules/a/b/index")), true),
            (create(&g("modules/a/b/hooks/post-checkout")), false),
            // The repository's own entries, as before.
            (write(&g("index")), true),
            (write(&g("config")), false),
        ],
        "worktrees and modules",
    );
    assert!(
        launch
            .ignored
            .iter()
            .any(|i| i.ends_with("worktrees/lost: read-only as a whole (no objects directory)")),
        "{:?}",
        launch.ignored
    );
}

#[test]
fn beyond_the_budget_worktrees_and_modules_are_read_only_as_a_whole() {
    let deep: PathBuf = (0..=MAX_MODULE_NAME_DEPTH).map(|i| format!("d{i}")).collect();
    let fs =
        workspace_with_worktrees_and_submodules().dir(Path::new("/Users/dev/ws/.git/modules").join(deep));
    let launch = launch_in(&fs, "/Users/dev/ws");
    let g = |rest: &str| format!("/Users/dev/ws/.git/{rest}");
    check(
        &launch,
        &[
            (write(&g("worktrees/wt/index")), false),
            (create(&g("worktrees/new")), false),
            (write(&g("modules/sub/HEAD")), false),
            // The twins: the repository's own git directory is still writable entry by entry.
            (write(&g("index")), true),
            (create(&g("objects/ab/new")), true),
            (write(&g("config")), false),
        ],
        "too deep",
    );
    assert!(
        launch.ignored.iter().any(|i| i.contains(
            "worktrees/ and modules/ read-only as a whole (submodule names \
                                                     deeper than 8"
        )),
        "{:?}",
        launch.ignored
    );
}

#[test]
fn the_gitdir_a_root_s_git_file_names_is_protected_by_its_kind() {
    let ws = "/Users/dev/ws";
    // A linked worktree of a repository kept in the same root: its admin dir and the common dir it names.
    let main = "/Users/dev/ws/.main";
    let fs = repository(FakeFs::macos(), main)
        .file(format!("{main}/worktrees/wt/HEAD"))
        .content(format!("{main}/worktrees/wt/commondir"), "../..\n")
        .git(ws, GitEntry::File { gitdir: PathBuf::from(format!("{main}/worktrees/wt")) })
        .file(format!("{ws}/.git"));
    let launch = launch_in(&fs, ws);
    check(
        &launch,
        &[
            (write(&format!("{main}/worktrees/wt/index")), true),
            (write(&format!("{main}/worktrees/wt/HEAD")), true),
            (write(&format!("{main}/worktrees/wt/commondir")), false),
            (create(&format!("{main}/worktrees/wt/gitdir")), false),
            (create(&format!("{main}/worktrees/wt/config.worktree")), false),
            (create(&format!("{main}/objects/ab/new")), true),
            (write(&format!("{main}/index")), true),
            (write(&format!("{main}/config")), false),
            (create(&format!("{main}/hooks/post-checkout")), false),
            (write(&format!("{ws}/.git")), false),
            (write(&format!("{ws}/src.rs")), true),
        ],
        "worktree in the root",
    );
    // A submodule's work tree at the top of a root: its gitdir is a repository, entries and history pinned.
    let sub = "/Users/dev/ws/.sub";
    let fs = repository(FakeFs::macos(), sub)
        .file(format!("{sub}/objects/pack/pack-1.pack"))
        .file(format!("{sub}/objects/ab/{LOOSE}"))
        .git(ws, GitEntry::File { gitdir: PathBuf::from(sub) })
        .file(format!("{ws}/.git"));
    let launch = launch_in(&fs, ws);
    check(
        &launch,
        &[
            (write(&format!("{sub}/HEAD")), true),
            (create(&format!("{sub}/objects/ab/new")), true),
            (write(&format!("{sub}/config")), false),
            (create(&format!("{sub}/hooks/x")), false),
            (unlink(&format!("{sub}/objects/pack/pack-1.pack")), false),
            (unlink(&format!("{sub}/objects/ab/{LOOSE}")), false),
        ],
        "submodule gitdir",
    );
}

/// A repository `/Users/dev/main` kept outside every root, whose linked worktree `/Users/dev/wt` is the
/// workspace; `back_link` is what the worktree's `gitdir` file says (git writes `/Users/dev/wt/.git`).
fn outside_repository(back_link: &str) -> FakeFs {
    let git = "/Users/dev/main/.git";
    repository(FakeFs::macos().dir("/Users/dev/wt/src").file("/Users/dev/main/a.txt"), git)
        .file(format!("{git}/index"))
        .dir(format!("{git}/hooks"))
        .file(format!("{git}/objects/ab/{LOOSE}"))
        .file(format!("{git}/worktrees/wt/HEAD"))
        .content(format!("{git}/worktrees/wt/commondir"), "../..\n")
        .content(format!("{git}/worktrees/wt/gitdir"), back_link)
        .file(format!("{git}/worktrees/other/HEAD"))
        .content(format!("{git}/worktrees/other/commondir"), "../..\n")
        .content(format!("{git}/worktrees/other/gitdir"), "/Users/dev/other/.git\n")
        .git("/Users/dev/wt", GitEntry::File { gitdir: PathBuf::from(format!("{git}/worktrees/wt")) })
        .file("/Users/dev/wt/.git")
}

#[test]
fn a_linked_worktree_commits_to_its_repository_outside_every_root() {
    let fs = outside_repository("/Users/dev/wt/.git\n");
    let launch = launch_in(&fs, "/Users/dev/wt");
    let main = PathBuf::from("/Users/dev/main/.git");
    assert_eq!(launch.worktree_repositories, [(main.clone(), PathBuf::from("/Users/dev/wt"))]);
    assert_eq!(launch.writable_roots(), [PathBuf::from("/Users/dev/wt"), main.clone()]);
    let g = |rest: &str| format!("/Users/dev/main/.git/{rest}");
    check(
        &launch,
        &[
            // What git writes for a commit in the worktree ...
            (create(&g("objects/ab/new")), true),
            (create(&g("objects/cd")), true),
            (create(&g("refs/heads/topic")), true),
            (write(&g("logs/HEAD")), true),
            (write(&g("worktrees/wt/index")), true),
            (write(&g("worktrees/wt/HEAD")), true),
            (write("/Users/dev/wt/src/lib.rs"), true),
            // ... but not the configuration, hooks, the main worktree's index and HEAD, its files, the worktree's
            // admin files or the history present.
            (write(&g("config")), false),
            (create(&g("hooks/post-checkout")), false),
            (write(&g("index")), false),
            (write(&g("HEAD")), false),
            (write("/Users/dev/main/a.txt"), false),
            (write(&g("worktrees/wt/gitdir")), false),
            (write(&g("worktrees/wt/commondir")), false),
            // ... nor the person's other checkout's HEAD and index.
            (write(&g("worktrees/other/HEAD")), false),
            (write(&g("worktrees/other/index")), false),
            (write(&g("worktrees/other/commondir")), false),
            (unlink(&g(&format!("objects/ab/{LOOSE}"))), false),
            (unlink(&g("objects")), false),
            (unlink("/Users/dev/main/.git"), false),
        ],
        "granted",
    );
    assert!(launch.ignored.is_empty(), "{:?}", launch.ignored);
    let roots = [PathBuf::from("/Users/dev/wt")];
    assert_eq!(linked_worktree_repository(&fs, &roots[0], &roots), Some(Ok(main)));
}

#[test]
fn a_planted_git_file_naming_another_work_tree_s_repository_grants_nothing() {
    // The repository lists another work tree, its commondir names elsewhere, or a symlink is on the way.
    let linked = outside_repository("/Users/dev/wt/.git\n")
        .link("/Users/dev/alias", "/Users/dev/main")
        .git("/Users/dev/wt", GitEntry::File { gitdir: PathBuf::from("/Users/dev/alias/.git/worktrees/wt") });
    let elsewhere = outside_repository("/Users/dev/wt/.git\n")
        .content("/Users/dev/main/.git/worktrees/wt/commondir", "/Users/dev/other/.git\n");
    let cases = [
        (
            outside_repository("/Users/dev/other/.git\n"),
            "its gitdir file names /Users/dev/other/.git, another work tree",
        ),
        (elsewhere, "its commondir names /Users/dev/other/.git"),
        (linked, "/Users/dev/alias/.git/worktrees/wt: not a directory reached without a symlink"),
    ];
    for (fs, why) in cases {
        let launch = launch_in(&fs, "/Users/dev/wt");
        assert!(launch.worktree_repositories.is_empty(), "{why}");
        assert_eq!(launch.writable_roots(), [PathBuf::from("/Users/dev/wt")], "{why}");
        assert!(
            launch.ignored.iter().any(|i| i.contains("outside every writable root, left read-only (")
                && i.contains(why)
                && i.contains("git in /Users/dev/wt can read, not commit")),
            "{why}: {:?}",
            launch.ignored
        );
        check(
            &launch,
            &[
                (create("/Users/dev/main/.git/objects/ab/new"), false),
                (write("/Users/dev/main/.git/worktrees/wt/index"), false),
                (write("/Users/dev/wt/src/lib.rs"), true),
            ],
            why,
        );
        let roots = [PathBuf::from("/Users/dev/wt")];
        assert!(
            matches!(linked_worktree_repository(&fs, &roots[0], &roots), Some(Err(e)) if e.contains(why))
        );
    }
}

#[test]
fn loose_objects_present_cannot_be_removed_while_new_ones_are_written() {
    let git = "/Users/dev/ws/.git";
    let sha256 = "f".repeat(62);
    let fs = repository(FakeFs::macos(), git)
        .git("/Users/dev/ws", GitEntry::Directory)
        .file(format!("{git}/objects/ab/{LOOSE}"))
        .file(format!("{git}/objects/ab/tmp_obj_Xy12"))
        .file(format!("{git}/objects/cd/{sha256}"))
        .file(format!("{git}/objects/info/packs"));
    let launch = launch_in(&fs, "/Users/dev/ws");
    let o = |rest: &str| format!("{git}/objects/{rest}");
    let other = "fedcba9876543210fedcba9876543210fedcba";
    check(
        &launch,
        &[
            (unlink(&o(&format!("ab/{LOOSE}"))), false),
            (write(&o(&format!("ab/{LOOSE}"))), false),
            (unlink(&o(&format!("cd/{sha256}"))), false),
            (unlink(&o("ab")), false),
            // The twins: a new object in the same fan-out directory, git's temporary file, a new fan-out.
            (create(&o(&format!("ab/{other}"))), true),
            (unlink(&o("ab/tmp_obj_Xy12")), true),
            (create(&o("ef")), true),
            (create(&o("ef/0000")), true),
        ],
        "loose",
    );
}

#[test]
fn beyond_the_budget_the_first_loose_objects_are_pinned_and_the_report_says_so() {
    let git = "/Users/dev/ws/.git";
    let names: Vec<String> = (0..=MAX_PINNED_LOOSE_OBJECTS).map(|i| format!("{i:038x}")).collect();
    // A repository nested at the workspace's top level shares the bound (one command line for both).
    let nested = "/Users/dev/ws/vendored/.git";
    let start = repository(repository(FakeFs::macos(), git), nested)
        .git("/Users/dev/ws", GitEntry::Directory)
        .git("/Users/dev/ws/vendored", GitEntry::Directory)
        .file(format!("{nested}/objects/cd/{LOOSE}"));
    let fs = names.iter().fold(start, |fs, name| fs.file(format!("{git}/objects/ab/{name}")));
    let launch = launch_in(&fs, "/Users/dev/ws");
    // What sandbox-exec receives stays far below macOS's ARG_MAX (1 MiB, environment included).
    let size: usize = launch.argv.iter().map(|a| a.len() + 1).sum();
    assert!(size < 512 * 1024, "{size} bytes");
    let pinned = |name: &str| {
        let path = PathBuf::from(format!("{git}/objects/ab/{name}"));
        launch.params.iter().any(|(n, v)| crate::is_path_param(n) && Path::new(v) == path)
    };
    assert!(names[..MAX_PINNED_LOOSE_OBJECTS].iter().all(|n| pinned(n)));
    assert!(!pinned(&names[MAX_PINNED_LOOSE_OBJECTS]));
    let nested_object = PathBuf::from(format!("{nested}/objects/cd/{LOOSE}"));
    assert!(!launch.params.iter().any(|(_, v)| Path::new(v) == nested_object));
    assert!(
        launch.ignored.iter().any(|i| i.starts_with(&format!("{nested}/objects: not every loose object"))),
        "{:?}",
        launch.ignored
    );
    assert!(
        launch.ignored.iter().any(|i| i == &format!(
            "{git}/objects: not every loose object is pinned (at most {MAX_PINNED_LOOSE_OBJECTS} in all, the first \
             in name order; the others can be removed inside the sandbox; a git gc outside packs them, and pack \
             files are pinned)"
        )),
        "{:?}",
        launch.ignored
    );
}

#[test]
fn the_real_filesystem_is_read_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let git = ws.join(".git");
    for sub in ["objects/ab", "worktrees/wt", "modules/sub/objects", "refs"] {
        std::fs::create_dir_all(git.join(sub)).unwrap();
    }
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(git.join("objects/ab").join(LOOSE), "x").unwrap();
    std::fs::write(git.join("worktrees/wt/commondir"), "../..\n").unwrap();
    std::fs::write(git.join("modules/sub/HEAD"), "ref: refs/heads/main\n").unwrap();
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    };
    let launch = build_launch_with(&policy, &ws, None, &[OsString::from("true")], &uexec_plan::RealHost, &{
        let names: Vec<&str> = uexec_domain::tool_files::TOOL_ENTRIES.iter().map(|e| e.name).collect();
        uexec_domain::tool_files::ToolFiles::allowing(&names).unwrap()
    })
    .unwrap();
    let paths: Vec<PathBuf> =
        crate::path_params(&launch).into_iter().map(|(_, v)| PathBuf::from(v)).collect();
    for entry in ["worktrees/wt/commondir", "worktrees/wt/gitdir", "modules/sub/config", "modules/sub/hooks"]
    {
        assert!(paths.contains(&git.join(entry)), "{entry}: {paths:?}");
    }
    assert!(paths.contains(&git.join("objects/ab").join(LOOSE)), "{paths:?}");
    // A linked worktree's admin dir has no config of its own; the repository's own is not a whole.
    for entry in ["worktrees/wt/config", "worktrees", "modules", "modules/sub/index"] {
        assert!(!paths.contains(&git.join(entry)), "{entry}: {paths:?}");
    }
}

#[test]
fn the_report_names_the_granted_repository() {
    use std::sync::Arc;
    use uexec_ports::Sandbox;
    let fs = outside_repository("/Users/dev/wt/.git\n");
    let sandbox = uexec_sandbox_macos::SeatbeltSandbox::for_inspection().with_view(Arc::new(fs));
    let cwd = PathBuf::from("/Users/dev/wt");
    let prepared = sandbox.prepare(crate::request(cwd, SandboxPolicy::default())).unwrap();
    let filesystem = prepared.report.protections.iter().find(|p| p.name == "filesystem").unwrap();
    assert!(
        filesystem.detail.contains(
            "(/Users/dev/main/.git is writable as the repository of the linked worktree /Users/dev/wt: its \
             configuration, hooks, redirections, worktrees' admin files, pack files, loose objects and the HEAD and \
             index of the main worktree and of the other worktrees stay read-only)"
        ),
        "{}",
        filesystem.detail
    );
}

#[test]
fn no_new_module_git_dir_and_no_shallow_while_existing_submodules_commit() {
    let fs = workspace_with_worktrees_and_submodules();
    let launch = launch_in(&fs, "/Users/dev/ws");
    let git = "/Users/dev/ws/.git";
    check(
        &launch,
        &[
            // A new submodule git dir (the person's own `git submodule update --init` would use it), under
            // every spelling, directly in modules/ or in the directory of a name with a slash.
            (create(&format!("{git}/modules/evil")), false),
            (create(&format!("{git}/MODULES/evil")), false),
            (create(&format!("{git}/modules/a/evil")), false),
            (unlink(&format!("{git}/modules")), false),
            // The submodule git dirs present stay writable, their protected entries aside.
            (create(&format!("{git}/modules/sub/index.lock")), true),
            (create(&format!("{git}/modules/sub/objects/ab/{LOOSE}")), true),
            (create(&format!("{git}/modules/a/b/ORIG_HEAD")), true),
            (write(&format!("{git}/modules/sub/config")), false),
            (create(&format!("{git}/modules/sub/modules/evil")), false),
            // shallow: where history ends, present or not.
            (create(&format!("{git}/shallow")), false),
            (write(&format!("{git}/modules/sub/shallow")), false),
            (create(&format!("{git}/shallow.lock")), true),
        ],
        "modules and shallow",
    );
    assert!(
        launch.closed.iter().any(|d| d == Path::new("/Users/dev/ws/.git/modules")),
        "{:?}",
        launch.closed
    );
    // A repository without modules/: nothing can be created there either (Seatbelt matches paths).
    let fs = repository(FakeFs::macos().dir("/Users/dev/p/src"), "/Users/dev/p/.git")
        .git("/Users/dev/p", GitEntry::Directory);
    let launch = launch_in(&fs, "/Users/dev/p");
    check(
        &launch,
        &[
            (create("/Users/dev/p/.git/modules"), true),
            (create("/Users/dev/p/.git/modules/evil"), false),
            (create("/Users/dev/p/.git/index.lock"), true),
        ],
        "no modules",
    );
}

/// The workspace `/Users/dev/f`, a folder of repositories: the person's `vendorlib` born first, then `planted`
/// more (named to come first), with birth times when `births`.
fn folder_of_repositories(planted: usize, births: bool) -> FakeFs {
    let mut fs = repository(FakeFs::macos().dir("/Users/dev/f"), "/Users/dev/f/vendorlib/.git")
        .git("/Users/dev/f/vendorlib", GitEntry::Directory);
    if births {
        fs = fs.born("/Users/dev/f/vendorlib/.git", 10);
    }
    for i in 0..planted {
        let dir = format!("/Users/dev/f/aa{i:02}");
        fs = repository(fs, &format!("{dir}/.git")).git(&dir, GitEntry::Directory);
        if births {
            fs = fs.born(format!("{dir}/.git"), 1000 + i as u64);
        }
    }
    fs
}

#[test]
fn planted_repositories_push_none_of_the_person_s_out_of_the_budget() {
    use uexec_domain::gitdir::MAX_NESTED_REPOSITORIES;
    let launch = launch_in(&folder_of_repositories(40, true), "/Users/dev/f");
    check(
        &launch,
        &[
            // The person's, the oldest: entry by entry (git commits there), config and hooks denied.
            (write("/Users/dev/f/vendorlib/.git/config"), false),
            (create("/Users/dev/f/vendorlib/.git/hooks/post-checkout"), false),
            (create("/Users/dev/f/vendorlib/.git/index.lock"), true),
            // The planted: the oldest of them entry by entry, the youngest read-only as a whole.
            (write("/Users/dev/f/aa00/.git/config"), false),
            (create("/Users/dev/f/aa00/.git/index.lock"), true),
            (write("/Users/dev/f/aa39/.git/config"), false),
            (create("/Users/dev/f/aa39/.git/index.lock"), false),
            (create("/Users/dev/f/aa39/new.txt"), true),
        ],
        "40 planted",
    );
    let note = format!("more than {MAX_NESTED_REPOSITORIES}");
    assert!(launch.ignored.iter().any(|n| n.contains(&note)), "{:?}", launch.ignored);
    // Birth times unknown: every one read-only as a whole, none left writable.
    let launch = launch_in(&folder_of_repositories(40, false), "/Users/dev/f");
    check(
        &launch,
        &[
            (write("/Users/dev/f/vendorlib/.git/config"), false),
            (create("/Users/dev/f/vendorlib/.git/index.lock"), false),
            (create("/Users/dev/f/vendorlib/file.txt"), true),
        ],
        "no birth times",
    );
}

#[test]
fn a_top_level_beyond_the_budget_is_refused_and_within_it_examined() {
    use uexec_domain::gitdir::MAX_NESTED_SCAN_ENTRIES;
    use uexec_ports::SandboxError;
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    };
    let fill = |count: usize| {
        (0..count).fold(folder_of_repositories(0, true), |fs, i| fs.dir(format!("/Users/dev/f/d{i}")))
    };
    let tools = uexec_domain::tool_files::ToolFiles::all();
    let argv = [OsString::from("true")];
    let refused = build_launch_with(
        &policy,
        Path::new("/Users/dev/f"),
        None,
        &argv,
        &fill(MAX_NESTED_SCAN_ENTRIES),
        &tools,
    );
    match refused {
        Err(SandboxError::Unenforceable { missing, .. }) => {
            assert!(missing.contains("MAX_NESTED_SCAN_ENTRIES") && missing.contains("remove"), "{missing}")
        }
        other => panic!("beyond the budget the command must be refused: {other:?}"),
    }
    // The twin: 1100 planted directories are examined, and the person's repository stays protected.
    let launch = launch_in(&fill(1100), "/Users/dev/f");
    check(
        &launch,
        &[
            (write("/Users/dev/f/vendorlib/.git/config"), false),
            (create("/Users/dev/f/vendorlib/.git/x"), true),
        ],
        "1100 planted",
    );
}
