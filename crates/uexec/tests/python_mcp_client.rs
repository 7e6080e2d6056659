//! Runs the Python MCP SDK end-to-end suite (tests/mcp_e2e) against the `uexec` binary of this build.
//!
//! The suite needs `python3` with the `venv` module and PyPI (to install `mcp` into target/mcp-venv once). If
//! either is missing the test fails: it never skips.

use std::path::Path;
use std::process::Command;

#[test]
#[allow(clippy::expect_used, clippy::panic)]
fn python_mcp_sdk_drives_the_server() {
    let uexec = env!("CARGO_BIN_EXE_uexec");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp_e2e/run.py");
    let status =
        Command::new("python3").arg(&script).arg("--uexec").arg(uexec).status().expect(
            "python3 is required for the MCP end-to-end tests (apt-get install python3 python3-venv)",
        );
    match status.code() {
        Some(0) => {}
        Some(2) => panic!(
            "the Python MCP client could not be set up (see stderr): python3-venv missing or PyPI unreachable"
        ),
        _ => panic!("the Python MCP end-to-end suite failed ({status}); see its output above"),
    }
}
