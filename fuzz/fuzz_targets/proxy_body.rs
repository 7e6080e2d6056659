//! Fuzz target `proxy_body`: see `crates/uexec/src/fuzz_bodies.rs` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uexec_fuzz::fuzz_bodies::proxy_body(data));
