//! Copy-on-write views of the person's directories (cargo's `CARGO_HOME`): under `workspace-write`, sandboxed
//! commands see such a directory as an overlayfs whose lower layer is the person's directory (never written) and
//! whose upper layer belongs to the sandbox, under the server's state directory and outside every writable root.
//! Commands outside the sandbox use the person's directory, so nothing a sandboxed command writes there is ever
//! used outside the sandbox.
//!
//! One overlay per directory and sandbox instance, made once in the parent as a detached mount (`fsopen`,
//! `fsconfig`, `fsmount`); each command's child attaches a copy of it over the directory (after the tree was
//! made read-only, before the hidden paths are covered) and its Landlock ruleset allows writes beneath the
//! overlay's root. Two sandboxes (two servers, two clients of one server) never mount the same upper layer at
//! once: each takes a slot (`<base>/0`, `<base>/1`, ...) and holds it while it lives, so the common
//! single-server case finds its layer again after a restart. Between processes a slot is held with `flock` on
//! `<slot>/lock`, kept by the process until it exits (a lock released at drop could still be held for a moment
//! by a child forked meanwhile, which has not yet closed its copy at exec); within a process a slot is in use
//! while a sandbox holds its [`SlotGuard`].

use std::ffi::CString;
use std::fs::{self, File};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A directory sandboxed commands see copy-on-write (see [`LinuxSandbox::with_copy_on_write`]).
///
/// [`LinuxSandbox::with_copy_on_write`]: crate::LinuxSandbox::with_copy_on_write
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOnWriteDir {
    /// A short name (`cargo`): the directory of its layers in the sandbox's slot. ASCII letters, digits, `-`,
    /// `_` and `.` (not only dots).
    pub name: String,
    /// The person's directory (absolute; resolved when the overlay is made).
    pub path: PathBuf,
}

/// The most slots tried: more sandboxes at once than this get no copy-on-write view.
pub(crate) const MAX_SLOTS: usize = 64;

/// The copy-on-write directories of one sandbox and where their layers live.
#[derive(Debug)]
pub(crate) struct CopyOnWrite {
    /// The directory holding the slots (`<state>/sandbox-overlays`).
    pub(crate) base: PathBuf,
    /// The directories.
    pub(crate) dirs: Vec<CopyOnWriteDir>,
    /// The overlays, made on first use.
    made: OnceLock<Made>,
}

/// The overlays of one sandbox, made once.
#[derive(Debug, Default)]
pub(crate) struct Made {
    /// The overlays made.
    pub(crate) overlays: Vec<Overlay>,
    /// The directories that got none, and why (`path: reason`).
    pub(crate) skipped: Vec<String>,
    /// The slot (last: released after the overlays are closed).
    pub(crate) slot: Option<SlotGuard>,
}

/// A slot this process holds.
#[derive(Debug)]
struct HeldSlot {
    /// Its directory.
    dir: PathBuf,
    /// Its lock file, locked (`flock`) until the process exits.
    _lock: File,
    /// A live sandbox uses it.
    in_use: bool,
}

/// The slots this process holds.
static HELD: Mutex<Vec<HeldSlot>> = Mutex::new(Vec::new());

/// A sandbox's use of a slot: the slot is free for another sandbox of this process once it is dropped.
#[derive(Debug)]
pub(crate) struct SlotGuard {
    /// The slot directory.
    pub(crate) dir: PathBuf,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = held.iter_mut().find(|slot| slot.dir == self.dir) {
            slot.in_use = false;
        }
    }
}

/// One overlay, made.
#[derive(Debug)]
pub(crate) struct Overlay {
    /// The person's directory, canonical: where the view is attached.
    pub(crate) path: PathBuf,
    /// The directory holding the upper layer and the overlay's work directory.
    pub(crate) layers: PathBuf,
    /// The upper layer.
    pub(crate) upper: PathBuf,
    /// The detached overlay mount.
    pub(crate) mount: Arc<OwnedFd>,
}

impl CopyOnWrite {
    /// `dirs`, with their layers in slots beneath `base`.
    pub(crate) fn new(base: PathBuf, dirs: Vec<CopyOnWriteDir>) -> CopyOnWrite {
        CopyOnWrite { base, dirs, made: OnceLock::new() }
    }

    /// The overlays, made on the first call: in this process with `CAP_SYS_ADMIN`, or `in_user_namespace` (the
    /// sandbox's, by a forked helper; see `crate::userns`), where the commands that attach them run.
    pub(crate) fn made(&self, in_user_namespace: bool) -> &Made {
        self.made.get_or_init(|| make(&self.base, &self.dirs, in_user_namespace))
    }

    /// The overlays, if they were made.
    pub(crate) fn made_yet(&self) -> Option<&Made> {
        self.made.get()
    }
}

