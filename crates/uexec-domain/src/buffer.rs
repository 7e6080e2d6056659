//! A bounded output buffer that keeps the first and the newest bytes of a stream and counts what it drops.
//!
//! Rules (spec A4, B2):
//! 1. The buffer keeps at most `cap` bytes: a head of at most `cap / 2` bytes (the first bytes ever written) and
//!    a tail of at most `cap - cap / 2` bytes (the newest bytes). Everything in between is dropped and counted.
//! 2. No UTF-8 sequence is split where bytes are dropped: the head ends before a sequence that would cross its
//!    limit (that sequence goes on to the tail), and the tail starts at a character boundary (continuation bytes
//!    left over from a dropped character are dropped too). Bytes that are not UTF-8 are kept as they are.
//! 3. When bytes were dropped, the rendered contents carry a visible marker with the exact count:
//!    [`dropped_marker`].
//! 4. What was dropped is counted as a [`Dropped`] value, bytes and newlines, so totals computed from the kept
//!    text (token counts, `Total output lines`) can still describe everything the stream carried, and leave out
//!    the marker, which the stream never carried.

use std::collections::VecDeque;
use std::sync::Arc;

/// The marker inserted between head and tail when `dropped` bytes were dropped: `\n[... N bytes dropped ...]\n`.
pub fn dropped_marker(dropped: u64) -> String {
    format!("\n[... {dropped} bytes dropped ...]\n")
}

/// What a [`HeadTailBuffer`] dropped between its head and its tail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Bytes dropped.
    pub bytes: u64,
    /// Newline bytes (`\n`) among them.
    pub newlines: u64,
}

impl Dropped {
    /// The length of the marker that stands for this drop in the rendered contents (0 when nothing was dropped).
    pub fn marker_len(self) -> usize {
        if self.bytes == 0 { 0 } else { dropped_marker(self.bytes).len() }
    }
}

/// The newline bytes in `bytes` (a plain loop over a slice, which the compiler vectorises).
fn newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// True for a UTF-8 continuation byte (`10xxxxxx`).
fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// The length of the UTF-8 sequence `lead` starts, or `None` when `lead` cannot start one.
fn sequence_len(lead: u8) -> Option<usize> {
    match lead {
        0x00..=0x7F => Some(1),
        0xC0..=0xDF => Some(2),
        0xE0..=0xEF => Some(3),
        0xF0..=0xF7 => Some(4),
        _ => None,
    }
}

/// The length of an incomplete UTF-8 sequence at the end of `bytes` (0 when the end is complete or not UTF-8).
pub(crate) fn incomplete_suffix_len(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=len.min(4) {
        let byte = bytes[len - back];
        if is_continuation(byte) {
            continue;
        }
        return match sequence_len(byte) {
            Some(need) if need > back => back,
            _ => 0,
        };
    }
    0
}

/// A run of bytes inside a shared chunk: buffers fed the same chunks (a session's pending output and its
/// transcript) keep references to one copy of each chunk instead of a copy each.
#[derive(Debug, Clone)]
struct Piece {
    chunk: Arc<[u8]>,
    start: usize,
    end: usize,
}

impl Piece {
    fn whole(chunk: Arc<[u8]>) -> Piece {
        let end = chunk.len();
        Piece { chunk, start: 0, end }
    }

    fn bytes(&self) -> &[u8] {
        &self.chunk[self.start..self.end]
    }

    fn len(&self) -> usize {
        self.end - self.start
    }

    /// The bytes `from..to` of this piece (relative to its start), sharing the chunk.
    fn sub(&self, from: usize, to: usize) -> Piece {
        Piece { chunk: Arc::clone(&self.chunk), start: self.start + from, end: self.start + to }
    }

    /// This piece in a chunk of its own when it uses less than its chunk: a piece that stays for long (the end
    /// of a finished head) would otherwise keep a whole chunk alive for a few of its bytes.
    fn compacted(self) -> Piece {
        if self.len() == self.chunk.len() { self } else { Piece::whole(Arc::from(self.bytes())) }
    }
}

