//! Where uexec keeps its own state (the state directory, the control sockets' and tokens' directories, the
//! sandbox's record of its placeholders, its package caches), and what of it exists before any command starts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use uexec_domain::trust::SandboxWrites;
use uexec_engine::{gather_writes, writable_by_sandbox};

use super::{ProcessContext, Settings};

/// `$XDG_STATE_HOME/uexec` (when absolute), else `$HOME/.local/state/uexec`.
pub(crate) fn state_dir(get_env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    get_env("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            get_env("HOME").map(PathBuf::from).filter(|p| p.is_absolute()).map(|h| h.join(".local/state"))
        })
        .map(|base| base.join("uexec"))
}

/// The person's cargo home: `$CARGO_HOME` when set and absolute, else `$HOME/.cargo` (as cargo finds it).
pub fn cargo_home(get_env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    get_env("CARGO_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| get_env("HOME").map(PathBuf::from).filter(|h| h.is_absolute()).map(|h| h.join(".cargo")))
}

/// The directories under the state directory `state` that sandboxed commands write: the package cache and the
/// copy-on-write views' upper layers (`uexec_domain::trust` counts them as written by sandboxed commands).
/// The Linux sandbox's record directory for `settings`: the first of `<state>/sandbox-leftovers` and
/// `$XDG_RUNTIME_DIR/uexec/sandbox-leftovers` ([`leftovers_dirs`], both hidden from sandboxed commands) that no
/// sandboxed command could write or redirect (the state directory lies in the workspace when the workspace is
/// the home), made private as the control socket's is. None fits: none (warned), and the sandbox removes no
/// placeholder (a record a command wrote could name what to remove) and keeps no objects aside.
pub(crate) fn sandbox_leftovers(settings: &Settings) -> Option<PathBuf> {
    let dirs = leftovers_dirs(&settings.control_dirs);
    let mut refused = Vec::new();
    match private_home(&dirs, &server_file_roots(settings), "the sandbox's record", &mut refused) {
        Ok(Some(dir)) => return Some(dir),
        Ok(None) => {}
        Err(error) => refused.push(format!("{error:#}")),
    }
    tracing::warn!(
        "the sandbox's placeholders stay in the workspace: no place for its record is safe from sandboxed commands ({})",
        refused.join("; ")
    );
    None
}

/// Where the sandbox's record may go, best first: beside the state directory's control directory, then beside
/// the runtime directory's (`control_dirs` lists the runtime one first).
pub(crate) fn leftovers_dirs(control_dirs: &[PathBuf]) -> Vec<PathBuf> {
    control_dirs
        .iter()
        .rev()
        .filter_map(|dir| dir.parent())
        .map(|dir| dir.join("sandbox-leftovers"))
        .collect()
}

/// `<state>/sandbox-leftovers`: the Linux sandbox's record of the placeholders it made and its store of kept loose
/// objects (`uexec_sandbox_linux::LinuxSandbox::with_state_dir`), hidden from sandboxed commands.
pub(crate) fn sandbox_leftovers_dir(state: &Path) -> PathBuf {
    state.join("sandbox-leftovers")
}

pub(crate) fn sandbox_state_dirs(state: &Path) -> [PathBuf; 2] {
    [state.join("sandbox-cache"), state.join("sandbox-overlays")]
}

/// `<state>/sandbox-cache`, created (mode 0700) and canonical; `None`, with a warning, when it cannot be made.
pub(crate) fn sandbox_cache_root(state: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = state.join("sandbox-cache");
    let made = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir);
    match made.and_then(|()| std::fs::canonicalize(&dir)) {
        Ok(dir) => Some(dir),
        Err(error) => {
            tracing::warn!(dir = %dir.display(), %error, "no sandbox package cache: the directory cannot be made");
            None
        }
    }
}

