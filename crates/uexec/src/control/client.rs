//! The person's side of the control channel: `uexec sessions`, `uexec attach`, `uexec kill`, `uexec answer`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use uexec_domain::SessionId;
use uexec_domain::limits::PTY_ROWS;

use super::ServerInfo;
use super::desk::{HistoryEntry, QuestionView};
use super::{
    DETACH_KEY, FRAME_EXIT, FRAME_INPUT, FRAME_OUTPUT, FrameReader, Listed, Listing, Request, write_frame,
};
use crate::cli::{AnswerArgs, AttachArgs, KillArgs, SessionsArgs};
use crate::settings::ProcessContext;

/// What the terminal is given back after a detach: attributes, a visible cursor, normal cursor keys and keypad,
/// no bracketed paste (the program may have set any of them).
const TERMINAL_RESET: &[u8] = b"\x1b[0m\x1b[?25h\x1b[?1l\x1b>\x1b[?2004l";

/// The control sockets of this user's servers: `*.sock` in every control directory that is private to this user
/// (a directory of another owner, or open to others, is skipped with a warning).
fn sockets(ctx: &ProcessContext) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let mut found = Vec::new();
    for dir in crate::settings::control_dirs_of(ctx) {
        let Ok(meta) = std::fs::metadata(&dir) else { continue };
        if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
            tracing::warn!(dir = %dir.display(), "not a private directory of this user: its sockets are not used");
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut here: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "sock"))
            .collect();
        here.sort();
        found.extend(here);
    }
    found
}

/// Connect to a server's socket, checking that this user serves it from no more confinement than this process
/// (`super::peer`). `None` for a socket nobody serves (left by a server that was killed: removed) or one that
/// fails the check (said on stderr).
async fn connect(path: &Path) -> Option<UnixStream> {
    match UnixStream::connect(path).await {
        Ok(stream) => {
            let me = rustix::process::geteuid().as_raw();
            match stream.peer_cred() {
                Ok(cred) if cred.uid() == me => match super::peer::check(cred.pid()) {
                    Ok(()) => Some(stream),
                    Err(why) => {
                        // A sandboxed command's imitation of a server would get the person's typing.
                        say(&format!(
                            "uexec: {} is not used: {why}; it may be a sandboxed command imitating a uexec \
                             server (a server started inside another sandbox is reached from inside it)\n",
                            path.display()
                        ));
                        None
                    }
                },
                _ => {
                    tracing::warn!(path = %path.display(), "served by another user: not used");
                    None
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            use std::os::unix::fs::FileTypeExt;
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(path);
            }
            None
        }
        Err(e) => {
            tracing::debug!(path = %path.display(), "cannot connect: {e}");
            None
        }
    }
}

/// Send `request` and read the one-line answer (an error when it says `"ok": false`).
async fn ask(
    stream: UnixStream,
    request: &Request,
) -> Result<(Value, BufReader<OwnedReadHalf>, OwnedWriteHalf)> {
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_string(request)?;
    line.push('\n');
    write.write_all(line.as_bytes()).await?;
    let mut reader = BufReader::new(read);
    let mut answer = String::new();
    reader.read_line(&mut answer).await?;
    let value: Value = serde_json::from_str(&answer).context("the server's answer is not JSON")?;
    if value.get("ok") != Some(&Value::Bool(true)) {
        let error = value.get("error").and_then(Value::as_str).unwrap_or("refused");
        bail!("{error}");
    }
    Ok((value, reader, write))
}

/// How long a server may take to accept a connection and answer a listing. The servers are asked at once, so a
/// stopped (SIGSTOP) or stuck server holds up neither the others nor the person for longer than this.
const ANSWER_DEADLINE: Duration = Duration::from_secs(3);

/// What this user's servers answered.
struct Listings {
    /// Every server that answered, with its listing and its socket, in the order of the sockets.
    answered: Vec<(PathBuf, Listing)>,
    /// The sockets whose server did not answer within [`ANSWER_DEADLINE`].
    silent: Vec<PathBuf>,
}

/// Ask every server for its listing, all at once, each within [`ANSWER_DEADLINE`].
async fn all_listings(ctx: &ProcessContext) -> Listings {
    let mut asks = tokio::task::JoinSet::new();
    for (index, path) in sockets(ctx).into_iter().enumerate() {
        asks.spawn(async move {
            let outcome = tokio::time::timeout(ANSWER_DEADLINE, listing_of(&path)).await;
            (index, path, outcome)
        });
    }
    let mut answered = Vec::new();
    let mut silent = Vec::new();
    while let Some(joined) = asks.join_next().await {
        let Ok((index, path, outcome)) = joined else { continue };
        match outcome {
            Ok(Some(listing)) => answered.push((index, path, listing)),
            Ok(None) => {}
            Err(_) => {
                tracing::debug!(path = %path.display(), "no answer within {ANSWER_DEADLINE:?}");
                silent.push((index, path));
            }
        }
    }
    answered.sort_by_key(|(index, _, _)| *index);
    silent.sort_by_key(|(index, _)| *index);
    Listings {
        answered: answered.into_iter().map(|(_, path, listing)| (path, listing)).collect(),
        silent: silent.into_iter().map(|(_, path)| path).collect(),
    }
}

/// The listing of the server at `path`; `None` when nobody serves it or its answer is not a listing.
async fn listing_of(path: &Path) -> Option<Listing> {
    let stream = connect(path).await?;
    match ask(stream, &Request::List).await {
        Ok((value, _, _)) => match serde_json::from_value::<Listing>(value) {
            Ok(listing) => Some(listing),
            Err(e) => {
                tracing::warn!(path = %path.display(), "a listing that does not parse: {e}");
                None
            }
        },
        Err(e) => {
            tracing::warn!(path = %path.display(), "no listing: {e:#}");
            None
        }
    }
}

/// What the person reads about a server that did not answer.
fn silent_note(path: &Path) -> String {
    let server = path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
    format!(
        "server {server} did not answer within {} s (stopped or stuck): its sessions are not listed",
        ANSWER_DEADLINE.as_secs()
    )
}

/// A command line for a table cell: control characters written `\u{HEX}` (a command's text must not drive the
/// person's terminal), at most `max` characters.
fn cell(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    if out.chars().count() > max {
        let cut: String = out.chars().take(max.saturating_sub(3)).collect();
        return format!("{cut}...");
    }
    out
}

fn age(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
    }
}

