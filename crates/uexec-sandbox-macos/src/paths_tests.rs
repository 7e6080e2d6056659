//! Unit tests of the filesystem seam: `.git` files, lenient canonicalisation and read-only spellings.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use uexec_domain::GitEntry;
use uexec_domain::gitdir::{GitFileProblem, UnprotectedGitdir};
use uexec_ports::SandboxError;

use super::*;

/// Existing directories only, with `/tmp` a link to `/private/tmp` (enough for these unit tests; the
/// integration tests have a fuller fake).
#[derive(Debug)]
struct Fake {
    canonical: BTreeMap<PathBuf, PathBuf>,
}

impl Fake {
    fn new() -> Self {
        let mut canonical = BTreeMap::new();
        for (from, to) in [
            ("/", "/"),
            ("/private", "/private"),
            ("/private/tmp", "/private/tmp"),
            ("/tmp", "/private/tmp"),
            ("/tmp/w", "/private/tmp/w"),
            ("/private/tmp/w", "/private/tmp/w"),
        ] {
            canonical.insert(PathBuf::from(from), PathBuf::from(to));
        }
        Fake { canonical }
    }
}

impl PathResolver for Fake {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        self.canonical.get(path).cloned().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn inspect_git(&self, _root: &Path) -> (GitEntry, Option<GitFileProblem>) {
        (GitEntry::Absent, None)
    }

    fn symlink_target(&self, _path: &Path) -> Option<PathBuf> {
        None
    }

    fn is_regular_file(&self, _path: &Path) -> bool {
        false
    }
}

#[test]
fn git_file_targets_are_resolved_against_the_root() {
    let root = Path::new("/w/repo");
    assert_eq!(
        parse_git_file(root, "gitdir: ../main/.git/worktrees/repo\n"),
        GitEntry::File { gitdir: PathBuf::from("/w/repo/../main/.git/worktrees/repo") }
    );
    assert_eq!(
        parse_git_file(root, "gitdir:/abs/gitdir  \n"),
        GitEntry::File { gitdir: PathBuf::from("/abs/gitdir") }
    );
    assert_eq!(parse_git_file(root, "not a git file"), GitEntry::Absent);
    assert_eq!(parse_git_file(root, "gitdir:   \n"), GitEntry::Absent);
}

#[test]
fn relative_roots_are_refused() {
    let fake = Fake::new();
    assert!(matches!(canonical_existing(&fake, Path::new("w")), Err(SandboxError::InvalidPath { .. })));
}

#[test]
fn existing_paths_must_exist() {
    let fake = Fake::new();
    assert_eq!(canonical_existing(&fake, Path::new("/tmp")).unwrap(), PathBuf::from("/private/tmp"));
    let err = canonical_existing(&fake, Path::new("/nowhere")).unwrap_err();
    match err {
        SandboxError::InvalidPath { path, reason } => {
            assert_eq!(path, PathBuf::from("/nowhere"));
            assert!(!reason.is_empty());
        }
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn real_git_entries_are_read_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    assert_eq!(RealFs.git_entry(root), GitEntry::Absent);

    std::fs::write(root.join(".git"), "gitdir: ../elsewhere/.git/worktrees/x\n").unwrap();
    assert_eq!(RealFs.git_entry(root), GitEntry::File { gitdir: root.join("../elsewhere/.git/worktrees/x") });

    std::fs::remove_file(root.join(".git")).unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    assert_eq!(RealFs.git_entry(root), GitEntry::Directory);
}

#[test]
fn hostile_git_files_are_neither_read_whole_nor_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let dot_git = root.join(".git");
    // 1 GiB (sparse) beginning with a gitdir line: not read at all.
    let big = std::fs::File::create(&dot_git).unwrap();
    std::io::Write::write_all(&mut &big, b"gitdir: /x\n").unwrap();
    big.set_len(1 << 30).unwrap();
    assert_eq!(RealFs.git_entry(root), GitEntry::Absent);
    // A FIFO: never opened (opening it for reading would wait for a writer).
    std::fs::remove_file(&dot_git).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&dot_git).status().unwrap().success());
    assert_eq!(RealFs.git_entry(root), GitEntry::Absent);
}

#[test]
fn a_symlinked_or_odd_git_entry_names_no_gitdir_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let root = RealFs.canonicalize(dir.path()).unwrap();
    std::fs::create_dir(root.join("ws")).unwrap();
    std::os::unix::fs::symlink(root.join("ws"), root.join(".git")).unwrap();
    assert_eq!(RealFs.inspect_git(&root), (GitEntry::Absent, Some(GitFileProblem::Symlink)));
    assert_eq!(RealFs.symlink_target(&root.join(".git")), Some(root.join("ws")));
    assert_eq!(RealFs.symlink_target(&root.join("ws")), None);

    std::fs::remove_file(root.join(".git")).unwrap();
    std::fs::write(root.join(".git"), "gitdir: ws\n").unwrap();
    assert_eq!(RealFs.inspect_git(&root), (GitEntry::File { gitdir: root.join("ws") }, None));
    assert!(RealFs.is_regular_file(&root.join(".git")));
    assert!(!RealFs.is_regular_file(&root.join("ws")));

    std::fs::write(root.join(".git"), "not a gitdir\n").unwrap();
    assert_eq!(RealFs.inspect_git(&root), (GitEntry::Absent, Some(GitFileProblem::NoGitdirLine)));

    std::fs::remove_file(root.join(".git")).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(root.join(".git")).status().unwrap().success());
    assert_eq!(RealFs.inspect_git(&root), (GitEntry::Absent, Some(GitFileProblem::NotARegularFile)));
}

