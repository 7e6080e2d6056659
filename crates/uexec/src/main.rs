//! The `uexec` binary: the composition root. It reads the command line, sets up the process (logging, the
//! descriptor limit, the containment of every descendant) and hands over to the library's commands; it maps
//! errors to exit codes.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use uexec::cli::{self, Cli, Command, LogFormat};
use uexec::settings::{ProcessContext, ServerSettings, Settings};
use uexec::{
    apply_patch, compose, control, fdlimit, mcp, platform, report, report_error, run, runtime, terminal,
};

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
                // Nor the offline network namespace's responder (network off): started now, waited for when
                // the command is prepared.
                platform::start_offline_namespace_early();
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
        Command::Answer(args) => control::client::answer(&args),
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

/// Logs go to stderr (stdout is the MCP protocol), filtered by `RUST_LOG` (default: warnings), as text lines
/// or (`--log-format json`) one JSON object per line.
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rmcp::service=error"));
    // Colour only for a person's terminal: a log file, a pipe or a client's log pane gets plain text.
    let ansi = terminal::is_terminal(terminal::stderr_fd());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

fn run_mcp(args: &cli::McpArgs) -> Result<ExitCode> {
    let prepared = (|| {
        let ctx = ProcessContext::current()?;
        let mut settings = Settings::resolve(&args.policy, args.audit_log.as_deref(), &ctx)?;
        settings.client_timeout_secs = args.client_timeout_secs.or(settings.client_timeout_secs);
        let sinks = compose::event_sink(&settings)?;
        let server = ServerSettings::resolve(&args.serve, &settings, &ctx)?;
        anyhow::Ok((settings, sinks, server))
    })();
    let (settings, sinks, server) = match prepared {
        Ok(prepared) => prepared,
        // A stdio client that hides stderr would see only "Connection closed": answer it with the error.
        Err(error) if args.serve.listen.is_none() => {
            report_error(&error);
            mcp::unavailable::answer_until_eof(&format!("{error:#}"));
            return Ok(ExitCode::FAILURE);
        }
        Err(error) => return Err(error),
    };
    if let Some(server) = server {
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

/// At most two glibc malloc arenas. By default glibc gives threads up to eight arenas per core and keeps what each
/// freed for reuse by that arena: in a long-running server whose bytes are allocated on one thread (the runtime's
/// workers reading output) and freed on another (the stdout writer, the blocking pool), the heap then grows with
/// the number of sessions served (`RELIABILITY.md`, soak, has the figures with and without this call). Two arenas
/// keep that bounded while the two workers rarely wait for each other.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` with an integer parameter, called first in `main` before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
