//! Where a sequence of lines occurs in a file, with the reference's decreasing strictness: exact, then
//! ignoring trailing whitespace, then ignoring surrounding whitespace, then also treating typographic
//! punctuation (dashes, quotes, odd spaces) as its ASCII form.

/// The first index at or after `start` where `pattern` occurs in `lines`, trying each level of strictness
/// over the whole range before the next. With `end_of_file`, the search starts where the pattern would end
/// the file. An empty pattern matches at `start`; a pattern longer than the file matches nowhere.
pub fn seek_sequence(lines: &[String], pattern: &[String], start: usize, end_of_file: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let first = if end_of_file { lines.len() - pattern.len() } else { start };
    let last = lines.len() - pattern.len();
    let levels: [fn(&str) -> std::borrow::Cow<'_, str>; 4] = [
        |s| std::borrow::Cow::Borrowed(s),
        |s| std::borrow::Cow::Borrowed(s.trim_end()),
        |s| std::borrow::Cow::Borrowed(s.trim()),
        |s| std::borrow::Cow::Owned(normalise_punctuation(s)),
    ];
    levels.iter().find_map(|level| {
        (first..=last).find(|&at| {
            lines[at..at + pattern.len()].iter().zip(pattern).all(|(line, want)| level(line) == level(want))
        })
    })
}

/// `s` trimmed, with Unicode dashes, quotes and spaces replaced by their ASCII counterparts.
fn normalise_punctuation(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{2018}'..='\u{201B}' => '\'',
            '\u{201C}'..='\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn levels_of_strictness() {
        assert_eq!(seek_sequence(&v(&["a", "b", "c"]), &v(&["b", "c"]), 0, false), Some(1));
        assert_eq!(seek_sequence(&v(&["a  ", "b\t"]), &v(&["a", "b"]), 0, false), Some(0));
        assert_eq!(seek_sequence(&v(&["  a ", " b"]), &v(&["a", "b"]), 0, false), Some(0));
        assert_eq!(
            seek_sequence(
                &v(&["x \u{2014} \u{201C}y\u{201D}\u{00A0}\u{2019}"]),
                &v(&["x - \"y\" '"]),
                0,
                false
            ),
            Some(0)
        );
        assert_eq!(seek_sequence(&v(&["a"]), &v(&["a", "b"]), 0, false), None);
        assert_eq!(seek_sequence(&v(&["a"]), &[], 1, false), Some(1));
    }

    #[test]
    fn an_exact_match_later_wins_over_a_fuzzy_match_earlier() {
        let lines = v(&["x ", "x"]);
        assert_eq!(seek_sequence(&lines, &v(&["x"]), 0, false), Some(1));
    }

    #[test]
    fn end_of_file_searches_from_the_end() {
        let lines = v(&["a", "b", "a"]);
        assert_eq!(seek_sequence(&lines, &v(&["a"]), 0, true), Some(2));
        assert_eq!(seek_sequence(&lines, &v(&["a"]), 0, false), Some(0));
    }

    #[test]
    fn the_search_starts_at_start() {
        let lines = v(&["a", "b", "a"]);
        assert_eq!(seek_sequence(&lines, &v(&["a"]), 1, false), Some(2));
        assert_eq!(seek_sequence(&lines, &v(&["b"]), 2, false), None);
    }
}
