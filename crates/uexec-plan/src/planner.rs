//! The git half of a command's plan ([`GitPlanner`] into [`GitPlan`]): for each writable root, its own `.git`
//! directory, the gitdir its `.git` file names, the repositories nested at the workspace's top level and the
//! repository of a linked worktree outside every root, each decided once, for every platform, through the
//! host view. The adapters render the value: the Linux one into placeholders and read-only mounts, the macOS one
//! into denied paths.

use std::path::{Path, PathBuf};

use uexec_domain::GitEntry;
use uexec_domain::gitdir::{
    CHECKOUT_FILES, GitDirKind, MAX_NESTED_REPOSITORIES, MAX_NESTED_SCAN_ENTRIES, NestedMode,
    NestedUnexamined, UnprotectedGitdir, nested_modes, normalize_lexically, worktree_common_dir,
};

use crate::git::{granted_repository, inspect_git, protected_gitdir, symlink_note};
use crate::gitdirs::{Entry, GitDirPlan, LooseBudget, Mechanism, kind_of, plan_git_dir};
use crate::host::{HostView, Kind, Listing};

/// What stays read-only of the git directories in a command's writable roots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitPlan {
    /// What stays read-only, in the order decided (which is the order a profile lists it).
    pub items: Vec<GitItem>,
    /// What a protected entry named but is not protected, and why (for the report).
    pub notes: Vec<String>,
    /// The repositories outside every writable root made writable (their protected entries aside) for the
    /// linked worktree that is a writable root, as `(repository, worktree)`: one more writable root each.
    pub grants: Vec<(PathBuf, PathBuf)>,
    /// Why the repositories nested at the workspace's top level could not all be examined or protected (the
    /// plan is partial: the command is refused unless degraded protection is accepted).
    pub unexamined: Option<NestedUnexamined>,
}

/// One decision of a [`GitPlan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitItem {
    /// A writable git directory walked, entry by entry (or read-only as a whole).
    GitDir(GitDirPlan),
    /// A path read-only as itself: a nested repository's `.git` beyond the budget or that is no directory, a
    /// gitdir read-only as a whole, the `HEAD` or `index` of a granted repository's other checkouts.
    Path(Entry),
}

impl GitPlan {
    /// The git directories walked, in order.
    pub fn git_dirs(&self) -> impl Iterator<Item = &GitDirPlan> {
        self.items.iter().filter_map(|item| match item {
            GitItem::GitDir(plan) => Some(plan),
            GitItem::Path(_) => None,
        })
    }

    /// Every path the plan keeps read-only, present or absent, in order (what path rules deny).
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.items.iter().flat_map(|item| -> Box<dyn Iterator<Item = &Path> + '_> {
            match item {
                GitItem::Path(entry) => Box::new(std::iter::once(entry.path())),
                GitItem::GitDir(plan) => Box::new(plan.parts.iter().flat_map(|part| {
                    let whole = part.whole.then_some(part.dir.as_path());
                    whole
                        .into_iter()
                        .chain(part.entries.iter().map(Entry::path))
                        .chain(part.read_only.iter().map(PathBuf::as_path))
                })),
            }
        })
    }

    /// Every directory that takes no new entry, in order.
    pub fn closed(&self) -> impl Iterator<Item = &Path> {
        let parts = self.git_dirs().flat_map(|plan| &plan.parts);
        parts.flat_map(|part| part.closed.iter().map(|(dir, _)| dir.as_path()))
    }

    /// Every note: the walks' and the plan's.
    pub fn all_notes(&self) -> impl Iterator<Item = &String> {
        self.git_dirs().flat_map(|plan| &plan.notes).chain(&self.notes)
    }
}

/// Builds a [`GitPlan`] root by root (see the module documentation).
#[derive(Debug)]
pub struct GitPlanner<'h> {
    host: &'h dyn HostView,
    mechanism: Mechanism,
    /// Every writable root as the policy spells it, with its canonical form.
    roots: Vec<(PathBuf, PathBuf)>,
    /// The loose objects the whole command may still pin (path rules).
    loose: LooseBudget,
    /// The grants decided, made by [`GitPlanner::finish`]: (repository, worktree root, its admin directory).
    pending: Vec<(PathBuf, PathBuf, PathBuf)>,
    plan: GitPlan,
}

impl<'h> GitPlanner<'h> {
    /// A planner reading `host`, for a sandbox enforcing with `mechanism`, whose writable roots are `roots`
    /// (each as the policy spells it, with its canonical form).
    pub fn new(host: &'h dyn HostView, mechanism: Mechanism, roots: Vec<(PathBuf, PathBuf)>) -> Self {
        GitPlanner {
            host,
            mechanism,
            roots,
            loose: LooseBudget::per_command(),
            pending: Vec::new(),
            plan: GitPlan::default(),
        }
    }

