//! What stays read-only inside a writable git directory (the I/O side of `uexec_domain::gitdir`'s
//! [`protected_git_entries`]): the git directories below one (linked worktrees' and submodules' git dirs), the
//! entries to bind read-only in each, and the inert placeholders created where one is absent, so that the kernel
//! refuses its creation (a mount needs something to cover). The walk of the git directories below one is the
//! domain's, `uexec_domain::gitdir::git_dirs_below`, shared with the macOS adapter; this module is its I/O.
//!
//! Everything else in a git directory stays writable, so that `git add`, `commit`, `checkout -b`, `stash`,
//! `rebase` and the like work in a sandboxed command. Nothing here follows a symbolic link: a git directory or a
//! directory on the way that is a link is not looked into (the link itself is protected when it is a protected
//! entry). When the search goes beyond its budget, or a placeholder cannot be made, the whole git directory stays
//! read-only (fails closed), and the report says why.

use std::ffi::CString;
use std::fs;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use uexec_domain::gitdir::{
    ABSENT_LINK_TARGET, GitDirKind, GitDirLook, GitFileProblem, MAX_GIT_DIR_ENTRIES, MAX_GIT_FILE_BYTES,
    MAX_PINNED_LOOSE_OBJECTS, MAX_PINNED_PACK_FILES, UnprotectedGitdir, WhenAbsent, closed_dirs,
    git_dir_kind, git_dirs_below, is_fan_out_name, is_loose_object_name, parse_commondir,
    protected_git_entries,
};

use crate::sys::Placeholder;

/// What to do about one writable git directory.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct GitDirProtection {
    /// Entries to bind read-only (existing, placeholders included).
    pub(crate) protected: Vec<PathBuf>,
    /// Directories that take no new entry (`uexec_domain::gitdir::closed_dirs`), placeholders included.
    pub(crate) closed: Vec<PathBuf>,
    /// What was not looked into, or why a git directory stays read-only as a whole (for the report).
    pub(crate) notes: Vec<String>,
    /// The linked worktrees' administrative directories the walk found in the git directory's `worktrees/`
    /// (none when it stays read-only as a whole).
    pub(crate) worktrees: Vec<PathBuf>,
    /// The repositories whose loose objects were looked at (pinned, and kept aside by `crate::keep`).
    pub(crate) repositories: Vec<PathBuf>,
}

/// Whether a common dir named by a linked worktree's `commondir` may be protected (the caller's rules: P3 of
/// `docs/sandbox.md`, the same as for a gitdir a `.git` file names).
pub(crate) type CommonDirCheck<'a> = &'a dyn Fn(&Path) -> Result<PathBuf, UnprotectedGitdir>;

/// The protection of the git directory `gitdir` (a real directory reached without a symlink, inside a writable
/// root): its protected entries and those of the git directories below it, and of the common dir a linked
/// worktree's `commondir` names when `allow_common` allows it.
pub(crate) fn protect(
    gitdir: &Path,
    kind: GitDirKind,
    allow_common: CommonDirCheck<'_>,
    placeholders: &mut Placeholders,
) -> GitDirProtection {
    let mut out = GitDirProtection::default();
    let dirs = match git_dirs_below(gitdir, kind, &HostLook, allow_common, &mut out.notes) {
        Ok(dirs) => dirs,
        Err(why) => return whole(gitdir, why),
    };
    if kind == GitDirKind::Repository && !is_real_dir(&gitdir.join("objects")) {
        // Not a repository git can use (nor one whose placeholders could all be made): frozen whole.
        return whole(gitdir, format!("{}: no objects directory", gitdir.display()));
    }
    let worktrees = gitdir.join("worktrees");
    out.worktrees =
        dirs.iter().map(|(dir, _)| dir).filter(|dir| dir.parent() == Some(&worktrees)).cloned().collect();
    for (dir, kind) in &dirs {
        if *kind == GitDirKind::Repository && dir != gitdir && !is_real_dir(&dir.join("objects")) {
            // A `worktrees/<id>` without commondir, a module without objects: git would use its config and
            // hooks if a command made it a repository, so it stays read-only as a whole.
            out.protected.push(dir.clone());
            out.notes.push(format!("{}: read-only as a whole (no objects directory)", dir.display()));
            continue;
        }
        if *kind == GitDirKind::Repository {
            pin_packs(dir, &mut out);
            pin_loose_objects(dir, &mut out);
            out.repositories.push(dir.clone());
        }
        let protected = protect_entries(dir, *kind, &mut out, placeholders).and_then(|()| match kind {
            GitDirKind::Repository => close_dirs(dir, &dirs, &mut out, placeholders),
            GitDirKind::LinkedWorktree => Ok(()),
        });
        if let Err(why) = protected {
            if dir == gitdir {
                return whole(gitdir, why);
            }
            out.protected.retain(|p| !p.starts_with(dir));
            out.closed.retain(|p| !p.starts_with(dir));
            out.repositories.retain(|p| !p.starts_with(dir));
            out.protected.push(dir.clone());
            out.notes.push(format!("{}: read-only as a whole ({why})", dir.display()));
        }
    }
    out
}

