//! The rules for what a `.git` file may make read-only: how its content is read, and when the gitdir it names is
//! protected (`uexec-plan` reads the host and applies them; the engine's trust rule reads them too).
//!
//! A sandboxed command can create `.git` (file, directory or symlink) and `.uexec` in a writable root where they
//! are absent. Whatever such an entry names was chosen by that command, so following it must never freeze more
//! than the entry itself: a `gitdir:` that is a writable root, contains one, or lies outside the root its `.git`
//! belongs to protects nothing (see `docs/sandbox.md`, "Planted protected entries").

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// The most bytes of a `.git` file worth reading: `gitdir: `, a path git can open (`PATH_MAX` = 4096) and line
/// ends. A longer file names no usable gitdir (git fails with `ENAMETOOLONG`), so its gitdir is not looked up.
pub const MAX_GIT_FILE_BYTES: u64 = 4096 + 64;

/// Why a `.git` file names no gitdir to protect (the `.git` file itself stays protected whatever it holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitFileProblem {
    /// It is a symlink: a protected entry that is a link protects only itself, its target is never followed.
    Symlink,
    /// It is not a regular file (a FIFO, a socket, a device): it is never opened for reading.
    NotARegularFile,
    /// It is larger than [`MAX_GIT_FILE_BYTES`].
    TooLarge {
        /// Its size in bytes.
        size: u64,
    },
    /// It does not start with `gitdir:` or names an empty path.
    NoGitdirLine,
    /// A `commondir` file that names no path (empty, or holding a NUL byte).
    NoPath,
    /// Opening or reading it failed.
    Unreadable(String),
}

impl fmt::Display for GitFileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GitFileProblem::Symlink => {
                f.write_str("a symlink (only the link is protected, its target is not followed)")
            }
            GitFileProblem::NotARegularFile => f.write_str("not a regular file (not read)"),
            GitFileProblem::TooLarge { size } => {
                write!(f, "{size} bytes, more than any gitdir file ({MAX_GIT_FILE_BYTES}; not read)")
            }
            GitFileProblem::NoGitdirLine => f.write_str("no `gitdir:` line"),
            GitFileProblem::NoPath => f.write_str("names no path"),
            GitFileProblem::Unreadable(why) => write!(f, "unreadable ({why})"),
        }
    }
}

/// The gitdir a `.git` file in `root` names: the text after `gitdir:` on its first line, trimmed, resolved
/// against `root` when relative (as git does). `content` is at most [`MAX_GIT_FILE_BYTES`] long.
pub fn parse_git_file(root: &Path, content: &[u8]) -> Result<PathBuf, GitFileProblem> {
    let first_line = content.split(|b| *b == b'\n').next().unwrap_or_default();
    let target =
        first_line.strip_prefix(b"gitdir:").map(<[u8]>::trim_ascii).ok_or(GitFileProblem::NoGitdirLine)?;
    if target.is_empty() || target.contains(&0) {
        return Err(GitFileProblem::NoGitdirLine);
    }
    Ok(root.join(path_from_bytes(target)))
}

/// A path from the bytes of a file (any bytes on Unix, as the kernel takes them).
#[cfg(unix)]
fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// A path from the bytes of a file (UTF-8 where paths are not bytes).
#[cfg(not(unix))]
fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
}

/// Why the gitdir a `.git` file names is not protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnprotectedGitdir {
    /// It lies outside every writable root: read-only already.
    ReadOnlyAnyway,
    /// It is this writable root.
    IsWritableRoot(PathBuf),
    /// It contains this writable root (`gitdir: ..`, `gitdir: /`): protecting it would freeze the root.
    ContainsWritableRoot(PathBuf),
    /// It lies in a writable root other than the one its `.git` belongs to (another root, or one nested inside
    /// the owner): a `.git` file protects only what is its own.
    OutsideOwnRoot {
        /// The root the `.git` file belongs to.
        owner: PathBuf,
        /// The writable root the gitdir lies in.
        root: PathBuf,
    },
    /// It is not a git directory (no `HEAD` file in it): git would not use it.
    NotAGitDir,
    /// Its path goes through a symlink: a gitdir is looked up without following links, like every protected
    /// entry.
    ThroughSymlink,
    /// It does not exist or cannot be resolved.
    Missing(String),
}

impl fmt::Display for UnprotectedGitdir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnprotectedGitdir::ReadOnlyAnyway => {
                f.write_str("outside every writable root (read-only anyway)")
            }
            UnprotectedGitdir::IsWritableRoot(root) => {
                write!(f, "is the writable root {} (protecting it would freeze the root)", root.display())
            }
            UnprotectedGitdir::ContainsWritableRoot(root) => {
                write!(
                    f,
                    "contains the writable root {} (protecting it would freeze the root)",
                    root.display()
                )
            }
            UnprotectedGitdir::OutsideOwnRoot { owner, root } => write!(
                f,
                "lies in the writable root {}, not in {} where its .git is",
                root.display(),
                owner.display()
            ),
            UnprotectedGitdir::NotAGitDir => f.write_str("not a git directory (no HEAD file)"),
            UnprotectedGitdir::ThroughSymlink => {
                f.write_str("its path goes through a symlink (not followed)")
            }
            UnprotectedGitdir::Missing(why) => write!(f, "does not resolve ({why})"),
        }
    }
}

/// Decide whether `gitdir` (canonical), named by the `.git` file of writable root `owner` (canonical), may be
/// protected, given every writable root (canonical). `Ok` means: protect it. The rule, in order: a gitdir that is
/// a writable root or contains one is refused; one outside every root needs nothing; one whose innermost writable
/// root is not `owner` is refused. (Whether it looks like a git directory is the caller's I/O.)
pub fn gitdir_protection(gitdir: &Path, owner: &Path, roots: &[PathBuf]) -> Result<(), UnprotectedGitdir> {
    if roots.iter().any(|root| root == gitdir) {
        return Err(UnprotectedGitdir::IsWritableRoot(gitdir.to_path_buf()));
    }
    if let Some(root) = roots.iter().find(|root| root.starts_with(gitdir)) {
        return Err(UnprotectedGitdir::ContainsWritableRoot(root.clone()));
    }
    let innermost = roots.iter().filter(|root| gitdir.starts_with(root)).max_by_key(|root| depth(root));
    match innermost {
        None => Err(UnprotectedGitdir::ReadOnlyAnyway),
        Some(root) if root != owner => {
            Err(UnprotectedGitdir::OutsideOwnRoot { owner: owner.to_path_buf(), root: root.clone() })
        }
        Some(_) => Ok(()),
    }
}

