//! Placing and spawning one attempt of a command: the sandbox transforms the request (or it runs outside it for a
//! named reason, `crate::placement`), the spawner starts it, and a sandbox setup that found a planned path gone
//! is prepared again.

use std::sync::Arc;

use uexec_domain::startup::GUARDED_DETAIL;
use uexec_domain::{Protection, ProtectionReport, ProtectionStatus};
use uexec_ports::process::{SpawnError, SpawnRequest, SpawnedProcess};
use uexec_ports::{ExecEvent, SandboxLease};

use crate::engine::Orchestrator;
use crate::error::ExecError;
use crate::lease::LeaseGuard;
use crate::placement::{self, Placement, SandboxContext};
use crate::session::{Session, SessionSpec};

/// How many times a sandboxed spawn is prepared when its setup finds a planned path gone (see
/// `Orchestrator::place_and_spawn`): the first attempt and two more.
const SETUP_RACE_ATTEMPTS: u32 = 3;

impl Orchestrator {
    /// Make `base` runnable under `placement` (see [`placement::place`], which `uexec run` calls too).
    pub(crate) fn place(
        &self,
        placement: Placement,
        base: SpawnRequest,
    ) -> Result<(SpawnRequest, ProtectionReport, SandboxLease), ExecError> {
        let context = SandboxContext {
            sandbox: self.deps.sandbox.as_ref(),
            policy: &self.config.sandbox_policy,
            workspace: &self.config.cwd,
            allow_degraded: self.config.allow_degraded_sandbox,
            cache: self.config.sandbox_cache.as_deref(),
        };
        placement::place(context, placement, base).map_err(ExecError::Sandbox)
    }

    /// Place `base` and spawn it: [`Engine::place`], then the spawner.
    ///
    /// A sandbox plans its mounts from the file system as `prepare` saw it; a path of that plan that vanishes
    /// before the child mounts it (a directory another program removes from a shared `/tmp`) fails the child's
    /// setup with `ENOENT`, closed: nothing ran. Such a spawn is prepared again from the file system as it is now,
    /// at most [`SETUP_RACE_ATTEMPTS`] times in all. A setup the machine refused (a namespace it no longer
    /// allows) is prepared again too when the sandbox says it has planned without it
    /// (`Sandbox::replan_after_setup_failure`); any other failure, or the same one again, is the caller's.
    /// `placed` sees each placed request right before it is spawned (the last call is the one that ran).
    /// The lease of every attempt that did not spawn is finished here; the one that ran is the caller's, in a
    /// [`LeaseGuard`].
    pub(crate) fn place_and_spawn(
        &self,
        placement: Placement,
        base: SpawnRequest,
        mut placed: impl FnMut(&SpawnRequest),
    ) -> Result<(SpawnedProcess, ProtectionReport, LeaseGuard), ExecError> {
        let mut attempt = 1;
        loop {
            let (spawn, report, lease) = self.place(placement, base.clone())?;
            let lease = LeaseGuard::new(Arc::clone(&self.deps.sandbox), lease);
            placed(&spawn);
            match blocking(|| self.deps.spawner.spawn(spawn)) {
                Ok(process) => return Ok((process, report, lease)),
                Err(SpawnError::ChildSetup { stage, errno })
                    if placement == Placement::Sandboxed
                        && attempt < SETUP_RACE_ATTEMPTS
                        && std::io::Error::from_raw_os_error(errno).kind()
                            == std::io::ErrorKind::NotFound =>
                {
                    tracing::debug!(
                        stage,
                        attempt,
                        "sandbox setup found a planned path gone; preparing again"
                    );
                    attempt += 1;
                }
                Err(SpawnError::ChildSetup { stage, errno })
                    if placement == Placement::Sandboxed
                        && attempt < SETUP_RACE_ATTEMPTS
                        && self.deps.sandbox.replan_after_setup_failure(stage, errno) =>
                {
                    tracing::warn!(
                        stage,
                        errno,
                        "the sandbox's setup was refused here; planning again without it"
                    );
                    attempt += 1;
                }
                Err(error) => return Err(ExecError::Spawn(error)),
            }
        }
    }

    /// Place and spawn one attempt, emit `Begin`, start its tasks.
    pub(crate) fn start_attempt(
        &self,
        spec: &SessionSpec,
        placement: Placement,
        base: SpawnRequest,
    ) -> Result<Arc<Session>, ExecError> {
        let mut argv = Vec::new();
        let (process, mut report, lease) = self.place_and_spawn(placement, base, |spawn| {
            argv = spawn.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        })?;
        if spec.startup_guarded {
            report.protections.push(Protection {
                name: "login_startup_files".to_owned(),
                status: ProtectionStatus::Enforced,
                detail: GUARDED_DETAIL.to_owned(),
            });
        }
        self.deps.events.emit(ExecEvent::Begin {
            call_id: spec.call_id.clone(),
            session_id: spec.id,
            command: spec.command.clone(),
            argv,
            cwd: spec.cwd.clone(),
            tty: spec.tty,
            protections: report.clone(),
        });
        Ok(Session::start(spec.clone(), report, process, Arc::clone(&self.deps.events), lease))
    }
}

/// Run `work`, which blocks (a spawn waits for the spawner's thread and the child's setup), without holding up
/// the runtime's other tasks: on a multi-threaded runtime this worker hands its other tasks to the rest first
/// (`block_in_place`), so that a burst of spawns does not stall the output readers and the calls already
/// running; elsewhere it simply runs.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|handle| handle.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}