/// Protect the entries of one git directory `dir` of `kind`, creating the placeholders of absent ones.
fn protect_entries(
    dir: &Path,
    kind: GitDirKind,
    out: &mut GitDirProtection,
    placeholders: &mut Placeholders,
) -> Result<(), String> {
    for entry in protected_git_entries(kind) {
        let path = dir.join(entry.name);
        match fs::symlink_metadata(&path) {
            Ok(meta) => {
                let own_placeholder = entry.when_absent == WhenAbsent::AbsentLink
                    && fs::read_link(&path).is_ok_and(|target| target == Path::new(ABSENT_LINK_TARGET));
                if meta.file_type().is_symlink() && !own_placeholder {
                    out.notes.push(format!(
                        "{}: a symlink (only the link is protected, its target is not)",
                        path.display()
                    ));
                }
                out.protected.push(path);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => match entry.when_absent {
                WhenAbsent::WholeReadOnly => {
                    return Err(format!("{} disappeared", path.display()));
                }
                placeholder => match placeholders.create(&path, placeholder) {
                    Ok(()) => out.protected.push(path),
                    Err(e) => return Err(format!("cannot create the placeholder {}: {e}", path.display())),
                },
            },
            Err(e) => return Err(format!("cannot inspect {}: {e}", path.display())),
        }
    }
    Ok(())
}

/// Close the directories of the repository git directory `dir` that take no new entry
/// (`uexec_domain::gitdir::closed_dirs`: `modules/` and the directories of submodule names in it, `found` being
/// what the walk found): the child binds each over itself with only its own mount read-only, and the submodule
/// git dirs below it, pinned as mount points already (their protected entries lie in them), stay writable
/// mounts inside it. An absent `modules/` gets an empty placeholder first; one that is not a directory (a
/// symlink, never followed) is protected as itself.
fn close_dirs(
    dir: &Path,
    found: &[(PathBuf, GitDirKind)],
    out: &mut GitDirProtection,
    placeholders: &mut Placeholders,
) -> Result<(), String> {
    for closed in closed_dirs(dir, found) {
        match fs::symlink_metadata(&closed) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                out.protected.push(closed);
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => placeholders
                .create(&closed, WhenAbsent::EmptyDir)
                .map_err(|e| format!("cannot create the placeholder {}: {e}", closed.display()))?,
            Err(e) => return Err(format!("cannot inspect {}: {e}", closed.display())),
        }
        out.closed.push(closed);
    }
    Ok(())
}