/// `path` with `.` and `..` resolved by the text alone (`..` of `/` is `/`). Equal to what the kernel resolves
/// exactly when no component is a symlink, which is how a gitdir is then opened (`RESOLVE_NO_SYMLINKS`).
pub fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if out.parent().is_some() {
                    out.pop();
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// What kind of git directory a protected set is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitDirKind {
    /// A repository's own git directory: `.git`, the gitdir a `.git` file names, `.git/modules/<name>`.
    Repository,
    /// A linked worktree's administrative directory, `<common>/worktrees/<id>` (its config, hooks and info come
    /// from the common dir).
    LinkedWorktree,
}

/// What the sandbox does about a protected git entry that does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenAbsent {
    /// Create an empty directory and protect it: git reads an empty `hooks/` or `info/` as none.
    EmptyDir,
    /// Create an empty file and protect it: git reads an empty `config`, `config.worktree` or `alternates` as
    /// none.
    EmptyFile,
    /// Create a file naming the git directory itself (`.`) and protect it: git reads a repository's `commondir`
    /// as a redirection of its common dir whenever the file exists (and dies on an empty one), and `.` redirects
    /// it to where it already is (checked with git 2.47: status, commit, branch, stash, worktree add, gc).
    SelfCommonDir,
    /// Create a symbolic link to [`ABSENT_LINK_TARGET`], a path nobody can create, and protect it: git opens a
    /// `shallow` file by following it (`fopen`), finds nothing and reads the repository as complete, as when the
    /// file is absent, while the mount over the link keeps a command from creating one (an empty file would not
    /// do: git reads an empty `shallow` as a shallow repository). libgit2 `lstat`s it instead and calls the
    /// repository shallow, with no shallow commit.
    AbsentLink,
    /// Its absence means the directory is not what it was taken for (a linked worktree's administrative
    /// directory without `commondir` is a repository of its own, whose `config` and `hooks` git would use): the
    /// whole git directory stays read-only (fails closed; the report says why).
    WholeReadOnly,
}

/// What the placeholder of a [`WhenAbsent::AbsentLink`] entry points at: below `/dev/null`, a character device,
/// so the path resolves to `ENOTDIR` for everyone, root included, and nothing can ever be created there.
pub const ABSENT_LINK_TARGET: &str = "/dev/null/uexec-absent";

/// One entry of a git directory that stays read-only while the rest of it is writable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GitDirEntry {
    /// Its path relative to the git directory.
    pub name: &'static str,
    /// What is done when it is absent.
    pub when_absent: WhenAbsent,
    /// Why git makes it dangerous (for the docs and the report).
    pub reason: &'static str,
}

/// Inside a repository's git directory: everything git executes or takes configuration from, and `shallow`,
/// which tells git where history ends (a planted one makes the person's own `git gc --prune=now` delete every
/// commit beyond the commits it names).
const REPOSITORY_ENTRIES: [GitDirEntry; 10] = [
    GitDirEntry {
        name: "config",
        when_absent: WhenAbsent::EmptyFile,
        reason: "configuration: core.hooksPath, core.fsmonitor, core.sshCommand, aliases, filters, include.path",
    },
    GitDirEntry {
        name: "config.worktree",
        when_absent: WhenAbsent::EmptyFile,
        reason: "configuration read with extensions.worktreeConfig",
    },
    GitDirEntry { name: "hooks", when_absent: WhenAbsent::EmptyDir, reason: "hooks git runs" },
    GitDirEntry {
        name: "info",
        when_absent: WhenAbsent::EmptyDir,
        reason: "info/attributes picks filter, diff and merge drivers; info/exclude, grafts, sparse-checkout",
    },
    GitDirEntry {
        name: "objects/info/alternates",
        when_absent: WhenAbsent::EmptyFile,
        reason: "points git at other object stores",
    },
    GitDirEntry {
        name: "objects/info/http-alternates",
        when_absent: WhenAbsent::EmptyFile,
        reason: "points dumb-HTTP fetches at other object stores",
    },
    GitDirEntry {
        name: "commondir",
        when_absent: WhenAbsent::SelfCommonDir,
        reason: "redirects the common dir, whose config and hooks git then uses",
    },
    GitDirEntry { name: "remotes", when_absent: WhenAbsent::EmptyDir, reason: "legacy remote configuration" },
    GitDirEntry {
        name: "branches",
        when_absent: WhenAbsent::EmptyDir,
        reason: "legacy remote configuration",
    },
    GitDirEntry {
        name: "shallow",
        when_absent: WhenAbsent::AbsentLink,
        reason: "where history ends: git gc and prune delete what lies beyond the commits it names",
    },
];

/// Inside a linked worktree's administrative directory (a git directory with a `commondir` file: see
/// [`git_dir_kind`]).
const LINKED_WORKTREE_ENTRIES: [GitDirEntry; 3] = [
    GitDirEntry {
        name: "config.worktree",
        when_absent: WhenAbsent::EmptyFile,
        reason: "configuration read with extensions.worktreeConfig",
    },
    GitDirEntry {
        name: "commondir",
        when_absent: WhenAbsent::WholeReadOnly,
        reason: "names the common dir, whose config and hooks git uses",
    },
    GitDirEntry {
        name: "gitdir",
        when_absent: WhenAbsent::EmptyFile,
        reason: "names the worktree's .git file: `git worktree remove` deletes the directory it names, `git \
                 worktree repair` writes there (an empty one is read as none: the worktree is not listed)",
    },
];

