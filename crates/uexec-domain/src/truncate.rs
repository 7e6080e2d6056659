//! Token estimates and the truncation of a response's output to its token budget (spec A2).
//!
//! Truncated output is a value (text plus counts), not an error. The format is the reference's:
//! `Total output lines: <lines>\n\n<head>…<k> tokens truncated…<tail>`, head and tail each half of the byte budget,
//! cut on UTF-8 boundaries, `k = ceil((total_bytes - budget) / 4)`.

use crate::buffer::Dropped;
use crate::limits::APPROX_BYTES_PER_TOKEN;

/// The estimated token count of `bytes` bytes: `ceil(bytes / 4)`.
pub fn approx_token_count(bytes: usize) -> usize {
    bytes.div_ceil(APPROX_BYTES_PER_TOKEN)
}

/// Output cut to a token budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedOutput {
    /// The text to return: the output itself when it fits, else the truncated form.
    pub text: String,
    /// Token estimate of the untruncated output.
    pub original_token_count: usize,
    /// True when `text` is the truncated form.
    pub truncated: bool,
}

/// Cuts `text` to `max_tokens` tokens (4 bytes each) as spec A2 describes.
pub fn truncate_output(text: &str, max_tokens: usize) -> TruncatedOutput {
    truncate_output_with_dropped(text, max_tokens, Dropped::default())
}

/// [`truncate_output`] for text from which a session buffer already dropped `dropped` in the middle (its
/// [`crate::buffer::dropped_marker`] stands in `text` when anything was dropped). Every total describes the
/// whole output the command printed, not the text kept: the original token count and the truncation marker
/// count the dropped bytes, `Total output lines` counts the dropped newlines, and neither counts the buffer's
/// marker (the command never printed it).
pub fn truncate_output_with_dropped(text: &str, max_tokens: usize, dropped: Dropped) -> TruncatedOutput {
    let marker_len = dropped.marker_len();
    let dropped_bytes = usize::try_from(dropped.bytes).unwrap_or(usize::MAX);
    let total = text.len().saturating_sub(marker_len).saturating_add(dropped_bytes);
    let original_token_count = approx_token_count(total);
    let budget = max_tokens.saturating_mul(APPROX_BYTES_PER_TOKEN);
    if text.len() <= budget {
        return TruncatedOutput { text: text.to_owned(), original_token_count, truncated: false };
    }
    let lines = total_lines(text, dropped);
    let head_budget = budget / 2;
    let tail_budget = budget - head_budget;
    let head_end = text.floor_char_boundary(head_budget);
    let tail_start = text.ceil_char_boundary(text.len() - tail_budget);
    let removed_tokens = approx_token_count(total.saturating_sub(budget));
    let text = format!(
        "Total output lines: {lines}\n\n{}\u{2026}{removed_tokens} tokens truncated\u{2026}{}",
        &text[..head_end],
        &text[tail_start..]
    );
    TruncatedOutput { text, original_token_count, truncated: true }
}

