//! The filesystem layout of one command: canonical writable roots and the read-only subpaths to protect, worked
//! out in the parent (this is where the I/O happens: canonicalising, reading `.git` files).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use uexec_domain::policy::GitEntry;
use uexec_domain::{SandboxPolicy, WritableRoot};
use uexec_ports::SandboxError;

/// The writable roots and protected subpaths of one command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FsLayout {
    /// Canonical, existing writable directories, in policy order.
    pub(crate) roots: Vec<PathBuf>,
    /// Writable roots that do not exist (nothing to write into; listed in the report).
    pub(crate) missing_roots: Vec<PathBuf>,
    /// Writable roots refused because their path goes through a symlink inside a writable root: a sandboxed
    /// command can make that symlink name any directory (listed in the report).
    pub(crate) refused_roots: Vec<PathBuf>,
    /// Existing protected entries inside writable roots, to mount read-only. A protected entry that is a symlink
    /// appears itself (so it cannot be replaced) and, when inside a root, so does its target.
    pub(crate) protected: Vec<PathBuf>,
    /// Protected subpaths that do not exist (nothing to protect; creating them is not prevented).
    pub(crate) absent: Vec<PathBuf>,
    /// Files that stay writable under every policy: `/dev/null` and `/dev/tty` (when they exist).
    pub(crate) writable_files: Vec<PathBuf>,
}

/// The files every sandboxed command may write.
const WRITABLE_FILES: [&str; 2] = ["/dev/null", "/dev/tty"];

/// POSIX shared memory (`shm_open`, `sem_open`: Python's `multiprocessing` locks and queues, many test runners).
/// A tmpfs as shared as `/tmp`, so it is writable exactly when `/tmp` is.
const SHM_DIR: &str = "/dev/shm";

impl FsLayout {
    /// Work out the layout of `policy` for a command in `cwd` with `$TMPDIR` = `tmpdir`.
    pub(crate) fn resolve(
        policy: &SandboxPolicy,
        cwd: &Path,
        tmpdir: Option<&Path>,
    ) -> Result<FsLayout, SandboxError> {
        if !cwd.is_absolute() {
            return Err(invalid(cwd, "the working directory must be absolute"));
        }
        let mut canonical = Canonical::default();
        let canonical_cwd = canonical.get(cwd).map_err(|e| invalid(cwd, &e.to_string()))?;
        if !canonical_cwd.is_dir() {
            return Err(invalid(cwd, "the working directory is not a directory"));
        }
        let mut layout = FsLayout {
            writable_files: WRITABLE_FILES.iter().map(PathBuf::from).filter(|p| p.exists()).collect(),
            ..FsLayout::default()
        };
        let mut writable = policy.writable_roots(cwd, tmpdir, git_entry);
        if let SandboxPolicy::WorkspaceWrite { exclude_slash_tmp: false, .. } = policy
            && Path::new(SHM_DIR).is_dir()
        {
            writable.push(WritableRoot { root: PathBuf::from(SHM_DIR), read_only_subpaths: Vec::new() });
        }
        let mut resolved: Vec<(&Path, PathBuf)> = Vec::new();
        for root in &writable {
            match canonical.get(&root.root) {
                Ok(canonical) if canonical.is_dir() => resolved.push((&root.root, canonical)),
                Ok(_) => return Err(invalid(&root.root, "a writable root must be a directory")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => layout.missing_roots.push(root.root.clone()),
                Err(e) => return Err(invalid(&root.root, &e.to_string())),
            }
        }
        // Roots are resolved again for every command. A root whose path goes through a symlink inside a writable
        // root ($TMPDIR=/tmp/t with /tmp writable, after a command ran `rm -r /tmp/t; ln -s ~ /tmp/t`) would
        // name whatever directory a sandboxed command chose: it is refused. (Checked against every candidate
        // root, refused or not: erring towards refusing.)
        let candidates: Vec<PathBuf> = resolved.iter().map(|(_, c)| c.clone()).collect();
        for (given, resolved) in resolved {
            if through_writable_symlink(given, &candidates, &mut canonical) {
                push_unique(&mut layout.refused_roots, given.to_path_buf());
            } else if !layout.roots.contains(&resolved) {
                layout.roots.push(resolved);
            }
        }
        for sub in writable.iter().flat_map(|r| r.read_only_subpaths.iter()) {
            layout.add_protected(sub, &mut canonical)?;
        }
        layout.protected.sort_by_key(|p| (depth(p), p.clone()));
        layout.protected.dedup();
        layout.absent.dedup();
        Ok(layout)
    }

    /// True when `path` (canonical) is a writable root or beneath one.
    pub(crate) fn is_writable(&self, path: &Path) -> bool {
        self.roots.iter().any(|root| path.starts_with(root))
    }

    /// Record protected subpath `sub`.
    fn add_protected(&mut self, sub: &Path, canonical: &mut Canonical) -> Result<(), SandboxError> {
        let (Some(parent), Some(name)) = (sub.parent(), sub.file_name()) else {
            return Ok(());
        };
        let entry = match canonical.get(parent) {
            Ok(parent) => parent.join(name),
            Err(_) => {
                push_unique(&mut self.absent, sub.to_path_buf());
                return Ok(());
            }
        };
        let meta = match fs::symlink_metadata(&entry) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                push_unique(&mut self.absent, entry);
                return Ok(());
            }
            Err(e) => return Err(invalid(&entry, &e.to_string())),
        };
        if self.is_writable(&entry) {
            push_unique(&mut self.protected, entry.clone());
        }
        if meta.file_type().is_symlink()
            && let Ok(target) = fs::canonicalize(&entry)
            && self.is_writable(&target)
        {
            push_unique(&mut self.protected, target);
        }
        Ok(())
    }

    /// The roots to bind-mount writable: the canonical roots minus those beneath another root (the outer root's
    /// recursive copy already holds them), shallowest first. Empty when `/` itself is writable.
    pub(crate) fn mount_roots(&self) -> Vec<&Path> {
        if self.roots.iter().any(|r| r == Path::new("/")) {
            return Vec::new();
        }
        let mut roots: Vec<&Path> = self
            .roots
            .iter()
            .filter(|r| !self.roots.iter().any(|other| other != *r && r.starts_with(other)))
            .map(PathBuf::as_path)
            .collect();
        roots.sort_by_key(|p| depth(p));
        roots
    }

    /// The directories to bind-mount over themselves so that no sandboxed command can rename or remove them
    /// (`EBUSY`): every directory between a mounted writable root (exclusive) and a protected entry (exclusive),
    /// shallowest first. Without them a workspace nested in another writable root (`/tmp/proj` with `/tmp`
    /// writable) could be renamed away by one command and replaced by a decoy, and the next command, whose
    /// protected entries are found by path, would leave the real `.git` writable at its new path.
    pub(crate) fn pinned_dirs(&self) -> Vec<PathBuf> {
        let mounted = self.mount_roots();
        let outer: Vec<&Path> = if mounted.is_empty() { vec![Path::new("/")] } else { mounted };
        let mut pinned = Vec::new();
        for entry in &self.protected {
            // An entry that is a root itself (a planted `.git` file naming `gitdir: /tmp`) pins nothing.
            let Some(root) = outer
                .iter()
                .filter(|root| entry.starts_with(root) && entry != *root)
                .max_by_key(|root| depth(root))
            else {
                continue;
            };
            for dir in entry.ancestors().skip(1).take_while(|dir| dir != root) {
                push_unique(&mut pinned, dir.to_path_buf());
            }
        }
        pinned.sort_by_key(|p| (depth(p), p.clone()));
        pinned
    }
}

