//! `uexec mcp --listen ADDR`: the MCP server over Streamable HTTP (rmcp's server transport on hyper), with the
//! operability endpoints a cluster expects.
//!
//! Routes: `/mcp` (MCP, behind the JSON-RPC repair layer both transports share: [`super::http_repair`]),
//! `/metrics` (Prometheus text), `/healthz` (the process serves), `/readyz` (it accepts new clients: 503 once
//! draining). The routes behind the token are mounted in one place, `Router::authorized_routes`. Every request but `/healthz` and `/readyz` must carry `Authorization: Bearer
//! TOKEN` (compared in constant time); anything else gets a bare 401. There is always a token: one the person
//! gave in a file, or one generated at start into a private file (`settings::generated_token_dirs`), hidden like
//! the given one from every sandboxed command, so that no command of this or another uexec server can become a
//! client and approve its own questions. The probes stay open because a kubelet probe cannot read a Secret, and
//! they say nothing but "ok". Any `Host` header is accepted (behind a Service it is a cluster name), but an
//! `Origin` header on `/mcp` must name a page on this machine's loopback, else 403: the transport's rule against
//! DNS rebinding (`LOOPBACK_ORIGINS`).
//!
//! Clients: each MCP session (an `initialize` handshake, named by its `Mcp-Session-Id`) gets its own engine,
//! approver and handler, built by the service factory: its sessions are invisible to every other client. The
//! handler offers protocol versions up to 2025-11-25 only, the last with sessions: 2026-07-28 requests are
//! served statelessly by rmcp (a fresh handler per request), which would lose a client's sessions between
//! calls.
//!
//! Limits: a client's live sessions are capped by its engine's `max_sessions` (the least recently used is pruned
//! beyond, as over stdio); the live sessions of all clients by `sessions_total` (`exec_command` is refused
//! beyond, with a tool error that says so; a `uexec_engine::SessionBudget` the engines share counts each session
//! once, from its call's id reservation to its removal, so calls in flight are neither missed nor counted twice); new clients by `max_clients` (503). What others can make the server
//! hold has shares of the descriptor limit (`crate::fdlimit::FdBudget`): connections that have not presented the
//! token pass the gate of [`super::gate`]; in the domain-allowlist mode each client has a proxy (and a network
//! namespace) of its own, whose quota is below the bound all clients' proxies share.
//!
//! Shared workspaces: clients that open a new MCP session for every tool call (langchain-mcp-adapters'
//! `MultiServerMCPClient.get_tools()`, ...) would lose their command sessions between calls. A client that sends
//! `Uexec-Workspace: NAME` on its `initialize` gets, instead of an engine of its own, the engine of that name:
//! every MCP session naming it shares the same command sessions, sandbox and proxy, and they are killed only
//! when no MCP session has named it for the client grace (`--client-grace-secs`). The name is chosen by the
//! clients (they all hold the server's token); a client that names none is alone, as above.
//!
//! Disconnects: a client is connected while one of its HTTP requests or streams is open. When the last one
//! closes its grace starts; a request with its session id within the grace resumes it (its sessions untouched),
//! otherwise the MCP session is closed, its handler dropped and every one of its sessions killed. rmcp's own idle
//! timeout is off: it would end a client in the middle of a long poll.
//!
//! Shutdown (SIGTERM, SIGINT): stop accepting connections, answer new MCP requests 503, let the tool calls in
//! flight finish within the shutdown deadline, then close every MCP session and kill every session.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, ServerHandler};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uexec_engine::{Engine, EngineConfig, SessionBudget};
use uexec_ports::EventSink;

use super::StopReason;
use super::gate::{self, Gate, Ticket};
use super::server::{ExecObserver, UexecServer};
use crate::metrics::{ClientEvents, Metrics};
use crate::settings::{AuthToken, ServerSettings, Settings, TokenOrigin};

/// The MCP endpoint.
pub const MCP_PATH: &str = "/mcp";

use super::http_repair::{self, Filters, HttpBody, SESSION_HEADER};

/// The header naming a shared workspace (module doc).
pub const WORKSPACE_HEADER: &str = "uexec-workspace";

/// The longest workspace name.
const MAX_WORKSPACE_NAME: usize = 128;

tokio::task_local! {
    /// The workspace the `initialize` being handled names, for the service factory.
    static WORKSPACE: Option<String>;
}

