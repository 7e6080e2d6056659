//! What stays read-only inside one writable git directory, as a value every platform renders: the git
//! directories below it (linked worktrees' `worktrees/<id>` and submodules' `modules/<name>`, recursively, and
//! the common dir a linked worktree's `commondir` names), the protected entries of each
//! (`uexec_domain::gitdir::protected_git_entries`: present, or absent with what stands in for them), the
//! directories that take no new entry (`closed_dirs`), and the history pinned in each repository (its pack
//! files and loose objects). The rules are `uexec_domain::gitdir`'s; the walk and its budgets are here, once.
//!
//! Everything else in a git directory stays writable, so that `git add`, `commit`, `checkout -b`, `stash`,
//! `rebase` and the like work in a sandboxed command. Nothing is followed through a symbolic link: a git
//! directory or a directory on the way that is a link is not looked into (the link itself is protected when it is
//! a protected entry). Beyond a budget, the plan fails closed as [`Mechanism`] says.

use std::path::{Path, PathBuf};

use uexec_domain::gitdir::{
    ABSENT_LINK_TARGET, GitDirKind, MAX_GIT_DIR_ENTRIES, MAX_GIT_DIRS, MAX_GIT_FILE_BYTES,
    MAX_MODULE_NAME_DEPTH, MAX_PINNED_LOOSE_OBJECTS, MAX_PINNED_PACK_FILES, UnprotectedGitdir, WhenAbsent,
    closed_dirs, git_dir_kind, is_fan_out_name, is_loose_object_name, parse_commondir, protected_git_entries,
};

use crate::host::{HostView, Kind};

/// How the sandbox that renders a plan enforces it, which decides the few places where what can be protected
/// differs (each one named here, and nowhere else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// Read-only bind mounts over entries that exist (Linux). An absent protected entry is protected by an inert
    /// placeholder the renderer makes first; so a repository git directory without `objects/` (where the
    /// placeholder of `objects/info/alternates` cannot be made) is read-only as a whole, and so is a git
    /// directory whose walk went beyond its budget. Each pin is a mount, which costs more the more a namespace
    /// holds: loose objects are pinned up to their budget in each git directory.
    Mounts,
    /// Rules that match paths, present or not (macOS Seatbelt): nothing is made. A git directory whose walk went
    /// beyond its budget stays protected entry by entry, with its `worktrees/` and `modules/` read-only as a
    /// whole. Every path is one argument of one bounded command line: loose objects are pinned up to their
    /// budget in the whole command.
    PathRules,
}

/// A protected path, and whether it is there now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// It exists (a symbolic link is protected as the link).
    Present(PathBuf),
    /// It does not exist. With path rules it is denied all the same; with mounts it is protected only once the
    /// placeholder said here is made (`None`: nothing is made, so it stays unprotected).
    Absent(PathBuf, Option<WhenAbsent>),
}

impl Entry {
    /// Its path.
    pub fn path(&self) -> &Path {
        match self {
            Entry::Present(path) | Entry::Absent(path, _) => path,
        }
    }
}

/// What a directory that takes no new entry is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// A real directory.
    Dir,
    /// Absent: with mounts an empty directory is made first.
    Absent,
    /// Something else (a symbolic link, a file): with mounts it is protected as itself.
    NotADir,
}

/// One git directory found by the walk and what stays read-only in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitDirPart {
    /// The git directory (canonical: below a canonical git directory, spelled by its names).
    pub dir: PathBuf,
    /// Its kind.
    pub kind: GitDirKind,
    /// It is read-only as a whole (the notes say why), and nothing below is listed.
    pub whole: bool,
    /// Its protected entries (`protected_git_entries` of its kind), in that order.
    pub entries: Vec<Entry>,
    /// The directories that take no new entry (`closed_dirs`; a repository's only), shallowest first.
    pub closed: Vec<(PathBuf, Closed)>,
    /// More paths that stay read-only as themselves, present: its pack files (or `objects/pack` as a whole) and
    /// loose objects; with path rules after a failed walk, `worktrees/` and `modules/` too.
    pub read_only: Vec<PathBuf>,
    /// Its loose objects were looked at (a repository's, not read-only as a whole).
    pub repository: bool,
}

