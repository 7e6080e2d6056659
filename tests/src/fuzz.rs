//! The bodies of the fuzz targets over the library crates' public APIs: the output buffer and truncation, the
//! shell-script splitter with the known-safe classifier and the command rules, the `apply_patch` parser, and the
//! terminal stream fed to the screen model behind its escape guard, and the DNS question the offline network
//! namespace reads from every datagram a sandboxed command sends it (with the refusal it answers).
//!
//! The cargo-fuzz targets in `fuzz/` call these functions; `tests/fuzz_seeds.rs` calls them too, over the
//! committed seed corpus and random inputs, on every `cargo xtask ci`. A body panics only when an invariant
//! breaks.

use std::collections::BTreeMap;
use std::num::NonZeroU16;

use uexec_domain::buffer::HeadTailBuffer;
use uexec_domain::command;
use uexec_domain::escape::EscapeGuard;
use uexec_domain::limits::{APPROX_BYTES_PER_TOKEN, PTY_COLS, PTY_ROWS};
use uexec_domain::network;
use uexec_domain::patch;
use uexec_domain::rules::{CommandRules, PrefixRule, RuleDecision, session_prefix_offer};
use uexec_domain::truncate::{truncate_output_with_dropped, truncate_segments};

/// Splits `data` into pieces at each `0xFF` byte (an input the fuzzer can shape into chunks).
fn pieces(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split(|b| *b == 0xFF)
}

/// The head/tail buffer fed in chunks, then truncated to a budget: the buffer never keeps more than its cap,
/// its counts add up, the truncated text stays within its budget plus the fixed size of its notes, and cutting
/// it straight from the buffer's chunks gives the same text.
pub fn buffer(data: &[u8]) {
    let Some((&cap_byte, rest)) = data.split_first() else { return };
    let Some((&tokens_byte, rest)) = rest.split_first() else { return };
    let cap = usize::from(cap_byte) * 7;
    let mut buffer = HeadTailBuffer::new(cap);
    let mut written = 0u64;
    for piece in pieces(rest) {
        buffer.push(piece);
        written += piece.len() as u64;
        assert!(buffer.len() <= buffer.cap(), "kept {} of cap {}", buffer.len(), buffer.cap());
        assert_eq!(buffer.total_written(), written);
        assert_eq!(buffer.dropped_bytes(), written - buffer.len() as u64);
    }
    let text = buffer.to_string_lossy();
    let max_tokens = usize::from(tokens_byte);
    let out = truncate_output_with_dropped(&text, max_tokens, buffer.dropped());
    // Cut straight from the buffer's chunks (as a response is), the result is the same.
    let dropped = buffer.dropped();
    let from_segments = buffer.with_segments(|segments| truncate_segments(segments, max_tokens, dropped));
    assert_eq!(from_segments, out, "cut from the segments");
    if out.truncated {
        // Head and tail of the budget (each end may move by up to 3 bytes to a character boundary), the line
        // count and the marker.
        let budget = max_tokens * APPROX_BYTES_PER_TOKEN;
        assert!(out.text.len() <= budget + 6 + 80, "{} bytes for a budget of {budget}", out.text.len());
        assert!(out.text.starts_with("Total output lines: "));
    } else {
        assert_eq!(out.text, text);
    }
    let taken = buffer.take_complete();
    assert!(taken.len() <= cap + 64);
    assert!(buffer.len() <= 3, "take_complete kept {} bytes", buffer.len());
}

/// The shell-script splitter and everything that consumes its words: the known-safe classifier, the ordered
/// command list, the canonical form and the prefix rules. A word list it returns never holds an empty command,
/// and a `forbid` rule for a program stays a forbid whatever follows it in the same script.
pub fn shell_split(data: &[u8]) {
    let Ok(script) = std::str::from_utf8(data) else { return };
    if let Some(commands) = command::parse_plain_script(script) {
        for words in &commands {
            assert!(!words.is_empty(), "an empty command in {script:?}");
        }
    }
    for shell in [&["bash", "-lc"][..], &["sh", "-c"], &["/bin/zsh", "-c"], &["./bash", "-c"]] {
        let mut argv: Vec<String> = shell.iter().map(|s| (*s).to_owned()).collect();
        argv.push(script.to_owned());
        let argv = command::ParsedCommand::new(argv);
        let _ = argv.canonical();
        if argv.is_read_only() {
            assert!(argv.commands_in_order().is_some(), "a read-only command whose commands are unknown");
        }
        let rules = CommandRules {
            rules: vec![
                PrefixRule { prefix: vec!["rm".to_owned()], decision: RuleDecision::Forbid },
                PrefixRule { prefix: vec!["ls".to_owned()], decision: RuleDecision::Allow },
                PrefixRule { prefix: vec!["git".to_owned(), "push".to_owned()], decision: RuleDecision::Ask },
            ],
        };
        let decision = rules.evaluate(&argv);
        let forbidden_first = command::parse_plain_script(script)
            .is_some_and(|commands| commands.iter().any(|c| c.first().is_some_and(|w| w == "rm")));
        if forbidden_first && argv.trusted_script().is_some() {
            assert_eq!(decision, Some(RuleDecision::Forbid), "{argv:?}");
        }
        let _ = session_prefix_offer(&["git".to_owned()], &argv);
    }
    let words: Vec<String> = script.split(' ').map(str::to_owned).collect();
    let words = command::ParsedCommand::new(words);
    let _ = (words.is_read_only(), words.canonical());
}

