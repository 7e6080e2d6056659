//! The JSON-RPC repair layer in front of rmcp, the same for both transports: the stdio transport
//! ([`super::transport`]) passes every line through a [`Filter`], and the HTTP server ([`super::http`]) every
//! POST body and every message of its answers, with one filter per MCP session. It answers the messages that
//! cannot be served (invalid JSON, lone UTF-16 surrogates, oversized messages, requests of the wrong shape) with
//! a JSON-RPC error that carries the request's id whenever it can be recovered, and hands every other message to
//! rmcp.
//!
//! Why: rmcp silently drops a line that is not JSON, answers a well-formed message of the wrong shape with an
//! error that has no id, and its HTTP transport refuses a body it cannot deserialize (an id it cannot hold) with
//! a bare `415`. Either way the client waits for an answer that never comes, or gets one it cannot match. Here
//! every request gets an answer and the server keeps running (and keeps its sessions).
//!
//! JSON-RPC conformance that rmcp 3.11 lacks, fixed here (a [`Filter`] sees every message in both directions);
//! what depends on the negotiated protocol version is read from the one table, [`super::protocol`]:
//! 1. **Ids are echoed exactly as sent.** rmcp's `RequestId` is an `i64` or a string (rust-sdk PR #416 widened
//!    it from `u32`), so `9223372036854775813` was refused and `123456789012345678901234567890` came back as
//!    `1.2345678901234568e+29`. An id rmcp cannot carry (a number that is not an `i64` written plainly, or a
//!    string starting with [`SURROGATE_PREFIX`]) is replaced by a surrogate string on the way in and the raw
//!    JSON token is put back on the way out; `notifications/cancelled` is rewritten to name the surrogate.
//! 2. **Errors without a usable id carry `"id": null`** (rmcp omits the member).
//! 3. **The handshake.** A second `initialize` is refused; a request before `initialize` is answered "server
//!    not initialized: send initialize first" (rmcp's message was about missing `_meta` fields), except
//!    `ping` (answered here, as the specification allows) and requests that carry the 2026-07-28 per-request
//!    `_meta` (`server/discover` and the stateless lifecycle), which rmcp serves.
//! 4. **Batches** (a JSON array) are accepted when the connection negotiated a version that has them
//!    (2025-03-26, the one version that requires them): each request goes to rmcp under a surrogate id, and the
//!    answers come back as one array (notifications get none; a batch of only notifications gets no answer; an
//!    empty array is an invalid request). Under other versions, and before `initialize`, a batch is refused
//!    with an error saying why.
//! 5. **Elicitation fields per version**: rmcp always writes `mode: "form"`, a 2025-11-25 field; for versions
//!    without it, it is removed (the form's schema is built for the version in the `approval` module).
//! 6. **An id in use is refused.** A request whose id is that of a request still in progress (forwarded, not yet
//!    answered nor cancelled) is answered with an error carrying that id; rmcp would run it and drop one of the
//!    two answers.
//! 7. **A message that is not valid JSON is answered with its id when the id was readable**: a top-level `id`
//!    that is whole before the point where the text breaks off or goes wrong (a frame cut short, a value nested
//!    too deep, a number out of range).

use std::collections::{BTreeMap, HashMap, HashSet};

use rmcp::model::ClientJsonRpcMessage;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::protocol::{self, Elicitation};

/// The longest message accepted (a stdio line, an HTTP body; rmcp's own limit): 16 MiB.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The start of the surrogate ids given to rmcp in place of ids it cannot carry (and of client string ids
/// that start the same way, so a surrogate never collides with a client's id).
pub const SURROGATE_PREFIX: &str = "uexec-rpc-id:";

/// JSON-RPC error codes used here.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// The `_meta` key that marks a request of the 2026-07-28 per-request lifecycle.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// What the filter does with one line read from the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Hand this line (no newline) to rmcp.
    Forward(String),
    /// Write this line (no newline) to the client.
    Reply(String),
}

/// Where the connection is in its lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// No `initialize` yet (or the last one failed).
    Fresh,
    /// `initialize` went to rmcp; its answer has not come back. Carries the request's raw id.
    Initializing(String),
    /// Initialized with this protocol version.
    Ready(String),
}

/// A request whose id was replaced by a surrogate.
#[derive(Debug)]
struct Route {
    /// The id exactly as the client wrote it.
    raw: String,
    /// The batch it belongs to.
    batch: Option<u64>,
}

/// A batch whose answers are being gathered.
#[derive(Debug, Default)]
struct Batch {
    /// Requests still unanswered.
    waiting: usize,
    /// Answers so far, each a JSON text.
    replies: Vec<String>,
}

/// The state of one connection: the handshake, the surrogate ids and the open batches.
#[derive(Debug)]
pub struct Filter {
    phase: Phase,
    next_surrogate: u64,
    routes: HashMap<String, Route>,
    /// Raw client id -> surrogate, for cancellations.
    surrogates: HashMap<String, String>,
    next_batch: u64,
    batches: HashMap<u64, Batch>,
    /// Batch answers completed by a cancellation, to write after the current input line.
    settled: Vec<String>,
    /// The ids ([`id_key`]) of the requests forwarded to rmcp and not yet answered nor cancelled.
    in_flight: HashSet<String>,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            phase: Phase::Fresh,
            next_surrogate: 1,
            routes: HashMap::new(),
            surrogates: HashMap::new(),
            next_batch: 1,
            batches: HashMap::new(),
            settled: Vec::new(),
            in_flight: HashSet::new(),
        }
    }
}

/// What one message (a line, or an element of a batch) becomes.
enum Outcome {
    Forward(String),
    Reply(String),
    Nothing,
}

