//! The app's `proxy` module the fuzz targets reach: the request head parser and the body framing.

#[path = "../../crates/uexec/src/proxy/head.rs"]
pub mod head;
