//! The app's `mcp` modules the fuzz targets reach: the tool-argument parsers and the stdio transport.

#[path = "../../crates/uexec/src/mcp/tools.rs"]
pub mod tools;
#[path = "../../crates/uexec/src/mcp/transport.rs"]
pub mod transport;
