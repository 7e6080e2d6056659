//! The approver port: asks a person whether a command may run.

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
    /// `command failed; retry without sandbox?`, what the denial was, and that the retry has full access).
    pub reason: Option<String>,
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
}
