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
/// Default early-exit grace after spawn ([`Limits::early_exit_grace_ms`]): the only window in which a sandbox
/// denial triggers a retry.
pub const EARLY_EXIT_GRACE_MS: u64 = 150;
/// How long a question waits for a person by default (10 minutes): then the call is refused with a text the
/// model can act on, instead of holding the call as long as the client waits.
pub const APPROVAL_TIMEOUT_MS: u64 = 600_000;
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
/// The Linux kernel's limit for one argument of `execve`, its terminating NUL included (`MAX_ARG_STRLEN`, 32
/// pages): `cmd` runs as one argument (`[shell, -lc, cmd]`), so a longer `cmd` fails with E2BIG. Checked before
/// anything is asked or spawned, on every platform (macOS allows more, but one rule is easier to rely on).
pub const MAX_ARG_STRLEN: usize = 128 * 1024;
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
    /// The early-exit grace, in milliseconds: a sandboxed first attempt that ends this soon after its spawn (and
    /// within its yield window) is judged for a sandbox denial, and may be retried outside the sandbox; one that
    /// ends later is an ordinary result. Tests set a long grace so that every quick run is judged.
    pub early_exit_grace_ms: u64,
    /// How long a question waits for a person's answer, in milliseconds, before the call is refused (a call's
    /// question also ends when the caller's client would give up on the call: `uexec_domain::client_wait`).
    pub approval_timeout_ms: u64,
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
            early_exit_grace_ms: EARLY_EXIT_GRACE_MS,
            approval_timeout_ms: APPROVAL_TIMEOUT_MS,
        }
    }
}

/// The yield window of an `exec_command`: `requested_ms` (default [`DEFAULT_EXEC_YIELD_TIME_MS`]) clamped to
/// `[limits.min_yield_time_ms, limits.max_yield_time_ms]`.
pub fn clamp_exec_yield(requested_ms: Option<u64>, limits: &Limits) -> u64 {
    clamp(
        requested_ms.unwrap_or(DEFAULT_EXEC_YIELD_TIME_MS),
        limits.min_yield_time_ms,
        limits.max_yield_time_ms,
    )
}

/// The yield window of a `write_stdin`: `requested_ms` (default [`DEFAULT_WRITE_YIELD_TIME_MS`]) clamped to
/// the yield bounds, or to the poll bounds when `is_empty_poll` (so an empty poll waits at least 5 s by default).
pub fn clamp_write_yield(requested_ms: Option<u64>, is_empty_poll: bool, limits: &Limits) -> u64 {
    let requested = requested_ms.unwrap_or(DEFAULT_WRITE_YIELD_TIME_MS);
    if is_empty_poll {
        clamp(requested, limits.min_poll_yield_time_ms, limits.max_poll_yield_time_ms)
    } else {
        clamp(requested, limits.min_yield_time_ms, limits.max_yield_time_ms)
    }
}

/// The token budget of one response: `requested` (default `limits.default_max_output_tokens`), at most
/// `limits.max_output_tokens`.
pub fn resolve_max_output_tokens(requested: Option<usize>, limits: &Limits) -> usize {
    requested.unwrap_or(limits.default_max_output_tokens).min(limits.max_output_tokens)
}

/// `value` within `[min, max]`; never panics, even for a misconfigured `min > max` (then `max` wins).
fn clamp(value: u64, min: u64, max: u64) -> u64 {
    value.max(min).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_yield_defaults_and_boundaries() {
        let limits = Limits::default();
        assert_eq!(clamp_exec_yield(None, &limits), 10_000);
        assert_eq!(clamp_exec_yield(Some(0), &limits), 250);
        assert_eq!(clamp_exec_yield(Some(249), &limits), 250);
        assert_eq!(clamp_exec_yield(Some(250), &limits), 250);
        assert_eq!(clamp_exec_yield(Some(251), &limits), 251);
        assert_eq!(clamp_exec_yield(Some(30_000), &limits), 30_000);
        assert_eq!(clamp_exec_yield(Some(30_001), &limits), 30_000);
        assert_eq!(clamp_exec_yield(Some(u64::MAX), &limits), 30_000);
    }

    #[test]
    fn write_yield_defaults_and_boundaries() {
        let limits = Limits::default();
        assert_eq!(clamp_write_yield(None, false, &limits), 250);
        assert_eq!(clamp_write_yield(Some(249), false, &limits), 250);
        assert_eq!(clamp_write_yield(Some(250), false, &limits), 250);
        assert_eq!(clamp_write_yield(Some(30_000), false, &limits), 30_000);
        assert_eq!(clamp_write_yield(Some(30_001), false, &limits), 30_000);
    }

    #[test]
    fn empty_poll_yield_defaults_and_boundaries() {
        let limits = Limits::default();
        assert_eq!(clamp_write_yield(None, true, &limits), 5_000);
        assert_eq!(clamp_write_yield(Some(4_999), true, &limits), 5_000);
        assert_eq!(clamp_write_yield(Some(5_000), true, &limits), 5_000);
        assert_eq!(clamp_write_yield(Some(5_001), true, &limits), 5_001);
        assert_eq!(clamp_write_yield(Some(300_000), true, &limits), 300_000);
        assert_eq!(clamp_write_yield(Some(300_001), true, &limits), 300_000);
    }

    #[test]
    fn max_output_tokens_default_and_cap() {
        let limits = Limits::default();
        assert_eq!(resolve_max_output_tokens(None, &limits), 10_000);
        assert_eq!(resolve_max_output_tokens(Some(0), &limits), 0);
        assert_eq!(resolve_max_output_tokens(Some(50), &limits), 50);
        assert_eq!(resolve_max_output_tokens(Some(262_144), &limits), 262_144);
        assert_eq!(resolve_max_output_tokens(Some(262_145), &limits), 262_144);
        let small = Limits { max_output_tokens: 100, ..Limits::default() };
        assert_eq!(resolve_max_output_tokens(None, &small), 100);
    }

    #[test]
    fn misconfigured_bounds_do_not_panic() {
        let limits = Limits { min_yield_time_ms: 500, max_yield_time_ms: 100, ..Limits::default() };
        assert_eq!(clamp_exec_yield(Some(300), &limits), 100);
        assert_eq!(clamp_exec_yield(None, &limits), 100);
    }
}
