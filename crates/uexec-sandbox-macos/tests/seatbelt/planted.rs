//! Planted protected entries (`docs/sandbox.md`, P1-P4): whatever an earlier sandboxed command made of `.git` or
//! `.uexec` in a writable root, the next profile keeps the workspace and `/tmp` writable, keeps the planted entry
//! itself read-only, and its report names what was not followed. Checked with the SBPL evaluator on a fake Mac
//! (`/tmp` is `/private/tmp`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use uexec_domain::GitEntry;
use uexec_domain::SandboxPolicy;
use uexec_domain::gitdir::{GitFileProblem, MAX_GIT_FILE_BYTES};
use uexec_ports::Sandbox;
use uexec_sandbox_macos::{SeatbeltLaunch, SeatbeltSandbox, build_launch};

use crate::fake_fs::FakeFs;
use crate::{check_profile, sexpr};

/// A Mac with the workspace `/tmp/ws` (source in `src`) and a second directory in `/tmp`.
fn mac() -> FakeFs {
    FakeFs::macos().dir("/private/tmp/ws/src").dir("/private/tmp/other")
}

/// `workspace-write` with `/tmp` writable and the command in `/tmp/ws`, as in the issue.
fn launch_in_ws(fs: &FakeFs) -> SeatbeltLaunch {
    launch_with(fs, &[], "/tmp/ws")
}

fn launch_with(fs: &FakeFs, extra_roots: &[&str], cwd: &str) -> SeatbeltLaunch {
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: extra_roots.iter().map(PathBuf::from).collect(),
        network_access: false,
        exclude_slash_tmp: false,
        exclude_tmpdir_env_var: true,
    };
    build_launch(&policy, Path::new(cwd), None, &[OsString::from("true")], fs).unwrap()
}

/// Whether the profile allows `op` on `path`.
fn allows(launch: &SeatbeltLaunch, op: &str, path: &str) -> bool {
    let forms = check_profile(launch);
    sexpr::allows(&forms, op, Path::new(path), &launch.params).unwrap()
}

/// The workspace, its sources and `/tmp` stay writable (creating, writing, removing).
fn assert_roots_writable(launch: &SeatbeltLaunch, case: &str) {
    for path in
        ["/private/tmp/ws/ok", "/private/tmp/ws/src/main.rs", "/private/tmp/ok", "/private/tmp/other/x"]
    {
        for op in ["file-write-create", "file-write-data", "file-write-unlink"] {
            assert!(allows(launch, op, path), "{case}: {op} {path} denied; params {:?}", launch.params);
        }
    }
    // No read-only subpath is a root or contains one.
    let roots: Vec<&OsString> =
        launch.params.iter().filter(|(n, _)| crate::is_root_param(n)).map(|(_, v)| v).collect();
    for (name, value) in launch.params.iter().filter(|(n, _)| crate::is_path_param(n) && n.contains("_RO_")) {
        for root in &roots {
            assert!(
                !Path::new(root).starts_with(value),
                "{case}: {name}={value:?} freezes the root {root:?}"
            );
        }
    }
}

/// The entry itself can be neither removed, replaced nor written.
fn assert_entry_protected(launch: &SeatbeltLaunch, entry: &str, case: &str) {
    for op in ["file-write-unlink", "file-write-create", "file-write-data"] {
        assert!(!allows(launch, op, entry), "{case}: {op} {entry} allowed");
    }
    assert!(!allows(launch, "file-write-create", &format!("{entry}/x")), "{case}: {entry}/x allowed");
}

fn assert_ignored(launch: &SeatbeltLaunch, needle: &str, case: &str) {
    assert!(
        launch.ignored.iter().any(|i| i.contains(needle)),
        "{case}: {needle:?} not in {:?}",
        launch.ignored
    );
}

