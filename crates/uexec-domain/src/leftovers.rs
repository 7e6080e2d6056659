//! What a sandbox leaves on the host while commands run, and the rules for taking it away again: the
//! placeholders it makes under read-only mounts (`.vscode/`, `.git/hooks/`, `.git/objects/info/alternates`, a
//! `.mcp.json` link, ...) and the private store of a repository's loose objects it restores after each command.
//!
//! A sandbox must not change the project it protects, so what it made is removed once no command needs it; and
//! a mount needs the entry it covers, so nothing may be removed while any command still has it mounted. The
//! rules, in order (the Linux adapter carries them out, `uexec-sandbox-linux`'s `keep.rs`; macOS denies by
//! path and makes nothing):
//!
//! 1. **One record per workspace.** Each placeholder made is appended to the workspace's record (in the
//!    server's state directory, never in the project) as a [`Made`] line: its kind and its inode, so that only
//!    uexec's own entry is ever removed, never one a person put there under the same name.
//! 2. **Held while used.** A server holds the workspace's lock shared from before it makes a command's
//!    placeholders until the last of its commands on that workspace is finished (its process tree gone). The
//!    server holds it, not the command: a command could close an inherited descriptor.
//! 3. **Removed by the last one.** Whoever finishes the last command of its server then tries the lock
//!    exclusively, without waiting: held by nobody else means no command of any server has anything mounted,
//!    so every recorded placeholder that is still uexec's and still empty ([`removable`]) is removed (deepest
//!    first) and the record deleted. Held by another server means that server removes them later.
//! 4. **A crash is cleaned at the next start.** A record whose lock nobody holds belongs to a server that
//!    died (its commands died with it: they run in its PID namespace); the next server to start does step 3
//!    for it, after restoring loose objects (below).
//! 5. **Loose objects are kept aside.** Before a command starts, every loose object of a protected repository
//!    not yet in the store is hard-linked there ([`to_keep`]); when a command ends, every stored object
//!    missing from the repository is linked back ([`to_restore`]), never over an existing one (git objects
//!    are immutable: same name, same content). When no command runs anywhere, stored objects gone from the
//!    repository (packed or pruned by the person's own git) leave the store ([`to_prune`]).

use std::collections::BTreeSet;

/// What a placeholder is, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadeKind {
    /// An empty directory.
    Dir,
    /// A regular file holding exactly the recorded bytes (none, or `.\n` for a `commondir`).
    File,
    /// A symbolic link to [`crate::gitdir::ABSENT_LINK_TARGET`].
    Link,
}

impl MadeKind {
    fn letter(self) -> char {
        match self {
            MadeKind::Dir => 'd',
            MadeKind::File => 'f',
            MadeKind::Link => 'l',
        }
    }
}

/// One placeholder a sandbox made: a line of the workspace's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    /// What it is.
    pub kind: MadeKind,
    /// Its inode when made.
    pub inode: u64,
    /// Its absolute path, as bytes.
    pub path: Vec<u8>,
}

impl Made {
    /// The record line (`d 1234 <hex of the path>`, no newline): hex, so that any path bytes fit on one line.
    pub fn line(&self) -> String {
        format!("{} {} {}", self.kind.letter(), self.inode, hex(&self.path))
    }

    /// A record line back; `None` for anything else (a torn last line after a crash, another version's lines).
    pub fn parse(line: &str) -> Option<Made> {
        let mut words = line.split(' ');
        let kind = match words.next()? {
            "d" => MadeKind::Dir,
            "f" => MadeKind::File,
            "l" => MadeKind::Link,
            _ => return None,
        };
        let inode = words.next()?.parse().ok()?;
        let path = unhex(words.next()?)?;
        (words.next().is_none() && path.first() == Some(&b'/')).then_some(Made { kind, inode, path })
    }
}

/// The record line saying that the repository `gitdir` (absolute, as bytes) has loose objects kept aside
/// (`o <hex of the path>`): after a crash, the next start restores them before it removes anything.
pub fn store_line(gitdir: &[u8]) -> String {
    format!("o {}", hex(gitdir))
}

