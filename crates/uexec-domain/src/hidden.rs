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

use std::collections::BTreeMap;
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

/// The most directory entries an expansion lists (over every pattern: the workspace is walked once). A
/// directory the walk does not reach within it, or whose listing it cuts short, is not searched but named in
/// [`Expansion::unexamined`], which the sandbox hides as a whole: a command that creates files cannot make
/// later commands fail, only see less of what it filled. Large enough for a monorepo with its `node_modules`
/// (about 100 ms of a spawn on this budget's worth of entries: see `docs/sandbox.md`).
pub const MAX_VISITED: usize = 1_000_000;

/// The most directories [`Expansion::unexamined`] names: beyond it, unsearched siblings are named by their parent
/// (each is one mount in every command).
pub const MAX_UNEXAMINED: usize = 64;

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
/// Runs once per directory entry the search lists, so it allocates nothing: it walks the UTF-8 bytes a character
/// at a time.
pub fn component_matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    // The character at `i` of `bytes`, as a byte slice (both are valid UTF-8, so `i` is on a boundary).
    let char_at = |bytes: &'_ [u8], i: usize| -> usize {
        match bytes.get(i) {
            Some(0xf0..) => 4,
            Some(0xe0..) => 3,
            Some(0xc0..) => 2,
            _ => 1,
        }
    };
    // Iterative matcher with one backtracking point (the last `*`): linear in practice, no recursion.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        let n_len = char_at(n, ni);
        let p_len = char_at(p, pi);
        if pi < p.len() && p[pi] == b'?' {
            pi += 1;
            ni += n_len;
        } else if pi < p.len() && p[pi] != b'*' && p.get(pi..pi + p_len) == n.get(ni..ni + n_len) {
            pi += p_len;
            ni += n_len;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            let skipped = sn + char_at(n, sn);
            pi = sp + 1;
            ni = skipped;
            star = Some((sp, skipped));
        } else {
            return false;
        }
    }
    p.get(pi..).is_some_and(|rest| rest.iter().all(|c| *c == b'*'))
}

/// What a directory entry is, as [`DirLister`] reports it (from `lstat`: links are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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
    /// Call `visit` with each entry of `dir` until it returns false; true when it saw every entry (a directory
    /// that cannot be listed has none). The default lists the whole directory first; a lister for a real file
    /// system reads it as it goes, so that a huge directory costs no memory and can be stopped.
    fn each_entry(&mut self, dir: &Path, visit: &mut dyn FnMut(&str, EntryKind) -> bool) -> bool {
        self.entries(dir).into_iter().all(|(name, kind)| visit(&name, kind))
    }
}

/// The paths a set of patterns names, found by [`expand`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expansion {
    /// Existing paths to hide, each with the pattern that named it, in order of discovery, without duplicates.
    pub paths: Vec<(PathBuf, EntryKind, String)>,
    /// Directories a pattern had to search that were not searched: reached after [`MAX_VISITED`] entries, cut
    /// short by it, or deeper than [`MAX_DEPTH`]. What they hold is unknown, so they are to be hidden as a whole.
    /// At most [`MAX_UNEXAMINED`]: beyond that, a parent names its unsearched children.
    pub unexamined: Vec<PathBuf>,
    /// True when the unsearched part could not be named within [`MAX_UNEXAMINED`] directories without naming a
    /// base (the workspace, the home) itself: the sandbox cannot hide it and must fail closed.
    pub truncated: bool,
}

/// Expand `patterns` against `home` (patterns under `~` are skipped without one) and `workspace`, listing at
/// most [`MAX_VISITED`] entries. Nothing below a directory named `.git` is visited by `**` (it holds no secrets
/// of its own and can be huge; the sandbox keeps commands from moving a hidden entry there).
pub fn expand(
    patterns: &[HiddenPattern],
    home: Option<&Path>,
    workspace: &Path,
    lister: &mut dyn DirLister,
) -> Expansion {
    expand_within(patterns, home, workspace, lister, MAX_VISITED)
}