#[test]
fn a_symlinked_git_or_uexec_protects_only_the_link() {
    let cases: [(&str, &str, &str); 7] = [
        // ln -s /tmp/ws /tmp/.git (the target spelled with /tmp, then canonically)
        ("/private/tmp/.git", "/tmp/ws", "/private/tmp/.git: a symlink to /tmp/ws"),
        ("/private/tmp/.git", "/private/tmp/ws", "a symlink to /private/tmp/ws (only the link is protected"),
        // ln -s /tmp /tmp/.uexec
        ("/private/tmp/.uexec", "/tmp", "/private/tmp/.uexec: a symlink to /tmp"),
        // ln -s /tmp/ws ws/.uexec, ln -s / ws/.git, ln -s .. ws/.git
        ("/private/tmp/ws/.uexec", "/tmp/ws", "/private/tmp/ws/.uexec: a symlink to /tmp/ws"),
        ("/private/tmp/ws/.git", "/", "/private/tmp/ws/.git: a symlink to /"),
        ("/private/tmp/ws/.git", "/private/tmp", "/private/tmp/ws/.git: a symlink to /private/tmp"),
        // ln -s src .git: a directory of the workspace
        (
            "/private/tmp/ws/.git",
            "/private/tmp/ws/src",
            "/private/tmp/ws/.git: a symlink to /private/tmp/ws/src",
        ),
    ];
    for (entry, target, reason) in cases {
        let case = format!("{entry} -> {target}");
        let launch = launch_in_ws(&mac().link(entry, target));
        assert_roots_writable(&launch, &case);
        assert_entry_protected(&launch, entry, &case);
        assert_ignored(&launch, reason, &case);
        assert!(
            !crate::path_params(&launch)
                .iter()
                .any(|(n, v)| n.contains("_RO_") && Path::new(v) == Path::new(target)),
            "{case}: the target is a read-only subpath"
        );
    }
}

#[test]
fn a_gitdir_that_is_or_contains_a_root_or_lies_outside_its_own_root_protects_nothing() {
    // (root whose .git file it is, its gitdir as parse_git_file returns it, reason)
    let cases: [(&str, &str, &str); 10] = [
        // printf 'gitdir: /tmp/ws\n' > /tmp/.git
        ("/private/tmp", "/tmp/ws", "is the writable root /private/tmp/ws"),
        ("/private/tmp", "/private/tmp/ws", "is the writable root /private/tmp/ws"),
        ("/private/tmp", "/tmp", "is the writable root /private/tmp"),
        // gitdir: .. and gitdir: . in the workspace
        ("/private/tmp/ws", "/private/tmp/ws/..", "is the writable root /private/tmp"),
        ("/private/tmp/ws", "/private/tmp/ws/.", "is the writable root /private/tmp/ws"),
        // gitdir: / and gitdir: /private
        ("/private/tmp/ws", "/", "contains the writable root"),
        ("/private/tmp/ws", "/private/tmp/ws/../../../private", "contains the writable root"),
        // /tmp/.git naming a directory of the workspace nested in /tmp (a git directory, even)
        (
            "/private/tmp",
            "/private/tmp/ws/src",
            "lies in the writable root /private/tmp/ws, not in /private/tmp",
        ),
        // the workspace's .git naming a directory of /tmp outside the workspace
        ("/private/tmp/ws", "/tmp/other", "lies in the writable root /private/tmp, not in /private/tmp/ws"),
        // gitdir: /dev/klog, never even looked up
        ("/private/tmp/ws", "/dev/klog", "outside every writable root (read-only anyway)"),
    ];
    for (owner, gitdir, reason) in cases {
        let case = format!("{owner}/.git: gitdir: {gitdir}");
        // Every candidate is a git directory, so only the rule refuses it.
        let fs = mac()
            .file("/private/tmp/ws/HEAD")
            .file("/private/tmp/HEAD")
            .file("/private/tmp/ws/src/HEAD")
            .file("/private/tmp/other/HEAD")
            .git(owner, GitEntry::File { gitdir: PathBuf::from(gitdir) });
        let launch = launch_in_ws(&fs);
        assert_roots_writable(&launch, &case);
        assert_entry_protected(&launch, &format!("{owner}/.git"), &case);
        assert_ignored(&launch, &format!("gitdir {gitdir}: {reason}"), &case);
    }
}

