//! What the sandbox refused a command (`Sandbox::refusals`): the name lookups the offline namespace's responder
//! answered since the command's mark (recorded by the sandbox, never read from the output), and the failing
//! paths and process operations the output names, matched against the plan the sandbox builds for the policy
//! (`uexec_domain::denial::FilePlan`: writable roots, protected entries, hidden locations). The matching is the
//! domain's; this module does the I/O (resolving the layout and the named paths).

use std::path::{Path, PathBuf};

use uexec_domain::denial::{self, FilePlan, Refusal};
use uexec_domain::hidden::HiddenPaths;
use uexec_domain::tool_files::ToolFiles;
use uexec_ports::RefusalQuery;

use crate::hidden::{HiddenLayout, Hide};
use crate::layout::FsLayout;

/// Which of the plan's file rules the kernel enforced for the command: a refusal is only claimed for a rule
/// that was in force (without a mount namespace, a failure under `~/.ssh` or in `.git` is not the sandbox's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Enforced {
    /// The private mount namespace: protected entries, tool files and hidden locations.
    pub(crate) mounts: bool,
    /// Landlock: writes outside the writable roots (the read-only remount covers them too).
    pub(crate) landlock: bool,
}

/// The plan `query`'s command ran under, as the domain matches paths against it, reduced to the rules
/// `enforced` (`None` when the layout cannot be worked out now, a root removed since, say, or when nothing
/// about files was enforced).
fn file_plan(
    query: &RefusalQuery<'_>,
    hidden: &HiddenPaths,
    tools: &ToolFiles,
    budget: usize,
    enforced: Enforced,
) -> Option<FilePlan> {
    if !enforced.mounts && !enforced.landlock {
        return None;
    }
    let layout =
        FsLayout::resolve_without_placeholders(query.policy, query.workspace, query.tmpdir, tools).ok()?;
    let hidden = HiddenLayout::resolve(hidden, query.workspace, query.cwd, budget).ok()?;
    let text = |paths: &[PathBuf]| paths.iter().map(|p| p.to_string_lossy().into_owned()).collect::<Vec<_>>();
    let mut hidden_paths = text(&hidden.dirs);
    hidden_paths.extend(text(&hidden.files));
    let mounted = |paths: Vec<String>| if enforced.mounts { paths } else { Vec::new() };
    Some(FilePlan {
        read_only: !matches!(query.policy, uexec_domain::SandboxPolicy::WorkspaceWrite { .. }),
        writable_roots: text(&layout.roots),
        protected: mounted(text(&[layout.closed.as_slice(), layout.protected.as_slice()].concat())),
        tool_files: if enforced.mounts {
            layout
                .tool_entries
                .iter()
                .map(|(path, name)| (path.to_string_lossy().into_owned(), (*name).to_owned()))
                .collect()
        } else {
            Vec::new()
        },
        hidden: mounted(hidden_paths),
        writable_files: text(&layout.writable_files),
    })
}

/// `path` as the kernel resolves it: canonical where it exists, else its parent canonical and its name kept
/// (a file the command failed to create), else as written; a `/proc` path as written.
fn canonical(path: &str) -> String {
    // Under `/proc`, `self` resolves to this server, not to the command: keep the command's words.
    if path == "/proc" || path.starts_with("/proc/") {
        return path.to_owned();
    }
    let path = Path::new(path);
    if let Ok(real) = std::fs::canonicalize(path) {
        return real.to_string_lossy().into_owned();
    }
    if let (Some(parent), Some(name)) = (path.parent(), path.file_name())
        && let Ok(real) = std::fs::canonicalize(parent)
    {
        return real.join(name).to_string_lossy().into_owned();
    }
    path.to_string_lossy().into_owned()
}

/// The refusals the output of a command that failed shows, confirmed by the plan (see the module
/// documentation).
pub(crate) fn from_output(
    query: &RefusalQuery<'_>,
    hidden: &HiddenPaths,
    tools: &ToolFiles,
    budget: usize,
    enforced: Enforced,
) -> Vec<Refusal> {
    let mut found = Vec::new();
    let candidates = denial::failing_paths(query.output);
    if !candidates.is_empty()
        && let Some(plan) = file_plan(query, hidden, tools, budget, enforced)
    {
        let cwd = query.cwd.to_string_lossy();
        let home = hidden.home.as_ref().map(|h| h.to_string_lossy().into_owned());
        for (written, error) in candidates {
            let Some(absolute) = denial::absolute_path(&written, &cwd, home.as_deref()) else { continue };
            let path = canonical(&absolute);
            if let Some(rule) = plan.classify(&path, error) {
                let refusal = Refusal::File { path, rule };
                if !found.contains(&refusal) {
                    found.push(refusal);
                }
            }
        }
    }
    found.extend(denial::process_refusals(query.output));
    found
}
