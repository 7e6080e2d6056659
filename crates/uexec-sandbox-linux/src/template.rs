//! Mount namespaces built once per mount plan and entered by each command that has that plan (privileged
//! strategy): the command's mount work becomes one `setns` instead of copying the host's mount table, cloning,
//! attaching and re-flagging mounts, and tearing all of it down again at exit.
//!
//! The template's `/proc` is what the plan asks for: in the server-wide sandbox the copy of the shared PID
//! namespace's procfs (the command has checked it runs there); otherwise a fresh `hidepid=ptraceable` procfs of
//! the PID namespace of the thread that built it (the server's), which a command enters only when it runs in
//! that PID namespace too (it builds its own namespace, as before, in any other: a spawner that puts commands
//! in a PID namespace of their own).
//!
//! A template is made the second time the same plan (everything but the working directory) is prepared, by a
//! short-lived thread that unshares its mount namespace and builds the plan's tree there with the child's own
//! code; the namespace outlives the thread through its descriptor. The plan is the key: a command whose layout
//! differs in anything (another writable root, a `.git` that appeared, one more hidden file) gets another
//! template or, the first time, a namespace of its own, as before.
//!
//! A template must show what building the plan now would show. Two things can make it stale:
//! - the host's mount table changes (a mount under a writable root, a file system unmounted): the sandbox
//!   polls its `/proc/self/mountinfo` (`POLLPRI` on every change) and drops every template;
//! - a planned path changes identity (a directory renamed away and made again, `.git` removed and re-created by
//!   an unsandboxed command): the template's mount stays on the old directory entry. Each reuse resolves every
//!   planned path inside the template (`statx` relative to its root) and checks that it lands on the mount the
//!   template put there (its mount id); any difference drops the template and the command builds its own
//!   namespace.
//!
//! Commands sharing a template cannot change it: `mount` and friends fail under seccomp, `CAP_SYS_ADMIN` is
//! gone, and every mount in it is a private copy. What they can write is the writable roots, as without it.
#![allow(unsafe_code)] // Reason: `poll`, `open` and `statx` on descriptors this module owns.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use crate::child::{self, MountMode, MountPlan};

/// The most templates kept per sandbox (least recently used first out).
const MAX_TEMPLATES: usize = 8;
/// The most plans remembered as seen once.
const MAX_SEEN: usize = 32;

/// What a template is built from: a mount plan without its working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    /// `MountPlan::readonly_everything`.
    readonly_everything: bool,
    /// Each writable root and whether it is `nodev`.
    roots: Vec<(CString, bool)>,
    /// `MountPlan::pinned`.
    pinned: Vec<CString>,
    /// `MountPlan::closed`.
    closed: Vec<CString>,
    /// `MountPlan::protected`.
    protected: Vec<CString>,
    /// `MountPlan::nodev`.
    nodev: Vec<CString>,
    /// `MountPlan::hidden_pinned`.
    hidden_pinned: Vec<CString>,
    /// `MountPlan::hidden_dirs`.
    hidden_dirs: Vec<CString>,
    /// `MountPlan::hidden_files`.
    hidden_files: Vec<CString>,
    /// `MountPlan::proc_hidepid`, and whether `/proc` is the copy of the shared PID namespace's procfs.
    proc: (bool, bool),
    /// The paths of `MountPlan::copy_on_write` (their overlays are the sandbox's, one per path).
    copy_on_write: Vec<CString>,
}

impl Key {
    /// The key of `plan`.
    fn of(plan: &MountPlan) -> Key {
        Key {
            readonly_everything: plan.readonly_everything,
            roots: plan.roots.iter().map(|r| (r.path.clone(), r.nodev)).collect(),
            pinned: plan.pinned.clone(),
            closed: plan.closed.clone(),
            protected: plan.protected.clone(),
            nodev: plan.nodev.clone(),
            hidden_pinned: plan.hidden_pinned.clone(),
            hidden_dirs: plan.hidden_dirs.clone(),
            hidden_files: plan.hidden_files.clone(),
            proc: (plan.proc_hidepid, plan.procfs.is_some()),
            copy_on_write: plan.copy_on_write.iter().map(|(path, _)| path.clone()).collect(),
        }
    }