/// Splits `pieces` (as one run of bytes) at byte `at`: the first `at` bytes, and the rest.
fn split_pieces(pieces: Vec<Piece>, at: usize) -> (Vec<Piece>, Vec<Piece>) {
    let mut first = Vec::new();
    let mut rest = Vec::new();
    let mut left = at;
    for piece in pieces {
        if left >= piece.len() {
            left -= piece.len();
            if piece.len() > 0 {
                first.push(piece);
            }
        } else if left == 0 {
            rest.push(piece);
        } else {
            first.push(piece.sub(0, left));
            rest.push(piece.sub(left, piece.len()));
            left = 0;
        }
    }
    (first, rest)
}

/// Head-and-tail output buffer (see the module docs for its rules).
///
/// The bytes live in shared chunks ([`push_shared`](Self::push_shared)): two buffers fed the same chunks hold
/// one copy of the bytes they both keep. What a buffer keeps, and everything it reports, is the same whichever
/// way it is fed.
#[derive(Debug, Clone)]
pub struct HeadTailBuffer {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<Piece>,
    head_len: usize,
    /// True once a byte beyond the head's limit arrived: the head is final.
    head_sealed: bool,
    tail: VecDeque<Piece>,
    tail_len: usize,
    total_written: u64,
    dropped: u64,
    /// Newlines among the dropped bytes.
    dropped_newlines: u64,
    /// Continuation bytes still to drop because their lead byte was dropped while the tail was empty.
    skip_continuations: u8,
}

impl HeadTailBuffer {
    /// An empty buffer keeping at most `cap_bytes` bytes: head `cap_bytes / 2`, tail the rest.
    pub fn new(cap_bytes: usize) -> Self {
        let head_cap = cap_bytes / 2;
        HeadTailBuffer {
            head_cap,
            tail_cap: cap_bytes - head_cap,
            head: Vec::new(),
            head_len: 0,
            head_sealed: false,
            tail: VecDeque::new(),
            tail_len: 0,
            total_written: 0,
            dropped: 0,
            dropped_newlines: 0,
            skip_continuations: 0,
        }
    }

    /// The most bytes this buffer keeps.
    pub fn cap(&self) -> usize {
        self.head_cap + self.tail_cap
    }

    /// Appends `data` to the stream (copied into a chunk of its own).
    pub fn push(&mut self, data: &[u8]) {
        if !data.is_empty() {
            self.push_pieces(vec![Piece::whole(Arc::from(data))]);
        }
    }

    /// Appends `chunk` to the stream, keeping a reference to it rather than a copy: buffers fed the same
    /// chunk share the bytes they keep of it.
    pub fn push_shared(&mut self, chunk: &Arc<[u8]>) {
        if !chunk.is_empty() {
            self.push_pieces(vec![Piece::whole(Arc::clone(chunk))]);
        }
    }

    /// Appends the concatenation of `pieces` as one write.
    fn push_pieces(&mut self, pieces: Vec<Piece>) {
        let len: usize = pieces.iter().map(Piece::len).sum();
        self.total_written += len as u64;
        if self.head_sealed {
            self.push_tail(pieces);
            return;
        }
        let room = self.head_cap - self.head_len;
        if len <= room {
            self.head_len += len;
            self.head.extend(pieces.into_iter().filter(|piece| piece.len() > 0));
            return;
        }
        let (into_head, rest) = split_pieces(pieces, room);
        self.head_len += room;
        self.head.extend(into_head);
        self.head_sealed = true;
        // `rest`'s first byte is the first byte after the head's limit: if it continues a sequence, end the head
        // before that sequence's lead byte and move the sequence's first bytes to the tail.
        let next = rest.first().and_then(|piece| piece.bytes().first().copied());
        let cut = self.head_cut(next);
        let moved = self.split_head_off(cut);
        if let Some(last) = self.head.pop() {
            self.head.push(last.compacted());
        }
        self.push_tail(moved);
        self.push_tail(rest);
    }

    /// The byte `back` positions from the end of the head (1 = the last byte).
    fn head_byte_from_end(&self, back: usize) -> Option<u8> {
        let mut back = back;
        for piece in self.head.iter().rev() {
            if back <= piece.len() {
                return piece.bytes().get(piece.len() - back).copied();
            }
            back -= piece.len();
        }
        None
    }

    /// Where the full head ends, given the byte that follows it.
    fn head_cut(&self, next: Option<u8>) -> usize {
        let len = self.head_len;
        if !next.is_some_and(is_continuation) {
            return len;
        }
        for back in 1..=len.min(3) {
            let Some(byte) = self.head_byte_from_end(back) else { return len };
            if is_continuation(byte) {
                continue;
            }
            return match sequence_len(byte) {
                Some(need) if need > back => len - back,
                _ => len,
            };
        }
        len
    }

