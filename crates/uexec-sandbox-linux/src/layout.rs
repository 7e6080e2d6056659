//! The filesystem layout of one command: canonical writable roots and the read-only subpaths to protect, worked
//! out in the parent.
//!
//! Everything read here may have been planted by an earlier sandboxed command, so the host is read through the
//! plan's one view (`uexec_plan::HostView`, nothing a command planted followed). The writable roots
//! (`uexec_plan::plan_roots`), other tools' files (`uexec_plan::plan_tool_files`) and what stays read-only in git
//! directories are the plan's (`uexec_plan::GitPlanner`: a gitdir that is a writable root, contains one or lies
//! outside its own root protects nothing, a `.git` file is read only if it is a regular file reached without a
//! symlink, without blocking and at most `MAX_GIT_FILE_BYTES` long), rendered here into placeholders and
//! read-only mounts. What is left out is named in the report.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use uexec_domain::PROTECTED_SUBDIRS;
use uexec_domain::SandboxPolicy;
use uexec_domain::gitdir::{MAX_NESTED_SCAN_ENTRIES, NestedUnexamined, WhenAbsent};
use uexec_domain::tool_files::ToolFiles;
use uexec_plan::{
    Closed, Entry, GitDirPlan, GitItem, GitPlan, GitPlanner, HostView, InvalidRoot, Kind, Listing, Mechanism,
    RealHost, ToolItem, ToolPlan, ToolRoot, plan_roots, plan_tool_files, symlink_note,
};
use uexec_ports::SandboxError;

use crate::placeholders::Placeholders;

/// The host as every layout reads it (`uexec_plan::HostView`: nothing a command planted is followed).
const HOST: &dyn HostView = &RealHost;

/// The writable roots and protected subpaths of one command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FsLayout {
    /// Canonical, existing writable directories, in policy order.
    pub(crate) roots: Vec<PathBuf>,
    /// Writable roots that do not exist (nothing to write into; listed in the report).
    pub(crate) missing_roots: Vec<PathBuf>,
    /// Writable roots refused because their path goes through a symlink inside a writable root: a sandboxed
    /// command can make that symlink name any directory (listed in the report).
    pub(crate) refused_roots: Vec<PathBuf>,
    /// Existing protected entries inside writable roots, to mount read-only. A protected entry that is a symlink
    /// appears itself (so it cannot be replaced), never its target.
    pub(crate) protected: Vec<PathBuf>,
    /// What a protected entry named but is not protected, and why (`path: reason`), for the report: symlink
    /// targets, gitdirs that are or contain a writable root or lie outside their own root, unreadable `.git`
    /// files.
    pub(crate) ignored: Vec<String>,
    /// The repositories (common dirs) outside every configured root made writable, their protected entries
    /// aside, for the linked worktree that is a writable root, as `(repository, work tree)`
    /// (`uexec_domain::gitdir::worktree_grant`); each is in [`FsLayout::roots`] too.
    pub(crate) worktree_repositories: Vec<(PathBuf, PathBuf)>,
    /// Protected subpaths that do not exist (nothing to protect; creating them is not prevented).
    pub(crate) absent: Vec<PathBuf>,
    /// The entries of [`FsLayout::protected`] that are other tools' files of a writable root
    /// (`uexec_domain::tool_files`), each with its name, so that a refusal names the rule and the key.
    pub(crate) tool_entries: Vec<(PathBuf, &'static str)>,
    /// Files that stay writable under every policy: `/dev/null` and `/dev/tty` (when they exist).
    pub(crate) writable_files: Vec<PathBuf>,
    /// The secret locations hidden from the command (filled in by the sandbox after [`FsLayout::resolve`]).
    pub(crate) hidden: crate::hidden::HiddenLayout,
    /// The copy-on-write views the command gets, as `(directory, upper layer)` (filled in by the sandbox).
    pub(crate) copy_on_write: Vec<(PathBuf, PathBuf)>,
    /// The copy-on-write directories it does not get, and why (filled in by the sandbox).
    pub(crate) copy_on_write_skipped: Vec<String>,
    /// Why the repositories nested at the workspace's top level could not all be examined or protected: the
    /// report's `read_only_subpaths` is then partial, and the command refused unless degradation is allowed.
    pub(crate) unexamined: Option<NestedUnexamined>,
    /// Directories that take no new entry (`uexec_domain::gitdir::closed_dirs`: a git directory's `modules/`),
    /// bound over themselves with only their own mount read-only.
    pub(crate) closed: Vec<PathBuf>,
    /// The placeholders made for this layout (taken by the sandbox for its record, `crate::keep`), or none
    /// made at all for a layout only read ([`FsLayout::resolve_without_placeholders`]).
    pub(crate) placeholders: Placeholders,
    /// The repositories whose loose objects the layout pins (kept aside by `crate::keep` too).
    pub(crate) repositories: Vec<PathBuf>,
    /// Give an absent tool *file* of the workspace a placeholder (a link to nowhere): only where its removal is
    /// recorded (`crate::keep`), else it would be left in the person's work tree.
    pub(crate) absent_file_placeholders: bool,
}

/// The files every sandboxed command may write.
const WRITABLE_FILES: [&str; 2] = ["/dev/null", "/dev/tty"];

/// POSIX shared memory (`shm_open`, `sem_open`: Python's `multiprocessing` locks and queues, many test runners).
/// A tmpfs as shared as `/tmp`, so it is writable exactly when `/tmp` is; `uexec_domain::trust` counts it among
/// the places sandboxed commands write.
const SHM_DIR: &str = uexec_domain::trust::SHARED_MEMORY_DIR;

impl FsLayout {
    /// Work out the layout of `policy` for a command in `cwd` with `$TMPDIR` = `tmpdir`, making the
    /// placeholders of absent protected entries (an absent tool file's only with `absent_files`).
    pub(crate) fn resolve(
        policy: &SandboxPolicy,
        cwd: &Path,
        tmpdir: Option<&Path>,
        tool_files: &ToolFiles,
    ) -> Result<FsLayout, SandboxError> {
        FsLayout::resolve_as(policy, cwd, tmpdir, tool_files, Placeholders::default(), false)
    }

