//! Test harness: a `uexec mcp` child driven with raw JSON-RPC messages over either transport (stdio lines, or
//! Streamable HTTP: each message POSTed, every answer of its response and of the session's GET stream read as
//! one message), a temporary workspace, and /proc helpers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use serde_json::{Value, json};

/// How long any single answer may take on a loaded machine.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// The binary under test.
pub fn uexec() -> &'static str {
    env!("CARGO_BIN_EXE_uexec")
}

/// A workspace under /tmp plus a directory outside every default writable root.
pub struct Workspace {
    pub dir: tempfile::TempDir,
    pub outside: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Workspace {
        let dir = tempfile::Builder::new().prefix("uexec-test-").tempdir_in("/tmp").unwrap();
        let outside_base = if Path::new("/var/tmp").is_dir() { PathBuf::from("/var/tmp") } else { home() };
        let outside =
            tempfile::Builder::new().prefix("uexec-test-outside-").tempdir_in(outside_base).unwrap();
        Workspace { dir, outside }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// `--config` with a file (outside the workspace) whose early-exit grace is the whole longest yield window: every
/// sandboxed run that ends within its yield window is judged for a sandbox denial, however slow the machine (the
/// default grace, 150 ms, is a race a loaded machine can lose).
pub fn whole_window_grace(ws: &Workspace) -> [String; 2] {
    let config = ws.outside.path().join("whole-window-grace.toml");
    std::fs::write(&config, "[limits]\nearly_exit_grace_ms = 30000\n").unwrap();
    ["--config".to_owned(), config.to_str().unwrap().to_owned()]
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"))
}

/// A command running `uexec` with a clean, deterministic environment.
pub fn uexec_command(ws: &Workspace, args: &[&str]) -> Command {
    let mut cmd = Command::new(uexec());
    cmd.args(args)
        .current_dir(ws.path())
        .env("SHELL", "/bin/bash")
        // The login shell (-lc) reads ~/.bash_profile: keep this machine's profile out of the outputs.
        .env("HOME", ws.path())
        .env("XDG_CONFIG_HOME", ws.path().join(".no-config"))
        .env_remove("RUST_LOG")
        .env_remove("TMPDIR");
    cmd
}

/// Each named test `fn name(t: Transport)` as two tests, `over_stdio::name` and `over_http::name`: one behaviour
/// on every transport.
#[macro_export]
macro_rules! over_both_transports {
    ($($name:ident),* $(,)?) => {
        mod over_stdio {
            $( #[test] fn $name() { super::$name($crate::common::Transport::Stdio) } )*
        }
        mod over_http {
            $( #[test] fn $name() { super::$name($crate::common::Transport::Http) } )*
        }
    };
}

/// How a test reaches `uexec mcp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// JSON-RPC lines on the child's stdin and stdout.
    Stdio,
    /// `uexec mcp --listen 127.0.0.1:0`, a bearer token, one MCP session over Streamable HTTP.
    Http,
}

impl Transport {
    /// [`marker_seconds`] for a test that runs over both transports: the two runs may share a process (`cargo
    /// test`), so each has markers of its own.
    pub fn marker(self, salt: u32) -> String {
        match self {
            Transport::Stdio => marker_seconds(salt),
            Transport::Http => format!("{}1", marker_seconds(salt)),
        }
    }
}

/// How messages reach the server.
enum Link {
    Stdio(Option<ChildStdin>),
    Http(HttpLink),
}

/// One MCP session over Streamable HTTP.
struct HttpLink {
    runtime: tokio::runtime::Runtime,
    addr: SocketAddr,
    token: String,
    /// The session id (after `initialize`) and the negotiated version.
    session: SessionState,
    /// Where every message of every response goes.
    tx: Sender<(String, Value)>,
}

/// The MCP session id of an HTTP client (after `initialize`) and the version it negotiated.
type SessionState = Arc<Mutex<Option<(String, Option<String>)>>>;

/// The bearer token of the HTTP servers of these tests.
const HTTP_TOKEN: &str = "harness-token-0123456789abcdef0123456789";

/// A `uexec mcp` child and its JSON-RPC messages (or one more client of a listening child,
/// [`McpServer::another_http_client`], which owns no process).
pub struct McpServer {
    child: Option<Child>,
    link: Link,
    lines: Receiver<(String, Value)>,
    next_id: i64,
    /// Elicitation requests received, in order (their `params`).
    pub elicitations: Vec<Value>,
    /// Answers to give to elicitation requests, in order: `approve`, `approve_for_session`, `deny`, `decline`.
    pub answers: Vec<String>,
    /// Notifications from the server skipped while waiting for a response, oldest first (`wait_method` looks
    /// here first).
    skipped: Vec<Value>,
}

impl McpServer {
    /// Start `uexec mcp <args>` in `ws` (not yet initialized).
    pub fn start(ws: &Workspace, args: &[&str]) -> McpServer {
        McpServer::start_with_env(ws, args, &[])
    }

    /// Start `uexec mcp <args>` in `ws`, reached over `transport` (not yet initialized).
    pub fn start_over(transport: Transport, ws: &Workspace, args: &[&str]) -> McpServer {
        match transport {
            Transport::Stdio => McpServer::start(ws, args),
            Transport::Http => McpServer::start_http(ws, args),
        }
    }

    /// [`McpServer::start_over`], then the initialize handshake (protocol 2025-11-25).
    pub fn start_initialized_over(
        transport: Transport,
        ws: &Workspace,
        args: &[&str],
        elicitation: bool,
    ) -> McpServer {
        let mut server = McpServer::start_over(transport, ws, args);
        server.initialize(elicitation);
        server
    }

    /// Start `uexec mcp --listen 127.0.0.1:0 <args>` in `ws` with a token file outside every writable root.
    fn start_http(ws: &Workspace, args: &[&str]) -> McpServer {
        let token_file = ws.outside.path().join("harness-token");
        std::fs::write(&token_file, format!("{HTTP_TOKEN}\n")).unwrap();
        let mut all =
            vec!["mcp", "--listen", "127.0.0.1:0", "--auth-token-file", token_file.to_str().unwrap()];
        all.extend_from_slice(args);
        let mut cmd = uexec_command(ws, &all);
        cmd.env("XDG_RUNTIME_DIR", ws.outside.path().join("run")).env_remove("UEXEC_AUTH_TOKEN_FILE");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn uexec");
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut before = String::new();
        let addr = loop {
            let Some(Ok(line)) = stderr.next() else {
                panic!("uexec mcp --listen ended before listening; stderr:\n{before}");
            };
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.trim_end_matches("/mcp").parse::<SocketAddr>().unwrap();
            }
            before.push_str(&line);
            before.push('\n');
        };
        // The rest of its log goes where a stdio server's goes.
        std::thread::spawn(move || {
            for line in stderr.map_while(Result::ok) {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        });
        let (tx, lines) = channel();
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let link = HttpLink { runtime, addr, token: HTTP_TOKEN.to_owned(), session: Arc::default(), tx };
        McpServer {
            child: Some(child),
            link: Link::Http(link),
            lines,
            next_id: 1,
            elicitations: Vec::new(),
            answers: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Start `uexec mcp <args>` in `ws` with `env` added to its environment (not yet initialized).
    pub fn start_with_env(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> McpServer {
        let mut all = vec!["mcp"];
        all.extend_from_slice(args);
        let mut cmd = uexec_command(ws, &all);
        cmd.envs(env.iter().copied());
        McpServer::spawn(cmd)
    }

    /// Start `command` (a wrapper that ends in `exec uexec mcp ...`) in `ws` with the environment of
    /// [`uexec_command`], its stderr its own (not yet initialized).
    pub fn start_command(ws: &Workspace, mut command: Command) -> McpServer {
        let template = uexec_command(ws, &[]);
        command.current_dir(ws.path());
        for (key, value) in template.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        McpServer::spawn(command)
    }

    fn spawn(mut cmd: Command) -> McpServer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn uexec mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            let reader = BufReader::new(stdout);
            for line in reader.lines() {
                let Ok(line) = line else { break };
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("server wrote a line that is not JSON ({e}): {line}"));
                if tx.send((line, value)).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        McpServer {
            child: Some(child),
            link: Link::Stdio(stdin),
            lines,
            next_id: 1,
            elicitations: Vec::new(),
            answers: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Start and run the initialize handshake (protocol 2025-11-25), declaring elicitation when asked to.
    pub fn start_initialized(ws: &Workspace, args: &[&str], elicitation: bool) -> McpServer {
        let mut server = McpServer::start(ws, args);
        server.initialize(elicitation);
        server
    }

    /// Run the initialize handshake (protocol 2025-11-25), declaring elicitation when asked to.
    pub fn initialize(&mut self, elicitation: bool) {
        let server = self;
        let capabilities = if elicitation { json!({ "elicitation": {} }) } else { json!({}) };
        let result = server.request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities,
                "clientInfo": { "name": "uexec-rust-tests", "version": "0" }
            }),
        );
        assert!(result.get("result").is_some(), "initialize failed: {result}");
        server.notify("notifications/initialized", json!({}));
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a client of another server's process").id()
    }

    /// Where a listening server serves MCP (`http://ADDR/mcp`) and the bearer token its clients send.
    pub fn http_endpoint(&self) -> (String, String) {
        let Link::Http(link) = &self.link else { panic!("the endpoint of a stdio server") };
        (format!("http://{}/mcp", link.addr), link.token.clone())
    }

    /// Whether the server process is still running (false once it exited, whatever the reason).
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().expect("a client of another server's process").try_wait().unwrap().is_none()
    }

    /// Another MCP client (a session of its own, not yet initialized) of this listening server.
    pub fn another_http_client(&self) -> McpServer {
        let Link::Http(link) = &self.link else { panic!("another client of a stdio server") };
        let (tx, lines) = channel();
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let link =
            HttpLink { runtime, addr: link.addr, token: link.token.clone(), session: Arc::default(), tx };
        McpServer {
            child: None,
            link: Link::Http(link),
            lines,
            next_id: 1,
            elicitations: Vec::new(),
            answers: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Send one raw message: a line on stdin (a newline is added), or the body of a POST.
    pub fn send_raw(&mut self, line: &str) {
        self.send_bytes(line.as_bytes());
    }

    /// Send one raw message of bytes, valid UTF-8 or not (a stdin line, a newline added; or a POST body).
    pub fn send_bytes(&mut self, line: &[u8]) {
        match &mut self.link {
            Link::Stdio(stdin) => {
                let stdin = stdin.as_mut().expect("stdin already closed");
                stdin.write_all(line).unwrap();
                stdin.write_all(b"\n").unwrap();
                stdin.flush().unwrap();
            }
            Link::Http(link) => link.post(Bytes::copy_from_slice(line)),
        }
    }

    pub fn send(&mut self, message: &Value) {
        self.send_raw(&message.to_string());
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Close the server's stdin (the client disconnects; stdio only).
    pub fn close_stdin(&mut self) {
        match &mut self.link {
            Link::Stdio(stdin) => drop(stdin.take()),
            Link::Http(_) => panic!("close_stdin over HTTP"),
        }
    }

    pub fn fresh_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Send a request and return the whole response message, answering elicitation requests meanwhile.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.fresh_id();
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        self.wait_response(&json!(id))
    }

    /// Wait for the response with `id`, answering elicitation requests and skipping notifications.
    pub fn wait_response(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let message = match self.lines.recv_timeout(remaining) {
                Ok((_, message)) => message,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no response to request {id} within {ANSWER_TIMEOUT:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the server closed stdout before answering {id}")
                }
            };
            if message.get("method").and_then(Value::as_str) == Some("elicitation/create") {
                self.answer_elicitation(&message);
                continue;
            }
            if message.get("method").is_some() {
                self.skipped.push(message);
                continue;
            }
            if message.get("id") == Some(id) {
                return message;
            }
        }
    }

    /// The next message from the server whose `method` is `method` (others are skipped).
    pub fn wait_method(&mut self, method: &str) -> Value {
        if let Some(at) =
            self.skipped.iter().position(|m| m.get("method").and_then(Value::as_str) == Some(method))
        {
            return self.skipped.remove(at);
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let (_, message) = self.lines.recv_timeout(remaining).expect("no message from the server");
            if message.get("method").and_then(Value::as_str) == Some(method) {
                return message;
            }
        }
    }

    /// The next message from the server, or `None` when none comes within `timeout`.
    pub fn next_message(&mut self, timeout: Duration) -> Option<Value> {
        self.lines.recv_timeout(timeout).ok().map(|(_, value)| value)
    }

    /// The next line from the server as written (to check how ids are spelled) and parsed.
    pub fn next_raw_line(&mut self, timeout: Duration) -> Option<(String, Value)> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Answer one elicitation request with the next of `answers` (`deny` when none is left).
    pub fn answer_elicitation(&mut self, message: &Value) {
        self.elicitations.push(message["params"].clone());
        let answer = if self.answers.is_empty() { "deny".to_owned() } else { self.answers.remove(0) };
        let result = match answer.as_str() {
            "decline" => json!({ "action": "decline" }),
            "cancel" => json!({ "action": "cancel" }),
            decision => json!({ "action": "accept", "content": { "decision": decision } }),
        };
        let response = json!({ "jsonrpc": "2.0", "id": message["id"].clone(), "result": result });
        self.send(&response);
    }

    /// Call a tool; returns the `result` (panics on a protocol error).
    pub fn call(&mut self, name: &str, arguments: Value) -> Value {
        let response = self.call_raw(name, arguments);
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("tools/call {name} failed at the protocol level: {response}"),
        }
    }

    /// Call a tool; returns the whole response message.
    pub fn call_raw(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({ "name": name, "arguments": arguments }))
    }

    /// Wait for the server to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut().expect("a client of another server's process");
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let Some(pid) = self.child.as_ref().map(Child::id) else { return };
        match &mut self.link {
            Link::Stdio(stdin) => drop(stdin.take()),
            // A listening server serves until a signal: SIGTERM drains it and kills every session.
            Link::Http(_) => {
                let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
            }
        }
        if self.wait_exit(Duration::from_secs(20)).is_none()
            && let Some(child) = self.child.as_mut()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The text of a tool result.
pub fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text content: {result}")).to_owned()
}

/// The part of a response text after `Output:`.
/// What the command printed: the text after `Output:`, without uexec's `[uexec] ...` notes that follow it.
pub fn output(result: &Value) -> String {
    let text = text(result);
    let printed = text
        .split_once("\nOutput:\n")
        .map(|(_, o)| o.to_owned())
        .unwrap_or_else(|| panic!("no Output: {text}"));
    // The notes follow the output after one line break (nothing when the output is empty).
    if printed.starts_with("[uexec] ") {
        return String::new();
    }
    match printed.split_once("\n[uexec] ") {
        Some((output, _)) => output.to_owned(),
        None => printed,
    }
}

pub fn is_error(result: &Value) -> bool {
    result["isError"] == json!(true)
}

/// The value of the header line `<prefix><value>` of a response text (exec responses carry no structured copy).
fn header(result: &Value, prefix: &str) -> Option<String> {
    let text = text(result);
    let (head, _) = text.split_once("\nOutput:")?;
    head.lines().find_map(|line| line.strip_prefix(prefix)).map(str::to_owned)
}

pub fn session_id(result: &Value) -> u64 {
    header(result, "Process running with session ID ")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no session id: {result}"))
}

/// The exit code of an exec response, when the process exited during the call.
pub fn exit_code(result: &Value) -> Option<i64> {
    header(result, "Process exited with code ").and_then(|code| code.parse().ok())
}

/// Pids of processes whose argv is exactly `argv`.
pub fn pids_with_cmdline(argv: &[&str]) -> Vec<u32> {
    let wanted: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain(std::iter::once(0))).collect();
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return pids };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && cmdline == wanted
            && !is_zombie(pid)
        {
            pids.push(pid);
        }
    }
    pids
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// Wait until no process has argv `argv`; returns the pids still alive at the deadline.
pub fn wait_gone(argv: &[&str], timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let pids = pids_with_cmdline(argv);
        if pids.is_empty() || Instant::now() >= deadline {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Wait until some process has argv `argv`.
pub fn wait_present(argv: &[&str], timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let pids = pids_with_cmdline(argv);
        if !pids.is_empty() || Instant::now() >= deadline {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A number unlikely to collide with other tests' sleeps (for `sleep <n>` markers); `salt` < 100.
pub fn marker_seconds(salt: u32) -> String {
    let n = 1_000_000 + (std::process::id() % 50_000) * 100 + salt;
    n.to_string()
}

impl HttpLink {
    /// POST `body` and wait for the response's headers; its messages are read on the runtime as they come.
    fn post(&self, body: Bytes) {
        let id = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v.get("id").cloned());
        let initialize = serde_json::from_slice::<Value>(&body)
            .ok()
            .is_some_and(|v| v.get("method") == Some(&json!("initialize")));
        let session = self.session.lock().unwrap().clone();
        let mut request = http::Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", self.addr.to_string())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", format!("Bearer {}", self.token));
        if let Some((session, version)) = &session {
            request = request.header("mcp-session-id", session);
            if let Some(version) = version {
                request = request.header("mcp-protocol-version", version);
            }
        }
        let request = request.body(Full::new(body)).unwrap();
        let response = self.runtime.block_on(send(self.addr, request));
        if session.is_none()
            && initialize
            && let Some(new) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok())
        {
            *self.session.lock().unwrap() = Some((new.to_owned(), None));
            // The session's GET stream: what the server sends outside a request's answer (its questions).
            let get = http::Request::builder()
                .method("GET")
                .uri("/mcp")
                .header("host", self.addr.to_string())
                .header("accept", "text/event-stream")
                .header("authorization", format!("Bearer {}", self.token))
                .header("mcp-session-id", new)
                .body(Full::new(Bytes::new()))
                .unwrap();
            let (addr, tx, state) = (self.addr, self.tx.clone(), Arc::clone(&self.session));
            self.runtime.spawn(async move { read_messages(send(addr, get).await, None, tx, state).await });
        }
        let (tx, state) = (self.tx.clone(), Arc::clone(&self.session));
        self.runtime.spawn(read_messages(response, id, tx, state));
    }
}

/// Send `request` on a fresh connection and return the response once its headers arrived.
async fn send(
    addr: SocketAddr,
    request: http::Request<Full<Bytes>>,
) -> http::Response<hyper::body::Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect to uexec mcp --listen");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    sender.send_request(request).await.expect("an HTTP response")
}

