//! Other tools' files in the writable roots (`uexec_domain::tool_files`: an IDE's tasks, an agent's MCP servers
//! and hooks), planned once for every platform: every writable root's named entries, present or absent, and the
//! workspace's top-level files protected by the end of their name.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use uexec_domain::gitdir::{ABSENT_LINK_TARGET, WhenAbsent};
use uexec_domain::tool_files::{ToolEntryKind, ToolFiles};

use crate::git::symlink_note;
use crate::gitdirs::{Entry, Mechanism};
use crate::host::{HostView, Kind, Listing};

/// One other tool's file of a writable root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolItem {
    /// The entry, present or absent (with what stands in for it while commands run, if anything).
    pub entry: Entry,
    /// Its name in `uexec_domain::tool_files` (a refusal names the rule and the key that allows it).
    pub name: &'static str,
}

/// The other tools' files of one writable root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolPlan {
    /// Every protected entry, in the order of `uexec_domain::tool_files::TOOL_ENTRIES`, then the top-level
    /// files protected by their suffix.
    pub items: Vec<ToolItem>,
    /// What the report says about them: a present entry that is a symbolic link is protected as the link.
    pub notes: Vec<String>,
}

/// Which root the tool files are planned in.
#[derive(Debug, Clone, Copy)]
pub enum ToolRoot<'a> {
    /// The workspace (the command's working directory's root: the folder the person opens in those tools),
    /// with the listing of its top level when it was made (it answers for the named entries, and names the
    /// files protected by their suffix).
    Workspace(Option<&'a Listing>),
    /// Any other writable root (`/tmp`, `$TMPDIR`, a configured root).
    Other,
}

/// Plans the other tools' files `tools` protects in the writable root `root` (canonical), read through `host`.
///
/// One rule for every platform: each named entry of every writable root stays read-only, present or absent.
/// Present, it is protected as itself (a symbolic link as the link, and said so). Absent, path rules deny it all
/// the same; mounts need something to cover, so an absent entry of the workspace takes a placeholder (an empty
/// directory, a link to nowhere for a file: `uexec_domain::tool_files::ToolEntryKind`), and one of another root
/// takes none (a placeholder there would be left in a directory other programs and people share, `/tmp`): it
/// stays creatable, and the renderer lists it as absent. The workspace's top-level files named by a suffix
/// (`*.code-workspace`) are protected when its listing names them.
///
/// `Err` (the path and the error) when an entry cannot be looked up with mounts (fails closed: the caller
/// refuses the command); with path rules it is denied all the same.
pub fn plan_tool_files(
    host: &dyn HostView,
    mechanism: Mechanism,
    root: &Path,
    which: ToolRoot<'_>,
    tools: &ToolFiles,
) -> Result<ToolPlan, (PathBuf, io::Error)> {
    let top = match which {
        ToolRoot::Workspace(top) => top,
        ToolRoot::Other => None,
    };
    let mut plan = ToolPlan::default();
    for tool in tools.protected() {
        let path = root.join(tool.name);
        let looked_up = match top.and_then(|top| top.lookup(std::ffi::OsStr::new(tool.name))) {
            Some(listed) => listed.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound)),
            None => host.lstat(&path).map(|meta| meta.kind),
        };
        let entry = match looked_up {
            Ok(kind) => {
                plan.note_link(host, &path, kind);
                Entry::Present(path)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound || mechanism == Mechanism::PathRules => {
                let placeholder = match (mechanism, which, tool.kind) {
                    (Mechanism::Mounts, ToolRoot::Workspace(_), ToolEntryKind::Directory) => {
                        Some(WhenAbsent::EmptyDir)
                    }
                    (Mechanism::Mounts, ToolRoot::Workspace(_), ToolEntryKind::File) => {
                        Some(WhenAbsent::AbsentLink)
                    }
                    _ => None,
                };
                Entry::Absent(path, placeholder)
            }
            Err(e) => return Err((path, e)),
        };
        plan.items.push(ToolItem { entry, name: tool.name });
    }
    let mut by_suffix: Vec<(&OsString, Kind)> = top
        .iter()
        .flat_map(|top| &top.entries)
        .filter(|(_, kind)| matches!(kind, Kind::File | Kind::Symlink))
        .map(|(name, kind)| (name, *kind))
        .collect();
    by_suffix.sort();
    for (name, kind) in by_suffix {
        if let Some(tool) = name.to_str().and_then(|name| tools.protects_by_suffix(name)) {
            let path = root.join(name);
            plan.note_link(host, &path, kind);
            plan.items.push(ToolItem { entry: Entry::Present(path), name: tool.name });
        }
    }
    Ok(plan)
}

