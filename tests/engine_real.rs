//! The engine with real processes: `uexec_pty::PtySpawner`, no sandbox (`danger-full-access`). These pin the
//! reference behaviour end to end (state across writes, fresh shells, delayed output, reaping, early exit, EOF,
//! tty vs pipes, the truncation example, pruning, Ctrl-C without a PTY) and the uexec extensions (waiting for
//! input, the screen view).
//!
//! No timing is asserted (the machine has 2 cores and runs other builds): a window shows in what it returns (an
//! exit code, a session that runs on, the early return for input), and each wait (for a call to return, for a
//! process to end) has a deadline well beyond the time it should take. The windows themselves are measured on tokio's paused clock, in `uexec-engine`'s orchestration
//! tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uexec_domain::SessionId;
use uexec_engine::{Engine, EngineConfig, ExecCommandRequest, ExecError, ExecResponse, WriteStdinRequest};
use uexec_ports::{EventSink, ExecEvent};

use tests::unsandboxed_engine;

#[derive(Default)]
struct Recorder(Mutex<Vec<ExecEvent>>);

impl EventSink for Recorder {
    fn emit(&self, event: ExecEvent) {
        self.0.lock().unwrap().push(event);
    }
}

impl Recorder {
    fn ends(&self) -> Vec<(SessionId, i32, String)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                ExecEvent::End { session_id, exit_code, aggregated_output, .. } => {
                    Some((*session_id, *exit_code, aggregated_output.clone()))
                }
                _ => None,
            })
            .collect()
    }

    fn begins(&self) -> usize {
        self.0.lock().unwrap().iter().filter(|e| matches!(e, ExecEvent::Begin { .. })).count()
    }
}

fn setup() -> (Engine, Arc<Recorder>) {
    setup_with(|_| {})
}

fn setup_with(adjust: impl FnOnce(&mut EngineConfig)) -> (Engine, Arc<Recorder>) {
    let mut config = EngineConfig::new(std::env::temp_dir());
    config.base_env = std::env::vars_os().collect();
    // A plain, predictable prompt for the interactive shells.
    config.env_policy.set.push(("PS1".to_owned(), "uexec$ ".to_owned()));
    config.default_shell = "/bin/bash".to_owned();
    adjust(&mut config);
    let events = Arc::new(Recorder::default());
    let engine = unsandboxed_engine(config, Arc::clone(&events) as Arc<dyn EventSink>);
    (engine, events)
}

fn cmd(cmd: &str, tty: bool, yield_ms: u64) -> ExecCommandRequest {
    ExecCommandRequest { cmd: cmd.to_owned(), tty, yield_time_ms: Some(yield_ms), ..Default::default() }
}

fn write(id: SessionId, chars: &str, yield_ms: u64) -> WriteStdinRequest {
    WriteStdinRequest {
        session_id: id,
        chars: chars.to_owned(),
        yield_time_ms: Some(yield_ms),
        max_output_tokens: None,
        max_wait: None,
    }
}

/// An interactive bash without rc files (a stable prompt and no user configuration).
const BASH_I: &str = "bash --norc --noprofile -i";

async fn open_shell(engine: &Engine) -> SessionId {
    let response = engine.exec_command(cmd(BASH_I, true, 2_500)).await.unwrap();
    response.session_id.unwrap_or_else(|| panic!("the shell should stay alive: {response:?}"))
}

