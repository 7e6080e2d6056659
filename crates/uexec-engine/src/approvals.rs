//! What a person decided for the session, with one owner: the commands approved for the session (each with
//! what the approval covers), the prefixes approved for a directory, and the hosts off the domain allowlist a
//! person allowed or refused. The approval stage (`crate::engine::approve`) asks and consults; this module
//! only keeps, and answers "does a remembered decision cover this?".

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use uexec_domain::SandboxPermissions;
use uexec_domain::approval::ApprovalKey;

use crate::trust::repository_of;

/// What a session approval of a command covers. A question shows one of these, and an approval of it covers
/// that and nothing else: approving the run of a command never covers its rerun outside the sandbox, and the
/// other way round.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Covers {
    /// Runs of the command, placed as the question said, while what a sandboxed command could have planted in
    /// it is what the question showed (`None`: nothing could have been).
    Run {
        /// The planted reason the question showed.
        planted: Option<String>,
    },
    /// Reruns of the command outside the sandbox after the sandbox blocked it, while what could have been
    /// planted is what the retry question showed.
    Retry {
        /// The planted reason the question showed.
        planted: Option<String>,
    },
}

impl Covers {
    /// The planted reason the question showed.
    pub(crate) fn planted(&self) -> Option<&str> {
        match self {
            Covers::Run { planted } | Covers::Retry { planted } => planted.as_deref(),
        }
    }
}

/// A prefix a person approved for the session: it admits commands with the same sandbox permissions, run in
/// the same working directory and repository, with the same planted reason (if any) as when it was shown.
#[derive(Debug, Clone)]
struct PrefixApproval {
    permissions: SandboxPermissions,
    prefix: Vec<String>,
    cwd: PathBuf,
    repository: Option<PathBuf>,
    planted: Option<String>,
}

/// Everything a person decided for the session.
#[derive(Debug, Default)]
pub(crate) struct Approvals {
    /// Commands approved for the session, with what each approval covers.
    commands: Mutex<HashSet<(ApprovalKey, Covers)>>,
    /// Prefixes approved for the session.
    prefixes: Mutex<Vec<PrefixApproval>>,
    /// Hosts off the domain allowlist a person allowed (`true`) or refused (`false`).
    hosts: Mutex<HashMap<String, bool>>,
    /// One question about a host at a time (connections to one host come in bursts).
    asking_hosts: tokio::sync::Mutex<()>,
}

impl Approvals {
    /// Whether a person approved `key` for the session with a question that showed `covers`.
    pub(crate) fn covers(&self, key: &ApprovalKey, covers: &Covers) -> bool {
        self.commands.lock().unwrap_or_else(PoisonError::into_inner).contains(&(key.clone(), covers.clone()))
    }

    /// A person approved `key` for the session with a question that showed `covers`.
    pub(crate) fn remember(&self, key: &ApprovalKey, covers: Covers) {
        self.commands.lock().unwrap_or_else(PoisonError::into_inner).insert((key.clone(), covers));
    }

    /// A person approved `prefix` for the session, for commands with `permissions` run in `cwd`, shown the
    /// planted reason `planted`.
    pub(crate) fn remember_prefix(
        &self,
        permissions: SandboxPermissions,
        prefix: Vec<String>,
        cwd: PathBuf,
        planted: Option<String>,
    ) {
        tracing::info!(?prefix, cwd = %cwd.display(), "a person approved a command prefix for the session");
        let repository = repository_of(&cwd);
        self.prefixes.lock().unwrap_or_else(PoisonError::into_inner).push(PrefixApproval {
            permissions,
            prefix,
            cwd,
            repository,
            planted,
        });
    }

    /// The prefixes approved for commands with `permissions` run in `cwd` (and its repository), shown the
    /// planted reason `planted`.
    pub(crate) fn prefixes_for(
        &self,
        cwd: &Path,
        permissions: SandboxPermissions,
        planted: Option<&str>,
    ) -> Vec<Vec<String>> {
        let candidates: Vec<PrefixApproval> = {
            let prefixes = self.prefixes.lock().unwrap_or_else(PoisonError::into_inner);
            prefixes
                .iter()
                .filter(|p| p.permissions == permissions && p.cwd == cwd && p.planted.as_deref() == planted)
                .cloned()
                .collect()
        };
        if candidates.is_empty() {
            return Vec::new();
        }
        // A prefix given in one repository says nothing about another (looked up only when one matched).
        let repository = repository_of(cwd);
        candidates.into_iter().filter(|p| p.repository == repository).map(|p| p.prefix).collect()
    }

    /// What a person answered about `host` this session.
    pub(crate) fn host(&self, host: &str) -> Option<bool> {
        self.hosts.lock().unwrap_or_else(PoisonError::into_inner).get(host).copied()
    }

    /// A person allowed (`true`) or refused `host` for the session.
    pub(crate) fn remember_host(&self, host: &str, allowed: bool) {
        self.hosts.lock().unwrap_or_else(PoisonError::into_inner).insert(host.to_owned(), allowed);
    }

    /// Held while a question about a host is out.
    pub(crate) async fn one_host_question(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.asking_hosts.lock().await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use uexec_domain::command::ParsedCommand;

    fn key(cmd: &str) -> ApprovalKey {
        let command = ParsedCommand::new(vec!["bash".into(), "-lc".into(), cmd.into()]);
        ApprovalKey::new(&command, Path::new("/w"), false, SandboxPermissions::UseDefault)
    }

    /// An approval covers what its question showed: a run never covers a retry and the other way round, and a
    /// different planted reason is a different question.
    #[test]
    fn an_approval_covers_exactly_what_its_question_showed() {
        let approvals = Approvals::default();
        let run = Covers::Run { planted: None };
        let retry = Covers::Retry { planted: None };
        let planted = Covers::Run { planted: Some("PATH entry /w/bin".into()) };
        approvals.remember(&key("make"), run.clone());
        assert!(approvals.covers(&key("make"), &run));
        assert!(!approvals.covers(&key("make"), &retry));
        assert!(!approvals.covers(&key("make"), &planted));
        assert!(!approvals.covers(&key("make test"), &run));
        approvals.remember(&key("make"), retry.clone());
        assert!(approvals.covers(&key("make"), &retry));
        assert_eq!(planted.planted(), Some("PATH entry /w/bin"));
    }

    #[test]
    fn a_prefix_is_for_its_permissions_directory_and_planted_reason() {
        let approvals = Approvals::default();
        let cwd = std::env::temp_dir();
        approvals.remember_prefix(SandboxPermissions::UseDefault, vec!["cargo".into()], cwd.clone(), None);
        assert_eq!(approvals.prefixes_for(&cwd, SandboxPermissions::UseDefault, None), vec![vec!["cargo"]]);
        assert!(approvals.prefixes_for(&cwd, SandboxPermissions::RequireEscalated, None).is_empty());
        assert!(approvals.prefixes_for(&cwd, SandboxPermissions::UseDefault, Some("x")).is_empty());
        assert!(approvals.prefixes_for(&cwd.join("sub"), SandboxPermissions::UseDefault, None).is_empty());
    }

    #[test]
    fn a_host_answer_is_remembered() {
        let approvals = Approvals::default();
        assert_eq!(approvals.host("pypi.org"), None);
        approvals.remember_host("pypi.org", true);
        approvals.remember_host("evil.example", false);
        assert_eq!(approvals.host("pypi.org"), Some(true));
        assert_eq!(approvals.host("evil.example"), Some(false));
    }
}