/// The entries of a git directory of `kind` that stay read-only; everything else in it (index, objects, refs,
/// logs, HEAD, the state of a merge or rebase) is writable, so that git works in a sandboxed command.
pub fn protected_git_entries(kind: GitDirKind) -> &'static [GitDirEntry] {
    match kind {
        GitDirKind::Repository => &REPOSITORY_ENTRIES,
        GitDirKind::LinkedWorktree => &LINKED_WORKTREE_ENTRIES,
    }
}

/// The protected entries in words, for the protection report and `uexec sandbox-report`: which stay read-only
/// in a repository's and a linked worktree's git directory, and what is done when one is absent.
pub fn protected_git_entries_text() -> String {
    let names = |kind| protected_git_entries(kind).iter().map(|e| e.name).collect::<Vec<_>>().join(", ");
    format!(
        "only {} (and {} of worktrees/<id>, or of any git directory with a commondir file; modules/<name> like a \
         repository, and the common dir a linked worktree's commondir names when it lies in the same root) stay \
         read-only, the rest (index, objects, refs, logs, HEAD) is writable; an absent one gets an inert \
         placeholder first (an empty file or directory, a commondir naming the git directory itself, a shallow \
         linking to {ABSENT_LINK_TARGET}), so none can be created; {CLOSED_DIR}/ (an empty one when absent) and \
         the directories of submodule names in it take no new entry (a new submodule's git dir would be used, \
         hooks and all, by the person's own git submodule update), the submodule git dirs present stay writable",
        names(GitDirKind::Repository),
        names(GitDirKind::LinkedWorktree),
    )
}

/// The directory of a repository's git directory that takes no new entry from a sandboxed command: `modules/`,
/// where git keeps submodules' git directories. The person's own `git submodule update --init` reuses a
/// `modules/<name>` it finds there, hooks and config included, so one a command made would run its hooks outside
/// the sandbox; the git directories of the submodules present stay writable (their own protected entries
/// aside). An absent one gets an empty directory (git reads it as none), so `git submodule add` and
/// `git submodule update --init` of a new submodule run outside the sandbox.
pub const CLOSED_DIR: &str = "modules";

/// The directories of the repository git directory `gitdir` (resolved by its text) that take no new entry: its
/// [`CLOSED_DIR`] and every directory between it and a submodule git directory found there (`found`, what
/// the walk of `uexec_plan::git_dirs_below` returned: submodule names may hold slashes, `modules/a/b`),
/// shallowest first. The submodule git directories themselves are not among them. Both adapters render this
/// list: the Linux one binds each read-only over itself (the submodules' git dirs below stay writable mounts), the
/// macOS one denies creating anything directly in each.
pub fn closed_dirs(gitdir: &Path, found: &[(PathBuf, GitDirKind)]) -> Vec<PathBuf> {
    let modules = gitdir.join(CLOSED_DIR);
    let mut out = vec![modules.clone()];
    for (dir, _) in found {
        // Only this git directory's own submodules: a module's own `modules/` is closed by its own call.
        let Ok(rest) = dir.strip_prefix(&modules) else { continue };
        let Some(parent) = dir.parent() else { continue };
        if rest.components().count() < 2 || found_below_other(dir, &modules, found) {
            continue;
        }
        for above in parent.ancestors().take_while(|above| *above != modules) {
            if !out.iter().any(|known| known == above) {
                out.push(above.to_path_buf());
            }
        }
    }
    out.sort_by_key(|dir| depth(dir));
    out
}

/// True when `dir` lies below another git directory of `found` that itself lies below `modules` (a submodule
/// of a submodule: `modules/a/modules/b` belongs to `modules/a`, whose own call closes its `modules/`).
fn found_below_other(dir: &Path, modules: &Path, found: &[(PathBuf, GitDirKind)]) -> bool {
    found.iter().any(|(other, _)| other != dir && other.starts_with(modules) && dir.starts_with(other))
}

/// The kind of the git directory `dir` (resolved by its text), from its `commondir` file: `None` when there is
/// none, else what [`parse_commondir`] made of it. Git takes the configuration, hooks and `info/` of a
/// directory whose `commondir` names another directory from that common dir, and those of any other from the
/// directory itself, wherever it lies (`worktrees/<id>` included): a `commondir` naming `dir` itself (the
/// sandbox's own placeholder, `.`) is no redirection, and one that cannot be read by the rules here (a
/// symlink, too large) leaves `dir` a repository, whose entries are the stricter set.
pub fn git_dir_kind(dir: &Path, commondir: Option<&Result<PathBuf, GitFileProblem>>) -> GitDirKind {
    match commondir {
        Some(Ok(common)) if *common != normalize_lexically(dir) => GitDirKind::LinkedWorktree,
        _ => GitDirKind::Repository,
    }
}

