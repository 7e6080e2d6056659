//! The login environment, loaded once: the I/O half of `uexec_domain::snapshot`.
//!
//! A command with `login: true` whose startup files are trusted for it (`uexec_domain::startup`) and whose
//! shell is bash runs as `bash -c` with `BASH_ENV` naming a snapshot of what `bash -l` had after its startup
//! files. One snapshot per shell and placement (in the sandbox, or outside it), per server: a snapshot captured
//! in the sandbox is never sourced by a command that runs outside it, and the other way round. It is captured
//! again when one of `uexec_domain::snapshot::snapshot_inputs` changes (device, inode, size, modification
//! time). What the startup files print goes to the server log.
//!
//! The snapshot files live in the directory the app names (`EngineConfig::snapshot_dir`), which must lie
//! outside every place sandboxed commands may write (`crate::trust`): otherwise snapshots are off and commands
//! start login shells as before. Snapshots of commands placed outside the sandbox go to `<dir>/host`, which the
//! app hides from sandboxed commands (a login shell outside the sandbox may have read what they cannot: its
//! state is not theirs to read), and is made when the engine starts, before any command, so that it is hidden
//! from the first one; those of sandboxed commands go to `<dir>/sandboxed`, which their shells must read. Neither
//! holds a variable the environment policy keeps from commands (`uexec_domain::snapshot::render_bash`). The
//! directories are created mode 0700; each file is written under a fresh name and renamed into place, and the
//! files this server wrote are removed when the engine is dropped.

use std::collections::HashMap;
use std::ffi::OsString;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use uexec_domain::EscapeReason;
use uexec_domain::snapshot::{
    SnapshotShell, capture_script, end_marker, parse_capture, render_bash, snapshot_inputs,
};
use uexec_domain::trust::SandboxWrites;
use uexec_ports::process::{IoMode, SpawnRequest};

use crate::config::EngineConfig;
use crate::engine::Orchestrator;
use crate::placement::Placement;
use crate::trust::{shell_in_writable_root, writable_by_sandbox};

/// How long a capture (the login shell with its startup files) may take before commands keep starting login
/// shells for this fingerprint.
pub(crate) const CAPTURE_DEADLINE: Duration = Duration::from_secs(20);

/// The most output a capture may print (startup output plus state) before it counts as failed.
pub(crate) const CAPTURE_MAX_BYTES: usize = 16 * 1024 * 1024;

/// How much of the startup files' output goes to the server log.
const LOGGED_STARTUP_BYTES: usize = 4096;

/// The identity of one input file: absent, or its device, inode, size and modification time.
type FileId = (PathBuf, Option<crate::os::FileVersion>);

/// Which snapshot: the shell and whether its commands run in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SnapshotKey {
    pub shell: SnapshotShell,
    pub shell_path: String,
    pub sandboxed: bool,
}

#[derive(Debug)]
struct Entry {
    fingerprint: Vec<FileId>,
    /// `None`: the capture failed for this fingerprint (commands start login shells until a file changes).
    file: Option<PathBuf>,
}

/// The snapshots of one engine.
#[derive(Debug)]
pub(crate) struct Snapshots {
    /// The directory, once it was checked to lie outside every writable root; `None`: snapshots are off.
    dir: Option<PathBuf>,
    /// One capture at a time; commands wait for the capture they need.
    entries: tokio::sync::Mutex<HashMap<SnapshotKey, Entry>>,
    /// Every file this engine wrote (removed on drop).
    written: Mutex<Vec<PathBuf>>,
    counter: AtomicU64,
}

impl Snapshots {
    /// Snapshots in `config.snapshot_dir`, or off when it is unset or lies where sandboxed commands of the
    /// commands' environment may write (`writes`).
    pub(crate) fn new(config: &EngineConfig, writes: &SandboxWrites) -> Snapshots {
        let dir = config.snapshot_dir.as_ref().and_then(|dir| {
            match writable_by_sandbox(dir, writes) {
                Some(found) => {
                    tracing::warn!(
                        dir = %dir.display(),
                        "login snapshots are off: the snapshot directory is not safe from sandboxed commands ({})",
                        found.describe()
                    );
                    None
                }
                None => Some(dir.clone()),
            }
        });
        // Made now, so that it exists (and is hidden) before the first command.
        let dir = dir.and_then(|dir| match place_dir(&dir, false) {
            Ok(_) => Some(dir),
            Err(error) => {
                tracing::warn!(%error, dir = %dir.display(), "login snapshots are off: the directory cannot be made");
                None
            }
        });
        Snapshots {
            dir,
            entries: tokio::sync::Mutex::new(HashMap::new()),
            written: Mutex::new(Vec::new()),
            counter: AtomicU64::new(0),
        }
    }

