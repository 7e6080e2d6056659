//! Test harness: a `uexec mcp` child driven with raw JSON-RPC lines, a temporary workspace, and /proc helpers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

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

/// A `uexec mcp` child and its JSON-RPC lines.
pub struct McpServer {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<(String, Value)>,
    next_id: i64,
    /// Elicitation requests received, in order (their `params`).
    pub elicitations: Vec<Value>,
    /// Answers to give to elicitation requests, in order: `approve`, `approve_for_session`, `deny`, `decline`.
    pub answers: Vec<String>,
}

impl McpServer {
    /// Start `uexec mcp <args>` in `ws` (not yet initialized).
    pub fn start(ws: &Workspace, args: &[&str]) -> McpServer {
        McpServer::start_with_env(ws, args, &[])
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
        McpServer { child, stdin, lines, next_id: 1, elicitations: Vec::new(), answers: Vec::new() }
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
        self.child.id()
    }

    /// Write one raw line (a newline is added).
    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Write one raw line of bytes, valid UTF-8 or not (a newline is added).
    pub fn send_bytes(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, message: &Value) {
        self.send_raw(&message.to_string());
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Close the server's stdin (the client disconnects).
    pub fn close_stdin(&mut self) {
        self.stdin.take();
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
                continue;
            }
            if message.get("id") == Some(id) {
                return message;
            }
        }
    }

    /// The next message from the server whose `method` is `method` (others are skipped).
    pub fn wait_method(&mut self, method: &str) -> Value {
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
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        self.stdin.take();
        if self.wait_exit(Duration::from_secs(20)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
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