    /// The canonical writable roots.
    fn canonical_roots(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for (_, canonical) in &self.roots {
            if !out.contains(canonical) {
                out.push(canonical.clone());
            }
        }
        out
    }

    /// Walk the git directory `gitdir` of `kind` in the writable root `owner`; the linked worktrees it holds.
    fn walk(&mut self, gitdir: &Path, kind: GitDirKind, named: bool, owner: &Path) -> Vec<PathBuf> {
        let (host, roots) = (self.host, &self.roots);
        let check = |common: &Path| protected_gitdir(host, common, owner, roots);
        let mut loose = match self.mechanism {
            Mechanism::Mounts => LooseBudget::per_git_dir(),
            Mechanism::PathRules => self.loose,
        };
        let plan = plan_git_dir(host, gitdir, kind, self.mechanism, named, &check, &mut loose);
        self.loose = loose;
        let worktrees = plan.worktrees.clone();
        self.plan.items.push(GitItem::GitDir(plan));
        worktrees
    }

    /// The writable root `owner`'s own `.git`, a real directory: writable but for what git runs or reads as
    /// configuration in it and in the git dirs of its linked worktrees and submodules, and the history present.
    pub fn root_git_dir(&mut self, owner: &Path) {
        self.walk(&owner.join(".git"), GitDirKind::Repository, false, owner);
    }

    /// The gitdir a `.git` file of the writable root `owner` (canonical) names: protected by its kind (a linked
    /// worktree's administrative directory, a repository's own git directory) when [`protected_gitdir`] allows
    /// it. One that lies outside every writable root and is a linked worktree's `<repository>/worktrees/<id>`
    /// makes that repository writable for the worktree when `roots_own` (the `.git` file is the root's own, not a
    /// nested repository's) and `uexec_domain::gitdir::worktree_grant` allows it. Otherwise a note says why.
    pub fn named_gitdir(&mut self, gitdir: &Path, owner: &Path, roots_own: bool) {
        match protected_gitdir(self.host, gitdir, owner, &self.roots) {
            Ok(path) => {
                let kind = kind_of(self.host, &path);
                self.walk(&path, kind, true, owner);
            }
            Err(UnprotectedGitdir::ReadOnlyAnyway) if roots_own && worktree_common_dir(gitdir).is_some() => {
                match granted_repository(self.host, gitdir, owner, &self.canonical_roots()) {
                    Ok(common) => {
                        let admin = normalize_lexically(gitdir);
                        self.pending.push((common, owner.to_path_buf(), admin));
                    }
                    Err(why) => self.note(format!(
                        "gitdir {}: outside every writable root, left read-only ({why}; git in {} can read, not \
                         commit)",
                        gitdir.display(),
                        owner.display()
                    )),
                }
            }
            Err(why) => self.note(format!("gitdir {}: {why}", gitdir.display())),
        }
    }