    /// Removes the head's bytes from `at` on and returns them, in order.
    fn split_head_off(&mut self, at: usize) -> Vec<Piece> {
        let mut moved = Vec::new();
        while self.head_len > at {
            let Some(last) = self.head.pop() else { break };
            let excess = self.head_len - at;
            if last.len() <= excess {
                self.head_len -= last.len();
                moved.push(last);
            } else {
                let keep = last.len() - excess;
                moved.push(last.sub(keep, last.len()));
                self.head.push(last.sub(0, keep));
                self.head_len = at;
            }
        }
        moved.reverse();
        moved
    }

    fn front_tail_byte(&self) -> Option<u8> {
        self.tail.front().and_then(|piece| piece.bytes().first().copied())
    }

    /// Drops `count` bytes from the front of the tail; returns the newlines among them.
    fn drop_tail_front(&mut self, mut count: usize) -> u64 {
        let mut newlines_dropped = 0;
        while count > 0 {
            let Some(front) = self.tail.front_mut() else { break };
            let take = count.min(front.len());
            newlines_dropped += newlines(&front.bytes()[..take]);
            front.start += take;
            count -= take;
            self.tail_len -= take;
            if front.len() == 0 {
                self.tail.pop_front();
            }
        }
        newlines_dropped
    }

    /// Appends the concatenation of `pieces` to the tail as one write.
    fn push_tail(&mut self, pieces: Vec<Piece>) {
        let mut pieces: VecDeque<Piece> = pieces.into_iter().filter(|piece| piece.len() > 0).collect();
        while self.skip_continuations > 0 {
            let Some(front) = pieces.front_mut() else { return };
            if is_continuation(front.bytes()[0]) {
                front.start += 1;
                self.dropped += 1;
                self.skip_continuations -= 1;
                if front.len() == 0 {
                    pieces.pop_front();
                }
            } else {
                self.skip_continuations = 0;
            }
        }
        let len: usize = pieces.iter().map(Piece::len).sum();
        let total = self.tail_len + len;
        if total <= self.tail_cap {
            self.tail_len += len;
            self.tail.extend(pieces);
            return;
        }
        let overflow = total - self.tail_cap;
        let from_tail = overflow.min(self.tail_len);
        self.dropped_newlines += self.drop_tail_front(from_tail);
        // The bytes of the write that never make it into the tail are not kept at all.
        let mut from_data = overflow - from_tail;
        while from_data > 0 {
            let Some(front) = pieces.front_mut() else { break };
            let take = from_data.min(front.len());
            self.dropped_newlines += newlines(&front.bytes()[..take]);
            front.start += take;
            from_data -= take;
            if front.len() == 0 {
                pieces.pop_front();
            }
        }
        self.tail_len += len - (overflow - from_tail);
        self.tail.extend(pieces);
        self.dropped += overflow as u64;
        // Start the tail on a character boundary.
        let mut skipped = 0u8;
        while skipped < 3 && self.front_tail_byte().is_some_and(is_continuation) {
            self.drop_tail_front(1);
            self.dropped += 1;
            skipped += 1;
        }
        if self.tail_len == 0 && skipped < 3 {
            self.skip_continuations = 3 - skipped;
        }
    }

    /// Bytes kept (head plus tail, without the marker).
    pub fn len(&self) -> usize {
        self.head_len + self.tail_len
    }

    /// True when no byte is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes written since creation or the last [`take`](Self::take).
    pub fn total_written(&self) -> u64 {
        self.total_written
    }