/// Bind the pack files of `dir` (`objects/pack/*`, existing, not followed when symlinks) read-only over
/// themselves, so that the history they hold cannot be removed (`uexec_domain::gitdir::MAX_PINNED_PACK_FILES`;
/// beyond it, or when `objects/pack` cannot be listed, the whole `objects/pack` directory).
fn pin_packs(dir: &Path, out: &mut GitDirProtection) {
    let pack = dir.join("objects/pack");
    match fs::symlink_metadata(&pack) {
        Ok(meta) if meta.is_dir() => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        // A symlink (never followed) or anything else: protected as itself.
        _ => {
            out.notes
                .push(format!("{}: not a directory, protected as itself (not looked into)", pack.display()));
            out.protected.push(pack);
            return;
        }
    }
    let listing = match fs::read_dir(&pack) {
        Ok(listing) => listing,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => {
            out.notes.push(format!("{}: read-only as a whole (cannot list it: {e})", pack.display()));
            out.protected.push(pack);
            return;
        }
    };
    let mut files = Vec::new();
    for entry in listing {
        let Ok(entry) = entry else {
            out.notes.push(format!("{}: read-only as a whole (cannot list it)", pack.display()));
            out.protected.push(pack);
            return;
        };
        if entry.file_type().is_ok_and(|kind| kind.is_file() || kind.is_symlink()) {
            files.push(entry.path());
        }
        if files.len() > MAX_PINNED_PACK_FILES {
            out.notes.push(format!(
                "{}: read-only as a whole (more than {MAX_PINNED_PACK_FILES} pack files: fetches of many objects, \
                 gc and repack fail inside the sandbox; run git gc outside)",
                pack.display()
            ));
            out.protected.push(pack);
            return;
        }
    }
    files.sort();
    out.protected.extend(files);
}

/// Pin the loose objects of the repository `dir` (`objects/<xx>/<rest>`, regular files only, at most
/// [`MAX_PINNED_LOOSE_OBJECTS`] in name order): each is bound read-only over itself, so a sandboxed `git prune`
/// or `rm` fails with `EBUSY` while new objects are still written beside them. A fan-out directory that cannot
/// be listed, or a symlink, is noted and left as it is (it holds no object git wrote there).
fn pin_loose_objects(dir: &Path, out: &mut GitDirProtection) {
    let objects = dir.join("objects");
    let Ok(listing) = fs::read_dir(&objects) else {
        return;
    };
    let mut fan_outs: Vec<PathBuf> = listing
        .filter_map(Result::ok)
        .filter(|e| is_fan_out_name(e.file_name().as_bytes()) && e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    fan_outs.sort();
    let mut pinned = 0usize;
    for fan_out in fan_outs {
        let mut files: Vec<PathBuf> = match fs::read_dir(&fan_out) {
            Ok(listing) => listing
                .filter_map(Result::ok)
                .filter(|e| {
                    is_loose_object_name(e.file_name().as_bytes()) && e.file_type().is_ok_and(|t| t.is_file())
                })
                .map(|e| e.path())
                .collect(),
            Err(e) => {
                out.notes
                    .push(format!("{}: loose objects not pinned (cannot list it: {e})", fan_out.display()));
                continue;
            }
        };
        files.sort();
        let room = MAX_PINNED_LOOSE_OBJECTS - pinned;
        if files.len() > room {
            out.protected.extend(files.into_iter().take(room));
            out.notes.push(format!(
                "{}: only the first {MAX_PINNED_LOOSE_OBJECTS} loose objects are pinned (the others can be \
                 removed inside the sandbox; a git gc outside packs them, and pack files are pinned)",
                objects.display()
            ));
            return;
        }
        pinned += files.len();
        out.protected.extend(files);
    }
}

/// True when `path` is a directory (`lstat`: a symlink is not).
fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// The whole of `gitdir` read-only, and why.
fn whole(gitdir: &Path, why: String) -> GitDirProtection {
    GitDirProtection {
        protected: vec![gitdir.to_path_buf()],
        closed: Vec::new(),
        notes: vec![format!("{}: read-only as a whole ({why})", gitdir.display())],
        worktrees: Vec::new(),
        repositories: Vec::new(),
    }
}

/// The kind of the git directory `dir` ([`git_dir_kind`] of what its `commondir` holds, if it has one).
pub(crate) fn kind_of(dir: &Path) -> GitDirKind {
    let commondir = fs::symlink_metadata(dir.join("commondir")).ok().map(|_| common_dir_file(dir));
    git_dir_kind(dir, commondir.as_ref())
}

/// The common dir the `commondir` file of `dir` names, read without following a symlink, bounded and without
/// blocking ([`read_small_file`]), parsed as git does (`uexec_domain::gitdir::parse_commondir`).
fn common_dir_file(dir: &Path) -> Result<PathBuf, GitFileProblem> {
    read_small_file(&dir.join("commondir"), MAX_GIT_FILE_BYTES)
        .and_then(|content| parse_commondir(dir, &content))
}

/// [`common_dir_file`], the problem in words.
fn common_dir(dir: &Path) -> Result<PathBuf, String> {
    common_dir_file(dir).map_err(|problem| problem.to_string())
}

/// The content of the regular file at `path` (canonical), at most `limit` bytes, read without following a
/// symlink and without blocking (see [`crate::sys::open_file_no_symlinks`]); anything else is a
/// [`GitFileProblem`].
pub(crate) fn read_small_file(path: &Path, limit: u64) -> Result<Vec<u8>, GitFileProblem> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| GitFileProblem::Unreadable("the path contains a NUL byte".into()))?;
    let file = match crate::sys::open_file_no_symlinks(&c_path) {
        Ok(fd) => fs::File::from(fd),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(GitFileProblem::Symlink),
        Err(e) => return Err(GitFileProblem::Unreadable(e.to_string())),
    };
    let meta = file.metadata().map_err(|e| GitFileProblem::Unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(GitFileProblem::NotARegularFile);
    }
    if meta.len() > limit {
        return Err(GitFileProblem::TooLarge { size: meta.len() });
    }
    let mut content = Vec::new();
    // One byte more than the limit: a file that grew since `fstat` is still refused, never read whole.
    file.take(limit + 1).read_to_end(&mut content).map_err(|e| GitFileProblem::Unreadable(e.to_string()))?;
    if content.len() as u64 > limit {
        return Err(GitFileProblem::TooLarge { size: content.len() as u64 });
    }
    Ok(content)
}

