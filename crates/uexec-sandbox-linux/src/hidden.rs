//! The hidden secret locations of one command, found in the parent at prepare time: the patterns of
//! [`uexec_domain::hidden`] expanded over the real file system, each match resolved to what gets mounted over
//! (a directory gets an empty read-only tmpfs, anything else a `nodev` copy of `/dev/null`, so opening it fails
//! with `EACCES`).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use uexec_domain::hidden::{DirLister, EntryKind, HiddenPaths, check_directories, expand_within};
use uexec_ports::SandboxError;

use crate::canonical::canonicalize;

/// What one command has hidden.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HiddenLayout {
    /// Canonical directories to cover with an empty tmpfs, shallowest first.
    pub(crate) dirs: Vec<PathBuf>,
    /// Canonical files (or devices, FIFOs, sockets) to cover with an unopenable `/dev/null`.
    pub(crate) files: Vec<PathBuf>,
    /// What was named but is not hidden, and why (for the report).
    pub(crate) skipped: Vec<String>,
    /// The directories hidden as a whole because the search did not get through them (canonical; also in
    /// `dirs`), for the report.
    pub(crate) unexamined: Vec<PathBuf>,
    /// Part of what the patterns had to search was neither searched nor hidden (a directory that holds the
    /// workspace or the cwd, or more than the expansion can name): the protection is partial.
    pub(crate) truncated: bool,
    /// Secrets left reachable on purpose (`HiddenPaths::reachable`), for the report.
    pub(crate) reachable: Vec<String>,
}

impl HiddenLayout {
    /// Expand `hidden` for a command whose workspace is `workspace` and whose cwd is `cwd`, listing at most
    /// `budget` entries. A location that is or holds the cwd or the workspace is not dropped to let the command
    /// see its directory: the command is refused (`uexec_domain::hidden::check_directories`). A directory the
    /// search did not get through is hidden as a whole; one that cannot be (it holds the workspace or the cwd)
    /// makes the layout truncated.
    pub(crate) fn resolve(
        hidden: &HiddenPaths,
        workspace: &Path,
        cwd: &Path,
        budget: usize,
    ) -> Result<HiddenLayout, SandboxError> {
        let mut layout = HiddenLayout::default();
        if hidden.is_empty() {
            return Ok(layout);
        }
        layout.reachable.clone_from(&hidden.reachable);
        let expansion = expand_within(
            &hidden.patterns,
            hidden.home.as_deref(),
            workspace,
            &mut FsLister::default(),
            budget,
        );
        layout.truncated = expansion.truncated;
        let keep: Vec<PathBuf> =
            [workspace, cwd].iter().filter_map(|p| canonicalize(p).ok()).map(|c| c.0).collect();
        for dir in expansion.unexamined {
            // Never a link: the walk descends into directories only, and lists nothing through a link.
            match canonicalize(&dir) {
                Ok((canonical, meta, _)) if meta.is_dir() => {
                    if keep.iter().any(|k| k.starts_with(&canonical)) {
                        layout.truncated = true;
                        layout.skipped.push(format!(
                            "{}: not searched (the search budget ran out) and holds the workspace or working \
                             directory",
                            dir.display()
                        ));
                    } else if !layout.dirs.contains(&canonical) {
                        layout.unexamined.push(canonical.clone());
                        layout.dirs.push(canonical);
                    }
                }
                // Gone since it was met (or replaced by a file): nothing of it left to hide.
                _ => {}
            }
        }
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
        layout.unexamined.retain(|p| !under_hidden(p));
        Ok(layout)
    }

