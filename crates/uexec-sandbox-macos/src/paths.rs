//! The filesystem facts the profile needs (canonical spellings, `.git` entries), behind one seam.
//!
//! Seatbelt matches the paths the kernel resolved: `/private/tmp/x`, never `/tmp/x`, and the target of a
//! symlink, never the link. A rule written with the spelling the user configured silently matches nothing, so
//! every path is canonicalised before it becomes a parameter. [`PathResolver`] is the only place this crate
//! touches the filesystem; tests swap in a fake that maps `/tmp` to `/private/tmp` as macOS does.

use std::io;
use std::path::{Component, Path, PathBuf};

use uexec_domain::policy::GitEntry;
use uexec_ports::SandboxError;

/// Answers the two questions the profile generator asks the filesystem.
pub trait PathResolver: Send + Sync + std::fmt::Debug {
    /// The canonical form of `path`: absolute, every symlink resolved, no `.` or `..`. Fails when the path (or
    /// a directory on the way) does not exist, as [`std::fs::canonicalize`] does.
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;

    /// What `root/.git` is. A `.git` file's `gitdir:` target is returned absolute (relative targets are
    /// resolved against `root`); anything unreadable or malformed counts as [`GitEntry::Absent`], since
    /// `root/.git` itself stays read-only whatever it is.
    fn git_entry(&self, root: &Path) -> GitEntry;
}

/// The real filesystem, through `std::fs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl PathResolver for RealFs {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    fn git_entry(&self, root: &Path) -> GitEntry {
        let dot_git = root.join(".git");
        match std::fs::symlink_metadata(&dot_git) {
            Ok(meta) if meta.is_dir() => GitEntry::Directory,
            // A symlinked `.git` is resolved by canonicalisation like any other read-only subpath.
            Ok(meta) if meta.is_symlink() => GitEntry::Directory,
            // A FIFO, socket or device is never opened; a regular file is read bounded, without blocking.
            Ok(meta) if meta.is_file() => read_git_file(&dot_git)
                .ok()
                .and_then(|content| uexec_domain::gitdir::parse_git_file(root, &content).ok())
                .map_or(GitEntry::Absent, |gitdir| GitEntry::File { gitdir }),
            _ => GitEntry::Absent,
        }
    }
}

/// The content of the `.git` file at `path`, read the way every file a command may have planted is read: opened
/// with `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY` (a link swapped in is refused, a FIFO does not block), read only if
/// `fstat` says it is a regular file of at most `MAX_GIT_FILE_BYTES`. (The Linux adapter has the same reader
/// with `openat2`; adapters do not depend on each other, and the shared rules live in `uexec_domain::gitdir`.)
fn read_git_file(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let limit = uexec_domain::gitdir::MAX_GIT_FILE_BYTES;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > limit {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a small regular file"));
    }
    let mut content = Vec::new();
    file.take(limit + 1).read_to_end(&mut content)?;
    if content.len() as u64 > limit {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "grew beyond the limit"));
    }
    Ok(content)
}

/// Reads the `gitdir: <path>` line of a `.git` file (worktrees, submodules); relative paths are relative to
/// `root` (the rule of `uexec_domain::gitdir::parse_git_file`).
pub fn parse_git_file(root: &Path, text: &str) -> GitEntry {
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

/// Canonicalises a path that may not exist yet (a read-only subpath such as an absent `.uexec`, which must stay
/// uncreatable): the longest existing ancestor is canonicalised and the missing rest appended. A path whose
/// missing rest contains `..` cannot be spelled safely and is refused.
pub(crate) fn canonical_lenient(resolver: &dyn PathResolver, path: &Path) -> Result<PathBuf, SandboxError> {
    if !path.is_absolute() {
        return Err(invalid(path, "not an absolute path"));
    }
    let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
    let mut current = path;
    loop {
        match resolver.canonicalize(current) {
            Ok(canonical) if canonical.is_absolute() => {
                let mut full = normalized(&canonical);
                for name in missing.iter().rev() {
                    full.push(name);
                }
                return Ok(full);
            }
            Ok(_) => return Err(invalid(path, "canonicalised to a relative path")),
            Err(err) => {
                let name = match current.components().next_back() {
                    Some(Component::Normal(name)) => name,
                    _ => return Err(invalid(path, &err.to_string())),
                };
                let Some(parent) = current.parent() else {
                    return Err(invalid(path, &err.to_string()));
                };
                missing.push(name);
                current = parent;
            }
        }
    }
}

/// Every spelling under which Seatbelt may see a read-only subpath: the path with its directories resolved but
/// its last component kept (so a `.git` symlink itself cannot be removed and replaced), and, when that last
/// component is a symlink, its resolved target too (so the data it points to stays read-only).
pub(crate) fn read_only_spellings(
    resolver: &dyn PathResolver,
    path: &Path,
) -> Result<Vec<PathBuf>, SandboxError> {
    let resolved = canonical_lenient(resolver, path)?;
    let mut spellings = Vec::with_capacity(2);
    if let (Some(parent), Some(Component::Normal(name))) = (path.parent(), path.components().next_back()) {
        let link = canonical_lenient(resolver, parent)?.join(name);
        if link != resolved {
            spellings.push(link);
        }
    }
    spellings.push(resolved);
    Ok(spellings)
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