#[test]
fn a_gitdir_through_a_planted_link_or_without_head_protects_nothing_but_a_real_one_is_protected() {
    // gitdir: link/x where ws/link -> /tmp: inside the workspace by its text, /tmp/x in fact.
    let fs = mac()
        .dir("/private/tmp/x")
        .file("/private/tmp/x/HEAD")
        .link("/private/tmp/ws/link", "/private/tmp")
        .git("/private/tmp/ws", GitEntry::File { gitdir: PathBuf::from("/private/tmp/ws/link/x") });
    let launch = launch_in_ws(&fs);
    assert_roots_writable(&launch, "through a link");
    assert!(allows(&launch, "file-write-data", "/private/tmp/x/HEAD"));
    assert_ignored(
        &launch,
        "gitdir /private/tmp/ws/link/x: its path goes through a symlink",
        "through a link",
    );

    // A directory of the workspace without HEAD: git would not use it.
    let fs = mac().git("/private/tmp/ws", GitEntry::File { gitdir: PathBuf::from("/private/tmp/ws/src") });
    let launch = launch_in_ws(&fs);
    assert_roots_writable(&launch, "no HEAD");
    assert_ignored(&launch, "gitdir /private/tmp/ws/src: not a git directory (no HEAD file)", "no HEAD");

    // The control: the workspace's own git directory, spelled with /tmp, is protected.
    let fs = mac()
        .file("/private/tmp/ws/.gitdirs/wt/HEAD")
        .git("/private/tmp/ws", GitEntry::File { gitdir: PathBuf::from("/tmp/ws/.gitdirs/wt") });
    let launch = launch_in_ws(&fs);
    assert_roots_writable(&launch, "own gitdir");
    assert!(!allows(&launch, "file-write-data", "/private/tmp/ws/.gitdirs/wt/HEAD"));
    assert!(!allows(&launch, "file-write-unlink", "/private/tmp/ws/.gitdirs/wt"));
    assert!(allows(&launch, "file-write-create", "/private/tmp/ws/.gitdirs/other"));
    // A HEAD file without objects/ is no repository git can use, so it stays read-only as a whole.
    assert_eq!(launch.ignored, ["/private/tmp/ws/.gitdirs/wt: read-only as a whole (no objects directory)"]);
}

#[test]
fn an_unreadable_git_file_protects_itself_and_is_reported() {
    let problems = [
        GitFileProblem::NotARegularFile,
        GitFileProblem::TooLarge { size: MAX_GIT_FILE_BYTES + 1 },
        GitFileProblem::NoGitdirLine,
        GitFileProblem::Unreadable("Permission denied".into()),
    ];
    for problem in problems {
        let case = format!("{problem}");
        let launch = launch_in_ws(&mac().odd_git("/private/tmp", problem.clone()));
        assert_roots_writable(&launch, &case);
        assert_entry_protected(&launch, "/private/tmp/.git", &case);
        assert_ignored(&launch, &format!("/private/tmp/.git: {problem}"), &case);
    }
}

