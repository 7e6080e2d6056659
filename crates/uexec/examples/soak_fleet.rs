//! The fleet on one host (`cargo xtask soak-fleet` runs it): 16 `uexec mcp --listen` servers on loopback ports,
//! 64 concurrent MCP clients spread over them, each running a short interactive scenario (a Python REPL and a
//! shell: start, write, read back, close). Every response is checked; no client may see or reach another's
//! sessions; the resident memory of every server (its uexec processes, not the commands) is sampled throughout,
//! and the peaks must stay within the stated bounds.
//!
//! Usage: soak_fleet [--uexec PATH] [--servers 16] [--clients 64] [--rounds 2]
//!
//! Without flags (as `cargo xtask examples` runs every example) it runs a small fleet (4 servers, 16 clients, one
//! round) against the uexec binary of the same build (`target/<profile>/uexec`, beside `examples/`).

// A command-line tool: printing is its job; failing loudly is how it reports.
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

/// Peak resident memory one server may use (its uexec processes together, a release build), in KiB.
const SERVER_RSS_BOUND_KIB: u64 = 32 * 1024;
/// Peak resident memory of all servers together, in KiB.
const TOTAL_RSS_BOUND_KIB: u64 = 256 * 1024;
const PROTOCOL: &str = "2025-11-25";

struct Args {
    uexec: PathBuf,
    servers: usize,
    clients: usize,
    rounds: usize,
}

fn args() -> Args {
    let given: Vec<String> = std::env::args().skip(1).collect();
    let small = given.is_empty();
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("uexec")))
        .unwrap_or_default();
    let mut args = if small {
        Args { uexec: beside, servers: 4, clients: 16, rounds: 1 }
    } else {
        Args { uexec: beside, servers: 16, clients: 64, rounds: 2 }
    };
    let mut it = given.into_iter();
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--uexec" => args.uexec = PathBuf::from(value),
            "--servers" => args.servers = value.parse().unwrap(),
            "--clients" => args.clients = value.parse().unwrap(),
            "--rounds" => args.rounds = value.parse().unwrap(),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(
        args.uexec.is_file(),
        "no uexec binary at {}: build it (cargo build -p uexec) or name it with --uexec",
        args.uexec.display()
    );
    args.uexec = std::fs::canonicalize(&args.uexec).unwrap();
    args
}

struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(uexec: &Path, token_file: &Path) -> Server {
    let dir = tempfile::Builder::new().prefix("uexec-fleet-").tempdir_in("/tmp").unwrap();
    let mut child = Command::new(uexec)
        .args(["mcp", "--listen", "127.0.0.1:0", "--auth-token-file"])
        .arg(token_file)
        .args(["--max-clients", "8"])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join(".no-config"))
        .env("SHELL", "/bin/bash")
        .env_remove("TMPDIR")
        .env_remove("UEXEC_AUTH_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("the server ended before listening").unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.trim_end_matches("/mcp").parse().unwrap();
        }
        eprintln!("server: {line}");
    };
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("server: {line}");
        }
    });
    Server { child, addr, _dir: dir }
}

/// Resident memory of `pid` and of its descendants that run the same executable (uexec's own processes, not the
/// commands), in KiB.
fn server_rss_kib(pid: u32) -> u64 {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mut total = 0;
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        if std::fs::read_link(format!("/proc/{p}/exe")).ok() == exe {
            total += std::fs::read_to_string(format!("/proc/{p}/status"))
                .ok()
                .and_then(|s| {
                    s.lines().find_map(|l| {
                        l.strip_prefix("VmRSS:").and_then(|v| v.trim().split(' ').next()?.parse().ok())
                    })
                })
                .unwrap_or(0);
        }
        if let Ok(children) = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")) {
            stack.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    total
}

