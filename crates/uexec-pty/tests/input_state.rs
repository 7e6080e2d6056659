//! Input-wait detection: the Linux fast path tells a program blocked reading its terminal from a busy one
//! (`/proc/<pid>/syscall`, select/poll/epoll sets decoded); the portable core says it cannot
//! ([`InputState::Unavailable`]), whatever the program does.
// The fast path and these observations (/proc/<pid>/syscall) exist on Linux only.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use uexec_pty::{ExitStatus, InputState, ProcessControl, PtySpawner};

fn spawn(request: uexec_pty::SpawnRequest) -> uexec_pty::PtyProcess {
    PtySpawner::default().spawn_request(request).expect("spawn")
}

#[tokio::test]
async fn the_portable_core_reports_input_detection_unavailable_for_a_terminal_and_unknown_for_pipes() {
    let mut process = PtySpawner::portable()
        .spawn_request(request(&["bash", "--norc", "--noprofile", "-i"], true))
        .unwrap();
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "PROMPT$ ").await;
    // Bash sits at its prompt: the fast path says WaitingForInput (below); the portable core never guesses.
    for _ in 0..5 {
        assert_eq!(process.control.input_state(), InputState::Unavailable);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    process.control.kill_tree().await.unwrap();
    assert_eq!(process.control.input_state(), InputState::Unavailable);
    let pipes = PtySpawner::portable().spawn_request(request(&["sleep", "30"], false)).unwrap();
    assert_eq!(pipes.control.input_state(), InputState::Unknown);
    pipes.control.kill_tree().await.unwrap();
}