    /// [`FsLayout::resolve`], giving absent tool files a placeholder too (the sandbox records it for removal).
    pub(crate) fn resolve_recorded(
        policy: &SandboxPolicy,
        cwd: &Path,
        tmpdir: Option<&Path>,
        tool_files: &ToolFiles,
    ) -> Result<FsLayout, SandboxError> {
        FsLayout::resolve_as(policy, cwd, tmpdir, tool_files, Placeholders::default(), true)
    }

    /// [`FsLayout::resolve`] making nothing on the host: for reading what a command that ran was protected
    /// from (its refusals), after its placeholders may have been removed. Absent entries that would get a
    /// placeholder count as protected.
    pub(crate) fn resolve_without_placeholders(
        policy: &SandboxPolicy,
        cwd: &Path,
        tmpdir: Option<&Path>,
        tool_files: &ToolFiles,
    ) -> Result<FsLayout, SandboxError> {
        let dry = Placeholders { dry: true, made: Vec::new() };
        FsLayout::resolve_as(policy, cwd, tmpdir, tool_files, dry, true)
    }

    fn resolve_as(
        policy: &SandboxPolicy,
        cwd: &Path,
        tmpdir: Option<&Path>,
        tool_files: &ToolFiles,
        placeholders: Placeholders,
        absent_file_placeholders: bool,
    ) -> Result<FsLayout, SandboxError> {
        // The writable roots are the plan's (`uexec_plan::plan_roots`); `/dev/shm` is writable exactly when
        // `/tmp` is.
        let shm = matches!(policy, SandboxPolicy::WorkspaceWrite { exclude_slash_tmp: false, .. })
            && Path::new(SHM_DIR).is_dir();
        let extra = if shm { vec![PathBuf::from(SHM_DIR)] } else { Vec::new() };
        let invalid_root = |e: InvalidRoot| SandboxError::InvalidPath { path: e.path, reason: e.reason };
        let roots = plan_roots(HOST, policy, cwd, tmpdir, &extra).map_err(invalid_root)?;
        let workspace = Some(roots.workspace.map_err(invalid_root)?);
        let mut layout = FsLayout {
            writable_files: WRITABLE_FILES.iter().map(PathBuf::from).filter(|p| p.exists()).collect(),
            placeholders,
            absent_file_placeholders,
            roots: roots.roots,
            missing_roots: roots.missing.into_iter().map(|(path, _)| path).collect(),
            refused_roots: roots.refused,
            ignored: roots.notes,
            ..FsLayout::default()
        };
        // What stays read-only in the git directories is the plan's (`uexec_plan::GitPlanner`), rendered below
        // into placeholders and read-only mounts.
        let mut planner = GitPlanner::new(HOST, Mechanism::Mounts, roots.spelled);
        // The workspace (the cwd root): the root whose absent tool files take placeholders, whose top level is
        // searched for nested repositories. One listing of its top level answers for its `.git`, `.uexec`, other
        // tools' files and nested repositories, instead of an `lstat` each.
        let top = workspace
            .as_deref()
            .filter(|_| !roots.writable.is_empty())
            .map(|ws| HOST.list(ws, MAX_NESTED_SCAN_ENTRIES));
        // Each canonical root's other tools' files are planned once, the workspace's with its listing.
        let mut tools_planned: Vec<PathBuf> = Vec::new();
        for (root, owner) in &roots.writable {
            let in_workspace = owner.is_some() && *owner == workspace;
            let known = top.as_ref().filter(|_| in_workspace);
            for name in PROTECTED_SUBDIRS {
                layout.add_entry(&root.root, owner.as_deref(), name, known, &mut planner)?;
            }
            let Some(owner) = owner else { continue };
            let entries: Vec<PathBuf> = PROTECTED_SUBDIRS.iter().map(|name| root.root.join(name)).collect();
            for gitdir in root.read_only_subpaths.iter().filter(|sub| !entries.contains(sub)) {
                planner.named_gitdir(gitdir, owner, true);
            }
            if !layout.is_writable(owner) || holds(&tools_planned, owner) {
                continue;
            }
            tools_planned.push(owner.clone());
            // Other tools' files, of every writable root (the plan's, `uexec_plan::plan_tool_files`).
            let which = if in_workspace { ToolRoot::Workspace(known) } else { ToolRoot::Other };
            let tools = plan_tool_files(HOST, Mechanism::Mounts, owner, which, tool_files)
                .map_err(|(path, e)| invalid(&path, &e.to_string()))?;
            layout.add_tool_plan(tools);
            if let (true, Some(top)) = (in_workspace, &top) {
                // The `.git` of what is read-only as a whole already (`.uexec`, other tools' directories) is
                // not looked at.
                let protected = layout.protected.clone();
                planner.nested(owner, top, &|dir| holds(&protected, dir));
            }
        }
        layout.add_git_plan(planner.finish());
        layout.protected.sort_by_cached_key(|p| (depth(p), p.clone()));
        layout.protected.dedup();
        layout.closed.sort_by_cached_key(|p| (depth(p), p.clone()));
        layout.closed.dedup();
        layout.absent.dedup();
        layout.ignored.dedup();
        Ok(layout)
    }

    /// True when `path` (canonical) is a writable root or beneath one.
    pub(crate) fn is_writable(&self, path: &Path) -> bool {
        self.roots.iter().any(|root| path.starts_with(root))
    }

