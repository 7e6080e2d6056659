//! Secret locations that sandboxed commands cannot read: the well-known credential stores under the person's
//! home, the globs a config adds (`.env*` in the workspace), and the expansion of both over a directory tree the
//! caller lists (the I/O stays with the caller, behind [`DirLister`]).
//!
//! Rules of a pattern:
//! - `~/a/b` is relative to the person's home, `/a/b` is absolute, anything else is relative to the workspace;
//! - a relative pattern without `/` (`.env*`) matches that name at any depth of the workspace, as in
//!   `.gitignore`;
//! - in a component, `*` matches any run of characters (dots included) and `?` one character; a component `**`
//!   matches any number of directories;
//! - `.` components are dropped; `..`, an empty pattern, a NUL byte and patterns that would hide the whole home,
//!   workspace or file system (`~`, `/`, `**`, `*`) are refused;
//! - symbolic links met on the way are never followed; a link matched at the end is hidden (through its target,
//!   by the adapter) only for a pattern under the home, which sandboxed commands do not write.
//!
//! An exact location is an absolute path taken literally (no wildcard, `..` kept as written): what the server's
//! own environment names (`$CARGO_HOME/credentials.toml`, the socket of `$SSH_AUTH_SOCK`, see
//! [`crate::hidden_env`]) and the server's own state (its audit log, its snapshots). Exact locations are never
//! parsed from text, so no path is refused for looking like a pattern. The caller resolves their links once,
//! when it makes them (a link a sandboxed command plants later chooses nothing).
//!
//! A hidden location never shrinks for the command's sake: a command whose working directory or workspace lies
//! in one is refused ([`check_directories`]), on every platform.

use std::path::{Path, PathBuf};

/// The credential stores hidden by default, relative to the person's home: SSH and GPG keys, cloud and container
/// registry credentials, `.netrc`, kube configs, and the credential stores of git, gh, npm, pip, cargo and others.
pub const DEFAULT_SECRETS: [&str; 25] = [
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".oci",
    ".docker/config.json",
    ".config/containers/auth.json",
    ".kube",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh/hosts.yml",
    ".config/hub",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".password-store",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".pgpass",
    ".local/share/keyrings",
];

/// The most entries an expansion visits: a pattern matching "anywhere" in a huge workspace stops there (and the
/// expansion says it stopped: the sandbox then reports the protection as partial, which fails closed).
pub const MAX_VISITED: usize = 100_000;

/// The deepest directory level `**` descends to (below the pattern's base); deeper trees count as truncated.
pub const MAX_DEPTH: usize = 128;

/// What a pattern is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Base {
    /// The person's home (`~/...`).
    Home,
    /// The workspace (a relative pattern).
    Workspace,
    /// The file system root (`/...`).
    Root,
    /// An exact absolute path from the server's environment or state ([`HiddenPattern::exact`]): its
    /// components are literal; links are not followed (the caller resolved them when it made the pattern).
    Exact,
}

/// One parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HiddenPattern {
    /// What it is relative to.
    pub base: Base,
    /// Its components (`**` included), never empty.
    pub components: Vec<String>,
    /// The text it was parsed from.
    pub text: String,
}

/// Why a pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HiddenPatternError {
    /// Nothing to match.
    #[error("hidden path pattern {0:?} is empty")]
    Empty(String),
    /// A NUL byte.
    #[error("hidden path pattern {0:?} contains a NUL byte")]
    Nul(String),
    /// A `..` component.
    #[error("hidden path pattern {0:?} contains `..`")]
    ParentDir(String),
    /// It would hide the whole home, workspace or file system.
    #[error("hidden path pattern {0:?} would hide everything beneath its base")]
    Everything(String),
}

