//! The MCP server handler: tool listing, tool calls mapped onto the engine, errors as tool results, and the
//! multi-round-trip (`InputRequiredResult`) flow that carries approvals on protocol 2026-07-28 and later.
//!
//! An `exec_command` call runs on its own task, so that a question to a person can be answered while the engine
//! waits. The handler waits for whichever comes first: the engine's result (returned as the tool result) or a
//! question (on 2026-07-28+ the call is parked under a fresh `requestState` token and answered with an
//! `InputRequiredResult`; the client's retry with that token and the person's answer resumes it).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequest, ElicitResult, Implementation,
    InputRequest, InputRequests, InputRequiredResult, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use tokio::sync::{Mutex, mpsc, oneshot};
use uexec_domain::response::{exec_error_text, write_error_text};
use uexec_engine::{Engine, ExecError, ExecResponse};

use super::approval::{APPROVAL_TIMEOUT, AskVia, McpApprover, PendingQuestion, decision_from_elicit};
use super::tools::{self, ArgError};

/// The key of the approval answer inside `inputResponses`.
const APPROVAL_INPUT: &str = "approval";

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
        }
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
        let mut exec = tools::parse_exec(&arguments).map_err(invalid_params)?;
        let call_id = format!("mcp-{}", self.next_id());
        exec.call_id = Some(call_id.clone());
        let cmd = exec.cmd.clone();

        let (questions_tx, questions) = mpsc::channel(1);
        self.approver.register(&call_id, ask_via(&context, questions_tx));
        let (result_tx, result) = oneshot::channel();
        let engine = self.engine.clone();
        let approver = self.approver.clone();
        tokio::spawn(async move {
            let outcome = engine.exec_command(exec).await;
            approver.unregister(&call_id);
            let _ = result_tx.send(outcome);
        });
        let flight = InFlight {
            cmd,
            arguments: request.arguments,
            result,
            questions,
            answer: None,
            parked_at: Instant::now(),
        };
        self.drive(flight).await
    }

    /// Wait for the call's result or its next question.
    async fn drive(&self, mut flight: InFlight) -> Result<CallToolResponse, McpError> {
        tokio::select! {
            outcome = &mut flight.result => {
                let outcome = outcome.map_err(|_| McpError::internal_error("the exec task ended without a result", None))?;
                Ok(exec_outcome(&flight.cmd, outcome).into())
            }
            Some(question) = flight.questions.recv() => {
                let params = self.approver.elicit_params(&question.request).map_err(|e| McpError::internal_error(e.to_string(), None))?;
                flight.answer = Some(question.answer);
                flight.parked_at = Instant::now();
                let token = self.token();
                let mut parked = self.parked.lock().await;
                parked.retain(|_, f| f.parked_at.elapsed() < APPROVAL_TIMEOUT * 2);
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

    async fn write_stdin(&self, arguments: &JsonObject) -> Result<CallToolResult, McpError> {
        let request = tools::parse_write(arguments).map_err(invalid_params)?;
        Ok(match self.engine.write_stdin(request).await {
            Ok(response) => tools::exec_result(&response),
            Err(e) => tools::error_result(write_error_text(&e.to_string())),
        })
    }

    async fn list_sessions(&self, arguments: &JsonObject) -> Result<CallToolResult, McpError> {
        tools::parse_no_args(tools::LIST_SESSIONS, arguments).map_err(invalid_params)?;
        Ok(tools::sessions_result(&self.engine.list_sessions().await, &self.engine.protections()))
    }

    async fn close_session(&self, arguments: &JsonObject) -> Result<CallToolResult, McpError> {
        let id = tools::parse_session_only(tools::CLOSE_SESSION, arguments).map_err(invalid_params)?;
        Ok(match self.engine.close_session(id).await {
            Ok(response) => tools::exec_result(&response),
            Err(e) => tools::error_result(format!("close_session failed: {e}")),
        })
    }

    async fn read_screen(&self, arguments: &JsonObject) -> Result<CallToolResult, McpError> {
        let id = tools::parse_session_only(tools::READ_SCREEN, arguments).map_err(invalid_params)?;
        Ok(match self.engine.screen(id).await {
            Ok(screen) => tools::screen_result(screen),
            Err(e) => tools::error_result(format!("read_screen failed: {e}")),
        })
    }
}

/// How this call's client can be asked (see the `approval` module).
fn ask_via(context: &RequestContext<RoleServer>, questions: mpsc::Sender<PendingQuestion>) -> AskVia {
    let elicitation = context.client_capabilities().and_then(|caps| caps.elicitation).is_some_and(|e| {
        // Declaring `elicitation: {}` means form mode; a client declaring only `url` cannot show our form.
        e.form.is_some() || e.url.is_none()
    });
    if !elicitation {
        return AskVia::Nobody;
    }
    let modern =
        context.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    if modern {
        AskVia::InputRequired(questions)
    } else {
        AskVia::Request(context.peer.clone(), context.ct.clone())
    }
}

fn exec_outcome(cmd: &str, outcome: Result<ExecResponse, ExecError>) -> CallToolResult {
    match outcome {
        Ok(response) => tools::exec_result(&response),
        Err(e) => tools::error_result(exec_error_text(cmd, &e.to_string())),
    }
}

fn invalid_params(e: ArgError) -> McpError {
    McpError::invalid_params(e.to_string(), None)
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
        let empty = JsonObject::new();
        let arguments = request.arguments.as_ref().unwrap_or(&empty);
        tracing::debug!(tool = %request.name, "tools/call");
        match request.name.as_ref() {
            tools::EXEC_COMMAND => self.exec_command(request, context).await,
            tools::WRITE_STDIN => self.write_stdin(arguments).await.map(Into::into),
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