    /// Whether snapshots are on.
    pub(crate) fn enabled(&self) -> bool {
        self.dir.is_some()
    }

    /// The snapshot file for `key` given the commands' environment `env`, capturing it with `capture` (which
    /// returns the file's text) when there is none yet or an input changed. `None`: snapshots are off, or the
    /// capture failed (logged).
    pub(crate) async fn get<F, Fut>(
        &self,
        key: &SnapshotKey,
        env: &[(OsString, OsString)],
        capture: F,
    ) -> Option<PathBuf>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<u8>, String>>,
    {
        let dir = self.dir.clone()?;
        let inputs =
            snapshot_inputs(|name| env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone()));
        let fingerprint = fingerprint(inputs);
        let mut entries = self.entries.lock().await;
        if let Some(entry) = entries.get(key)
            && entry.fingerprint == fingerprint
        {
            return entry.file.clone();
        }
        let file = match capture().await {
            Ok(text) => match self.write(&dir, key, &text) {
                Ok(path) => {
                    tracing::info!(path = %path.display(), sandboxed = key.sandboxed, "login snapshot captured");
                    Some(path)
                }
                Err(error) => {
                    tracing::warn!(%error, dir = %dir.display(), "cannot write the login snapshot");
                    None
                }
            },
            Err(error) => {
                tracing::warn!(%error, sandboxed = key.sandboxed, "the login snapshot could not be captured");
                None
            }
        };
        entries.insert(key.clone(), Entry { fingerprint, file: file.clone() });
        file
    }

    fn write(&self, dir: &Path, key: &SnapshotKey, text: &[u8]) -> std::io::Result<PathBuf> {
        let dir = place_dir(dir, key.sandboxed)?;
        let dir = dir.as_path();
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let place = if key.sandboxed { "sandboxed" } else { "host" };
        let name = format!("bash-{place}-{}-{n}.sh", std::process::id());
        let path = dir.join(&name);
        let partial = dir.join(format!(".{name}.partial"));
        let mut file = crate::os::create_private_file(&partial)?;
        file.write_all(text)?;
        file.sync_data()?;
        std::fs::rename(&partial, &path)?;
        self.written.lock().unwrap_or_else(PoisonError::into_inner).push(path.clone());
        Ok(path)
    }
}

