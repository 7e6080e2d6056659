//! Runs the Python MCP SDK end-to-end suite (tests/mcp_e2e) against the `uexec` binary of this build.
//!
//! The suite needs `python3` with the `venv` module and PyPI (to install `mcp` into target/mcp-venv once). If
//! either is missing the test fails: it never skips.

use std::path::Path;
use std::process::Command;

#[test]
fn python_mcp_sdk_drives_the_server() {
    run_suite("stdio");
}

/// The same suite over Streamable HTTP (`uexec mcp --listen 127.0.0.1:0` with a bearer token).
#[test]
fn python_mcp_sdk_drives_the_server_over_streamable_http() {
    run_suite("http");
}

#[allow(clippy::expect_used, clippy::panic)]
fn run_suite(transport: &str) {
    let uexec = env!("CARGO_BIN_EXE_uexec");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp_e2e/run.py");
    let status = Command::new("python3")
        .arg(&script)
        .arg("--uexec")
        .arg(uexec)
        .args(["--transport", transport])
        .status()
        .expect("python3 is required for the MCP end-to-end tests (apt-get install python3 python3-venv)");
    match status.code() {
        Some(0) => {}
        Some(2) => panic!(
            "the Python MCP client could not be set up (see stderr): python3-venv missing or PyPI unreachable"
        ),
        _ => {
            panic!("the Python MCP end-to-end suite failed over {transport} ({status}); see its output above")
        }
    }
}
