//! Sessions inside the PID namespace set up by `contain_descendants` (this machine runs tests as root):
//! exit statuses, signals, input detection and kill_tree work as without it; sandbox-scope sessions share
//! that namespace and signal each other, host-scope sessions run in the host's and use its pids.
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
    let mut process = spawner
        .spawn_request(in_sandbox(sh("echo pid=$$; cat /proc/1/comm 2>/dev/null; exit 4", false)))
        .unwrap();
    let text = String::from_utf8(drain(&mut process.output).await).unwrap();
    let pid: u32 = text.lines().next().unwrap().strip_prefix("pid=").unwrap().parse().unwrap();
    assert_ne!(pid, process.control.pid(), "the child has its own pid in the namespace");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(4));

    let mut process =
        spawner.spawn_request(in_sandbox(request(&["bash", "-c", "kill -9 $$"], true))).unwrap();
    drain(&mut process.output).await;
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Signal(9));

    let mut bash =
        spawner.spawn_request(in_sandbox(request(&["bash", "--norc", "--noprofile", "-i"], true))).unwrap();
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
    let mut process = spawner.spawn_request(in_sandbox(sh(&script, false))).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_scope_sessions_use_the_hosts_pids_and_sandbox_sessions_signal_each_other() {
    let init = contained();
    let spawner = PtySpawner::default();

    // A host-scope session: `$$`, `/proc/self` and the host agree on its pid.
    let mut process = spawner.spawn_request(sh("echo pid=$$; cut -d' ' -f1 /proc/self/stat", false)).unwrap();
    let text = String::from_utf8(drain(&mut process.output).await).unwrap();
    let mut lines = text.lines();
    let pid: u32 = lines.next().unwrap().strip_prefix("pid=").unwrap().parse().unwrap();
    assert_eq!(pid, process.control.pid(), "a host-scope session has the host's pid");
    // The first host-scope session started the host's watchdog.
    eventually("the host's watchdog runs", || {
        children_named(std::process::id(), "uexec-watchdog").len() == 1
    })
    .await;
    let cat: u32 = lines.next().unwrap().parse().unwrap();
    assert!(cat > pid, "/proc shows the host's numbering: {text}");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));

    // Its daemon leaves the session and is not adopted by the namespace's init, and is still killed.
    let daemon_marker = marker();
    let script = format!("(setsid sh -c 'sleep {daemon_marker} & exit' &); echo STARTED");
    let mut process = spawner.spawn_request(sh(&script, false)).unwrap();
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("the daemon started", || sleepers(&daemon_marker).len() == 1).await;
    let daemon = sleepers(&daemon_marker)[0];
    assert_ne!(stat_fields(daemon)[1], init.to_string(), "a host-scope daemon is not in the namespace");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
    assert_eq!(process.control.kill_tree().await.unwrap(), ExitStatus::Code(0));
    eventually("the host-scope daemon is gone", || sleepers(&daemon_marker).is_empty()).await;

    // Two sandbox-scope sessions: the second kills the first by the pid the first sees for itself.
    let first_marker = marker();
    let mut first = spawner
        .spawn_request(in_sandbox(sh(&format!("echo pid=$$; exec sleep {first_marker}"), false)))
        .unwrap();
    let mut text = String::new();
    read_until(&mut first.output, &mut text, "\n").await;
    let first_pid: u32 = text.trim().strip_prefix("pid=").unwrap().parse().unwrap();
    assert_ne!(first_pid, first.control.pid(), "namespace numbering");
    // A host-scope process the sandbox sessions cannot reach: its host pid names nothing in their namespace.
    let host_marker = marker();
    let host = spawner.spawn_request(sh(&format!("exec sleep {host_marker}"), false)).unwrap();
    eventually("both sleepers started", || {
        sleepers(&first_marker).len() == 1 && sleepers(&host_marker).len() == 1
    })
    .await;
    let script = format!(
        "kill -0 {host} 2>/dev/null; echo host=$?; kill -TERM {first_pid}; echo sibling=$?",
        host = host.control.pid()
    );
    let mut second = spawner.spawn_request(in_sandbox(sh(&script, false))).unwrap();
    let text = String::from_utf8(drain(&mut second.output).await).unwrap();
    assert!(text.contains("host=1"), "a sandbox session cannot signal a host-scope process: {text}");
    assert!(text.contains("sibling=0"), "a sandbox session signals another session's process: {text}");
    assert_eq!(second.control.wait().await.unwrap(), ExitStatus::Code(0));
    assert_eq!(first.control.wait().await.unwrap(), ExitStatus::Signal(15));
    assert!(sleepers(&host_marker).len() == 1, "the host-scope process is untouched");
    host.control.kill_tree().await.unwrap();
    first.control.kill_tree().await.unwrap();
    eventually("no zombie children", || zombie_children().is_empty()).await;
}