/// A workspace's client, and since when no MCP session has held it.
struct SharedClient {
    client: HttpClient,
    unheld_since: Option<Instant>,
}

/// The workspace a request names: `Ok(None)` when none; an error text for a malformed name.
fn workspace_of(headers: &http::HeaderMap) -> Result<Option<String>, &'static str> {
    let Some(value) = headers.get(WORKSPACE_HEADER) else { return Ok(None) };
    let name = value.to_str().map_err(|_| "the Uexec-Workspace header is not ASCII")?;
    let valid = !name.is_empty()
        && name.len() <= MAX_WORKSPACE_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if valid {
        Ok(Some(name.to_owned()))
    } else {
        Err("the Uexec-Workspace header must be 1 to 128 characters of A-Z a-z 0-9 - _ .")
    }
}

/// What every client's engine is built from.
struct Blueprint {
    config: EngineConfig,
    settings: Settings,
    instructions: String,
    events: Arc<dyn EventSink>,
    /// The questions waiting for a person and the history of decisions, of every client (`control::desk`).
    desk: Arc<crate::control::desk::Desk>,
    /// Where the proxies record refusals.
    audit: Option<Arc<crate::audit::AuditLog>>,
    /// The connections of every client's proxy together (domain-allowlist mode), and each one's quota.
    proxy_limits: crate::proxy::ConnectionLimits,
}

/// What the server shares between its clients, its routes and its reaper.
struct Fleet {
    metrics: Arc<Metrics>,
    /// The refusals of each live client's proxy, and how many the proxies of ended clients had.
    refusals: Mutex<(HashMap<u64, Arc<crate::proxy::Refusals>>, u64)>,
    limits: ServerSettings,
    /// Every live client's engine, by an internal client number.
    engines: Mutex<HashMap<u64, Engine>>,
    next_client: AtomicU64,
    /// The live sessions of every client's engine together, and the calls that reserved one
    /// (`--max-sessions-total`): each engine's store counts a session once, from its call's reservation to its
    /// removal.
    sessions: SessionBudget,
    /// Tool calls in flight plus POST responses not yet sent to the end, for the drain.
    calls: watch::Sender<usize>,
    /// Open requests and streams per MCP session id, and since when a client has had none.
    activity: Mutex<HashMap<String, Activity>>,
    /// The client of each shared workspace, by name (module doc).
    shared: Mutex<HashMap<String, SharedClient>>,
    /// The JSON-RPC repair layer's filter of each MCP session.
    filters: Filters,
    draining: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct Activity {
    open: usize,
    idle_since: Instant,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fleet {
    /// The client of the workspace `name`, made by `make` when there is none yet.
    fn shared_client(
        &self,
        name: &str,
        make: impl FnOnce() -> std::io::Result<HttpClient>,
    ) -> std::io::Result<HttpClient> {
        let mut shared = lock(&self.shared);
        if let Some(entry) = shared.get(name) {
            return Ok(entry.client.clone());
        }
        let client = make()?;
        tracing::info!(workspace = name, "a shared workspace starts");
        shared.insert(name.to_owned(), SharedClient { client: client.clone(), unheld_since: None });
        Ok(client)
    }

    /// Ends the shared workspaces no MCP session has held for `grace` (their sessions are killed).
    fn expire_shared(&self, grace: Duration) {
        let mut ended = Vec::new();
        {
            let mut shared = lock(&self.shared);
            shared.retain(|name, entry| {
                // Only the map holds it: no MCP session's handler does.
                if Arc::strong_count(&entry.client._lease) > 1 {
                    entry.unheld_since = None;
                    return true;
                }
                let since = *entry.unheld_since.get_or_insert_with(Instant::now);
                if since.elapsed() < grace {
                    return true;
                }
                tracing::info!(workspace = %name, grace_secs = grace.as_secs(), "shared workspace unheld past its grace");
                ended.push(entry.client.clone());
                false
            });
        }
        // Dropped outside the lock: the lease's drop takes other locks.
        drop(ended);
    }

    fn engines(&self) -> Vec<Engine> {
        lock(&self.engines).values().cloned().collect()
    }

    fn client_count(&self) -> usize {
        lock(&self.engines).len()
    }

    /// Connections the proxies of every client (live or ended) refused.
    fn network_refused(&self) -> u64 {
        let refusals = lock(&self.refusals);
        refusals.0.values().map(|r| r.mark()).sum::<u64>() + refusals.1
    }

    /// One more request or stream of `session` is open.
    fn opened(self: &Arc<Self>, session: &str) -> OpenGuard {
        let mut activity = lock(&self.activity);
        let entry =
            activity.entry(session.to_owned()).or_insert(Activity { open: 0, idle_since: Instant::now() });
        entry.open += 1;
        OpenGuard { fleet: Arc::clone(self), session: session.to_owned() }
    }

    /// The MCP sessions whose grace ran out, removed from the activity map.
    fn expired(&self, grace: Duration) -> Vec<String> {
        let mut activity = lock(&self.activity);
        let expired: Vec<String> = activity
            .iter()
            .filter(|(_, a)| a.open == 0 && a.idle_since.elapsed() >= grace)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            activity.remove(id);
        }
        expired
    }

    fn forget(&self, session: &str) {
        lock(&self.activity).remove(session);
        self.filters.forget(session);
    }
}

/// Keeps a client connected while a request or stream of it is open.
struct OpenGuard {
    fleet: Arc<Fleet>,
    session: String,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let mut activity = lock(&self.fleet.activity);
        if let Some(entry) = activity.get_mut(&self.session) {
            entry.open = entry.open.saturating_sub(1);
            if entry.open == 0 {
                entry.idle_since = Instant::now();
            }
        }
    }
}

