//! The pure core of uexec: value types and rules for sessions, transcripts, limits and policies.
//!
//! Architecture invariant: this crate performs no I/O. It does not read the clock, the environment, the
//! filesystem or a random source, and it depends on no async runtime or syscall crate. Everything that needs the
//! world (time, randomness, which files exist) is passed in as a value, so every rule here is testable with
//! plain unit and property tests.
#![forbid(unsafe_code)]

pub mod approval;
pub mod buffer;
pub mod command;
pub mod denial;
pub mod env;
pub mod escape;
pub mod exit;
pub mod gitdir;
pub mod ids;
pub mod known_safe;
pub mod limits;
pub mod patch;
pub mod policy;
pub mod protection;
pub mod prune;
pub mod question;
pub mod response;
pub mod rules;
pub mod session;
pub mod startup;
pub mod truncate;

pub use buffer::HeadTailBuffer;
pub use exit::ExitStatus;
pub use ids::IdAllocator;
pub use limits::Limits;
pub use policy::{
    ApprovalPolicy, EscapeReason, ReviewDecision, SandboxPermissions, SandboxPolicy, WritableRoot,
};
pub use protection::{ProtectionReport, SandboxKind};
pub use session::SessionId;