impl ToolPlan {
    /// Notes the present entry `path` of kind `kind` when it is a symbolic link, but for a placeholder an
    /// earlier command left (a link to nowhere, `uexec_domain::gitdir::ABSENT_LINK_TARGET`).
    fn note_link(&mut self, host: &dyn HostView, path: &Path, kind: Kind) {
        if kind != Kind::Symlink || host.read_link(path).is_ok_and(|t| t == Path::new(ABSENT_LINK_TARGET)) {
            return;
        }
        if let Some(note) = symlink_note(host, path)
            && !self.notes.contains(&note)
        {
            self.notes.push(note);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::fake::FakeHost;

    fn items(plan: &ToolPlan) -> Vec<(Entry, &'static str)> {
        plan.items.iter().map(|i| (i.entry.clone(), i.name)).collect()
    }

    #[test]
    fn every_root_s_entries_are_planned_present_or_absent_and_only_the_workspace_s_take_placeholders() {
        let host = FakeHost::new().dir("/w/.claude").file("/w/proj.code-workspace").dir("/t/.idea");
        let top = (&host as &dyn HostView).list(Path::new("/w"), 100);
        let tools = ToolFiles::allowing(&[".zed"]).unwrap();
        let ws = plan_tool_files(
            &host,
            Mechanism::Mounts,
            Path::new("/w"),
            ToolRoot::Workspace(Some(&top)),
            &tools,
        )
        .unwrap();
        let ws = items(&ws);
        assert!(ws.contains(&(Entry::Present("/w/.claude".into()), ".claude")));
        assert!(ws.contains(&(Entry::Absent("/w/.vscode".into(), Some(WhenAbsent::EmptyDir)), ".vscode")));
        assert!(
            ws.contains(&(Entry::Absent("/w/.mcp.json".into(), Some(WhenAbsent::AbsentLink)), ".mcp.json"))
        );
        assert!(ws.contains(&(Entry::Present("/w/proj.code-workspace".into()), "*.code-workspace")));
        assert!(!ws.iter().any(|(e, _)| e.path() == Path::new("/w/.zed")), "allowed: {ws:?}");
        // Another root: present ones protected, absent ones named with nothing to stand in for them (mounts),
        // and no suffix search.
        let other = items(
            &plan_tool_files(&host, Mechanism::Mounts, Path::new("/t"), ToolRoot::Other, &tools).unwrap(),
        );
        assert!(other.contains(&(Entry::Present("/t/.idea".into()), ".idea")));
        assert!(other.contains(&(Entry::Absent("/t/.vscode".into(), None), ".vscode")));
        assert_eq!(other.len(), tools.protected().count());
        // Path rules: nothing stands in for an absent one (it is denied by path).
        let rules =
            plan_tool_files(&host, Mechanism::PathRules, Path::new("/w"), ToolRoot::Workspace(None), &tools)
                .unwrap();
        assert!(rules.items.iter().all(|i| !matches!(i.entry, Entry::Absent(_, Some(_)))));
        assert!(!items(&rules).iter().any(|(_, name)| *name == "*.code-workspace"), "no listing, no suffix");
    }

    #[test]
    fn a_link_is_protected_as_the_link_and_said_so_but_for_a_placeholder() {
        let host = FakeHost::new().dir("/w").link("/w/.vscode", "/etc").link("/w/.envrc", ABSENT_LINK_TARGET);
        let plan =
            plan_tool_files(&host, Mechanism::Mounts, Path::new("/w"), ToolRoot::Other, &ToolFiles::all())
                .unwrap();
        assert!(items(&plan).contains(&(Entry::Present("/w/.vscode".into()), ".vscode")));
        assert!(items(&plan).contains(&(Entry::Present("/w/.envrc".into()), ".envrc")));
        assert_eq!(plan.notes.len(), 1, "{:?}", plan.notes);
        assert!(plan.notes[0].contains("/w/.vscode: a symlink to /etc"), "{:?}", plan.notes);
    }
}