#[tokio::test]
async fn input_state_tells_a_waiting_prompt_from_a_busy_foreground() {
    let mut process = spawn(request(&["bash", "--norc", "--noprofile", "-i"], true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "PROMPT$ ").await;
    let control = Arc::clone(&process.control);
    eventually("bash at its prompt waits for input", || control.input_state() == InputState::WaitingForInput)
        .await;
    process.control.write(b"sleep 5\n").await.unwrap();
    eventually("bash running sleep in the foreground is busy", || control.input_state() == InputState::Busy)
        .await;
    // Check it stays busy for a while (sleep 5 is still running well within this).
    for _ in 0..5 {
        assert_eq!(control.input_state(), InputState::Busy);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    read_until(&mut process.output, &mut text, "PROMPT$ ").await;
    eventually("back at the prompt", || control.input_state() == InputState::WaitingForInput).await;
    process.control.kill_tree().await.unwrap();
    assert_eq!(process.control.input_state(), InputState::Unknown);

    let mut python = spawn(request(&["python3", "-i", "-q"], true));
    let mut text = String::new();
    read_until(&mut python.output, &mut text, ">>> ").await;
    let control = Arc::clone(&python.control);
    eventually("python at its prompt waits for input", || {
        control.input_state() == InputState::WaitingForInput
    })
    .await;
    python.control.write(b"import time; time.sleep(5)\n").await.unwrap();
    eventually("python sleeping is busy", || control.input_state() == InputState::Busy).await;
    python.control.kill_tree().await.unwrap();
}

#[tokio::test]
async fn a_password_prompt_reading_dev_tty_waits_for_input() {
    // getpass (like sudo and ssh) reads /dev/tty, not the slave's own fd, with echo off.
    let script = "import getpass; p = getpass.getpass('PW: '); print('LEN', len(p))";
    let mut python = spawn(request(&["python3", "-c", script], true));
    let mut text = String::new();
    read_until(&mut python.output, &mut text, "PW: ").await;
    let control = Arc::clone(&python.control);
    eventually("getpass reading /dev/tty waits for input", || {
        control.input_state() == InputState::WaitingForInput
    })
    .await;
    python.control.write(b"secret\n").await.unwrap();
    read_until(&mut python.output, &mut text, "LEN 6").await;
    assert_eq!(python.control.wait().await.unwrap(), ExitStatus::Code(0));
}

/// A Python program that prints `READY`, then blocks in one kind of wait (`mode`), then prints `LATE`.
const WAITS: &str = r#"
import os, select, sys
mode = sys.argv[1]
r, w = os.pipe()
print("READY", flush=True)
if mode == "select":
    select.select([0], [], [])
elif mode == "select-timeout":
    select.select([0], [], [], 3)
elif mode == "select-pipe":
    select.select([0, r], [], [])
elif mode == "select-pipe-timeout":
    select.select([0, r], [], [], 3)
elif mode == "poll":
    p = select.poll(); p.register(0, select.POLLIN); p.poll()
elif mode == "poll-timeout":
    p = select.poll(); p.register(0, select.POLLIN); p.poll(3000)
elif mode == "poll-pipe":
    p = select.poll(); p.register(0, select.POLLIN); p.register(r, select.POLLIN); p.poll()
elif mode == "epoll":
    e = select.epoll(); e.register(0, select.EPOLLIN); e.poll()
elif mode == "epoll-timeout":
    e = select.epoll(); e.register(0, select.EPOLLIN); e.poll(3)
elif mode == "epoll-pipe":
    e = select.epoll(); e.register(0, select.EPOLLIN); e.register(r, select.EPOLLIN); e.poll()
print("LATE", flush=True)
"#;

/// The system call `pid`'s main thread is blocked in (`None` while it runs).
fn blocked_in(pid: u32) -> Option<i64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok().filter(|n: &i64| *n >= 0)
}

/// Start `WAITS` in `mode`; return it once its main thread sleeps in a select/poll/epoll wait.
async fn waiting_in(mode: &str) -> uexec_pty::PtyProcess {
    let mut python = spawn(request(&["python3", "-c", WAITS, mode], true));
    let mut text = String::new();
    read_until(&mut python.output, &mut text, "READY").await;
    let pid = python.control.pid();
    let waits = [
        libc::SYS_select,
        libc::SYS_pselect6,
        libc::SYS_poll,
        libc::SYS_ppoll,
        libc::SYS_epoll_wait,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
    ];
    eventually(&format!("{mode}: blocked in a wait"), || blocked_in(pid).is_some_and(|n| waits.contains(&n)))
        .await;
    python
}

#[tokio::test]
async fn a_wait_for_the_terminal_alone_and_without_timeout_is_waiting_for_input() {
    for mode in ["select", "poll", "epoll"] {
        let python = waiting_in(mode).await;
        let control = Arc::clone(&python.control);
        eventually(&format!("{mode} on the terminal alone waits for input"), || {
            control.input_state() == InputState::WaitingForInput
        })
        .await;
        python.control.kill_tree().await.unwrap();
    }
}

#[tokio::test]
async fn a_wait_with_a_timeout_or_on_another_fd_is_not_waiting_for_input() {
    // ssh -t, docker exec -it and event loops with timers: they print without any input, so an empty poll must
    // not come back early with nothing. Each mode is blocked in its wait (checked) and sampled while it lasts.
    for mode in [
        "select-timeout",
        "select-pipe",
        "select-pipe-timeout",
        "poll-timeout",
        "poll-pipe",
        "epoll-timeout",
        "epoll-pipe",
    ] {
        let python = waiting_in(mode).await;
        let pid = python.control.pid();
        for _ in 0..10 {
            let state = python.control.input_state();
            assert_ne!(state, InputState::WaitingForInput, "{mode}: reported as waiting for input");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(blocked_in(pid).is_some(), "{mode}: the wait ended while sampled");
        python.control.kill_tree().await.unwrap();
    }
}

#[tokio::test]
async fn bash_read_with_a_timeout_is_not_waiting_for_input_and_without_one_is() {
    let mut timed =
        spawn(request(&["bash", "--norc", "--noprofile", "-c", "echo READY; read -t 30 x; echo LATE"], true));
    let mut text = String::new();
    read_until(&mut timed.output, &mut text, "READY").await;
    let pid = timed.control.pid();
    eventually("read -t blocked", || blocked_in(pid).is_some()).await;
    for _ in 0..10 {
        assert_ne!(timed.control.input_state(), InputState::WaitingForInput, "read -t 30");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    timed.control.kill_tree().await.unwrap();

    let mut plain =
        spawn(request(&["bash", "--norc", "--noprofile", "-c", "echo READY; read x; echo LATE"], true));
    let mut text = String::new();
    read_until(&mut plain.output, &mut text, "READY").await;
    let control = Arc::clone(&plain.control);
    eventually("read waits for input", || control.input_state() == InputState::WaitingForInput).await;
    plain.control.kill_tree().await.unwrap();
}
