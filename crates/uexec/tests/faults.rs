//! Faults, with real processes through `uexec mcp`: a command killed by each common signal, the terminal hung
//! up under a writer, a consumer that stalls while commands flood, file descriptor and process exhaustion at
//! spawn time, the audit log's disk filling up (a tiny tmpfs in a private mount namespace) or its file removed,
//! the client vanishing mid-call and mid-approval, and SIGTERM during a spawn. RELIABILITY.md lists each case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// Poll a session with empty input until it reports its exit; returns that response.
fn poll_until_exit(server: &mut McpServer, session: u64) -> Value {
    for _ in 0..12 {
        let r =
            server.call("write_stdin", json!({ "session_id": session, "chars": "", "yield_time_ms": 5000 }));
        if exit_code(&r).is_some() || is_error(&r) {
            return r;
        }
    }
    panic!("session {session} never exited");
}

/// A session that runs `sleep <marker>` as its leader, and that process's pid.
fn sleeper(server: &mut McpServer, marker: &str, tty: bool) -> (u64, u32) {
    let r = server.call(
        "exec_command",
        json!({ "cmd": format!("exec sleep {marker}"), "tty": tty, "yield_time_ms": 250 }),
    );
    let session = session_id(&r);
    let pids = wait_present(&["sleep", marker], Duration::from_secs(20));
    assert_eq!(pids.len(), 1, "one sleep {marker}: {pids:?}");
    (session, pids[0])
}

fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The server answers a fresh command: the proof that it kept working after a fault.
fn still_serves(server: &mut McpServer) {
    let r = server.call("exec_command", json!({ "cmd": "echo still-here", "yield_time_ms": 10_000 }));
    assert_eq!(exit_code(&r), Some(0), "{r}");
    assert_eq!(output(&r).trim(), "still-here", "{r}");
}

fn live_sessions(server: &mut McpServer) -> Vec<u64> {
    let listed = server.call("list_sessions", json!({}));
    listed["structuredContent"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_u64().unwrap())
        .collect()
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_command_killed_by_each_common_signal_exits_with_128_plus_its_number() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let signals =
        [("HUP", 1), ("INT", 2), ("QUIT", 3), ("KILL", 9), ("SEGV", 11), ("PIPE", 13), ("TERM", 15)];
    for (salt, (name, number)) in (0u32..).zip(signals) {
        for tty in [false, true] {
            let marker = marker_seconds(salt * 2 + u32::from(tty));
            let (session, pid) = sleeper(&mut server, &marker, tty);
            send_signal(pid, name);
            let r = poll_until_exit(&mut server, session);
            assert_eq!(exit_code(&r), Some(128 + number), "SIG{name} tty={tty}: {r}");
            assert!(wait_gone(&["sleep", &marker], Duration::from_secs(20)).is_empty());
            let again = server.call("write_stdin", json!({ "session_id": session, "chars": "" }));
            assert!(is_error(&again), "an exited session is gone: {again}");
        }
    }
    assert!(live_sessions(&mut server).is_empty());
    still_serves(&mut server);
}

#[test]
fn a_terminal_that_hangs_up_under_a_writer_ends_the_call_cleanly() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    // The program reads one line and exits while 512 KiB of input are still being written to its terminal.
    let r = server.call(
        "exec_command",
        json!({ "cmd": "read -r line; echo got-$line; exit 3", "tty": true, "yield_time_ms": 500 }),
    );
    let session = session_id(&r);
    let chars: String = (0..8192).map(|i| format!("line{i:058}\n")).collect();
    let r = server.call(
        "write_stdin",
        json!({ "session_id": session, "chars": chars, "yield_time_ms": 2000, "max_output_tokens": 200 }),
    );
    if is_error(&r) {
        assert!(text(&r).starts_with("write_stdin failed: "), "{r}");
    } else {
        let done = if exit_code(&r).is_some() { r } else { poll_until_exit(&mut server, session) };
        assert_eq!(exit_code(&done), Some(3), "{done}");
    }
    assert!(live_sessions(&mut server).is_empty());
    // A writer whose terminal's process is killed from outside mid-write.
    let marker = marker_seconds(40);
    let r = server.call(
        "exec_command",
        json!({ "cmd": format!("sleep {marker} < /dev/null"), "tty": true, "yield_time_ms": 250 }),
    );
    let session = session_id(&r);
    let pids = wait_present(&["sleep", &marker], Duration::from_secs(20));
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        for pid in pids {
            send_signal(pid, "KILL");
        }
    });
    let r = server.call(
        "write_stdin",
        json!({ "session_id": session, "chars": "x".repeat(256 * 1024), "yield_time_ms": 3000 }),
    );
    killer.join().unwrap();
    assert!(is_error(&r) || exit_code(&r).is_some() || session_id(&r) == session, "{r}");
    let _ = server.call("close_session", json!({ "session_id": session }));
    assert!(wait_gone(&["sleep", &marker], Duration::from_secs(20)).is_empty());
    still_serves(&mut server);
}