/// Make the overlays of `dirs` in the first free slot beneath `base`.
fn make(base: &Path, dirs: &[CopyOnWriteDir], in_user_namespace: bool) -> Made {
    let mut made = Made::default();
    let skip_all = |why: &str| dirs.iter().map(|d| format!("{}: {why}", d.path.display())).collect();
    if let Err(why) = kernel_copies_detached_mounts() {
        made.skipped = skip_all(&why);
        return made;
    }
    let mut present = Vec::new();
    for dir in dirs {
        match checked(dir) {
            Ok(lower) => present.push((dir.name.as_str(), lower)),
            Err(why) => made.skipped.push(format!("{}: {why}", dir.path.display())),
        }
    }
    if present.is_empty() {
        return made;
    }
    let slot = match take_slot(base) {
        Ok(slot) => slot,
        Err(error) => {
            made.skipped.extend(
                present.iter().map(|(_, p)| format!("{}: no slot for its upper layer: {error}", p.display())),
            );
            return made;
        }
    };
    for (name, lower) in present {
        if slot.dir.starts_with(&lower) || lower.starts_with(&slot.dir) {
            made.skipped.push(format!(
                "{}: it overlaps the sandbox's layers in {}",
                lower.display(),
                slot.dir.display()
            ));
            continue;
        }
        match overlay(&slot.dir, name, &lower, in_user_namespace) {
            Ok(overlay) => made.overlays.push(overlay),
            Err(error) => made.skipped.push(format!("{}: overlay refused: {error}", lower.display())),
        }
    }
    made.slot = Some(slot);
    made
}

/// The canonical directory of `dir`, or why it gets no overlay.
fn checked(dir: &CopyOnWriteDir) -> Result<PathBuf, String> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if dir.name.is_empty() || !dir.name.chars().all(valid) || dir.name.chars().all(|c| c == '.') {
        return Err(format!("{:?} is not a valid name for its layers", dir.name));
    }
    if !dir.path.is_absolute() {
        return Err("not an absolute path".into());
    }
    let lower = match fs::canonicalize(&dir.path) {
        Ok(lower) if lower.is_dir() => lower,
        Ok(_) => return Err("not a directory".into()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Err("does not exist".into()),
        Err(error) => return Err(error.to_string()),
    };
    // overlayfs separates lower layers with `:` and escapes with `\`.
    if lower.to_str().is_none_or(|p| p.contains([':', ',', '\\'])) {
        return Err(
            "its path is not UTF-8 or holds `:`, `,` or `\\`, which overlayfs options cannot carry".into()
        );
    }
    if lower == Path::new("/") {
        return Err("the root directory cannot be overlaid".into());
    }
    Ok(lower)
}

/// The first slot beneath `base` (created mode 0700) that no other process holds and no other sandbox of this
/// process uses.
fn take_slot(base: &Path) -> io::Result<SlotGuard> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(base)?;
    let base = fs::canonicalize(base)?;
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    for n in 0..MAX_SLOTS {
        let dir = base.join(n.to_string());
        if let Some(slot) = held.iter_mut().find(|slot| slot.dir == dir) {
            if !slot.in_use {
                slot.in_use = true;
                return Ok(SlotGuard { dir });
            }
            continue;
        }
        real_dir(&dir)?;
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join("lock"))?;
        match lock.try_lock() {
            Ok(()) => {
                held.push(HeldSlot { dir: dir.clone(), _lock: lock, in_use: true });
                return Ok(SlotGuard { dir });
            }
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(error)) => return Err(error),
        }
    }
    Err(io::Error::other(format!("all {MAX_SLOTS} slots in {} are taken", base.display())))
}

/// Create `dir` (mode 0700) unless it exists; fail unless it is a directory itself (not a symbolic link).
fn real_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    if fs::symlink_metadata(dir)?.is_dir() {
        Ok(())
    } else {
        Err(io::Error::other(format!("{} is not a directory", dir.display())))
    }
}

