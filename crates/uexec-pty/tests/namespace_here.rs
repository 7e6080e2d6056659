//! `NamespacePolicy::OnCallingThread`: the test thread itself enters the sessions' PID namespace (this machine
//! runs tests as root); its spawns land in the namespace without a helper thread, a spawn from another thread is
//! refused instead of escaping it, and a daemon orphaned into it is still killed.
// PID namespaces and /proc are Linux: these tests run there only.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::mpsc;

use common::*;
use uexec_pty::{Containment, ExitStatus, NamespacePolicy, ProcessControl, PtySpawner, SpawnError};

#[test]
fn the_calling_thread_spawns_inside_its_own_pid_namespace() {
    // A thread started before containment (afterwards this thread can start none), to spawn from later.
    let (job_tx, job_rx) = mpsc::channel::<()>();
    let (result_tx, result_rx) = mpsc::channel();
    let other = std::thread::spawn(move || {
        job_rx.recv().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let result =
            runtime.block_on(async { PtySpawner::default().spawn_request(sh("true", false)).map(drop) });
        result_tx.send(result).unwrap();
    });

    let init = match uexec_pty::contain_descendants_with(NamespacePolicy::OnCallingThread).unwrap() {
        Containment::PidNamespace { init_pid } => init_pid,
        other => panic!("expected a PID namespace (tests run as root), got {other:?}"),
    };
    assert!(state(init as i32).is_some_and(|state| state != 'Z'), "the namespace init is alive");
    // No helper thread: the kernel now refuses this thread new threads.
    assert!(std::thread::Builder::new().spawn(|| ()).is_err(), "this thread is in the namespace");

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let spawner = PtySpawner::default();
        let mut process = spawner.spawn_request(in_sandbox(sh("echo pid=$$; exit 4", false))).unwrap();
        let text = String::from_utf8(drain(&mut process.output).await).unwrap();
        let pid: u32 = text.trim().strip_prefix("pid=").unwrap().parse().unwrap();
        assert_ne!(pid, process.control.pid(), "the child has its own pid in the namespace");
        assert_eq!(stat_fields(process.control.pid() as i32)[1], std::process::id().to_string(), "our child");
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(4));

        // Only sandbox-scope sessions so far: no watchdog was forked (`uexec run` of a sandboxed command pays
        // nothing for it).
        assert!(children_named(std::process::id(), "uexec-watchdog").is_empty(), "no watchdog yet");
        // A host-scope session from the same thread runs in the host's namespace, with its pid there; the next
        // sandbox-scope one is back in the sessions' namespace.
        let mut process = spawner.spawn_request(sh("echo pid=$$", false)).unwrap();
        let text = String::from_utf8(drain(&mut process.output).await).unwrap();
        assert_eq!(text.trim(), format!("pid={}", process.control.pid()), "host numbering");
        eventually("the host's watchdog runs", || {
            children_named(std::process::id(), "uexec-watchdog").len() == 1
        })
        .await;
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
        let mut process = spawner.spawn_request(in_sandbox(sh("echo pid=$$", false))).unwrap();
        let text = String::from_utf8(drain(&mut process.output).await).unwrap();
        assert_ne!(text.trim(), format!("pid={}", process.control.pid()), "namespace numbering again");
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));

        // A daemon is reparented to the namespace's init, and still found and killed after the leader exited.
        let marker = marker();
        let script = format!("(setsid sh -c 'sleep {marker} & exit' &); echo STARTED");
        let mut process = spawner.spawn_request(in_sandbox(sh(&script, false))).unwrap();
        let mut text = String::new();
        read_until(&mut process.output, &mut text, "STARTED").await;
        eventually("the daemon started", || sleepers(&marker).len() == 1).await;
        let daemon = sleepers(&marker)[0];
        eventually("the daemon is adopted by the namespace init", || {
            stat_fields(daemon)[1] == init.to_string()
        })
        .await;
        // The leader exits right after STARTED; waiting for it first keeps the kill from racing that exit.
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
        assert_eq!(process.control.kill_tree().await.unwrap(), ExitStatus::Code(0));
        eventually("the daemon is gone", || sleepers(&marker).is_empty()).await;
    });

    // The thread outside the namespace may not spawn: its child would not be contained.
    job_tx.send(()).unwrap();
    match result_rx.recv().unwrap() {
        Err(SpawnError::Os(error)) => {
            assert_eq!(error.errno, libc::EPERM, "{error}");
            assert!(error.call.contains("outside"), "{error}");
        }
        other => panic!("a spawn from outside the namespace must fail, got {other:?}"),
    }
    other.join().unwrap();
}
