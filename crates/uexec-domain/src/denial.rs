//! The heuristic that tells a sandbox denial from an ordinary failure (spec A6).
//!
//! A run counts as denied by the sandbox when it exited non-zero and either its output (lower-cased) contains one
//! of [`SANDBOX_DENIED_KEYWORDS`], or its exit code is 159 (128 + SIGSYS: killed by a seccomp filter). Exit codes
//! 2, 126 and 127 (usage error, not executable, not found) without such output are ordinary failures. The caller
//! applies the early-exit grace window; this function only judges the exit code and output.

use serde::{Deserialize, Serialize};

/// Lower-case fragments of the messages a sandbox denial produces.
pub const SANDBOX_DENIED_KEYWORDS: [&str; 7] = [
    "operation not permitted",
    "permission denied",
    "read-only file system",
    "seccomp",
    "sandbox",
    "landlock",
    "failed to write file",
];

/// Exit code of a process killed by SIGSYS (signal 31 on Linux), which a seccomp filter can cause.
pub const SIGSYS_EXIT_CODE: i32 = 128 + 31;

/// At most this many characters of the output line that looked like a denial are kept as evidence.
pub const EVIDENCE_LINE_CHARS: usize = 200;

/// What made a run look denied by the sandbox: shown to the person asked whether to retry it without the
/// sandbox, and in the note returned when it is not retried.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DenialEvidence {
    /// The exit code of the sandboxed run.
    pub exit_code: i32,
    /// The first output line containing a denial keyword (lossy UTF-8, trimmed, at most
    /// [`EVIDENCE_LINE_CHARS`] characters around the keyword, cut parts marked `...`); `None` when only the exit
    /// code (159, SIGSYS) says so. The command wrote it: display it escaped.
    pub line: Option<String>,
}

impl DenialEvidence {
    /// One line for a person: the exit code and the output line, quoted with every control, bidi, zero-width
    /// or other invisible character escaped (`uexec_domain::question::escape_visible`), so the command cannot
    /// shape the text.
    pub fn describe(&self) -> String {
        self.describe_with(crate::visible::escape_visible)
    }

    /// [`Self::describe`] with the output line as the command printed it, for text that is escaped as a whole
    /// afterwards (an approval question: `uexec_domain::question` escapes its headline), so nothing is escaped twice.
    pub fn describe_raw(&self) -> String {
        self.describe_with(str::to_owned)
    }

    fn describe_with(&self, show: impl Fn(&str) -> String) -> String {
        match &self.line {
            Some(line) => format!("exit code {}, output line \"{}\"", self.exit_code, show(line)),
            None if self.exit_code == SIGSYS_EXIT_CODE => {
                format!("exit code {} (killed by SIGSYS: a system call filter)", self.exit_code)
            }
            None => format!("exit code {}", self.exit_code),
        }
    }
}

/// Why a run that exited with `exit_code` and printed `output` looks denied by the sandbox, or `None` when it
/// does not (see the module documentation).
pub fn denial_evidence(exit_code: i32, output: &[u8]) -> Option<DenialEvidence> {
    if exit_code == 0 {
        return None;
    }
    for line in output.split(|b| *b == b'\n') {
        let lower = line.to_ascii_lowercase();
        let found = SANDBOX_DENIED_KEYWORDS
            .iter()
            .find_map(|keyword| lower.windows(keyword.len()).position(|w| w == keyword.as_bytes()));
        if let Some(at) = found {
            return Some(DenialEvidence { exit_code, line: Some(excerpt(line, at)) });
        }
    }
    (exit_code == SIGSYS_EXIT_CODE).then_some(DenialEvidence { exit_code, line: None })
}

/// True when a run that exited with `exit_code` and printed `output` was most likely denied by the sandbox.
#[cfg(test)]
pub(crate) fn is_likely_sandbox_denied(exit_code: i32, output: &[u8]) -> bool {
    denial_evidence(exit_code, output).is_some()
}

