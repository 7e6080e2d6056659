//! Seatbelt profile generation: from a sandbox policy to the profile text, its `-D` parameters and the
//! `sandbox-exec` command line. Pure apart from the [`PathResolver`] it is given, and identical on every OS.
//!
//! How the profile is put together, in order:
//! 1. the base profile (`seatbelt_base.sbpl`): deny by default; process, terminal, system-information and
//!    system-service allowances every command needs; reads everywhere;
//! 2. the writable roots: one `(allow file-write* ...)` whose alternatives are `WRITABLE_ROOT_i` minus its
//!    read-only subpaths `WRITABLE_ROOT_i_RO_j`; nothing for `read-only`;
//! 3. the network part (`seatbelt_network.sbpl`), only when the policy enables network access.
//!
//! Invariants:
//! - A path never appears in the profile text. The text depends only on the policy's mode, its network switch
//!   and how many roots and read-only subpaths there are; paths travel as `-DNAME=value` arguments, so quotes,
//!   parentheses, newlines or non-UTF-8 bytes in a path cannot change the policy.
//! - Every path is canonical (`/tmp` is `/private/tmp`, symlinks are resolved), because Seatbelt matches the
//!   paths the kernel resolved.
//! - A path under any read-only subpath is never writable, even through another writable root that contains
//!   it (nested roots).
//! - A read-only subpath never freezes more than itself: it is a root's `.git` or `.uexec` (a symlink there is
//!   protected as the link, never its target), or a gitdir that is no writable root, contains none and lies in
//!   the root its `.git` belongs to (`uexec_domain::gitdir::gitdir_protection`).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use uexec_domain::SandboxPolicy;
use uexec_ports::SandboxError;

use uexec_domain::gitdir::GitFileProblem;
use uexec_domain::{GitEntry, PROTECTED_SUBDIRS};

use crate::paths::{PathResolver, canonical_existing, protected_gitdir};

/// The program that applies a profile and execs the command. An absolute path, so `PATH` cannot substitute it.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The part of every profile (see the module documentation).
pub(crate) const BASE_PROFILE: &str = include_str!("seatbelt_base.sbpl");

/// The part appended when the policy enables network access.
pub(crate) const NETWORK_PROFILE: &str = include_str!("seatbelt_network.sbpl");

/// The width of the section header lines, as in the data files.
const HEADER_WIDTH: usize = 109;

/// A command line that runs a command under Seatbelt, with its parts kept apart for display and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatbeltLaunch {
    /// The SBPL profile text (what `-p` receives).
    pub profile: String,
    /// The profile's parameters, in the order they appear on the command line: `WRITABLE_ROOT_0`,
    /// `WRITABLE_ROOT_0_RO_0`, ..., `WRITABLE_ROOT_1`, ... Values are canonical paths, byte for byte.
    pub params: Vec<(String, OsString)>,
    /// The whole command line: `/usr/bin/sandbox-exec -p <profile> -DNAME=value ... -- <original argv>`.
    pub argv: Vec<OsString>,
    /// What a protected entry named but is not protected, and why (`path: reason`), for the report: symlink
    /// targets, gitdirs that are or contain a writable root or lie outside their own root, unreadable `.git`
    /// files (`docs/sandbox.md`, P4).
    pub ignored: Vec<String>,
}

impl SeatbeltLaunch {
    /// How many writable roots the profile grants.
    pub fn writable_root_count(&self) -> usize {
        self.params.iter().filter(|(name, _)| !name.contains("_RO_")).count()
    }

    /// How many read-only subpaths the profile carves out of the writable roots.
    pub fn read_only_subpath_count(&self) -> usize {
        self.params.len() - self.writable_root_count()
    }
}

/// A writable root as the profile sees it: canonical, with every read-only spelling inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProfileRoot {
    root: PathBuf,
    read_only: Vec<PathBuf>,
}

