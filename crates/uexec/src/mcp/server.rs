//! The MCP server handler: tool listing, tool calls mapped onto the engine, errors as tool results, and the
//! multi-round-trip (`InputRequiredResult`) flow that carries approvals on protocol 2026-07-28 and later.
//!
//! An `exec_command` call runs on its own task, so that a question to a person can be answered while the engine
//! waits. The handler waits for whichever comes first: the engine's result (returned as the tool result) or a
//! question (on 2026-07-28+ the call is parked under a fresh `requestState` token and answered with an
//! `InputRequiredResult`; the client's retry with that token and the person's answer resumes it).
//!
//! Cancellation: every tool call races the client's `notifications/cancelled` (rmcp cancels the request's
//! `RequestContext::ct`; a client whose request timed out sends the same notification). A cancelled call drops
//! its engine future at once: the session's call lock is released, a command already spawned stays stored as a
//! live session (`list_sessions` shows it, the next `write_stdin` is served at once), a command not yet spawned
//! never runs and its reserved id is released. rmcp sends no response for a cancelled request.
//!
//! Progress: when the call carries `_meta.progressToken`, a `notifications/progress` is sent every
//! [`PROGRESS_INTERVAL`] while the call waits (an empty poll may wait 300 s; clients such as the TypeScript SDK
//! time a request out after 60 s unless progress resets the timer).
//!
//! Client timeouts: every wait is cut to what the client waits for a call (`uexec_domain::client_wait`: the
//! `--client-timeout-secs` setting, else the client's `clientInfo.name`, else the TypeScript SDK's 60 s), so the
//! answer, with the session id of a command still running, arrives before the client gives up. The first answer
//! of a connection whose wait was cut while its command still runs says so, why, and how to lift it.
//!
//! Bad arguments are tool results with `isError: true` (SEP-1303), so the model reads and corrects them; an
//! unknown tool or a malformed request stays a JSON-RPC error.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequest, ElicitResult, Implementation,
    InputRequest, InputRequests, InputRequiredResult, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use tokio::sync::{Mutex, mpsc, oneshot};
use uexec_domain::client_wait::{ClientWait, client_wait};
use uexec_domain::limits::{clamp_exec_yield, clamp_write_yield};
use uexec_domain::response::{UNKNOWN_SESSION_HINT, exec_error_text, write_error_text};
use uexec_engine::{Engine, ExecError, ExecResponse};

use super::approval::{AskVia, FormStyle, McpApprover, PendingQuestion, decision_from_elicit};
use super::tools::{self, ArgError};
use crate::control::desk::Desk;
use crate::proxy::Refusals;

/// The key of the approval answer inside `inputResponses`.
const APPROVAL_INPUT: &str = "approval";

/// How often a call that carries a `progressToken` reports that it is still waiting. Every 5 s: well inside
/// the shortest request timeouts clients use (the TypeScript SDK's default is 60 s), so a client that resets
/// its timeout on progress keeps waiting through a 300 s poll.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// Aborts the engine task of an `exec_command` call when the call is abandoned (cancelled by the client, or
/// parked and never resumed). Dropping the engine's future mid-call is safe: see the module doc.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Told when an `exec_command` call starts and ends (the HTTP server measures spawn latency with it).
pub trait ExecObserver: Send + Sync {
    /// The call with this id starts.
    fn exec_started(&self, call_id: &str);
    /// The call with this id ended, finished or aborted.
    fn exec_finished(&self, call_id: &str);
}

/// Tells the observer that a call ended, however its task ends (finished or aborted).
struct Finished {
    observer: Option<Arc<dyn ExecObserver>>,
    call_id: String,
}

impl Drop for Finished {
    fn drop(&mut self) {
        if let Some(observer) = &self.observer {
            observer.exec_finished(&self.call_id);
        }
    }
}

