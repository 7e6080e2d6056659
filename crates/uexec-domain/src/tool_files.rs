//! Workspace files that make another program run code without the person asking: an IDE
//! task that runs when the folder opens, the MCP servers and hooks an agent session starts outside any sandbox.
//! A sandboxed command must not plant them, so they stay read-only in the writable roots, as `.git` and `.uexec`
//! do, unless the person allows one on purpose (`allow_tool_files = [".vscode"]` in the config).
//!
//! Pure data and decisions. `uexec_plan::plan_tool_files` applies them to every writable root for every platform
//! (present entries read-only; absent ones denied by path on macOS, and on Linux given a read-only placeholder in
//! the workspace, removed once no command needs it, `crate::leftovers`).

use std::fmt;

/// The config key that allows sandboxed commands to write some of these entries.
pub const ALLOW_KEY: &str = "allow_tool_files";

/// What an entry is when present, and what is done when it is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolEntryKind {
    /// A directory of settings: an absent one in the workspace gets an empty placeholder while commands run
    /// (read as no settings by its program), so nothing can be created in it.
    Directory,
    /// A file: an absent one in the workspace gets a symbolic link to [`crate::gitdir::ABSENT_LINK_TARGET`]
    /// while commands run, which every program that opens it reads as absent (`ENOTDIR`: `.mcp.json` is no
    /// invalid JSON, direnv finds no `.envrc`), and which the mount over it keeps from being replaced. An empty
    /// file would not do (`.mcp.json` must be JSON, any `.envrc` makes direnv say it is blocked), nor a
    /// directory (`EISDIR` breaks the program that writes it). The macOS profile denies it by path.
    File,
}

/// One protected entry of a writable root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolEntry {
    /// Its name in the root.
    pub name: &'static str,
    /// Directory or file.
    pub kind: ToolEntryKind,
    /// Which program runs what, and when (for the docs and the report).
    pub reason: &'static str,
}

/// Every protected tool entry, in the order the report lists them.
pub const TOOL_ENTRIES: [ToolEntry; 13] = [
    ToolEntry {
        name: ".vscode",
        kind: ToolEntryKind::Directory,
        reason: "VS Code: tasks.json tasks with runOn folderOpen, settings naming interpreters, terminals and \
                 language servers, launch.json",
    },
    ToolEntry {
        name: ".idea",
        kind: ToolEntryKind::Directory,
        reason: "JetBrains IDEs: run configurations, startup tasks, external tools",
    },
    ToolEntry {
        name: ".zed",
        kind: ToolEntryKind::Directory,
        reason: "Zed: tasks and settings naming language server binaries",
    },
    ToolEntry {
        name: ".cursor",
        kind: ToolEntryKind::Directory,
        reason: "Cursor: mcp.json servers, rules the agent follows",
    },
    ToolEntry {
        name: ".claude",
        kind: ToolEntryKind::Directory,
        reason: "Claude Code: settings.json hooks and permissions, commands/, agents/",
    },
    ToolEntry {
        name: ".codex",
        kind: ToolEntryKind::Directory,
        reason: "Codex CLI: project configuration (MCP servers, sandbox settings)",
    },
    ToolEntry {
        name: ".gemini",
        kind: ToolEntryKind::Directory,
        reason: "Gemini CLI: settings.json MCP servers and tool discovery commands",
    },
    ToolEntry {
        name: ".devcontainer",
        kind: ToolEntryKind::Directory,
        reason: "Dev Containers: initializeCommand runs on the host, the other commands in the container",
    },
    ToolEntry {
        name: ".devcontainer.json",
        kind: ToolEntryKind::File,
        reason: "Dev Containers: the single-file form of .devcontainer/ (initializeCommand runs on the host)",
    },
    ToolEntry {
        name: ".run",
        kind: ToolEntryKind::Directory,
        reason: "JetBrains IDEs: shared run configurations (before-launch tasks, external tools)",
    },
    ToolEntry {
        name: ".mcp.json",
        kind: ToolEntryKind::File,
        reason: "MCP servers an agent session (Claude Code) starts outside any sandbox",
    },
    ToolEntry {
        name: ".envrc",
        kind: ToolEntryKind::File,
        reason: "direnv: the shell runs it on entering the directory once allowed",
    },
    ToolEntry {
        name: ".ripgreprc",
        kind: ToolEntryKind::File,
        reason: "ripgrep options (--pre runs a program on every file) when RIPGREP_CONFIG_PATH names it",
    },
];

