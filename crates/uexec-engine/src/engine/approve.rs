//! The approval stage of `exec_command`: what a person decides, and what is remembered of it.
//!
//! A call is bypassed (the policy or a rule says so, or it is known safe), covered by what a person approved
//! earlier (a session approval of this command, or a prefix approved for this directory and repository, each
//! only with the planted reason the person was shown: `crate::outside`), or asked. The retry after a denial
//! (`crate::retry`) asks through [`Orchestrator::ask_decision`] too, so every decision and every remembered
//! approval passes here. So does the domain allowlist's question about a host ([`Orchestrator::network_access`]),
//! which the proxy asks through the engine: one cache of what a person answered, one port to the person.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use uexec_domain::approval::{
    ApprovalInput, ApprovalKey, AskReason, Requirement, asks_about_hosts, initial_requirement,
};
use uexec_domain::command::ParsedCommand;
use uexec_domain::known_safe::NotKnownSafe;
use uexec_domain::rules::{approved_prefixes_admit, session_prefix_offer};
use uexec_domain::trust::SandboxWrites;
use uexec_domain::{ApprovalPolicy, ReviewDecision, SandboxPermissions, SessionId};
use uexec_ports::{ApprovalError, ApprovalKind, ApprovalRequest, ExecEvent, NetworkAccessRequest};

use crate::approvals::Covers;
use crate::engine::{Call, Orchestrator};
use crate::error::ExecError;
use crate::known_safe::{Analysis, verdict};
use crate::outside::OutsideRun;

/// The outcome of the approval step.
#[derive(Debug)]
pub(crate) struct Approval {
    /// A person approved this call's command just now, and a rerun without the sandbox if it is blocked
    /// (`ReviewDecision::ApprovedWithRetry`).
    pub(crate) by_person: bool,
    /// Set when the command's words are read-only but something it runs could have been planted by a sandboxed
    /// command (a writable repository's config, a `PATH` directory), saying what: a denial may be that planted
    /// program asking to be let out, so no earlier approval covers a retry outside the sandbox. Only worked out
    /// under `untrusted` here; under `on-failure` at the retry.
    pub(crate) plantable: Option<NotKnownSafe>,
    /// The command was approved to run outside the sandbox.
    pub(crate) escalate: bool,
    pub(crate) key: ApprovalKey,
}

/// What could have been planted, when `verdict` says a command with read-only words is not known safe.
fn plantable_reason(verdict: &Result<(), NotKnownSafe>) -> Option<NotKnownSafe> {
    match verdict {
        Err(why) if *why != NotKnownSafe::NotReadOnly => Some(why.clone()),
        _ => None,
    }
}

impl Orchestrator {
    /// Whether a prefix a person approved for the session admits `command` run in `cwd` with `permissions` and
    /// the planted reason `planted`: approved for those permissions, in that working directory and repository
    /// (a prefix given in the workspace says nothing about another repository), with the same planted reason,
    /// and covering every command of the script (`uexec_domain::rules::approved_prefixes_admit`: never a form
    /// that runs other code, and a longer configured `ask` rule still asks).
    fn prefix_admits(
        &self,
        command: &ParsedCommand,
        cwd: &Path,
        permissions: SandboxPermissions,
        planted: Option<&str>,
    ) -> bool {
        let matching = self.approvals.prefixes_for(cwd, permissions, planted);
        !matching.is_empty() && approved_prefixes_admit(&self.config.rules, &matching, command)
    }

    /// Ask a person; remembers "approved for session" as covering what the question showed (`covers`).
    pub(crate) async fn ask(
        &self,
        request: ApprovalRequest,
        key: &ApprovalKey,
        covers: Covers,
        deadline: Duration,
    ) -> Result<ReviewDecision, ExecError> {
        match self.ask_decision(request, key, covers, deadline).await {
            Ok(decision) if decision.is_approved() => Ok(decision),
            Ok(_) => Err(ExecError::Rejected),
            Err(error) => Err(ExecError::ApprovalUnavailable(error)),
        }
    }