/// The repository of a [`store_line`]; `None` for any other line.
pub fn parse_store_line(line: &str) -> Option<Vec<u8>> {
    let path = unhex(line.strip_prefix("o ")?)?;
    (path.first() == Some(&b'/')).then_some(path)
}

/// What is at a recorded placeholder's path now (`lstat`, and for a file its bytes, for a link its target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Nothing.
    Absent,
    /// A directory (whether it is empty is the kernel's to say: `rmdir` fails when it is not).
    Dir {
        /// Its inode.
        inode: u64,
    },
    /// A regular file.
    File {
        /// Its inode.
        inode: u64,
        /// Its first bytes (at most [`MAX_PLACEHOLDER_BYTES`] + 1).
        bytes: Vec<u8>,
    },
    /// A symbolic link.
    Link {
        /// Its inode.
        inode: u64,
        /// Its target.
        target: Vec<u8>,
    },
    /// Anything else.
    Other,
}

/// The most bytes a file placeholder holds (`.\n`).
pub const MAX_PLACEHOLDER_BYTES: usize = 2;

/// Whether `seen` is still the placeholder `made`, unchanged: the same inode, the same kind, a file holding
/// only what a placeholder holds (nothing, or `.\n`), a link still naming the absent target. Anything else is
/// someone's (the person wrote into it, or replaced it) and stays.
pub fn removable(made: &Made, seen: &Seen) -> bool {
    match (made.kind, seen) {
        (MadeKind::Dir, Seen::Dir { inode }) => *inode == made.inode,
        (MadeKind::File, Seen::File { inode, bytes }) => {
            *inode == made.inode && (bytes.is_empty() || bytes.as_slice() == b".\n")
        }
        (MadeKind::Link, Seen::Link { inode, target }) => {
            *inode == made.inode && target.as_slice() == crate::gitdir::ABSENT_LINK_TARGET.as_bytes()
        }
        _ => false,
    }
}

/// The order to remove recorded placeholders in: deepest first (an `objects/info` made for its `alternates`
/// goes after it), each path once.
pub fn removal_order(made: &[Made]) -> Vec<&Made> {
    let mut out: Vec<&Made> = Vec::new();
    for entry in made {
        if !out.iter().any(|m| m.path == entry.path) {
            out.push(entry);
        }
    }
    out.sort_by_key(|m| std::cmp::Reverse(m.path.iter().filter(|b| **b == b'/').count()));
    out
}

/// The loose objects to link into the store: those present in the repository and not stored yet.
pub fn to_keep<'a>(present: &'a BTreeSet<String>, stored: &BTreeSet<String>) -> Vec<&'a String> {
    present.iter().filter(|name| !stored.contains(*name)).collect()
}

/// The stored objects to link back after a command: those missing from the repository.
pub fn to_restore<'a>(stored: &'a BTreeSet<String>, present: &BTreeSet<String>) -> Vec<&'a String> {
    stored.iter().filter(|name| !present.contains(*name)).collect()
}

/// The stored objects to drop while no command runs: those gone from the repository (the person's own git
/// packed or pruned them). The same difference as [`to_restore`], taken at the other moment.
pub fn to_prune<'a>(stored: &'a BTreeSet<String>, present: &BTreeSet<String>) -> Vec<&'a String> {
    stored.iter().filter(|name| !present.contains(*name)).collect()
}

