//! A fake filesystem for the generator: directories, symlinks and `.git` entries held in memory, so tests can
//! stand in for macOS (`/tmp` -> `/private/tmp`, `/var` -> `/private/var`) on any host.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path, PathBuf};

use uexec_domain::GitEntry;
use uexec_domain::gitdir::GitFileProblem;
use uexec_sandbox_macos::PathResolver;

/// Symlinks are resolved component by component like the kernel does; a path exists when every directory on
/// the way is known (or, with [`FakeFs::everything_exists`], always, and every `HEAD` is a regular file).
#[derive(Debug, Default, Clone)]
pub struct FakeFs {
    links: BTreeMap<PathBuf, PathBuf>,
    dirs: BTreeSet<PathBuf>,
    files: BTreeSet<PathBuf>,
    contents: BTreeMap<PathBuf, Vec<u8>>,
    git: BTreeMap<PathBuf, (GitEntry, Option<GitFileProblem>)>,
    births: BTreeMap<PathBuf, std::time::SystemTime>,
    everything_exists: bool,
}

impl FakeFs {
    /// The macOS layout: `/tmp`, `/var` and `/etc` are symlinks into `/private`.
    pub fn macos() -> Self {
        FakeFs::default()
            .dir("/private/tmp")
            .dir("/private/var/folders")
            .dir("/private/etc")
            .link("/tmp", "/private/tmp")
            .link("/var", "/private/var")
            .link("/etc", "/private/etc")
    }

    /// Every absolute path exists (and only symlinks change spellings).
    pub fn everything_exists() -> Self {
        FakeFs { everything_exists: true, ..FakeFs::default() }
    }

    /// Adds the directory `path` and its ancestors.
    pub fn dir(mut self, path: impl AsRef<Path>) -> Self {
        let mut current = PathBuf::new();
        for component in path.as_ref().components() {
            current.push(component);
            self.dirs.insert(current.clone());
        }
        self
    }

    /// Says that `path` was created `seconds` after the epoch (its birth time; unknown otherwise).
    pub fn born(mut self, path: impl AsRef<Path>, seconds: u64) -> Self {
        let at = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
        self.births.insert(path.as_ref().to_path_buf(), at);
        self
    }