/// The members of an outgoing message the filter looks at.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

impl Filter {
    /// Decide what to do with one line from the client (without its newline).
    pub fn input(&mut self, line: &[u8]) -> Vec<Action> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Vec::new();
        }
        let value: Value = match serde_json::from_slice(line) {
            Ok(value) => value,
            Err(e) => {
                let id = recover_id(line);
                let id = if id == "null" { leading_id(line).unwrap_or(id) } else { id };
                let mut message = format!("Parse error: the message is not valid JSON: {e}");
                if std::str::from_utf8(line).is_err() {
                    message.push_str(" (the line is not valid UTF-8, which JSON text must be)");
                }
                if has_lone_surrogate(line) {
                    message.push_str(
                        " (it contains a lone UTF-16 surrogate escape: a \\ud800-\\udfff escape must be half of a \
                         surrogate pair, because JSON strings must be valid Unicode)",
                    );
                }
                return vec![Action::Reply(error_line(&id, PARSE_ERROR, &message))];
            }
        };
        // Valid JSON is valid UTF-8.
        let text = String::from_utf8_lossy(line);
        let mut actions = self.parsed(&text, value);
        actions.extend(self.settled.drain(..).map(Action::Reply));
        actions
    }

    /// What to do with a line that is valid JSON.
    fn parsed(&mut self, text: &str, value: Value) -> Vec<Action> {
        match value {
            Value::Array(items) => self.batch(text, items.len()),
            value @ Value::Object(_) => match self.message(text, value, None) {
                Outcome::Forward(line) => vec![Action::Forward(line)],
                Outcome::Reply(line) => vec![Action::Reply(line)],
                Outcome::Nothing => Vec::new(),
            },
            _ => vec![Action::Reply(error_line(
                "null",
                INVALID_REQUEST,
                "Invalid request: a JSON-RPC message is a JSON object",
            ))],
        }
    }

    /// A JSON array: a batch.
    fn batch(&mut self, text: &str, len: usize) -> Vec<Action> {
        let refuse = |message: String| vec![Action::Reply(error_line("null", INVALID_REQUEST, &message))];
        if len == 0 {
            return refuse("Invalid request: an empty JSON-RPC batch".to_owned());
        }
        let allowed = protocol::batch_versions().collect::<Vec<_>>().join(", ");
        match &self.phase {
            Phase::Ready(version) if protocol::behaviour(version).batches => {}
            Phase::Ready(version) => {
                return refuse(format!(
                    "Invalid request: JSON-RPC batches are not supported under protocol {version} (only \
                     {allowed} allows them); send one message at a time"
                ));
            }
            _ => {
                return refuse(format!(
                    "Invalid request: server not initialized: send initialize first (on its own, not in a batch; \
                     batches are accepted under protocol {allowed} only)"
                ));
            }
        }
        let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) else {
            return refuse("Invalid request: the batch could not be read".to_owned());
        };
        let batch = self.next_batch;
        self.next_batch += 1;
        self.batches.insert(batch, Batch::default());
        let mut actions = Vec::new();
        for item in items {
            let outcome = match serde_json::from_str::<Value>(item.get()) {
                Ok(value @ Value::Object(_)) => self.message(item.get(), value, Some(batch)),
                _ => Outcome::Reply(error_line(
                    "null",
                    INVALID_REQUEST,
                    "Invalid request: a JSON-RPC message is a JSON object",
                )),
            };
            match outcome {
                Outcome::Forward(line) => actions.push(Action::Forward(line)),
                Outcome::Reply(line) => {
                    if let Some(open) = self.batches.get_mut(&batch) {
                        open.replies.push(line);
                    }
                }
                Outcome::Nothing => {}
            }
        }
        if let Some(line) = self.settle(batch) {
            actions.push(Action::Reply(line));
        }
        actions
    }

    /// The answer of `batch` once no request of it is waiting: the array of its replies (none when empty).
    fn settle(&mut self, batch: u64) -> Option<String> {
        if self.batches.get(&batch).is_some_and(|open| open.waiting == 0) {
            let done = self.batches.remove(&batch)?;
            if !done.replies.is_empty() {
                return Some(format!("[{}]", done.replies.join(",")));
            }
        }
        None
    }

    /// One JSON-RPC message (`text` is its JSON, `value` the same parsed).
    fn message(&mut self, text: &str, value: Value, batch: Option<u64>) -> Outcome {
        let Value::Object(object) = &value else { return Outcome::Nothing };
        let method = object.get("method").and_then(Value::as_str).map(str::to_owned);
        let Some(id) = object.get("id") else {
            // A notification (or a response without an id, which rmcp ignores).
            if method.as_deref() == Some("notifications/cancelled") {
                return Outcome::Forward(self.cancelled(text, &value));
            }
            return Outcome::Forward(text.to_owned());
        };
        let usable = matches!(id, Value::Number(_) | Value::String(_));
        let raw_id =
            if usable { raw_member(text, "id").unwrap_or_else(|| id.to_string()) } else { "null".to_owned() };
        let reply = |code: i64, message: &str| Outcome::Reply(error_line(&raw_id, code, message));
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return reply(INVALID_REQUEST, "Invalid request: `jsonrpc` must be \"2.0\"");
        }
        if !usable {
            return reply(INVALID_REQUEST, "Invalid request: `id` must be a number or a string");
        }
        let Some(method) = method else {
            if object.contains_key("result") || object.contains_key("error") {
                // The client's answer to one of our requests: rmcp routes it.
                return Outcome::Forward(text.to_owned());
            }
            return reply(INVALID_REQUEST, "Invalid request: a request needs a `method` (a string)");
        };
        if self.in_flight.contains(&id_key(&raw_id)) {
            return reply(
                INVALID_REQUEST,
                &format!(
                    "Invalid request: the id {raw_id} is that of a request still in progress; give each request \
                     an id of its own"
                ),
            );
        }
        if let Some(refusal) = self.lifecycle(&method, &raw_id, object, batch) {
            return refusal;
        }
        // rmcp reads a `tools/call` whose params do not fit as an unknown custom request and answers "method
        // not found: tools/call": say what is wrong instead.
        if method == "tools/call"
            && let Some(problem) = tool_call_problem(object.get("params"))
        {
            return reply(INVALID_PARAMS, &format!("Invalid params for tools/call: {problem}"));
        }
        let needs_surrogate = batch.is_some() || !rmcp_can_carry(id, &raw_id);
        let (line, parsed) = if needs_surrogate {
            let surrogate = format!("{SURROGATE_PREFIX}{}", self.next_surrogate);
            self.next_surrogate += 1;
            let Some(line) = replace_member(text, "id", &Value::String(surrogate.clone()).to_string()) else {
                return reply(INVALID_REQUEST, "Invalid request: the message could not be read");
            };
            let mut parsed = value.clone();
            parsed["id"] = Value::String(surrogate.clone());
            self.routes.insert(surrogate.clone(), Route { raw: raw_id.clone(), batch });
            self.surrogates.insert(raw_id.clone(), surrogate);
            if let Some(open) = batch.and_then(|b| self.batches.get_mut(&b)) {
                open.waiting += 1;
            }
            (line, parsed)
        } else {
            (text.to_owned(), value)
        };
        match serde_json::from_value::<ClientJsonRpcMessage>(parsed) {
            Ok(_) => {
                self.in_flight.insert(id_key(&raw_id));
                Outcome::Forward(line)
            }
            Err(e) => {
                if needs_surrogate {
                    // Its error is one of the batch's answers; `batch` settles it after the last element.
                    let _ = self.forget(&raw_id);
                }
                if method == "initialize" {
                    self.phase = Phase::Fresh;
                }
                reply(INVALID_PARAMS, &format!("Invalid params for {method}: {e}"))
            }
        }
    }

    /// The handshake rules for a request: `Some` answers it here.
    fn lifecycle(
        &mut self,
        method: &str,
        raw_id: &str,
        object: &serde_json::Map<String, Value>,
        batch: Option<u64>,
    ) -> Option<Outcome> {
        let reply = |code: i64, message: &str| Some(Outcome::Reply(error_line(raw_id, code, message)));
        if method == "initialize" {
            if batch.is_some() {
                return reply(INVALID_REQUEST, "Invalid request: initialize must not be part of a batch");
            }
            if self.phase != Phase::Fresh {
                return reply(
                    INVALID_REQUEST,
                    "Invalid request: already initialized: initialize may be sent once per connection",
                );
            }
            self.phase = Phase::Initializing(raw_id.to_owned());
            return None;
        }
        if self.phase != Phase::Fresh {
            return None;
        }
        let inline_lifecycle = method == "server/discover"
            || object
                .get("params")
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(META_PROTOCOL_VERSION))
                .is_some();
        if inline_lifecycle {
            return None;
        }
        if method == "ping" {
            return Some(Outcome::Reply(format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"result":{{}}}}"#)));
        }
        reply(
            INVALID_REQUEST,
            &format!(
                "Invalid request: server not initialized: send initialize first (got {method}; under protocol \
                 2026-07-28, which has no initialize, every request carries {META_PROTOCOL_VERSION} in its _meta)"
            ),
        )
    }

    /// Rewrite a `notifications/cancelled` that names a request under a surrogate id.
    fn cancelled(&mut self, text: &str, value: &Value) -> String {
        if value.pointer("/params/requestId").is_none() {
            return text.to_owned();
        }
        let Some(params) = raw_member(text, "params") else { return text.to_owned() };
        let Some(raw_id) = raw_member(&params, "requestId") else { return text.to_owned() };
        // rmcp sends no answer to a cancelled request: its id is free again.
        self.in_flight.remove(&id_key(&raw_id));
        let Some(surrogate) = self.surrogates.get(&raw_id).cloned() else { return text.to_owned() };
        // rmcp sends no answer to a cancelled request: stop waiting for one (a batch it completes is answered
        // after this line).
        if let Some(batch) = self.forget(&raw_id)
            && let Some(line) = self.settle(batch)
        {
            self.settled.push(line);
        }
        let params = replace_member(&params, "requestId", &Value::String(surrogate).to_string());
        params.and_then(|params| replace_member(text, "params", &params)).unwrap_or_else(|| text.to_owned())
    }

    /// Drop the route of the request whose raw id is `raw_id` (refused or cancelled: no answer will come from
    /// rmcp); returns its batch, which the caller settles when it is done with it.
    fn forget(&mut self, raw_id: &str) -> Option<u64> {
        let surrogate = self.surrogates.remove(raw_id)?;
        let batch = self.routes.remove(&surrogate)?.batch?;
        if let Some(open) = self.batches.get_mut(&batch) {
            open.waiting = open.waiting.saturating_sub(1);
        }
        Some(batch)
    }

    /// Decide what to do with one line from rmcp (without its newline): `None` holds it back (an answer that
    /// belongs to an open batch, or to a cancelled request).
    pub fn output(&mut self, line: &[u8]) -> Option<Vec<u8>> {
        let Ok(text) = std::str::from_utf8(line) else { return Some(line.to_vec()) };
        let Ok(peek) = serde_json::from_str::<Peek<'_>>(text) else { return Some(line.to_vec()) };
        if let Some(method) = peek.method {
            let mode = match self.negotiated().map(|b| b.elicitation) {
                Some(Elicitation::Request { mode, .. }) => mode,
                Some(Elicitation::None) => false,
                Some(Elicitation::OnResult) | None => true,
            };
            if method.get() == r#""elicitation/create""# && !mode {
                return Some(without_elicitation_mode(text).into_bytes());
            }
            return Some(line.to_vec());
        }
        let id = peek.id.map(RawValue::get).filter(|id| *id != "null");
        let Some(id) = id else {
            if peek.error.is_some() && peek.id.is_none() {
                return Some(
                    replace_member(text, "id", "null").unwrap_or_else(|| text.to_owned()).into_bytes(),
                );
            }
            return Some(line.to_vec());
        };
        let mut line = text.to_owned();
        let mut raw_id = id.to_owned();
        let mut batch = None;
        if let Ok(Value::String(surrogate)) = serde_json::from_str::<Value>(id)
            && surrogate.starts_with(SURROGATE_PREFIX)
        {
            let Some(route) = self.routes.remove(&surrogate) else {
                tracing::debug!(%surrogate, "dropping the answer to a cancelled request");
                return None;
            };
            self.surrogates.remove(&route.raw);
            line = replace_member(text, "id", &route.raw).unwrap_or(line);
            raw_id = route.raw;
            batch = route.batch;
        }
        self.in_flight.remove(&id_key(&raw_id));
        if let Phase::Initializing(init) = &self.phase
            && *init == raw_id
        {
            let version = peek
                .result
                .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
                .and_then(|r| r.get("protocolVersion").and_then(Value::as_str).map(str::to_owned));
            self.phase = match version {
                Some(version) => Phase::Ready(version),
                None => Phase::Fresh,
            };
        }
        match batch {
            None => Some(line.into_bytes()),
            Some(batch) => {
                if let Some(open) = self.batches.get_mut(&batch) {
                    open.replies.push(line);
                    open.waiting = open.waiting.saturating_sub(1);
                }
                self.settle(batch).map(String::into_bytes)
            }
        }
    }

    /// What the negotiated version asks for (`None` before the handshake).
    fn negotiated(&self) -> Option<&'static protocol::Behaviour> {
        match &self.phase {
            Phase::Ready(version) => Some(protocol::behaviour(version)),
            _ => None,
        }
    }
}

