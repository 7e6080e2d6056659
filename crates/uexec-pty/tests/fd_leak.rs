//! No fd and no zombie left behind by 1,000 sessions and by failed spawns, on the Linux fast path and the
//! portable core alike. Alone in its test binary so that no other test opens fds in this process meanwhile.
// The fds and zombies are counted through Linux's /proc.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use uexec_pty::{ExitStatus, ProcessControl, PtySpawner, SpawnError};

/// Our fds and what they are.
fn listing() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .map(|e| format!("{:?}->{:?}", e.file_name(), std::fs::read_link(e.path()).ok()))
        .collect()
}

/// Our fds that belong to sessions: PTY masters and pidfds.
fn session_fds() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|target| target == "/dev/ptmx" || target.contains("pidfd"))
        .collect()
}

async fn session_to_the_end(spawner: &PtySpawner, tty: bool) {
    let mut process = spawner.spawn_request(request(&["true"], tty)).unwrap();
    assert_eq!(drain(&mut process.output).await, b"");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
}

#[tokio::test]
async fn a_thousand_sessions_and_failed_spawns_leave_no_fd_and_no_zombie() {
    let spawners = [PtySpawner::default(), PtySpawner::portable()];
    // Warm up: the runtime opens its own fds lazily (the portable core's SIGCHLD listener too).
    for spawner in &spawners {
        session_to_the_end(spawner, true).await;
        session_to_the_end(spawner, false).await;
    }
    // PTY masters, pipes and pidfds are closed off the dropping thread: wait for the warm-up's to go.
    eventually("the warm-up sessions' fds are closed", || session_fds().is_empty()).await;
    let mut before = fd_count();
    let mut stable = 0;
    while stable < 10 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = fd_count();
        stable = if now == before { stable + 1 } else { 0 };
        before = now;
    }
    let baseline = listing();

    for round in 0..1000 {
        let tty = round % 2 == 0;
        // Both backends, each in both modes and in every way a session can end.
        let spawner = &spawners[(round / 2) % 2];
        match round % 10 {
            // Killed while running.
            7 => {
                let mut process = spawner.spawn_request(request(&["sleep", "30"], tty)).unwrap();
                process.control.kill_tree().await.unwrap();
                drain(&mut process.output).await;
            }
            // Dropped while running: the drop kills it and reaps it in the background.
            9 => drop(spawner.spawn_request(request(&["sleep", "30"], tty)).unwrap()),
            _ => session_to_the_end(spawner, tty).await,
        }
    }
    let not_executable = std::env::temp_dir().join(format!("uexec-pty-fd-leak-{}", std::process::id()));
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let not_executable = not_executable.to_str().unwrap().to_owned();
    for round in 0..20 {
        let spawner = &spawners[round % 2];
        let error = |request| spawner.spawn_request(request).map(|_| ()).unwrap_err();
        assert!(matches!(
            error(request(&["uexec-no-such-program"], true)),
            SpawnError::ProgramNotFound { .. }
        ));
        assert!(matches!(error(request(&[&not_executable], true)), SpawnError::NotExecutable { .. }));
        let mut bad_cwd = request(&["true"], false);
        bad_cwd.cwd = "/nonexistent".into();
        assert!(matches!(error(bad_cwd), SpawnError::BadCwd { .. }));
        assert!(matches!(error(request(&["echo", "a\0b"], true)), SpawnError::NulByte { .. }));
        assert!(matches!(error(request(&[], true)), SpawnError::EmptyArgv));
    }

    std::fs::remove_file(&not_executable).unwrap();
    let deadline = std::time::Instant::now() + PATIENCE;
    while fd_count() != before {
        assert!(std::time::Instant::now() < deadline, "fds: {baseline:?} before, now {:?}", listing());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    eventually("no zombie children", || zombie_children().is_empty()).await;
}
