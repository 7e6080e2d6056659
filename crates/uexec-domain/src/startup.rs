//! Login shells and the startup files they read: nothing a sandboxed command wrote runs for a command that a
//! person or the known-safe list let through.
//!
//! Every command runs as `[shell, "-lc", script]` by default: a login shell, which first sources the user's
//! startup files (`~/.bash_profile`, `~/.profile`, `$ZDOTDIR/.zprofile`, ...). When those files lie in a
//! writable root, any earlier sandboxed command could have written them, and sourcing them would run that
//! command's code
//!
//! - outside the sandbox, for a command that runs outside it (an approved escalation, a retry after a denial,
//!   the `danger-full-access` policy), or
//! - without anybody's approval, for a command admitted because it is known-safe (`ls` under `untrusted`).
//!
//! The rule ([`shell_start`]): when any startup file the shell could read lies in a possible writable root
//! (`crate::trust`, the one answer to "could a sandboxed command have written this?"; the caller does the
//! path I/O on the files of [`startup_files`]), a command
//! that may run outside the sandbox or that is known-safe starts its shell **without login** (`-c`, not
//! `-lc`), with `BASH_ENV` and `ENV` removed from its environment and, for zsh (which reads `$ZDOTDIR/.zshenv`
//! even without login), `ZDOTDIR` pointed at `/dev/null` ([`guard_env`]). "May run outside the sandbox" is
//! decided before the first attempt, so the argv a person approves is the argv that runs on every attempt: the
//! `danger-full-access` policy, an escalation request, and the approval policies that retry a denied command
//! outside the sandbox (`untrusted`, `on-failure`).

use std::ffi::OsString;
use std::path::PathBuf;

use crate::policy::{ApprovalPolicy, SandboxPermissions};

/// Startup files, relative to `$HOME`, that bash or sh may read: as a login shell (`.bash_profile`,
/// `.bash_login`, `.profile`) or from one of those (`.bashrc`, commonly sourced by `.bash_profile`).
const HOME_FILES: [&str; 4] = [".bash_profile", ".bash_login", ".profile", ".bashrc"];

/// Startup files, relative to `$ZDOTDIR` (default `$HOME`), that zsh may read.
const ZDOTDIR_FILES: [&str; 5] = [".zshenv", ".zprofile", ".zshrc", ".zlogin", ".zlogout"];

/// Variables naming a file a shell sources without login: bash's `BASH_ENV` (every non-interactive bash) and
/// POSIX `ENV`.
pub const STARTUP_FILE_VARS: [&str; 2] = ["BASH_ENV", "ENV"];

/// Every path whose content (or whose directory) decides what a shell runs before the script, given the
/// command's environment through `var`: `$HOME` itself and its startup files, `$ZDOTDIR` and its zsh files, and
/// the files named by `BASH_ENV` and `ENV`. Relative values are ignored (the shell would resolve them against
/// the working directory, which the caller checks as part of the workspace).
pub fn startup_files(var: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    let absolute = |name: &str| var(name).map(PathBuf::from).filter(|p| p.is_absolute());
    let mut files = Vec::new();
    let home = absolute("HOME");
    if let Some(home) = &home {
        files.push(home.clone());
        files.extend(HOME_FILES.iter().map(|f| home.join(f)));
    }
    if let Some(zdotdir) = absolute("ZDOTDIR").or(home) {
        files.push(zdotdir.clone());
        files.extend(ZDOTDIR_FILES.iter().map(|f| zdotdir.join(f)));
    }
    files.extend(STARTUP_FILE_VARS.iter().filter_map(|name| absolute(name)));
    files
}

/// Everything the start decision depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartInput {
    /// The caller asked for a login shell (`login`, default true).
    pub login_requested: bool,
    /// A startup file (or `$HOME`/`$ZDOTDIR`) lies in a possible writable root (the caller's I/O).
    pub startup_files_writable: bool,
    /// The sandbox policy is `danger-full-access`.
    pub full_access: bool,
    /// What the caller asked for.
    pub permissions: SandboxPermissions,
    /// The approval policy (decides whether a denied command may be retried outside the sandbox).
    pub approval_policy: ApprovalPolicy,
    /// The command is known-safe (`crate::command::ParsedCommand::is_read_only`).
    pub known_safe: bool,
}

/// How the shell of a command starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShellStart {
    /// Start a login shell (`-lc`).
    pub login: bool,
    /// The startup files are not trusted for this command: no login, and [`guard_env`] applies.
    pub guarded: bool,
}

/// The rule of the module documentation.
pub fn shell_start(input: &StartInput) -> ShellStart {
    let may_leave_sandbox = input.full_access
        || input.permissions == SandboxPermissions::RequireEscalated
        || matches!(input.approval_policy, ApprovalPolicy::Untrusted | ApprovalPolicy::OnFailure);
    let guarded = input.startup_files_writable && (may_leave_sandbox || input.known_safe);
    ShellStart { login: input.login_requested && !guarded, guarded }
}

