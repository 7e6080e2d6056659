//! The pure core of uexec: value types and rules for sessions, transcripts, limits and policies.
//!
//! **For:** anything that decides without touching the world. Session ids and their allocator, the head/tail
//! output buffer and the truncation format a model reads, yield-window clamping, the response text, pruning,
//! policy values (approval policy, sandbox policy and its writable roots, escape reasons), the protection report,
//! the known-safe command classifier, the sandbox-denial heuristic, environment building, command rules, the
//! text of an approval question, and the `apply_patch` format. A tool that wants the same rules as uexec (an
//! agent host that formats output the same way, a reviewer of approval questions) can use this crate alone.
//!
//! **Not for:** running anything. This crate performs no I/O: it does not read the clock, the environment, the
//! filesystem or a random source, and it depends on no async runtime or syscall crate. Everything that needs the
//! world (time, randomness, which files exist) is passed in as a value, so every rule here is testable with
//! plain unit and property tests. Spawning, sandboxing and asking a person are the ports' business
//! (`uexec-ports`), done by adapters.
//!
//! Items live in their module (`uexec_domain::buffer::HeadTailBuffer`, `uexec_domain::truncate::truncate_output`),
//! except the value types every layer passes around, which are at the root (`SandboxPolicy`, `SessionId`,
//! `ExitStatus`, `ProtectionReport`, ...).
//!
//! # Example
//!
//! ```
//! use std::path::Path;
//!
//! use uexec_domain::buffer::HeadTailBuffer;
//! use uexec_domain::command::ParsedCommand;
//! use uexec_domain::truncate::truncate_output;
//! use uexec_domain::{GitEntry, SandboxPolicy};
//!
//! // A session's output buffer keeps the head and the tail of what a command printed, within a fixed cap.
//! let mut buffer = HeadTailBuffer::new(16);
//! buffer.push(b"0123456789abcdefghijklmnopqrstuvwxyz");
//! assert_eq!(buffer.len(), 16);
//! assert_eq!(buffer.dropped_bytes(), 20);
//!
//! // A response's output is cut to its token budget (4 bytes a token) in the format a model reads.
//! let output = "line\n".repeat(1000);
//! let cut = truncate_output(&output, 10);
//! assert!(cut.truncated);
//! assert_eq!(cut.original_token_count, 1250);
//! assert!(cut.text.starts_with("Total output lines: 1000"));
//!
//! // A command is parsed once; read-only commands are recognised from their words alone.
//! let parsed = |line: &str| ParsedCommand::new(line.split(' ').map(String::from).collect());
//! assert!(parsed("ls -la").is_read_only());
//! assert!(!parsed("rm -rf target").is_read_only());
//!
//! // Policies are plain values. The caller answers the filesystem question (what is each root's `.git`?).
//! let policy = SandboxPolicy::default();
//! let roots = policy.writable_roots(Path::new("/work/repo"), None, |_| GitEntry::Directory);
//! assert!(roots[0].is_path_writable(Path::new("/work/repo/src/main.rs")));
//! assert!(!roots[0].is_path_writable(Path::new("/work/repo/.git/config")));
//! assert!(!policy.has_network_access());
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod approval;
pub mod buffer;
pub mod caches;
pub mod client_wait;
pub mod command;
pub mod denial;
pub mod env;
pub mod escape;
mod exit;
pub mod gitdir;
pub mod hidden;
pub mod hidden_env;
pub mod ids;
pub mod known_safe;
pub mod leftovers;
pub mod limits;
pub mod network;
pub mod patch;
mod policy;
mod protection;
pub mod prune;
pub mod question;
pub mod quote;
pub mod response;
pub mod rules;
pub mod runs;
mod session;
pub mod snapshot;
pub mod startup;
pub mod terminal_text;
pub mod tool_files;
pub mod truncate;
pub mod trust;
mod visible;

pub use exit::ExitStatus;
pub use policy::{
    ApprovalPolicy, EscapeReason, GitEntry, PROTECTED_SUBDIRS, ReviewDecision, SandboxPermissions,
    SandboxPolicy, WritableRoot,
};
pub use protection::{Protection, ProtectionReport, ProtectionStatus, SandboxKind};
pub use session::SessionId;
