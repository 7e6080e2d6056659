//! `uexec mcp --listen`: the Streamable HTTP server's guarantees, driven over real TCP with a small HTTP/1.1
//! client: bearer-token auth (401 with no detail), the `Origin` rule against DNS rebinding (403 beyond loopback,
//! any `Host`), a token always (generated into a private file when none is
//! given, unreadable by the sandboxed commands of this or another uexec, so none can become a client), the
//! refusal to listen beyond loopback without a token file, client isolation (sessions, processes, and in the
//! allowlist mode loopback listeners and proxy quotas), connections without the token and the descriptor limit,
//! the disconnect grace (resume within it, sessions killed after it), limits, malformed bodies, the operability
//! endpoints and JSON logs, and the SIGTERM drain.
//!
//! The end-to-end behaviour through the official clients is in python_mcp_client.rs and real_clients.rs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

const TOKEN: &str = "test-token-0123456789abcdef0123456789";
const PROTOCOL: &str = "2025-11-25";

/// A `uexec mcp --listen` process on a free loopback port, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    /// The token clients send (the given one, or the one the server generated).
    token: Option<String>,
    /// Where the server generated its token, if it did.
    generated: Option<PathBuf>,
    stderr: Arc<Mutex<String>>,
    dir: tempfile::TempDir,
    /// Outside the workspace and `/tmp` (no possible writable root): token files, the runtime directory.
    outside: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("uexec-http-").tempdir_in("/tmp").unwrap()
}

/// A directory in no possible writable root of the servers here (not in `/tmp`, not in a workspace), that any
/// user who runs the tests can make (`/var/tmp`, as the common harness's, else the target directory's).
fn outside() -> tempfile::TempDir {
    let base = if Path::new("/var/tmp").is_dir() {
        Path::new("/var/tmp")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR"))
    };
    tempfile::Builder::new().prefix("uexec-http-outside-").tempdir_in(base).unwrap()
}

/// The command line of a server in `dir` (HOME and the config directory inside it: no user config, no profile).
fn uexec(dir: &Path, args: &[&str]) -> Command {
    uexec_via(&[], dir, args)
}

/// [`uexec`] run by `wrapper` (a program that execs the rest of its command line, e.g. `prlimit ... --`).
fn uexec_via(wrapper: &[&str], dir: &Path, args: &[&str]) -> Command {
    let mut command = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut command = Command::new(program);
            command.args(rest).arg(env!("CARGO_BIN_EXE_uexec"));
            command
        }
        None => Command::new(env!("CARGO_BIN_EXE_uexec")),
    };
    command
        .arg("mcp")
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join(".no-config"))
        .env("SHELL", "/bin/bash")
        .env_remove("UEXEC_AUTH_TOKEN_FILE")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_STATE_HOME")
        .env_remove("TMPDIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

fn token_file(dir: &Path, token: &str) -> PathBuf {
    // Outside the workspace and /tmp: the file is the server's, not the commands'.
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path
}

fn start(args: &[&str], token: Option<&str>) -> Server {
    start_with(args, token, &[])
}

/// The runtime directory of a server whose outside directory is `outside` (a generated token goes there).
fn runtime_dir(outside: &Path) -> PathBuf {
    outside.join("run")
}

fn start_with(args: &[&str], token: Option<&str>, env: &[(&str, &str)]) -> Server {
    start_via(&[], args, token, env)
}

fn start_via(wrapper: &[&str], args: &[&str], token: Option<&str>, env: &[(&str, &str)]) -> Server {
    let dir = workspace();
    let outside = outside();
    let mut all = vec!["--listen", "127.0.0.1:0"];
    let file;
    if let Some(token) = token {
        file = token_file(outside.path(), token);
        all.extend(["--auth-token-file", file.to_str().unwrap()]);
    }
    all.extend(args);
    let mut child = uexec_via(wrapper, dir.path(), &all)
        .env("XDG_RUNTIME_DIR", runtime_dir(outside.path()))
        .envs(env.iter().copied())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut before = String::new();
    let mut generated = None;
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("uexec mcp --listen ended before listening; stderr:\n{before}");
        };
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.trim_end_matches("/mcp").parse::<SocketAddr>().unwrap();
        }
        if let Some(rest) = line.split("generated a bearer token for this server in ").nth(1) {
            generated = Some(PathBuf::from(rest.split(" (mode 0600").next().unwrap()));
        }
        before.push_str(&line);
        before.push('\n');
    };
    let log = Arc::new(Mutex::new(before));
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let token = match (&generated, token) {
        (Some(file), _) => Some(std::fs::read_to_string(file).unwrap().trim().to_owned()),
        (None, token) => token.map(str::to_owned),
    };
    Server { child, addr, token, generated, stderr: log, dir, outside }
}

/// One HTTP response, its body read to the end.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    /// The JSON-RPC messages of the body (an SSE stream's `data:` lines, or a JSON body).
    fn messages(&self) -> Vec<Value> {
        if let Ok(value) = serde_json::from_str::<Value>(&self.body) {
            return vec![value];
        }
        self.body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    }

    /// The response to request `id`.
    fn response(&self, id: u64) -> Value {
        self.messages()
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no response to {id} in {} {}", self.status, self.body))
    }
}

/// Send one request on a fresh connection (every request here is its own connection: between two requests the
/// client holds none open, which is what a disconnected client looks like).
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: impl Into<Bytes>,
) -> Reply {
    try_send(addr, method, path, headers, body).await.unwrap()
}

/// [`send`], or why no answer came.
async fn try_send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: impl Into<Bytes>,
) -> Result<Reply, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    let mut request = http::Request::builder().method(method).uri(path);
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
        request = request.header("host", addr.to_string());
    }
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = sender
        .send_request(request.body(Full::new(body.into())).unwrap())
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.map_err(|e| format!("body: {e}"))?.to_bytes();
    Ok(Reply { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

/// An MCP client over HTTP: its session id after `initialize`.
struct Client {
    addr: SocketAddr,
    token: Option<String>,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    fn of(server: &Server) -> Self {
        Client { addr: server.addr, token: server.token.clone(), session: None, next_id: 1 }
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("content-type", "application/json".to_owned()),
            ("accept", "application/json, text/event-stream".to_owned()),
        ];
        if let Some(token) = &self.token {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        if let Some(session) = &self.session {
            headers.push(("mcp-session-id", session.clone()));
            headers.push(("mcp-protocol-version", PROTOCOL.to_owned()));
        }
        headers
    }

    async fn post(&self, message: &Value) -> Reply {
        send(self.addr, "POST", "/mcp", &self.headers(), message.to_string()).await
    }

    async fn connect(server: &Server) -> Self {
        let mut client = Client::of(server);
        let reply = client
            .post(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.response(0)["result"]["protocolVersion"], PROTOCOL);
        let session = reply.headers.get("mcp-session-id").expect("an MCP session id").to_str().unwrap();
        client.session = Some(session.to_owned());
        let reply = client.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(reply.status, 202, "{}", reply.body);
        client
    }

    /// Call a tool; returns (isError, text).
    async fn call(&mut self, name: &str, arguments: Value) -> (bool, String) {
        let result = self.call_raw(name, arguments).await;
        let result = &result["result"];
        let text = result["content"][0]["text"].as_str().unwrap_or_default().to_owned();
        (result["isError"] == json!(true), text)
    }

    async fn call_raw(&mut self, name: &str, arguments: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let reply = self
            .post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}}))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.response(id)
    }
}