struct Client {
    addr: SocketAddr,
    token: String,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("content-type", "application/json".to_owned()),
            ("accept", "application/json, text/event-stream".to_owned()),
            ("authorization", format!("Bearer {}", self.token)),
        ];
        if let Some(session) = &self.session {
            headers.push(("mcp-session-id", session.clone()));
            headers.push(("mcp-protocol-version", PROTOCOL.to_owned()));
        }
        headers
    }

    async fn send(&self, method: &str, body: String) -> (u16, http::HeaderMap, String) {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let mut request =
            http::Request::builder().method(method).uri("/mcp").header("host", self.addr.to_string());
        for (name, value) in self.headers() {
            request = request.header(name, value);
        }
        let response =
            sender.send_request(request.body(Full::new(Bytes::from(body))).unwrap()).await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let (status, headers, body) = self
            .send("POST", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string())
            .await;
        assert_eq!(status, 200, "{method}: {body}");
        if self.session.is_none() {
            self.session = headers.get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
        }
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to {method}: {body}"))
    }

    async fn connect(addr: SocketAddr, token: &str) -> Client {
        let mut client = Client { addr, token: token.to_owned(), session: None, next_id: 0 };
        let init = client
            .request(
                "initialize",
                json!({"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "fleet", "version": "0"}}),
            )
            .await;
        assert_eq!(init["result"]["protocolVersion"], PROTOCOL, "{init}");
        let (status, _, body) = client
            .send("POST", json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
            .await;
        assert_eq!(status, 202, "{body}");
        client
    }

    /// (isError, text)
    async fn call(&mut self, name: &str, arguments: Value) -> (bool, String) {
        let answer = self.request("tools/call", json!({"name": name, "arguments": arguments})).await;
        let result = &answer["result"];
        (
            result["isError"] == json!(true),
            result["content"][0]["text"].as_str().unwrap_or_default().to_owned(),
        )
    }

    async fn sessions(&mut self) -> Vec<u64> {
        let answer = self.request("tools/call", json!({"name": "list_sessions", "arguments": {}})).await;
        let mut ids: Vec<u64> = answer["result"]["structuredContent"]["sessions"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|s| s["session_id"].as_u64().unwrap())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Write `chars` and read until `expected` shows up (polling with empty writes).
    async fn converse(&mut self, session: u64, chars: &str, expected: &str) {
        let (error, text) = self
            .call("write_stdin", json!({"session_id": session, "chars": chars, "yield_time_ms": 1500}))
            .await;
        assert!(!error, "{text}");
        let mut seen = output_of(&text).to_owned();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !seen.contains(expected) {
            assert!(Instant::now() < deadline, "never saw {expected:?} in {seen:?}");
            let (error, text) = self
                .call("write_stdin", json!({"session_id": session, "chars": "", "yield_time_ms": 5000}))
                .await;
            assert!(!error, "{text}");
            seen.push_str(output_of(&text));
        }
    }
}

fn output_of(text: &str) -> &str {
    text.split_once("\nOutput:\n").map(|(_, o)| o).unwrap_or_default()
}

fn session_of(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("Process running with session ID "))
        .unwrap_or_else(|| panic!("no session in {text}"))
        .parse()
        .unwrap()
}

/// Every client's session ids, by client index (shared so that each can try the others').
type SharedIds = Arc<Mutex<HashMap<usize, Vec<u64>>>>;

/// One client's scenario.
async fn scenario(
    index: usize,
    addr: SocketAddr,
    token: String,
    barrier: Arc<Barrier>,
    ids: SharedIds,
) -> Duration {
    let started = Instant::now();
    let mut client = Client::connect(addr, &token).await;
    let (error, text) = client
        .call(
            "exec_command",
            json!({"cmd": "python3 -q -i", "tty": true, "login": false, "yield_time_ms": 1000}),
        )
        .await;
    assert!(!error, "{text}");
    let python = session_of(&text);
    let (error, text) = client
        .call(
            "exec_command",
            json!({"cmd": "bash --norc -i", "tty": true, "login": false, "yield_time_ms": 500}),
        )
        .await;
    assert!(!error, "{text}");
    let shell = session_of(&text);
    client
        .converse(
            python,
            &format!("x = {index} * 6 + 7\nprint(f'client-{index}:', x)\n"),
            &format!("client-{index}: {}", index * 6 + 7),
        )
        .await;
    client.converse(shell, &format!("echo shell-{index}-$((40 + 2))\n"), &format!("shell-{index}-42")).await;
    let mut own = vec![python, shell];
    own.sort_unstable();
    assert_eq!(client.sessions().await, own, "client {index} sees exactly its own sessions");
    ids.lock().unwrap().insert(index, own.clone());

    // Every client holds its sessions now: try the neighbours' (on the same server and elsewhere) from here.
    barrier.wait().await;
    let foreign: Vec<u64> = ids
        .lock()
        .unwrap()
        .iter()
        .filter(|(other, _)| **other != index)
        .flat_map(|(_, sessions)| sessions.clone())
        .filter(|id| !own.contains(id))
        .take(4)
        .collect();
    for id in foreign {
        let (error, text) =
            client.call("write_stdin", json!({"session_id": id, "chars": "intruder\n"})).await;
        assert!(error && text.contains("Unknown process id"), "client {index} reached session {id}: {text}");
        let (error, text) = client.call("close_session", json!({"session_id": id})).await;
        assert!(error, "client {index} closed session {id}: {text}");
    }
    assert_eq!(client.sessions().await, own, "client {index}'s sessions are untouched");
    barrier.wait().await;

    for id in own {
        let (error, text) = client.call("close_session", json!({"session_id": id})).await;
        assert!(!error && text.contains("Process exited with code"), "{text}");
    }
    assert!(client.sessions().await.is_empty());
    let (status, _, body) = client.send("DELETE", String::new()).await;
    assert!(status < 300, "{status} {body}");
    started.elapsed()
}

fn main() {
    let args = args();
    let token_dir = tempfile::Builder::new().prefix("uexec-fleet-token-").tempdir_in("/var/tmp").unwrap();
    let token = format!("fleet-{:032x}", std::process::id() as u128 * 0x9E37_79B9_7F4A_7C15);
    let token_file = token_dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();

    let begun = Instant::now();
    let servers: Vec<Server> = (0..args.servers).map(|_| start_server(&args.uexec, &token_file)).collect();
    let pids: Vec<u32> = servers.iter().map(|s| s.child.id()).collect();
    let idle: Vec<u64> = pids.iter().map(|&p| server_rss_kib(p)).collect();

    // Sample every server's memory throughout.
    let peaks = Arc::new(Mutex::new(vec![0u64; pids.len()]));
    let total_peak = Arc::new(Mutex::new(0u64));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peaks, total_peak, done, pids) = (peaks.clone(), total_peak.clone(), done.clone(), pids.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let now: Vec<u64> = pids.iter().map(|&p| server_rss_kib(p)).collect();
                let mut peaks = peaks.lock().unwrap();
                for (peak, value) in peaks.iter_mut().zip(&now) {
                    *peak = (*peak).max(*value);
                }
                let mut total = total_peak.lock().unwrap();
                *total = (*total).max(now.iter().sum());
                drop((peaks, total));
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let mut durations = Vec::new();
    for round in 0..args.rounds {
        let barrier = Arc::new(Barrier::new(args.clients));
        let ids = Arc::new(Mutex::new(HashMap::new()));
        let round_start = Instant::now();
        let results = runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for index in 0..args.clients {
                let addr = servers[index % servers.len()].addr;
                tasks.spawn(scenario(index, addr, token.clone(), barrier.clone(), ids.clone()));
            }
            let mut out = Vec::new();
            while let Some(result) = tasks.join_next().await {
                out.push(result.unwrap_or_else(|e| panic!("a client failed: {e}")));
            }
            out
        });
        println!(
            "round {}: {} clients on {} servers passed in {:.1} s",
            round + 1,
            results.len(),
            servers.len(),
            round_start.elapsed().as_secs_f64()
        );
        durations.extend(results);
    }
    let after: Vec<u64> = pids.iter().map(|&p| server_rss_kib(p)).collect();
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let peaks = peaks.lock().unwrap().clone();
    let total_peak = *total_peak.lock().unwrap();

    durations.sort_unstable();
    let median = durations[durations.len() / 2];
    let worst = durations[durations.len() - 1];
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "fleet: {} servers, {} clients x {} rounds, every response correct, no cross-client visibility ({:.1} s)",
        servers.len(),
        args.clients,
        args.rounds,
        begun.elapsed().as_secs_f64()
    );
    println!("scenario wall time: median {:.2} s, worst {:.2} s", median.as_secs_f64(), worst.as_secs_f64());
    println!(
        "server RSS (uexec processes): idle {:.1}-{:.1} MiB, peak {:.1}-{:.1} MiB (bound {:.0} MiB), after {:.1}-{:.1} MiB",
        mib(*idle.iter().min().unwrap()),
        mib(*idle.iter().max().unwrap()),
        mib(*peaks.iter().min().unwrap()),
        mib(*peaks.iter().max().unwrap()),
        mib(SERVER_RSS_BOUND_KIB),
        mib(*after.iter().min().unwrap()),
        mib(*after.iter().max().unwrap()),
    );
    println!(
        "total RSS of all servers: idle {:.1} MiB, peak {:.1} MiB (bound {:.0} MiB), after {:.1} MiB",
        mib(idle.iter().sum()),
        mib(total_peak),
        mib(TOTAL_RSS_BOUND_KIB),
        mib(after.iter().sum())
    );
    for (i, peak) in peaks.iter().enumerate() {
        assert!(*peak <= SERVER_RSS_BOUND_KIB, "server {i} peaked at {:.1} MiB", mib(*peak));
    }
    assert!(total_peak <= TOTAL_RSS_BOUND_KIB, "the fleet peaked at {:.1} MiB", mib(total_peak));
    drop(servers);
    println!("soak-fleet: passed");
}