    /// Makes `from` a symlink to the absolute `to`.
    pub fn link(mut self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Self {
        self.links.insert(from.as_ref().to_path_buf(), to.as_ref().to_path_buf());
        self
    }

    /// Adds the regular file `path` (and its directory).
    pub fn file(self, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        let mut fs = match path.parent() {
            Some(parent) => self.dir(parent),
            None => self,
        };
        fs.files.insert(path.to_path_buf());
        fs
    }

    /// Adds the regular file `path` holding `content` (what [`PathResolver::read_small_file`] returns; the other
    /// files read as empty).
    pub fn content(self, path: impl AsRef<Path>, content: &str) -> Self {
        let path = path.as_ref();
        let mut fs = self.file(path);
        fs.contents.insert(path.to_path_buf(), content.as_bytes().to_vec());
        fs
    }

    /// Sets what `root/.git` is (`root` canonical).
    pub fn git(mut self, root: impl AsRef<Path>, entry: GitEntry) -> Self {
        self.git.insert(root.as_ref().to_path_buf(), (entry, None));
        self
    }

    /// Makes `root/.git` something that names no gitdir, for `problem` (`root` canonical).
    pub fn odd_git(mut self, root: impl AsRef<Path>, problem: GitFileProblem) -> Self {
        self.git.insert(root.as_ref().to_path_buf(), (GitEntry::Absent, Some(problem)));
        self
    }

    fn exists(&self, path: &Path) -> bool {
        self.everything_exists
            || path == Path::new("/")
            || self.dirs.contains(path)
            || self.files.contains(path)
            || (path.ends_with(".git")
                && path
                    .parent()
                    .and_then(|root| self.git.get(root))
                    .is_some_and(|(entry, problem)| *entry != GitEntry::Absent || problem.is_some()))
    }
}

impl PathResolver for FakeFs {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        if !path.is_absolute() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "relative path"));
        }
        let mut resolved = PathBuf::from("/");
        for component in path.components() {
            match component {
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    resolved.pop();
                }
                Component::Normal(name) => {
                    resolved.push(name);
                    let mut hops = 0;
                    while let Some(target) = self.links.get(&resolved) {
                        hops += 1;
                        if hops > 40 {
                            return Err(io::Error::other("too many levels of symbolic links"));
                        }
                        resolved = target.clone();
                    }
                    if !self.exists(&resolved) {
                        return Err(io::Error::from(io::ErrorKind::NotFound));
                    }
                }
            }
        }
        Ok(resolved)
    }

    fn inspect_git(&self, root: &Path) -> (GitEntry, Option<GitFileProblem>) {
        if self.links.contains_key(&root.join(".git")) {
            assert!(!self.git.contains_key(root), "{}/.git is a link and an entry", root.display());
            return (GitEntry::Absent, Some(GitFileProblem::Symlink));
        }
        self.git.get(root).cloned().unwrap_or((GitEntry::Absent, None))
    }

    fn symlink_target(&self, path: &Path) -> Option<PathBuf> {
        self.links.get(path).cloned()
    }

    fn is_regular_file(&self, path: &Path) -> bool {
        self.files.contains(path) || (self.everything_exists && path.ends_with("HEAD"))
    }

    fn is_dir(&self, path: &Path) -> bool {
        !self.links.contains_key(path) && (self.dirs.contains(path) || self.everything_exists)
    }

    fn read_small_file(&self, path: &Path) -> Result<Vec<u8>, GitFileProblem> {
        if self.links.contains_key(path) {
            return Err(GitFileProblem::Symlink);
        }
        if !self.files.contains(path) {
            return Err(GitFileProblem::Unreadable("No such file or directory".into()));
        }
        Ok(self.contents.get(path).cloned().unwrap_or_default())
    }

    fn list_files(&self, dir: &Path) -> Option<Vec<PathBuf>> {
        if self.links.contains_key(dir) || !self.dirs.contains(dir) {
            return None;
        }
        let mut out: Vec<PathBuf> = self
            .files
            .iter()
            .chain(self.links.keys())
            .filter(|f| f.parent() == Some(dir) && !self.dirs.contains(*f))
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        Some(out)
    }

    fn list_dirs(&self, dir: &Path) -> Option<Vec<PathBuf>> {
        // With every path existing, a directory outside any `.git` lists what is known of it (the workspace's
        // top level must be listed, or the command is refused); one inside a `.git` cannot be listed, so the
        // walk of worktrees/ and modules/ fails closed (what the property tests' oracle expects).
        let listable = self.dirs.contains(dir)
            || (self.everything_exists && !dir.components().any(|c| c.as_os_str() == ".git"));
        if self.links.contains_key(dir) || !listable {
            return None;
        }
        // A `.git` directory set with [`FakeFs::git`] counts as a directory of its root.
        let gits = self.git.iter().filter(|(_, (entry, _))| *entry == GitEntry::Directory);
        let mut out: Vec<PathBuf> = self
            .dirs
            .iter()
            .cloned()
            .chain(gits.map(|(root, _)| root.join(".git")))
            .filter(|d| d.parent() == Some(dir) && !self.links.contains_key(d))
            .collect();
        out.sort();
        out.dedup();
        // As the real listing: beyond the budget of the workspace's top level, no answer.
        if out.len() > uexec_domain::gitdir::MAX_NESTED_SCAN_ENTRIES {
            return None;
        }
        Some(out)
    }

    fn birth_time(&self, path: &Path) -> Option<std::time::SystemTime> {
        self.births.get(path).copied()
    }
}
