//! The server side of the control channel (see the module above): the socket, the peer check, the requests.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use uexec_domain::SessionId;
use uexec_engine::{Engine, LiveState, SessionView, WatchEvent};

use super::desk::{Answered, Answerer, Desk, parse_decision};
use super::{
    FRAME_EXIT, FRAME_INPUT, FRAME_OUTPUT, FrameReader, Listed, Listing, MAX_REQUEST_BYTES, Request,
    ServerInfo, write_frame,
};
use crate::audit::AuditLog;
use crate::settings::Settings;

/// The engines of a server's clients, by client number (one, numbered 0, for a stdio server).
pub type Clients = Arc<dyn Fn() -> Vec<(u64, Engine)> + Send + Sync>;

/// A served control socket; dropping it stops serving and removes the socket.
#[derive(Debug)]
pub struct Control {
    path: PathBuf,
    task: tokio::task::AbortHandle,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What every connection is served with.
struct Shared {
    info: ServerInfo,
    clients: Clients,
    audit: Option<Arc<AuditLog>>,
    desk: Arc<Desk>,
}

/// Serve this server's control socket (inside a tokio runtime). `None`, with a warning, when there is no
/// private place for it (`settings::control_home`) or it cannot be bound: the server runs without the channel.
pub fn start(
    settings: &Settings,
    kind: &str,
    listen: Option<String>,
    clients: Clients,
    audit: Option<Arc<AuditLog>>,
    desk: Arc<Desk>,
) -> Option<Control> {
    let dir = match crate::settings::control_home(settings) {
        Ok(dir) => dir,
        Err(e) => {
            tracing::warn!("no control socket (uexec sessions and attach cannot reach this server): {e:#}");
            return None;
        }
    };
    let pid = std::process::id();
    let path = dir.join(format!("{pid}.sock"));
    // A socket of an earlier process with this pid (killed without removing it): nobody serves it.
    let _ = std::fs::remove_file(&path);
    let listener = match UnixListener::bind(&path) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::warn!(path = %path.display(), "no control socket: {e}");
            return None;
        }
    };
    {
        use std::os::unix::fs::PermissionsExt;
        if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
            tracing::warn!(path = %path.display(), "cannot make the control socket private: {e}");
        }
    }
    let info = ServerInfo { pid, kind: kind.to_owned(), cwd: settings.cwd.clone(), listen };
    let shared = Arc::new(Shared { info, clients, audit, desk });
    let task = tokio::spawn(accept_loop(listener, shared)).abort_handle();
    tracing::info!(path = %path.display(), "control socket (uexec sessions, uexec attach)");
    Some(Control { path, task })
}

async fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let shared = Arc::clone(&shared);
                tokio::spawn(async move { serve_peer(stream, shared).await });
            }
            Err(e) => {
                tracing::warn!("control socket accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// The peer's pid, when it is this user and not more confined than this server (`super::peer`); `None` (the
/// connection is closed unanswered) otherwise.
fn same_user(stream: &UnixStream) -> Option<Option<i32>> {
    let me = rustix::process::geteuid().as_raw();
    match stream.peer_cred() {
        Ok(cred) if cred.uid() == me => match super::peer::check(cred.pid()) {
            Ok(()) => Some(cred.pid()),
            Err(why) => {
                tracing::warn!(pid = ?cred.pid(), "control socket: a peer that may be sandboxed refused ({why})");
                None
            }
        },
        Ok(cred) => {
            tracing::warn!(uid = cred.uid(), pid = ?cred.pid(), "control socket: a peer of another user refused");
            None
        }
        Err(e) => {
            tracing::warn!("control socket: the peer's credentials are unknown ({e}): refused");
            None
        }
    }
}

async fn serve_peer(stream: UnixStream, shared: Arc<Shared>) {
    let Some(peer_pid) = same_user(&stream) else { return };
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    if (&mut reader).take(MAX_REQUEST_BYTES as u64).read_until(b'\n', &mut line).await.is_err() {
        return;
    }
    let request: Request = match serde_json::from_slice(line.trim_ascii()) {
        Ok(request) => request,
        Err(e) => {
            let _ = answer(&mut write, json!({ "ok": false, "error": format!("bad request: {e}") })).await;
            return;
        }
    };
    let result = match request {
        Request::List => answer(&mut write, list(&shared)).await,
        Request::Answer { question, decision } => {
            let reply = answer_question(&shared.desk, question, &decision, Answerer::Control(peer_pid));
            answer(&mut write, reply).await
        }
        Request::History => {
            let reply = json!({ "ok": true, "server": shared.info, "history": shared.desk.history() });
            answer(&mut write, reply).await
        }
        Request::Kill { client, session } => {
            let reply = kill(&shared, client, session, peer_pid).await;
            answer(&mut write, reply).await
        }
        Request::KillAll => {
            let reply = kill_all(&shared, peer_pid).await;
            answer(&mut write, reply).await
        }
        Request::Attach { client, session, write: keyboard } => {
            attach(&shared, reader, write, client, session, keyboard, peer_pid).await
        }
    };
    if let Err(e) = result {
        tracing::debug!("control connection ended: {e}");
    }
}

async fn answer(write: &mut tokio::net::unix::OwnedWriteHalf, value: Value) -> std::io::Result<()> {
    let mut text = value.to_string();
    text.push('\n');
    write.write_all(text.as_bytes()).await?;
    write.flush().await
}

fn listed(client: u64, view: SessionView) -> Listed {
    let (state, exit_code) = match view.state {
        LiveState::Running => ("running", None),
        LiveState::WaitingForInput => ("waiting_for_input", None),
        LiveState::Exited { exit_code } => ("exited", Some(exit_code)),
    };
    let sandbox = serde_json::to_value(view.sandbox)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", view.sandbox));
    Listed {
        client,
        session_id: view.session_id,
        cmd: view.cmd,
        cwd: view.cwd,
        tty: view.tty,
        sandbox,
        state: state.to_owned(),
        exit_code,
        age_ms: u64::try_from(view.age.as_millis()).unwrap_or(u64::MAX),
        output_bytes: view.output_bytes,
    }
}

/// Answer question `question` with `decision` (as the person typed it) for a person reached through `by`: the
/// JSON answer of the control socket and the operator route alike.
pub fn answer_question(desk: &Desk, question: u64, decision: &str, by: Answerer) -> Value {
    let Some(parsed) = parse_decision(decision) else {
        return json!({ "ok": false, "error": format!("unknown decision {:?}: approve, approve-retry, approve-session, approve-prefix or deny", decision.escape_debug().to_string()) });
    };
    match desk.answer(question, parsed, by) {
        Answered::Decided => json!({ "ok": true, "question": question, "decision": decision }),
        Answered::NotWaiting => {
            json!({ "ok": false, "answered": true, "error": format!("question {question} is not waiting: it was answered already (or never asked)") })
        }
        Answered::NotOffered => {
            json!({ "ok": false, "error": format!("question {question} offers no prefix to approve") })
        }
    }
}

/// The server, every live session of every client, and the questions waiting on `desk`.
pub fn listing(info: &ServerInfo, clients: &Clients, desk: &Desk) -> Listing {
    let mut sessions = Vec::new();
    let mut engines = clients();
    engines.sort_by_key(|(id, _)| *id);
    for (client, engine) in engines {
        sessions.extend(engine.session_views().into_iter().map(|view| listed(client, view)));
    }
    Listing { server: info.clone(), sessions, questions: desk.questions() }
}

fn list(shared: &Shared) -> Value {
    match serde_json::to_value(listing(&shared.info, &shared.clients, &shared.desk)) {
        Ok(Value::Object(mut map)) => {
            map.insert("ok".into(), Value::Bool(true));
            Value::Object(map)
        }
        _ => json!({ "ok": false, "error": "the listing cannot be written" }),
    }
}

fn engine_of(shared: &Shared, client: u64) -> Option<Engine> {
    (shared.clients)().into_iter().find(|(id, _)| *id == client).map(|(_, engine)| engine)
}

/// An audit record of the person's action (the peer is the `uexec` process that asked).
fn record(
    shared: &Shared,
    event: &str,
    client: u64,
    session: Option<SessionId>,
    peer: Option<i32>,
    extra: Value,
) {
    let Some(audit) = &shared.audit else { return };
    let mut map = Map::new();
    map.insert("event".into(), json!(event));
    map.insert("client".into(), json!(client));
    if let Some(session) = session {
        map.insert("session_id".into(), json!(session));
    }
    map.insert("peer_pid".into(), json!(peer));
    if let Value::Object(extra) = extra {
        map.extend(extra);
    }
    audit.record(map);
}

async fn kill(shared: &Shared, client: u64, session: SessionId, peer: Option<i32>) -> Value {
    let Some(engine) = engine_of(shared, client) else {
        return json!({ "ok": false, "error": format!("no client {client} on this server") });
    };
    match engine.kill_session(session).await {
        Ok(exit_code) => {
            record(shared, "operator_kill", client, Some(session), peer, json!({ "exit_code": exit_code }));
            json!({ "ok": true, "killed": 1, "exit_code": exit_code })
        }
        Err(e) => json!({ "ok": false, "error": e.to_string() }),
    }
}

async fn kill_all(shared: &Shared, peer: Option<i32>) -> Value {
    let mut killed = 0u64;
    for (client, engine) in (shared.clients)() {
        for view in engine.session_views() {
            if matches!(view.state, LiveState::Exited { .. }) {
                continue;
            }
            if let Ok(exit_code) = engine.kill_session(view.session_id).await {
                killed += 1;
                record(
                    shared,
                    "operator_kill",
                    client,
                    Some(view.session_id),
                    peer,
                    json!({ "exit_code": exit_code, "all": true }),
                );
            }
        }
    }
    json!({ "ok": true, "killed": killed })
}

/// What a person attached to a session reads where output was dropped because the attach did not keep up.
fn skipped_note(bytes: u64) -> String {
    format!("\r\n[uexec: {bytes} bytes of output skipped: this attach fell behind]\r\n")
}

async fn attach(
    shared: &Shared,
    mut reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut write: tokio::net::unix::OwnedWriteHalf,
    client: u64,
    session: SessionId,
    keyboard: bool,
    peer: Option<i32>,
) -> std::io::Result<()> {
    let Some(engine) = engine_of(shared, client) else {
        return answer(
            &mut write,
            json!({ "ok": false, "error": format!("no client {client} on this server") }),
        )
        .await;
    };
    let mut watch = match engine.watch(session) {
        Ok(watch) => watch,
        Err(e) => return answer(&mut write, json!({ "ok": false, "error": e.to_string() })).await,
    };
    if keyboard && !watch.tty {
        return answer(
            &mut write,
            json!({ "ok": false, "error": format!("session {session} has no terminal to type into (it runs with pipes); attach without --write") }),
        )
        .await;
    }
    record(shared, "operator_attach", client, Some(session), peer, json!({ "write": keyboard }));
    answer(&mut write, json!({ "ok": true, "tty": watch.tty, "write": keyboard })).await?;
    write_frame(&mut write, FRAME_OUTPUT, &watch.present).await?;
    let mut typed = 0u64;
    let mut frames = FrameReader::new(&mut reader);
    let outcome = loop {
        tokio::select! {
            event = watch.next() => match event {
                Some(WatchEvent::Output(piece)) => write_frame(&mut write, FRAME_OUTPUT, piece.as_bytes()).await?,
                Some(WatchEvent::Skipped { bytes }) => {
                    write_frame(&mut write, FRAME_OUTPUT, skipped_note(bytes).as_bytes()).await?;
                }
                Some(WatchEvent::Exited { exit_code }) => {
                    let body = json!({ "exit_code": exit_code }).to_string();
                    write_frame(&mut write, FRAME_EXIT, body.as_bytes()).await?;
                    break "exited";
                }
                None => break "dropped",
            },
            frame = frames.next() => match frame {
                Ok(Some((FRAME_INPUT, bytes))) if keyboard && !bytes.is_empty() => {
                    let len = bytes.len() as u64;
                    match engine.write_for_person(session, bytes).await {
                        Ok(()) => {
                            typed += len;
                            // How much was typed, never what: it may be a password.
                            record(shared, "operator_input", client, Some(session), peer, json!({ "bytes": len }));
                        }
                        Err(e) => tracing::debug!(%session, "a person's input was not written: {e}"),
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break "detached",
            },
        }
    };
    record(
        shared,
        "operator_detach",
        client,
        Some(session),
        peer,
        json!({ "how": outcome, "typed_bytes": typed }),
    );
    Ok(())
}
