//! The approver port: asks a person whether a command may run, or a host off the domain allowlist be reached.

use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uexec_domain::command::ParsedCommand;
use uexec_domain::denial::DenialEvidence;
use uexec_domain::{ReviewDecision, SessionId};

pub use uexec_domain::approval::ApprovalKind;

/// One question to a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The exec call this belongs to.
    pub call_id: String,
    /// The session id reserved for the command.
    pub session_id: SessionId,
    /// The command that would run, as the engine parsed it once (serialized as its argv): what a person is
    /// shown and what a refusal quotes are read from this, never from a second parse.
    pub command: ParsedCommand,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Why the engine asks.
    pub kind: ApprovalKind,
    /// The question shown to the person: the caller's justification, or the engine's reason (for a retry:
    /// `command failed; retry without sandbox?` and that the retry has full access). Bounded when shown.
    pub reason: Option<String>,
    /// The engine's own safety warnings (what a sandboxed command could have planted in what this runs, what
    /// was left out of its environment, that the only evidence of a denial is the command's output): shown
    /// first, each whole, never cut and never mixed with caller text or output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// A command prefix the person may approve for the rest of the session (the caller's `prefix_rule`,
    /// already checked by `uexec_domain::rules::session_prefix_offer`); answered with
    /// `ReviewDecision::ApprovedPrefixForSession`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_offer: Option<Vec<String>>,
    /// For [`ApprovalKind::RetryWithoutSandbox`]: what made the sandboxed run look denied (the command printed
    /// the line: display it escaped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denial: Option<DenialEvidence>,
}

/// The domain allowlist's question to a person: may sandboxed commands reach `host` for the rest of the
/// session? It belongs to no call (a proxied connection cannot be tied to one); the engine asks it
/// (`Engine::network_access`), remembers the answer and asks one at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkAccessRequest {
    /// The host asked for, normalised (ASCII letters, digits, `-`, `_`, `.`, or an IP literal).
    pub host: String,
    /// The port the command asked for (an allowed host is allowed on every port).
    pub port: u16,
    /// The allowlist in words, made of parsed patterns (no control character, no line break).
    pub rules: String,
}

/// Why no decision could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// Nobody can be asked (no interactive client); the message says what would need approval.
    #[error("approval unavailable: {0}")]
    Unavailable(String),
    /// The channel to the person broke while asking.
    #[error("approval request failed: {0}")]
    Failed(String),
    /// Nobody answered before the question's deadline (seconds): the command did not run.
    #[error(
        "nobody answered the approval question within {0} s, so the command did not run; ask the person to \
         answer sooner, or run something that needs no approval"
    )]
    Unanswered(u64),
}

/// Asks a person. Implementations: an MCP elicitation, a terminal prompt, a fixed answer for automation.
///
/// Contract: called at most once per question; the engine caches `ApprovedForSession` itself, so an
/// implementation need not remember anything. Cancelling the future abandons the question.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Approver: Send + Sync {
    /// Ask, and wait for the answer.
    async fn request_approval(&self, request: ApprovalRequest) -> Result<ReviewDecision, ApprovalError>;

    /// Ask the domain allowlist's question ([`NetworkAccessRequest`]), and wait for the answer: an approval
    /// allows the host for the session, anything else refuses it. By default nobody can be asked.
    async fn request_network_access(
        &self,
        request: NetworkAccessRequest,
    ) -> Result<ReviewDecision, ApprovalError> {
        Err(ApprovalError::Unavailable(format!(
            "nobody can be asked whether sandboxed commands may reach {}",
            request.host
        )))
    }
}
