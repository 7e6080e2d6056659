//! Who reaps a session leader: its own session, whatever other sessions' kills and sweeps do meanwhile, inside
//! the PID namespace that `contain_descendants` sets up (this machine runs tests as root).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use uexec_pty::Containment;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_keep_their_exit_codes_while_others_are_killed() {
    assert!(matches!(uexec_pty::contain_descendants().unwrap(), Containment::PidNamespace { .. }));
    exit_codes_survive_concurrent_kills(8).await;
    eventually("no zombie children", || zombie_children().is_empty()).await;
}