impl GitDirPart {
    fn whole(dir: PathBuf, kind: GitDirKind) -> Self {
        GitDirPart {
            dir,
            kind,
            whole: true,
            entries: Vec::new(),
            closed: Vec::new(),
            read_only: Vec::new(),
            repository: false,
        }
    }
}

/// The protection of one writable git directory and of the git directories below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitDirPlan {
    /// The git directory walked from.
    pub gitdir: PathBuf,
    /// The git directories found, the first one `gitdir` itself (one part, read-only as a whole, when the git
    /// directory is frozen whole).
    pub parts: Vec<GitDirPart>,
    /// What was not looked into, or why something is read-only as a whole (for the report).
    pub notes: Vec<String>,
    /// The linked worktrees' administrative directories the walk found in `gitdir/worktrees/` (none when it
    /// failed).
    pub worktrees: Vec<PathBuf>,
}

impl GitDirPlan {
    /// `gitdir` read-only as a whole, and why.
    fn whole(gitdir: &Path, kind: GitDirKind, why: String) -> Self {
        GitDirPlan {
            gitdir: gitdir.to_path_buf(),
            parts: vec![GitDirPart::whole(gitdir.to_path_buf(), kind)],
            notes: vec![format!("{}: read-only as a whole ({why})", gitdir.display())],
            worktrees: Vec::new(),
        }
    }
}

/// How many loose objects may still be pinned, and over what ([`Mechanism`]: each git directory with mounts,
/// the whole command with path rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LooseBudget {
    left: usize,
    shared: bool,
}

impl LooseBudget {
    /// A fresh budget for one git directory ([`Mechanism::Mounts`]).
    pub fn per_git_dir() -> Self {
        LooseBudget { left: MAX_PINNED_LOOSE_OBJECTS, shared: false }
    }

    /// One budget for a whole command ([`Mechanism::PathRules`]).
    pub fn per_command() -> Self {
        LooseBudget { left: MAX_PINNED_LOOSE_OBJECTS, shared: true }
    }
}

/// Whether a common dir named by a linked worktree's `commondir` may be protected, and its path
/// (`crate::git::protected_gitdir`, the rules of a gitdir a `.git` file names).
pub type CommonDirCheck<'a> = &'a dyn Fn(&Path) -> Result<PathBuf, UnprotectedGitdir>;

/// The protection of the git directory `gitdir` (canonical, reached without a symbolic link) of `kind`.
/// `named` says that a `.git` file named it (not a root's own `.git`): a repository git directory without
/// `objects/` is then read-only as a whole whatever the mechanism (git cannot use it, but a command could make it
/// a repository); a git directory found below is always treated so.
pub fn plan_git_dir(
    host: &dyn HostView,
    gitdir: &Path,
    kind: GitDirKind,
    mechanism: Mechanism,
    named: bool,
    allow_common: CommonDirCheck<'_>,
    loose: &mut LooseBudget,
) -> GitDirPlan {
    let whole_without_objects = named || mechanism == Mechanism::Mounts;
    if kind == GitDirKind::Repository && whole_without_objects && !host.is_dir(&gitdir.join("objects")) {
        return GitDirPlan::whole(gitdir, kind, "no objects directory".into());
    }
    let mut notes = Vec::new();
    let (dirs, failed) = match git_dirs_below(host, gitdir, kind, allow_common, &mut notes) {
        Ok(dirs) => (dirs, false),
        Err(why) if mechanism == Mechanism::Mounts => return GitDirPlan::whole(gitdir, kind, why),
        Err(why) => {
            let mut heads = vec![(gitdir.to_path_buf(), kind)];
            if kind == GitDirKind::LinkedWorktree
                && let Ok(common) = common_dir(host, gitdir)
                && let Ok(common) = allow_common(&common)
            {
                heads.push((common, GitDirKind::Repository));
            }
            for (dir, kind) in &heads {
                if *kind == GitDirKind::Repository {
                    notes.push(format!(
                        "{}: worktrees/ and modules/ read-only as a whole ({why})",
                        dir.display()
                    ));
                }
            }
            (heads, true)
        }
    };
    let worktrees_dir = gitdir.join("worktrees");
    let worktrees =
        dirs.iter().map(|(dir, _)| dir).filter(|dir| dir.parent() == Some(&worktrees_dir)).cloned().collect();
    let mut parts = Vec::with_capacity(dirs.len());
    for (dir, kind) in &dirs {
        if *kind == GitDirKind::Repository
            && (dir != gitdir || whole_without_objects)
            && !host.is_dir(&dir.join("objects"))
        {
            // A `worktrees/<id>` without commondir, a module without objects: git would use its config and
            // hooks if a command made it a repository, so it stays read-only as a whole.
            notes.push(format!("{}: read-only as a whole (no objects directory)", dir.display()));
            parts.push(GitDirPart::whole(dir.clone(), *kind));
            continue;
        }
        let entries = match protected_entries(host, dir, *kind, &mut notes) {
            Ok(entries) => entries,
            Err(why) if dir == gitdir => return GitDirPlan::whole(gitdir, *kind, why),
            Err(why) => {
                notes.push(format!("{}: read-only as a whole ({why})", dir.display()));
                parts.push(GitDirPart::whole(dir.clone(), *kind));
                continue;
            }
        };
        let mut part = GitDirPart {
            dir: dir.clone(),
            kind: *kind,
            whole: false,
            entries,
            closed: Vec::new(),
            read_only: Vec::new(),
            repository: false,
        };
        if *kind == GitDirKind::Repository {
            if failed {
                part.read_only.push(dir.join("worktrees"));
                part.read_only.push(dir.join("modules"));
            } else {
                // No new submodule git dir: the person's own `git submodule update --init` would use it.
                part.closed = closed_dirs(dir, &dirs)
                    .into_iter()
                    .map(|closed| {
                        let state = match host.kind(&closed) {
                            Some(Kind::Dir) => Closed::Dir,
                            None => Closed::Absent,
                            Some(_) => Closed::NotADir,
                        };
                        (closed, state)
                    })
                    .collect();
            }
            pin_packs(host, dir, &mut part.read_only, &mut notes);
            pin_loose_objects(host, dir, loose, &mut part.read_only, &mut notes);
            part.repository = true;
        }
        parts.push(part);
    }
    GitDirPlan { gitdir: gitdir.to_path_buf(), parts, notes, worktrees }
}