/// [`expand`], listing at most `budget` entries. Each base is walked once for all of its patterns: a directory
/// is listed once, whatever the number of patterns that search it.
pub fn expand_within(
    patterns: &[HiddenPattern],
    home: Option<&Path>,
    workspace: &Path,
    lister: &mut dyn DirLister,
    budget: usize,
) -> Expansion {
    let mut walk = Walk { lister, patterns, expansion: Expansion::default(), visited: 0, budget };
    for base in [Base::Home, Base::Workspace, Base::Root, Base::Exact] {
        let dir = match base {
            Base::Home => match home {
                Some(home) => home.to_path_buf(),
                None => continue,
            },
            Base::Workspace => workspace.to_path_buf(),
            Base::Root | Base::Exact => PathBuf::from("/"),
        };
        let states: Vec<State> =
            patterns.iter().enumerate().filter(|(_, p)| p.base == base).map(|(i, _)| (i, 0)).collect();
        if states.is_empty() {
            continue;
        }
        let before = walk.expansion.unexamined.len();
        walk.dir(&dir, states, 0);
        walk.settle(&dir, before);
    }
    walk.expansion
}

/// A position in one pattern: (index of the pattern, index of the next component to match).
type State = (usize, usize);

/// The state of one expansion.
struct Walk<'a> {
    lister: &'a mut dyn DirLister,
    patterns: &'a [HiddenPattern],
    expansion: Expansion,
    visited: usize,
    budget: usize,
}

impl Walk<'_> {
    /// Match `states` beneath the directory `dir`, `depth` levels below its base.
    ///
    /// No listing starts once `budget` entries were listed; one that started is read to its end (a directory a
    /// command filled with files stays searchable, and removable) unless the expansion reaches twice the budget,
    /// where it stops and the directory is unexamined. Subdirectories met once the budget is spent are not
    /// searched: up to [`MAX_UNEXAMINED`] are named, more are named by this directory.
    fn dir(&mut self, dir: &Path, states: Vec<State>, depth: usize) {
        let states = self.closure(states);
        if states.is_empty() {
            return;
        }
        let listed = states.iter().any(|&(p, i)| is_wild(self.patterns, (p, i)));
        // The subdirectories to descend into, with their states, in name order.
        let mut children: BTreeMap<String, Vec<State>> = BTreeMap::new();
        let mut matches: Vec<(String, EntryKind, usize)> = Vec::new();
        let mut unreached: Vec<PathBuf> = Vec::new();
        let mut too_many_unreached = false;
        if listed {
            if self.visited >= self.budget {
                self.expansion.unexamined.push(dir.to_path_buf());
                return;
            }
            let patterns = self.patterns;
            let (budget, limit) = (self.budget, self.budget.saturating_mul(2));
            let visited = &mut self.visited;
            *visited = visited.saturating_add(1);
            let complete = self.lister.each_entry(dir, &mut |name, kind| {
                *visited = visited.saturating_add(1);
                if *visited > limit {
                    return false;
                }
                let mut next = Vec::new();
                for &(p, i) in &states {
                    if is_globstar(patterns, (p, i)) {
                        if kind == EntryKind::Dir && name != ".git" {
                            next.push((p, i));
                        }
                    } else if matches_component(patterns, (p, i), name) {
                        advance(patterns, name, kind, (p, i + 1), &mut next, &mut matches);
                    }
                }
                if next.is_empty() {
                    return true;
                }
                if (*visited >= budget || depth >= MAX_DEPTH) && lists(patterns, next.clone()) {
                    if unreached.len() <= MAX_UNEXAMINED {
                        unreached.push(dir.join(name));
                    } else {
                        too_many_unreached = true;
                    }
                    return true;
                }
                children.entry(name.to_owned()).or_default().extend(next);
                true
            });
            if !complete {
                self.expansion.unexamined.push(dir.to_path_buf());
                return;
            }
        } else {
            // Literal components only: one lookup each, whatever the size of the directory.
            for &(p, i) in &states {
                let name = self.patterns[p].components[i].clone();
                let Some(kind) = self.lister.kind(&dir.join(&name)) else {
                    continue;
                };
                let mut next = Vec::new();
                advance(self.patterns, &name, kind, (p, i + 1), &mut next, &mut matches);
                if !next.is_empty() {
                    children.entry(name).or_default().extend(next);
                }
            }
        }
        matches.sort();
        for (name, kind, p) in matches {
            let path = dir.join(name);
            if !self.expansion.paths.iter().any(|(known, _, _)| *known == path) {
                self.expansion.paths.push((path, kind, self.patterns[p].text.clone()));
            }
        }
        // The subdirectories that would be listed but cannot be (the budget is spent, or they lie too deep): many
        // of them are named by this directory instead (`**` in a directory a command filled with directories).
        for (name, next) in children {
            let path = dir.join(name);
            if (self.visited >= self.budget || depth >= MAX_DEPTH) && lists(self.patterns, next.clone()) {
                unreached.push(path);
            } else {
                self.dir(&path, next, depth + 1);
            }
        }
        if (too_many_unreached || unreached.len() > MAX_UNEXAMINED) && depth > 0 {
            self.expansion.unexamined.push(dir.to_path_buf());
        } else {
            if too_many_unreached {
                // Named by the base, which cannot be hidden: settle() finds the list too long.
                self.expansion.truncated = true;
            }
            self.expansion.unexamined.extend(unreached);
        }
    }

    /// `states` with, after each `**`, the state that matches it against no directory; without duplicates and
    /// without finished states.
    fn closure(&self, states: Vec<State>) -> Vec<State> {
        closure(self.patterns, states)
    }

    /// Bring the unsearched directories below `base` (from index `from` on) within [`MAX_UNEXAMINED`]: a
    /// directory beneath another one named is dropped; if there are still too many, each is named by its
    /// ancestor just below the base (which hides more than was left unsearched); if there are still too many, or
    /// one is the base itself, the expansion is truncated.
    fn settle(&mut self, base: &Path, from: usize) {
        let mut mine: Vec<PathBuf> = self.expansion.unexamined.split_off(from);
        let outermost = |list: &mut Vec<PathBuf>| {
            // Component-wise order puts a directory's descendants right after it.
            list.sort();
            list.dedup();
            let mut kept: Vec<PathBuf> = Vec::with_capacity(list.len());
            for path in list.drain(..) {
                if !kept.last().is_some_and(|last| path.starts_with(last)) {
                    kept.push(path);
                }
            }
            *list = kept;
        };
        outermost(&mut mine);
        let room = MAX_UNEXAMINED.saturating_sub(self.expansion.unexamined.len());
        if mine.len() > room {
            let depth = base.components().count() + 1;
            for path in &mut mine {
                if path.starts_with(base) && path.components().count() > depth {
                    *path = path.components().take(depth).collect();
                }
            }
            outermost(&mut mine);
        }
        if mine.len() > room || mine.iter().any(|p| base.starts_with(p)) {
            self.expansion.truncated = true;
        }
        self.expansion.unexamined.extend(mine);
    }
}

