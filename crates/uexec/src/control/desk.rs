//! The person's desk of a server: the approval questions waiting for a person, which the operator page and
//! `uexec answer` may answer as the client's elicitation may, and the history of what was decided.
//!
//! One [`Desk`] per server, shared by every client's approver ([`DeskApprover`], in front of the client's own
//! `mcp::approval::McpApprover`), the control socket (`uexec sessions`, `uexec answer`) and the operator routes
//! of a listening server. Rules:
//! 1. Every question the engine asks goes through a [`DeskApprover`], which posts it here (numbered, with what
//!    the question shows: command, working directory, warnings, reason, kind, the whole rendered text) and asks
//!    the client at the same time.
//! 2. A question is answered once: whoever takes it off the desk first (the client's answer coming back, or
//!    [`Desk::answer`] from the page or the terminal) decides; the other finds it gone and is told it was
//!    answered. The client's form, when it is still shown, is abandoned (its late answer decides nothing).
//! 3. Who answered is an audit-log record (`question_answered`, `by`: `client`, `http` or `control`) and part of
//!    the history, with every person's decision, every refusal of the policy (`policy_refused`), of the sandbox
//!    (`sandbox_refused`, already in the audit log) and every decision about a host of the allowlist mode
//!    (`network_decision`).
//!
//! Only who may reach the routes answers: the holder of the listening server's token, or the same user through
//! the control socket (`super::peer`). Text a person reads is escaped here (`uexec_domain::question`), so the
//! page and the terminal show it as it is.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use uexec_domain::question::escape_visible;
use uexec_domain::{ApprovalPolicy, ReviewDecision, SandboxPolicy, SessionId};
use uexec_ports::{
    ApprovalError, ApprovalKind, ApprovalRequest, Approver, EventSink, ExecEvent, NetworkAccessRequest,
};

use crate::audit::AuditLog;
use crate::mcp::approval::FormStyle;

/// How many history entries a server keeps (the oldest go first; the audit log keeps everything).
pub const HISTORY_ENTRIES: usize = 1000;

/// Who answered a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answerer {
    /// The MCP client's elicitation.
    Client,
    /// The operator page or routes of a listening server (the token's holder).
    Http,
    /// `uexec answer` through the control socket (the same user); the peer's pid when known.
    Control(Option<i32>),
}

impl Answerer {
    fn name(self) -> &'static str {
        match self {
            Answerer::Client => "client",
            Answerer::Http => "http",
            Answerer::Control(_) => "control",
        }
    }
}

/// A waiting question as the page and `uexec sessions` show it: every text escaped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionView {
    /// Its number on this server (what `uexec answer` and the page name it by).
    pub id: u64,
    /// The client whose command asks (0 for a stdio server).
    pub client: u64,
    /// The session id reserved for the command (none for a host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// `run`, `escalation`, `retry_without_sandbox`, or `network` (a host off the allowlist).
    pub kind: String,
    /// The command on one line (or the host and port), escaped.
    pub command: String,
    /// Its working directory, escaped (empty for a host).
    pub cwd: String,
    /// Why it is asked, escaped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The engine's warnings, each escaped.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The prefix offered for the session, escaped, when the question offers one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The answers it takes, exactly the client's form's, in its order and with its titles.
    pub choices: Vec<Choice>,
    /// The whole question as the client's form shows it (`mcp::approval::question_text`).
    pub text: String,
    /// Milliseconds since it was asked.
    pub age_ms: u64,
}

/// One answer a question takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// What `uexec answer` and the page send: `approve`, `approve-retry`, `approve-session`, `approve-prefix`,
    /// `deny`.
    pub decision: String,
    /// What the client's form says of it (escaped).
    pub title: String,
}

