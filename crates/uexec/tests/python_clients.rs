//! Runs real Python MCP clients from PyPI (tests/py_clients) against the `uexec` binary of this build: the OpenAI
//! Agents SDK (with a scripted Responses API model) and langchain-mcp-adapters, each first with the defaults a
//! user of it gets, then with the configuration README.md documents.
//!
//! tests/py_clients/run.py installs the pinned clients into target/py-clients-venv once (.ci/run does it ahead of
//! the suite). When python3's venv module or PyPI is missing the tests fail, saying so: they never skip.

use std::path::Path;
use std::process::Command;

#[allow(clippy::expect_used, clippy::panic)]
fn run(script: &str, args: &[&str]) {
    let runner = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/py_clients/run.py");
    let status = Command::new("python3")
        .arg(&runner)
        .arg("--uexec")
        .arg(env!("CARGO_BIN_EXE_uexec"))
        .arg(script)
        .args(args)
        .status()
        .expect("python3 is required for the Python client tests (apt-get install python3 python3-venv)");
    match status.code() {
        Some(0) => {}
        Some(2) => panic!(
            "the Python clients could not be set up (see stderr): python3-venv missing or PyPI unreachable"
        ),
        _ => panic!("tests/py_clients/{script} {args:?} failed ({status}); see its output above"),
    }
}

/// The Agents SDK's stdio default (a 5 s read timeout) against a command of 6 s: the answer comes in time with
/// the session id and the note on the cut wait, and the model's poll gets the output.
#[test]
fn openai_agents_sdk_with_its_5_s_default_gets_every_answer_over_stdio() {
    run("agents_sdk.py", &["--transport", "stdio"]);
}

/// The same over Streamable HTTP (`MCPServerStreamableHttp`, the same 5 s default).
#[test]
fn openai_agents_sdk_with_its_5_s_default_gets_every_answer_over_streamable_http() {
    run("agents_sdk.py", &["--transport", "http"]);
}

/// The documented configuration: `client_session_timeout_seconds` raised and `--client-timeout-secs` told.
#[test]
fn openai_agents_sdk_documented_timeout_waits_the_whole_window() {
    run("agents_sdk.py", &["--transport", "stdio", "--documented"]);
}

/// langchain-mcp-adapters' documented default (`get_tools()`: a new stdio server for every call): the session a
/// call started is unknown to the next, and the error says why and how to keep one.
#[test]
fn langchain_stateless_stdio_is_told_how_to_keep_a_session() {
    run("langchain.py", &["--mode", "stateless-stdio"]);
}

/// langchain-mcp-adapters with one session for the block (`client.session("uexec")`): the session continues.
#[test]
fn langchain_stateful_stdio_continues_a_session() {
    run("langchain.py", &["--mode", "stateful-stdio"]);
}

/// `get_tools()` over Streamable HTTP with `Uexec-Workspace`: every call is a new MCP session and the session
/// continues across them; paired with the same client without the header, which loses it.
#[test]
fn langchain_stateless_http_keeps_sessions_in_a_named_workspace() {
    run("langchain.py", &["--mode", "stateless-http"]);
}
