//! The text a model reads of a terminal session: the program's output without the escape sequences that only
//! switch terminal modes or colours and carry no text.
//!
//! A session with a terminal gets a real terminal type (`env::TERMINAL_TYPE`), so that full-screen programs
//! draw in place and `read_screen` can render them. With it, programs also say what they would not say to a
//! `dumb` terminal: an interactive bash or Python brackets every prompt with paste-mode switches
//! (`ESC[?2004h` ... `ESC[?2004l`), `git` colours its output whatever `NO_COLOR` says, and a program sets the
//! window title. None of that is text; each costs the model tokens on every call. [`ModeFilter`] takes these
//! out of the text the model reads (the screen model still gets every byte), and leaves everything else,
//! cursor movement included, as the program wrote it:
//! - SGR, `ESC [ params m` (colours and attributes);
//! - DEC private modes, `ESC [ ? params h` and `ESC [ ? params l` (paste mode, cursor keys, the alternate
//!   screen, the cursor's visibility);
//! - keypad modes, `ESC =` and `ESC >`;
//! - operating-system commands, `ESC ] ... BEL` or `ESC ] ... ESC \` (titles, hyperlinks, the clipboard), up to
//!   [`MAX_HELD_BYTES`].
//!
//! Output arrives in chunks, and a sequence can be cut between two: the filter holds an unfinished one (at most
//! [`MAX_HELD_BYTES`]) until the next chunk says what it is. A sequence longer than that is not one of these,
//! or is hostile: it is passed on as it came.

use std::borrow::Cow;

/// The longest unfinished sequence held back for the next chunk.
pub const MAX_HELD_BYTES: usize = 256;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

/// What the bytes at a position start.
enum Seen {
    /// Not a sequence this filter removes: pass on `len` bytes.
    Keep(usize),
    /// A sequence this filter removes, `len` bytes long.
    Drop(usize),
    /// Maybe such a sequence, cut off by the end of the input (shorter than [`MAX_HELD_BYTES`]).
    Unfinished,
}

/// Removes mode, colour and title sequences from a stream of output chunks; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct ModeFilter {
    /// The start of a sequence the previous chunk ended in.
    held: Vec<u8>,
}

impl ModeFilter {
    /// A filter with nothing held.
    pub fn new() -> Self {
        ModeFilter::default()
    }

    /// The text of `chunk` (after what an earlier chunk left unfinished) without the sequences this filter
    /// removes; an unfinished sequence at its end is held for the next call. A chunk without an escape byte,
    /// with nothing held, is its own text (borrowed: most output costs no copy).
    pub fn filter<'a>(&mut self, chunk: &'a [u8]) -> Cow<'a, [u8]> {
        if self.held.is_empty() && !chunk.contains(&ESC) {
            return Cow::Borrowed(chunk);
        }
        let joined;
        let input: &[u8] = if self.held.is_empty() {
            chunk
        } else {
            let mut held = std::mem::take(&mut self.held);
            held.extend_from_slice(chunk);
            joined = held;
            &joined
        };
        let mut out = Vec::with_capacity(input.len());
        let mut at = 0;
        while at < input.len() {
            let Some(offset) = input[at..].iter().position(|&b| b == ESC) else {
                out.extend_from_slice(&input[at..]);
                break;
            };
            out.extend_from_slice(&input[at..at + offset]);
            at += offset;
            match classify(&input[at..]) {
                Seen::Keep(len) => {
                    out.extend_from_slice(&input[at..at + len]);
                    at += len;
                }
                Seen::Drop(len) => at += len,
                Seen::Unfinished => {
                    self.held = input[at..].to_vec();
                    break;
                }
            }
        }
        Cow::Owned(out)
    }

    /// What is held back (the start of an unfinished sequence), given up: for the end of the output.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

/// What `bytes` (starting with `ESC`) start. A sequence is removed only when it ends within [`MAX_HELD_BYTES`],
/// so the text does not depend on where the output was cut into chunks.
fn classify(bytes: &[u8]) -> Seen {
    match bytes.get(1) {
        None => Seen::Unfinished,
        Some(b'=' | b'>') => Seen::Drop(2),
        Some(b'[') => csi(bytes),
        Some(b']') => osc(bytes),
        Some(_) => Seen::Keep(1),
    }
}

/// A control sequence: removed when it is SGR (`m`) or a DEC private mode switch (`?` ... `h`/`l`).
fn csi(bytes: &[u8]) -> Seen {
    let private = bytes.get(2) == Some(&b'?');
    let params_from = if private { 3 } else { 2 };
    for (i, &b) in bytes.iter().enumerate().take(MAX_HELD_BYTES).skip(params_from) {
        match b {
            b'0'..=b'9' | b';' | b':' => continue,
            b'm' if !private => return Seen::Drop(i + 1),
            b'h' | b'l' if private => return Seen::Drop(i + 1),
            _ => return Seen::Keep(1),
        }
    }
    unfinished(bytes)
}

/// Unfinished when `bytes` are shorter than the bound, else not a sequence this filter removes.
fn unfinished(bytes: &[u8]) -> Seen {
    if bytes.len() < MAX_HELD_BYTES { Seen::Unfinished } else { Seen::Keep(1) }
}

