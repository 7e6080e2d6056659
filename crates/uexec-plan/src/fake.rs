//! A host held in memory ([`FakeHost`]): a tree of directories, files, symbolic links and special files, read
//! the way the kernel reads one (links on the way resolved for `lstat`, refused where [`HostView`] refuses them),
//! so the plan of any platform is tested on any OS (the macOS profile's on Linux: `/tmp` a link to
//! `/private/tmp`, as there).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use uexec_domain::gitdir::GitFileProblem;

use crate::host::{HostView, Kind, Meta, Unreached};

/// One entry of a [`FakeHost`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File {
        content: Vec<u8>,
        /// The size `lstat` reports, when not the content's (a huge file, without the bytes).
        len: Option<u64>,
        /// Why reading it fails, when it does (`Permission denied`).
        unreadable: Option<String>,
    },
    Link(PathBuf),
    /// A FIFO (or socket, or device).
    Other,
}

impl Node {
    fn kind(&self) -> Kind {
        match self {
            Node::Dir => Kind::Dir,
            Node::File { .. } => Kind::File,
            Node::Link(_) => Kind::Symlink,
            Node::Other => Kind::Other,
        }
    }
}

/// A file system in memory, built with its methods (each adds an entry and the directories above it).
///
/// With [`FakeHost::open_world`] every absolute path that holds no entry exists: a `HEAD` or `.git` is an empty
/// regular file, anything else a directory (below a file too); such a directory lists what the tree holds below
/// it, except one inside a `.git` directory, which cannot be listed (property tests of the macOS profile use this: every root
/// exists whatever its name, and the walk of a git directory fails closed).
#[derive(Debug, Clone)]
pub struct FakeHost {
    nodes: BTreeMap<PathBuf, Node>,
    births: BTreeMap<PathBuf, SystemTime>,
    open_world: bool,
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost::new()
    }
}

impl FakeHost {
    /// An empty file system: `/` alone.
    pub fn new() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(PathBuf::from("/"), Node::Dir);
        FakeHost { nodes, births: BTreeMap::new(), open_world: false }
    }

    /// Every absolute path exists (see the type's documentation).
    #[must_use]
    pub fn open_world(mut self) -> Self {
        self.open_world = true;
        self
    }

    /// Adds the directory `path` (and those above it).
    #[must_use]
    pub fn dir(self, path: impl AsRef<Path>) -> Self {
        self.with(path.as_ref(), Node::Dir)
    }

    /// Adds the empty regular file `path` (a regular file there already is kept as it is).
    #[must_use]
    pub fn file(self, path: impl AsRef<Path>) -> Self {
        let path: PathBuf = path.as_ref().components().collect();
        if matches!(self.nodes.get(&path), Some(Node::File { .. })) {
            return self;
        }
        self.content(path, b"")
    }

    /// Adds the regular file `path` holding `content`.
    #[must_use]
    pub fn content(self, path: impl AsRef<Path>, content: impl AsRef<[u8]>) -> Self {
        let node = Node::File { content: content.as_ref().to_vec(), len: None, unreadable: None };
        self.with(path.as_ref(), node)
    }

    /// Adds the regular file `path` whose size reads as `len` (its bytes are not held).
    #[must_use]
    pub fn sized(self, path: impl AsRef<Path>, len: u64) -> Self {
        self.with(path.as_ref(), Node::File { content: Vec::new(), len: Some(len), unreadable: None })
    }

    /// Adds the regular file `path`, whose reading fails with `why`.
    #[must_use]
    pub fn unreadable(self, path: impl AsRef<Path>, why: impl Into<String>) -> Self {
        let node = Node::File { content: Vec::new(), len: None, unreadable: Some(why.into()) };
        self.with(path.as_ref(), node)
    }

    /// Adds the FIFO `path`.
    #[must_use]
    pub fn fifo(self, path: impl AsRef<Path>) -> Self {
        self.with(path.as_ref(), Node::Other)
    }

    /// Makes `from` a symbolic link to `to` (relative to the link's directory when relative).
    #[must_use]
    pub fn link(self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Self {
        let to = to.as_ref().to_path_buf();
        self.with(from.as_ref(), Node::Link(to))
    }

    /// Says that `path` was created `seconds` after the epoch (its birth time; unknown otherwise).
    #[must_use]
    pub fn born(mut self, path: impl AsRef<Path>, seconds: u64) -> Self {
        self.births
            .insert(path.as_ref().to_path_buf(), SystemTime::UNIX_EPOCH + Duration::from_secs(seconds));
        self
    }

    /// Removes `path` and everything below it.
    #[must_use]
    pub fn without(mut self, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        self.nodes.retain(|key, _| !key.starts_with(path));
        self
    }

    /// `self` with `node` at `path` (absolute) and a directory at each ancestor that holds nothing yet.
    fn with(mut self, path: &Path, node: Node) -> Self {
        let path: PathBuf = path.components().collect();
        for ancestor in path.ancestors().skip(1) {
            if !ancestor.as_os_str().is_empty() {
                self.nodes.entry(ancestor.to_path_buf()).or_insert(Node::Dir);
            }
        }
        self.nodes.insert(path, node);
        self
    }

    /// The entry at `path`: its parent resolved as the kernel does (links followed), its own name not.
    fn lookup(&self, path: &Path) -> io::Result<(PathBuf, Node)> {
        let Some(name) = path.file_name() else {
            let canonical = self.canonicalize(path)?;
            return Ok((canonical, Node::Dir));
        };
        let parent = path.parent().unwrap_or(Path::new("/"));
        let key = self.canonicalize(parent)?.join(name);
        match self.nodes.get(&key) {
            Some(node) => Ok((key, node.clone())),
            None if self.open_world => {
                let node = if name == "HEAD" || name == ".git" {
                    Node::File { content: Vec::new(), len: None, unreadable: None }
                } else {
                    Node::Dir
                };
                Ok((key, node))
            }
            None => Err(not_found()),
        }
    }
}

