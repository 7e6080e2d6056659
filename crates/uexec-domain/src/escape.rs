//! A guard in front of a terminal-screen parser: escape sequences that grow past a fixed size are cut, so the
//! parser's state stays bounded whatever a program prints.
//!
//! A screen parser keeps the body of an open string sequence until its terminator: `ESC ] 0;` followed by
//! 200 MiB and no terminator made the screen model of one session hold 200 MiB. [`EscapeGuard`] tracks the
//! escape sequences of a byte stream with a state machine of a few words and passes the stream on unchanged,
//! except that:
//!
//! 1. The body of a string sequence (OSC `ESC ]`, DCS `ESC P`, SOS `ESC X`, PM `ESC ^`, APC `ESC _`) is passed
//!    on for at most [`MAX_STRING_BYTES`] bytes. At the first byte beyond that the sequence is aborted for the
//!    parser (a CAN, `0x18`, is passed on instead, which ends any sequence without effect) and the rest of the
//!    sequence is dropped, up to and excluding an ESC that ends it, or including any other terminator. Sixel
//!    images (DCS `q`) are larger than that and so end here.
//! 2. A control sequence (CSI `ESC [`) of more than [`MAX_CONTROL_BYTES`] bytes after its introducer (huge
//!    parameter lists, endless digits) is aborted the same way and dropped up to its final byte.
//! 3. Nothing else changes: a stream in which no sequence exceeds its limit comes out byte for byte as it went
//!    in, in whatever chunks it is fed.
//!
//! The terminators follow the `vte` parser (the one the `vt100` screen model uses), never ending a string earlier
//! than the parser does: OSC ends at BEL, CAN, SUB or ESC; DCS at CAN, SUB, ESC or, once its header is complete,
//! the 8-bit ST (`0x9C`); SOS, PM and APC at CAN, SUB or ESC; CSI at a final byte (`0x40..=0x7E`), CAN, SUB or
//! ESC. In the ground state only ESC starts a sequence (the parser reads 8-bit bytes as UTF-8, not as C1
//! introducers). So whenever the parser holds an open string, the guard counts it.

/// Most bytes of an OSC, DCS, SOS, PM or APC body passed on: room for a window title or a hyperlink; longer
/// bodies (clipboard copies, images) do not change what the screen shows.
pub const MAX_STRING_BYTES: usize = 4096;

/// Most bytes of a control sequence passed on after `ESC [` (parameters and intermediates). `vte` keeps at most
/// 32 parameters of at most 5 digits each, so every sequence it can represent fits.
pub const MAX_CONTROL_BYTES: usize = 256;

const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1A;
const ESC: u8 = 0x1B;
/// The 8-bit string terminator.
const ST_8BIT: u8 = 0x9C;

/// Which string sequence is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StringKind {
    /// Operating system command (`ESC ]`).
    Osc,
    /// Device control string (`ESC P`); `passthrough` once its header's final byte was seen.
    Dcs { passthrough: bool },
    /// Start of string, privacy message or application program command (`ESC X`, `ESC ^`, `ESC _`).
    Other,
}

impl StringKind {
    /// Whether `byte` ends a string of this kind (an ESC also ends it, and starts a new sequence).
    fn ends_at(self, byte: u8) -> bool {
        matches!(
            (self, byte),
            (_, CAN | SUB) | (StringKind::Osc, BEL) | (StringKind::Dcs { passthrough: true }, ST_8BIT)
        )
    }

    /// The kind after `byte` of its body (a DCS header ends at its first final byte).
    fn after(self, byte: u8) -> StringKind {
        match self {
            StringKind::Dcs { passthrough: false } if (0x40..=0x7E).contains(&byte) => {
                StringKind::Dcs { passthrough: true }
            }
            kind => kind,
        }
    }
}

/// Where the guard is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Plain text.
    Ground,
    /// After ESC.
    Escape,
    /// After ESC and an intermediate byte (`0x20..=0x2F`).
    EscapeIntermediate,
    /// Inside a control sequence; `len` bytes passed on after `ESC [`.
    Csi { len: usize },
    /// Inside a string sequence; `len` body bytes passed on.
    String { kind: StringKind, len: usize },
    /// A control sequence that was cut: dropped up to its end.
    DiscardCsi,
    /// A string sequence that was cut: dropped up to its end.
    DiscardString { kind: StringKind },
}

