//! The one view of the host the plan reads through: `lstat`, `readlink`, a directory listing and a bounded
//! small-file read, none of which follows a symbolic link a sandboxed command may have planted.
//!
//! Everything the plan looks at inside a writable root may have been made by an earlier sandboxed command, so
//! the view answers only questions that cannot be redirected: what an entry itself is (`lstat`), where a link
//! points (`readlink`, never followed), what a real directory holds (opened without following a link at its
//! end), and what a small regular file says (opened without following a
//! link, without blocking, never read beyond its bound). Two questions follow links on purpose and say so:
//! [`HostView::canonicalize`] (what the policy's writable roots are) and [`HostView::reach`] (whether a path
//! is reached without any link, which refuses one anywhere on the way).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use uexec_domain::gitdir::GitFileProblem;

/// What an entry is, as `lstat` says it (a symbolic link is never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device (never opened: opening a device can have effects of its own).
    Other,
}

/// What `lstat` says of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// What it is.
    pub kind: Kind,
    /// Its size in bytes.
    pub len: u64,
    /// When it was created, if the file system says (what orders the repositories nested at a workspace's top
    /// level beyond their budget: `uexec_domain::gitdir::nested_modes`).
    pub birth: Option<SystemTime>,
}

/// Why a path is not reached without following a symbolic link ([`HostView::reach`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreached {
    /// A component of it, the last one included, is a symbolic link.
    ThroughSymlink,
    /// It does not exist or cannot be looked at (the error in words).
    Missing(String),
}

/// The host as the plan reads it. One real implementation ([`crate::RealHost`], Unix) and one in memory
/// (`FakeHost`, behind the `fake` feature, for tests on any OS).
pub trait HostView: fmt::Debug + Send + Sync {
    /// What `path` itself is (`lstat`: a final symbolic link is not followed).
    fn lstat(&self, path: &Path) -> io::Result<Meta>;

    /// The target of the symbolic link `path` (never followed).
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;

    /// Call `visit` with the name and kind (`lstat`: links not followed) of each entry of the real directory
    /// `dir`, `.` and `..` aside, until it returns false; `Ok(true)` when it saw every entry. `dir` is opened
    /// without following a symbolic link at its end (`O_NOFOLLOW`), so a link fails instead of being listed
    /// through; an error midway ends the listing with that error.
    fn each_entry(&self, dir: &Path, visit: &mut dyn FnMut(&OsStr, Kind) -> bool) -> io::Result<bool>;

    /// The content of the regular file `path`, at most `limit` bytes: opened without following a symbolic link
    /// (on Linux, anywhere on the way) and without blocking (a FIFO is not waited on), read only when it is a
    /// regular file of at most `limit` bytes (a file that grows meanwhile is refused, never read whole).
    fn read_small_file(&self, path: &Path, limit: u64) -> Result<Vec<u8>, GitFileProblem>;

    /// What `path` is when no component of it, the last one included, is a symbolic link: how the plan checks
    /// that a directory named by a file a command may have written (a gitdir, a common dir) is reached without a
    /// link it chose. By default each component is looked at with [`HostView::lstat`].
    fn reach(&self, path: &Path) -> Result<Kind, Unreached> {
        reach_by_lstat(&|at| self.lstat(at), path)
    }

    /// The canonical form of `path` (absolute, every symbolic link resolved, no `.` or `..`), failing when it or
    /// a directory on the way does not exist, as `std::fs::canonicalize` does. This one follows links: it says
    /// what the policy's writable roots are. By default each component is resolved with [`HostView::lstat`]
    /// and [`HostView::read_link`].
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        canonicalize_by_lstat(&|at| self.lstat(at), &|at| self.read_link(at), path, false)
    }
}

/// [`HostView::canonicalize`] with `lstat` and `readlink` (a component at a time). With `through_files`, a file
/// on the way does not end the path (what `FakeHost::open_world` needs: every path exists there).
pub(crate) fn canonicalize_by_lstat(
    lstat: &dyn Fn(&Path) -> io::Result<Meta>,
    read_link: &dyn Fn(&Path) -> io::Result<PathBuf>,
    path: &Path,
    through_files: bool,
) -> io::Result<PathBuf> {
    if !path.is_absolute() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not an absolute path"));
    }
    let mut resolved = PathBuf::new();
    let mut pending: Vec<OsString> = Vec::new();
    push_components(path, &mut resolved, &mut pending);
    let mut hops = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&name);
        let meta = lstat(&candidate)?;
        match meta.kind {
            Kind::Symlink => {
                hops += 1;
                if hops > 40 {
                    return Err(io::Error::other("too many levels of symbolic links"));
                }
                let target = read_link(&candidate)?;
                if target.is_absolute() {
                    resolved = PathBuf::new();
                }
                push_components(&target, &mut resolved, &mut pending);
            }
            Kind::Dir => resolved = candidate,
            _ if pending.is_empty() || through_files => resolved = candidate,
            _ => return Err(io::Error::new(io::ErrorKind::NotADirectory, "Not a directory")),
        }
    }
    Ok(resolved)
}