/// An `exec_command` call in flight.
#[derive(Debug)]
struct InFlight {
    /// The command line, for error texts.
    cmd: String,
    /// The arguments of the original call (a retry must repeat them).
    arguments: Option<JsonObject>,
    /// The engine's result.
    result: oneshot::Receiver<Result<ExecResponse, ExecError>>,
    /// Questions from the approver for this call.
    questions: mpsc::Receiver<PendingQuestion>,
    /// The question the client is answering, while parked.
    answer: Option<oneshot::Sender<uexec_domain::ReviewDecision>>,
    /// When it was parked.
    parked_at: Instant,
    /// Dropping the call (cancelled, or parked and expired) aborts its engine task.
    _task: AbortOnDrop,
    /// The proxy's refusal count when the call started.
    refusal_mark: u64,
    /// Why this call's wait was cut to what the client waits, if it was (said once per connection).
    wait_note: Option<String>,
}

/// The MCP server.
#[derive(Clone)]
pub struct UexecServer {
    engine: Engine,
    approver: Arc<McpApprover>,
    tools: Arc<Vec<Tool>>,
    instructions: Arc<String>,
    parked: Arc<Mutex<HashMap<String, InFlight>>>,
    counter: Arc<AtomicU64>,
    token_seed: u64,
    /// The proxy's refusals (domain-allowlist mode): each response lists the hosts refused during its call.
    refusals: Option<Arc<Refusals>>,
    observer: Option<Arc<dyn ExecObserver>>,
    /// The server's setting of what the client waits for a call, in seconds (`--client-timeout-secs`; 0: as
    /// long as it takes); `None`: learnt from the client (`uexec_domain::client_wait`).
    client_timeout_secs: Option<u64>,
    /// The note on a cut wait was said on this connection.
    wait_noted: Arc<AtomicBool>,
    /// The server's desk and this client's number there: refusals of the policy join its history.
    desk: Option<(Arc<Desk>, u64)>,
}

impl std::fmt::Debug for UexecServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UexecServer").finish_non_exhaustive()
    }
}

impl UexecServer {
    /// A server over `engine`, whose approver is `approver`; `instructions` tell the model what it runs under.
    pub fn new(engine: Engine, approver: Arc<McpApprover>, instructions: String) -> Self {
        let token_seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default()
            ^ (u64::from(std::process::id()) << 32);
        UexecServer {
            engine,
            approver,
            tools: Arc::new(tools::all_tools()),
            instructions: Arc::new(instructions),
            parked: Arc::new(Mutex::new(HashMap::new())),
            counter: Arc::new(AtomicU64::new(1)),
            token_seed,
            refusals: None,
            observer: None,
            client_timeout_secs: None,
            wait_noted: Arc::new(AtomicBool::new(false)),
            desk: None,
        }
    }

    /// The same server, recording the refusals of the policy on `desk` as client `client`'s
    /// (`control::desk`).
    #[must_use]
    pub fn with_desk(mut self, desk: Arc<Desk>, client: u64) -> Self {
        self.desk = Some((desk, client));
        self
    }

    /// The same server, told how long its client waits for a call (seconds; 0: as long as it takes). Without
    /// it the wait is learnt from the client's `clientInfo` (`uexec_domain::client_wait`).
    #[must_use]
    pub fn with_client_timeout(mut self, secs: Option<u64>) -> Self {
        self.client_timeout_secs = secs;
        self
    }

    /// What the client of this call waits for it.
    fn client_wait(&self, context: &RequestContext<RoleServer>) -> ClientWait {
        let info = context.client_info();
        client_wait(self.client_timeout_secs, info.as_ref().map(|i| i.name.as_str()))
    }

    /// `result` with `note` appended, the first time a cut wait is noted on this connection.
    fn note_wait_once(&self, mut result: CallToolResult, note: Option<String>) -> CallToolResult {
        let Some(note) = note else { return result };
        if self.wait_noted.swap(true, Ordering::Relaxed) {
            return result;
        }
        if let Some(rmcp::model::ContentBlock::Text(text)) = result.content.first_mut() {
            text.text.push('\n');
            text.text.push_str(&note);
        }
        result
    }

    /// The same server, noting in each response the hosts the proxy refused during the call.
    #[must_use]
    pub fn with_refusals(mut self, refusals: Option<Arc<Refusals>>) -> Self {
        self.refusals = refusals;
        self
    }

