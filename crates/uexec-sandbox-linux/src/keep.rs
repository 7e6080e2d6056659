//! What the sandbox leaves on the host while commands run, taken away again when none needs it: the
//! placeholders made under read-only mounts, and a private store of each protected repository's loose objects,
//! restored after each command. The rules are `uexec_domain::leftovers` (read its module doc first); this is
//! their I/O.
//!
//! Layout, under the state directory given to [`Keeper::new`] (uexec's `~/.local/state/uexec/sandbox-leftovers`,
//! hidden from every sandboxed command and outside every writable root), one directory per workspace named by
//! the key of its canonical path:
//!
//! - `lock`: held shared (`flock`) by every server while it has a live command on the workspace, tried
//!   exclusively (never waiting) by the one that finishes its last command, or by a server starting;
//! - `record`: the placeholders made (`uexec_domain::leftovers::Made` lines) and the repositories whose
//!   objects are kept aside, appended (`O_APPEND`) while the lock is held shared; removed with what it lists;
//! - `objects/<key of the git dir>/<xx>/<rest>`: hard links to the loose objects (same file system as the
//!   repository, or none are kept and the report says so). A store is pruned when it is next listed after a
//!   moment no command ran (the first prepare that took the lock exclusively), in the same listing; the store
//!   of a repository no command uses any more stays until then.
//!
//! Cost per command: one listing of each protected repository's `objects/??/` at prepare and one at finish
//! (restoring), plus one of its store the first time this process uses it (`uexec run`: every time); a link
//! per object not stored yet. (The pins list the first fan-out directories too, up to 64 objects.)
//!
//! Locks are process-wide per open file description: this server keeps one descriptor per workspace and counts
//! its own leases on it ([`Keeper`]'s mutex orders its prepares and finishes).

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use uexec_domain::leftovers::{
    MAX_PLACEHOLDER_BYTES, Made, MadeKind, Seen, key, parse_store_line, removable, removal_order, store_line,
    to_keep, to_prune, to_restore,
};

/// The placeholders and kept objects of the sandbox's commands (see the module doc).
#[derive(Debug)]
pub(crate) struct Keeper {
    /// Where the workspaces' directories live.
    dir: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The last lease issued.
    last: u64,
    /// Each live lease's workspace directory.
    leases: HashMap<u64, PathBuf>,
    /// Each workspace directory this server holds shared.
    held: HashMap<PathBuf, Held>,
}

#[derive(Debug)]
struct Held {
    /// The lock, held shared.
    lock: File,
    /// This server's live leases on it.
    count: usize,
    /// The repositories whose objects are kept, with what their store holds.
    stores: HashMap<PathBuf, BTreeSet<String>>,
    /// No command of any server ran when the lock was taken: the stores of the next command's repositories
    /// are pruned of what the repository lost since (the person's own git packed or pruned it).
    prune: bool,
}

impl Keeper {
    /// A keeper under `dir` (created mode 0700 when needed). Cleans what servers that died left (their records
    /// whose lock nobody holds): restores their kept objects, removes their placeholders.
    pub(crate) fn new(dir: PathBuf) -> Keeper {
        let keeper = Keeper { dir, state: Mutex::new(State::default()) };
        keeper.recover_all();
        keeper
    }