/// An operating-system command, ended by `BEL` or `ESC \`.
fn osc(bytes: &[u8]) -> Seen {
    let mut i = 2;
    while i < bytes.len().min(MAX_HELD_BYTES) {
        match bytes[i] {
            BEL => return Seen::Drop(i + 1),
            ESC => {
                return match bytes.get(i + 1) {
                    Some(b'\\') => Seen::Drop(i + 2),
                    Some(_) => Seen::Keep(1),
                    None => unfinished(bytes),
                };
            }
            _ => i += 1,
        }
    }
    unfinished(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn filtered(input: &[u8]) -> Vec<u8> {
        let mut filter = ModeFilter::new();
        let mut out = filter.filter(input).into_owned();
        out.extend(filter.finish());
        out
    }

    #[test]
    fn paste_modes_colours_keypad_and_titles_go_and_the_text_stays() {
        let bash = b"\x1b[?2004hbash-5.2$ echo hi\r\n\x1b[?2004l\rhi\r\n\x1b[?2004hbash-5.2$ ";
        assert_eq!(filtered(bash), b"bash-5.2$ echo hi\r\n\rhi\r\nbash-5.2$ ");
        let git = b"\x1b[33mcommit abc\x1b[m\n\x1b[1;31m-old\x1b[0m\n\x1b[38;5;2m+new\x1b[m\n";
        assert_eq!(filtered(git), b"commit abc\n-old\n+new\n");
        assert_eq!(filtered(b"\x1b]0;user@host: ~\x07$ \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"), b"$ link");
        assert_eq!(filtered(b"\x1b=\x1b[?1h>>> \x1b[?1l\x1b>"), b">>> ");
    }

    #[test]
    fn what_is_not_a_mode_or_a_colour_stays_as_the_program_wrote_it() {
        for kept in [
            &b"\x1b[2J\x1b[5;10Hhello\x1b[K"[..],
            b"\x1b[?25",
            b"\x1bM\x1b7\x1b8",
            b"\x1b[1;2x",
            b"plain text, no escapes",
            b"\x1b",
        ] {
            assert_eq!(filtered(kept), kept, "{:?}", String::from_utf8_lossy(kept));
        }
    }

    #[test]
    fn a_chunk_without_an_escape_is_its_own_text_uncopied_unless_a_sequence_is_held() {
        let mut filter = ModeFilter::new();
        assert!(matches!(filter.filter(b"plain text\r\n"), Cow::Borrowed(b"plain text\r\n")));
        assert_eq!(&*filter.filter(b"a\x1b["), b"a");
        // Something is held: the next chunk completes it, and is copied without it.
        let next = filter.filter(b"1mtext");
        assert!(matches!(next, Cow::Owned(_)) && &*next == b"text", "{next:?}");
    }

    #[test]
    fn a_sequence_cut_between_chunks_is_held_then_removed() {
        let mut filter = ModeFilter::new();
        assert_eq!(&*filter.filter(b"a\x1b[?20"), b"a");
        assert_eq!(&*filter.filter(b"04hb\x1b"), b"b");
        assert_eq!(&*filter.filter(b"[31mc\x1b]0;ti"), b"c");
        assert_eq!(&*filter.filter(b"tle\x07d"), b"d");
        assert!(filter.finish().is_empty());
    }

    #[test]
    fn an_endless_sequence_is_not_held_beyond_its_bound() {
        let mut filter = ModeFilter::new();
        let mut title = b"\x1b]0;".to_vec();
        title.extend(std::iter::repeat_n(b'x', MAX_HELD_BYTES * 4));
        let out = filter.filter(&title).into_owned();
        assert_eq!(out, title, "passed on as it came");
        assert!(filter.finish().is_empty());
    }

    proptest! {
        /// However the output is cut into chunks, the filter's text is the same, and without an escape byte
        /// the text is the output.
        #[test]
        fn chunking_does_not_change_the_text(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just(b"\x1b[?2004h".to_vec()), Just(b"\x1b[0m".to_vec()), Just(b"\x1b]0;t\x07".to_vec()),
                    Just(b"\x1b[5;1H".to_vec()), Just(b"\x1b=".to_vec()), Just(b"\x1b".to_vec()),
                    Just([&b"\x1b]0;"[..], &[b'x'; 300], b"\x07"].concat()),
                    "[a-z \n]{0,12}".prop_map(String::into_bytes),
                ],
                0..24,
            ),
            cuts in proptest::collection::vec(0usize..200, 0..8),
        ) {
            let whole: Vec<u8> = parts.concat();
            let expected = filtered(&whole);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(whole.len())).collect();
            cuts.sort_unstable();
            let mut filter = ModeFilter::new();
            let mut out = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([whole.len()]) {
                out.extend_from_slice(&filter.filter(&whole[from..cut]));
                from = cut;
            }
            out.extend(filter.finish());
            prop_assert_eq!(out, expected);
            if !whole.contains(&ESC) {
                prop_assert_eq!(filtered(&whole), whole);
            }
        }
    }
}
