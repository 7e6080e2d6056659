//! The fuzz bodies of `tests::fuzz` on every `cargo xtask ci`: each committed seed of `fuzz/corpus/<target>`,
//! every prefix of it and a byte-flipped copy, then random inputs from proptest. The long runs are
//! `cargo xtask fuzz`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use proptest::prelude::*;
use tests::fuzz;

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 3, "{target}: the seed corpus is too small");
    seeds
}

fn run_mutations(target: &str, body: fn(&[u8])) {
    for seed in seeds(target) {
        body(&seed);
        // At most about 256 prefixes per seed (every one for short seeds).
        for end in (0..seed.len()).step_by(seed.len().div_ceil(256).max(1)) {
            body(&seed[..end]);
        }
        for at in 0..seed.len().min(256) {
            let mut flipped = seed.clone();
            flipped[at] ^= 0x20;
            body(&flipped);
        }
    }
}

#[test]
fn buffer_seeds_and_mutations_hold() {
    run_mutations("buffer", fuzz::buffer);
}

#[test]
fn shell_split_seeds_and_mutations_hold() {
    run_mutations("shell_split", fuzz::shell_split);
}

#[test]
fn patch_seeds_and_mutations_hold() {
    run_mutations("patch", fuzz::patch);
}

#[test]
fn screen_seeds_and_mutations_hold() {
    run_mutations("screen", fuzz::screen);
}

#[test]
fn dns_question_seeds_and_mutations_hold() {
    run_mutations("dns_question", fuzz::dns_question);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn buffer_holds_for_random_bytes(data in prop::collection::vec(any::<u8>(), 0..4096)) {
        fuzz::buffer(&data);
    }

    #[test]
    fn shell_split_holds_for_random_scripts(script in "[a-z |;&()<>'\"$`\\\\\n=-]{0,80}") {
        fuzz::shell_split(script.as_bytes());
    }

    #[test]
    fn dns_question_holds_for_random_questions(
        header in prop::collection::vec(any::<u8>(), 12),
        labels in prop::collection::vec(prop::collection::vec(
            prop_oneof![Just(b'a'), Just(b'Z'), Just(b'0'), Just(b'-'), Just(b'_'), Just(b'.'), any::<u8>()], 0..70), 0..6),
        tail in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut packet = header;
        packet[4..6].copy_from_slice(&[0, 1]);
        for label in &labels {
            packet.push(u8::try_from(label.len()).unwrap());
            packet.extend_from_slice(label);
        }
        packet.push(0);
        packet.extend_from_slice(&tail);
        fuzz::dns_question(&packet);
    }

    #[test]
    fn patch_holds_for_random_patches(
        body in "(\\*\\*\\* (Add|Delete|Update) File: [ab]\\.txt\n|\\*\\*\\* Move to: c\\.txt\n|@@ ?[a-z]*\n|[ +-][a-z]*\n|\\*\\*\\* End of File\n){0,12}"
    ) {
        let text = format!("*** Begin Patch\n{body}*** End Patch\n");
        fuzz::patch(text.as_bytes());
    }
}

// Fewer, shorter cases: a debug build of the screen parser is slow, and `cargo xtask fuzz` runs the long ones.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn screen_holds_for_random_streams(data in prop::collection::vec(
        prop_oneof![Just(0x1Bu8), Just(b']'), Just(b'['), Just(b'P'), Just(0x07), Just(0x9C), Just(0xFF), any::<u8>()],
        0..2048,
    )) {
        fuzz::screen(&data);
    }
}
