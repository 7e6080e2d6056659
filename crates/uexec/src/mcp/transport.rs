//! The stdio transport in front of rmcp: reads JSON-RPC lines from stdin (a line longer than
//! [`MAX_LINE_BYTES`] is discarded and answered), passes each through the repair layer ([`super::jsonrpc`],
//! the same for both transports), hands what passes to rmcp, and writes rmcp's messages, through the same
//! filter, and the layer's own answers to stdout.
//!
//! Output: one writer thread writes stdout, a whole line at a time, so lines never interleave. stdout carries
//! nothing else: logs go to stderr.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use super::jsonrpc::MAX_LINE_BYTES;
use super::jsonrpc::{Action, Filter, INVALID_REQUEST, error_line};

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

/// Start the transport over `input` and a blocking `output` (stdin and stdout in production), the output written
/// by a thread of its own.
///
/// Why not `tokio::io::stdout`: it writes on the blocking pool and wakes the writer task when each write is
/// done, so every line waited for a turn on the runtime's workers. When those are busy (64 sessions streaming
/// at once keep both workers reading and parsing output), a burst of answers due at the same instant went out
/// one scheduling round apart, the last of them well past its window. A thread blocked on the queue is woken
/// by the OS as soon as a line is queued, whatever the workers are doing.
pub fn start<I, O>(input: I, output: O) -> StdioTransport
where
    I: AsyncRead + Unpin + Send + 'static,
    O: std::io::Write + Send + 'static,
{
    let (rmcp_read, rmcp_write, mut lines_rx) = pipeline(input);
    // The only writer of the output. It ends when the output fails or every sender is gone (the input and
    // rmcp's output have ended); at shutdown the runtime does not wait for it (`shutdown_background`).
    let writer = tokio::task::spawn_blocking(move || {
        let mut output = output;
        while let Some(mut line) = lines_rx.blocking_recv() {
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            if output.write_all(&line).is_err() || output.flush().is_err() {
                tracing::info!("stdout is closed; the client is gone");
                break;
            }
        }
    });
    StdioTransport { rmcp_read, rmcp_write, writer }
}

/// The input side and rmcp's side of the transport; returns rmcp's two ends and the queue of lines to write.
fn pipeline<I>(input: I) -> (DuplexStream, DuplexStream, mpsc::UnboundedReceiver<Vec<u8>>)
where
    I: AsyncRead + Unpin + Send + 'static,
{
    const BUFFER: usize = 256 * 1024;
    let (rmcp_read, mut to_rmcp) = tokio::io::duplex(BUFFER);
    let (rmcp_write, from_rmcp) = tokio::io::duplex(BUFFER);
    let (lines_tx, lines_rx) = mpsc::unbounded_channel::<Vec<u8>>();

    let filter = Arc::new(Mutex::new(Filter::default()));

    // Input: filter stdin, pass good lines to rmcp, queue error replies.
    let replies = lines_tx.clone();
    let input_filter = Arc::clone(&filter);
    tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(BUFFER, input);
        let mut line = Vec::new();
        'read: loop {
            match read_line_limited(&mut reader, &mut line, MAX_LINE_BYTES).await {
                Ok(LineRead::Line) => {
                    let actions = input_filter.lock().unwrap_or_else(PoisonError::into_inner).input(&line);
                    for action in actions {
                        match action {
                            Action::Forward(mut message) => {
                                message.push('\n');
                                if to_rmcp.write_all(message.as_bytes()).await.is_err() {
                                    break 'read;
                                }
                            }
                            Action::Reply(reply) => {
                                if reply.contains(r#""error""#) {
                                    tracing::warn!("answered an unusable message: {reply}");
                                }
                                let _ = replies.send(reply.into_bytes());
                            }
                        }
                    }
                }
                Ok(LineRead::TooLong(len)) => {
                    let reply = error_line(
                        "null",
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

    // rmcp's output, one whole line at a time, through the filter into the writer's queue.
    tokio::spawn(async move {
        let mut reader = BufReader::new(from_rmcp);
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let body = line.strip_suffix(b"\n").unwrap_or(&line);
                    let filtered = filter.lock().unwrap_or_else(PoisonError::into_inner).output(body);
                    if let Some(out) = filtered
                        && lines_tx.send(out).is_err()
                    {
                        break;
                    }
                }
            }
        }
    });

    (rmcp_read, rmcp_write, lines_rx)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

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