/// The common dir a `commondir` file of the git directory `gitdir` names, read as git reads it (`setup.c`,
/// `get_common_dir_noenv`): the whole content with its trailing newlines and carriage returns removed,
/// resolved against `gitdir` when relative, `.` and `..` resolved by the text. `content` is at most
/// [`MAX_GIT_FILE_BYTES`] long.
pub fn parse_commondir(gitdir: &Path, content: &[u8]) -> Result<PathBuf, GitFileProblem> {
    let mut end = content.len();
    while end > 0 && matches!(content[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    let text = &content[..end];
    if text.is_empty() || text.contains(&0) {
        return Err(GitFileProblem::NoPath);
    }
    Ok(normalize_lexically(&gitdir.join(path_from_bytes(text))))
}

/// The most git directories (a repository, its linked worktrees' and submodules' git dirs) looked into below one
/// writable root's git directory; beyond it the whole git directory stays read-only.
pub const MAX_GIT_DIRS: usize = 64;

/// The most directory entries read while looking for submodule git dirs under `modules/` of one root; beyond it
/// the whole git directory stays read-only.
pub const MAX_GIT_DIR_ENTRIES: usize = 4096;

/// How deep submodule names (`modules/a/b/c`) are followed under `modules/`; deeper ones make the whole git
/// directory read-only.
pub const MAX_MODULE_NAME_DEPTH: usize = 8;

/// The most entries of the workspace's top level read, per command, while looking for the repositories nested
/// there (`sub/.git`: a vendored checkout, a submodule's work tree, a folder of several repositories opened as
/// one workspace). A listing is cheap (names and types, one `lstat` of `<dir>/.git` per directory), so the
/// bound is far above real workspaces; a top level beyond it cannot be examined, and the command is refused
/// ([`NestedUnexamined`]): a command that fills the top level chooses nothing that stays writable.
pub const MAX_NESTED_SCAN_ENTRIES: usize = 16384;

/// The most repositories nested at the workspace's top level protected entry by entry (git commits in them
/// inside the sandbox); beyond it the others' `.git` are read-only as a whole ([`nested_modes`]).
pub const MAX_NESTED_REPOSITORIES: usize = 32;

/// The most repositories nested at the workspace's top level protected at all (each `.git` beyond
/// [`MAX_NESTED_REPOSITORIES`] is one read-only mount, one denied path on macOS); beyond it the command is refused
/// ([`NestedUnexamined`]).
pub const MAX_NESTED_READ_ONLY: usize = 512;

/// How one repository nested at the workspace's top level is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NestedMode {
    /// As a root's own git directory: its configuration, hooks and history read-only, the rest writable.
    EntryByEntry,
    /// Its `.git` read-only as a whole: git reads it inside the sandbox, nothing in it can be written.
    WholeReadOnly,
}

/// Why the repositories nested at the workspace's top level cannot all be protected: the command is refused
/// (fails closed), with what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NestedUnexamined {
    /// The top level holds more than [`MAX_NESTED_SCAN_ENTRIES`] entries.
    TooManyEntries,
    /// More than [`MAX_NESTED_READ_ONLY`] repositories are nested there.
    TooManyRepositories(usize),
    /// The top level could not be listed.
    Unlistable(String),
}

impl fmt::Display for NestedUnexamined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NestedUnexamined::TooManyEntries => write!(
                f,
                "the workspace's top level holds more than {MAX_NESTED_SCAN_ENTRIES} entries \
                 (MAX_NESTED_SCAN_ENTRIES), so the repositories nested there cannot all be examined"
            ),
            NestedUnexamined::TooManyRepositories(count) => write!(
                f,
                "the workspace's top level holds {count} repositories, more than {MAX_NESTED_READ_ONLY} \
                 (MAX_NESTED_READ_ONLY), so they cannot all be protected"
            ),
            NestedUnexamined::Unlistable(why) => {
                write!(
                    f,
                    "the workspace's top level cannot be listed ({why}), so nested repositories cannot be examined"
                )
            }
        }?;
        f.write_str(
            "; a command's .git config and hooks there would run in the person's own git, so nothing is run: \
             remove the entries a command created at the top level, or open a smaller directory as the workspace",
        )
    }
}

/// How each of the repositories nested at the workspace's top level is protected, given when each one's `.git`
/// was created (`births`, in any order; `None` where the file system does not say): every one entry by entry up
/// to [`MAX_NESTED_REPOSITORIES`]; beyond it the oldest that many entry by entry and the others' `.git`
/// read-only as a whole, so a command that creates repositories pushes none of the person's older ones out of the
/// budget (what it creates is born later); with a birth time unknown, or two at the cut the same, those not
/// surely among the oldest are read-only as a whole. Names and listing order, which a command can choose, decide
/// nothing, and whatever the order none is left unprotected (a command that renames an old directory into a
/// `.git` can at most make one of the person's repositories read-only as a whole). Beyond
/// [`MAX_NESTED_READ_ONLY`] none can be protected: `Err`.
pub fn nested_modes(births: &[Option<std::time::SystemTime>]) -> Result<Vec<NestedMode>, NestedUnexamined> {
    if births.len() > MAX_NESTED_READ_ONLY {
        return Err(NestedUnexamined::TooManyRepositories(births.len()));
    }
    if births.len() <= MAX_NESTED_REPOSITORIES {
        return Ok(vec![NestedMode::EntryByEntry; births.len()]);
    }
    let mut modes = vec![NestedMode::WholeReadOnly; births.len()];
    let Some(known) = births.iter().copied().collect::<Option<Vec<_>>>() else {
        return Ok(modes);
    };
    let mut order: Vec<usize> = (0..known.len()).collect();
    order.sort_by_key(|&i| known[i]);
    let first_left_out = known[order[MAX_NESTED_REPOSITORIES]];
    for &i in &order[..MAX_NESTED_REPOSITORIES] {
        if known[i] < first_left_out {
            modes[i] = NestedMode::EntryByEntry;
        }
    }
    Ok(modes)
}

/// The most pack files (`objects/pack/*`: `.pack`, `.idx`, `.rev`, ...) of one git directory bound read-only
/// over themselves, so that no sandboxed command can remove or replace the history they hold (new packs can
/// still be written: `fetch` works). Beyond it `objects/pack` stays read-only as a whole (a fetch of more than
/// `fetch.unpackLimit` objects, a `gc` or a `repack` then fail inside the sandbox).
pub const MAX_PINNED_PACK_FILES: usize = 64;

/// The most loose objects (`objects/<xx>/<rest>`: commits, trees and blobs written since the last pack) of one
/// git directory bound read-only over themselves when a command starts, so that no sandboxed command can
/// remove them (`git prune`, `gc --prune=now`). Beyond it the first ones in name order are pinned and the
/// report says how the rest can be kept (a `git gc` outside packs them, and pack files are pinned). Each pin
/// is a mount, and mounts cost more the more a namespace holds (measured: 64 add about 2 ms to a one-shot
/// `uexec run`, 250 about 13 ms), hence the same bound as for pack files.
pub const MAX_PINNED_LOOSE_OBJECTS: usize = 64;