/// Write `line` and keep polling until `needle` shows up (at most `limit`); returns everything read.
async fn write_until(engine: &Engine, id: SessionId, line: &str, needle: &str, limit: Duration) -> String {
    let start = Instant::now();
    let mut seen = engine.write_stdin(write(id, line, 2_500)).await.unwrap().output;
    while !seen.contains(needle) && start.elapsed() < limit {
        seen.push_str(&engine.write_stdin(write(id, "", 5_000)).await.unwrap().output);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_persists_across_writes_in_an_interactive_shell() {
    let (engine, _events) = setup();
    let id = open_shell(&engine).await;
    engine.write_stdin(write(id, "export UEXEC_INTERACTIVE_VAR=codex\n", 2_500)).await.unwrap();
    let out = engine.write_stdin(write(id, "echo $UEXEC_INTERACTIVE_VAR\n", 2_500)).await.unwrap();
    assert!(out.output.contains("codex"), "expected the variable's value: {out:?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_are_independent_and_a_short_command_runs_in_a_fresh_shell() {
    let (engine, _events) = setup();
    let a = open_shell(&engine).await;
    let b = open_shell(&engine).await;
    assert_ne!(a, b);
    engine.write_stdin(write(a, "export UEXEC_INTERACTIVE_VAR=codex\n", 2_500)).await.unwrap();
    let short = engine.exec_command(cmd("echo \"[$UEXEC_INTERACTIVE_VAR]\"", false, 2_500)).await.unwrap();
    assert_eq!(short.session_id, None, "a short command does not keep a session: {short:?}");
    assert_eq!(short.exit_code, Some(0));
    assert_eq!(short.output, "[]\n", "a fresh shell does not see the session's variable");
    let in_b =
        write_until(&engine, b, "echo \"<$UEXEC_INTERACTIVE_VAR>\"\n", "<", Duration::from_secs(20)).await;
    assert!(in_b.contains("<>") && !in_b.contains("<codex>"), "session b is independent: {in_b:?}");
    let in_a =
        write_until(&engine, a, "echo \"<$UEXEC_INTERACTIVE_VAR>\"\n", "<codex>", Duration::from_secs(20))
            .await;
    assert!(in_a.contains("<codex>"), "session a kept its state: {in_a:?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_window_then_a_later_poll_returns_the_delayed_output() {
    let (engine, _events) = setup();
    let id = open_shell(&engine).await;
    engine.write_stdin(write(id, "export UEXEC_INTERACTIVE_VAR=codex\n", 2_500)).await.unwrap();
    let early = engine.write_stdin(write(id, "sleep 2 && echo $UEXEC_INTERACTIVE_VAR\n", 10)).await.unwrap();
    assert!(!early.output.contains("codex"), "a 10 ms window (clamped to 250 ms) is too short: {early:?}");
    assert_eq!(early.session_id, Some(id));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let late = engine.write_stdin(write(id, "", 100)).await.unwrap();
    assert!(late.output.contains("codex"), "the poll returns what came since: {late:?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_exited_is_reaped_and_its_id_is_unknown() {
    let (engine, events) = setup();
    let id = open_shell(&engine).await;
    let start = Instant::now();
    let mut last = engine.write_stdin(write(id, "exit 7\n", 2_500)).await.unwrap();
    while last.exit_code.is_none() && start.elapsed() < Duration::from_secs(20) {
        last = engine.write_stdin(write(id, "", 5_000)).await.unwrap();
    }
    assert_eq!(last.exit_code, Some(7), "{last:?}");
    assert_eq!(last.session_id, None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let err = engine.write_stdin(write(id, "", 100)).await.unwrap_err();
    assert_eq!(err, ExecError::UnknownSession(id));
    assert_eq!(err.to_string(), format!("Unknown process id {id}"));
    assert!(engine.list_sessions().await.is_empty());
    assert_eq!(engine.reserved_id_count(), 0);
    assert_eq!(events.begins(), 1);
    let ends = events.ends();
    assert_eq!(ends.len(), 1);
    assert_eq!((ends[0].0, ends[0].1), (id, 7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_exits_returns_at_once() {
    let (engine, events) = setup();
    // The call returns when the process exits, not when its window (30 s) ends: its deadline is well inside it.
    let call = engine.exec_command(cmd("sleep 0.05", false, 31_000));
    let response = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .unwrap_or_else(|_| panic!("the call waited for its window, not for the exit"))
        .unwrap();
    assert_eq!(response.exit_code, Some(0));
    assert_eq!(response.session_id, None);
    assert_eq!(events.begins(), 1);
    assert_eq!(events.ends().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cat_ends_with_exit_0_on_ctrl_d() {
    let (engine, events) = setup();
    let open = engine.exec_command(cmd("cat", true, 1_000)).await.unwrap();
    let id = open.session_id.expect("cat waits for input");
    let echoed = engine.write_stdin(write(id, "hello cat\n", 2_500)).await.unwrap();
    assert!(echoed.output.contains("hello cat"), "{echoed:?}");
    let start = Instant::now();
    let mut last = engine.write_stdin(write(id, "\u{4}", 10_000)).await.unwrap();
    while last.exit_code.is_none() && start.elapsed() < Duration::from_secs(20) {
        last = engine.write_stdin(write(id, "", 5_000)).await.unwrap();
    }
    assert_eq!(last.exit_code, Some(0), "{last:?}");
    let ends = events.ends();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].1, 0);
    assert!(ends[0].2.contains("hello cat"), "the End event carries the transcript: {ends:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipe_mode_is_not_a_tty_and_tty_mode_is() {
    let (engine, _events) = setup();
    let probe = "if [ -t 0 ] && [ -t 1 ]; then echo IS-A-TTY; else echo NOT-A-TTY; fi";
    let pipe = engine.exec_command(cmd(probe, false, 10_000)).await.unwrap();
    assert_eq!(pipe.output, "NOT-A-TTY\n");
    let tty = engine.exec_command(cmd(probe, true, 10_000)).await.unwrap();
    assert!(tty.output.contains("IS-A-TTY"), "{tty:?}");
    assert_eq!(tty.exit_code, Some(0));
    let env = engine.exec_command(cmd("echo $TERM $NO_COLOR $PAGER", false, 10_000)).await.unwrap();
    assert_eq!(env.output, "dumb 1 cat\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_truncation_example_of_the_spec_is_exact() {
    let (engine, _events) = setup();
    let script = "seq -f 'EXEC-LINE-%04g xxxxxxxxxxxxxxxxxxxx' 1 999";
    let response = engine
        .exec_command(ExecCommandRequest { max_output_tokens: Some(50), ..cmd(script, false, 10_000) })
        .await
        .unwrap();
    let full: String = (1..=999).map(|n| format!("EXEC-LINE-{n:04} {}\n", "x".repeat(20))).collect();
    assert_eq!(full.len(), 35_964);
    assert_eq!(response.exit_code, Some(0));
    assert_eq!(response.original_token_count, 8991);
    let expected = format!(
        "Total output lines: 999\n\n{}\u{2026}8941 tokens truncated\u{2026}{}",
        &full[..100],
        &full[full.len() - 100..]
    );
    assert_eq!(response.output, expected);
    let text = response.to_text();
    assert!(text.contains("\nOriginal token count: 8991\nOutput:\nTotal output lines: 999\n\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_beyond_the_session_buffer_still_counts_in_the_token_totals() {
    let (engine, _events) = setup();
    // 5,000,000 bytes: the 1 MiB session buffer keeps its head and tail and drops the middle.
    let script = "head -c 5000000 /dev/zero | tr '\\0' a";
    let response = engine.exec_command(cmd(script, false, 30_000)).await.unwrap();
    assert_eq!(response.exit_code, Some(0));
    // Every produced byte counts (plus the buffer's short marker), not just the 1 MiB kept.
    assert!(
        (1_250_000..1_250_100).contains(&response.original_token_count),
        "{}",
        response.original_token_count
    );
    let removed = response.output.split('\u{2026}').nth(1).unwrap_or_default().to_owned();
    let removed: usize = removed.trim_end_matches(" tokens truncated").parse().unwrap();
    assert!(removed > 1_200_000, "the truncation marker counts the dropped bytes too: {removed}");
}

fn pid_file(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("{n}.pid"))
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Field 3 is the state; a zombie is dead.
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_65_sessions_kills_the_least_recently_used() {
    let (engine, events) = setup();
    let dir = std::env::temp_dir().join(format!("uexec-prune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut ids = Vec::new();
    for n in 0..65 {
        let script = format!("echo $$ > {}; exec sleep 1000", pid_file(&dir, n).display());
        let response = engine.exec_command(cmd(&script, false, 250)).await.unwrap();
        let id = response.session_id.unwrap_or_else(|| panic!("session {n} should be alive: {response:?}"));
        assert_eq!(response.warning.is_some(), n + 1 >= 60, "the warning starts at 60 live sessions ({n})");
        ids.push(id);
    }
    let listed: Vec<SessionId> = engine.list_sessions().await.iter().map(|s| s.session_id).collect();
    assert_eq!(listed.len(), 64);
    assert!(!listed.contains(&ids[0]), "the least recently used session is pruned");
    assert!(ids[1..].iter().all(|id| listed.contains(id)));
    let pruned_pid: i32 = std::fs::read_to_string(pid_file(&dir, 0)).unwrap().trim().parse().unwrap();
    let start = Instant::now();
    while alive(pruned_pid) && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(pruned_pid), "the pruned session's process is killed");
    let survivor: i32 = std::fs::read_to_string(pid_file(&dir, 1)).unwrap().trim().parse().unwrap();
    assert!(alive(survivor));
    assert_eq!(
        engine.write_stdin(write(ids[0], "", 100)).await.unwrap_err(),
        ExecError::UnknownSession(ids[0])
    );
    let ends = events.ends();
    assert_eq!(ends.len(), 1, "one End, for the pruned session");
    assert_eq!(ends[0].0, ids[0]);
    engine.shutdown().await;
    let start = Instant::now();
    while alive(survivor) && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(survivor), "shutdown kills every session");
    assert_eq!(events.ends().len(), 65);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_to_a_pipe_session_stops_it() {
    let (engine, _events) = setup();
    let open = engine.exec_command(cmd("echo ready; exec sleep 100", false, 250)).await.unwrap();
    let id = open.session_id.unwrap();
    // Past the login shell's startup (its profile runs commands of its own), so that the signal finds the
    // command itself.
    let mut seen = open.output.clone();
    let start = Instant::now();
    while !seen.contains("ready") && start.elapsed() < Duration::from_secs(60) {
        seen.push_str(&engine.write_stdin(write(id, "", 5_000)).await.unwrap().output);
    }
    assert!(seen.contains("ready"), "the command never started: {seen:?}");
    assert_eq!(engine.write_stdin(write(id, "more", 250)).await.unwrap_err(), ExecError::StdinClosed);
    // Stopped within the window: without the signal, `sleep 100` would outlast it and report no exit code.
    let stopped = engine.write_stdin(write(id, "\u{3}", 10_000)).await.unwrap();
    assert_eq!(stopped.exit_code, Some(130), "{stopped:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_the_process_does_not_read_yet_neither_blocks_the_call_nor_is_reordered() {
    // 200 KB typed into a terminal whose program does not read yet: the kernel takes a few KB, and the
    // call used to wait until the program read the rest or exited (forever, for a program that never reads).
    let (engine, _events) = setup();
    let go = std::env::temp_dir().join(format!("uexec-unread-input-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done; wc -l", go.display());
    let open = engine.exec_command(cmd(&script, true, 250)).await.unwrap();
    let id = open.session_id.unwrap_or_else(|| panic!("{open:?}"));
    let lines = format!("{}\n", "y".repeat(99)).repeat(2_000);
    let call = tokio::time::timeout(Duration::from_secs(20), engine.write_stdin(write(id, &lines, 500)));
    let first =
        call.await.expect("write_stdin must return at the end of its window, not when the input is read");
    assert_eq!(first.unwrap().session_id, Some(id));
    // Later input queues behind the unread input: one more line, then EOF.
    let call = tokio::time::timeout(Duration::from_secs(20), engine.write_stdin(write(id, "last\n", 250)));
    call.await.expect("the second write_stdin must return too").unwrap();
    let call = tokio::time::timeout(Duration::from_secs(20), engine.write_stdin(write(id, "\u{4}", 250)));
    call.await.expect("the third write_stdin must return too").unwrap();
    std::fs::write(&go, b"").unwrap();
    let mut seen = String::new();
    let start = Instant::now();
    let exit_code = loop {
        let polled = engine.write_stdin(write(id, "", 5_000)).await.unwrap();
        seen.push_str(&polled.output);
        if polled.exit_code.is_some() || start.elapsed() > Duration::from_secs(60) {
            break polled.exit_code;
        }
    };
    std::fs::remove_file(&go).unwrap();
    assert_eq!(exit_code, Some(0), "{seen}");
    assert!(
        seen.contains("2001"),
        "every line, in order, then EOF: {}",
        &seen[seen.len().saturating_sub(300)..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_of_a_dropped_call_is_not_overtaken_by_later_input() {
    // A cancelled MCP call drops write_stdin while the terminal still takes its input in: later input (here
    // the EOF) must still come after all of it.
    let (engine, _events) = setup();
    let go = std::env::temp_dir().join(format!("uexec-dropped-input-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done; wc -l", go.display());
    let open = engine.exec_command(cmd(&script, true, 250)).await.unwrap();
    let id = open.session_id.unwrap_or_else(|| panic!("{open:?}"));
    let lines = format!("{}\n", "y".repeat(99)).repeat(2_000);
    let dropped = tokio::time::timeout(Duration::from_secs(1), engine.write_stdin(write(id, &lines, 20_000)));
    assert!(dropped.await.is_err(), "the 20 s window cannot end while the program does not read");
    let call = tokio::time::timeout(Duration::from_secs(20), engine.write_stdin(write(id, "\u{4}", 250)));
    call.await.expect("the next write_stdin must return").unwrap();
    std::fs::write(&go, b"").unwrap();
    let mut seen = String::new();
    let start = Instant::now();
    let exit_code = loop {
        let polled = engine.write_stdin(write(id, "", 5_000)).await.unwrap();
        seen.push_str(&polled.output);
        if polled.exit_code.is_some() || start.elapsed() > Duration::from_secs(60) {
            break polled.exit_code;
        }
    };
    std::fs::remove_file(&go).unwrap();
    assert_eq!(exit_code, Some(0), "{seen}");
    assert!(seen.contains("2000"), "every line, then EOF: {}", &seen[seen.len().saturating_sub(300)..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_waiting_for_a_process_that_never_reads_is_bounded() {
    // Each write a program does not read goes on in the background; without a bound, a caller writing to a
    // program that never reads made the server hold every byte.
    let (engine, _events) = setup();
    let go = std::env::temp_dir().join(format!("uexec-input-backlog-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    // Raw mode without echo: the kernel buffers a bounded amount of input (well under 1 MiB), then the writer
    // waits. The program reads nothing until `go` exists.
    let script = format!(
        "stty raw -echo; echo READY; while [ ! -e {go} ]; do sleep 0.05; done; cat >/dev/null",
        go = go.display()
    );
    let open = engine.exec_command(cmd(&script, true, 250)).await.unwrap();
    let id = open.session_id.unwrap_or_else(|| panic!("{open:?}"));
    if !open.output.contains("READY") {
        let seen = write_until(&engine, id, "", "READY", Duration::from_secs(30)).await;
        assert!(seen.contains("READY"), "{seen}");
    }
    let limit = 1024 * 1024;
    let first = engine.write_stdin(write(id, &"y".repeat(limit), 250)).await.unwrap();
    assert_eq!(first.session_id, Some(id), "{first:?}");
    let refused = engine.write_stdin(write(id, "z", 250)).await.unwrap_err();
    assert_eq!(refused, ExecError::InputBacklogFull { waiting: limit, limit });
    assert!(refused.to_string().contains("nothing was written"), "{refused}");
    // Once the program reads, the input waiting drains and writes are taken again.
    std::fs::write(&go, b"").unwrap();
    let start = Instant::now();
    loop {
        match engine.write_stdin(write(id, "z", 250)).await {
            Ok(response) => {
                assert_eq!(response.session_id, Some(id), "{response:?}");
                break;
            }
            Err(ExecError::InputBacklogFull { .. }) if start.elapsed() < Duration::from_secs(60) => {}
            Err(error) => panic!("{error}"),
        }
    }
    std::fs::remove_file(&go).unwrap();
    let closed = engine.close_session(id).await.unwrap();
    assert!(closed.exit_code.is_some(), "{closed:?}");
}

/// Pids whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv.iter().flat_map(|arg| arg.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| cmdline == wanted))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_job_holding_the_output_ends_with_its_session() {
    // `job &` without a terminal keeps the output pipe open after the shell exits: it used to live on (and
    // keep the session's reader and process handle alive) while a job that redirected its output was killed.
    let (engine, _events) = setup();
    for tty in [false, true] {
        let seconds = format!("{}.{}", 3_000 + u32::from(tty), std::process::id());
        let done =
            engine.exec_command(cmd(&format!("sleep {seconds} & echo started"), tty, 10_000)).await.unwrap();
        assert_eq!(done.exit_code, Some(0), "{done:?}");
        assert!(done.output.contains("started"), "{done:?}");
        let start = Instant::now();
        while !processes_running(&["sleep", &seconds]).is_empty() && start.elapsed() < Duration::from_secs(20)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            processes_running(&["sleep", &seconds]).is_empty(),
            "tty={tty}: the background sleep survived"
        );
    }
}

/// An early return for input; the note is said on the first answer of a stretch of waiting only
/// (`uexec_domain::response::waiting_note`), so `first` says whether this answer carries it.
fn expect_prompt(response: &ExecResponse, what: &str, first: bool) {
    assert!(response.waiting_for_input, "{what}: expected an early return for input: {response:?}");
    assert!(response.session_id.is_some());
    let text = response.to_text();
    assert_eq!(text.ends_with("\n[uexec] Process is waiting for input"), first, "{what}: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_poll_of_a_program_waiting_on_the_terminal_and_a_timer_waits_for_its_output() {
    // Like ssh -t or an event loop with a timer: the terminal is one of the things it waits on, and it prints
    // after 3 s without any input. Three empty polls used to come back after ~41 ms each with nothing.
    let (engine, _events) = setup();
    let script = "import os, select, sys; r, w = os.pipe(); print('READY', flush=True); \
                  select.select([sys.stdin, r], [], [], 3); print('LATE', flush=True)";
    // Not a login shell: a profile's slow start (pyenv's rehash lock) must not eat the polls.
    let request =
        ExecCommandRequest { login: Some(false), ..cmd(&format!("python3 -c \"{script}\""), true, 1_000) };
    let started = engine.exec_command(request).await.unwrap();
    assert!(!started.waiting_for_input, "{started:?}");
    let id = started.session_id.unwrap();
    let mut seen = started.output.clone();
    // An early return is a claim that the program waits for input: none may be made. (On a loaded machine
    // the program may need more than one 5 s poll to get to its output.)
    for _ in 0..4 {
        let poll = engine.write_stdin(write(id, "", 5_000)).await.unwrap();
        assert!(
            !poll.waiting_for_input,
            "the poll returned early, as if the program waited for input: {poll:?}"
        );
        seen.push_str(&poll.output);
        if poll.exit_code.is_some() {
            assert_eq!(poll.exit_code, Some(0), "{poll:?}");
            break;
        }
    }
    assert!(seen.contains("READY\r\nLATE"), "{seen:?} {started:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_program_is_answered_long_before_the_window_ends() {
    let (engine, _events) = setup();
    let python = engine.exec_command(cmd("python3 -i -q", true, 10_000)).await.unwrap();
    expect_prompt(&python, "python3 startup", true);
    assert!(python.output.contains(">>> "), "{python:?}");
    let id = python.session_id.unwrap();
    let answer = engine.write_stdin(write(id, "6*7\n", 10_000)).await.unwrap();
    expect_prompt(&answer, "python3 answer", false);
    assert!(answer.output.contains("42"), "{answer:?}");

    let shell = engine.exec_command(cmd(BASH_I, true, 10_000)).await.unwrap();
    expect_prompt(&shell, "bash startup", true);
    let id = shell.session_id.unwrap();
    let answer = engine.write_stdin(write(id, "echo $((6*7))\n", 10_000)).await.unwrap();
    expect_prompt(&answer, "bash answer", false);
    assert!(answer.output.contains("42"), "{answer:?}");
    // A busy foreground job is not a prompt: the window runs until the job's output.
    let busy = engine.write_stdin(write(id, "sleep 1; echo done\n", 10_000)).await.unwrap();
    assert!(busy.output.contains("done"), "{busy:?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_screen_view_renders_a_full_screen_program() {
    let (engine, _events) = setup();
    let script = "printf '\\033[2J\\033[5;10Hhello\\033[1;1Htop'; read -r line";
    let response = engine.exec_command(cmd(script, true, 2_500)).await.unwrap();
    let id = response.session_id.unwrap();
    let screen = engine.screen(id).await.unwrap();
    let rows: Vec<&str> = screen.split('\n').collect();
    assert_eq!(rows[0], "top", "{screen:?}");
    assert_eq!(rows[4], "         hello", "{screen:?}");
    let closed = engine.close_session(id).await.unwrap();
    assert!(closed.exit_code.is_some_and(|c| c != 0), "{closed:?}");
    assert!(engine.list_sessions().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_response_reports_that_no_sandbox_is_in_force_when_asked_to() {
    let (engine, _events) = setup_with(|config| config.report_protections = true);
    let response = engine.exec_command(cmd("true", false, 10_000)).await.unwrap();
    let text = response.to_text();
    assert!(
        text.ends_with(
            "\nOutput:\n[uexec] Sandbox: none (danger-full-access): unsandboxed, danger-full-access policy"
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_of_terminals_printing_at_full_speed_end_with_their_window() {
    let (engine, _events) = setup();
    // `yes` on a PTY keeps the output stream always ready; its reader must still let other tasks run, here two
    // of them on two worker threads. The calls run in spawned tasks, as the MCP server runs them.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let engine = engine.clone();
        calls.spawn(async move {
            let response = engine.exec_command(cmd("yes", true, 1_000)).await.unwrap();
            let id = response.session_id.unwrap_or_else(|| panic!("yes should still run: {response:?}"));
            for round in 0..3 {
                let poll = engine.write_stdin(write(id, "", 5_000));
                let poll = tokio::time::timeout(Duration::from_secs(15), poll)
                    .await
                    .unwrap_or_else(|_| panic!("poll {round} of a 5 s window did not end"))
                    .unwrap();
                assert_eq!(poll.session_id, Some(id), "{:?}", poll.exit_code);
                assert!(poll.output.contains("y\r\ny\r\n"), "{round}");
            }
            let closed = engine.close_session(id).await.unwrap();
            assert!(closed.exit_code.is_some(), "{closed:?}");
        });
    }
    while let Some(done) = calls.join_next().await {
        done.unwrap();
    }
}

/// Through the engine: under `danger-full-access` the login snapshot is captured outside the
/// sandbox once, replayed into pipe and PTY commands (which start `bash -c`, as their `Begin` says), keeps the
/// profile's output out of theirs, and its files are removed with the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_snapshot_is_captured_once_and_replayed_into_every_command() {
    let base = tempfile::Builder::new().prefix("uexec-login-").tempdir_in("/var/tmp").unwrap();
    let (home, state) = (base.path().join("home"), base.path().join("snapshots"));
    std::fs::create_dir(&home).unwrap();
    let runs = base.path().join("runs");
    std::fs::write(
        home.join(".profile"),
        format!(
            "echo PROFILE-BANNER\necho \"${{UEXEC_SANDBOX:-none}}\" >> '{}'\nexport SNAP_VAR=v1\nsnapfn() {{ echo \"fn:$1\"; }}\n",
            runs.display()
        ),
    )
    .unwrap();
    let (engine, events) = setup_with(|config| {
        config.base_env.retain(|(name, _)| name != "HOME" && name != "BASH_ENV");
        config.base_env.push(("HOME".into(), home.clone().into()));
        config.snapshot_dir = Some(state.clone());
    });
    for tty in [false, true, false] {
        let r = engine.exec_command(cmd("echo \"[$SNAP_VAR]\"; snapfn a", tty, 10_000)).await.unwrap();
        assert!(r.output.contains("[v1]") && r.output.contains("fn:a"), "{r:?}");
        assert!(!r.output.contains("PROFILE-BANNER"), "{r:?}");
    }
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "none\n", "captured once, outside the sandbox");
    let argvs: Vec<Vec<String>> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ExecEvent::Begin { argv, .. } => Some(argv.clone()),
            _ => None,
        })
        .collect();
    assert!(argvs.iter().all(|argv| argv[1] == "-c"), "{argvs:?}");
    // Outside the sandbox: under `host` (hidden from sandboxed commands by the app).
    assert_eq!(std::fs::read_dir(state.join("host")).unwrap().count(), 1);
    assert!(!state.join("sandboxed").exists());
    engine.shutdown().await;
    drop(engine);
    assert_eq!(std::fs::read_dir(state.join("host")).unwrap().count(), 0, "the engine removes its snapshots");
}
