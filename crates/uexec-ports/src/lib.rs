//! The ports of uexec: the traits the engine needs from the world, and nothing else.
//!
//! The engine (sessions, yield windows, approvals, retry) is written against these traits only; adapters
//! implement them (`uexec-pty` the process spawner, `uexec-sandbox-linux` and `uexec-sandbox-macos` the
//! sandbox, the app the approver and the event sink). Tests swap any of them for a `mockall` mock (feature
//! `mock`).
//!
//! Why the traits have this shape:
//! - [`Approver`] is async because the answer comes from a person, through whatever channel the app has (an MCP
//!   elicitation, a terminal prompt); it returns a decision, never a side effect.
//! - [`Sandbox`] does not spawn. It *transforms* a [`SpawnRequest`] into a [`SandboxedSpawn`]: a rewritten argv
//!   (macOS wraps the command in `sandbox-exec`) and/or a [`ChildSetup`] hook run in the child between fork and
//!   exec (Linux restricts itself there). Keeping spawning out of the sandbox means one process adapter serves
//!   every sandbox, and a sandbox is testable without processes.
//! - [`ProcessSpawner`] returns the two halves of a process separately: an [`OutputStream`] that one reader task
//!   owns (`&mut self`, so no lock is held while waiting for output) and a [`ProcessControl`] shared by everyone
//!   else (write, resize, signal, kill, wait).
//! - [`EventSink`] is synchronous and must not block: events are facts to record (audit log, UI), not questions.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod approval;
mod events;
pub mod process;
mod sandbox;

pub use approval::{ApprovalError, ApprovalKind, ApprovalRequest, Approver};
pub use events::{EventSink, ExecEvent};
pub use sandbox::{Sandbox, SandboxError, SandboxRequest, SandboxedSpawn};

#[cfg(feature = "mock")]
pub use approval::MockApprover;
#[cfg(feature = "mock")]
pub use events::MockEventSink;
#[cfg(feature = "mock")]
pub use sandbox::MockSandbox;