    /// How long a question of a call whose client waits `max_wait` may wait for a person: the configured
    /// deadline (`[limits] approval_timeout_ms`), and never past the moment the client gives up on the call.
    pub(crate) fn question_deadline(&self, max_wait: Option<Duration>) -> Duration {
        let configured = Duration::from_millis(self.config.limits.approval_timeout_ms);
        max_wait.map_or(configured, |wait| configured.min(wait))
    }

    /// Ask a person and return the decision (or why none could be had); remembers "approved for session" as
    /// covering what the question showed (`covers`). A question unanswered after `deadline` is abandoned: the
    /// call gets a refusal the model can act on.
    pub(crate) async fn ask_decision(
        &self,
        request: ApprovalRequest,
        key: &ApprovalKey,
        covers: Covers,
        deadline: Duration,
    ) -> Result<ReviewDecision, ApprovalError> {
        let call_id = request.call_id.clone();
        let prefix_offer = request.prefix_offer.clone();
        let cwd = request.cwd.clone();
        self.deps.events.emit(ExecEvent::ApprovalRequested { request: request.clone() });
        let answer = match tokio::time::timeout(deadline, self.deps.approver.request_approval(request)).await
        {
            Ok(answer) => answer,
            Err(_) => Err(ApprovalError::Unanswered(deadline.as_secs())),
        };
        match answer {
            Ok(decision) => {
                self.deps.events.emit(ExecEvent::ApprovalDecided {
                    call_id,
                    decision: Some(decision),
                    error: None,
                });
                if decision == ReviewDecision::ApprovedPrefixForSession
                    && let Some(prefix) = prefix_offer
                {
                    let planted = covers.planted().map(str::to_owned);
                    self.approvals.remember_prefix(key.permissions, prefix, cwd, planted);
                }
                if decision == ReviewDecision::ApprovedForSession {
                    self.approvals.remember(key, covers);
                }
                Ok(decision)
            }
            Err(error) => {
                self.deps.events.emit(ExecEvent::ApprovalDecided {
                    call_id,
                    decision: None,
                    error: Some(error.to_string()),
                });
                Err(error)
            }
        }
    }

    /// Whether `command` run in `cwd` with `env` is known safe (`Ok`): read-only words, and nothing it runs chosen
    /// by a file that a sandboxed command can write (`uexec_domain::known_safe`, over `writes`).
    pub(crate) async fn known_safe(
        &self,
        command: &ParsedCommand,
        cwd: &Path,
        env: &[(OsString, OsString)],
        writes: &SandboxWrites,
    ) -> Result<(), NotKnownSafe> {
        verdict(Analysis::KnownSafe, command, cwd, env, writes).await
    }

