//! Runs real MCP clients from the npm registry against the `uexec` binary of this build: the Codex CLI and Claude
//! Code (each with a scripted model), the TypeScript SDK client (over stdio and over Streamable HTTP) and the MCP
//! Inspector CLI (tests/clients/*.test.mjs).
//!
//! The clients are pinned in tests/clients/package.json and installed into tests/clients/node_modules by .ci/run
//! (`npm install --prefix tests/clients`). When node or the clients are missing the tests fail, saying how to install
//! them: they never skip.

use std::path::{Path, PathBuf};
use std::process::Command;

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients")
}

/// Fails unless node is present and node_modules holds every pinned client at its pinned version.
#[allow(clippy::expect_used, clippy::panic)]
fn require_clients() {
    let output = Command::new("node")
        .arg(clients_dir().join("installed.mjs"))
        .output()
        .expect("node is required for the real-client tests (apt-get install nodejs npm)");
    if !output.status.success() {
        panic!("{}", String::from_utf8_lossy(&output.stderr).trim());
    }
}

/// Runs one `*.test.mjs` file with node's test runner; panics when a test in it failed.
#[allow(clippy::expect_used, clippy::panic)]
fn run_node_tests(file: &str) {
    run_node_tests_with(file, &[]);
}

/// [`run_node_tests`] with extra environment variables.
#[allow(clippy::expect_used, clippy::panic)]
fn run_node_tests_with(file: &str, env: &[(&str, &str)]) {
    require_clients();
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("real-clients");
    std::fs::create_dir_all(&scratch).expect("create the scratch directory under target/");
    let status = Command::new("node")
        .arg("--test-reporter=spec")
        .arg(clients_dir().join(file))
        .env("UEXEC_BIN", env!("CARGO_BIN_EXE_uexec"))
        .env("UEXEC_CLIENTS_TMP", &scratch)
        .envs(env.iter().copied())
        .status()
        .expect("node is required for the real-client tests (apt-get install nodejs npm)");
    assert!(status.success(), "tests/clients/{file} failed ({status}); see its output above");
}

#[test]
fn codex_cli_drives_uexec_for_a_scripted_model() {
    run_node_tests("codex.test.mjs");
}

#[test]
fn claude_code_drives_uexec_for_a_scripted_model() {
    run_node_tests("claude.test.mjs");
}

#[test]
fn typescript_sdk_client_drives_uexec() {
    run_node_tests("sdk.test.mjs");
}

#[test]
fn typescript_sdk_client_drives_uexec_over_streamable_http() {
    run_node_tests_with("sdk.test.mjs", &[("UEXEC_TRANSPORT", "http")]);
}

#[test]
fn mcp_inspector_cli_drives_uexec() {
    run_node_tests("inspector.test.mjs");
}