impl HiddenPattern {
    /// Parse `text` (see the module documentation).
    pub fn parse(text: &str) -> Result<HiddenPattern, HiddenPatternError> {
        let owned = || text.to_owned();
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(HiddenPatternError::Empty(owned()));
        }
        if trimmed.contains('\0') {
            return Err(HiddenPatternError::Nul(owned()));
        }
        let (base, rest) = if trimmed == "~" {
            (Base::Home, "")
        } else if let Some(rest) = trimmed.strip_prefix("~/") {
            (Base::Home, rest)
        } else if let Some(rest) = trimmed.strip_prefix('/') {
            (Base::Root, rest)
        } else {
            (Base::Workspace, trimmed)
        };
        let mut components: Vec<String> = Vec::new();
        for part in rest.split('/') {
            match part {
                "" | "." => {}
                ".." => return Err(HiddenPatternError::ParentDir(owned())),
                other => components.push(other.to_owned()),
            }
        }
        // A bare name in the workspace matches at any depth.
        if base == Base::Workspace && !rest.contains('/') {
            components.insert(0, "**".to_owned());
        }
        if components.iter().all(|c| c.chars().all(|ch| ch == '*')) {
            return Err(HiddenPatternError::Everything(owned()));
        }
        Ok(HiddenPattern { base, components, text: text.to_owned() })
    }

    /// The exact location `path` (absolute, not `/`), reported as `text` (what named it: `$CARGO_HOME/...`, "the
    /// audit log"). `None` for a relative path, `/`, or a component that is not UTF-8 (such a location is
    /// named by the caller's report instead).
    pub fn exact(path: &Path, text: impl Into<String>) -> Option<HiddenPattern> {
        use std::path::Component;
        if !path.is_absolute() {
            return None;
        }
        let mut components = Vec::new();
        for component in path.components() {
            match component {
                Component::RootDir | Component::CurDir => {}
                Component::ParentDir => components.push("..".to_owned()),
                Component::Normal(name) => components.push(name.to_str()?.to_owned()),
                Component::Prefix(_) => return None,
            }
        }
        if components.is_empty() {
            return None;
        }
        Some(HiddenPattern { base: Base::Exact, components, text: text.into() })
    }

    /// The default patterns ([`DEFAULT_SECRETS`] under the home).
    pub fn defaults() -> Vec<HiddenPattern> {
        DEFAULT_SECRETS
            .iter()
            .map(|rel| HiddenPattern {
                base: Base::Home,
                components: rel.split('/').map(str::to_owned).collect(),
                text: format!("~/{rel}"),
            })
            .collect()
    }
}

/// What a sandbox hides: the person's home (for `~/` patterns) and the patterns. The empty value hides nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HiddenPaths {
    /// The person's home, if known.
    pub home: Option<PathBuf>,
    /// The patterns: usually [`HiddenPattern::defaults`] plus the configured ones, the exact locations the
    /// server's environment names and the server's own state.
    pub patterns: Vec<HiddenPattern>,
    /// Secrets left reachable on purpose, for the report (an agent socket whose variable the environment
    /// policy passes: `SSH_AUTH_SOCK=/run/user/1000/ssh-agent.socket, passed on purpose`).
    pub reachable: Vec<String>,
}

impl HiddenPaths {
    /// True when nothing is to be hidden.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

/// True when `name` matches the component pattern `pattern` (`*` any run, `?` one character, the rest literal).
pub fn component_matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matcher with one backtracking point (the last `*`): linear in practice, no recursion.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == n[ni])) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// What a directory entry is, as [`DirLister`] reports it (from `lstat`: links are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A regular file, device, FIFO or socket.
    Other,
}

/// The caller's view of the file system.
pub trait DirLister {
    /// What `path` is, without following a final link; `None` when it does not exist or cannot be looked at.
    fn kind(&mut self, path: &Path) -> Option<EntryKind>;
    /// The entries of directory `dir` (names and kinds), empty when it cannot be listed.
    fn entries(&mut self, dir: &Path) -> Vec<(String, EntryKind)>;
}

/// The paths a set of patterns names, found by [`expand`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expansion {
    /// Existing paths to hide, each with the pattern that named it, in order of discovery, without duplicates.
    pub paths: Vec<(PathBuf, EntryKind, String)>,
    /// True when the walk stopped at [`MAX_VISITED`] entries.
    pub truncated: bool,
}

/// Expand `patterns` against `home` (patterns under `~` are skipped without one) and `workspace`. Nothing below
/// a directory named `.git` is visited by `**` (it holds no secrets of its own and can be huge).
pub fn expand(
    patterns: &[HiddenPattern],
    home: Option<&Path>,
    workspace: &Path,
    lister: &mut dyn DirLister,
) -> Expansion {
    let mut walk = Walk { lister, expansion: Expansion::default(), visited: 0 };
    for pattern in patterns {
        let base = match pattern.base {
            Base::Home => match home {
                Some(home) => home.to_path_buf(),
                None => continue,
            },
            Base::Workspace => workspace.to_path_buf(),
            Base::Root | Base::Exact => PathBuf::from("/"),
        };
        walk.step(&base, &pattern.components, pattern, 0);
    }
    walk.expansion
}

/// The state of one expansion.
struct Walk<'a> {
    lister: &'a mut dyn DirLister,
    expansion: Expansion,
    visited: usize,
}

