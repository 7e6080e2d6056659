//! What stays read-only inside a writable git directory, by path (the macOS side of `uexec_domain::gitdir`'s
//! `protected_git_entries`, mirroring `gitdirs.rs` of the Linux adapter): the git directories below one (linked
//! worktrees' `worktrees/<id>` and submodules' `modules/<name>`, recursively), the entries denied in each, and
//! the history pinned in each repository (its pack files and loose objects). The walk itself is the domain's,
//! `uexec_domain::gitdir::git_dirs_below`, shared with the Linux adapter; this module is its I/O and the denies.
//!
//! Seatbelt matches paths, so an entry is denied whether it exists or not and no placeholder is made. Nothing is
//! followed through a symlink: [`PathResolver::list_dirs`] lists real directories only and a `commondir` is read
//! without following one. When the search goes beyond its budget the `worktrees/` and `modules/` directories of
//! the git directory are denied as a whole instead (fails closed), and the notes say why.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use uexec_domain::gitdir::{
    GitDirKind, GitDirLook, MAX_GIT_DIR_ENTRIES, MAX_PINNED_LOOSE_OBJECTS, MAX_PINNED_PACK_FILES,
    UnprotectedGitdir, closed_dirs, git_dir_kind, git_dirs_below, is_fan_out_name, is_loose_object_name,
    parse_commondir, protected_git_entries,
};

use crate::paths::PathResolver;

/// What a git directory adds to the profile.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct GitDirProtection {
    /// The paths denied (canonical: below a canonical git directory, spelled by their names).
    pub(crate) read_only: Vec<PathBuf>,
    /// The directories in which nothing can be created (`uexec_domain::gitdir::closed_dirs`: a repository's
    /// `modules/` and the directories of submodule names in it), present or not.
    pub(crate) closed: Vec<PathBuf>,
    /// What was not looked into, or why something is denied as a whole (for the report).
    pub(crate) notes: Vec<String>,
    /// The linked worktrees' administrative directories the walk found in the git directory's `worktrees/`
    /// (none when `worktrees/` is denied as a whole).
    pub(crate) worktrees: Vec<PathBuf>,
}

/// Whether a common dir named by a linked worktree's `commondir` may be protected, and its path to deny under
/// (the caller's rules: P3 of `docs/sandbox.md`, the same as for a gitdir a `.git` file names).
pub(crate) type CommonDirCheck<'a> = &'a dyn Fn(&Path) -> Result<PathBuf, UnprotectedGitdir>;

/// The protection of the git directory `gitdir` (canonical, reached without a symlink) of `kind`: its protected
/// entries and those of the git directories below it, and of the common dir a linked worktree's `commondir`
/// names when `allow_common` allows it. With `whole_without_objects`, a `gitdir` of the repository kind without
/// an `objects/` directory is denied as a whole (git cannot use it, but a command could make it a repository);
/// a git directory found below is always treated so. `loose_left` is how many more loose objects the profile
/// may pin (see [`pin_loose_objects`]).
pub(crate) fn protect(
    gitdir: &Path,
    kind: GitDirKind,
    whole_without_objects: bool,
    resolver: &dyn PathResolver,
    allow_common: CommonDirCheck<'_>,
    loose_left: &mut usize,
) -> GitDirProtection {
    let mut out = GitDirProtection::default();
    if kind == GitDirKind::Repository && whole_without_objects && !resolver.is_dir(&gitdir.join("objects")) {
        out.read_only.push(gitdir.to_path_buf());
        out.notes.push(format!("{}: read-only as a whole (no objects directory)", gitdir.display()));
        return out;
    }
    let (dirs, fallback) = match git_dirs_below(gitdir, kind, &Look(resolver), allow_common, &mut out.notes) {
        Ok(dirs) => (dirs, false),
        Err(why) => {
            let mut heads = vec![(gitdir.to_path_buf(), kind)];
            if kind == GitDirKind::LinkedWorktree
                && let Ok(common) = common_dir(resolver, gitdir)
                && let Ok(common) = allow_common(&common)
            {
                heads.push((common, GitDirKind::Repository));
            }
            for (dir, kind) in &heads {
                if *kind == GitDirKind::Repository {
                    out.notes.push(format!(
                        "{}: worktrees/ and modules/ read-only as a whole ({why})",
                        dir.display()
                    ));
                }
            }
            (heads, true)
        }
    };
    let worktrees = gitdir.join("worktrees");
    out.worktrees =
        dirs.iter().map(|(dir, _)| dir).filter(|dir| dir.parent() == Some(&worktrees)).cloned().collect();
    for (dir, kind) in &dirs {
        if *kind == GitDirKind::Repository
            && (dir != gitdir || whole_without_objects)
            && !resolver.is_dir(&dir.join("objects"))
        {
            // A `worktrees/<id>` without commondir, a module without objects: git would use its config and
            // hooks if a command made it a repository, so it stays read-only as a whole.
            out.read_only.push(dir.clone());
            out.notes.push(format!("{}: read-only as a whole (no objects directory)", dir.display()));
            continue;
        }
        out.read_only.extend(protected_git_entries(*kind).iter().map(|entry| dir.join(entry.name)));
        if *kind == GitDirKind::Repository {
            if fallback {
                out.read_only.push(dir.join("worktrees"));
                out.read_only.push(dir.join("modules"));
            } else {
                // No new submodule git dir: the person's own `git submodule update --init` would use it.
                out.closed.extend(closed_dirs(dir, &dirs));
            }
            pin_packs(dir, resolver, &mut out);
            pin_loose_objects(dir, resolver, loose_left, &mut out);
        }
    }
    out
}

