//! The rendered terminal of a PTY session (spec B5): a `vt100` screen fed through an [`EscapeGuard`], so that
//! its memory stays bounded whatever the program prints.
//!
//! What the screen model can hold, and why each part is bounded:
//! - the grid: 24x80 cells of fixed size, no scrollback (resize requests from the program are ignored);
//! - the parser's OSC buffer (`vte` keeps an OSC body until its terminator, in a growing `Vec`): at most
//!   [`uexec_domain::escape::MAX_STRING_BYTES`], because the guard cuts longer strings;
//! - CSI parameters and intermediates: fixed arrays in `vte`; the guard also cuts sequences longer than
//!   [`uexec_domain::escape::MAX_CONTROL_BYTES`];
//! - DCS, SOS, PM and APC bodies: not kept by `vt100` at all, and cut by the guard as well;
//! - the scratch buffer for the guard's output: at most one chunk of output.

use std::num::NonZeroU16;

use uexec_domain::escape::EscapeGuard;
use uexec_domain::limits::{PTY_COLS, PTY_ROWS};

/// A 24x80 screen without scrollback, behind an escape guard.
pub(crate) struct Screen {
    guard: EscapeGuard,
    parser: vt100::Parser,
    /// The guard's output for the chunk being parsed (reused; as large as the largest chunk).
    scratch: Vec<u8>,
}

impl Screen {
    /// A blank screen of the session's terminal size.
    pub(crate) fn new() -> Option<Screen> {
        let rows = NonZeroU16::new(PTY_ROWS)?;
        let cols = NonZeroU16::new(PTY_COLS)?;
        Some(Screen {
            guard: EscapeGuard::default(),
            parser: vt100::Parser::new(rows, cols, 0),
            scratch: Vec::new(),
        })
    }

    /// Apply the next piece of the session's output.
    pub(crate) fn process(&mut self, chunk: &[u8]) {
        self.scratch.clear();
        self.guard.filter(chunk, &mut self.scratch);
        self.parser.process(&self.scratch);
    }

    /// The visible text.
    pub(crate) fn contents(&self) -> String {
        self.parser.screen().contents()
    }

    /// Escape sequences that draw this screen on a blank terminal: its cells with their attributes, the cursor,
    /// and the input modes the program set (application keypad, bracketed paste).
    pub(crate) fn formatted(&self) -> Vec<u8> {
        self.parser.screen().state_formatted().into_bytes()
    }
}

#[cfg(test)]
// The test binary's allocator counts what each thread holds; that takes an `unsafe impl GlobalAlloc`.
#[allow(unsafe_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    use super::*;

    /// Counts the bytes allocated and not yet freed by the current thread, so that each test measures only
    /// what it allocates itself.
    struct PerThread;

    thread_local! {
        static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
    }

    fn add(bytes: usize, sign: isize) {
        let delta = isize::try_from(bytes).unwrap_or(isize::MAX) * sign;
        let _ = LIVE_BYTES.try_with(|live| live.set(live.get() + delta));
    }

    // SAFETY: every call is forwarded to the system allocator unchanged; the bookkeeping touches a `const`
    // thread-local `Cell` only, which neither allocates nor re-enters the allocator.
    unsafe impl GlobalAlloc for PerThread {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size(), 1);
            // SAFETY: forwarded with the caller's layout.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(layout.size(), -1);
            // SAFETY: forwarded with the caller's pointer and layout.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(layout.size(), -1);
            add(new_size, 1);
            // SAFETY: forwarded with the caller's arguments.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: PerThread = PerThread;

    fn live_bytes() -> isize {
        LIVE_BYTES.with(Cell::get)
    }

    /// Feed `intro`, then `total` bytes of `filler` in 64 KiB chunks (as the reader hands them over), and return
    /// the most the screen held beyond what it held before.
    fn peak_growth(intro: &[u8], filler: u8, total: usize) -> isize {
        let mut screen = Screen::new().unwrap();
        let chunk = vec![filler; 64 * 1024];
        screen.process(b"warm up: \x1b]0;title\x07\x1b[1mbold\x1b[m\r\n");
        let before = live_bytes();
        let mut peak = 0;
        screen.process(intro);
        for _ in 0..total / chunk.len() {
            screen.process(&chunk);
            peak = peak.max(live_bytes() - before);
        }
        screen.process(b"\x07\x1b\\\x18after\r\n");
        peak = peak.max(live_bytes() - before);
        assert!(screen.contents().contains("after"), "the screen goes on after the hostile sequence");
        peak
    }

    /// Most a hostile sequence may add: the OSC buffer (the limit, doubled by `Vec` growth) and the
    /// scratch buffer (one chunk), with slack.
    const BOUND: isize = 256 * 1024;

    #[test]
    fn hostile_sequences_do_not_grow_the_screen() {
        const TOTAL: usize = 32 * 1024 * 1024;
        let cases: [(&[u8], u8); 7] = [
            (b"\x1b]0;", b'A'),
            (b"\x1b]52;c;", b'Q'),
            (b"\x1bP", b'x'),
            (b"\x1bPq#0;2;0;0;0", b'~'),
            (b"\x1b_G", b'A'),
            (b"\x1b[", b'9'),
            (b"\x1b[", b';'),
        ];
        for (intro, filler) in cases {
            let growth = peak_growth(intro, filler, TOTAL);
            assert!(growth < BOUND, "{intro:?} + {TOTAL} x {filler:?}: the screen grew by {growth} bytes");
        }
    }

    #[test]
    fn an_unguarded_parser_does_grow_which_is_what_the_guard_prevents() {
        // The same stream straight into `vt100`: the OSC body is kept whole. This pins the reason for the guard
        // (if a future `vte` bounds it, this test says so and the guard's limit can be revisited).
        let mut parser = vt100::Parser::new(NonZeroU16::new(24).unwrap(), NonZeroU16::new(80).unwrap(), 0);
        let before = live_bytes();
        parser.process(b"\x1b]0;");
        let chunk = vec![b'A'; 64 * 1024];
        for _ in 0..64 {
            parser.process(&chunk);
        }
        assert!(live_bytes() - before >= 4 * 1024 * 1024);
    }

    #[test]
    fn ordinary_output_renders_as_without_the_guard() {
        let stream: &[u8] =
            b"\x1b]0;title\x07\x1b[2J\x1b[H\x1b[1;32mgreen\x1b[0m line\r\n\x1bPq#0~~\x1b\\after dcs\r\n\
              \x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\\r\n\x1b[5;10Hplaced";
        let mut guarded = Screen::new().unwrap();
        let mut plain = vt100::Parser::new(NonZeroU16::new(24).unwrap(), NonZeroU16::new(80).unwrap(), 0);
        for piece in stream.chunks(7) {
            guarded.process(piece);
            plain.process(piece);
        }
        assert_eq!(guarded.contents(), plain.screen().contents());
        assert_eq!(guarded.parser.screen().contents_formatted(), plain.screen().contents_formatted());
    }
}