/// `env` for a guarded start of `shell`: `BASH_ENV` and `ENV` removed and, for zsh, `ZDOTDIR=/dev/null` (not a
/// directory, so zsh finds no `.zshenv` there).
pub fn guard_env(env: Vec<(OsString, OsString)>, shell: &str) -> Vec<(OsString, OsString)> {
    let zsh = shell.rsplit('/').next() == Some("zsh");
    let mut env: Vec<_> = env
        .into_iter()
        .filter(|(name, _)| {
            let startup_var = STARTUP_FILE_VARS.iter().any(|v| name == v);
            !(startup_var || (zsh && name == "ZDOTDIR"))
        })
        .collect();
    if zsh {
        env.push(("ZDOTDIR".into(), "/dev/null".into()));
    }
    env
}

/// What a guarded start tells the caller (protection report detail).
pub const GUARDED_DETAIL: &str = "not read: the shell's startup files lie in a writable root, so this command \
                                  runs its shell without login (-c), with BASH_ENV and ENV unset";

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const POLICIES: [ApprovalPolicy; 4] = [
        ApprovalPolicy::Untrusted,
        ApprovalPolicy::OnFailure,
        ApprovalPolicy::OnRequest,
        ApprovalPolicy::Never,
    ];

    fn input(policy: ApprovalPolicy) -> StartInput {
        StartInput {
            login_requested: true,
            startup_files_writable: true,
            full_access: false,
            permissions: SandboxPermissions::UseDefault,
            approval_policy: policy,
            known_safe: false,
        }
    }

    #[test]
    fn trusted_startup_files_keep_the_login_shell_for_everything() {
        for policy in POLICIES {
            for known_safe in [false, true] {
                for full_access in [false, true] {
                    for permissions in [SandboxPermissions::UseDefault, SandboxPermissions::RequireEscalated]
                    {
                        let start = shell_start(&StartInput {
                            startup_files_writable: false,
                            known_safe,
                            full_access,
                            permissions,
                            ..input(policy)
                        });
                        assert_eq!(start, ShellStart { login: true, guarded: false });
                    }
                }
            }
        }
    }

    #[test]
    fn writable_startup_files_never_run_for_escalated_full_access_or_known_safe_commands() {
        for policy in POLICIES {
            let escalated = StartInput { permissions: SandboxPermissions::RequireEscalated, ..input(policy) };
            let full = StartInput { full_access: true, ..input(policy) };
            let safe = StartInput { known_safe: true, ..input(policy) };
            for case in [escalated, full, safe] {
                assert_eq!(shell_start(&case), ShellStart { login: false, guarded: true }, "{case:?}");
                let no_login = StartInput { login_requested: false, ..case };
                assert_eq!(shell_start(&no_login), ShellStart { login: false, guarded: true });
            }
        }
    }

    #[test]
    fn writable_startup_files_and_a_policy_that_retries_outside_the_sandbox_drop_login() {
        for policy in [ApprovalPolicy::Untrusted, ApprovalPolicy::OnFailure] {
            assert_eq!(shell_start(&input(policy)), ShellStart { login: false, guarded: true });
        }
        // A command that stays in the sandbox and needs approval (or is refused) keeps its login shell: what
        // the startup files do stays inside the sandbox, and a person approved the command.
        for policy in [ApprovalPolicy::OnRequest, ApprovalPolicy::Never] {
            assert_eq!(shell_start(&input(policy)), ShellStart { login: true, guarded: false });
        }
    }

    #[test]
    fn startup_files_cover_home_zdotdir_and_the_env_variables() {
        let env = |name: &str| match name {
            "HOME" => Some("/tmp/h".into()),
            "ZDOTDIR" => Some("/tmp/z".into()),
            "BASH_ENV" => Some("/tmp/b".into()),
            "ENV" => Some("relative".into()),
            _ => None,
        };
        let files = startup_files(env);
        for expected in ["/tmp/h", "/tmp/h/.bash_profile", "/tmp/h/.profile", "/tmp/z/.zshenv", "/tmp/b"] {
            assert!(files.contains(&PathBuf::from(expected)), "{expected} not in {files:?}");
        }
        assert!(!files.iter().any(|f| f.ends_with("relative")));
        let home_only = startup_files(|name| (name == "HOME").then(|| "/h".into()));
        assert!(home_only.contains(&PathBuf::from("/h/.zshenv")), "ZDOTDIR defaults to HOME");
        assert!(startup_files(|_| None).is_empty());
    }

    #[test]
    fn guarded_env_unsets_the_startup_variables() {
        let env = vec![
            ("BASH_ENV".into(), "/tmp/x".into()),
            ("ENV".into(), "/tmp/y".into()),
            ("ZDOTDIR".into(), "/tmp/z".into()),
            ("PATH".into(), "/bin".into()),
        ];
        let bash = guard_env(env.clone(), "/bin/bash");
        assert_eq!(bash, vec![("ZDOTDIR".into(), "/tmp/z".into()), ("PATH".into(), "/bin".into())]);
        let zsh = guard_env(env, "zsh");
        assert_eq!(zsh, vec![("PATH".into(), "/bin".into()), ("ZDOTDIR".into(), "/dev/null".into())]);
    }
}
