//! UTF-8 boundary helpers: hold back an incomplete trailing sequence, and cut output into event-sized pieces
//! that never split a character.

use std::mem;

/// The length of the longest prefix of `bytes` that does not end inside an incomplete UTF-8 sequence.
///
/// Only a *valid start* of a multi-byte sequence followed by too few continuation bytes is held back; invalid
/// bytes are passed through (they are rendered lossily later), so nothing is held back forever.
pub(crate) fn complete_prefix_len(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=len.min(3) {
        let byte = bytes[len - back];
        if byte & 0xC0 == 0x80 {
            continue;
        }
        let needed = match byte {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => 1,
        };
        return if needed > back { len - back } else { len };
    }
    len
}

/// Cut `bytes` into pieces of at most `max` bytes, each ending on a character boundary when the input allows.
pub(crate) fn split_pieces(bytes: &[u8], max: usize) -> Vec<Vec<u8>> {
    let max = max.max(4);
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let mut end = (start + max).min(bytes.len());
        if end < bytes.len() {
            let mut cut = end;
            while cut > start && bytes[cut] & 0xC0 == 0x80 && end - cut < 3 {
                cut -= 1;
            }
            if cut > start && bytes[cut] & 0xC0 != 0x80 {
                end = cut;
            }
        }
        pieces.push(bytes[start..end].to_vec());
        start = end;
    }
    pieces
}

/// Turns a stream of arbitrary chunks into output-delta pieces: at most `max` bytes each, never splitting a
/// UTF-8 sequence, even one split across two chunks.
#[derive(Debug)]
pub(crate) struct DeltaSplitter {
    carry: Vec<u8>,
    max: usize,
}

impl DeltaSplitter {
    /// A splitter producing pieces of at most `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        DeltaSplitter { carry: Vec::new(), max }
    }

    /// Feed one chunk; returns the pieces that are complete.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        self.carry.extend_from_slice(chunk);
        let keep = complete_prefix_len(&self.carry);
        let rest = self.carry.split_off(keep);
        let complete = mem::replace(&mut self.carry, rest);
        split_pieces(&complete, self.max)
    }

    /// The end of the stream: whatever is held back, as a last piece.
    pub(crate) fn finish(&mut self) -> Vec<Vec<u8>> {
        let rest = mem::take(&mut self.carry);
        split_pieces(&rest, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_sequences_are_held_back() {
        let euro = "€".as_bytes(); // 3 bytes
        assert_eq!(complete_prefix_len(b"abc"), 3);
        assert_eq!(complete_prefix_len(&[b'a', euro[0]]), 1);
        assert_eq!(complete_prefix_len(&[b'a', euro[0], euro[1]]), 1);
        assert_eq!(complete_prefix_len(&[b'a', euro[0], euro[1], euro[2]]), 4);
        // Invalid bytes are not held back.
        assert_eq!(complete_prefix_len(&[b'a', 0xFF]), 2);
        assert_eq!(complete_prefix_len(&[0x80, 0x80, 0x80, 0x80]), 4);
        assert_eq!(complete_prefix_len(&[]), 0);
    }

    #[test]
    fn pieces_respect_the_size_and_character_boundaries() {
        let text = "é".repeat(10_000); // 20,000 bytes of 2-byte characters
        let pieces = split_pieces(text.as_bytes(), 8191);
        assert!(pieces.iter().all(|p| p.len() <= 8191));
        assert!(pieces.iter().all(|p| std::str::from_utf8(p).is_ok()));
        assert_eq!(pieces.concat(), text.as_bytes());
    }

    #[test]
    fn splitter_joins_a_character_split_across_chunks() {
        let mut splitter = DeltaSplitter::new(8192);
        let bytes = "a€b".as_bytes();
        let first = splitter.feed(&bytes[..2]);
        let second = splitter.feed(&bytes[2..]);
        assert_eq!(first, vec![b"a".to_vec()]);
        assert_eq!(second, vec!["€b".as_bytes().to_vec()]);
        assert!(splitter.finish().is_empty());
        let mut dangling = DeltaSplitter::new(8192);
        assert!(dangling.feed(&bytes[1..2]).is_empty());
        assert_eq!(dangling.finish(), vec![bytes[1..2].to_vec()]);
    }
}