/// A POST answer not yet sent to the end (counted for the drain).
struct Pending(Arc<Fleet>);

impl Pending {
    fn new(fleet: &Arc<Fleet>) -> Self {
        fleet.calls.send_modify(|n| *n += 1);
        Pending(Arc::clone(fleet))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.calls.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A tool call in flight (counted for the drain).
struct CallGuard(Arc<Fleet>);

impl CallGuard {
    fn new(fleet: &Arc<Fleet>) -> Self {
        fleet.calls.send_modify(|n| *n += 1);
        fleet.metrics.call_started();
        CallGuard(Arc::clone(fleet))
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.calls.send_modify(|n| *n = n.saturating_sub(1));
        self.0.metrics.call_finished();
    }
}

/// Ends a client's state when its handler is dropped (its MCP session closed, expired or the server stopped):
/// every one of its sessions is killed, and its proxy (with every connection it serves) stops.
struct ClientLease {
    id: u64,
    engine: Engine,
    fleet: Arc<Fleet>,
    proxy: Option<tokio::task::AbortHandle>,
}

impl Drop for ClientLease {
    fn drop(&mut self) {
        if let Some(proxy) = &self.proxy {
            proxy.abort();
        }
        {
            let mut refusals = lock(&self.fleet.refusals);
            if let Some(ended) = refusals.0.remove(&self.id) {
                refusals.1 += ended.mark();
            }
        }
        lock(&self.fleet.engines).remove(&self.id);
        self.fleet.metrics.client_closed();
        let engine = self.engine.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { engine.shutdown().await });
            }
            // No runtime left: the engine's own drop kills what is still alive.
            Err(_) => drop(engine),
        }
        tracing::info!(client = self.id, "client ended: its sessions are killed");
    }
}

impl ExecObserver for ClientEvents {
    fn exec_started(&self, call_id: &str) {
        ClientEvents::exec_started(self, call_id);
    }

    fn exec_finished(&self, call_id: &str) {
        ClientEvents::exec_finished(self, call_id);
    }
}

/// The MCP handler of one HTTP client: the stdio server's handler, plus admission and the client's lease.
#[derive(Clone)]
struct HttpClient {
    inner: UexecServer,
    fleet: Arc<Fleet>,
    _lease: Arc<ClientLease>,
}