/// The overlay of `lower` with its layers in `<slot>/<name>`: `upper` and `work`, emptied first when they were
/// made for another lower directory (named in `<slot>/<name>/lower`) or may have been cut short by a crash of
/// the host (see below).
///
/// The overlay is `volatile`: it never syncs its upper layer, so unmounting it (when the last command using it
/// and the sandbox are gone: at the end of every `uexec run`) costs no `syncfs` of the file system beneath,
/// which every run would pay (BENCHMARKS.md). What it wrote reaches the disk as page cache always does; only a crash of the host
/// can lose some of it. The kernel leaves `work/work/incompat/volatile` behind and refuses to mount the layers
/// again until it is removed; the boot id recorded in `<slot>/<name>/boot` tells whether the host has
/// restarted since: if not, the layers are intact (a killed uexec unmounts them like any other exit) and the
/// marker is removed; if so, the layers are emptied (a cache, fetched again when needed).
///
/// `in_user_namespace`: mounted by a forked helper in the sandbox's user namespace (with a mount namespace of
/// its own there, which `fsmount` needs), with `userxattr` (overlayfs keeps its `user.overlay.*` attributes:
/// the `trusted.*` ones need `CAP_SYS_ADMIN` in the initial user namespace).
fn overlay(slot: &Path, name: &str, lower: &Path, in_user_namespace: bool) -> io::Result<Overlay> {
    let layers = slot.join(name);
    real_dir(&layers)?;
    let (upper, work, record) = (layers.join("upper"), layers.join("work"), layers.join("lower"));
    let wanted = lower.as_os_str().as_encoded_bytes();
    let recorded = read_record(&record)?;
    let boot_record = layers.join("boot");
    let boot = fs::read(BOOT_ID)?;
    // The kernel leaves `work/work` and the directories it makes there with mode 000: only a process with
    // CAP_DAC_OVERRIDE in the initial user namespace sees into them. An ordinary user owns them (the overlay was
    // made in the sandbox's user namespace): opened to the owner again, so the marker below can be seen and
    // removed, and the layers emptied.
    open_to_owner(&work)?;
    let volatile_marker = work.join("work/incompat/volatile");
    let crashed_since = read_record(&boot_record)? != boot
        && fs::symlink_metadata(&volatile_marker).is_ok_and(|meta| meta.is_dir());
    if recorded != wanted || crashed_since {
        for dir in [&upper, &work] {
            match fs::remove_dir_all(dir) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        fs::write(&record, wanted)?;
    }
    match fs::remove_dir_all(&volatile_marker) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    fs::write(&boot_record, &boot)?;
    real_dir(&upper)?;
    real_dir(&work)?;
    let c = |p: &Path| CString::new(p.as_os_str().as_encoded_bytes()).map_err(io::Error::other);
    let (lower_c, upper_c, work_c) = (c(lower)?, c(&upper)?, c(&work)?);
    let mount = if in_user_namespace {
        const UNSHARE_NS: &str = "unshare(CLONE_NEWNS)";
        const MOUNT: &str = "mounting the overlay (fsopen, fsconfig, fsmount)";
        let [mount] = crate::userns::in_user_namespace(&[UNSHARE_NS, MOUNT], || {
            crate::userns::unshare(libc::CLONE_NEWNS, UNSHARE_NS)?;
            let mount = crate::sys::overlay_mount(&lower_c, &upper_c, &work_c, true)
                .map_err(|e| crate::userns::StepFailure::new(MOUNT, e.raw_os_error().unwrap_or(libc::EIO)))?;
            Ok([std::os::fd::IntoRawFd::into_raw_fd(mount)])
        })
        .map_err(|failure| io::Error::other(failure.text()))?;
        mount
    } else {
        crate::sys::overlay_mount(&lower_c, &upper_c, &work_c, false)?
    };
    Ok(Overlay { path: lower.to_path_buf(), layers, upper, mount: Arc::new(mount) })
}

/// Give the owner `rwx` on `dir` and every directory beneath it that lacks them (never through a symbolic
/// link; the overlay's work directory holds a few at most).
fn open_to_owner(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => {
            if meta.permissions().mode() & 0o700 != 0o700 {
                fs::set_permissions(dir, fs::Permissions::from_mode(meta.permissions().mode() | 0o700))?;
            }
            for entry in fs::read_dir(dir)? {
                open_to_owner(&entry?.path())?;
            }
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// The kernel's random id of this boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// The content of the regular file `record`, empty when it does not exist.
fn read_record(record: &Path) -> io::Result<Vec<u8>> {
    match fs::symlink_metadata(record) {
        Ok(meta) if meta.is_file() => fs::read(record),
        Ok(_) => Err(io::Error::other(format!("{} is not a file", record.display()))),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

/// Whether a command's child can copy a detached mount made in the parent's mount namespace (Linux 6.15), or
/// why not; read once.
pub(crate) fn kernel_copies_detached_mounts() -> Result<(), String> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    ANSWER.get_or_init(read_kernel_release).clone()
}

/// See [`kernel_copies_detached_mounts`].
fn read_kernel_release() -> Result<(), String> {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_err(|e| format!("the kernel release is unknown (/proc/sys/kernel/osrelease: {e})"))?;
    let release = release.trim();
    match kernel_version(release) {
        Some(version) if version >= (6, 15) => Ok(()),
        _ => Err(format!(
            "the kernel ({release}) cannot copy a detached mount into a command's mount namespace (Linux 6.15)"
        )),
    }
}

/// `(major, minor)` of a kernel release string (`6.18.44-foo`).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("6.15"), Some((6, 15)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("garbage"), None);
        assert!(kernel_copies_detached_mounts().is_ok(), "this machine runs Linux >= 6.15");
    }

    #[test]
    fn the_layers_survive_a_remount_in_this_boot_and_are_emptied_after_a_restart() {
        // With CAP_SYS_ADMIN in this process, and as an ordinary user gets them: in the sandbox's user namespace.
        for in_user_namespace in [false, true] {
            layers_survive_a_remount(in_user_namespace);
        }
    }

    fn layers_survive_a_remount(in_user_namespace: bool) {
        let overlay = |slot: &Path, name: &str, lower: &Path| overlay(slot, name, lower, in_user_namespace);
        let dir = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        let (lower, slot) = (base.join("lower"), base.join("slot"));
        fs::create_dir_all(&lower).unwrap();
        fs::create_dir_all(&slot).unwrap();
        let first = overlay(&slot, "x", &lower).expect("an overlay as root");
        let marker = first.layers.join("work/work/incompat/volatile");
        assert!(marker.is_dir(), "the kernel marks a volatile overlay's work directory");
        fs::write(first.upper.join("kept"), "cached\n").unwrap();
        drop(first);
        // Unmounted in this boot: the marker goes, the layers stay.
        let second = overlay(&slot, "x", &lower).expect("mounted again in the same boot");
        assert_eq!(fs::read_to_string(second.upper.join("kept")).unwrap(), "cached\n");
        drop(second);
        // The twin: the layers were last mounted in another boot (a crash may have cut their writes short).
        fs::write(slot.join("x/boot"), "another boot\n").unwrap();
        let third = overlay(&slot, "x", &lower).expect("mounted after emptying");
        assert!(!third.upper.join("kept").exists(), "layers from another boot are emptied");
        assert_eq!(fs::read(slot.join("x/boot")).unwrap(), fs::read(BOOT_ID).unwrap());
    }

    #[test]
    fn a_closed_work_directory_is_opened_to_its_owner_and_a_symlink_is_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (closed, link) = (dir.path().join("work"), dir.path().join("link"));
        fs::create_dir_all(closed.join("incompat")).unwrap();
        fs::set_permissions(closed.join("incompat"), fs::Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(&closed, fs::Permissions::from_mode(0o000)).unwrap();
        std::os::unix::fs::symlink(&closed, &link).unwrap();
        // Denied: through the symbolic link nothing changes.
        open_to_owner(&link).unwrap();
        assert_eq!(fs::metadata(&closed).unwrap().permissions().mode() & 0o777, 0o000);
        // Allowed: the directory itself gets its owner's rights; a missing one is no error.
        open_to_owner(&closed).unwrap();
        assert_eq!(fs::metadata(&closed).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(closed.join("incompat")).unwrap().permissions().mode() & 0o777, 0o700);
        open_to_owner(&dir.path().join("missing")).unwrap();
    }

    #[test]
    fn names_and_paths_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let ok = CopyOnWriteDir { name: "cargo".into(), path: dir.path().to_path_buf() };
        assert_eq!(checked(&ok).unwrap(), fs::canonicalize(dir.path()).unwrap());
        for name in ["", "..", "a/b", "x y"] {
            assert!(checked(&CopyOnWriteDir { name: name.into(), ..ok.clone() }).is_err(), "{name:?}");
        }
        let missing = CopyOnWriteDir { path: dir.path().join("none"), ..ok.clone() };
        assert_eq!(checked(&missing).unwrap_err(), "does not exist");
        let relative = CopyOnWriteDir { path: "rel".into(), ..ok.clone() };
        assert!(checked(&relative).is_err());
        fs::create_dir(dir.path().join("a:b")).unwrap();
        assert!(checked(&CopyOnWriteDir { path: dir.path().join("a:b"), ..ok }).is_err());
    }

    #[test]
    fn slots_are_exclusive_while_held_and_reused_after() {
        let dir = tempfile::tempdir().unwrap();
        let first = take_slot(dir.path()).unwrap();
        let second = take_slot(dir.path()).unwrap();
        assert!(first.dir.ends_with("0") && second.dir.ends_with("1"), "{first:?} {second:?}");
        let first_dir = first.dir.clone();
        drop(first);
        let again = take_slot(dir.path()).unwrap();
        assert_eq!(again.dir, first_dir);
        // Another process cannot take a slot this one holds, used or not.
        let lock = fs::OpenOptions::new().write(true).open(first_dir.join("lock")).unwrap();
        assert!(matches!(lock.try_lock(), Err(fs::TryLockError::WouldBlock)));
    }
}
