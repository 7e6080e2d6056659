//! Unit tests of the filesystem seam: `.git` files, lenient canonicalisation and read-only spellings.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use uexec_domain::policy::GitEntry;
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

    fn git_entry(&self, _root: &Path) -> GitEntry {
        GitEntry::Absent
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
fn missing_tails_are_appended_to_the_canonical_ancestor() {
    let fake = Fake::new();
    assert_eq!(
        canonical_lenient(&fake, Path::new("/tmp/w/.uexec/config")).unwrap(),
        PathBuf::from("/private/tmp/w/.uexec/config")
    );
    assert_eq!(canonical_lenient(&fake, Path::new("/tmp/w")).unwrap(), PathBuf::from("/private/tmp/w"));
}

#[test]
fn a_missing_tail_with_dot_dot_is_refused() {
    let fake = Fake::new();
    let err = canonical_lenient(&fake, Path::new("/tmp/w/missing/../x")).unwrap_err();
    assert!(
        matches!(err, SandboxError::InvalidPath { ref path, .. } if path == Path::new("/tmp/w/missing/../x"))
    );
}

#[test]
fn relative_paths_are_refused() {
    let fake = Fake::new();
    assert!(matches!(canonical_lenient(&fake, Path::new("w/.git")), Err(SandboxError::InvalidPath { .. })));
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
fn a_symlinked_subpath_is_protected_under_both_spellings() {
    let dir = tempfile::tempdir().unwrap();
    let base = RealFs.canonicalize(dir.path()).unwrap();
    std::fs::create_dir(base.join("store")).unwrap();
    std::fs::create_dir(base.join("repo")).unwrap();
    std::os::unix::fs::symlink(base.join("store"), base.join("repo/.git")).unwrap();

    let spellings = read_only_spellings(&RealFs, &base.join("repo/.git")).unwrap();
    assert_eq!(spellings, vec![base.join("repo/.git"), base.join("store")]);

    // A plain missing subpath has one spelling.
    let spellings = read_only_spellings(&RealFs, &base.join("repo/.uexec")).unwrap();
    assert_eq!(spellings, vec![base.join("repo/.uexec")]);
}