/// Whether rmcp carries `id` exactly: an `i64` written plainly, or a string that is not one of our surrogates.
/// What is wrong with the params of a `tools/call`, if anything.
fn tool_call_problem(params: Option<&Value>) -> Option<&'static str> {
    let Some(params) = params.filter(|p| !p.is_null()) else {
        return Some("`params` is missing: it is an object with the tool's `name` and its `arguments`");
    };
    let Some(params) = params.as_object() else {
        return Some("`params` must be an object with the tool's `name` and its `arguments`");
    };
    if !params.get("name").is_some_and(Value::is_string) {
        return Some("`name` must be a string naming the tool");
    }
    match params.get("arguments") {
        None | Some(Value::Null | Value::Object(_)) => None,
        Some(_) => Some("`arguments` must be an object"),
    }
}

fn rmcp_can_carry(id: &Value, raw: &str) -> bool {
    match id {
        Value::Number(n) => n.as_i64().is_some_and(|v| v.to_string() == raw),
        Value::String(s) => !s.starts_with(SURROGATE_PREFIX),
        _ => false,
    }
}

/// The raw JSON text of the top-level member `name` of the object `text`.
fn raw_member(text: &str, name: &str) -> Option<String> {
    let members: BTreeMap<String, &RawValue> = serde_json::from_str(text).ok()?;
    members.get(name).map(|raw| raw.get().to_owned())
}

