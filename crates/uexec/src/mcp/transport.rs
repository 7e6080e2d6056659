//! The stdio transport in front of rmcp: reads JSON-RPC lines from stdin, answers the ones that cannot be
//! served (invalid JSON, lone UTF-16 surrogates, oversized lines, requests of the wrong shape) with a JSON-RPC
//! error that carries the request's id whenever it can be recovered, and hands every other line to rmcp.
//!
//! Why: rmcp silently drops a line that is not JSON, and answers a well-formed message of the wrong shape with
//! an error that has no id. Either way the client waits for an answer that never comes. Here every request
//! gets an answer and the server keeps running (and keeps its sessions).
//!
//! Output: rmcp's messages and these error replies go to stdout through one writer task, a whole line at a
//! time, so they never interleave. stdout carries nothing else: logs go to stderr.

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The longest line accepted (rmcp's own limit): 16 MiB.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC error codes used here.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// What to do with one input line.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Hand it to rmcp.
    Pass,
    /// Answer it with this JSON-RPC error line (no trailing newline).
    Reply(String),
    /// Ignore it (blank line).
    Ignore,
}

/// Decide what to do with `line` (without its newline).
pub fn check_line(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Ignore;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            let id = recover_id(line);
            let mut message = format!("Parse error: the message is not valid JSON: {e}");
            if has_lone_surrogate(line) {
                message.push_str(
                    " (it contains a lone UTF-16 surrogate escape: a \\ud800-\\udfff escape must be half of a \
                     surrogate pair, because JSON strings must be valid Unicode)",
                );
            }
            return Verdict::Reply(error_line(id, PARSE_ERROR, &message));
        }
    };
    let object = match &value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Verdict::Reply(error_line(
                Value::Null,
                INVALID_REQUEST,
                "Invalid request: JSON-RPC batches are not supported by MCP; send one message per line",
            ));
        }
        _ => {
            return Verdict::Reply(error_line(
                Value::Null,
                INVALID_REQUEST,
                "Invalid request: a JSON-RPC message is a JSON object",
            ));
        }
    };
    let id = object.get("id").filter(|id| !id.is_null()).cloned();
    let method = object.get("method").and_then(Value::as_str).map(str::to_owned);
    match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        Ok(_) => Verdict::Pass,
        // Notifications and responses are never answered; rmcp decides what to do with them.
        Err(_) if id.is_none() || method.is_none() => Verdict::Pass,
        Err(e) => {
            let method = method.unwrap_or_default();
            let (code, message) = if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
                (INVALID_REQUEST, "Invalid request: `jsonrpc` must be \"2.0\"".to_owned())
            } else if !matches!(&id, Some(Value::Number(_) | Value::String(_))) {
                (INVALID_REQUEST, "Invalid request: `id` must be a number or a string".to_owned())
            } else {
                (INVALID_PARAMS, format!("Invalid params for {method}: {e}"))
            };
            Verdict::Reply(error_line(id.unwrap_or(Value::Null), code, &message))
        }
    }
}

fn error_line(id: Value, code: i64, message: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}