/// Builds the profile, its parameters and the `sandbox-exec` command line that runs `argv` under `policy`.
///
/// `cwd` is the command's working directory and `tmpdir` its `$TMPDIR`; under `workspace-write` both become
/// writable roots (see [`SandboxPolicy::writable_roots`]). `resolver` answers the filesystem questions.
///
/// # Errors
/// - [`SandboxError::InvalidPath`] when a writable root is relative or cannot be canonicalised (it does not
///   exist, for instance), or a read-only subpath cannot be spelled canonically;
/// - [`SandboxError::Unrestricted`] for `danger-full-access` (it has no profile: it runs without a sandbox);
/// - [`SandboxError::EmptyCommand`] for an empty `argv`.
pub fn build_launch(
    policy: &SandboxPolicy,
    cwd: &Path,
    tmpdir: Option<&Path>,
    argv: &[OsString],
    resolver: &dyn PathResolver,
) -> Result<SeatbeltLaunch, SandboxError> {
    if policy.is_unrestricted() {
        return Err(SandboxError::Unrestricted);
    }
    if argv.is_empty() {
        return Err(SandboxError::EmptyCommand);
    }
    let (roots, ignored) = profile_roots(policy, cwd, tmpdir, resolver)?;
    let shape: Vec<usize> = roots.iter().map(|r| r.read_only.len()).collect();
    let profile = render_profile(policy, &shape);

    let mut params = Vec::new();
    for (i, root) in roots.into_iter().enumerate() {
        params.push((root_param(i), root.root.into_os_string()));
        for (j, ro) in root.read_only.into_iter().enumerate() {
            params.push((read_only_param(i, j), ro.into_os_string()));
        }
    }

    let mut full = Vec::with_capacity(4 + params.len() + argv.len());
    full.push(OsString::from(SANDBOX_EXEC));
    full.push(OsString::from("-p"));
    full.push(OsString::from(profile.as_str()));
    for (name, value) in &params {
        let mut arg = OsString::from(format!("-D{name}="));
        arg.push(value);
        full.push(arg);
    }
    full.push(OsString::from("--"));
    full.extend(argv.iter().cloned());
    Ok(SeatbeltLaunch { profile, params, argv: full, ignored })
}

/// The name of root `i`'s parameter.
fn root_param(i: usize) -> String {
    format!("WRITABLE_ROOT_{i}")
}

/// The name of root `i`'s `j`-th read-only subpath parameter.
fn read_only_param(i: usize, j: usize) -> String {
    format!("WRITABLE_ROOT_{i}_RO_{j}")
}