/// The answers of a client's form (`elicit_params`'s `decision` property), named as the desk names them.
fn form_choices(form: Result<rmcp::model::ElicitRequestParams, ApprovalError>) -> (String, Vec<Choice>) {
    let Ok(form) = form else { return (String::new(), Vec::new()) };
    let value = serde_json::to_value(&form).unwrap_or_default();
    let message = value["message"].as_str().unwrap_or_default().to_owned();
    let choices = value["requestedSchema"]["properties"]["decision"]["oneOf"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|choice| {
            let form_value = choice["const"].as_str()?;
            // Read as the client's answer is read: one mapping of the form's values.
            let answer = rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({ "decision": form_value }));
            let decision = crate::mcp::approval::decision_from_elicit(&answer).ok()?;
            let title = escape_visible(choice["title"].as_str().unwrap_or(form_value));
            Some(Choice { decision: decision_name(decision).to_owned(), title })
        })
        .collect();
    (message, choices)
}

/// One entry of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// When (milliseconds since the epoch).
    pub unix_ms: u64,
    /// The client (0 for a stdio server).
    pub client: u64,
    /// The session, when the entry is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// `approved`, `approved_for_session`, `approved_prefix`, `denied`, `aborted`, `unanswered`,
    /// `refused_by_policy`, `refused_by_sandbox`, `host_allowed`, `host_denied`.
    pub outcome: String,
    /// Who decided: `client`, `http`, `control`, `policy`, `sandbox`.
    pub by: String,
    /// The command (or host), escaped.
    pub subject: String,
    /// More: the kind of question, the refusal, the prefix; escaped.
    #[serde(default)]
    pub detail: String,
}

/// What a [`Desk::answer`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The answer decides the question.
    Decided,
    /// No question with that number waits: never asked, or answered already (by anyone).
    NotWaiting,
    /// The decision is not one the question offers (a prefix where none was offered, or once for a host).
    NotOffered,
}

struct Waiting {
    view: QuestionView,
    asked: Instant,
    answer: oneshot::Sender<(ReviewDecision, Answerer)>,
}

/// The questions and the history of one server.
pub struct Desk {
    audit: Option<Arc<AuditLog>>,
    next_id: AtomicU64,
    waiting: Mutex<Vec<Waiting>>,
    history: Mutex<VecDeque<HistoryEntry>>,
}

impl std::fmt::Debug for Desk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desk").field("waiting", &lock(&self.waiting).len()).finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ms() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

/// `text` with every line escaped on its own (the line breaks kept): for a text whose lines uexec wrote.
fn escape_visible_lines(text: &str) -> String {
    text.split('\n').map(escape_visible).collect::<Vec<_>>().join("\n")
}

fn kind_name(kind: ApprovalKind) -> &'static str {
    match kind {
        ApprovalKind::Run => "run",
        ApprovalKind::Escalation => "escalation",
        ApprovalKind::RetryWithoutSandbox => "retry_without_sandbox",
    }
}

/// A decision as the page and the terminal name it.
pub fn parse_decision(text: &str) -> Option<ReviewDecision> {
    match text {
        "approve" => Some(ReviewDecision::Approved),
        "approve-retry" => Some(ReviewDecision::ApprovedWithRetry),
        "approve-session" => Some(ReviewDecision::ApprovedForSession),
        "approve-prefix" => Some(ReviewDecision::ApprovedPrefixForSession),
        "deny" => Some(ReviewDecision::Denied),
        _ => None,
    }
}

/// The name [`parse_decision`] reads.
fn decision_name(decision: ReviewDecision) -> &'static str {
    match decision {
        ReviewDecision::Approved => "approve",
        ReviewDecision::ApprovedWithRetry => "approve-retry",
        ReviewDecision::ApprovedForSession => "approve-session",
        ReviewDecision::ApprovedPrefixForSession => "approve-prefix",
        ReviewDecision::Denied | ReviewDecision::Abort => "deny",
    }
}

fn outcome_name(decision: ReviewDecision) -> &'static str {
    match decision {
        ReviewDecision::Approved => "approved",
        ReviewDecision::ApprovedWithRetry => "approved_with_retry",
        ReviewDecision::ApprovedForSession => "approved_for_session",
        ReviewDecision::ApprovedPrefixForSession => "approved_prefix",
        ReviewDecision::Denied => "denied",
        ReviewDecision::Abort => "aborted",
    }
}

