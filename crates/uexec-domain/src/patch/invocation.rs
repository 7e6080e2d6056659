//! Recognising an `apply_patch` call in a shell command line, in the forms the reference intercepts: the
//! whole script is `apply_patch <<'EOF'` (or `<<EOF`, `<<"EOF"`, any delimiter word) with the patch as the
//! heredoc, optionally preceded by `cd <dir> &&`, or `apply_patch '<patch>'` with the patch as one quoted
//! argument; `applypatch` is the same command. Anything else in the script (another command, a pipe, a second
//! argument, `;`) means it is not an `apply_patch` call, and the shell runs it as it is.

/// An `apply_patch` call found in a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchInvocation {
    /// The patch text (the heredoc body or the argument).
    pub patch: String,
    /// The directory of a leading `cd <dir> &&`, as written (relative to the command's working directory).
    pub workdir: Option<String>,
}

/// The `apply_patch` call that is the whole of `script`, if it is one.
pub fn shell_invocation(script: &str) -> Option<PatchInvocation> {
    let mut rest = script.trim_start();
    let mut workdir = None;
    if let Some(after_cd) = rest.strip_prefix("cd").filter(|r| r.starts_with([' ', '\t'])) {
        let (dir, after_dir) = shell_word(after_cd.trim_start_matches([' ', '\t']))?;
        workdir = Some(dir);
        rest = after_dir.trim_start_matches([' ', '\t']).strip_prefix("&&")?.trim_start_matches([' ', '\t']);
    }
    let after_name = ["apply_patch", "applypatch"].iter().find_map(|name| rest.strip_prefix(name))?;
    if after_name.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '-' || c == '.') {
        // `apply_patchx`: another command.
        return None;
    }
    let arguments = after_name.trim_start_matches([' ', '\t']);
    let patch = if let Some(heredoc) = arguments.strip_prefix("<<-") {
        heredoc_body(heredoc, true)?
    } else if let Some(heredoc) = arguments.strip_prefix("<<") {
        heredoc_body(heredoc, false)?
    } else {
        let (patch, after) = quoted(arguments)?;
        if !after.trim().is_empty() {
            return None;
        }
        patch
    };
    Some(PatchInvocation { patch, workdir })
}

/// `DELIM` (bare, `'DELIM'` or `"DELIM"`), the end of its line, the body lines, then a line that is exactly
/// `DELIM` and nothing but whitespace after it. With `strip_tabs` (`<<-`), leading tabs of every line go.
fn heredoc_body(text: &str, strip_tabs: bool) -> Option<String> {
    let text = text.trim_start_matches([' ', '\t']);
    let (delimiter, after) = match text.chars().next()? {
        quote @ ('\'' | '"') => {
            let end = text[1..].find(quote)? + 1;
            (&text[1..end], &text[end + 1..])
        }
        _ => {
            let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len());
            (&text[..end], &text[end..])
        }
    };
    if delimiter.is_empty() || !delimiter.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let (first_line, body_and_rest) = after.split_once('\n')?;
    if !first_line.trim().is_empty() {
        return None;
    }
    let mut body = Vec::new();
    let mut lines = body_and_rest.split('\n');
    for line in lines.by_ref() {
        let line = if strip_tabs { line.trim_start_matches('\t') } else { line };
        if line == delimiter {
            let rest: Vec<&str> = lines.collect();
            return rest.iter().all(|l| l.trim().is_empty()).then(|| body.join("\n"));
        }
        body.push(line);
    }
    None
}

/// One shell word: `'literal'`, `"literal"` (no `$`, backquote or backslash inside) or a bare word of
/// characters that mean nothing to the shell. Returns the word and what follows it.
fn shell_word(text: &str) -> Option<(String, &str)> {
    if text.starts_with(['\'', '"']) {
        return quoted(text);
    }
    let end = text.find([' ', '\t', '\n']).unwrap_or(text.len());
    let word = &text[..end];
    let plain = |c: char| c.is_alphanumeric() || "/._-+,:@%=".contains(c);
    (!word.is_empty() && word.chars().all(plain)).then(|| (word.to_owned(), &text[end..]))
}

/// A single- or double-quoted literal at the start of `text`, and what follows it.
fn quoted(text: &str) -> Option<(String, &str)> {
    let quote = text.chars().next().filter(|c| matches!(c, '\'' | '"'))?;
    let end = text[1..].find(quote)? + 1;
    let inner = &text[1..end];
    if quote == '"' && inner.contains(['$', '`', '\\']) {
        return None;
    }
    Some((inner.to_owned(), &text[end + 1..]))
}