/// A short stable name for `bytes` (64-bit FNV-1a, hex): the file names of a workspace's record and lock and
/// of a repository's store. Stable across versions and servers, unlike the standard library's hasher.
pub fn key(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn made(kind: MadeKind, inode: u64, path: &str) -> Made {
        Made { kind, inode, path: path.as_bytes().to_vec() }
    }

    #[test]
    fn record_lines_round_trip_any_path_and_reject_torn_ones() {
        let odd = Made { kind: MadeKind::Link, inode: 7, path: b"/ws/a b\nc\xff/.mcp.json".to_vec() };
        for entry in
            [made(MadeKind::Dir, 1, "/ws/.vscode"), made(MadeKind::File, u64::MAX, "/ws/.git/config"), odd]
        {
            assert_eq!(Made::parse(&entry.line()), Some(entry.clone()));
            assert!(!entry.line().contains('\n'));
        }
        let line = made(MadeKind::Dir, 12, "/ws/.idea").line();
        for torn in [&line[..line.len() - 1], &line[..3], "", "x 1 2f", "d 1 2f 2f", "d 1 7773", "d -1 2f"] {
            assert_eq!(Made::parse(torn), None, "{torn:?}");
        }
        let store = store_line(b"/ws/.git");
        assert_eq!(parse_store_line(&store), Some(b"/ws/.git".to_vec()));
        assert_eq!(Made::parse(&store), None);
        assert_eq!(parse_store_line(&line), None);
        assert_eq!(parse_store_line(&store[..store.len() - 1]), None);
    }

    #[test]
    fn only_an_unchanged_placeholder_of_the_same_inode_is_removable() {
        let dir = made(MadeKind::Dir, 5, "/ws/.vscode");
        assert!(removable(&dir, &Seen::Dir { inode: 5 }));
        // Removed and made again by the person, or replaced by something else: theirs.
        assert!(!removable(&dir, &Seen::Dir { inode: 6 }));
        assert!(!removable(&dir, &Seen::File { inode: 5, bytes: Vec::new() }));
        assert!(!removable(&dir, &Seen::Absent));
        let file = made(MadeKind::File, 9, "/ws/.git/config");
        assert!(removable(&file, &Seen::File { inode: 9, bytes: Vec::new() }));
        assert!(removable(&file, &Seen::File { inode: 9, bytes: b".\n".to_vec() }));
        assert!(!removable(&file, &Seen::File { inode: 9, bytes: b"[core]".to_vec() }));
        assert!(!removable(&file, &Seen::Other));
        let link = made(MadeKind::Link, 3, "/ws/.mcp.json");
        let absent = crate::gitdir::ABSENT_LINK_TARGET.as_bytes().to_vec();
        assert!(removable(&link, &Seen::Link { inode: 3, target: absent.clone() }));
        assert!(!removable(&link, &Seen::Link { inode: 3, target: b"/tmp/x".to_vec() }));
        assert!(!removable(&link, &Seen::Link { inode: 4, target: absent }));
    }

    #[test]
    fn placeholders_go_deepest_first_and_once() {
        let list = [
            made(MadeKind::Dir, 1, "/ws/.git/objects/info"),
            made(MadeKind::File, 2, "/ws/.git/objects/info/alternates"),
            made(MadeKind::Dir, 3, "/ws/.vscode"),
            made(MadeKind::Dir, 1, "/ws/.git/objects/info"),
        ];
        let order: Vec<&[u8]> = removal_order(&list).into_iter().map(|m| m.path.as_slice()).collect();
        assert_eq!(
            order,
            vec![&b"/ws/.git/objects/info/alternates"[..], b"/ws/.git/objects/info", b"/ws/.vscode"]
        );
    }

    #[test]
    fn objects_are_kept_once_restored_when_missing_and_pruned_when_gone() {
        let set = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<BTreeSet<String>>();
        let (present, stored) = (set(&["aa/1", "bb/2"]), set(&["bb/2", "cc/3"]));
        assert_eq!(to_keep(&present, &stored), vec!["aa/1"]);
        assert_eq!(to_restore(&stored, &present), vec!["cc/3"]);
        assert_eq!(to_prune(&stored, &present), vec!["cc/3"]);
        assert!(to_keep(&stored, &stored).is_empty());
    }

    #[test]
    fn keys_are_stable_and_short() {
        assert_eq!(key(b""), "cbf29ce484222325");
        assert_eq!(key(b"/ws").len(), 16);
        assert_ne!(key(b"/ws"), key(b"/ws2"));
    }
}
