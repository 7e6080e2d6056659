//! What the sandbox refused a command, asked of the sandbox port (`Sandbox::refusals`) and noted once per
//! refusal: in the response (one note, `uexec_domain::denial::refusal_text`), as an `ExecEvent::Refused` (the
//! audit log's record), and as the evidence of a retry decision (`crate::retry`).
//!
//! A sandboxed attempt carries a [`RefusalWatch`]: the sandbox's refusal mark taken before it was prepared, and what the
//! sandbox needs to match the output against its plan. A session that stays alive keeps its watch, with the
//! refusals already noted, until it ends, so later `write_stdin` responses note only what is new.

use std::path::PathBuf;

use uexec_domain::SessionId;
use uexec_domain::denial::{Refusal, model_note};
use uexec_ports::{ExecEvent, RefusalQuery};

use crate::engine::Orchestrator;
use crate::session::Session;

/// What the engine keeps to ask the sandbox about one sandboxed attempt.
#[derive(Debug, Clone)]
pub(crate) struct RefusalWatch {
    /// The sandbox's refusal mark before the attempt was prepared.
    pub(crate) mark: u64,
    /// The attempt's `$TMPDIR` (a writable root of its plan).
    pub(crate) tmpdir: Option<PathBuf>,
    /// Where it started.
    pub(crate) cwd: PathBuf,
    /// The refusals already noted.
    pub(crate) noted: Vec<Refusal>,
}

impl Orchestrator {
    /// What the sandbox refused the attempt `watch` describes, given its `output` and `exit_code` (`None`: the
    /// sandbox cannot say, see `Sandbox::refusals`).
    pub(crate) fn refusals(
        &self,
        watch: &RefusalWatch,
        output: &[u8],
        exit_code: Option<i32>,
    ) -> Option<Vec<Refusal>> {
        let query = RefusalQuery {
            mark: watch.mark,
            policy: &self.config.sandbox_policy,
            workspace: &self.config.cwd,
            tmpdir: watch.tmpdir.as_deref(),
            cwd: &watch.cwd,
            output,
            exit_code,
        };
        self.deps.sandbox.refusals(&query)
    }

    /// The note for what the sandbox refused since `watch` last noted (`None` when nothing new), recorded as an
    /// event; `watch` then counts them as noted.
    pub(crate) fn note_refusals(
        &self,
        session: &Session,
        watch: &mut RefusalWatch,
        output: &[u8],
        exit_code: Option<i32>,
    ) -> Option<String> {
        let refusals = self.refusals(watch, output, exit_code)?;
        let new: Vec<Refusal> = refusals.into_iter().filter(|r| !watch.noted.contains(r)).collect();
        let mut fresh: Vec<Refusal> = Vec::new();
        for refusal in new {
            if !fresh.contains(&refusal) {
                fresh.push(refusal);
            }
        }
        if fresh.is_empty() {
            return None;
        }
        tracing::info!(session_id = %session.spec.id, refusals = fresh.len(), "the sandbox refused the command");
        self.deps.events.emit(ExecEvent::Refused {
            call_id: session.spec.call_id.clone(),
            session_id: session.spec.id,
            refusals: fresh.clone(),
        });
        let note = model_note(&fresh);
        watch.noted.extend(fresh);
        note
    }

    /// Keep `watch` for the live session `id` (its later responses note what is new).
    pub(crate) fn keep_watch(&self, id: SessionId, watch: RefusalWatch) {
        let mut watches = self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        watches.insert(id, watch);
    }

    /// The live session `id`'s watch, taken out (put it back with [`Orchestrator::keep_watch`] while it lives).
    pub(crate) fn take_watch(&self, id: SessionId) -> Option<RefusalWatch> {
        let mut watches = self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        watches.remove(&id)
    }
}

/// `note` and `more` as one note.
pub(crate) fn join_notes(note: Option<String>, more: Option<String>) -> Option<String> {
    match (note, more) {
        (Some(note), Some(more)) => Some(format!("{note} {more}")),
        (note, more) => note.or(more),
    }
}