/// The object `text` with its top-level member `name` set to the JSON text `raw` (every other member kept
/// byte for byte).
fn replace_member(text: &str, name: &str, raw: &str) -> Option<String> {
    let mut members: BTreeMap<String, &RawValue> = serde_json::from_str(text).ok()?;
    let value = RawValue::from_string(raw.to_owned()).ok()?;
    members.insert(name.to_owned(), &value);
    serde_json::to_string(&members).ok()
}

/// An `elicitation/create` request without `params.mode` (a field 2025-06-18 does not have).
fn without_elicitation_mode(text: &str) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(text) else { return text.to_owned() };
    if let Some(params) = value.get_mut("params").and_then(Value::as_object_mut) {
        params.remove("mode");
    }
    value.to_string()
}

/// The id written as `raw` in one canonical form (`"a\u0062"` and `"ab"` are the same id; rmcp writes the
/// ids it carries its own way).
fn id_key(raw: &str) -> String {
    serde_json::from_str::<Value>(raw).map_or_else(|_| raw.to_owned(), |id| id.to_string())
}

/// The raw top-level `id` of a message that is not valid JSON, when it is whole before the text breaks off or
/// goes wrong: a string, or a number followed by what ends a member (a number at the very end may be cut).
/// `None` for anything else, and for a message that already showed itself to be a response (`result`, `error`).
fn leading_id(line: &[u8]) -> Option<String> {
    let mut at = skip_space(line, 0);
    if line.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    loop {
        at = skip_space(line, at);
        let key_end = skip_string(line, at)?;
        let key: String = serde_json::from_slice(line.get(at..key_end)?).ok()?;
        at = skip_space(line, key_end);
        if line.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(line, at + 1);
        let value_end = skip_value(line, at)?;
        if key == "result" || key == "error" {
            return None;
        }
        let after = skip_space(line, value_end);
        let ended = matches!(line.get(after), Some(b',' | b'}'));
        if key == "id" {
            let raw = line.get(at..value_end)?;
            let whole = raw.first() == Some(&b'"') || ended;
            return match serde_json::from_slice::<Value>(raw).ok()? {
                Value::Number(_) | Value::String(_) if whole => {
                    std::str::from_utf8(raw).ok().map(str::to_owned)
                }
                _ => None,
            };
        }
        if !ended || line.get(after) == Some(&b'}') {
            return None;
        }
        at = after + 1;
    }
}