/// True when `name` is a loose object's file name in a fan-out directory: the rest of a SHA-1 (38) or SHA-256
/// (62) object name in lowercase hexadecimal (git's temporary `tmp_obj_*` files are not).
pub fn is_loose_object_name(name: &[u8]) -> bool {
    matches!(name.len(), 38 | 62) && name.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// True when `name` is a fan-out directory of `objects/`: two lowercase hexadecimal digits.
pub fn is_fan_out_name(name: &[u8]) -> bool {
    name.len() == 2 && name.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The history rule in words, for the protection report: which objects a sandboxed command cannot remove.
pub fn history_text() -> String {
    format!(
        "the objects present when the command starts, the pack files (at most {MAX_PINNED_PACK_FILES} per git \
         directory, else objects/pack as a whole) and the loose objects (the first {MAX_PINNED_LOOSE_OBJECTS} by \
         name), cannot be removed or replaced, so that history survives reset --hard, branch -D, reflog expire \
         and gc --prune=now inside the sandbox; refs and reflogs can be \
         removed, and objects a command writes can be removed by later ones until they are packed"
    )
}

/// The repository a linked worktree's administrative directory `gitdir` belongs to, by its text: `<common>` when
/// `gitdir` (resolved by its text) is `<common>/worktrees/<id>`, as `git worktree add` makes it. Nothing is
/// looked up; `None` for any other path (and for `<common>` = `/`).
pub fn worktree_common_dir(gitdir: &Path) -> Option<PathBuf> {
    let gitdir = normalize_lexically(gitdir);
    let worktrees = gitdir.parent()?;
    if gitdir.file_name().is_none() || worktrees.file_name()? != "worktrees" {
        return None;
    }
    worktrees.parent().filter(|common| depth(common) > 0).map(Path::to_path_buf)
}

/// Why the repository of a linked worktree whose git directory lies outside every writable root is not made
/// writable for it (see [`worktree_grant`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoWorktreeGrant {
    /// The gitdir the `.git` file names is not `<repository>/worktrees/<id>`.
    NotAWorktreeDir,
    /// The repository lies in a writable root (the rules for a gitdir inside a root apply instead).
    InsideWritableRoot(PathBuf),
    /// The repository contains this writable root: granting it would widen the root.
    ContainsWritableRoot(PathBuf),
    /// The worktree's `commondir` names another directory than the repository above it.
    CommonDirElsewhere(PathBuf),
    /// The worktree's `gitdir` file (git's link back to the work tree) names another `.git` than this root's:
    /// the root's `.git` file was not made by `git worktree add` for this directory.
    BackLinkElsewhere(PathBuf),
    /// A file git needs could not be read by the rules of this module.
    Unreadable(&'static str, GitFileProblem),
    /// The repository or its worktree directory is not what git would use (`HEAD`, `objects/` missing, a
    /// symlink on the way).
    NotARepository(String),
}

impl fmt::Display for NoWorktreeGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoWorktreeGrant::NotAWorktreeDir => {
                f.write_str("not a linked worktree's <repository>/worktrees/<id>")
            }
            NoWorktreeGrant::InsideWritableRoot(root) => {
                write!(f, "its repository lies in the writable root {}", root.display())
            }
            NoWorktreeGrant::ContainsWritableRoot(root) => {
                write!(f, "its repository contains the writable root {}", root.display())
            }
            NoWorktreeGrant::CommonDirElsewhere(dir) => write!(f, "its commondir names {}", dir.display()),
            NoWorktreeGrant::BackLinkElsewhere(dir) => {
                write!(f, "its gitdir file names {}, another work tree", dir.display())
            }
            NoWorktreeGrant::Unreadable(name, why) => write!(f, "its {name}: {why}"),
            NoWorktreeGrant::NotARepository(why) => f.write_str(why),
        }
    }
}

/// A checkout's own files in its git directory: the branch it has checked out and its staged changes. Kept
/// read-only, in a repository granted by [`worktree_grant`], for the main worktree and every other linked
/// worktree (the person's other checkouts).
pub const CHECKOUT_FILES: [&str; 2] = ["HEAD", "index"];

/// The protection report's words for a repository granted to the linked worktree `worktree` by
/// [`worktree_grant`] (both adapters say it the same way).
pub fn worktree_grant_text(repository: &Path, worktree: &Path) -> String {
    format!(
        "{} is writable as the repository of the linked worktree {}: its configuration, hooks, redirections, \
         worktrees' admin files, pack files, loose objects and the HEAD and index of the main worktree and of the \
         other worktrees stay read-only",
        repository.display(),
        worktree.display()
    )
}

/// The repository (common dir) that becomes writable, its protected entries aside, for the linked worktree
/// whose work tree is the writable root `root` (canonical) and whose git directory `gitdir` (named by `root`'s
/// `.git` file) lies outside every writable root: `git worktree add` made `gitdir` as `<common>/worktrees/<id>`
/// with `commondir` = `../..` and a `gitdir` file naming `root/.git` back. `commondir` and `back_link` are
/// those two files' contents (at most [`MAX_GIT_FILE_BYTES`], read without following a symlink). The back link
/// lies outside every writable root, so no sandboxed command could have written it (in a granted repository
/// the worktrees' `gitdir` files stay read-only; a command there can make a new worktree, which extends only
/// that same repository to another directory): a `.git` file a command planted in a root cannot name a
/// repository into writing unless that repository already lists the root as its worktree. `roots` are every
/// writable root, canonical.
pub fn worktree_grant(
    root: &Path,
    gitdir: &Path,
    commondir: &[u8],
    back_link: &[u8],
    roots: &[PathBuf],
) -> Result<PathBuf, NoWorktreeGrant> {
    let gitdir = normalize_lexically(gitdir);
    let common = worktree_common_dir(&gitdir).ok_or(NoWorktreeGrant::NotAWorktreeDir)?;
    if let Some(root) = roots.iter().find(|r| common.starts_with(r)) {
        return Err(NoWorktreeGrant::InsideWritableRoot(root.clone()));
    }
    if let Some(root) = roots.iter().find(|r| r.starts_with(&common)) {
        return Err(NoWorktreeGrant::ContainsWritableRoot(root.clone()));
    }
    let named =
        parse_commondir(&gitdir, commondir).map_err(|why| NoWorktreeGrant::Unreadable("commondir", why))?;
    if named != common {
        return Err(NoWorktreeGrant::CommonDirElsewhere(named));
    }
    // git (worktree.c) reads the back link whole, right-trimmed; a relative one is relative to `gitdir`.
    let text = back_link.trim_ascii_end();
    if text.is_empty() || text.contains(&0) {
        return Err(NoWorktreeGrant::Unreadable("gitdir", GitFileProblem::NoPath));
    }
    let linked = normalize_lexically(&gitdir.join(path_from_bytes(text)));
    if linked != root.join(".git") {
        return Err(NoWorktreeGrant::BackLinkElsewhere(linked));
    }
    Ok(common)
}

