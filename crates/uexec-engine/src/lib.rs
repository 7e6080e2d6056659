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
//! - [`Engine`]: the entry point; cheap to clone, `Send + Sync`.
//! - Sessions and their lifecycle: see the `session` module documentation (reserved -> spawning -> live ->
//!   exited -> reaped), and `collect` for when a window ends early (exit, or a PTY waiting for input).
//! - Concurrency: calls on different sessions run in parallel; calls on one session are serialised by a
//!   per-session async mutex held by the call. The store and the session buffers use short `std` mutexes that
//!   are never held across an await; each session has a reader task and a waiter task.
//! - Nothing runs unsandboxed without an explicit, logged decision: the only unsandboxed path takes an
//!   [`uexec_domain::EscapeReason`], which appears in the `Begin` event and the response's protection report.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod api;
mod collect;
mod config;
mod engine;
mod error;
mod known_safe;
mod placement;
mod screen;
mod session;
mod store;
mod trust;
mod utf8;

pub use api::{ExecCommandRequest, ExecResponse, SessionState, SessionSummary, WriteStdinRequest};
pub use config::{EngineConfig, EngineDeps};
pub use engine::Engine;
pub use error::ExecError;
pub use placement::{Placement, SandboxContext, place};
pub use trust::{InWritableRoot, writable_root_holding};
