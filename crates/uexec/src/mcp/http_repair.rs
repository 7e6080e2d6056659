//! The JSON-RPC repair layer ([`super::jsonrpc`]) on the HTTP transport: every POST body of an MCP session
//! passes the session's [`Filter`] before rmcp reads it, and every message rmcp answers with (a JSON body, each
//! event of an SSE stream, the session's GET stream) passes it on the way out, exactly as each stdio line does.
//! So both transports answer the same message the same way: an id rmcp cannot hold is echoed exactly (rmcp's
//! HTTP transport alone refuses the body with `415 fail to deserialize request body`), the handshake is
//! enforced, batches are answered as one array where the negotiated version has them, and elicitation requests
//! carry the fields of the negotiated version.
//!
//! HTTP specifics: an answer the layer gives itself is a JSON body, with status 400 when it is a JSON-RPC error
//! (the Streamable HTTP transport allows an error status with a JSON-RPC error body) and 200 otherwise; a batch
//! sends each of its messages to rmcp as its own request of the same session and answers with the array (200)
//! or, when it held only notifications and responses, 202. A body over [`MAX_LINE_BYTES`] gets 413 with a
//! JSON-RPC error. A `DELETE` that ends a session is answered 204 No Content (rmcp answers 202, which the
//! Python SDK reports as "Session termination failed: 202"; the specification's clients expect 200 or 204).
//! Requests this layer cannot judge (a wrong content type or `Accept`, an unknown session) go to rmcp as they
//! are, which answers them.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming};
use serde_json::Value;

use super::jsonrpc::{Action, Filter, INVALID_REQUEST, MAX_LINE_BYTES, error_line};

/// A response body.
pub type HttpBody = BoxBody<Bytes, Infallible>;

/// What serves a request once it passed the layer (rmcp's Streamable HTTP service).
pub type Inner = Arc<
    dyn Fn(Request<Full<Bytes>>) -> Pin<Box<dyn Future<Output = Response<HttpBody>> + Send>> + Send + Sync,
>;

/// The header carrying the MCP session id.
pub const SESSION_HEADER: &str = "mcp-session-id";

type Shared = Arc<Mutex<Filter>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The filter of each MCP session, by session id (made for its `initialize`, dropped when it ends).
#[derive(Debug, Default)]
pub struct Filters(Mutex<HashMap<String, Shared>>);

impl Filters {
    fn get(&self, session: &str) -> Option<Shared> {
        lock(&self.0).get(session).cloned()
    }

    /// The session ended: forget its filter.
    pub fn forget(&self, session: &str) {
        lock(&self.0).remove(session);
    }
}

/// Serve one request to the MCP endpoint through the layer; `inner` serves what passes.
pub async fn handle(filters: &Filters, request: Request<Incoming>, inner: &Inner) -> Response<HttpBody> {
    let session = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let method = request.method().clone();
    let (head, bytes) = match read(request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    match method {
        Method::POST => post(filters, session, &head, bytes, inner).await,
        Method::GET => {
            let response = inner(rebuild(&head, bytes)).await;
            match session.as_deref().and_then(|s| filters.get(s)) {
                Some(filter) => repaired(response, filter),
                None => response,
            }
        }
        Method::DELETE => {
            // An MCP session this server does not hold (never made, or already ended): 404, as for a POST.
            if let Some(session) = &session
                && filters.get(session).is_none()
            {
                let mut gone =
                    Response::new(Full::new(Bytes::from_static(b"Not Found: Session not found")).boxed());
                *gone.status_mut() = StatusCode::NOT_FOUND;
                return gone;
            }
            let response = inner(rebuild(&head, bytes)).await;
            if response.status() == StatusCode::ACCEPTED {
                if let Some(session) = &session {
                    filters.forget(session);
                }
                let mut done = Response::new(Full::new(Bytes::new()).boxed());
                *done.status_mut() = StatusCode::NO_CONTENT;
                return done;
            }
            response
        }
        _ => inner(rebuild(&head, bytes)).await,
    }
}

/// What a request is rebuilt from (its body read).
struct Head {
    method: Method,
    uri: http::Uri,
    version: http::Version,
    headers: http::HeaderMap,
}

/// Read the body of `request`, at most [`MAX_LINE_BYTES`] (413 beyond, with a JSON-RPC error).
async fn read(request: Request<Incoming>) -> Result<(Head, Bytes), Response<HttpBody>> {
    let (parts, body) = request.into_parts();
    let head = Head { method: parts.method, uri: parts.uri, version: parts.version, headers: parts.headers };
    match Limited::new(body, MAX_LINE_BYTES).collect().await {
        Ok(collected) => Ok((head, collected.to_bytes())),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(json(
            StatusCode::PAYLOAD_TOO_LARGE,
            error_line(
                "null",
                INVALID_REQUEST,
                &format!("Invalid request: the message exceeds the limit of {MAX_LINE_BYTES} bytes"),
            ),
        )),
        Err(e) => Err(json(
            StatusCode::BAD_REQUEST,
            error_line("null", INVALID_REQUEST, &format!("Invalid request: the body could not be read: {e}")),
        )),
    }
}

/// The request `head` with `body` (its length is the body's).
fn rebuild(head: &Head, body: Bytes) -> Request<Full<Bytes>> {
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = head.method.clone();
    *request.uri_mut() = head.uri.clone();
    *request.version_mut() = head.version;
    *request.headers_mut() = head.headers.clone();
    request.headers_mut().remove(header::CONTENT_LENGTH);
    request
}

/// Whether the layer can judge a POST with these headers (else rmcp answers it: 406, 415).
fn judged(headers: &http::HeaderMap) -> bool {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_ascii_lowercase())
        .collect::<Vec<_>>();
    essence.eq_ignore_ascii_case("application/json")
        && accept.iter().any(|a| a == "application/json")
        && accept.iter().any(|a| a == "text/event-stream")
}

