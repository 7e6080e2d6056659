//! What a command placed outside the sandbox (an approved escalation, a retry after a denial) is checked for
//! before it runs: the planted-program analysis of `uexec_domain::known_safe`, over the facts of
//! `uexec_domain::trust`.
//!
//! The environment loses every `PATH` directory and loader entry a sandboxed command could have written (an
//! active `.venv/bin`, `node_modules/.bin`, an `LD_LIBRARY_PATH` under `/tmp`), so the programs it finds are the
//! ones outside every writable root; what was removed is shown in the question and logged. Anything else the
//! command runs that a sandboxed command could have chosen (a program named by a path in a writable root, git
//! in a repository the sandbox can write) is a *planted reason*: shown in the question, and no earlier approval
//! (of the session, of a prefix) covers the command unless the person was shown that same reason.

use std::ffi::OsString;
use std::path::Path;

use uexec_domain::command::ParsedCommand;
use uexec_domain::known_safe::NotKnownSafe;
use uexec_domain::question::{OutsideQuestion, planted_warning};
use uexec_domain::trust::SandboxWrites;

use crate::known_safe::{Analysis, outside_env, verdict};

/// The checked form of a command about to run outside the sandbox.
#[derive(Debug, Clone)]
pub(crate) struct OutsideRun {
    /// The environment it runs with.
    pub env: Vec<(OsString, OsString)>,
    /// The entries removed from its environment, one line each.
    pub removed: Vec<String>,
    /// What a sandboxed command could have chosen of what it runs, if anything.
    pub planted: Option<NotKnownSafe>,
}

impl OutsideRun {
    /// Check `command` (what will run) in `cwd` with `env`.
    pub(crate) async fn check(
        command: &ParsedCommand,
        cwd: &Path,
        env: &[(OsString, OsString)],
        writes: &SandboxWrites,
    ) -> OutsideRun {
        let (env, removed) = outside_env(cwd, env, writes).await;
        for entry in &removed {
            tracing::warn!(entry, "left out of the environment of a command outside the sandbox");
        }
        let planted = verdict(Analysis::Planted, command, cwd, &env, writes).await.err();
        OutsideRun { env, removed, planted }
    }

    /// The planted reason as shown (the key an earlier approval must match).
    pub(crate) fn planted_text(&self) -> Option<String> {
        self.planted.as_ref().map(ToString::to_string)
    }

    /// The warnings a question about running outside the sandbox carries, each whole: what a sandboxed command
    /// could have chosen, and what was left out of the environment. Empty when there is nothing to say.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(why) = &self.planted {
            out.push(planted_warning(why, OutsideQuestion::Run));
        }
        out.extend(self.removed_text());
        out
    }

    /// The sentence naming what was left out of the environment, if anything was.
    pub(crate) fn removed_text(&self) -> Option<String> {
        (!self.removed.is_empty()).then(|| {
            format!(
                "Left out of its environment because sandboxed commands can write them: {}.",
                self.removed.join("; ")
            )
        })
    }
}
