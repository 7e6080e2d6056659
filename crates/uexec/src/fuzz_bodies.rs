//! The bodies of the fuzz targets that reach into the app: the MCP tool-argument parsers, the config parser and
//! the JSON-RPC repair layer both transports share.
//!
//! They are plain functions so that two callers share them: the cargo-fuzz targets in `fuzz/` (which compile
//! this file together with the modules it calls, under `cfg(fuzzing)`), and the unit tests below, which run every
//! body over the committed seed corpus and its prefixes on each `cargo xtask ci`. Each body panics only when an
//! invariant breaks; a malformed input must come back as an error value.

use std::path::Path;

use serde_json::Value;

use crate::config;
use crate::mcp::jsonrpc::{Action, Filter, MAX_LINE_BYTES};
use crate::mcp::tools;

/// Every tool's argument parser on the JSON object `data` holds: an error or a request, never a panic, and an
/// error names its tool.
pub fn tool_args(data: &[u8]) {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data) else { return };
    if let Err(e) = tools::parse_exec(&map) {
        assert_eq!(e.tool, tools::EXEC_COMMAND);
        assert!(!e.message.is_empty());
    }
    if let Err(e) = tools::parse_write(&map) {
        assert_eq!(e.tool, tools::WRITE_STDIN);
        assert!(!e.message.is_empty());
    }
    for tool in [tools::CLOSE_SESSION, tools::READ_SCREEN] {
        if let Err(e) = tools::parse_session_only(tool, &map) {
            assert_eq!(e.tool, tool);
        }
    }
    assert!(tools::parse_no_args(tools::LIST_SESSIONS, &map).is_ok());
}

/// The config parser on any text: a config or an error that points at a line of the text.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match config::parse(Path::new("fuzz.toml"), text) {
        Ok(_) => {}
        Err(config::ConfigError::Invalid { line, column, .. }) => {
            assert!(line >= 1 && column >= 1, "line {line} column {column}");
            assert!(line <= text.lines().count().max(1) + 1, "line {line} beyond the text");
        }
        Err(other) => {
            assert!(!other.to_string().is_empty());
        }
    }
}

/// The transport's line filter on a stream of lines (split at `\n`): every reply it writes itself is one line of
/// JSON (a JSON-RPC message), every line it forwards to rmcp is JSON, and answers from the server side (a
/// success for each forwarded request, echoed through `Filter::output`) never panic.
pub fn jsonrpc_lines(data: &[u8]) {
    let mut filter = Filter::default();
    for line in data.split(|b| *b == b'\n') {
        if line.len() > MAX_LINE_BYTES {
            continue;
        }
        for action in filter.input(line) {
            match action {
                Action::Reply(text) => {
                    assert!(!text.contains('\n'), "a reply spans lines: {text:?}");
                    let value: Value = match serde_json::from_str(&text) {
                        Ok(value) => value,
                        Err(e) => unreachable_json(&text, &e),
                    };
                    assert!(value.is_object() || value.is_array(), "reply {text:?}");
                }
                Action::Forward(text) => {
                    assert!(!text.contains('\n'), "a forwarded line spans lines: {text:?}");
                    let value: Value = match serde_json::from_str(&text) {
                        Ok(value) => value,
                        Err(e) => unreachable_json(&text, &e),
                    };
                    // Answer it as the server would, so that the filter's routes are exercised both ways.
                    if let Some(id) = value.get("id")
                        && value.get("method").is_some()
                    {
                        let answer = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}});
                        let _ = filter.output(answer.to_string().as_bytes());
                    }
                }
            }
        }
        let _ = filter.output(line);
    }
}

#[allow(clippy::panic)]
fn unreachable_json(text: &str, e: &serde_json::Error) -> ! {
    panic!("the filter produced a line that is not JSON ({e}): {text:?}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// The committed seeds of a fuzz target.
    fn seeds(target: &str) -> Vec<Vec<u8>> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
        let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
            .collect();
        seeds.sort();
        assert!(seeds.len() >= 3, "{target}: the seed corpus is too small");
        seeds
    }

    /// Each seed, every prefix of it, and a copy with each byte flipped in turn (a cheap mutation pass).
    fn run_mutations(target: &str, body: fn(&[u8])) {
        for seed in seeds(target) {
            body(&seed);
            // At most about 256 prefixes per seed (every one for short seeds).
            for end in (0..seed.len()).step_by(seed.len().div_ceil(256).max(1)) {
                body(&seed[..end]);
            }
            for at in 0..seed.len().min(256) {
                let mut flipped = seed.clone();
                flipped[at] ^= 0x20;
                body(&flipped);
            }
        }
    }

    #[test]
    fn tool_args_seeds_and_mutations_hold() {
        run_mutations("tool_args", tool_args);
    }

    #[test]
    fn config_seeds_and_mutations_hold() {
        run_mutations("config", config);
    }

    #[test]
    fn jsonrpc_lines_seeds_and_mutations_hold() {
        run_mutations("jsonrpc_lines", jsonrpc_lines);
    }
}
