//! The I/O half of `uexec_domain::trust`: the facts behind "could a sandboxed command have written or chosen
//! this?", gathered once per call, and the lookups of the paths asked about.
//!
//! [`gather_writes`] names every directory sandboxed commands may have written (the domain's list, each root
//! also in its canonical form); [`writable_by_sandbox`] looks a path up (`readlink` only, never an open) and asks
//! the domain. The engine asks for the shell's startup files, the login snapshot's directory and shell, the
//! known-safe rule and every command it places outside the sandbox; the `uexec` binary for its config file,
//! audit log, token file and patch program.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use uexec_domain::SandboxPermissions;
use uexec_domain::SandboxPolicy;
use uexec_domain::command::ParsedCommand;
use uexec_domain::startup::{ShellStart, StartInput, shell_start, startup_files};
use uexec_domain::trust::{InWritableRoot, SandboxWrites, WritableFacts};

use crate::config::EngineConfig;

/// Every directory sandboxed commands may have written under `policy` with `workspace`, `$TMPDIR` = `tmpdir`
/// and the sandbox's own directories `sandbox_dirs`, each root also in its canonical form.
pub fn gather_writes(
    policy: &SandboxPolicy,
    workspace: &Path,
    tmpdir: Option<&Path>,
    sandbox_dirs: &[PathBuf],
) -> SandboxWrites {
    let canonical = |dir: &Path| std::fs::canonicalize(dir).ok();
    let facts = WritableFacts { policy, workspace, tmpdir, sandbox_dirs };
    let writes = SandboxWrites::gather(&facts, canonical);
    let repositories = worktree_repositories(&facts.directories(), writes.roots());
    if repositories.is_empty() {
        return writes;
    }
    let mut dirs = sandbox_dirs.to_vec();
    dirs.extend(repositories);
    SandboxWrites::gather(&WritableFacts { sandbox_dirs: &dirs, ..facts }, canonical)
}

/// The repository of each of `dirs` that is a linked worktree whose repository the sandbox may make writable
/// for it: its `.git` file names `<repository>/worktrees/<id>` and the rule of both sandboxes,
/// `uexec_domain::gitdir::worktree_grant`, allows it (that directory's `commondir` names the repository and
/// its `gitdir` file, outside every root, links back to this directory's `.git`). The sandboxes also require
/// `HEAD`, `objects/` and no symlink on the way, which are not checked here: a superset of what they grant, so
/// that git run outside the sandbox in the main work tree is checked like git in the workspace. A `.git` file
/// a command planted, naming another directory's worktree (or `/usr/worktrees/x`), adds nothing. One `lstat`
/// per directory without a `.git` file; each file is read as the sandbox reads a `.git` file (regular, small,
/// not followed, without blocking). `roots` are the roots gathered from `dirs`, given and canonical.
fn worktree_repositories(dirs: &[PathBuf], roots: &[PathBuf]) -> Vec<PathBuf> {
    use uexec_domain::gitdir::{MAX_GIT_FILE_BYTES, parse_git_file, worktree_grant};
    let read = |path: &Path| crate::os::read_small_regular_file(path, MAX_GIT_FILE_BYTES);
    dirs.iter()
        .filter(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok_and(|m| m.is_file()))
        .filter_map(|dir| {
            let root = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            let gitdir = parse_git_file(&root, &read(&dir.join(".git"))?).ok()?;
            let commondir = read(&gitdir.join("commondir"))?;
            let back_link = read(&gitdir.join("gitdir"))?;
            worktree_grant(&root, &gitdir, &commondir, &back_link, roots).ok()
        })
        .collect()
}

/// [`gather_writes`] for a command of this engine with environment `env` (its `$TMPDIR`, read here once).
pub(crate) fn writes_for(config: &EngineConfig, env: &[(OsString, OsString)]) -> SandboxWrites {
    let tmpdir = crate::placement::tmpdir_of(env);
    gather_writes(&config.sandbox_policy, &config.cwd, tmpdir.as_deref(), &config.sandbox_dirs())
}

/// Where the lookup of the absolute `path` meets a root of `writes`, if it does: every place the lookup passes
/// through is compared (each component as it is reached, so a symlink or a directory inside a root counts even
/// when it points elsewhere; each symlink's target; the final location). Only `readlink(2)` is called: no file
/// is opened, so a planted FIFO or device cannot block the caller.
pub fn writable_by_sandbox(path: &Path, writes: &SandboxWrites) -> Option<InWritableRoot> {
    writes.holding(&lookup_locations(path))
}