/// The `id` of a request whose JSON is invalid only because of lone surrogate escapes (replaced here by
/// U+FFFD just to read the id); `null` otherwise. Only a number or string id found at the top level counts.
fn recover_id(line: &[u8]) -> Value {
    let Ok(text) = std::str::from_utf8(line) else { return Value::Null };
    let repaired = replace_lone_surrogates(text);
    match serde_json::from_str::<Value>(&repaired) {
        Ok(Value::Object(object)) if object.contains_key("method") => match object.get("id") {
            Some(id @ (Value::Number(_) | Value::String(_))) => id.clone(),
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

fn has_lone_surrogate(line: &[u8]) -> bool {
    std::str::from_utf8(line).is_ok_and(|text| replace_lone_surrogates(text) != text)
}

/// Rewrite every `\uD800`-`\uDFFF` escape that is not part of a valid pair as `\uFFFD`, leaving everything else
/// (including escaped backslashes) untouched.
fn replace_lone_surrogates(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut in_string = false;
    let mut last = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !in_string {
            if b == b'"' {
                in_string = true;
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = false;
                i += 1;
            }
            b'\\' if bytes.get(i + 1) == Some(&b'u') => {
                let unit = hex4(bytes, i + 2);
                match unit {
                    Some(0xD800..=0xDBFF) => {
                        let paired = bytes.get(i + 6) == Some(&b'\\')
                            && bytes.get(i + 7) == Some(&b'u')
                            && matches!(hex4(bytes, i + 8), Some(0xDC00..=0xDFFF));
                        if paired {
                            i += 12;
                        } else {
                            out.push_str(&text[last..i]);
                            out.push_str("\\uFFFD");
                            i += 6;
                            last = i;
                        }
                    }
                    Some(0xDC00..=0xDFFF) => {
                        out.push_str(&text[last..i]);
                        out.push_str("\\uFFFD");
                        i += 6;
                        last = i;
                    }
                    _ => i += 2,
                }
            }
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    out.push_str(text.get(last..).unwrap_or_default());
    out
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16).ok()
}

/// One line read with a length limit.
#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    /// A complete line is in the buffer (without the newline); the last line may lack one.
    Line,
    /// The line was longer than the limit; its bytes were discarded. Carries the total length.
    TooLong(usize),
    /// End of input.
    Eof,
}

async fn read_line_limited<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut total = 0usize;
    let mut discarding = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (discarding, total) {
                (true, _) => LineRead::TooLong(total),
                (false, 0) => LineRead::Eof,
                (false, _) => LineRead::Line,
            });
        }
        let (chunk, found, used) = match available.iter().position(|&b| b == b'\n') {
            Some(pos) => (&available[..pos], true, pos + 1),
            None => (available, false, available.len()),
        };
        total = total.saturating_add(chunk.len());
        if !discarding {
            if total > limit {
                discarding = true;
                buf.clear();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        reader.consume(used);
        if found {
            return Ok(if discarding { LineRead::TooLong(total) } else { LineRead::Line });
        }
    }
}

/// The running transport: the halves to give rmcp, and the tasks behind them.
#[derive(Debug)]
pub struct StdioTransport {
    /// What rmcp reads (the filtered input).
    pub rmcp_read: DuplexStream,
    /// What rmcp writes (forwarded to stdout).
    pub rmcp_write: DuplexStream,
    /// Ends when stdout fails (the client is gone).
    pub writer: JoinHandle<()>,
}