    /// Record protected entry `entry` (`.git` or `.uexec` of a root): protected itself when it exists inside a
    /// writable root, whatever it is. A symlink is never followed: a command may have planted it to name a writable
    /// root or an ancestor of one (`ln -s /tmp /tmp/.uexec`), and its target is no protected entry.
    /// `known` is the listing of the directory the entry is in, when it was listed (a name it does not hold
    /// is absent; one it holds has the type it lists), else the entry is looked up with `lstat`.
    fn add_entry(
        &mut self,
        root: &Path,
        owner: Option<&Path>,
        name: &str,
        known: Option<&Listing>,
        planner: &mut GitPlanner<'_>,
    ) -> Result<(), SandboxError> {
        let Some(owner) = owner else {
            push_unique(&mut self.absent, root.join(name));
            return Ok(());
        };
        let entry = owner.join(name);
        let name = std::ffi::OsStr::new(name);
        let looked_up = match known.and_then(|top| top.lookup(name)) {
            Some(listed) => listed.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound)),
            None => HOST.lstat(&entry).map(|meta| meta.kind),
        };
        let kind = match looked_up {
            Ok(kind) => kind,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                push_unique(&mut self.absent, entry);
                return Ok(());
            }
            Err(e) => return Err(invalid(&entry, &e.to_string())),
        };
        if !self.is_writable(&entry) {
            return Ok(());
        }
        if kind == Kind::Dir
            && entry.file_name() == Some(std::ffi::OsStr::new(".git"))
            && let Some(owner) = entry.parent()
        {
            // A git directory: writable but for what git executes or takes configuration from (the plan's).
            planner.root_git_dir(owner);
            return Ok(());
        }
        let own_placeholder =
            || HOST.read_link(&entry).is_ok_and(|t| t == Path::new(uexec_domain::gitdir::ABSENT_LINK_TARGET));
        if kind == Kind::Symlink
            && !own_placeholder()
            && let Some(note) = symlink_note(HOST, &entry)
        {
            push_unique_text(&mut self.ignored, note);
        }
        push_unique(&mut self.protected, entry);
        Ok(())
    }

    /// Render one root's other tools' files (`uexec_plan::ToolPlan`) into mounts: a present entry is bound
    /// read-only; an absent one that takes a placeholder gets it first (a file's link to nowhere only where its
    /// removal is recorded, [`FsLayout::absent_file_placeholders`], else it is listed absent); an absent one
    /// of another root takes none and stays creatable, as the rule's words in the report say
    /// (`uexec_domain::tool_files::ToolFiles::text`).
    fn add_tool_plan(&mut self, plan: ToolPlan) {
        for note in plan.notes {
            push_unique_text(&mut self.ignored, note);
        }
        for ToolItem { entry, name } in plan.items {
            let path = match entry {
                Entry::Present(path) => path,
                Entry::Absent(path, Some(placeholder))
                    if placeholder != WhenAbsent::AbsentLink || self.absent_file_placeholders =>
                {
                    if let Err(e) = self.placeholders.create(&path, placeholder) {
                        // Fails closed: a command could create it, so the report says so.
                        push_unique_text(
                            &mut self.ignored,
                            format!(
                                "{}: cannot create the placeholder ({e}), so it can be created",
                                path.display()
                            ),
                        );
                        push_unique(&mut self.absent, path);
                        continue;
                    }
                    path
                }
                Entry::Absent(path, Some(_)) => {
                    push_unique(&mut self.absent, path);
                    continue;
                }
                Entry::Absent(_, None) => continue,
            };
            push_unique(&mut self.protected, path.clone());
            if !self.tool_entries.iter().any(|(p, _)| *p == path) {
                self.tool_entries.push((path, name));
            }
        }
    }

    /// Render the git half of the plan (`uexec_plan::GitPlan`) into mounts: the repositories granted to linked
    /// worktrees become writable roots, every entry present is bound read-only, every absent one that takes a
    /// placeholder gets it first (an absent one that takes none stays unprotected: a mount needs something to
    /// cover), and each directory that takes no new entry is bound over itself (made empty first when absent;
    /// protected as itself when it is no directory).
    fn add_git_plan(&mut self, plan: GitPlan) {
        for (repository, worktree) in plan.grants {
            push_unique(&mut self.roots, repository.clone());
            self.worktree_repositories.push((repository, worktree));
        }
        for item in plan.items {
            match item {
                GitItem::GitDir(git_dir) => self.add_git_dir(git_dir),
                GitItem::Path(Entry::Present(path)) => push_unique(&mut self.protected, path),
                GitItem::Path(Entry::Absent(path, Some(placeholder))) => {
                    if self.placeholders.create(&path, placeholder).is_ok() {
                        push_unique(&mut self.protected, path);
                    }
                }
                GitItem::Path(Entry::Absent(_, None)) => {}
            }
        }
        for note in plan.notes {
            push_unique_text(&mut self.ignored, note);
        }
        if plan.unexamined.is_some() {
            self.unexamined = plan.unexamined;
        }
    }

    /// Render one writable git directory's plan. A placeholder that cannot be made freezes its git directory
    /// as a whole (fails closed): the one walked from, or one found below it.
    fn add_git_dir(&mut self, plan: GitDirPlan) {
        let (mut protected, mut closed, mut repositories, mut notes) =
            (Vec::new(), Vec::new(), Vec::new(), plan.notes);
        for part in plan.parts {
            if part.whole {
                protected.push(part.dir);
                continue;
            }
            match self.make_part(&part.entries, &part.closed, &mut protected, &mut closed) {
                Ok(()) => {
                    protected.extend(part.read_only);
                    if part.repository {
                        repositories.push(part.dir);
                    }
                }
                Err(why) if part.dir == plan.gitdir => {
                    protected = vec![part.dir];
                    (closed, repositories) = (Vec::new(), Vec::new());
                    notes = vec![format!("{}: read-only as a whole ({why})", plan.gitdir.display())];
                    break;
                }
                Err(why) => {
                    protected.retain(|p| !p.starts_with(&part.dir));
                    closed.retain(|p: &PathBuf| !p.starts_with(&part.dir));
                    repositories.retain(|p: &PathBuf| !p.starts_with(&part.dir));
                    notes.push(format!("{}: read-only as a whole ({why})", part.dir.display()));
                    protected.push(part.dir);
                }
            }
        }
        for path in protected {
            push_unique(&mut self.protected, path);
        }
        for path in closed {
            push_unique(&mut self.closed, path);
        }
        for path in repositories {
            push_unique(&mut self.repositories, path);
        }
        for note in notes {
            push_unique_text(&mut self.ignored, note);
        }
    }

    /// Make the placeholders of one git directory's absent entries and closed directories, and list what gets
    /// bound: `Err` (why) when one cannot be made.
    fn make_part(
        &mut self,
        entries: &[Entry],
        closed_dirs: &[(PathBuf, Closed)],
        protected: &mut Vec<PathBuf>,
        closed: &mut Vec<PathBuf>,
    ) -> Result<(), String> {
        let cannot =
            |path: &Path, e: io::Error| format!("cannot create the placeholder {}: {e}", path.display());
        for entry in entries {
            match entry {
                Entry::Present(path) => protected.push(path.clone()),
                Entry::Absent(path, Some(placeholder)) => {
                    self.placeholders.create(path, *placeholder).map_err(|e| cannot(path, e))?;
                    protected.push(path.clone());
                }
                Entry::Absent(_, None) => {}
            }
        }
        for (dir, state) in closed_dirs {
            match state {
                Closed::Dir => closed.push(dir.clone()),
                Closed::NotADir => protected.push(dir.clone()),
                Closed::Absent => {
                    self.placeholders.create(dir, WhenAbsent::EmptyDir).map_err(|e| cannot(dir, e))?;
                    closed.push(dir.clone());
                }
            }
        }
        Ok(())
    }

    /// The roots to bind-mount writable: the canonical roots minus those beneath another root (the outer root's
    /// recursive copy already holds them), shallowest first. Empty when `/` itself is writable.
    pub(crate) fn mount_roots(&self) -> Vec<&Path> {
        if self.roots.iter().any(|r| r == Path::new("/")) {
            return Vec::new();
        }
        let mut roots: Vec<&Path> = self
            .roots
            .iter()
            .filter(|r| !self.roots.iter().any(|other| other != *r && r.starts_with(other)))
            .map(PathBuf::as_path)
            .collect();
        roots.sort_by_key(|p| depth(p));
        roots
    }

    /// The directories to bind-mount over themselves so that no sandboxed command can rename or remove them
    /// (`EBUSY`): every directory between a mounted writable root (exclusive) and a protected entry (exclusive),
    /// shallowest first. Without them a workspace nested in another writable root (`/tmp/proj` with `/tmp`
    /// writable) could be renamed away by one command and replaced by a decoy, and the next command, whose
    /// protected entries are found by path, would leave the real `.git` writable at its new path.
    pub(crate) fn pinned_dirs(&self) -> Vec<PathBuf> {
        let mounted = self.mount_roots();
        let outer: Vec<&Path> = if mounted.is_empty() { vec![Path::new("/")] } else { mounted };
        let mut pinned = Vec::new();
        for entry in self.protected.iter().chain(&self.closed) {
            // An entry that is a root itself (a planted `.git` file naming `gitdir: /tmp`) pins nothing.
            let Some(root) = outer
                .iter()
                .filter(|root| entry.starts_with(root) && entry != *root)
                .max_by_key(|root| depth(root))
            else {
                continue;
            };
            for dir in entry.ancestors().skip(1).take_while(|dir| dir != root) {
                push_unique(&mut pinned, dir.to_path_buf());
            }
        }
        pinned.sort_by_cached_key(|p| (depth(p), p.clone()));
        pinned
    }
}

