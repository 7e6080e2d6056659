//! A stdio server that cannot start (an invalid config file, a setting it refuses) still answers its client.
//!
//! Exiting at once shows most MCP clients only "Connection closed", and many hide the server's stderr. Instead the
//! error is written to stderr and every request the client sends (its `initialize` first) is answered with a
//! JSON-RPC error carrying the same text, until the client closes stdin; notifications get no answer, as the
//! protocol wants. Nothing else runs: no engine, no sandbox, no command.

use std::io::{BufRead, Read, Write};

use serde_json::{Value, json};

use super::transport::MAX_LINE_BYTES;

/// The JSON-RPC error code of every answer: a server error (the request was valid, the server cannot serve it).
pub const CANNOT_START: i64 = -32000;

/// The answer to one message (a request, or a batch of them), `None` when nothing is answered.
pub fn answer(line: &[u8], message: &str) -> Option<Value> {
    let value: Value = serde_json::from_slice(line).ok()?;
    let error = |id: &Value| {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": CANNOT_START, "message": format!("uexec cannot start: {message}") },
        })
    };
    let one = |request: &Value| match (request.get("method"), request.get("id")) {
        (Some(_), Some(id)) if !id.is_null() => Some(error(id)),
        _ => None,
    };
    match &value {
        Value::Array(batch) => {
            let answers: Vec<Value> = batch.iter().filter_map(one).collect();
            (!answers.is_empty()).then_some(Value::Array(answers))
        }
        request => one(request),
    }
}

/// Answer every request on stdin with `message` until stdin ends (see the module documentation).
pub fn answer_until_eof(message: &str) {
    let mut input = std::io::BufReader::new(std::io::stdin());
    let mut stdout = std::io::stdout();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.by_ref().take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(reply) = answer(&line, message) {
            let mut text = reply.to_string();
            text.push('\n');
            if stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn requests_get_the_error_and_notifications_nothing() {
        let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
        let reply = answer(init, "invalid config file /c.toml:1:11").unwrap();
        assert_eq!(reply["id"], json!(0));
        assert_eq!(reply["error"]["code"], json!(CANNOT_START));
        assert!(reply["error"]["message"].as_str().unwrap().contains("invalid config file /c.toml:1:11"));
        assert_eq!(answer(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, "x"), None);
        assert_eq!(answer(b"not json", "x"), None);
        let batch = br#"[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"n"}]"#;
        let replies = answer(batch, "x").unwrap();
        assert_eq!(replies.as_array().unwrap().len(), 1);
        assert_eq!(replies[0]["id"], json!("a"));
    }
}