/// `fs::canonicalize` with a memory: the same roots come back as the parents of their protected subpaths, and
/// each canonicalisation costs a `readlink` per path component.
#[derive(Debug, Default)]
struct Canonical {
    known: Vec<(PathBuf, PathBuf)>,
}

impl Canonical {
    /// The canonical form of `path`.
    fn get(&mut self, path: &Path) -> io::Result<PathBuf> {
        if let Some((_, canonical)) = self.known.iter().find(|(p, _)| p == path) {
            return Ok(canonical.clone());
        }
        let canonical = fs::canonicalize(path)?;
        self.known.push((path.to_path_buf(), canonical.clone()));
        Ok(canonical)
    }
}

/// True when one of the components of `path` is a symlink whose directory is beneath one of `roots`.
fn through_writable_symlink(path: &Path, roots: &[PathBuf], canonical: &mut Canonical) -> bool {
    path.ancestors().filter(|p| !p.as_os_str().is_empty() && p.parent().is_some()).any(|p| {
        fs::symlink_metadata(p).is_ok_and(|meta| meta.file_type().is_symlink())
            && p.parent()
                .and_then(|dir| canonical.get(dir).ok())
                .is_none_or(|dir| roots.iter().any(|root| dir.starts_with(root)))
    })
}

/// Push `path` unless present.
fn push_unique(list: &mut Vec<PathBuf>, path: PathBuf) {
    if !list.contains(&path) {
        list.push(path);
    }
}

/// The number of normal components of `path`.
fn depth(path: &Path) -> usize {
    path.components().filter(|c| matches!(c, Component::Normal(_))).count()
}

/// What `root/.git` is: a directory, a file naming a gitdir (resolved against `root`), or absent.
pub(crate) fn git_entry(root: &Path) -> GitEntry {
    let dot_git = root.join(".git");
    match fs::metadata(&dot_git) {
        Ok(meta) if meta.is_dir() => GitEntry::Directory,
        Ok(meta) if meta.is_file() => match fs::read_to_string(&dot_git) {
            Ok(text) => match text.lines().next().and_then(|l| l.strip_prefix("gitdir:")) {
                Some(gitdir) => GitEntry::File { gitdir: root.join(gitdir.trim()) },
                None => GitEntry::Absent,
            },
            Err(_) => GitEntry::Absent,
        },
        _ => GitEntry::Absent,
    }
}

/// A path as a C string (paths from the OS contain no NUL; `SandboxError::InvalidPath` otherwise).
pub(crate) fn c_path(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| invalid(path, "the path contains a NUL byte"))
}

