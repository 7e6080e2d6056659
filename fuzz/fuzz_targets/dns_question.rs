//! Fuzz target `dns_question`: see `tests/src/fuzz.rs` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uexec_fuzz::library_bodies::dns_question(data));
