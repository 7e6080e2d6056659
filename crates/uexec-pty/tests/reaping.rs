//! Who reaps a session leader: its own session, whatever other sessions' kills and sweeps do meanwhile, inside
//! the PID namespace that `contain_descendants` sets up (this machine runs tests as root).
// Containment (subreaper, PID namespace) and the zombie count through /proc are Linux: these tests run there only.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use uexec_pty::Containment;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_keep_their_exit_codes_while_others_are_killed() {
    assert!(matches!(uexec_pty::contain_descendants().unwrap(), Containment::PidNamespace { .. }));
    // The fast path and the portable core share the reaping protocol: both keep every status.
    exit_codes_survive_concurrent_kills(uexec_pty::PtySpawner::default(), 6).await;
    exit_codes_survive_concurrent_kills(uexec_pty::PtySpawner::portable(), 6).await;
    eventually("no zombie children", || zombie_children().is_empty()).await;
}