    /// Every path the template puts a mount on (the `nodev` ones only change flags).
    fn mounted_paths(&self) -> impl Iterator<Item = &CString> {
        self.roots
            .iter()
            .map(|(path, _)| path)
            .chain(&self.pinned)
            .chain(&self.closed)
            .chain(&self.protected)
            .chain(&self.copy_on_write)
            .chain(&self.hidden_pinned)
            .chain(&self.hidden_dirs)
            .chain(&self.hidden_files)
    }
}

/// One built namespace.
#[derive(Debug)]
struct Template {
    /// Its plan.
    key: Key,
    /// The namespace.
    namespace: Arc<OwnedFd>,
    /// Its root directory (an `O_PATH` descriptor), to resolve paths inside it.
    root: OwnedFd,
    /// The mount id each of `key.mounted_paths()` resolved to when it was built.
    marks: Vec<u64>,
    /// The PID namespace (device, inode) of its `/proc` when that is a fresh procfs (the per-command sandbox);
    /// `None` when it is the copy of the shared PID namespace's procfs.
    proc_pid_namespace: Option<NamespaceId>,
    /// When it was last used (a counter).
    used: u64,
}

/// A namespace's identity (device and inode of its `nsfs` file).
pub(crate) type NamespaceId = (u64, u64);

/// What a command with a template enters: the namespace, and the PID namespace its `/proc` shows when that is
/// a fresh procfs (the command must run there to enter it).
pub(crate) type Entry = (Arc<OwnedFd>, Option<NamespaceId>);

/// The templates of one sandbox.
#[derive(Debug, Default)]
pub(crate) struct Templates {
    /// The state, behind one lock (held while a template is checked or built).
    state: Mutex<State>,
}

/// See [`Templates`].
#[derive(Debug, Default)]
struct State {
    /// `/proc/self/mountinfo`, polled for changes of the host's mount table (`None` until the first template,
    /// or when it cannot be opened: then no template is made).
    mountinfo: Option<OwnedFd>,
    /// The built templates.
    templates: Vec<Template>,
    /// Plans seen once, newest last.
    seen: Vec<Key>,
    /// The use counter.
    clock: u64,
}

impl State {
    /// Remember `key` as seen once (the oldest such plan is forgotten beyond [`MAX_SEEN`]).
    fn remember(&mut self, key: Key) {
        if self.seen.len() >= MAX_SEEN {
            self.seen.remove(0);
        }
        self.seen.push(key);
    }
}

impl Templates {
    /// The namespace to enter for `plan`, if a template for it exists and is current, or was just built (the
    /// second time this plan is seen), with the PID namespace its `/proc` shows when that is a fresh procfs
    /// (the command must run there to enter it). `None`: the command builds its own namespace.
    pub(crate) fn namespace_for(&self, plan: &MountPlan) -> Option<Entry> {
        if plan.mode != MountMode::Privileged {
            return None;
        }
        let key = Key::of(plan);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.clock += 1;
        let now = state.clock;
        if state.mountinfo.as_ref().is_some_and(mount_table_changed) {
            tracing::debug!(
                count = state.templates.len(),
                "the mount table changed: mount templates dropped"
            );
            state.templates.clear();
        }
        if let Some(at) = state.templates.iter().position(|t| t.key == key) {
            if state.templates[at].is_current() {
                let template = &mut state.templates[at];
                template.used = now;
                return Some((template.namespace.clone(), template.proc_pid_namespace));
            }
            tracing::debug!("a planned path changed identity: its mount template dropped");
            state.templates.swap_remove(at);
            state.remember(key);
            return None;
        }
        let Some(seen) = state.seen.iter().position(|k| *k == key) else {
            state.remember(key);
            return None;
        };
        state.seen.remove(seen);
        if state.mountinfo.is_none() {
            state.mountinfo = open_mountinfo();
            state.mountinfo.as_ref()?;
        }
        match Template::build(plan, key, now) {
            Ok(template) => {
                let namespace = (template.namespace.clone(), template.proc_pid_namespace);
                if state.templates.len() >= MAX_TEMPLATES
                    && let Some(oldest) =
                        state.templates.iter().enumerate().min_by_key(|(_, t)| t.used).map(|(i, _)| i)
                {
                    state.templates.swap_remove(oldest);
                }
                state.templates.push(template);
                Some(namespace)
            }
            Err(error) => {
                tracing::debug!(%error, "no mount template: each command builds its own namespace");
                None
            }
        }
    }
}

