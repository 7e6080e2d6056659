//! The constants of the reference system (spec A4) and the configurable limits built from them.

use serde::{Deserialize, Serialize};

/// Smallest yield window of `exec_command` and of a non-empty `write_stdin`, in milliseconds.
pub const MIN_YIELD_TIME_MS: u64 = 250;
/// Largest yield window of `exec_command` and of a non-empty `write_stdin`, in milliseconds.
pub const MAX_YIELD_TIME_MS: u64 = 30_000;
/// Smallest yield window of an empty `write_stdin` (a poll), in milliseconds.
pub const MIN_EMPTY_POLL_YIELD_TIME_MS: u64 = 5_000;
/// Largest yield window of an empty `write_stdin` (a poll), in milliseconds.
pub const MAX_EMPTY_POLL_YIELD_TIME_MS: u64 = 300_000;
/// Default yield window of `exec_command`.
pub const DEFAULT_EXEC_YIELD_TIME_MS: u64 = 10_000;
/// Default yield window of `write_stdin`.
pub const DEFAULT_WRITE_YIELD_TIME_MS: u64 = 250;
/// Bytes per token used for every token estimate.
pub const APPROX_BYTES_PER_TOKEN: usize = 4;
/// Default `max_output_tokens`.
pub const DEFAULT_MAX_OUTPUT_TOKENS: usize = 10_000;
/// Per-session output buffer: total bytes kept (head + tail).
pub const OUTPUT_BUFFER_MAX_BYTES: usize = 1024 * 1024;
/// The server's token budget: no response carries more than this many tokens of output.
pub const MAX_OUTPUT_TOKENS_BUDGET: usize = OUTPUT_BUFFER_MAX_BYTES / APPROX_BYTES_PER_TOKEN;
/// Maximum live sessions.
pub const MAX_SESSIONS: usize = 64;
/// From this many live sessions on, responses carry a warning.
pub const WARNING_SESSIONS: usize = 60;
/// The most recently used sessions that pruning never picks.
pub const PROTECTED_RECENT_SESSIONS: usize = 8;
/// Early-exit grace after spawn: the only window in which a sandbox denial triggers a retry.
pub const EARLY_EXIT_GRACE_MS: u64 = 150;
/// How long to wait for trailing output after the process exited.
pub const POST_EXIT_CLOSE_WAIT_MS: u64 = 50;
/// PTY rows at spawn.
pub const PTY_ROWS: u16 = 24;
/// PTY columns at spawn.
pub const PTY_COLS: u16 = 80;
/// Session ids are drawn from `[SESSION_ID_MIN, SESSION_ID_MAX)`.
pub const SESSION_ID_MIN: u32 = 1_000;
/// Exclusive upper bound of session ids.
pub const SESSION_ID_MAX: u32 = 100_000;
/// Largest output delta event, in bytes.
pub const MAX_OUTPUT_DELTA_BYTES: usize = 8192;
/// Largest `chars` accepted by one `write_stdin`, in bytes.
pub const MAX_WRITE_STDIN_BYTES: usize = 1024 * 1024;

/// Limits a deployment may tune; [`Limits::default`] is the reference's values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Maximum live sessions before pruning.
    pub max_sessions: usize,
    /// Live-session count from which responses carry a warning.
    pub warning_sessions: usize,
    /// Per-session output buffer size in bytes (half head, half tail).
    pub output_buffer_bytes: usize,
    /// Largest `max_output_tokens` a caller may ask for.
    pub max_output_tokens: usize,
    /// Default `max_output_tokens`.
    pub default_max_output_tokens: usize,
    /// Yield bounds for `exec_command` and non-empty writes, in milliseconds.
    pub min_yield_time_ms: u64,
    /// See `min_yield_time_ms`.
    pub max_yield_time_ms: u64,
    /// Yield bounds for empty polls, in milliseconds.
    pub min_poll_yield_time_ms: u64,
    /// See `min_poll_yield_time_ms`.
    pub max_poll_yield_time_ms: u64,
    /// Largest `chars` of one `write_stdin`, in bytes.
    pub max_write_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions: MAX_SESSIONS,
            warning_sessions: WARNING_SESSIONS,
            output_buffer_bytes: OUTPUT_BUFFER_MAX_BYTES,
            max_output_tokens: MAX_OUTPUT_TOKENS_BUDGET,
            default_max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            min_yield_time_ms: MIN_YIELD_TIME_MS,
            max_yield_time_ms: MAX_YIELD_TIME_MS,
            min_poll_yield_time_ms: MIN_EMPTY_POLL_YIELD_TIME_MS,
            max_poll_yield_time_ms: MAX_EMPTY_POLL_YIELD_TIME_MS,
            max_write_bytes: MAX_WRITE_STDIN_BYTES,
        }
    }
}
