//! The bodies of the fuzz targets that reach into the app: the MCP tool-argument parsers, the config parser, the
//! JSON-RPC repair layer both transports share, and the allowlist proxy's reading of what a sandboxed command
//! sends (the request head and the body's framing).
//!
//! They are plain functions so that two callers share them: the cargo-fuzz targets in `fuzz/` (which link the
//! app's library, where this module exists under `cfg(fuzzing)`), and the unit tests below, which run every
//! body over the committed seed corpus and its prefixes on each `cargo xtask ci`. Each body panics only when an
//! invariant breaks; a malformed input must come back as an error value.

use std::future::Future;
use std::path::Path;
use std::task::{Context, Poll, Waker};

use serde_json::Value;
use uexec_domain::network::Host;

use crate::config;
use crate::mcp::jsonrpc::{Action, Filter, MAX_LINE_BYTES};
use crate::mcp::tools;
use crate::proxy::head::{self, Body, MAX_HEAD, MAX_HEADERS};

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

/// The proxy's head reader and parser on any bytes a command could send. The reader stops at the first empty
/// line, within [`MAX_HEAD`], and loses nothing it read; the parser refuses or gives a request whose host is in
/// its canonical form. A plain request's head for the upstream is one `httparse` reads whole: origin form, the
/// same method and version, exactly one `Host` (the checked host), one `Connection: close`, no `Proxy-*`
/// header, no bare CR or LF, and framing headers that say the body the proxy will send.
pub fn proxy_head(data: &[u8]) {
    let _ = head::parse_head(data);
    let mut unread = data;
    let Some(Ok(found)) = poll_ready(head::read_head(&mut unread)) else {
        broken("reading a head from memory waited or failed");
    };
    let Some((head, rest)) = found else {
        assert!(
            head::head_end(data, 0).is_none_or(|end| end > MAX_HEAD),
            "a head within the limit was not read"
        );
        return;
    };
    assert!(head.len() <= MAX_HEAD && head.ends_with(b"\r\n\r\n"), "{} bytes", head.len());
    assert_eq!(head::head_end(&head, 0), Some(head.len()), "the head goes past its first empty line");
    assert_eq!([&head[..], &rest, unread].concat(), data, "the reader lost or invented bytes");
    let Ok(request) = head::parse_head(&head) else { return };
    assert_eq!(Host::parse(&request.host.to_string()).as_ref(), Some(&request.host), "not canonical");
    if request.connect {
        assert!(request.forward.is_empty() && request.body == Body::Empty);
        return;
    }
    let forward = &request.forward;
    assert!(!forward.windows(2).any(|w| (w[0] == b'\r') != (w[1] == b'\n')), "a bare CR or LF upstream");
    let mut slots = vec![httparse::EMPTY_HEADER; MAX_HEADERS + 3];
    let mut upstream = httparse::Request::new(&mut slots);
    match upstream.parse(forward) {
        Ok(httparse::Status::Complete(n)) => assert_eq!(n, forward.len(), "bytes after the forwarded head"),
        other => broken(&format!("the forwarded head does not parse ({other:?})")),
    }
    let mut original_slots = vec![httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut original = httparse::Request::new(&mut original_slots);
    if !matches!(original.parse(&head), Ok(httparse::Status::Complete(_))) {
        broken("a head the proxy accepted does not parse");
    }
    assert_eq!(upstream.method, original.method);
    assert_eq!(upstream.version, original.version);
    assert!(upstream.path.is_some_and(|path| path.starts_with('/')), "{:?}", upstream.path);
    let named =
        |wanted: &str| upstream.headers.iter().filter(|h| h.name.eq_ignore_ascii_case(wanted)).count();
    assert_eq!(named("host"), 1);
    assert_eq!(named("connection"), 1);
    let expected_host =
        if request.port == 80 { request.host.to_string() } else { request.host.authority(request.port) };
    assert!(upstream.headers.iter().any(|h| h.name == "Host" && h.value == expected_host.as_bytes()));
    assert!(upstream.headers.iter().all(|h| !h.name.to_ascii_lowercase().starts_with("proxy-")));
    let headers: Vec<(&str, &[u8])> = upstream.headers.iter().map(|h| (h.name, h.value)).collect();
    assert_eq!(head::framing(&headers), Ok(request.body), "the upstream would frame the body differently");
}

/// The request body's framing on any bytes: a first byte chooses `Content-Length` (its upper seven bits) or
/// chunked, the rest is the body. A length copies exactly that many bytes or fails for a shorter body; a chunked
/// body that is read is re-framed into no more bytes than it came in, and its re-framing reads back to itself,
/// all of it.
pub fn proxy_body(data: &[u8]) {
    let Some((&choice, body)) = data.split_first() else { return };
    let kind = if choice & 1 == 1 { Body::Length(u64::from(choice >> 1)) } else { Body::Chunked };
    let (mut unread, mut out) = (body, Vec::new());
    let Some(sent) = poll_ready(head::send_body(kind, &mut unread, &mut out)) else {
        broken("copying a body from memory waited");
    };
    match kind {
        Body::Length(n) => {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if sent.is_ok() {
                assert_eq!((&out[..], unread), (&body[..n], &body[n..]));
            } else {
                assert!(body.len() < n, "a body of {} bytes refused for a length of {n}", body.len());
            }
        }
        Body::Chunked => {
            if sent.is_err() {
                return;
            }
            let consumed = body.len() - unread.len();
            assert!(out.len() <= consumed, "{consumed} bytes re-framed into {}", out.len());
            assert!(out.ends_with(b"0\r\n\r\n"));
            let (mut again, mut twice) = (&out[..], Vec::new());
            match poll_ready(head::send_body(Body::Chunked, &mut again, &mut twice)) {
                Some(Ok(())) => {
                    assert_eq!((&twice[..], again), (&out[..], &b""[..]), "re-framing changed it")
                }
                other => broken(&format!("the re-framed body does not read back ({other:?})")),
            }
        }
        Body::Empty => {}
    }
}

/// The output of a future over in-memory readers and writers (`None` if it waited: they never should).
fn poll_ready<T>(future: impl Future<Output = T>) -> Option<T> {
    match std::pin::pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

/// An invariant broke.
#[allow(clippy::panic)]
fn broken(what: &str) -> ! {
    panic!("{what}")
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

    #[test]
    fn proxy_head_seeds_and_mutations_hold() {
        run_mutations("proxy_head", proxy_head);
    }

    #[test]
    fn proxy_body_seeds_and_mutations_hold() {
        run_mutations("proxy_body", proxy_body);
    }
}