fn size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes}B"),
        1024..1_048_576 => format!("{:.1}K", bytes as f64 / 1024.0),
        _ => format!("{:.1}M", bytes as f64 / 1_048_576.0),
    }
}

fn state(listed: &Listed) -> String {
    match (listed.state.as_str(), listed.exit_code) {
        ("exited", Some(code)) => format!("exited({code})"),
        ("waiting_for_input", _) => "waiting-for-input".to_owned(),
        (other, _) => other.to_owned(),
    }
}

/// `uexec sessions`.
pub fn sessions(args: &SessionsArgs) -> Result<ExitCode> {
    if args.history {
        let rt = crate::runtime()?;
        let outcome = rt.block_on(history_async(args.json));
        rt.shutdown_background();
        return outcome;
    }
    let ctx = ProcessContext::current()?;
    let rt = crate::runtime()?;
    let Listings { answered: listings, silent } = rt.block_on(all_listings(&ctx));
    rt.shutdown_background();
    let mut out = std::io::stdout().lock();
    if args.json {
        // The servers that did not answer are named on stderr: stdout stays the JSON array.
        for path in &silent {
            say(&format!("uexec: {}\n", silent_note(path)));
        }
        let servers: Vec<&Listing> = listings.iter().map(|(_, l)| l).collect();
        writeln!(out, "{}", serde_json::to_string(&servers)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![[
        "SERVER".to_owned(),
        "CLIENT".to_owned(),
        "SESSION".to_owned(),
        "STATE".to_owned(),
        "AGE".to_owned(),
        "OUTPUT".to_owned(),
        "SANDBOX".to_owned(),
        "CWD".to_owned(),
        "COMMAND".to_owned(),
    ]];
    for (_, listing) in &listings {
        let server = format!("{} ({})", listing.server.pid, listing.server.kind);
        for s in &listing.sessions {
            let client = if listing.server.kind == "stdio" { "-".to_owned() } else { s.client.to_string() };
            rows.push([
                server.clone(),
                client,
                s.session_id.to_string(),
                state(s),
                age(s.age_ms),
                size(s.output_bytes),
                s.sandbox.clone(),
                cell(&s.cwd.display().to_string(), 40),
                cell(&s.cmd, 60),
            ]);
        }
    }
    if rows.len() == 1 {
        let servers = listings.len();
        writeln!(
            out,
            "no live sessions ({servers} uexec server{} of yours answering)",
            if servers == 1 { "" } else { "s" }
        )?;
    } else {
        write_table(&mut out, &rows)?;
    }
    for (_, listing) in &listings {
        for question in &listing.questions {
            write_question(&mut out, listing, question)?;
        }
    }
    for path in &silent {
        writeln!(out, "{}", silent_note(path))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Rows in columns as wide as their widest cell; the last column is not padded.
fn write_table<const N: usize>(out: &mut impl Write, rows: &[[String; N]]) -> std::io::Result<()> {
    let mut widths = [0usize; N];
    for row in rows {
        for (width, text) in widths.iter_mut().zip(row) {
            *width = (*width).max(text.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, (width, text)) in widths.iter().zip(row).enumerate() {
            if i + 1 == row.len() {
                line.push_str(text);
            } else {
                line.push_str(&format!("{text:<width$}  "));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// A question waiting for a person, with everything it shows (its texts are escaped by the server, and again
/// here: a server's answer must not drive the terminal either), and how to answer it.
fn write_question(out: &mut impl Write, listing: &Listing, question: &QuestionView) -> std::io::Result<()> {
    let server = listing.server.pid;
    let client =
        if listing.server.kind == "stdio" { String::new() } else { format!("client {}, ", question.client) };
    writeln!(out)?;
    let about = match question.session_id {
        Some(session) => format!("session {session}, "),
        None => String::new(),
    };
    writeln!(
        out,
        "QUESTION {} of server {server} ({client}{about}{}, asked {} ago): waiting for a person",
        question.id,
        cell(&question.kind, 40),
        age(question.age_ms),
    )?;
    for warning in &question.warnings {
        writeln!(out, "  warning:   {}", cell(warning, 2000))?;
    }
    let what = if question.kind == "network" { "host:     " } else { "command:  " };
    writeln!(out, "  {what} {}", cell(&question.command, 2000))?;
    if !question.cwd.is_empty() {
        writeln!(out, "  directory: {}", cell(&question.cwd, 2000))?;
    }
    if let Some(reason) = &question.reason {
        writeln!(out, "  reason:    {}", cell(reason, 2000))?;
    }
    if let Some(prefix) = &question.prefix {
        writeln!(out, "  offers:    every command starting with {} for the session", cell(prefix, 400))?;
    }
    for choice in &question.choices {
        writeln!(out, "  {:<16} {}", cell(&choice.decision, 40), cell(&choice.title, 400))?;
    }
    let choices: Vec<String> = question.choices.iter().map(|c| cell(&c.decision, 40)).collect();
    writeln!(out, "  answer:    uexec answer {server} {} {}", question.id, choices.join("|"))
}

/// `uexec sessions --history`.
async fn history_async(json: bool) -> Result<ExitCode> {
    let ctx = ProcessContext::current()?;
    let mut servers = Vec::new();
    for path in sockets(&ctx) {
        let Some(stream) = connect(&path).await else { continue };
        match tokio::time::timeout(ANSWER_DEADLINE, ask(stream, &Request::History)).await {
            Ok(Ok((value, _, _))) => servers.push(value),
            Ok(Err(e)) => say(&format!("uexec: {}: no history: {e:#}\n", path.display())),
            Err(_) => say(&format!("uexec: {}\n", silent_note(&path))),
        }
    }
    let mut out = std::io::stdout().lock();
    if json {
        let servers: Vec<Value> = servers
            .into_iter()
            .map(|mut v| {
                if let Value::Object(map) = &mut v {
                    map.remove("ok");
                }
                v
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string(&servers)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if servers.is_empty() {
        writeln!(out, "no uexec server of yours answering")?;
    }
    for server in servers {
        let info: ServerInfo = serde_json::from_value(server.get("server").cloned().unwrap_or_default())
            .context("a server's answer names no server")?;
        let mut entries: Vec<HistoryEntry> =
            serde_json::from_value(server.get("history").cloned().unwrap_or_default())
                .context("a server's history does not parse")?;
        writeln!(out, "server {} ({}, {})", info.pid, info.kind, cell(&info.cwd.display().to_string(), 200))?;
        if entries.is_empty() {
            writeln!(out, "  nothing approved, denied or refused yet")?;
            continue;
        }
        // Per session, in the order of their first entry; entries of no session (refusals of the policy before a
        // session existed, hosts) last.
        entries.sort_by_key(|e| (e.session_id.is_none(), e.client, e.session_id.map(|s| s.0), e.unix_ms));
        let mut current = None;
        for entry in &entries {
            let key = (entry.client, entry.session_id);
            if current != Some(key) {
                current = Some(key);
                let client =
                    if info.kind == "stdio" { String::new() } else { format!(" of client {}", entry.client) };
                match entry.session_id {
                    Some(id) => writeln!(out, "  session {id}{client}")?,
                    None => writeln!(out, "  no session{client}")?,
                }
            }
            let detail = if entry.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", cell(&entry.detail, 200))
            };
            writeln!(
                out,
                "    {}  {:<21} by {:<8} {}{detail}",
                clock(entry.unix_ms),
                cell(&entry.outcome, 40),
                cell(&entry.by, 20),
                cell(&entry.subject, 200),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `HH:MM:SS` (UTC) of a time in milliseconds since the epoch.
fn clock(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    format!("{:02}:{:02}:{:02}Z", (secs / 3600) % 24, (secs / 60) % 60, secs % 60)
}

/// `uexec answer`.
pub fn answer(args: &AnswerArgs) -> Result<ExitCode> {
    let ctx = ProcessContext::current()?;
    let rt = crate::runtime()?;
    let outcome = rt.block_on(answer_async(&ctx, args));
    rt.shutdown_background();
    outcome
}

async fn answer_async(ctx: &ProcessContext, args: &AnswerArgs) -> Result<ExitCode> {
    let found = all_listings(ctx).await.answered.into_iter().find(|(_, l)| l.server.pid == args.server);
    let Some((path, _)) = found else {
        bail!("no uexec server {} of yours (see `uexec sessions`)", args.server)
    };
    let stream = connect(&path).await.ok_or_else(|| anyhow!("server {} no longer answers", args.server))?;
    let request = Request::Answer { question: args.question, decision: args.decision.clone() };
    ask(stream, &request).await?;
    writeln!(
        std::io::stdout().lock(),
        "answered question {} of server {}: {}",
        args.question,
        args.server,
        args.decision
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The one session `id` names (narrowed by `server` and `client`), with its server's socket.
async fn find(
    ctx: &ProcessContext,
    id: SessionId,
    server: Option<u32>,
    client: Option<u64>,
) -> Result<(PathBuf, u32, Listed)> {
    let mut matches = Vec::new();
    let Listings { answered, silent } = all_listings(ctx).await;
    for (path, listing) in answered {
        if server.is_some_and(|s| s != listing.server.pid) {
            continue;
        }
        for s in listing.sessions {
            if s.session_id == id && client.is_none_or(|c| c == s.client) {
                matches.push((path.clone(), listing.server.pid, s));
            }
        }
    }
    match matches.len() {
        0 if !silent.is_empty() => {
            let notes: Vec<String> = silent.iter().map(|path| silent_note(path)).collect();
            bail!("no live session {id} in the uexec servers of yours that answered; {}", notes.join("; "))
        }
        0 => bail!("no live session {id} in any uexec server of yours (see `uexec sessions`)"),
        1 => matches.pop().ok_or_else(|| anyhow!("no session")),
        _ => {
            let names: Vec<String> =
                matches.iter().map(|(_, pid, s)| format!("server {pid} client {}", s.client)).collect();
            bail!(
                "session {id} is in several servers ({}): name one with --server PID (and --client N)",
                names.join(", ")
            )
        }
    }
}

#[allow(clippy::print_stderr)]
fn say(text: &str) {
    eprint!("{text}");
}

/// `uexec attach`.
pub fn attach(args: &AttachArgs) -> Result<ExitCode> {
    let ctx = ProcessContext::current()?;
    let rt = crate::runtime()?;
    let outcome = rt.block_on(attach_async(&ctx, args));
    rt.shutdown_background();
    outcome
}

async fn attach_async(ctx: &ProcessContext, args: &AttachArgs) -> Result<ExitCode> {
    let id = SessionId(args.id);
    let (path, pid, listed) = find(ctx, id, args.server, args.client).await?;
    let stream = connect(&path).await.ok_or_else(|| anyhow!("server {pid} no longer answers"))?;
    let request = Request::Attach { client: listed.client, session: id, write: args.write };
    let (_, mut reader, mut write) = ask(stream, &request).await?;
    let tty_in = crate::terminal::is_terminal(crate::terminal::stdin_fd());
    let tty_out = crate::terminal::is_terminal(crate::terminal::stdout_fd());
    let mode = if args.write { "you have the keyboard" } else { "read-only" };
    say(&format!(
        "[uexec] attached to session {id} of server {pid} ({mode}); Ctrl-] detaches{}\r\n",
        if args.write { "" } else { ", as does Ctrl-C" }
    ));
    let raw =
        if tty_in { Some(crate::terminal::RawMode::enable(crate::terminal::stdin_fd())?) } else { None };
    // Keys come from a thread of their own (a blocked read of the terminal never holds the runtime).
    let (keys_tx, mut keys) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buffer = [0u8; 4096];
        loop {
            match std::io::Read::read(&mut stdin, &mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if keys_tx.blocking_send(buffer.get(..n).unwrap_or_default().to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut stdout = std::io::stdout();
    // The session's terminal is 24x80 whatever this one's size (resizes are the session's). On a taller
    // terminal its output scrolls within the top 24 rows, as in the session, and the row below says how to
    // detach.
    let rows = crate::terminal::window_size(crate::terminal::stdout_fd()).map_or(0, |size| size.rows);
    let status_row = (tty_out && listed.tty && rows > PTY_ROWS).then_some(PTY_ROWS + 1);
    if tty_out && listed.tty {
        // The present draws the whole screen; start from a blank one.
        stdout.write_all(b"\x1b[H\x1b[2J")?;
        if status_row.is_some() {
            stdout.write_all(format!("\x1b[1;{PTY_ROWS}r").as_bytes())?;
        }
    }
    let mut first = true;
    let mut keys_open = true;
    // A pipe session's output was written for no terminal: its line feeds reach a terminal in raw mode, which
    // does not return the carriage on a line feed, as new lines.
    let mut newlines = (tty_out && !listed.tty).then_some(Newlines::default());
    let mut frames = FrameReader::new(&mut reader);
    let ending = loop {
        tokio::select! {
            frame = frames.next() => match frame {
                Ok(Some((FRAME_OUTPUT, bytes))) => {
                    match &mut newlines {
                        Some(newlines) => stdout.write_all(&newlines.translate(&bytes))?,
                        None => stdout.write_all(&bytes)?,
                    }
                    if std::mem::take(&mut first) && let Some(row) = status_row {
                        // Below the session's rows, cursor saved and restored around it.
                        let line = format!(
                            "\x1b7\x1b[{row};1H\x1b[2K\x1b[7m uexec: session {id} of server {pid} ({mode}); Ctrl-] detaches \x1b[0m\x1b8"
                        );
                        stdout.write_all(line.as_bytes())?;
                    }
                    stdout.flush()?;
                }
                Ok(Some((FRAME_EXIT, body))) => {
                    let code = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v.get("exit_code").and_then(Value::as_i64));
                    break format!("session {id} exited{}", code.map(|c| format!(" with code {c}")).unwrap_or_default());
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break format!("server {pid} ended the connection"),
            },
            key = keys.recv(), if keys_open => match key {
                Some(bytes) => {
                    let detach_at = bytes.iter().position(|b| *b == DETACH_KEY || (!args.write && *b == 0x03));
                    let send = match detach_at { Some(at) => bytes.get(..at).unwrap_or_default(), None => &bytes[..] };
                    if args.write && !send.is_empty() {
                        write_frame(&mut write, FRAME_INPUT, send).await?;
                    }
                    if detach_at.is_some() {
                        break format!("detached from session {id}");
                    }
                }
                None => keys_open = false,
            },
        }
    };
    drop(write);
    if tty_out {
        if let Some(row) = status_row {
            // The whole terminal scrolls again, below what the session drew.
            stdout.write_all(format!("\x1b[r\x1b[{row};1H\x1b[2K").as_bytes())?;
        }
        stdout.write_all(TERMINAL_RESET)?;
        stdout.flush()?;
    }
    drop(raw);
    say(&format!("\r\n[uexec] {ending}\r\n"));
    Ok(ExitCode::SUCCESS)
}

/// Line feeds as a terminal in raw mode needs them: each bare LF becomes CR LF, also where the CR ended the
/// previous piece.
#[derive(Debug, Default)]
struct Newlines {
    after_cr: bool,
}

impl Newlines {
    fn translate(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 16);
        for &byte in bytes {
            if byte == b'\n' && !self.after_cr {
                out.push(b'\r');
            }
            out.push(byte);
            self.after_cr = byte == b'\r';
        }
        out
    }
}

/// `uexec kill`.
pub fn kill(args: &KillArgs) -> Result<ExitCode> {
    let ctx = ProcessContext::current()?;
    let rt = crate::runtime()?;
    let outcome = rt.block_on(kill_async(&ctx, args));
    rt.shutdown_background();
    outcome
}

async fn kill_async(ctx: &ProcessContext, args: &KillArgs) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match args.id {
        Some(id) => {
            let id = SessionId(id);
            let (path, pid, listed) = find(ctx, id, args.server, args.client).await?;
            let stream = connect(&path).await.ok_or_else(|| anyhow!("server {pid} no longer answers"))?;
            let (value, _, _) = ask(stream, &Request::Kill { client: listed.client, session: id }).await?;
            let code = value.get("exit_code").and_then(Value::as_i64).unwrap_or(-1);
            writeln!(out, "killed session {id} of server {pid} (exit code {code})")?;
        }
        None => {
            let Some(server) = args.server else { bail!("name a session ID, or a server with --server PID") };
            let found = all_listings(ctx).await.answered.into_iter().find(|(_, l)| l.server.pid == server);
            let Some((path, _)) = found else {
                bail!("no uexec server {server} of yours (see `uexec sessions`)")
            };
            let stream = connect(&path).await.ok_or_else(|| anyhow!("server {server} no longer answers"))?;
            let (value, _, _) = ask(stream, &Request::KillAll).await?;
            let killed = value.get("killed").and_then(Value::as_u64).unwrap_or(0);
            writeln!(
                out,
                "killed {killed} session{} of server {server}",
                if killed == 1 { "" } else { "s" }
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_command_cannot_drive_the_persons_terminal_through_the_listing() {
        assert_eq!(cell("echo hi", 60), "echo hi");
        assert_eq!(cell("printf '\x1b]0;pwned\x07'\nrm", 60), "printf '\\u{1b}]0;pwned\\u{7}'\\u{a}rm");
        assert_eq!(cell("a\u{202e}b", 60), "a\\u{202e}b");
        assert_eq!(cell("abcdefghij", 6), "abc...");
    }

    #[test]
    fn a_pipe_sessions_line_feeds_return_the_carriage_once() {
        let mut newlines = Newlines::default();
        assert_eq!(newlines.translate(b"a\nb\r\nc\r"), b"a\r\nb\r\nc\r");
        // The CR ended the previous piece: no second one.
        assert_eq!(newlines.translate(b"\nd\n\n"), b"\nd\r\n\r\n");
    }

    #[test]
    fn history_times_are_utc_clock_times() {
        assert_eq!(clock(0), "00:00:00Z");
        assert_eq!(clock(((13 * 3600 + 4 * 60 + 5) * 1000) + 86_400_000 * 3), "13:04:05Z");
    }

    #[test]
    fn ages_and_sizes_read_as_a_person_writes_them() {
        assert_eq!(age(5_400), "5s");
        assert_eq!(age(125_000), "2m05s");
        assert_eq!(age(7_300_000), "2h01m");
        assert_eq!(size(10), "10B");
        assert_eq!(size(2048), "2.0K");
        assert_eq!(size(3 * 1_048_576), "3.0M");
    }
}