impl Drop for Snapshots {
    fn drop(&mut self) {
        for path in self.written.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The directory of the snapshots for one placement under `dir`, created (mode 0700) when missing:
/// `<dir>/sandboxed` or `<dir>/host`.
fn place_dir(dir: &Path, sandboxed: bool) -> std::io::Result<PathBuf> {
    let place = dir.join(if sandboxed { "sandboxed" } else { "host" });
    crate::os::create_private_dir_all(&place)?;
    Ok(place)
}

/// The identity of every input: a `stat` each, made inline like the startup-file lookups of `crate::trust`
/// (a handful of paths under `$HOME` and `/etc`; a thread hand-off would cost more than the calls).
fn fingerprint(inputs: Vec<PathBuf>) -> Vec<FileId> {
    inputs
        .into_iter()
        .map(|path| {
            let id = std::fs::metadata(&path).ok().map(|m| crate::os::file_version(&m));
            (path, id)
        })
        .collect()
}

/// The first [`LOGGED_STARTUP_BYTES`] of what the startup files printed, for the log.
pub(crate) fn log_startup_output(key: &SnapshotKey, output: &[u8]) {
    if output.is_empty() {
        return;
    }
    let shown = String::from_utf8_lossy(&output[..output.len().min(LOGGED_STARTUP_BYTES)]);
    tracing::info!(
        shell = %key.shell_path,
        sandboxed = key.sandboxed,
        bytes = output.len(),
        output = %shown.escape_debug(),
        "the login shell's startup files printed (kept out of commands' output)"
    );
}
/// Capturing and replaying the snapshot for one command (the engine's side of this module).
impl Orchestrator {
    /// Whether a `login: true` command of `shell` with `env`, placed at `placement`, starts without login, its
    /// login environment replayed from a snapshot (`crate::login`): bash, snapshots on, a command that runs in
    /// the sandbox or under `danger-full-access` (an escalation keeps its login shell), and a shell no
    /// sandboxed command could have written (capturing a snapshot runs the shell). Called after the approval:
    /// capturing is running the shell, so nothing is captured for a command nobody approved.
    pub(crate) async fn login_snapshot(
        &self,
        shell: &str,
        env: &[(OsString, OsString)],
        placement: Placement,
        writes: &SandboxWrites,
    ) -> Option<SnapshotShell> {
        let kind = SnapshotShell::of(shell)?;
        if !self.snapshots.enabled() || placement == Placement::Unsandboxed(EscapeReason::ApprovedEscalation)
        {
            return None;
        }
        if let Some(found) = shell_in_writable_root(shell, env, writes) {
            tracing::info!(
                shell,
                "no login snapshot: the shell could have been written by a sandboxed command ({})",
                found.describe()
            );
            return None;
        }
        self.snapshot_file(kind, shell, env, placement).await.map(|_| kind)
    }

    /// The snapshot file of `shell` for commands placed at `placement`, captured under that placement when
    /// missing or stale.
    pub(crate) async fn snapshot_file(
        &self,
        kind: SnapshotShell,
        shell: &str,
        env: &[(OsString, OsString)],
        placement: Placement,
    ) -> Option<PathBuf> {
        let key = SnapshotKey {
            shell: kind,
            shell_path: shell.to_owned(),
            sandboxed: placement == Placement::Sandboxed,
        };
        self.snapshots.get(&key, env, || self.capture_snapshot(&key, env, placement)).await
    }

    /// Run the login shell with the capture script under `placement` and render the snapshot file's text.
    pub(crate) async fn capture_snapshot(
        &self,
        key: &SnapshotKey,
        env: &[(OsString, OsString)],
        placement: Placement,
    ) -> Result<Vec<u8>, String> {
        let nonce = self.store.next_random();
        let base = SpawnRequest {
            argv: vec![
                OsString::from(&key.shell_path),
                OsString::from("-lc"),
                OsString::from(capture_script(key.shell, nonce)),
            ],
            cwd: self.config.cwd.clone(),
            env: env.to_vec(),
            mode: IoMode::Pipes,
            setup: Vec::new(),
            pid_scope: Default::default(),
        };
        let mut started_with = Vec::new();
        let (mut process, _, lease) = self
            .place_and_spawn(placement, base, |spawn| started_with.clone_from(&spawn.env))
            .map_err(|e| e.to_string())?;
        // What the placement set (the sandbox's variables, its package caches) it sets again for every command.
        let last = |env: &[(OsString, OsString)], name: &OsString| {
            env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone())
        };
        let mut pinned: Vec<OsString> = started_with
            .iter()
            .map(|(name, _)| name)
            .filter(|name| last(&started_with, name) != last(env, name))
            .cloned()
            .collect();
        pinned.dedup();
        let end = end_marker(nonce);
        let mut output = Vec::new();
        let read = async {
            loop {
                match process.output.next_chunk().await {
                    Ok(Some(chunk)) => {
                        let from = output.len().saturating_sub(end.len());
                        output.extend_from_slice(&chunk);
                        if output[from..].windows(end.len()).any(|w| w == end.as_slice()) {
                            return Ok(());
                        }
                        if output.len() > CAPTURE_MAX_BYTES {
                            return Err(format!(
                                "the login shell printed more than {CAPTURE_MAX_BYTES} bytes"
                            ));
                        }
                    }
                    Ok(None) => return Ok(()),
                    Err(error) => return Err(error.to_string()),
                }
            }
        };
        let read = tokio::time::timeout(CAPTURE_DEADLINE, read).await;
        // Nothing the startup files started outlives the capture; then the sandbox may undo what it made for it.
        let _ = process.control.kill_tree().await;
        drop(lease);
        match read {
            Ok(result) => result?,
            Err(_) => return Err(format!("the login shell took longer than {CAPTURE_DEADLINE:?}")),
        }
        let captured = parse_capture(&output, nonce).map_err(|e| e.to_string())?;
        log_startup_output(key, &captured.startup_output);
        let own = env.iter().rev().find(|(name, _)| name == key.shell.loader_var()).map(|(_, v)| v);
        Ok(render_bash(&captured, &started_with, &pinned, own, &self.config.env_policy))
    }

    /// `base` with the snapshot for `placement` as its shell's loader (`BASH_ENV`), when the command replays
    /// one (`snapshot`). A snapshot that cannot be had at this point (an unsandboxed retry whose capture
    /// failed) leaves the command without its login environment, logged.
    pub(crate) async fn with_snapshot(
        &self,
        snapshot: Option<SnapshotShell>,
        shell: &str,
        placement: Placement,
        mut base: SpawnRequest,
    ) -> SpawnRequest {
        let Some(kind) = snapshot else { return base };
        match self.snapshot_file(kind, shell, &base.env, placement).await {
            Some(path) => {
                base.env.retain(|(name, _)| name != kind.loader_var());
                base.env.push((OsString::from(kind.loader_var()), path.into_os_string()));
            }
            None => tracing::warn!(
                ?placement,
                "no login snapshot for this placement: the command runs without its login environment"
            ),
        }
        base
    }
}
