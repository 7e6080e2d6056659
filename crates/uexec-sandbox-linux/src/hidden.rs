//! The hidden secret locations of one command, found in the parent at prepare time: the patterns of
//! [`uexec_domain::hidden`] expanded over the real file system, each match resolved to what gets mounted over
//! (a directory gets an empty read-only tmpfs, anything else a `nodev` copy of `/dev/null`, so opening it fails
//! with `EACCES`).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use uexec_domain::hidden::{DirLister, EntryKind, HiddenPaths, check_directories, expand};
use uexec_ports::SandboxError;

use crate::layout::canonicalize;

/// What one command has hidden.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HiddenLayout {
    /// Canonical directories to cover with an empty tmpfs, shallowest first.
    pub(crate) dirs: Vec<PathBuf>,
    /// Canonical files (or devices, FIFOs, sockets) to cover with an unopenable `/dev/null`.
    pub(crate) files: Vec<PathBuf>,
    /// What was named but is not hidden, and why (for the report).
    pub(crate) skipped: Vec<String>,
    /// The expansion stopped at its cap.
    pub(crate) truncated: bool,
    /// Secrets left reachable on purpose (`HiddenPaths::reachable`), for the report.
    pub(crate) reachable: Vec<String>,
}

impl HiddenLayout {
    /// Expand `hidden` for a command whose workspace is `workspace` and whose cwd is `cwd`. A location that is
    /// or holds the cwd or the workspace is not dropped to let the command see its directory: the command is
    /// refused (`uexec_domain::hidden::check_directories`).
    pub(crate) fn resolve(
        hidden: &HiddenPaths,
        workspace: &Path,
        cwd: &Path,
    ) -> Result<HiddenLayout, SandboxError> {
        let mut layout = HiddenLayout::default();
        if hidden.is_empty() {
            return Ok(layout);
        }
        layout.reachable.clone_from(&hidden.reachable);
        let expansion = expand(&hidden.patterns, hidden.home.as_deref(), workspace, &mut FsLister::default());
        layout.truncated = expansion.truncated;
        let mut found: Vec<(PathBuf, String)> = Vec::new();
        for (path, _, pattern) in expansion.paths {
            // Home matches may be links (`~/.ssh -> dotfiles/ssh`): the target is covered. Workspace and exact
            // ones never are (the expansion drops them).
            let Ok((canonical, meta, _)) = canonicalize(&path) else {
                layout.skipped.push(format!("{} ({pattern}): does not resolve", path.display()));
                continue;
            };
            let list = if meta.is_dir() { &mut layout.dirs } else { &mut layout.files };
            if !list.contains(&canonical) {
                list.push(canonical.clone());
                found.push((canonical, pattern));
            }
        }
        let canonical_of = |p: &Path| canonicalize(p).map(|c| c.0).unwrap_or_else(|_| p.to_path_buf());
        check_directories(&found, &canonical_of(workspace), &canonical_of(cwd))
            .map_err(SandboxError::InHiddenLocation)?;
        layout.dirs.sort_by_key(|p| p.components().count());
        // A location beneath a hidden directory is hidden already (and its mount point would be gone).
        let dirs = layout.dirs.clone();
        let under_hidden = |p: &PathBuf| dirs.iter().any(|d| p != d && p.starts_with(d));
        layout.dirs.retain(|p| !under_hidden(p));
        layout.files.retain(|p| !under_hidden(p));
        Ok(layout)
    }

    /// Everything hidden, directories first.
    pub(crate) fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.dirs.iter().chain(&self.files)
    }

    /// True when nothing is hidden.
    pub(crate) fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.files.is_empty()
    }
}

/// The real file system, read without following links.
#[derive(Debug, Default)]
struct FsLister {
    /// What `kind` found, by path, for this expansion (patterns share directories: `.config`, `.cargo`).
    kinds: HashMap<PathBuf, Option<EntryKind>>,
}

/// The kind of an entry from its `lstat` file type.
fn kind_of(file_type: fs::FileType) -> EntryKind {
    if file_type.is_symlink() {
        EntryKind::Symlink
    } else if file_type.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::Other
    }
}

impl DirLister for FsLister {
    fn kind(&mut self, path: &Path) -> Option<EntryKind> {
        *self
            .kinds
            .entry(path.to_path_buf())
            .or_insert_with(|| fs::symlink_metadata(path).ok().map(|m| kind_of(m.file_type())))
    }

    fn entries(&mut self, dir: &Path) -> Vec<(String, EntryKind)> {
        let Ok(read) = fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut entries: Vec<(String, EntryKind)> = read
            .filter_map(Result::ok)
            .filter_map(|e| {
                let kind = kind_of(e.file_type().ok()?);
                Some((e.file_name().into_string().ok()?, kind))
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use uexec_domain::hidden::HiddenPattern;

    use super::*;

    #[test]
    fn resolves_home_links_and_refuses_a_workspace_or_cwd_inside_a_hidden_location() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let home = base.join("home");
        fs::create_dir_all(home.join("dotfiles/ssh")).unwrap();
        fs::create_dir_all(home.join(".aws")).unwrap();
        fs::create_dir_all(home.join(".aws/sso")).unwrap();
        std::os::unix::fs::symlink("dotfiles/ssh", home.join(".ssh")).unwrap();
        fs::write(home.join(".netrc"), "machine x password y\n").unwrap();
        let ws = home.join("project");
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join(".env"), "K=V\n").unwrap();
        fs::write(ws.join("env"), "K=V\n").unwrap();
        let in_kube = home.join(".kube/project");
        fs::create_dir_all(&in_kube).unwrap();
        let mut patterns = HiddenPattern::defaults();
        patterns.push(HiddenPattern::parse(".env*").unwrap());
        patterns.push(HiddenPattern::parse("~/.aws/sso").unwrap());
        let hidden = HiddenPaths { home: Some(home.clone()), patterns, reachable: Vec::new() };
        let layout = HiddenLayout::resolve(&hidden, &ws, &ws).unwrap();
        assert_eq!(layout.dirs, vec![home.join(".aws"), home.join(".kube"), home.join("dotfiles/ssh")]);
        assert_eq!(layout.files, vec![home.join(".netrc"), ws.join(".env")]);
        assert!(!layout.truncated);
        // A workspace or cwd inside a hidden location (through the link too) refuses the command.
        for (workspace, cwd) in
            [(&in_kube, &in_kube), (&ws, &home.join(".ssh")), (&ws, &home.join(".aws/sso"))]
        {
            let error = HiddenLayout::resolve(&hidden, workspace, cwd).unwrap_err();
            assert!(matches!(error, SandboxError::InHiddenLocation(_)), "{error}");
        }
    }
}