/// `ENOENT` in words.
fn not_found() -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "No such file or directory")
}

impl HostView for FakeHost {
    fn lstat(&self, path: &Path) -> io::Result<Meta> {
        let (key, node) = self.lookup(path)?;
        let len = match &node {
            Node::File { content, len, .. } => len.unwrap_or(content.len() as u64),
            _ => 0,
        };
        Ok(Meta {
            kind: node.kind(),
            len,
            birth: self.births.get(&key).or_else(|| self.births.get(path)).copied(),
        })
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        match self.lookup(path)? {
            (_, Node::Link(target)) => Ok(target),
            _ => Err(io::Error::new(io::ErrorKind::InvalidInput, "not a symbolic link")),
        }
    }

    fn each_entry(&self, dir: &Path, visit: &mut dyn FnMut(&OsStr, Kind) -> bool) -> io::Result<bool> {
        match self.lstat(dir)?.kind {
            Kind::Dir => {}
            Kind::Symlink => return Err(io::Error::other("Too many levels of symbolic links")),
            _ => return Err(io::Error::new(io::ErrorKind::NotADirectory, "Not a directory")),
        }
        let dir: PathBuf = dir.components().collect();
        let held = self.nodes.contains_key(&dir);
        if self.open_world && !held && dir.components().any(|c| c == Component::Normal(OsStr::new(".git"))) {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "Permission denied"));
        }
        let children = self
            .nodes
            .range(dir.clone()..)
            .take_while(|(key, _)| key.starts_with(&dir))
            .filter(|(key, _)| key.parent() == Some(dir.as_path()));
        for (key, node) in children {
            let Some(name) = key.file_name() else { continue };
            if !visit(name, node.kind()) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        crate::host::canonicalize_by_lstat(
            &|at| self.lstat(at),
            &|at| self.read_link(at),
            path,
            self.open_world,
        )
    }

    fn read_small_file(&self, path: &Path, limit: u64) -> Result<Vec<u8>, GitFileProblem> {
        match self.reach(path) {
            Ok(_) => {}
            Err(Unreached::ThroughSymlink) => return Err(GitFileProblem::Symlink),
            Err(Unreached::Missing(why)) => return Err(GitFileProblem::Unreadable(why)),
        }
        match self.lookup(path).map_err(|e| GitFileProblem::Unreadable(e.to_string()))?.1 {
            Node::File { unreadable: Some(why), .. } => Err(GitFileProblem::Unreadable(why)),
            Node::File { content, len, .. } => {
                let size = len.unwrap_or(content.len() as u64);
                if size > limit { Err(GitFileProblem::TooLarge { size }) } else { Ok(content) }
            }
            Node::Link(_) => Err(GitFileProblem::Symlink),
            Node::Dir | Node::Other => Err(GitFileProblem::NotARegularFile),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn links_resolve_on_the_way_and_never_at_the_end() {
        let fake = FakeHost::new()
            .dir("/private/tmp/w")
            .link("/tmp", "/private/tmp")
            .link("/private/tmp/w/rel", "../other")
            .dir("/private/tmp/other");
        let host: &dyn HostView = &fake;
        assert_eq!(host.canonicalize(Path::new("/tmp/w")).unwrap(), p("/private/tmp/w"));
        assert_eq!(host.canonicalize(Path::new("/tmp/w/rel")).unwrap(), p("/private/tmp/other"));
        assert_eq!(host.canonicalize(Path::new("/tmp/w/../w")).unwrap(), p("/private/tmp/w"));
        assert_eq!(host.kind(Path::new("/tmp")), Some(Kind::Symlink));
        assert_eq!(host.kind(Path::new("/tmp/w")), Some(Kind::Dir));
        assert_eq!(host.reach(Path::new("/tmp/w")), Err(Unreached::ThroughSymlink));
        assert_eq!(host.reach(Path::new("/private/tmp/w")), Ok(Kind::Dir));
        assert!(host.canonicalize(Path::new("/none")).is_err());
        assert!(host.list(Path::new("/tmp"), 10).error.is_some());
    }

    #[test]
    fn small_files_read_like_the_real_ones() {
        let fake = FakeHost::new()
            .content("/w/a", "gitdir: x\n")
            .sized("/w/big", 1 << 30)
            .fifo("/w/fifo")
            .unreadable("/w/secret", "Permission denied")
            .link("/w/link", "/w/a");
        let host: &dyn HostView = &fake;
        assert_eq!(host.read_small_file(Path::new("/w/a"), 100), Ok(b"gitdir: x\n".to_vec()));
        assert_eq!(
            host.read_small_file(Path::new("/w/big"), 100),
            Err(GitFileProblem::TooLarge { size: 1 << 30 })
        );
        assert_eq!(host.read_small_file(Path::new("/w/fifo"), 100), Err(GitFileProblem::NotARegularFile));
        assert_eq!(
            host.read_small_file(Path::new("/w/secret"), 100),
            Err(GitFileProblem::Unreadable("Permission denied".into()))
        );
        assert_eq!(host.read_small_file(Path::new("/w/link"), 100), Err(GitFileProblem::Symlink));
        assert_eq!(
            host.names(Path::new("/w"), &[Kind::File, Kind::Symlink]).unwrap(),
            ["a", "big", "link", "secret"]
        );
    }

    #[test]
    fn in_an_open_world_every_path_exists_and_git_directories_cannot_be_listed() {
        let fake = FakeHost::new().open_world().dir("/r/.git");
        let host: &dyn HostView = &fake;
        assert!(host.is_dir(Path::new("/anything/at/all")));
        assert!(host.is_file(Path::new("/anything/HEAD")) && host.is_file(Path::new("/x/.git")));
        assert!(host.list(Path::new("/r/.git/worktrees"), 10).error.is_some());
        assert_eq!(host.list(Path::new("/r"), 10).entries, vec![(".git".into(), Kind::Dir)]);
    }
}
