//! The engine with an approver written here: under the `untrusted` approval policy every command that is not
//! known to be read-only is put to the approver, which lets commands that create files run and refuses the
//! rest. Every command runs in the platform's sandbox (`workspace-write`: writes only in the workspace).
//!
//! ```sh
//! cargo run -p uexec-examples --example engine_approver
//! ```
//!
//! It prints each question with its answer and each command's outcome, and exits non-zero if an outcome is not
//! the expected one.

// An example program: printing is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::error::Error;
use std::sync::Arc;

use async_trait::async_trait;
use uexec_domain::{ApprovalPolicy, ReviewDecision};
use uexec_engine::{Engine, EngineConfig, EngineDeps, ExecCommandRequest, ExecError, ExecResponse};
use uexec_ports::{ApprovalError, ApprovalKind, ApprovalRequest, Approver, EventSink, ExecEvent};

/// The person, written as code: approves `touch` and `mkdir` (they only create files), refuses the rest.
struct Reviewer;

#[async_trait]
impl Approver for Reviewer {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
        let script = request.command.last().map(String::as_str).unwrap_or_default();
        let creates_files = script.starts_with("touch ") || script.starts_with("mkdir ");
        let decision = if request.kind == ApprovalKind::Run && creates_files {
            ReviewDecision::Approved
        } else {
            ReviewDecision::Denied
        };
        println!("  approver: asked {:?} for `{script}` -> {decision:?}", request.kind);
        Ok(decision)
    }
}

/// Prints where each command runs, from the `Begin` event.
struct Printer;

impl EventSink for Printer {
    fn emit(&self, event: ExecEvent) {
        if let ExecEvent::Begin { command, protections, .. } = &event {
            let script = command.last().map(String::as_str).unwrap_or_default();
            println!("  event: `{script}` began; {}", protections.compact_line());
        }
    }
}

/// One command through the engine, printed.
async fn run(engine: &Engine, cmd: &str) -> Result<ExecResponse, ExecError> {
    println!("exec_command `{cmd}`");
    let request =
        ExecCommandRequest { cmd: cmd.to_owned(), login: Some(false), ..ExecCommandRequest::default() };
    let result = engine.exec_command(request).await;
    match &result {
        Ok(response) => println!("  exit {:?}, output {:?}", response.exit_code, response.output.trim_end()),
        Err(err) => println!("  refused: {err}"),
    }
    result
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let workspace = tempfile::tempdir()?;
    let mut config = EngineConfig::new(workspace.path().to_path_buf());
    config.approval_policy = ApprovalPolicy::Untrusted;
    config.base_env = std::env::vars_os().collect();
    let deps = EngineDeps {
        spawner: uexec_examples::spawner(),
        sandbox: uexec_examples::sandbox(),
        approver: Arc::new(Reviewer),
        events: Arc::new(Printer),
    };
    let engine = Engine::new(config, deps);

    // Known to be read-only: runs without a question.
    let listing = run(&engine, "echo listing; ls -a").await?;
    // Not read-only: the approver is asked, approves, and the command runs in the sandbox.
    let created = run(&engine, "touch approved.txt").await?;
    // The approver refuses: nothing runs.
    let refused = run(&engine, "rm approved.txt").await;
    engine.shutdown().await;

    let as_expected = listing.exit_code == Some(0)
        && listing.output.contains("listing")
        && created.exit_code == Some(0)
        && matches!(refused, Err(ExecError::Rejected))
        && workspace.path().join("approved.txt").exists();
    if !as_expected {
        return Err("an outcome differs from what the approver decided".into());
    }
    println!("every command ran or was refused as the approver decided");
    Ok(())
}