fn session_of(text: &str) -> u32 {
    text.lines()
        .find_map(|l| l.strip_prefix("Process running with session ID "))
        .unwrap_or_else(|| panic!("no session in {text}"))
        .parse()
        .unwrap()
}

fn output_of(text: &str) -> &str {
    text.split_once("\nOutput:\n").map(|(_, o)| o).unwrap_or_default()
}

/// A long-running `sleep` with a duration no other process has: returns its session and its (host) pid. (`$$`
/// would be the pid inside the sandbox's PID namespace.)
async fn start_sleeper(client: &mut Client) -> (u32, u32) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let unique = format!(
        "9{:05}{:03}",
        std::process::id() % 100_000,
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let (error, text) = client
        .call(
            "exec_command",
            json!({"cmd": format!("exec sleep {unique}"), "login": false, "yield_time_ms": 250}),
        )
        .await;
    assert!(!error, "{text}");
    let wanted = format!("sleep\0{unique}\0");
    let mut pid = None;
    eventually_sync("the sleeper is found", || {
        pid = std::fs::read_dir("/proc").unwrap().filter_map(Result::ok).find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            (cmdline == wanted.as_bytes()).then_some(pid)
        });
        pid.is_some()
    });
    (session_of(&text), pid.unwrap())
}

fn eventually_sync(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    // A zombie has exited: only a process that still runs counts.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Wait (at most a minute) until `condition` holds.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metric(server: &Server, name: &str) -> f64 {
    metric_at(server.addr, server.token.as_deref(), name).await
}

async fn metric_at(addr: SocketAddr, token: Option<&str>, name: &str) -> f64 {
    let headers: Vec<(&str, String)> =
        token.iter().map(|t| ("authorization", format!("Bearer {t}"))).collect();
    let reply = send(addr, "GET", "/metrics", &headers, Bytes::new()).await;
    assert_eq!(reply.status, 200);
    reply
        .body
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in\n{}", reply.body))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn requests_without_the_right_token_get_a_bare_401() {
    let server = start(&[], Some(TOKEN));
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let base = [
        ("content-type", "application/json".to_owned()),
        ("accept", "application/json, text/event-stream".to_owned()),
    ];
    for authorization in
        [None, Some("Bearer wrong-token-0123456789abcdef"), Some(TOKEN), Some("Basic dGVzdA==")]
    {
        let mut headers = base.to_vec();
        if let Some(value) = authorization {
            // A bare token without the scheme is refused as well.
            headers.push(("authorization", value.to_owned()));
        }
        let reply = send(server.addr, "POST", "/mcp", &headers, init.to_string()).await;
        assert_eq!(reply.status, 401, "{authorization:?}: {}", reply.body);
        assert_eq!(reply.body, "", "a 401 carries no detail");
        assert!(reply.headers.get("mcp-session-id").is_none());
        let reply = send(server.addr, "GET", "/metrics", &headers, Bytes::new()).await;
        assert_eq!(reply.status, 401);
    }
    // The probes are open (a kubelet cannot send the token); they say nothing but their state.
    let reply = send(server.addr, "GET", "/healthz", &[], Bytes::new()).await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "ok\n"));
    let reply = send(server.addr, "GET", "/readyz", &[], Bytes::new()).await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "ready\n"));
    // The right token opens every route.
    let mut client = Client::connect(&server).await;
    let (error, text) = client.call("exec_command", json!({"cmd": "echo authorized", "login": false})).await;
    assert!(!error && output_of(&text) == "authorized\n", "{text}");
    assert_eq!(metric(&server, "uexec_http_unauthorized_total").await, 8.0);
}

/// The transport's rule against DNS rebinding: an `Origin` header (which only a browser sends) must name a page on
/// this machine's loopback, else 403 and no MCP session; any `Host` is accepted (behind a Service it is a cluster
/// name), and so is a request without an `Origin` (what every MCP client sends). The token is checked first.
#[tokio::test]
async fn an_origin_beyond_loopback_is_refused_and_any_host_is_accepted() {
    let server = start(&[], Some(TOKEN));
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let own = format!("http://{}", server.addr);
    let cases: [(Option<&str>, Option<&str>, u16); 11] = [
        // A page under a name re-pointed at this server (the Host is the browser's, the same name).
        (Some("evil.example.com"), Some("http://evil.example.com"), 403),
        (None, Some("http://evil.example.com:8080"), 403),
        (None, Some("http://127.0.0.1.evil.example"), 403),
        (None, Some("null"), 403),
        (None, Some("not an origin"), 403),
        // Pages on this machine's loopback, any port, either scheme.
        (None, Some(own.as_str()), 200),
        (None, Some("http://localhost:3000"), 200),
        (None, Some("http://[::1]:8080"), 200),
        (None, Some("https://localhost"), 200),
        // No Origin: any Host.
        (Some("uexec.agents.svc.cluster.local:8080"), None, 200),
        (None, None, 200),
    ];
    for (host, origin, status) in cases {
        let mut headers = vec![
            ("content-type", "application/json".to_owned()),
            ("accept", "application/json, text/event-stream".to_owned()),
            ("authorization", format!("Bearer {TOKEN}")),
        ];
        headers.extend(host.map(|host| ("host", host.to_owned())));
        headers.extend(origin.map(|origin| ("origin", origin.to_owned())));
        let reply = send(server.addr, "POST", "/mcp", &headers, init.to_string()).await;
        assert_eq!(reply.status, status, "Host {host:?}, Origin {origin:?}: {}", reply.body);
        if status == 200 {
            assert_eq!(reply.response(0)["result"]["protocolVersion"], PROTOCOL, "{origin:?}");
            assert!(reply.headers.get("mcp-session-id").is_some(), "{origin:?}");
        } else {
            assert!(reply.headers.get("mcp-session-id").is_none(), "{origin:?}: {}", reply.body);
        }
    }
    // Without the token the answer is the bare 401, whatever the Origin.
    let headers = [
        ("content-type", "application/json".to_owned()),
        ("accept", "application/json, text/event-stream".to_owned()),
        ("origin", "http://evil.example.com".to_owned()),
    ];
    let reply = send(server.addr, "POST", "/mcp", &headers, init.to_string()).await;
    assert_eq!((reply.status, reply.body.as_str()), (401, ""));
}

#[tokio::test]
async fn sandboxed_commands_cannot_read_the_token_file() {
    let server = start(&[], Some(TOKEN));
    let mut client = Client::connect(&server).await;
    // The token file is in the server's directory outside the workspace; its neighbour stays readable.
    let outside = server.outside.path().display();
    std::fs::write(server.outside.path().join("beside"), "neighbour\n").unwrap();
    let (error, text) = client
        .call(
            "exec_command",
            json!({"cmd": format!("cat {outside}/beside; cat {outside}/token; ls {outside}"), "login": false}),
        )
        .await;
    assert!(!error, "{text}");
    assert!(output_of(&text).starts_with("neighbour\n"), "{text}");
    assert!(!text.contains(TOKEN), "a command read the token: {text}");
}

