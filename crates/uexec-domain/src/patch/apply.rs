//! Applying a patch to an in-memory view of the files: the new contents of every file it touches, the file
//! operations that make them so, and the reference's summary and error texts. No I/O: the caller supplies
//! the current contents and performs the operations.

use std::collections::BTreeMap;

use super::seek::seek_sequence;
use super::{Hunk, Patch, UpdateChunk};

/// One write or removal, in the order the patch makes them. Paths are as written in the patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    /// Create or replace `path` (creating its parent directories) with `contents`.
    Write {
        /// The file.
        path: String,
        /// Its new text.
        contents: String,
    },
    /// Remove the file `path`; `moved` when the removal is the second half of a move.
    Remove {
        /// The file.
        path: String,
        /// The removal completes a move (its error text differs).
        moved: bool,
    },
}

impl FileOp {
    /// The reference's text when this operation fails.
    pub fn failure_text(&self) -> String {
        match self {
            FileOp::Write { path, .. } => format!("Failed to write file {path}"),
            FileOp::Remove { path, moved: false } => format!("Failed to delete file {path}"),
            FileOp::Remove { path, moved: true } => format!("Failed to remove original {path}"),
        }
    }
}

/// What applying a patch does, and what it prints when every operation succeeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchOutcome {
    /// The operations, in order.
    pub ops: Vec<FileOp>,
    /// Paths added, modified (a moved file under its new path) and deleted, in patch order.
    pub added: Vec<String>,
    /// See `added`.
    pub modified: Vec<String>,
    /// See `added`.
    pub deleted: Vec<String>,
}

impl PatchOutcome {
    /// The reference's success text: `Success. Updated the following files:` then `A`, `M` and `D` lines.
    pub fn summary(&self) -> String {
        let mut text = "Success. Updated the following files:\n".to_owned();
        for (letter, paths) in [("A", &self.added), ("M", &self.modified), ("D", &self.deleted)] {
            for path in paths {
                text.push_str(&format!("{letter} {path}\n"));
            }
        }
        text
    }
}

/// Why a patch cannot be applied. The `Display` text is what the reference's `apply_patch` prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch has no hunks.
    #[error("No files were modified.")]
    Empty,
    /// A file to update could not be read (`reason` is the reader's message).
    #[error("Failed to read file to update {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A file to delete does not exist.
    #[error("Failed to delete file {path}")]
    Delete {
        /// The file.
        path: String,
    },
    /// A chunk's `@@` context line is not in the file.
    #[error("Failed to find context '{context}' in {path}")]
    Context {
        /// The file.
        path: String,
        /// The context line.
        context: String,
    },
    /// A chunk's old lines are not in the file.
    #[error("Failed to find expected lines in {path}:\n{}", lines.join("\n"))]
    Lines {
        /// The file.
        path: String,
        /// The lines looked for.
        lines: Vec<String>,
    },
}

/// Apply `patch` hunk by hunk to the files `read` returns (`Err` carries the reader's message, e.g. "No such
/// file or directory (os error 2)"); a later hunk sees what earlier hunks did. Nothing is applied when any hunk
/// fails: the error is the first failure.
pub fn apply_patch(
    patch: &Patch,
    mut read: impl FnMut(&str) -> Result<String, String>,
) -> Result<PatchOutcome, PatchError> {
    if patch.hunks.is_empty() {
        return Err(PatchError::Empty);
    }
    // What earlier hunks made of a path: `Some(text)` written, `None` removed.
    let mut overlay: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut current = |path: &str, overlay: &BTreeMap<String, Option<String>>| match overlay.get(path) {
        Some(Some(text)) => Ok(text.clone()),
        Some(None) => Err("No such file or directory (os error 2)".to_owned()),
        None => read(path),
    };
    let mut outcome =
        PatchOutcome { ops: Vec::new(), added: Vec::new(), modified: Vec::new(), deleted: Vec::new() };
    for hunk in &patch.hunks {
        match hunk {
            Hunk::Add { path, contents } => {
                overlay.insert(path.clone(), Some(contents.clone()));
                outcome.ops.push(FileOp::Write { path: path.clone(), contents: contents.clone() });
                outcome.added.push(path.clone());
            }
            Hunk::Delete { path } => {
                current(path, &overlay).map_err(|_| PatchError::Delete { path: path.clone() })?;
                overlay.insert(path.clone(), None);
                outcome.ops.push(FileOp::Remove { path: path.clone(), moved: false });
                outcome.deleted.push(path.clone());
            }
            Hunk::Update { path, move_to, chunks } => {
                let original = current(path, &overlay)
                    .map_err(|reason| PatchError::Read { path: path.clone(), reason })?;
                let contents = updated_contents(&original, path, chunks)?;
                let target = move_to.as_ref().unwrap_or(path);
                overlay.insert(target.clone(), Some(contents.clone()));
                outcome.ops.push(FileOp::Write { path: target.clone(), contents });
                if let Some(to) = move_to {
                    // Moving a file onto itself keeps it.
                    if to != path {
                        overlay.insert(path.clone(), None);
                        outcome.ops.push(FileOp::Remove { path: path.clone(), moved: true });
                    }
                }
                outcome.modified.push(target.clone());
            }
        }
    }
    Ok(outcome)
}

/// The text of `original` after `chunks` (the file is `path`, for error texts). The result ends in `\n`.
pub(crate) fn updated_contents(
    original: &str,
    path: &str,
    chunks: &[UpdateChunk],
) -> Result<String, PatchError> {
    let mut lines: Vec<String> = original.split('\n').map(str::to_owned).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut replacements = replacements(&lines, path, chunks)?;
    replacements.sort_by_key(|r| r.0);
    for (start, old_len, new_lines) in replacements.into_iter().rev() {
        let end = (start + old_len).min(lines.len());
        lines.splice(start.min(lines.len())..end, new_lines);
    }
    if !lines.last().is_some_and(String::is_empty) {
        lines.push(String::new());
    }
    Ok(lines.join("\n"))
}

/// Where each chunk applies: `(start, number of old lines, new lines)`.
fn replacements(
    lines: &[String],
    path: &str,
    chunks: &[UpdateChunk],
) -> Result<Vec<(usize, usize, Vec<String>)>, PatchError> {
    let mut found = Vec::new();
    let mut at = 0;
    for chunk in chunks {
        if let Some(context) = &chunk.context {
            let index = seek_sequence(lines, std::slice::from_ref(context), at, false)
                .ok_or_else(|| PatchError::Context { path: path.to_owned(), context: context.clone() })?;
            at = index + 1;
        }
        if chunk.old_lines.is_empty() {
            // A pure addition goes at the end of the file.
            let end = if lines.last().is_some_and(String::is_empty) { lines.len() - 1 } else { lines.len() };
            found.push((end, 0, chunk.new_lines.clone()));
            continue;
        }
        let mut old: &[String] = &chunk.old_lines;
        let mut new: &[String] = &chunk.new_lines;
        let mut start = seek_sequence(lines, old, at, chunk.end_of_file);
        // A trailing empty old line stands for the file's final newline, which `lines` does not hold.
        if start.is_none() && old.last().is_some_and(String::is_empty) {
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            start = seek_sequence(lines, old, at, chunk.end_of_file);
        }
        let start = start
            .ok_or_else(|| PatchError::Lines { path: path.to_owned(), lines: chunk.old_lines.clone() })?;
        found.push((start, old.len(), new.to_vec()));
        at = start + old.len();
    }
    Ok(found)
}
