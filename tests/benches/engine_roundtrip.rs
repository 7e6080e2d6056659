//! Benchmark: the round trip of `write_stdin("echo hi\n")` on a live `bash -i` session through the engine,
//! against the raw PTY round trip measured in the same run.
//!
//! - raw (output): write `echo hi\n` to the PTY, read until `hi` comes back (the command's output line);
//! - raw (prompt): the same, until the next prompt after `hi` (what the engine waits for);
//! - engine: `Engine::write_stdin` end to end (call lock, write, the window with waiting-for-input detection,
//!   truncation, response), on a session opened with `exec_command(tty=true)`;
//! - engine, watched: the same with a person watching the session (`Engine::watch`), and how long after the
//!   write the watcher saw `hi` (a watcher must see output within 50 ms; nobody watching must cost nothing, so
//!   the unwatched figure is the one compared with the raw PTY).
//!
//! Run: `cargo bench -p tests --bench engine_roundtrip` (`-- --quick` for 50 iterations instead of 400).
//! Prints median, p10 and p90 of each, and the engine/raw ratios. A figure, not a test: nothing is asserted
//! about timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout)]

use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uexec_engine::{EngineConfig, ExecCommandRequest, WriteStdinRequest};
use uexec_ports::process::{IoMode, OutputStream, ProcessControl, PtySize, SpawnRequest};
use uexec_ports::{EventSink, ExecEvent};
use uexec_pty::PtySpawner;

const PROMPT: &str = "uexec-bench$ ";

use tests::unsandboxed_engine;

struct Discard;

impl EventSink for Discard {
    fn emit(&self, _event: ExecEvent) {}
}

fn env() -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().filter(|(k, _)| k != "PS1").collect();
    env.push(("PS1".into(), PROMPT.into()));
    env.push(("TERM".into(), "dumb".into()));
    env
}

/// Median, p10 and p90.
fn stats(samples: &mut [Duration]) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.1), at(0.9))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn raw(iterations: usize) -> (Vec<Duration>, Vec<Duration>) {
    let spawner = PtySpawner::default();
    let process = spawner
        .spawn_request(SpawnRequest {
            argv: vec!["/bin/bash".into(), "--norc".into(), "--noprofile".into(), "-i".into()],
            cwd: std::env::temp_dir(),
            env: env(),
            mode: IoMode::Pty(PtySize::default()),
            setup: Vec::new(),
            pid_scope: Default::default(),
        })
        .unwrap();
    let (control, mut output) = (process.control, process.output);
    let mut seen = String::new();
    while !seen.contains(PROMPT) {
        seen.push_str(&String::from_utf8_lossy(&output.next_chunk().await.unwrap().unwrap()));
    }
    let mut to_output = Vec::with_capacity(iterations);
    let mut to_prompt = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        control.write(b"echo hi\n").await.unwrap();
        let mut seen = String::new();
        let mut output_at = None;
        loop {
            let chunk = output.next_chunk().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if output_at.is_none() && seen.contains("\nhi\r\n") {
                output_at = Some(start.elapsed());
            }
            if let Some(after) = seen.find("\nhi\r\n")
                && seen[after..].contains(PROMPT)
            {
                break;
            }
        }
        to_prompt.push(start.elapsed());
        to_output.push(output_at.unwrap());
    }
    control.kill_tree().await.unwrap();
    (to_output, to_prompt)
}

/// The engine's round trips, and with `watched` a watcher's delay from each write to its `hi`.
async fn engine(iterations: usize) -> (Vec<Duration>, usize) {
    let (samples, incomplete, _) = engine_watched(iterations, false).await;
    (samples, incomplete)
}