/// Start the transport over `input` and `output` (stdin and stdout in production, pipes in tests).
pub fn start<I, O>(input: I, output: O) -> StdioTransport
where
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin + Send + 'static,
{
    const BUFFER: usize = 256 * 1024;
    let (rmcp_read, mut to_rmcp) = tokio::io::duplex(BUFFER);
    let (rmcp_write, from_rmcp) = tokio::io::duplex(BUFFER);
    let (lines_tx, mut lines_rx) = mpsc::unbounded_channel::<Vec<u8>>();

    // Input: filter stdin, pass good lines to rmcp, queue error replies.
    let replies = lines_tx.clone();
    tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(BUFFER, input);
        let mut line = Vec::new();
        loop {
            match read_line_limited(&mut reader, &mut line, MAX_LINE_BYTES).await {
                Ok(LineRead::Line) => match check_line(&line) {
                    Verdict::Pass => {
                        line.push(b'\n');
                        if to_rmcp.write_all(&line).await.is_err() {
                            break;
                        }
                    }
                    Verdict::Reply(reply) => {
                        tracing::warn!("answered an unusable message: {reply}");
                        let _ = replies.send(reply.into_bytes());
                    }
                    Verdict::Ignore => {}
                },
                Ok(LineRead::TooLong(len)) => {
                    let reply = error_line(
                        Value::Null,
                        INVALID_REQUEST,
                        &format!(
                            "Invalid request: message of {len} bytes exceeds the limit of {MAX_LINE_BYTES} bytes"
                        ),
                    );
                    tracing::warn!("{reply}");
                    let _ = replies.send(reply.into_bytes());
                }
                Ok(LineRead::Eof) => break,
                Err(e) => {
                    tracing::warn!("reading stdin failed: {e}");
                    break;
                }
            }
        }
        // Dropping `to_rmcp` is the EOF rmcp sees: the client is gone.
        let _ = to_rmcp.shutdown().await;
    });

    // rmcp's output, one whole line at a time, into the writer's queue.
    tokio::spawn(async move {
        let mut reader = BufReader::new(from_rmcp);
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if lines_tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });

    // The only writer of stdout.
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(mut line) = lines_rx.recv().await {
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                tracing::info!("stdout is closed; the client is gone");
                break;
            }
        }
    });

    StdioTransport { rmcp_read, rmcp_write, writer }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn reply(line: &str) -> Value {
        match check_line(line.as_bytes()) {
            Verdict::Reply(text) => serde_json::from_str(&text).unwrap(),
            other => panic!("expected a reply for {line}, got {other:?}"),
        }
    }

    #[test]
    fn valid_messages_pass() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write_stdin","arguments":{"session_id":"x"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/some_vendor_thing","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"no/such/method","params":{}}"#,
        ] {
            assert_eq!(check_line(line.as_bytes()), Verdict::Pass, "{line}");
        }
        assert_eq!(check_line(b"   "), Verdict::Ignore);
    }

    #[test]
    fn invalid_json_gets_a_parse_error() {
        let r = reply("{not json");
        assert_eq!(r["error"]["code"], PARSE_ERROR);
        assert_eq!(r["id"], Value::Null);
        assert!(r["error"]["message"].as_str().unwrap().contains("not valid JSON"));
    }

    #[test]
    fn lone_surrogate_gets_a_parse_error_with_the_request_id() {
        let line = r#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"write_stdin","arguments":{"session_id":1000,"chars":"a\ud800b"}}}"#;
        let r = reply(line);
        assert_eq!(r["id"], 42);
        assert_eq!(r["error"]["code"], PARSE_ERROR);
        assert!(r["error"]["message"].as_str().unwrap().contains("surrogate"), "{r}");
        // A valid pair is fine, and an escaped backslash before `ud800` is not an escape at all.
        let ok = r#"{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":"x","arguments":{"chars":"\ud83d\ude00 \\ud800"}}}"#;
        assert_eq!(check_line(ok.as_bytes()), Verdict::Pass);
        let low = r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"x","arguments":{"chars":"\udc00"}}}"#;
        assert_eq!(reply(low)["id"], "s");
    }

    #[test]
    fn surrogate_repair_is_exact() {
        assert_eq!(replace_lone_surrogates(r#""a\ud800b""#), r#""a\uFFFDb""#);
        assert_eq!(replace_lone_surrogates(r#""\ud83d\ude00""#), r#""\ud83d\ude00""#);
        assert_eq!(replace_lone_surrogates(r#""\\ud800""#), r#""\\ud800""#);
        assert_eq!(replace_lone_surrogates(r#"{"k":"\ud800\ud800"}"#), r#"{"k":"\uFFFD\uFFFD"}"#);
    }

    #[test]
    fn wrong_shapes_get_errors_with_ids() {
        let r = reply(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":5}"#);
        assert_eq!(r["id"], 7);
        assert_eq!(r["error"]["code"], INVALID_PARAMS);
        let r = reply(r#"{"jsonrpc":"1.0","id":8,"method":"tools/list"}"#);
        assert_eq!(r["id"], 8);
        assert_eq!(r["error"]["code"], INVALID_REQUEST);
        let r = reply(r#"[{"jsonrpc":"2.0","id":9,"method":"tools/list"}]"#);
        assert_eq!(r["error"]["code"], INVALID_REQUEST);
        let r = reply("42");
        assert_eq!(r["error"]["code"], INVALID_REQUEST);
    }

    #[tokio::test]
    async fn long_lines_are_discarded_and_reported() {
        let mut input: Vec<u8> = Vec::new();
        input.extend(std::iter::repeat_n(b'x', 100));
        input.push(b'\n');
        input.extend_from_slice(b"short\nlast-without-newline");
        let mut reader = BufReader::with_capacity(16, &input[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line_limited(&mut reader, &mut buf, 50).await.unwrap(), LineRead::TooLong(100));
        assert_eq!(read_line_limited(&mut reader, &mut buf, 50).await.unwrap(), LineRead::Line);
        assert_eq!(buf, b"short");
        assert_eq!(read_line_limited(&mut reader, &mut buf, 50).await.unwrap(), LineRead::Line);
        assert_eq!(buf, b"last-without-newline");
        assert_eq!(read_line_limited(&mut reader, &mut buf, 50).await.unwrap(), LineRead::Eof);
    }
}
