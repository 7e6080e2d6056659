//! The facts behind the known-safe rule (`uexec_domain::known_safe`): which directories sandboxed commands can
//! write, and what the file system says about the paths that choose what a command runs.
//!
//! This is the engine's only file-system access besides checking the working directory: `realpath`-style
//! resolution, `lstat` of `.git` entries and `readlink`; never a file's contents. It runs on a blocking thread
//! with a deadline ([`KNOWN_SAFE_DEADLINE`]): a path that hangs (a dead network mount) makes the command not
//! known safe (a person is asked), and never blocks the server.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use uexec_domain::GitEntry;
use uexec_domain::SandboxPolicy;
use uexec_domain::command::is_known_safe_command;
use uexec_domain::known_safe::{DotGit, FsView, KnownSafeContext, NotKnownSafe, check_known_safe};

/// How long gathering the facts may take before the command counts as not known safe.
pub(crate) const KNOWN_SAFE_DEADLINE: Duration = Duration::from_secs(5);

/// How many symlinks or path components one resolution follows before it fails (closed).
const MAX_RESOLVE_STEPS: usize = 64;

/// The directories sandboxed commands of `policy` may write, as the policy names them: the writable roots
/// (workspace, configured roots, `/tmp`, `$TMPDIR`), plus `/dev/shm` with `/tmp` (the Linux sandbox adds it).
/// Empty for `read-only`, and for `danger-full-access`, where no command is confined: every command that can
/// write was approved by a person to run without a sandbox, so nothing it plants grants more than it had.
pub(crate) fn writable_dirs(policy: &SandboxPolicy, workspace: &Path, tmpdir: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        policy.writable_roots(workspace, tmpdir, |_| GitEntry::Absent).into_iter().map(|r| r.root).collect();
    if dirs.iter().any(|d| d == Path::new("/tmp")) {
        dirs.push(PathBuf::from("/dev/shm"));
    }
    dirs
}

/// Whether `argv` is known safe (`Ok`): its words are read-only and nothing it runs could have been chosen by a
/// file in `writable` (see `uexec_domain::known_safe`). Fails closed: an error or a missed deadline is "no".
pub(crate) async fn known_safe_verdict(
    argv: &[String],
    cwd: &Path,
    env: &[(OsString, OsString)],
    writable: Vec<PathBuf>,
) -> Result<(), NotKnownSafe> {
    if !is_known_safe_command(argv) {
        return Err(NotKnownSafe::NotReadOnly);
    }
    let (argv, cwd, env) = (argv.to_vec(), cwd.to_path_buf(), env.to_vec());
    let check = tokio::task::spawn_blocking(move || {
        let ctx = KnownSafeContext { writable_roots: &writable, cwd: &cwd, env: &env };
        check_known_safe(&argv, &ctx, &HostFs)
    });
    let unresolved = |what: String| NotKnownSafe::Unresolved { what, path: PathBuf::from(".") };
    match tokio::time::timeout(KNOWN_SAFE_DEADLINE, check).await {
        Ok(Ok(verdict)) => {
            if let Err(reason) = &verdict {
                tracing::info!(%reason, "a read-only command is not known safe");
            }
            verdict
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "checking whether a command is known safe failed; it is not");
            Err(unresolved(format!("the file-system checks failed: {error}")))
        }
        Err(_) => {
            tracing::warn!(
                "checking whether a command is known safe took longer than {KNOWN_SAFE_DEADLINE:?}; it is not"
            );
            Err(unresolved(format!("the file-system checks took longer than {KNOWN_SAFE_DEADLINE:?}")))
        }
    }
}

/// The host's file system, as the known-safe rule sees it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HostFs;

impl FsView for HostFs {
    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        resolve(path, 0)
    }

    fn dot_git(&self, dir: &Path) -> DotGit {
        match std::fs::symlink_metadata(dir.join(".git")) {
            Ok(meta) if meta.file_type().is_symlink() => DotGit::Symlink,
            Ok(meta) if meta.is_dir() => DotGit::Directory,
            Ok(_) => DotGit::Other,
            Err(error) if error.kind() == ErrorKind::NotFound => DotGit::Absent,
            // Anything unexpected is something the rule does not follow.
            Err(_) => DotGit::Other,
        }
    }
}

/// `path` (absolute) with its symlinks resolved as far as it exists; the missing tail is appended, and a
/// dangling symlink is followed to where it would lead (a directory created there later is what it names).
fn resolve(path: &Path, steps: usize) -> Option<PathBuf> {
    if steps > MAX_RESOLVE_STEPS || !path.is_absolute() {
        return None;
    }
    match std::fs::canonicalize(path) {
        Ok(resolved) => return Some(resolved),
        Err(error) if matches!(error.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {}
        Err(_) => return None,
    }
    let (parent, name) = (path.parent()?, path.file_name()?);
    let parent = resolve(parent, steps + 1)?;
    let here = parent.join(name);
    match std::fs::symlink_metadata(&here) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(&here).ok()?;
            resolve(&parent.join(target), steps + 1)
        }
        _ => Some(here),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "uexec-known-safe-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::canonicalize(dir).unwrap()
    }

    #[test]
    fn resolve_follows_links_through_missing_tails_and_dangling_links() {
        let dir = tempdir();
        std::fs::create_dir(dir.join("real")).unwrap();
        symlink(dir.join("real"), dir.join("link")).unwrap();
        symlink(dir.join("not-yet"), dir.join("dangling")).unwrap();
        symlink("loop", dir.join("loop")).unwrap();
        assert_eq!(HostFs.resolve(&dir.join("link/x/y")), Some(dir.join("real/x/y")));
        assert_eq!(HostFs.resolve(&dir.join("dangling/bin")), Some(dir.join("not-yet/bin")));
        assert_eq!(HostFs.resolve(&dir.join("real")), Some(dir.join("real")));
        assert_eq!(HostFs.resolve(&dir.join("loop/x")), None);
        assert_eq!(HostFs.resolve(Path::new("relative")), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn dot_git_is_seen_without_following_it() {
        let dir = tempdir();
        for name in ["d", "f", "l", "none"] {
            std::fs::create_dir(dir.join(name)).unwrap();
        }
        std::fs::create_dir(dir.join("d/.git")).unwrap();
        std::fs::write(dir.join("f/.git"), "gitdir: /x\n").unwrap();
        symlink(dir.join("d/.git"), dir.join("l/.git")).unwrap();
        assert_eq!(HostFs.dot_git(&dir.join("d")), DotGit::Directory);
        assert_eq!(HostFs.dot_git(&dir.join("f")), DotGit::Other);
        assert_eq!(HostFs.dot_git(&dir.join("l")), DotGit::Symlink);
        assert_eq!(HostFs.dot_git(&dir.join("none")), DotGit::Absent);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn writable_dirs_follow_the_policy() {
        let ws = Path::new("/w");
        let dirs = writable_dirs(&SandboxPolicy::default(), ws, Some(Path::new("/var/t")));
        assert_eq!(dirs, ["/w", "/tmp", "/var/t", "/dev/shm"].map(PathBuf::from));
        assert!(writable_dirs(&SandboxPolicy::ReadOnly { network_access: false }, ws, None).is_empty());
        assert!(writable_dirs(&SandboxPolicy::DangerFullAccess, ws, None).is_empty());
        let no_tmp = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![PathBuf::from("/data")],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        };
        assert_eq!(writable_dirs(&no_tmp, ws, Some(Path::new("/var/t"))), ["/data", "/w"].map(PathBuf::from));
    }
}