#[test]
fn a_consumer_that_stalls_while_commands_flood_keeps_every_cap() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let mut sessions = Vec::new();
    for tty in [false, true, false, true] {
        let r = server.call(
            "exec_command",
            json!({ "cmd": "yes flood", "tty": tty, "yield_time_ms": 250, "max_output_tokens": 1000 }),
        );
        assert!(text(&r).len() <= 1000 * 4 + 512, "{} bytes", text(&r).len());
        sessions.push(session_id(&r));
    }
    // Nobody reads for a while: the commands keep writing into their capped buffers.
    std::thread::sleep(Duration::from_secs(3));
    let rss = vm_rss_kib(server.pid());
    // Four 1 MiB buffers plus the server itself: far below 64 MiB.
    assert!(rss < 64 * 1024, "server RSS {rss} KiB with four stalled floods");
    for &session in &sessions {
        let r = server.call(
            "write_stdin",
            json!({ "session_id": session, "chars": "", "yield_time_ms": 250, "max_output_tokens": 1000 }),
        );
        let body = text(&r);
        assert!(body.len() <= 1000 * 4 + 512, "{} bytes", body.len());
        assert!(body.contains("tokens truncated"), "{}", &body[..200]);
        assert!(body.contains("flood"));
    }
    for &session in &sessions {
        let r = server.call("close_session", json!({ "session_id": session }));
        assert!(!is_error(&r), "{r}");
    }
    assert!(live_sessions(&mut server).is_empty());
    still_serves(&mut server);
}

/// The server's soft and hard limit of open files.
fn nofile(pid: u32) -> String {
    let out = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), "--nofile", "--raw", "--noheadings", "--output", "SOFT,HARD"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut parts = text.split_whitespace();
    format!("{}:{}", parts.next().unwrap(), parts.next().unwrap())
}

fn set_nofile(pid: u32, limit: &str) {
    let status = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={limit}")])
        .status()
        .unwrap();
    assert!(status.success());
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

#[test]
fn running_out_of_file_descriptors_at_spawn_is_a_clear_error_and_the_store_stays_consistent() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let pid = server.pid();
    let first = marker_seconds(50);
    let (kept, _) = sleeper(&mut server, &first, true);
    let original = nofile(pid);
    let hard = original.split_once(':').unwrap().1.to_owned();
    // A few descriptors of room: some spawns succeed, then one fails. Only the soft limit moves (raising a hard
    // limit again takes CAP_SYS_RESOURCE, which this machine's root lacks).
    let room = open_fds(pid) + 6;
    set_nofile(pid, &format!("{room}:{hard}"));
    let mut started = vec![kept];
    let mut failure = None;
    for n in 0..20 {
        let r = server.call(
            "exec_command",
            json!({ "cmd": format!("exec sleep {first}{n}"), "tty": n % 2 == 0, "yield_time_ms": 250 }),
        );
        if is_error(&r) {
            failure = Some(text(&r));
            break;
        }
        started.push(session_id(&r));
    }
    let failure = failure.expect("a spawn fails once the descriptors run out");
    assert!(failure.contains("Too many open files") || failure.contains("os error 24"), "{failure}");
    // Every session reported is there, and nothing else.
    let mut live = live_sessions(&mut server);
    live.sort_unstable();
    started.sort_unstable();
    assert_eq!(live, started);
    // The limit back: the server works as before, the old sessions answer and close.
    set_nofile(pid, &original);
    still_serves(&mut server);
    for session in started {
        let r = server.call("close_session", json!({ "session_id": session }));
        assert!(!is_error(&r), "{r}");
    }
    assert!(live_sessions(&mut server).is_empty());
    let before = open_fds(pid);
    still_serves(&mut server);
    // A command's descriptors are released as its session is reaped, which may follow the answer by a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while open_fds(pid) > before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(open_fds(pid) <= before, "descriptors leak after the exhaustion: {before} -> {}", open_fds(pid));
}