impl Walk<'_> {
    /// Match `rest` beneath the directory `dir`.
    fn step(&mut self, dir: &Path, rest: &[String], pattern: &HiddenPattern, depth: usize) {
        let Some((first, tail)) = rest.split_first() else {
            return;
        };
        if self.visited >= MAX_VISITED || depth > MAX_DEPTH {
            self.expansion.truncated = true;
            return;
        }
        let literal = pattern.base == Base::Exact;
        if first == "**" && !literal {
            // Zero directories, then every subdirectory (links are not followed).
            self.step(dir, tail, pattern, depth);
            for (name, kind) in self.list(dir) {
                if kind == EntryKind::Dir && name != ".git" {
                    self.step(&dir.join(&name), rest, pattern, depth + 1);
                }
            }
            return;
        }
        let candidates: Vec<(String, EntryKind)> = if !literal && first.contains(['*', '?']) {
            self.list(dir).into_iter().filter(|(name, _)| component_matches(first, name)).collect()
        } else {
            self.visited += 1;
            match self.lister.kind(&dir.join(first)) {
                Some(kind) => vec![(first.clone(), kind)],
                None => Vec::new(),
            }
        };
        for (name, kind) in candidates {
            let path = dir.join(&name);
            if tail.is_empty() {
                if kind != EntryKind::Symlink || pattern.base == Base::Home {
                    self.found(path, kind, pattern);
                }
            } else if kind == EntryKind::Dir {
                self.step(&path, tail, pattern, depth + 1);
            }
        }
    }

    /// The entries of `dir`, counted against the cap.
    fn list(&mut self, dir: &Path) -> Vec<(String, EntryKind)> {
        let entries = self.lister.entries(dir);
        self.visited = self.visited.saturating_add(entries.len().max(1));
        if self.visited > MAX_VISITED {
            self.expansion.truncated = true;
        }
        entries
    }

    /// Record a match.
    fn found(&mut self, path: PathBuf, kind: EntryKind, pattern: &HiddenPattern) {
        if !self.expansion.paths.iter().any(|(p, _, _)| *p == path) {
            self.expansion.paths.push((path, kind, pattern.text.clone()));
        }
    }
}

/// Which of a command's directories lies in a hidden location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirectoryRole {
    /// Where the command starts (`workdir`).
    WorkingDirectory,
    /// The server's workspace (`--cd`), the directory the policy's "cwd" writable root stands for.
    Workspace,
}

impl DirectoryRole {
    /// How the role reads in a sentence.
    pub fn as_str(self) -> &'static str {
        match self {
            DirectoryRole::WorkingDirectory => "working directory",
            DirectoryRole::Workspace => "workspace",
        }
    }
}

/// A command refused because one of its directories lies in (or is) a hidden location: the location stays
/// hidden, and nothing runs (a command there would see an empty directory, or fail to start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {} {} lies in the hidden secret location {} ({}), which sandboxed commands cannot see",
    .role.as_str(), .directory.display(), .hidden.display(), .pattern
)]
pub struct InHiddenLocation {
    /// Which directory.
    pub role: DirectoryRole,
    /// The directory (canonical).
    pub directory: PathBuf,
    /// The hidden location holding it (canonical).
    pub hidden: PathBuf,
    /// What named the location (the pattern's text: `~/.ssh`, `$CARGO_HOME/credentials.toml`, "the audit log").
    pub pattern: String,
}

