//! The fuzz targets' shared code: the app's bodies (`uexec::fuzz_bodies`: the command line's value types, the
//! config file, the MCP tool arguments, the JSON-RPC repair layer and the proxy's head parser and body framing)
//! from the app's library, and the bodies over the library crates re-exported from the `tests` package. The
//! same bodies run as unit tests in the app crate and over the seed corpus on every `cargo xtask ci`.

pub use tests::fuzz as library_bodies;
pub use uexec::fuzz_bodies;