impl FsLayout {
    /// The directories to bind-mount over themselves so that no sandboxed command can rename or move a hidden
    /// entry's directories (`EBUSY`): every directory between the writable mount a hidden entry lies in (a
    /// mounted writable root or a copy-on-write view, exclusive) and the entry (exclusive), minus those
    /// [`FsLayout::pinned_dirs`] pins already and those at or beneath a protected entry (read-only already),
    /// shallowest first. A hidden entry is a mount point itself, and a mount travels with a directory renamed
    /// above it: without these, one command could `mv config config2` (or `mv app x/.git`, where the search does
    /// not go) and the next command, whose hidden entries are found by path, would read them under the new name.
    pub(crate) fn hidden_pinned_dirs(&self) -> Vec<PathBuf> {
        let mounted = self.mount_roots();
        let mut outer: Vec<&Path> = if mounted.is_empty() { vec![Path::new("/")] } else { mounted };
        outer.extend(self.copy_on_write.iter().map(|(dir, _)| dir.as_path()));
        let already = self.pinned_dirs();
        let mut pinned = Vec::new();
        for entry in self.hidden.all() {
            if !self.is_writable(entry) && !self.copy_on_write.iter().any(|(dir, _)| entry.starts_with(dir)) {
                // Outside every writable place: read-only, so nothing above it can be renamed.
                continue;
            }
            let Some(mount) = outer
                .iter()
                .filter(|mount| entry.starts_with(mount) && entry != *mount)
                .max_by_key(|mount| depth(mount))
            else {
                continue;
            };
            for dir in entry.ancestors().skip(1).take_while(|dir| dir != mount) {
                let read_only = self.protected.iter().any(|p| dir.starts_with(p));
                if !read_only && !already.iter().any(|p| p == dir) {
                    push_unique(&mut pinned, dir.to_path_buf());
                }
            }
        }
        pinned.sort_by_cached_key(|p| (depth(p), p.clone()));
        pinned
    }
}

/// Push `text` unless present.
fn push_unique_text(list: &mut Vec<String>, text: String) {
    if !list.contains(&text) {
        list.push(text);
    }
}

/// Push `path` unless present.
fn push_unique(list: &mut Vec<PathBuf>, path: PathBuf) {
    if !holds(list, &path) {
        list.push(path);
    }
}

/// True when `list` holds `path`, compared byte for byte: the paths here are made by joining names to canonical
/// paths, so each has one spelling, and comparing components (`Path`'s `==`) made a layout with many protected
/// entries (nested repositories) quadratic in a costly way.
fn holds(list: &[PathBuf], path: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    list.iter().any(|p| p.as_os_str().as_bytes() == bytes)
}

/// The number of normal components of `path`.
fn depth(path: &Path) -> usize {
    path.components().filter(|c| matches!(c, Component::Normal(_))).count()
}

/// A path as a C string (paths from the OS contain no NUL; `SandboxError::InvalidPath` otherwise).
pub(crate) fn c_path(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| invalid(path, "the path contains a NUL byte"))
}

