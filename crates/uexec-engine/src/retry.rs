//! Stage 6 of `exec_command`: the early-exit grace, and the retry outside the sandbox after a denial.
//!
//! A sandboxed command that ends within the grace with output that looks like a sandbox denial
//! (`uexec_domain::denial`) may run again outside the sandbox when the approval policy retries (`on-failure`,
//! `untrusted`). Leaving the sandbox is a decision about this command: it needs a person's approval of this very
//! command (its run question said a retry may follow) or a session approval of it, and nothing planted (the
//! retry is checked like an escalation, `crate::outside`); otherwise a person is asked, shown the denial and told
//! the retry has full access. When nobody approves, the sandboxed run's output comes back with a note.

use std::sync::Arc;
use std::time::Duration;

use uexec_domain::approval::{RetryDecision, no_retry_note, retry_after_denial, retry_question};
use uexec_domain::denial::{DenialEvidence, evidence_from};
use uexec_domain::question::{OutsideQuestion, planted_warning};
use uexec_domain::{EscapeReason, ReviewDecision};
use uexec_ports::{ApprovalKind, ApprovalRequest};

use crate::approvals::Covers;
use crate::engine::approve::Approval;
use crate::engine::{Attempt, Call, Orchestrator, Reservation, Run};
use crate::error::ExecError;
use crate::outside::OutsideRun;
use crate::placement::Placement;

impl Orchestrator {
    /// The grace after the first attempt, and the retry outside the sandbox when a denial is seen and the
    /// retry is approved (see the module documentation). Returns the attempt whose output the call returns.
    pub(crate) async fn grace_and_retry(
        &self,
        call: &Call,
        approval: &Approval,
        run: &Run,
        reservation: &mut Reservation<'_>,
        attempt: Attempt,
        window: Duration,
    ) -> Result<Attempt, ExecError> {
        let policy = self.config.approval_policy;
        if run.placement != Placement::Sandboxed
            || retry_after_denial(policy, false, false, false) == RetryDecision::NoRetry
        {
            return Ok(attempt);
        }
        let session = &attempt.session;
        let grace = Duration::from_millis(self.config.limits.early_exit_grace_ms);
        let grace_end =
            session.started.checked_add(grace).map_or(attempt.deadline, |end| end.min(attempt.deadline));
        if !session.wait_finished(grace_end).await {
            return Ok(attempt);
        }
        let exit_code = session.snapshot().exit_code.unwrap_or(-1);
        // The sandbox's evidence when it can give some; the keyword heuristic only where it cannot.
        let output = session.peek_output();
        let refusals =
            attempt.watch.as_ref().and_then(|watch| self.refusals(watch, &output, Some(exit_code)));
        let Some(evidence) = evidence_from(exit_code, &output, refusals) else { return Ok(attempt) };
        // The response's refusal note names what was refused; the note of a denial not retried says only why.
        let bare = DenialEvidence { refusals: Vec::new(), ..evidence.clone() };
        // A retry runs outside the sandbox: checked like an escalation. An approval given before covers it only
        // when nothing could have been planted and its environment is the one the person approved.
        let check = OutsideRun::check(&run.spawned, &run.base.cwd, &run.base.env, &call.writes).await;
        let plantable = approval.plantable.clone().or_else(|| check.planted.clone());
        let clean = plantable.is_none() && check.removed.is_empty();
        let decision = retry_after_denial(
            policy,
            approval.by_person && clean,
            clean && self.approvals.covers(&approval.key, &Covers::Retry { planted: None }),
            evidence.confirmed_by_sandbox(),
        );
        if decision == RetryDecision::NoRetry {
            return Ok(attempt);
        }
        tracing::info!(session_id = %run.spec.id, exit_code, "sandbox denial detected within the grace");
        if decision == RetryDecision::AskThenRetry {
            let mut warnings = Vec::new();
            if let Some(why) = &plantable {
                warnings.push(planted_warning(why, OutsideQuestion::Retry));
            }
            if !evidence.confirmed_by_sandbox() {
                warnings.push(
                    "The sandbox recorded no refusal: only the command's own output says it was blocked."
                        .to_owned(),
                );
            }
            warnings.extend(check.removed_text());
            let request = ApprovalRequest {
                call_id: call.call_id.clone(),
                session_id: run.spec.id,
                command: call.command.clone(),
                cwd: run.spec.cwd.clone(),
                kind: ApprovalKind::RetryWithoutSandbox,
                reason: Some(retry_question()),
                warnings,
                denial: Some(evidence.clone()),
                prefix_offer: None,
            };
            // A session approval of this question covers later retries only, never a run question.
            let shown = Covers::Retry { planted: plantable.as_ref().map(ToString::to_string) };
            let deadline = self.question_deadline(call.max_wait);
            let note = match self.ask_decision(request, &approval.key, shown, deadline).await {
                Ok(answer) if answer.is_approved() => None,
                // "Stop the task": the call fails as a rejection.
                Ok(ReviewDecision::Abort) => {
                    reservation.remove(session);
                    return Err(ExecError::Rejected);
                }
                // The command ran: its output is returned, with what happened to the retry.
                Ok(_) => Some(no_retry_note(&bare, "a person declined to run it without the sandbox")),
                Err(error) => Some(no_retry_note(&bare, &error.to_string())),
            };
            if note.is_some() {
                return Ok(Attempt { note, ..attempt });
            }
        }
        let Attempt { session, guard, .. } = attempt;
        reservation.detached(&session);
        drop(guard);
        let outside = Placement::Unsandboxed(EscapeReason::RetryAfterDenial);
        let mut base = run.base.clone();
        base.env = check.env;
        let retry_spawn = self.with_snapshot(run.snapshot, &call.shell, outside, base).await;
        let session = self.start_attempt(&run.spec, outside, retry_spawn)?;
        let guard = Arc::clone(&session.call_lock).lock_owned().await;
        if let Err(error) = reservation.stored(&session) {
            session.terminate().await;
            return Err(error);
        }
        let deadline = session.started + window;
        Ok(Attempt { session, guard, deadline, note: None, sandboxed: false, watch: None })
    }
}