    fn recover_all(&self) {
        let Ok(listing) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in listing.filter_map(Result::ok) {
            let workspace = entry.path();
            if !workspace.join("record").exists() {
                continue;
            }
            let Ok(lock) = open_lock(&workspace) else {
                continue;
            };
            if crate::sys::flock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
                clean(&workspace, &[]);
            }
        }
    }

    /// A lease for a command about to be prepared on `workspace`: the workspace's lock is held shared from now
    /// on (after cleaning and pruning, when this server is the only one there). `None` when the lock cannot
    /// be taken: nothing made for that command is then recorded or removed.
    pub(crate) fn begin(&self, workspace: &Path) -> Option<u64> {
        let canonical = fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        let dir = self.dir.join(key(canonical.as_os_str().as_bytes()));
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !state.held.contains_key(&dir) {
            if let Err(error) = fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir) {
                tracing::warn!(%error, dir = %dir.display(), "cannot keep a record of the sandbox's placeholders");
                return None;
            }
            let lock = match open_lock(&dir) {
                Ok(lock) => lock,
                Err(error) => {
                    tracing::warn!(%error, dir = %dir.display(), "cannot open the sandbox's workspace lock");
                    return None;
                }
            };
            // Nobody else has a command here: what a crash left is cleaned, and what the person's own git
            // packed or pruned since leaves the stores (when they are next listed, `Keeper::record`).
            let quiescent = crate::sys::flock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_ok();
            if quiescent {
                clean(&dir, &[]);
            }
            if let Err(error) = crate::sys::flock(&lock, libc::LOCK_SH) {
                tracing::warn!(%error, "cannot hold the sandbox's workspace lock");
                return None;
            }
            state.held.insert(dir.clone(), Held { lock, count: 0, stores: HashMap::new(), prune: quiescent });
        }
        let held = state.held.get_mut(&dir)?;
        held.count += 1;
        state.last += 1;
        let lease = state.last;
        state.leases.insert(lease, dir);
        Some(lease)
    }

    /// Record what was made for `lease` and keep aside the loose objects of `repositories`; returns the
    /// notes for the report (whether each repository's objects are kept).
    pub(crate) fn record(&self, lease: u64, made: &[Made], repositories: &[PathBuf]) -> Vec<String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(dir) = state.leases.get(&lease).cloned() else {
            return Vec::new();
        };
        let Some(held) = state.held.get_mut(&dir) else {
            return Vec::new();
        };
        let mut lines: Vec<String> = made.iter().map(Made::line).collect();
        // Pruning is for the first listing after a quiet moment only: later, a missing object may be one a
        // live command removed, to be put back.
        let prune = std::mem::take(&mut held.prune);
        let mut notes = Vec::new();
        for repository in repositories {
            let objects = repository.join("objects");
            let fresh = !held.stores.contains_key(repository);
            let store = store_dir(&dir, repository);
            match keep_objects(&objects, &store, held.stores.get(repository), prune) {
                Ok(stored) => {
                    if fresh {
                        lines.push(store_line(repository.as_os_str().as_bytes()));
                    }
                    held.stores.insert(repository.clone(), stored);
                    notes.push(format!(
                        "{}: every loose object present is kept aside (hard links in uexec's state directory) and \
                         any a command removes is put back when it ends",
                        objects.display()
                    ));
                }
                Err(why) => notes.push(format!(
                    "{}: loose objects beyond those pinned are not kept aside ({why}); a git gc outside packs them",
                    objects.display()
                )),
            }
        }
        if !lines.is_empty() {
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let appended = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(dir.join("record"))
                .and_then(|mut record| record.write_all(text.as_bytes()));
            if let Err(error) = appended {
                tracing::warn!(%error, "cannot record the sandbox's placeholders: they stay in the workspace");
            }
        }
        notes
    }

    /// The command of `lease` is gone: put back the objects it removed, and when it was this server's last
    /// one on the workspace, let go of the lock and remove every placeholder if no other server holds it.
    pub(crate) fn finish(&self, lease: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(dir) = state.leases.remove(&lease) else {
            return;
        };
        let Some(held) = state.held.get_mut(&dir) else {
            return;
        };
        for (repository, stored) in &held.stores {
            restore(&repository.join("objects"), &store_dir(&dir, repository), stored);
        }
        held.count = held.count.saturating_sub(1);
        if held.count > 0 {
            return;
        }
        let mut restored = Vec::new();
        if let Some(held) = state.held.remove(&dir) {
            restored.extend(held.stores.into_keys());
            // Closing the descriptor lets go of the shared lock.
            drop(held.lock);
        }
        if let Ok(lock) = open_lock(&dir)
            && crate::sys::flock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_ok()
        {
            // This server restored its repositories just now; another server's are restored by its own finish,
            // or here when it died (its record lines).
            clean(&dir, &restored);
        }
    }
}

/// The workspace directory `dir`'s lock file, opened (created) without following a symlink.
fn open_lock(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join("lock"))
}

/// Where the objects of `repository` are kept for the workspace directory `dir`.
fn store_dir(dir: &Path, repository: &Path) -> PathBuf {
    dir.join("objects").join(key(repository.as_os_str().as_bytes()))
}

/// With the workspace's lock held exclusively: restore the kept objects of every repository the record
/// names (but those in `restored`: the caller's finish just did), remove every placeholder it lists that is
/// still uexec's, then the record.
fn clean(dir: &Path, restored: &[PathBuf]) {
    let record = dir.join("record");
    let mut text = String::new();
    let read = File::open(&record).and_then(|mut file| file.read_to_string(&mut text));
    if let Err(error) = read {
        if error.kind() != io::ErrorKind::NotFound {
            tracing::warn!(%error, "cannot read the record of the sandbox's placeholders");
        }
        return;
    }
    let mut made = Vec::new();
    for line in text.lines() {
        if let Some(repository) = parse_store_line(line) {
            let repository = PathBuf::from(std::ffi::OsStr::from_bytes(&repository));
            if restored.contains(&repository) {
                continue;
            }
            let store = store_dir(dir, &repository);
            restore(&repository.join("objects"), &store, &list_objects(&store));
        } else if let Some(entry) = Made::parse(line) {
            made.push(entry);
        }
    }
    for entry in removal_order(&made) {
        remove_placeholder(entry);
    }
    if let Err(error) = fs::remove_file(&record) {
        tracing::warn!(%error, "cannot remove the record of the sandbox's placeholders");
    }
}

