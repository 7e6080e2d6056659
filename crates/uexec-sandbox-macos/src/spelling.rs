//! Every spelling under which the kernel may present one canonical path to Seatbelt, as one regular expression.
//!
//! Seatbelt matches `literal` and `subpath` filters byte for byte against the path the kernel reports. Two facts
//! of macOS make that path differ from the canonical one uexec computes:
//! - **Firmlinks.** Since macOS 10.15 the writable half of the system lives on the Data volume, mounted at
//!   `/System/Volumes/Data`, and `/Users`, `/private`, `/Library`, `/Applications`, `/opt`, `/usr/local`,
//!   `/Volumes` and `/cores` are firmlinks into it (`/usr/share/firmlinks`): `~/.ssh/id_ed25519` is also
//!   `/System/Volumes/Data/Users/<u>/.ssh/id_ed25519`.
//! - **Case-insensitive volumes** (the APFS default): `.GIT/config` and `~/.SSH` name the same files as
//!   `.git/config` and `~/.ssh`, and the name cache may hold the spelling a process used.
//!
//! So every rule that *denies* (hidden locations, read-only entries, their ancestors) matches a regular
//! expression built here, passed as a `-D` parameter like every path, while rules that *grant* keep matching
//! the canonical spelling only (a variant spelling of a writable root is refused: that fails closed).
//!
//! The expression folds ASCII letters (`[Gg][Ii][Tt]`), writes the ERE metacharacters as one-character bracket
//! expressions (`[.]`) or escaped (`\^`, `\[`, `\]`, `\\`), and leaves other punctuation as it is; a run of
//! non-ASCII bytes becomes `[^/]+`, because APFS also ignores Unicode case and normalisation (`é` precomposed
//! or decomposed), which byte classes cannot express: the expression then denies a little more than the path
//! (names that differ only in their non-ASCII characters), never less. The result is pure ASCII.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where the Data volume is mounted.
pub const DATA_VOLUME: &str = "/System/Volumes/Data";

/// The top-level firmlinks into the Data volume (`/usr/share/firmlinks` on macOS 10.15 and later).
pub const FIRMLINKS: [&str; 9] = [
    "/Users",
    "/private",
    "/Library",
    "/Applications",
    "/opt",
    "/usr/local",
    "/Volumes",
    "/cores",
    "/AppleInternal",
];

/// `path` and, when it lies under a firmlink, its spelling on the Data volume (or, when it is spelled on the Data
/// volume, its firmlinked spelling). `path` first.
pub fn spellings(path: &Path) -> Vec<PathBuf> {
    let mut out = vec![path.to_path_buf()];
    let data = Path::new(DATA_VOLUME);
    if let Ok(rest) = path.strip_prefix(data) {
        let firm = Path::new("/").join(rest);
        if FIRMLINKS.iter().any(|f| firm.starts_with(f)) {
            out.push(firm);
        }
    } else if FIRMLINKS.iter().any(|f| path.starts_with(f)) {
        out.push(data.join(path.strip_prefix("/").unwrap_or(path)));
    }
    out
}

/// An anchored expression matching every spelling of `path` (see the module documentation); with `subtree`,
/// also everything beneath it (what `subpath` matches).
pub fn any_spelling(path: &Path, subtree: bool) -> String {
    let alternatives: Vec<String> = spellings(path).iter().map(|p| fold(p.as_os_str().as_bytes())).collect();
    let tail = if subtree { "(/.*)?" } else { "" };
    format!("^({}){tail}$", alternatives.join("|"))
}

/// An anchored expression matching every spelling of an entry directly in the directory `dir` (any name): what
/// a rule that refuses new entries in `dir` matches.
pub fn any_child_spelling(dir: &Path) -> String {
    let alternatives: Vec<String> = spellings(dir).iter().map(|p| fold(p.as_os_str().as_bytes())).collect();
    format!("^({})/[^/]+$", alternatives.join("|"))
}