fn skip_space(line: &[u8], mut at: usize) -> usize {
    while line.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// The end (one past the closing quote) of the string starting at `at`; `None` when there is none there or it
/// is cut.
fn skip_string(line: &[u8], at: usize) -> Option<usize> {
    if line.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    loop {
        match line.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// The end of the JSON value starting at `at` (strings and nesting followed, not checked); `None` when it is cut.
fn skip_value(line: &[u8], at: usize) -> Option<usize> {
    match line.get(at)? {
        b'"' => skip_string(line, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match line.get(i)? {
                    b'"' => {
                        i = skip_string(line, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let mut i = at;
            while line.get(i).is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace()) {
                i += 1;
            }
            (i > at).then_some(i)
        }
    }
}

/// A JSON-RPC error answer to the request whose raw id is `raw_id` (`null` when it has none).
pub fn error_line(raw_id: &str, code: i64, message: &str) -> String {
    let message = Value::String(message.to_owned());
    format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"error":{{"code":{code},"message":{message}}}}}"#)
}

/// The raw `id` of a request whose JSON is invalid only because of lone surrogate escapes or bytes that are not
/// UTF-8 (both replaced here by U+FFFD just to read the id); `null` otherwise. Only a number or string id found
/// at the top level counts, and not one that held such bytes itself.
fn recover_id(line: &[u8]) -> String {
    let null = || "null".to_owned();
    let utf8 = std::str::from_utf8(line).is_ok();
    let text = String::from_utf8_lossy(line);
    let repaired = replace_lone_surrogates(&text);
    match serde_json::from_str::<Value>(&repaired) {
        Ok(Value::Object(object)) if object.contains_key("method") => match object.get("id") {
            Some(Value::Number(_) | Value::String(_)) => raw_member(&repaired, "id")
                .filter(|raw| utf8 || !raw.contains('\u{FFFD}'))
                .unwrap_or_else(null),
            _ => null(),
        },
        _ => null(),
    }
}

fn has_lone_surrogate(line: &[u8]) -> bool {
    std::str::from_utf8(line).is_ok_and(|text| replace_lone_surrogates(text) != text)
}

/// Rewrite every `\uD800`-`\uDFFF` escape that is not part of a valid pair as `\uFFFD`, leaving everything else
/// (including escaped backslashes) untouched.
fn replace_lone_surrogates(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut in_string = false;
    let mut last = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !in_string {
            if b == b'"' {
                in_string = true;
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = false;
                i += 1;
            }
            b'\\' if bytes.get(i + 1) == Some(&b'u') => {
                let unit = hex4(bytes, i + 2);
                match unit {
                    Some(0xD800..=0xDBFF) => {
                        let paired = bytes.get(i + 6) == Some(&b'\\')
                            && bytes.get(i + 7) == Some(&b'u')
                            && matches!(hex4(bytes, i + 8), Some(0xDC00..=0xDFFF));
                        if paired {
                            i += 12;
                        } else {
                            out.push_str(&text[last..i]);
                            out.push_str("\\uFFFD");
                            i += 6;
                            last = i;
                        }
                    }
                    Some(0xDC00..=0xDFFF) => {
                        out.push_str(&text[last..i]);
                        out.push_str("\\uFFFD");
                        i += 6;
                        last = i;
                    }
                    _ => i += 2,
                }
            }
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    out.push_str(text.get(last..).unwrap_or_default());
    out
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A filter past the handshake under `version`.
    fn ready(version: &str) -> Filter {
        let mut filter = Filter::default();
        let init = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"t","version":"0"}}}}}}"#
        );
        assert!(matches!(filter.input(init.as_bytes())[..], [Action::Forward(_)]));
        let answer = format!(r#"{{"jsonrpc":"2.0","id":0,"result":{{"protocolVersion":"{version}"}}}}"#);
        assert!(filter.output(answer.as_bytes()).is_some());
        filter
    }

    fn reply_to(filter: &mut Filter, line: &str) -> Value {
        match &filter.input(line.as_bytes())[..] {
            [Action::Reply(text)] => serde_json::from_str(text).unwrap(),
            other => panic!("expected one reply for {line}, got {other:?}"),
        }
    }

    fn reply(line: &str) -> Value {
        reply_to(&mut ready("2025-11-25"), line)
    }

    fn forwarded(filter: &mut Filter, line: &str) -> Value {
        match &filter.input(line.as_bytes())[..] {
            [Action::Forward(text)] => serde_json::from_str(text).unwrap(),
            other => panic!("expected {line} to go to rmcp, got {other:?}"),
        }
    }

    #[test]
    fn valid_messages_pass() {
        let mut filter = ready("2025-11-25");
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write_stdin","arguments":{"session_id":"x"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/some_vendor_thing","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"no/such/method","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"s","result":{}}"#,
        ] {
            assert_eq!(filter.input(line.as_bytes()), vec![Action::Forward(line.to_owned())], "{line}");
        }
        assert!(filter.input(b"   ").is_empty());
    }

    #[test]
    fn invalid_json_gets_a_parse_error() {
        let r = reply("{not json");
        assert_eq!(r["error"]["code"], PARSE_ERROR);
        assert_eq!(r["id"], Value::Null);
        assert!(r["error"]["message"].as_str().unwrap().contains("not valid JSON"));
    }

    #[test]
    fn lone_surrogate_gets_a_parse_error_with_the_request_id() {
        let line = r#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"write_stdin","arguments":{"session_id":1000,"chars":"a\ud800b"}}}"#;
        let r = reply(line);
        assert_eq!(r["id"], 42);
        assert_eq!(r["error"]["code"], PARSE_ERROR);
        assert!(r["error"]["message"].as_str().unwrap().contains("surrogate"), "{r}");
        // A valid pair is fine, and an escaped backslash before `ud800` is not an escape at all.
        let ok = r#"{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":"x","arguments":{"chars":"\ud83d\ude00 \\ud800"}}}"#;
        assert!(matches!(ready("2025-11-25").input(ok.as_bytes())[..], [Action::Forward(_)]));
        let low = r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"x","arguments":{"chars":"\udc00"}}}"#;
        assert_eq!(reply(low)["id"], "s");
        // A big id comes back as written.
        let big = r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping","params":{"x":"\ud800"}}"#;
        let text = match &ready("2025-11-25").input(big.as_bytes())[..] {
            [Action::Reply(text)] => text.clone(),
            other => panic!("{other:?}"),
        };
        assert!(text.contains(r#""id":123456789012345678901234567890"#), "{text}");
    }

    #[test]
    fn bytes_that_are_not_utf8_get_a_parse_error_with_the_request_id() {
        let mut line =
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"chars":"a"#.to_vec();
        line.extend_from_slice(b"\xff\xfeb\"}}}");
        let r = match &ready("2025-11-25").input(&line)[..] {
            [Action::Reply(text)] => serde_json::from_str::<Value>(text).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(r["id"], 7, "{r}");
        assert_eq!(r["error"]["code"], PARSE_ERROR);
        assert!(r["error"]["message"].as_str().unwrap().contains("not valid UTF-8"), "{r}");
        // An id that holds such bytes itself is not guessed at.
        let bad_id = b"{\"jsonrpc\":\"2.0\",\"id\":\"a\xffb\",\"method\":\"ping\"}";
        let r = match &ready("2025-11-25").input(bad_id)[..] {
            [Action::Reply(text)] => serde_json::from_str::<Value>(text).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(r["id"], Value::Null, "{r}");
    }

    #[test]
    fn a_request_reusing_the_id_of_one_in_progress_is_refused_until_that_one_is_answered_or_cancelled() {
        let mut filter = ready("2025-11-25");
        let call = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"exec_command","arguments":{"cmd":"sleep 9"}}}"#;
        forwarded(&mut filter, call);
        let again = r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#;
        let refused = reply_to(&mut filter, again);
        assert_eq!(
            (refused["id"].clone(), refused["error"]["code"].clone()),
            (json!(5), json!(INVALID_REQUEST))
        );
        assert!(refused["error"]["message"].as_str().unwrap().contains("in progress"), "{refused}");
        // The same number as a string is another id; the same string spelled with an escape is the same one.
        forwarded(&mut filter, r#"{"jsonrpc":"2.0","id":"5","method":"ping"}"#);
        assert_eq!(reply_to(&mut filter, r#"{"jsonrpc":"2.0","id":"\u0035","method":"ping"}"#)["id"], "5");
        assert_eq!(
            filter.output(br#"{"jsonrpc":"2.0","id":"5","result":{}}"#).map(|l| l.is_empty()),
            Some(false)
        );
        // Answered: the id is free again.
        assert!(filter.output(br#"{"jsonrpc":"2.0","id":5,"result":{"content":[]}}"#).is_some());
        forwarded(&mut filter, again);
        // Cancelled: free as well (rmcp sends no answer).
        filter.input(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#);
        forwarded(&mut filter, again);
        // An id rmcp cannot carry is tracked by what the client wrote.
        let big = r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#;
        forwarded(&mut filter, big);
        assert_eq!(reply_to(&mut filter, big)["error"]["code"], INVALID_REQUEST);
    }

    #[test]
    fn a_message_cut_after_its_id_is_answered_with_that_id() {
        for (line, id) in [
            (r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"exec_comm"#, json!(7)),
            (r#"{"jsonrpc":"2.0","id":"abc","#, json!("abc")),
            (r#"{"jsonrpc":"2.0","id":"abc""#, json!("abc")),
            (r#" { "id" : -12 , "method": "tools/call", "params": {"a": [1, "]}", {"#, json!(-12)),
            (r#"{"params":{"x":"}\"{"},"id":8,"method":"#, json!(8)),
            (r#"{"jsonrpc":"2.0","id":9,"method":"x","params":{"n":1e400}}"#, json!(9)),
            // Not readable: cut inside the id, a number that may be cut, before it, a response, no object.
            (r#"{"jsonrpc":"2.0","id":"ab"#, Value::Null),
            (r#"{"jsonrpc":"2.0","id":12"#, Value::Null),
            (r#"{"jsonrpc":"2.0","method":"ping","#, Value::Null),
            (r#"{"jsonrpc":"2.0","result":{},"id":3,"#, Value::Null),
            (r#"{"jsonrpc":"2.0","id":{"a":1},"#, Value::Null),
            (r#"{"jsonrpc":"2.0" "id":4,"#, Value::Null),
            (r#"[{"id":4,"#, Value::Null),
        ] {
            let r = reply(line);
            assert_eq!(r["error"]["code"], PARSE_ERROR, "{line}");
            assert_eq!(r["id"], id, "{line}");
        }
    }

    #[test]
    fn surrogate_repair_is_exact() {
        assert_eq!(replace_lone_surrogates(r#""a\ud800b""#), r#""a\uFFFDb""#);
        assert_eq!(replace_lone_surrogates(r#""\ud83d\ude00""#), r#""\ud83d\ude00""#);
        assert_eq!(replace_lone_surrogates(r#""\\ud800""#), r#""\\ud800""#);
        assert_eq!(replace_lone_surrogates(r#"{"k":"\ud800\ud800"}"#), r#"{"k":"\uFFFD\uFFFD"}"#);
    }

    #[test]
    fn a_tool_call_of_the_wrong_shape_says_what_is_wrong() {
        for (params, needle) in [
            ("", "`params` is missing"),
            (r#","params":null"#, "`params` is missing"),
            (r#","params":[1]"#, "`params` must be an object"),
            (r#","params":{"arguments":{}}"#, "`name` must be a string"),
            (r#","params":{"name":7}"#, "`name` must be a string"),
            (r#","params":{"name":"list_sessions","arguments":"x"}"#, "`arguments` must be an object"),
            (r#","params":{"name":"list_sessions","arguments":[]}"#, "`arguments` must be an object"),
        ] {
            let r = reply(&format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call"{params}}}"#));
            assert_eq!(r["id"], 9, "{params}: {r}");
            assert_eq!(r["error"]["code"], INVALID_PARAMS, "{params}: {r}");
            assert!(r["error"]["message"].as_str().unwrap().contains(needle), "{params}: {r}");
        }
        let mut filter = ready("2025-11-25");
        for (id, params) in
            [(10, r#"{"name":"list_sessions"}"#), (11, r#"{"name":"list_sessions","arguments":null}"#)]
        {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#);
            forwarded(&mut filter, &line);
        }
    }

    #[test]
    fn wrong_shapes_get_errors_with_usable_ids_only() {
        let r = reply(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":5}"#);
        assert_eq!(r["id"], 7);
        assert_eq!(r["error"]["code"], INVALID_PARAMS);
        let r = reply(r#"{"jsonrpc":"1.0","id":8,"method":"tools/list"}"#);
        assert_eq!(r["id"], 8);
        assert_eq!(r["error"]["code"], INVALID_REQUEST);
        let r = reply("42");
        assert_eq!(r["error"]["code"], INVALID_REQUEST);
        // An id that is not a number or a string is no id: `"id": null`, present.
        for id in ["true", "null", "[1]", r#"{"a":1}"#] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let r = reply(&line);
            assert_eq!(r["error"]["code"], INVALID_REQUEST, "{line}");
            assert_eq!(r.get("id"), Some(&Value::Null), "{line}: {r}");
        }
        // An id without a method or a result: invalid, answered with its id.
        let r = reply(r#"{"jsonrpc":"2.0","id":7}"#);
        assert_eq!((r["id"].clone(), r["error"]["code"].clone()), (json!(7), json!(INVALID_REQUEST)));
    }

    #[test]
    fn ids_rmcp_cannot_carry_are_echoed_exactly() {
        for id in
            ["9223372036854775813", "123456789012345678901234567890", "-9223372036854775809", "1.0", "1e3"]
        {
            let mut filter = ready("2025-11-25");
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{}}}}"#);
            let sent = forwarded(&mut filter, &line);
            let surrogate = sent["id"].as_str().unwrap().to_owned();
            assert!(surrogate.starts_with(SURROGATE_PREFIX), "{sent}");
            assert_eq!(sent["method"], "tools/list");
            let answer = format!(r#"{{"jsonrpc":"2.0","id":"{surrogate}","result":{{"tools":[]}}}}"#);
            let out = String::from_utf8(filter.output(answer.as_bytes()).unwrap()).unwrap();
            assert!(out.contains(&format!(r#""id":{id}"#)), "{id}: {out}");
            assert!(filter.routes.is_empty() && filter.surrogates.is_empty());
        }
        // A client string id that looks like a surrogate is carried under one too (no collision).
        let mut filter = ready("2025-11-25");
        let line = format!(r#"{{"jsonrpc":"2.0","id":"{SURROGATE_PREFIX}1","method":"ping"}}"#);
        let sent = forwarded(&mut filter, &line);
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, sent["id"]);
        let out: Value = serde_json::from_slice(&filter.output(answer.as_bytes()).unwrap()).unwrap();
        assert_eq!(out["id"], format!("{SURROGATE_PREFIX}1"));
    }

    #[test]
    fn a_cancellation_names_the_surrogate_and_its_late_answer_is_dropped() {
        let mut filter = ready("2025-11-25");
        let sent =
            forwarded(&mut filter, r#"{"jsonrpc":"2.0","id":99999999999999999999,"method":"tools/list"}"#);
        let cancel = forwarded(
            &mut filter,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99999999999999999999,"reason":"x"}}"#,
        );
        assert_eq!(cancel["params"]["requestId"], sent["id"]);
        assert_eq!(cancel["params"]["reason"], "x");
        let late = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, sent["id"]);
        assert_eq!(filter.output(late.as_bytes()), None);
        // Plain ids pass untouched.
        let plain = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#;
        assert_eq!(filter.input(plain.as_bytes()), vec![Action::Forward(plain.to_owned())]);
    }

    #[test]
    fn errors_without_an_id_get_a_null_id() {
        let mut filter = ready("2025-11-25");
        let out = filter.output(br#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid request"}}"#);
        let out: Value = serde_json::from_slice(&out.unwrap()).unwrap();
        assert_eq!(out.get("id"), Some(&Value::Null), "{out}");
        assert_eq!(out["error"]["code"], -32600);
    }

    #[test]
    fn the_handshake_is_enforced() {
        let mut filter = Filter::default();
        let r = reply_to(&mut filter, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        assert_eq!(r["id"], 1);
        assert!(
            r["error"]["message"].as_str().unwrap().contains("server not initialized: send initialize first")
        );
        let r = reply_to(&mut filter, r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#);
        assert_eq!(r, json!({ "jsonrpc": "2.0", "id": 2, "result": {} }));
        // The 2026-07-28 lifecycle carries its version in every request: rmcp serves it.
        for line in [
            r#"{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        ] {
            assert!(matches!(filter.input(line.as_bytes())[..], [Action::Forward(_)]), "{line}");
        }
        let mut filter = ready("2025-11-25");
        let r = reply_to(
            &mut filter,
            r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        );
        assert_eq!(r["id"], 5);
        assert!(r["error"]["message"].as_str().unwrap().contains("already initialized"), "{r}");
        // A failed initialize may be retried.
        let mut filter = Filter::default();
        let init = r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
        assert!(matches!(filter.input(init.as_bytes())[..], [Action::Forward(_)]));
        assert!(
            filter.output(br#"{"jsonrpc":"2.0","id":"i","error":{"code":-32602,"message":"no"}}"#).is_some()
        );
        assert!(matches!(filter.input(init.as_bytes())[..], [Action::Forward(_)]));
    }

    #[test]
    fn batches_are_answered_as_arrays_under_2025_03_26() {
        let mut filter = ready("2025-03-26");
        let batch = r#"[{"jsonrpc":"2.0","id":0,"method":"tools/call","params":"bad"},{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":"b","method":"ping"},{"jsonrpc":"2.0","id":3,"method":"tools/call","params":7},5]"#;
        let actions = filter.input(batch.as_bytes());
        let forwarded: Vec<Value> = actions
            .iter()
            .map(|a| match a {
                Action::Forward(text) => serde_json::from_str(text).unwrap(),
                Action::Reply(text) => panic!("answered before the batch was done: {text}"),
            })
            .collect();
        assert_eq!(forwarded.len(), 3, "{forwarded:?}");
        let answer =
            |v: &Value| format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{"n":{}}}}}"#, v["id"], v["method"]);
        assert_eq!(filter.output(answer(&forwarded[2]).as_bytes()), None);
        let done = filter.output(answer(&forwarded[0]).as_bytes()).unwrap();
        let done: Vec<Value> = serde_json::from_slice(&done).unwrap();
        let ids: Vec<Value> = done.iter().map(|r| r["id"].clone()).collect();
        assert_eq!(done.len(), 5, "{done:?}");
        for id in [json!(0), json!(1), json!("b"), json!(3), Value::Null] {
            assert!(ids.contains(&id), "{id} missing from {ids:?}");
        }
        // Notifications only: no answer at all. Empty: invalid request.
        let mut filter = ready("2025-03-26");
        let actions = filter.input(br#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#);
        assert!(actions.iter().all(|a| matches!(a, Action::Forward(_))), "{actions:?}");
        let r = reply_to(&mut filter, "[]");
        assert_eq!((r["id"].clone(), r["error"]["code"].clone()), (Value::Null, json!(INVALID_REQUEST)));
        // initialize never belongs in a batch.
        let r = filter.input(br#"[{"jsonrpc":"2.0","id":9,"method":"initialize","params":{}}]"#);
        let Action::Reply(text) = &r[0] else { panic!("{r:?}") };
        assert!(text.contains("must not be part of a batch"), "{text}");
    }

    #[test]
    fn a_cancelled_request_does_not_hold_its_batch_back() {
        let mut filter = ready("2025-03-26");
        let actions = filter.input(
            br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}]"#,
        );
        let sent: Vec<Value> = actions
            .iter()
            .map(|a| match a {
                Action::Forward(text) => serde_json::from_str(text).unwrap(),
                Action::Reply(text) => panic!("{text}"),
            })
            .collect();
        let first = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, sent[0]["id"]);
        assert_eq!(filter.output(first.as_bytes()), None);
        let actions =
            filter.input(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#);
        let [Action::Forward(cancel), Action::Reply(answer)] = &actions[..] else { panic!("{actions:?}") };
        assert!(cancel.contains(sent[1]["id"].as_str().unwrap()), "{cancel}");
        let answer: Vec<Value> = serde_json::from_str(answer).unwrap();
        assert_eq!(answer, vec![json!({ "jsonrpc": "2.0", "id": 1, "result": {} })]);
        assert!(filter.batches.is_empty() && filter.routes.is_empty());
    }

    #[test]
    fn batches_are_refused_under_other_versions_and_before_initialize() {
        for mut filter in [ready("2025-06-18"), ready("2025-11-25")] {
            let r = reply_to(&mut filter, r#"[{"jsonrpc":"2.0","id":9,"method":"tools/list"}]"#);
            assert_eq!(r["error"]["code"], INVALID_REQUEST);
            assert!(r["error"]["message"].as_str().unwrap().contains("not supported under protocol"), "{r}");
        }
        let r = reply_to(&mut Filter::default(), r#"[{"jsonrpc":"2.0","id":9,"method":"tools/list"}]"#);
        assert!(r["error"]["message"].as_str().unwrap().contains("send initialize first"), "{r}");
    }

    #[test]
    fn elicitation_mode_is_dropped_before_2025_11_25() {
        let request = br#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"mode":"form","message":"m","requestedSchema":{"type":"object","properties":{}}}}"#;
        let out: Value = serde_json::from_slice(&ready("2025-06-18").output(request).unwrap()).unwrap();
        assert!(out["params"].get("mode").is_none(), "{out}");
        assert_eq!(out["params"]["message"], "m");
        let out: Value = serde_json::from_slice(&ready("2025-11-25").output(request).unwrap()).unwrap();
        assert_eq!(out["params"]["mode"], "form");
    }
}