/// The guard (see the module documentation). Its state is a few words, whatever it is fed.
#[derive(Debug, Clone)]
pub struct EscapeGuard {
    state: State,
    max_string: usize,
    max_control: usize,
    cuts: u64,
}

impl Default for EscapeGuard {
    fn default() -> Self {
        EscapeGuard::with_limits(MAX_STRING_BYTES, MAX_CONTROL_BYTES)
    }
}

impl EscapeGuard {
    /// A guard with other limits than [`MAX_STRING_BYTES`] and [`MAX_CONTROL_BYTES`] (for tests).
    pub fn with_limits(max_string: usize, max_control: usize) -> Self {
        EscapeGuard { state: State::Ground, max_string, max_control, cuts: 0 }
    }

    /// How many sequences were cut so far.
    pub fn cuts(&self) -> u64 {
        self.cuts
    }

    /// Bytes of the open control or string sequence passed on so far (0 outside one): never more than its limit.
    #[cfg(test)]
    pub(crate) fn open_len(&self) -> usize {
        match self.state {
            State::Csi { len } | State::String { len, .. } => len,
            _ => 0,
        }
    }

    /// Append to `out` what the parser should see of `input`, the next piece of the stream.
    pub fn filter(&mut self, input: &[u8], out: &mut Vec<u8>) {
        out.reserve(input.len());
        let mut rest = input;
        while !rest.is_empty() {
            if self.state == State::Ground {
                // Plain text up to the next ESC passes as a whole.
                let text = rest.iter().position(|&byte| byte == ESC).unwrap_or(rest.len());
                let (plain, tail) = rest.split_at(text);
                out.extend_from_slice(plain);
                rest = tail;
                if let Some((&esc, tail)) = rest.split_first() {
                    out.push(esc);
                    self.state = State::Escape;
                    rest = tail;
                }
                continue;
            }
            if let Some(skip) = self.discardable_prefix(rest) {
                // A cut sequence's bytes up to the next one that can end it go nowhere (a flood costs no
                // per-byte work).
                rest = &rest[skip..];
                if skip > 0 {
                    continue;
                }
            }
            if let Some((&byte, tail)) = rest.split_first() {
                self.step(byte, out);
                rest = tail;
            }
        }
    }

    /// While a cut sequence is being dropped: how many leading bytes of `input` cannot end it or change how it
    /// ends. `None` in every other state.
    fn discardable_prefix(&self, input: &[u8]) -> Option<usize> {
        let inert: fn(u8) -> bool = match self.state {
            State::DiscardCsi => |byte| !matches!(byte, ESC | CAN | SUB | 0x40..=0x7E),
            State::DiscardString { kind: StringKind::Osc } => |byte| !matches!(byte, ESC | CAN | SUB | BEL),
            State::DiscardString { kind: StringKind::Dcs { passthrough: true } } => {
                |byte| !matches!(byte, ESC | CAN | SUB | ST_8BIT)
            }
            State::DiscardString { kind: StringKind::Other } => |byte| !matches!(byte, ESC | CAN | SUB),
            _ => return None,
        };
        Some(input.iter().position(|&byte| !inert(byte)).unwrap_or(input.len()))
    }

