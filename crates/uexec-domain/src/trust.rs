//! The one answer to "could a sandboxed command have written or chosen this?"
//!
//! Everything that trusts a path asks here: the known-safe rule (`PATH`, `LD_*`, git's repository and config),
//! the shell's startup files (`startup`), the login snapshot's shell and directory, a command placed outside
//! the sandbox (escalation, retry, prefix approval: its program, its `PATH` and loader variables), the app's
//! config file, audit log, token file and patch program. Two values make the answer:
//!
//! - [`SandboxWrites`]: every directory a sandboxed command of uexec may have written, gathered once per call by
//!   [`SandboxWrites::gather`] from one set of facts ([`WritableFacts`]: the policy, the workspace, `$TMPDIR`
//!   resolved once, and the places the sandbox adds). It is conservative on purpose: a file written under
//!   `workspace-write` yesterday is still there under `read-only` today, so `/tmp`, `/dev/shm`, `$TMPDIR` and
//!   the workspace count whatever the current mode, and so do the configured roots and the sandbox's own
//!   directories (package cache, copy-on-write layers). Each root counts in the form it was given and in its
//!   canonical form (the caller resolves it: `/tmp` may be a symlink to `/private/tmp`).
//! - The lookup of the path: every place the kernel passes through to reach it (each component as it is
//!   reached, each symlink and its target, the final location), which the caller gathers with `readlink` only
//!   (no file is opened: a planted FIFO cannot block it).
//!
//! [`SandboxWrites::holding`] is then pure path arithmetic: the path is "plantable" when any place of its lookup
//! lies strictly inside a root (a root's own entry lives in its parent, which the sandbox does not let a command
//! change). The sandbox's read-only subpaths (`.git`, `.uexec`) do not make a path trusted: they protect only
//! from commands started after they existed.

use std::path::{Path, PathBuf};

use crate::policy::SandboxPolicy;

/// POSIX shared memory: a tmpfs as shared as `/tmp`, which the Linux sandbox makes writable exactly when `/tmp`
/// is (`shm_open`, `sem_open`).
pub const SHARED_MEMORY_DIR: &str = "/dev/shm";

/// The facts [`SandboxWrites`] is gathered from, named once per call.
#[derive(Debug, Clone, Copy)]
pub struct WritableFacts<'a> {
    /// The sandbox policy in force.
    pub policy: &'a SandboxPolicy,
    /// The workspace: the writable "cwd" root (the server's directory, never a command's `workdir`).
    pub workspace: &'a Path,
    /// `$TMPDIR` as the command sees it, resolved once by the caller (`None`: unset, empty or relative).
    pub tmpdir: Option<&'a Path>,
    /// Directories the sandbox adds beyond the policy's roots: its package cache, its copy-on-write layers.
    pub sandbox_dirs: &'a [PathBuf],
}

impl WritableFacts<'_> {
    /// Every directory a sandboxed command may have written, as named (not resolved), without duplicates: the
    /// policy's configured roots, the workspace, `/tmp`, [`SHARED_MEMORY_DIR`], `$TMPDIR` and the sandbox's
    /// own directories. The same list whatever the current mode (see the module documentation).
    pub fn directories(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = match self.policy {
            SandboxPolicy::WorkspaceWrite { writable_roots, .. } => writable_roots.clone(),
            _ => Vec::new(),
        };
        dirs.push(self.workspace.to_path_buf());
        dirs.push(PathBuf::from("/tmp"));
        dirs.push(PathBuf::from(SHARED_MEMORY_DIR));
        if let Some(tmpdir) = self.tmpdir.filter(|t| t.is_absolute()) {
            dirs.push(tmpdir.to_path_buf());
        }
        dirs.extend(self.sandbox_dirs.iter().filter(|d| d.is_absolute()).cloned());
        let mut unique: Vec<PathBuf> = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let dir: PathBuf = dir.components().collect();
            if !unique.contains(&dir) {
                unique.push(dir);
            }
        }
        unique
    }
}

/// Every directory sandboxed commands may have written, each in its given and its canonical form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxWrites {
    roots: Vec<PathBuf>,
}

impl SandboxWrites {
    /// The roots of `facts`, each also in the canonical form `canonical` gives (the caller's `realpath`;
    /// `None` when it cannot be resolved: the given form alone counts).
    pub fn gather(facts: &WritableFacts<'_>, canonical: impl Fn(&Path) -> Option<PathBuf>) -> SandboxWrites {
        let mut roots: Vec<PathBuf> = Vec::new();
        for dir in facts.directories() {
            let resolved = canonical(&dir);
            for root in std::iter::once(dir).chain(resolved) {
                if !roots.contains(&root) {
                    roots.push(root);
                }
            }
        }
        SandboxWrites { roots }
    }

    /// Exactly these roots (tests, and callers that gathered them another way).
    pub fn from_roots(roots: Vec<PathBuf>) -> SandboxWrites {
        SandboxWrites { roots }
    }

    /// The roots, given and canonical forms.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Where the lookup of a path meets a root: the first place of `lookup` (every place the lookup passes
    /// through, in order, as the caller gathered it) that lies strictly inside a root. `None`: no sandboxed
    /// command could have written or redirected the path.
    pub fn holding(&self, lookup: &[PathBuf]) -> Option<InWritableRoot> {
        lookup.iter().find_map(|location| {
            self.roots
                .iter()
                .find(|root| is_strictly_inside(location, root))
                .map(|root| InWritableRoot { root: root.clone(), location: location.clone() })
        })
    }