impl HttpClient {
    /// A new client: its approver, its engine with a spawner and a sandbox of its own (its own PID namespace),
    /// and in the domain-allowlist mode its own proxy in its own network namespace, so that what one client's
    /// commands listen on, or how many proxied connections they hold, reaches no other client's commands.
    fn new(blueprint: &Blueprint, fleet: &Arc<Fleet>) -> std::io::Result<Self> {
        let id = fleet.next_client.fetch_add(1, Ordering::Relaxed);
        let events = Arc::new(ClientEvents::new(Arc::clone(&fleet.metrics), Arc::clone(&blueprint.events)));
        // The client's proxy asks the client's person about a domain off the allowlist (under on-request), as
        // over stdio, and its refusals are noted in the client's own responses.
        let client = crate::compose::mcp_client(
            &blueprint.settings,
            blueprint.config.clone(),
            blueprint.audit.clone(),
            events.clone(),
            crate::compose::Namespaces::PerClient,
            (&blueprint.desk, id),
        )
        .map_err(|e| {
            tracing::error!("cannot make a new client's proxy: {e:#}");
            std::io::Error::other(format!("{e:#}"))
        })?;
        let (engine, approver, refusals) = (client.engine, client.approver, client.refusals);
        let proxy =
            client.proxy.map(|p| p.with_limits(blueprint.proxy_limits.clone()).spawn().abort_handle());
        if let Some(refusals) = &refusals {
            lock(&fleet.refusals).0.insert(id, Arc::clone(refusals));
        }
        lock(&fleet.engines).insert(id, engine.clone());
        fleet.metrics.client_opened();
        let inner = UexecServer::new(engine.clone(), approver, blueprint.instructions.clone())
            .with_desk(Arc::clone(&blueprint.desk), id)
            .with_observer(events)
            .with_refusals(refusals)
            .with_client_timeout(blueprint.settings.client_timeout_secs);
        Ok(HttpClient {
            inner,
            fleet: Arc::clone(fleet),
            _lease: Arc::new(ClientLease { id, engine, fleet: Arc::clone(fleet), proxy }),
        })
    }
}

impl ServerHandler for HttpClient {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    /// Up to the newest version with sessions ([`super::protocol::newest_with_sessions`]; module doc).
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        let newest = super::protocol::newest_with_sessions();
        let count = ProtocolVersion::KNOWN_VERSIONS.iter().take_while(|v| v.as_str() <= newest).count();
        std::borrow::Cow::Borrowed(&ProtocolVersion::KNOWN_VERSIONS[..count])
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.inner.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let _call = CallGuard::new(&self.fleet);
        self.inner.call_tool(request, context).await
    }
}

/// Everything a request is routed with.
struct Router {
    fleet: Arc<Fleet>,
    /// rmcp's service, behind the repair layer.
    mcp: http_repair::Inner,
    sessions: Arc<LocalSessionManager>,
    token: AuthToken,
    /// Connections that have not presented the token, for `uexec_http_connections_dropped_total`.
    gate: Arc<Gate>,
    operator: super::operator::Operator,
}

fn text(status: StatusCode, body: &'static str) -> Response<HttpBody> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
    response
}

fn json_rpc_error(status: StatusCode, message: &str) -> Response<HttpBody> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32000, "message": message },
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}

/// Whether `presented` equals `expected`, in time that depends only on `expected`'s length.
fn token_matches(expected: &[u8], presented: &[u8]) -> bool {
    let mut difference = expected.len() ^ presented.len();
    for (i, byte) in expected.iter().enumerate() {
        let other = presented.get(i).copied().unwrap_or(!byte);
        difference |= usize::from(byte ^ other);
    }
    std::hint::black_box(difference) == 0
}

/// Whether the request carries `Authorization: Bearer <token>`.
fn authorized(token: &AuthToken, headers: &http::HeaderMap) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else { return false };
    let value = value.as_bytes();
    let Some((scheme, rest)) = value.split_at_checked(7) else { return false };
    scheme.eq_ignore_ascii_case(b"bearer ") && token_matches(token.as_bytes(), rest.trim_ascii())
}

impl Router {
    async fn route(&self, request: Request<Incoming>, ticket: &Ticket) -> Response<HttpBody> {
        let path = request.uri().path();
        match (path, request.method()) {
            ("/healthz", &Method::GET) => return text(StatusCode::OK, "ok\n"),
            ("/readyz", &Method::GET) => {
                return if self.fleet.draining.load(Ordering::Relaxed) {
                    text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
                } else {
                    text(StatusCode::OK, "ready\n")
                };
            }
            _ => {}
        }
        let authorized = authorized(&self.token, request.headers());
        if let Some(response) = self.operator.route(request.method(), path, authorized).await {
            if authorized {
                ticket.pass();
            }
            return response;
        }
        if !authorized {
            self.fleet.metrics.unauthorized();
            let mut response = Response::new(Full::new(Bytes::new()).boxed());
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
            return response;
        }
        ticket.pass();
        self.authorized_routes(request).await
    }

