//! The unified exec engine: the orchestrator and session manager behind `exec_command` and `write_stdin`.
//!
//! This is the crate a library user embeds. It is written against the ports of `uexec-ports` only: the
//! process spawner, the sandbox, the approver and the event sink are injected as trait objects
//! ([`EngineDeps`]), so the engine knows nothing about PTYs, Landlock or MCP, and every orchestration rule is
//! testable with mocks.
//!
//! ```text
//! exec_command: validate -> reserve id -> approval -> sandbox choice -> spawn -> grace/retry -> store -> window
//! write_stdin:  look up -> call lock -> write (or SIGINT / poll) -> window -> reap if exited
//! ```
//!
//! **For:** embedding unified exec in an agent host: give it a process spawner, a sandbox, an approver and an
//! event sink, then call [`Engine::exec_command`] and [`Engine::write_stdin`] as the model asks. It decides
//! approvals (policy, command rules, known-safe commands, the session cache), where a command runs
//! ([`place`]), when a yield window ends, what the response says and when a session is pruned; with
//! [`EngineConfig::snapshot_dir`] it also keeps the login shell's environment as a snapshot that later bash
//! commands replay instead of running their startup files again (the `login` module).
//!
//! **Not for:** talking to the OS or to a person. It spawns nothing itself (the spawner does: `uexec-pty`), it
//! restricts nothing itself (the sandbox does: `uexec-sandbox-linux`, `uexec-sandbox-macos`), it asks nobody
//! itself (the approver does), and it speaks no protocol (the `uexec` app serves MCP). It reads no
//! environment variable: the base environment is [`EngineConfig::base_env`].
//!
//! - [`Engine`]: the entry point; cheap to clone, `Send + Sync`.
//! - Sessions and their lifecycle: see the `session` module documentation (reserved -> spawning -> live ->
//!   exited -> reaped), and `collect` for when a window ends early (exit, or a PTY waiting for input).
//! - Concurrency: calls on different sessions run in parallel; calls on one session are serialised by a
//!   per-session async mutex held by the call. The store and the session buffers use short `std` mutexes that
//!   are never held across an await; each session has a reader task and a waiter task.
//! - Nothing runs unsandboxed without an explicit, logged decision: the only unsandboxed path takes an
//!   [`uexec_domain::EscapeReason`], which appears in the `Begin` event and the response's protection report.
//!
//! # Example
//!
//! An approver written for the occasion lets `cargo` commands run and refuses the rest, under the `untrusted`
//! policy (every command that is not known to be read-only asks). `EchoSpawner`, a stand-in that prints the
//! command line instead of running it, and `NoSandbox` are hidden here; the workspace package `examples/`
//! (`engine_approver.rs`, `agent_loop.rs`) runs the same engine with the real PTY spawner and sandbox.
//!
//! ```
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use uexec_domain::{ApprovalPolicy, ReviewDecision, SandboxPolicy};
//! use uexec_engine::{Engine, EngineConfig, EngineDeps, ExecCommandRequest, ExecError};
//! use uexec_ports::{ApprovalError, ApprovalRequest, Approver, EventSink, ExecEvent};
//! # use uexec_domain::{ExitStatus, ProtectionReport, SandboxKind};
//! # use uexec_ports::process::{InputState, OutputStream, ProcessControl, ProcessError, ProcessSpawner};
//! # use uexec_ports::process::{PtySize, Signal, SpawnError, SpawnRequest, SpawnedProcess};
//! # use uexec_ports::{Sandbox, SandboxError, SandboxRequest, SandboxedSpawn};
//! # struct EchoSpawner;
//! # impl ProcessSpawner for EchoSpawner {
//! #     fn spawn(&self, request: SpawnRequest) -> Result<SpawnedProcess, SpawnError> {
//! #         let line = request.argv.last().map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
//! #         Ok(SpawnedProcess { control: Arc::new(Done), output: Box::new(Echo(Some(line.into_bytes()))) })
//! #     }
//! # }
//! # struct Echo(Option<Vec<u8>>);
//! # #[async_trait]
//! # impl OutputStream for Echo {
//! #     async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, ProcessError> { Ok(self.0.take()) }
//! # }
//! # struct Done;
//! # #[async_trait]
//! # impl ProcessControl for Done {
//! #     fn pid(&self) -> u32 { 1 }
//! #     fn is_tty(&self) -> bool { false }
//! #     async fn write(&self, _: &[u8]) -> Result<(), ProcessError> { Err(ProcessError::StdinClosed) }
//! #     fn resize(&self, _: PtySize) -> Result<(), ProcessError> { Err(ProcessError::NotATerminal) }
//! #     fn signal(&self, _: Signal) -> Result<(), ProcessError> { Ok(()) }
//! #     fn input_state(&self) -> InputState { InputState::Unknown }
//! #     fn try_wait(&self) -> Result<Option<ExitStatus>, ProcessError> { Ok(Some(ExitStatus::Code(0))) }
//! #     async fn wait(&self) -> Result<ExitStatus, ProcessError> { Ok(ExitStatus::Code(0)) }
//! #     async fn kill_tree(&self) -> Result<ExitStatus, ProcessError> { Ok(ExitStatus::Code(0)) }
//! # }
//! # struct NoSandbox;
//! # impl Sandbox for NoSandbox {
//! #     fn kind(&self) -> SandboxKind { SandboxKind::None }
//! #     fn report(&self, policy: &SandboxPolicy) -> ProtectionReport {
//! #         ProtectionReport::unsandboxed(policy.mode_str(), uexec_domain::EscapeReason::FullAccessPolicy)
//! #     }
//! #     fn prepare(&self, _: SandboxRequest) -> Result<SandboxedSpawn, SandboxError> {
//! #         Err(SandboxError::Unsupported("no sandbox in this example".to_owned()))
//! #     }
//! # }
//!
//! /// Lets `cargo` commands run; refuses everything else.
//! struct CargoOnly;
//!
//! #[async_trait]
//! impl Approver for CargoOnly {
//!     async fn request_approval(&self, request: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
//!         let script = request.command.last().map(String::as_str).unwrap_or_default();
//!         Ok(if script.starts_with("cargo ") { ReviewDecision::Approved } else { ReviewDecision::Denied })
//!     }
//! }
//!
//! /// Events are facts to record; this sink drops them.
//! struct Ignore;
//!
//! impl EventSink for Ignore {
//!     fn emit(&self, _event: ExecEvent) {}
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = EngineConfig::new(std::env::temp_dir());
//! config.approval_policy = ApprovalPolicy::Untrusted;
//! config.sandbox_policy = SandboxPolicy::DangerFullAccess;
//! let deps = EngineDeps {
//!     spawner: Arc::new(EchoSpawner),
//!     sandbox: Arc::new(NoSandbox),
//!     approver: Arc::new(CargoOnly),
//!     events: Arc::new(Ignore),
//! };
//! let runtime = tokio::runtime::Runtime::new()?;
//! runtime.block_on(async {
//!     let engine = Engine::new(config, deps);
//!     let call = |cmd: &str| ExecCommandRequest { cmd: cmd.to_owned(), ..ExecCommandRequest::default() };
//!
//!     let approved = engine.exec_command(call("cargo test")).await?;
//!     assert_eq!(approved.exit_code, Some(0));
//!     assert!(approved.output.contains("cargo test"));
//!
//!     let refused = engine.exec_command(call("rm -rf target")).await;
//!     assert!(matches!(refused, Err(ExecError::Rejected)));
//!     engine.shutdown().await;
//!     Ok::<(), ExecError>(())
//! })?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod api;
mod approvals;
mod attempt;
mod budget;
mod collect;
mod config;
mod engine;
mod error;
mod known_safe;
mod lease;
mod os;
mod outside;
mod placement;
mod retry;
mod screen;
mod session;
mod store;
mod trust;
mod utf8;
mod watch;

pub use api::{
    ExecCommandRequest, ExecResponse, LiveState, SessionState, SessionSummary, SessionView, WriteStdinRequest,
};
pub use budget::SessionBudget;
pub use config::{EngineConfig, EngineDeps};
pub use engine::{Engine, WeakEngine};
pub use error::ExecError;
pub use placement::{Placement, SandboxContext, place};
pub use trust::{gather_writes, writable_by_sandbox};
pub use watch::{OutputPiece, WATCH_QUEUE_BYTES, Watch, WatchEvent};
