//! Composition: how the app's parts are put together for each command. `main.rs` parses and dispatches; the
//! commands (`mcp`, `mcp --listen`, `run`) ask this module for what they are made of, so that none of them
//! reaches up into `main.rs` and each adapter is chosen in one place:
//!
//! - [`event_sink`]: where events go (the audit log when configured, else nowhere);
//! - [`engine_config`]: the engine's configuration from the validated settings;
//! - [`mcp_client`]: one MCP client's stack (its approver, its proxy in the domain-allowlist mode, the spawner
//!   and sandbox of this platform, its engine). The stdio server makes one; the HTTP server one per client.

use std::ffi::OsString;
use std::sync::Arc;

use anyhow::{Context, Result};
use uexec_engine::{Engine, EngineConfig, EngineDeps};
use uexec_ports::{EventSink, ExecEvent};

use crate::audit::AuditLog;
use crate::control::desk::{Desk, DeskApprover};
use crate::mcp::approval::McpApprover;
use crate::proxy::{DomainAsker, EngineAsker, Refusals};
use crate::settings::{self, Settings};

/// The event sink of a command: the audit log when configured, else nothing.
pub struct Sinks {
    /// What the engine (or `uexec run`) emits to.
    pub events: Arc<dyn EventSink>,
    /// The audit log behind it, if any.
    pub audit: Option<Arc<AuditLog>>,
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sinks").field("audit", &self.audit).finish_non_exhaustive()
    }
}

impl Sinks {
    /// Say on stderr when audit records were lost.
    pub fn report_failures(&self) {
        if let Some(audit) = &self.audit
            && audit.failures() > 0
        {
            crate::report_error(&anyhow::anyhow!(
                "{} audit log record(s) could not be written",
                audit.failures()
            ));
        }
    }
}

/// The sinks for `settings`.
pub fn event_sink(settings: &Settings) -> Result<Sinks> {
    match &settings.audit_log {
        Some(path) => {
            let log = Arc::new(
                AuditLog::open(path)
                    .with_context(|| format!("cannot open the audit log {}", path.display()))?,
            );
            Ok(Sinks { events: log.clone(), audit: Some(log) })
        }
        None => Ok(Sinks { events: Arc::new(NoEvents), audit: None }),
    }
}

/// Discards events.
#[derive(Debug, Clone, Copy)]
struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: ExecEvent) {}
}

/// The engine configuration for `settings`, inheriting this process's environment.
pub fn engine_config(settings: &Settings) -> EngineConfig {
    let mut config = EngineConfig::new(settings.cwd.clone());
    config.approval_policy = settings.approval_policy;
    config.sandbox_policy = settings.sandbox_policy.clone();
    config.allow_degraded_sandbox = settings.allow_degraded_sandbox;
    config.env_policy = settings.env_policy.clone();
    config.base_env = std::env::vars_os().collect::<Vec<(OsString, OsString)>>();
    config.limits = settings.limits.clone();
    config.rules = settings.rules.clone();
    config.default_shell = settings.shell.clone();
    config.report_protections = settings.report_protections;
    config.snapshot_dir = settings.state_dir.as_ref().map(|dir| dir.join("snapshots"));
    config.sandbox_cache = settings.sandbox_cache.clone();
    config.sandbox_written_dirs =
        settings.state_dir.iter().flat_map(|s| settings::sandbox_state_dirs(s)).collect();
    // `apply_patch` calls run as this binary's `apply-patch` subcommand.
    config.apply_patch_program = std::env::current_exe().ok().map(|exe| {
        vec![exe.into_os_string(), OsString::from(crate::apply_patch::SUBCOMMAND), OsString::from("--")]
    });
    config
}

/// Where a client's sandboxed commands live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespaces {
    /// The server's own sandbox PID namespace (the stdio server: one client).
    Server,
    /// A PID namespace of the client's own, which dies with its engine (`--listen`: one per client).
    PerClient,
}

/// One MCP client's stack, built by [`mcp_client`].
pub struct McpClient {
    /// The client's engine.
    pub engine: Engine,
    /// Its approver (the engine's approval port: every question of the client goes through it).
    pub approver: Arc<McpApprover>,
    /// The refusals of its proxy (domain-allowlist mode), noted in its tool responses.
    pub refusals: Option<Arc<Refusals>>,
    /// Its proxy, made but not yet served (domain-allowlist mode).
    pub proxy: Option<crate::proxy::Pending>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("engine", &self.engine)
            .field("proxied", &self.proxy.is_some())
            .finish_non_exhaustive()
    }
}

/// The stack of one MCP client: an approver that asks the client's person (`mcp::approval`) and posts the
/// question on the server's `desk` (client number given), which the engine
/// asks through, also for the proxy in the domain-allowlist mode ([`EngineAsker`]); the sandbox and spawner of this platform placed as
/// `namespaces` says; an engine over them configured by `config`, emitting to `events`.
pub fn mcp_client(
    settings: &Settings,
    config: EngineConfig,
    audit: Option<Arc<AuditLog>>,
    events: Arc<dyn EventSink>,
    namespaces: Namespaces,
    desk: (&Arc<Desk>, u64),
) -> Result<McpClient> {
    let approver = Arc::new(McpApprover::new(settings.approval_policy, settings.sandbox_policy.clone()));
    // The proxy's question about a host goes through the engine (one cache, one port to the person), which
    // is made after the proxy: the asker is bound to it below.
    let asker = Arc::new(EngineAsker::default());
    let (setup, proxy) = crate::proxy::prepare(settings, audit, Some(asker.clone() as Arc<dyn DomainAsker>))?;
    let refusals = proxy.as_ref().map(crate::proxy::Pending::refusals);
    let (spawner, sandbox) = match namespaces {
        Namespaces::Server => (crate::platform::spawner(), crate::platform::sandbox_with(&setup)),
        Namespaces::PerClient => crate::platform::client_spawner_and_sandbox(&setup),
    };
    // Every question is posted on the server's desk too, where the person may answer it from the operator page
    // or `uexec answer` (`control::desk`); the first answer decides.
    let (desk, client) = desk;
    let asked: Arc<DeskApprover> = Arc::new(DeskApprover::new(
        approver.clone(),
        Arc::clone(desk),
        client,
        settings.sandbox_policy.clone(),
        settings.approval_policy,
    ));
    let events = desk.events(client, events);
    let engine = Engine::new(config, EngineDeps { spawner, sandbox, approver: asked, events });
    asker.bind(&engine);
    Ok(McpClient { engine, approver, refusals, proxy })
}