impl Desk {
    /// An empty desk whose records go to `audit`.
    pub fn new(audit: Option<Arc<AuditLog>>) -> Arc<Desk> {
        Arc::new(Desk {
            audit,
            next_id: AtomicU64::new(1),
            waiting: Mutex::new(Vec::new()),
            history: Mutex::new(VecDeque::new()),
        })
    }

    /// The questions waiting now, oldest first.
    pub fn questions(&self) -> Vec<QuestionView> {
        lock(&self.waiting)
            .iter()
            .map(|w| {
                let mut view = w.view.clone();
                view.age_ms = u64::try_from(w.asked.elapsed().as_millis()).unwrap_or(u64::MAX);
                view
            })
            .collect()
    }

    /// The history, oldest first.
    pub fn history(&self) -> Vec<HistoryEntry> {
        lock(&self.history).iter().cloned().collect()
    }

    /// Answer question `id` for a person reached through `by`.
    pub fn answer(&self, id: u64, decision: ReviewDecision, by: Answerer) -> Answered {
        let mut waiting = lock(&self.waiting);
        let Some(index) = waiting.iter().position(|w| w.view.id == id) else {
            return Answered::NotWaiting;
        };
        if waiting
            .get(index)
            .is_none_or(|w| !w.view.choices.iter().any(|c| c.decision == decision_name(decision)))
        {
            return Answered::NotOffered;
        }
        let taken = waiting.remove(index);
        drop(waiting);
        // The asking call ended in between (it was cancelled): nothing runs, and nobody waits for an answer.
        if taken.answer.send((decision, by)).is_err() {
            return Answered::NotWaiting;
        }
        Answered::Decided
    }

    /// Post a question (its `id` is given here); the receiver gets a person's answer.
    fn post(&self, mut view: QuestionView) -> (u64, oneshot::Receiver<(ReviewDecision, Answerer)>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        view.id = id;
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).push(Waiting { view, asked: Instant::now(), answer: tx });
        (id, rx)
    }

    /// Take question `id` off the desk for the client's answer: `false` when a person answered it first.
    fn take(&self, id: u64) -> bool {
        let mut waiting = lock(&self.waiting);
        let before = waiting.len();
        waiting.retain(|w| w.view.id != id);
        waiting.len() != before
    }

    fn audit(&self, event: &str, fields: Value) {
        let Some(audit) = &self.audit else { return };
        let mut map = Map::new();
        map.insert("event".into(), json!(event));
        if let Value::Object(fields) = fields {
            map.extend(fields);
        }
        audit.record(map);
    }

    fn remember(&self, entry: HistoryEntry) {
        let mut history = lock(&self.history);
        if history.len() == HISTORY_ENTRIES {
            history.pop_front();
        }
        history.push_back(entry);
    }

    /// A command refused by a command rule or the approval policy (nobody was asked, or nobody could be).
    pub fn policy_refused(&self, client: u64, command: &str, cwd: Option<&str>, why: &str) {
        self.audit(
            "policy_refused",
            json!({ "client": client, "command": command, "cwd": cwd, "error": why }),
        );
        self.remember(HistoryEntry {
            unix_ms: now_ms(),
            client,
            session_id: None,
            outcome: "refused_by_policy".into(),
            by: "policy".into(),
            subject: escape_visible(command),
            detail: escape_visible(why),
        });
    }

    /// The events of client `client`'s engine, on their way to `next`: the sandbox's refusals join the history.
    pub fn events(self: &Arc<Self>, client: u64, next: Arc<dyn EventSink>) -> Arc<dyn EventSink> {
        Arc::new(DeskEvents { desk: Arc::clone(self), client, next })
    }
}

struct DeskEvents {
    desk: Arc<Desk>,
    client: u64,
    next: Arc<dyn EventSink>,
}