    /// Bytes dropped between head and tail: always `total_written() - len()`.
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped
    }

    /// What was dropped between head and tail: bytes and newlines.
    pub fn dropped(&self) -> Dropped {
        Dropped { bytes: self.dropped, newlines: self.dropped_newlines }
    }

    /// The head: the first bytes written.
    pub fn head(&self) -> Vec<u8> {
        self.head.iter().flat_map(|piece| piece.bytes().iter().copied()).collect()
    }

    /// The tail: the newest bytes written after the head.
    pub fn tail(&self) -> Vec<u8> {
        self.tail.iter().flat_map(|piece| piece.bytes().iter().copied()).collect()
    }

    /// Calls `f` with the rendered contents as consecutive byte slices (head, the [`dropped_marker`] if bytes
    /// were dropped, tail), without copying them: their concatenation is [`to_bytes`](Self::to_bytes).
    pub fn with_segments<R>(&self, f: impl FnOnce(&[&[u8]]) -> R) -> R {
        let marker = if self.dropped > 0 { dropped_marker(self.dropped) } else { String::new() };
        let mut segments: Vec<&[u8]> = Vec::with_capacity(self.head.len() + self.tail.len() + 1);
        segments.extend(self.head.iter().map(Piece::bytes));
        if !marker.is_empty() {
            segments.push(marker.as_bytes());
        }
        segments.extend(self.tail.iter().map(Piece::bytes));
        f(&segments)
    }

    /// Head, then the [`dropped_marker`] if bytes were dropped, then tail.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.with_segments(|segments| segments.concat())
    }

    /// [`to_bytes`](Self::to_bytes) as text, invalid UTF-8 replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        match String::from_utf8(self.to_bytes()) {
            Ok(text) => text,
            Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
        }
    }

    /// Returns [`to_bytes`](Self::to_bytes) and empties the buffer (counts included): the next call sees only
    /// what is written from now on.
    pub fn take(&mut self) -> Vec<u8> {
        self.take_buffer().to_bytes()
    }

    /// Like [`take`](Self::take), but an incomplete UTF-8 sequence at the very end (at most 3 bytes, a character
    /// whose remaining bytes have not arrived yet) stays in the buffer, so a character is never split between two
    /// calls. Use [`take`](Self::take) for the final read of a stream.
    pub fn take_complete(&mut self) -> Vec<u8> {
        self.take_complete_buffer().to_bytes()
    }

    /// [`take`](Self::take) without rendering: returns the buffer's contents as a buffer of their own (no byte
    /// is copied) and leaves this one empty.
    pub fn take_buffer(&mut self) -> HeadTailBuffer {
        std::mem::replace(self, HeadTailBuffer::new(self.cap()))
    }

    /// [`take_complete`](Self::take_complete) without rendering: the returned buffer renders what
    /// `take_complete` returns; the incomplete sequence at the end, if any, stays in this one.
    pub fn take_complete_buffer(&mut self) -> HeadTailBuffer {
        let mut taken = self.take_buffer();
        let keep = taken.with_segments(|segments| {
            let mut last = Vec::with_capacity(4);
            for segment in segments.iter().rev() {
                let want = 4 - last.len();
                let from = segment.len().saturating_sub(want);
                last.splice(0..0, segment[from..].iter().copied());
                if last.len() == 4 {
                    break;
                }
            }
            incomplete_suffix_len(&last)
        });
        if keep > 0 {
            // The rendered end is kept bytes (a marker ends in a newline), in the tail or, when it is empty and
            // nothing was dropped, in the head.
            let carried = if taken.tail_len > 0 {
                taken.split_tail_off(keep)
            } else {
                taken.split_head_off(taken.head_len - keep)
            };
            self.push_pieces(carried);
        }
        taken
    }

    /// Removes the last `count` bytes of the tail and returns them, in order.
    fn split_tail_off(&mut self, count: usize) -> Vec<Piece> {
        let mut moved = Vec::new();
        let mut count = count.min(self.tail_len);
        while count > 0 {
            let Some(last) = self.tail.pop_back() else { break };
            if last.len() <= count {
                count -= last.len();
                self.tail_len -= last.len();
                moved.push(last);
            } else {
                let keep = last.len() - count;
                moved.push(last.sub(keep, last.len()));
                self.tail.push_back(last.sub(0, keep));
                self.tail_len -= count;
                count = 0;
            }
        }
        moved.reverse();
        moved
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The byte-copying implementation the shared-chunk buffer replaced, kept as the oracle: the new buffer
    /// must keep, count and render exactly what it did, for every stream and every way of cutting it.
    #[allow(dead_code)]
    mod reference {
        use std::collections::VecDeque;

        use super::super::{Dropped, dropped_marker, incomplete_suffix_len, is_continuation, sequence_len};

        fn newlines(bytes: impl IntoIterator<Item = u8>) -> u64 {
            bytes.into_iter().filter(|&b| b == b'\n').count() as u64
        }

        /// The buffer as it was before it shared chunks: one copy of every kept byte per buffer.
        #[derive(Debug, Clone)]
        pub struct HeadTailBuffer {
            head_cap: usize,
            tail_cap: usize,
            head: Vec<u8>,
            /// True once a byte beyond the head's limit arrived: the head is final.
            head_sealed: bool,
            tail: VecDeque<u8>,
            total_written: u64,
            dropped: u64,
            /// Newlines among the dropped bytes.
            dropped_newlines: u64,
            /// Continuation bytes still to drop because their lead byte was dropped while the tail was empty.
            skip_continuations: u8,
        }

        impl HeadTailBuffer {
            /// An empty buffer keeping at most `cap_bytes` bytes: head `cap_bytes / 2`, tail the rest.
            pub fn new(cap_bytes: usize) -> Self {
                let head_cap = cap_bytes / 2;
                HeadTailBuffer {
                    head_cap,
                    tail_cap: cap_bytes - head_cap,
                    head: Vec::new(),
                    head_sealed: false,
                    tail: VecDeque::new(),
                    total_written: 0,
                    dropped: 0,
                    dropped_newlines: 0,
                    skip_continuations: 0,
                }
            }

            /// The most bytes this buffer keeps.
            pub fn cap(&self) -> usize {
                self.head_cap + self.tail_cap
            }

            /// Appends `data` to the stream.
            pub fn push(&mut self, data: &[u8]) {
                self.total_written += data.len() as u64;
                if self.head_sealed {
                    self.push_tail(data);
                    return;
                }
                let room = self.head_cap - self.head.len();
                if data.len() <= room {
                    self.head.extend_from_slice(data);
                    return;
                }
                let (into_head, rest) = data.split_at(room);
                self.head.extend_from_slice(into_head);
                self.head_sealed = true;
                // `rest[0]` is the first byte after the head's limit: if it continues a sequence, end the head before
                // that sequence's lead byte and move the sequence's first bytes to the tail.
                let cut = self.head_cut(rest.first().copied());
                let moved = self.head.split_off(cut);
                self.push_tail(&moved);
                self.push_tail(rest);
            }

            /// Where the full head ends, given the byte that follows it.
            fn head_cut(&self, next: Option<u8>) -> usize {
                let len = self.head.len();
                if !next.is_some_and(is_continuation) {
                    return len;
                }
                for back in 1..=len.min(3) {
                    let byte = self.head[len - back];
                    if is_continuation(byte) {
                        continue;
                    }
                    return match sequence_len(byte) {
                        Some(need) if need > back => len - back,
                        _ => len,
                    };
                }
                len
            }

            fn push_tail(&mut self, mut data: &[u8]) {
                while self.skip_continuations > 0 {
                    match data.first() {
                        Some(&byte) if is_continuation(byte) => {
                            data = &data[1..];
                            self.dropped += 1;
                            self.skip_continuations -= 1;
                        }
                        Some(_) => self.skip_continuations = 0,
                        None => return,
                    }
                }
                let total = self.tail.len() + data.len();
                if total <= self.tail_cap {
                    self.tail.extend(data);
                    return;
                }
                let overflow = total - self.tail_cap;
                let from_tail = overflow.min(self.tail.len());
                self.dropped_newlines += newlines(self.tail.drain(..from_tail));
                self.dropped_newlines += newlines(data[..overflow - from_tail].iter().copied());
                self.tail.extend(&data[overflow - from_tail..]);
                self.dropped += overflow as u64;
                // Start the tail on a character boundary.
                let mut skipped = 0u8;
                while skipped < 3 && self.tail.front().copied().is_some_and(is_continuation) {
                    self.tail.pop_front();
                    self.dropped += 1;
                    skipped += 1;
                }
                if self.tail.is_empty() && skipped < 3 {
                    self.skip_continuations = 3 - skipped;
                }
            }

            /// Bytes kept (head plus tail, without the marker).
            pub fn len(&self) -> usize {
                self.head.len() + self.tail.len()
            }

            /// True when no byte is kept.
            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }

            /// Bytes written since creation or the last [`take`](Self::take).
            pub fn total_written(&self) -> u64 {
                self.total_written
            }

            /// Bytes dropped between head and tail: always `total_written() - len()`.
            pub fn dropped_bytes(&self) -> u64 {
                self.dropped
            }

            /// What was dropped between head and tail: bytes and newlines.
            pub fn dropped(&self) -> Dropped {
                Dropped { bytes: self.dropped, newlines: self.dropped_newlines }
            }

            /// The head: the first bytes written.
            pub fn head(&self) -> &[u8] {
                &self.head
            }

            /// The tail: the newest bytes written after the head.
            pub fn tail(&self) -> Vec<u8> {
                self.tail.iter().copied().collect()
            }

            /// Head, then the [`dropped_marker`] if bytes were dropped, then tail.
            pub fn to_bytes(&self) -> Vec<u8> {
                let marker = if self.dropped > 0 { dropped_marker(self.dropped) } else { String::new() };
                let mut out = Vec::with_capacity(self.len() + marker.len());
                out.extend_from_slice(&self.head);
                out.extend_from_slice(marker.as_bytes());
                let (front, back) = self.tail.as_slices();
                out.extend_from_slice(front);
                out.extend_from_slice(back);
                out
            }

            /// [`to_bytes`](Self::to_bytes) as text, invalid UTF-8 replaced by U+FFFD.
            pub fn to_string_lossy(&self) -> String {
                String::from_utf8_lossy(&self.to_bytes()).into_owned()
            }

            /// Returns [`to_bytes`](Self::to_bytes) and empties the buffer (counts included): the next call sees only
            /// what is written from now on.
            pub fn take(&mut self) -> Vec<u8> {
                let out = self.to_bytes();
                *self = HeadTailBuffer::new(self.cap());
                out
            }

            /// Like [`take`](Self::take), but an incomplete UTF-8 sequence at the very end (at most 3 bytes, a character
            /// whose remaining bytes have not arrived yet) stays in the buffer, so a character is never split between two
            /// calls. Use [`take`](Self::take) for the final read of a stream.
            pub fn take_complete(&mut self) -> Vec<u8> {
                let mut out = self.take();
                let keep = incomplete_suffix_len(&out);
                if keep > 0 {
                    let carried = out.split_off(out.len() - keep);
                    self.push(&carried);
                }
                out
            }
        }
    }

    #[test]
    fn small_stream_is_kept_whole() {
        let mut buf = HeadTailBuffer::new(10);
        buf.push(b"abc");
        buf.push(b"defgh");
        assert_eq!(buf.to_bytes(), b"abcdefgh");
        assert_eq!(buf.head(), b"abcde");
        assert_eq!(buf.tail(), b"fgh");
        assert_eq!(buf.dropped_bytes(), 0);
        assert_eq!(buf.total_written(), 8);
    }

    #[test]
    fn overflow_keeps_head_and_tail_with_marker() {
        let mut buf = HeadTailBuffer::new(8);
        buf.push(b"0123456789");
        buf.push(b"abcdef");
        assert_eq!(buf.head(), b"0123");
        assert_eq!(buf.tail(), b"cdef");
        assert_eq!(buf.dropped_bytes(), 8);
        assert_eq!(buf.to_string_lossy(), "0123\n[... 8 bytes dropped ...]\ncdef");
    }

    #[test]
    fn head_does_not_split_a_character() {
        // Head limit 5 falls inside "é" (bytes 4..6): the head ends before it.
        let mut buf = HeadTailBuffer::new(10);
        buf.push("abcdé".as_bytes());
        buf.push("xyzuvw".as_bytes());
        assert_eq!(buf.head(), b"abcd");
        assert!(std::str::from_utf8(&buf.tail()).is_ok());
        assert_eq!(buf.len() as u64 + buf.dropped_bytes(), buf.total_written());
    }

    #[test]
    fn tail_starts_on_a_character_boundary() {
        let mut buf = HeadTailBuffer::new(8);
        buf.push(b"0123");
        buf.push("€€€".as_bytes()); // 9 bytes, tail keeps at most 4
        assert_eq!(buf.tail(), "€".as_bytes());
        assert_eq!(buf.dropped_bytes(), 6);
    }

    #[test]
    fn byte_by_byte_writes_into_a_tiny_tail_never_start_with_a_continuation() {
        let mut buf = HeadTailBuffer::new(2);
        for byte in "a€€é".as_bytes() {
            buf.push(std::slice::from_ref(byte));
            let tail = buf.tail();
            assert!(!tail.first().copied().is_some_and(is_continuation), "tail {tail:?}");
        }
        assert_eq!(buf.head(), b"a");
        assert!(std::str::from_utf8(&buf.tail()).is_ok());
        assert_eq!(buf.len() as u64 + buf.dropped_bytes(), buf.total_written());
    }

    #[test]
    fn take_resets_and_take_complete_keeps_a_partial_character() {
        let mut buf = HeadTailBuffer::new(100);
        let euro = "€".as_bytes();
        buf.push(b"ab");
        buf.push(&euro[..1]);
        assert_eq!(buf.take_complete(), b"ab");
        assert_eq!(buf.total_written(), 1);
        buf.push(&euro[1..]);
        assert_eq!(buf.take_complete(), euro);
        assert!(buf.is_empty());
        buf.push(b"x\xE2");
        assert_eq!(buf.take(), b"x\xE2");
        assert_eq!(buf.total_written(), 0);
        assert!(buf.take().is_empty());
    }

    #[test]
    fn zero_capacity_drops_everything() {
        let mut buf = HeadTailBuffer::new(0);
        buf.push(b"hello");
        assert!(buf.is_empty());
        assert_eq!(buf.dropped_bytes(), 5);
        assert_eq!(buf.to_bytes(), dropped_marker(5).as_bytes());
    }

    /// Splits `data` into pieces at the given (sorted, deduplicated) cut points.
    fn pieces(data: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
        cuts.retain(|&c| c > 0 && c < data.len());
        cuts.sort_unstable();
        cuts.dedup();
        let mut out = Vec::new();
        let mut start = 0;
        for cut in cuts {
            out.push(&data[start..cut]);
            start = cut;
        }
        out.push(&data[start..]);
        out
    }

    fn check_against_oracle(cap: usize, oracle: &[u8], chunks: &[&[u8]]) -> Result<(), TestCaseError> {
        let mut buf = HeadTailBuffer::new(cap);
        for chunk in chunks {
            buf.push(chunk);
            prop_assert!(buf.len() <= cap);
        }
        let total = oracle.len();
        let head = buf.head();
        let tail = buf.tail();
        prop_assert_eq!(buf.total_written(), total as u64);
        prop_assert!(head.len() <= cap / 2);
        prop_assert!(tail.len() <= cap - cap / 2);
        prop_assert_eq!(&head[..], &oracle[..head.len()]);
        prop_assert_eq!(&tail[..], &oracle[total - tail.len()..]);
        prop_assert_eq!(buf.dropped_bytes(), (total - head.len() - tail.len()) as u64);
        if total <= cap / 2 {
            prop_assert_eq!(head.len(), total);
        } else {
            // The head is full, up to one held-back character.
            prop_assert!(head.len() + 3 >= cap / 2);
        }
        if buf.dropped_bytes() > 0 {
            prop_assert!(tail.len() + 3 >= cap - cap / 2);
            let mut expected = head.to_vec();
            expected.extend_from_slice(dropped_marker(buf.dropped_bytes()).as_bytes());
            expected.extend_from_slice(&tail);
            prop_assert_eq!(buf.to_bytes(), expected);
        } else {
            prop_assert_eq!(buf.to_bytes(), oracle);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn bytes_match_the_oracle(
            cap in 0usize..64,
            data in proptest::collection::vec(any::<u8>(), 0..256),
            cuts in proptest::collection::vec(0usize..256, 0..16),
        ) {
            check_against_oracle(cap, &data, &pieces(&data, cuts))?;
        }

        #[test]
        fn utf8_text_matches_the_oracle_and_is_never_split(
            cap in 0usize..64,
            text in "[a-z\u{e9}\u{20ac}\u{1f600}\n]{0,120}",
            cuts in proptest::collection::vec(0usize..512, 0..16),
        ) {
            let data = text.as_bytes();
            let chunks = pieces(data, cuts);
            check_against_oracle(cap, data, &chunks)?;
            let mut buf = HeadTailBuffer::new(cap);
            for chunk in &chunks {
                buf.push(chunk);
            }
            prop_assert!(std::str::from_utf8(&buf.head()).is_ok());
            prop_assert!(std::str::from_utf8(&buf.tail()).is_ok());
            prop_assert!(std::str::from_utf8(&buf.to_bytes()).is_ok());
        }

        #[test]
        fn take_complete_reassembles_the_stream(
            text in "[a-z\u{e9}\u{20ac}\u{1f600}]{0,60}",
            cuts in proptest::collection::vec(0usize..256, 0..16),
        ) {
            // A buffer large enough to drop nothing: the taken pieces are valid UTF-8 and concatenate to the input.
            let mut buf = HeadTailBuffer::new(1024);
            let mut joined = Vec::new();
            for chunk in pieces(text.as_bytes(), cuts) {
                buf.push(chunk);
                let piece = buf.take_complete();
                prop_assert!(std::str::from_utf8(&piece).is_ok());
                joined.extend_from_slice(&piece);
            }
            joined.extend_from_slice(&buf.take());
            prop_assert_eq!(joined, text.as_bytes());
        }
    }

    /// One step of a stream fed to a buffer: a write, or a take between calls.
    #[derive(Debug, Clone)]
    enum Step {
        Write(Vec<u8>),
        Take,
        TakeComplete,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let write = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..40),
            "[a-z\u{e9}\u{20ac}\u{1f600}\n]{0,16}".prop_map(String::into_bytes),
            proptest::collection::vec(prop_oneof![Just(0x80u8), Just(0xE2), Just(0xF0), Just(b'a')], 0..8),
        ];
        proptest::collection::vec(
            prop_oneof![6 => write.prop_map(Step::Write), 1 => Just(Step::Take), 1 => Just(Step::TakeComplete)],
            0..40,
        )
    }

    fn same_as_reference(new: &HeadTailBuffer, old: &reference::HeadTailBuffer) -> Result<(), TestCaseError> {
        prop_assert_eq!(new.head(), old.head().to_vec());
        prop_assert_eq!(new.tail(), old.tail());
        prop_assert_eq!(new.to_bytes(), old.to_bytes());
        prop_assert_eq!(new.to_string_lossy(), old.to_string_lossy());
        prop_assert_eq!(new.len(), old.len());
        prop_assert_eq!(new.total_written(), old.total_written());
        prop_assert_eq!(new.dropped(), old.dropped());
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Two buffers fed the same shared chunks (a session's pending output and its transcript), one of them
        /// taken from between calls, each keep, count and render exactly what the byte-copying buffer did.
        #[test]
        fn shared_chunks_behave_like_the_byte_copying_buffer(cap in 0usize..48, steps in steps()) {
            let mut pending = HeadTailBuffer::new(cap);
            let mut transcript = HeadTailBuffer::new(cap);
            let mut old_pending = reference::HeadTailBuffer::new(cap);
            let mut old_transcript = reference::HeadTailBuffer::new(cap);
            for step in steps {
                match step {
                    Step::Write(data) => {
                        let chunk: Arc<[u8]> = Arc::from(data.as_slice());
                        pending.push_shared(&chunk);
                        transcript.push_shared(&chunk);
                        old_pending.push(&data);
                        old_transcript.push(&data);
                    }
                    Step::Take => {
                        let taken = pending.take_buffer();
                        prop_assert_eq!(taken.to_bytes(), old_pending.take());
                    }
                    Step::TakeComplete => {
                        let taken = pending.take_complete_buffer();
                        prop_assert_eq!(taken.to_bytes(), old_pending.take_complete());
                    }
                }
                same_as_reference(&pending, &old_pending)?;
                same_as_reference(&transcript, &old_transcript)?;
            }
            prop_assert_eq!(pending.take_complete(), old_pending.take_complete());
            prop_assert_eq!(transcript.take(), old_transcript.take());
        }

        /// The segments concatenate to the rendered bytes.
        #[test]
        fn segments_concatenate_to_the_rendered_bytes(cap in 0usize..48, steps in steps()) {
            let mut buf = HeadTailBuffer::new(cap);
            for step in steps {
                if let Step::Write(data) = step {
                    buf.push(&data);
                }
            }
            prop_assert_eq!(buf.with_segments(|segments| segments.concat()), buf.to_bytes());
        }
    }

    #[test]
    fn a_finished_head_keeps_only_its_own_bytes_of_a_chunk() {
        let chunk: Arc<[u8]> = Arc::from(&[b'x'; 100][..]);
        let mut buf = HeadTailBuffer::new(20);
        buf.push_shared(&chunk);
        // The head's 10 bytes were copied out of the 100-byte chunk; the tail's piece of it holds the chunk.
        assert_eq!(buf.head.len(), 1);
        assert_eq!(buf.head[0].chunk.len(), 10);
        assert_eq!(Arc::strong_count(&chunk), 2);
        buf.push(&[b'y'; 10]);
        assert_eq!(Arc::strong_count(&chunk), 1, "the tail moved past the chunk: only the caller holds it");
    }
}
