//! A writable root's `.git` and what it names, read through the host view: what the `.git` entry is, whether the
//! gitdir a `.git` file names may be protected (and under which spelling), and whether the repository of a
//! linked worktree outside every writable root is made writable for it. The rules are
//! `uexec_domain::gitdir`'s; this is their one reading of the host.

use std::path::{Path, PathBuf};

use uexec_domain::GitEntry;
use uexec_domain::gitdir::{
    GitFileProblem, MAX_GIT_FILE_BYTES, NoWorktreeGrant, UnprotectedGitdir, gitdir_protection,
    normalize_lexically, parse_git_file, worktree_common_dir, worktree_grant,
};

use crate::host::{HostView, Kind, Unreached};

/// What `root/.git` is (`root` canonical), and why a `.git` that is not a directory names no gitdir: a
/// directory, a regular file naming a gitdir (read bounded, without following a link, without blocking; a
/// relative target resolved against `root`), or absent. A symbolic link, a FIFO, a socket or a device, a large
/// or malformed file counts as [`GitEntry::Absent`] with its [`GitFileProblem`] (the `.git` itself stays
/// read-only whatever it is).
pub fn inspect_git(host: &dyn HostView, root: &Path) -> (GitEntry, Option<GitFileProblem>) {
    let dot_git = root.join(".git");
    let Ok(meta) = host.lstat(&dot_git) else {
        return (GitEntry::Absent, None);
    };
    match meta.kind {
        Kind::Dir => (GitEntry::Directory, None),
        // A symlinked `.git` protects only the link: its target is never followed.
        Kind::Symlink => (GitEntry::Absent, Some(GitFileProblem::Symlink)),
        // A FIFO, socket or device is never opened.
        Kind::Other => (GitEntry::Absent, Some(GitFileProblem::NotARegularFile)),
        Kind::File => match host
            .read_small_file(&dot_git, MAX_GIT_FILE_BYTES)
            .and_then(|content| parse_git_file(root, &content))
        {
            Ok(gitdir) => (GitEntry::File { gitdir }, None),
            Err(problem) => (GitEntry::Absent, Some(problem)),
        },
    }
}

/// What `root/.git` is, `root` as given (canonicalised first; absent when it does not resolve): for
/// `uexec sandbox-report`, which shows the same roots.
pub fn git_entry(host: &dyn HostView, root: &Path) -> GitEntry {
    match host.canonicalize(root) {
        Ok(root) => inspect_git(host, &root).0,
        Err(_) => GitEntry::Absent,
    }
}

/// The report's words for the protected entry `entry` when it is a symbolic link (only the link is protected,
/// its target never followed), else `None`.
pub fn symlink_note(host: &dyn HostView, entry: &Path) -> Option<String> {
    host.symlink_target(entry).map(|target| {
        format!(
            "{}: a symlink to {} (only the link is protected, its target is not)",
            entry.display(),
            target.display()
        )
    })
}