/// The canonical `/tmp/ws` layout of a Mac as pairs (spelling, canonical) for [`protected_gitdir`].
fn tmp_roots() -> Vec<(PathBuf, PathBuf)> {
    vec![
        (PathBuf::from("/tmp/ws"), PathBuf::from("/private/tmp/ws")),
        (PathBuf::from("/tmp"), PathBuf::from("/private/tmp")),
    ]
}

#[test]
fn a_gitdir_is_protected_only_inside_its_own_root_without_links_and_with_head() {
    let dir = tempfile::tempdir().unwrap();
    let base = RealFs.canonicalize(dir.path()).unwrap();
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("gitdirs/wt")).unwrap();
    std::fs::create_dir_all(ws.join("nohead")).unwrap();
    std::fs::write(ws.join("gitdirs/wt/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::os::unix::fs::symlink("gitdirs", ws.join("link")).unwrap();
    let roots = vec![(ws.clone(), ws.clone()), (base.clone(), base.clone())];

    assert_eq!(protected_gitdir(&RealFs, &ws.join("gitdirs/./wt"), &ws, &roots), Ok(ws.join("gitdirs/wt")));
    assert_eq!(
        protected_gitdir(&RealFs, &ws.join("x/../gitdirs/wt"), &ws, &roots),
        Ok(ws.join("gitdirs/wt"))
    );
    assert_eq!(
        protected_gitdir(&RealFs, &ws.join("link/wt"), &ws, &roots),
        Err(UnprotectedGitdir::ThroughSymlink)
    );
    assert_eq!(
        protected_gitdir(&RealFs, &ws.join("nohead"), &ws, &roots),
        Err(UnprotectedGitdir::NotAGitDir)
    );
    assert!(matches!(
        protected_gitdir(&RealFs, &ws.join("missing"), &ws, &roots),
        Err(UnprotectedGitdir::Missing(_))
    ));
    assert_eq!(
        protected_gitdir(&RealFs, &ws.join(".."), &ws, &roots),
        Err(UnprotectedGitdir::IsWritableRoot(base.clone()))
    );
    assert_eq!(
        protected_gitdir(&RealFs, Path::new("/"), &ws, &roots),
        Err(UnprotectedGitdir::ContainsWritableRoot(ws.clone()))
    );
    // The outer root's .git naming a directory of the nested workspace.
    assert_eq!(
        protected_gitdir(&RealFs, &ws.join("gitdirs/wt"), &base, &roots),
        Err(UnprotectedGitdir::OutsideOwnRoot { owner: base.clone(), root: ws.clone() })
    );
}

#[test]
fn a_gitdir_spelled_through_a_system_link_is_mapped_to_its_canonical_root_and_others_are_never_looked_up() {
    /// Answers nothing: every lookup would fail the test.
    #[derive(Debug)]
    struct NoLookups;
    impl PathResolver for NoLookups {
        fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
            panic!("looked up {}", path.display())
        }
        fn inspect_git(&self, root: &Path) -> (GitEntry, Option<GitFileProblem>) {
            panic!("inspected {}", root.display())
        }
        fn symlink_target(&self, path: &Path) -> Option<PathBuf> {
            panic!("lstat {}", path.display())
        }
        fn is_regular_file(&self, path: &Path) -> bool {
            panic!("lstat {}", path.display())
        }
    }
    let owner = Path::new("/private/tmp/ws");
    for (gitdir, why) in [
        ("/tmp/ws", UnprotectedGitdir::IsWritableRoot(PathBuf::from("/private/tmp/ws"))),
        ("/tmp", UnprotectedGitdir::IsWritableRoot(PathBuf::from("/private/tmp"))),
        ("/private/tmp/ws/..", UnprotectedGitdir::IsWritableRoot(PathBuf::from("/private/tmp"))),
        ("/private", UnprotectedGitdir::ContainsWritableRoot(PathBuf::from("/private/tmp/ws"))),
        ("/dev/klog", UnprotectedGitdir::ReadOnlyAnyway),
        ("/net/host/share", UnprotectedGitdir::ReadOnlyAnyway),
        (
            "/tmp/other/.git",
            UnprotectedGitdir::OutsideOwnRoot {
                owner: owner.to_path_buf(),
                root: PathBuf::from("/private/tmp"),
            },
        ),
    ] {
        assert_eq!(
            protected_gitdir(&NoLookups, Path::new(gitdir), owner, &tmp_roots()),
            Err(why),
            "{gitdir}"
        );
    }
}