    /// The approval stage: bypass, remembered (a session approval or an approved prefix, each only for what the
    /// person was shown), or a question. `call.outside` is the checked form of an escalation (`crate::outside`).
    pub(crate) async fn approve(&self, call: &Call, id: SessionId) -> Result<Approval, ExecError> {
        let Call { call_id, command, cwd, env, writes, .. } = call;
        let (tty, permissions, outside) = (call.tty, call.permissions, call.outside.as_ref());
        let (justification, prefix_rule) = (call.justification.as_deref(), call.prefix_rule.as_deref());
        let policy = self.config.approval_policy;
        let key = ApprovalKey::new(command, cwd, tty, permissions);
        // Only `untrusted` consults it (and it costs a few file-system lookups).
        let verdict = match policy {
            ApprovalPolicy::Untrusted => self.known_safe(command, cwd, env, writes).await,
            _ => Err(NotKnownSafe::NotReadOnly),
        };
        let plantable = plantable_reason(&verdict);
        let input = ApprovalInput {
            policy,
            permissions,
            known_safe: verdict.is_ok(),
            rule: self.config.rules.evaluate(command),
        };
        let reason = match initial_requirement(&input) {
            Requirement::Skip => {
                return Ok(Approval { by_person: false, escalate: false, plantable, key });
            }
            Requirement::Forbidden(text) => return Err(ExecError::Forbidden(text)),
            Requirement::EscalationNotAllowed => return Err(ExecError::EscalationNotAllowed(policy)),
            Requirement::Ask(reason) => reason,
        };
        let escalate = permissions == SandboxPermissions::RequireEscalated;
        // What the person must have been shown for an earlier approval to cover this run outside the sandbox.
        let planted = outside.and_then(OutsideRun::planted_text);
        // Code a sandboxed command can write runs: what runs now may not be what was approved (`WritableCode`).
        let coverable = outside.and_then(|o| o.planted.as_ref()).is_none_or(NotKnownSafe::is_coverable);
        let covers = Covers::Run { planted };
        if coverable
            && (self.approvals.covers(&key, &covers)
                || self.prefix_admits(command, cwd, permissions, covers.planted()))
        {
            return Ok(Approval { by_person: false, escalate, plantable, key });
        }
        if policy == ApprovalPolicy::Never {
            return Err(ExecError::Forbidden(format!(
                "the command needs approval ({}) but the approval policy is `never`; use approval policy \
                 `on-request` to be asked",
                reason.default_question()
            )));
        }
        let kind = if escalate { ApprovalKind::Escalation } else { ApprovalKind::Run };
        // The caller's justification is the question for an escalation only (spec: `justification`); for a run
        // that a command rule or the untrusted policy sends to a person, the engine's reason stays what is shown.
        let question = match (justification, &verdict) {
            (Some(text), _) if escalate => text.to_owned(),
            // Read-only words, but something it runs could have been planted: say what.
            (_, Err(why)) if reason == AskReason::Untrusted && *why != NotKnownSafe::NotReadOnly => {
                uexec_domain::question::planted_reason(why)
            }
            _ => reason.default_question().to_owned(),
        };
        // The agent's justification is shown with every question, as the caller's text (bounded when shown).
        let question = match justification {
            Some(text) if !escalate => format!("{question}\nThe agent's justification: {text}"),
            _ => question,
        };
        let warnings = outside.map(OutsideRun::warnings).unwrap_or_default();
        let request = ApprovalRequest {
            call_id: call_id.to_owned(),
            session_id: id,
            command: command.clone(),
            cwd: cwd.to_path_buf(),
            kind,
            reason: Some(question),
            warnings,
            prefix_offer: prefix_rule
                .filter(|_| coverable)
                .and_then(|prefix| session_prefix_offer(prefix, command)),
            denial: None,
        };
        let decision = self.ask(request, &key, covers, self.question_deadline(call.max_wait)).await?;
        // Only "and rerun it without the sandbox if it is blocked" lets a retry go unasked.
        let by_person = decision == ReviewDecision::ApprovedWithRetry;
        Ok(Approval { by_person, escalate, plantable, key })
    }

    /// The domain allowlist's question about `host` (asked for on `port`; `rules` is the allowlist in words):
    /// `Some(true)` when a person allowed it for the session, `Some(false)` when a person refused it, `None`
    /// when nobody can be asked (the host is then refused; a later connection may ask again). Asked only under
    /// `on-request` (`uexec_domain::approval::asks_about_hosts`), through the approver port like every other
    /// question, one at a time (connections to one host come in bursts), and remembered here with the
    /// session's other approvals: one host is never asked about twice.
    pub(crate) async fn network_access(&self, host: &str, port: u16, rules: &str) -> Option<bool> {
        if !asks_about_hosts(self.config.approval_policy) {
            return None;
        }
        if let Some(answer) = self.approvals.host(host) {
            return Some(answer);
        }
        let _one_at_a_time = self.approvals.one_host_question().await;
        if let Some(answer) = self.approvals.host(host) {
            return Some(answer);
        }
        let request = NetworkAccessRequest { host: host.to_owned(), port, rules: rules.to_owned() };
        // The same deadline as every other question (it belongs to no call, so no client wait shortens it).
        let deadline = self.question_deadline(None);
        let answer = tokio::time::timeout(deadline, self.deps.approver.request_network_access(request))
            .await
            .unwrap_or(Err(ApprovalError::Unanswered(deadline.as_secs())));
        match answer {
            Ok(decision) => {
                let allowed = decision.is_approved();
                tracing::info!(host, port, allowed, "a person answered for a host off the domain allowlist");
                self.approvals.remember_host(host, allowed);
                Some(allowed)
            }
            Err(error) => {
                tracing::debug!(host, %error, "nobody could be asked about a host off the domain allowlist");
                None
            }
        }
    }
}