/// The path to protect for `gitdir`, named by something in the writable root `owner` (canonical: its `.git`
/// file, a linked worktree's `commondir`), or why it is not protected. `roots` pairs every writable root as the
/// policy spells it with its canonical form.
///
/// The rules of `docs/sandbox.md` (P3), on the text first: `.` and `..` are resolved by the text, and the path
/// must begin with the spelling of a writable root (else it is read-only anyway and is never looked up: a
/// planted `gitdir:` makes the server touch nothing outside the writable roots); that root's spelling is
/// replaced by its canonical form, and [`gitdir_protection`] decides on the result (no writable root, no
/// ancestor of one, inside `owner` and in no root nested in it). Only then is it looked up: it must be reached
/// without a symbolic link ([`HostView::reach`]: none a command could have planted) and hold a regular `HEAD`
/// file. The path returned is therefore never a link's target.
pub fn protected_gitdir(
    host: &dyn HostView,
    gitdir: &Path,
    owner: &Path,
    roots: &[(PathBuf, PathBuf)],
) -> Result<PathBuf, UnprotectedGitdir> {
    let lexical = normalize_lexically(gitdir);
    let canonical_roots: Vec<PathBuf> = roots.iter().map(|(_, canonical)| canonical.clone()).collect();
    let spellings: Vec<(PathBuf, &PathBuf)> = roots
        .iter()
        .flat_map(|(given, canonical)| {
            [(normalize_lexically(given), canonical), (canonical.clone(), canonical)]
        })
        .collect();
    // A root or an ancestor of one, under any spelling (`gitdir: /tmp`, `gitdir: /private`): never protected.
    if let Some((_, canonical)) = spellings.iter().find(|(spelling, _)| spelling == &lexical) {
        return Err(UnprotectedGitdir::IsWritableRoot((*canonical).clone()));
    }
    if let Some((_, canonical)) =
        spellings.iter().find(|(spelling, _)| spelling != &lexical && spelling.starts_with(&lexical))
    {
        return Err(UnprotectedGitdir::ContainsWritableRoot((*canonical).clone()));
    }
    let spelled = spellings
        .into_iter()
        .filter(|(spelling, _)| lexical.starts_with(spelling))
        .max_by_key(|(spelling, _)| spelling.components().count());
    let Some((spelling, canonical_root)) = spelled else {
        return Err(UnprotectedGitdir::ReadOnlyAnyway);
    };
    let rest = lexical.strip_prefix(&spelling).map_err(|e| UnprotectedGitdir::Missing(e.to_string()))?;
    let candidate: PathBuf = canonical_root.join(rest).components().collect();
    gitdir_protection(&candidate, owner, &canonical_roots)?;
    match host.reach(&candidate) {
        Ok(_) => {}
        Err(Unreached::ThroughSymlink) => return Err(UnprotectedGitdir::ThroughSymlink),
        Err(Unreached::Missing(why)) => return Err(UnprotectedGitdir::Missing(why)),
    }
    if !host.is_file(&candidate.join("HEAD")) {
        return Err(UnprotectedGitdir::NotAGitDir);
    }
    Ok(candidate)
}

/// The repository made writable for the linked worktree `owner` (a canonical writable root) whose `.git` file
/// names `gitdir`, outside every writable root, given every writable root `roots` (canonical): the reading of
/// [`worktree_grant`]. The worktree's git directory and the repository must be real directories reached without
/// a symbolic link holding a `HEAD` file (and the repository an `objects/` directory); both files the rule reads
/// are read as a `.git` file is.
pub fn granted_repository(
    host: &dyn HostView,
    gitdir: &Path,
    owner: &Path,
    roots: &[PathBuf],
) -> Result<PathBuf, NoWorktreeGrant> {
    let gitdir = normalize_lexically(gitdir);
    worktree_common_dir(&gitdir).ok_or(NoWorktreeGrant::NotAWorktreeDir)?;
    real_git_dir(host, &gitdir, false)?;
    let read = |name: &'static str| {
        host.read_small_file(&gitdir.join(name), MAX_GIT_FILE_BYTES)
            .map_err(|why| NoWorktreeGrant::Unreadable(name, why))
    };
    let common = worktree_grant(owner, &gitdir, &read("commondir")?, &read("gitdir")?, roots)?;
    real_git_dir(host, &common, true)?;
    Ok(common)
}

/// Check that `dir` is a git directory git would use, reached without a symbolic link: a directory holding a
/// `HEAD` file (and an `objects/` directory when `repository`).
fn real_git_dir(host: &dyn HostView, dir: &Path, repository: bool) -> Result<(), NoWorktreeGrant> {
    match host.reach(dir) {
        Ok(Kind::Dir) => {}
        Ok(_) | Err(Unreached::ThroughSymlink) => {
            return Err(NoWorktreeGrant::NotARepository(format!(
                "{}: not a directory reached without a symlink",
                dir.display()
            )));
        }
        Err(Unreached::Missing(why)) => {
            return Err(NoWorktreeGrant::NotARepository(format!("{}: {why}", dir.display())));
        }
    }
    if !host.is_file(&dir.join("HEAD")) {
        return Err(NoWorktreeGrant::NotARepository(format!("{}: no HEAD file", dir.display())));
    }
    if repository && !host.is_dir(&dir.join("objects")) {
        return Err(NoWorktreeGrant::NotARepository(format!("{}: no objects directory", dir.display())));
    }
    Ok(())
}

