//! The server's file descriptors: the soft limit raised at start, the original given back to every command, and
//! the share of the limit each kind of connection may hold.
//!
//! A server holds descriptors for its sessions (a PTY or pipe, a pidfd, namespace descriptors), for HTTP
//! connections (one each) and for proxied connections (two each: the command's and the upstream one). The last
//! two are opened by others (anyone who reaches the listener, any sandboxed command), so each gets a bounded share
//! of the limit, and what is left stays in reserve for sessions: nobody without a token, and no client's
//! commands, can use up the descriptors an authorised client's sessions need ([`FdBudget`]).
//!
//! `uexec mcp` raises its soft `RLIMIT_NOFILE` to the hard limit first thing ([`raise`]); the commands it spawns
//! get the original soft limit back ([`restore_in_children`]), so that they run as they would without uexec
//! (programs that walk every possible descriptor, or use `select`, expect the usual 1024).

use std::sync::{Arc, OnceLock};

use rustix::process::{Resource, Rlimit};
use uexec_ports::process::{
    ChildSetup, ChildSetupFailure, ProcessSpawner, SpawnError, SpawnRequest, SpawnedProcess,
};

/// The descriptors every server keeps for itself (runtime, listeners, log and audit files, the spawner's
/// namespace descriptors) before any share is computed.
const BASE: u64 = 64;

/// About what one live session holds (PTY master or pipe, pidfd, the namespace descriptors that pin it, the
/// reader's registration), for the warning when the limit cannot hold `--max-sessions-total` sessions.
pub const FDS_PER_SESSION: u64 = 8;

/// The soft limit the process started with, when [`raise`] changed it.
static ORIGINAL: OnceLock<Rlimit> = OnceLock::new();

/// What [`raise`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    /// The soft limit at start.
    pub before: u64,
    /// The soft limit now.
    pub now: u64,
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (at most what the kernel accepts), once, before any thread
/// exists; remember the original for [`restore_in_children`].
pub fn raise() -> Raised {
    let start = rustix::process::getrlimit(Resource::Nofile);
    let before = start.current.unwrap_or(u64::MAX);
    // An unlimited hard limit is not a value `RLIMIT_NOFILE` takes (Linux caps it at fs.nr_open, macOS at
    // OPEN_MAX): try the hard limit, then the usual ceilings.
    let mut candidates: Vec<u64> = Vec::new();
    if let Some(hard) = start.maximum {
        candidates.push(hard);
    }
    candidates.extend([1 << 20, 1 << 16, 10240]);
    for target in candidates.into_iter().filter(|t| *t > before) {
        if start.maximum.is_some_and(|hard| target > hard) {
            continue;
        }
        let new = Rlimit { current: Some(target), maximum: start.maximum };
        if rustix::process::setrlimit(Resource::Nofile, new).is_ok() {
            let _ = ORIGINAL.set(start);
            return Raised { before, now: target };
        }
    }
    Raised { before, now: before }
}

/// The soft limit now (the budget is computed from it).
pub fn current() -> u64 {
    rustix::process::getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// `spawner`, with every command it starts given back the soft limit this process started with (when
/// [`raise`] changed it).
pub fn restore_in_children(spawner: Arc<dyn ProcessSpawner>) -> Arc<dyn ProcessSpawner> {
    match ORIGINAL.get() {
        Some(original) => Arc::new(Restoring { inner: spawner, hook: Arc::new(RestoreLimit(*original)) }),
        None => spawner,
    }
}

/// A spawner whose children get the original descriptor limit back before anything else runs in them.
struct Restoring {
    inner: Arc<dyn ProcessSpawner>,
    hook: Arc<RestoreLimit>,
}

impl ProcessSpawner for Restoring {
    fn spawn(&self, mut request: SpawnRequest) -> Result<SpawnedProcess, SpawnError> {
        // First: before a sandbox's hook filters the system calls a command may make.
        request.setup.insert(0, self.hook.clone());
        self.inner.spawn(request)
    }
}

/// Sets the child's `RLIMIT_NOFILE` to the limit it holds.
#[derive(Debug)]
struct RestoreLimit(Rlimit);

// SAFETY: `run_in_child` makes one system call (`setrlimit`, through rustix) on a value prepared in the parent;
// it allocates nothing, takes no lock, writes no memory the parent reads and cannot panic.
#[allow(unsafe_code)]
unsafe impl ChildSetup for RestoreLimit {
    fn run_in_child(&self) -> Result<(), ChildSetupFailure> {
        rustix::process::setrlimit(Resource::Nofile, self.0)
            .map_err(|e| ChildSetupFailure { stage: "setrlimit(RLIMIT_NOFILE)", errno: e.raw_os_error() })
    }
}

/// The shares of the descriptor limit that others can make the server use. What is left (at least 5/8 of the
/// limit beyond [`BASE`]) is for sessions and authorised HTTP connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdBudget {
    /// The soft limit the shares are computed from.
    pub limit: u64,
    /// HTTP connections that have not yet presented the token, in total (one descriptor each: 1/8).
    pub preauth_total: usize,
    /// The same, from one peer address.
    pub preauth_per_peer: usize,
    /// Proxied connections across every client's proxy (two descriptors each: 1/4).
    pub proxy_total: usize,
    /// Proxied connections of one client's commands, so that one client cannot take them all.
    pub proxy_per_client: usize,
}

impl FdBudget {
    /// The shares of `limit` descriptors.
    pub fn for_limit(limit: u64) -> FdBudget {
        let usable = limit.saturating_sub(BASE);
        let share = |part: u64, low: usize, high: usize| {
            usize::try_from(usable / part).unwrap_or(usize::MAX).clamp(low, high)
        };
        let preauth_total = share(8, 8, 512);
        let proxy_total = share(8, 8, 4096);
        FdBudget {
            limit,
            preauth_total,
            preauth_per_peer: (preauth_total / 4).clamp(4, 64),
            proxy_total,
            proxy_per_client: (proxy_total / 4).clamp(4, 256),
        }
    }

    /// About how many sessions the rest of the limit holds.
    pub fn sessions_room(&self) -> u64 {
        self.limit.saturating_sub(BASE) / 8 * 5 / FDS_PER_SESSION
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn shares_leave_most_of_the_limit_to_sessions_and_one_client_never_takes_every_proxy_slot() {
        for limit in [0, 64, 100, 1024, 4096, 20_000, 1 << 20, u64::MAX] {
            let b = FdBudget::for_limit(limit);
            assert!(b.preauth_per_peer < b.preauth_total, "{b:?}");
            assert!(b.proxy_per_client < b.proxy_total, "{b:?}");
            assert!(b.preauth_per_peer >= 1 && b.proxy_per_client >= 1, "{b:?}");
            if limit >= 1024 {
                let others = b.preauth_total as u64 + 2 * b.proxy_total as u64;
                assert!(others <= (limit - BASE) / 8 * 3, "{b:?}");
                assert!(b.sessions_room() >= (limit - BASE) / 8 * 5 / FDS_PER_SESSION, "{b:?}");
            }
        }
        let b = FdBudget::for_limit(1024);
        assert_eq!(
            (b.preauth_total, b.preauth_per_peer, b.proxy_total, b.proxy_per_client),
            (120, 30, 120, 30)
        );
        assert_eq!(b.sessions_room(), 75);
        let b = FdBudget::for_limit(1 << 20);
        assert_eq!(
            (b.preauth_total, b.preauth_per_peer, b.proxy_total, b.proxy_per_client),
            (512, 64, 4096, 256)
        );
    }
}
