//! `uexec sandbox-report` (what this machine enforces for a policy) and `uexec sandbox-profile` (the Seatbelt
//! profile and command line the macOS sandbox would use, generated on any platform).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;
use uexec_domain::GitEntry;
use uexec_domain::ProtectionStatus;
use uexec_domain::{EscapeReason, ProtectionReport, SandboxPolicy, WritableRoot};

use crate::cli::{ProfileArgs, ProfilePlatform, ReportArgs};
use crate::settings::{ProcessContext, Settings};

/// `uexec sandbox-report`.
pub fn sandbox_report(args: &ReportArgs) -> Result<ExitCode> {
    let settings = Settings::resolve(&args.policy, None, &ProcessContext::current()?)?;
    let sandbox = crate::platform::sandbox_with(&crate::proxy::prepare(&settings, None, None)?.0);
    let report = if settings.sandbox_policy.is_unrestricted() {
        ProtectionReport::unsandboxed(settings.sandbox_policy.mode_str(), EscapeReason::FullAccessPolicy)
    } else {
        sandbox.report(&settings.sandbox_policy)
    };
    let roots = settings.sandbox_policy.writable_roots(&settings.cwd, settings.tmpdir.as_deref(), git_entry);
    let machine = crate::platform::machine_support();
    let text = if args.json {
        let value = json!({
            "platform": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
            "mechanism": sandbox.kind(),
            "machine": machine.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect::<serde_json::Map<_, _>>(),
            "workspace": settings.cwd,
            "policy": settings.sandbox_policy,
            "approval_policy": settings.approval_policy.as_str(),
            "allow_degraded_sandbox": settings.allow_degraded_sandbox,
            "writable_roots": roots,
            "linked_worktree_repositories": linked_worktree_lines(&roots),
            "git_directory_protection": git_directory_protection(),
            "report": report,
            "enforced": verdict(&settings, &report) == Verdict::Enforced,
            "verdict": verdict(&settings, &report).as_str(),
            "config_file": settings.config_file,
        });
        serde_json::to_string_pretty(&value).context("cannot render the report")? + "\n"
    } else {
        human_report(&settings, sandbox.kind().as_str(), &machine, &roots, &report)
    };
    write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Whether commands would run, and how protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Every protection the policy asks for is enforced.
    Enforced,
    /// The policy runs without a sandbox (danger-full-access).
    Unsandboxed,
    /// Some protection is partial or off; commands run only with allow_degraded_sandbox.
    DegradedAllowed,
    /// Some protection is partial or off; commands are refused.
    Refused,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Enforced => "enforced",
            Verdict::Unsandboxed => "unsandboxed",
            Verdict::DegradedAllowed => "degraded-allowed",
            Verdict::Refused => "refused",
        }
    }
}

fn verdict(settings: &Settings, report: &ProtectionReport) -> Verdict {
    if settings.sandbox_policy.is_unrestricted() {
        Verdict::Unsandboxed
    } else if !report.is_degraded() {
        Verdict::Enforced
    } else if settings.allow_degraded_sandbox {
        Verdict::DegradedAllowed
    } else {
        Verdict::Refused
    }
}