/// Where the bearer tokens uexec generates for listening servers started without a token file may be kept, in
/// order: `$XDG_RUNTIME_DIR/uexec/listen-tokens` (when absolute: the person's private runtime directory, gone at
/// logout), then `<state_dir>/listen-tokens`. Each is made mode 0700 when used, each file mode 0600, and every
/// uexec that shares them hides them from its sandboxed commands.
pub fn generated_token_dirs(
    get_env: &dyn Fn(&str) -> Option<OsString>,
    state_dir: Option<&Path>,
) -> Vec<PathBuf> {
    let runtime = get_env("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| p.is_absolute());
    runtime
        .map(|dir| dir.join("uexec"))
        .into_iter()
        .chain(state_dir.map(Path::to_path_buf))
        .map(|dir| dir.join("listen-tokens"))
        .collect()
}

/// Where the control sockets of this user's servers are (`crate::control`), in order: `$XDG_RUNTIME_DIR/uexec/control`
/// (when absolute), then `<state_dir>/control`. A server uses the first outside every possible writable root
/// ([`control_home`]); `uexec sessions` looks in each; every uexec hides them all from its sandboxed commands.
pub fn control_dirs(get_env: &dyn Fn(&str) -> Option<OsString>, state_dir: Option<&Path>) -> Vec<PathBuf> {
    let runtime = get_env("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| p.is_absolute());
    runtime
        .map(|dir| dir.join("uexec"))
        .into_iter()
        .chain(state_dir.map(Path::to_path_buf))
        .map(|dir| dir.join("control"))
        .collect()
}

/// [`control_dirs`] from the process environment alone (the commands that only read them: `uexec sessions`).
pub fn control_dirs_of(ctx: &ProcessContext) -> Vec<PathBuf> {
    control_dirs(&ctx.env, state_dir(&ctx.env).as_deref())
}

/// The directory this server's control socket goes to: the first of [`Settings::control_dirs`] outside every
/// possible writable root (a sandboxed command there could plant a socket that a person's `uexec attach
/// --write` would type into), created mode 0700 (its parent too, when uexec makes it), owned by this user and
/// canonical. An error says why none fits.
pub fn control_home(settings: &Settings) -> Result<PathBuf> {
    let roots = server_file_roots(settings);
    let mut refused = Vec::new();
    if let Some(home) =
        private_home(&settings.control_dirs, &roots, "this server's control socket", &mut refused)?
    {
        return Ok(home);
    }
    if refused.is_empty() {
        bail!("no runtime or state directory is known ($XDG_RUNTIME_DIR, $XDG_STATE_HOME, $HOME)");
    }
    bail!(
        "sandboxed commands could reach every place it could be kept ({}); set $XDG_RUNTIME_DIR or $XDG_STATE_HOME to \
         a private directory outside them",
        refused.join("; ")
    )
}

/// The first of `dirs` outside every possible writable root of `roots` (given and canonical), created mode 0700
/// (its parents too, when uexec makes them), owned by this user and canonical: where the server keeps `what`,
/// which only the person may reach. `Ok(None)` when every candidate lies in a writable root, each refused
/// candidate said in `refused`; an error when a candidate cannot be made private or belongs to another user.
pub(crate) fn private_home(
    dirs: &[PathBuf],
    roots: &SandboxWrites,
    what: &str,
    refused: &mut Vec<String>,
) -> Result<Option<PathBuf>> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    for dir in dirs {
        if let Some(found) = writable_by_sandbox(dir, roots) {
            refused.push(format!("{}: {}", dir.display(), found.describe()));
            continue;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create {} for {what}", dir.display()))?;
        let canonical =
            std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
        if let Some(found) = writable_by_sandbox(&canonical, roots) {
            refused.push(format!("{}: {}", canonical.display(), found.describe()));
            continue;
        }
        let meta = std::fs::metadata(&canonical)?;
        if meta.uid() != rustix::process::geteuid().as_raw() {
            bail!("{} belongs to another user: it cannot hold {what}", canonical.display());
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(&canonical, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("cannot make {} private (mode 0700)", canonical.display()))?;
        }
        return Ok(Some(canonical));
    }
    Ok(None)
}

/// Every directory a sandboxed command of this or an earlier start may have written to (`uexec_domain::trust`:
/// the policy's roots, the workspace, `/tmp`, `/dev/shm`, `$TMPDIR`, the sandbox's own directories).
pub(crate) fn server_file_roots(settings: &Settings) -> SandboxWrites {
    let sandbox_dirs: Vec<PathBuf> =
        settings.state_dir.iter().flat_map(|state| sandbox_state_dirs(state)).collect();
    gather_writes(&settings.sandbox_policy, &settings.cwd, settings.tmpdir.as_deref(), &sandbox_dirs)
}