/// The host's file system as [`git_dirs_below`] looks at it (`lstat` and `readdir`, no symlink followed).
struct HostLook;

impl GitDirLook for HostLook {
    fn subdirs(
        &self,
        dir: &Path,
        entries_read: &mut usize,
        notes: &mut Vec<String>,
    ) -> Result<Vec<PathBuf>, String> {
        let listing = match fs::read_dir(dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Ok(Vec::new());
            }
            Err(e) => return Err(format!("cannot list {}: {e}", dir.display())),
        };
        let mut out = Vec::new();
        for entry in listing {
            *entries_read += 1;
            if *entries_read > MAX_GIT_DIR_ENTRIES {
                return Err(format!("more than {MAX_GIT_DIR_ENTRIES} entries under worktrees/ and modules/"));
            }
            let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => out.push(entry.path()),
                Ok(kind) if kind.is_symlink() => notes.push(format!(
                    "{}: a symlink (not looked into; protected entries behind it are not)",
                    entry.path().display()
                )),
                _ => {}
            }
        }
        out.sort();
        Ok(out)
    }

    fn has_head(&self, dir: &Path) -> bool {
        fs::symlink_metadata(dir.join("HEAD")).is_ok_and(|m| m.is_file())
    }

    fn kind_of(&self, dir: &Path) -> GitDirKind {
        kind_of(dir)
    }

    fn common_dir(&self, dir: &Path) -> Result<PathBuf, String> {
        common_dir(dir)
    }
}

/// Where the placeholders of one layout go: made on the host (each one made recorded, for its removal once no
/// command needs it: `crate::keep`), or, for a layout that is only read (what a finished command's refusals
/// name), not made at all: an absent entry is then taken as protected, as it was while the command ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placeholders {
    /// Make nothing.
    pub(crate) dry: bool,
    /// What was made, in the order it was made.
    pub(crate) made: Vec<uexec_domain::leftovers::Made>,
}

impl Placeholders {
    /// Create the placeholder `path` (see [`create_placeholder`]) unless dry, recording what was made.
    pub(crate) fn create(&mut self, path: &Path, placeholder: WhenAbsent) -> io::Result<()> {
        if self.dry {
            return Ok(());
        }
        create_placeholder(path, placeholder, &mut self.made)
    }
}