    /// The repositories nested at the top level of the workspace `root` (canonical), from `top`, its listing
    /// (at most `MAX_NESTED_SCAN_ENTRIES` entries): each real subdirectory's `.git` (one `lstat` each; none for
    /// `.git` itself and for what `skip` says is read-only as a whole already), protected as
    /// `uexec_domain::gitdir::nested_modes` decides from the `.git`s' birth times: as a root's own is (a `.git`
    /// directory entry by entry; a `.git` file or symlink itself, and the gitdir a `.git` file names when the
    /// rules allow it), or, beyond the budget of those, read-only as a whole (a `.git` file with its gitdir).
    /// Deeper ones are not looked for (a walk of the tree per command). A top level that cannot be examined
    /// whole (unlistable, beyond `MAX_NESTED_SCAN_ENTRIES` entries or `MAX_NESTED_READ_ONLY` repositories) is
    /// recorded in [`GitPlan::unexamined`]: the plan is partial, and the command refused (fails closed).
    pub fn nested(&mut self, root: &Path, top: &Listing, skip: &dyn Fn(&Path) -> bool) {
        if !top.complete {
            self.plan.unexamined = Some(if top.entries.len() >= MAX_NESTED_SCAN_ENTRIES {
                NestedUnexamined::TooManyEntries
            } else if top.entries.is_empty()
                && let Some(why) = &top.error
            {
                NestedUnexamined::Unlistable(why.clone())
            } else {
                NestedUnexamined::Unlistable(format!("an entry of {} could not be read", root.display()))
            });
            if top.entries.is_empty() {
                return;
            }
        }
        let mut found = Vec::new();
        for (name, kind) in &top.entries {
            // A symlink is not followed (it names a directory a command chose, maybe outside the workspace).
            if *kind != Kind::Dir || name == ".git" {
                continue;
            }
            let dir = root.join(name);
            if skip(&dir) {
                continue;
            }
            let dot_git = dir.join(".git");
            if let Ok(meta) = self.host.lstat(&dot_git) {
                found.push((dir, dot_git, meta));
            }
        }
        // In name order, whatever order the listing had: the plan is the same for the same tree.
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let births: Vec<_> = found.iter().map(|(_, _, meta)| meta.birth).collect();
        let modes = match nested_modes(&births) {
            Ok(modes) => modes,
            Err(why) => {
                self.plan.unexamined = Some(why);
                return;
            }
        };
        let whole = modes.iter().filter(|mode| **mode == NestedMode::WholeReadOnly).count();
        if whole > 0 {
            self.note(format!(
                "{}: {} repositories nested at the top level, more than {MAX_NESTED_REPOSITORIES}: the oldest are \
                 protected entry by entry, the .git of {whole} others read-only as a whole (git cannot commit in \
                 them inside the sandbox)",
                root.display(),
                modes.len()
            ));
        }
        for ((dir, dot_git, meta), mode) in found.into_iter().zip(modes) {
            match meta.kind {
                Kind::Dir if mode == NestedMode::EntryByEntry => {
                    self.walk(&dot_git, GitDirKind::Repository, false, root);
                    continue;
                }
                Kind::File => {
                    if let (GitEntry::File { gitdir }, _) = inspect_git(self.host, &dir)
                        && !normalize_lexically(&gitdir).starts_with(root.join(".git"))
                    {
                        // A submodule's work tree names `<root>/.git/modules/<name>`, a linked worktree
                        // `<root>/.git/worktrees/<id>`: protected with the root's git directory already. A worktree
                        // nested here whose repository lies outside every root is not granted (only a root's own
                        // `.git` file is: the trust rule counts those repositories).
                        match mode {
                            NestedMode::EntryByEntry => self.named_gitdir(&gitdir, root, false),
                            NestedMode::WholeReadOnly => {
                                match protected_gitdir(self.host, &gitdir, root, &self.roots) {
                                    Ok(path) => self.read_only(Entry::Present(path)),
                                    Err(why) => self.note(format!("gitdir {}: {why}", gitdir.display())),
                                }
                            }
                        }
                    }
                }
                Kind::Symlink => {
                    if let Some(note) = symlink_note(self.host, &dot_git) {
                        self.note(note);
                    }
                }
                Kind::Dir | Kind::Other => {}
            }
            self.read_only(Entry::Present(dot_git));
        }
    }

    /// The plan: with the repositories granted to linked worktrees walked as a root's own `.git` (one more
    /// writable root each: its configuration, hooks, redirections, every worktree's admin files, pack files and
    /// loose objects read-only), and the `HEAD` and `index` of the main worktree and of every other linked
    /// worktree read-only (the person's other checkouts and staged changes).
    pub fn finish(mut self) -> GitPlan {
        let pending = std::mem::take(&mut self.pending);
        let admins: Vec<&PathBuf> = pending.iter().map(|(_, _, admin)| admin).collect();
        for (common, owner, _) in &pending {
            let grant = (common.clone(), owner.clone());
            if !self.plan.grants.contains(&grant) {
                self.plan.grants.push(grant);
            }
            if self.roots.iter().any(|(_, canonical)| canonical == common) {
                continue;
            }
            self.roots.push((common.clone(), common.clone()));
            let others = self.walk(common, GitDirKind::Repository, false, common);
            let checkouts = std::iter::once(common.clone())
                .chain(others.into_iter().filter(|dir| !admins.contains(&dir)));
            for dir in checkouts {
                for name in CHECKOUT_FILES {
                    let path = dir.join(name);
                    let entry = if self.host.exists(&path) {
                        Entry::Present(path)
                    } else {
                        Entry::Absent(path, None)
                    };
                    self.read_only(entry);
                }
            }
        }
        self.plan
    }

    /// What was decided so far, taken out of the planner (the grants and the budget of loose objects stay): for a
    /// renderer that lists what it protects in the order decided.
    pub fn drain(&mut self) -> GitPlan {
        std::mem::take(&mut self.plan)
    }

    fn note(&mut self, note: String) {
        if !self.plan.notes.contains(&note) {
            self.plan.notes.push(note);
        }
    }

    fn read_only(&mut self, entry: Entry) {
        let known = |item: &GitItem| matches!(item, GitItem::Path(known) if known.path() == entry.path());
        if !self.plan.items.iter().any(known) {
            self.plan.items.push(GitItem::Path(entry));
        }
    }
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
