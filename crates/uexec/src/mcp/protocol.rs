//! What each MCP protocol version asks of the server: one table, read by both transports (the JSON-RPC repair
//! layer in [`super::jsonrpc`], stdio and HTTP alike), by the approver (how a person is asked) and by the HTTP
//! server (which versions it offers).
//!
//! | version    | JSON-RPC batches | elicitation                                   | sessions |
//! |------------|------------------|-----------------------------------------------|----------|
//! | 2024-11-05 | no               | none                                          | yes      |
//! | 2025-03-26 | yes (required)   | none                                          | yes      |
//! | 2025-06-18 | no               | `elicitation/create`, `enum` + `enumNames`, no `mode` | yes |
//! | 2025-11-25 | no               | `elicitation/create`, `oneOf` + `const`, `mode: "form"` | yes |
//! | 2026-07-28 | no               | on the tool result (`InputRequiredResult`)    | no (stateless) |
//!
//! A version between two rows behaves as the older one; a version after the last, as the last.

/// How the choices of the approval form are written: each protocol version defines its own enum schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormStyle {
    /// 2025-11-25 and later: `oneOf` of `{ const, title }` (titled single-select enum).
    OneOf,
    /// 2025-06-18: `enum` with parallel `enumNames` (the repair layer also drops the `mode` field it lacks).
    LegacyEnum,
}

/// How a person at the client can be asked under a version (when the client declared elicitation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elicitation {
    /// The version has no elicitation: the approval policy decides alone.
    None,
    /// An `elicitation/create` request from server to client, its form written in `style`; `mode` says whether
    /// the request carries the `mode` field (2025-11-25 added it; rmcp always writes it).
    Request {
        /// How the form's choices are written.
        style: FormStyle,
        /// Whether `params.mode` belongs in the request.
        mode: bool,
    },
    /// No server-to-client requests: the question rides on the tool result (`InputRequiredResult`) and the
    /// answer on the client's retry of the call.
    OnResult,
}

/// What one protocol version asks of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behaviour {
    /// The version (`YYYY-MM-DD`).
    pub version: &'static str,
    /// Whether a client may send a JSON array of messages.
    pub batches: bool,
    /// How a person can be asked.
    pub elicitation: Elicitation,
    /// Whether the version has sessions (an `initialize` handshake). Without them, every HTTP request is served
    /// by a fresh handler, which would lose a client's sessions between calls.
    pub sessions: bool,
}

/// Every version this server knows, oldest first.
pub const VERSIONS: &[Behaviour] = &[
    Behaviour { version: "2024-11-05", batches: false, elicitation: Elicitation::None, sessions: true },
    Behaviour { version: "2025-03-26", batches: true, elicitation: Elicitation::None, sessions: true },
    Behaviour {
        version: "2025-06-18",
        batches: false,
        elicitation: Elicitation::Request { style: FormStyle::LegacyEnum, mode: false },
        sessions: true,
    },
    Behaviour {
        version: "2025-11-25",
        batches: false,
        elicitation: Elicitation::Request { style: FormStyle::OneOf, mode: true },
        sessions: true,
    },
    Behaviour { version: "2026-07-28", batches: false, elicitation: Elicitation::OnResult, sessions: false },
];

/// The only version whose clients may send batches (named in refusals).
pub fn batch_versions() -> impl Iterator<Item = &'static str> {
    VERSIONS.iter().filter(|b| b.batches).map(|b| b.version)
}

/// The behaviour of `version`: its row, or the row of the newest version before it (the oldest row for a
/// version before every row).
pub fn behaviour(version: &str) -> &'static Behaviour {
    VERSIONS.iter().rev().find(|b| b.version <= version).unwrap_or(&VERSIONS[0])
}

/// The newest version that has sessions (what the HTTP server offers at most).
pub fn newest_with_sessions() -> &'static str {
    VERSIONS.iter().rev().find(|b| b.sessions).map_or(VERSIONS[0].version, |b| b.version)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn every_version_finds_its_row_and_others_the_row_before() {
        for row in VERSIONS {
            assert_eq!(behaviour(row.version), row);
        }
        assert_eq!(behaviour("2025-07-01").version, "2025-06-18");
        assert_eq!(behaviour("2099-01-01").version, "2026-07-28");
        assert_eq!(behaviour("2000-01-01").version, "2024-11-05");
        assert_eq!(behaviour("").version, "2024-11-05");
        assert_eq!(batch_versions().collect::<Vec<_>>(), ["2025-03-26"]);
        assert_eq!(newest_with_sessions(), "2025-11-25");
        assert!(VERSIONS.windows(2).all(|w| w[0].version < w[1].version), "sorted");
    }

    /// The table agrees with rmcp's names of the versions.
    #[test]
    fn the_table_names_rmcps_versions() {
        use rmcp::model::ProtocolVersion;
        for version in [
            ProtocolVersion::V_2024_11_05,
            ProtocolVersion::V_2025_03_26,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2025_11_25,
            ProtocolVersion::V_2026_07_28,
        ] {
            assert_eq!(behaviour(version.as_str()).version, version.as_str());
        }
    }
}