/// The bytes of a path as a case-folding expression.
fn fold(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 4);
    let mut in_non_ascii = false;
    for &b in bytes {
        if !b.is_ascii() {
            if !in_non_ascii {
                out.push_str("[^/]+");
                in_non_ascii = true;
            }
            continue;
        }
        in_non_ascii = false;
        let c = b as char;
        if c.is_ascii_alphabetic() {
            out.push('[');
            out.push(c.to_ascii_uppercase());
            out.push(c.to_ascii_lowercase());
            out.push(']');
        } else if matches!(c, '.' | '*' | '+' | '?' | '(' | ')' | '{' | '}' | '|' | '$') {
            // A one-character bracket expression is literal in every regex dialect.
            out.push('[');
            out.push(c);
            out.push(']');
        } else if matches!(c, '^' | '[' | ']' | '\\') {
            out.push('\\');
            out.push(c);
        } else if c.is_ascii_graphic() || c == ' ' {
            // Other punctuation is literal as it is: a backslash before it (`\<`, `\>`) would be a word
            // boundary in some dialects.
            out.push(c);
        } else {
            // Controls (a newline in a name): any one character, which only widens the match.
            out.push('.');
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    fn matches(re: &str, path: &str) -> bool {
        regex_lite::Regex::new(&format!("(?s){re}")).unwrap().is_match(path)
    }

    #[test]
    fn firmlinked_paths_get_their_data_volume_spelling_and_back() {
        assert_eq!(
            spellings(Path::new("/Users/dev/.ssh")),
            vec![PathBuf::from("/Users/dev/.ssh"), PathBuf::from("/System/Volumes/Data/Users/dev/.ssh")]
        );
        assert_eq!(
            spellings(Path::new("/System/Volumes/Data/private/tmp/ws")),
            vec![PathBuf::from("/System/Volumes/Data/private/tmp/ws"), PathBuf::from("/private/tmp/ws")]
        );
        // Not firmlinked: one spelling (a prefix that is no whole component does not count).
        assert_eq!(spellings(Path::new("/usr/lib/x")), vec![PathBuf::from("/usr/lib/x")]);
        assert_eq!(spellings(Path::new("/Usersx/a")), vec![PathBuf::from("/Usersx/a")]);
    }

    #[test]
    fn the_expression_matches_every_case_and_firmlink_spelling_and_nothing_beside() {
        let re = any_spelling(Path::new("/Users/dev/.ssh"), true);
        for yes in [
            "/Users/dev/.ssh",
            "/Users/dev/.ssh/id_ed25519",
            "/users/DEV/.SSH/id_ed25519",
            "/System/Volumes/Data/Users/dev/.ssh/config",
            "/system/volumes/data/users/dev/.Ssh",
        ] {
            assert!(matches(&re, yes), "{re} {yes}");
        }
        for no in [
            "/Users/dev/.sshx",
            "/Users/dev/xssh",
            "/Users/dev/.ssh-old/x",
            "/Users/dev",
            "/x/Users/dev/.ssh",
        ] {
            assert!(!matches(&re, no), "{re} {no}");
        }
        let exact = any_spelling(Path::new("/private/tmp/ws"), false);
        assert!(matches(&exact, "/private/tmp/WS"));
        assert!(matches(&exact, "/System/Volumes/Data/private/tmp/ws"));
        assert!(!matches(&exact, "/private/tmp/ws/x"));
    }

    #[test]
    fn metacharacters_are_escaped_and_non_ascii_runs_widen_only() {
        let re = any_spelling(Path::new("/w/a.b(c)*[d]$|e\\f+g?{1}^h<i>#j"), false);
        assert!(re.is_ascii());
        assert!(matches(&re, "/w/a.b(c)*[d]$|e\\f+g?{1}^h<i>#j"), "{re}");
        assert!(!re.contains("\\<") && !re.contains("\\>"), "no word-boundary escapes: {re}");
        assert!(!matches(&re, "/w/aXb(c)*[d]$|e\\f+g?{1}^h<i>#j"), "the dot is literal");
        assert!(!matches(&re, "/w/a.bc"));
        let path = PathBuf::from(OsStr::from_bytes(b"/Users/Jos\xc3\xa9/.netrc"));
        let re = any_spelling(&path, false);
        assert!(re.is_ascii(), "{re}");
        // Precomposed, decomposed and upper-case spellings of the name all match.
        for spelled in ["/Users/José/.netrc", "/Users/Jose\u{301}/.netrc", "/users/JOSÉ/.NETRC"] {
            assert!(matches(&re, spelled), "{re} {spelled}");
        }
        assert!(!matches(&re, "/Users/Jos/.netrc"));
        let newline = any_spelling(Path::new("/w/a\nb"), false);
        assert!(matches(&newline, "/w/a\nb") && !matches(&newline, "/w/ab"));
    }
}
