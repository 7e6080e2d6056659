//! The hidden secret locations of one command, for every platform: the patterns of `uexec_domain::hidden`
//! searched over the host view (the one lister of `expand_within`: [`expand_hidden`]) and resolved to the
//! canonical paths a sandbox hides ([`plan_hidden`]).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use uexec_domain::hidden::{
    DirLister, EntryKind, Expansion, HiddenPaths, InHiddenLocation, check_directories, expand_within,
};

use crate::host::{HostView, Kind};

/// What one command has hidden.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HiddenPlan {
    /// Canonical directories to hide, shallowest first, none beneath another.
    pub dirs: Vec<PathBuf>,
    /// Canonical files (or devices, FIFOs, sockets) to hide, none beneath a hidden directory.
    pub files: Vec<PathBuf>,
    /// Every location hidden, canonical, in the order found (the matches, then the directories hidden as a
    /// whole): what a renderer that lists paths in order denies.
    pub in_order: Vec<PathBuf>,
    /// What was named but is not hidden, and why (for the report).
    pub skipped: Vec<String>,
    /// The directories hidden as a whole because the search did not get through them (canonical; also in
    /// `dirs`), for the report.
    pub unexamined: Vec<PathBuf>,
    /// Part of what the patterns had to search was neither searched nor hidden (a directory that holds the
    /// workspace or the cwd, or more than the expansion can name): the protection is partial, and the command
    /// refused unless degraded protection is accepted.
    pub truncated: bool,
    /// Secrets left reachable on purpose (`HiddenPaths::reachable`), for the report.
    pub reachable: Vec<String>,
}

impl HiddenPlan {
    /// Everything hidden, directories first.
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.dirs.iter().chain(&self.files)
    }

    /// True when nothing is hidden.
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.files.is_empty()
    }
}

/// Resolve `hidden` for a command whose workspace is `workspace` and whose cwd is `cwd`, listing at most `budget`
/// entries ([`expand_hidden`]); each match canonicalised (a link under the home is hidden through its target).
/// A location that is or holds the cwd or the workspace is not dropped to let the command see its directory: the
/// command is refused (`uexec_domain::hidden::check_directories`). A directory the search did not get through is
/// hidden as a whole; one that cannot be (it holds the workspace or the cwd) makes the plan truncated.
pub fn plan_hidden(
    host: &dyn HostView,
    hidden: &HiddenPaths,
    workspace: &Path,
    cwd: &Path,
    budget: usize,
) -> Result<HiddenPlan, InHiddenLocation> {
    let mut plan = HiddenPlan::default();
    if hidden.is_empty() {
        return Ok(plan);
    }
    plan.reachable.clone_from(&hidden.reachable);
    let resolve = |path: &Path| -> io::Result<(PathBuf, bool)> {
        let canonical = host.canonicalize(path)?;
        let is_dir = host.lstat(&canonical)?.kind == Kind::Dir;
        Ok((canonical, is_dir))
    };
    let expansion = expand_hidden(host, hidden, workspace, budget);
    plan.truncated = expansion.truncated;
    let keep: Vec<PathBuf> = [workspace, cwd].iter().filter_map(|p| resolve(p).ok()).map(|c| c.0).collect();
    let mut found: Vec<(PathBuf, String)> = Vec::new();
    for (path, _, pattern) in expansion.paths {
        // Home matches may be links (`~/.ssh -> dotfiles/ssh`): the target is hidden. Workspace and exact ones
        // never are (the expansion drops them).
        let Ok((canonical, is_dir)) = resolve(&path) else {
            plan.skipped.push(format!("{} ({pattern}): does not resolve", path.display()));
            continue;
        };
        let list = if is_dir { &mut plan.dirs } else { &mut plan.files };
        if !list.contains(&canonical) {
            list.push(canonical.clone());
            plan.in_order.push(canonical.clone());
            found.push((canonical, pattern));
        }
    }
    for dir in expansion.unexamined {
        // Never a link: the walk descends into directories only, and lists nothing through a link. One gone
        // since it was met (or replaced by a file) has nothing left to hide.
        let Ok((canonical, true)) = resolve(&dir) else { continue };
        if keep.iter().any(|k| k.starts_with(&canonical)) {
            plan.truncated = true;
            plan.skipped.push(format!(
                "{}: not searched (the search budget ran out) and holds the workspace or working directory",
                dir.display()
            ));
        } else if !plan.dirs.contains(&canonical) {
            plan.unexamined.push(canonical.clone());
            plan.in_order.push(canonical.clone());
            plan.dirs.push(canonical);
        }
    }
    let canonical_of = |p: &Path| resolve(p).map(|c| c.0).unwrap_or_else(|_| p.to_path_buf());
    check_directories(&found, &canonical_of(workspace), &canonical_of(cwd))?;
    plan.dirs.sort_by_key(|p| p.components().count());
    // A location beneath a hidden directory is hidden already (and a mount point over it would be gone).
    let dirs = plan.dirs.clone();
    let under_hidden = |p: &PathBuf| dirs.iter().any(|d| p != d && p.starts_with(d));
    plan.dirs.retain(|p| !under_hidden(p));
    plan.files.retain(|p| !under_hidden(p));
    plan.unexamined.retain(|p| !under_hidden(p));
    Ok(plan)
}

/// Expand `hidden` for a command whose workspace is `workspace`, listing at most `budget` entries. The home and
/// the workspace are canonicalised first (where they resolve): the search opens no directory through a symbolic
/// link, and either base may be spelled through one (`/tmp/ws` on macOS is `/private/tmp/ws`).
pub fn expand_hidden(
    host: &dyn HostView,
    hidden: &HiddenPaths,
    workspace: &Path,
    budget: usize,
) -> Expansion {
    let canonical = |path: &Path| host.canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let home = hidden.home.as_deref().map(canonical);
    let workspace = canonical(workspace);
    expand_within(&hidden.patterns, home.as_deref(), &workspace, &mut HostLister::new(host), budget)
}