    /// One byte outside the ground state.
    fn step(&mut self, byte: u8, out: &mut Vec<u8>) {
        self.state = match self.state {
            State::Ground => {
                out.push(byte);
                if byte == ESC { State::Escape } else { State::Ground }
            }
            State::Escape => {
                out.push(byte);
                match byte {
                    ESC => State::Escape,
                    CAN | SUB => State::Ground,
                    b'[' => State::Csi { len: 0 },
                    b']' => State::String { kind: StringKind::Osc, len: 0 },
                    b'P' => State::String { kind: StringKind::Dcs { passthrough: false }, len: 0 },
                    b'X' | b'^' | b'_' => State::String { kind: StringKind::Other, len: 0 },
                    0x20..=0x2F => State::EscapeIntermediate,
                    0x30..=0x7E => State::Ground,
                    // Other controls are executed and leave the state as it is; DEL and 8-bit bytes are ignored.
                    _ => State::Escape,
                }
            }
            State::EscapeIntermediate => {
                out.push(byte);
                match byte {
                    ESC => State::Escape,
                    CAN | SUB | 0x30..=0x7E => State::Ground,
                    _ => State::EscapeIntermediate,
                }
            }
            State::Csi { len } => match byte {
                ESC => {
                    out.push(byte);
                    State::Escape
                }
                CAN | SUB | 0x40..=0x7E => {
                    out.push(byte);
                    State::Ground
                }
                _ if len >= self.max_control => self.cut(out, State::DiscardCsi),
                _ => {
                    out.push(byte);
                    State::Csi { len: len + 1 }
                }
            },
            State::String { kind, len } => match byte {
                ESC => {
                    out.push(byte);
                    State::Escape
                }
                _ if kind.ends_at(byte) => {
                    out.push(byte);
                    State::Ground
                }
                _ if len >= self.max_string => self.cut(out, State::DiscardString { kind: kind.after(byte) }),
                _ => {
                    out.push(byte);
                    State::String { kind: kind.after(byte), len: len + 1 }
                }
            },
            State::DiscardCsi => match byte {
                ESC => {
                    out.push(byte);
                    State::Escape
                }
                CAN | SUB | 0x40..=0x7E => State::Ground,
                _ => State::DiscardCsi,
            },
            State::DiscardString { kind } => match byte {
                ESC => {
                    out.push(byte);
                    State::Escape
                }
                _ if kind.ends_at(byte) => State::Ground,
                _ => State::DiscardString { kind: kind.after(byte) },
            },
        };
    }

