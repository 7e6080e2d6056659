//! The text a tool call returns to the caller (spec A2), the session-count warning and the error texts.

use std::time::Duration;

use crate::limits::Limits;
use crate::session::SessionId;

/// Everything one `exec_command` or `write_stdin` response says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResponseText {
    /// 6 lowercase hex digits (see [`crate::ids::chunk_id`]).
    pub chunk_id: String,
    /// Time spent in this call.
    pub wall_time: Duration,
    /// The exit code, when the process ended during this call.
    pub exit_code: Option<i32>,
    /// The session id, when the process is still running after the window.
    pub session_id: Option<SessionId>,
    /// Token estimate of the untruncated output.
    pub original_token_count: Option<usize>,
    /// The output, already truncated to the token budget.
    pub output: String,
    /// uexec extension: the process is blocked reading its terminal (spec B4).
    pub waiting_for_input: bool,
    /// A warning for the caller (e.g. [`session_count_warning`]).
    pub warning: Option<String>,
    /// uexec extension: the protections in force (a `ProtectionReport` summary line).
    pub sandbox: Option<String>,
}

impl ResponseText {
    /// The response text: one line per field that applies, joined by `\n`, in the order `Chunk ID`, `Wall time`,
    /// `Process exited with code`, `Process running with session ID` (only without an exit code),
    /// `Process is waiting for input`, `Warning`, `Sandbox`, `Original token count`, `Output:`, then the output.
    pub fn render(&self) -> String {
        let mut lines = vec![
            format!("Chunk ID: {}", self.chunk_id),
            format!("Wall time: {:.4} seconds", self.wall_time.as_secs_f64()),
        ];
        if let Some(code) = self.exit_code {
            lines.push(format!("Process exited with code {code}"));
        } else if let Some(id) = self.session_id {
            lines.push(format!("Process running with session ID {id}"));
        }
        if self.waiting_for_input {
            lines.push("Process is waiting for input".to_owned());
        }
        if let Some(warning) = &self.warning {
            lines.push(format!("Warning: {warning}"));
        }
        if let Some(sandbox) = &self.sandbox {
            lines.push(format!("Sandbox: {sandbox}"));
        }
        if let Some(tokens) = self.original_token_count {
            lines.push(format!("Original token count: {tokens}"));
        }
        lines.push("Output:".to_owned());
        lines.push(self.output.clone());
        lines.join("\n")
    }
}

/// The warning to attach once `live` sessions are open and `live >= limits.warning_sessions`.
pub fn session_count_warning(live: usize, limits: &Limits) -> Option<String> {
    (live >= limits.warning_sessions).then(|| {
        format!(
            "{live} exec sessions are open (maximum {max}). Reuse an open session with write_stdin or close \
             sessions you no longer need; at the maximum, the least recently used session is killed.",
            max = limits.max_sessions
        )
    })
}

/// The most characters of a command an error text repeats.
pub const MAX_ECHOED_COMMAND_CHARS: usize = 200;

/// `cmd` as an error text repeats it: whole up to [`MAX_ECHOED_COMMAND_CHARS`] characters, else its first
/// characters and its length (a 10 MB command must not make a 10 MB error).
pub fn command_excerpt(cmd: &str) -> String {
    match cmd.char_indices().nth(MAX_ECHOED_COMMAND_CHARS) {
        None => cmd.to_owned(),
        Some((end, _)) => format!("{}\u{2026} ({} bytes in all)", &cmd[..end], cmd.len()),
    }
}

/// The error text of a failed `exec_command` (the command capped by [`command_excerpt`]).
pub fn exec_error_text(cmd: &str, message: &str) -> String {
    format!("exec_command failed for `{}`: {message}", command_excerpt(cmd))
}

/// The error text of a failed `write_stdin`.
pub fn write_error_text(message: &str) -> String {
    format!("write_stdin failed: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_echo_a_capped_command_and_its_length() {
        assert_eq!(exec_error_text("ls", "boom"), "exec_command failed for `ls`: boom");
        let exact = "é".repeat(MAX_ECHOED_COMMAND_CHARS);
        assert_eq!(command_excerpt(&exact), exact);
        let huge = format!("{}tail", "é".repeat(10_000_000));
        let text = exec_error_text(&huge, "boom");
        assert!(text.len() < 600, "{}", text.len());
        assert!(text.contains(&format!("\u{2026} ({} bytes in all)`: boom", huge.len())), "{text}");
        assert!(
            text.starts_with(&format!("exec_command failed for `{}", "é".repeat(MAX_ECHOED_COMMAND_CHARS)))
        );
    }

    fn base() -> ResponseText {
        ResponseText {
            chunk_id: "a1b2c3".into(),
            wall_time: Duration::from_micros(1_234_567),
            output: "hello\n".into(),
            ..ResponseText::default()
        }
    }

    #[test]
    fn exited_process() {
        let text = ResponseText {
            exit_code: Some(0),
            session_id: Some(SessionId(4242)),
            original_token_count: Some(2),
            ..base()
        };
        assert_eq!(
            text.render(),
            "Chunk ID: a1b2c3\nWall time: 1.2346 seconds\nProcess exited with code 0\n\
             Original token count: 2\nOutput:\nhello\n"
        );
    }

    #[test]
    fn running_process() {
        let text = ResponseText { session_id: Some(SessionId(4242)), ..base() };
        assert_eq!(
            text.render(),
            "Chunk ID: a1b2c3\nWall time: 1.2346 seconds\nProcess running with session ID 4242\nOutput:\nhello\n"
        );
    }

    #[test]
    fn waiting_for_input_with_warning_and_sandbox() {
        let text = ResponseText {
            session_id: Some(SessionId(1000)),
            waiting_for_input: true,
            warning: Some("careful".into()),
            sandbox: Some("sandbox: none (danger-full-access)".into()),
            original_token_count: Some(9),
            output: String::new(),
            wall_time: Duration::ZERO,
            ..base()
        };
        assert_eq!(
            text.render(),
            "Chunk ID: a1b2c3\nWall time: 0.0000 seconds\nProcess running with session ID 1000\n\
             Process is waiting for input\nWarning: careful\nSandbox: sandbox: none (danger-full-access)\n\
             Original token count: 9\nOutput:\n"
        );
    }

    #[test]
    fn negative_exit_code() {
        let text = ResponseText { exit_code: Some(-1), output: "x".into(), ..base() };
        assert!(text.render().contains("\nProcess exited with code -1\nOutput:\nx"));
    }

    #[test]
    fn warning_starts_at_the_threshold() {
        let limits = Limits::default();
        assert_eq!(session_count_warning(59, &limits), None);
        let warning = session_count_warning(60, &limits).unwrap_or_default();
        assert!(warning.starts_with("60 exec sessions are open (maximum 64)"), "{warning}");
        assert!(session_count_warning(64, &limits).is_some());
    }

    #[test]
    fn error_texts() {
        assert_eq!(
            exec_error_text("ls -l", "rejected by user"),
            "exec_command failed for `ls -l`: rejected by user"
        );
        assert_eq!(
            write_error_text("Unknown process id 1234"),
            "write_stdin failed: Unknown process id 1234"
        );
    }
}