/// What `curl` prints for an MCP `initialize` POSTed to `addr` with `headers`: the HTTP status, then the body.
fn curl_initialize(addr: SocketAddr, headers: &[String]) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "sandboxed", "version": "0"}}});
    let mut cmd = format!(
        "curl -sS --max-time 20 -o /dev/stdout -w '\\nstatus=%{{http_code}}\\n' -X POST \
         -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' --data '{init}'"
    );
    for header in headers {
        cmd.push_str(&format!(" -H '{header}'"));
    }
    cmd.push_str(&format!(" http://{addr}/mcp"));
    cmd
}

/// With the network on and no token file, a sandboxed command could connect to its own
/// server's listener as a new client (declaring elicitation) and approve its own questions. A token is now
/// always required: one is generated into a private file that sandboxed commands cannot read.
#[tokio::test]
async fn a_sandboxed_command_cannot_become_a_client_of_its_own_server() {
    let server = start(&["--network"], None);
    let generated = server.generated.clone().expect("a generated token file is announced");
    let token = server.token.clone().unwrap();
    // The person reads it: a file of its own, mode 0600, in a directory only its owner may enter.
    use std::os::unix::fs::PermissionsExt;
    assert!(generated.starts_with(runtime_dir(server.outside.path())), "{generated:?}");
    assert_eq!(std::fs::metadata(&generated).unwrap().permissions().mode() & 0o777, 0o600);
    let dir_mode = std::fs::metadata(generated.parent().unwrap()).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    assert!(token.len() >= 32, "{token}");

    // The person's client, with the token, is served.
    let mut person = Client::connect(&server).await;
    // A sandboxed command cannot read the token file, nor list its directory; the person's other files beside the
    // runtime directory stay readable (the denied read is the token's, not every read).
    std::fs::write(server.outside.path().join("beside"), "neighbour\n").unwrap();
    let probe = format!(
        "cat {}/beside; cat {} && echo READ-THE-TOKEN; echo entries=$(ls -A {} 2>/dev/null | wc -l)",
        server.outside.path().display(),
        generated.display(),
        generated.parent().unwrap().display()
    );
    let (error, text) = person.call("exec_command", json!({"cmd": probe, "login": false})).await;
    assert!(!error, "{text}");
    assert!(output_of(&text).starts_with("neighbour\n"), "{text}");
    assert!(!text.contains(&token) && !text.contains("READ-THE-TOKEN"), "{text}");
    assert!(output_of(&text).contains("entries=0\n"), "the command listed the token directory: {text}");
    assert!(std::fs::read_dir(generated.parent().unwrap()).unwrap().count() >= 1, "the person lists it");

    // A sandboxed command reaches the listener (the network is on) but cannot start an MCP session without the
    // token: a bare 401. Its twin, handed the token by the test, gets 200: the 401 is the token, not the network.
    let (error, text) =
        person.call("exec_command", json!({"cmd": curl_initialize(server.addr, &[]), "login": false})).await;
    assert!(!error, "{text}");
    assert!(
        output_of(&text).contains("status=401"),
        "a sandboxed command was served without a token: {text}"
    );
    assert!(!output_of(&text).contains("protocolVersion"), "{text}");
    let with_token = [format!("authorization: Bearer {token}")];
    let (error, text) = person
        .call("exec_command", json!({"cmd": curl_initialize(server.addr, &with_token), "login": false}))
        .await;
    assert!(!error, "{text}");
    assert!(output_of(&text).contains("status=200"), "{text}");
    assert_eq!(metric(&server, "uexec_http_unauthorized_total").await, 1.0);
}

/// No command of any uexec reads the token of another uexec's listener: the generated tokens' directory is
/// hidden in every sandbox that shares it (here `uexec run`'s), and so is the file `$UEXEC_AUTH_TOKEN_FILE` names.
#[tokio::test]
async fn the_commands_of_another_uexec_cannot_read_a_listeners_token() {
    let server = start(&[], None);
    let generated = server.generated.clone().unwrap();
    let token = server.token.clone().unwrap();
    let named = token_file(&server.outside.path().join("run"), "named-token-0123456789abcdef");
    std::fs::write(server.outside.path().join("beside"), "neighbour\n").unwrap();
    let probe = format!(
        "cat {}/beside; cat {}; cat {}; true",
        server.outside.path().display(),
        generated.display(),
        named.display()
    );
    let other = workspace();
    let output = Command::new(env!("CARGO_BIN_EXE_uexec"))
        .args(["run", "--network", "--", "bash", "-c", &probe])
        .current_dir(other.path())
        .env("HOME", other.path())
        .env("XDG_CONFIG_HOME", other.path().join(".no-config"))
        .env("XDG_RUNTIME_DIR", runtime_dir(server.outside.path()))
        .env("UEXEC_AUTH_TOKEN_FILE", &named)
        .env_remove("TMPDIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("neighbour\n"), "{output:?}");
    assert!(!stdout.contains(&token) && !stdout.contains("named-token"), "{stdout}");
    // The person reads both.
    assert_eq!(std::fs::read_to_string(&generated).unwrap().trim(), token);
    assert!(std::fs::read_to_string(&named).unwrap().contains("named-token"));
}

/// A token file named through `..` is read, enforced and hidden where it leads (it used to be refused with a
/// message about hidden-path patterns); one inside a writable root is refused at start.
#[tokio::test]
async fn a_token_file_named_through_dot_dot_works_and_one_in_a_writable_root_is_refused() {
    let holder = outside();
    std::fs::create_dir(holder.path().join("sub")).unwrap();
    let file = token_file(holder.path(), TOKEN);
    let through = holder.path().join("sub/../token");
    let through = through.to_str().unwrap();
    let server = start(&["--auth-token-file", through], None);
    let mut client = connect_as(Client { token: Some(TOKEN.to_owned()), ..Client::of(&server) }).await;
    std::fs::write(holder.path().join("beside"), "neighbour\n").unwrap();
    let probe = format!("cat {0}/beside; cat {1}; cat {0}/token; true", holder.path().display(), through);
    let (error, text) = client.call("exec_command", json!({"cmd": probe, "login": false})).await;
    assert!(!error, "{text}");
    assert!(output_of(&text).starts_with("neighbour\n"), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
    // Without the token: 401.
    let reply = send(server.addr, "GET", "/metrics", &[], Bytes::new()).await;
    assert_eq!(reply.status, 401);
    drop(file);

    // In the workspace (a writable root), the same file is refused before anything listens.
    let dir = workspace();
    let inside = token_file(dir.path(), TOKEN);
    let output =
        uexec(dir.path(), &["--listen", "127.0.0.1:0", "--auth-token-file", inside.to_str().unwrap()])
            .output()
            .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("refusing the auth token file") && !stderr.contains("listening on"), "{stderr}");
}

/// 1100 idle TCP connections without a token used to take every descriptor of a server whose
/// limit is 1024, and an authorised client got no answer. Connections without the token now hold a bounded share
/// of the descriptors (the oldest beyond it is closed to make room, however fresh): an authorised client from the
/// same address is served on its first connection, right after the flood, while the idle ones are closed.
#[tokio::test]
async fn idle_connections_without_the_token_do_not_keep_an_authorised_client_out() {
    let server = start_via(&["prlimit", "--nofile=1024:1024", "--"], &[], Some(TOKEN), &[]);
    let pid = server.child.id();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let files = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_owned();
    assert!(files.split_whitespace().filter(|w| *w == "1024").count() == 2, "{files}");
    let mut idle = Vec::new();
    for n in 0..1100 {
        let Ok(mut stream) = std::net::TcpStream::connect_timeout(&server.addr, Duration::from_secs(2))
        else {
            continue;
        };
        // Half send nothing, half an unfinished request head (a slow client).
        if n % 2 == 1 {
            use std::io::Write;
            let _ = stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n");
        }
        idle.push(stream);
    }
    // The authorised client's first connection is answered, right after the flood (the oldest idle connection
    // gives way, however fresh), well before the idle connections' own deadline could have freed room.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let headers = Client::of(&server).headers();
    let answered = tokio::time::timeout(
        Duration::from_secs(5),
        try_send(server.addr, "POST", "/mcp", &headers, init.to_string()),
    )
    .await
    .expect("the authorised client's first connection got no answer")
    .expect("the authorised client's first connection was closed");
    assert_eq!(answered.status, 200, "{}", answered.body);
    let mut client = Client::connect(&server).await;
    let (error, text) = client.call("exec_command", json!({"cmd": "echo served", "login": false})).await;
    assert!(!error && output_of(&text) == "served\n", "{text}");
    // The twin: the idle connections themselves were closed to make room, and the server holds few descriptors.
    let dropped = metric(&server, "uexec_http_connections_dropped_total").await;
    assert!(dropped >= 900.0, "{dropped}");
    let open = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    assert!(open < 512, "{open} descriptors open");
    let closed = idle
        .iter_mut()
        .filter_map(|stream| {
            use std::io::Read;
            stream.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            // Closed: the end of the stream, or a reset for one whose unfinished head the server never read.
            let read = stream.read(&mut [0u8; 1]);
            let reset = read.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset);
            (matches!(read, Ok(0)) || reset).then_some(())
        })
        .count();
    assert!(closed >= 900, "{closed} of {} idle connections were closed", idle.len());
}