/// The `apply_patch` parser and the pure application: a patch that parses renders to text that parses again to
/// the same patch, applying it to made-up files succeeds or fails with an error value, and the shell form of a
/// call is recognised without a panic.
pub fn patch(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = patch::shell_invocation(text);
    let Ok(parsed) = patch::parse_patch(text) else { return };
    let rendered = patch::render_patch(&parsed);
    match patch::parse_patch(&rendered) {
        Ok(again) => assert_eq!(again, parsed, "render and parse disagree for {rendered:?}"),
        Err(e) => unreachable_patch(&rendered, &e),
    }
    let files: BTreeMap<&str, &str> = [("a.txt", "one\ntwo\nthree\n"), ("b.txt", "")].into_iter().collect();
    let _ = patch::apply_patch(&parsed, |path| {
        files.get(path).map(|text| (*text).to_owned()).ok_or_else(|| "No such file or directory".to_owned())
    });
}

#[allow(clippy::panic)]
fn unreachable_patch(rendered: &str, e: &patch::ParseError) -> ! {
    panic!("a rendered patch does not parse ({e}): {rendered:?}")
}

/// The terminal stream fed in chunks to the screen model (the engine's `Screen`: a 24x80 `vt100` parser without
/// scrollback behind an [`EscapeGuard`]): the guard never passes on more than it got plus one CAN per cut, and
/// the visible text stays the size of the grid. (What the guard keeps open is bounded by its own unit tests, and
/// the screen model's memory by the engine's `screen.rs` tests with a counting allocator.)
pub fn screen(data: &[u8]) {
    let mut guard = EscapeGuard::default();
    let (Some(rows), Some(cols)) = (NonZeroU16::new(PTY_ROWS), NonZeroU16::new(PTY_COLS)) else { return };
    let mut parser = vt100::Parser::new(rows, cols, 0);
    let mut scratch = Vec::new();
    let mut fed = 0usize;
    let mut passed = 0usize;
    for piece in pieces(data) {
        scratch.clear();
        guard.filter(piece, &mut scratch);
        fed += piece.len();
        passed += scratch.len();
        let cuts = usize::try_from(guard.cuts()).unwrap_or(usize::MAX);
        assert!(passed <= fed.saturating_add(cuts), "passed {passed} of {fed} bytes with {cuts} cuts");
        parser.process(&scratch);
    }
    // Each cell holds at most one character of at most 4 bytes plus combining marks; a grid of 24x80 cells
    // cannot show more than a few tens of KiB however the stream was built.
    let contents = parser.screen().contents();
    let grid = usize::from(PTY_ROWS) * (usize::from(PTY_COLS) + 1);
    assert!(contents.chars().count() <= grid * 16, "{} characters on the screen", contents.chars().count());
}

/// The offline namespace's DNS codec on any datagram: a question it reads is a host name (labels of letters,
/// digits, `-` and `_`, lower-case, 253 bytes at most) spelled exactly by the packet's question section, which
/// ends within the packet; the refusal it answers keeps the id, the opcode and the question, says `REFUSED`,
/// carries no records, and is never itself read as a question.
pub fn dns_question(data: &[u8]) {
    let Some((name, end)) = network::dns_question(data) else { return };
    assert!(end <= data.len(), "the question ends at {end}, past the packet's {} bytes", data.len());
    assert!(!name.is_empty() && name.len() <= 253, "{} bytes: {name:?}", name.len());
    for label in name.split('.') {
        assert!((1..=63).contains(&label.len()), "label {label:?} of {name:?}");
        assert!(
            label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'),
            "label {label:?} of {name:?}"
        );
    }
    let mut wire = Vec::new();
    for label in name.split('.') {
        wire.push(u8::try_from(label.len()).unwrap_or(u8::MAX));
        wire.extend_from_slice(label.as_bytes());
    }
    wire.push(0);
    assert_eq!(end, 12 + wire.len() + 4, "{name:?}");
    assert_eq!(data[12..end - 4].to_ascii_lowercase(), wire, "{name:?}");
    let reply = network::dns_refusal(&data[..end]);
    assert_eq!(reply.len(), end);
    assert_eq!(reply[..2], data[..2], "the id");
    assert_eq!(reply[2], 0x80 | (data[2] & 0x79), "QR, the opcode and RD");
    assert_eq!(reply[3], 0x80 | 5, "RA and REFUSED");
    assert_eq!(reply[4..6], [0, 1], "one question");
    assert_eq!(reply[6..12], [0; 6], "no records");
    assert_eq!(reply[12..], data[12..end], "the question");
    assert_eq!(network::dns_question(&reply), None, "a reply read as a question");
    let _ = network::is_network_lookup(&name);
}