    /// Hide the other names of every hidden file that has some (hard links), where a sandboxed command could
    /// have made them: beneath `roots` (the writable roots), searched by inode (`d_ino`, then `lstat` for the
    /// device) within `budget` entries. A mount over a file cannot be linked (`EXDEV`), but a link made while
    /// it was not hidden (before a pattern named it, or by a long-running command when the file appeared)
    /// reads the same content under a name no pattern matches. Names not found are reported.
    pub(crate) fn hide_other_names(&mut self, roots: &[&Path], budget: usize) {
        use std::os::unix::fs::{DirEntryExt, MetadataExt};
        let mut wanted: Vec<(u64, u64, u64, PathBuf)> = Vec::new();
        for file in &self.files {
            if let Ok(meta) = fs::symlink_metadata(file)
                && meta.is_file()
                && meta.nlink() > 1
            {
                wanted.push((meta.dev(), meta.ino(), meta.nlink() - 1, file.clone()));
            }
        }
        if wanted.is_empty() {
            return;
        }
        let mut found: Vec<PathBuf> = Vec::new();
        let mut visited = 0usize;
        let mut cut = false;
        for root in roots {
            let Ok(root_meta) = fs::symlink_metadata(root) else {
                continue;
            };
            if !wanted.iter().any(|(dev, ..)| *dev == root_meta.dev()) {
                continue;
            }
            let mut stack = vec![root.to_path_buf()];
            while let Some(dir) = stack.pop() {
                let Ok(read) = fs::read_dir(&dir) else {
                    continue;
                };
                for entry in read.filter_map(Result::ok) {
                    visited += 1;
                    if visited > budget {
                        cut = true;
                        break;
                    }
                    let Ok(file_type) = entry.file_type() else {
                        continue;
                    };
                    if file_type.is_dir() {
                        stack.push(entry.path());
                    } else if file_type.is_file() && wanted.iter().any(|(_, ino, ..)| *ino == entry.ino()) {
                        let path = entry.path();
                        if let Ok(meta) = fs::symlink_metadata(&path)
                            && wanted.iter().any(|(dev, ino, ..)| (*dev, *ino) == (meta.dev(), meta.ino()))
                            && !self.files.contains(&path)
                            && !found.contains(&path)
                        {
                            found.push(path);
                        }
                    }
                }
                if cut {
                    break;
                }
            }
        }
        for (dev, ino, others, file) in &wanted {
            let seen = found
                .iter()
                .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == (*dev, *ino)))
                .count() as u64;
            if seen < *others {
                self.skipped.push(format!(
                    "{}: {} other name(s) (hard links) not found in the writable roots{}: they stay readable",
                    file.display(),
                    others - seen,
                    if cut { " (the search for them stopped)" } else { "" }
                ));
            }
        }
        let dirs = self.dirs.clone();
        found.retain(|p| !dirs.iter().any(|d| p.starts_with(d)));
        self.files.extend(found);
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

    fn each_entry(&mut self, dir: &Path, visit: &mut dyn FnMut(&str, EntryKind) -> bool) -> bool {
        let read = match fs::read_dir(dir) {
            Ok(read) => read,
            // Gone (or replaced by a file) since it was met: nothing in it to hide.
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                return true;
            }
            // Unreadable to the server (`chmod 000` by a command that owns it): unknown, so hidden as a whole.
            Err(_) => return false,
        };
        for entry in read {
            // An error midway (an I/O error) leaves the rest unknown.
            let Ok(entry) = entry else {
                return false;
            };
            // `d_type` from the directory itself: no `lstat` per entry (a file system that does not fill it in
            // costs one).
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            // A name that is not UTF-8 is not matched or searched (patterns are UTF-8): a limit named in
            // docs/sandbox.md. A command cannot rename a hidden entry or its directories to one (they are mount
            // points).
            let name = entry.file_name();
            if let Some(name) = name.to_str()
                && !visit(name, kind_of(file_type))
            {
                return false;
            }
        }
        true
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
        let layout = HiddenLayout::resolve(&hidden, &ws, &ws, uexec_domain::hidden::MAX_VISITED).unwrap();
        assert_eq!(layout.dirs, vec![home.join(".aws"), home.join(".kube"), home.join("dotfiles/ssh")]);
        assert_eq!(layout.files, vec![home.join(".netrc"), ws.join(".env")]);
        assert!(!layout.truncated);
        // A workspace or cwd inside a hidden location (through the link too) refuses the command.
        for (workspace, cwd) in
            [(&in_kube, &in_kube), (&ws, &home.join(".ssh")), (&ws, &home.join(".aws/sso"))]
        {
            let error = HiddenLayout::resolve(&hidden, workspace, cwd, uexec_domain::hidden::MAX_VISITED)
                .unwrap_err();
            assert!(matches!(error, SandboxError::InHiddenLocation(_)), "{error}");
        }
    }
}