/// [`HostView::reach`] with `lstat` (a component at a time).
pub(crate) fn reach_by_lstat(
    lstat: &dyn Fn(&Path) -> io::Result<Meta>,
    path: &Path,
) -> Result<Kind, Unreached> {
    let mut at = PathBuf::new();
    let mut kind = Kind::Dir;
    for component in path.components() {
        match component {
            Component::Normal(name) => {
                at.push(name);
                let meta = lstat(&at).map_err(|e| Unreached::Missing(e.to_string()))?;
                if meta.kind == Kind::Symlink {
                    return Err(Unreached::ThroughSymlink);
                }
                kind = meta.kind;
            }
            Component::CurDir | Component::ParentDir => {
                return Err(Unreached::Missing(format!("{} is not canonical", path.display())));
            }
            Component::RootDir | Component::Prefix(_) => at.push(component.as_os_str()),
        }
    }
    Ok(kind)
}

/// Put the root of `path` (if it has one) into `resolved` and its other components on `pending`, first last.
fn push_components(path: &Path, resolved: &mut PathBuf, pending: &mut Vec<OsString>) {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => resolved.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => names.push(OsString::from("..")),
            Component::Normal(name) => names.push(name.to_os_string()),
        }
    }
    pending.extend(names.into_iter().rev());
}

/// The entries of a directory as [`HostView::each_entry`] read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// The entries read (name and kind), in listing order.
    pub entries: Vec<(OsString, Kind)>,
    /// True when every entry was read (no error, within the bound).
    pub complete: bool,
    /// Why the listing stopped early or could not start, if it did.
    pub error: Option<String>,
}

impl Listing {
    /// What the listing says of `name`: `Some(Some(kind))` listed, `Some(None)` absent (the listing is
    /// complete), `None` not known (look it up).
    pub fn lookup(&self, name: &OsStr) -> Option<Option<Kind>> {
        match self.entries.iter().find(|(n, _)| n == name) {
            Some((_, kind)) => Some(Some(*kind)),
            None if self.complete => Some(None),
            None => None,
        }
    }
}

/// Questions derived from the view's own, answered the same way for every implementation.
impl dyn HostView + '_ {
    /// What `path` itself is, `None` when it does not exist or cannot be looked at.
    pub fn kind(&self, path: &Path) -> Option<Kind> {
        self.lstat(path).ok().map(|meta| meta.kind)
    }

    /// True when `path` itself is a directory (a link to one is not).
    pub fn is_dir(&self, path: &Path) -> bool {
        self.kind(path) == Some(Kind::Dir)
    }

    /// True when `path` itself is a regular file (a link to one is not).
    pub fn is_file(&self, path: &Path) -> bool {
        self.kind(path) == Some(Kind::File)
    }

    /// True when something is at `path` itself (a dangling link is something).
    pub fn exists(&self, path: &Path) -> bool {
        self.lstat(path).is_ok()
    }

    /// The target of `path` when `path` itself is a symbolic link (`<error>` when it cannot be read), else
    /// `None`.
    pub fn symlink_target(&self, path: &Path) -> Option<PathBuf> {
        (self.kind(path) == Some(Kind::Symlink))
            .then(|| self.read_link(path).unwrap_or_else(|e| PathBuf::from(format!("<{e}>"))))
    }

    /// The entries of the real directory `dir` ([`HostView::each_entry`]), at most `max` of them.
    pub fn list(&self, dir: &Path, max: usize) -> Listing {
        let mut entries = Vec::new();
        let result = self.each_entry(dir, &mut |name, kind| {
            if entries.len() >= max {
                return false;
            }
            entries.push((name.to_os_string(), kind));
            true
        });
        match result {
            Ok(complete) => Listing { entries, complete, error: None },
            Err(e) => Listing { entries, complete: false, error: Some(e.to_string()) },
        }
    }

    /// The names of the entries of `dir` of the kinds `kinds`, sorted; `Err` when it cannot be listed whole.
    pub fn names(&self, dir: &Path, kinds: &[Kind]) -> io::Result<Vec<OsString>> {
        let mut out = Vec::new();
        self.each_entry(dir, &mut |name, kind| {
            if kinds.contains(&kind) {
                out.push(name.to_os_string());
            }
            true
        })?;
        out.sort();
        Ok(out)
    }
}
