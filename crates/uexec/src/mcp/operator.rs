//! The operator's view of a listening server (`uexec mcp --listen`): what `uexec sessions`, `uexec attach` and
//! `uexec kill` give a person at the machine (`crate::control`), over HTTP to whoever holds the bearer token,
//! and a small web page that shows it.
//!
//! Routes (each under the bearer token, as every route of the server but the probes, except the page itself):
//! - `GET /operator/api/sessions`: the server and every live session of every client (JSON, the control
//!   channel's listing) with the approval questions waiting for a person (`questions`: every fact each shows,
//!   escaped, `control::desk`);
//! - `POST /operator/api/questions/{id}/{decision}` (`approve`, `approve-session`, `approve-prefix`, `deny`):
//!   answer a waiting question as the client's form would; 409 when it was answered already (the first answer
//!   decides, whoever gives it), an audit-log record `question_answered` with `"by":"http"`;
//! - `GET /operator/api/history`: what was approved, denied and refused, per session (`control::desk`);
//! - `GET /operator/api/sessions/{client}/{id}/screen`: the session's rendered 24x80 screen as text (a pipe
//!   session: its newest output), its state;
//! - `GET /operator/api/sessions/{client}/{id}/watch`: a live view as server-sent events: `present` (the
//!   screen drawn with escape sequences, or a pipe session's newest output), `output` (every later piece), `exit`;
//!   each event's data a JSON string of the bytes (invalid UTF-8 replaced); `skipped` (data: a JSON number of bytes)
//!   where a page that stopped reading lost output (the session keeps a bounded queue for it, `uexec_engine::watch`);
//! - `POST /operator/api/sessions/{client}/{id}/kill`: kill its process tree (the model's next call reads the
//!   exit).
//!
//! `GET /operator` is the page: static HTML and script with no data in it, served without the token so that a
//! browser can open it; the script reads the token from the address's fragment (`#token=...`, which a browser
//! never sends) or asks for it, keeps it in the tab's `sessionStorage`, and sends it with every API request. A
//! watch and a kill are audit-log records, as over the control socket. Typing is the control socket's only
//! (`uexec attach --write`), where the person is checked as the same user of the same machine.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use serde_json::{Map, Value, json};
use uexec_domain::SessionId;
use uexec_engine::{Engine, LiveState, WatchEvent};

use crate::audit::AuditLog;
use crate::control::ServerInfo;
use crate::control::desk::{Answerer, Desk};
use crate::control::server::{Clients, answer_question, listing};

type HttpBody = BoxBody<Bytes, Infallible>;

/// The prefix of every operator route.
pub const OPERATOR_PATH: &str = "/operator";

/// The page (`GET /operator`).
const PAGE: &str = include_str!("operator.html");

/// What the operator routes are served with.
pub struct Operator {
    info: ServerInfo,
    clients: Clients,
    audit: Option<Arc<AuditLog>>,
    desk: Arc<Desk>,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").field("info", &self.info).finish_non_exhaustive()
    }
}

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<HttpBody> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    response
}

fn json_response(status: StatusCode, value: &Value) -> Response<HttpBody> {
    respond(status, "application/json", value.to_string())
}

fn error(status: StatusCode, message: &str) -> Response<HttpBody> {
    json_response(status, &json!({ "ok": false, "error": message }))
}

/// `{client}/{id}/{action}` of a session route.
fn session_route(rest: &str) -> Option<(u64, SessionId, &str)> {
    let mut parts = rest.split('/');
    let client = parts.next()?.parse().ok()?;
    let id = parts.next()?.parse().ok()?;
    let action = parts.next()?;
    parts.next().is_none().then_some((client, SessionId(id), action))
}

impl Operator {
    /// The operator routes of a server described by `info`, whose clients' engines `clients` lists.
    pub fn new(info: ServerInfo, clients: Clients, audit: Option<Arc<AuditLog>>, desk: Arc<Desk>) -> Self {
        Operator { info, clients, audit, desk }
    }