/// `SandboxError::InvalidPath`.
fn invalid(path: &Path, reason: &str) -> SandboxError {
    SandboxError::InvalidPath { path: path.to_path_buf(), reason: reason.to_owned() }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::fs;

    use uexec_domain::gitdir::MAX_NESTED_REPOSITORIES;

    use super::*;

    /// No tool file protected: the git tests look at git's entries alone.
    fn no_tools() -> ToolFiles {
        let names: Vec<&str> = uexec_domain::tool_files::TOOL_ENTRIES.iter().map(|e| e.name).collect();
        ToolFiles::allowing(&names).unwrap()
    }

    #[test]
    fn every_roots_other_tools_files_are_protected_and_the_workspaces_absent_directories_get_a_placeholder() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let ws = base.join("ws");
        fs::create_dir_all(ws.join(".claude")).unwrap();
        fs::write(ws.join(".mcp.json"), "{}").unwrap();
        fs::create_dir_all(base.join("extra/.idea")).unwrap();
        let policy = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![base.join("extra")],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        };
        let tools = ToolFiles::allowing(&[".zed"]).unwrap();
        let layout = FsLayout::resolve(&policy, &ws, None, &tools).unwrap();
        for present in [ws.join(".claude"), ws.join(".mcp.json")] {
            assert!(layout.protected.contains(&present), "{}: {:?}", present.display(), layout.protected);
        }
        // Every writable root's: another root's present ones are protected too, and name their rule.
        assert!(layout.protected.contains(&base.join("extra/.idea")), "{:?}", layout.protected);
        assert!(
            layout.tool_entries.contains(&(base.join("extra/.idea"), ".idea")),
            "{:?}",
            layout.tool_entries
        );
        // In the workspace an absent directory becomes an empty placeholder; an absent file stays absent.
        assert!(layout.protected.contains(&ws.join(".vscode")) && ws.join(".vscode").is_dir());
        assert_eq!(fs::read_dir(ws.join(".vscode")).unwrap().count(), 0);
        assert!(layout.absent.contains(&ws.join(".envrc")) && !ws.join(".envrc").exists());
        // Another root gets no placeholder; an allowed entry is neither protected nor made.
        assert!(!base.join("extra/.vscode").exists() && !layout.absent.contains(&base.join("extra/.vscode")));
        assert!(!ws.join(".zed").exists() && !layout.protected.contains(&ws.join(".zed")));
        // A symlink planted in the entry's place is protected as the link.
        fs::remove_dir(ws.join(".vscode")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere"), ws.join(".vscode")).unwrap();
        let layout = FsLayout::resolve(&policy, &ws, None, &tools).unwrap();
        assert!(layout.protected.contains(&ws.join(".vscode")), "{:?}", layout.protected);
        assert!(!base.join("elsewhere").exists());
    }

    fn workspace(tmp: &Path) -> SandboxPolicy {
        SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![tmp.join("extra"), tmp.join("missing")],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        }
    }

    #[test]
    fn resolves_roots_protected_and_absent_subpaths() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let repo = base.join("repo");
        fs::create_dir_all(repo.join(".git")).unwrap();
        fs::create_dir_all(base.join("extra")).unwrap();
        fs::create_dir_all(base.join("main/.git/worktrees/wt")).unwrap();
        fs::write(
            base.join("extra/.git"),
            format!("gitdir: {}\n", base.join("main/.git/worktrees/wt").display()),
        )
        .unwrap();
        std::os::unix::fs::symlink("repo", base.join("link")).unwrap();

        let layout = FsLayout::resolve(&workspace(&base), &base.join("link"), None, &no_tools()).unwrap();
        assert_eq!(layout.roots, vec![base.join("extra"), repo.clone()]);
        assert_eq!(layout.missing_roots, vec![base.join("missing")]);
        // The gitdir is outside every writable root: read-only already, not mounted.
        assert_eq!(layout.protected, vec![base.join("extra/.git"), repo.join(".git")]);
        assert!(layout.absent.contains(&repo.join(".uexec")));
        assert!(layout.absent.contains(&base.join("extra/.uexec")));
        assert!(layout.writable_files.contains(&PathBuf::from("/dev/null")));
    }

    fn cwd_only() -> SandboxPolicy {
        SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        }
    }

    #[test]
    fn a_symlinked_protected_entry_protects_only_the_link() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(base.join("real-git")).unwrap();
        fs::write(base.join("real-git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::os::unix::fs::symlink("real-git", base.join(".git")).unwrap();
        // A link to the root itself (`ln -s . .uexec`).
        std::os::unix::fs::symlink(&base, base.join(".uexec")).unwrap();
        let layout = FsLayout::resolve(&cwd_only(), &base, None, &no_tools()).unwrap();
        assert_eq!(layout.protected, vec![base.join(".git"), base.join(".uexec")]);
        assert!(
            layout.ignored.iter().any(|n| n.contains(".git: a symlink to real-git")),
            "{:?}",
            layout.ignored
        );
        assert!(layout.ignored.iter().any(|n| n.contains(".uexec: a symlink to")), "{:?}", layout.ignored);
    }

    #[test]
    fn a_gitdir_file_protects_only_a_git_directory_inside_its_own_root() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let ws = base.join("ws");
        fs::create_dir_all(ws.join("gitdirs/wt")).unwrap();
        fs::create_dir_all(ws.join("src")).unwrap();
        fs::write(ws.join("gitdirs/wt/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::os::unix::fs::symlink("gitdirs", ws.join("link")).unwrap();
        let layout_for = |content: &str| {
            fs::write(ws.join(".git"), content).unwrap();
            FsLayout::resolve(&cwd_only(), &ws, None, &no_tools()).unwrap()
        };
        let good = layout_for("gitdir: gitdirs/wt\n");
        assert_eq!(good.protected, vec![ws.join(".git"), ws.join("gitdirs/wt")]);
        for (content, why) in [
            ("gitdir: .\n", "is the writable root"),
            ("gitdir: ..\n", "contains the writable root"),
            ("gitdir: /\n", "contains the writable root"),
            ("gitdir: src\n", "not a git directory"),
            ("gitdir: /proc/self/cwd\n", "read-only anyway"),
            ("gitdir: link/wt\n", "goes through a symlink"),
            ("gitdir: nowhere\n", "does not resolve"),
        ] {
            let layout = layout_for(content);
            assert_eq!(layout.protected, vec![ws.join(".git")], "{content}");
            assert!(layout.ignored.iter().any(|n| n.contains(why)), "{content}: {:?}", layout.ignored);
        }
    }

    #[test]
    fn a_git_directory_is_protected_entry_by_entry_and_its_directories_are_pinned() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let git = base.join(".git");
        fs::create_dir_all(git.join("objects/info")).unwrap();
        fs::create_dir_all(git.join("refs/heads")).unwrap();
        fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(git.join("config"), "[core]\n").unwrap();
        let layout = FsLayout::resolve(&cwd_only(), &base, None, &no_tools()).unwrap();
        assert!(!layout.protected.contains(&git), "{:?}", layout.protected);
        for entry in ["config", "config.worktree", "hooks", "info", "objects/info/alternates", "commondir"] {
            assert!(layout.protected.contains(&git.join(entry)), "{entry}: {:?}", layout.protected);
        }
        assert!(!layout.absent.iter().any(|a| a.starts_with(&git)), "{:?}", layout.absent);
        assert!(
            layout.protected.contains(&base.join(".uexec")) || layout.absent.contains(&base.join(".uexec"))
        );
        assert_eq!(layout.pinned_dirs(), vec![git.clone(), git.join("objects"), git.join("objects/info")]);
        // A `.git` directory git could not use (no objects/) stays read-only as a whole.
        fs::remove_dir_all(git.join("objects")).unwrap();
        let layout = FsLayout::resolve(&cwd_only(), &base, None, &no_tools()).unwrap();
        assert!(layout.protected.contains(&git), "{:?}", layout.protected);
        assert!(layout.ignored.iter().any(|n| n.contains("read-only as a whole")), "{:?}", layout.ignored);
    }

    #[test]
    fn absent_entries_get_inert_placeholders_made_once_and_a_failed_one_freezes_its_git_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let g = base.join(".git");
        fs::create_dir_all(g.join("objects")).unwrap();
        fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let wt = g.join("worktrees/wt");
        fs::create_dir_all(&wt).unwrap();
        fs::write(wt.join("HEAD"), "ref: refs/heads/wt\n").unwrap();
        fs::write(wt.join("commondir"), "../..\n").unwrap();
        let layout = FsLayout::resolve(&cwd_only(), &base, None, &no_tools()).unwrap();
        // The placeholders are empty, so git reads them as nothing; `objects/info` is made for `alternates`.
        assert!(fs::read_dir(g.join("hooks")).unwrap().next().is_none());
        assert!(fs::read_dir(g.join("modules")).unwrap().next().is_none(), "closed, and made empty");
        assert_eq!(fs::read(g.join("config.worktree")).unwrap(), b"");
        assert_eq!(fs::read(g.join("objects/info/alternates")).unwrap(), b"");
        // A repository's commondir names the git dir itself: git reads that as no redirection.
        assert_eq!(fs::read(g.join("commondir")).unwrap(), b".\n");
        assert_eq!(
            fs::read_link(g.join("shallow")).unwrap(),
            Path::new(uexec_domain::gitdir::ABSENT_LINK_TARGET)
        );
        // A worktree admin dir without a gitdir back-pointer gets an empty one (git reads it as none).
        assert_eq!(fs::read(wt.join("gitdir")).unwrap(), b"");
        assert!(layout.closed.contains(&g.join("modules")), "{:?}", layout.closed);
        assert_eq!(layout.repositories, vec![g.clone()]);
        // Protecting again finds the same entries and makes nothing new.
        let again = FsLayout::resolve(&cwd_only(), &base, None, &no_tools()).unwrap();
        assert_eq!(again.protected, layout.protected);
        assert!(again.placeholders.made.is_empty(), "{:?}", again.placeholders.made);
        // Read without making anything: the absent entries count as protected all the same.
        let fresh = tempfile::tempdir().unwrap();
        let fresh = fs::canonicalize(fresh.path()).unwrap();
        fs::create_dir_all(fresh.join(".git/objects")).unwrap();
        let dry = FsLayout::resolve_without_placeholders(&cwd_only(), &fresh, None, &no_tools()).unwrap();
        assert!(dry.protected.contains(&fresh.join(".git/hooks")) && !fresh.join(".git/hooks").exists());
        // A placeholder that cannot be made (its directory is read-only) freezes the git directory as a whole.
        // (Root writes in a read-only directory all the same: then there is nothing to see.)
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(fresh.join(".git"), fs::Permissions::from_mode(0o555)).unwrap();
        let root = fs::create_dir(fresh.join(".git/probe")).is_ok();
        let frozen = FsLayout::resolve(&cwd_only(), &fresh, None, &no_tools()).unwrap();
        fs::set_permissions(fresh.join(".git"), fs::Permissions::from_mode(0o755)).unwrap();
        if !root {
            assert!(frozen.protected.contains(&fresh.join(".git")), "{:?}", frozen.protected);
            assert!(
                frozen.ignored.iter().any(|n| n.contains("cannot create the placeholder")),
                "{:?}",
                frozen.ignored
            );
        }
        // An entry that cannot be looked at (`objects/info` a file, so `alternates` below it is `ENOTDIR`) too.
        let odd = tempfile::tempdir().unwrap();
        let odd = fs::canonicalize(odd.path()).unwrap();
        fs::create_dir_all(odd.join(".git/objects")).unwrap();
        fs::write(odd.join(".git/objects/info"), "").unwrap();
        let frozen = FsLayout::resolve(&cwd_only(), &odd, None, &no_tools()).unwrap();
        assert_eq!(frozen.protected, vec![odd.join(".git")]);
        assert!(
            frozen.ignored.iter().any(|n| n.contains("read-only as a whole (cannot inspect")),
            "{:?}",
            frozen.ignored
        );
    }

    #[test]
    fn a_separate_git_dir_stays_a_repository_after_its_commondir_placeholder_is_made() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let sep = base.join("sep.git");
        fs::create_dir_all(sep.join("objects")).unwrap();
        fs::write(sep.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(base.join(".git"), "gitdir: sep.git\n").unwrap();
        let first = FsLayout::resolve(&cwd_only(), &base, None, &no_tools()).unwrap();
        assert_eq!(fs::read(sep.join("commondir")).unwrap(), b".\n");
        // The placeholder names the directory itself: the second command sees the same repository, not a
        // linked worktree whose config would be left writable.
        let second = FsLayout::resolve(&cwd_only(), &base, None, &no_tools()).unwrap();
        assert_eq!(first.protected, second.protected);
        for entry in ["config", "hooks", "info", "commondir"] {
            assert!(second.protected.contains(&sep.join(entry)), "{entry}: {:?}", second.protected);
        }
    }

    #[test]
    fn a_worktree_named_by_the_root_protects_the_common_dir_its_commondir_names() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let main = base.join("gitdirs/main.git");
        fs::create_dir_all(main.join("objects")).unwrap();
        fs::write(main.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let admin = main.join("worktrees/wt");
        fs::create_dir_all(&admin).unwrap();
        fs::write(admin.join("HEAD"), "ref: refs/heads/wt\n").unwrap();
        fs::write(admin.join("commondir"), "../..\n").unwrap();
        fs::write(base.join(".git"), "gitdir: gitdirs/main.git/worktrees/wt\n").unwrap();
        let layout = FsLayout::resolve(&cwd_only(), &base, None, &no_tools()).unwrap();
        for entry in ["worktrees/wt/commondir", "worktrees/wt/gitdir", "config", "hooks", "info"] {
            assert!(layout.protected.contains(&main.join(entry)), "{entry}: {:?}", layout.protected);
        }
        assert!(!layout.protected.contains(&admin) && !layout.protected.contains(&main));
    }

    #[test]
    fn repositories_nested_at_the_workspace_top_level_are_protected_and_links_are_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let ws = base.join("ws");
        let repo = |dir: &Path| {
            fs::create_dir_all(dir.join(".git/objects")).unwrap();
            fs::write(dir.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        };
        repo(&ws.join("vendored"));
        repo(&ws.join("deep/er"));
        repo(&base.join("elsewhere"));
        std::os::unix::fs::symlink(base.join("elsewhere"), ws.join("link")).unwrap();
        // A separate git directory named by a `.git` file, inside the workspace.
        repo(&ws.join("seps/x"));
        fs::create_dir_all(ws.join("worktree")).unwrap();
        fs::write(ws.join("worktree/.git"), "gitdir: ../seps/x/.git\n").unwrap();
        // A `.git` symlink: the link itself.
        fs::create_dir_all(ws.join("linked")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere/.git"), ws.join("linked/.git")).unwrap();
        let layout = FsLayout::resolve(&cwd_only(), &ws, None, &no_tools()).unwrap();
        let vendored = ws.join("vendored/.git");
        for entry in ["config", "hooks", "info", "commondir"] {
            assert!(layout.protected.contains(&vendored.join(entry)), "{entry}: {:?}", layout.protected);
        }
        assert!(!layout.protected.contains(&vendored), "entry by entry: {:?}", layout.protected);
        assert!(layout.protected.contains(&ws.join("worktree/.git")));
        assert!(layout.protected.contains(&ws.join("seps/x/.git/config")), "{:?}", layout.protected);
        assert!(layout.protected.contains(&ws.join("linked/.git")));
        assert!(layout.ignored.iter().any(|n| n.contains("linked/.git: a symlink")), "{:?}", layout.ignored);
        // Not followed through the symlinked directory, not looked for deeper down.
        assert!(!base.join("elsewhere/.git/hooks").exists() && !ws.join("deep/er/.git/hooks").exists());
        assert!(
            !layout
                .protected
                .iter()
                .any(|p| p.starts_with(base.join("elsewhere")) || p.starts_with(ws.join("deep")))
        );
        // Only the workspace's top level: the same repositories under another writable root are not looked at.
        let other = base.join("other");
        repo(&other.join("nested"));
        let policy = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![other.clone()],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        };
        let layout = FsLayout::resolve(&policy, &ws, None, &no_tools()).unwrap();
        assert!(layout.protected.contains(&vendored.join("config")));
        assert!(
            !layout.protected.iter().any(|p| p.starts_with(other.join("nested"))),
            "{:?}",
            layout.protected
        );
    }

    #[test]
    fn beyond_the_budget_planted_repositories_push_none_of_the_person_s_out() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(tmp.path()).unwrap();
        // The person's repository first, named to come last in name order; then 40 planted ones.
        fs::create_dir_all(ws.join("zz-vendorlib/.git/objects")).unwrap();
        // The planted ones come later: wait (bounded) until the clock the file system stamps births with moved.
        let born = |path: &Path| fs::symlink_metadata(path).unwrap().created().unwrap();
        let person = born(&ws.join("zz-vendorlib/.git"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            fs::create_dir(ws.join("probe")).unwrap();
            let later = born(&ws.join("probe")) > person;
            fs::remove_dir(ws.join("probe")).unwrap();
            if later {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the birth clock never moved");
            std::thread::yield_now();
        }
        for i in 0..40 {
            fs::create_dir_all(ws.join(format!("a{i:02}/.git/objects"))).unwrap();
        }
        let layout = FsLayout::resolve(&cwd_only(), &ws, None, &no_tools()).unwrap();
        assert!(fs::symlink_metadata(ws.join("zz-vendorlib/.git")).unwrap().created().is_ok(), "birth times");
        assert!(layout.protected.contains(&ws.join("zz-vendorlib/.git/config")), "{:?}", layout.protected);
        assert!(layout.unexamined.is_none());
        // Every planted one is protected too, entry by entry or as a whole: none is left writable.
        for i in 0..40 {
            let dot_git = ws.join(format!("a{i:02}/.git"));
            assert!(
                layout.protected.contains(&dot_git) || layout.protected.contains(&dot_git.join("config")),
                "{dot_git:?}"
            );
        }
        let whole = (0..40).filter(|i| layout.protected.contains(&ws.join(format!("a{i:02}/.git")))).count();
        // The planted ones may share birth times (the clock is coarse): those at the cut are all read-only whole.
        assert!(whole >= 41 - MAX_NESTED_REPOSITORIES, "{whole}");
        assert!(layout.ignored.iter().any(|n| n.contains("read-only as a whole")), "{:?}", layout.ignored);
    }

    #[test]
    fn beyond_the_listing_budget_the_workspace_s_entries_are_still_looked_up() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(tmp.path()).unwrap();
        for i in 0..MAX_NESTED_SCAN_ENTRIES + 8 {
            fs::write(ws.join(format!("f{i}")), "").unwrap();
        }
        fs::create_dir_all(ws.join("vendorlib/.git/objects")).unwrap();
        fs::create_dir_all(ws.join(".git/objects")).unwrap();
        fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(ws.join(".uexec"), "").unwrap();
        fs::write(ws.join(".mcp.json"), "{}").unwrap();
        let tools = ToolFiles::default();
        let layout = FsLayout::resolve(&cwd_only(), &ws, None, &tools).unwrap();
        // Wherever the listing stopped, each entry is protected, and an absent tool directory gets its placeholder.
        for entry in [".git/config", ".uexec", ".mcp.json", ".vscode"] {
            assert!(layout.protected.contains(&ws.join(entry)), "{entry}: {:?}", layout.protected);
        }
        assert!(ws.join(".vscode").is_dir());
        // The repositories nested there cannot all be examined: the report is partial, the command refused.
        assert_eq!(layout.unexamined, Some(NestedUnexamined::TooManyEntries));
        let support = crate::support::KernelSupport {
            landlock_abi: 7,
            landlock_missing: None,
            seccomp: crate::support::Availability::Available,
            mount_namespace: crate::support::MountNamespace::Privileged,
        };
        let plan = crate::plan::Plan::new(&cwd_only(), &support);
        let report = plan.report(Some(&layout));
        assert!(report.is_degraded(), "{report}");
        assert!(report.to_string().contains("MAX_NESTED_SCAN_ENTRIES"), "{report}");
        // 1100 planted files are well within the listing: the nested repository is protected, nothing partial.
        let some = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(some.path()).unwrap();
        for i in 0..1100 {
            fs::write(ws.join(format!("f{i}")), "").unwrap();
        }
        fs::create_dir_all(ws.join("vendorlib/.git/objects")).unwrap();
        let layout = FsLayout::resolve(&cwd_only(), &ws, None, &tools).unwrap();
        assert!(layout.protected.contains(&ws.join("vendorlib/.git/config")), "{:?}", layout.protected);
        assert!(layout.unexamined.is_none());
        assert!(!plan.report(Some(&layout)).is_degraded());
        // Within the budget the listing answers alone, with the same result.
        let small = tempfile::tempdir().unwrap();
        let ws = fs::canonicalize(small.path()).unwrap();
        fs::write(ws.join(".mcp.json"), "{}").unwrap();
        std::os::unix::fs::symlink("/etc", ws.join(".uexec")).unwrap();
        let layout = FsLayout::resolve(&cwd_only(), &ws, None, &tools).unwrap();
        assert!(
            layout.protected.contains(&ws.join(".mcp.json")) && layout.protected.contains(&ws.join(".uexec"))
        );
        assert!(layout.absent.contains(&ws.join(".envrc")) && layout.absent.contains(&ws.join(".git")));
        assert!(layout.ignored.iter().any(|n| n.contains("a symlink to /etc")), "{:?}", layout.ignored);
    }

    #[test]
    fn nested_roots_are_mounted_once_and_slash_disables_root_mounts() {
        let layout = FsLayout {
            roots: vec![PathBuf::from("/a/b"), PathBuf::from("/a"), PathBuf::from("/c")],
            ..FsLayout::default()
        };
        assert_eq!(layout.mount_roots(), vec![Path::new("/a"), Path::new("/c")]);
        let everything =
            FsLayout { roots: vec![PathBuf::from("/"), PathBuf::from("/a")], ..FsLayout::default() };
        assert!(everything.mount_roots().is_empty());
    }

    #[test]
    fn directories_between_a_mounted_root_and_a_protected_entry_are_pinned() {
        let layout = FsLayout {
            roots: vec![PathBuf::from("/tmp"), PathBuf::from("/tmp/a/proj"), PathBuf::from("/w")],
            protected: vec![
                PathBuf::from("/tmp/.git"),
                PathBuf::from("/tmp/a/proj/.git"),
                PathBuf::from("/tmp/a/proj/.uexec"),
                PathBuf::from("/w/.git"),
                PathBuf::from("/w"),
            ],
            ..FsLayout::default()
        };
        assert_eq!(layout.pinned_dirs(), vec![PathBuf::from("/tmp/a"), PathBuf::from("/tmp/a/proj")]);
        let everything = FsLayout {
            roots: vec![PathBuf::from("/")],
            protected: vec![PathBuf::from("/p/.git")],
            ..FsLayout::default()
        };
        assert_eq!(everything.pinned_dirs(), vec![PathBuf::from("/p")]);
    }

    #[test]
    fn directories_above_a_hidden_entry_in_a_writable_place_are_pinned() {
        let mut layout = FsLayout {
            roots: vec![PathBuf::from("/tmp"), PathBuf::from("/w")],
            protected: vec![PathBuf::from("/w/.git"), PathBuf::from("/tmp/proj/.git")],
            copy_on_write: vec![(PathBuf::from("/h/.gradle"), PathBuf::from("/s/upper"))],
            ..FsLayout::default()
        };
        layout.hidden.files = vec![
            PathBuf::from("/w/config/prod/secret"),
            PathBuf::from("/w/.env"),
            PathBuf::from("/tmp/proj/app/.env"),
            PathBuf::from("/w/.git/x/.env"),
            PathBuf::from("/h/.netrc"),
            PathBuf::from("/h/.gradle/keys/k"),
        ];
        layout.hidden.dirs = vec![PathBuf::from("/w/deep/junk")];
        assert_eq!(
            layout.hidden_pinned_dirs(),
            vec![
                // /tmp/proj is pinned for its .git already; nothing at or under /w/.git (read-only).
                PathBuf::from("/w/config"),
                PathBuf::from("/w/deep"),
                PathBuf::from("/h/.gradle/keys"),
                PathBuf::from("/tmp/proj/app"),
                PathBuf::from("/w/config/prod"),
            ]
        );
        assert_eq!(layout.pinned_dirs(), vec![PathBuf::from("/tmp/proj")]);
    }

    #[test]
    fn a_root_reached_through_a_symlink_inside_a_writable_root_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(base.join("ws")).unwrap();
        fs::create_dir_all(base.join("victim")).unwrap();
        fs::create_dir_all(base.join("real-cache")).unwrap();
        // $TMPDIR inside the workspace, replaced by a symlink to a directory outside every root.
        std::os::unix::fs::symlink(base.join("victim"), base.join("ws/tmp")).unwrap();
        // A configured root that is a symlink in a directory no command can write: trusted.
        std::os::unix::fs::symlink(base.join("real-cache"), base.join("cache")).unwrap();
        let policy = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![base.join("cache")],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: false,
        };
        let layout =
            FsLayout::resolve(&policy, &base.join("ws"), Some(&base.join("ws/tmp")), &no_tools()).unwrap();
        assert_eq!(layout.roots, vec![base.join("real-cache"), base.join("ws")]);
        assert_eq!(layout.refused_roots, vec![base.join("ws/tmp")]);
        assert!(!layout.is_writable(&base.join("victim")));
    }

    #[test]
    fn bad_cwd_is_an_invalid_path() {
        let policy = SandboxPolicy::ReadOnly { network_access: false };
        assert!(matches!(
            FsLayout::resolve(&policy, Path::new("/no/such/dir"), None, &no_tools()),
            Err(SandboxError::InvalidPath { .. })
        ));
        assert!(matches!(
            FsLayout::resolve(&policy, Path::new("relative"), None, &no_tools()),
            Err(SandboxError::InvalidPath { .. })
        ));
    }
}