fn human_report(
    settings: &Settings,
    mechanism: &str,
    machine: &[(String, String)],
    roots: &[WritableRoot],
    report: &ProtectionReport,
) -> String {
    let mut out = String::new();
    let policy = &settings.sandbox_policy;
    let _ = writeln!(out, "Platform:        {} ({})", std::env::consts::OS, std::env::consts::ARCH);
    let _ = writeln!(out, "Sandbox:         {mechanism}");
    for (name, state) in machine {
        let _ = writeln!(out, "  {name}: {state}");
    }
    let network = match &settings.network {
        uexec_domain::network::NetworkPolicy::Proxied(rules) if !policy.is_unrestricted() => {
            format!("through uexec's proxy to {}", crate::proxy::describe(rules))
        }
        _ if policy.has_network_access() => "allowed".to_owned(),
        _ => "blocked".to_owned(),
    };
    let _ = writeln!(out, "Policy:          {}, network {network}", policy.mode_str());
    let _ = writeln!(out, "Approval policy: {}", settings.approval_policy.as_str());
    let _ = writeln!(out, "Workspace:       {}", settings.cwd.display());
    if let Some(config) = &settings.config_file {
        let _ = writeln!(out, "Config file:     {}", config.display());
    }
    match policy {
        SandboxPolicy::WorkspaceWrite { .. } => {
            let _ = writeln!(out, "\nWritable (for commands run in the workspace):");
            for root in roots {
                let ro: Vec<String> =
                    root.read_only_subpaths.iter().map(|p| p.display().to_string()).collect();
                let _ = writeln!(out, "  {}  (read-only inside: {})", root.root.display(), ro.join(", "));
            }
            for line in linked_worktree_lines(roots) {
                let _ = writeln!(out, "  {line}");
            }
            let _ = writeln!(out, "  /dev/null");
            let _ = writeln!(
                out,
                "  (.git and a gitdir: a file or symlink whole; as a git directory {})",
                git_directory_protection()
            );
        }
        SandboxPolicy::ReadOnly { .. } => {
            let _ = writeln!(out, "\nWritable: nothing but /dev/null and the terminal");
        }
        SandboxPolicy::DangerFullAccess => {
            let _ = writeln!(out, "\nWritable: everything the user can write (no sandbox)");
        }
    }
    if !report.protections.is_empty() {
        let _ = writeln!(out, "\nProtections:");
        let width = report.protections.iter().map(|p| p.name.len()).max().unwrap_or(0);
        for p in &report.protections {
            let status = p.status.to_string();
            let _ = write!(out, "  {:width$}  {status:13}", p.name);
            if !p.detail.is_empty() {
                let _ = write!(out, "  {}", p.detail);
            }
            out.push('\n');
        }
    }
    let _ = writeln!(out);
    let message = match verdict(settings, report) {
        Verdict::Enforced => "Verdict: every protection of this policy is enforced here.".to_owned(),
        Verdict::Unsandboxed => "Verdict: no sandbox; commands run with the user's full access.".to_owned(),
        Verdict::DegradedAllowed => format!(
            "Verdict: only partly enforceable here ({}); commands run anyway because degraded protection is allowed.",
            weak_protections(report)
        ),
        Verdict::Refused => format!(
            "Verdict: cannot be fully enforced here ({}); commands are refused (nothing runs) unless \
             --allow-degraded-sandbox (or allow_degraded_sandbox = true) accepts it.",
            weak_protections(report)
        ),
    };
    let _ = writeln!(out, "{message}");
    out
}