    /// The answer to an operator route, `None` for any other path. `authorized`: the request carries the token.
    pub async fn route(&self, method: &Method, path: &str, authorized: bool) -> Option<Response<HttpBody>> {
        let rest = path.strip_prefix(OPERATOR_PATH)?;
        if rest.is_empty() || rest == "/" {
            if method != Method::GET {
                return Some(error(StatusCode::METHOD_NOT_ALLOWED, "GET only"));
            }
            let mut page = respond(StatusCode::OK, "text/html; charset=utf-8", PAGE);
            let headers = page.headers_mut();
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                header::HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; \
                     img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
                ),
            );
            headers.insert(header::REFERRER_POLICY, header::HeaderValue::from_static("no-referrer"));
            headers.insert(header::X_FRAME_OPTIONS, header::HeaderValue::from_static("DENY"));
            return Some(page);
        }
        if !rest.starts_with("/api/") {
            return None;
        }
        if !authorized {
            let mut response = error(StatusCode::UNAUTHORIZED, "the bearer token is missing or wrong");
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
            return Some(response);
        }
        if rest == "/api/history" {
            if method != Method::GET {
                return Some(error(StatusCode::METHOD_NOT_ALLOWED, "GET only"));
            }
            return Some(json_response(StatusCode::OK, &json!({ "history": self.desk.history() })));
        }
        if let Some(question) = rest.strip_prefix("/api/questions/") {
            return Some(self.answer(method, question));
        }
        let Some(api) = rest.strip_prefix("/api/sessions") else {
            return Some(error(StatusCode::NOT_FOUND, "no such route"));
        };
        if api.is_empty() {
            if method != Method::GET {
                return Some(error(StatusCode::METHOD_NOT_ALLOWED, "GET only"));
            }
            let listing = listing(&self.info, &self.clients, &self.desk);
            return Some(match serde_json::to_value(&listing) {
                Ok(value) => json_response(StatusCode::OK, &value),
                Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the listing cannot be written"),
            });
        }
        let Some((client, id, action)) = api.strip_prefix('/').and_then(session_route) else {
            return Some(error(StatusCode::NOT_FOUND, "no such route"));
        };
        let Some(engine) = (self.clients)().into_iter().find(|(c, _)| *c == client).map(|(_, e)| e) else {
            return Some(error(StatusCode::NOT_FOUND, &format!("no client {client} on this server")));
        };
        Some(match (action, method) {
            ("screen", &Method::GET) => self.screen(&engine, id).await,
            ("watch", &Method::GET) => self.watch(&engine, client, id),
            ("kill", &Method::POST) => self.kill(&engine, client, id).await,
            ("screen" | "watch" | "kill", _) => error(StatusCode::METHOD_NOT_ALLOWED, "wrong method"),
            _ => error(StatusCode::NOT_FOUND, "no such route"),
        })
    }

    /// `POST /operator/api/questions/{id}/{decision}`: answer a waiting question (module doc of
    /// `control::desk`). 409 when it is not waiting (answered already, by anyone).
    fn answer(&self, method: &Method, rest: &str) -> Response<HttpBody> {
        if method != Method::POST {
            return error(StatusCode::METHOD_NOT_ALLOWED, "POST only");
        }
        let Some((id, decision)) =
            rest.split_once('/').and_then(|(id, d)| Some((id.parse::<u64>().ok()?, d)))
        else {
            return error(StatusCode::NOT_FOUND, "no such route");
        };
        let reply = answer_question(&self.desk, id, decision, Answerer::Http);
        let status = match (reply.get("ok"), reply.get("answered")) {
            (Some(Value::Bool(true)), _) => StatusCode::OK,
            (_, Some(Value::Bool(true))) => StatusCode::CONFLICT,
            _ => StatusCode::BAD_REQUEST,
        };
        json_response(status, &reply)
    }

    fn record(&self, event: &str, client: u64, session: SessionId, extra: Value) {
        let Some(audit) = &self.audit else { return };
        let mut map = Map::new();
        map.insert("event".into(), json!(event));
        map.insert("client".into(), json!(client));
        map.insert("session_id".into(), json!(session));
        map.insert("via".into(), json!("http"));
        if let Value::Object(extra) = extra {
            map.extend(extra);
        }
        audit.record(map);
    }

    async fn screen(&self, engine: &Engine, id: SessionId) -> Response<HttpBody> {
        let Some(view) = engine.session_views().into_iter().find(|v| v.session_id == id) else {
            return error(StatusCode::NOT_FOUND, &format!("no live session {id}"));
        };
        let text = if view.tty {
            engine.screen(id).await.unwrap_or_default()
        } else {
            match engine.watch(id) {
                Ok(watch) => String::from_utf8_lossy(&watch.present).into_owned(),
                Err(_) => String::new(),
            }
        };
        let (state, exit_code) = match view.state {
            LiveState::Running => ("running", None),
            LiveState::WaitingForInput => ("waiting_for_input", None),
            LiveState::Exited { exit_code } => ("exited", Some(exit_code)),
        };
        json_response(
            StatusCode::OK,
            &json!({ "session_id": id, "tty": view.tty, "state": state, "exit_code": exit_code, "screen": text }),
        )
    }

    fn watch(&self, engine: &Engine, client: u64, id: SessionId) -> Response<HttpBody> {
        let mut watch = match engine.watch(id) {
            Ok(watch) => watch,
            Err(e) => return error(StatusCode::NOT_FOUND, &e.to_string()),
        };
        self.record("operator_attach", client, id, json!({ "write": false }));
        let event = |name: &str, bytes: &[u8]| -> Result<Frame<Bytes>, Infallible> {
            let data = Value::String(String::from_utf8_lossy(bytes).into_owned());
            Ok(Frame::data(Bytes::from(format!("event: {name}\ndata: {data}\n\n"))))
        };
        let first = event("present", &watch.present);
        let stream = futures_stream(move |tx| async move {
            if tx.send(first).await.is_err() {
                return;
            }
            while let Some(next) = watch.next().await {
                let frame = match next {
                    WatchEvent::Output(piece) => event("output", piece.as_bytes()),
                    // The page fell behind: this many bytes of output were dropped before what follows.
                    WatchEvent::Skipped { bytes } => {
                        Ok(Frame::data(Bytes::from(format!("event: skipped\ndata: {bytes}\n\n"))))
                    }
                    WatchEvent::Exited { exit_code } => event("exit", exit_code.to_string().as_bytes()),
                };
                if tx.send(frame).await.is_err() {
                    return;
                }
            }
        });
        let mut response = Response::new(stream.boxed());
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/event-stream"));
        headers.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
        response
    }

    async fn kill(&self, engine: &Engine, client: u64, id: SessionId) -> Response<HttpBody> {
        match engine.kill_session(id).await {
            Ok(exit_code) => {
                self.record("operator_kill", client, id, json!({ "exit_code": exit_code }));
                json_response(StatusCode::OK, &json!({ "ok": true, "exit_code": exit_code }))
            }
            Err(e) => error(StatusCode::NOT_FOUND, &e.to_string()),
        }
    }
}

type FrameResult = Result<Frame<Bytes>, Infallible>;

/// A body fed by a task that `feed` runs; the task ends when the body (the response) is dropped.
fn futures_stream<F, Fut>(feed: F) -> ChannelBody
where
    F: FnOnce(tokio::sync::mpsc::Sender<FrameResult>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    // A few frames: a page that stops reading leaves its output in the session's bounded watcher queue.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(feed(tx));
    ChannelBody(rx)
}

/// The frames of an `mpsc::Receiver` as a response body.
struct ChannelBody(tokio::sync::mpsc::Receiver<FrameResult>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<FrameResult>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn session_routes_parse_exactly() {
        assert_eq!(session_route("3/1234/screen"), Some((3, SessionId(1234), "screen")));
        assert_eq!(session_route("3/1234/screen/x"), None);
        assert_eq!(session_route("x/1234/screen"), None);
        assert_eq!(session_route("3/-1/kill"), None);
        assert_eq!(session_route("3"), None);
    }
}