/// The server raises its soft descriptor limit to the hard one at start (a soft limit of 1024 let idle
/// connections take every descriptor); the commands it runs get the original soft limit back.
#[tokio::test]
async fn the_server_raises_its_descriptor_limit_and_commands_keep_the_original() {
    let server = start_via(&["prlimit", "--nofile=1024:4096", "--"], &[], Some(TOKEN), &[]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.child.id())).unwrap();
    let files: Vec<String> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(files[3..5], ["4096", "4096"], "{files:?}");
    let mut client = Client::connect(&server).await;
    let (error, text) =
        client.call("exec_command", json!({"cmd": "ulimit -Sn; ulimit -Hn", "login": false})).await;
    assert!(!error, "{text}");
    assert_eq!(output_of(&text), "1024\n4096\n", "{text}");
}

/// In the domain-allowlist mode the clients shared the proxy's network namespace, so client B's
/// command read what client A's command served on 127.0.0.1. Each client now has a network namespace (and a proxy)
/// of its own: A's own second command reaches it, B's finds nothing there.
#[tokio::test]
async fn a_clients_loopback_listener_is_unreachable_from_another_clients_commands() {
    let server = start(&["--allow-domain", "example.invalid"], Some(TOKEN));
    let mut a = Client::connect(&server).await;
    let mut b = Client::connect(&server).await;
    std::fs::write(server.dir.path().join("served.txt"), "data-of-a\n").unwrap();
    let (error, text) = a
        .call(
            "exec_command",
            json!({"cmd": "exec python3 -m http.server 7777 --bind 127.0.0.1", "login": false, "yield_time_ms": 250}),
        )
        .await;
    assert!(!error && text.contains("Process running with session ID"), "{text}");
    // A's second command, in another session, waits (with a deadline) until the listener answers.
    let fetch = "for i in $(seq 100); do curl --noproxy '*' -sS --max-time 5 http://127.0.0.1:7777/served.txt \
                 && exit 0; sleep 0.1; done; echo unreachable";
    let (error, text) =
        a.call("exec_command", json!({"cmd": fetch, "login": false, "yield_time_ms": 30000})).await;
    assert!(!error && output_of(&text).contains("data-of-a"), "A cannot reach its own listener: {text}");
    // B's command: the same address is nothing in its namespace.
    let probe = "curl --noproxy '*' -sS --max-time 5 http://127.0.0.1:7777/served.txt; echo rc=$?";
    let (error, text) =
        b.call("exec_command", json!({"cmd": probe, "login": false, "yield_time_ms": 30000})).await;
    assert!(!error, "{text}");
    assert!(!output_of(&text).contains("data-of-a"), "B read A's listener: {text}");
    assert!(output_of(&text).contains("rc=7"), "{text}");
}

/// A Python script that connects to the command's proxy: up to `holders` CONNECT tunnels to `target` held open
/// (as many as connect), or one plain GET of `http://target/` whose answer (or `timeout`) it prints.
fn proxy_script(target: &str, holders: usize, timeout_secs: u32) -> String {
    format!(
        r#"
import os, socket, sys, time
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
if {holders}:
    held = []
    for i in range({holders}):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=3)
        except OSError:
            break  # the proxy's listen queue is full too
        s.sendall(b"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")
        held.append(s)
    print("holding", len(held), flush=True)
    time.sleep(3600)
s = socket.create_connection(("127.0.0.1", port), timeout={timeout_secs})
s.sendall(b"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n")
data = b""
try:
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
except socket.timeout:
    print("timeout")
print(data.decode(errors="replace"))
"#
    )
}

/// 256 idle connections from one client's command filled the shared proxy and client B's
/// requests hung. Each client's proxy has its own quota (below the bound all proxies share): A's command holding
/// more than its quota stops only A's further requests; B's proxied request is answered.
#[tokio::test]
async fn one_clients_commands_holding_proxy_connections_do_not_stop_another_clients_request() {
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = upstream.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = upstream.accept().await {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            // A forwarded GET arrives at once; a tunnel stays silent and is held.
            let mut first = [0u8; 3];
            match tokio::time::timeout(Duration::from_millis(200), stream.read_exact(&mut first)).await {
                Ok(Ok(_)) if &first == b"GET" => {
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\nupstream-ok\n")
                        .await;
                }
                _ => held.push(stream),
            }
        }
    });
    // 4096 descriptors: each client's proxy serves 126 connections at once, all proxies together 504.
    let server =
        start_via(&["prlimit", "--nofile=4096:4096", "--"], &["--allow-domain", &target], Some(TOKEN), &[]);
    let mut a = Client::connect(&server).await;
    let mut b = Client::connect(&server).await;
    std::fs::write(server.dir.path().join("hold.py"), proxy_script(&target, 300, 5)).unwrap();
    std::fs::write(server.dir.path().join("get.py"), proxy_script(&target, 0, 5)).unwrap();
    std::fs::write(server.dir.path().join("get_b.py"), proxy_script(&target, 0, 30)).unwrap();
    let (error, mut text) = a
        .call("exec_command", json!({"cmd": "python3 hold.py", "login": false, "yield_time_ms": 1000}))
        .await;
    assert!(!error, "{text}");
    let holder = session_of(&text);
    let mut seen = output_of(&text).to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.contains("holding ") {
        assert!(Instant::now() < deadline, "the holder never held its connections: {seen}");
        (_, text) =
            a.call("write_stdin", json!({"session_id": holder, "chars": "", "yield_time_ms": 1000})).await;
        assert!(text.contains(&format!("session ID {holder}")), "the holder ended: {seen}{text}");
        seen.push_str(output_of(&text));
    }
    // More than its proxy's quota (126 here): the rest wait in the listen queue, as many as the machine's
    // backlog and load let a connect get through within its timeout.
    let held: usize =
        seen.split("holding ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(held > 126, "{seen}");
    // The denied twin: A's own further request waits behind its quota (its proxy serves no more of A's).
    let (error, text) = a
        .call("exec_command", json!({"cmd": "python3 get.py", "login": false, "yield_time_ms": 30000}))
        .await;
    assert!(!error, "{text}");
    assert!(output_of(&text).contains("timeout") && !output_of(&text).contains("upstream-ok"), "{text}");
    // B's request is answered.
    let (error, text) = b
        .call("exec_command", json!({"cmd": "python3 get_b.py", "login": false, "yield_time_ms": 30000}))
        .await;
    assert!(!error, "{text}");
    assert!(output_of(&text).contains("upstream-ok"), "B's proxied request did not get through: {text}");
}