/// `states` with, after each `**`, the state that matches it against no directory; without duplicates and
/// without finished states.
fn closure(patterns: &[HiddenPattern], mut states: Vec<State>) -> Vec<State> {
    let mut k = 0;
    while k < states.len() {
        let (p, i) = states[k];
        if i < patterns[p].components.len() && is_globstar(patterns, (p, i)) && !states.contains(&(p, i + 1))
        {
            states.push((p, i + 1));
        }
        k += 1;
    }
    states.retain(|&(p, i)| i < patterns[p].components.len());
    states.sort_unstable();
    states.dedup();
    states
}

/// True when a directory searched with `states` has to be listed (a component with a wildcard).
fn lists(patterns: &[HiddenPattern], states: Vec<State>) -> bool {
    closure(patterns, states).iter().any(|&state| is_wild(patterns, state))
}

/// The component at `state` has a wildcard (never in an exact location, whose components are literal).
fn is_wild(patterns: &[HiddenPattern], (p, i): State) -> bool {
    patterns[p].base != Base::Exact && patterns[p].components[i].contains(['*', '?'])
}

/// The component at `state` is `**` (never in an exact location).
fn is_globstar(patterns: &[HiddenPattern], (p, i): State) -> bool {
    patterns[p].base != Base::Exact && patterns[p].components[i] == "**"
}

/// Whether the entry `name` matches the component at `state`: by glob, or literally in an exact location.
fn matches_component(patterns: &[HiddenPattern], (p, i): State, name: &str) -> bool {
    let component = &patterns[p].components[i];
    match patterns[p].base {
        Base::Exact => component == name,
        _ => component_matches(component, name),
    }
}

