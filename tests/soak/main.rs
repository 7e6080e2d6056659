//! The soak and load driver behind `cargo xtask soak`: thousands of short sessions through the engine directly
//! and through `uexec mcp` over stdio, then 64 sessions streaming at once and 64 idle ones; it measures the
//! host process from `/proc` (open fds, RSS, threads, CPU ticks, descendants and zombies) and call latencies,
//! and prints one row per figure with its bound and whether it held. Exits 1 when a bound did not hold.
//!
//! Usage: `soak --uexec PATH [--sessions N] [--secs N] [--streamers N] [--stream-mib N] [--only engine|mcp|load]`
//! (`--secs` is the idle window over which the CPU of 64 idle sessions is measured).

// A measuring program: printing is its job, and a failed setup ends it.
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uexec_engine::{EngineConfig, ExecCommandRequest};
use uexec_ports::{EventSink, ExecEvent};

/// Events go nowhere: the soak measures the engine, not a sink.
struct Discard;

impl EventSink for Discard {
    fn emit(&self, _event: ExecEvent) {}
}

struct Args {
    uexec: Option<PathBuf>,
    sessions: usize,
    idle_secs: u64,
    streamers: usize,
    stream_mib: usize,
    only: Option<String>,
}

fn parse_args() -> Args {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| raw.iter().position(|a| a == flag).and_then(|i| raw.get(i + 1)).cloned();
    let number = |flag: &str, default: usize| value(flag).map_or(default, |v| v.parse().expect(flag));
    Args {
        uexec: value("--uexec").map(PathBuf::from),
        sessions: number("--sessions", 10_000),
        idle_secs: number("--secs", 60) as u64,
        streamers: number("--streamers", 64),
        stream_mib: number("--stream-mib", 16),
        only: value("--only"),
    }
}

/// One measured figure and whether it met its bound.
struct Check {
    part: &'static str,
    name: String,
    value: String,
    bound: String,
    held: bool,
}

fn check(
    part: &'static str,
    name: impl Into<String>,
    value: impl Into<String>,
    bound: impl Into<String>,
    held: bool,
) -> Check {
    let check = Check { part, name: name.into(), value: value.into(), bound: bound.into(), held };
    eprintln!(
        "soak: [{}] {} = {} (bound: {}) {}",
        check.part,
        check.name,
        check.value,
        check.bound,
        if check.held { "held" } else { "NOT HELD" }
    );
    check
}

// ---- /proc -----------------------------------------------------------------------------------------------

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count).unwrap_or(0)
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map(Iterator::count).unwrap_or(0)
}

/// User plus system CPU ticks of `pid`.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the command: state is index 0, utime is field 14 of the line (index 11 here), stime 12.
    fields.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + fields.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

/// Live descendants and zombie descendants of `pid`.
fn descendants(pid: u32) -> (usize, usize) {
    let mut parent: HashMap<u32, (u32, bool)> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let zombie = fields.first() == Some(&"Z");
        if let Some(ppid) = fields.get(1).and_then(|v| v.parse().ok()) {
            parent.insert(p, (ppid, zombie));
        }
    }
    let (mut live, mut zombies) = (0, 0);
    for (&p, &(_, zombie)) in &parent {
        let mut at = p;
        let mut hops = 0;
        while let Some(&(pp, _)) = parent.get(&at) {
            if pp == pid {
                if zombie {
                    zombies += 1;
                } else {
                    live += 1;
                }
                break;
            }
            if pp <= 1 || hops > 64 {
                break;
            }
            at = pp;
            hops += 1;
        }
    }
    (live, zombies)
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    fds: usize,
    rss_kib: u64,
    threads: usize,
    live_descendants: usize,
    zombies: usize,
}