async fn post(
    filters: &Filters,
    session: Option<String>,
    head: &Head,
    bytes: Bytes,
    inner: &Inner,
) -> Response<HttpBody> {
    if !judged(&head.headers) {
        return inner(rebuild(head, bytes)).await;
    }
    let filter = match &session {
        Some(id) => match filters.get(id) {
            Some(filter) => filter,
            // Not a session of this server (rmcp answers 404).
            None => return inner(rebuild(head, bytes)).await,
        },
        None => Arc::new(Mutex::new(Filter::default())),
    };
    let batch = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    let actions = lock(&filter).input(&bytes);
    let mut forwards = Vec::new();
    let mut replies = Vec::new();
    for action in actions {
        match action {
            Action::Forward(message) => forwards.push(message),
            Action::Reply(reply) => replies.push(reply),
        }
    }
    if forwards.is_empty() {
        return match replies.pop() {
            Some(reply) => answer(reply),
            None => json(
                StatusCode::BAD_REQUEST,
                error_line("null", INVALID_REQUEST, "Invalid request: the body holds no JSON-RPC message"),
            ),
        };
    }
    if !batch {
        let Some(message) = forwards.pop() else { return accepted() };
        let response = inner(rebuild(head, Bytes::from(message))).await;
        if session.is_none()
            && let Some(id) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok())
        {
            lock(&filters.0).insert(id.to_owned(), Arc::clone(&filter));
        }
        for reply in replies {
            // (A batch completed by this message's cancellation: its POST is answered by its own requests.)
            tracing::debug!("an answer settled out of its request: {reply}");
        }
        return repaired(response, filter);
    }
    // A batch: each message is its own request of the session; the filter gathers the answers into one array.
    let mut requests = tokio::task::JoinSet::new();
    for message in forwards {
        let inner = Arc::clone(inner);
        let request = rebuild(head, Bytes::from(message));
        requests.spawn(async move { messages(inner(request).await).await });
    }
    let mut array = replies.into_iter().find(|r| r.starts_with('['));
    while let Some(done) = requests.join_next().await {
        for message in done.unwrap_or_default() {
            if let Some(out) = lock(&filter).output(message.as_bytes())
                && out.first() == Some(&b'[')
            {
                array = Some(String::from_utf8_lossy(&out).into_owned());
            }
        }
    }
    match array {
        Some(array) => json(StatusCode::OK, array),
        None => accepted(),
    }
}

/// The JSON-RPC messages of a response of rmcp (a JSON body, or the `data` of each SSE event).
async fn messages(response: Response<HttpBody>) -> Vec<String> {
    let sse = is_sse(&response);
    let json = is_json(&response);
    let Ok(body) = response.into_body().collect().await.map(|c| c.to_bytes());
    let text = String::from_utf8_lossy(&body);
    if json {
        return vec![text.into_owned()];
    }
    if !sse {
        return Vec::new();
    }
    text.split("\n\n").filter_map(|event| event_data(event).filter(|d| !d.is_empty())).collect()
}

/// The `data` of one SSE event (its `data:` lines joined), if it has any.
fn event_data(event: &str) -> Option<String> {
    let data: Vec<&str> = event
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    (!data.is_empty()).then(|| data.join("\n"))
}

fn is_sse(response: &Response<HttpBody>) -> bool {
    content_type(response).eq_ignore_ascii_case("text/event-stream")
}

