//! The control channel: how a person reaches the live sessions of their uexec servers without the model
//! (`uexec sessions`, `uexec attach`, `uexec kill`, `uexec answer`).
//!
//! Every `uexec mcp` server (stdio or `--listen`) serves a unix socket, `<control dir>/<pid>.sock`, where the
//! control directory is the first of `$XDG_RUNTIME_DIR/uexec/control` and `<state dir>/control` that lies
//! outside every place a sandboxed command may write (`settings::control_home`), made mode 0700 and owned by
//! the user. Who may use it:
//! - **the same user only**: the directory is 0700, the socket 0600, and the server checks every peer's
//!   credentials (`SO_PEERCRED`): a connection from another uid is closed without an answer;
//! - **no sandboxed command**: every uexec makes every control directory before its first command and hides
//!   them all from its sandboxed commands (hidden paths, `settings::control_dirs`): they see an empty directory,
//!   with or without the proxy's network namespace (a pathname socket is reached through the file system, which
//!   the mount namespace hides). A command that could attach could type into a session that runs outside the
//!   sandbox. Reachability is not the only credential: both sides refuse a peer more confined than themselves
//!   ([`peer`]), so a server does not serve a sandboxed command, and `uexec attach` does not type into a socket
//!   a sandboxed command planted;
//! - commands run with `danger-full-access` (or approved outside the sandbox) run as the user, unrestricted:
//!   they can reach it, as they can reach everything else of the user's (`docs/sandbox.md`, "What is not
//!   protected").
//!
//! The protocol: the client sends one JSON line ([`Request`]), the server answers one JSON line (`"ok": true`
//! with the answer, or `"ok": false` with an `"error"`). After an `attach` answer both sides exchange frames
//! (`[kind: u8][length: u32, big-endian][payload]`): the server sends [`FRAME_OUTPUT`] (the present first, then
//! the stream) and, once, [`FRAME_EXIT`]; the client sends [`FRAME_INPUT`] (honoured only when it attached with
//! `write`), and detaches by closing the connection. Attaching, typing (how many bytes, never what), killing and
//! answering a question (`desk`) are audit-log records.

pub mod client;
pub mod desk;
pub mod peer;
pub mod server;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use uexec_domain::SessionId;

/// Output for the watcher's terminal (the present, then the stream).
pub const FRAME_OUTPUT: u8 = b'O';
/// The session ended: `{"exit_code": N}`; nothing follows.
pub const FRAME_EXIT: u8 = b'X';
/// The person's keys (client to server).
pub const FRAME_INPUT: u8 = b'I';

/// The largest frame either side accepts.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// The longest request line the server reads.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// The detach key of `uexec attach`: Ctrl-] (as telnet's escape), never sent to the program.
pub const DETACH_KEY: u8 = 0x1d;

/// One request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The server and its live sessions.
    List,
    /// Watch a session (and type into it with `write`).
    Attach {
        /// The client of the server (0 for a stdio server).
        client: u64,
        /// The session.
        session: SessionId,
        /// Hand the keyboard to the person.
        #[serde(default)]
        write: bool,
    },
    /// Kill one session.
    Kill {
        /// The client of the server.
        client: u64,
        /// The session.
        session: SessionId,
    },
    /// Kill every session of every client of the server.
    KillAll,
    /// Answer an approval question waiting for a person (`desk`).
    Answer {
        /// The question's number on this server.
        question: u64,
        /// `approve`, `approve-session`, `approve-prefix` or `deny`.
        decision: String,
    },
    /// What was approved, denied and refused (`desk`).
    History,
}

/// What a server says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Its process id.
    pub pid: u32,
    /// `stdio` or `http`.
    pub kind: String,
    /// Its workspace.
    pub cwd: PathBuf,
    /// Where an HTTP server listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

/// One live session in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    /// The client of the server it belongs to (0 for a stdio server).
    pub client: u64,
    /// Its id.
    pub session_id: SessionId,
    /// The command line.
    pub cmd: String,
    /// Where it started.
    pub cwd: PathBuf,
    /// Runs in a PTY.
    pub tty: bool,
    /// The sandbox (`linux-landlock`, `none`, ...).
    pub sandbox: String,
    /// `running`, `waiting_for_input` or `exited`.
    pub state: String,
    /// The exit code of an exited session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Milliseconds since it started.
    pub age_ms: u64,
    /// Bytes of output so far.
    pub output_bytes: u64,
}

/// The answer to [`Request::List`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// The server.
    pub server: ServerInfo,
    /// Its live sessions.
    pub sessions: Vec<Listed>,
    /// The approval questions waiting for a person.
    #[serde(default)]
    pub questions: Vec<desk::QuestionView>,
}