/// [`Client::connect`] for a client whose token is already set.
async fn connect_as(mut client: Client) -> Client {
    let reply = client
        .post(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    client.session = Some(reply.headers.get("mcp-session-id").unwrap().to_str().unwrap().to_owned());
    let reply = client.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    client
}

#[test]
fn a_non_loopback_address_needs_a_token() {
    let dir = workspace();
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let output = uexec(dir.path(), &["--listen", listen]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{listen}: {stderr}");
        assert!(stderr.contains("refusing to listen") && stderr.contains("--auth-token-file"), "{stderr}");
    }
    // A token too short to be secret is refused too.
    let holder = outside();
    let short = token_file(holder.path(), "short");
    let output = uexec(dir.path(), &["--listen", "0.0.0.0:0", "--auth-token-file", short.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("at least 16"));
    // The allowed twin: the same address with a token, named by the environment variable, serves.
    let file = token_file(holder.path(), TOKEN);
    let server = start_with(&[], None, &[("UEXEC_AUTH_TOKEN_FILE", file.to_str().unwrap())]);
    // `start_with` listens on 127.0.0.1: the token from the environment is enforced there as well.
    let reply = send(server.addr, "GET", "/metrics", &[], Bytes::new()).await_blocking();
    assert_eq!(reply.status, 401);
    let mut any =
        uexec(dir.path(), &["--listen", "0.0.0.0:0"]).env("UEXEC_AUTH_TOKEN_FILE", &file).spawn().unwrap();
    let lines = BufReader::new(any.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    for line in lines.map_while(Result::ok) {
        seen.push_str(&line);
        if line.contains("listening on http://") {
            break;
        }
    }
    assert!(seen.contains("listening on http://0.0.0.0:"), "{seen}");
    let _ = any.kill();
    let _ = any.wait();
}

/// Runs a future to completion on a fresh runtime (for the synchronous test above).
trait Blocking: Future + Sized {
    fn await_blocking(self) -> Self::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(self)
    }
}

impl<F: Future> Blocking for F {}

#[tokio::test]
async fn clients_cannot_see_poll_or_close_each_others_sessions() {
    let server = start(&[], Some(TOKEN));
    let mut a = Client::connect(&server).await;
    let mut b = Client::connect(&server).await;
    let (error, text) =
        a.call("exec_command", json!({"cmd": "cat", "tty": true, "yield_time_ms": 500})).await;
    assert!(!error, "{text}");
    let session = session_of(&text);

    let listed = b.call_raw("list_sessions", json!({})).await;
    assert_eq!(listed["result"]["structuredContent"]["sessions"], json!([]), "{listed}");
    let (error, text) = b.call("write_stdin", json!({"session_id": session, "chars": "from-b\n"})).await;
    assert!(error && text.contains(&format!("Unknown process id {session}")), "{text}");
    let (error, text) = b.call("write_stdin", json!({"session_id": session, "chars": ""})).await;
    assert!(error && text.contains(&format!("Unknown process id {session}")), "{text}");
    let (error, text) = b.call("close_session", json!({"session_id": session})).await;
    assert!(error, "{text}");
    let (error, text) = b.call("read_screen", json!({"session_id": session})).await;
    assert!(error, "{text}");

    // A still owns it, untouched by B: B's input never reached it.
    let listed = a.call_raw("list_sessions", json!({})).await;
    assert_eq!(
        listed["result"]["structuredContent"]["sessions"][0]["session_id"],
        json!(session),
        "{listed}"
    );
    let (error, text) = a
        .call("write_stdin", json!({"session_id": session, "chars": "from-a\n", "yield_time_ms": 1000}))
        .await;
    assert!(!error && text.contains("from-a") && !text.contains("from-b"), "{text}");
    let (error, text) = a.call("close_session", json!({"session_id": session})).await;
    assert!(!error, "{text}");

    // A client's MCP session id is its own: without the token nobody can use it.
    let mut thief = Client::of(&server);
    thief.token = None;
    thief.session = a.session.clone();
    let reply = thief.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})).await;
    assert_eq!(reply.status, 401);
}

/// The audit log's records of `event`.
fn audit_records(audit: &Path, event: &str) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == event)
        .collect()
}