/// The PID namespace of `pid`, as the host sees it.
fn pid_namespace(pid: u32) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawner_with_its_own_sandbox_namespace_is_isolated_and_takes_it_along() {
    contained();
    let own = PtySpawner::default().with_own_sandbox_namespace();
    let default = PtySpawner::default();
    let (x, y, z) = (marker(), marker(), marker());
    let mut first =
        own.spawn_request(in_sandbox(sh(&format!("echo pid=$$; exec sleep {x}"), false))).unwrap();
    let mut text = String::new();
    read_until(&mut first.output, &mut text, "\n").await;
    let first_pid: u32 = text.trim().strip_prefix("pid=").unwrap().parse().unwrap();
    let other = default.spawn_request(in_sandbox(sh(&format!("exec sleep {y}"), false))).unwrap();
    let second = own.clone().spawn_request(in_sandbox(sh(&format!("exec sleep {z}"), false))).unwrap();
    eventually("all three sleep", || [&x, &y, &z].iter().all(|m| sleepers(m).len() == 1)).await;
    let (ns_first, ns_other, ns_second) = (
        pid_namespace(first.control.pid()),
        pid_namespace(other.control.pid()),
        pid_namespace(second.control.pid()),
    );
    assert_eq!(ns_first, ns_second, "one namespace for the spawner and its clones");
    assert_ne!(ns_first, ns_other, "not the default sandbox namespace");
    assert_ne!(ns_first, pid_namespace(std::process::id()), "not the host's");

    // A process of the same namespace signals the first by the pid it sees for itself.
    let mut prober =
        own.spawn_request(in_sandbox(sh(&format!("kill -TERM {first_pid}; echo sent=$?"), false))).unwrap();
    let out = String::from_utf8(drain(&mut prober.output).await).unwrap();
    assert!(out.contains("sent=0"), "{out}");
    assert_eq!(first.control.wait().await.unwrap(), ExitStatus::Signal(15));
    assert_eq!(prober.control.wait().await.unwrap(), ExitStatus::Code(0));

    // A daemon that left its session and cleared its environment is found by nothing but its namespace: it dies
    // when the spawner and the last of its processes are gone.
    let daemon = marker();
    let script = format!("(setsid env -i sleep {daemon} &); echo STARTED");
    let mut leader = own.spawn_request(in_sandbox(sh(&script, false))).unwrap();
    let mut text = String::new();
    read_until(&mut leader.output, &mut text, "STARTED").await;
    eventually("the daemon started", || sleepers(&daemon).len() == 1).await;
    assert_eq!(leader.control.wait().await.unwrap(), ExitStatus::Code(0));
    assert_eq!(sleepers(&daemon).len(), 1, "the daemon outlives its session's leader");
    drop((own, first, second, leader, prober));
    eventually("the own namespace's daemon is gone", || sleepers(&daemon).is_empty()).await;
    assert_eq!(sleepers(&y).len(), 1, "the default namespace's process is untouched");
    other.control.kill_tree().await.unwrap();
    eventually("no zombie children", || zombie_children().is_empty()).await;
}