/// Create the empty directory or file `path` (absent) in its parent, opened without following any symlink, with
/// the parent's owner: an inert placeholder for a mount to cover. Its parent (`objects/info`) is created the same
/// way when absent. An entry that appears meanwhile (`EEXIST`) is fine: whatever it is gets protected. What this
/// call made is appended to `made` (never what was there already).
pub(crate) fn create_placeholder(
    path: &Path,
    placeholder: WhenAbsent,
    made: &mut Vec<uexec_domain::leftovers::Made>,
) -> io::Result<()> {
    use uexec_domain::leftovers::{Made, MadeKind};
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let dir = match open_dir(parent) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound && parent.ends_with("objects/info") => {
            create_placeholder(parent, WhenAbsent::EmptyDir, made)?;
            open_dir(parent)?
        }
        Err(e) => return Err(e),
    };
    let name = CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let target = CString::new(ABSENT_LINK_TARGET).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let (placeholder, kind) = match placeholder {
        WhenAbsent::EmptyDir => (Placeholder::Dir, MadeKind::Dir),
        WhenAbsent::SelfCommonDir => (Placeholder::File(b".\n"), MadeKind::File),
        WhenAbsent::AbsentLink => (Placeholder::Link(&target), MadeKind::Link),
        WhenAbsent::EmptyFile | WhenAbsent::WholeReadOnly => (Placeholder::File(b""), MadeKind::File),
    };
    if let Some(inode) = crate::sys::create_placeholder_at(&dir, &name, placeholder)? {
        made.push(Made { kind, inode, path: path.as_os_str().as_bytes().to_vec() });
    }
    Ok(())
}

