//! SIGKILL of the host kills every descendant, daemons included, once `contain_descendants` is active. The
//! host is this test binary itself, re-run as a child process running the same test with a marker in its
//! environment, which makes it act as the host instead.
// Descendant containment exists on Linux only (macOS has no subreaper or PID namespace): this test runs
// there only.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use uexec_pty::PtySpawner;

const HOST_VAR: &str = "UEXEC_PTY_TEST_HOST_MARKER";

/// The host: contains its descendants, starts a session whose command leaves three sleeps behind (one in
/// the session, one in its own session, one double-forked daemon), says READY and waits to be killed.
fn host_process(marker: String) {
    let containment = uexec_pty::contain_descendants().unwrap();
    println!("CONTAINMENT {containment:?}");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let script =
            format!("(setsid sh -c 'sleep {marker} & exit' &); setsid sleep {marker} & sleep {marker} & echo STARTED; wait");
        let mut process = PtySpawner::default().spawn_request(sh(&script, true)).unwrap();
        let mut text = String::new();
        read_until(&mut process.output, &mut text, "STARTED").await;
        println!("READY");
        std::io::stdout().flush().unwrap();
        std::future::pending::<()>().await;
    });
}

#[test]
fn host_sigkill_kills_every_descendant() {
    if let Ok(marker) = std::env::var(HOST_VAR) {
        // This process is the host started below.
        host_process(marker);
        return;
    }
    let marker = marker();
    let mut host = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["host_sigkill_kills_every_descendant", "--exact", "--nocapture", "--test-threads=1"])
        .env(HOST_VAR, &marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = host.stdout.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut containment = None;
    loop {
        let line = lines.recv_timeout(PATIENCE).expect("the host did not get ready");
        // libtest may print "test host_sigkill_kills_every_descendant ... " in front of the first line.
        if let Some((_, rest)) = line.split_once("CONTAINMENT ") {
            containment = Some(rest.to_owned());
        }
        if line.ends_with("READY") {
            break;
        }
    }
    // Root on this machine: the PID namespace must be in force.
    let containment = containment.expect("the host reported its containment");
    assert!(containment.starts_with("PidNamespace"), "{containment}");

    let deadline = Instant::now() + PATIENCE;
    while sleepers(&marker).len() < 3 {
        assert!(Instant::now() < deadline, "the three sleeps did not start: {:?}", sleepers(&marker));
        std::thread::sleep(Duration::from_millis(20));
    }
    host.kill().unwrap();
    host.wait().unwrap();
    let deadline = Instant::now() + PATIENCE;
    while !sleepers(&marker).is_empty() {
        assert!(Instant::now() < deadline, "descendants survived the host: {:?}", sleepers(&marker));
        std::thread::sleep(Duration::from_millis(20));
    }
}
