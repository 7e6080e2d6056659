//! Sessions when the host is only a subreaper (no PID namespace): adopted orphans are reaped by the reaper
//! thread, leaders' statuses still reach their sessions, kill_tree still finds escaped daemons.
// Child subreapers and /proc are Linux: these tests run there only.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use uexec_pty::{Containment, ExitStatus, NamespacePolicy, ProcessControl, PtySpawner};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_adopted_and_reaped_and_leaders_keep_their_status() {
    assert_eq!(uexec_pty::contain_descendants_with(NamespacePolicy::Never).unwrap(), Containment::Subreaper);
    let me = std::process::id().to_string();
    let spawner = PtySpawner::default();

    for code in 0..20 {
        let mut process = spawner.spawn_request(sh(&format!("exit {code}"), code % 2 == 0)).unwrap();
        drain(&mut process.output).await;
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(code));
    }

    // The orphan is adopted by this process, then exits on its own: the reaper must collect it.
    let marker = marker();
    let mut process =
        spawner.spawn_request(sh(&format!("setsid sleep {marker} & echo STARTED"), false)).unwrap();
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
    eventually("the sleep started", || sleepers(&marker).len() == 1).await;
    let orphan = sleepers(&marker)[0];
    eventually("the orphan is adopted by the host", || stat_fields(orphan)[1] == me).await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(orphan).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    eventually("the adopted orphan is reaped", || state(orphan).is_none()).await;

    // A daemon is found and killed by kill_tree, then reaped.
    let marker = common::marker();
    // The leader stays (reading the terminal) until killed: had it exited at once, the terminal's hangup
    // could kill the daemon before it left the session.
    let script = format!("(setsid sh -c 'sleep {marker} & exit' &); echo STARTED; read line");
    let mut process = spawner.spawn_request(sh(&script, true)).unwrap();
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("the daemon started", || sleepers(&marker).len() == 1).await;
    let daemon = sleepers(&marker)[0];
    process.control.kill_tree().await.unwrap();
    eventually("the daemon is gone and reaped", || state(daemon).is_none()).await;
    eventually("no zombie children", || zombie_children().is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_keep_their_exit_codes_while_others_are_killed_and_the_reaper_runs() {
    assert_eq!(uexec_pty::contain_descendants_with(NamespacePolicy::Never).unwrap(), Containment::Subreaper);
    // The fast path and the portable core share the reaping protocol: both keep every status.
    exit_codes_survive_concurrent_kills(PtySpawner::default(), 6).await;
    exit_codes_survive_concurrent_kills(PtySpawner::portable(), 6).await;
}