/// The part of `line` around byte `at`, at most [`EVIDENCE_LINE_CHARS`] characters.
fn excerpt(line: &[u8], at: usize) -> String {
    let before = String::from_utf8_lossy(&line[..at]);
    let after = String::from_utf8_lossy(&line[at..]);
    let before: Vec<char> = before.chars().collect();
    let after: Vec<char> = after.trim_end().chars().collect();
    let keep_before = before.len().min(EVIDENCE_LINE_CHARS / 2);
    let keep_after = after.len().min(EVIDENCE_LINE_CHARS - keep_before);
    let mut text = String::new();
    if keep_before < before.len() {
        text.push_str("...");
    }
    text.extend(&before[before.len() - keep_before..]);
    text.extend(&after[..keep_after]);
    if keep_after < after.len() {
        text.push_str("...");
    }
    text.trim_start().to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_keyword_counts_case_insensitively() {
        for output in [
            "touch: cannot touch 'x': Operation not permitted",
            "bash: /etc/x: Permission denied",
            "mkdir: cannot create directory: Read-only file system",
            "killed by SECCOMP",
            "Sandbox: deny file-write",
            "LandLock restriction",
            "error: Failed to write file 'a.txt'",
        ] {
            assert!(is_likely_sandbox_denied(1, output.as_bytes()), "{output}");
        }
    }

    #[test]
    fn exit_zero_is_never_a_denial() {
        assert!(!is_likely_sandbox_denied(0, b"Permission denied"));
        assert!(!is_likely_sandbox_denied(0, b""));
    }

    #[test]
    fn usage_not_executable_and_not_found_alone_are_not_denials() {
        for code in [2, 126, 127] {
            assert!(!is_likely_sandbox_denied(code, b"bash: foo: command not found"));
            assert!(!is_likely_sandbox_denied(code, b""));
        }
        // With a denial message they are.
        assert!(is_likely_sandbox_denied(126, b"bash: ./run.sh: Permission denied"));
    }

    #[test]
    fn sigsys_exit_is_a_denial_even_without_output() {
        assert!(is_likely_sandbox_denied(159, b""));
        assert!(!is_likely_sandbox_denied(1, b"plain failure"));
        assert!(!is_likely_sandbox_denied(137, b""));
    }

    #[test]
    fn evidence_is_the_first_line_with_a_keyword_cut_around_it() {
        let output = b"building\nstep 2\r\ntouch: cannot touch '/etc/x': Permission denied\nmore: Read-only file system\n";
        let evidence = denial_evidence(1, output).unwrap();
        assert_eq!(evidence.exit_code, 1);
        assert_eq!(evidence.line.as_deref(), Some("touch: cannot touch '/etc/x': Permission denied"));
        assert_eq!(
            evidence.describe(),
            "exit code 1, output line \"touch: cannot touch '/etc/x': Permission denied\""
        );
        let long = format!("{}operation not permitted{}", "a".repeat(500), "b".repeat(500));
        let line = denial_evidence(1, long.as_bytes()).unwrap().line.unwrap();
        assert!(line.starts_with("...") && line.ends_with("...") && line.contains("operation not permitted"));
        assert!(line.chars().count() <= EVIDENCE_LINE_CHARS + 6, "{}", line.chars().count());
        assert_eq!(denial_evidence(159, b"").unwrap().line, None);
        assert!(denial_evidence(159, b"").unwrap().describe().contains("SIGSYS"));
        assert_eq!(denial_evidence(0, b"permission denied"), None);
        assert_eq!(denial_evidence(1, b"plain failure"), None);
    }

    #[test]
    fn evidence_shown_to_a_person_escapes_what_the_command_printed() {
        let output = "x: permission denied\u{1b}[2J\u{202e}\u{200b}\r\u{7}".as_bytes();
        let text = denial_evidence(1, output).unwrap().describe();
        assert!(
            text.chars().all(|c| !c.is_control() && !matches!(c, '\u{202a}'..='\u{202e}' | '\u{200b}')),
            "{text:?}"
        );
        assert!(
            text.contains("\\u{1b}") && text.contains("\\u{202e}") && text.contains("\\u{200b}"),
            "{text}"
        );
    }

    #[test]
    fn non_utf8_output_is_searched_too() {
        assert!(is_likely_sandbox_denied(1, b"\xff\xfeOPERATION NOT PERMITTED\xff"));
    }
}