impl EventSink for DeskEvents {
    fn emit(&self, event: ExecEvent) {
        if let ExecEvent::Refused { session_id, refusals, .. } = &event {
            for refusal in refusals {
                self.desk.remember(HistoryEntry {
                    unix_ms: now_ms(),
                    client: self.client,
                    session_id: Some(*session_id),
                    outcome: "refused_by_sandbox".into(),
                    by: "sandbox".into(),
                    subject: escape_visible(&refusal.what()),
                    detail: String::new(),
                });
            }
        }
        self.next.emit(event);
    }
}

/// The approver of one client's engine: posts every question on the [`Desk`] and asks the client's own
/// approver at the same time; the first answer decides (module doc).
pub struct DeskApprover {
    inner: Arc<dyn Approver>,
    desk: Arc<Desk>,
    client: u64,
    sandbox: SandboxPolicy,
    policy: ApprovalPolicy,
}

impl std::fmt::Debug for DeskApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeskApprover").field("client", &self.client).finish_non_exhaustive()
    }
}

impl DeskApprover {
    /// Client `client`'s questions, asked of `inner` and posted on `desk`; `sandbox` and `policy` write their
    /// text as the client's form does.
    pub fn new(
        inner: Arc<dyn Approver>,
        desk: Arc<Desk>,
        client: u64,
        sandbox: SandboxPolicy,
        policy: ApprovalPolicy,
    ) -> Self {
        DeskApprover { inner, desk, client, sandbox, policy }
    }

    /// What the desk shows of a command's question.
    fn command_view(&self, request: &ApprovalRequest) -> QuestionView {
        let form = crate::mcp::approval::elicit_params(request, &self.sandbox, self.policy, FormStyle::OneOf);
        let (_, choices) = form_choices(form);
        QuestionView {
            id: 0,
            client: self.client,
            session_id: Some(request.session_id),
            kind: kind_name(request.kind).to_owned(),
            command: crate::mcp::approval::display_command(&request.command),
            cwd: escape_visible(&request.cwd.display().to_string()),
            reason: request.reason.as_deref().map(escape_visible),
            warnings: request.warnings.iter().map(|w| escape_visible(w)).collect(),
            prefix: request.prefix_offer.as_deref().map(crate::mcp::approval::display_words),
            choices,
            text: crate::mcp::approval::question_text(request, &self.sandbox, self.policy),
            age_ms: 0,
        }
    }

    /// What the desk shows of the question about a host (the client's form's text).
    fn host_view(&self, request: &NetworkAccessRequest) -> QuestionView {
        let form = crate::mcp::approval::domain_elicit_params(
            &request.host,
            request.port,
            &request.rules,
            FormStyle::OneOf,
        );
        let (text, choices) = form_choices(form);
        QuestionView {
            id: 0,
            client: self.client,
            session_id: None,
            kind: "network".to_owned(),
            command: escape_visible(&format!("{}:{}", request.host, request.port)),
            cwd: String::new(),
            reason: Some(escape_visible(&format!(
                "a sandboxed command asked for a host off the domain allowlist ({}); allowing it lets every \
                 sandboxed command of the session reach it",
                request.rules
            ))),
            warnings: Vec::new(),
            prefix: None,
            choices,
            text: escape_visible_lines(&text),
            age_ms: 0,
        }
    }

    /// Post `view` and ask `inner` at the same time: the first answer, and who gave it (module doc).
    async fn decide(
        &self,
        view: QuestionView,
        inner: impl Future<Output = Result<ReviewDecision, ApprovalError>>,
    ) -> (u64, Result<(ReviewDecision, Answerer), ApprovalError>) {
        let (id, mut from_person) = self.desk.post(view);
        // Off the desk however this future ends (a cancelled call drops it).
        let _unpost = Unpost { desk: &self.desk, id };
        let outcome = tokio::select! {
            answered = inner => {
                if self.desk.take(id) {
                    answered.map(|decision| (decision, Answerer::Client))
                } else {
                    // A person answered first: theirs decides.
                    match from_person.try_recv() {
                        Ok(answer) => Ok(answer),
                        Err(_) => Err(ApprovalError::Failed("the question was answered elsewhere".to_owned())),
                    }
                }
            }
            Ok(answer) = &mut from_person => Ok(answer),
        };
        (id, outcome)
    }

