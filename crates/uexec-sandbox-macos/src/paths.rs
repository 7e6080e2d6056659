//! The filesystem facts the profile needs (canonical spellings, `.git` entries), behind one seam.
//!
//! Seatbelt matches the paths the kernel resolved: `/private/tmp/x`, never `/tmp/x`; a write through a symlink
//! is checked at its target, while removing or replacing the link is checked at the link. A rule written with the
//! spelling the user configured silently matches nothing, so every path is canonicalised before it becomes a
//! parameter; a protected entry (`.git`, `.uexec`) is spelled with its directory resolved and its own name kept,
//! so a planted symlink protects only itself. [`PathResolver`] is the only place this crate touches the
//! filesystem; tests swap in a fake that maps `/tmp` to `/private/tmp` as macOS does.

use std::io;
use std::path::{Path, PathBuf};

use uexec_domain::GitEntry;
use uexec_domain::gitdir::{
    DotGitKind, GitFileProblem, MAX_GIT_FILE_BYTES, UnprotectedGitdir, dot_git_entry,
};
use uexec_ports::SandboxError;

/// Answers the questions the profile generator asks the filesystem. Everything it is asked about inside a
/// writable root may have been planted by an earlier sandboxed command, so no answer follows a symlink that is
/// not asked for (see `docs/sandbox.md`, "Planted protected entries").
pub trait PathResolver: Send + Sync + std::fmt::Debug {
    /// The canonical form of `path`: absolute, every symlink resolved, no `.` or `..`. Fails when the path (or
    /// a directory on the way) does not exist, as [`std::fs::canonicalize`] does.
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;

    /// What `root/.git` is (`root` canonical), and why a `.git` that is not a directory names no gitdir. A
    /// `.git` file's `gitdir:` target is returned absolute (relative targets are resolved against `root`); a
    /// symlink, a FIFO, a device, a large or malformed file counts as [`GitEntry::Absent`] with its
    /// [`GitFileProblem`] (`root/.git` itself stays read-only whatever it is).
    fn inspect_git(&self, root: &Path) -> (GitEntry, Option<GitFileProblem>);

    /// What `root/.git` is, without the reason ([`PathResolver::inspect_git`]).
    fn git_entry(&self, root: &Path) -> GitEntry {
        self.inspect_git(root).0
    }

    /// The target of `path` when `path` itself is a symlink (`lstat`), else `None`. Never follows it.
    fn symlink_target(&self, path: &Path) -> Option<PathBuf>;

    /// True when `path` itself is a regular file (`lstat`: a symlink is not).
    fn is_regular_file(&self, path: &Path) -> bool;

    /// The regular files and symlinks directly in the real directory `dir` (`lstat`; `dir` itself must not be a
    /// symlink), sorted; `None` when it cannot be listed or is not a real directory. By default `None` (callers
    /// then fail closed).
    fn list_files(&self, dir: &Path) -> Option<Vec<PathBuf>> {
        let _ = dir;
        None
    }

    /// The real directories directly in the real directory `dir` (`lstat`: symlinks are not listed), sorted;
    /// `None` when it cannot be listed, is not a real directory or holds more than
    /// `uexec_domain::gitdir::MAX_NESTED_SCAN_ENTRIES` entries. By default none (nothing nested is looked for).
    fn list_dirs(&self, dir: &Path) -> Option<Vec<PathBuf>> {
        let _ = dir;
        Some(Vec::new())
    }

    /// When `path` itself (`lstat`) was created, if the file system says: what orders the repositories nested
    /// at the workspace's top level when there are more than can be protected entry by entry
    /// (`uexec_domain::gitdir::nested_modes`). By default unknown (those are then all read-only as a whole).
    fn birth_time(&self, path: &Path) -> Option<std::time::SystemTime> {
        let _ = path;
        None
    }

    /// True when something exists at `path` itself (`lstat`: a dangling symlink exists). By default: a symlink
    /// or a path that canonicalises.
    fn entry_exists(&self, path: &Path) -> bool {
        self.symlink_target(path).is_some() || self.canonicalize(path).is_ok()
    }

    /// True when `path` itself is a directory (`lstat`: a symlink to one is not). By default false (callers then
    /// treat it as absent or fail closed).
    fn is_dir(&self, path: &Path) -> bool {
        let _ = path;
        false
    }

    /// The content of the small file at `path` (a `commondir`, a linked worktree's `gitdir`), read the way a
    /// `.git` file is: without following a symlink, without blocking, only a regular file of at most
    /// `uexec_domain::gitdir::MAX_GIT_FILE_BYTES`. By default unreadable (callers then take the stricter
    /// reading: a git directory whose `commondir` cannot be read is a repository of its own).
    fn read_small_file(&self, path: &Path) -> Result<Vec<u8>, GitFileProblem> {
        let _ = path;
        Err(GitFileProblem::Unreadable("this resolver reads no file".into()))
    }
}

