//! Pure approval decisions (spec A6): the approval cache key, what a command needs before its first run, and
//! whether a sandbox denial may be retried outside the sandbox (and whether that retry must ask).
//!
//! The engine owns the cache, the approver and the events; everything here is a function of values, so every
//! policy combination is tested without a process or a person.
//!
//! The decision table for the first run (first matching row wins):
//!
//! | # | condition                                   | requirement                                        |
//! |---|---------------------------------------------|----------------------------------------------------|
//! | 1 | a command rule says `forbid`                | [`Requirement::Forbidden`]                         |
//! | 2 | escalation asked, policy is `never`          | [`Requirement::EscalationNotAllowed`] (nobody can be asked) |
//! | 3 | escalation asked (any other policy)         | ask ([`AskReason::Escalation`]), even if known-safe or allowed by a rule: a stricter policy asks, never refuses |
//! | 4 | a command rule says `ask`                   | ask ([`AskReason::Rule`]); `never` -> forbidden    |
//! | 5 | a command rule says `allow`                 | [`Requirement::Skip`]                              |
//! | 6 | policy `untrusted`, not known-safe          | ask ([`AskReason::Untrusted`])                     |
//! | 7 | anything else                               | [`Requirement::Skip`]                              |
//!
//! An `allow` rule pre-approves running a command *inside* the sandbox; it never pre-approves leaving it:
//! escalation always asks a person (row 3), and so does a retry without the sandbox unless a person already
//! approved the command ([`retry_after_denial`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::command::ParsedCommand;
use crate::denial::DenialEvidence;
use crate::policy::{ApprovalPolicy, SandboxPermissions};
use crate::rules::RuleDecision;

/// Why the engine asks a person (the kind of question, `crate::question::headline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// The approval policy needs a person's yes before the first run (e.g. `untrusted` and not known-safe).
    Run,
    /// The caller asked to run outside the sandbox (`require_escalated`).
    Escalation,
    /// The sandbox denied the command; may it run again without the sandbox?
    RetryWithoutSandbox,
}

/// What a remembered "approved for session" decision is keyed by: the canonical command (a `bash -lc` script
/// that is one plain command is keyed as that command's argv, so `bash -lc 'ls -la'` and `ls -la` share a
/// key), the working directory, whether it runs in a PTY, and the sandbox permissions asked for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ApprovalKey {
    /// The canonical command (see [`ParsedCommand::canonical`]).
    pub command: Vec<String>,
    /// The working directory.
    pub cwd: PathBuf,
    /// Whether the command runs in a PTY.
    pub tty: bool,
    /// What the caller asked for.
    pub permissions: SandboxPermissions,
}

impl ApprovalKey {
    /// The key for `command` run in `cwd`.
    pub fn new(command: &ParsedCommand, cwd: &Path, tty: bool, permissions: SandboxPermissions) -> Self {
        ApprovalKey { command: command.canonical(), cwd: cwd.to_path_buf(), tty, permissions }
    }
}

/// Why a person must be asked before the first run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AskReason {
    /// The caller asked to run outside the sandbox (`require_escalated`).
    Escalation,
    /// A command rule says `ask`.
    Rule,
    /// The policy is `untrusted` and the command is not known-safe.
    Untrusted,
}

impl AskReason {
    /// The engine's question when the caller gave no justification.
    pub fn default_question(self) -> &'static str {
        match self {
            AskReason::Escalation => "run this command outside the sandbox?",
            AskReason::Rule => "a command rule requires approval for this command; run it?",
            AskReason::Untrusted => {
                "this command is not on the known-safe list (approval policy untrusted); run it?"
            }
        }
    }
}

/// What a command needs before its first run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Requirement {
    /// Run it without asking.
    Skip,
    /// Ask a person first (unless a remembered session approval covers the command).
    Ask(AskReason),
    /// Refuse it; the text says what refused it and which setting would allow it.
    Forbidden(String),
    /// The caller asked for escalation under a policy that does not accept it.
    EscalationNotAllowed,
}

