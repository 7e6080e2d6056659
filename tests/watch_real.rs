//! A person watching a live session (`Engine::watch`), typing into it (`Engine::write_for_person`) and killing
//! it (`Engine::kill_session`), with real PTYs and pipes: the watcher sees the screen then the stream, quickly,
//! and the model's `write_stdin` reads exactly what it would read without the watcher.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use uexec_domain::SessionId;
use uexec_engine::{
    Engine, EngineConfig, ExecCommandRequest, LiveState, Watch, WatchEvent, WriteStdinRequest,
};
use uexec_ports::{EventSink, ExecEvent};

use tests::unsandboxed_engine;

struct Ignore;

impl EventSink for Ignore {
    fn emit(&self, _event: ExecEvent) {}
}

fn engine() -> Engine {
    let mut config = EngineConfig::new(std::env::temp_dir());
    config.base_env = std::env::vars_os().collect();
    config.default_shell = "/bin/bash".to_owned();
    unsandboxed_engine(config, Arc::new(Ignore) as Arc<dyn EventSink>)
}

fn exec(cmd: &str, tty: bool) -> ExecCommandRequest {
    ExecCommandRequest {
        cmd: cmd.to_owned(),
        tty,
        yield_time_ms: Some(500),
        login: Some(false),
        ..Default::default()
    }
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

/// Read the watcher's stream until `needle` shows up (at most `limit`); returns everything read and whether it
/// ended with an exit.
async fn watch_until(watch: &mut Watch, needle: &str, limit: Duration) -> (String, Option<i32>) {
    let deadline = tokio::time::Instant::now() + limit;
    let mut seen = String::new();
    while !seen.contains(needle) {
        match tokio::time::timeout_at(deadline, watch.next()).await {
            Ok(Some(WatchEvent::Output(piece))) => seen.push_str(&String::from_utf8_lossy(piece.as_bytes())),
            Ok(Some(WatchEvent::Exited { exit_code })) => return (seen, Some(exit_code)),
            Ok(Some(WatchEvent::Skipped { bytes })) => seen.push_str(&format!("[skipped {bytes}]")),
            Ok(None) | Err(_) => break,
        }
    }
    (seen, None)
}

/// Poll the model's side until `needle` shows up (at most `limit`); returns everything it read.
async fn model_until(engine: &Engine, id: SessionId, needle: &str, limit: Duration) -> String {
    let start = Instant::now();
    let mut seen = String::new();
    while !seen.contains(needle) && start.elapsed() < limit {
        seen.push_str(&engine.write_stdin(write(id, "", 5_000)).await.unwrap().output);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_the_screen_then_the_stream_and_the_model_reads_all_of_it_too() {
    let engine = engine();
    let first = engine
        .exec_command(exec("printf 'before-watch\\n'; read line; echo \"got:$line\"; read", true))
        .await
        .unwrap();
    let id = first.session_id.expect("the session waits for input");
    assert!(first.output.contains("before-watch"), "{first:?}");

    let mut watch = engine.watch(id).unwrap();
    assert!(watch.tty);
    let present = String::from_utf8_lossy(&watch.present).into_owned();
    assert!(present.contains("before-watch"), "the present is the rendered screen: {present:?}");
    assert!(present.starts_with('\u{1b}'), "drawn with escape sequences: {present:?}");

    // The model types; the watcher sees the echo and the answer, and so does the model, whole.
    let answer = engine.write_stdin(write(id, "hello\n", 2_000)).await.unwrap().output;
    let (watched, _) = watch_until(&mut watch, "got:hello", Duration::from_secs(20)).await;
    assert!(watched.contains("got:hello"), "{watched:?}");
    let answer = if answer.contains("got:hello") {
        answer
    } else {
        answer + &model_until(&engine, id, "got:hello", Duration::from_secs(20)).await
    };
    assert!(
        answer.contains("hello") && answer.contains("got:hello"),
        "the model read everything: {answer:?}"
    );
    assert!(!answer.contains("before-watch"), "and nothing twice: {answer:?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_reaches_a_watcher_quickly_without_any_call_of_the_model() {
    let engine = engine();
    let first = engine.exec_command(exec("read line; echo \"late:$line\"; read", true)).await.unwrap();
    let id = first.session_id.unwrap();
    let mut watch = engine.watch(id).unwrap();
    let mut second = engine.watch(id).unwrap();
    // The person's typing: nobody calls write_stdin meanwhile, yet the watcher sees it at once.
    engine.write_for_person(id, b"quick\n".to_vec()).await.unwrap();
    let (watched, _) = watch_until(&mut watch, "late:quick", Duration::from_secs(20)).await;
    assert!(watched.contains("late:quick"), "{watched:?}");
    let (other, _) = watch_until(&mut second, "late:quick", Duration::from_secs(20)).await;
    assert!(other.contains("late:quick"), "a second watcher sees the same: {other:?}");
    // The model reads the echo and the answer as if it had typed it itself.
    let seen = model_until(&engine, id, "late:quick", Duration::from_secs(20)).await;
    assert!(seen.contains("late:quick"), "{seen:?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_typed_at_a_prompt_without_echo_never_reaches_the_model() {
    let engine = engine();
    let script = "python3 -c 'import getpass; print(\"len\", len(getpass.getpass(\"Secret: \")))'";
    let mut seen = engine.exec_command(exec(script, true)).await.unwrap().output;
    let id = engine.list_sessions().await.first().map(|s| s.session_id).expect("python waits at the prompt");
    if !seen.contains("Secret:") {
        seen += &model_until(&engine, id, "Secret:", Duration::from_secs(20)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !engine.session_views().iter().any(|v| v.state == LiveState::WaitingForInput) {
        assert!(Instant::now() < deadline, "the prompt never waited: {:?}", engine.session_views());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut watch = engine.watch(id).unwrap();
    engine.write_for_person(id, b"hunter2-swordfish\n".to_vec()).await.unwrap();
    let (watched, exit) = watch_until(&mut watch, "len 17", Duration::from_secs(20)).await;
    assert!(watched.contains("len 17") || exit.is_some(), "{watched:?}");
    let mut rest = String::new();
    for _ in 0..20 {
        let response = engine.write_stdin(write(id, "", 5_000)).await;
        match response {
            Ok(r) => {
                rest.push_str(&r.output);
                if r.exit_code.is_some() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let all = seen + &rest;
    assert!(all.contains("len 17"), "the program got the password: {all:?}");
    assert!(!all.contains("hunter2"), "the model never reads it: {all:?}");
    assert!(!watched.contains("hunter2"), "nor does the watcher (no echo): {watched:?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_session_is_watched_from_its_newest_output_and_cannot_be_typed_into() {
    let engine = engine();
    // The program prints its second line only once the watcher is there (the test makes `go`), however late
    // the first call returns on a loaded machine.
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let first = engine
        .exec_command(exec(
            &format!(
                "echo pipe-before; for i in $(seq 600); do [ -e '{}' ] && break; sleep 0.05; done; \
                 echo pipe-after; sleep 30",
                go.display()
            ),
            false,
        ))
        .await
        .unwrap();
    let id = first.session_id.unwrap();
    let mut watch = engine.watch(id).unwrap();
    assert!(!watch.tty);
    // The model took "pipe-before" already; the watcher still starts from it.
    assert!(String::from_utf8_lossy(&watch.present).contains("pipe-before"), "{:?}", watch.present);
    std::fs::write(&go, "").unwrap();
    let (watched, _) = watch_until(&mut watch, "pipe-after", Duration::from_secs(20)).await;
    assert!(watched.contains("pipe-after"), "{watched:?}");
    assert!(
        engine.write_for_person(id, b"x\n".to_vec()).await.is_err(),
        "pipes have no terminal to type into"
    );
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_tells_its_watchers_and_the_model_reads_that_it_ended() {
    let engine = engine();
    let first = engine.exec_command(exec("echo up; sleep 60", true)).await.unwrap();
    let id = first.session_id.unwrap();
    let views = engine.session_views();
    let view = views.iter().find(|v| v.session_id == id).unwrap();
    assert_eq!(view.state, LiveState::Running);
    assert!(view.output_bytes >= 3 && view.tty && view.cmd.contains("sleep 60"), "{view:?}");
    let mut watch = engine.watch(id).unwrap();
    let code = engine.kill_session(id).await.unwrap();
    let (_, exit) = watch_until(&mut watch, "\u{0}never", Duration::from_secs(20)).await;
    assert_eq!(exit, Some(code), "the watcher is told the exit");
    assert!(watch.next().await.is_none(), "and the stream ends");
    let response = engine.write_stdin(write(id, "", 5_000)).await.unwrap();
    assert_eq!(response.exit_code, Some(code), "the model reads that it ended: {response:?}");
    assert!(engine.watch(id).is_err(), "then the session is gone");
    engine.shutdown().await;
}

/// Notes the sessions whose `End` was emitted.
#[derive(Default)]
struct Ends(std::sync::Mutex<Vec<SessionId>>);

impl EventSink for Ends {
    fn emit(&self, event: ExecEvent) {
        if let ExecEvent::End { session_id, .. } = event {
            self.0.lock().unwrap().push(session_id);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_session_watched_after_it_exited_shows_its_last_output_and_its_exit() {
    let ends = Arc::new(Ends::default());
    let mut config = EngineConfig::new(std::env::temp_dir());
    config.base_env = std::env::vars_os().collect();
    config.default_shell = "/bin/bash".to_owned();
    let engine = unsandboxed_engine(config, ends.clone() as Arc<dyn EventSink>);
    let ended = |id: SessionId| ends.0.lock().unwrap().contains(&id);
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let first = engine
        .exec_command(exec(
            &format!(
                "echo early; for i in $(seq 600); do [ -e '{}' ] && break; sleep 0.05; done; \
                 for i in $(seq 1 5000); do echo \"last-output $i\"; done; exit 3",
                go.display()
            ),
            false,
        ))
        .await
        .unwrap();
    let id = first.session_id.unwrap();
    std::fs::write(&go, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ended(id) {
        assert!(Instant::now() < deadline, "the session never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // `End` took its transcript; the session waits for the model's next call. A watcher still starts from its
    // newest output (bounded), then reads the exit.
    let mut watch = engine.watch(id).unwrap();
    let present = String::from_utf8_lossy(&watch.present).into_owned();
    assert!(present.ends_with("last-output 5000\n"), "{present:?}");
    assert!(present.len() <= 64 * 1024 && !present.contains("early"), "the newest 64 KiB only");
    let (_, exit) = watch_until(&mut watch, "\u{0}never", Duration::from_secs(20)).await;
    assert_eq!(exit, Some(3));
    // Its twin, a PTY session that ended: its screen, as before.
    let pty = engine.exec_command(exec("echo pty-last; sleep 1; exit 4", true)).await.unwrap();
    let pty_id = pty.session_id.unwrap();
    while !ended(pty_id) {
        assert!(Instant::now() < deadline, "the PTY session never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let watch = engine.watch(pty_id).unwrap();
    assert!(String::from_utf8_lossy(&watch.present).contains("pty-last"));
    engine.shutdown().await;
}