/// `parent` as a directory descriptor, opened without following a symlink.
fn open_dir(parent: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(parent.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    crate::sys::open_dir_no_symlinks(&c)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn git_dir(path: &Path) {
        fs::create_dir_all(path.join("objects/info")).unwrap();
        fs::create_dir_all(path.join("refs")).unwrap();
        fs::write(path.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(path.join("config"), "[core]\n").unwrap();
    }

    #[test]
    fn loose_objects_are_pinned_up_to_the_bound_and_temporary_files_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        let g = fs::canonicalize(tmp.path()).unwrap().join(".git");
        git_dir(&g);
        let name = |i: usize| format!("{i:038x}");
        for i in 0..MAX_PINNED_LOOSE_OBJECTS + 6 {
            let fan_out = g.join(format!("objects/{:02x}", i % 7));
            fs::create_dir_all(&fan_out).unwrap();
            fs::write(fan_out.join(name(i)), "x").unwrap();
        }
        fs::write(g.join("objects/00/tmp_obj_abcdef"), "x").unwrap();
        fs::create_dir_all(g.join("objects/pack")).unwrap();
        std::os::unix::fs::symlink("/etc", g.join("objects/0f")).unwrap();
        let p = protect(&g, GitDirKind::Repository, &|c| Ok(c.to_path_buf()), &mut Placeholders::default());
        let loose: Vec<&PathBuf> = p
            .protected
            .iter()
            .filter(|path| {
                path.parent().and_then(Path::file_name).is_some_and(|d| is_fan_out_name(d.as_bytes()))
            })
            .collect();
        assert_eq!(loose.len(), MAX_PINNED_LOOSE_OBJECTS, "{loose:?}");
        assert!(!p.protected.contains(&g.join("objects/00/tmp_obj_abcdef")));
        assert!(p.notes.iter().any(|n| n.contains("only the first")), "{:?}", p.notes);
        // Under the bound: every one, and no note.
        let small = tempfile::tempdir().unwrap();
        let g = fs::canonicalize(small.path()).unwrap().join(".git");
        git_dir(&g);
        fs::create_dir_all(g.join("objects/ab")).unwrap();
        fs::write(g.join("objects/ab").join(name(1)), "x").unwrap();
        let p = protect(&g, GitDirKind::Repository, &|c| Ok(c.to_path_buf()), &mut Placeholders::default());
        assert!(p.protected.contains(&g.join("objects/ab").join(name(1))));
        assert!(!p.notes.iter().any(|n| n.contains("only the first")), "{:?}", p.notes);
    }

    #[test]
    fn protects_configuration_creates_inert_placeholders_and_leaves_the_rest_writable() {
        let tmp = tempfile::tempdir().unwrap();
        let g = fs::canonicalize(tmp.path()).unwrap().join(".git");
        git_dir(&g);
        git_dir(&g.join("modules/lib/inner"));
        fs::create_dir_all(g.join("worktrees/wt")).unwrap();
        fs::write(g.join("worktrees/wt/commondir"), "../..\n").unwrap();
        fs::write(g.join("worktrees/wt/gitdir"), "/w/wt/.git\n").unwrap();
        std::os::unix::fs::symlink("/etc", g.join("worktrees/link")).unwrap();
        let p = protect(&g, GitDirKind::Repository, &|c| Ok(c.to_path_buf()), &mut Placeholders::default());
        for entry in [
            "config",
            "config.worktree",
            "hooks",
            "info",
            "objects/info/alternates",
            "worktrees/wt/config.worktree",
            "worktrees/wt/commondir",
            "worktrees/wt/gitdir",
            "modules/lib/inner/config",
            "modules/lib/inner/hooks",
        ] {
            assert!(p.protected.contains(&g.join(entry)), "{entry}: {p:?}");
        }
        assert!(p.protected.contains(&g.join("commondir")), "{p:?}");
        assert!(!p.protected.iter().any(|e| e == &g || e.ends_with("index") || e.ends_with("refs")));
        // The placeholders are empty, so git reads them as nothing.
        assert!(fs::read_dir(g.join("hooks")).unwrap().next().is_none());
        assert_eq!(fs::read(g.join("config.worktree")).unwrap(), b"");
        assert_eq!(fs::read(g.join("objects/info/alternates")).unwrap(), b"");
        // A repository's commondir names the git dir itself: git reads that as no redirection.
        assert_eq!(fs::read(g.join("commondir")).unwrap(), b".\n");
        assert!(p.notes.iter().any(|n| n.contains("worktrees/link")), "{:?}", p.notes);
        // Protecting again finds the same entries and creates nothing new.
        assert_eq!(
            protect(&g, GitDirKind::Repository, &|c| Ok(c.to_path_buf()), &mut Placeholders::default())
                .protected,
            p.protected
        );
    }

    #[test]
    fn linked_worktrees_are_told_by_their_commondir_and_their_common_dir_is_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let g = base.join(".git");
        git_dir(&g);
        // A worktree admin dir without a gitdir back-pointer gets an empty one (git reads it as none).
        let wt = g.join("worktrees/wt");
        fs::create_dir_all(&wt).unwrap();
        fs::write(wt.join("HEAD"), "ref: refs/heads/wt\n").unwrap();
        fs::write(wt.join("commondir"), "../..\n").unwrap();
        // One without commondir is a repository of its own to git: its config and hooks would be live.
        let lost = g.join("worktrees/lost");
        fs::create_dir_all(&lost).unwrap();
        fs::write(lost.join("HEAD"), "ref: refs/heads/lost\n").unwrap();
        // One whose commondir names another repository of the same root: that one's config is protected too.
        let other = base.join("other.git");
        git_dir(&other);
        let redirected = g.join("worktrees/redirected");
        fs::create_dir_all(&redirected).unwrap();
        fs::write(redirected.join("commondir"), "../../../other.git\n").unwrap();
        // And one naming a directory the caller refuses: noted, nothing protected there.
        let refused = g.join("worktrees/refused");
        fs::create_dir_all(&refused).unwrap();
        fs::write(refused.join("commondir"), "/elsewhere\n").unwrap();
        let allow = |common: &Path| {
            if common.starts_with(&base) {
                Ok(common.to_path_buf())
            } else {
                Err(UnprotectedGitdir::ReadOnlyAnyway)
            }
        };
        let p = protect(&g, GitDirKind::Repository, &allow, &mut Placeholders::default());
        for entry in ["worktrees/wt/gitdir", "worktrees/wt/commondir", "worktrees/wt/config.worktree"] {
            assert!(p.protected.contains(&g.join(entry)), "{entry}: {p:?}");
        }
        assert_eq!(fs::read(wt.join("gitdir")).unwrap(), b"");
        assert!(p.protected.contains(&lost), "{p:?}");
        assert!(!p.protected.iter().any(|e| e.starts_with(&lost) && e != &lost), "{p:?}");
        for entry in ["config", "hooks", "info", "commondir"] {
            assert!(p.protected.contains(&other.join(entry)), "{entry}: {p:?}");
        }
        assert!(p.notes.iter().any(|n| n.contains("refused/commondir names /elsewhere")), "{:?}", p.notes);
        // The main git dir itself stays writable entry by entry.
        assert!(!p.protected.contains(&g) && p.protected.contains(&g.join("config")), "{p:?}");
        // A commondir that is a symlink is not followed: the directory counts as a repository of its own, here
        // one git cannot use, so it stays read-only as a whole.
        fs::remove_file(redirected.join("commondir")).unwrap();
        std::os::unix::fs::symlink(base.join("x"), redirected.join("commondir")).unwrap();
        let p = protect(&g, GitDirKind::Repository, &allow, &mut Placeholders::default());
        assert!(p.protected.contains(&redirected), "{p:?}");
        assert!(p.notes.iter().any(|n| n.contains("redirected: read-only as a whole")), "{:?}", p.notes);
    }

    #[test]
    fn pack_files_are_pinned_one_by_one_up_to_the_budget() {
        let tmp = tempfile::tempdir().unwrap();
        let g = fs::canonicalize(tmp.path()).unwrap().join(".git");
        git_dir(&g);
        let pack = g.join("objects/pack");
        fs::create_dir_all(&pack).unwrap();
        for ext in ["pack", "idx", "rev"] {
            fs::write(pack.join(format!("pack-1.{ext}")), "x").unwrap();
        }
        fs::create_dir(pack.join("subdir")).unwrap();
        let p = protect(&g, GitDirKind::Repository, &|c| Ok(c.to_path_buf()), &mut Placeholders::default());
        for ext in ["pack", "idx", "rev"] {
            assert!(p.protected.contains(&pack.join(format!("pack-1.{ext}"))), "{p:?}");
        }
        assert!(!p.protected.contains(&pack) && !p.protected.contains(&pack.join("subdir")), "{p:?}");
        // A symlinked objects/pack is not followed: the link itself is protected.
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        fs::write(elsewhere.join("x.pack"), "x").unwrap();
        fs::rename(&pack, g.join("objects/pack-real")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &pack).unwrap();
        let p = protect(&g, GitDirKind::Repository, &|c| Ok(c.to_path_buf()), &mut Placeholders::default());
        assert!(p.protected.contains(&pack) && !p.protected.iter().any(|e| e.ends_with("x.pack")), "{p:?}");
        fs::remove_file(&pack).unwrap();
        fs::rename(g.join("objects/pack-real"), &pack).unwrap();
        for i in 0..MAX_PINNED_PACK_FILES {
            fs::write(pack.join(format!("pack-x{i}.pack")), "x").unwrap();
        }
        let p = protect(&g, GitDirKind::Repository, &|c| Ok(c.to_path_buf()), &mut Placeholders::default());
        assert!(p.protected.contains(&pack) && !p.protected.contains(&pack.join("pack-1.pack")), "{p:?}");
        assert!(p.notes.iter().any(|n| n.contains("more than 64 pack files")), "{:?}", p.notes);
    }

    #[test]
    fn beyond_the_budget_the_whole_git_directory_stays_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let g = fs::canonicalize(tmp.path()).unwrap().join(".git");
        git_dir(&g);
        let deep: PathBuf =
            (0..uexec_domain::gitdir::MAX_MODULE_NAME_DEPTH + 1).map(|i| format!("d{i}")).collect();
        fs::create_dir_all(g.join("modules").join(deep)).unwrap();
        let p = protect(&g, GitDirKind::Repository, &|c| Ok(c.to_path_buf()), &mut Placeholders::default());
        assert_eq!(p.protected, vec![g.clone()]);
        assert!(p.notes[0].contains("read-only as a whole"), "{:?}", p.notes);
    }
}