/// The operator's routes: a live view and a kill of a session are audit records of the server, marked as coming
/// over HTTP; a kill without the token is refused and recorded nowhere.
#[tokio::test]
async fn an_operators_watch_and_kill_over_http_are_audit_records() {
    let logs = outside();
    let audit = logs.path().join("audit.jsonl");
    let server = start(&["--audit-log", audit.to_str().unwrap()], Some(TOKEN));
    let mut client = Client::connect(&server).await;
    let (session, pid) = start_sleeper(&mut client).await;
    let auth = vec![("authorization", format!("Bearer {TOKEN}"))];
    let listing = send(server.addr, "GET", "/operator/api/sessions", &auth, Bytes::new()).await;
    assert_eq!(listing.status, 200, "{}", listing.body);
    let listing: Value = serde_json::from_str(&listing.body).unwrap();
    let listed = listing["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == json!(session))
        .unwrap_or_else(|| panic!("{listing}"))
        .clone();
    let number = listed["client"].as_u64().unwrap();
    let route = |action: &str| format!("/operator/api/sessions/{number}/{session}/{action}");

    // A watch: its stream ends with the session's exit.
    let addr = server.addr;
    let (watch_route, watch_auth) = (route("watch"), auth.clone());
    let watch = tokio::spawn(async move { send(addr, "GET", &watch_route, &watch_auth, Bytes::new()).await });
    eventually("the watch is recorded", || !audit_records(&audit, "operator_attach").is_empty()).await;

    let refused = send(server.addr, "POST", &route("kill"), &[], Bytes::new()).await;
    assert_eq!(refused.status, 401);
    assert!(alive(pid), "a kill without the token killed nothing");
    assert!(audit_records(&audit, "operator_kill").is_empty(), "and is recorded nowhere");

    let killed = send(server.addr, "POST", &route("kill"), &auth, Bytes::new()).await;
    assert_eq!(killed.status, 200, "{}", killed.body);
    eventually("the sleeper is gone", || !alive(pid)).await;
    let watched = watch.await.unwrap();
    assert!(watched.body.contains("event: exit"), "{}", watched.body);

    let attach = audit_records(&audit, "operator_attach");
    assert_eq!(attach.len(), 1, "{attach:?}");
    let kills = audit_records(&audit, "operator_kill");
    assert_eq!(kills.len(), 1, "{kills:?}");
    for record in [&attach[0], &kills[0]] {
        assert_eq!(record["via"], "http", "{record}");
        assert_eq!(record["session_id"], json!(session), "{record}");
        assert_eq!(record["client"], json!(number), "{record}");
    }
    assert_eq!(attach[0]["write"], false);
    assert!(kills[0]["exit_code"].is_i64(), "{}", kills[0]);
    // The model's next call reads the exit.
    let (_, text) =
        client.call("write_stdin", json!({"session_id": session, "chars": "", "yield_time_ms": 5000})).await;
    assert!(text.contains("Process exited with code"), "{text}");
}

/// One sandbox per client: a client's sandboxed commands see and stop each other's processes across its
/// sessions, but never another client's (nor the server's), though they share the server.
#[tokio::test]
async fn each_client_has_a_sandbox_of_its_own() {
    let server = start(&[], Some(TOKEN));
    let mut a = Client::connect(&server).await;
    let mut b = Client::connect(&server).await;
    let (_, a_first) = start_sleeper(&mut a).await;
    let (_, a_second) = start_sleeper(&mut a).await;
    let (_, b_own) = start_sleeper(&mut b).await;
    let cmdline = |pid: u32| {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        String::from_utf8(raw).unwrap().trim_end_matches('\0').replace('\0', " ")
    };
    let (a_first_cmd, a_second_cmd, b_cmd) = (cmdline(a_first), cmdline(a_second), cmdline(b_own));
    // B lists its own sleeper, and neither of A's; its pkill of A's reaches nothing.
    let probe = format!(
        "pgrep -fx '{b_cmd}' >/dev/null && echo own-seen; pgrep -fx '{a_first_cmd}' >/dev/null && echo OTHER-SEEN; \
         pkill -fx '{a_first_cmd}' || echo other-unreachable; pgrep -f 'uexec[ ]mcp' >/dev/null && echo SERVER-SEEN; true"
    );
    let (error, text) = b.call("exec_command", json!({"cmd": probe, "login": false})).await;
    assert!(!error, "{text}");
    let out = output_of(&text);
    assert!(out.contains("own-seen") && out.contains("other-unreachable"), "{text}");
    assert!(!out.contains("OTHER-SEEN") && !out.contains("SERVER-SEEN"), "{text}");
    assert!(alive(a_first), "B's command reached A's process");
    // A stops its own sleeper of another session with pkill.
    let (error, text) = a
        .call(
            "exec_command",
            json!({"cmd": format!("pkill -fx '{a_second_cmd}' && echo stopped"), "login": false}),
        )
        .await;
    assert!(!error && output_of(&text).contains("stopped"), "{text}");
    eventually("A's second sleeper is gone", || !alive(a_second)).await;
    assert!(alive(a_first) && alive(b_own), "only the named process was stopped");
}

#[tokio::test]
async fn a_client_that_comes_back_within_its_grace_keeps_its_sessions() {
    // A grace of 20 s is checked every 5 s: staying away 6 s lets the reaper look at least once.
    let server = start(&["--client-grace-secs", "20"], Some(TOKEN));
    let mut client = Client::connect(&server).await;
    let (session, pid) = start_sleeper(&mut client).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(alive(pid));
    let (error, text) = client.call("write_stdin", json!({"session_id": session, "chars": ""})).await;
    assert!(!error && text.contains(&format!("session ID {session}")), "{text}");
    assert_eq!(metric(&server, "uexec_clients_expired_total").await, 0.0);
}

#[tokio::test]
async fn a_client_gone_past_its_grace_loses_its_sessions() {
    let server = start(&["--client-grace-secs", "1"], Some(TOKEN));
    let mut client = Client::connect(&server).await;
    let mut other = Client::connect(&server).await;
    let (_, pid) = start_sleeper(&mut client).await;
    let (_, other_pid) = start_sleeper(&mut other).await;
    // `other` keeps a connection open (a standalone SSE stream): it stays connected however long this takes.
    let mut headers = other.headers();
    headers.retain(|(name, _)| *name != "content-type");
    headers.retain(|(name, _)| *name != "accept");
    headers.push(("accept", "text/event-stream".to_owned()));
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let mut request =
        http::Request::builder().method("GET").uri("/mcp").header("host", server.addr.to_string());
    for (name, value) in &headers {
        request = request.header(*name, value);
    }
    let open = sender.send_request(request.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    assert_eq!(open.status(), 200);

    eventually("the disconnected client's command is killed", || !alive(pid)).await;
    assert_eq!(metric(&server, "uexec_clients_expired_total").await, 1.0);
    // Its MCP session is gone: the spec's 404 tells the client to start over.
    let reply = client.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    // The connected client lost nothing.
    assert!(alive(other_pid));
    let listed = other.call_raw("list_sessions", json!({})).await;
    assert_eq!(listed["result"]["structuredContent"]["sessions"].as_array().unwrap().len(), 1, "{listed}");
    drop(open);
}

#[tokio::test]
async fn a_client_that_ends_its_mcp_session_has_its_sessions_killed_at_once() {
    let server = start(&["--client-grace-secs", "600"], Some(TOKEN));
    let mut client = Client::connect(&server).await;
    let (_, pid) = start_sleeper(&mut client).await;
    let reply = send(server.addr, "DELETE", "/mcp", &client.headers(), Bytes::new()).await;
    assert!(reply.status < 300, "{} {}", reply.status, reply.body);
    eventually("the closed client's command is killed", || !alive(pid)).await;
    // The session's teardown is counted once its reader has seen the end, a moment after the process died: wait
    // for it (well inside the 600 s grace, which is not what ended it).
    eventually_async("no session is open", || async { metric(&server, "uexec_sessions_open").await == 0.0 })
        .await;
    eventually_async("no client is open", || async { metric(&server, "uexec_clients_open").await == 0.0 })
        .await;
}

/// `initialize` with `Uexec-Workspace: NAME`: an MCP session that joins the workspace of that name.
async fn connect_in(server: &Server, workspace: &str) -> Client {
    let client = Client::of(server);
    let mut headers = client.headers();
    headers.push(("uexec-workspace", workspace.to_owned()));
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let reply = send(server.addr, "POST", "/mcp", &headers, init.to_string()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let session = reply.headers.get("mcp-session-id").expect("an MCP session id").to_str().unwrap();
    let client = Client { session: Some(session.to_owned()), ..client };
    let reply = client.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    client
}

async fn end(server: &Server, client: &Client) {
    let reply = send(server.addr, "DELETE", "/mcp", &client.headers(), Bytes::new()).await;
    assert!(reply.status < 300, "{} {}", reply.status, reply.body);
}

/// A client that connects anew for every call and names a workspace keeps its sessions across its MCP sessions;
/// the workspace ends, its sessions killed, once no MCP session has named it for the grace. Paired with
/// `a_client_that_ends_its_mcp_session_has_its_sessions_killed_at_once` (no workspace) and with another
/// workspace, which sees nothing of this one.
#[tokio::test]
async fn mcp_sessions_naming_a_workspace_share_its_sessions_until_its_grace_runs_out() {
    let server = start(&["--client-grace-secs", "2"], Some(TOKEN));
    let mut first = connect_in(&server, "ws-a").await;
    let (session, pid) = start_sleeper(&mut first).await;
    end(&server, &first).await;
    let mut second = connect_in(&server, "ws-a").await;
    let (error, text) = second.call("write_stdin", json!({"session_id": session, "chars": ""})).await;
    assert!(!error && text.contains(&format!("session ID {session}")), "{text}");
    assert!(alive(pid));
    let mut stranger = connect_in(&server, "ws-b").await;
    let (error, text) = stranger.call("write_stdin", json!({"session_id": session, "chars": ""})).await;
    assert!(error && text.contains("Unknown process id"), "{text}");
    // The MCP sessions of one workspace, ended or not, are one client: two workspaces, two clients.
    assert_eq!(metric(&server, "uexec_clients_open").await, 2.0);
    end(&server, &stranger).await;
    end(&server, &second).await;
    eventually("the unheld workspace's command is killed after its grace", || !alive(pid)).await;
    let mut third = connect_in(&server, "ws-a").await;
    let (error, text) = third.call("write_stdin", json!({"session_id": session, "chars": ""})).await;
    assert!(error && text.contains("Unknown process id"), "{text}");
}

#[tokio::test]
async fn a_malformed_workspace_name_is_refused() {
    let server = start(&[], Some(TOKEN));
    let client = Client::of(&server);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    for bad in ["", "a b", "../x", &"x".repeat(129)] {
        let mut headers = client.headers();
        headers.push(("uexec-workspace", bad.to_owned()));
        let reply = send(server.addr, "POST", "/mcp", &headers, init.to_string()).await;
        assert_eq!(reply.status, 400, "{bad:?}: {}", reply.body);
        assert!(reply.body.contains("Uexec-Workspace"), "{}", reply.body);
    }
    let mut headers = client.headers();
    headers.push(("uexec-workspace", format!("ok-{}_.Z9", "x".repeat(100))));
    let reply = send(server.addr, "POST", "/mcp", &headers, init.to_string()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// The Python SDK's streamable-HTTP client ends its session with `DELETE` and reports anything but 200 or 204
/// as "Session termination failed": the answer is 204, and the session is gone after it.
#[tokio::test]
async fn ending_an_mcp_session_with_delete_is_answered_204_and_ends_it() {
    let server = start(&[], Some(TOKEN));
    let mut client = Client::connect(&server).await;
    let (error, _) = client.call("list_sessions", json!({})).await;
    assert!(!error);
    let reply = send(server.addr, "DELETE", "/mcp", &client.headers(), Bytes::new()).await;
    assert_eq!(reply.status, 204, "{}", reply.body);
    assert!(reply.body.is_empty(), "{}", reply.body);
    // The session is gone: its id is unknown now, to a request and to a second DELETE.
    let reply = client.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    let reply = send(server.addr, "DELETE", "/mcp", &client.headers(), Bytes::new()).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
}

#[tokio::test]
async fn limits_refuse_clients_and_sessions_beyond_them_with_a_reason() {
    let server = start(&["--max-clients", "2", "--max-sessions-total", "1"], Some(TOKEN));
    let mut a = Client::connect(&server).await;
    let mut b = Client::connect(&server).await;
    // A third client is refused while two are held.
    let refused = Client::of(&server)
        .post(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        .await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.body.contains("maximum number of clients"), "{}", refused.body);

    let (session, _) = start_sleeper(&mut a).await;
    let (error, text) = b.call("exec_command", json!({"cmd": "echo no-room", "login": false})).await;
    assert!(
        error && text.contains("refused: this server holds 1 sessions") && !text.contains("no-room\n"),
        "{text}"
    );
    assert_eq!(metric(&server, "uexec_sessions_refused_total").await, 1.0);
    // Room again once A's session is closed.
    let (error, text) = a.call("close_session", json!({"session_id": session})).await;
    assert!(!error, "{text}");
    let (error, text) = b.call("exec_command", json!({"cmd": "echo room", "login": false})).await;
    assert!(!error && output_of(&text) == "room\n", "{text}");
}

#[tokio::test]
async fn concurrent_calls_start_exactly_as_many_sessions_as_the_total_limit() {
    let server = start(&["--max-sessions-total", "20", "--sandbox", "danger-full-access"], Some(TOKEN));
    let mut clients = Vec::new();
    for _ in 0..30 {
        clients.push(Client::connect(&server).await);
    }
    // Every call is still in its window when the others are admitted: a session in flight counts once.
    let unique = 7_000_000 + std::process::id() % 100_000 * 10;
    let mut calls = tokio::task::JoinSet::new();
    for (n, mut client) in clients.into_iter().enumerate() {
        calls.spawn(async move {
            let cmd = format!("exec sleep {}{n:02}", unique);
            client.call("exec_command", json!({"cmd": cmd, "login": false, "yield_time_ms": 2000})).await
        });
    }
    let (mut started, mut refused) = (0, 0);
    while let Some(outcome) = calls.join_next().await {
        let (error, text) = outcome.unwrap();
        if error {
            assert!(text.contains("refused: this server holds 20 sessions"), "{text}");
            refused += 1;
        } else {
            assert!(text.contains("Process running with session ID"), "{text}");
            started += 1;
        }
    }
    assert_eq!((started, refused), (20, 10), "(started, refused) of 30 concurrent calls with a limit of 20");
    assert_eq!(metric(&server, "uexec_sessions_refused_total").await, 10.0);
    assert_eq!(metric(&server, "uexec_sessions_open").await, 20.0);
}

#[test]
fn memory_bounds_that_hold_no_session_are_refused_at_startup() {
    let dir = workspace();
    for flag in ["--memory-per-client", "--memory-total"] {
        let output = uexec(dir.path(), &["--listen", "127.0.0.1:0", flag, "1000"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flag}: {stderr}");
        assert!(stderr.contains("at least one session"), "{stderr}");
    }
}

#[tokio::test]
async fn malformed_requests_get_4xx_or_json_rpc_errors_and_the_server_survives() {
    let server = start(&[], Some(TOKEN));
    let mut client = Client::connect(&server).await;
    let (_, pid) = start_sleeper(&mut client).await;
    let headers = client.headers();
    for body in [&b"{not json"[..], b"[]", b"", b"\xff\xfe", b"{\"jsonrpc\":\"2.0\",\"id\":1}", b"null"] {
        let reply = send(server.addr, "POST", "/mcp", &headers, Bytes::copy_from_slice(body)).await;
        assert!((400..500).contains(&reply.status), "{body:?}: {} {}", reply.status, reply.body);
    }
    let mut wrong_type = headers.clone();
    wrong_type.retain(|(name, _)| *name != "content-type");
    wrong_type.push(("content-type", "text/plain".to_owned()));
    let reply = send(server.addr, "POST", "/mcp", &wrong_type, "{}").await;
    assert_eq!(reply.status, 415);
    // Larger than the 16 MiB bound of a stdio line.
    let huge = Bytes::from(vec![b' '; 17 * 1024 * 1024]);
    let reply = send(server.addr, "POST", "/mcp", &headers, huge).await;
    assert_eq!(reply.status, 413);
    // An unknown method is a JSON-RPC error.
    let reply = client.post(&json!({"jsonrpc": "2.0", "id": 77, "method": "no/such/method"})).await;
    assert_eq!(reply.response(77)["error"]["code"], json!(-32601), "{}", reply.body);
    let reply = send(server.addr, "GET", "/nowhere", &headers, Bytes::new()).await;
    assert_eq!(reply.status, 404);
    // The server and the client's session survived all of it.
    assert!(alive(pid));
    let (error, text) =
        client.call("exec_command", json!({"cmd": "echo still-serving", "login": false})).await;
    assert!(!error && output_of(&text) == "still-serving\n", "{text}");
}

#[tokio::test]
async fn metrics_count_spawns_output_and_sessions_and_logs_can_be_json() {
    let server = start_with(&["--log-format", "json"], Some(TOKEN), &[("RUST_LOG", "uexec=info")]);
    let mut client = Client::connect(&server).await;
    let (error, text) = client.call("exec_command", json!({"cmd": "printf 12345", "login": false})).await;
    assert!(!error, "{text}");
    let (_, pid) = start_sleeper(&mut client).await;
    assert_eq!(metric(&server, "uexec_spawns_total").await, 2.0);
    assert_eq!(metric(&server, "uexec_sessions_open").await, 1.0);
    assert_eq!(metric(&server, "uexec_clients_open").await, 1.0);
    assert_eq!(metric(&server, "uexec_spawn_latency_seconds_count").await, 2.0);
    assert!(metric(&server, "uexec_output_bytes_total").await >= 5.0);
    assert!(alive(pid));
    // Every log line on stderr is one JSON object (the "listening" line and the operator page's address are the
    // plain lines operators read).
    let log = server.stderr.lock().unwrap().clone();
    let json_lines: Vec<Value> = log.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    assert!(json_lines.iter().any(|l| l["message"] == "serving MCP over Streamable HTTP"), "{log}");
    assert!(
        log.lines().all(|l| l.starts_with("uexec: listening")
            || l.starts_with("uexec: operator page")
            || serde_json::from_str::<Value>(l).is_ok()),
        "{log}"
    );
}

#[tokio::test]
async fn sigterm_lets_a_call_in_flight_finish_then_kills_every_session() {
    let mut server = start(&["--shutdown-deadline-secs", "60"], Some(TOKEN));
    let mut idle = Client::connect(&server).await;
    let (_, pid) = start_sleeper(&mut idle).await;
    let mut busy = Client::connect(&server).await;
    let call = tokio::spawn(async move {
        busy.call(
            "exec_command",
            json!({"cmd": "sleep 2; echo finished", "login": false, "yield_time_ms": 30000}),
        )
        .await
    });
    let (addr, token) = (server.addr, server.token.clone());
    eventually_async("the call is in flight", || {
        let token = token.clone();
        async move { metric_at(addr, token.as_deref(), "uexec_calls_in_flight").await == 1.0 }
    })
    .await;
    sigterm(server.child.id());
    let (error, text) = call.await.unwrap();
    assert!(!error && output_of(&text) == "finished\n", "the call in flight finished: {text}");
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status}");
    // Every session is killed at shutdown (the kill is sent before the exit; the process may still be on its way
    // out).
    eventually("the idle client's command is gone", || !alive(pid)).await;
}

async fn eventually_async<F: Future<Output = bool>>(what: &str, mut condition: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn sigterm(pid: u32) {
    let status = Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert!(status.success());
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A page that stops reading its live view of a flooding session (a background tab) costs the server a bounded
/// queue, and is told how much it missed when it reads again.
#[tokio::test]
#[allow(clippy::print_stderr)]
async fn a_stalled_operator_watch_of_a_flooding_session_costs_a_bounded_queue_and_says_what_it_missed() {
    use std::io::{Read, Write};
    let server = start(&["--sandbox", "danger-full-access"], Some(TOKEN));
    let mut client = Client::connect(&server).await;
    let (error, text) = client
        .call(
            "exec_command",
            json!({"cmd": "exec cat /dev/zero", "login": false, "yield_time_ms": 250, "max_output_tokens": 16}),
        )
        .await;
    assert!(!error, "{text}");
    let session = session_of(&text);
    let auth = vec![("authorization", format!("Bearer {TOKEN}"))];
    let listed = || {
        let auth = auth.clone();
        async move {
            let listing = send(server.addr, "GET", "/operator/api/sessions", &auth, Bytes::new()).await;
            let listing: Value = serde_json::from_str(&listing.body).unwrap();
            listing["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["session_id"] == json!(session))
                .unwrap_or_else(|| panic!("{listing}"))
                .clone()
        }
    };
    let number = listed().await["client"].as_u64().unwrap();
    let output_bytes = || async { listed().await["output_bytes"].as_u64().unwrap() };
    let start_bytes = output_bytes().await;
    let flood_deadline = Instant::now() + Duration::from_secs(300);
    while output_bytes().await < start_bytes + (64 << 20) {
        assert!(Instant::now() < flood_deadline, "the flood stalled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = server.child.id();
    let before = rss_kib(pid);
    // A page opens the live view and stops reading it.
    let mut page = std::net::TcpStream::connect(server.addr).unwrap();
    write!(
        page,
        "GET /operator/api/sessions/{number}/{session}/watch HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
        server.addr
    )
    .unwrap();
    let watched_at = output_bytes().await;
    let mut peak = before;
    while output_bytes().await < watched_at + (320 << 20) {
        assert!(Instant::now() < flood_deadline, "the flood stalled");
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    peak = peak.max(rss_kib(pid));
    eprintln!(
        "server RSS with a stalled operator watch: {before} KiB before, {peak} KiB at most over 320 MiB"
    );
    assert!(peak <= before + 32 * 1024, "the server grew from {before} KiB to {peak} KiB (bound: + 32 MiB)");
    // Reading again: `skipped` events say how much was dropped (one or several: while the page was stalling,
    // the connection may have taken a little more now and then).
    let reader = std::thread::spawn(move || {
        let needle = b"event: skipped\ndata: ";
        let mut carry: Vec<u8> = Vec::new();
        let mut total = 0u64;
        let mut buffer = vec![0u8; 1 << 16];
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let n = page.read(&mut buffer).unwrap_or(0);
            if n == 0 {
                break;
            }
            carry.extend_from_slice(&buffer[..n]);
            while let Some(at) = carry.windows(needle.len()).position(|w| w == needle) {
                let rest = &carry[at + needle.len()..];
                let Some(end) = rest.iter().position(|b| *b == b'\n') else {
                    carry.drain(..at);
                    break;
                };
                total += String::from_utf8_lossy(&rest[..end]).parse::<u64>().unwrap();
                carry.drain(..at + needle.len() + end);
            }
            if total >= 64 << 20 {
                return total;
            }
            // Keep only a tail long enough to hold the start of an event.
            if carry.len() > 1 << 20 {
                carry.drain(..carry.len() - 256);
            }
        }
        panic!("the live view never said it skipped 64 MiB (only {total} bytes)");
    });
    let skipped = tokio::task::spawn_blocking(move || reader.join().unwrap()).await.unwrap();
    assert!(skipped >= 64 << 20, "the skipped events say {skipped} bytes");
    let (error, text) = client.call("close_session", json!({"session_id": session})).await;
    assert!(!error, "{text}");
}