/// A pids cgroup (v1) holding the server, with `pids.max` set; removed on drop. (`RLIMIT_NPROC` does not bind
/// root, which these tests run as: the kernel exempts uid 0, so the process limit is the cgroup's.)
struct PidsCgroup {
    dir: std::path::PathBuf,
}

impl PidsCgroup {
    fn new(name: &str) -> PidsCgroup {
        let dir = std::path::Path::new("/sys/fs/cgroup/pids").join(name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        PidsCgroup { dir }
    }

    fn limit(&self, max: &str) {
        std::fs::write(self.dir.join("pids.max"), max).unwrap();
    }

    fn current(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("pids.current")).unwrap().trim().parse().unwrap()
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // Move anything left back to the root group, then remove the group.
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write("/sys/fs/cgroup/pids/cgroup.procs", pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn running_out_of_processes_at_spawn_is_a_clear_error_and_later_calls_work() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let pid = server.pid();
    let group = PidsCgroup::new(&format!("uexec-faults-{}", std::process::id()));
    group.add(pid);
    // The tasks counted now (the server's threads) plus two: the third spawn in a row at the latest fails.
    let current = group.current();
    group.limit(&(current + 2).to_string());
    let marker = marker_seconds(60);
    let mut started = Vec::new();
    let mut failure = None;
    for n in 0..10 {
        let r = server.call(
            "exec_command",
            json!({ "cmd": format!("exec sleep {marker}{n}"), "tty": n % 2 == 1, "yield_time_ms": 250 }),
        );
        if is_error(&r) {
            failure = Some(text(&r));
            break;
        }
        started.push(session_id(&r));
    }
    let failure = failure.expect("a spawn fails once the process limit is reached");
    assert!(
        failure.contains("Resource temporarily unavailable") || failure.contains("os error 11"),
        "{failure}"
    );
    let mut live = live_sessions(&mut server);
    live.sort_unstable();
    started.sort_unstable();
    assert_eq!(live, started);
    group.limit("max");
    still_serves(&mut server);
    for session in started {
        let r = server.call("close_session", json!({ "session_id": session }));
        assert!(!is_error(&r), "{r}");
    }
    still_serves(&mut server);
    drop(server);
}

#[test]
fn a_full_audit_disk_keeps_commands_running_and_says_so_and_recovers() {
    let ws = Workspace::new();
    // A 64 KiB tmpfs in a private mount namespace holds the audit log; the test reaches it through
    // /proc/<pid>/root.
    let dir = ws.outside.path().join("audit-mount");
    std::fs::create_dir(&dir).unwrap();
    let log = dir.join("audit.jsonl");
    let stderr = ws.outside.path().join("stderr.txt");
    let script = format!(
        "mount -t tmpfs -o size=64k uexec-audit {dir} && exec {uexec} mcp --audit-log {log} 2>{stderr}",
        dir = dir.display(),
        uexec = uexec(),
        log = log.display(),
        stderr = stderr.display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    let mut server = McpServer::start_command(&ws, cmd);
    server.initialize(false);
    let inside = |pid: u32, name: &str| {
        std::path::PathBuf::from(format!("/proc/{pid}/root")).join(dir.strip_prefix("/").unwrap()).join(name)
    };
    let pid = server.pid();
    let log_inside = inside(pid, "audit.jsonl");
    assert_eq!(std::fs::read_to_string(&log_inside).unwrap(), "", "the log starts empty");
    // Fill the disk before the first record: with the log at 0 bytes, every record needs a page that is not
    // there (a log ending mid-page would take small records into that page's slack).
    let filler = inside(pid, "filler");
    let big = vec![b'f'; 1024 * 1024];
    assert!(std::fs::write(&filler, &big).is_err(), "1 MiB does not fit on a 64 KiB tmpfs");
    let r = server.call("exec_command", json!({ "cmd": "echo during", "yield_time_ms": 10_000 }));
    assert_eq!(exit_code(&r), Some(0), "commands keep running: {r}");
    assert_eq!(output(&r).trim(), "during");
    assert_eq!(std::fs::read_to_string(&log_inside).unwrap(), "", "nothing fits on the full disk");
    // Free it: records land again.
    std::fs::remove_file(&filler).unwrap();
    let r = server.call("exec_command", json!({ "cmd": "echo after", "yield_time_ms": 10_000 }));
    assert_eq!(exit_code(&r), Some(0));
    let text_after = std::fs::read_to_string(&log_inside).unwrap();
    assert!(text_after.contains("echo after"), "{text_after}");
    assert!(!text_after.contains("echo during"));
    server.close_stdin();
    assert!(server.wait_exit(Duration::from_secs(30)).is_some());
    let errors = std::fs::read_to_string(&stderr).unwrap();
    assert!(errors.contains("cannot write the audit log"), "{errors}");
    assert!(errors.contains("writable again; 2 record(s) were lost"), "{errors}");
    assert!(errors.contains("2 audit log record(s) could not be written"), "{errors}");
}

/// Whether this test process runs as root (mounting a tmpfs needs it).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0")
}

/// Run `echo record-N` for the next N.
fn run_echo(server: &mut McpServer, commands: &mut u64) {
    *commands += 1;
    let r = server.call(
        "exec_command",
        json!({ "cmd": format!("echo record-{commands}"), "login": false, "yield_time_ms": 10_000 }),
    );
    assert_eq!(exit_code(&r), Some(0), "commands keep running: {r}");
}

/// The number right before `what` in `text`.
fn count_before(text: &str, what: &str) -> Option<u64> {
    let before = &text[..text.find(what)?];
    before.rsplit(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

#[test]
#[allow(clippy::print_stderr)]
fn an_audit_disk_that_fills_mid_record_keeps_whole_lines_and_counts_every_lost_record_needs_root() {
    if !is_root() {
        eprintln!("skipped: mounting the small tmpfs needs root");
        return;
    }
    let ws = Workspace::new();
    let dir = ws.outside.path().join("audit-mount");
    std::fs::create_dir(&dir).unwrap();
    let log = dir.join("audit.jsonl");
    let stderr = ws.outside.path().join("stderr.txt");
    let script = format!(
        "mount -t tmpfs -o size=64k uexec-audit {dir} && exec {uexec} mcp --sandbox danger-full-access \
         --audit-log {log} 2>{stderr}",
        dir = dir.display(),
        uexec = uexec(),
        log = log.display(),
        stderr = stderr.display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    let mut server = McpServer::start_command(&ws, cmd);
    server.initialize(false);
    let pid = server.pid();
    let inside = |name: &str| {
        std::path::PathBuf::from(format!("/proc/{pid}/root")).join(dir.strip_prefix("/").unwrap()).join(name)
    };
    let log_inside = inside("audit.jsonl");
    let mut commands = 0;
    // Each command is two records, a begin and an end.
    for _ in 0..3 {
        run_echo(&mut server, &mut commands);
    }
    let lines = std::fs::read_to_string(&log_inside).unwrap().lines().count();
    assert_eq!(lines, 6, "two records per command");
    // Fill the disk: the log ends mid-page, so records go on into that page's slack until one crosses its end.
    let filler = inside("filler");
    assert!(
        std::fs::write(&filler, vec![b'f'; 1024 * 1024]).is_err(),
        "1 MiB does not fit on a 64 KiB tmpfs"
    );
    let failing =
        || std::fs::read_to_string(&stderr).unwrap_or_default().contains("cannot write the audit log");
    while !failing() {
        assert!(commands < 200, "the log never filled up");
        run_echo(&mut server, &mut commands);
    }
    // A few more, all lost; then room again.
    for _ in 0..3 {
        run_echo(&mut server, &mut commands);
    }
    std::fs::remove_file(&filler).unwrap();
    for _ in 0..2 {
        run_echo(&mut server, &mut commands);
    }
    // The log is read while the server (and its mount namespace) lives: once the last command's end is in.
    let last = format!("echo record-{commands}\"");
    let lines_of_last = |text: &str| text.lines().filter(|l| l.contains(&last)).count();
    let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
    let mut text = std::fs::read_to_string(&log_inside).unwrap();
    while lines_of_last(&text) < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        text = std::fs::read_to_string(&log_inside).unwrap();
    }
    server.close_stdin();
    assert!(server.wait_exit(Duration::from_secs(30)).is_some());
    let errors = std::fs::read_to_string(&stderr).unwrap();
    assert!(text.ends_with('\n'), "the log ends with a whole line");
    for line in text.lines() {
        assert!(serde_json::from_str::<Value>(line).is_ok(), "not a whole JSON record: {line:?}");
    }
    let kept = text.lines().count() as u64;
    let lost = count_before(&errors, " audit log record(s) could not be written").expect(&errors);
    let lost_then = count_before(&errors, " record(s) were lost").expect(&errors);
    eprintln!("{commands} commands, {kept} records kept, {lost} reported lost");
    assert_eq!(kept + lost, 2 * commands, "every record is kept or counted as lost: {errors}");
    assert_eq!(lost_then, lost, "the recovery reports every lost record: {errors}");
    assert_eq!(lines_of_last(&text), 2, "the last command's records are kept: {text}");
}

#[test]
fn an_audit_log_removed_while_running_is_recreated() {
    let ws = Workspace::new();
    let log = ws.outside.path().join("audit.jsonl");
    let log_arg = log.to_str().unwrap().to_owned();
    let mut server = McpServer::start_initialized(&ws, &["--audit-log", &log_arg], false);
    let r = server.call("exec_command", json!({ "cmd": "echo one", "yield_time_ms": 10_000 }));
    assert_eq!(exit_code(&r), Some(0));
    std::fs::remove_file(&log).unwrap();
    let r = server.call("exec_command", json!({ "cmd": "echo two", "yield_time_ms": 10_000 }));
    assert_eq!(exit_code(&r), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("echo two") && !text.contains("echo one"), "{text}");
}

#[test]
fn a_client_that_vanishes_mid_call_takes_every_session_down() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let (a, b) = (marker_seconds(70), marker_seconds(71));
    let _ = sleeper(&mut server, &a, true);
    // A call in flight: its command runs, its window is long.
    let id = server.fresh_id();
    server.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": "exec_command", "arguments": { "cmd": format!("sleep {b}"), "yield_time_ms": 30_000 } } }));
    assert_eq!(wait_present(&["sleep", &b], Duration::from_secs(20)).len(), 1);
    server.close_stdin();
    let status = server.wait_exit(Duration::from_secs(30)).expect("the server exits when its client is gone");
    assert!(status.success(), "{status}");
    assert!(wait_gone(&["sleep", &a], Duration::from_secs(20)).is_empty(), "a session outlived the client");
    assert!(
        wait_gone(&["sleep", &b], Duration::from_secs(20)).is_empty(),
        "the call's command outlived the client"
    );
}

#[test]
fn a_client_that_vanishes_mid_approval_runs_nothing_and_takes_every_session_down() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &["--approval-policy", "untrusted"], true);
    server.answers = vec!["approve".into()];
    let a = marker_seconds(72);
    let r = server.call("exec_command", json!({ "cmd": format!("exec sleep {a}"), "yield_time_ms": 250 }));
    session_id(&r);
    let flag = ws.path().join("ran.txt");
    let id = server.fresh_id();
    server.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": "exec_command", "arguments": { "cmd": format!("touch {}", flag.display()) } } }));
    let question = server.wait_method("elicitation/create");
    assert!(question["params"]["message"].as_str().unwrap().contains("ran.txt"), "{question}");
    server.close_stdin();
    assert!(server.wait_exit(Duration::from_secs(30)).is_some(), "the server exits mid-approval");
    assert!(!flag.exists(), "a command whose approval never came ran");
    assert!(wait_gone(&["sleep", &a], Duration::from_secs(20)).is_empty(), "a session outlived the client");
}

#[test]
fn sigterm_during_a_spawn_leaves_nothing_behind() {
    let ws = Workspace::new();
    for (n, delay_ms) in [0u64, 1, 2, 5, 10, 20, 50].into_iter().enumerate() {
        let mut server = McpServer::start_initialized(&ws, &[], false);
        let marker = marker_seconds(90 + u32::try_from(n).unwrap());
        let id = server.fresh_id();
        server.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "exec_command", "arguments": { "cmd": format!("exec sleep {marker}"), "tty": n % 2 == 0 } } }));
        std::thread::sleep(Duration::from_millis(delay_ms));
        send_signal(server.pid(), "TERM");
        assert!(server.wait_exit(Duration::from_secs(30)).is_some(), "the server exits on SIGTERM mid-spawn");
        assert!(
            wait_gone(&["sleep", &marker], Duration::from_secs(20)).is_empty(),
            "a command spawned as SIGTERM arrived ({delay_ms} ms) outlived the server"
        );
    }
    // Silence for the unused-stdout warning of the last child.
    let _ = Stdio::null();
}
