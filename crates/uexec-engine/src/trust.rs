//! Which paths a sandboxed command could have written or redirected, and what that means for how a command's
//! shell starts (the I/O half of `uexec_domain::startup`).
//!
//! [`writable_root_holding`] is the one check of "could a sandboxed command have planted this": the engine
//! uses it for the shell's startup files, the `uexec` binary for its config file and its audit log.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use uexec_domain::SandboxPermissions;
use uexec_domain::command::is_known_safe_command;
use uexec_domain::startup::{ShellStart, StartInput, possible_writable_roots, shell_start, startup_files};

use crate::config::EngineConfig;

/// Where a path meets a writable root: the root, and the place strictly inside it that the path's lookup
/// passes through (the path itself, a symlink on the way, or a directory above it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InWritableRoot {
    /// The writable root.
    pub root: PathBuf,
    /// The place inside it.
    pub location: PathBuf,
}

impl InWritableRoot {
    /// A sentence fragment for error messages.
    pub fn describe(&self) -> String {
        format!(
            "its lookup passes through {}, which lies in the writable root {}",
            self.location.display(),
            self.root.display()
        )
    }
}

/// The writable root (of `roots`) that `path` lies in, if any.
///
/// Every place the lookup of the absolute `path` passes through is compared with every root, in both the
/// root's given and its canonical form: each component as it is reached (so a symlink or a directory inside a
/// root counts even when it points elsewhere), each symlink's target, and the final location. A place strictly
/// inside a root is writable by sandboxed commands; the root itself is not (its entry lives in its parent).
/// Only `readlink(2)` and `realpath(3)`-like lookups are made: no file is opened, so a planted FIFO or device
/// cannot block the caller.
pub fn writable_root_holding(path: &Path, roots: &[PathBuf]) -> Option<InWritableRoot> {
    let roots: Vec<PathBuf> = roots
        .iter()
        .flat_map(|root| [root.clone(), std::fs::canonicalize(root).unwrap_or_else(|_| root.clone())])
        .collect();
    lookup_locations(path).into_iter().find_map(|location| {
        roots
            .iter()
            .find(|root| location != **root && location.starts_with(root))
            .map(|root| InWritableRoot { root: root.clone(), location: location.clone() })
    })
}

/// One step of a path lookup.
enum Step {
    Root,
    Parent,
    Name(OsString),
}

fn steps(path: &Path) -> Vec<Step> {
    path.components()
        .filter_map(|c| match c {
            Component::RootDir | Component::Prefix(_) => Some(Step::Root),
            Component::CurDir => None,
            Component::ParentDir => Some(Step::Parent),
            Component::Normal(name) => Some(Step::Name(name.to_owned())),
        })
        .collect()
}

/// The most symlinks a lookup follows, as Linux does.
const MAX_SYMLINK_HOPS: usize = 40;

/// Every location the lookup of the absolute `path` passes through, following symlinks one hop at a time (at
/// most [`MAX_SYMLINK_HOPS`]); components that do not exist are joined as they are.
pub(crate) fn lookup_locations(path: &Path) -> Vec<PathBuf> {
    let mut todo: VecDeque<Step> = steps(path).into();
    let mut current = PathBuf::from("/");
    let mut locations = Vec::new();
    let mut hops = 0;
    while let Some(step) = todo.pop_front() {
        match step {
            Step::Root => current = PathBuf::from("/"),
            Step::Parent => {
                current.pop();
            }
            Step::Name(name) => {
                let next = current.join(name);
                locations.push(next.clone());
                match std::fs::read_link(&next) {
                    Ok(target) if hops < MAX_SYMLINK_HOPS => {
                        hops += 1;
                        for step in steps(&target).into_iter().rev() {
                            todo.push_front(step);
                        }
                    }
                    _ => current = next,
                }
            }
        }
    }
    locations.push(current);
    locations
}

/// How the shell of a command with environment `env` starts under `config` (the rule of
/// `uexec_domain::startup`): the startup files are checked against the possible writable roots.
pub(crate) fn decide_shell_start(
    config: &EngineConfig,
    argv: &[String],
    login_requested: bool,
    permissions: SandboxPermissions,
    env: &[(OsString, OsString)],
) -> ShellStart {
    let var = |name: &str| env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let tmpdir = crate::placement::tmpdir_of(env);
    let roots = possible_writable_roots(&config.sandbox_policy, &config.cwd, tmpdir.as_deref());
    let writable = startup_files(var).into_iter().find_map(|file| writable_root_holding(&file, &roots));
    if let Some(found) = &writable {
        tracing::debug!(root = %found.root.display(), location = %found.location.display(), "startup files writable");
    }
    shell_start(&StartInput {
        login_requested,
        startup_files_writable: writable.is_some(),
        full_access: config.sandbox_policy.is_unrestricted(),
        permissions,
        approval_policy: config.approval_policy,
        known_safe: is_known_safe_command(argv),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn lookups_pass_through_every_symlink_and_directory() {
        let dir = tempfile_dir();
        let base = std::fs::canonicalize(&dir).unwrap();
        std::fs::create_dir(base.join("a")).unwrap();
        std::os::unix::fs::symlink("a", base.join("rel")).unwrap();
        std::os::unix::fs::symlink(base.join("rel"), base.join("abs")).unwrap();
        let locations = lookup_locations(&base.join("abs/f"));
        for expected in [base.join("abs"), base.join("rel"), base.join("a"), base.join("a/f")] {
            assert!(locations.contains(&expected), "{expected:?} not in {locations:?}");
        }
        assert_eq!(locations.last(), Some(&base.join("a/f")));
        std::os::unix::fs::symlink(base.join("loop"), base.join("loop")).unwrap();
        let bound = (MAX_SYMLINK_HOPS + 1) * (base.components().count() + 1);
        assert!(lookup_locations(&base.join("loop")).len() <= bound, "a symlink loop ends");
        let root = base.join("a");
        assert_eq!(
            writable_root_holding(&base.join("abs/f"), std::slice::from_ref(&root)),
            Some(InWritableRoot { root: root.clone(), location: base.join("a/f") })
        );
        assert_eq!(writable_root_holding(&root, std::slice::from_ref(&root)), None, "a root is not inside");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A fresh directory under /var/tmp (outside every default writable root); the engine has no tempfile dev
    /// dependency.
    fn tempfile_dir() -> PathBuf {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = PathBuf::from(format!("/var/tmp/uexec-trust-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        dir
    }
}