    /// Where the proxy's refusal count stands (0 without a proxy).
    fn refusal_mark(&self) -> u64 {
        self.refusals.as_ref().map_or(0, |r| r.mark())
    }

    /// `result` with the `[uexec] not on the domain allowlist: ...` note for the connections refused since `mark`.
    fn note_refusals(&self, mut result: CallToolResult, mark: u64) -> CallToolResult {
        let Some(note) = self.refusals.as_ref().and_then(|r| Refusals::note(&r.since(mark))) else {
            return result;
        };
        if let Some(rmcp::model::ContentBlock::Text(text)) = result.content.first_mut() {
            text.text.push('\n');
            text.text.push_str(&note);
        }
        result
    }

    /// Tell `observer` when each `exec_command` call starts and ends.
    pub fn with_observer(mut self, observer: Arc<dyn ExecObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    fn next_id(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    /// An unguessable-enough token for a parked call (it only ever resumes a call this client started).
    fn token(&self) -> String {
        let n = self.next_id();
        let mut x = self.token_seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        format!("uexec-{n}-{x:016x}")
    }

    async fn exec_command(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if let Some(token) = &request.request_state {
            return self.resume(token, &request).await;
        }
        let arguments = request.arguments.clone().unwrap_or_default();
        let mut exec = match tools::parse_exec(&arguments) {
            Ok(exec) => exec,
            Err(e) => return Ok(arg_error(&e).into()),
        };
        let wait = self.client_wait(&context);
        let window =
            Duration::from_millis(clamp_exec_yield(exec.yield_time_ms, &self.engine.config().limits));
        exec.max_wait = wait.cut(window);
        let wait_note = exec.max_wait.map(|cap| wait.note(cap, window));
        let refusal_mark = self.refusal_mark();
        let call_id = format!("mcp-{}", self.next_id());
        exec.call_id = Some(call_id.clone());
        let cmd = exec.cmd.clone();

        // The route to this call's client travels with the engine's future of this call (`AskVia::scope`): a
        // question the engine asks for it can reach no other call's client.
        let (questions_tx, questions) = mpsc::channel(1);
        let via = AskVia::for_call(&context, questions_tx);
        self.approver.connect(&via);
        if let Some(observer) = &self.observer {
            observer.exec_started(&call_id);
        }
        let finished = Finished { observer: self.observer.clone(), call_id };
        let (result_tx, result) = oneshot::channel();
        let engine = self.engine.clone();
        let desk = self.desk.clone();
        let task = tokio::spawn(via.scope(async move {
            let _finished = finished;
            let (asked, workdir) = (exec.cmd.clone(), exec.workdir.clone());
            let outcome = engine.exec_command(exec).await;
            if let (Some((desk, client)), Err(e)) = (&desk, &outcome)
                && matches!(
                    e,
                    ExecError::Forbidden(_)
                        | ExecError::ApprovalUnavailable(_)
                        | ExecError::EscalationNotAllowed(_)
                )
            {
                let cwd = workdir.map(|w| w.display().to_string());
                desk.policy_refused(*client, &asked, cwd.as_deref(), &e.to_string());
            }
            let _ = result_tx.send(outcome);
        }));
        let flight = InFlight {
            cmd,
            arguments: request.arguments,
            result,
            questions,
            answer: None,
            parked_at: Instant::now(),
            _task: AbortOnDrop(task.abort_handle()),
            refusal_mark,
            wait_note,
        };
        self.drive(flight).await
    }

    /// Wait for the call's result or its next question.
    async fn drive(&self, mut flight: InFlight) -> Result<CallToolResponse, McpError> {
        tokio::select! {
            outcome = &mut flight.result => {
                let outcome = outcome.map_err(|_| McpError::internal_error("the exec task ended without a result", None))?;
                let cut_short = matches!(&outcome, Ok(response) if response.session_id.is_some());
                let result = self.note_refusals(exec_outcome(&flight.cmd, outcome), flight.refusal_mark);
                Ok(self.note_wait_once(result, flight.wait_note.take().filter(|_| cut_short)).into())
            }
            Some(question) = flight.questions.recv() => {
                let params = self.approver.elicit_params(&question.request, FormStyle::OneOf).map_err(|e| McpError::internal_error(e.to_string(), None))?;
                flight.answer = Some(question.answer);
                flight.parked_at = Instant::now();
                let token = self.token();
                let mut parked = self.parked.lock().await;
                // A parked call whose question outlived the engine's deadline has been refused already.
                let keep = Duration::from_millis(self.engine.config().limits.approval_timeout_ms) * 2;
                parked.retain(|_, f| f.parked_at.elapsed() < keep);
                parked.insert(token.clone(), flight);
                let mut requests = InputRequests::new();
                requests.insert(APPROVAL_INPUT.to_owned(), InputRequest::Elicitation(ElicitRequest::new(params)));
                Ok(InputRequiredResult::new(Some(requests), Some(token)).into())
            }
        }
    }

    /// The client's retry of a parked call, with the person's answer.
    async fn resume(
        &self,
        token: &str,
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, McpError> {
        let mut flight = self.parked.lock().await.remove(token).ok_or_else(|| {
            McpError::invalid_params(format!("unknown or expired requestState {token:?}"), None)
        })?;
        let answer = request
            .input_responses
            .as_ref()
            .and_then(|responses| responses.get(APPROVAL_INPUT))
            .ok_or_else(|| {
                McpError::invalid_params(format!("inputResponses.{APPROVAL_INPUT} is missing"), None)
            })
            .and_then(|value| {
                serde_json::from_value::<ElicitResult>(value.clone()).map_err(|e| {
                    McpError::invalid_params(format!("inputResponses.{APPROVAL_INPUT}: {e}"), None)
                })
            })
            .and_then(|result| {
                decision_from_elicit(&result).map_err(|e| McpError::invalid_params(e.to_string(), None))
            });
        let same_call = request.name == tools::EXEC_COMMAND && request.arguments == flight.arguments;
        let decision = match (answer, same_call) {
            (Ok(decision), true) => decision,
            (Err(e), _) => {
                self.parked.lock().await.insert(token.to_owned(), flight);
                return Err(e);
            }
            (Ok(_), false) => {
                self.parked.lock().await.insert(token.to_owned(), flight);
                return Err(McpError::invalid_params(
                    "a retry with a requestState must repeat the original tool name and arguments",
                    None,
                ));
            }
        };
        if let Some(answer) = flight.answer.take() {
            let _ = answer.send(decision);
        }
        self.drive(flight).await
    }

    async fn write_stdin(
        &self,
        arguments: &JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let mut request = match tools::parse_write(arguments) {
            Ok(request) => request,
            Err(e) => return Ok(arg_error(&e)),
        };
        let wait = self.client_wait(context);
        let limits = &self.engine.config().limits;
        let window =
            Duration::from_millis(clamp_write_yield(request.yield_time_ms, request.chars.is_empty(), limits));
        request.max_wait = wait.cut(window);
        let wait_note = request.max_wait.map(|cap| wait.note(cap, window));
        let mark = self.refusal_mark();
        let (result, cut_short) = match self.engine.write_stdin(request).await {
            Ok(response) => (tools::exec_result(&response), response.session_id.is_some()),
            Err(e) => {
                (tools::error_result(unknown_session_hint(write_error_text(&e.to_string()), &e)), false)
            }
        };
        let result = self.note_refusals(result, mark);
        Ok(self.note_wait_once(result, wait_note.filter(|_| cut_short)))
    }

    async fn list_sessions(&self, arguments: &JsonObject) -> Result<CallToolResult, McpError> {
        if let Err(e) = tools::parse_no_args(tools::LIST_SESSIONS, arguments) {
            return Ok(arg_error(&e));
        }
        Ok(tools::sessions_result(&self.engine.list_sessions().await, &self.engine.protections()))
    }

    async fn close_session(&self, arguments: &JsonObject) -> Result<CallToolResult, McpError> {
        let id = match tools::parse_session_only(tools::CLOSE_SESSION, arguments) {
            Ok(id) => id,
            Err(e) => return Ok(arg_error(&e)),
        };
        Ok(match self.engine.close_session(id).await {
            Ok(response) => tools::exec_result(&response),
            Err(e) => tools::error_result(unknown_session_hint(format!("close_session failed: {e}"), &e)),
        })
    }

    async fn read_screen(&self, arguments: &JsonObject) -> Result<CallToolResult, McpError> {
        let id = match tools::parse_session_only(tools::READ_SCREEN, arguments) {
            Ok(id) => id,
            Err(e) => return Ok(arg_error(&e)),
        };
        Ok(match self.engine.screen(id).await {
            Ok(screen) => tools::screen_result(screen),
            Err(e) => tools::error_result(unknown_session_hint(format!("read_screen failed: {e}"), &e)),
        })
    }
}

fn exec_outcome(cmd: &str, outcome: Result<ExecResponse, ExecError>) -> CallToolResult {
    match outcome {
        Ok(response) => tools::exec_result(&response),
        Err(e) => tools::error_result(exec_error_text(cmd, &e.to_string())),
    }
}

/// `text`, followed for an unknown session by why a session can be unknown to this connection.
fn unknown_session_hint(mut text: String, error: &ExecError) -> String {
    if matches!(error, ExecError::UnknownSession(_)) {
        text.push_str(". ");
        text.push_str(UNKNOWN_SESSION_HINT);
    }
    text
}

/// A malformed argument: a tool result the model can read (SEP-1303), not a protocol error.
fn arg_error(e: &ArgError) -> CallToolResult {
    tools::error_result(e.to_string())
}

/// Run `work`, sending a progress notification for `token` every [`PROGRESS_INTERVAL`] until it is done.
async fn with_progress<F: Future>(
    work: F,
    peer: &Peer<RoleServer>,
    token: Option<ProgressToken>,
) -> F::Output {
    let Some(token) = token else { return work.await };
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(started + PROGRESS_INTERVAL, PROGRESS_INTERVAL);
    tokio::pin!(work);
    loop {
        tokio::select! {
            output = &mut work => return output,
            _ = ticks.tick() => {
                let waited = started.elapsed().as_secs();
                let param = ProgressNotificationParam::new(token.clone(), waited as f64)
                    .with_message(format!("still waiting for output ({waited} s)"));
                if let Err(e) = peer.notify_progress(param).await {
                    tracing::debug!("sending progress failed: {e}");
                }
            }
        }
    }
}

impl UexecServer {
    /// Route one tool call.
    async fn dispatch(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let empty = JsonObject::new();
        let arguments = request.arguments.as_ref().unwrap_or(&empty);
        match request.name.as_ref() {
            tools::EXEC_COMMAND => self.exec_command(request, context).await,
            tools::WRITE_STDIN => self.write_stdin(arguments, &context).await.map(Into::into),
            tools::LIST_SESSIONS => self.list_sessions(arguments).await.map(Into::into),
            tools::CLOSE_SESSION => self.close_session(arguments).await.map(Into::into),
            tools::READ_SCREEN => self.read_screen(arguments).await.map(Into::into),
            other => Err(McpError::invalid_params(
                format!(
                    "unknown tool {other:?}; this server has: {}",
                    self.tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>().join(", ")
                ),
                None,
            )),
        }
    }
}

impl ServerHandler for UexecServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("uexec", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.instructions.as_str())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        tracing::debug!(tool = %request.name, "tools/call");
        let cancelled = context.ct.clone();
        let peer = context.peer.clone();
        let progress = context.meta.get_progress_token();
        let work = with_progress(self.dispatch(request, context), &peer, progress);
        tokio::select! {
            biased;
            // Dropping `work` drops the engine future: the session is released at once (module doc).
            () = cancelled.cancelled() => {
                tracing::info!("tool call cancelled by the client");
                Err(McpError::internal_error("the request was cancelled", None))
            }
            response = work => response,
        }
    }
}