    /// Every route behind the bearer token (the request carried it). Routes are mounted here: a new one is
    /// one arm of this match, before `MCP_PATH`.
    async fn authorized_routes(&self, request: Request<Incoming>) -> Response<HttpBody> {
        match request.uri().path() {
            "/metrics" if request.method() == Method::GET => {
                self.fleet.metrics.set_network_refused(self.fleet.network_refused());
                self.fleet.metrics.set_sessions_refused(self.fleet.sessions.refused());
                self.fleet.metrics.set_connections_dropped(self.gate.dropped());
                let mut response = Response::new(Full::new(Bytes::from(self.fleet.metrics.render())).boxed());
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                response
            }
            MCP_PATH => self.mcp(request).await,
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        }
    }

    async fn mcp(&self, request: Request<Incoming>) -> Response<HttpBody> {
        if self.fleet.draining.load(Ordering::Relaxed) {
            return json_rpc_error(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down");
        }
        let session = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let workspace = match workspace_of(request.headers()) {
            Ok(workspace) => workspace,
            Err(text) => return json_rpc_error(StatusCode::BAD_REQUEST, text),
        };
        let guard = match &session {
            Some(id) => Some(self.fleet.opened(id)),
            None => {
                if request.method() == Method::POST
                    && self.fleet.client_count() >= self.fleet.limits.max_clients
                {
                    self.fleet.metrics.client_refused();
                    return json_rpc_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the server holds its maximum number of clients (--max-clients); retry later",
                    );
                }
                None
            }
        };
        // A POST's answer counts as in flight until its body is sent: the drain waits for it (a GET stream is not
        // an answer and never ends by itself).
        let answering = (request.method() == Method::POST).then(|| Pending::new(&self.fleet));
        // The service factory (called for an `initialize`) reads the workspace named.
        let response =
            WORKSPACE.scope(workspace, http_repair::handle(&self.fleet.filters, request, &self.mcp)).await;
        // An `initialize` answer names the new MCP session: from now on its grace is tracked.
        let guard = guard.or_else(|| {
            response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(|id| self.fleet.opened(id))
        });
        if guard.is_none() && answering.is_none() {
            return response;
        }
        response.map(|body| {
            body.map_frame(move |frame| {
                let _held = (&guard, &answering);
                frame
            })
            .boxed()
        })
    }
}

/// Serve one HTTP connection. Until one of its requests carries the token it is subject to `ticket`'s gate: closed
/// to make room for newer connections, or at [`gate::WAITING_DEADLINE`].
async fn serve_connection(
    router: Arc<Router>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    ticket: Arc<Ticket>,
) {
    let in_service = Arc::clone(&ticket);
    let service = hyper::service::service_fn(move |request| {
        let router = Arc::clone(&router);
        let ticket = Arc::clone(&in_service);
        async move { Ok::<_, Infallible>(router.route(request, &ticket).await) }
    });
    let io = TokioIo::new(stream);
    // A timer gives hyper its 30 s limit on reading a request's headers (slow clients that have the token; those
    // without it have the gate's shorter deadline).
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new());
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let deadline = tokio::time::sleep(gate::WAITING_DEADLINE);
    tokio::pin!(deadline);
    let mut waiting = true;
    loop {
        tokio::select! {
            result = &mut connection => {
                if let Err(e) = result {
                    tracing::debug!(%peer, "connection ended: {e}");
                }
                return;
            }
            () = ticket.closer().cancelled(), if waiting => {
                // (Made room for a newcomer as it presented the token: it stays.)
                if ticket.passed() {
                    waiting = false;
                    continue;
                }
                tracing::debug!(%peer, "connection without the token closed to make room");
                return;
            }
            () = &mut deadline, if waiting => {
                if !ticket.passed() {
                    ticket.expire();
                    tracing::debug!(%peer, "connection closed: no token within its deadline");
                    return;
                }
                waiting = false;
            }
        }
    }
}

