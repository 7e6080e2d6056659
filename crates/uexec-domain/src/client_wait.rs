//! How long the MCP client waits for one tool call, and the yield window that fits in it.
//!
//! A client that gives up on a call before uexec answers shows the model an error ("An error occurred while
//! running the tool", `-32001 Request timed out`) while the command lives on in a session whose id the model
//! never learns. So every wait (an `exec_command`'s window, a `write_stdin`'s, an empty poll's) is cut to what
//! the client will wait, minus room for the spawn and the answer's way back: the command keeps running in its
//! session and the model polls it.
//!
//! What the client waits comes, in this order, from:
//! 1. the server's setting (`--client-timeout-secs N`, `client_timeout_secs` in the config; `0` says the
//!    client waits as long as it takes, and nothing is cut);
//! 2. the client's `clientInfo.name`, for clients whose default is known ([`KNOWN_CLIENTS`]): `mcp`, the Python
//!    MCP SDK's default name, which the OpenAI Agents SDK sends with its 5 s read timeout
//!    (`client_session_timeout_seconds`), and langchain-mcp-adapters sends as well;
//! 3. otherwise the TypeScript SDK's default request timeout (60 s, `DEFAULT_REQUEST_TIMEOUT_MSEC`), which the
//!    clients built on it keep unless they set one, and which progress notifications do not reset unless the
//!    client asked for it (`resetTimeoutOnProgress`); the Codex CLI's default `tool_timeout_sec` is 60 s too.
//!
//! The cap only shortens: a window already shorter is untouched, and the cap may go below the usual minimum of
//! an empty poll (5 s), since a poll answered after the client gave up helps nobody.

use std::time::Duration;

/// The Python MCP SDK's `clientInfo.name` when the application sets none.
pub const PYTHON_SDK_CLIENT_NAME: &str = "mcp";

/// The TypeScript SDK's default request timeout, assumed for a client uexec does not know.
pub const ASSUMED_CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest room kept between the cap and the client's timeout.
pub const MAX_MARGIN: Duration = Duration::from_secs(10);

/// A client known by its `clientInfo.name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownClient {
    /// Its `clientInfo.name`.
    pub name: &'static str,
    /// What it is, for the note.
    pub what: &'static str,
    /// How long it waits for a call by default.
    pub timeout: Duration,
}

/// Clients whose default per-call timeout is known, by `clientInfo.name`.
pub const KNOWN_CLIENTS: &[KnownClient] = &[KnownClient {
    name: PYTHON_SDK_CLIENT_NAME,
    what: "the Python MCP SDK's default name, as the OpenAI Agents SDK sends it",
    timeout: Duration::from_secs(5),
}];

/// Where the client's timeout was learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitBasis {
    /// The server's setting (`--client-timeout-secs`).
    Declared,
    /// The client's `clientInfo.name` is known.
    Known(KnownClient),
    /// Nothing is known: the TypeScript SDK's default is assumed. Holds the client's name, if it gave one.
    Assumed(Option<String>),
}

/// How long the client waits for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientWait {
    /// Its timeout; `None` when it waits as long as it takes.
    pub timeout: Option<Duration>,
    /// Where that was learnt.
    pub basis: WaitBasis,
}

/// What the client waits: the server's setting in seconds (`Some(0)`: as long as it takes) over the client's
/// `clientInfo.name` over the assumed default.
pub fn client_wait(declared_secs: Option<u64>, client_name: Option<&str>) -> ClientWait {
    if let Some(secs) = declared_secs {
        let timeout = (secs > 0).then(|| Duration::from_secs(secs));
        return ClientWait { timeout, basis: WaitBasis::Declared };
    }
    if let Some(known) = client_name.and_then(|name| KNOWN_CLIENTS.iter().find(|k| k.name == name)) {
        return ClientWait { timeout: Some(known.timeout), basis: WaitBasis::Known(*known) };
    }
    ClientWait {
        timeout: Some(ASSUMED_CLIENT_TIMEOUT),
        basis: WaitBasis::Assumed(client_name.map(str::to_owned)),
    }
}

impl ClientWait {
    /// The longest wait of a call that still answers before the client gives up: its timeout minus 30 % of it
    /// (at most [`MAX_MARGIN`]) for the spawn, the approval bookkeeping and the answer's way back. `None` when
    /// the client waits as long as it takes.
    pub fn cap(&self) -> Option<Duration> {
        self.timeout.map(|timeout| timeout - (timeout / 10 * 3).min(MAX_MARGIN))
    }

    /// `window` cut to [`ClientWait::cap`]: `Some(cap)` when the cap is shorter, else `None` (the window
    /// stands).
    pub fn cut(&self, window: Duration) -> Option<Duration> {
        self.cap().filter(|cap| *cap < window)
    }

