//! No fd and no zombie left behind by 1,000 sessions and by failed spawns. Alone in its test binary so that
//! no other test opens fds in this process meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use uexec_pty::{ExitStatus, ProcessControl, PtySpawner, SpawnError};

async fn session_to_the_end(spawner: &PtySpawner, tty: bool) {
    let mut process = spawner.spawn_request(request(&["true"], tty)).unwrap();
    assert_eq!(drain(&mut process.output).await, b"");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
}

#[tokio::test]
async fn a_thousand_sessions_and_failed_spawns_leave_no_fd_and_no_zombie() {
    let spawner = PtySpawner::default();
    // Warm up: the runtime opens its own fds lazily.
    session_to_the_end(&spawner, true).await;
    session_to_the_end(&spawner, false).await;
    let before = fd_count();

    for round in 0..1000 {
        let tty = round % 2 == 0;
        match round % 10 {
            // Killed while running.
            7 => {
                let mut process = spawner.spawn_request(request(&["sleep", "30"], tty)).unwrap();
                process.control.kill_tree().await.unwrap();
                drain(&mut process.output).await;
            }
            // Dropped while running: the drop kills it and reaps it in the background.
            9 => drop(spawner.spawn_request(request(&["sleep", "30"], tty)).unwrap()),
            _ => session_to_the_end(&spawner, tty).await,
        }
    }
    let not_executable = std::env::temp_dir().join(format!("uexec-pty-fd-leak-{}", std::process::id()));
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let not_executable = not_executable.to_str().unwrap().to_owned();
    for _ in 0..20 {
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
    eventually("the fd count is back where it started", || fd_count() == before).await;
    eventually("no zombie children", || zombie_children().is_empty()).await;
}