#[test]
fn nested_roots_freeze_only_their_own_entries() {
    // A configured root holding the workspace, each with planted entries naming the other.
    let fs = FakeFs::macos()
        .dir("/Users/dev/mono/wt/src")
        .file("/Users/dev/mono/wt/.gitdir/HEAD")
        .link("/Users/dev/mono/.uexec", "/Users/dev/mono/wt")
        .link("/Users/dev/mono/wt/.uexec", "/Users/dev/mono")
        .git("/Users/dev/mono", GitEntry::File { gitdir: PathBuf::from("/Users/dev/mono/wt/.gitdir") })
        .git("/Users/dev/mono/wt", GitEntry::File { gitdir: PathBuf::from("/Users/dev/mono/wt/..") });
    let launch = launch_with(&fs, &["/Users/dev/mono"], "/Users/dev/mono/wt");
    for path in ["/Users/dev/mono/wt/src/lib.rs", "/Users/dev/mono/README", "/Users/dev/mono/wt/.gitdir/HEAD"]
    {
        for op in ["file-write-create", "file-write-data", "file-write-unlink"] {
            assert!(allows(&launch, op, path), "{op} {path} denied; params {:?}", launch.params);
        }
    }
    for entry in [
        "/Users/dev/mono/.git",
        "/Users/dev/mono/.uexec",
        "/Users/dev/mono/wt/.git",
        "/Users/dev/mono/wt/.uexec",
    ] {
        assert_entry_protected(&launch, entry, entry);
    }
    assert_ignored(
        &launch,
        "gitdir /Users/dev/mono/wt/.gitdir: lies in the writable root /Users/dev/mono/wt, not in /Users/dev/mono",
        "outer names inner",
    );
    assert_ignored(
        &launch,
        "gitdir /Users/dev/mono/wt/..: is the writable root /Users/dev/mono",
        "inner names outer",
    );
    assert_ignored(&launch, "/Users/dev/mono/.uexec: a symlink to /Users/dev/mono/wt", "outer .uexec");
}

#[test]
fn the_report_names_what_was_not_followed() {
    let fs = mac().link("/private/tmp/.git", "/tmp/ws").link("/private/tmp/ws/.uexec", "/tmp");
    let sandbox = SeatbeltSandbox::for_inspection().with_view(Arc::new(fs));
    let cwd = PathBuf::from("/tmp/ws");
    let prepared = sandbox.prepare(crate::request(cwd, SandboxPolicy::default())).unwrap();
    let filesystem = prepared.report.protections.iter().find(|p| p.name == "filesystem").unwrap();
    assert!(
        filesystem.detail.contains(
            "(not followed: /private/tmp/ws/.uexec: a symlink to /tmp (only the link is protected, its target is \
             not); /private/tmp/.git: a symlink to /tmp/ws (only the link is protected, its target is not))"
        ),
        "{}",
        filesystem.detail
    );
}

#[test]
fn planted_entries_on_the_real_filesystem_protect_only_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(base.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    // The outer root: .git -> the workspace, .uexec -> itself; the workspace: gitdir: .. (a git directory).
    std::os::unix::fs::symlink(&ws, base.join(".git")).unwrap();
    std::os::unix::fs::symlink(&base, base.join(".uexec")).unwrap();
    std::fs::write(ws.join(".git"), "gitdir: ..\n").unwrap();
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: vec![base.clone()],
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    };
    let launch = build_launch(&policy, &ws, None, &[OsString::from("true")], &uexec_plan::RealHost).unwrap();
    let text = |p: PathBuf| p.to_str().unwrap().to_owned();
    for path in [ws.join("ok"), ws.join("src/main.rs"), ws.join("HEAD"), base.join("ok"), base.join("HEAD")] {
        for op in ["file-write-create", "file-write-data", "file-write-unlink"] {
            assert!(allows(&launch, op, &text(path.clone())), "{op} {}: {:?}", path.display(), launch.params);
        }
    }
    for entry in [base.join(".git"), base.join(".uexec"), ws.join(".git")] {
        assert_entry_protected(&launch, &text(entry.clone()), &entry.display().to_string());
    }
    // An absent entry is not protected (the Linux rule: `git init` and `mkdir .uexec` work), and is reported.
    assert!(launch.absent.contains(&ws.join(".uexec")), "{:?}", launch.absent);
    assert!(allows(&launch, "file-write-create", &text(ws.join(".uexec"))));
    assert_ignored(
        &launch,
        &format!("{}: a symlink to {}", base.join(".git").display(), ws.display()),
        "real",
    );
    assert_ignored(
        &launch,
        &format!("gitdir {}: is the writable root {}", ws.join("..").display(), base.display()),
        "real",
    );
}
