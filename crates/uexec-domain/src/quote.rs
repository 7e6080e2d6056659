//! Shell quoting, the one implementation: how a word is written so that a POSIX shell reads it back as that
//! one word, for text a person reads (a refused command, the `sandbox-exec` line of `uexec sandbox-report`)
//! and for files a shell sources (the login snapshot).
//!
//! A word made only of characters no POSIX shell treats specially in any position is written as it is
//! ([`is_plain`]); any other word is single-quoted, each `'` in it written `'\''`. `@`, `+`, `,`, `:`, `=`,
//! `.`, `/`, `-`, `_` are plain; `~` (tilde expansion at the start of a word), `%` (a job in an interactive
//! shell) and every other character, non-ASCII included, are quoted.

/// True when `word` reads back as itself unquoted: non-empty, and only ASCII letters, digits and the
/// characters of the module documentation.
pub fn is_plain(word: &str) -> bool {
    !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '=' | ':' | ',' | '+' | '@')
        })
}

/// `word` as one shell word: itself when it is plain, else single-quoted.
pub fn shell_word(word: &str) -> String {
    if is_plain(word) { word.to_owned() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}

/// `words` as a command line: each a shell word, separated by spaces.
pub fn shell_words<S: AsRef<str>>(words: &[S]) -> String {
    words.iter().map(|w| shell_word(w.as_ref())).collect::<Vec<_>>().join(" ")
}

/// `value` (any bytes) single-quoted, always: for a file a shell sources.
pub fn single_quoted(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 2);
    out.push(b'\'');
    for byte in value {
        if *byte == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(*byte);
        }
    }
    out.push(b'\'');
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn plain_words_stay_and_the_rest_is_quoted() {
        for (word, shown) in [
            ("ls", "ls"),
            ("-DWRITABLE_ROOT_0=/tmp", "-DWRITABLE_ROOT_0=/tmp"),
            ("user@host:/path,a+b", "user@host:/path,a+b"),
            ("%1", "'%1'"),
            ("git@github.com:o/r.git", "git@github.com:o/r.git"),
            ("", "''"),
            ("a b", "'a b'"),
            ("it's", "'it'\\''s'"),
            ("'", "''\\'''"),
            ("~", "'~'"),
            ("~/x", "'~/x'"),
            ("$HOME", "'$HOME'"),
            ("a;b", "'a;b'"),
            ("*", "'*'"),
            ("a\nb", "'a\nb'"),
            ("caf\u{e9}", "'caf\u{e9}'"),
            ("!x", "'!x'"),
            ("@(a)", "'@(a)'"),
        ] {
            assert_eq!(shell_word(word), shown, "{word:?}");
        }
        assert_eq!(shell_words(&["echo", "a b", "x@y"]), "echo 'a b' x@y");
        assert_eq!(single_quoted(b"it's"), b"'it'\\''s'");
        assert_eq!(single_quoted(b"plain"), b"'plain'");
        assert_eq!(single_quoted(b""), b"''");
    }

    /// Reads back one POSIX shell word made of plain characters and single-quoted parts (what
    /// [`shell_word`] writes), or `None` when `text` is not one such word.
    fn read_back(text: &str) -> Option<String> {
        let mut out = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            match c {
                '\'' => loop {
                    match chars.next()? {
                        '\'' => break,
                        c => out.push(c),
                    }
                },
                '\\' => out.push(chars.next()?),
                c if is_plain(&c.to_string()) => out.push(c),
                _ => return None,
            }
        }
        Some(out)
    }

    proptest! {
        #[test]
        fn every_word_reads_back_as_itself(word in "[ -~\u{e9}\n\t]{0,16}") {
            prop_assert_eq!(read_back(&shell_word(&word)), Some(word.clone()));
            let quoted = String::from_utf8(single_quoted(word.as_bytes())).unwrap();
            prop_assert_eq!(read_back(&quoted), Some(word));
        }
    }
}