    /// Abort the open sequence for the parser and drop the rest of it (`discard`).
    fn cut(&mut self, out: &mut Vec<u8>, discard: State) -> State {
        out.push(CAN);
        self.cuts += 1;
        discard
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn run(guard: &mut EscapeGuard, chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in chunks {
            guard.filter(chunk, &mut out);
        }
        out
    }

    fn filtered(input: &[u8]) -> Vec<u8> {
        run(&mut EscapeGuard::default(), &[input])
    }

    #[test]
    fn ordinary_output_passes_unchanged() {
        let samples: [&[u8]; 8] = [
            b"hello\r\nworld\r\n",
            b"\x1b[1;31mred\x1b[0m \x1b[38;2;255;128;0mtruecolor\x1b[m",
            b"\x1b]0;my title\x07prompt$ ",
            b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
            b"\x1b[?1049h\x1b[H\x1b[2J\x1b[?25l\x1b[?1049l",
            b"\x1bPq#0;2;0;0;0#0~~@@vv\x1b\\ short sixel",
            b"\x1b_Gf=100;AAAA\x1b\\ \x1b^pm\x1b\\ \x1bXsos\x1b\\ \x1b(B\x1b7\x1b8",
            "caf\u{e9} \u{1f600} \u{9c}\x1b[K".as_bytes(),
        ];
        for sample in samples {
            assert_eq!(filtered(sample), sample, "{:?}", String::from_utf8_lossy(sample));
        }
    }

    #[test]
    fn an_unterminated_osc_is_cut_at_the_limit() {
        let mut guard = EscapeGuard::default();
        let mut out = Vec::new();
        guard.filter(b"before\x1b]0;", &mut out);
        let title = vec![b'A'; 64 * 1024];
        for _ in 0..32 {
            guard.filter(&title, &mut out);
            assert!(guard.open_len() <= MAX_STRING_BYTES);
        }
        let expected_len = b"before\x1b]0;".len() + MAX_STRING_BYTES - 2 + 1;
        assert_eq!(out.len(), expected_len);
        assert_eq!(out.last(), Some(&CAN));
        assert_eq!(guard.cuts(), 1);
        // The terminator and what follows it come through: the screen goes on.
        guard.filter(b"\x07after", &mut out);
        assert!(out.ends_with(&[CAN, b'a', b'f', b't', b'e', b'r']));
    }

    #[test]
    fn an_osc_at_exactly_the_limit_is_kept_and_one_more_byte_cuts_it() {
        let body = vec![b'x'; MAX_STRING_BYTES];
        let mut at_limit = b"\x1b]".to_vec();
        at_limit.extend_from_slice(&body);
        at_limit.push(BEL);
        assert_eq!(filtered(&at_limit), at_limit);

        let mut over = b"\x1b]".to_vec();
        over.extend_from_slice(&body);
        over.extend_from_slice(b"y\x07z");
        let mut expected = b"\x1b]".to_vec();
        expected.extend_from_slice(&body);
        expected.extend_from_slice(&[CAN, b'z']);
        assert_eq!(filtered(&over), expected);
    }

    #[test]
    fn a_cut_string_ends_where_the_parser_ends_it() {
        let long = vec![b'q'; MAX_STRING_BYTES + 10];
        for (intro, terminator, dropped) in [
            (&b"\x1bP"[..], &b"\x1b\\"[..], false),
            (b"\x1b_", b"\x1b\\", false),
            (b"\x1b^", b"\x18", true),
            (b"\x1bX", b"\x1a", true),
            (b"\x1bP", b"\x9c", true),
            (b"\x1b]", b"\x07", true),
        ] {
            let mut input = intro.to_vec();
            input.extend_from_slice(&long);
            input.extend_from_slice(terminator);
            input.extend_from_slice(b"text");
            let out = filtered(&input);
            let mut tail = vec![CAN];
            if !dropped {
                tail.extend_from_slice(terminator);
            }
            tail.extend_from_slice(b"text");
            assert!(out.ends_with(&tail), "{intro:?}: {:?}", &out[out.len().saturating_sub(8)..]);
            assert_eq!(out.len(), intro.len() + MAX_STRING_BYTES + tail.len());
        }
    }

    #[test]
    fn bel_and_8bit_st_do_not_end_strings_the_parser_keeps_open() {
        // BEL ends only an OSC, and ST (0x9C) only a DCS past its header: elsewhere the parser goes on, so
        // the guard goes on counting.
        let mut guard = EscapeGuard::with_limits(8, 8);
        let out = run(&mut guard, &[b"\x1b_ab\x07cd\x9cefghij"]);
        assert_eq!(out, b"\x1b_ab\x07cd\x9cef\x18");
        let mut guard = EscapeGuard::with_limits(8, 8);
        let out = run(&mut guard, &[b"\x1bP\x9cabcdefghij"]);
        assert_eq!(out, b"\x1bP\x9cabcdefg\x18");
    }

    #[test]
    fn a_huge_control_sequence_is_cut_and_dropped_to_its_final_byte() {
        let mut input = b"\x1b[".to_vec();
        for _ in 0..10_000 {
            input.extend_from_slice(b"38;2;");
        }
        input.extend_from_slice(b"99999999999999999999mvisible");
        let out = filtered(&input);
        assert_eq!(out.len(), 2 + MAX_CONTROL_BYTES + 1 + b"visible".len());
        assert!(out.ends_with(b"\x18visible"));
    }

    #[test]
    fn escapes_inside_a_discarded_sequence_start_a_new_one() {
        let mut guard = EscapeGuard::with_limits(4, 4);
        let out = run(&mut guard, &[b"\x1b]abcdefgh", b"\x1b[1mX"]);
        assert_eq!(out, b"\x1b]abcd\x18\x1b[1mX");
        assert_eq!(guard.cuts(), 1);
    }

    /// Bytes that matter to the state machine, plus a few ordinary ones.
    fn stream_byte() -> impl Strategy<Value = u8> {
        prop_oneof![
            4 => prop::sample::select(vec![
                ESC, b'[', b']', b'P', b'X', b'^', b'_', b'\\', BEL, CAN, SUB, ST_8BIT, b';', b'0', b'9', b'q',
                b'm', b' ', b'(', 0x7F,
            ]),
            1 => any::<u8>(),
        ]
    }

    fn pieces(data: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
        cuts.iter_mut().for_each(|cut| *cut %= data.len() + 1);
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

    /// Ordinary terminal output: text and sequences within the limits, each terminated the usual way.
    fn well_formed() -> impl Strategy<Value = Vec<u8>> {
        let text = "[a-zA-Z0-9 .,\u{e9}\u{1f600}\r\n\t]{0,20}".prop_map(String::into_bytes);
        let csi =
            ("[0-9;?]{0,30}", "[@-~]").prop_map(|(params, last)| format!("\x1b[{params}{last}").into_bytes());
        let osc = ("[ -~]{0,60}", prop::bool::ANY).prop_map(|(body, bel)| {
            let body = body.replace('\x1b', "");
            format!("\x1b]{body}{}", if bel { "\x07" } else { "\x1b\\" }).into_bytes()
        });
        let dcs =
            "[ -~]{0,60}".prop_map(|body| format!("\x1bP{}\x1b\\", body.replace('\x1b', "")).into_bytes());
        let apc =
            "[ -~]{0,60}".prop_map(|body| format!("\x1b_{}\x1b\\", body.replace('\x1b', "")).into_bytes());
        let esc = "[(][AB0]|[78=>Mc]".prop_map(|tail| format!("\x1b{tail}").into_bytes());
        prop::collection::vec(prop_oneof![4 => text, 2 => csi, 1 => osc, 1 => dcs, 1 => apc, 1 => esc], 0..40)
            .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn transparent_when_no_sequence_exceeds_its_limit(
            data in well_formed(),
            cuts in prop::collection::vec(0usize..4096, 0..8),
        ) {
            let mut guard = EscapeGuard::with_limits(64, 64);
            let out = run(&mut guard, &pieces(&data, cuts));
            prop_assert_eq!(out, data);
            prop_assert_eq!(guard.cuts(), 0);
        }

        #[test]
        fn state_stays_bounded_and_output_never_grows(
            data in prop::collection::vec(stream_byte(), 0..1024),
            cuts in prop::collection::vec(0usize..1024, 0..16),
            max_string in 0usize..32,
            max_control in 0usize..32,
        ) {
            let mut guard = EscapeGuard::with_limits(max_string, max_control);
            let mut out = Vec::new();
            for piece in pieces(&data, cuts) {
                guard.filter(piece, &mut out);
                prop_assert!(guard.open_len() <= max_string.max(max_control));
            }
            // A cut writes one CAN in place of a byte it drops.
            prop_assert!(out.len() <= data.len());
        }

        #[test]
        fn fast_paths_match_the_byte_at_a_time_machine(
            data in prop::collection::vec(stream_byte(), 0..1024),
            max_string in 0usize..32,
            max_control in 0usize..32,
        ) {
            let fast = run(&mut EscapeGuard::with_limits(max_string, max_control), &[&data]);
            let mut slow_guard = EscapeGuard::with_limits(max_string, max_control);
            let mut slow = Vec::new();
            for byte in &data {
                slow_guard.step(*byte, &mut slow);
            }
            prop_assert_eq!(fast, slow);
        }

        #[test]
        fn chunking_does_not_matter_and_a_second_pass_changes_nothing(
            data in prop::collection::vec(stream_byte(), 0..1024),
            cuts in prop::collection::vec(0usize..1024, 0..16),
            max_string in 0usize..32,
            max_control in 0usize..32,
        ) {
            let whole = run(&mut EscapeGuard::with_limits(max_string, max_control), &[&data]);
            let chunked = run(&mut EscapeGuard::with_limits(max_string, max_control), &pieces(&data, cuts));
            prop_assert_eq!(&chunked, &whole);
            // The output holds no sequence over its limit: a second guard passes it unchanged.
            let mut again = EscapeGuard::with_limits(max_string, max_control);
            let twice = run(&mut again, &[&whole]);
            prop_assert_eq!(twice, whole);
            prop_assert_eq!(again.cuts(), 0);
        }
    }
}