/// Everything the first-run decision depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalInput {
    /// The approval policy in force.
    pub policy: ApprovalPolicy,
    /// What the caller asked for.
    pub permissions: SandboxPermissions,
    /// Whether the command is known-safe: read-only words (`uexec_domain::command::ParsedCommand::is_read_only`) and
    /// nothing it runs chosen by a file in a writable root (`uexec_domain::known_safe::check_known_safe`).
    pub known_safe: bool,
    /// What the command rules say about it, if any rule matches (`uexec_domain::rules::CommandRules::evaluate`).
    pub rule: Option<RuleDecision>,
}

/// What `input` needs before its first run (see the table in the module documentation).
pub fn initial_requirement(input: &ApprovalInput) -> Requirement {
    let escalation = input.permissions == SandboxPermissions::RequireEscalated;
    if input.rule == Some(RuleDecision::Forbid) {
        return Requirement::Forbidden(
            "the command is forbidden by a command rule (decision `forbid`); change or remove that rule to allow it"
                .to_owned(),
        );
    }
    if escalation {
        // A stricter policy (`untrusted`, `on-failure`) asks too: only `never`, which asks nobody, refuses.
        if input.policy == ApprovalPolicy::Never {
            return Requirement::EscalationNotAllowed;
        }
        return Requirement::Ask(AskReason::Escalation);
    }
    match input.rule {
        Some(RuleDecision::Ask) => {
            if input.policy == ApprovalPolicy::Never {
                return Requirement::Forbidden(
                    "the command needs approval because a command rule says `ask`, but the approval policy is \
                     `never`; use approval policy `on-request` (or change the rule to `allow`) to run it"
                        .to_owned(),
                );
            }
            return Requirement::Ask(AskReason::Rule);
        }
        Some(RuleDecision::Allow) => return Requirement::Skip,
        Some(RuleDecision::Forbid) | None => {}
    }
    if input.policy == ApprovalPolicy::Untrusted && !input.known_safe {
        return Requirement::Ask(AskReason::Untrusted);
    }
    Requirement::Skip
}

/// What to do when a sandboxed first attempt was denied by the sandbox within the early-exit grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryDecision {
    /// No retry: the denial is returned as ordinary output with its exit code.
    NoRetry,
    /// Retry outside the sandbox without asking (a person already approved this command).
    RetryWithoutAsking,
    /// Ask `command failed; retry without sandbox?` first.
    AskThenRetry,
}

/// The question asked before a retry outside the sandbox (spec A6); [`retry_question`] adds what the denial was
/// and what the retry may do.
pub const RETRY_QUESTION: &str = "command failed; retry without sandbox?";

/// The engine's question before a retry outside the sandbox: [`RETRY_QUESTION`] and that the retry has full
/// access. The evidence is shown beside it, as data, with where it comes from (`crate::question`).
pub fn retry_question() -> String {
    format!(
        "{RETRY_QUESTION} The retry runs with FULL ACCESS (no sandbox): it can write anywhere this user can and \
         reach the network."
    )
}

/// The note returned with a sandboxed run's output when it looked denied but was not retried outside the
/// sandbox; `why` says why not (no person could be asked, a person said no).
pub fn no_retry_note(evidence: &DenialEvidence, why: &str) -> String {
    format!(
        "the sandbox appears to have blocked this command ({}); it was not run again without the sandbox ({why}). \
         The output is the sandboxed run's.",
        evidence.describe()
    )
}

/// Whether a sandbox denial may be retried outside the sandbox, and whether that retry must ask.
///
/// Only `on-failure` and `untrusted` retry. The retry asks unless `approved_by_person` (a person approved the
/// first attempt in this call with [`crate::ReviewDecision::ApprovedWithRetry`]: "and rerun it without the
/// sandbox if it is blocked"; a plain approval is for the sandbox only) or `session_approval` (an earlier retry
/// question of this command was approved for the session), and even then unless the sandbox itself recorded what it refused (`confirmed`,
/// [`DenialEvidence::confirmed_by_sandbox`]): a denial that only the command's output shows is the command's
/// own word, and never takes it outside the sandbox unasked.
pub fn retry_after_denial(
    policy: ApprovalPolicy,
    approved_by_person: bool,
    session_approval: bool,
    confirmed: bool,
) -> RetryDecision {
    match policy {
        ApprovalPolicy::OnFailure | ApprovalPolicy::Untrusted => {
            if (approved_by_person || session_approval) && confirmed {
                RetryDecision::RetryWithoutAsking
            } else {
                RetryDecision::AskThenRetry
            }
        }
        ApprovalPolicy::OnRequest | ApprovalPolicy::Never => RetryDecision::NoRetry,
    }
}