    fn decided(&self, id: u64, request: &ApprovalRequest, decision: ReviewDecision, by: Answerer) {
        let command = crate::mcp::approval::display_command(&request.command);
        let peer = match by {
            Answerer::Control(pid) => pid,
            _ => None,
        };
        self.desk.audit(
            "question_answered",
            json!({
                "question": id,
                "client": self.client,
                "call_id": request.call_id,
                "session_id": request.session_id,
                "kind": kind_name(request.kind),
                "decision": outcome_name(decision),
                "by": by.name(),
                "peer_pid": peer,
            }),
        );
        let detail = match (&request.prefix_offer, decision) {
            (Some(prefix), ReviewDecision::ApprovedPrefixForSession) => {
                format!("{}; prefix {}", kind_name(request.kind), crate::mcp::approval::display_words(prefix))
            }
            _ => kind_name(request.kind).to_owned(),
        };
        self.desk.remember(HistoryEntry {
            unix_ms: now_ms(),
            client: self.client,
            session_id: Some(request.session_id),
            outcome: outcome_name(decision).into(),
            by: by.name().into(),
            subject: command,
            detail,
        });
    }
}

#[async_trait]
impl Approver for DeskApprover {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
        let view = self.command_view(&request);
        let (id, outcome) = self.decide(view, self.inner.request_approval(request.clone())).await;
        let (decision, by) = outcome?;
        self.decided(id, &request, decision, by);
        Ok(decision)
    }

    async fn request_network_access(
        &self,
        request: NetworkAccessRequest,
    ) -> Result<ReviewDecision, ApprovalError> {
        let view = self.host_view(&request);
        let (host, port) = (request.host.clone(), request.port);
        let (id, outcome) = self.decide(view, self.inner.request_network_access(request)).await;
        let (decision, by) = outcome?;
        let allowed = decision.is_approved();
        let peer = match by {
            Answerer::Control(pid) => pid,
            _ => None,
        };
        self.desk.audit(
            "network_decision",
            json!({
                "question": id, "client": self.client, "host": host, "port": port, "allowed": allowed,
                "by": by.name(), "peer_pid": peer,
            }),
        );
        self.desk.remember(HistoryEntry {
            unix_ms: now_ms(),
            client: self.client,
            session_id: None,
            outcome: if allowed { "host_allowed" } else { "host_denied" }.into(),
            by: by.name().into(),
            subject: escape_visible(&format!("{host}:{port}")),
            detail: String::new(),
        });
        Ok(decision)
    }
}

/// Takes a question off the desk when its asking ends.
struct Unpost<'a> {
    desk: &'a Desk,
    id: u64,
}