/// [`truncate_output_with_dropped`] of the lossy text of `segments` joined, without joining them: the result
/// is the same as `truncate_output_with_dropped(&String::from_utf8_lossy(&segments.concat()), ..)`, but no copy
/// of the whole output is made, only of what the result holds (a session's buffer is cut to a response's budget
/// straight from where it keeps its bytes).
pub fn truncate_segments(segments: &[&[u8]], max_tokens: usize, dropped: Dropped) -> TruncatedOutput {
    let marker_len = dropped.marker_len();
    let dropped_bytes = usize::try_from(dropped.bytes).unwrap_or(usize::MAX);
    let mut text_len = 0usize;
    for_each_lossy_piece(segments, |piece| text_len += piece.len());
    let total = text_len.saturating_sub(marker_len).saturating_add(dropped_bytes);
    let original_token_count = approx_token_count(total);
    let budget = max_tokens.saturating_mul(APPROX_BYTES_PER_TOKEN);
    if text_len <= budget {
        let mut text = String::with_capacity(text_len);
        for_each_lossy_piece(segments, |piece| text.push_str(piece));
        return TruncatedOutput { text, original_token_count, truncated: false };
    }
    let lines = total_lines_of_segments(segments, dropped);
    let head_budget = budget / 2;
    let tail_budget = budget - head_budget;
    let removed_tokens = approx_token_count(total.saturating_sub(budget));
    let mut text = format!("Total output lines: {lines}\n\n");
    // The head: the text's first `head_budget` bytes, ending on a character boundary.
    let mut head = String::with_capacity(head_budget);
    // The tail: from the first character boundary at or after `tail_from`.
    let tail_from = text_len - tail_budget;
    let mut tail = String::with_capacity(tail_budget + 3);
    let mut at = 0usize;
    for_each_lossy_piece(segments, |piece| {
        let end = at + piece.len();
        if at < head_budget {
            let room = head_budget - at;
            head.push_str(&piece[..piece.floor_char_boundary(room)]);
        }
        if end > tail_from {
            let from = tail_from.saturating_sub(at);
            tail.push_str(&piece[piece.ceil_char_boundary(from)..]);
        }
        at = end;
    });
    text.push_str(&head);
    text.push_str(&format!("\u{2026}{removed_tokens} tokens truncated\u{2026}"));
    text.push_str(&tail);
    TruncatedOutput { text, original_token_count, truncated: true }
}

/// Calls `f` with the lossy UTF-8 text of `segments` joined (`String::from_utf8_lossy` of their concatenation),
/// piece by piece: valid runs borrowed from the segments, `U+FFFD` for each invalid sequence, and a character
/// whose bytes straddle segments decoded from the few bytes (at most 4) copied across the boundary.
fn for_each_lossy_piece(segments: &[&[u8]], mut f: impl FnMut(&str)) {
    let (mut index, mut offset) = (0usize, 0usize);
    while let Some(segment) = segments.get(index) {
        let rest = &segment[offset..];
        let mut next = None;
        for chunk in rest.utf8_chunks() {
            if !chunk.valid().is_empty() {
                f(chunk.valid());
            }
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            let at_end = invalid.as_ptr_range().end == rest.as_ptr_range().end;
            if at_end && is_incomplete_prefix(invalid) {
                // A sequence begun here may end in the next segments: decode one unit from its bytes and theirs.
                let mut unit = invalid.to_vec();
                let mut cursor = (index + 1, 0usize);
                while unit.len() < 4 {
                    let Some(byte) = byte_at(segments, &mut cursor) else { break };
                    unit.push(byte);
                }
                let len = first_unit(&unit, &mut f);
                next = Some(advance(segments, (index + 1, 0), len.saturating_sub(invalid.len())));
            } else {
                f("\u{FFFD}");
            }
        }
        (index, offset) = next.unwrap_or((index + 1, 0));
    }
}

/// True when `bytes` are the start of a UTF-8 sequence that more bytes could complete.
fn is_incomplete_prefix(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes).is_err_and(|err| err.valid_up_to() == 0 && err.error_len().is_none())
}

/// The byte at `cursor` (segment, offset) in `segments`, moving the cursor past it.
fn byte_at(segments: &[&[u8]], cursor: &mut (usize, usize)) -> Option<u8> {
    loop {
        let segment = segments.get(cursor.0)?;
        if let Some(&byte) = segment.get(cursor.1) {
            cursor.1 += 1;
            return Some(byte);
        }
        *cursor = (cursor.0 + 1, 0);
    }
}

/// The cursor `count` bytes after `cursor`.
fn advance(segments: &[&[u8]], mut cursor: (usize, usize), mut count: usize) -> (usize, usize) {
    while count > 0 {
        let Some(segment) = segments.get(cursor.0) else { break };
        let left = segment.len() - cursor.1;
        if count < left {
            cursor.1 += count;
            break;
        }
        count -= left;
        cursor = (cursor.0 + 1, 0);
    }
    cursor
}

