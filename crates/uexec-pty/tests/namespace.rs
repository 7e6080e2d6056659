//! Sessions inside the PID namespace set up by `contain_descendants` (this machine runs tests as root):
//! exit statuses, signals, input detection and kill_tree work as without it.
// PID namespaces and /proc are Linux: these tests run there only.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::*;
use uexec_pty::{Containment, ExitStatus, InputState, ProcessControl, PtySpawner};

fn contained() -> u32 {
    match uexec_pty::contain_descendants().unwrap() {
        Containment::PidNamespace { init_pid } => init_pid,
        other => panic!("expected a PID namespace (tests run as root), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_work_inside_the_pid_namespace() {
    let init = contained();
    assert_eq!(uexec_pty::containment(), Some(Containment::PidNamespace { init_pid: init }));
    assert!(state(init as i32).is_some_and(|state| state != 'Z'), "the namespace init is alive");
    let spawner = PtySpawner::default();

    // Inside the namespace the shell sees a small pid and the init as PID 1.
    let mut process =
        spawner.spawn_request(sh("echo pid=$$; cat /proc/1/comm 2>/dev/null; exit 4", false)).unwrap();
    let text = String::from_utf8(drain(&mut process.output).await).unwrap();
    let pid: u32 = text.lines().next().unwrap().strip_prefix("pid=").unwrap().parse().unwrap();
    assert_ne!(pid, process.control.pid(), "the child has its own pid in the namespace");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(4));

    let mut process = spawner.spawn_request(request(&["bash", "-c", "kill -9 $$"], true)).unwrap();
    drain(&mut process.output).await;
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Signal(9));

    let mut bash = spawner.spawn_request(request(&["bash", "--norc", "--noprofile", "-i"], true)).unwrap();
    let mut text = String::new();
    read_until(&mut bash.output, &mut text, "PROMPT$ ").await;
    let control = Arc::clone(&bash.control);
    eventually("bash waits for input", || control.input_state() == InputState::WaitingForInput).await;
    bash.control.write(b"sleep 5\n").await.unwrap();
    eventually("bash is busy", || control.input_state() == InputState::Busy).await;
    bash.control.kill_tree().await.unwrap();

    // A daemon is reparented to the namespace's init, and still found and killed.
    let marker = marker();
    let script = format!("(setsid sh -c 'sleep {marker} & exit' &); echo STARTED");
    let mut process = spawner.spawn_request(sh(&script, false)).unwrap();
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("the daemon started", || sleepers(&marker).len() == 1).await;
    let daemon = sleepers(&marker)[0];
    eventually("the daemon is adopted by the namespace init", || stat_fields(daemon)[1] == init.to_string())
        .await;
    assert_eq!(process.control.kill_tree().await.unwrap(), ExitStatus::Code(0));
    eventually("the daemon is gone", || sleepers(&marker).is_empty()).await;
    eventually("no zombie children", || zombie_children().is_empty()).await;
}