impl Drop for Unpost<'_> {
    fn drop(&mut self) {
        self.desk.take(self.id);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use uexec_domain::command::ParsedCommand;

    use super::*;

    /// An approver whose answer comes when the test says.
    struct Slow(tokio::sync::Mutex<Option<oneshot::Receiver<ReviewDecision>>>);

    #[async_trait]
    impl Approver for Slow {
        async fn request_approval(&self, _: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
            let rx = self.0.lock().await.take().expect("asked once");
            rx.await.map_err(|_| ApprovalError::Failed("gone".into()))
        }

        async fn request_network_access(
            &self,
            _: NetworkAccessRequest,
        ) -> Result<ReviewDecision, ApprovalError> {
            let rx = self.0.lock().await.take().expect("asked once");
            rx.await.map_err(|_| ApprovalError::Failed("gone".into()))
        }
    }

    fn request(script: &str) -> ApprovalRequest {
        ApprovalRequest {
            call_id: "c".into(),
            session_id: SessionId(1000),
            command: ParsedCommand::new(vec!["/bin/bash".into(), "-lc".into(), script.into()]),
            cwd: "/work\u{202e}x".into(),
            kind: ApprovalKind::Run,
            reason: Some("because\u{1b}[2J".into()),
            warnings: vec!["planted\u{7}".into()],
            prefix_offer: None,
            denial: None,
        }
    }

    async fn waiting(desk: &Desk) -> QuestionView {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(q) = desk.questions().pop() {
                return q;
            }
            assert!(Instant::now() < deadline, "no question posted");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn approver(desk: &Arc<Desk>) -> (Arc<DeskApprover>, oneshot::Sender<ReviewDecision>) {
        let (tx, rx) = oneshot::channel();
        let inner = Arc::new(Slow(tokio::sync::Mutex::new(Some(rx))));
        let approver = DeskApprover::new(
            inner,
            Arc::clone(desk),
            3,
            SandboxPolicy::default(),
            ApprovalPolicy::Untrusted,
        );
        (Arc::new(approver), tx)
    }

    #[tokio::test]
    async fn a_person_answers_first_and_the_clients_late_answer_decides_nothing() {
        let desk = Desk::new(None);
        let (approver, client) = approver(&desk);
        let asking = tokio::spawn({
            let approver = Arc::clone(&approver);
            async move { approver.request_approval(request("make deploy")).await }
        });
        let question = waiting(&desk).await;
        assert_eq!((question.client, question.kind.as_str()), (3, "run"));
        assert_eq!(question.command, "make deploy");
        // Every fact, escaped.
        assert_eq!(question.cwd, "/work\\u{202e}x");
        assert_eq!(question.reason.as_deref(), Some("because\\u{1b}[2J"));
        assert_eq!(question.warnings, vec!["planted\\u{7}".to_owned()]);
        assert!(
            question.text.contains("make deploy") && !question.text.contains('\u{1b}'),
            "{}",
            question.text
        );
        // A prefix was not offered: not a choice.
        assert_eq!(
            desk.answer(question.id, ReviewDecision::ApprovedPrefixForSession, Answerer::Http),
            Answered::NotOffered
        );
        assert_eq!(desk.answer(question.id, ReviewDecision::Denied, Answerer::Http), Answered::Decided);
        assert_eq!(asking.await.unwrap().unwrap(), ReviewDecision::Denied);
        // Answered once: a second answer, and the client's, find nothing.
        assert_eq!(
            desk.answer(question.id, ReviewDecision::Approved, Answerer::Control(None)),
            Answered::NotWaiting
        );
        let _ = client.send(ReviewDecision::Approved);
        assert!(desk.questions().is_empty());
        let history = desk.history();
        assert_eq!(history.len(), 1);
        assert_eq!((history[0].outcome.as_str(), history[0].by.as_str()), ("denied", "http"));
    }

    #[tokio::test]
    async fn the_client_answers_first_and_the_page_finds_it_answered() {
        let desk = Desk::new(None);
        let (approver, client) = approver(&desk);
        let asking = tokio::spawn({
            let approver = Arc::clone(&approver);
            async move { approver.request_approval(request("ls")).await }
        });
        let question = waiting(&desk).await;
        client.send(ReviewDecision::ApprovedForSession).unwrap();
        assert_eq!(asking.await.unwrap().unwrap(), ReviewDecision::ApprovedForSession);
        assert_eq!(desk.answer(question.id, ReviewDecision::Denied, Answerer::Http), Answered::NotWaiting);
        let history = desk.history();
        assert_eq!((history[0].outcome.as_str(), history[0].by.as_str()), ("approved_for_session", "client"));
    }

    #[tokio::test]
    async fn a_cancelled_call_takes_its_question_off_the_desk() {
        let desk = Desk::new(None);
        let (approver, _client) = approver(&desk);
        let asking = tokio::spawn({
            let approver = Arc::clone(&approver);
            async move { approver.request_approval(request("ls")).await }
        });
        let question = waiting(&desk).await;
        asking.abort();
        let _ = asking.await;
        assert!(desk.questions().is_empty());
        assert_eq!(desk.answer(question.id, ReviewDecision::Approved, Answerer::Http), Answered::NotWaiting);
    }

    #[tokio::test]
    async fn a_question_about_a_host_is_answered_from_the_page_with_the_forms_choices() {
        let desk = Desk::new(None);
        let (approver, _client) = approver(&desk);
        let asking = tokio::spawn({
            let approver = Arc::clone(&approver);
            async move {
                let request =
                    NetworkAccessRequest { host: "pypi.org".into(), port: 443, rules: "github.com".into() };
                approver.request_network_access(request).await
            }
        });
        let question = waiting(&desk).await;
        assert_eq!((question.kind.as_str(), question.command.as_str()), ("network", "pypi.org:443"));
        assert_eq!((question.session_id, question.cwd.as_str()), (None, ""));
        assert!(question.text.contains("Allow network access to pypi.org?"), "{}", question.text);
        // Its form allows a host for the session or denies it: not once.
        assert_eq!(desk.answer(question.id, ReviewDecision::Approved, Answerer::Http), Answered::NotOffered);
        assert_eq!(
            desk.answer(question.id, ReviewDecision::ApprovedForSession, Answerer::Http),
            Answered::Decided
        );
        assert_eq!(asking.await.unwrap().unwrap(), ReviewDecision::ApprovedForSession);
        let history = desk.history();
        assert_eq!(
            (history[0].outcome.as_str(), history[0].by.as_str(), history[0].subject.as_str()),
            ("host_allowed", "http", "pypi.org:443")
        );
    }

    struct Nowhere;

    impl EventSink for Nowhere {
        fn emit(&self, _: ExecEvent) {}
    }

    #[test]
    fn refusals_of_the_sandbox_and_of_the_policy_join_the_history_escaped() {
        let desk = Desk::new(None);
        let events = desk.events(2, Arc::new(Nowhere));
        events.emit(ExecEvent::Refused {
            call_id: "c".into(),
            session_id: SessionId(77),
            refusals: vec![uexec_domain::denial::Refusal::Lookup { name: "evil\u{1b}[2Jexample.com".into() }],
        });
        // An event of another kind is no entry.
        events.emit(ExecEvent::TerminalInteraction {
            call_id: "c".into(),
            session_id: SessionId(77),
            chars: String::new(),
        });
        desk.policy_refused(2, "git push\n\u{202e}x", Some("/w"), "forbidden by a command rule");
        let history = desk.history();
        assert_eq!(history.len(), 2, "{history:?}");
        assert_eq!(
            (history[0].outcome.as_str(), history[0].session_id),
            ("refused_by_sandbox", Some(SessionId(77)))
        );
        assert!(history[0].subject.contains("evil\\u{1b}[2Jexample.com"), "{:?}", history[0]);
        assert_eq!((history[1].outcome.as_str(), history[1].by.as_str()), ("refused_by_policy", "policy"));
        assert_eq!(history[1].subject, "git push\\u{a}\\u{202e}x");
    }

    #[test]
    fn the_history_keeps_the_newest_entries() {
        let desk = Desk::new(None);
        for i in 0..HISTORY_ENTRIES + 5 {
            desk.policy_refused(0, &format!("cmd {i}"), None, "no");
        }
        let history = desk.history();
        assert_eq!(history.len(), HISTORY_ENTRIES);
        assert_eq!(history[0].subject, "cmd 5");
    }

    #[test]
    fn decisions_read_as_the_person_types_them() {
        assert_eq!(parse_decision("approve"), Some(ReviewDecision::Approved));
        assert_eq!(parse_decision("approve-session"), Some(ReviewDecision::ApprovedForSession));
        assert_eq!(parse_decision("approve-retry"), Some(ReviewDecision::ApprovedWithRetry));
        for decision in [
            ReviewDecision::Approved,
            ReviewDecision::ApprovedWithRetry,
            ReviewDecision::ApprovedForSession,
            ReviewDecision::ApprovedPrefixForSession,
            ReviewDecision::Denied,
        ] {
            assert_eq!(parse_decision(decision_name(decision)), Some(decision));
        }
        assert_eq!(parse_decision("deny"), Some(ReviewDecision::Denied));
        assert_eq!(parse_decision("yes"), None);
    }
}
