//! `uexec mcp`: the Model Context Protocol server over stdio (this module), or over Streamable HTTP ([`http`]).
//!
//! Both transports answer alike: every message passes the one JSON-RPC repair layer ([`jsonrpc`]), which reads
//! what depends on the protocol version from one table ([`protocol`]); a person is asked through the route that
//! travels with each call ([`approval`]).
//!
//! Lifecycle: the client's stack is composed (`crate::compose::mcp_client`); rmcp serves the filtered stdio
//! transport ([`transport`]); the server runs until the client disconnects (stdin EOF or stdout closed) or the
//! process gets SIGTERM, SIGINT or SIGHUP. Then every session's process tree is killed (`Engine::shutdown`)
//! before the process exits.

pub mod approval;
pub mod gate;
pub mod http;
pub mod http_repair;
pub mod jsonrpc;
pub mod operator;
pub mod protocol;
pub mod server;
pub mod tools;
pub mod transport;
pub mod unavailable;

use std::sync::Arc;

use anyhow::{Context, Result};
use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};
use uexec_ports::EventSink;

use crate::settings::Settings;

/// Why the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The client closed stdin (or stdout).
    ClientGone,
    /// A termination signal arrived.
    Signal(&'static str),
}

/// Serve MCP on stdin/stdout until the client leaves or a signal arrives.
pub async fn serve(
    settings: &Settings,
    events: Arc<dyn EventSink>,
    audit: Option<Arc<crate::audit::AuditLog>>,
    id_seed: Option<u64>,
) -> Result<StopReason> {
    let mut config = crate::compose::engine_config(settings);
    config.id_seed = id_seed;
    let control_audit = audit.clone();
    // The questions waiting for a person and the history of decisions (`control::desk`): one client, 0.
    let desk = crate::control::desk::Desk::new(audit.clone());
    let client = crate::compose::mcp_client(
        settings,
        config,
        audit,
        events,
        crate::compose::Namespaces::Server,
        (&desk, 0),
    )?;
    if let Some(proxy) = client.proxy {
        proxy.spawn();
    }
    let (engine, approver, refusals) = (client.engine, client.approver, client.refusals);
    // The person's way to the sessions (`uexec sessions`, `uexec attach`): one client, numbered 0.
    let controlled = engine.clone();
    let _control = crate::control::server::start(
        settings,
        "stdio",
        None,
        Arc::new(move || vec![(0, controlled.clone())]),
        control_audit,
        Arc::clone(&desk),
    );
    let instructions = instructions(settings);
    let handler = server::UexecServer::new(engine.clone(), approver, instructions)
        .with_desk(desk, 0)
        .with_refusals(refusals)
        .with_client_timeout(settings.client_timeout_secs);

    // Install the signal handlers before serving, so a signal during the handshake is not lost.
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;

    let io = transport::start(tokio::io::stdin(), std::io::stdout());
    let mut writer = io.writer;
    let serving = async move {
        match handler.serve((io.rmcp_read, io.rmcp_write)).await {
            Ok(running) => {
                let reason = running.waiting().await;
                tracing::info!(?reason, "MCP session ended");
            }
            Err(e) => tracing::info!("MCP session did not start: {e}"),
        }
    };
    let reason = tokio::select! {
        () = serving => StopReason::ClientGone,
        _ = &mut writer => StopReason::ClientGone,
        _ = sigterm.recv() => StopReason::Signal("SIGTERM"),
        _ = sigint.recv() => StopReason::Signal("SIGINT"),
        _ = sighup.recv() => StopReason::Signal("SIGHUP"),
    };
    tracing::info!(?reason, "shutting down: killing every session");
    engine.shutdown().await;
    Ok(reason)
}

/// What the model is told about this server.
fn instructions(settings: &Settings) -> String {
    let policy = &settings.sandbox_policy;
    let sandbox = match policy {
        uexec_domain::SandboxPolicy::ReadOnly { .. } => {
            "read-only: commands can read files but not write them".to_owned()
        }
        uexec_domain::SandboxPolicy::WorkspaceWrite { .. } => {
            let roots: Vec<String> = policy
                .writable_roots(&settings.cwd, settings.tmpdir.as_deref(), crate::report::git_entry)
                .iter()
                .map(|r| r.root.display().to_string())
                .collect();
            format!(
                "workspace-write: commands can write only under {} (in .git, not what git runs or reads as \
                 configuration; nor other tools' settings such as .vscode)",
                roots.join(", ")
            )
        }
        uexec_domain::SandboxPolicy::DangerFullAccess => "none: commands run with full access".to_owned(),
    };
    let network = match &settings.network {
        uexec_domain::network::NetworkPolicy::Proxied(rules) if !policy.is_unrestricted() => format!(
            "only through uexec's proxy (HTTPS_PROXY is set; DNS and other addresses are unreachable) to {}",
            crate::proxy::describe(rules)
        ),
        _ if policy.has_network_access() => "allowed".to_owned(),
        _ => "blocked".to_owned(),
    };
    let hidden = if settings.hidden.is_empty() || policy.is_unrestricted() {
        ""
    } else {
        " Credential stores under the home (~/.ssh, ~/.aws, ~/.netrc, ...) are unreadable inside the sandbox."
    };
    format!(
        "Run shell commands in a sandbox, in interactive terminal sessions: exec_command runs a command \
         (a shell, a REPL, a build, a test run, git). A command still running when the wait ends returns a session ID: \
         continue it with write_stdin (send input, or an empty string to wait for more output), and close it with \
         close_session when done. Use tty=true for interactive programs. Edit files with apply_patch through \
         exec_command (`apply_patch <<'EOF'` with a `*** Begin Patch` ... `*** End Patch` body). Working directory: \
         {}. Sandbox: {sandbox}; network {network}.{hidden} Approval policy: {}.",
        settings.cwd.display(),
        settings.approval_policy.as_str()
    )
}