fn sample(pid: u32) -> Sample {
    let (live_descendants, zombies) = descendants(pid);
    Sample {
        fds: fd_count(pid),
        rss_kib: status_kib(pid, "VmRSS:"),
        threads: threads(pid),
        live_descendants,
        zombies,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// The soak checks common to both drivers: the host after the run against the host after warm-up.
fn soak_checks(
    part: &'static str,
    baseline: Sample,
    end: Sample,
    latencies: &[Duration],
    warm: usize,
) -> Vec<Check> {
    let mut checks = vec![
        check(
            part,
            "open fds (after warm-up -> end)",
            format!("{} -> {}", baseline.fds, end.fds),
            "constant",
            end.fds <= baseline.fds,
        ),
        check(
            part,
            "RSS drift",
            format!(
                "{} KiB -> {} KiB ({:+} KiB)",
                baseline.rss_kib,
                end.rss_kib,
                end.rss_kib as i64 - baseline.rss_kib as i64
            ),
            "<= 2048 KiB",
            end.rss_kib <= baseline.rss_kib + 2048,
        ),
        check(
            part,
            "threads",
            format!("{} -> {}", baseline.threads, end.threads),
            "no growth",
            end.threads <= baseline.threads,
        ),
        check(part, "zombies at the end", end.zombies.to_string(), "0", end.zombies == 0),
        check(
            part,
            "live descendants (after warm-up -> end)",
            format!("{} -> {}", baseline.live_descendants, end.live_descendants),
            "no leftover",
            end.live_descendants <= baseline.live_descendants,
        ),
    ];
    let measured = &latencies[warm.min(latencies.len())..];
    let n = 1000.min(measured.len() / 2);
    if n > 0 {
        let mut first: Vec<Duration> = measured[..n].to_vec();
        let mut last: Vec<Duration> = measured[measured.len() - n..].to_vec();
        first.sort_unstable();
        last.sort_unstable();
        for (label, p) in [("p50", 0.5), ("p99", 0.99)] {
            let (a, b) = (percentile(&first, p), percentile(&last, p));
            let ratio = b.as_secs_f64() / a.as_secs_f64().max(1e-9);
            checks.push(check(
                part,
                format!("exec_command `true` {label}, first {n} vs last {n}"),
                format!("{} -> {} ({ratio:.2}x)", ms(a), ms(b)),
                "<= 1.2x",
                ratio <= 1.2,
            ));
        }
    }
    checks
}

// ---- the engine directly -----------------------------------------------------------------------------------

fn exec(cmd: &str, tty: bool, yield_ms: u64) -> ExecCommandRequest {
    ExecCommandRequest { cmd: cmd.to_owned(), tty, yield_time_ms: Some(yield_ms), ..Default::default() }
}

async fn engine_soak(sessions: usize) -> Vec<Check> {
    let workdir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(workdir.path().to_path_buf());
    config.base_env = std::env::vars_os().filter(|(k, _)| k != "HOME").collect();
    config.base_env.push(("HOME".into(), workdir.path().into()));
    config.default_shell = "/bin/bash".to_owned();
    let engine = tests::unsandboxed_engine(config, Arc::new(Discard));
    let pid = std::process::id();
    let warm = sessions / 20;
    let mut baseline = None;
    let mut latencies = Vec::new();
    let mut warm_latencies = 0;
    let mut errors = 0usize;
    let started = Instant::now();
    for i in 0..sessions {
        if i == warm {
            close_all_engine(&engine).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            baseline = Some(sample(pid));
            warm_latencies = latencies.len();
        }
        match i % 5 {
            // Exits within the call: the latency sample.
            0 => {
                let t = Instant::now();
                let r = engine.exec_command(exec("true", false, 10_000)).await;
                latencies.push(t.elapsed());
                if r.map(|r| r.exit_code) != Ok(Some(0)) {
                    errors += 1;
                }
            }
            1 => {
                if engine.exec_command(exec("true", true, 10_000)).await.map(|r| r.exit_code) != Ok(Some(0)) {
                    errors += 1;
                }
            }
            // Left waiting for input: pruned once 64 are open.
            2 => {
                if engine.exec_command(exec("exec cat", true, 2_000)).await.map(|r| r.session_id.is_some())
                    != Ok(true)
                {
                    errors += 1;
                }
            }
            // Closed.
            3 => match engine.exec_command(exec("exec cat", true, 2_000)).await {
                Ok(r) => match r.session_id {
                    Some(id) => {
                        if engine.close_session(id).await.is_err() {
                            errors += 1;
                        }
                    }
                    None => errors += 1,
                },
                Err(_) => errors += 1,
            },
            // Cancelled: the call is dropped mid-window; its process stays a session (pruned or closed later).
            _ => {
                let _ = tokio::time::timeout(
                    Duration::from_millis(30),
                    engine.exec_command(exec("sleep 5", false, 10_000)),
                )
                .await;
            }
        }
        if i % 1000 == 999 {
            let s = sample(pid);
            eprintln!(
                "soak: [engine] {} sessions in {:.0} s: fds {} rss {} KiB threads {} descendants {} zombies {}",
                i + 1,
                started.elapsed().as_secs_f64(),
                s.fds,
                s.rss_kib,
                s.threads,
                s.live_descendants,
                s.zombies
            );
        }
    }
    close_all_engine(&engine).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let end = sample(pid);
    let baseline = baseline.unwrap_or(end);
    let mut checks = vec![check("engine", "sessions run", sessions.to_string(), "-", true)];
    checks.push(check("engine", "failed calls", errors.to_string(), "0", errors == 0));
    checks.extend(soak_checks("engine", baseline, end, &latencies, warm_latencies));
    engine.shutdown().await;
    checks
}

async fn close_all_engine(engine: &uexec_engine::Engine) {
    for s in engine.list_sessions().await {
        let _ = engine.close_session(s.session_id).await;
    }
}

// ---- the MCP server over stdio ------------------------------------------------------------------------------

struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<(Instant, Value)>,
    next_id: i64,
    /// Answers that arrived while waiting for another.
    early: HashMap<i64, (Instant, Value)>,
    /// Requests cancelled: their late answers are dropped.
    cancelled: HashSet<i64>,
}

impl Client {
    fn start(uexec: &Path, home: &Path) -> Client {
        let mut child = Command::new(uexec)
            .arg("mcp")
            .current_dir(home)
            .env("HOME", home)
            .env("SHELL", "/bin/bash")
            .env("XDG_CONFIG_HOME", home.join(".no-config"))
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn uexec mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value: Value = serde_json::from_str(&line).expect("the server writes JSON lines");
                if tx.send((Instant::now(), value)).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut client =
            Client { child, stdin, lines, next_id: 1, early: HashMap::new(), cancelled: HashSet::new() };
        let r = client.request("initialize", json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "uexec-soak", "version": "0" } }));
        assert!(r.get("result").is_some(), "{r}");
        client.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        client
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        let mut line = message.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Send a request; returns its id.
    fn send_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        id
    }

    fn wait(&mut self, id: i64) -> (Instant, Value) {
        if let Some(answer) = self.early.remove(&id) {
            return answer;
        }
        loop {
            let (at, message) =
                self.lines.recv_timeout(Duration::from_secs(120)).expect("an answer within 120 s");
            let Some(got) = message.get("id").and_then(Value::as_i64) else { continue };
            if message.get("method").is_some() || self.cancelled.remove(&got) {
                continue;
            }
            if got == id {
                return (at, message);
            }
            self.early.insert(got, (at, message));
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.wait(id).1
    }

    fn call(&mut self, name: &str, arguments: Value) -> Value {
        let r = self.request("tools/call", json!({ "name": name, "arguments": arguments }));
        r.get("result").cloned().unwrap_or_else(|| panic!("tools/call {name}: {r}"))
    }

    fn cancel(&mut self, id: i64) {
        self.cancelled.insert(id);
        self.send(
            &json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": id } }),
        );
    }

    fn close_all(&mut self) {
        let listed = self.call("list_sessions", json!({}));
        let ids: Vec<u64> = listed["structuredContent"]["sessions"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s["session_id"].as_u64()).collect())
            .unwrap_or_default();
        for id in ids {
            self.call("close_session", json!({ "session_id": id }));
        }
    }

    fn finish(mut self) -> bool {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

fn header(result: &Value, prefix: &str) -> Option<i64> {
    let (head, _) = text(result).split_once("\nOutput:")?;
    head.lines().find_map(|l| l.strip_prefix(prefix)).and_then(|v| v.trim().parse().ok())
}

fn exit_code(result: &Value) -> Option<i64> {
    header(result, "Process exited with code ")
}

fn session_id(result: &Value) -> Option<i64> {
    header(result, "Process running with session ID ")
}

fn mcp_soak(uexec: &Path, sessions: usize) -> Vec<Check> {
    let home = tempfile::tempdir().unwrap();
    let mut client = Client::start(uexec, home.path());
    let pid = client.pid();
    let warm = sessions / 20;
    let mut baseline = None;
    let mut latencies = Vec::new();
    let mut warm_latencies = 0;
    let mut errors = 0usize;
    let started = Instant::now();
    for i in 0..sessions {
        if i == warm {
            client.close_all();
            std::thread::sleep(Duration::from_millis(500));
            baseline = Some(sample(pid));
            warm_latencies = latencies.len();
        }
        match i % 5 {
            0 => {
                let t = Instant::now();
                let r = client.call("exec_command", json!({ "cmd": "true", "yield_time_ms": 10_000 }));
                latencies.push(t.elapsed());
                if exit_code(&r) != Some(0) {
                    errors += 1;
                    eprintln!("soak: [mcp] session {i}: `true` did not exit 0: {r}");
                }
            }
            1 => {
                let r = client
                    .call("exec_command", json!({ "cmd": "true", "tty": true, "yield_time_ms": 10_000 }));
                if exit_code(&r) != Some(0) {
                    errors += 1;
                    eprintln!("soak: [mcp] session {i}: `true` in a terminal did not exit 0: {r}");
                }
            }
            2 => {
                let r = client
                    .call("exec_command", json!({ "cmd": "exec cat", "tty": true, "yield_time_ms": 2_000 }));
                if session_id(&r).is_none() {
                    errors += 1;
                    eprintln!("soak: [mcp] session {i}: `cat` is not a session: {r}");
                }
            }
            3 => {
                let r = client
                    .call("exec_command", json!({ "cmd": "exec cat", "tty": true, "yield_time_ms": 2_000 }));
                match session_id(&r) {
                    Some(id) => {
                        let closed = client.call("close_session", json!({ "session_id": id }));
                        if closed["isError"] == json!(true) {
                            errors += 1;
                            eprintln!("soak: [mcp] session {i}: close failed: {closed}");
                        }
                    }
                    None => {
                        errors += 1;
                        eprintln!("soak: [mcp] session {i}: `cat` to close is not a session: {r}");
                    }
                }
            }
            _ => {
                let id = client.send_request(
                    "tools/call",
                    json!({ "name": "exec_command", "arguments": { "cmd": "sleep 5", "yield_time_ms": 10_000 } }),
                );
                std::thread::sleep(Duration::from_millis(30));
                client.cancel(id);
            }
        }
        if i % 1000 == 999 {
            let s = sample(pid);
            eprintln!(
                "soak: [mcp] {} sessions in {:.0} s: fds {} rss {} KiB threads {} descendants {} zombies {}",
                i + 1,
                started.elapsed().as_secs_f64(),
                s.fds,
                s.rss_kib,
                s.threads,
                s.live_descendants,
                s.zombies
            );
        }
    }
    client.close_all();
    std::thread::sleep(Duration::from_millis(500));
    let end = sample(pid);
    let baseline = baseline.unwrap_or(end);
    let mut checks = vec![check("mcp", "sessions run", sessions.to_string(), "-", true)];
    checks.push(check("mcp", "failed calls", errors.to_string(), "0", errors == 0));
    checks.extend(soak_checks("mcp", baseline, end, &latencies, warm_latencies));
    let clean = client.finish();
    checks.push(check(
        "mcp",
        "server exit on stdin EOF",
        if clean { "exit 0" } else { "failed" },
        "exit 0",
        clean,
    ));
    checks
}

// ---- load: streaming and idle sessions over MCP -------------------------------------------------------------

/// The most text a response may carry: the token budget in bytes plus the header and the truncation line.
const RESPONSE_SLACK: usize = 1024;

fn load(uexec: &Path, streamers: usize, stream_mib: usize, idle_secs: u64) -> Vec<Check> {
    let home = tempfile::tempdir().unwrap();
    let mut client = Client::start(uexec, home.path());
    let pid = client.pid();
    std::thread::sleep(Duration::from_millis(300));
    let start_rss = status_kib(pid, "VmRSS:");
    let bytes = stream_mib * 1024 * 1024;
    let max_tokens = 10_000usize;
    let cap = max_tokens * 4 + RESPONSE_SLACK;
    // Every session at once: each streams `bytes` bytes, then exits with its own code.
    let mut pending: HashMap<i64, (usize, Instant, u64)> = HashMap::new();
    for n in 0..streamers {
        let cmd = format!("yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {bytes}; exit {}", n % 100 + 1);
        let id = client.send_request(
            "tools/call",
            json!({ "name": "exec_command", "arguments": { "cmd": cmd, "tty": n % 2 == 0, "yield_time_ms": 1000, "max_output_tokens": max_tokens } }),
        );
        pending.insert(id, (n, Instant::now(), 1000));
    }
    let mut session_of: HashMap<usize, i64> = HashMap::new();
    let mut exit_of: HashMap<usize, i64> = HashMap::new();
    let mut worst_overshoot = Duration::ZERO;
    // The same for the polls alone: an `exec_command`'s window starts once its command is spawned, and 64
    // spawns at once queue.
    let mut worst_poll_overshoot = Duration::ZERO;
    let mut over_cap = 0usize;
    let mut biggest = 0usize;
    let mut calls = 0usize;
    let mut peak_rss = 0u64;
    let started = Instant::now();
    while !pending.is_empty() {
        let ids: Vec<i64> = pending.keys().copied().collect();
        for id in ids {
            let (at, r) = client.wait(id);
            let (n, sent, window) = pending.remove(&id).unwrap();
            calls += 1;
            peak_rss = peak_rss.max(status_kib(pid, "VmRSS:"));
            let result = &r["result"];
            let len = text(result).len();
            biggest = biggest.max(len);
            if len > cap {
                over_cap += 1;
            }
            let took = at.duration_since(sent);
            let past = took.saturating_sub(Duration::from_millis(window));
            worst_overshoot = worst_overshoot.max(past);
            if window == 5000 {
                worst_poll_overshoot = worst_poll_overshoot.max(past);
            }
            if let Some(code) = exit_code(result) {
                exit_of.insert(n, code);
            } else if let Some(sid) = session_id(result) {
                session_of.insert(n, sid);
            } else {
                exit_of.insert(n, -1);
            }
        }
        // Poll every session still running, all at once.
        for (&n, &sid) in &session_of {
            if exit_of.contains_key(&n) {
                continue;
            }
            let id = client.send_request(
                "tools/call",
                json!({ "name": "write_stdin", "arguments": { "session_id": sid, "chars": "", "yield_time_ms": 5000, "max_output_tokens": max_tokens } }),
            );
            pending.insert(id, (n, Instant::now(), 5000));
        }
        if started.elapsed() > Duration::from_secs(600) {
            break;
        }
    }
    let streamed_in = started.elapsed();
    let hwm = status_kib(pid, "VmHWM:");
    let right = (0..streamers).filter(|n| exit_of.get(n) == Some(&((*n % 100 + 1) as i64))).count();
    // Per streaming session, 1.5 MiB: the output buffer and the `End` transcript share their chunks, so what a
    // session holds is three distinct 512 KiB runs of its stream: the transcript's head (its first bytes), the
    // newest bytes (the tail of both), and the head of the output since the previous call (kept until the next
    // call takes it). Responses are cut from the buffer's chunks, never copied whole. Plus 16 MiB for the rest
    // (a 64 KiB read chunk per session, chunks a buffer holds only in part, the screen models, answers in
    // flight, the threads).
    let bound_kib = start_rss + (streamers as u64) * 3 * 512 + 16 * 1024;
    let mut checks = vec![
        check(
            "load",
            format!("{streamers} sessions x {stream_mib} MiB: exit codes right"),
            format!("{right}/{streamers} in {:.1} s ({calls} calls)", streamed_in.as_secs_f64()),
            "all",
            right == streamers,
        ),
        check(
            "load",
            "responses over their cap",
            format!("{over_cap} (largest {biggest} B)"),
            format!("0 (cap {cap} B)"),
            over_cap == 0,
        ),
        check(
            "load",
            "worst call past its yield window (exec_command and polls)",
            ms(worst_overshoot),
            "<= 100 ms",
            worst_overshoot <= Duration::from_millis(100),
        ),
        check(
            "load",
            "worst poll (write_stdin) past its yield window",
            ms(worst_poll_overshoot),
            "<= 100 ms",
            worst_poll_overshoot <= Duration::from_millis(100),
        ),
        check(
            "load",
            "server peak RSS (VmHWM)",
            format!("{} KiB (start {start_rss} KiB, sampled peak {peak_rss} KiB)", hwm),
            format!("<= start + {streamers} x 1.5 MiB + 16 MiB = {bound_kib} KiB"),
            hwm <= bound_kib,
        ),
    ];
    client.close_all();
    // Idle: as many sessions waiting on their terminals, and nobody calling.
    for _ in 0..streamers {
        let r = client.call("exec_command", json!({ "cmd": "exec cat", "tty": true, "yield_time_ms": 2000 }));
        assert!(session_id(&r).is_some(), "{r}");
    }
    std::thread::sleep(Duration::from_secs(2));
    let before = cpu_ticks(pid);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(idle_secs));
    let ticks = cpu_ticks(pid) - before;
    let hz = 100.0;
    let percent = ticks as f64 / hz / t.elapsed().as_secs_f64() * 100.0;
    checks.push(check(
        "load",
        format!("server CPU with {streamers} idle sessions over {idle_secs} s"),
        format!("{ticks} ticks ({percent:.2}%)"),
        "near zero (<= 0.5%)",
        percent <= 0.5,
    ));
    client.close_all();
    let (live, zombies) = descendants(pid);
    let clean = client.finish();
    checks.push(check(
        "load",
        "server exit on stdin EOF",
        if clean { "exit 0" } else { "failed" },
        "exit 0",
        clean,
    ));
    checks.push(check(
        "load",
        "descendants before exit (the PID-namespace init only)",
        format!("{live} live, {zombies} zombies"),
        "<= 1 live, 0 zombies",
        live <= 1 && zombies == 0,
    ));
    checks
}

fn main() {
    let args = parse_args();
    let wants = |part: &str| args.only.as_deref().is_none_or(|o| o == part);
    let mut checks = Vec::new();
    if wants("engine") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        checks.extend(rt.block_on(engine_soak(args.sessions)));
    }
    if let Some(uexec) = &args.uexec {
        if wants("mcp") {
            checks.extend(mcp_soak(uexec, args.sessions));
        }
        if wants("load") {
            checks.extend(load(uexec, args.streamers, args.stream_mib, args.idle_secs));
        }
    }
    println!("| part | figure | measured | bound | |");
    println!("|---|---|---|---|---|");
    for c in &checks {
        println!(
            "| {} | {} | {} | {} | {} |",
            c.part,
            c.name,
            c.value,
            c.bound,
            if c.held { "held" } else { "NOT held" }
        );
    }
    if checks.iter().any(|c| !c.held) {
        std::process::exit(1);
    }
}