/// The host as `uexec_domain::hidden` lists it: names and kinds (`lstat`: links not followed), a directory read
/// as it goes (a huge one costs no memory and can be stopped).
#[derive(Debug)]
struct HostLister<'h> {
    host: &'h dyn HostView,
    /// What `kind` found, by path, for this expansion (patterns share directories: `.config`, `.cargo`).
    kinds: HashMap<PathBuf, Option<EntryKind>>,
}

impl<'h> HostLister<'h> {
    fn new(host: &'h dyn HostView) -> Self {
        HostLister { host, kinds: HashMap::new() }
    }
}

/// The hidden search's kind of an entry.
fn entry_kind(kind: Kind) -> EntryKind {
    match kind {
        Kind::Dir => EntryKind::Dir,
        Kind::Symlink => EntryKind::Symlink,
        Kind::File | Kind::Other => EntryKind::Other,
    }
}

impl DirLister for HostLister<'_> {
    fn kind(&mut self, path: &Path) -> Option<EntryKind> {
        let host = self.host;
        *self.kinds.entry(path.to_path_buf()).or_insert_with(|| host.kind(path).map(entry_kind))
    }

    fn entries(&mut self, dir: &Path) -> Vec<(String, EntryKind)> {
        let mut entries = Vec::new();
        let _ = self.each_entry(dir, &mut |name, kind| {
            entries.push((name.to_owned(), kind));
            true
        });
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    fn each_entry(&mut self, dir: &Path, visit: &mut dyn FnMut(&str, EntryKind) -> bool) -> bool {
        // A name that is not UTF-8 is not matched or searched (patterns are UTF-8): a limit named in
        // docs/sandbox.md. A command cannot rename a hidden entry or its directories to one (they are mount
        // points, or denied paths).
        let listed = self.host.each_entry(dir, &mut |name, kind| match name.to_str() {
            Some(name) => visit(name, entry_kind(kind)),
            None => true,
        });
        match listed {
            Ok(complete) => complete,
            // Gone (or replaced by a file) since it was met: nothing in it to hide.
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => true,
            // Unreadable to the server (`chmod 000` by a command that owns it), a link, an error midway: unknown,
            // so hidden as a whole.
            Err(_) => false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use uexec_domain::hidden::HiddenPattern;

    use super::*;
    use crate::FakeHost;

    #[test]
    fn the_search_runs_over_the_view_from_canonical_bases() {
        let host = FakeHost::new()
            .link("/tmp", "/private/tmp")
            .dir("/private/tmp/ws/src")
            .file("/private/tmp/ws/src/.env")
            .file("/private/tmp/ws/.env.local")
            .link("/private/tmp/ws/.env-link", "/etc/passwd")
            .dir("/home/.ssh")
            .link("/home/.aws", "/elsewhere/aws")
            .dir("/elsewhere/aws");
        let mut patterns = HiddenPattern::defaults();
        patterns.push(HiddenPattern::parse(".env*").unwrap());
        let hidden = HiddenPaths { home: Some("/home".into()), patterns, reachable: Vec::new() };
        let found = expand_hidden(&host, &hidden, Path::new("/tmp/ws"), uexec_domain::hidden::MAX_VISITED);
        let mut paths: Vec<&Path> = found.paths.iter().map(|(path, _, _)| path.as_path()).collect();
        paths.sort();
        // Home links are hidden (through their targets, by the adapter); workspace links are not.
        assert_eq!(
            paths,
            ["/home/.aws", "/home/.ssh", "/private/tmp/ws/.env.local", "/private/tmp/ws/src/.env"]
                .map(Path::new)
        );
        assert!(found.unexamined.is_empty() && !found.truncated, "{found:?}");
    }

    #[test]
    fn resolves_home_links_and_refuses_a_workspace_or_cwd_inside_a_hidden_location() {
        let home = Path::new("/base/home");
        let ws = home.join("project");
        let in_kube = home.join(".kube/project");
        let host = FakeHost::new()
            .dir(home.join("dotfiles/ssh"))
            .dir(home.join(".aws/sso"))
            .link(home.join(".ssh"), "dotfiles/ssh")
            .content(home.join(".netrc"), "machine x password y\n")
            .content(ws.join(".env"), "K=V\n")
            .content(ws.join("env"), "K=V\n")
            .dir(&in_kube);
        let mut patterns = HiddenPattern::defaults();
        patterns.push(HiddenPattern::parse(".env*").unwrap());
        patterns.push(HiddenPattern::parse("~/.aws/sso").unwrap());
        let hidden = HiddenPaths { home: Some(home.to_path_buf()), patterns, reachable: Vec::new() };
        let budget = uexec_domain::hidden::MAX_VISITED;
        let plan = plan_hidden(&host, &hidden, &ws, &ws, budget).unwrap();
        assert_eq!(plan.dirs, vec![home.join(".aws"), home.join(".kube"), home.join("dotfiles/ssh")]);
        assert_eq!(plan.files, vec![home.join(".netrc"), ws.join(".env")]);
        assert!(!plan.truncated);
        // A workspace or cwd inside a hidden location (through the link too) refuses the command.
        for (workspace, cwd) in
            [(&in_kube, &in_kube), (&ws, &home.join(".ssh")), (&ws, &home.join(".aws/sso"))]
        {
            assert!(plan_hidden(&host, &hidden, workspace, cwd, budget).is_err(), "{workspace:?} {cwd:?}");
        }
    }
}
