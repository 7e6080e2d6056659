//! The fuzz targets' shared code: the app modules they reach into, compiled here from the app's own source
//! files (the `uexec` crate is a binary, so there is no library to link), and the bodies over the library
//! crates re-exported from the `tests` package.
//!
//! Only modules that touch no other app module are mounted (the command line's value types, the config file,
//! the MCP tool arguments, the JSON-RPC repair layer and the proxy's head parser and body framing), with
//! `crate::fuzz_bodies` holding the app's bodies; the same bodies run as unit tests in the app crate on every
//! `cargo xtask ci`.

#![allow(dead_code, unused_imports, missing_docs, missing_debug_implementations)]

#[path = "../../crates/uexec/src/cli.rs"]
mod cli;
#[path = "../../crates/uexec/src/config.rs"]
mod config;
#[path = "../../crates/uexec/src/fuzz_bodies.rs"]
pub mod fuzz_bodies;

#[path = "mcp_modules.rs"]
mod mcp;

#[path = "proxy_modules.rs"]
mod proxy;

pub use tests::fuzz as library_bodies;
