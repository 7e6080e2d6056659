//! Parsing patch text into hunks (lenient, as the reference is) and rendering hunks back into patch text.

use super::{Hunk, Patch, UpdateChunk};

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE_TO: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";
const CONTEXT: &str = "@@ ";
const BARE_CONTEXT: &str = "@@";

/// Why patch text is not a patch. The `Display` text is what the reference's `apply_patch` prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The text as a whole is malformed (its first or last line).
    #[error("Invalid patch: {0}")]
    InvalidPatch(String),
    /// A hunk is malformed.
    #[error("Invalid patch hunk on line {line}: {message}")]
    InvalidHunk {
        /// What is wrong.
        message: String,
        /// The line of the patch (1-based, counting `*** Begin Patch` as line 1).
        line: usize,
    },
}

/// Parse patch text. Whitespace around the whole text and around markers is ignored, and a patch still
/// wrapped in the heredoc lines of a shell command (`<<EOF`, `<<'EOF'` or `<<"EOF"` ... a line ending in
/// `EOF`) is unwrapped.
pub fn parse_patch(text: &str) -> Result<Patch, ParseError> {
    let lines: Vec<&str> = text.trim().lines().collect();
    let body = match boundaries(&lines) {
        Ok(body) => body,
        Err(error) => match lines.as_slice() {
            [first, .., last]
                if matches!(*first, "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
                    && last.ends_with("EOF")
                    && lines.len() >= 4 =>
            {
                boundaries(&lines[1..lines.len() - 1])?
            }
            _ => return Err(error),
        },
    };
    let mut hunks = Vec::new();
    let mut rest = body;
    let mut line = 2;
    while !rest.is_empty() {
        let (hunk, used) = parse_hunk(rest, line)?;
        hunks.push(hunk);
        line += used;
        rest = &rest[used..];
    }
    Ok(Patch { hunks })
}

/// The lines between `*** Begin Patch` and `*** End Patch`.
fn boundaries<'a>(lines: &'a [&'a str]) -> Result<&'a [&'a str], ParseError> {
    let first = lines.first().map(|l| l.trim());
    let last = lines.last().map(|l| l.trim());
    match (first, last) {
        (Some(BEGIN), Some(END)) if lines.len() >= 2 => Ok(&lines[1..lines.len() - 1]),
        (Some(first), _) if first != BEGIN => {
            Err(ParseError::InvalidPatch("The first line of the patch must be '*** Begin Patch'".to_owned()))
        }
        _ => Err(ParseError::InvalidPatch("The last line of the patch must be '*** End Patch'".to_owned())),
    }
}

/// One hunk at the start of `lines` (which starts at patch line `line`): the hunk and how many lines it used.
fn parse_hunk(lines: &[&str], line: usize) -> Result<(Hunk, usize), ParseError> {
    let header = lines[0].trim();
    if let Some(path) = header.strip_prefix(ADD) {
        let added: Vec<&str> = lines[1..].iter().map_while(|l| l.strip_prefix('+')).collect();
        let contents = added.iter().map(|l| format!("{l}\n")).collect();
        return Ok((Hunk::Add { path: path.to_owned(), contents }, 1 + added.len()));
    }
    if let Some(path) = header.strip_prefix(DELETE) {
        return Ok((Hunk::Delete { path: path.to_owned() }, 1));
    }
    let Some(path) = header.strip_prefix(UPDATE) else {
        return Err(ParseError::InvalidHunk {
            message: format!(
                "'{header}' is not a valid hunk header. Valid hunk headers: '*** Add File: {{path}}', \
                 '*** Delete File: {{path}}', '*** Update File: {{path}}'"
            ),
            line,
        });
    };
    let mut used = 1;
    let move_to = lines.get(1).and_then(|l| l.strip_prefix(MOVE_TO)).map(str::to_owned);
    if move_to.is_some() {
        used += 1;
    }
    let mut chunks = Vec::new();
    while let Some(next) = lines.get(used) {
        if next.trim().is_empty() {
            used += 1;
            continue;
        }
        if next.starts_with('*') {
            break;
        }
        let (chunk, chunk_lines) = parse_chunk(&lines[used..], line + used, chunks.is_empty())?;
        chunks.push(chunk);
        used += chunk_lines;
    }
    if chunks.is_empty() {
        return Err(ParseError::InvalidHunk {
            message: format!("Update file hunk for path '{path}' is empty"),
            line,
        });
    }
    Ok((Hunk::Update { path: path.to_owned(), move_to, chunks }, used))
}

fn no_lines(line: usize) -> ParseError {
    ParseError::InvalidHunk { message: "Update hunk does not contain any lines".to_owned(), line }
}

/// One chunk of an update at the start of `lines` (patch line `line`); only the first chunk of a hunk may
/// leave out its `@@` line.
fn parse_chunk(lines: &[&str], line: usize, first: bool) -> Result<(UpdateChunk, usize), ParseError> {
    let (context, start) = if lines[0] == BARE_CONTEXT {
        (None, 1)
    } else if let Some(context) = lines[0].strip_prefix(CONTEXT) {
        (Some(context.to_owned()), 1)
    } else if first {
        (None, 0)
    } else {
        return Err(ParseError::InvalidHunk {
            message: format!("Expected update hunk to start with a @@ context marker, got: '{}'", lines[0]),
            line,
        });
    };
    if start >= lines.len() {
        return Err(no_lines(line + 1));
    }
    let mut chunk = UpdateChunk { context, ..UpdateChunk::default() };
    let mut parsed = 0;
    for text in &lines[start..] {
        if *text == END_OF_FILE {
            if parsed == 0 {
                return Err(no_lines(line + 1));
            }
            chunk.end_of_file = true;
            parsed += 1;
            break;
        }
        let mut chars = text.chars();
        match chars.next() {
            None => {
                chunk.old_lines.push(String::new());
                chunk.new_lines.push(String::new());
            }
            Some(' ') => {
                chunk.old_lines.push(chars.as_str().to_owned());
                chunk.new_lines.push(chars.as_str().to_owned());
            }
            Some('+') => chunk.new_lines.push(chars.as_str().to_owned()),
            Some('-') => chunk.old_lines.push(chars.as_str().to_owned()),
            Some(_) if parsed == 0 => {
                return Err(ParseError::InvalidHunk {
                    message: format!(
                        "Unexpected line found in update hunk: '{text}'. Every line should start with ' ' \
                         (context line), '+' (added line), or '-' (removed line)"
                    ),
                    line: line + 1,
                });
            }
            // The start of the next chunk or hunk.
            Some(_) => break,
        }
        parsed += 1;
    }
    Ok((chunk, start + parsed))
}

/// Patch text for `patch`, which [`parse_patch`] reads back as `patch`. An update chunk is written as its
/// removed lines then its added lines (context lines appear as both), always with its `@@` line.
pub fn render_patch(patch: &Patch) -> String {
    let mut out = format!("{BEGIN}\n");
    for hunk in &patch.hunks {
        match hunk {
            Hunk::Add { path, contents } => {
                out.push_str(&format!("{ADD}{path}\n"));
                for line in contents.lines() {
                    out.push_str(&format!("+{line}\n"));
                }
            }
            Hunk::Delete { path } => out.push_str(&format!("{DELETE}{path}\n")),
            Hunk::Update { path, move_to, chunks } => {
                out.push_str(&format!("{UPDATE}{path}\n"));
                if let Some(to) = move_to {
                    out.push_str(&format!("{MOVE_TO}{to}\n"));
                }
                for chunk in chunks {
                    match &chunk.context {
                        Some(context) => out.push_str(&format!("{CONTEXT}{context}\n")),
                        None => out.push_str(&format!("{BARE_CONTEXT}\n")),
                    }
                    for line in &chunk.old_lines {
                        out.push_str(&format!("-{line}\n"));
                    }
                    for line in &chunk.new_lines {
                        out.push_str(&format!("+{line}\n"));
                    }
                    if chunk.end_of_file {
                        out.push_str(&format!("{END_OF_FILE}\n"));
                    }
                }
            }
        }
    }
    out.push_str(END);
    out.push('\n');
    out
}