/// Decodes the first unit of `bytes` as `String::from_utf8_lossy` does (a character, or one `U+FFFD` for an
/// invalid sequence or for an incomplete one at the very end), passes it to `f` and returns its length.
fn first_unit(bytes: &[u8], f: &mut impl FnMut(&str)) -> usize {
    let valid = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => match std::str::from_utf8(&bytes[..err.valid_up_to()]) {
            Ok(text) if !text.is_empty() => text,
            _ => {
                f("\u{FFFD}");
                return err.error_len().unwrap_or(bytes.len());
            }
        },
    };
    let len = valid.chars().next().map_or(0, char::len_utf8);
    f(&valid[..len]);
    len
}

/// [`total_lines`] counted on the bytes of `segments` (replacing invalid bytes never adds nor removes a newline).
fn total_lines_of_segments(segments: &[&[u8]], dropped: Dropped) -> u64 {
    let newlines: u64 =
        segments.iter().map(|segment| segment.iter().filter(|&&byte| byte == b'\n').count() as u64).sum();
    let last = segments.iter().rev().find_map(|segment| segment.last().copied());
    let kept = match last {
        None => 0,
        Some(b'\n') => newlines,
        Some(_) => newlines + 1,
    };
    if dropped.bytes == 0 {
        return kept;
    }
    (kept + dropped.newlines).saturating_sub(2)
}

