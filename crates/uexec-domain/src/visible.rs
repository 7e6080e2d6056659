//! Text a person reads, made visible: every character that could hide or change what a line shows (controls,
//! bidi and zero-width characters, combining marks, a trailing space) written as `\u{HEX}`, so caller-chosen
//! text cannot shape a question or a note. The rendering of a whole question is `question.rs`'s; this leaf is
//! what it and the denial evidence (`denial.rs`) both use.

use std::path::Path;

/// Inclusive ranges of the characters [`is_invisible`] escapes, sorted. Generated from the Unicode general
/// categories Cc, Cf, Zl, Zp, Zs (minus U+0020), Co and Cs, plus the Default_Ignorable_Code_Point property, the
/// braille blank U+2800, the noncharacters U+FFFE/U+FFFF, and the blocks of general-purpose combining marks
/// (U+0300-036F, U+1AB0-1AFF, U+1DC0-1DFF, U+20D0-20FF, U+FE20-FE2F), which draw over the character before them
/// (a strike-through, an enclosing circle) and make `é` and `e` + U+0301 look the same.
pub(crate) const INVISIBLE: [(u32, u32); 37] = [
    (0x0, 0x1F),
    (0x7F, 0xA0),
    (0xAD, 0xAD),
    (0x300, 0x36F),
    (0x600, 0x605),
    (0x61C, 0x61C),
    (0x6DD, 0x6DD),
    (0x70F, 0x70F),
    (0x890, 0x891),
    (0x8E2, 0x8E2),
    (0x115F, 0x1160),
    (0x1680, 0x1680),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x1AB0, 0x1AFF),
    (0x1DC0, 0x1DFF),
    (0x2000, 0x200F),
    (0x2028, 0x202F),
    (0x205F, 0x206F),
    (0x20D0, 0x20FF),
    (0x2800, 0x2800),
    (0x3000, 0x3000),
    (0x3164, 0x3164),
    (0xD800, 0xF8FF),
    (0xFE00, 0xFE0F),
    (0xFE20, 0xFE2F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFFC),
    (0xFFFE, 0xFFFF),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
    (0xF0000, 0x10FFFF),
];

/// True when `c` is written as `\u{HEX}` in a question (rule 1 of the module documentation).
pub fn is_invisible(c: char) -> bool {
    let c = u32::from(c);
    INVISIBLE
        .binary_search_by(|&(low, high)| {
            if high < c {
                std::cmp::Ordering::Less
            } else if low > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// `text` on one line with every invisible character (the line break included) written as `\u{HEX}`.
pub fn escape_visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_escaped(&mut out, text);
    out
}

/// `text` as [`escape_visible`] writes it, cut after `max_chars` characters with the cut said plainly.
pub fn escape_visible_capped(text: &str, max_chars: usize) -> String {
    let (shown, rest) = split_chars(text, max_chars);
    let mut out = escape_visible(shown);
    if !rest.is_empty() {
        out.push_str(&format!(" ... ({} more characters not shown)", rest.chars().count()));
    }
    out
}

/// `path` as [`escape_visible`] writes it; bytes that are not UTF-8 are written `\x{HEX}`.
pub fn escape_path(path: &Path) -> String {
    let mut out = String::new();
    for chunk in path.as_os_str().as_encoded_bytes().utf8_chunks() {
        push_escaped(&mut out, chunk.valid());
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{{{byte:x}}}"));
        }
    }
    out
}

fn push_escaped(out: &mut String, text: &str) {
    for token in escaped_tokens(text) {
        out.push_str(&token);
    }
}

/// How each character of `text` is written (rule 1), in order. Spaces at the end of `text` are written
/// `\u{20}` too: invisible at the end of a line, they still change what a line means (`\` followed by a space
/// escapes the space, a `\` at the end of a line joins the next).
pub(crate) fn escaped_tokens(text: &str) -> Vec<String> {
    let trailing_from = text.trim_end_matches(' ').len();
    text.char_indices()
        .map(|(index, c)| {
            let rest = text.get(index + c.len_utf8()..).unwrap_or_default();
            let escape_backslash = c == '\\' && (rest.starts_with("u{") || rest.starts_with("x{"));
            if is_invisible(c) || escape_backslash || index >= trailing_from {
                format!("\\u{{{:x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The first `max_chars` characters of `text`, and the rest.
pub(crate) fn split_chars(text: &str, max_chars: usize) -> (&str, &str) {
    match text.char_indices().nth(max_chars) {
        Some((index, _)) => text.split_at(index),
        None => (text, ""),
    }
}

/// How many characters of `text` [`escape_visible`] escapes.
pub(crate) fn count_escaped(text: &str) -> usize {
    text.chars().filter(|&c| is_invisible(c) && c != '\n').count()
}
