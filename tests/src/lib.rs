//! Shared helpers for the cross-crate integration tests and benchmarks in this folder.

pub mod fuzz;

use std::sync::Arc;

use async_trait::async_trait;
use uexec_domain::{EscapeReason, ProtectionReport, ReviewDecision, SandboxKind, SandboxPolicy};
use uexec_engine::{Engine, EngineConfig, EngineDeps};
use uexec_ports::EventSink;
use uexec_ports::{
    ApprovalError, ApprovalRequest, Approver, Sandbox, SandboxError, SandboxRequest, SandboxedSpawn,
};
use uexec_pty::PtySpawner;

/// The sandbox of engines that run everything under `danger-full-access`: the engine never consults it then,
/// and any `prepare` call fails loudly (it would mean the engine tried to sandbox what it must not).
#[derive(Debug, Default)]
pub struct NoSandbox;

impl Sandbox for NoSandbox {
    fn kind(&self) -> SandboxKind {
        SandboxKind::None
    }

    fn report(&self, policy: &SandboxPolicy) -> ProtectionReport {
        ProtectionReport::unsandboxed(policy.mode_str(), EscapeReason::FullAccessPolicy)
    }

    fn prepare(&self, request: SandboxRequest) -> Result<SandboxedSpawn, SandboxError> {
        Err(SandboxError::Unsupported(format!(
            "test engines run under danger-full-access; the engine asked to sandbox {:?}",
            request.spawn.argv
        )))
    }
}

/// An approver with nobody behind it: every request fails with `ApprovalError::Unavailable`, naming it.
#[derive(Debug, Default)]
pub struct NobodyToAsk;

#[async_trait]
impl Approver for NobodyToAsk {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
        Err(ApprovalError::Unavailable(format!("unexpected approval request: {request:?}")))
    }
}

/// An engine on real processes (`uexec_pty::PtySpawner`) under `danger-full-access`, with nobody to ask.
pub fn unsandboxed_engine(mut config: EngineConfig, events: Arc<dyn EventSink>) -> Engine {
    config.sandbox_policy = SandboxPolicy::DangerFullAccess;
    Engine::new(
        config,
        EngineDeps {
            spawner: Arc::new(PtySpawner::default()),
            sandbox: Arc::new(NoSandbox),
            approver: Arc::new(NobodyToAsk),
            events,
        },
    )
}