/// For `uexec sandbox-report`: when the writable root `root`'s `.git` file names a linked worktree's
/// `<repository>/worktrees/<id>` outside every writable root, whether the sandbox makes that repository a
/// writable root (`Ok`: the repository) or not (`Err`: why), with `roots` every writable root as given; `None`
/// when `root` is no such worktree. The same decision each command's plan takes ([`crate::GitPlanner`]).
pub fn linked_worktree_repository(
    host: &dyn HostView,
    root: &Path,
    roots: &[PathBuf],
) -> Option<Result<PathBuf, String>> {
    let canonical_root = host.canonicalize(root).ok()?;
    let GitEntry::File { gitdir } = inspect_git(host, &canonical_root).0 else {
        return None;
    };
    worktree_common_dir(&gitdir)?;
    let canonical: Vec<PathBuf> = roots.iter().filter_map(|r| host.canonicalize(r).ok()).collect();
    if canonical.iter().any(|r| normalize_lexically(&gitdir).starts_with(r)) {
        return None;
    }
    Some(granted_repository(host, &gitdir, &canonical_root, &canonical).map_err(|why| why.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::FakeHost;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn a_dot_git_is_read_only_when_it_is_a_regular_file() {
        let inspect = |fake: FakeHost| inspect_git(&fake, Path::new("/w"));
        assert_eq!(inspect(FakeHost::new().dir("/w")), (GitEntry::Absent, None));
        assert_eq!(inspect(FakeHost::new().dir("/w/.git")), (GitEntry::Directory, None));
        assert_eq!(
            inspect(FakeHost::new().link("/w/.git", "/proc/kmsg")),
            (GitEntry::Absent, Some(GitFileProblem::Symlink))
        );
        assert_eq!(
            inspect(FakeHost::new().fifo("/w/.git")),
            (GitEntry::Absent, Some(GitFileProblem::NotARegularFile))
        );
        assert_eq!(
            inspect(FakeHost::new().content("/w/.git", "gitdir: g\n")),
            (GitEntry::File { gitdir: p("/w/g") }, None)
        );
        assert_eq!(
            inspect(FakeHost::new().sized("/w/.git", 1 << 20)),
            (GitEntry::Absent, Some(GitFileProblem::TooLarge { size: 1 << 20 }))
        );
        assert_eq!(
            inspect(FakeHost::new().content("/w/.git", "junk")),
            (GitEntry::Absent, Some(GitFileProblem::NoGitdirLine))
        );
    }

    #[cfg(unix)]
    #[test]
    fn real_git_entries_are_read_from_disk_and_hostile_ones_neither_read_whole_nor_waited_on() {
        let host = crate::RealHost;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(git_entry(&host, root), GitEntry::Absent);
        std::fs::write(root.join(".git"), "gitdir: ../elsewhere/.git/worktrees/x\n").unwrap();
        let canonical = std::fs::canonicalize(root).unwrap();
        assert_eq!(
            git_entry(&host, root),
            GitEntry::File { gitdir: canonical.join("../elsewhere/.git/worktrees/x") }
        );
        std::fs::remove_file(root.join(".git")).unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        assert_eq!(git_entry(&host, root), GitEntry::Directory);
        std::fs::remove_dir(root.join(".git")).unwrap();
        // 1 GiB (sparse) beginning with a gitdir line: not read at all.
        let big = std::fs::File::create(root.join(".git")).unwrap();
        std::io::Write::write_all(&mut &big, b"gitdir: /x\n").unwrap();
        big.set_len(1 << 30).unwrap();
        assert_eq!(git_entry(&host, root), GitEntry::Absent);
        // A FIFO: never opened (opening it for reading would wait for a writer).
        std::fs::remove_file(root.join(".git")).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(root.join(".git")).status().unwrap().success());
        assert_eq!(inspect_git(&host, &canonical), (GitEntry::Absent, Some(GitFileProblem::NotARegularFile)));
    }

    #[cfg(unix)]
    #[test]
    fn git_files_that_are_not_small_regular_files_are_not_read() {
        use std::fs;
        let host = crate::RealHost;
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let dot_git = base.join(".git");
        fs::write(&dot_git, "gitdir: x\n").unwrap();
        assert_eq!(inspect_git(&host, &base), (GitEntry::File { gitdir: base.join("x") }, None));
        let big = fs::File::create(&dot_git).unwrap();
        big.set_len(1 << 30).unwrap();
        assert_eq!(
            inspect_git(&host, &base),
            (GitEntry::Absent, Some(GitFileProblem::TooLarge { size: 1 << 30 }))
        );
        fs::remove_file(&dot_git).unwrap();
        std::os::unix::fs::symlink("/proc/kmsg", &dot_git).unwrap();
        assert_eq!(inspect_git(&host, &base), (GitEntry::Absent, Some(GitFileProblem::Symlink)));
        fs::remove_file(&dot_git).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&dot_git).status().unwrap().success());
        assert_eq!(inspect_git(&host, &base), (GitEntry::Absent, Some(GitFileProblem::NotARegularFile)));
        // The reader itself refuses a symlink anywhere on the path, and FIFOs without blocking.
        assert_eq!(host.read_small_file(&dot_git, 10), Err(GitFileProblem::NotARegularFile));
        std::os::unix::fs::symlink(&base, base.join("link")).unwrap();
        fs::write(base.join("small"), "12345").unwrap();
        assert_eq!(host.read_small_file(&base.join("small"), 10), Ok(b"12345".to_vec()));
        assert_eq!(host.read_small_file(&base.join("small"), 4), Err(GitFileProblem::TooLarge { size: 5 }));
        if cfg!(target_os = "linux") {
            assert_eq!(host.read_small_file(&base.join("link/small"), 10), Err(GitFileProblem::Symlink));
        }
    }

    #[test]
    fn a_gitdir_is_spelled_under_its_root_s_canonical_path_and_never_through_a_link() {
        let fake = FakeHost::new()
            .link("/tmp", "/private/tmp")
            .file("/private/tmp/ws/.gitdirs/wt/HEAD")
            .file("/private/tmp/x/HEAD")
            .link("/private/tmp/ws/link", "/private/tmp")
            .dir("/private/tmp/ws/src");
        let roots = [(p("/tmp/ws"), p("/private/tmp/ws")), (p("/tmp"), p("/private/tmp"))];
        let owner = p("/private/tmp/ws");
        let verdict = |gitdir: &str| protected_gitdir(&fake, Path::new(gitdir), &owner, &roots);
        assert_eq!(verdict("/tmp/ws/.gitdirs/wt"), Ok(p("/private/tmp/ws/.gitdirs/wt")));
        assert_eq!(verdict("/private/tmp/ws/.gitdirs/wt/."), Ok(p("/private/tmp/ws/.gitdirs/wt")));
        assert_eq!(verdict("/private/tmp/ws/link/x"), Err(UnprotectedGitdir::ThroughSymlink));
        assert_eq!(verdict("/private/tmp/ws/src"), Err(UnprotectedGitdir::NotAGitDir));
        assert_eq!(verdict("/tmp"), Err(UnprotectedGitdir::IsWritableRoot(p("/private/tmp"))));
        assert_eq!(verdict("/private"), Err(UnprotectedGitdir::ContainsWritableRoot(p("/private/tmp/ws"))));
        assert_eq!(verdict("/etc"), Err(UnprotectedGitdir::ReadOnlyAnyway));
        assert!(matches!(verdict("/tmp/ws/none"), Err(UnprotectedGitdir::Missing(_))));
    }
}