/// Link every loose object of `objects` not in the store `store` yet (`stored`: what it holds, when known)
/// into it, after dropping from it, when `prune` (no command runs anywhere), the objects `objects` lost; what
/// the store holds afterwards. One listing of each. Fails when the store is on another file system.
fn keep_objects(
    objects: &Path,
    store: &Path,
    stored: Option<&BTreeSet<String>>,
    prune: bool,
) -> Result<BTreeSet<String>, String> {
    let repository_dev = fs::symlink_metadata(objects).map_err(|e| format!("cannot look at it: {e}"))?.dev();
    let mut stored = match stored {
        Some(stored) => stored.clone(),
        None => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(store)
                .map_err(|e| format!("cannot make the store: {e}"))?;
            list_objects(store)
        }
    };
    let store_dev = fs::symlink_metadata(store).map_err(|e| format!("cannot look at the store: {e}"))?.dev();
    if store_dev != repository_dev {
        return Err("uexec's state directory is on another file system than the repository".to_owned());
    }
    let present = list_objects(objects);
    if prune {
        let gone: Vec<String> = to_prune(&stored, &present).into_iter().cloned().collect();
        for name in gone {
            if fs::remove_file(store.join(&name)).is_ok() {
                stored.remove(&name);
            }
        }
    }
    for name in to_keep(&present, &stored) {
        let Some((fan_out, _)) = name.split_once('/') else {
            continue;
        };
        let _ = fs::DirBuilder::new().mode(0o700).create(store.join(fan_out));
        match fs::hard_link(objects.join(name), store.join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            // Gone meanwhile: nothing to keep.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot link {name} into the store: {e}")),
        }
        stored.insert(name.clone());
    }
    Ok(stored)
}

/// Link back into `objects` every object of `stored` (held in `store`) missing from it, never over an existing
/// one, and never through a fan-out directory that is not a real directory.
fn restore(objects: &Path, store: &Path, stored: &BTreeSet<String>) {
    if stored.is_empty() || !fs::symlink_metadata(objects).is_ok_and(|m| m.is_dir()) {
        return;
    }
    let present = list_objects(objects);
    for name in to_restore(stored, &present) {
        let Some((fan_out, _)) = name.split_once('/') else {
            continue;
        };
        let fan_out = objects.join(fan_out);
        match fs::symlink_metadata(&fan_out) {
            Ok(meta) if meta.is_dir() => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Err(error) = fs::DirBuilder::new().mode(0o755).create(&fan_out) {
                    tracing::warn!(%error, dir = %fan_out.display(), "cannot restore loose objects");
                    continue;
                }
            }
            _ => {
                tracing::warn!(dir = %fan_out.display(), "not a directory: loose objects not restored there");
                continue;
            }
        }
        match fs::hard_link(store.join(name), objects.join(name)) {
            Ok(()) => tracing::debug!(object = %name, "restored a loose object a sandboxed command removed"),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => tracing::warn!(%error, object = %name, "cannot restore a loose object"),
        }
    }
}

/// The loose objects of the object directory `objects` (`xx/<rest>`: a real fan-out directory, a regular file
/// with an object's name); what cannot be listed counts as absent.
fn list_objects(objects: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(listing) = fs::read_dir(objects) else {
        return out;
    };
    for fan_out in listing.filter_map(Result::ok) {
        let name = fan_out.file_name();
        if !uexec_domain::gitdir::is_fan_out_name(name.as_bytes())
            || !fan_out.file_type().is_ok_and(|t| t.is_dir())
        {
            continue;
        }
        let Ok(files) = fs::read_dir(fan_out.path()) else {
            continue;
        };
        for file in files.filter_map(Result::ok) {
            let rest = file.file_name();
            if uexec_domain::gitdir::is_loose_object_name(rest.as_bytes())
                && file.file_type().is_ok_and(|t| t.is_file())
            {
                out.insert(format!("{}/{}", name.to_string_lossy(), rest.to_string_lossy()));
            }
        }
    }
    out
}