fn is_json(response: &Response<HttpBody>) -> bool {
    content_type(response).eq_ignore_ascii_case("application/json")
}

fn content_type(response: &Response<HttpBody>) -> &str {
    let value =
        response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    value.split(';').next().unwrap_or_default().trim()
}

/// An answer the layer gave itself: 400 for a JSON-RPC error, 200 otherwise.
fn answer(reply: String) -> Response<HttpBody> {
    let error = serde_json::from_str::<Value>(&reply).is_ok_and(|v| v.get("error").is_some());
    json(if error { StatusCode::BAD_REQUEST } else { StatusCode::OK }, reply)
}

fn json(status: StatusCode, body: String) -> Response<HttpBody> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}

fn accepted() -> Response<HttpBody> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

/// `response` with every message of its body passed through `filter` (SSE events as they come; a JSON body
/// whole).
fn repaired(response: Response<HttpBody>, filter: Shared) -> Response<HttpBody> {
    let mode = if is_sse(&response) {
        Mode::Events
    } else if is_json(&response) {
        Mode::Whole
    } else {
        return response;
    };
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = Repaired { inner: body, filter, mode, buf: Vec::new(), done: false };
    Response::from_parts(parts, body.boxed())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// An SSE stream: each event's data.
    Events,
    /// A JSON body: the whole.
    Whole,
}

/// A body whose messages pass the filter.
struct Repaired {
    inner: HttpBody,
    filter: Shared,
    mode: Mode,
    buf: Vec<u8>,
    done: bool,
}

impl Repaired {
    /// The complete events in the buffer, repaired (the rest stays buffered).
    fn complete_events(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.buf.drain(..end + 2).collect();
            out.extend(self.event(&event[..end]));
        }
        out
    }

    /// One SSE event (without its blank line), repaired, with its blank line.
    fn event(&self, event: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(event);
        let Some(data) = event_data(&text).filter(|d| !d.is_empty()) else {
            let mut same = event.to_vec();
            same.extend_from_slice(b"\n\n");
            return same;
        };
        let mut out = String::new();
        for line in text.lines().filter(|line| !line.starts_with("data:")) {
            out.push_str(line);
            out.push('\n');
        }
        if let Some(repaired) = lock(&self.filter).output(data.as_bytes()) {
            out.push_str("data: ");
            out.push_str(&String::from_utf8_lossy(&repaired));
            out.push('\n');
        }
        out.push('\n');
        out.into_bytes()
    }
}

impl Body for Repaired {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        this.buf.extend_from_slice(&data);
                        if this.mode == Mode::Events {
                            let out = this.complete_events();
                            if !out.is_empty() {
                                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                            }
                        }
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => {
                    this.done = true;
                    let rest = std::mem::take(&mut this.buf);
                    let out = match this.mode {
                        Mode::Events if rest.is_empty() => Vec::new(),
                        Mode::Events => this.event(&rest),
                        Mode::Whole => lock(&this.filter).output(&rest).unwrap_or_default(),
                    };
                    if out.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_their_other_fields_and_lose_only_what_the_filter_holds_back() {
        let filter = Arc::new(Mutex::new(Filter::default()));
        let repaired = Repaired {
            inner: Full::new(Bytes::new()).boxed(),
            filter,
            mode: Mode::Events,
            buf: b"data:\nid: 0\nretry: 3000\n\ndata: {\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600,\"message\":\"x\"}}\nid: 1\n\n: keep-alive\n\npartial".to_vec(),
            done: false,
        };
        let mut repaired = repaired;
        let out = String::from_utf8(repaired.complete_events()).unwrap();
        assert!(out.starts_with("data:\nid: 0\nretry: 3000\n\n"), "{out}");
        assert!(out.contains("id: 1\ndata: {"), "{out}");
        assert!(out.contains(r#""id":null"#), "an error without an id gets a null id: {out}");
        assert!(out.ends_with(": keep-alive\n\n"), "{out}");
        assert_eq!(repaired.buf, b"partial");
    }

    #[test]
    fn only_json_posts_that_accept_both_answers_are_judged() {
        let headers = |content: &str, accept: &str| {
            let mut map = http::HeaderMap::new();
            map.insert(header::CONTENT_TYPE, content.parse().unwrap());
            map.insert(header::ACCEPT, accept.parse().unwrap());
            map
        };
        assert!(judged(&headers("application/json", "application/json, text/event-stream")));
        assert!(judged(&headers(
            "application/json; charset=utf-8",
            "text/event-stream;q=1, application/json"
        )));
        assert!(!judged(&headers("text/plain", "application/json, text/event-stream")));
        assert!(!judged(&headers("application/json", "application/json")));
    }
}