/// The protected entries of the git directory `dir` of `kind`, present or absent; `Err` (why) when one cannot be
/// looked at, or when the absence of one means the directory is not what it was taken for.
fn protected_entries(
    host: &dyn HostView,
    dir: &Path,
    kind: GitDirKind,
    notes: &mut Vec<String>,
) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for entry in protected_git_entries(kind) {
        let path = dir.join(entry.name);
        match host.lstat(&path) {
            Ok(meta) => {
                let own_placeholder = entry.when_absent == WhenAbsent::AbsentLink
                    && host.read_link(&path).is_ok_and(|target| target == Path::new(ABSENT_LINK_TARGET));
                if meta.kind == Kind::Symlink && !own_placeholder {
                    notes.push(format!(
                        "{}: a symlink (only the link is protected, its target is not)",
                        path.display()
                    ));
                }
                out.push(Entry::Present(path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match entry.when_absent {
                WhenAbsent::WholeReadOnly => return Err(format!("{} disappeared", path.display())),
                placeholder => out.push(Entry::Absent(path, Some(placeholder))),
            },
            Err(e) => return Err(format!("cannot inspect {}: {e}", path.display())),
        }
    }
    Ok(out)
}

/// Pin the pack files of the repository `dir` (`objects/pack/*`, regular files and symbolic links, never
/// followed): the history they hold cannot be removed or replaced, new packs can be written. `objects/pack`
/// as a whole when it is not a real directory, cannot be listed or holds more than [`MAX_PINNED_PACK_FILES`]
/// (fetches of many objects, `gc` and `repack` then fail inside the sandbox).
fn pin_packs(host: &dyn HostView, dir: &Path, read_only: &mut Vec<PathBuf>, notes: &mut Vec<String>) {
    let pack = dir.join("objects/pack");
    match host.lstat(&pack) {
        Ok(meta) if meta.kind == Kind::Dir => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        // A symlink (never followed) or anything else: protected as itself.
        _ => {
            notes.push(format!("{}: not a directory, protected as itself (not looked into)", pack.display()));
            read_only.push(pack);
            return;
        }
    }
    let mut files = Vec::new();
    let mut too_many = false;
    let listed = host.each_entry(&pack, &mut |name, kind| {
        if matches!(kind, Kind::File | Kind::Symlink) {
            files.push(pack.join(name));
        }
        too_many = files.len() > MAX_PINNED_PACK_FILES;
        !too_many
    });
    match listed {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            notes.push(format!("{}: read-only as a whole (cannot list it: {e})", pack.display()));
            read_only.push(pack);
        }
        Ok(_) if too_many => {
            notes.push(format!(
                "{}: read-only as a whole (more than {MAX_PINNED_PACK_FILES} pack files: fetches of many objects, \
                 gc and repack fail inside the sandbox; run git gc outside)",
                pack.display()
            ));
            read_only.push(pack);
        }
        Ok(_) => {
            files.sort();
            read_only.extend(files);
        }
    }
}

/// Pin the loose objects of the repository `dir` present now (`objects/<xx>/<38 or 62 hex digits>`, regular
/// files only, in name order), each by its path: a sandboxed `git prune` or `rm` cannot remove or replace them,
/// while new objects are still written beside them. At most what `loose` has left; beyond it the first ones are
/// pinned and a note says how the rest can be kept. A fan-out directory that cannot be listed, or a symbolic
/// link, is noted and left as it is (it holds no object git wrote there).
fn pin_loose_objects(
    host: &dyn HostView,
    dir: &Path,
    loose: &mut LooseBudget,
    read_only: &mut Vec<PathBuf>,
    notes: &mut Vec<String>,
) {
    let objects = dir.join("objects");
    let fan_outs = match host.names(&objects, &[Kind::Dir]) {
        Ok(names) => names,
        Err(_) => {
            if host.is_dir(&objects) {
                notes.push(format!("{}: loose objects not pinned (cannot list it)", objects.display()));
            }
            return;
        }
    };
    for fan_out in fan_outs.iter().filter(|name| is_fan_out_name(name.as_encoded_bytes())) {
        let fan_out = objects.join(fan_out);
        let files = match host.names(&fan_out, &[Kind::File]) {
            Ok(names) => names,
            Err(e) => {
                notes.push(format!("{}: loose objects not pinned (cannot list it: {e})", fan_out.display()));
                continue;
            }
        };
        let files: Vec<PathBuf> = files
            .into_iter()
            .filter(|name| is_loose_object_name(name.as_encoded_bytes()))
            .map(|name| fan_out.join(name))
            .collect();
        if files.len() > loose.left {
            read_only.extend(files.into_iter().take(loose.left));
            loose.left = 0;
            notes.push(if loose.shared {
                format!(
                    "{}: not every loose object is pinned (at most {MAX_PINNED_LOOSE_OBJECTS} in all, the first in \
                     name order; the others can be removed inside the sandbox; a git gc outside packs them, and \
                     pack files are pinned)",
                    objects.display()
                )
            } else {
                format!(
                    "{}: only the first {MAX_PINNED_LOOSE_OBJECTS} loose objects are pinned (the others can be \
                     removed inside the sandbox; a git gc outside packs them, and pack files are pinned)",
                    objects.display()
                )
            });
            return;
        }
        loose.left -= files.len();
        read_only.extend(files);
    }
}

/// The kind of the git directory `dir` ([`git_dir_kind`] of what its `commondir` holds, if it has one).
pub fn kind_of(host: &dyn HostView, dir: &Path) -> GitDirKind {
    let path = dir.join("commondir");
    let commondir = host.exists(&path).then(|| {
        host.read_small_file(&path, MAX_GIT_FILE_BYTES).and_then(|content| parse_commondir(dir, &content))
    });
    git_dir_kind(dir, commondir.as_ref())
}

/// The common dir the `commondir` file of `dir` names, read as git reads it, the problem in words.
fn common_dir(host: &dyn HostView, dir: &Path) -> Result<PathBuf, String> {
    host.read_small_file(&dir.join("commondir"), MAX_GIT_FILE_BYTES)
        .and_then(|content| parse_commondir(dir, &content))
        .map_err(|problem| problem.to_string())
}

/// The real subdirectories of `dir`, sorted (none when it does not exist), adding what was read to
/// `entries_read` and failing beyond [`MAX_GIT_DIR_ENTRIES`], when `dir` is not a real directory or cannot be
/// listed; a symbolic link among them is noted, never followed.
fn subdirs(
    host: &dyn HostView,
    dir: &Path,
    entries_read: &mut usize,
    notes: &mut Vec<String>,
) -> Result<Vec<PathBuf>, String> {
    match host.lstat(dir) {
        Ok(meta) if meta.kind == Kind::Dir => {}
        Ok(_) => return Err(format!("{} is not a directory", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot inspect {}: {e}", dir.display())),
    }
    let mut out = Vec::new();
    let mut too_many = false;
    let listed = host.each_entry(dir, &mut |name, kind| {
        *entries_read += 1;
        if *entries_read > MAX_GIT_DIR_ENTRIES {
            too_many = true;
            return false;
        }
        match kind {
            Kind::Dir => out.push(dir.join(name)),
            Kind::Symlink => notes.push(format!(
                "{}: a symlink (not looked into; protected entries behind it are not)",
                dir.join(name).display()
            )),
            _ => {}
        }
        true
    });
    if too_many {
        return Err(format!("more than {MAX_GIT_DIR_ENTRIES} entries under worktrees/ and modules/"));
    }
    listed.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    out.sort();
    Ok(out)
}

/// The git directory `gitdir` of `kind` and the git directories below it that git uses: each `worktrees/<id>`
/// (linked worktrees) and every `modules/<name>` (submodules, whose names may hold slashes) with a `HEAD` file,
/// recursively, each of the kind its `commondir` gives; and the common dir a linked worktree's `commondir`
/// names, as `allow_common` spells it when it allows it (else a note says why). `Err` (why) beyond
/// `MAX_GIT_DIRS` git directories, [`MAX_GIT_DIR_ENTRIES`] entries read, submodule names deeper than
/// `MAX_MODULE_NAME_DEPTH` or a directory that cannot be listed: the caller fails closed.
pub fn git_dirs_below(
    host: &dyn HostView,
    gitdir: &Path,
    kind: GitDirKind,
    allow_common: CommonDirCheck<'_>,
    notes: &mut Vec<String>,
) -> Result<Vec<(PathBuf, GitDirKind)>, String> {
    let mut found = vec![(gitdir.to_path_buf(), kind)];
    let mut entries_read = 0usize;
    let mut next = 0;
    let add = |found: &mut Vec<(PathBuf, GitDirKind)>, dir: PathBuf, kind: GitDirKind| {
        if !found.iter().any(|(known, _)| known == &dir) {
            found.push((dir, kind));
        }
    };
    while next < found.len() {
        let (dir, kind) = found[next].clone();
        next += 1;
        if kind == GitDirKind::LinkedWorktree {
            // Its configuration and hooks are the common dir's: protected with it when the rules allow.
            match common_dir(host, &dir) {
                Ok(common) if found.iter().any(|(known, _)| known == &common) => {}
                Ok(common) => match allow_common(&common) {
                    Ok(spelled) => add(&mut found, spelled, GitDirKind::Repository),
                    Err(why) => notes.push(format!(
                        "{}/commondir names {}: {why} (git in that worktree uses its config and hooks)",
                        dir.display(),
                        common.display()
                    )),
                },
                Err(why) => notes.push(format!(
                    "{}/commondir: {why} (git follows it; only the file is protected)",
                    dir.display()
                )),
            }
            continue;
        }
        for child in subdirs(host, &dir.join("worktrees"), &mut entries_read, notes)? {
            let kind = kind_of(host, &child);
            add(&mut found, child, kind);
        }
        // Submodule names may hold slashes: walk `modules/` down to a directory with a HEAD file.
        let mut walk = vec![(dir.join("modules"), 0usize)];
        while let Some((below, depth)) = walk.pop() {
            for child in subdirs(host, &below, &mut entries_read, notes)? {
                if host.is_file(&child.join("HEAD")) {
                    let kind = kind_of(host, &child);
                    add(&mut found, child, kind);
                } else if depth + 1 < MAX_MODULE_NAME_DEPTH {
                    walk.push((child, depth + 1));
                } else {
                    return Err(format!(
                        "submodule names deeper than {MAX_MODULE_NAME_DEPTH} under {}",
                        dir.display()
                    ));
                }
            }
        }
        if found.len() > MAX_GIT_DIRS {
            return Err(format!("more than {MAX_GIT_DIRS} linked worktree and submodule git directories"));
        }
    }
    Ok(found)
}

#[cfg(test)]
#[path = "gitdirs_tests.rs"]
mod tests;