/// Send every JSON-RPC message of `response` to `tx` as it comes: a JSON body, or the data of each SSE event.
/// A body that is not JSON (an HTTP-level refusal) becomes a JSON-RPC error for `id`, saying what came. The
/// negotiated version (from an `initialize` result) is noted in `state`.
async fn read_messages(
    response: http::Response<hyper::body::Incoming>,
    id: Option<Value>,
    tx: Sender<(String, Value)>,
    state: SessionState,
) {
    let status = response.status();
    let sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let deliver = |text: &str| {
        let Ok(value) = serde_json::from_str::<Value>(text) else {
            panic!("the server sent a message that is not JSON: {text}")
        };
        if let Some(version) = value.pointer("/result/protocolVersion").and_then(Value::as_str)
            && let Some((_, negotiated)) = state.lock().unwrap().as_mut()
            && negotiated.is_none()
        {
            *negotiated = Some(version.to_owned());
        }
        let _ = tx.send((text.to_owned(), value));
    };
    let mut body = response.into_body();
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        let Ok(data) = frame.into_data() else { continue };
        buf.extend_from_slice(&data);
        if !sse {
            continue;
        }
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let event = String::from_utf8_lossy(&event);
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            let data = data.join("\n");
            if !data.is_empty() {
                deliver(&data);
            }
        }
    }
    if sse || buf.is_empty() {
        return;
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    if serde_json::from_str::<Value>(&text).is_ok() {
        deliver(&text);
    } else {
        let error = json!({
            "jsonrpc": "2.0", "id": id.unwrap_or(Value::Null),
            "error": { "code": "http", "message": format!("HTTP {status}: {text}") }
        });
        let _ = tx.send((error.to_string(), error));
    }
}

/// Wait for `child` (spawned in a process group of its own, stdout and stderr piped) at most `timeout`,
/// reading its output meanwhile: its stdout, its stderr, and a `None` status when it timed out (its whole process group is then killed, so nothing it started keeps the
/// pipes open).
pub fn collect_output(
    child: &mut Child,
    timeout: Duration,
) -> (String, String, Option<std::process::ExitStatus>) {
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > timeout {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (out.join().expect("reader"), err.join().expect("reader"), status)
}