async fn engine_watched(iterations: usize, watched: bool) -> (Vec<Duration>, usize, Vec<Duration>) {
    let mut config = EngineConfig::new(std::env::temp_dir());
    config.base_env = env();
    config.report_protections = false;
    let engine = unsandboxed_engine(config, Arc::new(Discard));
    let open = engine
        .exec_command(ExecCommandRequest {
            // The outer non-interactive shell drops PS1 from its environment: pass it on the command line.
            cmd: format!("PS1='{PROMPT}' exec bash --norc --noprofile -i"),
            login: Some(false),
            tty: true,
            yield_time_ms: Some(10_000),
            ..Default::default()
        })
        .await
        .unwrap();
    let id = open.session_id.unwrap();
    // The watcher notes when each `hi` reaches it, as a person's terminal would show it.
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    if watched {
        let mut watch = engine.watch(id).unwrap();
        tokio::spawn(async move {
            let mut tail = String::new();
            while let Some(event) = watch.next().await {
                let uexec_engine::WatchEvent::Output(piece) = event else { break };
                tail.push_str(&String::from_utf8_lossy(piece.as_bytes()));
                while let Some(at) = tail.find("\nhi\r\n") {
                    let _ = seen_tx.send(Instant::now());
                    tail.drain(..at + 5);
                }
                let keep = tail.len().saturating_sub(8);
                tail.drain(..tail.floor_char_boundary(keep));
            }
        });
    }
    let mut delays = Vec::with_capacity(iterations);
    let mut samples = Vec::with_capacity(iterations);
    let mut incomplete = 0;
    for _ in 0..iterations {
        let start = Instant::now();
        let response = engine
            .write_stdin(WriteStdinRequest {
                session_id: id,
                chars: "echo hi\n".into(),
                yield_time_ms: Some(10_000),
                max_output_tokens: None,
                max_wait: None,
            })
            .await
            .unwrap();
        samples.push(start.elapsed());
        if watched && let Ok(Some(at)) = tokio::time::timeout(Duration::from_secs(30), seen_rx.recv()).await {
            delays.push(at.saturating_duration_since(start));
        }
        // A response without the prompt came back before the shell was done: count it, then drain it.
        let done = response.output.contains("\nhi\r\n") && response.output.ends_with(PROMPT);
        if !done {
            incomplete += 1;
            let mut seen = response.output;
            let drain_start = Instant::now();
            while !(seen.contains("\nhi\r\n") && seen.ends_with(PROMPT)) {
                assert!(
                    drain_start.elapsed() < Duration::from_secs(30),
                    "the shell never answered: {seen:?}"
                );
                let more = engine
                    .write_stdin(WriteStdinRequest {
                        session_id: id,
                        chars: String::new(),
                        yield_time_ms: Some(5_000),
                        max_output_tokens: None,
                        max_wait: None,
                    })
                    .await
                    .unwrap();
                seen.push_str(&more.output);
            }
        }
    }
    engine.shutdown().await;
    (samples, incomplete, delays)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let iterations = if quick { 50 } else { 400 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        // Warm up both paths (page cache, bash startup).
        let _ = raw(10).await;
        let _ = engine(10).await;
        let (mut raw_output, mut raw_prompt) = raw(iterations).await;
        let (mut engine_samples, incomplete) = engine(iterations).await;
        let (mut watched_samples, _, mut delays) = engine_watched(iterations, true).await;
        let (ro, ro10, ro90) = stats(&mut raw_output);
        let (rp, rp10, rp90) = stats(&mut raw_prompt);
        let (en, en10, en90) = stats(&mut engine_samples);
        println!("engine_roundtrip: {iterations} iterations of `echo hi` on bash -i");
        println!("  raw PTY, to output   median {:.3} ms (p10 {:.3}, p90 {:.3})", ms(ro), ms(ro10), ms(ro90));
        println!("  raw PTY, to prompt   median {:.3} ms (p10 {:.3}, p90 {:.3})", ms(rp), ms(rp10), ms(rp90));
        println!("  engine write_stdin   median {:.3} ms (p10 {:.3}, p90 {:.3})", ms(en), ms(en10), ms(en90));
        println!(
            "  ratio engine/raw: {:.2}x (to output), {:.2}x (to prompt); responses without the prompt: {incomplete}",
            en.as_secs_f64() / ro.as_secs_f64(),
            en.as_secs_f64() / rp.as_secs_f64()
        );
        let (wn, wn10, wn90) = stats(&mut watched_samples);
        let (wd, wd10, wd90) = stats(&mut delays);
        println!("  engine, watched      median {:.3} ms (p10 {:.3}, p90 {:.3})", ms(wn), ms(wn10), ms(wn90));
        println!("  watcher sees `hi`    median {:.3} ms (p10 {:.3}, p90 {:.3}) after the write", ms(wd), ms(wd10), ms(wd90));
        println!("metric: write-stdin-ms = {:.3}", ms(en));
        println!("target: watcher sees output p90 = {:.2} ms (<= 50.0 ms)", ms(wd90));
        println!("target: write_stdin round trip engine/raw PTY = {:.2} (<= 2.00)", en.as_secs_f64() / rp.as_secs_f64());
        println!(
            "peer-row: | raw PTY (floor) | `echo hi` round trip on `bash -i`, to the prompt (uexec: write_stdin) | {:.2} ms | {:.2} ms | {:.2}x |",
            ms(rp),
            ms(en),
            rp.as_secs_f64() / en.as_secs_f64()
        );
    });
}
