//! Integration tests of the Linux sandbox: each probe runs in a child process spawned by a minimal test spawner
//! (`std::process::Command` whose `pre_exec` runs the sandbox's child hooks), never in the test runner.
// The sandbox under test exists on Linux only.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod copy_on_write;
mod degraded;
mod filesystem;
mod git;
mod git_budgets;
mod hidden;
mod leftovers;
mod network;
mod planted;
mod process;
mod pty;
mod refusals;
mod template;
mod tool_files;
mod vfork;