/// The lines of the whole output, as `str::lines` would count them: the kept text's, minus the two newlines of
/// the buffer's marker, plus the dropped newlines.
fn total_lines(text: &str, dropped: Dropped) -> u64 {
    let kept = text.lines().count() as u64;
    if dropped.bytes == 0 {
        return kept;
    }
    (kept + dropped.newlines).saturating_sub(2)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The output of the spec's worked example: 999 lines `EXEC-LINE-NNNN ` followed by 20 `x`, each ending in
    /// a newline (36 bytes a line, 35,964 bytes in all).
    fn worked_example_output() -> String {
        (1..=999).map(|i| format!("EXEC-LINE-{i:04} {}\n", "x".repeat(20))).collect()
    }

    #[test]
    fn worked_example_of_spec_a2() {
        let output = worked_example_output();
        assert_eq!(output.len(), 35_964);
        let result = truncate_output(&output, 50);
        assert!(result.truncated);
        assert_eq!(result.original_token_count, 8991);
        let head = &output[..100];
        let tail = &output[output.len() - 100..];
        let expected =
            format!("Total output lines: 999\n\n{head}\u{2026}8941 tokens truncated\u{2026}{tail}");
        assert_eq!(result.text, expected);
        assert!(head.starts_with("EXEC-LINE-0001 xxxx"));
        assert!(tail.ends_with("EXEC-LINE-0999 xxxxxxxxxxxxxxxxxxxx\n"));
    }

    #[test]
    fn output_that_fits_is_unchanged() {
        let result = truncate_output("hello", 2);
        assert_eq!(
            result,
            TruncatedOutput { text: "hello".into(), original_token_count: 2, truncated: false }
        );
        let exact = "a".repeat(40);
        assert!(!truncate_output(&exact, 10).truncated);
        assert!(truncate_output(&format!("{exact}a"), 10).truncated);
        assert_eq!(truncate_output("", 0).text, "");
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        // 8 bytes of budget over "€" (3 bytes each): head 4 -> one "€", tail 4 -> one "€";
        // ceil((30 - 8) / 4) = 6 tokens truncated.
        let result = truncate_output(&"€".repeat(10), 2);
        assert_eq!(result.text, "Total output lines: 1\n\n€\u{2026}6 tokens truncated\u{2026}€");
    }

    #[test]
    fn zero_budget_keeps_only_the_header_and_marker() {
        let result = truncate_output("a\nb\nc", 0);
        assert_eq!(result.text, "Total output lines: 3\n\n\u{2026}2 tokens truncated\u{2026}");
    }

    #[test]
    fn token_counts_round_up() {
        assert_eq!(approx_token_count(0), 0);
        assert_eq!(approx_token_count(1), 1);
        assert_eq!(approx_token_count(4), 1);
        assert_eq!(approx_token_count(5), 2);
        assert_eq!(approx_token_count(35_964), 8991);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn token_count_is_ceil_of_a_quarter(bytes in 0usize..(usize::MAX / 2)) {
            let tokens = approx_token_count(bytes);
            prop_assert!(tokens * 4 >= bytes);
            prop_assert!(tokens == 0 || (tokens - 1) * 4 < bytes);
        }

        #[test]
        fn truncated_output_fits_the_budget_plus_header(
            text in "[a-z\u{e9}\u{20ac}\u{1f600}\n]{0,200}",
            max_tokens in 0usize..80,
        ) {
            let result = truncate_output(&text, max_tokens);
            prop_assert_eq!(result.original_token_count, text.len().div_ceil(4));
            if text.len() <= max_tokens * 4 {
                prop_assert!(!result.truncated);
                prop_assert_eq!(&result.text, &text);
            } else {
                prop_assert!(result.truncated);
                let header = format!("Total output lines: {}\n\n", text.lines().count());
                let removed = (text.len() - max_tokens * 4).div_ceil(4);
                let marker = format!("\u{2026}{removed} tokens truncated\u{2026}");
                let body = result.text.strip_prefix(&header).unwrap();
                let (head, tail) = body.split_once(&marker).unwrap();
                prop_assert!(head.len() <= max_tokens * 2);
                prop_assert!(tail.len() <= max_tokens * 4 - max_tokens * 2);
                prop_assert!(head.len() + 3 >= max_tokens * 2);
                prop_assert!(tail.len() + 3 >= max_tokens * 4 - max_tokens * 2);
                prop_assert!(text.starts_with(head));
                prop_assert!(text.ends_with(tail));
                prop_assert_eq!(result.text.len(), header.len() + head.len() + marker.len() + tail.len());
            }
        }
    }

    #[test]
    fn bytes_dropped_by_the_session_buffer_count_in_the_totals() {
        let dropped = Dropped { bytes: 4_000_000, newlines: 0 };
        let marker = crate::buffer::dropped_marker(dropped.bytes);
        let text = format!("{}{marker}{}", "a".repeat(600), "b".repeat(600));
        let printed = 1200 + 4_000_000;
        let cut = truncate_output_with_dropped(&text, 50, dropped);
        assert_eq!(cut.original_token_count, approx_token_count(printed));
        assert!(
            cut.text
                .contains(&format!("\u{2026}{} tokens truncated\u{2026}", approx_token_count(printed - 200)))
        );
        // One long line stays one line, whatever the marker's newlines.
        assert!(cut.text.starts_with("Total output lines: 1\n\n"), "{}", cut.text);
        // When it fits, the buffer's marker stays visible, and still adds nothing to the count.
        let whole = truncate_output_with_dropped(&text, 10_000, dropped);
        assert!(!whole.truncated && whole.text.contains("[... 4000000 bytes dropped ...]"));
        assert_eq!(whole.original_token_count, approx_token_count(printed));
    }

    /// The output of `seq 1 n`.
    fn seq(n: u64) -> Vec<u8> {
        (1..=n).flat_map(|i| format!("{i}\n").into_bytes()).collect()
    }

    #[test]
    fn seq_past_the_buffer_reports_all_its_lines() {
        let printed = seq(300_000);
        let mut buffer = crate::buffer::HeadTailBuffer::new(64 * 1024);
        for chunk in printed.chunks(4096) {
            buffer.push(chunk);
        }
        let dropped = buffer.dropped();
        let text = String::from_utf8(buffer.take()).unwrap();
        let cut = truncate_output_with_dropped(&text, 100, dropped);
        assert!(cut.text.starts_with("Total output lines: 300000\n\n"), "{}", &cut.text[..40]);
        assert_eq!(cut.original_token_count, approx_token_count(printed.len()));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the buffer keeps, the totals describe everything the command printed: its bytes and its
        /// lines, as if nothing had been dropped, and never the marker.
        #[test]
        fn totals_describe_all_that_was_printed(
            lines in proptest::collection::vec("[a-z ]{0,40}", 0..400),
            trailing_newline in any::<bool>(),
            cap in 16usize..2048,
            chunk in 1usize..300,
            max_tokens in 0usize..200,
        ) {
            let mut printed = lines.join("\n");
            if trailing_newline && !printed.is_empty() {
                printed.push('\n');
            }
            let mut buffer = crate::buffer::HeadTailBuffer::new(cap);
            for piece in printed.as_bytes().chunks(chunk) {
                buffer.push(piece);
            }
            let dropped = buffer.dropped();
            let text = String::from_utf8(buffer.take()).unwrap();
            let cut = truncate_output_with_dropped(&text, max_tokens, dropped);
            let oracle = truncate_output(&printed, max_tokens);
            prop_assert_eq!(cut.original_token_count, oracle.original_token_count);
            if cut.truncated {
                let header = |t: &str| t.split("\n\n").next().map(str::to_owned);
                let expected = format!("Total output lines: {}", printed.lines().count());
                prop_assert_eq!(header(&cut.text), Some(expected));
                // The marker can make the kept text longer than what was printed (one byte dropped, a 30-byte
                // marker): then only the kept text is cut.
                if oracle.truncated {
                    let removed = |t: &str| t.split('\u{2026}').nth(1).map(str::to_owned);
                    prop_assert_eq!(removed(&cut.text), removed(&oracle.text));
                }
            }
        }
    }

    /// Cuts `data` into segments at the given points.
    fn segmented(data: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
        cuts.retain(|&c| c <= data.len());
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut start = 0;
        for cut in cuts {
            out.push(&data[start..cut]);
            start = cut;
        }
        out.push(&data[start..]);
        out
    }

    #[test]
    fn a_character_split_across_segments_is_decoded_whole() {
        let euro = "\u{20ac}".as_bytes();
        let segments: [&[u8]; 4] = [b"a", &euro[..1], &euro[1..2], &euro[2..]];
        assert_eq!(truncate_segments(&segments, 100, Dropped::default()).text, "a\u{20ac}");
        // An invalid byte after a carried lead byte: one replacement for the lead, the byte decoded after it.
        let segments: [&[u8]; 2] = [&[b'a', 0xE2], b"b\xFF"];
        assert_eq!(truncate_segments(&segments, 100, Dropped::default()).text, "a\u{FFFD}b\u{FFFD}");
        // A sequence that never ends: one replacement.
        let segments: [&[u8]; 3] = [&[0xF0], &[0x9F], &[]];
        assert_eq!(truncate_segments(&segments, 100, Dropped::default()).text, "\u{FFFD}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Cutting the segments of a buffer gives exactly what cutting their joined lossy text gives, for any
        /// bytes, any budget and any way of splitting them.
        #[test]
        fn segments_truncate_like_the_joined_text(
            data in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..200),
                "[a-z\u{e9}\u{20ac}\u{1f600}\n]{0,80}".prop_map(String::into_bytes),
                proptest::collection::vec(
                    prop_oneof![Just(0x80u8), Just(0xBF), Just(0xE2), Just(0x82), Just(0xF0), Just(0x9F),
                        Just(0xC3), Just(0xED), Just(0xA0), Just(b'\n'), Just(b'a')],
                    0..60,
                ),
            ],
            cuts in proptest::collection::vec(0usize..200, 0..12),
            max_tokens in 0usize..60,
            dropped_bytes in prop_oneof![Just(0u64), 1u64..10_000],
            dropped_newlines in 0u64..50,
        ) {
            let dropped = Dropped { bytes: dropped_bytes, newlines: dropped_newlines.min(dropped_bytes) };
            let segments = segmented(&data, cuts);
            let joined = String::from_utf8_lossy(&data);
            prop_assert_eq!(
                truncate_segments(&segments, max_tokens, dropped),
                truncate_output_with_dropped(&joined, max_tokens, dropped)
            );
        }

        /// The same from a session buffer's segments, marker included.
        #[test]
        fn a_buffer_truncates_like_its_rendered_text(
            writes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..20),
            cap in 0usize..100,
            max_tokens in 0usize..40,
        ) {
            let mut buffer = crate::buffer::HeadTailBuffer::new(cap);
            for write in &writes {
                buffer.push(write);
            }
            let dropped = buffer.dropped();
            let cut = buffer.with_segments(|segments| truncate_segments(segments, max_tokens, dropped));
            prop_assert_eq!(cut, truncate_output_with_dropped(&buffer.to_string_lossy(), max_tokens, dropped));
        }
    }
}
