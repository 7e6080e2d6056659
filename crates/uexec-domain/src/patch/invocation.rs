//! Recognising an `apply_patch` call in a shell command line, in the forms the reference intercepts and the
//! ones models send: the script is `apply_patch <<'EOF'` (or `<<EOF`, `<<"EOF"`, any delimiter word) with the
//! patch as the heredoc, or `apply_patch '<patch>'` with the patch as one quoted argument; `applypatch` is the
//! same command. Before it may come a prelude of `cd <dir>` and `set <options>` commands (`set -e`,
//! `set -euo pipefail`), each followed by `&&`, `;` or a newline: the directories of the `cd`s, in order, are
//! where the patch applies (a `cd` that fails fails the call, whatever the separator: a patch never applies in
//! a directory the script did not mean). Anything else in the script (another command, a pipe, a second
//! argument, `||`, a command after the heredoc) means it is not an `apply_patch` call; when such a script
//! still calls `apply_patch` ([`calls_apply_patch`]), the caller is told that `apply_patch` must be the whole
//! command.

/// An `apply_patch` call found in a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchInvocation {
    /// The patch text (the heredoc body or the argument).
    pub patch: String,
    /// The directory of the prelude's `cd <dir>` commands, as written and joined in order (relative to the
    /// command's working directory unless one is absolute).
    pub workdir: Option<String>,
}

/// The `apply_patch` call that is the whole of `script` (after its prelude), if it is one.
pub fn shell_invocation(script: &str) -> Option<PatchInvocation> {
    let mut rest = script.trim_start();
    let mut workdir: Option<String> = None;
    while let Some((command, after)) = prelude_command(rest) {
        if let Prelude::Cd(dir) = command {
            workdir = Some(match workdir {
                Some(previous) if !dir.starts_with('/') => format!("{previous}/{dir}"),
                _ => dir,
            });
        }
        rest = after;
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

/// A command of the prelude.
enum Prelude {
    /// `cd <dir>`.
    Cd(String),
    /// `set` with option words only (no effect on one `apply_patch` call).
    Set,
}

/// The prelude command at the start of `text` and what follows its separator (`&&`, `;` or a newline), blanks
/// skipped.
fn prelude_command(text: &str) -> Option<(Prelude, &str)> {
    let blank = [' ', '\t'];
    let (command, after) = if let Some(after_cd) = text.strip_prefix("cd").filter(|r| r.starts_with(blank)) {
        let (dir, after) = shell_word(after_cd.trim_start_matches(blank))?;
        (Prelude::Cd(dir), after)
    } else if let Some(after_set) = text.strip_prefix("set").filter(|r| r.starts_with(blank)) {
        let end = after_set.find([';', '&', '\n', '|']).unwrap_or(after_set.len());
        let words: Vec<&str> = after_set[..end].split_whitespace().collect();
        let option = |w: &&str| {
            (w.len() > 1 && w.starts_with(['-', '+']) && w[1..].chars().all(|c| c.is_ascii_alphabetic()))
                || ["pipefail", "errexit", "nounset", "xtrace"].contains(w)
        };
        if words.is_empty() || !words.iter().all(option) {
            return None;
        }
        (Prelude::Set, &after_set[end..])
    } else {
        return None;
    };
    let after = after.trim_start_matches(blank);
    let after =
        after.strip_prefix("&&").or_else(|| after.strip_prefix(';')).or_else(|| after.strip_prefix('\n'))?;
    Some((command, after.trim_start_matches([' ', '\t', '\n'])))
}

/// Whether `script` has an `apply_patch` (or `applypatch`) command among others: the word at the start of a
/// command (the script's start, or after `;`, `&`, `|`, `(`, `{`, a backquote or a newline, blanks and a `!`
/// skipped) together with a patch (`*** Begin Patch`) in the script. For a script [`shell_invocation`] does
/// not take, so that the caller can say that `apply_patch` must be the whole command rather than let the shell
/// answer "command not found".
pub fn calls_apply_patch(script: &str) -> bool {
    if !script.contains("*** Begin Patch") {
        return false;
    }
    let starts = std::iter::once(0).chain(
        script
            .char_indices()
            .filter(|(_, c)| matches!(c, ';' | '&' | '|' | '(' | '{' | '`' | '\n'))
            .map(|(i, c)| i + c.len_utf8()),
    );
    starts.into_iter().any(|start| {
        let mut rest = script[start..].trim_start_matches([' ', '\t']);
        for keyword in ["!", "then", "do", "else", "exec", "command"] {
            if let Some(after) = rest.strip_prefix(keyword).filter(|r| r.starts_with([' ', '\t'])) {
                rest = after.trim_start_matches([' ', '\t']);
            }
        }
        ["apply_patch", "applypatch"].iter().any(|name| {
            rest.strip_prefix(name).is_some_and(|after| {
                after.is_empty() || after.starts_with([' ', '\t', '\n', '<', '\'', '"', ';', '&', '|', ')'])
            })
        })
    })
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
    let end = text.find([' ', '\t', '\n', ';', '&', '|']).unwrap_or(text.len());
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