/// The shell a command starts, when a sandboxed command could have written it: named by a path, that path's
/// lookup; named bare, the first `PATH` directory of `env` that has it (a `PATH` directory in a writable root
/// holds what a sandboxed command put there).
pub(crate) fn shell_in_writable_root(
    shell: &str,
    env: &[(OsString, OsString)],
    writes: &SandboxWrites,
) -> Option<InWritableRoot> {
    if shell.contains('/') {
        return writable_by_sandbox(Path::new(shell), writes);
    }
    let path = env.iter().rev().find(|(n, _)| n == "PATH").map(|(_, v)| v.clone())?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(shell))
        .find(|candidate| candidate.is_absolute() && std::fs::metadata(candidate).is_ok_and(|m| !m.is_dir()))
        .and_then(|found| writable_by_sandbox(&found, writes))
}

/// The repository a command in `cwd` works in, as git discovers it: the nearest directory at or above `cwd`
/// with a `.git` entry (`lstat`, not followed). A prefix approval holds for this repository only.
pub(crate) fn repository_of(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors().find(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok()).map(Path::to_path_buf)
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
/// `uexec_domain::startup`): the startup files are checked against `writes`.
pub(crate) fn decide_shell_start(
    config: &EngineConfig,
    writes: &SandboxWrites,
    command: &ParsedCommand,
    login_requested: bool,
    permissions: SandboxPermissions,
    env: &[(OsString, OsString)],
) -> ShellStart {
    let var = |name: &str| env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let writable = startup_files(var).into_iter().find_map(|file| writable_by_sandbox(&file, writes));
    if let Some(found) = &writable {
        tracing::debug!(root = %found.root.display(), location = %found.location.display(), "startup files writable");
    }
    shell_start(&StartInput {
        login_requested,
        startup_files_writable: writable.is_some(),
        full_access: config.sandbox_policy.is_unrestricted(),
        permissions,
        approval_policy: config.approval_policy,
        known_safe: command.is_read_only(),
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
        let writes = SandboxWrites::from_roots(vec![root.clone()]);
        assert_eq!(
            writable_by_sandbox(&base.join("abs/f"), &writes),
            Some(InWritableRoot { root: root.clone(), location: base.join("a/f") })
        );
        assert_eq!(writable_by_sandbox(&root, &writes), None, "a root is not inside");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_repository_of_a_linked_worktree_counts_as_written_and_its_work_tree_does_not() {
        let base = std::fs::canonicalize(tempfile_dir()).unwrap();
        let ws = base.join("wt");
        std::fs::create_dir(&ws).unwrap();
        let policy = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        };
        let hook = base.join("main/.git/hooks/post-checkout");
        let plain = gather_writes(&policy, &ws, None, &[]);
        assert_eq!(writable_by_sandbox(&hook, &plain), None, "no .git file: the repository is not counted");
        let admin = base.join("main/.git/worktrees/wt");
        std::fs::create_dir_all(&admin).unwrap();
        std::fs::write(admin.join("commondir"), "../..\n").unwrap();
        std::fs::write(ws.join(".git"), "gitdir: ../main/.git/worktrees/wt\n").unwrap();
        // The repository lists another work tree: a planted `.git` naming it counts for nothing.
        std::fs::write(admin.join("gitdir"), format!("{}\n", base.join("elsewhere/.git").display())).unwrap();
        assert_eq!(gather_writes(&policy, &ws, None, &[]), plain, "not this directory's worktree");
        std::fs::write(admin.join("gitdir"), format!("{}\n", ws.join(".git").display())).unwrap();
        let writes = gather_writes(&policy, &ws, None, &[]);
        let found = writable_by_sandbox(&hook, &writes).expect("counted");
        assert_eq!(found.root, base.join("main/.git"));
        assert_eq!(writable_by_sandbox(&base.join("main/a.txt"), &writes), None, "the main work tree is not");
        // A `.git` naming anything but `<repository>/worktrees/<id>` adds nothing.
        std::fs::write(ws.join(".git"), "gitdir: ../main/.git/modules/wt\n").unwrap();
        assert_eq!(gather_writes(&policy, &ws, None, &[]), plain);
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