/// Remove the placeholder `made` if it is still uexec's (`uexec_domain::leftovers::removable`) and its parent
/// is reached without a symlink (a command cannot make this remove anything else).
fn remove_placeholder(made: &Made) {
    let path = Path::new(std::ffi::OsStr::from_bytes(&made.path));
    let Some(parent) = path.parent() else {
        return;
    };
    if fs::canonicalize(parent).ok().as_deref() != Some(parent) {
        return;
    }
    let seen = match fs::symlink_metadata(path) {
        Err(_) => Seen::Absent,
        Ok(meta) if meta.file_type().is_symlink() => Seen::Link {
            inode: meta.ino(),
            target: fs::read_link(path).map(|t| t.as_os_str().as_bytes().to_vec()).unwrap_or_default(),
        },
        Ok(meta) if meta.is_dir() => Seen::Dir { inode: meta.ino() },
        Ok(meta) if meta.is_file() => {
            let mut bytes = Vec::new();
            let read = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(path)
                .and_then(|file| file.take(MAX_PLACEHOLDER_BYTES as u64 + 1).read_to_end(&mut bytes));
            if read.is_err() {
                return;
            }
            Seen::File { inode: meta.ino(), bytes }
        }
        Ok(_) => Seen::Other,
    };
    if !removable(made, &seen) {
        return;
    }
    let removed = match made.kind {
        // Fails when anything was put in it: then it is someone's and stays.
        MadeKind::Dir => fs::remove_dir(path),
        MadeKind::File | MadeKind::Link => fs::remove_file(path),
    };
    if let Err(error) = removed {
        tracing::debug!(%error, path = %path.display(), "a placeholder stays");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn made(kind: MadeKind, path: &Path) -> Made {
        Made {
            kind,
            inode: fs::symlink_metadata(path).unwrap().ino(),
            path: path.as_os_str().as_bytes().to_vec(),
        }
    }

    #[test]
    fn only_unchanged_placeholders_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().canonicalize().unwrap();
        for name in ["empty", "used", "remade"] {
            fs::create_dir(ws.join(name)).unwrap();
        }
        fs::write(ws.join("file"), "").unwrap();
        fs::write(ws.join("written"), "").unwrap();
        std::os::unix::fs::symlink(uexec_domain::gitdir::ABSENT_LINK_TARGET, ws.join("link")).unwrap();
        let list = [
            made(MadeKind::Dir, &ws.join("empty")),
            made(MadeKind::Dir, &ws.join("used")),
            made(MadeKind::Dir, &ws.join("remade")),
            made(MadeKind::File, &ws.join("file")),
            made(MadeKind::File, &ws.join("written")),
            made(MadeKind::Link, &ws.join("link")),
        ];
        fs::write(ws.join("used/settings.json"), "{}").unwrap();
        fs::remove_dir(ws.join("remade")).unwrap();
        fs::write(ws.join("remade"), "").unwrap();
        fs::write(ws.join("written"), "[core]").unwrap();
        for entry in &list {
            remove_placeholder(entry);
        }
        let mut left: Vec<String> = fs::read_dir(&ws)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["remade", "used", "written"]);
    }

    #[test]
    fn objects_are_kept_restored_never_overwritten_and_pruned() {
        let tmp = tempfile::tempdir().unwrap();
        let objects = tmp.path().join("repo/objects");
        let names =
            ["ab/cdef0123456789abcdef0123456789abcdef01", "12/3456789abcdef0123456789abcdef012345678"];
        for name in names {
            fs::create_dir_all(objects.join(&name[..2])).unwrap();
            fs::write(objects.join(name), name).unwrap();
        }
        let store = tmp.path().join("state/objects/x");
        let stored = keep_objects(&objects, &store, None, false).unwrap();
        assert_eq!(stored.len(), 2);
        fs::remove_dir_all(objects.join("ab")).unwrap();
        fs::remove_file(objects.join(names[1])).unwrap();
        fs::write(objects.join(names[1]), "someone else's").unwrap();
        restore(&objects, &store, &stored);
        assert_eq!(fs::read_to_string(objects.join(names[0])).unwrap(), names[0]);
        assert_eq!(fs::read_to_string(objects.join(names[1])).unwrap(), "someone else's");
        fs::remove_file(objects.join(names[0])).unwrap();
        // Not pruned while a command may run (the next finish puts it back), pruned when none does.
        assert_eq!(keep_objects(&objects, &store, None, false).unwrap().len(), 2);
        let kept = keep_objects(&objects, &store, None, true).unwrap();
        assert_eq!(kept.into_iter().collect::<Vec<_>>(), vec![names[1].to_owned()]);
        assert_eq!(list_objects(&store).into_iter().collect::<Vec<_>>(), vec![names[1].to_owned()]);
    }
}
