//! The heuristic that tells a sandbox denial from an ordinary failure (spec A6).
//!
//! A run counts as denied by the sandbox when it exited non-zero and either its output (lower-cased) contains one
//! of [`SANDBOX_DENIED_KEYWORDS`], or its exit code is 159 (128 + SIGSYS: killed by a seccomp filter). Exit codes
//! 2, 126 and 127 (usage error, not executable, not found) without such output are ordinary failures. The caller
//! applies the early-exit grace window; this function only judges the exit code and output.

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

/// True when a run that exited with `exit_code` and printed `output` was most likely denied by the sandbox.
pub fn is_likely_sandbox_denied(exit_code: i32, output: &[u8]) -> bool {
    if exit_code == 0 {
        return false;
    }
    let lower = output.to_ascii_lowercase();
    let has_keyword = SANDBOX_DENIED_KEYWORDS
        .iter()
        .any(|keyword| lower.windows(keyword.len()).any(|w| w == keyword.as_bytes()));
    has_keyword || exit_code == SIGSYS_EXIT_CODE
}

#[cfg(test)]
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
    fn non_utf8_output_is_searched_too() {
        assert!(is_likely_sandbox_denied(1, b"\xff\xfeOPERATION NOT PERMITTED\xff"));
    }
}