/// Whether a host off the domain allowlist is offered to a person before it is refused. Only under
/// `on-request`, the policy under which the caller asks for what it needs; under `untrusted` and `on-failure`
/// the allowlist is the person's standing answer for sandboxed commands, and `never` asks nobody.
pub fn asks_about_hosts(policy: ApprovalPolicy) -> bool {
    policy == ApprovalPolicy::OnRequest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_on_request_offers_a_host_off_the_allowlist_to_a_person() {
        assert!(asks_about_hosts(ApprovalPolicy::OnRequest));
        for policy in [ApprovalPolicy::Untrusted, ApprovalPolicy::OnFailure, ApprovalPolicy::Never] {
            assert!(!asks_about_hosts(policy), "{policy:?}");
        }
    }

    fn input(
        policy: ApprovalPolicy,
        escalated: bool,
        known_safe: bool,
        rule: Option<RuleDecision>,
    ) -> ApprovalInput {
        ApprovalInput {
            policy,
            permissions: if escalated {
                SandboxPermissions::RequireEscalated
            } else {
                SandboxPermissions::UseDefault
            },
            known_safe,
            rule,
        }
    }

    const POLICIES: [ApprovalPolicy; 4] = [
        ApprovalPolicy::Untrusted,
        ApprovalPolicy::OnFailure,
        ApprovalPolicy::OnRequest,
        ApprovalPolicy::Never,
    ];

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    fn parsed(words: &[&str]) -> ParsedCommand {
        ParsedCommand::new(argv(words))
    }

    #[test]
    fn key_uses_the_canonical_command() {
        let cwd = Path::new("/w");
        let script =
            ApprovalKey::new(&parsed(&["bash", "-lc", "ls -la"]), cwd, false, SandboxPermissions::UseDefault);
        let plain = ApprovalKey::new(&parsed(&["ls", "-la"]), cwd, false, SandboxPermissions::UseDefault);
        assert_eq!(script, plain);
        assert_eq!(plain.command, argv(&["ls", "-la"]));
    }

    #[test]
    fn key_distinguishes_cwd_tty_permissions_and_compound_scripts() {
        let base = ApprovalKey::new(&parsed(&["ls"]), Path::new("/w"), false, SandboxPermissions::UseDefault);
        assert_ne!(
            base,
            ApprovalKey::new(&parsed(&["ls"]), Path::new("/x"), false, SandboxPermissions::UseDefault)
        );
        assert_ne!(
            base,
            ApprovalKey::new(&parsed(&["ls"]), Path::new("/w"), true, SandboxPermissions::UseDefault)
        );
        assert_ne!(
            base,
            ApprovalKey::new(&parsed(&["ls"]), Path::new("/w"), false, SandboxPermissions::RequireEscalated)
        );
        let compound = ApprovalKey::new(
            &parsed(&["bash", "-lc", "ls && rm x"]),
            Path::new("/w"),
            false,
            SandboxPermissions::UseDefault,
        );
        assert_eq!(compound.command, argv(&["bash", "-lc", "ls && rm x"]));
    }

    #[test]
    fn forbid_rule_wins_under_every_policy_and_with_escalation() {
        for policy in POLICIES {
            for escalated in [false, true] {
                for known_safe in [false, true] {
                    let r = initial_requirement(&input(
                        policy,
                        escalated,
                        known_safe,
                        Some(RuleDecision::Forbid),
                    ));
                    let Requirement::Forbidden(text) = r else {
                        unreachable!("expected forbidden, got {r:?}");
                    };
                    assert!(text.contains("command rule"), "{text}");
                }
            }
        }
    }

    #[test]
    fn escalation_always_asks_except_under_never() {
        for policy in POLICIES {
            for known_safe in [false, true] {
                for rule in [None, Some(RuleDecision::Allow), Some(RuleDecision::Ask)] {
                    let r = initial_requirement(&input(policy, true, known_safe, rule));
                    if policy != ApprovalPolicy::Never {
                        assert_eq!(
                            r,
                            Requirement::Ask(AskReason::Escalation),
                            "{policy:?} {known_safe} {rule:?}"
                        );
                    } else {
                        assert_eq!(r, Requirement::EscalationNotAllowed, "{policy:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn ask_rule_asks_even_under_on_request_and_is_refused_under_never() {
        for policy in [ApprovalPolicy::Untrusted, ApprovalPolicy::OnFailure, ApprovalPolicy::OnRequest] {
            assert_eq!(
                initial_requirement(&input(policy, false, true, Some(RuleDecision::Ask))),
                Requirement::Ask(AskReason::Rule)
            );
        }
        let r = initial_requirement(&input(ApprovalPolicy::Never, false, true, Some(RuleDecision::Ask)));
        let Requirement::Forbidden(text) = r else { unreachable!("expected forbidden, got {r:?}") };
        assert!(text.contains("never") && text.contains("on-request") && text.contains("ask"), "{text}");
    }

    #[test]
    fn allow_rule_skips_asking_even_when_untrusted() {
        for policy in POLICIES {
            assert_eq!(
                initial_requirement(&input(policy, false, false, Some(RuleDecision::Allow))),
                Requirement::Skip
            );
        }
    }

    #[test]
    fn untrusted_asks_unless_known_safe_other_policies_skip() {
        assert_eq!(
            initial_requirement(&input(ApprovalPolicy::Untrusted, false, false, None)),
            Requirement::Ask(AskReason::Untrusted)
        );
        assert_eq!(
            initial_requirement(&input(ApprovalPolicy::Untrusted, false, true, None)),
            Requirement::Skip
        );
        for policy in [ApprovalPolicy::OnFailure, ApprovalPolicy::OnRequest, ApprovalPolicy::Never] {
            for known_safe in [false, true] {
                assert_eq!(initial_requirement(&input(policy, false, known_safe, None)), Requirement::Skip);
            }
        }
    }

    #[test]
    fn retry_only_under_on_failure_and_untrusted() {
        for approved in [false, true] {
            for session in [false, true] {
                for confirmed in [false, true] {
                    for policy in [ApprovalPolicy::OnRequest, ApprovalPolicy::Never] {
                        assert_eq!(
                            retry_after_denial(policy, approved, session, confirmed),
                            RetryDecision::NoRetry
                        );
                    }
                }
            }
        }
        for policy in [ApprovalPolicy::OnFailure, ApprovalPolicy::Untrusted] {
            assert_eq!(retry_after_denial(policy, false, false, true), RetryDecision::AskThenRetry);
            assert_eq!(retry_after_denial(policy, true, false, true), RetryDecision::RetryWithoutAsking);
            assert_eq!(retry_after_denial(policy, false, true, true), RetryDecision::RetryWithoutAsking);
            // A denial only the output shows never leaves the sandbox unasked.
            for (approved, session) in [(true, false), (false, true), (true, true), (false, false)] {
                assert_eq!(retry_after_denial(policy, approved, session, false), RetryDecision::AskThenRetry);
            }
        }
    }

    #[test]
    fn every_question_is_a_question() {
        for reason in [AskReason::Escalation, AskReason::Rule, AskReason::Untrusted] {
            assert!(reason.default_question().ends_with('?'));
        }
        assert_eq!(RETRY_QUESTION, "command failed; retry without sandbox?");
        let evidence = DenialEvidence {
            exit_code: 1,
            line: Some("x: Permission denied\u{1b}]0;".into()),
            refusals: Vec::new(),
        };
        let question = retry_question();
        assert!(question.starts_with(RETRY_QUESTION), "{question}");
        assert!(question.contains("FULL ACCESS"), "{question}");
        assert!(!evidence.confirmed_by_sandbox() && evidence.provenance().contains("output"));
        let note = no_retry_note(&evidence, "no person could be asked");
        assert!(note.contains("not run again without the sandbox (no person could be asked)"), "{note}");
        assert!(!note.contains('\u{1b}'), "{note}");
    }
}
