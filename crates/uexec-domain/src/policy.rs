//! Policy values: when to ask a person (approval policy), what the sandbox allows (sandbox policy), and the
//! explicit reasons for which a command may run outside the sandbox.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// When a command needs a person's approval (spec A6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// Only known-safe read-only commands run without asking.
    Untrusted,
    /// Run sandboxed; ask before retrying outside the sandbox.
    OnFailure,
    /// Ask only when the caller requests escalation (the default).
    #[default]
    OnRequest,
    /// Never ask; what would need asking is refused.
    Never,
}

impl ApprovalPolicy {
    /// The spelling used on the command line, in config files and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Untrusted => "untrusted",
            ApprovalPolicy::OnFailure => "on-failure",
            ApprovalPolicy::OnRequest => "on-request",
            ApprovalPolicy::Never => "never",
        }
    }
}

/// What the caller asks for one command (the `sandbox_permissions` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxPermissions {
    /// Run under the configured sandbox policy.
    #[default]
    UseDefault,
    /// Ask to run outside the sandbox.
    RequireEscalated,
}

/// A person's answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewDecision {
    /// Run it, this once (in the sandbox, when it runs in one: a rerun without the sandbox after a denial asks
    /// again).
    Approved,
    /// Run it, this once, in the sandbox; and if the sandbox blocks it (a refusal the sandbox itself recorded),
    /// run it again WITHOUT the sandbox without asking again. Offered for a sandboxed run under `untrusted` and
    /// `on-failure`, the policies that retry.
    ApprovedWithRetry,
    /// Run it, and do not ask again for the same command in this session.
    ApprovedForSession,
    /// Run it, and do not ask again in this session for commands starting with the prefix the question
    /// offered (Codex's `prefix_rule`); without an offered prefix, the same as [`ReviewDecision::Approved`].
    ApprovedPrefixForSession,
    /// Do not run it.
    Denied,
    /// Do not run it, and stop the current task.
    Abort,
}

impl ReviewDecision {
    /// True for both kinds of approval.
    pub fn is_approved(self) -> bool {
        matches!(
            self,
            ReviewDecision::Approved
                | ReviewDecision::ApprovedWithRetry
                | ReviewDecision::ApprovedForSession
                | ReviewDecision::ApprovedPrefixForSession
        )
    }
}

/// A directory the sandbox lets a command write to, minus the subpaths that stay read-only inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WritableRoot {
    /// The writable directory (absolute).
    pub root: PathBuf,
    /// Paths under `root` that stay read-only (`.git`, the gitdir a `.git` file points to, `.uexec`). The macOS
    /// profile keeps each whole; the Linux sandbox keeps a git directory writable but for
    /// [`crate::gitdir::protected_git_entries`] (what git runs or reads as configuration), so
    /// [`WritableRoot::is_path_writable`] is the stricter, whole-directory answer.
    pub read_only_subpaths: Vec<PathBuf>,
}

impl WritableRoot {
    /// True when `path` is under `root` and not under any read-only subpath. Pure path arithmetic: no symlink
    /// is resolved, so callers pass canonical paths.
    pub fn is_path_writable(&self, path: &Path) -> bool {
        path.starts_with(&self.root) && !self.read_only_subpaths.iter().any(|ro| path.starts_with(ro))
    }
}

/// What a sandboxed command may touch (spec A6).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum SandboxPolicy {
    /// Read everything, write nothing (but `/dev/null` and the terminal).
    ReadOnly {
        /// Allow network access.
        #[serde(default)]
        network_access: bool,
    },
    /// Read everything, write only under the writable roots.
    WorkspaceWrite {
        /// Roots configured beyond the command's cwd, `/tmp` and `$TMPDIR`.
        #[serde(default)]
        writable_roots: Vec<PathBuf>,
        /// Allow network access.
        #[serde(default)]
        network_access: bool,
        /// Leave `/tmp` out of the writable roots.
        #[serde(default)]
        exclude_slash_tmp: bool,
        /// Leave `$TMPDIR` out of the writable roots.
        #[serde(default)]
        exclude_tmpdir_env_var: bool,
    },
    /// No sandbox at all.
    DangerFullAccess,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        SandboxPolicy::WorkspaceWrite {
            writable_roots: Vec::new(),
            network_access: false,
            exclude_slash_tmp: false,
            exclude_tmpdir_env_var: false,
        }
    }
}

/// Names of the subdirectories that stay read-only inside every writable root.
pub const PROTECTED_SUBDIRS: [&str; 2] = [".git", ".uexec"];

/// What the caller's filesystem says about a root's `.git` entry, for [`SandboxPolicy::writable_roots`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitEntry {
    /// No `.git` entry.
    Absent,
    /// `.git` is a directory.
    Directory,
    /// `.git` is a file pointing at this gitdir (already resolved to an absolute path).
    File {
        /// The gitdir the `gitdir:` line names.
        gitdir: PathBuf,
    },
}

