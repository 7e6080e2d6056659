//! The pure core of uexec: value types and rules for sessions, transcripts, limits and policies.
//!
//! Architecture invariant: this crate performs no I/O. It does not read the clock, the environment, the
//! filesystem or a random source, and it depends on no async runtime or syscall crate. Everything that needs the
//! world (time, randomness, which files exist) is passed in as a value, so every rule here is testable with
//! plain unit and property tests.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod approval;
pub mod buffer;
pub mod command;
pub mod denial;
pub mod env;
pub mod escape;
mod exit;
pub mod gitdir;
pub mod ids;
pub mod known_safe;
pub mod limits;
pub mod patch;
mod policy;
mod protection;
pub mod prune;
pub mod question;
pub mod response;
pub mod rules;
mod session;
pub mod startup;
pub mod truncate;

pub use exit::ExitStatus;
pub use policy::{
    ApprovalPolicy, EscapeReason, GitEntry, PROTECTED_SUBDIRS, ReviewDecision, SandboxPermissions,
    SandboxPolicy, WritableRoot,
};
pub use protection::{Protection, ProtectionReport, ProtectionStatus, SandboxKind};
pub use session::SessionId;
