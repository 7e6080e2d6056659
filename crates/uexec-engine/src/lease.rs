//! A sandboxed command's lease (`Sandbox::finish`): finished exactly once, when its process tree is gone.

use std::sync::Arc;

use uexec_ports::{Sandbox, SandboxLease};

/// A spawned command's sandbox lease ([`Sandbox::finish`]), finished exactly once: by the session once its
/// process tree is gone, or when dropped (a spawn that failed, a session dropped without its waiter).
pub(crate) struct LeaseGuard {
    sandbox: Arc<dyn Sandbox>,
    lease: SandboxLease,
}

impl LeaseGuard {
    /// The guard of `lease`, issued by `sandbox`.
    pub(crate) fn new(sandbox: Arc<dyn Sandbox>, lease: SandboxLease) -> LeaseGuard {
        LeaseGuard { sandbox, lease }
    }
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGuard").field("lease", &self.lease).finish_non_exhaustive()
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.lease != SandboxLease::NONE {
            self.sandbox.finish(std::mem::take(&mut self.lease));
        }
    }
}
