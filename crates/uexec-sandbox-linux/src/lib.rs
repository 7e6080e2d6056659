//! Linux sandbox adapter for uexec: Landlock, seccomp and a private read-only mount namespace, applied to the
//! child between fork and exec; fail-closed, with a report of what is enforced.
//!
//! Why it has this shape:
//! - The [`uexec_ports::Sandbox`] port returns a spawn request plus a report; the work in the child is a
//!   [`uexec_ports::process::ChildSetup`] hook, because the spawner owns fork and exec. Everything that allocates (paths,
//!   the Landlock ruleset file descriptor, the BPF programs, C strings for the mounts) is built in `prepare`, in
//!   the parent; the hook only issues raw system calls on that data (see `child.rs` for the order).
//! - Three mechanisms, each covering what the others cannot: Landlock (which paths may be written; signal and
//!   abstract-socket scoping), a private mount namespace (read-only mounts outside the writable roots, so file
//!   metadata cannot change either, and read-only bind mounts over `.git` and `.uexec`, which Landlock, being
//!   allow-only, cannot exempt from a writable root), and seccomp (network sockets, ptrace, io_uring, mounts,
//!   namespaces, keystroke injection, ...).
//! - Fail closed: [`KernelSupport`] says what the kernel offers; the plan and the report follow from it; a report
//!   with anything `partial` or `off` refuses to run unless the request accepts degradation. The support is
//!   injectable, so the refusal is tested on a machine that has everything.
//!
//! `docs/sandbox.md` has the ordered list of operations, the trust model, and what is not protected.
//!
//! Architecture invariant: depends on `uexec-domain` and `uexec-ports` only; never spawns a process itself.
#![deny(missing_docs)]
#![cfg(target_os = "linux")]
#![deny(unsafe_code)]

mod child;
mod landlock_rules;
mod layout;
mod plan;
mod sandbox;
mod seccomp;
mod support;
mod sys;

pub use layout::git_entry;
pub use plan::DEGRADED_SETTING;
pub use sandbox::LinuxSandbox;
pub use support::{Availability, KernelSupport, MountNamespace};