/// Close the MCP sessions of clients whose grace ran out, until `stop`.
async fn reap(fleet: Arc<Fleet>, sessions: Arc<LocalSessionManager>, stop: CancellationToken) {
    let grace = fleet.limits.client_grace;
    let period = (grace / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut ticks = tokio::time::interval(period);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        fleet.expire_shared(grace);
        for id in fleet.expired(grace) {
            let id: rmcp::transport::streamable_http_server::SessionId = id.into();
            if sessions.has_session(&id).await.unwrap_or(false) {
                tracing::info!(session = %id, grace_secs = grace.as_secs(), "client gone past its grace");
                fleet.metrics.client_expired();
                fleet.filters.forget(id.as_ref());
                if let Err(e) = sessions.close_session(&id).await {
                    tracing::warn!(session = %id, "closing an expired MCP session failed: {e}");
                }
            }
        }
        // Sessions the client closed itself (DELETE) or rmcp ended are forgotten.
        let known: Vec<String> = lock(&fleet.activity).keys().cloned().collect();
        for id in known {
            let sid: rmcp::transport::streamable_http_server::SessionId = id.clone().into();
            if !sessions.has_session(&sid).await.unwrap_or(true) {
                fleet.forget(&id);
            }
        }
    }
}

/// The browser origins `/mcp` accepts in an `Origin` header (any port): pages on this machine's loopback.
const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// Serve MCP over Streamable HTTP until SIGTERM or SIGINT.
pub async fn serve(
    settings: &Settings,
    server: &ServerSettings,
    events: Arc<dyn EventSink>,
    audit: Option<Arc<crate::audit::AuditLog>>,
    id_seed: Option<u64>,
) -> Result<StopReason> {
    // Sandboxed commands may read everything but the hidden paths: the token file (the file a link or `..` in its
    // path leads to, and the path as written) joins the server's own state there (`settings::own_state`); a
    // generated token's directory is hidden already (`Settings::token_dirs`, in every uexec), and is named again.
    let mut settings = settings.clone();
    let hidden_location = match &server.token_origin {
        TokenOrigin::File(file) => file,
        TokenOrigin::Generated(dir) => dir,
    };
    let token = crate::settings::own_state(None, None, Some(hidden_location));
    crate::settings::hide_own_state(&mut settings.hidden, &token);
    for pattern in crate::settings::literal_patterns(hidden_location) {
        if !settings.hidden.patterns.contains(&pattern) {
            settings.hidden.patterns.push(pattern);
        }
    }
    let settings = &settings;
    // The descriptors others can make the server hold: connections without the token (`mcp::gate`) and proxied
    // connections (each client's proxy has a quota below the bound all proxies share) get bounded shares; the
    // rest is for sessions and clients.
    let budget = crate::fdlimit::FdBudget::for_limit(crate::fdlimit::current());
    if budget.sessions_room() < server.sessions_total as u64 {
        tracing::warn!(
            limit = budget.limit,
            sessions_total = server.sessions_total,
            "the descriptor limit holds about {} sessions, fewer than --max-sessions-total; raise the hard limit \
             (ulimit -Hn, LimitNOFILE=) to serve them all",
            budget.sessions_room()
        );
    }
    let proxy_limits = crate::proxy::ConnectionLimits {
        per_proxy: budget.proxy_per_client,
        shared: Some(Arc::new(tokio::sync::Semaphore::new(budget.proxy_total))),
    };
    let mut config = crate::compose::engine_config(settings);
    config.id_seed = id_seed;
    config.limits.max_sessions = server.sessions_per_client;
    config.limits.warning_sessions = config.limits.warning_sessions.min(server.sessions_per_client);
    let session_budget = SessionBudget::new(server.sessions_total);
    config.session_budget = Some(session_budget.clone());
    let desk = crate::control::desk::Desk::new(audit.clone());
    let blueprint = Arc::new(Blueprint {
        config,
        settings: settings.clone(),
        instructions: super::instructions(settings),
        events,
        desk: Arc::clone(&desk),
        audit,
        proxy_limits,
    });
    let (calls, _) = watch::channel(0);
    let fleet = Arc::new(Fleet {
        metrics: Arc::new(Metrics::default()),
        refusals: Mutex::new((HashMap::new(), 0)),
        limits: server.clone(),
        engines: Mutex::new(HashMap::new()),
        next_client: AtomicU64::new(1),
        sessions: session_budget,
        calls,
        activity: Mutex::new(HashMap::new()),
        shared: Mutex::new(HashMap::new()),
        filters: Filters::default(),
        draining: AtomicBool::new(false),
    });

    let mut sessions = LocalSessionManager::default();
    // Disconnected clients are ended by the grace, not by rmcp's idle timeout (module doc).
    sessions.session_config.keep_alive = None;
    let sessions = Arc::new(sessions);
    let stop = CancellationToken::new();
    // The same bound as a stdio line: a request that large still gets a JSON-RPC answer, not a bare 413.
    let mut http_config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .with_max_request_body_bytes(super::transport::MAX_LINE_BYTES);
    // Behind a Service the Host header is a cluster name, so any Host is accepted: DNS rebinding needs a browser,
    // which cannot add the bearer token every request needs. The Origin header is validated all the same, as the
    // transport requires (403 when present and invalid): no MCP client sends one, and the only pages a browser may
    // send it from are on this machine's loopback (uexec answers no CORS preflight, so only a page of the same
    // origin could reach /mcp at all); a page under a rebound name (`http://evil.example:8080`) is refused.
    http_config = http_config.disable_allowed_hosts().with_allowed_origins(LOOPBACK_ORIGINS);
    let factory_fleet = Arc::clone(&fleet);
    let factory_blueprint = Arc::clone(&blueprint);
    let mcp = StreamableHttpService::new(
        move || match WORKSPACE.try_with(Clone::clone).ok().flatten() {
            Some(name) => {
                factory_fleet.shared_client(&name, || HttpClient::new(&factory_blueprint, &factory_fleet))
            }
            None => HttpClient::new(&factory_blueprint, &factory_fleet),
        },
        Arc::clone(&sessions),
        http_config,
    );
    let mcp: http_repair::Inner = Arc::new(move |request| {
        let mcp = mcp.clone();
        Box::pin(async move { mcp.handle(request).await })
    });
    let gate = Gate::new(budget.preauth_per_peer, budget.preauth_total);
    let clients: crate::control::server::Clients = {
        let fleet = Arc::clone(&fleet);
        Arc::new(move || lock(&fleet.engines).iter().map(|(id, engine)| (*id, engine.clone())).collect())
    };
    let router = Arc::new(Router {
        fleet: Arc::clone(&fleet),
        mcp,
        sessions: Arc::clone(&sessions),
        token: server.token.clone(),
        gate: Arc::clone(&gate),
        operator: super::operator::Operator::new(
            crate::control::ServerInfo {
                pid: std::process::id(),
                kind: "http".into(),
                cwd: settings.cwd.clone(),
                listen: Some(server.listen.to_string()),
            },
            clients.clone(),
            blueprint.audit.clone(),
            Arc::clone(&desk),
        ),
    });

    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let listener = TcpListener::bind(server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", server.listen))?;
    let local = listener.local_addr().context("the listening socket has no address")?;
    let generated = match &server.token_origin {
        TokenOrigin::Generated(dir) => {
            Some(crate::settings::write_generated_token(dir, local, &server.token)?)
        }
        TokenOrigin::File(_) => None,
    };
    let token_file = match &server.token_origin {
        TokenOrigin::File(file) => Some(file.as_path()),
        TokenOrigin::Generated(_) => generated.as_deref(),
    };
    announce(local, generated.as_deref(), token_file);
    let _control = crate::control::server::start(
        settings,
        "http",
        Some(local.to_string()),
        clients,
        blueprint.audit.clone(),
        desk,
    );

    let reaper = tokio::spawn(reap(Arc::clone(&fleet), Arc::clone(&router.sessions), stop.clone()));
    let mut connections = tokio::task::JoinSet::new();
    let reason = loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match gate.admit(peer.ip()) {
                    Some(ticket) => {
                        connections.spawn(serve_connection(Arc::clone(&router), stream, peer, Arc::new(ticket)));
                    }
                    // Not refused today (`Gate::admit`); closed at once if it ever is.
                    None => drop(stream),
                },
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = sigterm.recv() => break StopReason::Signal("SIGTERM"),
            _ = sigint.recv() => break StopReason::Signal("SIGINT"),
        }
    };

    // Drain: no new connections or MCP requests; calls in flight get the deadline to finish.
    fleet.draining.store(true, Ordering::Relaxed);
    drop(listener);
    let mut calls = fleet.calls.subscribe();
    let in_flight = *calls.borrow();
    tracing::info!(?reason, in_flight, deadline_secs = server.shutdown_deadline.as_secs(), "draining");
    if tokio::time::timeout(server.shutdown_deadline, calls.wait_for(|n| *n == 0)).await.is_err() {
        tracing::warn!("calls still in flight at the shutdown deadline: they are cut off");
    }
    // Close every MCP session, then kill every client's sessions (and wait for it).
    stop.cancel();
    let mut kills = tokio::task::JoinSet::new();
    for engine in fleet.engines() {
        kills.spawn(async move { engine.shutdown().await });
    }
    while kills.join_next().await.is_some() {}
    lock(&fleet.shared).clear();
    let _ = reaper.await;
    connections.shutdown().await;
    if let Some(file) = &generated {
        // The token dies with the server.
        let _ = std::fs::remove_file(file);
    }
    tracing::info!("every session killed; exiting");
    Ok(reason)
}