fn weak_protections(report: &ProtectionReport) -> String {
    report
        .protections
        .iter()
        .filter(|p| matches!(p.status, ProtectionStatus::Partial | ProtectionStatus::Off))
        .map(|p| format!("{}: {}", p.name, p.status))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What stays read-only in a git directory listed among `read_only_subpaths`: what git runs or reads as
/// configuration (on Linux covered by placeholders when absent; on macOS denied by path, and the history
/// present, which the Linux report gives among its protections).
fn git_directory_protection() -> String {
    #[cfg(target_os = "linux")]
    {
        uexec_domain::gitdir::protected_git_entries_text()
    }
    #[cfg(not(target_os = "linux"))]
    {
        use uexec_domain::gitdir::{GitDirKind, protected_git_entries};
        let names = |kind| protected_git_entries(kind).iter().map(|e| e.name).collect::<Vec<_>>().join(", ");
        format!(
            "only {} (and {} of worktrees/<id>, or of any git directory with a commondir file; modules/<name> \
             like a repository, and the common dir a linked worktree's commondir names when it lies in the same \
             root) stay read-only, denied by path whether present or not, the rest (index, objects, refs, logs, \
             HEAD) is writable; nothing can be created directly in modules/ nor in the directories of submodule \
             names in it (the submodule git dirs present stay writable); history: {}",
            names(GitDirKind::Repository),
            names(GitDirKind::LinkedWorktree),
            uexec_domain::gitdir::history_text()
        )
    }
}

/// The report's lines on the repositories of linked worktrees among `roots` (see "Git inside the sandbox" in
/// `docs/sandbox.md`): the sandbox's own decision for each.
fn linked_worktree_lines(roots: &[WritableRoot]) -> Vec<String> {
    let all: Vec<std::path::PathBuf> = roots.iter().map(|r| r.root.clone()).collect();
    roots
        .iter()
        .filter_map(|root| {
            let decision = uexec_plan::linked_worktree_repository(&uexec_plan::RealHost, &root.root, &all)?;
            Some(match decision {
                Ok(repository) => format!(
                    "{}  (the repository of the linked worktree {}: writable for git, protected as a root's .git, \
                     the HEAD and index of its other checkouts read-only)",
                    repository.display(),
                    root.root.display()
                ),
                Err(why) => format!(
                    "(the repository of the linked worktree {} stays read-only: {why}; git there can read, not \
                     commit)",
                    root.root.display()
                ),
            })
        })
        .collect()
}

/// What a root's `.git` entry is (a directory, a `gitdir:` file, or nothing), read the way this platform's sandbox
/// reads it (bounded, without blocking, without following a planted link).
pub fn git_entry(root: &Path) -> GitEntry {
    uexec_plan::git_entry(&uexec_plan::RealHost, root)
}

/// The port shown for the proxy in `uexec sandbox-profile` (a server binds its own when it starts).
const PROXY_PORT_PLACEHOLDER: u16 = 0;

/// `uexec sandbox-profile`.
pub fn sandbox_profile(args: &ProfileArgs) -> Result<ExitCode> {
    let settings = Settings::resolve(&args.policy, None, &ProcessContext::current()?)?;
    match args.platform {
        ProfilePlatform::Macos => {
            let argv: Vec<OsString> = if args.command.is_empty() {
                vec![settings.shell.clone().into(), "-lc".into(), "true".into()]
            } else {
                args.command.iter().map(OsString::from).collect()
            };
            // The profile that runs: the hidden locations, the keychain choice and, in allowlist mode, the
            // proxy's network part (its port is chosen when a server starts; 0 stands for it here).
            let proxied = matches!(settings.network, uexec_domain::network::NetworkPolicy::Proxied(_))
                && !settings.sandbox_policy.is_unrestricted();
            let mut sandbox = uexec_sandbox_macos::SeatbeltSandbox::for_inspection()
                .with_hidden(settings.hidden.clone())
                .with_tool_files(settings.tool_files.clone())
                .with_keychain(settings.macos_keychain);
            if proxied {
                sandbox = sandbox.with_proxy_port(PROXY_PORT_PLACEHOLDER);
            }
            let launch = sandbox
                .launch(&settings.sandbox_policy, &settings.cwd, settings.tmpdir.as_deref(), &argv)
                .context("cannot generate the Seatbelt profile")?;
            let mut out = String::new();
            let _ = writeln!(
                out,
                ";; uexec Seatbelt profile for policy {} (network {}), workspace {}",
                settings.sandbox_policy.mode_str(),
                if settings.sandbox_policy.has_network_access() { "allowed" } else { "blocked" },
                settings.cwd.display()
            );
            let _ = writeln!(
                out,
                ";; Paths are this machine's; on macOS they are canonical (/tmp is /private/tmp)."
            );
            if proxied {
                let _ = writeln!(
                    out,
                    ";; Domain-allowlist mode: port {PROXY_PORT_PLACEHOLDER} stands for the proxy's port, which a \
                     server chooses when it starts."
                );
            }
            out.push_str(&launch.profile);
            if !launch.profile.ends_with('\n') {
                out.push('\n');
            }
            let _ = writeln!(out, "\n;; Parameters (-D NAME=value):");
            for (name, value) in &launch.params {
                let _ = writeln!(out, ";;   {name}={}", value.to_string_lossy());
            }
            let _ = writeln!(out, "\n;; Command line (the profile text is the argument of -p):");
            let shown: Vec<String> = launch
                .argv
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    if i == 2 {
                        "<profile>".to_owned()
                    } else {
                        uexec_domain::quote::shell_word(&a.to_string_lossy())
                    }
                })
                .collect();
            let _ = writeln!(out, ";;   {}", shown.join(" "));
            write_stdout(&out)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Write to stdout; a closed pipe (`| head`) is not an error.
fn write_stdout(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn git_entry_reads_directories_and_gitdir_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(git_entry(dir.path()), GitEntry::Absent);
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        assert_eq!(git_entry(dir.path()), GitEntry::Directory);
        let wt = tempfile::tempdir().unwrap();
        std::fs::write(wt.path().join(".git"), "gitdir: /repo/.git/worktrees/wt\n").unwrap();
        assert_eq!(git_entry(wt.path()), GitEntry::File { gitdir: PathBuf::from("/repo/.git/worktrees/wt") });
        std::fs::write(wt.path().join(".git"), "gitdir: ../rel\n").unwrap();
        let canonical = std::fs::canonicalize(wt.path()).unwrap();
        assert_eq!(git_entry(wt.path()), GitEntry::File { gitdir: canonical.join("../rel") });
        // A planted link or an oversized file names no gitdir, and reading it neither blocks nor costs 1 GiB.
        std::fs::remove_file(wt.path().join(".git")).unwrap();
        std::os::unix::fs::symlink("/proc/kmsg", wt.path().join(".git")).unwrap();
        assert!(!matches!(git_entry(wt.path()), GitEntry::File { .. }));
        std::fs::remove_file(wt.path().join(".git")).unwrap();
        std::fs::File::create(wt.path().join(".git")).unwrap().set_len(1 << 30).unwrap();
        assert_eq!(git_entry(wt.path()), GitEntry::Absent);
    }

    #[test]
    fn quoting_keeps_plain_words() {
        assert_eq!(uexec_domain::quote::shell_word("-DWRITABLE_ROOT_0=/tmp"), "-DWRITABLE_ROOT_0=/tmp");
        assert_eq!(uexec_domain::quote::shell_word("a b"), "'a b'");
    }
}