impl SandboxPolicy {
    /// The policy's spelling on the command line and in config files.
    pub fn mode_str(&self) -> &'static str {
        match self {
            SandboxPolicy::ReadOnly { .. } => "read-only",
            SandboxPolicy::WorkspaceWrite { .. } => "workspace-write",
            SandboxPolicy::DangerFullAccess => "danger-full-access",
        }
    }

    /// True when the policy lets commands use the network.
    pub fn has_network_access(&self) -> bool {
        match self {
            SandboxPolicy::ReadOnly { network_access } => *network_access,
            SandboxPolicy::WorkspaceWrite { network_access, .. } => *network_access,
            SandboxPolicy::DangerFullAccess => true,
        }
    }

    /// True when the policy needs no sandbox at all.
    pub fn is_unrestricted(&self) -> bool {
        matches!(self, SandboxPolicy::DangerFullAccess)
    }

    /// The writable roots for a command running in `cwd`: the configured roots, `cwd`, `/tmp` and `tmpdir`
    /// (the value of `$TMPDIR`, if any), each with its read-only subpaths. `git_entry` tells, for a root, what its
    /// `.git` entry is; the caller does that I/O. Roots are deduplicated in order; empty for read-only and
    /// full-access policies.
    pub fn writable_roots(
        &self,
        cwd: &Path,
        tmpdir: Option<&Path>,
        mut git_entry: impl FnMut(&Path) -> GitEntry,
    ) -> Vec<WritableRoot> {
        let SandboxPolicy::WorkspaceWrite {
            writable_roots, exclude_slash_tmp, exclude_tmpdir_env_var, ..
        } = self
        else {
            return Vec::new();
        };
        let mut roots: Vec<PathBuf> = writable_roots.clone();
        roots.push(cwd.to_path_buf());
        if !exclude_slash_tmp {
            roots.push(PathBuf::from("/tmp"));
        }
        if !exclude_tmpdir_env_var && let Some(tmpdir) = tmpdir.filter(|t| t.is_absolute()) {
            roots.push(tmpdir.to_path_buf());
        }
        let mut seen: Vec<PathBuf> = Vec::new();
        for root in roots {
            if !seen.contains(&root) {
                seen.push(root);
            }
        }
        seen.into_iter()
            .map(|root| {
                let mut read_only_subpaths = Vec::new();
                for name in PROTECTED_SUBDIRS {
                    read_only_subpaths.push(root.join(name));
                }
                if let GitEntry::File { gitdir } = git_entry(&root)
                    && !read_only_subpaths.contains(&gitdir)
                {
                    read_only_subpaths.push(gitdir);
                }
                WritableRoot { root, read_only_subpaths }
            })
            .collect()
    }
}

/// Why a command runs outside the sandbox. Every unsandboxed run carries one of these, so every escape is
/// explicit, searchable and logged (the cap-std habit: escaping takes a token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscapeReason {
    /// The sandbox policy is `danger-full-access`.
    FullAccessPolicy,
    /// The caller asked for escalation and a person approved it.
    ApprovedEscalation,
    /// The sandbox denied the command and the policy allowed a retry outside it.
    RetryAfterDenial,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_roots_include_cwd_tmp_and_tmpdir_with_protected_subpaths() {
        let policy = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![PathBuf::from("/data")],
            network_access: false,
            exclude_slash_tmp: false,
            exclude_tmpdir_env_var: false,
        };
        let roots = policy.writable_roots(Path::new("/work/repo"), Some(Path::new("/var/tmp")), |root| {
            if root == Path::new("/work/repo") {
                GitEntry::File { gitdir: PathBuf::from("/work/main/.git/worktrees/repo") }
            } else {
                GitEntry::Absent
            }
        });
        let names: Vec<_> = roots.iter().map(|r| r.root.clone()).collect();
        assert_eq!(
            names,
            vec![
                PathBuf::from("/data"),
                PathBuf::from("/work/repo"),
                PathBuf::from("/tmp"),
                PathBuf::from("/var/tmp")
            ]
        );
        let repo = &roots[1];
        assert!(repo.read_only_subpaths.contains(&PathBuf::from("/work/repo/.git")));
        assert!(repo.read_only_subpaths.contains(&PathBuf::from("/work/repo/.uexec")));
        assert!(repo.read_only_subpaths.contains(&PathBuf::from("/work/main/.git/worktrees/repo")));
        assert!(repo.is_path_writable(Path::new("/work/repo/src/main.rs")));
        assert!(!repo.is_path_writable(Path::new("/work/repo/.git/config")));
        assert!(!repo.is_path_writable(Path::new("/work/other")));
    }

    #[test]
    fn read_only_and_full_access_have_no_writable_roots() {
        let cwd = Path::new("/w");
        assert!(
            SandboxPolicy::ReadOnly { network_access: false }
                .writable_roots(cwd, None, |_| GitEntry::Absent)
                .is_empty()
        );
        assert!(SandboxPolicy::DangerFullAccess.writable_roots(cwd, None, |_| GitEntry::Absent).is_empty());
    }

    #[test]
    fn duplicate_roots_and_relative_tmpdir_are_dropped() {
        let policy = SandboxPolicy::default();
        let roots =
            policy.writable_roots(Path::new("/tmp"), Some(Path::new("relative")), |_| GitEntry::Absent);
        assert_eq!(roots.len(), 1);
        assert_eq!(roots[0].root, PathBuf::from("/tmp"));
    }
}
