//! The `uexec` binary: the composition root. It alone reads flags, config files and the environment, picks the
//! adapters for this platform, and maps errors to exit codes; the libraries it composes stay typed.

mod apply_patch;
mod audit;
mod cli;
mod config;
mod control;
mod fdlimit;
#[cfg(any(test, fuzzing))]
mod fuzz_bodies;
mod mcp;
mod metrics;
mod platform;
mod proxy;
mod report;
mod run;
mod settings;
mod terminal;

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use uexec_engine::EngineConfig;
use uexec_ports::{EventSink, ExecEvent};

use crate::cli::{Cli, Command, LogFormat};
use crate::settings::{ProcessContext, ServerSettings, Settings};

/// Exit code when uexec itself failed before running anything (as `env`, `timeout` and `docker run` do).
pub const EXIT_NOTHING_RAN: u8 = 125;

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = Cli::parse();
    init_logging(cli.log_format);
    if matches!(cli.command, Command::Mcp(_)) {
        // A server holds descriptors for sessions and connections: all the hard limit allows (its commands get
        // the original limit back).
        let raised = fdlimit::raise();
        tracing::debug!(before = raised.before, now = raised.now, "descriptor limit");
    }
    if matches!(cli.command, Command::Mcp(_) | Command::Run(_)) {
        // Before any thread exists: make this process own every descendant, so that no command escapes its
        // session, even when uexec itself is killed. `uexec run` without a terminal spawns from this thread and
        // starts no thread: this thread enters the PID namespace itself (no helper thread, no hand-off).
        let policy = match cli.command {
            // The domain allowlist makes its network namespace on a helper thread, which a thread that entered
            // a PID namespace could no longer start.
            Command::Run(ref args) if !run::uses_terminal() && !run::needs_proxy(args) => {
                uexec_pty::NamespacePolicy::OnCallingThread
            }
            _ => uexec_pty::NamespacePolicy::IfPrivileged,
        };
        match uexec_pty::contain_descendants_with(policy) {
            Ok(containment) => tracing::debug!(?containment, "descendants contained"),
            Err(e) => tracing::warn!(
                "descendants not contained (commands that escape their session may outlive uexec): {e}"
            ),
        }
    }
    let result = match cli.command {
        Command::Mcp(args) => run_mcp(&args),
        Command::Run(args) => return run::main(&args),
        Command::Sessions(args) => control::client::sessions(&args),
        Command::Attach(args) => control::client::attach(&args),
        Command::Kill(args) => control::client::kill(&args),
        Command::SandboxReport(args) => report::sandbox_report(&args),
        Command::SandboxProfile(args) => report::sandbox_profile(&args),
        Command::ApplyPatch(args) => return apply_patch::main(&args.patch),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            report_error(&e);
            ExitCode::FAILURE
        }
    }
}

/// Print an error chain to stderr.
pub fn report_error(e: &anyhow::Error) {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("uexec: error: {e:#}");
    }
}

/// Logs go to stderr (stdout is the MCP protocol), filtered by `RUST_LOG` (default: warnings), as text lines
/// or (`--log-format json`) one JSON object per line.
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rmcp::service=error"));
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(true);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// A multi-threaded runtime (the MCP server serves calls in parallel).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn run_mcp(args: &cli::McpArgs) -> Result<ExitCode> {
    let ctx = ProcessContext::current()?;
    let settings = Settings::resolve(&args.policy, args.audit_log.as_deref(), &ctx)?;
    let sinks = event_sink(&settings)?;
    if let Some(server) = ServerSettings::resolve(&args.serve, &settings, &ctx)? {
        tracing::info!(
            cwd = %settings.cwd.display(),
            sandbox = settings.sandbox_policy.mode_str(),
            approval = settings.approval_policy.as_str(),
            config = ?settings.config_file,
            listen = %server.listen,
            "serving MCP over Streamable HTTP"
        );
        let rt = runtime()?;
        let outcome = rt.block_on(mcp::http::serve(
            &settings,
            &server,
            sinks.events.clone(),
            sinks.audit.clone(),
            args.id_seed,
        ));
        rt.shutdown_background();
        sinks.report_failures();
        return outcome.map(|_| ExitCode::SUCCESS);
    }
    tracing::info!(
        cwd = %settings.cwd.display(),
        sandbox = settings.sandbox_policy.mode_str(),
        approval = settings.approval_policy.as_str(),
        config = ?settings.config_file,
        "serving MCP on stdio"
    );
    let rt = runtime()?;
    let outcome = rt.block_on(mcp::serve(&settings, sinks.events.clone(), sinks.audit.clone(), args.id_seed));
    // The stdin reader may be blocked in a read(2) that never returns: do not wait for it.
    rt.shutdown_background();
    sinks.report_failures();
    outcome.map(|_| ExitCode::SUCCESS)
}

/// The event sink of a command: the audit log when configured, else nothing.
pub struct Sinks {
    /// What the engine (or `uexec run`) emits to.
    pub events: Arc<dyn EventSink>,
    /// The audit log behind it, if any.
    pub audit: Option<Arc<audit::AuditLog>>,
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
            report_error(&anyhow::anyhow!("{} audit log record(s) could not be written", audit.failures()));
        }
    }
}

/// The sinks for `settings`.
pub fn event_sink(settings: &Settings) -> Result<Sinks> {
    match &settings.audit_log {
        Some(path) => {
            let log = Arc::new(
                audit::AuditLog::open(path)
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
    config.apply_patch_program = std::env::current_exe()
        .ok()
        .map(|exe| vec![exe.into_os_string(), OsString::from(apply_patch::SUBCOMMAND), OsString::from("--")]);
    config
}

/// At most two glibc malloc arenas. By default glibc gives threads up to eight arenas per core and keeps what each
/// freed for reuse by that arena: in a long-running server whose bytes are allocated on one thread (the runtime's
/// workers reading output) and freed on another (the stdout writer, the blocking pool), the heap then grows by a
/// few hundred bytes per session (`RELIABILITY.md`, soak: +3.2 MiB over 10,000 sessions through `uexec mcp`,
/// +0.4 MiB with one arena). Two arenas keep that bounded while the two workers rarely wait for each other.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` with an integer parameter, called first in `main` before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
