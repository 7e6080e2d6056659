//! The facts behind the known-safe rule and the planted-program analysis (`uexec_domain::known_safe`): what the
//! file system says about the paths that choose what a command runs.
//!
//! This is the engine's only file-system access besides checking the working directory: `realpath`-style
//! resolution, `lstat` of `.git` entries and `readlink`; never a file's contents. It runs on a blocking thread
//! with a deadline ([`KNOWN_SAFE_DEADLINE`]): a path that hangs (a dead network mount) makes the command not
//! known safe (a person is asked), and never blocks the server.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use uexec_domain::command::ParsedCommand;
use uexec_domain::known_safe::{
    DotGit, FsView, KnownSafeContext, NotKnownSafe, check_known_safe, check_planted,
    without_plantable_entries,
};
use uexec_domain::trust::SandboxWrites;

/// How long gathering the facts may take before the command counts as not known safe.
pub(crate) const KNOWN_SAFE_DEADLINE: Duration = Duration::from_secs(5);

/// How many symlinks or path components one resolution follows before it fails (closed).
const MAX_RESOLVE_STEPS: usize = 64;

/// Which analysis of `uexec_domain::known_safe` to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Analysis {
    /// Read-only words, and nothing planted ([`check_known_safe`]).
    KnownSafe,
    /// Nothing planted, whatever the words ([`check_planted`]): for a command placed outside the sandbox.
    Planted,
}

/// The verdict of `analysis` on `command` run in `cwd` with `env`, given where sandboxed commands may have written
/// (`writes`). Fails closed: an error or a missed deadline is "no".
pub(crate) async fn verdict(
    analysis: Analysis,
    command: &ParsedCommand,
    cwd: &Path,
    env: &[(OsString, OsString)],
    writes: &SandboxWrites,
) -> Result<(), NotKnownSafe> {
    if analysis == Analysis::KnownSafe && !command.is_read_only() {
        return Err(NotKnownSafe::NotReadOnly);
    }
    let (command, cwd, env, writes) = (command.clone(), cwd.to_path_buf(), env.to_vec(), writes.clone());
    let check = tokio::task::spawn_blocking(move || {
        let ctx = KnownSafeContext { writes: &writes, cwd: &cwd, env: &env };
        match analysis {
            Analysis::KnownSafe => check_known_safe(&command, &ctx, &HostFs),
            Analysis::Planted => check_planted(&command, &ctx, &HostFs),
        }
    });
    let unresolved = |what: String| NotKnownSafe::Unresolved { what, path: PathBuf::from(".") };
    match tokio::time::timeout(KNOWN_SAFE_DEADLINE, check).await {
        Ok(Ok(verdict)) => {
            if let Err(reason) = &verdict
                && *reason != NotKnownSafe::NotReadOnly
            {
                tracing::info!(%reason, ?analysis, "something the command runs could have been planted");
            }
            verdict
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "checking what a command runs failed; it counts as planted");
            Err(unresolved(format!("the file-system checks failed: {error}")))
        }
        Err(_) => {
            tracing::warn!("checking what a command runs took longer than {KNOWN_SAFE_DEADLINE:?}");
            Err(unresolved(format!("the file-system checks took longer than {KNOWN_SAFE_DEADLINE:?}")))
        }
    }
}

/// `env` for a command placed outside the sandbox ([`without_plantable_entries`]: no `PATH` directory or
/// loader entry that a sandboxed command could have written), with one line per removed entry. On a missed
/// deadline every `PATH` and loader variable is replaced by the system's (fails closed).
pub(crate) async fn outside_env(
    cwd: &Path,
    env: &[(OsString, OsString)],
    writes: &SandboxWrites,
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let (cwd2, env2, writes) = (cwd.to_path_buf(), env.to_vec(), writes.clone());
    let work = tokio::task::spawn_blocking(move || without_plantable_entries(&env2, &cwd2, &writes, &HostFs));
    match tokio::time::timeout(KNOWN_SAFE_DEADLINE, work).await {
        Ok(Ok(result)) => result,
        _ => {
            tracing::warn!(
                "checking the environment of a command outside the sandbox failed; it gets the system's"
            );
            let loaders =
                ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH", "BASH_ENV", "ENV"];
            let mut out: Vec<(OsString, OsString)> =
                env.iter().filter(|(name, _)| !loaders.iter().any(|l| name == l)).cloned().collect();
            out.push((OsString::from("PATH"), OsString::from(SYSTEM_PATH)));
            (
                out,
                vec![format!(
                    "PATH and the loader variables (replaced by PATH={SYSTEM_PATH}: the checks failed)"
                )],
            )
        }
    }
}

/// The `PATH` of a command outside the sandbox whose environment could not be checked.
const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The host's file system, as the rule sees it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HostFs;

impl FsView for HostFs {
    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        resolve(path, 0)
    }

    fn lookup(&self, path: &Path) -> Option<Vec<PathBuf>> {
        if !path.is_absolute() {
            return None;
        }
        let mut places = crate::trust::lookup_locations(path);
        // The final place, as the resolver sees it (a missing tail appended, a dangling link followed).
        places.push(resolve(path, 0)?);
        Some(places)
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

    fn is_program(&self, path: &Path) -> bool {
        // `stat` follows links as exec does; nothing is opened.
        std::fs::metadata(path).is_ok_and(|meta| !meta.is_dir())
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
}
