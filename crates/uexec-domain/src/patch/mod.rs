//! The patch format Codex-trained models edit files with (`apply_patch`): its grammar, a parser and a
//! renderer, the fuzzy line matching that places an update, the pure application of a patch to an in-memory
//! view of the files, and the recognition of an `apply_patch` call inside a shell command line.
//!
//! The format, as the reference defines it:
//!
//! ```text
//! patch       := "*** Begin Patch" LF hunk* "*** End Patch" LF?
//! hunk        := add | delete | update
//! add         := "*** Add File: " path LF ("+" line LF)*
//! delete      := "*** Delete File: " path LF
//! update      := "*** Update File: " path LF ("*** Move to: " path LF)? chunk+
//! chunk       := ("@@" | "@@ " context) LF? diff_line+ ("*** End of File" LF)?
//! diff_line   := (" " | "-" | "+") line LF
//! ```
//!
//! The first chunk of an update may leave out its `@@` line. Parsing is lenient as the reference's is:
//! whitespace around markers is ignored, and a patch wrapped in its heredoc lines (`<<'EOF'` ... `EOF`) is
//! accepted. Everything here is pure: the caller reads and writes the files.

mod apply;
mod invocation;
mod parse;
mod seek;

pub use apply::{FileOp, PatchError, PatchOutcome, apply_patch};
pub use invocation::{PatchInvocation, calls_apply_patch, shell_invocation};
pub use parse::{ParseError, parse_patch, render_patch};
pub use seek::seek_sequence;

/// A parsed patch: its hunks, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Patch {
    /// The hunks, applied one after the other.
    pub hunks: Vec<Hunk>,
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hunk {
    /// Create (or overwrite) `path` with `contents` (every line ends in `\n`).
    Add {
        /// The path as written in the patch.
        path: String,
        /// The new file's text.
        contents: String,
    },
    /// Remove `path`.
    Delete {
        /// The path as written in the patch.
        path: String,
    },
    /// Change `path` chunk by chunk, and move it to `move_to` when set.
    Update {
        /// The path as written in the patch.
        path: String,
        /// The new path, for a rename.
        move_to: Option<String>,
        /// The changes, in file order.
        chunks: Vec<UpdateChunk>,
    },
}

/// One change inside an updated file: `old_lines` (found after `context`) become `new_lines`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateChunk {
    /// A line (usually a function or class header) that the change follows.
    pub context: Option<String>,
    /// The lines to replace (context lines and removed lines, in order).
    pub old_lines: Vec<String>,
    /// Their replacement (context lines and added lines, in order).
    pub new_lines: Vec<String>,
    /// The old lines must be at the end of the file.
    pub end_of_file: bool,
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
