//! A Mac held in memory for the generator: `uexec_plan::FakeHost` (the one fake host) with macOS's layout (`/tmp`
//! -> `/private/tmp`, `/var` -> `/private/var`) and a way to say what a root's `.git` is, so tests stand in for
//! macOS on any host.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use uexec_domain::GitEntry;
use uexec_domain::gitdir::GitFileProblem;
use uexec_plan::{FakeHost, HostView, Kind, Meta, Unreached};

/// [`FakeHost`] with the builders these tests use.
#[derive(Debug, Clone)]
pub struct FakeFs(FakeHost);

impl FakeFs {
    /// The macOS layout: `/tmp`, `/var` and `/etc` are symlinks into `/private`.
    pub fn macos() -> Self {
        FakeFs(
            FakeHost::new()
                .dir("/private/tmp")
                .dir("/private/var/folders")
                .dir("/private/etc")
                .link("/tmp", "/private/tmp")
                .link("/var", "/private/var")
                .link("/etc", "/private/etc"),
        )
    }

    /// Every absolute path exists (and only symlinks change spellings): `FakeHost::open_world`.
    pub fn everything_exists() -> Self {
        FakeFs(FakeHost::new().open_world())
    }

    /// Adds the directory `path` and its ancestors.
    pub fn dir(self, path: impl AsRef<Path>) -> Self {
        FakeFs(self.0.dir(path))
    }

    /// Says that `path` was created `seconds` after the epoch (its birth time; unknown otherwise).
    pub fn born(self, path: impl AsRef<Path>, seconds: u64) -> Self {
        FakeFs(self.0.born(path, seconds))
    }

    /// Makes `from` a symlink to the absolute `to`.
    pub fn link(self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Self {
        FakeFs(self.0.link(from, to))
    }

    /// Adds the empty regular file `path` (and its directory).
    pub fn file(self, path: impl AsRef<Path>) -> Self {
        FakeFs(self.0.file(path))
    }

    /// Adds the regular file `path` holding `content`.
    pub fn content(self, path: impl AsRef<Path>, content: &str) -> Self {
        FakeFs(self.0.content(path, content))
    }

    /// Sets what `root/.git` is (`root` canonical): a directory, or a file naming `gitdir`.
    pub fn git(self, root: impl AsRef<Path>, entry: GitEntry) -> Self {
        let dot_git = root.as_ref().join(".git");
        match entry {
            GitEntry::Absent => self,
            GitEntry::Directory => self.dir(dot_git),
            GitEntry::File { gitdir } => {
                let mut text = b"gitdir: ".to_vec();
                text.extend_from_slice(gitdir.as_os_str().as_bytes());
                text.push(b'\n');
                FakeFs(self.0.content(dot_git, text))
            }
        }
    }

    /// Makes `root/.git` something that names no gitdir, for `problem` (`root` canonical).
    pub fn odd_git(self, root: impl AsRef<Path>, problem: GitFileProblem) -> Self {
        let dot_git = root.as_ref().join(".git");
        FakeFs(match problem {
            GitFileProblem::Symlink => self.0.link(dot_git, "/nowhere"),
            GitFileProblem::NotARegularFile => self.0.fifo(dot_git),
            GitFileProblem::TooLarge { size } => self.0.sized(dot_git, size),
            GitFileProblem::NoGitdirLine => self.0.content(dot_git, "not a git file\n"),
            GitFileProblem::NoPath => self.0.content(dot_git, "gitdir: \n"),
            GitFileProblem::Unreadable(why) => self.0.unreadable(dot_git, why),
        })
    }
}

impl HostView for FakeFs {
    fn lstat(&self, path: &Path) -> io::Result<Meta> {
        self.0.lstat(path)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        self.0.read_link(path)
    }

    fn each_entry(&self, dir: &Path, visit: &mut dyn FnMut(&OsStr, Kind) -> bool) -> io::Result<bool> {
        self.0.each_entry(dir, visit)
    }

    fn read_small_file(&self, path: &Path, limit: u64) -> Result<Vec<u8>, GitFileProblem> {
        self.0.read_small_file(path, limit)
    }

    fn reach(&self, path: &Path) -> Result<Kind, Unreached> {
        self.0.reach(path)
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        self.0.canonicalize(path)
    }
}
