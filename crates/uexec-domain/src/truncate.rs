//! Token estimates and the truncation of a response's output to its token budget (spec A2).
//!
//! Truncated output is a value (text plus counts), not an error. The format is the reference's:
//! `Total output lines: <lines>\n\n<head>…<k> tokens truncated…<tail>`, head and tail each half of the byte budget,
//! cut on UTF-8 boundaries, `k = ceil((total_bytes - budget) / 4)`.

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
    truncate_output_with_dropped(text, max_tokens, 0)
}

/// [`truncate_output`] for text from which a session buffer already dropped `dropped_bytes` in the middle (its
/// marker stands in `text`): those bytes count in the original token count and in the truncation marker, so the
/// caller learns how much output there really was even when the buffer's own marker is cut away.
pub fn truncate_output_with_dropped(text: &str, max_tokens: usize, dropped_bytes: usize) -> TruncatedOutput {
    let total = text.len().saturating_add(dropped_bytes);
    let original_token_count = approx_token_count(total);
    let budget = max_tokens.saturating_mul(APPROX_BYTES_PER_TOKEN);
    if text.len() <= budget {
        return TruncatedOutput { text: text.to_owned(), original_token_count, truncated: false };
    }
    let lines = text.lines().count();
    let head_budget = budget / 2;
    let tail_budget = budget - head_budget;
    let head_end = text.floor_char_boundary(head_budget);
    let tail_start = text.ceil_char_boundary(text.len() - tail_budget);
    let removed_tokens = approx_token_count(total - budget);
    let text = format!(
        "Total output lines: {lines}\n\n{}\u{2026}{removed_tokens} tokens truncated\u{2026}{}",
        &text[..head_end],
        &text[tail_start..]
    );
    TruncatedOutput { text, original_token_count, truncated: true }
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
        let text = format!("{}\n[... 4000000 bytes dropped ...]\n{}", "a".repeat(600), "b".repeat(600));
        let cut = truncate_output_with_dropped(&text, 50, 4_000_000);
        assert_eq!(cut.original_token_count, approx_token_count(text.len() + 4_000_000));
        assert!(cut.text.contains(&format!(
            "\u{2026}{} tokens truncated\u{2026}",
            approx_token_count(text.len() + 4_000_000 - 200)
        )));
        // When it fits, the buffer's marker stays visible.
        let whole = truncate_output_with_dropped(&text, 10_000, 4_000_000);
        assert!(!whole.truncated && whole.text.contains("[... 4000000 bytes dropped ...]"));
        assert_eq!(whole.original_token_count, approx_token_count(text.len() + 4_000_000));
    }
}