/// Files of the workspace's top level protected by the end of their name (`*` stands for any non-empty start):
/// VS Code's multi-root workspace files hold `settings`, `tasks` (`runOn: folderOpen`) and `launch` entries, as
/// `.vscode/` does. Only present ones are protected (on every platform: one decision): a new one has a name of
/// the command's choosing, and VS Code opens one only when the person names it.
pub const TOOL_SUFFIX_ENTRIES: [ToolEntry; 1] = [ToolEntry {
    name: "*.code-workspace",
    kind: ToolEntryKind::File,
    reason: "VS Code multi-root workspaces: settings, tasks with runOn folderOpen and launch configurations",
}];

impl ToolEntry {
    /// True when this suffix entry ([`TOOL_SUFFIX_ENTRIES`]) names a file called `file_name`.
    fn matches_suffix(&self, file_name: &str) -> bool {
        let suffix = self.name.trim_start_matches('*');
        file_name.len() > suffix.len() && file_name.ends_with(suffix) && !file_name.contains('/')
    }
}

/// A name given to [`ALLOW_KEY`] that is not a protected entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownToolFile(pub String);

impl fmt::Display for UnknownToolFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} names no protected tool file (known: {})", self.0, names(&TOOL_ENTRIES))
    }
}

impl std::error::Error for UnknownToolFile {}

/// Which tool entries stay read-only: all of them but those the person allowed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolFiles {
    allowed: Vec<&'static str>,
}

impl ToolFiles {
    /// Every entry protected (the default).
    pub fn all() -> ToolFiles {
        ToolFiles::default()
    }

    /// Every entry protected but `allowed` (names as in [`TOOL_ENTRIES`], a trailing `/` accepted). An unknown
    /// name is an error, so a typo does not silently leave everything protected (or, worse, look allowed).
    pub fn allowing<S: AsRef<str>>(allowed: &[S]) -> Result<ToolFiles, UnknownToolFile> {
        let mut out = Vec::new();
        for name in allowed {
            let given = name.as_ref();
            let bare = given.trim_end_matches('/');
            let entry = TOOL_ENTRIES
                .iter()
                .chain(&TOOL_SUFFIX_ENTRIES)
                .find(|e| e.name == bare)
                .ok_or_else(|| UnknownToolFile(given.to_owned()))?;
            if !out.contains(&entry.name) {
                out.push(entry.name);
            }
        }
        Ok(ToolFiles { allowed: out })
    }

    /// The entries that stay read-only.
    pub fn protected(&self) -> impl Iterator<Item = &'static ToolEntry> + '_ {
        TOOL_ENTRIES.iter().filter(|e| !self.allowed.contains(&e.name))
    }

    /// The suffix entry ([`TOOL_SUFFIX_ENTRIES`]) that protects the workspace's top-level file `file_name`, if
    /// one does and the person did not allow it.
    pub fn protects_by_suffix(&self, file_name: &str) -> Option<&'static ToolEntry> {
        TOOL_SUFFIX_ENTRIES.iter().find(|e| !self.allowed.contains(&e.name) && e.matches_suffix(file_name))
    }

    /// The entries the person allowed.
    pub fn allowed(&self) -> &[&'static str] {
        &self.allowed
    }

    /// The rule in words, for the protection report and `uexec sandbox-report`.
    pub fn text(&self) -> String {
        let protected: Vec<&ToolEntry> = self.protected().collect();
        let mut text = if protected.is_empty() {
            "no other tool's files (all allowed)".to_owned()
        } else {
            let dirs: Vec<&ToolEntry> =
                protected.iter().copied().filter(|e| e.kind == ToolEntryKind::Directory).collect();
            let files: Vec<&ToolEntry> =
                protected.iter().copied().filter(|e| e.kind == ToolEntryKind::File).collect();
            format!(
                "other tools' files that run code without asking, in every writable root, present or absent: {} \
                 (on Linux an absent one of the workspace gets an empty read-only placeholder) and {} (on Linux \
                 an absent one of the workspace gets a read-only link to nowhere where the sandbox keeps a record \
                 to remove it); on Linux an absent one elsewhere (/tmp) stays creatable: a mount needs something \
                 to cover",
                names(&dirs.into_iter().copied().collect::<Vec<_>>()),
                names(&files.into_iter().copied().collect::<Vec<_>>()),
            )
        };
        let suffixes: Vec<&str> =
            TOOL_SUFFIX_ENTRIES.iter().filter(|e| !self.allowed.contains(&e.name)).map(|e| e.name).collect();
        if !suffixes.is_empty() {
            text.push_str(&format!("; the top-level {} files present", suffixes.join(", ")));
        }
        if !self.allowed.is_empty() {
            text.push_str(&format!("; allowed by {ALLOW_KEY}: {}", self.allowed.join(", ")));
        }
        text
    }
}