    /// Where the lookup of a directory whose entries matter (a `PATH` directory, a work tree) meets a root:
    /// as [`SandboxWrites::holding`], and the directory itself (the last place of `lookup`) also when it is a
    /// root (a sandboxed command writes the entries of a root).
    pub fn holding_entries(&self, lookup: &[PathBuf]) -> Option<InWritableRoot> {
        self.holding(lookup).or_else(|| {
            let last: PathBuf = lookup.last()?.components().collect();
            self.roots
                .iter()
                .find(|root| root.components().collect::<PathBuf>() == last)
                .map(|root| InWritableRoot { root: root.clone(), location: last.clone() })
        })
    }

    /// The root that the directory `dir` (resolved) contains or is, if any: a tree holding a writable root
    /// holds files a sandboxed command wrote (a repository whose work tree contains `/tmp`).
    pub fn contained_in(&self, dir: &Path) -> Option<&Path> {
        self.roots.iter().find(|root| root.starts_with(dir)).map(PathBuf::as_path)
    }
}

/// `location` lies strictly inside `root` (component-wise, `.` ignored).
fn is_strictly_inside(location: &Path, root: &Path) -> bool {
    let location: PathBuf = location.components().collect();
    let root: PathBuf = root.components().collect();
    location != root && location.starts_with(&root)
}

/// Where a path meets a writable root: the root, and the place strictly inside it that the path's lookup
/// passes through (the path itself, a symlink on the way, or a directory above it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InWritableRoot {
    /// The writable root.
    pub root: PathBuf,
    /// The place inside it.
    pub location: PathBuf,
}

impl InWritableRoot {
    /// A sentence fragment for messages: "its lookup passes through X, which lies in the writable root R".
    pub fn describe(&self) -> String {
        format!(
            "its lookup passes through {}, which lies in the writable root {}",
            crate::question::escape_path(&self.location),
            crate::question::escape_path(&self.root)
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn facts<'a>(
        policy: &'a SandboxPolicy,
        tmpdir: Option<&'a Path>,
        extra: &'a [PathBuf],
    ) -> WritableFacts<'a> {
        WritableFacts { policy, workspace: Path::new("/w"), tmpdir, sandbox_dirs: extra }
    }

    #[test]
    fn the_same_directories_whatever_the_mode() {
        let extra = [PathBuf::from("/state/cache"), PathBuf::from("relative")];
        let tmp = Some(Path::new("/var/t"));
        let expected: Vec<PathBuf> =
            ["/w", "/tmp", "/dev/shm", "/var/t", "/state/cache"].iter().map(PathBuf::from).collect();
        for policy in [SandboxPolicy::ReadOnly { network_access: false }, SandboxPolicy::DangerFullAccess] {
            assert_eq!(facts(&policy, tmp, &extra).directories(), expected, "{policy:?}");
        }
        let excluded = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![PathBuf::from("/data"), PathBuf::from("/w/")],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        };
        let mut with_data = vec![PathBuf::from("/data")];
        with_data.extend(expected);
        // Excluding /tmp now does not make what an earlier command wrote there trusted.
        assert_eq!(facts(&excluded, tmp, &extra).directories(), with_data);
        assert!(!facts(&excluded, Some(Path::new("rel")), &[]).directories().contains(&PathBuf::from("rel")));
    }

    #[test]
    fn roots_count_in_both_forms_and_only_strictly_inside() {
        let policy = SandboxPolicy::ReadOnly { network_access: false };
        let writes = SandboxWrites::gather(&facts(&policy, None, &[]), |dir| {
            (dir == Path::new("/tmp")).then(|| PathBuf::from("/private/tmp"))
        });
        assert!(writes.roots().contains(&PathBuf::from("/private/tmp")));
        let found = writes.holding(&[PathBuf::from("/usr"), PathBuf::from("/private/tmp/x")]).unwrap();
        assert_eq!(found.root, PathBuf::from("/private/tmp"));
        assert_eq!(found.location, PathBuf::from("/private/tmp/x"));
        assert!(found.describe().contains("/private/tmp/x"));
        assert_eq!(writes.holding(&[PathBuf::from("/tmp")]), None, "a root's own entry is its parent's");
        let entries = writes.holding_entries(&[PathBuf::from("/tmp")]).unwrap();
        assert_eq!(entries.location, PathBuf::from("/tmp"), "but its entries are the sandbox's");
        assert_eq!(writes.holding_entries(&[PathBuf::from("/usr/bin")]), None);
        assert_eq!(writes.holding(&[PathBuf::from("/tmpfoo/x")]), None, "component-wise, not by text");
        assert_eq!(writes.contained_in(Path::new("/")), Some(Path::new("/w")));
        assert_eq!(writes.contained_in(Path::new("/usr")), None);
    }

    proptest! {
        /// Whatever the lookup passes through, it is plantable exactly when one of its places lies strictly
        /// inside a root; the first such place is named.
        #[test]
        fn holding_is_the_first_place_inside_a_root(
            places in proptest::collection::vec(
                proptest::sample::select(vec!["/usr/bin", "/w", "/w/x", "/tmp/a/b", "/home/u", "/dev/shm/s"]),
                0..6,
            ),
        ) {
            let policy = SandboxPolicy::ReadOnly { network_access: false };
            let writes = SandboxWrites::gather(&facts(&policy, None, &[]), |_| None);
            let lookup: Vec<PathBuf> = places.iter().map(PathBuf::from).collect();
            let inside = |p: &&PathBuf| ["/w/x", "/tmp/a/b", "/dev/shm/s"].iter().any(|i| *p == Path::new(i));
            let expected = lookup.iter().find(inside).cloned();
            prop_assert_eq!(writes.holding(&lookup).map(|f| f.location), expected);
        }
    }
}
