//! Seatbelt profile generation: from a sandbox policy to the profile text, its `-D` parameters and the
//! `sandbox-exec` command line. Pure apart from the host view it reads (`uexec_plan::HostView`), and identical on
//! every OS.
//!
//! How the profile is put together, in order (Seatbelt applies the *last* rule that matches an operation, so
//! every denial comes after the allowances it overrides):
//! 1. the base profile (`seatbelt_base.sbpl`): deny by default; process, terminal, system-information,
//!    system-service and IPC allowances every command needs; reads everywhere;
//! 2. the writable roots: one `(allow file-write* ...)` listing `WRITABLE_ROOT_i`, and Unix sockets (bind and
//!    connect) beneath them; nothing for `read-only`;
//! 3. the network part (`seatbelt_network.sbpl`), only when the policy enables network access;
//! 4. the denials (`seatbelt_denials.sbpl`, then generated): the person's own servers' sockets; every read-only
//!    entry `WRITABLE_ROOT_i_RO_j`, under its canonical spelling and under every spelling the kernel may report
//!    (`WRITABLE_ROOT_i_RO_j_ANY`, a regular expression: firmlinks, case; see `spelling`); and no unlink or
//!    rename of the directories above them that lie in a writable root (`PROTECTED_ANCESTOR_k`).
//!
//! Invariants:
//! - A path never appears in the profile text. The text depends only on the policy's mode, its network switch
//!   and how many roots, read-only entries and ancestors there are; paths travel as `-DNAME=value` arguments,
//!   so quotes, parentheses, newlines or non-UTF-8 bytes in a path cannot change the policy.
//! - Every path is canonical (`/tmp` is `/private/tmp`, symlinks are resolved), because Seatbelt matches the
//!   paths the kernel resolved; rules that deny also match every other spelling of it.
//! - A path under any read-only entry is never writable, even through another writable root that contains it
//!   (nested roots), and no directory above one can be renamed or removed from inside a writable root (a
//!   renamed parent would carry the entry to a path no rule names: `mv ws w2; echo > w2/.git/hooks/x; mv w2 ws`).
//! - A read-only entry never freezes more than itself: it is a root's `.git` or `.uexec` that exists (a symlink
//!   there is protected as the link, never its target; an absent one is not protected, as on Linux, so `git
//!   init` works; a `.git` directory is protected entry by entry, with the git dirs of its linked worktrees and
//!   submodules and the history present: `uexec_plan::GitPlanner`), a gitdir that is no writable root, contains
//!   none and lies in the root its `.git` belongs to (`uexec_domain::gitdir::gitdir_protection`; protected entry
//!   by entry by its kind), or one of the other tools' files (`uexec_domain::tool_files`).
//! - A root is never widened but by one rule: the repository of a linked worktree whose repository lies outside
//!   every writable root becomes one more root when `uexec_domain::gitdir::worktree_grant` allows it (its
//!   protected entries, `HEAD` and `index` denied).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use uexec_domain::SandboxPolicy;
use uexec_ports::SandboxError;

use uexec_domain::PROTECTED_SUBDIRS;
use uexec_domain::gitdir::MAX_NESTED_SCAN_ENTRIES;
use uexec_domain::tool_files::ToolFiles;
use uexec_plan::{
    GitPlan, GitPlanner, HostView, Kind, Mechanism, ToolPlan, ToolRoot, plan_roots, plan_tool_files,
    symlink_note,
};

use crate::spelling::{any_child_spelling, any_spelling};

/// The program that applies a profile and execs the command. An absolute path, so `PATH` cannot substitute it.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The part of every profile (see the module documentation).
pub(crate) const BASE_PROFILE: &str = include_str!("seatbelt_base.sbpl");

/// The part appended when the policy enables network access.
pub(crate) const NETWORK_PROFILE: &str = include_str!("seatbelt_network.sbpl");

/// The fixed denials appended after the network part.
pub(crate) const DENIALS_PROFILE: &str = include_str!("seatbelt_denials.sbpl");

/// The width of the section header lines, as in the data files.
const HEADER_WIDTH: usize = 109;