impl ToolEntry {
    /// The entry called `name` (as in [`TOOL_ENTRIES`]), protected or not.
    pub fn named(name: &str) -> Option<&'static ToolEntry> {
        TOOL_ENTRIES.iter().chain(&TOOL_SUFFIX_ENTRIES).find(|e| e.name == name)
    }

    /// The config setting that lets sandboxed commands write it (`allow_tool_files = [".vscode"]`).
    pub fn allow_setting(&self) -> String {
        format!("{ALLOW_KEY} = [\"{}\"]", self.name)
    }
}

/// The names of `entries`, comma-separated.
fn names(entries: &[ToolEntry]) -> String {
    entries.iter().map(|e| e.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn code_workspace_files_are_protected_by_their_suffix_unless_allowed() {
        let all = ToolFiles::all();
        assert_eq!(all.protects_by_suffix("proj.code-workspace").map(|e| e.name), Some("*.code-workspace"));
        for twin in [".code-workspace", "proj.code-workspace.bak", "proj.code-workspac", "a/b.code-workspace"]
        {
            assert!(all.protects_by_suffix(twin).is_none(), "{twin}");
        }
        let allowed = ToolFiles::allowing(&["*.code-workspace"]).unwrap();
        assert!(allowed.protects_by_suffix("proj.code-workspace").is_none());
        assert!(allowed.protected().count() == TOOL_ENTRIES.len());
        assert_eq!(ToolEntry::named("*.code-workspace").map(|e| e.kind), Some(ToolEntryKind::File));
        assert!(all.text().contains("*.code-workspace") && !allowed.text().contains("top-level *"));
    }

    #[test]
    fn every_entry_is_protected_unless_allowed_by_name() {
        let all = ToolFiles::all();
        let names: Vec<&str> = all.protected().map(|e| e.name).collect();
        for name in [".vscode", ".idea", ".claude", ".mcp.json", ".cursor", ".codex", ".envrc"] {
            assert!(names.contains(&name), "{name}");
        }
        let some = ToolFiles::allowing(&[".vscode/", ".vscode", ".mcp.json"]).unwrap();
        assert_eq!(some.allowed(), &[".vscode", ".mcp.json"]);
        assert!(!some.protected().any(|e| e.name == ".vscode" || e.name == ".mcp.json"));
        assert!(some.protected().any(|e| e.name == ".idea"));
        assert!(some.text().contains("allowed by allow_tool_files: .vscode, .mcp.json"), "{}", some.text());
        let err = ToolFiles::allowing(&[".vscodium"]).unwrap_err();
        assert!(err.to_string().contains(".vscodium names no protected tool file"), "{err}");
        assert!(ToolFiles::allowing(&[""]).is_err());
        let none: Vec<&str> = TOOL_ENTRIES.iter().map(|e| e.name).collect();
        assert_eq!(ToolFiles::allowing(&none).unwrap().protected().count(), 0);
    }

    #[test]
    fn a_refusal_names_the_entry_and_the_key() {
        let vscode = ToolEntry::named(".vscode").unwrap();
        assert_eq!(vscode.allow_setting(), "allow_tool_files = [\".vscode\"]");
        assert_eq!(ToolEntry::named(".mcp.json").map(|e| e.kind), Some(ToolEntryKind::File));
        assert_eq!(ToolEntry::named(".envrc").map(|e| e.kind), Some(ToolEntryKind::File));
        assert_eq!(ToolEntry::named(".vscodex"), None);
        assert_eq!(ToolEntry::named(".git"), None);
        assert_eq!(ToolEntry::named(""), None);
    }
}
