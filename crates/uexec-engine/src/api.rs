//! The values callers pass in and get back: requests, responses and session summaries.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use uexec_domain::SandboxKind;
use uexec_domain::response::ResponseText;
use uexec_domain::{ProtectionReport, SandboxPermissions, SessionId};

/// One `exec_command` call (spec A1).
#[derive(Debug, Clone, Default)]
pub struct ExecCommandRequest {
    /// The shell command line.
    pub cmd: String,
    /// The working directory; relative paths resolve against the engine's cwd. `None` = the engine's cwd.
    pub workdir: Option<PathBuf>,
    /// The shell; `None` = the configured default shell.
    pub shell: Option<String>,
    /// Run in a 24x80 PTY (default false: pipes, stdin at `/dev/null`).
    pub tty: bool,
    /// The yield window; clamped to `[250, 30000]`, default 10,000.
    pub yield_time_ms: Option<u64>,
    /// The output budget in tokens; default 10,000, capped by the limits.
    pub max_output_tokens: Option<usize>,
    /// `-lc` (true, the default) or `-c`.
    pub login: Option<bool>,
    /// Ask to run outside the sandbox.
    pub sandbox_permissions: SandboxPermissions,
    /// The question shown when asking a person.
    pub justification: Option<String>,
    /// A command prefix the caller suggests a person approve for the rest of the session (Codex's
    /// `prefix_rule`). Offered only when it is a real prefix of the command and not a bare shell or interpreter
    /// (`uexec_domain::rules::session_prefix_offer`).
    pub prefix_rule: Option<Vec<String>>,
    /// The id of this call in events; `None` = the engine generates one.
    pub call_id: Option<String>,
    /// The longest the window may be, whatever was asked: what the caller's client waits for a call
    /// (`uexec_domain::client_wait`); `None` = the clamped window stands.
    pub max_wait: Option<Duration>,
}

/// One `write_stdin` call (spec A1).
#[derive(Debug, Clone)]
pub struct WriteStdinRequest {
    /// The session.
    pub session_id: SessionId,
    /// Written verbatim; `""` polls. `\u{3}` is Ctrl-C (SIGINT for a session without a terminal).
    pub chars: String,
    /// The yield window: non-empty writes `[250, 30000]` (default 250), polls `[5000, 300000]`.
    pub yield_time_ms: Option<u64>,
    /// The output budget in tokens.
    pub max_output_tokens: Option<usize>,
    /// The longest the window may be, below even an empty poll's minimum (see
    /// [`ExecCommandRequest::max_wait`]).
    pub max_wait: Option<Duration>,
}

impl Default for WriteStdinRequest {
    /// A poll of session 0 (a placeholder id: set `session_id`).
    fn default() -> Self {
        WriteStdinRequest {
            session_id: SessionId(0),
            chars: String::new(),
            yield_time_ms: None,
            max_output_tokens: None,
            max_wait: None,
        }
    }
}

/// What a call returns.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecResponse {
    /// 6 lowercase hex digits.
    pub chunk_id: String,
    /// How long the call took.
    pub wall_time: Duration,
    /// Set when the process ended during this call (-1 when its status is unknown).
    pub exit_code: Option<i32>,
    /// Set while the process is alive after the window.
    pub session_id: Option<SessionId>,
    /// `ceil(bytes / 4)` of the untruncated output.
    pub original_token_count: usize,
    /// The output since the previous call, truncated to `max_output_tokens`.
    pub output: String,
    /// The call returned early because the terminal's foreground process waits for input (spec B4).
    pub waiting_for_input: bool,
    /// The text says so (`[uexec] Process is waiting for input`): once per stretch of waiting of a session, see
    /// [`uexec_domain::response::waiting_note`].
    pub says_waiting: bool,
    /// What the sandbox refused during the call, in a model's few words (`uexec_domain::denial::model_note`).
    pub refused: Option<String>,
    /// Set from the warning threshold on (too many live sessions).
    pub warning: Option<String>,
    /// The protections in force: set in `exec_command` responses when the engine reports them (the full report
    /// stays available from `list_sessions`).
    pub protections: Option<ProtectionReport>,
}

impl ExecResponse {
    /// The text returned to the model (spec A2, plus the uexec lines).
    pub fn to_text(&self) -> String {
        ResponseText {
            chunk_id: self.chunk_id.clone(),
            wall_time: self.wall_time,
            exit_code: self.exit_code,
            session_id: self.session_id,
            original_token_count: Some(self.original_token_count),
            output: self.output.clone(),
            waiting_for_input: self.says_waiting,
            refused: self.refused.clone(),
            warning: self.warning.clone(),
            sandbox: self.protections.as_ref().map(ProtectionReport::compact_line),
        }
        .render()
    }
}

/// The state of a session in a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SessionState {
    /// The process is alive.
    Running,
    /// The process ended; the next call on the session reports it and removes the session.
    Exited {
        /// Its exit code (-1 when unknown).
        exit_code: i32,
    },
}

/// One live session, for `list_sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    /// Its id.
    pub session_id: SessionId,
    /// The argv that runs (`[shell, "-lc", cmd]`).
    pub command: Vec<String>,
    /// The command line as given.
    pub cmd: String,
    /// Whether it runs in a PTY.
    pub tty: bool,
    /// Since spawn.
    pub age: Duration,
    /// Since the last call on it.
    pub idle: Duration,
    /// Running or exited.
    pub state: SessionState,
    /// The sandbox it runs under.
    pub sandbox: SandboxKind,
    /// Everything that sandbox enforces for it.
    pub protections: ProtectionReport,
}

/// What a session is doing, for a person's listing (`Engine::session_views`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum LiveState {
    /// The process is alive and not known to wait for input.
    Running,
    /// The terminal's foreground process waits in a read of the terminal (a prompt).
    WaitingForInput,
    /// The process ended; the model's next call on the session reports it.
    Exited {
        /// Its exit code (-1 when unknown).
        exit_code: i32,
    },
}

/// One live session as a person sees it (`uexec sessions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionView {
    /// Its id.
    pub session_id: SessionId,
    /// The command line as given.
    pub cmd: String,
    /// Where it started.
    pub cwd: PathBuf,
    /// Whether it runs in a PTY.
    pub tty: bool,
    /// The sandbox it runs under.
    pub sandbox: SandboxKind,
    /// Running, waiting for input, or exited.
    pub state: LiveState,
    /// Since spawn.
    pub age: Duration,
    /// Bytes of output it wrote so far.
    pub output_bytes: u64,
}