/// `SandboxError::InvalidPath`.
fn invalid(path: &Path, reason: &str) -> SandboxError {
    SandboxError::InvalidPath { path: path.to_path_buf(), reason: reason.to_owned() }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn workspace(tmp: &Path) -> SandboxPolicy {
        SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![tmp.join("extra"), tmp.join("missing")],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        }
    }

    #[test]
    fn resolves_roots_protected_and_absent_subpaths() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let repo = base.join("repo");
        fs::create_dir_all(repo.join(".git")).unwrap();
        fs::create_dir_all(base.join("extra")).unwrap();
        fs::create_dir_all(base.join("main/.git/worktrees/wt")).unwrap();
        fs::write(
            base.join("extra/.git"),
            format!("gitdir: {}\n", base.join("main/.git/worktrees/wt").display()),
        )
        .unwrap();
        std::os::unix::fs::symlink("repo", base.join("link")).unwrap();

        let layout = FsLayout::resolve(&workspace(&base), &base.join("link"), None).unwrap();
        assert_eq!(layout.roots, vec![base.join("extra"), repo.clone()]);
        assert_eq!(layout.missing_roots, vec![base.join("missing")]);
        // The gitdir is outside every writable root: read-only already, not mounted.
        assert_eq!(layout.protected, vec![base.join("extra/.git"), repo.join(".git")]);
        assert!(layout.absent.contains(&repo.join(".uexec")));
        assert!(layout.absent.contains(&base.join("extra/.uexec")));
        assert!(layout.writable_files.contains(&PathBuf::from("/dev/null")));
    }

    #[test]
    fn symlinked_git_protects_the_link_and_its_target() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(base.join("real-git")).unwrap();
        std::os::unix::fs::symlink("real-git", base.join(".git")).unwrap();
        let policy = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        };
        let layout = FsLayout::resolve(&policy, &base, None).unwrap();
        assert_eq!(layout.protected, vec![base.join(".git"), base.join("real-git")]);
    }

    #[test]
    fn nested_roots_are_mounted_once_and_slash_disables_root_mounts() {
        let layout = FsLayout {
            roots: vec![PathBuf::from("/a/b"), PathBuf::from("/a"), PathBuf::from("/c")],
            ..FsLayout::default()
        };
        assert_eq!(layout.mount_roots(), vec![Path::new("/a"), Path::new("/c")]);
        let everything =
            FsLayout { roots: vec![PathBuf::from("/"), PathBuf::from("/a")], ..FsLayout::default() };
        assert!(everything.mount_roots().is_empty());
    }

    #[test]
    fn directories_between_a_mounted_root_and_a_protected_entry_are_pinned() {
        let layout = FsLayout {
            roots: vec![PathBuf::from("/tmp"), PathBuf::from("/tmp/a/proj"), PathBuf::from("/w")],
            protected: vec![
                PathBuf::from("/tmp/.git"),
                PathBuf::from("/tmp/a/proj/.git"),
                PathBuf::from("/tmp/a/proj/.uexec"),
                PathBuf::from("/w/.git"),
                PathBuf::from("/w"),
            ],
            ..FsLayout::default()
        };
        assert_eq!(layout.pinned_dirs(), vec![PathBuf::from("/tmp/a"), PathBuf::from("/tmp/a/proj")]);
        let everything = FsLayout {
            roots: vec![PathBuf::from("/")],
            protected: vec![PathBuf::from("/p/.git")],
            ..FsLayout::default()
        };
        assert_eq!(everything.pinned_dirs(), vec![PathBuf::from("/p")]);
    }

    #[test]
    fn a_root_reached_through_a_symlink_inside_a_writable_root_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(base.join("ws")).unwrap();
        fs::create_dir_all(base.join("victim")).unwrap();
        fs::create_dir_all(base.join("real-cache")).unwrap();
        // $TMPDIR inside the workspace, replaced by a symlink to a directory outside every root.
        std::os::unix::fs::symlink(base.join("victim"), base.join("ws/tmp")).unwrap();
        // A configured root that is a symlink in a directory no command can write: trusted.
        std::os::unix::fs::symlink(base.join("real-cache"), base.join("cache")).unwrap();
        let policy = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![base.join("cache")],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: false,
        };
        let layout = FsLayout::resolve(&policy, &base.join("ws"), Some(&base.join("ws/tmp"))).unwrap();
        assert_eq!(layout.roots, vec![base.join("real-cache"), base.join("ws")]);
        assert_eq!(layout.refused_roots, vec![base.join("ws/tmp")]);
        assert!(!layout.is_writable(&base.join("victim")));
    }

    #[test]
    fn bad_cwd_is_an_invalid_path() {
        let policy = SandboxPolicy::ReadOnly { network_access: false };
        assert!(matches!(
            FsLayout::resolve(&policy, Path::new("/no/such/dir"), None),
            Err(SandboxError::InvalidPath { .. })
        ));
        assert!(matches!(
            FsLayout::resolve(&policy, Path::new("relative"), None),
            Err(SandboxError::InvalidPath { .. })
        ));
    }
}