/// The one rule, on every platform, for a command whose directories meet the hidden locations: `hidden` are the
/// locations to hide (canonical, each with the text of what named it), `cwd` and `workspace` canonical. A
/// location that is or contains the working directory or the workspace is never dropped to let the command see
/// its directory: the command is refused (the working directory is named first). A location inside them is
/// hidden as usual. A writable root that lies in a hidden location stays hidden with it (the adapter covers the
/// location after making roots writable).
pub fn check_directories(
    hidden: &[(PathBuf, String)],
    workspace: &Path,
    cwd: &Path,
) -> Result<(), InHiddenLocation> {
    for (role, directory) in [(DirectoryRole::WorkingDirectory, cwd), (DirectoryRole::Workspace, workspace)] {
        if let Some((location, pattern)) = hidden.iter().find(|(location, _)| directory.starts_with(location))
        {
            return Err(InHiddenLocation {
                role,
                directory: directory.to_path_buf(),
                hidden: location.clone(),
                pattern: pattern.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// An in-memory tree: path -> kind.
    #[derive(Default)]
    struct Tree(BTreeMap<PathBuf, EntryKind>);

    impl Tree {
        fn with(paths: &[(&str, EntryKind)]) -> Tree {
            Tree(paths.iter().map(|(p, k)| (PathBuf::from(p), *k)).collect())
        }
    }

    impl DirLister for Tree {
        fn kind(&mut self, path: &Path) -> Option<EntryKind> {
            self.0.get(path).copied()
        }
        fn entries(&mut self, dir: &Path) -> Vec<(String, EntryKind)> {
            self.0
                .iter()
                .filter(|(p, _)| p.parent() == Some(dir))
                .map(|(p, k)| (p.file_name().unwrap().to_string_lossy().into_owned(), *k))
                .collect()
        }
    }

    fn paths(expansion: &Expansion) -> Vec<String> {
        expansion.paths.iter().map(|(p, _, _)| p.display().to_string()).collect()
    }

    #[test]
    fn patterns_parse_with_their_base() {
        let p = HiddenPattern::parse("~/.config/x").unwrap();
        assert_eq!((p.base, p.components.clone()), (Base::Home, vec![".config".into(), "x".into()]));
        let p = HiddenPattern::parse("/etc/./secret").unwrap();
        assert_eq!((p.base, p.components.clone()), (Base::Root, vec!["etc".into(), "secret".into()]));
        let p = HiddenPattern::parse(".env*").unwrap();
        assert_eq!((p.base, p.components.clone()), (Base::Workspace, vec!["**".into(), ".env*".into()]));
        let p = HiddenPattern::parse("config/keys.json").unwrap();
        assert_eq!(p.components, vec!["config".to_owned(), "keys.json".to_owned()]);
        for bad in ["", "  ", "~", "/", "**", "*", "~/*", "a/../b", "a\0b", "./**"] {
            assert!(HiddenPattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn defaults_are_home_patterns_without_wildcards() {
        let defaults = HiddenPattern::defaults();
        assert_eq!(defaults.len(), DEFAULT_SECRETS.len());
        for d in &defaults {
            assert_eq!(d.base, Base::Home);
            assert!(d.components.iter().all(|c| !c.contains(['*', '?'])), "{d:?}");
            assert_eq!(HiddenPattern::parse(&d.text).unwrap().components, d.components);
        }
    }

    #[test]
    fn component_wildcards() {
        assert!(component_matches(".env*", ".env"));
        assert!(component_matches(".env*", ".env.local"));
        assert!(!component_matches(".env*", "x.env"));
        assert!(component_matches("*.pem", "a.b.pem"));
        assert!(!component_matches("*.pem", "a.pem.bak"));
        assert!(component_matches("?.txt", "a.txt"));
        assert!(!component_matches("?.txt", "ab.txt"));
        assert!(component_matches("a*b*c", "aXbYbZc"));
        assert!(!component_matches("a*b*c", "aXbYbZ"));
    }

    #[test]
    fn expansion_finds_defaults_and_workspace_globs_but_not_their_twins() {
        use EntryKind::*;
        let mut tree = Tree::with(&[
            ("/h/.ssh", Dir),
            ("/h/.ssh/id_ed25519", Other),
            ("/h/.sshx", Other),
            ("/h/.netrc", Other),
            ("/h/.docker", Dir),
            ("/h/.docker/config.json", Other),
            ("/h/.docker/other.json", Other),
            ("/h/.kube", Symlink),
            ("/w/.env", Other),
            ("/w/.env.local", Other),
            ("/w/env", Other),
            ("/w/sub", Dir),
            ("/w/sub/.env", Other),
            ("/w/sub/link.env", Symlink),
            ("/w/.envrc-link", Symlink),
            ("/w/.git", Dir),
            ("/w/.git/.env", Other),
        ]);
        let mut patterns = HiddenPattern::defaults();
        patterns.push(HiddenPattern::parse(".env*").unwrap());
        let found = expand(&patterns, Some(Path::new("/h")), Path::new("/w"), &mut tree);
        assert!(!found.truncated);
        assert_eq!(
            paths(&found),
            vec![
                "/h/.ssh",
                "/h/.docker/config.json",
                "/h/.kube",
                "/h/.netrc",
                "/w/.env",
                "/w/.env.local",
                "/w/sub/.env"
            ]
        );
        // Without a home, the home patterns are skipped.
        let found = expand(&patterns, None, Path::new("/w"), &mut tree);
        assert_eq!(paths(&found), vec!["/w/.env", "/w/.env.local", "/w/sub/.env"]);
    }

    #[test]
    fn exact_locations_are_literal_and_follow_no_link() {
        use EntryKind::*;
        let mut tree = Tree::with(&[
            ("/o", Dir),
            ("/o/c*", Dir),
            ("/o/c*/credentials.toml", Other),
            ("/o/cx", Dir),
            ("/o/cx/credentials.toml", Other),
            ("/o/kube", Symlink),
        ]);
        let star = HiddenPattern::exact(Path::new("/o/c*/credentials.toml"), "$CARGO_HOME/credentials.toml")
            .unwrap();
        let link = HiddenPattern::exact(Path::new("/o/kube"), "$KUBECONFIG").unwrap();
        let found = expand(&[star, link], None, Path::new("/w"), &mut tree);
        // `*` is a character here, not a wildcard: the twin `/o/cx` is not hidden; a link is not followed (the
        // caller resolved the location when it made it: a link planted later chooses nothing).
        assert_eq!(paths(&found), vec!["/o/c*/credentials.toml"]);
        assert_eq!(found.paths[0].2, "$CARGO_HOME/credentials.toml");
        // `..` is kept as written (the caller resolves it), never refused as a pattern would be.
        assert_eq!(HiddenPattern::exact(Path::new("/a/../b"), "x").unwrap().components, ["a", "..", "b"]);
        for bad in ["/", "relative/path", ""] {
            assert!(HiddenPattern::exact(Path::new(bad), "x").is_none(), "{bad:?}");
        }
    }

    /// Issue 22, class 4: a hidden location never shrinks to let a command see its own directory.
    #[test]
    fn a_directory_in_a_hidden_location_refuses_the_command() {
        let hidden = vec![
            (PathBuf::from("/h/.ssh"), "~/.ssh".to_owned()),
            (PathBuf::from("/h/.aws"), "~/.aws".to_owned()),
        ];
        let check = |ws: &str, cwd: &str| check_directories(&hidden, Path::new(ws), Path::new(cwd));
        for (ws, cwd, role, at) in [
            ("/w", "/h/.ssh", DirectoryRole::WorkingDirectory, "/h/.ssh"),
            ("/w", "/h/.aws/sso/cache", DirectoryRole::WorkingDirectory, "/h/.aws"),
            ("/h/.ssh", "/w", DirectoryRole::Workspace, "/h/.ssh"),
            ("/h/.ssh/x", "/h/.ssh/x", DirectoryRole::WorkingDirectory, "/h/.ssh"),
        ] {
            let error = check(ws, cwd).unwrap_err();
            assert_eq!((error.role, error.hidden.as_path()), (role, Path::new(at)), "{ws} {cwd}");
            let text = error.to_string();
            assert!(
                text.contains(role.as_str()) && text.contains(at) && text.contains("hidden secret location"),
                "{text}"
            );
        }
        // The twins: beside a hidden location, or holding one (it is hidden inside them as usual).
        for (ws, cwd) in [("/w", "/h/.sshx"), ("/h", "/h"), ("/", "/h/src")] {
            assert!(check(ws, cwd).is_ok(), "{ws} {cwd}");
        }
    }

    #[test]
    fn a_huge_tree_stops_at_the_cap() {
        struct Endless;
        impl DirLister for Endless {
            fn kind(&mut self, _: &Path) -> Option<EntryKind> {
                None
            }
            fn entries(&mut self, _: &Path) -> Vec<(String, EntryKind)> {
                (0..10).map(|i| (format!("d{i}"), EntryKind::Dir)).collect()
            }
        }
        let found = expand(&[HiddenPattern::parse("secret").unwrap()], None, Path::new("/w"), &mut Endless);
        assert!(found.truncated);
        assert!(found.paths.is_empty());
    }

    proptest! {
        #[test]
        fn a_literal_component_matches_only_itself(name in "[a-z.]{1,8}", other in "[a-z.]{1,8}") {
            prop_assert!(component_matches(&name, &name));
            prop_assert_eq!(component_matches(&name, &other), name == other);
        }

        #[test]
        fn star_prefix_and_suffix_match_as_str_functions(prefix in "[a-z.]{0,4}", name in "[a-z.]{0,8}") {
            prop_assert_eq!(component_matches(&format!("{prefix}*"), &name), name.starts_with(&prefix));
            prop_assert_eq!(component_matches(&format!("*{prefix}"), &name), name.ends_with(&prefix));
            prop_assert_eq!(component_matches(&format!("*{prefix}*"), &name), name.contains(&prefix));
        }

        #[test]
        fn parsing_never_yields_a_parent_component(text in "[a-z./~*]{0,12}") {
            if let Ok(p) = HiddenPattern::parse(&text) {
                prop_assert!(!p.components.is_empty());
                prop_assert!(p.components.iter().all(|c| c != ".." && c != "." && !c.is_empty()));
                prop_assert!(!p.components.iter().all(|c| c.chars().all(|ch| ch == '*')));
            }
        }
    }
}
