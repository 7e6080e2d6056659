//! Spawning: which thread creates a session's leader, and its registration as a live leader.
//!
//! The parent-death signal of a child (Linux fast path) fires when the *thread* that created it ends, not the
//! process: a child spawned from a short-lived thread (a tokio `spawn_blocking` thread, which ends after ten
//! idle seconds) would be killed with it. So every session is created by one thread that lives as long as the
//! process: `uexec-spawner`, or `uexec-pidns` inside the sessions' PID namespace (see `contain`), or the
//! calling thread when it entered that namespace itself. The calling thread waits for it, for the same time the
//! spawn would take. The portable core goes through the same thread (in a PID namespace it must).

use std::sync::{Arc, Mutex, OnceLock, mpsc};

use rustix::process::Pid;
use std::os::fd::OwnedFd;
use uexec_ports::process::PidScope;

use crate::contain::OwnNamespace;
use crate::contain::{self, Placement};
use crate::reap::{StatusSlot, lock};
use crate::sys::{self, Backend, ChildPlan, Job, JobScope, SpawnFailure};

/// A started leader: pid, pidfd (Linux fast path), pins of its namespaces (Linux) and the slot its exit status
/// goes to.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) pid: Pid,
    pub(crate) pidfd: Option<OwnedFd>,
    pub(crate) namespaces: sys::NamespacePins,
    pub(crate) status: StatusSlot,
    /// The init of the sandbox PID namespace it runs in (see `contain`), where its orphans go; `None` in the
    /// host's.
    pub(crate) namespace_init: Option<u32>,
}

/// Start the child of `plan` with `backend`, on the thread that must create it, in the PID namespace of `scope`
/// (where there are several: a sandbox-scope child goes to `own` when given, else to the default sandbox
/// namespace), registered as a live leader.
pub(crate) fn start(
    plan: &ChildPlan<'_>,
    backend: Backend,
    fork: bool,
    scope: PidScope,
    own: Option<&OwnNamespace>,
) -> Result<Started, SpawnFailure> {
    let status: StatusSlot = Arc::new(Mutex::new(None));
    contain::ensure_subreaper_watchdog()?;
    let held = contain::hold_for_spawn();
    let placement = contain::placement();
    let (job_scope, namespace_init) = match (scope, own) {
        (PidScope::Host, _) => (JobScope::Scope(PidScope::Host), None),
        #[cfg(target_os = "linux")]
        (PidScope::Sandbox, Some(own)) => {
            use std::os::fd::AsRawFd;
            (JobScope::Namespace(own.namespace().as_raw_fd()), Some(own.init_pid()))
        }
        (PidScope::Sandbox, _) => (JobScope::Scope(PidScope::Sandbox), contain::default_namespace_init()),
    };
    let namespace_init = namespace_init.filter(|_| placement.has_namespaces());
    let spawned = match placement {
        #[cfg(target_os = "linux")]
        Placement::CallingThreadInNamespace(namespaces) => {
            sys::spawn_in_scope(Some(namespaces), plan, backend, fork, &job_scope)
        }
        // Its child would be created outside the namespace: refuse rather than leave it uncontained.
        #[cfg(target_os = "linux")]
        Placement::Refused => Err(SpawnFailure::Os {
            call: "spawning from a thread outside the sessions' PID namespace",
            errno: libc::EPERM,
        }),
        #[cfg(target_os = "linux")]
        Placement::NamespaceThread(jobs) => sys::spawn_via(&jobs, plan, backend, fork, job_scope),
        Placement::Anywhere => match spawner_thread() {
            Some(jobs) => {
                let jobs = lock(jobs).clone();
                sys::spawn_via(&jobs, plan, backend, fork, job_scope)
            }
            None => sys::spawn_child(plan, backend, fork, false),
        },
    };
    let spawned = spawned?;
    let mut leaders = held.unwrap_or_else(crate::reap::live_leaders);
    leaders.insert(spawned.pid.as_raw_nonzero().get(), Arc::clone(&status));
    drop(leaders);
    contain::spawned();
    Ok(Started {
        pid: spawned.pid,
        pidfd: spawned.pidfd,
        namespaces: spawned.namespaces,
        status,
        namespace_init,
    })
}

/// The thread that spawns every session when there is no PID-namespace thread, started on first use. `None`
/// (spawn on the calling thread) if it cannot start.
fn spawner_thread() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
    static SPAWNER: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
            let started = std::thread::Builder::new().name("uexec-spawner".to_owned()).spawn(move || {
                sys::serve_spawn_jobs(&jobs_rx, None);
                // Every sender is gone (it lives in a static, so never): stay, we are the children's parent.
                loop {
                    std::thread::park();
                }
            });
            match started {
                Ok(_) => Some(Mutex::new(jobs_tx)),
                Err(error) => {
                    tracing::warn!(%error, "no spawner thread: spawning on the calling thread");
                    None
                }
            }
        })
        .as_ref()
}
