//! The ports of uexec: the traits the engine needs from the world, and nothing else.
//!
//! The engine (sessions, yield windows, approvals, retry) is written against these traits only; adapters
//! implement them (`uexec-pty` the process spawner, `uexec-sandbox-linux` and `uexec-sandbox-macos` the
//! sandbox, the app the approver and the event sink). Tests swap any of them for a `mockall` mock (feature
//! `mock`: `MockApprover`, `MockEventSink`, `MockSandbox` here, `process::MockProcessSpawner` and friends in
//! [`process`]).
//!
//! **For:** writing an adapter (your own approver, event sink, sandbox or process spawner) that the engine, or
//! any code written against these traits, can use; and for reading what each side promises.
//!
//! **Not for:** doing anything. This crate holds traits, their value types and their errors; it spawns nothing,
//! restricts nothing and asks nobody.
//!
//! Why the traits have this shape:
//! - [`Approver`] is async because the answer comes from a person, through whatever channel the app has (an MCP
//!   elicitation, a terminal prompt); it returns a decision, never a side effect.
//! - [`Sandbox`] does not spawn. It *transforms* a [`SandboxRequest`] into a [`SandboxedSpawn`]: a rewritten argv
//!   (macOS wraps the command in `sandbox-exec`) and/or a [`ChildSetup`](process::ChildSetup) hook run in the
//!   child between fork and exec (Linux restricts itself there). Keeping spawning out of the sandbox means one
//!   process adapter serves every sandbox, and a sandbox is testable without processes.
//! - [`ProcessSpawner`](process::ProcessSpawner) returns the two halves of a process separately: an
//!   [`OutputStream`](process::OutputStream) that one reader task owns (`&mut self`, so no lock is held while
//!   waiting for output) and a [`ProcessControl`](process::ProcessControl) shared by everyone else (write,
//!   resize, signal, kill, wait). The process port's types live in [`process`] only.
//! - [`EventSink`] is synchronous and must not block: events are facts to record (audit log, UI), not questions.
//!
//! # Example
//!
//! An approver that lets read-only listings run and refuses everything else, and an event sink that counts
//! the commands that began:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use async_trait::async_trait;
//! use uexec_domain::{EscapeReason, ProtectionReport, ReviewDecision, SessionId};
//! use uexec_ports::{ApprovalError, ApprovalKind, ApprovalRequest, Approver, EventSink, ExecEvent};
//!
//! struct ListingsOnly;
//!
//! #[async_trait]
//! impl Approver for ListingsOnly {
//!     async fn request_approval(&self, request: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
//!         let script = request.command.last().map(String::as_str).unwrap_or_default();
//!         Ok(if request.kind == ApprovalKind::Run && script.starts_with("ls") {
//!             ReviewDecision::Approved
//!         } else {
//!             ReviewDecision::Denied
//!         })
//!     }
//! }
//!
//! #[derive(Default)]
//! struct Counter(AtomicUsize);
//!
//! impl EventSink for Counter {
//!     fn emit(&self, event: ExecEvent) {
//!         if matches!(event, ExecEvent::Begin { .. }) {
//!             self.0.fetch_add(1, Ordering::Relaxed);
//!         }
//!     }
//! }
//!
//! let question = |script: &str, kind| ApprovalRequest {
//!     call_id: "call-1".to_owned(),
//!     session_id: SessionId(1000),
//!     command: vec!["bash".to_owned(), "-lc".to_owned(), script.to_owned()].into(),
//!     cwd: std::env::temp_dir(),
//!     kind,
//!     reason: None,
//!     warnings: Vec::new(),
//!     prefix_offer: None,
//!     denial: None,
//! };
//! let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! let approver = ListingsOnly;
//! let yes = runtime.block_on(approver.request_approval(question("ls -la", ApprovalKind::Run)))?;
//! let no = runtime.block_on(approver.request_approval(question("rm -rf /", ApprovalKind::Run)))?;
//! assert_eq!((yes, no), (ReviewDecision::Approved, ReviewDecision::Denied));
//!
//! let counter = Counter::default();
//! let command = vec!["bash".to_owned(), "-lc".to_owned(), "ls -la".to_owned()];
//! counter.emit(ExecEvent::Begin {
//!     call_id: "call-1".to_owned(),
//!     session_id: SessionId(1000),
//!     argv: command.clone(),
//!     command,
//!     cwd: std::env::temp_dir(),
//!     tty: false,
//!     protections: ProtectionReport::unsandboxed("danger-full-access", EscapeReason::FullAccessPolicy),
//! });
//! counter.emit(ExecEvent::End {
//!     call_id: "call-1".to_owned(),
//!     session_id: SessionId(1000),
//!     exit_code: 0,
//!     aggregated_output: String::new(),
//!     duration: std::time::Duration::from_millis(5),
//! });
//! assert_eq!(counter.0.load(Ordering::Relaxed), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod approval;
mod events;
pub mod process;
mod sandbox;

pub use approval::{ApprovalError, ApprovalKind, ApprovalRequest, Approver, NetworkAccessRequest};
pub use events::{EventSink, ExecEvent};
pub use sandbox::{RefusalQuery, Sandbox, SandboxError, SandboxLease, SandboxRequest, SandboxedSpawn};

#[cfg(feature = "mock")]
pub use approval::MockApprover;
#[cfg(feature = "mock")]
pub use events::MockEventSink;
#[cfg(feature = "mock")]
pub use sandbox::MockSandbox;