/// The number of normal components of `path`.
fn depth(path: &Path) -> usize {
    path.components().filter(|c| matches!(c, Component::Normal(_))).count()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn parses_the_first_line_like_git_and_resolves_relative_paths_against_the_root() {
        let root = Path::new("/w/repo");
        assert_eq!(parse_git_file(root, b"gitdir: /abs/x\n"), Ok(p("/abs/x")));
        assert_eq!(
            parse_git_file(root, b"gitdir:../main/.git/worktrees/r  \r\n"),
            Ok(p("/w/repo/../main/.git/worktrees/r"))
        );
        assert_eq!(parse_git_file(root, b"gitdir: ..\n"), Ok(p("/w/repo/..")));
        assert_eq!(parse_git_file(root, b"not a git file"), Err(GitFileProblem::NoGitdirLine));
        assert_eq!(parse_git_file(root, b"gitdir:   \n"), Err(GitFileProblem::NoGitdirLine));
        assert_eq!(parse_git_file(root, b""), Err(GitFileProblem::NoGitdirLine));
        assert_eq!(parse_git_file(root, b"\ngitdir: /x\n"), Err(GitFileProblem::NoGitdirLine));
        assert_eq!(parse_git_file(root, b"gitdir: /x\0y\n"), Err(GitFileProblem::NoGitdirLine));
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let raw = parse_git_file(root, b"gitdir: /caf\xe9/.git\n").unwrap();
            assert_eq!(raw.as_os_str().as_bytes(), b"/caf\xe9/.git");
        }
    }

    #[test]
    fn beyond_the_budget_the_oldest_repositories_stay_entry_by_entry_and_no_name_chooses() {
        use std::time::{Duration, SystemTime};
        let at = |s: u64| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        // Within the budget: every one entry by entry, birth times or not.
        let few = vec![None; MAX_NESTED_REPOSITORIES];
        assert_eq!(nested_modes(&few), Ok(vec![NestedMode::EntryByEntry; MAX_NESTED_REPOSITORIES]));
        // The person's vendorlib (born first) listed last among 40 planted ones: it stays entry by entry.
        let mut births: Vec<Option<SystemTime>> = (0..40).map(|i| at(1000 + i)).collect();
        births.push(at(10));
        let modes = nested_modes(&births).unwrap();
        assert_eq!(modes[40], NestedMode::EntryByEntry);
        assert_eq!(modes.iter().filter(|m| **m == NestedMode::EntryByEntry).count(), MAX_NESTED_REPOSITORIES);
        assert!(modes[31..40].iter().all(|m| *m == NestedMode::WholeReadOnly), "{modes:?}");
        // A tie at the cut: neither of the tied ones is surely among the oldest.
        let mut tied: Vec<Option<SystemTime>> = (0..MAX_NESTED_REPOSITORIES as u64 - 1).map(at).collect();
        tied.extend([at(500), at(500)]);
        let modes = nested_modes(&tied).unwrap();
        assert_eq!(&modes[MAX_NESTED_REPOSITORIES - 1..], &[NestedMode::WholeReadOnly; 2]);
        // A birth time unknown: every one read-only as a whole (still protected, nobody chosen).
        let mut unknown = births.clone();
        unknown[3] = None;
        assert!(nested_modes(&unknown).unwrap().iter().all(|m| *m == NestedMode::WholeReadOnly));
        // Beyond what can be protected at all: refused, and the text says which budget and what to do.
        let many = vec![at(1); MAX_NESTED_READ_ONLY + 1];
        let refused = nested_modes(&many).unwrap_err();
        assert_eq!(refused, NestedUnexamined::TooManyRepositories(MAX_NESTED_READ_ONLY + 1));
        let text = NestedUnexamined::TooManyEntries.to_string();
        assert!(text.contains("MAX_NESTED_SCAN_ENTRIES") && text.contains("remove the entries"), "{text}");
    }

    #[test]
    fn modules_and_the_directories_of_submodule_names_take_no_new_entry() {
        let g = p("/w/.git");
        let found = vec![
            (g.clone(), GitDirKind::Repository),
            (g.join("worktrees/wt"), GitDirKind::LinkedWorktree),
            (g.join("modules/lib"), GitDirKind::Repository),
            (g.join("modules/a/b/c"), GitDirKind::Repository),
            (g.join("modules/lib/modules/inner"), GitDirKind::Repository),
        ];
        assert_eq!(
            closed_dirs(&g, &found),
            vec![g.join("modules"), g.join("modules/a"), g.join("modules/a/b")],
            "the submodule git dirs themselves, and a submodule's own modules/, are not closed here"
        );
        assert_eq!(
            closed_dirs(&g.join("modules/lib"), &found),
            vec![g.join("modules/lib/modules")],
            "a submodule closes its own modules/"
        );
        assert_eq!(closed_dirs(&g, &[]), vec![g.join("modules")]);
    }

    #[test]
    fn shallow_is_protected_and_its_placeholder_links_where_nothing_can_be() {
        let shallow = protected_git_entries(GitDirKind::Repository).iter().find(|e| e.name == "shallow");
        assert_eq!(shallow.map(|e| e.when_absent), Some(WhenAbsent::AbsentLink));
        assert!(ABSENT_LINK_TARGET.starts_with("/dev/null/"));
        assert!(protected_git_entries_text().contains("shallow"));
    }

    #[test]
    fn loose_object_names_are_hexadecimal_of_an_object_name_s_length() {
        assert!(is_loose_object_name(b"0123456789abcdef0123456789abcdef012345"));
        assert!(is_loose_object_name(&[b'f'; 62]));
        assert!(!is_loose_object_name(b"0123456789ABCDEF0123456789abcdef012345"), "uppercase");
        assert!(!is_loose_object_name(b"tmp_obj_abcdef"));
        assert!(!is_loose_object_name(&[b'a'; 40]));
        assert!(is_fan_out_name(b"0a") && !is_fan_out_name(b"pack") && !is_fan_out_name(b"info"));
        assert!(!is_fan_out_name(b"0G") && !is_fan_out_name(b"a"));
    }

    #[test]
    fn a_worktree_s_repository_is_the_directory_above_worktrees() {
        assert_eq!(worktree_common_dir(Path::new("/r/main/.git/worktrees/wt")), Some(p("/r/main/.git")));
        assert_eq!(
            worktree_common_dir(Path::new("/r/main/.git/worktrees/a/../wt/")),
            Some(p("/r/main/.git"))
        );
        assert_eq!(worktree_common_dir(Path::new("/bare.git/worktrees/wt")), Some(p("/bare.git")));
        assert_eq!(worktree_common_dir(Path::new("/worktrees/wt")), None, "the repository would be /");
        assert_eq!(worktree_common_dir(Path::new("/r/main/.git/modules/wt")), None);
        assert_eq!(worktree_common_dir(Path::new("/r/main/.git/worktrees")), None);
        assert_eq!(worktree_common_dir(Path::new("/r/main/.git/worktrees/..")), None);
    }

    #[test]
    fn a_worktree_s_repository_is_granted_only_when_it_lists_the_root_as_its_worktree() {
        let roots = [p("/ws/wt"), p("/tmp")];
        let gitdir = Path::new("/home/p/main/.git/worktrees/wt");
        let grant =
            |commondir: &[u8], back: &[u8]| worktree_grant(&roots[0], gitdir, commondir, back, &roots);
        assert_eq!(grant(b"../..\n", b"/ws/wt/.git\n"), Ok(p("/home/p/main/.git")));
        assert_eq!(grant(b"/home/p/main/.git", b"../../../../../../ws/wt/.git"), Ok(p("/home/p/main/.git")));
        // Planted: the repository lists another work tree, or its commondir names elsewhere.
        assert_eq!(
            grant(b"../..\n", b"/home/p/wt/.git\n"),
            Err(NoWorktreeGrant::BackLinkElsewhere(p("/home/p/wt/.git")))
        );
        assert_eq!(grant(b"../..\n", b"/ws/wt\n"), Err(NoWorktreeGrant::BackLinkElsewhere(p("/ws/wt"))));
        assert_eq!(grant(b"/etc\n", b"/ws/wt/.git\n"), Err(NoWorktreeGrant::CommonDirElsewhere(p("/etc"))));
        assert!(matches!(grant(b"", b"/ws/wt/.git"), Err(NoWorktreeGrant::Unreadable("commondir", _))));
        assert!(matches!(grant(b"../..", b" \n"), Err(NoWorktreeGrant::Unreadable("gitdir", _))));
        // Never a repository in a root, nor one holding a root.
        let inside = worktree_grant(
            &roots[0],
            Path::new("/tmp/m/.git/worktrees/wt"),
            b"../..",
            b"/ws/wt/.git",
            &roots,
        );
        assert_eq!(inside, Err(NoWorktreeGrant::InsideWritableRoot(p("/tmp"))));
        let holding =
            worktree_grant(&roots[0], Path::new("/ws/worktrees/wt"), b"../..", b"/ws/wt/.git", &roots);
        assert_eq!(holding, Err(NoWorktreeGrant::ContainsWritableRoot(p("/ws/wt"))));
        let not = worktree_grant(&roots[0], Path::new("/home/p/main/.git"), b"../..", b"/ws/wt/.git", &roots);
        assert_eq!(not, Err(NoWorktreeGrant::NotAWorktreeDir));
    }

    proptest! {
        #[test]
        fn a_granted_repository_never_holds_nor_lies_in_a_root(
            parts in proptest::collection::vec(prop_oneof!["a", "b", "worktrees", "\\.\\.", "\\."], 1..7),
            root_parts in proptest::collection::vec(prop_oneof!["a", "b", "worktrees"], 0..4),
        ) {
            let gitdir = PathBuf::from("/").join(parts.iter().collect::<PathBuf>());
            let root = PathBuf::from("/").join(root_parts.iter().collect::<PathBuf>());
            let roots = vec![root.clone(), p("/tmp")];
            let back = root.join(".git");
            if let Ok(common) = worktree_grant(&root, &gitdir, b"../..", back.as_os_str().as_encoded_bytes(), &roots) {
                prop_assert!(depth(&common) > 0);
                for r in &roots {
                    prop_assert!(!common.starts_with(r) && !r.starts_with(&common), "{common:?} {r:?}");
                }
                prop_assert_eq!(Some(common), worktree_common_dir(&gitdir));
            }
        }
    }

    #[test]
    fn a_gitdir_that_is_or_contains_a_root_or_lies_elsewhere_is_not_protected() {
        let roots = [p("/tmp"), p("/tmp/ws"), p("/home/u/cache")];
        let owner = p("/tmp/ws");
        assert_eq!(gitdir_protection(&p("/tmp/ws/.git/modules/x"), &owner, &roots), Ok(()));
        assert_eq!(
            gitdir_protection(&p("/tmp/ws"), &owner, &roots),
            Err(UnprotectedGitdir::IsWritableRoot(p("/tmp/ws")))
        );
        assert_eq!(
            gitdir_protection(&p("/tmp"), &owner, &roots),
            Err(UnprotectedGitdir::IsWritableRoot(p("/tmp")))
        );
        assert_eq!(
            gitdir_protection(&p("/"), &owner, &roots),
            Err(UnprotectedGitdir::ContainsWritableRoot(p("/tmp")))
        );
        assert_eq!(
            gitdir_protection(&p("/home"), &owner, &roots),
            Err(UnprotectedGitdir::ContainsWritableRoot(p("/home/u/cache")))
        );
        assert_eq!(
            gitdir_protection(&p("/tmp/main/.git/worktrees/ws"), &owner, &roots),
            Err(UnprotectedGitdir::OutsideOwnRoot { owner: owner.clone(), root: p("/tmp") })
        );
        // /tmp's .git naming a directory of the workspace nested in /tmp.
        assert_eq!(
            gitdir_protection(&p("/tmp/ws/src"), &p("/tmp"), &roots),
            Err(UnprotectedGitdir::OutsideOwnRoot { owner: p("/tmp"), root: p("/tmp/ws") })
        );
        assert_eq!(
            gitdir_protection(&p("/proc/self/cwd"), &owner, &roots),
            Err(UnprotectedGitdir::ReadOnlyAnyway)
        );
        assert_eq!(
            gitdir_protection(&p("/work/main/.git/worktrees/ws"), &owner, &roots),
            Err(UnprotectedGitdir::ReadOnlyAnyway)
        );
    }

    #[test]
    fn configuration_and_hooks_are_protected_and_only_inert_placeholders_are_made() {
        let names = |kind| protected_git_entries(kind).iter().map(|e| e.name).collect::<Vec<_>>();
        for name in ["config", "config.worktree", "hooks", "info", "objects/info/alternates", "commondir"] {
            assert!(names(GitDirKind::Repository).contains(&name), "{name}");
        }
        for name in ["config.worktree", "commondir", "gitdir"] {
            assert!(names(GitDirKind::LinkedWorktree).contains(&name), "{name}");
        }
        // What git writes in everyday work is never protected.
        for kind in [GitDirKind::Repository, GitDirKind::LinkedWorktree] {
            for name in
                ["index", "HEAD", "objects", "refs", "logs", "ORIG_HEAD", "packed-refs", "rebase-merge"]
            {
                assert!(
                    !names(kind)
                        .iter()
                        .any(|n| n == &name || n.starts_with(&format!("{name}/")) && name != "objects"),
                    "{name}"
                );
            }
        }
        // A repository's `commondir` redirects git by its presence alone: its placeholder names the git dir itself.
        // Every entry of a repository's git dir gets one.
        let commondir = protected_git_entries(GitDirKind::Repository).iter().find(|e| e.name == "commondir");
        assert_eq!(commondir.map(|e| e.when_absent), Some(WhenAbsent::SelfCommonDir));
        assert!(
            protected_git_entries(GitDirKind::Repository)
                .iter()
                .all(|e| e.when_absent != WhenAbsent::WholeReadOnly)
        );
        // Nothing protected can be created: every absent entry gets a placeholder, or (a linked worktree that
        // lost its commondir) the whole git directory stays read-only.
        for kind in [GitDirKind::Repository, GitDirKind::LinkedWorktree] {
            for entry in protected_git_entries(kind) {
                assert!(
                    entry.when_absent != WhenAbsent::WholeReadOnly || entry.name == "commondir",
                    "{}",
                    entry.name
                );
            }
        }
        let text = protected_git_entries_text();
        assert!(text.contains("hooks") && text.contains("so none can be created"), "{text}");
    }

    #[test]
    fn a_git_directory_with_a_commondir_takes_its_configuration_from_the_common_dir() {
        let admin = Path::new("/w/.git/worktrees/wt");
        let kind = |content: &[u8]| git_dir_kind(admin, Some(&parse_commondir(admin, content)));
        assert_eq!(kind(b"../..\n"), GitDirKind::LinkedWorktree);
        // worktrees/<id> without a commondir is a repository of its own: its config and hooks are protected;
        // so is one whose commondir names itself (the sandbox's placeholder) or names nothing.
        assert_eq!(git_dir_kind(admin, None), GitDirKind::Repository);
        assert_eq!(kind(b".\n"), GitDirKind::Repository);
        assert_eq!(kind(b"../wt/./"), GitDirKind::Repository);
        assert_eq!(kind(b""), GitDirKind::Repository);
        assert_eq!(git_dir_kind(admin, Some(&Err(GitFileProblem::Symlink))), GitDirKind::Repository);
        assert_eq!(parse_commondir(admin, b"../..\n"), Ok(p("/w/.git")));
        assert_eq!(parse_commondir(admin, b"../.."), Ok(p("/w/.git")));
        assert_eq!(parse_commondir(admin, b"/abs/x.git\r\n\n"), Ok(p("/abs/x.git")));
        assert_eq!(parse_commondir(admin, b".\n"), Ok(p("/w/.git/worktrees/wt")));
        // Git keeps everything but trailing line ends: a second line is part of the path.
        assert_eq!(parse_commondir(admin, b"../../x\ny"), Ok(p("/w/.git/x\ny")));
        assert_eq!(parse_commondir(admin, b"\n"), Err(GitFileProblem::NoPath));
        assert_eq!(parse_commondir(admin, b""), Err(GitFileProblem::NoPath));
        assert_eq!(parse_commondir(admin, b"a\0b"), Err(GitFileProblem::NoPath));
    }

    #[test]
    fn dots_are_resolved_by_the_text() {
        assert_eq!(normalize_lexically(Path::new("/tmp/ws/../x/./y")), p("/tmp/x/y"));
        assert_eq!(normalize_lexically(Path::new("/tmp/ws/../../../..")), p("/"));
        assert_eq!(normalize_lexically(Path::new("/tmp/ws/.")), p("/tmp/ws"));
    }

    fn path_strategy() -> impl Strategy<Value = PathBuf> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), 0..4)
            .prop_map(|parts| Path::new("/").join(parts.join("/")))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// A protected gitdir never freezes a writable root: it is no root, contains none, and lies inside its
        /// owner and in no root nested in the owner.
        #[test]
        fn a_protected_gitdir_never_freezes_a_root(
            gitdir in path_strategy(),
            roots in prop::collection::vec(path_strategy(), 1..5),
            owner_index in 0usize..5,
        ) {
            let owner = roots[owner_index % roots.len()].clone();
            if gitdir_protection(&gitdir, &owner, &roots).is_ok() {
                prop_assert!(roots.iter().all(|root| !root.starts_with(&gitdir)));
                prop_assert!(gitdir.starts_with(&owner));
                prop_assert!(roots.iter().all(|root| root == &owner || !gitdir.starts_with(root) || owner.starts_with(root)));
            }
        }
    }
}