    /// The note, said once per connection on the first answer whose wait was cut while its command still runs:
    /// what the wait was cut to, why, and how to lift it.
    pub fn note(&self, cap: Duration, window: Duration) -> String {
        let timeout = self.timeout.unwrap_or_default();
        let why = match &self.basis {
            WaitBasis::Declared => format!("the server was told the client waits {}", secs(timeout)),
            WaitBasis::Known(known) => format!(
                "this client (clientInfo \"{}\": {}) gives up after {}",
                known.name,
                known.what,
                secs(timeout)
            ),
            WaitBasis::Assumed(_) => format!(
                "a client uexec does not know is assumed to give up after {} (the TypeScript SDK's default)",
                secs(timeout)
            ),
        };
        format!(
            "[uexec] Waited {}, not {}: {why}, so every wait is cut to {}; a longer command keeps running in its \
             session (poll it with write_stdin). A client set to wait longer: start uexec with \
             --client-timeout-secs N (0: no limit).",
            secs(cap),
            secs(window),
            secs(cap)
        )
    }
}

/// `d` in seconds, as short as it reads: `3.5 s`, `48 s`.
fn secs(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) { format!("{} s", ms / 1000) } else { format!("{:.1} s", d.as_secs_f64()) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_wins_over_the_client_name_and_zero_lifts_the_cap() {
        let wait = client_wait(Some(330), Some("mcp"));
        assert_eq!(wait.timeout, Some(Duration::from_secs(330)));
        assert_eq!(wait.basis, WaitBasis::Declared);
        assert_eq!(wait.cap(), Some(Duration::from_secs(320)));
        let unlimited = client_wait(Some(0), Some("mcp"));
        assert_eq!(unlimited.cap(), None);
        assert_eq!(unlimited.cut(Duration::from_secs(300)), None);
    }

    #[test]
    fn the_python_sdk_default_name_gets_the_agents_sdk_timeout() {
        let wait = client_wait(None, Some("mcp"));
        assert_eq!(wait.timeout, Some(Duration::from_secs(5)));
        assert_eq!(wait.cap(), Some(Duration::from_millis(3500)));
        // The default exec window (10 s) and an empty poll's minimum (5 s) are both cut.
        assert_eq!(wait.cut(Duration::from_secs(10)), Some(Duration::from_millis(3500)));
        assert_eq!(wait.cut(Duration::from_secs(5)), Some(Duration::from_millis(3500)));
        // A shorter window stands.
        assert_eq!(wait.cut(Duration::from_millis(250)), None);
        assert_eq!(wait.cut(Duration::from_millis(3500)), None);
    }

    #[test]
    fn an_unknown_or_anonymous_client_is_assumed_to_wait_60_s() {
        for name in [Some("my-agent"), Some("MCP"), Some(""), None] {
            let wait = client_wait(None, name);
            assert_eq!(wait.timeout, Some(ASSUMED_CLIENT_TIMEOUT), "{name:?}");
            assert_eq!(wait.cap(), Some(Duration::from_secs(50)), "{name:?}");
            // An exec window (at most 30 s) is never cut; a long empty poll is.
            assert_eq!(wait.cut(Duration::from_secs(30)), None);
            assert_eq!(wait.cut(Duration::from_secs(300)), Some(Duration::from_secs(50)));
        }
    }

    #[test]
    fn the_margin_is_30_percent_at_most_10_s_and_never_empties_the_window() {
        for (secs, cap_ms) in [(1, 700), (2, 1400), (10, 7000), (33, 23_100), (34, 24_000), (600, 590_000)] {
            let cap = client_wait(Some(secs), None).cap().unwrap();
            assert_eq!(cap, Duration::from_millis(cap_ms), "{secs} s");
            assert!(cap > Duration::ZERO && cap < Duration::from_secs(secs));
        }
        let huge = client_wait(Some(u64::MAX), None).cap().unwrap();
        assert_eq!(huge, Duration::from_secs(u64::MAX) - MAX_MARGIN);
    }

    #[test]
    fn the_note_says_the_cut_why_and_how_to_lift_it() {
        let wait = client_wait(None, Some("mcp"));
        let note = wait.note(Duration::from_millis(3500), Duration::from_secs(10));
        assert!(
            note.starts_with("[uexec] Waited 3.5 s, not 10 s: this client (clientInfo \"mcp\""),
            "{note}"
        );
        assert!(note.contains("OpenAI Agents SDK"), "{note}");
        assert!(note.contains("gives up after 5 s"), "{note}");
        assert!(note.contains("write_stdin") && note.contains("--client-timeout-secs"), "{note}");
        let declared = client_wait(Some(20), None).note(Duration::from_secs(14), Duration::from_secs(30));
        assert!(declared.contains("the server was told the client waits 20 s"), "{declared}");
        let assumed = client_wait(None, Some("x")).note(Duration::from_secs(50), Duration::from_secs(300));
        assert!(assumed.contains("assumed to give up after 60 s"), "{assumed}");
        assert!(!assumed.contains('\n'), "one line: {assumed}");
    }
}