/// Deny the pack files of the repository `dir` (`objects/pack/*`, regular files and symlinks, each by its
/// path): the history they hold cannot be removed or replaced, new packs can be written. `objects/pack` as a
/// whole when it cannot be listed (a symlink, say) or holds more than `MAX_PINNED_PACK_FILES`.
fn pin_packs(dir: &Path, resolver: &dyn PathResolver, out: &mut GitDirProtection) {
    let pack = dir.join("objects/pack");
    if !resolver.entry_exists(&pack) {
        return;
    }
    match resolver.list_files(&pack) {
        Some(files) if files.len() <= MAX_PINNED_PACK_FILES => out.read_only.extend(files),
        Some(_) => {
            out.notes.push(format!(
                "{}: read-only as a whole (more than {MAX_PINNED_PACK_FILES} pack files: fetches of many objects, \
                 gc and repack fail inside the sandbox; run git gc outside)",
                pack.display()
            ));
            out.read_only.push(pack);
        }
        None => out.read_only.push(pack),
    }
}

/// Deny the loose objects of the repository `dir` present now (`objects/<xx>/<38 or 62 hex digits>`, regular
/// files only, in name order), each by its path: a sandboxed `git prune` or `rm` cannot remove or replace them
/// (a write denied on a path denies its unlink), while new objects are still written beside them. At most
/// `loose_left` are denied, which counts down from [`MAX_PINNED_LOOSE_OBJECTS`] for the whole profile, not per
/// git directory as on Linux: every path travels as a `-D` argument of `sandbox-exec` (with its every-spelling
/// expression, some 600 bytes an object), and the command line is bounded (`ARG_MAX`, 1 MiB with the
/// environment). Beyond the budget the first ones are denied and a note says so.
fn pin_loose_objects(
    dir: &Path,
    resolver: &dyn PathResolver,
    loose_left: &mut usize,
    out: &mut GitDirProtection,
) {
    let objects = dir.join("objects");
    let Some(fan_outs) = resolver.list_dirs(&objects) else {
        if resolver.is_dir(&objects) {
            out.notes.push(format!("{}: loose objects not pinned (cannot list it)", objects.display()));
        }
        return;
    };
    for fan_out in fan_outs {
        if !fan_out.file_name().is_some_and(|name| is_fan_out_name(name.as_bytes())) {
            continue;
        }
        let Some(listing) = resolver.list_files(&fan_out) else {
            out.notes.push(format!("{}: loose objects not pinned (cannot list it)", fan_out.display()));
            continue;
        };
        let mut files: Vec<PathBuf> = listing
            .into_iter()
            .filter(|file| file.file_name().is_some_and(|name| is_loose_object_name(name.as_bytes())))
            .filter(|file| resolver.is_regular_file(file))
            .collect();
        files.sort();
        if files.len() > *loose_left {
            out.read_only.extend(files.into_iter().take(*loose_left));
            *loose_left = 0;
            out.notes.push(format!(
                "{}: not every loose object is pinned (at most {MAX_PINNED_LOOSE_OBJECTS} in all, the first in \
                 name order; the others can be removed inside the sandbox; a git gc outside packs them, and pack \
                 files are pinned)",
                objects.display()
            ));
            return;
        }
        *loose_left -= files.len();
        out.read_only.extend(files);
    }
}

/// The kind of the git directory `dir` ([`git_dir_kind`] of what its `commondir` holds, if it has one).
pub(crate) fn kind_of(resolver: &dyn PathResolver, dir: &Path) -> GitDirKind {
    let path = dir.join("commondir");
    let commondir = resolver
        .entry_exists(&path)
        .then(|| resolver.read_small_file(&path).and_then(|content| parse_commondir(dir, &content)));
    git_dir_kind(dir, commondir.as_ref())
}

/// The common dir the `commondir` file of `dir` names, read as git reads it, the problem in words.
fn common_dir(resolver: &dyn PathResolver, dir: &Path) -> Result<PathBuf, String> {
    resolver
        .read_small_file(&dir.join("commondir"))
        .and_then(|content| parse_commondir(dir, &content))
        .map_err(|problem| problem.to_string())
}

/// A [`PathResolver`] as [`git_dirs_below`] looks at it (real directories only, no symlink followed).
struct Look<'a>(&'a dyn PathResolver);

impl GitDirLook for Look<'_> {
    fn subdirs(
        &self,
        dir: &Path,
        entries_read: &mut usize,
        _notes: &mut Vec<String>,
    ) -> Result<Vec<PathBuf>, String> {
        if !self.0.entry_exists(dir) {
            return Ok(Vec::new());
        }
        if !self.0.is_dir(dir) {
            return Err(format!("{} is not a directory", dir.display()));
        }
        let dirs = self.0.list_dirs(dir).ok_or_else(|| format!("cannot list {}", dir.display()))?;
        *entries_read += dirs.len();
        if *entries_read > MAX_GIT_DIR_ENTRIES {
            return Err(format!("more than {MAX_GIT_DIR_ENTRIES} directories under worktrees/ and modules/"));
        }
        Ok(dirs)
    }

    fn has_head(&self, dir: &Path) -> bool {
        self.0.is_regular_file(&dir.join("HEAD"))
    }

    fn kind_of(&self, dir: &Path) -> GitDirKind {
        kind_of(self.0, dir)
    }

    fn common_dir(&self, dir: &Path) -> Result<PathBuf, String> {
        common_dir(self.0, dir)
    }
}