/// The real filesystem, through `std::fs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl PathResolver for RealFs {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    fn inspect_git(&self, root: &Path) -> (GitEntry, Option<GitFileProblem>) {
        let Ok(root) = std::fs::canonicalize(root) else {
            return (GitEntry::Absent, None);
        };
        let dot_git = root.join(".git");
        // A symlinked `.git` protects only the link: its target is never followed (P2); a FIFO, socket or
        // device is never opened. The rule is `uexec_domain::gitdir::dot_git_entry`, shared with Linux.
        let kind = match std::fs::symlink_metadata(&dot_git) {
            Err(_) => DotGitKind::Missing,
            Ok(meta) if meta.is_dir() => DotGitKind::Directory,
            Ok(meta) if meta.is_symlink() => DotGitKind::Symlink,
            Ok(meta) if meta.is_file() => DotGitKind::File,
            Ok(_) => DotGitKind::Other,
        };
        dot_git_entry(&root, kind, || read_small_file(&dot_git))
    }

    fn is_dir(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir())
    }

    fn birth_time(&self, path: &Path) -> Option<std::time::SystemTime> {
        std::fs::symlink_metadata(path).and_then(|meta| meta.created()).ok()
    }

    fn read_small_file(&self, path: &Path) -> Result<Vec<u8>, GitFileProblem> {
        read_small_file(path)
    }

    fn symlink_target(&self, path: &Path) -> Option<PathBuf> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_symlink() => {
                Some(std::fs::read_link(path).unwrap_or_else(|e| PathBuf::from(format!("<{e}>"))))
            }
            _ => None,
        }
    }

    fn is_regular_file(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file())
    }

    fn entry_exists(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok()
    }

    fn list_files(&self, dir: &Path) -> Option<Vec<PathBuf>> {
        if !std::fs::symlink_metadata(dir).ok()?.is_dir() {
            return None;
        }
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).ok()? {
            let entry = entry.ok()?;
            let kind = entry.file_type().ok()?;
            if kind.is_file() || kind.is_symlink() {
                out.push(entry.path());
            }
        }
        out.sort();
        Some(out)
    }

    fn list_dirs(&self, dir: &Path) -> Option<Vec<PathBuf>> {
        if !std::fs::symlink_metadata(dir).ok()?.is_dir() {
            return None;
        }
        let mut out = Vec::new();
        for (read, entry) in std::fs::read_dir(dir).ok()?.enumerate() {
            if read >= uexec_domain::gitdir::MAX_NESTED_SCAN_ENTRIES {
                return None;
            }
            let entry = entry.ok()?;
            if entry.file_type().ok()?.is_dir() {
                out.push(entry.path());
            }
        }
        out.sort();
        Some(out)
    }
}

/// The content of the `.git` file (or `commondir`, or a linked worktree's `gitdir` file) at `path`, read the way
/// every file a command may have planted is read: opened with `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY` (a link
/// swapped in is refused, a FIFO does not block), read only if `fstat` says it is a regular file of at most
/// `MAX_GIT_FILE_BYTES`. (The Linux adapter has the same reader with `openat2`; adapters do not depend on each
/// other, and the shared rules live in `uexec_domain::gitdir`.)
fn read_small_file(path: &Path) -> Result<Vec<u8>, GitFileProblem> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let limit = MAX_GIT_FILE_BYTES;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
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

/// Reads the `gitdir: <path>` line of a `.git` file (worktrees, submodules); relative paths are relative to
/// `root` (the rule of `uexec_domain::gitdir::parse_git_file`). Only the tests read `.git` text directly.
#[cfg(test)]
pub(crate) fn parse_git_file(root: &Path, text: &str) -> GitEntry {
    uexec_domain::gitdir::parse_git_file(root, text.as_bytes())
        .map_or(GitEntry::Absent, |gitdir| GitEntry::File { gitdir })
}

/// Canonicalises a path that must exist (a writable root). Relative paths are refused: they would be resolved
/// against this process's working directory, not the command's.
pub(crate) fn canonical_existing(resolver: &dyn PathResolver, path: &Path) -> Result<PathBuf, SandboxError> {
    if !path.is_absolute() {
        return Err(invalid(path, "not an absolute path"));
    }
    let canonical = resolver.canonicalize(path).map_err(|err| invalid(path, &err.to_string()))?;
    if !canonical.is_absolute() {
        return Err(invalid(path, "canonicalised to a relative path"));
    }
    Ok(normalized(&canonical))
}

/// The path to protect for `gitdir`, named by the `.git` file of the writable root `owner` (canonical), or why
/// it is not protected. `roots` pairs every writable root as the policy spells it with its canonical form.
///
/// The rules of `docs/sandbox.md` (P3), on the text first: `.` and `..` are resolved by the text, and the path
/// must begin with the spelling of a writable root (else it is read-only anyway and is never looked up: a
/// planted `gitdir:` makes the server touch nothing outside the writable roots); that root's spelling is
/// replaced by its canonical form, and [`uexec_domain::gitdir::gitdir_protection`] decides on the result (no
/// writable root, no ancestor of one, inside `owner` and in no root nested in it). Only then is it looked up:
/// its canonical form must be itself (no component below the root is a symlink a command could have planted)
/// and it must hold a regular `HEAD` file. The path returned is therefore never a symlink's target.
pub(crate) fn protected_gitdir(
    resolver: &dyn PathResolver,
    gitdir: &Path,
    owner: &Path,
    roots: &[(PathBuf, PathBuf)],
) -> Result<PathBuf, UnprotectedGitdir> {
    use uexec_domain::gitdir::{gitdir_protection, normalize_lexically};
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
    let candidate = normalized(&canonical_root.join(rest));
    gitdir_protection(&candidate, owner, &canonical_roots)?;
    match resolver.canonicalize(&candidate) {
        Ok(resolved) if normalized(&resolved) == candidate => {}
        Ok(_) => return Err(UnprotectedGitdir::ThroughSymlink),
        Err(e) => return Err(UnprotectedGitdir::Missing(e.to_string())),
    }
    if !resolver.is_regular_file(&candidate.join("HEAD")) {
        return Err(UnprotectedGitdir::NotAGitDir);
    }
    Ok(candidate)
}

/// `path` rebuilt from its components: no trailing `/`, no doubled `/`, whatever a resolver returned.
fn normalized(path: &Path) -> PathBuf {
    path.components().collect()
}

fn invalid(path: &Path, reason: &str) -> SandboxError {
    SandboxError::InvalidPath { path: path.to_path_buf(), reason: reason.to_owned() }
}

#[cfg(test)]
#[path = "paths_tests.rs"]
mod tests;