/// Entry `name` matched the component before `state`: a match (into `matches`) when that was the pattern's
/// last, otherwise `state` goes on beneath it (a directory; links are not followed).
fn advance(
    patterns: &[HiddenPattern],
    name: &str,
    kind: EntryKind,
    state: State,
    next: &mut Vec<State>,
    matches: &mut Vec<(String, EntryKind, usize)>,
) {
    let pattern = &patterns[state.0];
    if state.1 == pattern.components.len() {
        if kind != EntryKind::Symlink || pattern.base == Base::Home {
            matches.push((name.to_owned(), kind, state.0));
        }
    } else if kind == EntryKind::Dir {
        next.push(state);
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
        // `?` is one character, not one byte.
        assert!(component_matches("caf?", "café"));
        assert!(!component_matches("caf??", "café"));
        assert!(component_matches("*é*", "aébé"));
        assert!(!component_matches("é", "e"));
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
                "/h/.kube",
                "/h/.netrc",
                "/h/.ssh",
                "/h/.docker/config.json",
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

    /// A hidden location never shrinks to let a command see its own directory.
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
    fn an_endless_tree_is_named_in_a_few_unsearched_directories_below_the_base() {
        struct Endless;
        impl DirLister for Endless {
            fn kind(&mut self, _: &Path) -> Option<EntryKind> {
                None
            }
            fn entries(&mut self, _: &Path) -> Vec<(String, EntryKind)> {
                (0..10).map(|i| (format!("d{i}"), EntryKind::Dir)).collect()
            }
        }
        let found = expand_within(
            &[HiddenPattern::parse("secret").unwrap()],
            None,
            Path::new("/w"),
            &mut Endless,
            5000,
        );
        assert!(found.paths.is_empty());
        assert!(!found.truncated, "{found:?}");
        assert!(!found.unexamined.is_empty() && found.unexamined.len() <= MAX_UNEXAMINED, "{found:?}");
        assert!(found.unexamined.iter().all(|p| p.starts_with("/w") && p != Path::new("/w")), "{found:?}");
    }

    /// `/w/a/.env`, `/w/junk` with `junk` files, `/w/z/.env` and `/w/z/sub/.env`.
    fn junk_tree(junk: usize) -> Tree {
        use EntryKind::*;
        let mut tree = Tree::with(&[
            ("/w/a", Dir),
            ("/w/a/.env", Other),
            ("/w/junk", Dir),
            ("/w/z", Dir),
            ("/w/z/.env", Other),
            ("/w/z/sub", Dir),
            ("/w/z/sub/.env", Other),
        ]);
        for i in 0..junk {
            tree.0.insert(PathBuf::from(format!("/w/junk/f{i:03}")), Other);
        }
        tree
    }

    #[test]
    fn what_the_budget_does_not_reach_is_unexamined_and_what_it_searched_is_not() {
        let patterns = [HiddenPattern::parse(".env*").unwrap()];
        // Enough budget: everything found, nothing unexamined.
        let found = expand_within(&patterns, None, Path::new("/w"), &mut junk_tree(50), 1000);
        assert_eq!(paths(&found), vec!["/w/a/.env", "/w/z/.env", "/w/z/sub/.env"]);
        assert!(found.unexamined.is_empty() && !found.truncated);
        // A budget of 30 (each directory and each entry count one): `/w` and `/w/a` are searched, `junk` was
        // started within it and is read to its end (it stays searchable, so it can be removed), `z` comes after.
        let found = expand_within(&patterns, None, Path::new("/w"), &mut junk_tree(50), 30);
        assert_eq!(paths(&found), vec!["/w/a/.env"]);
        assert_eq!(found.unexamined, vec![PathBuf::from("/w/z")]);
        assert!(!found.truncated);
        // A listing that reaches twice the budget is cut short: its directory is unexamined too.
        let found = expand_within(&patterns, None, Path::new("/w"), &mut junk_tree(100), 30);
        assert_eq!(found.unexamined, vec![PathBuf::from("/w/junk"), PathBuf::from("/w/z")]);
        // The base itself cut short: unexamined, and truncated (it cannot be hidden).
        let found = expand_within(&patterns, None, Path::new("/w"), &mut junk_tree(0), 1);
        assert_eq!(found.unexamined, vec![PathBuf::from("/w")]);
        assert!(found.truncated);
    }

    #[test]
    fn many_unsearched_siblings_are_named_by_their_parent_but_never_by_the_base() {
        use EntryKind::*;
        let mut tree = Tree::with(&[("/w/junk", Dir), ("/w/src", Dir), ("/w/src/.env", Other)]);
        for i in 0..100 {
            tree.0.insert(PathBuf::from(format!("/w/junk/d{i:03}")), Dir);
            tree.0.insert(PathBuf::from(format!("/w/junk/d{i:03}/x")), Other);
        }
        let patterns = [HiddenPattern::parse(".env*").unwrap()];
        // `/w` (3) + `junk` (101) + one of its directories (2): 99 siblings and `src` left.
        let found = expand_within(&patterns, None, Path::new("/w"), &mut tree, 105);
        assert_eq!(found.unexamined, vec![PathBuf::from("/w/junk"), PathBuf::from("/w/src")]);
        assert!(!found.truncated);
        // The same directories directly in the base: they cannot be named by the base, so it is truncated.
        let mut flat = Tree::default();
        for i in 0..100 {
            flat.0.insert(PathBuf::from(format!("/w/d{i:03}")), Dir);
            flat.0.insert(PathBuf::from(format!("/w/d{i:03}/x")), Other);
        }
        let found = expand_within(&patterns, None, Path::new("/w"), &mut flat, 101);
        assert!(found.truncated, "{found:?}");
    }

    #[test]
    fn a_tree_deeper_than_the_limit_is_unexamined_below_it() {
        let mut tree = Tree::default();
        let mut dir = PathBuf::from("/w");
        for _ in 0..(MAX_DEPTH + 5) {
            dir.push("d");
            tree.0.insert(dir.clone(), EntryKind::Dir);
        }
        tree.0.insert(dir.join(".env"), EntryKind::Other);
        let found = expand(&[HiddenPattern::parse(".env").unwrap()], None, Path::new("/w"), &mut tree);
        assert!(found.paths.is_empty() && !found.truncated);
        assert_eq!(found.unexamined.len(), 1);
        assert_eq!(found.unexamined[0].components().count(), MAX_DEPTH + 3, "{found:?}");
        assert!(dir.starts_with(&found.unexamined[0]));
    }

    #[test]
    fn each_directory_is_listed_once_for_every_pattern() {
        struct Counting(Tree, BTreeMap<PathBuf, usize>);
        impl DirLister for Counting {
            fn kind(&mut self, path: &Path) -> Option<EntryKind> {
                self.0.kind(path)
            }
            fn entries(&mut self, dir: &Path) -> Vec<(String, EntryKind)> {
                *self.1.entry(dir.to_path_buf()).or_default() += 1;
                self.0.entries(dir)
            }
        }
        let mut lister = Counting(junk_tree(3), BTreeMap::new());
        lister.0.0.insert(PathBuf::from("/w/z/key.pem"), EntryKind::Other);
        let patterns = [
            HiddenPattern::parse(".env*").unwrap(),
            HiddenPattern::parse("*.pem").unwrap(),
            HiddenPattern::parse("z/sub/.env").unwrap(),
        ];
        let found = expand(&patterns, None, Path::new("/w"), &mut lister);
        assert_eq!(paths(&found), vec!["/w/a/.env", "/w/z/.env", "/w/z/key.pem", "/w/z/sub/.env"]);
        assert!(lister.1.values().all(|n| *n == 1), "{:?}", lister.1);
        assert_eq!(lister.1.len(), 5);
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
        fn the_matcher_agrees_with_a_plain_recursive_one(pattern in "[aé*?]{0,6}", name in "[aéb]{0,6}") {
            fn reference(p: &[char], n: &[char]) -> bool {
                match p.split_first() {
                    None => n.is_empty(),
                    Some(('*', rest)) => (0..=n.len()).any(|k| reference(rest, &n[k..])),
                    Some(('?', rest)) => !n.is_empty() && reference(rest, &n[1..]),
                    Some((c, rest)) => n.first() == Some(c) && reference(rest, &n[1..]),
                }
            }
            let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
            prop_assert_eq!(component_matches(&pattern, &name), reference(&p, &n));
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
