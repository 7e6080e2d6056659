//! The hidden secret locations of one command, found in the parent at prepare time by the plan
//! (`uexec_plan::plan_hidden`: the patterns of [`uexec_domain::hidden`] searched over the host view), each one
//! mounted over (a directory gets an empty read-only tmpfs, anything else a `nodev` copy of `/dev/null`, so
//! opening it fails with `EACCES`); and the other names of hidden files, found here by inode.

use std::fs;
use std::path::{Path, PathBuf};

use uexec_domain::hidden::HiddenPaths;
use uexec_plan::{HiddenPlan, RealHost};
use uexec_ports::SandboxError;

/// What one command has hidden: the plan's (`uexec_plan::HiddenPlan`), with the other names of hidden files
/// found here ([`Hide::hide_other_names`]).
pub(crate) type HiddenLayout = HiddenPlan;

/// What the Linux sandbox does with the hidden locations beyond the plan.
pub(crate) trait Hide: Sized {
    /// Resolve `hidden` for a command whose workspace is `workspace` and whose cwd is `cwd`, listing at most
    /// `budget` entries (`uexec_plan::plan_hidden`).
    fn resolve(
        hidden: &HiddenPaths,
        workspace: &Path,
        cwd: &Path,
        budget: usize,
    ) -> Result<Self, SandboxError>;

    /// Hide the other names of every hidden file that has some (see the implementation).
    fn hide_other_names(&mut self, roots: &[&Path], budget: usize);
}

impl Hide for HiddenLayout {
    fn resolve(
        hidden: &HiddenPaths,
        workspace: &Path,
        cwd: &Path,
        budget: usize,
    ) -> Result<Self, SandboxError> {
        uexec_plan::plan_hidden(&RealHost, hidden, workspace, cwd, budget)
            .map_err(SandboxError::InHiddenLocation)
    }

    /// Hide the other names of every hidden file that has some (hard links), where a sandboxed command could
    /// have made them: beneath `roots` (the writable roots), searched by inode (`d_ino`, then `lstat` for the
    /// device) within `budget` entries. A mount over a file cannot be linked (`EXDEV`), but a link made while
    /// it was not hidden (before a pattern named it, or by a long-running command when the file appeared)
    /// reads the same content under a name no pattern matches. Names not found are reported.
    fn hide_other_names(&mut self, roots: &[&Path], budget: usize) {
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
}
