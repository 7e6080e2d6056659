//! The writable roots of one command, planned once for every platform: each root as the policy gives it with
//! its canonical form, those missing, those refused, and the read-only subpaths each holds.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use uexec_domain::gitdir::GitFileProblem;
use uexec_domain::{GitEntry, PROTECTED_SUBDIRS, SandboxPolicy, WritableRoot};

use crate::git::inspect_git;
use crate::host::{HostView, Kind};

/// The writable roots of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootsPlan {
    /// The working directory, canonical, or why the sandbox cannot use it (not an absolute path to a directory):
    /// a root of its own under `workspace-write`, and for Linux the directory every command starts in.
    pub workspace: Result<PathBuf, InvalidRoot>,
    /// Every writable root as the policy gives it (`uexec_domain::SandboxPolicy::writable_roots`: configured
    /// roots, the workspace, `/tmp`, `$TMPDIR`), then the platform's own, each with its read-only subpaths and
    /// its canonical form when it exists (refused or not).
    pub writable: Vec<(WritableRoot, Option<PathBuf>)>,
    /// Each root that exists and is not refused, as given, with its canonical form (what
    /// [`crate::GitPlanner::new`] takes).
    pub spelled: Vec<(PathBuf, PathBuf)>,
    /// The canonical roots that exist and are not refused, deduplicated, in policy order.
    pub roots: Vec<PathBuf>,
    /// The roots that do not exist (nothing to write into), each with the error that says so.
    pub missing: Vec<(PathBuf, String)>,
    /// The roots refused because their path goes through a symbolic link inside a writable root: a sandboxed
    /// command can make that link name any directory.
    pub refused: Vec<PathBuf>,
    /// What a root's `.git` file named that could not be read, and why (a `.git` that is a symbolic link is
    /// said by the protected entry's own note instead).
    pub notes: Vec<String>,
}

/// A working directory or writable root the sandbox cannot use: the command is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRoot {
    /// The path as given.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

impl fmt::Display for InvalidRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

impl std::error::Error for InvalidRoot {}

/// Plans the writable roots of `policy` for a command in `cwd` with `$TMPDIR` = `tmpdir`, with `extra` the
/// platform's own roots (Linux's `/dev/shm`, macOS's per-user cache directory), read through `host`.
///
/// A root must be absolute and, when it exists, a
/// directory (else the command is refused); one that does not exist is listed as missing (each adapter says
/// what that means for it). Roots are resolved again for every command: one whose path goes through a symbolic
/// link inside a writable root (`$TMPDIR=/tmp/t` with `/tmp` writable, after a command ran `rm -r /tmp/t; ln -s
/// ~ /tmp/t`) would name whatever directory a sandboxed command chose, so it is refused (checked against every
/// candidate root, refused or not: erring towards refusing).
pub fn plan_roots(
    host: &dyn HostView,
    policy: &SandboxPolicy,
    cwd: &Path,
    tmpdir: Option<&Path>,
    extra: &[PathBuf],
) -> Result<RootsPlan, InvalidRoot> {
    let invalid =
        |path: &Path, reason: &str| InvalidRoot { path: path.to_path_buf(), reason: reason.to_owned() };
    let mut canonical = Canonical::default();
    let workspace = if cwd.is_absolute() {
        match canonical.get_with_kind(host, cwd) {
            Ok((workspace, true)) => Ok(workspace),
            Ok((_, false)) => Err(invalid(cwd, "the working directory is not a directory")),
            Err(e) => Err(invalid(cwd, &e.to_string())),
        }
    } else {
        Err(invalid(cwd, "the working directory must be absolute"))
    };
    let mut notes: Vec<String> = Vec::new();
    let mut given = policy.writable_roots(cwd, tmpdir, |root| {
        let Ok(root) = canonical.get(host, root) else {
            return GitEntry::Absent;
        };
        let (entry, problem) = inspect_git(host, &root);
        if let Some(problem) = problem.filter(|p| *p != GitFileProblem::Symlink) {
            notes.push(format!("{}: {problem}", root.join(".git").display()));
        }
        entry
    });
    for root in extra {
        if given.iter().any(|g| g.root == *root) {
            continue;
        }
        let read_only_subpaths = PROTECTED_SUBDIRS.iter().map(|name| root.join(name)).collect();
        given.push(WritableRoot { root: root.clone(), read_only_subpaths });
    }
    let mut plan = RootsPlan {
        workspace,
        writable: Vec::new(),
        spelled: Vec::new(),
        roots: Vec::new(),
        missing: Vec::new(),
        refused: Vec::new(),
        notes,
    };
    let mut resolved: Vec<(PathBuf, PathBuf)> = Vec::new();
    for root in given {
        if !root.root.is_absolute() {
            return Err(invalid(&root.root, "not an absolute path"));
        }
        let found = match canonical.get_with_kind(host, &root.root) {
            Ok((canonical, true)) => Some(canonical),
            Ok((_, false)) => return Err(invalid(&root.root, "a writable root must be a directory")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                plan.missing.push((root.root.clone(), e.to_string()));
                None
            }
            Err(e) => return Err(invalid(&root.root, &e.to_string())),
        };
        if let Some(found) = &found {
            resolved.push((root.root.clone(), found.clone()));
        }
        plan.writable.push((root, found));
    }
    let candidates: Vec<PathBuf> = resolved.iter().map(|(_, c)| c.clone()).collect();
    for (given, found) in resolved {
        if through_writable_symlink(host, &given, &candidates, &mut canonical) {
            if !plan.refused.contains(&given) {
                plan.refused.push(given);
            }
            continue;
        }
        if !plan.roots.contains(&found) {
            plan.roots.push(found.clone());
        }
        plan.spelled.push((given, found));
    }
    Ok(plan)
}