/// Say where the server listens, and where a generated token is (on stderr: tests and operators read it; stdout
/// carries nothing here). The token itself is never printed: a log can be readable where the token file is not.
fn announce(local: SocketAddr, generated: Option<&std::path::Path>, token_file: Option<&std::path::Path>) {
    tracing::info!(address = %local, "serving MCP over Streamable HTTP");
    #[allow(clippy::print_stderr)]
    {
        if let Some(file) = generated {
            eprintln!(
                "uexec: generated a bearer token for this server in {} (mode 0600, removed at exit): every request \
                 needs Authorization: Bearer <its content>",
                file.display()
            );
        }
        eprintln!("uexec: listening on http://{local}{MCP_PATH}");
        eprintln!("{}", operator_address(local, token_file));
    }
}

/// Where the person's page is, and how to open it with the token (never printed: stderr may be kept in a
/// client's log): the fragment a browser never sends.
fn operator_address(local: SocketAddr, token_file: Option<&std::path::Path>) -> String {
    let page = format!("http://{local}{}", super::operator::OPERATOR_PATH);
    match token_file {
        Some(file) => {
            let quoted = uexec_domain::quote::shell_words(&[file.display().to_string()]);
            format!(
                "uexec: operator page (watch and kill sessions, answer approval questions): {page}#token=TOKEN, \
                 TOKEN being the content of {quoted} (the whole address: echo \"{page}#token=$(cat {quoted})\")"
            )
        }
        None => format!(
            "uexec: operator page (watch and kill sessions, answer approval questions): {page}#token=TOKEN, TOKEN \
             being this server's bearer token"
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_page_is_announced_with_how_to_add_the_token() {
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let line = operator_address(local, Some(std::path::Path::new("/run/user/1/uexec/listen-tokens/t")));
        assert!(line.contains("http://127.0.0.1:8080/operator#token=TOKEN"), "{line}");
        assert!(line.contains("$(cat /run/user/1/uexec/listen-tokens/t)"), "{line}");
    }

    #[test]
    fn tokens_match_only_exactly() {
        let expected = b"0123456789abcdef";
        assert!(token_matches(expected, b"0123456789abcdef"));
        for wrong in
            [&b""[..], b"0123456789abcde", b"0123456789abcdeg", b"0123456789abcdef0", b"X123456789abcdef"]
        {
            assert!(!token_matches(expected, wrong), "{wrong:?}");
        }
    }

    #[test]
    fn the_bearer_scheme_is_required_and_case_insensitive() {
        let token = AuthToken::for_tests(b"0123456789abcdef");
        let headers = |value: &str| {
            let mut map = http::HeaderMap::new();
            map.insert(header::AUTHORIZATION, value.parse().unwrap());
            map
        };
        assert!(authorized(&token, &headers("Bearer 0123456789abcdef")));
        assert!(authorized(&token, &headers("bearer 0123456789abcdef")));
        assert!(!authorized(&token, &headers("Basic 0123456789abcdef")));
        assert!(!authorized(&token, &headers("Bearer 0123456789abcdeX")));
        assert!(!authorized(&token, &headers("0123456789abcdef")));
        assert!(!authorized(&token, &http::HeaderMap::new()));
    }
}