/// A command line that runs a command under Seatbelt, with its parts kept apart for display and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatbeltLaunch {
    /// The SBPL profile text (what `-p` receives).
    pub profile: String,
    /// The profile's parameters, in the order they appear on the command line: `WRITABLE_ROOT_0`,
    /// `WRITABLE_ROOT_0_RO_0`, ..., `WRITABLE_ROOT_1`, ... (canonical paths, byte for byte), then
    /// `WRITABLE_ROOT_i_RO_j_ANY` and `PROTECTED_ANCESTOR_k` (ASCII regular expressions matching every spelling
    /// of an entry and of a directory above one), then what the app adds (`HIDDEN_i`, ...).
    pub params: Vec<(String, OsString)>,
    /// The whole command line: `/usr/bin/sandbox-exec -p <profile> -DNAME=value ... -- <original argv>`.
    pub argv: Vec<OsString>,
    /// What a protected entry named but is not protected, and why (`path: reason`), for the report: symlink
    /// targets, gitdirs that are or contain a writable root or lie outside their own root, unreadable `.git`
    /// files (`docs/sandbox.md`, P4), a linked worktree's repository outside every root that is not granted, git
    /// directories denied as a whole and loose objects beyond the budget.
    pub ignored: Vec<String>,
    /// The `.git` and `.uexec` entries of the writable roots that do not exist, so are not protected (as on
    /// Linux: `git init` must work in a fresh workspace), for the report.
    pub absent: Vec<PathBuf>,
    /// The repositories made writable roots for a linked worktree whose repository lies outside every writable
    /// root, each with that worktree's root (`(repository, worktree)`, canonical), for the report.
    pub worktree_repositories: Vec<(PathBuf, PathBuf)>,
    /// The directories in which nothing can be created (`uexec_domain::gitdir::closed_dirs`: a repository's
    /// `modules/` and the directories of submodule names in it; `CLOSED_DIR_k`), canonical, for the report.
    pub closed: Vec<PathBuf>,
}

impl SeatbeltLaunch {
    /// How many writable roots the profile grants.
    pub fn writable_root_count(&self) -> usize {
        self.params.iter().filter(|(name, _)| is_root_param(name)).count()
    }

    /// How many read-only subpaths the profile carves out of the writable roots.
    pub fn read_only_subpath_count(&self) -> usize {
        self.params.iter().filter(|(name, _)| is_read_only_param(name)).count()
    }

    /// The writable roots (canonical), in order.
    pub fn writable_roots(&self) -> Vec<PathBuf> {
        self.params.iter().filter(|(name, _)| is_root_param(name)).map(|(_, v)| PathBuf::from(v)).collect()
    }
}

/// `WRITABLE_ROOT_<digits>`.
fn is_root_param(name: &str) -> bool {
    name.strip_prefix("WRITABLE_ROOT_").is_some_and(all_digits)
}

/// `WRITABLE_ROOT_<digits>_RO_<digits>`.
fn is_read_only_param(name: &str) -> bool {
    name.strip_prefix("WRITABLE_ROOT_")
        .and_then(|rest| rest.split_once("_RO_"))
        .is_some_and(|(i, j)| all_digits(i) && all_digits(j))
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// The roots, what was not followed (for the report), the absent entries, the granted worktree repositories and
/// the directories that take no new entry.
type Layout = (Vec<ProfileRoot>, Vec<String>, Vec<PathBuf>, Vec<(PathBuf, PathBuf)>, Vec<PathBuf>);

/// A writable root as the profile sees it: canonical, with every read-only spelling inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProfileRoot {
    root: PathBuf,
    read_only: Vec<PathBuf>,
}

/// Builds the profile, its parameters and the `sandbox-exec` command line that runs `argv` under `policy`.
///
/// `cwd` is the command's working directory and `tmpdir` its `$TMPDIR`; under `workspace-write` both become
/// writable roots (see [`SandboxPolicy::writable_roots`]). `host` answers the filesystem questions.
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
    host: &dyn HostView,
) -> Result<SeatbeltLaunch, SandboxError> {
    build_launch_with(policy, cwd, tmpdir, argv, host, &ToolFiles::all())
}