/// The canonical form of each path asked for, with a memory: the same roots come back as the workspace and
/// as the parents of symbolic links. Also remembers whether each one is a directory.
#[derive(Debug, Default)]
struct Canonical {
    /// Each path asked for, its canonical form, whether it is a directory and whether it was canonical already.
    known: Vec<(PathBuf, PathBuf, bool, bool)>,
}

impl Canonical {
    /// The canonical form of `path`.
    fn get(&mut self, host: &dyn HostView, path: &Path) -> io::Result<PathBuf> {
        self.get_with_kind(host, path).map(|(canonical, _)| canonical)
    }

    /// The canonical form of `path` ([`HostView::canonicalize`]: one `openat2` when it is canonical already),
    /// and whether it is a directory.
    fn get_with_kind(&mut self, host: &dyn HostView, path: &Path) -> io::Result<(PathBuf, bool)> {
        if let Some((_, canonical, is_dir, _)) = self.known.iter().find(|(p, ..)| p == path) {
            return Ok((canonical.clone(), *is_dir));
        }
        let canonical: PathBuf = host.canonicalize(path)?.components().collect();
        let is_dir = host.lstat(&canonical)?.kind == Kind::Dir;
        let plain = canonical.as_os_str() == path.as_os_str();
        self.known.push((path.to_path_buf(), canonical.clone(), is_dir, plain));
        Ok((canonical, is_dir))
    }

    /// True when `path` was found canonical already (no symbolic link on the way), as far as it was asked for.
    fn was_plain(&self, path: &Path) -> bool {
        self.known.iter().any(|(p, _, _, plain)| p == path && *plain)
    }
}

/// True when one of the components of `path` is a symbolic link whose directory is beneath one of `roots`.
fn through_writable_symlink(
    host: &dyn HostView,
    path: &Path,
    roots: &[PathBuf],
    canonical: &mut Canonical,
) -> bool {
    if canonical.was_plain(path) {
        return false;
    }
    path.ancestors().filter(|p| !p.as_os_str().is_empty() && p.parent().is_some()).any(|p| {
        host.kind(p) == Some(Kind::Symlink)
            && p.parent()
                .and_then(|dir| canonical.get(host, dir).ok())
                .is_none_or(|dir| roots.iter().any(|root| dir.starts_with(root)))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::fake::FakeHost;

    fn policy(roots: &[&str], tmp: bool) -> SandboxPolicy {
        SandboxPolicy::WorkspaceWrite {
            writable_roots: roots.iter().map(PathBuf::from).collect(),
            network_access: false,
            exclude_slash_tmp: !tmp,
            exclude_tmpdir_env_var: false,
        }
    }

    #[test]
    fn roots_are_canonical_and_missing_refused_and_invalid_ones_said() {
        // $TMPDIR inside the workspace, replaced by a link to a directory outside every root; a configured root
        // that is a link in a directory no command can write is trusted.
        let host = FakeHost::new()
            .dir("/w")
            .dir("/victim")
            .dir("/real-cache")
            .link("/w/tmp", "/victim")
            .link("/cache", "/real-cache");
        let plan = plan_roots(
            &host,
            &policy(&["/cache", "/gone"], false),
            Path::new("/w"),
            Some(Path::new("/w/tmp")),
            &[],
        )
        .unwrap();
        assert_eq!(plan.roots, vec![PathBuf::from("/real-cache"), PathBuf::from("/w")]);
        assert_eq!(plan.refused, vec![PathBuf::from("/w/tmp")]);
        assert_eq!(
            plan.missing.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
            vec![PathBuf::from("/gone")]
        );
        assert_eq!(plan.spelled, vec![("/cache".into(), "/real-cache".into()), ("/w".into(), "/w".into())]);
        assert_eq!(plan.workspace, Ok(PathBuf::from("/w")));
        assert!(plan.writable.iter().any(|(r, c)| r.root == Path::new("/gone") && c.is_none()));
        // The platform's own roots come last, with the same read-only subpaths; none twice.
        let plan = plan_roots(
            &host,
            &policy(&[], false),
            Path::new("/w"),
            None,
            &["/real-cache".into(), "/w".into()],
        )
        .unwrap();
        assert_eq!(plan.roots, vec![PathBuf::from("/w"), PathBuf::from("/real-cache")]);
        assert!(plan.writable[1].0.read_only_subpaths.contains(&PathBuf::from("/real-cache/.uexec")));
        // A relative or missing working directory, or one that is a file, is said (Linux refuses it); a relative
        // root or one that is a file refuses the command.
        let host = host.file("/f");
        for cwd in ["rel", "/nope", "/f"] {
            let read_only = SandboxPolicy::ReadOnly { network_access: false };
            assert!(
                plan_roots(&host, &read_only, Path::new(cwd), None, &[]).unwrap().workspace.is_err(),
                "{cwd}"
            );
        }
        for root in ["rel", "/f"] {
            assert!(
                plan_roots(&host, &policy(&[root], false), Path::new("/w"), None, &[]).is_err(),
                "{root}"
            );
        }
    }
}
