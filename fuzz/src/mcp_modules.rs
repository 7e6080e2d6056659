//! The app's `mcp` modules the fuzz targets reach: the tool-argument parsers and the JSON-RPC repair layer
//! (with the table of protocol versions it reads).

#[path = "../../crates/uexec/src/mcp/tools.rs"]
pub mod tools;
#[path = "../../crates/uexec/src/mcp/jsonrpc.rs"]
pub mod jsonrpc;
#[path = "../../crates/uexec/src/mcp/protocol.rs"]
pub mod protocol;