/// Write one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    kind: u8,
    payload: &[u8],
) -> std::io::Result<()> {
    for piece in payload.chunks(MAX_FRAME_BYTES).chain(payload.is_empty().then_some(&[][..])) {
        let len = u32::try_from(piece.len()).map_err(|_| std::io::Error::other("frame too large"))?;
        let mut header = [0u8; 5];
        header[0] = kind;
        header[1..].copy_from_slice(&len.to_be_bytes());
        writer.write_all(&header).await?;
        writer.write_all(piece).await?;
    }
    writer.flush().await
}

/// Reads frames from a stream, safely inside `tokio::select!`: a call cancelled part-way (output to forward
/// won the race) loses nothing, as what it read stays buffered for the next call. (`read_exact` would drop a
/// half-read frame with its future and leave the stream mid-frame: a person's keys arriving while an output
/// frame was being read ended the attach with "server ended the connection".)
#[derive(Debug)]
pub struct FrameReader<R> {
    reader: R,
    buffer: Vec<u8>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Frames from `reader` (which may hold bytes already buffered, past a request line).
    pub fn new(reader: R) -> FrameReader<R> {
        FrameReader { reader, buffer: Vec::new() }
    }

    /// The next frame; `None` at the end of the stream. A frame longer than [`MAX_FRAME_BYTES`], or a stream
    /// that ends inside a frame, is an error. Cancel-safe: the only await is one `read`, whose bytes are kept
    /// as soon as it returns.
    pub async fn next(&mut self) -> std::io::Result<Option<(u8, Vec<u8>)>> {
        loop {
            if let Some(&[kind, a, b, c, d]) = self.buffer.get(..5) {
                let len = u32::from_be_bytes([a, b, c, d]) as usize;
                if len > MAX_FRAME_BYTES {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("a frame of {len} bytes"),
                    ));
                }
                if let Some(payload) = self.buffer.get(5..5 + len) {
                    let payload = payload.to_vec();
                    self.buffer.drain(..5 + len);
                    return Ok(Some((kind, payload)));
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.reader.read(&mut chunk).await?;
            if n == 0 {
                return if self.buffer.is_empty() {
                    Ok(None)
                } else {
                    Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof))
                };
            }
            self.buffer.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_an_oversized_one_is_refused() {
        let mut buffer = Vec::new();
        write_frame(&mut buffer, FRAME_OUTPUT, b"hello").await.unwrap();
        write_frame(&mut buffer, FRAME_EXIT, b"").await.unwrap();
        let mut frames = FrameReader::new(&buffer[..]);
        assert_eq!(frames.next().await.unwrap(), Some((FRAME_OUTPUT, b"hello".to_vec())));
        assert_eq!(frames.next().await.unwrap(), Some((FRAME_EXIT, Vec::new())));
        assert_eq!(frames.next().await.unwrap(), None);
        let mut huge = vec![FRAME_INPUT];
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(FrameReader::new(&huge[..]).next().await.is_err());
        // A stream that ends inside a frame is an error, not a clean end.
        assert!(FrameReader::new(&buffer[..7]).next().await.is_err());
    }

    #[tokio::test]
    async fn a_read_cancelled_mid_frame_loses_nothing() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut frames = FrameReader::new(rx);
        let mut bytes = Vec::new();
        write_frame(&mut bytes, FRAME_OUTPUT, b"first frame").await.unwrap();
        write_frame(&mut bytes, FRAME_INPUT, b"second").await.unwrap();
        // Half of the first frame arrives, and the read is cancelled (as `select!` does when another branch wins).
        tx.write_all(&bytes[..8]).await.unwrap();
        let cancelled = tokio::time::timeout(std::time::Duration::from_millis(20), frames.next()).await;
        assert!(cancelled.is_err(), "no whole frame yet");
        tx.write_all(&bytes[8..]).await.unwrap();
        assert_eq!(frames.next().await.unwrap(), Some((FRAME_OUTPUT, b"first frame".to_vec())));
        assert_eq!(frames.next().await.unwrap(), Some((FRAME_INPUT, b"second".to_vec())));
    }

    #[test]
    fn requests_are_tagged_json() {
        let attach: Request = serde_json::from_str(r#"{"op":"attach","client":0,"session":1234}"#).unwrap();
        assert_eq!(attach, Request::Attach { client: 0, session: SessionId(1234), write: false });
        assert!(serde_json::from_str::<Request>(r#"{"op":"rm"}"#).is_err());
        assert_eq!(serde_json::to_string(&Request::KillAll).unwrap(), r#"{"op":"kill_all"}"#);
    }
}