impl Template {
    /// Build the template for `plan` on a thread of its own.
    fn build(plan: &MountPlan, key: Key, now: u64) -> std::io::Result<Template> {
        let built = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("uexec-mount-template".into())
                .spawn_scoped(scope, || -> std::io::Result<(OwnedFd, OwnedFd, Option<NamespaceId>)> {
                    let failed = |failure: uexec_ports::process::ChildSetupFailure| {
                        std::io::Error::other(format!(
                            "{}: {}",
                            failure.stage,
                            std::io::Error::from_raw_os_error(failure.errno)
                        ))
                    };
                    child::template_namespace(plan).map_err(failed)?;
                    // The namespace, as a descriptor that outlives this thread (opened while `/proc` is still
                    // this process's: the template's is the commands' PID namespace's).
                    let namespace = std::fs::File::open("/proc/thread-self/ns/mnt")?;
                    // A fresh procfs mounted here is this thread's PID namespace's.
                    let proc_pid_namespace = match plan.procfs {
                        Some(_) => None,
                        None => {
                            use std::os::unix::fs::MetadataExt;
                            let pid = std::fs::metadata("/proc/thread-self/ns/pid")?;
                            Some((pid.dev(), pid.ino()))
                        }
                    };
                    child::build_template(plan).map_err(failed)?;
                    Ok((namespace.into(), open_root()?, proc_pid_namespace))
                })
                .map(|thread| thread.join())
        });
        let (namespace, root, proc_pid_namespace) = match built {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => return Err(std::io::Error::other("the template thread panicked")),
            Err(error) => return Err(error),
        };
        let marks = key.mounted_paths().map(|path| mount_id_in(&root, path)).collect::<Result<_, _>>()?;
        Ok(Template { key, namespace: Arc::new(namespace), root, marks, proc_pid_namespace, used: now })
    }

    /// True when every planned path still resolves, inside the template, to the mount the template put there.
    fn is_current(&self) -> bool {
        self.key
            .mounted_paths()
            .zip(&self.marks)
            .all(|(path, mark)| mount_id_in(&self.root, path).is_ok_and(|id| id == *mark))
    }
}

/// `/proc/self/mountinfo`, for [`mount_table_changed`].
fn open_mountinfo() -> Option<OwnedFd> {
    match std::fs::File::open("/proc/self/mountinfo") {
        Ok(file) => {
            // The first poll reports the table as changed (the file's event count starts behind); take it now.
            let fd = OwnedFd::from(file);
            let _ = mount_table_changed(&fd);
            Some(fd)
        }
        Err(error) => {
            tracing::debug!(%error, "cannot watch the mount table: no mount templates");
            None
        }
    }
}

/// True when the mount table changed since the last call (`POLLPRI`/`POLLERR` on `mountinfo`; the poll itself
/// resets the event). An error counts as a change.
fn mount_table_changed(mountinfo: &OwnedFd) -> bool {
    let mut entry = libc::pollfd { fd: mountinfo.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
    // SAFETY: one live `pollfd` for the call, timeout 0.
    let ready = unsafe { libc::poll(&raw mut entry, 1, 0) };
    ready != 0
}

/// The id of the mount that `path` (absolute) resolves to inside the tree of `root`, without following its
/// last component: one `statx` relative to `root`. A symbolic link on the way that leads out of the tree (an
/// absolute one resolves from this process's root, in the host's mount tree) can only land on a mount the
/// template did not make, so it reads as a changed path, never as a current one.
fn mount_id_in(root: &OwnedFd, path: &CStr) -> std::io::Result<u64> {
    let relative = match path.to_bytes().strip_prefix(b"/") {
        Some(b"") | None => c".".to_owned(),
        Some(rest) => CString::new(rest).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?,
    };
    // SAFETY: an all-zero `statx` is a valid value for the kernel to overwrite.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT | libc::AT_STATX_DONT_SYNC;
    // SAFETY: statx of a NUL-terminated path relative to an open directory, into a local buffer.
    let ret =
        unsafe { libc::statx(root.as_raw_fd(), relative.as_ptr(), flags, libc::STATX_MNT_ID, &mut stx) };
    if ret != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(std::io::Error::from_raw_os_error(libc::ENOSYS));
    }
    Ok(stx.stx_mnt_id)
}

/// The calling thread's root directory, as an `O_PATH` descriptor.
fn open_root() -> std::io::Result<OwnedFd> {
    // SAFETY: open of a static NUL-terminated path with integer flags.
    let fd = unsafe { libc::open(c"/".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