/// [`build_launch`] keeping only the other tools' files `tool_files` protects read-only
/// (`uexec_domain::tool_files`, planned by `uexec_plan::plan_tool_files`): in every writable root, present or
/// not (Seatbelt matches paths, so an absent `.vscode` cannot be created either, and no placeholder is needed).
pub fn build_launch_with(
    policy: &SandboxPolicy,
    cwd: &Path,
    tmpdir: Option<&Path>,
    argv: &[OsString],
    host: &dyn HostView,
    tool_files: &ToolFiles,
) -> Result<SeatbeltLaunch, SandboxError> {
    if policy.is_unrestricted() {
        return Err(SandboxError::Unrestricted);
    }
    if argv.is_empty() {
        return Err(SandboxError::EmptyCommand);
    }
    let (roots, ignored, absent, worktree_repositories, closed) =
        profile_roots(policy, cwd, tmpdir, host, tool_files)?;
    let shape: Vec<usize> = roots.iter().map(|r| r.read_only.len()).collect();
    let canonical_roots: Vec<PathBuf> = roots.iter().map(|r| r.root.clone()).collect();
    let entries: Vec<PathBuf> = roots.iter().flat_map(|r| r.read_only.iter().cloned()).collect();
    let mut ancestors = ancestors_in_roots(&entries, &canonical_roots);
    // A closed directory cannot be renamed or removed either (`mv .git/modules x`, then a new one).
    for dir in closed.iter().filter(|dir| canonical_roots.iter().any(|root| dir.starts_with(root))) {
        if !ancestors.contains(dir) {
            ancestors.push(dir.clone());
        }
    }
    let profile = render_profile(policy, &shape, ancestors.len(), closed.len());

    let mut params = Vec::new();
    let mut spellings = Vec::new();
    for (i, root) in roots.into_iter().enumerate() {
        params.push((root_param(i), root.root.into_os_string()));
        for (j, ro) in root.read_only.into_iter().enumerate() {
            spellings.push((any_param(&read_only_param(i, j)), OsString::from(any_spelling(&ro, true))));
            params.push((read_only_param(i, j), ro.into_os_string()));
        }
    }
    params.extend(spellings);
    for (k, ancestor) in ancestors.iter().enumerate() {
        params.push((ancestor_param(k), OsString::from(any_spelling(ancestor, false))));
    }
    for (k, dir) in closed.iter().enumerate() {
        params.push((closed_param(k), OsString::from(any_child_spelling(dir))));
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
    Ok(SeatbeltLaunch { profile, params, argv: full, ignored, absent, worktree_repositories, closed })
}

/// The name of the `k`-th closed directory's parameter (an expression matching any entry directly in it).
fn closed_param(k: usize) -> String {
    format!("CLOSED_DIR_{k}")
}

/// The name of root `i`'s parameter.
fn root_param(i: usize) -> String {
    format!("WRITABLE_ROOT_{i}")
}

/// The name of root `i`'s `j`-th read-only subpath parameter.
fn read_only_param(i: usize, j: usize) -> String {
    format!("WRITABLE_ROOT_{i}_RO_{j}")
}

/// The name of the every-spelling expression of the parameter `name`.
pub(crate) fn any_param(name: &str) -> String {
    format!("{name}_ANY")
}

/// The name of the `k`-th protected ancestor's parameter.
fn ancestor_param(k: usize) -> String {
    format!("PROTECTED_ANCESTOR_{k}")
}

/// Every directory above one of `entries` (canonical) that is a writable root or lies in one, deduplicated, in
/// order: renaming or removing any of them from inside the sandbox would move an entry to a path no rule names
/// (Claude Code's sandbox runtime denies `file-write-unlink` on every ancestor of a protected path for the same
/// reason: `generateMoveBlockingRules` in `src/sandbox/macos-sandbox-utils.ts`).
pub(crate) fn ancestors_in_roots(entries: &[PathBuf], roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for entry in entries {
        for ancestor in entry.ancestors().skip(1) {
            if roots.iter().any(|root| ancestor.starts_with(root)) && !out.iter().any(|a| a == ancestor) {
                out.push(ancestor.to_path_buf());
            }
        }
    }
    out
}

/// The per-user cache directory (`confstr(_CS_DARWIN_USER_CACHE_DIR)`, `/private/var/folders/xx/yyy/C`), the
/// sibling of the per-user temporary directory `$TMPDIR` (`.../T`), when `tmpdir` (canonical) has that shape.
/// Swift, `clang -fmodules` and `xcodebuild` write their module caches there (the Codex CLI makes
/// `DARWIN_USER_CACHE_DIR` writable in `seatbelt_network_policy.sbpl`; Claude Code's sandbox runtime makes the
/// parent of `$TMPDIR` writable, `getTmpdirParentIfMacOSPattern`).
pub(crate) fn user_cache_dir(tmpdir: &Path) -> Option<PathBuf> {
    let parts: Vec<&std::ffi::OsStr> = tmpdir.iter().collect();
    match parts.as_slice() {
        [root, private, var, folders, _, _, t]
            if *root == "/"
                && *private == "private"
                && *var == "var"
                && *folders == "folders"
                && *t == "T" =>
        {
            tmpdir.parent().map(|parent| parent.join("C"))
        }
        _ => None,
    }
}

/// The policy's writable roots, canonical and deduplicated (the plan's, `uexec_plan::plan_roots`: a root reached
/// through a symbolic link inside a writable root is refused, a missing one refuses the command), each with
/// every read-only subpath (of any root) that lies inside it; what a protected entry named but is not
/// protected, and why (for the report); and the `.git` and `.uexec` entries that do not exist.
///
/// The read-only subpaths follow `docs/sandbox.md` (P1-P4), as the Linux adapter does: `.git` and `.uexec` of
/// each root protect themselves when they exist, spelled with the root's canonical path and their own name (a
/// symlink is never followed, so `ln -s /tmp/ws /tmp/.git` protects the link, not the workspace); the gitdir a
/// `.git` file names is protected only as `uexec_plan::protected_gitdir` allows, entry by entry by its kind, and
/// one outside every root that is a linked worktree's admin dir makes its repository one more root when
/// `uexec_plan::granted_repository` allows it (the git half is `uexec_plan::GitPlanner`'s, rendered here). Under `workspace-write` the per-user cache directory
/// next to `$TMPDIR` is one more root when it exists ([`user_cache_dir`]). Also returns the granted
/// repositories with their worktrees.
fn profile_roots(
    policy: &SandboxPolicy,
    cwd: &Path,
    tmpdir: Option<&Path>,
    host: &dyn HostView,
    tool_files: &ToolFiles,
) -> Result<Layout, SandboxError> {
    let mut absent: Vec<PathBuf> = Vec::new();
    // The writable roots are the plan's (`uexec_plan::plan_roots`), with the per-user cache directory next to
    // `$TMPDIR` under `workspace-write` when it exists.
    let cache: Vec<PathBuf> = tmpdir
        .filter(|_| matches!(policy, SandboxPolicy::WorkspaceWrite { .. }))
        .and_then(|t| host.canonicalize(t).ok())
        .and_then(|t| user_cache_dir(&t))
        .filter(|c| host.canonicalize(c).is_ok_and(|r| r == *c))
        .into_iter()
        .collect();
    let plan = plan_roots(host, policy, cwd, tmpdir, &cache).map_err(|e| invalid(&e.path, &e.reason))?;
    // A path rule needs no directory to exist, so a missing root would be granted when a command creates it:
    // the command is refused instead.
    if let Some((path, why)) = plan.missing.first() {
        return Err(invalid(path, why));
    }
    let mut ignored = plan.notes;
    for path in &plan.refused {
        push_unique(
            &mut ignored,
            format!(
                "{}: not writable (its path goes through a symlink inside a writable root)",
                path.display()
            ),
        );
    }
    let mut roots = plan.roots;
    let mut denied = Denied::default();
    // The git half of the plan (`uexec_plan::GitPlanner`), rendered as it is decided: the profile lists the
    // paths in that order.
    let mut planner = GitPlanner::new(host, Mechanism::PathRules, plan.spelled);
    let workspace = plan.workspace.ok();
    for (root, owner) in &plan.writable {
        let Some(owner) = owner else { continue };
        let entries: Vec<PathBuf> = PROTECTED_SUBDIRS.iter().map(|name| root.root.join(name)).collect();
        for name in PROTECTED_SUBDIRS {
            let entry = owner.join(name);
            match host.kind(&entry) {
                None => {
                    push_unique(&mut absent, entry);
                    continue;
                }
                Some(Kind::Dir) if name == ".git" => {
                    planner.root_git_dir(owner);
                    denied.add(planner.drain())?;
                    continue;
                }
                Some(_) => denied.path(host, entry),
            }
        }
        // Other tools' files of every root, present or not (the plan's, `uexec_plan::plan_tool_files`): Seatbelt
        // matches paths, so an absent one is denied as it is. The workspace's top level is listed once, for the
        // files protected by their suffix and the repositories nested there (a listing beyond its budget
        // refuses the command: `Denied::add`).
        let in_workspace = workspace.as_ref() == Some(owner);
        let top = in_workspace.then(|| host.list(owner, MAX_NESTED_SCAN_ENTRIES));
        let which = if in_workspace { ToolRoot::Workspace(top.as_ref()) } else { ToolRoot::Other };
        let tools = plan_tool_files(host, Mechanism::PathRules, owner, which, tool_files)
            .map_err(|(path, e)| SandboxError::InvalidPath { path, reason: e.to_string() })?;
        denied.tools(tools);
        if let Some(top) = &top {
            planner.nested(owner, top, &|_| false);
            denied.add(planner.drain())?;
        }
        for gitdir in root.read_only_subpaths.iter().filter(|sub| !entries.contains(sub)) {
            planner.named_gitdir(gitdir, owner, true);
            denied.add(planner.drain())?;
        }
    }
    // The repository of a linked worktree outside every root: one more root, protected as a root's own `.git`,
    // with the `HEAD` and `index` of the main worktree and of every other linked worktree (the person's other
    // checkouts and staged changes) read-only too.
    let plan = planner.finish();
    let grants = plan.grants.clone();
    denied.add(plan)?;
    for (common, _) in &grants {
        push_unique(&mut roots, common.clone());
    }
    let Denied { read_only, closed, notes } = denied;
    for note in notes {
        push_unique(&mut ignored, note);
    }
    // An entry that exists under one spelling of a root exists under all: drop it from the absent list.
    absent.retain(|a| !read_only.contains(a));
    let roots = roots
        .into_iter()
        .map(|root| {
            let inside = read_only.iter().filter(|ro| ro.starts_with(&root)).cloned().collect();
            ProfileRoot { root, read_only: inside }
        })
        .collect();
    Ok((roots, ignored, absent, grants, closed))
}

/// What the profile denies, gathered in the order decided: paths no write reaches, directories nothing is
/// created in, and what the report says about them.
#[derive(Debug, Default)]
struct Denied {
    read_only: Vec<PathBuf>,
    closed: Vec<PathBuf>,
    notes: Vec<String>,
}

impl Denied {
    /// The protected entry `entry` of a root (`.uexec`, a `.git` that is no directory, another tool's file),
    /// denied as itself: a symbolic link only as the link, and said so.
    fn path(&mut self, host: &dyn HostView, entry: PathBuf) {
        if let Some(note) = symlink_note(host, &entry) {
            push_unique(&mut self.notes, note);
        }
        push_unique(&mut self.read_only, entry);
    }

    /// The render of one root's other tools' files with path rules: every entry is denied, present or not.
    fn tools(&mut self, plan: ToolPlan) {
        for item in plan.items {
            push_unique(&mut self.read_only, item.entry.path().to_path_buf());
        }
        for note in plan.notes {
            push_unique(&mut self.notes, note);
        }
    }

    /// The render of the git plan `plan` with path rules: every path it keeps read-only is denied, present or
    /// not (Seatbelt matches paths: nothing is made), and every directory it closes takes no new entry. A top
    /// level whose nested repositories cannot all be examined refuses the command (Seatbelt has no partial mode).
    fn add(&mut self, plan: GitPlan) -> Result<(), SandboxError> {
        if let Some(why) = &plan.unexamined {
            return Err(SandboxError::Unenforceable { missing: why.to_string(), setting: None });
        }
        for path in plan.paths() {
            push_unique(&mut self.read_only, path.to_path_buf());
        }
        for dir in plan.closed() {
            push_unique(&mut self.closed, dir.to_path_buf());
        }
        for note in plan.all_notes() {
            push_unique(&mut self.notes, note.clone());
        }
        Ok(())
    }
}

fn invalid(path: &Path, reason: &str) -> SandboxError {
    SandboxError::InvalidPath { path: path.to_path_buf(), reason: reason.to_owned() }
}

/// Push `item` unless present.
fn push_unique<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// The profile text for `policy` with `shape[i]` read-only subpaths in root `i` and `ancestors` protected
/// ancestors. Takes no path: the text cannot depend on one.
fn render_profile(policy: &SandboxPolicy, shape: &[usize], ancestors: usize, closed: usize) -> String {
    let network = policy.has_network_access();
    let mut out = String::with_capacity(
        BASE_PROFILE.len() + NETWORK_PROFILE.len() + DENIALS_PROFILE.len() + 400 * shape.len() + 800,
    );
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
            "; No writable roots: beyond the null device and terminals above, nothing is writable, and no Unix\n\
             ; socket can be created or connected to.\n",
        );
    } else {
        out.push_str(
            "; Writes only under the writable roots (canonical paths, passed as -D parameters); their read-only\n\
             ; entries are denied at the end (last rule wins).\n(allow file-write*",
        );
        for i in 0..shape.len() {
            let _ = write!(out, "\n  (subpath (param \"{}\"))", root_param(i));
        }
        out.push_str(")\n");
        out.push_str(
            "; Unix sockets beneath the writable roots, where a command creates its own (tmux -S, Python's\n\
             ; multiprocessing.Manager, git's fsmonitor daemon, test servers): socket(AF_UNIX), bind and connect.\n\
             ; Both peers use these three rules for allowed socket paths (the Codex CLI's unix_socket_policy in\n\
             ; codex-rs/sandboxing/src/seatbelt.rs; Claude Code's sandbox runtime, allowUnixSockets).\n\
             (allow system-socket (socket-domain AF_UNIX))\n",
        );
        for i in 0..shape.len() {
            let _ = writeln!(
                out,
                "(allow network-bind (local unix-socket (subpath (param \"{}\"))))",
                root_param(i)
            );
        }
        for i in 0..shape.len() {
            let _ = writeln!(
                out,
                "(allow network-outbound (remote unix-socket (subpath (param \"{}\"))))",
                root_param(i)
            );
        }
    }
    out.push('\n');
    if network {
        out.push_str(NETWORK_PROFILE);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    } else {
        out.push_str(
            "; Network access disabled: no network rule, so (deny default) refuses every IP socket and every Unix\n\
             ; socket outside the writable roots, DNS included.\n",
        );
    }
    out.push('\n');
    out.push_str(DENIALS_PROFILE);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    let read_only: Vec<String> = shape
        .iter()
        .enumerate()
        .flat_map(|(i, &count)| (0..count).map(move |j| read_only_param(i, j)))
        .collect();
    if !read_only.is_empty() {
        out.push_str(
            "\n; --- Read-only entries of the writable roots --------------------------------------------------------\n\
             ; .git, the gitdir a .git file names, .uexec, other tools' files (.vscode, .mcp.json, ...): no write\n\
             ; of any kind, under the canonical spelling and under every spelling the kernel may report\n\
             ; (firmlinks, case), and no socket bound inside them.\n\
             (deny file-write*",
        );
        for name in &read_only {
            let _ =
                write!(out, "\n  (subpath (param \"{name}\"))\n  (regex (param \"{}\"))", any_param(name));
        }
        out.push_str(")\n(deny network-bind");
        for name in &read_only {
            let _ = write!(out, "\n  (local unix-socket (path-regex (param \"{}\")))", any_param(name));
        }
        out.push_str(")\n");
    }
    if ancestors > 0 {
        out.push_str(
            "; No directory above a read-only entry that lies in a writable root can be renamed or removed: a\n\
             ; renamed parent would carry the entry to a path no rule names (mv ws w2; write w2/.git/hooks/x;\n\
             ; mv w2 ws). Claude Code's sandbox runtime denies file-write-unlink on ancestors for this reason.\n\
             (deny file-write-unlink",
        );
        for k in 0..ancestors {
            let _ = write!(out, "\n  (regex (param \"{}\"))", ancestor_param(k));
        }
        out.push_str(")\n");
    }
    if closed > 0 {
        out.push_str(
            "; Nothing can be created directly in a repository's modules/ (nor in the directories of submodule\n\
             ; names in it): the person's own git submodule update --init would use a submodule git dir a command\n\
             ; made there, hooks and all. The submodule git dirs present stay writable.\n\
             (deny file-write-create",
        );
        for k in 0..closed {
            let _ = write!(out, "\n  (regex (param \"{}\"))", closed_param(k));
        }
        out.push_str(")\n");
    }
    out
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