/// The policy's writable roots, canonical and deduplicated, each with every read-only subpath (of any root)
/// that lies inside it; and what a protected entry named but is not protected, and why (for the report).
///
/// The read-only subpaths follow `docs/sandbox.md` (P1-P4), as the Linux adapter does: `.git` and `.uexec` of
/// each root protect themselves, spelled with the root's canonical path and their own name (a symlink is never
/// followed, so `ln -s /tmp/ws /tmp/.git` protects the link, not the workspace), whether or not they exist; the
/// gitdir a `.git` file names is protected only as [`protected_gitdir`] allows.
fn profile_roots(
    policy: &SandboxPolicy,
    cwd: &Path,
    tmpdir: Option<&Path>,
    resolver: &dyn PathResolver,
) -> Result<(Vec<ProfileRoot>, Vec<String>), SandboxError> {
    let mut ignored: Vec<String> = Vec::new();
    let writable = policy.writable_roots(cwd, tmpdir, |root| {
        let Ok(root) = resolver.canonicalize(root) else {
            // The root is refused below with the reason.
            return GitEntry::Absent;
        };
        let (entry, problem) = resolver.inspect_git(&root);
        // A symlinked `.git` is reported below with its target, as every protected entry that is a link.
        if let Some(problem) = problem.filter(|p| *p != GitFileProblem::Symlink) {
            push_unique(&mut ignored, format!("{}: {problem}", root.join(".git").display()));
        }
        entry
    });
    let mut spelled: Vec<(PathBuf, PathBuf)> = Vec::with_capacity(writable.len());
    let mut roots: Vec<PathBuf> = Vec::new();
    for root in &writable {
        let canonical = canonical_existing(resolver, &root.root)?;
        spelled.push((root.root.clone(), canonical.clone()));
        if !roots.contains(&canonical) {
            roots.push(canonical);
        }
    }
    let mut read_only: Vec<PathBuf> = Vec::new();
    for (root, (_, owner)) in writable.iter().zip(&spelled) {
        let entries: Vec<PathBuf> = PROTECTED_SUBDIRS.iter().map(|name| root.root.join(name)).collect();
        for name in PROTECTED_SUBDIRS {
            let entry = owner.join(name);
            if let Some(target) = resolver.symlink_target(&entry) {
                push_unique(
                    &mut ignored,
                    format!(
                        "{}: a symlink to {} (only the link is protected, its target is not)",
                        entry.display(),
                        target.display()
                    ),
                );
            }
            if !read_only.contains(&entry) {
                read_only.push(entry);
            }
        }
        for gitdir in root.read_only_subpaths.iter().filter(|sub| !entries.contains(sub)) {
            match protected_gitdir(resolver, gitdir, owner, &spelled) {
                Ok(path) => {
                    if !read_only.contains(&path) {
                        read_only.push(path);
                    }
                }
                Err(why) => push_unique(&mut ignored, format!("gitdir {}: {why}", gitdir.display())),
            }
        }
    }
    let roots = roots
        .into_iter()
        .map(|root| {
            let inside = read_only.iter().filter(|ro| ro.starts_with(&root)).cloned().collect();
            ProfileRoot { root, read_only: inside }
        })
        .collect();
    Ok((roots, ignored))
}

/// Push `text` unless present.
fn push_unique(list: &mut Vec<String>, text: String) {
    if !list.contains(&text) {
        list.push(text);
    }
}

/// The profile text for `policy` with `shape[i]` read-only subpaths in root `i`. Takes no path: the text
/// cannot depend on one.
fn render_profile(policy: &SandboxPolicy, shape: &[usize]) -> String {
    let network = policy.has_network_access();
    let mut out = String::with_capacity(BASE_PROFILE.len() + NETWORK_PROFILE.len() + 200 * shape.len() + 400);
    out.push_str(BASE_PROFILE);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push('\n');
    // `write!` into a String cannot fail; the results are ignored on purpose.
    let title = format!(
        "; --- Generated for policy {}, network {} ",
        policy.mode_str(),
        if network { "enabled" } else { "disabled" }
    );
    let _ = writeln!(out, "{title}{}", "-".repeat(HEADER_WIDTH.saturating_sub(title.len())));
    if shape.is_empty() {
        out.push_str(
            "; No writable roots: beyond the null device and terminals above, nothing is writable.\n",
        );
    } else {
        out.push_str(
            "; Writes only under the writable roots (canonical paths, passed as -D parameters), minus their\n\
             ; read-only subpaths (.git, the gitdir a .git file names, .uexec).\n",
        );
        out.push_str("(allow file-write*");
        for (i, &read_only) in shape.iter().enumerate() {
            if read_only == 0 {
                let _ = write!(out, "\n  (subpath (param \"{}\"))", root_param(i));
            } else {
                let _ = write!(out, "\n  (require-all\n    (subpath (param \"{}\"))", root_param(i));
                for j in 0..read_only {
                    let _ =
                        write!(out, "\n    (require-not (subpath (param \"{}\")))", read_only_param(i, j));
                }
                out.push(')');
            }
        }
        out.push_str(")\n");
    }
    out.push('\n');
    if network {
        out.push_str(NETWORK_PROFILE);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    } else {
        out.push_str(
            "; Network access disabled: no network rule, so (deny default) refuses every network operation,\n\
             ; connections to local Unix sockets included.\n",
        );
    }
    out
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
