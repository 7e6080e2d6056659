//! The sandbox plan: what a sandboxed command may touch, decided once for every platform from one narrow view of
//! the host, for each platform's sandbox to render.
//!
//! **For:** reading the host the way the sandbox must ([`HostView`]: `lstat`, `readlink`, a listing and a
//! bounded small-file read, none following a symbolic link a command may have planted; [`RealHost`] on Unix, and
//! `FakeHost` in memory for tests, with the feature `fake`), planning the hidden locations ([`plan_hidden`]) and
//! the protection of the git directories in the writable roots ([`GitPlanner`] into a [`GitPlan`]: entries
//! read-only present or absent with what stands in for them,
//! directories that take no new entry, history pinned, repositories granted to linked worktrees, what is left
//! unprotected and why, and the budgets that fail closed), the writable roots ([`plan_roots`]: canonical,
//! missing, refused) and other tools' files in every writable root ([`plan_tool_files`]), and the report's
//! words for what the plan left out ([`roots_text`], [`entries_text`]). The Linux adapter renders the plan into placeholders
//! and read-only mounts, the macOS adapter into denied paths of a Seatbelt profile; a Windows adapter would
//! render the same value.
//!
//! **Not for:** enforcing anything (it makes no file, mount or profile), nor the rules themselves (which entries
//! of a git directory are protected, when a gitdir may be, the budgets' values: `uexec_domain::gitdir`).
//!
//! Why it has this shape:
//! - One reader of the host. Each protection used to be written three times (the domain's rule, a Linux reader,
//!   a macOS reader mirroring it); here the rule is applied once, through [`HostView`], and what differs by
//!   platform is only what the mechanism can express, named in one enum ([`Mechanism`]).
//! - The plan is a value: the macOS plan is tested on Linux through `FakeHost` (feature `fake`: `/tmp` a link to
//!   `/private/tmp`, as there), and every renderer reads the same decisions.
//! - [`RealHost`] exists on Unix only; the rest type-checks everywhere (`cargo xtask ci` checks it for Windows).
//!
//! # Example
//!
//! ```
//! use uexec_plan::{Entry, GitPlanner, Mechanism, RealHost};
//!
//! // A workspace whose repository has a hook directory and no `info/` yet.
//! let dir = tempfile::tempdir()?;
//! let ws = std::fs::canonicalize(dir.path())?;
//! std::fs::create_dir_all(ws.join(".git/objects"))?;
//! std::fs::create_dir_all(ws.join(".git/hooks"))?;
//! std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n")?;
//! let mut planner = GitPlanner::new(&RealHost, Mechanism::Mounts, vec![(ws.clone(), ws.clone())]);
//! planner.root_git_dir(&ws);
//! let plan = planner.finish();
//! let part = &plan.git_dirs().next().ok_or("no git directory")?.parts[0];
//! // `hooks/` is there and stays read-only; `info/` is not, and gets an empty directory first (mounts).
//! assert!(part.entries.contains(&Entry::Present(ws.join(".git/hooks"))));
//! assert!(part.entries.iter().any(|e| matches!(e, Entry::Absent(p, Some(_)) if p.ends_with("info"))));
//! // Nothing else of the git directory is read-only: `git commit` works.
//! assert!(!plan.paths().any(|p| p == ws.join(".git/index")));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Architecture invariant: depends on `uexec-domain` only (and `rustix` on Unix); reads the host only through
//! [`HostView`], and never writes it.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(any(test, feature = "fake"))]
mod fake;
mod git;
mod gitdirs;
mod hidden;
mod host;
mod planner;
#[cfg(unix)]
mod real;
mod report;
mod roots;
mod tools;

#[cfg(any(test, feature = "fake"))]
pub use fake::FakeHost;
pub use git::{
    git_entry, granted_repository, inspect_git, linked_worktree_repository, protected_gitdir, symlink_note,
};
pub use gitdirs::{
    Closed, CommonDirCheck, Entry, GitDirPart, GitDirPlan, LooseBudget, Mechanism, git_dirs_below, kind_of,
    plan_git_dir,
};
pub use hidden::{HiddenPlan, expand_hidden, plan_hidden};
pub use host::{HostView, Kind, Listing, Meta, Unreached};
pub use planner::{GitItem, GitPlan, GitPlanner};
#[cfg(unix)]
pub use real::RealHost;
pub use report::{entries_text, roots_text};
pub use roots::{InvalidRoot, RootsPlan, plan_roots};
pub use tools::{ToolItem, ToolPlan, ToolRoot, plan_tool_files};
