//! The network proxy of the domain-allowlist mode, served by uexec itself outside the sandbox.
//!
//! Sandboxed commands reach it as `http://127.0.0.1:PORT` (on Linux inside their loopback-only network
//! namespace, where the listener was created; on macOS on the host's loopback, the only address the Seatbelt
//! profile lets them reach). Per connection it reads one request head (at most [`MAX_HEAD`] bytes):
//! - `CONNECT host:port` (TLS and any other tunnel): checked, then `200` and the bytes relayed both ways;
//! - an absolute-form request (`GET http://host/path HTTP/1.1`, plain HTTP): checked, then forwarded as one
//!   request: the head in origin form with one `Host` header naming the host and port of the request line (every
//!   `Host` the command wrote is dropped: RFC 9112 3.2.2, so a shared front end serves the host the rule allowed),
//!   `Connection: close`, no `Proxy-*` or other hop-by-hop headers, and exactly the body the head declares
//!   (`Content-Length` or `chunked`, re-framed). Nothing the client sends after that body is forwarded: a second
//!   request on the connection was not checked, so it never reaches this upstream (the connection is closed
//!   after the response, and the client sends it again on a new connection, which is checked);
//! - anything else: `400` (also userinfo in the request target, an IPv6 address without brackets, control
//!   characters, folded or malformed header lines, ambiguous framing).
//!
//! The decision is `uexec_domain::network`'s, made twice and acted on exactly: `DomainRules::decide_host` on the
//! host in its canonical form (every spelling of an address is that address: `0xc6120009`, `[::ffff:c612:9]`),
//! then, for a name resolved by the proxy itself (commands have no DNS; the name in its canonical form, which no
//! resolver reads as a number), `DomainRules::connectable` on the addresses found: one a deny rule matches
//! refuses the request, local ones are dropped unless an allow rule names them. The proxy connects to those
//! socket addresses and nothing else (never resolving again, so a DNS answer that changes in between changes
//! nothing). A refused host gets a `403` whose body names it, why, and the setting that allows it, an audit
//! record (`sandbox_refused`, kind `connect`), and an entry in [`Refusals`], from which each tool call's response lists the
//! hosts refused while it ran.
//!
//! Inside a `CONNECT` tunnel the proxy sees only bytes: the rule decides which address and port are reached, not
//! which virtual host answers there (a TLS client may send any SNI and `Host` to the allowed host's address: a
//! shared front end then serves whatever it hosts there).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uexec_domain::denial::Refusal;
use uexec_domain::network::{DomainRules, Host, NetworkPolicy, Verdict, parse_port, refusal_text};

use crate::audit::AuditLog;
use crate::platform::SandboxSetup;
use crate::settings::Settings;

/// The longest request head read.
pub const MAX_HEAD: usize = 64 * 1024;

/// How long a connection to an upstream host may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a tunnel (or a forwarded request) may stay without a byte in either direction, and how long a write
/// to a peer that does not read may wait.
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// How many connections one proxy serves at once, and how many all the proxies of a server serve together (each
/// connection holds two descriptors of the server: the command's and the upstream one). A server with several
/// clients gives each client a proxy with a quota below the shared bound, so one client's commands cannot hold
/// every connection (`crate::fdlimit::FdBudget`).
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Connections of this proxy at once; more wait in its listen queue.
    pub per_proxy: usize,
    /// The bound shared with the server's other proxies, if any.
    pub shared: Option<Arc<tokio::sync::Semaphore>>,
}

impl ConnectionLimits {
    /// The limits of a proxy that is the process's only one: the proxies' share of the descriptor limit.
    pub fn solo() -> Self {
        let budget = crate::fdlimit::FdBudget::for_limit(crate::fdlimit::current());
        ConnectionLimits { per_proxy: budget.proxy_total, shared: None }
    }
}

/// How long, after a plain request's response, the proxy still reads (and drops) what the client sends before it
/// closes the connection, so that the close does not reset the connection before the client read the response.
const LINGER: Duration = Duration::from_secs(2);

/// The most the proxy reads (and drops) while it lingers.
const LINGER_BYTES: usize = 1024 * 1024;

/// The longest chunk-size line of a chunked request body.
const MAX_CHUNK_LINE: usize = 4096;

/// How many refusals are remembered for tool responses.
const MAX_REMEMBERED: usize = 256;

/// Connections refused recently, numbered, so that a tool call can list those refused while it ran.
#[derive(Debug, Default)]
pub struct Refusals {
    next: AtomicU64,
    list: Mutex<VecDeque<(u64, Refusal)>>,
}

impl Refusals {
    /// The number of the next refusal: pass it to [`Refusals::since`] at the end of a call.
    pub fn mark(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }

    /// Remember a refused connection.
    fn record(&self, target: Refusal) {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        if list.len() == MAX_REMEMBERED {
            list.pop_front();
        }
        list.push_back((n, target));
    }

    /// The distinct connections refused since `mark`, in order.
    pub fn since(&self, mark: u64) -> Vec<Refusal> {
        let mut out: Vec<Refusal> = Vec::new();
        let list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        for (_, target) in list.iter().filter(|(n, _)| *n >= mark) {
            if !out.contains(target) {
                out.push(target.clone());
            }
        }
        out
    }

    /// The note a tool response carries for `refused` (none when empty): the one refusal note of every mode
    /// (`uexec_domain::denial::refusal_note`).
    pub fn note(refused: &[Refusal]) -> Option<String> {
        uexec_domain::denial::refusal_note(refused)
    }
}

/// Who decides whether a host off the allowlist may be reached for the rest of the session: the engine of the
/// proxy's commands (`Engine::network_access`, see [`EngineAsker`]), which asks the person through its approval
/// port under `on-request` and remembers the answer with the session's other approvals.
#[async_trait::async_trait]
pub trait DomainAsker: Send + Sync + std::fmt::Debug {
    /// Ask about `host` (normalised, ASCII) on `port`: `Some(true)` to allow it for the session, `Some(false)`
    /// to refuse it for the session, `None` when nobody can be asked now. Called for every connection to a
    /// host off the allowlist: the implementation remembers answers.
    async fn ask(&self, host: &str, port: u16, rules: &str) -> Option<bool>;
}

/// The [`DomainAsker`] of a proxy whose commands' engine is made after it (the engine's sandbox needs the
/// proxy's route): [`EngineAsker::bind`] hands it the engine; before that, and once the engine is gone, nobody
/// can be asked. It holds the engine weakly: a proxy still serving never keeps its client's engine (and so its
/// sessions) alive.
#[derive(Debug, Default)]
pub struct EngineAsker(std::sync::OnceLock<uexec_engine::WeakEngine>);

impl EngineAsker {
    /// The engine that decides from now on (the first one bound stays).
    pub fn bind(&self, engine: &uexec_engine::Engine) {
        let _ = self.0.set(engine.downgrade());
    }
}

#[async_trait::async_trait]
impl DomainAsker for EngineAsker {
    async fn ask(&self, host: &str, port: u16, rules: &str) -> Option<bool> {
        let engine = self.0.get()?.upgrade()?;
        engine.network_access(host, port, rules).await
    }
}

/// What the proxy needs: the rules, where refusals go, who may widen them.
#[derive(Debug)]
pub struct Proxy {
    /// Allowed and denied domains.
    pub rules: DomainRules,
    /// Refusals, for tool responses.
    pub refusals: Arc<Refusals>,
    /// The audit log, if any.
    pub audit: Option<Arc<AuditLog>>,
    /// Who decides about a host off the allowlist (none: refused at once).
    pub asker: Option<Arc<dyn DomainAsker>>,
}

impl Proxy {
    /// A proxy for `rules` that asks nobody.
    pub fn new(
        rules: DomainRules,
        audit: Option<Arc<AuditLog>>,
        asker: Option<Arc<dyn DomainAsker>>,
    ) -> Self {
        Proxy { rules, refusals: Arc::new(Refusals::default()), audit, asker }
    }

    /// The final verdict for a host the rules did not allow: a person's session answer (the asker remembers
    /// it, and asks now if nobody was asked yet and someone can be), else the rules'.
    async fn settle(&self, host: &str, port: u16, verdict: Verdict) -> Verdict {
        if verdict != Verdict::NotAllowed {
            return verdict;
        }
        let Some(asker) = &self.asker else {
            return verdict;
        };
        match asker.ask(&normal_host(host), port, &describe(&self.rules)).await {
            Some(true) => Verdict::Allowed,
            Some(false) | None => verdict,
        }
    }
}

/// A proxy (of one uexec process, or of one client of a server), made but not yet served.
#[derive(Debug)]
pub struct Pending {
    listener: std::net::TcpListener,
    proxy: Arc<Proxy>,
    limits: ConnectionLimits,
}

impl Pending {
    /// Where tool responses find the refusals.
    pub fn refusals(&self) -> Arc<Refusals> {
        self.proxy.refusals.clone()
    }

    /// The same proxy with `limits` on its connections (default: [`ConnectionLimits::solo`]).
    pub fn with_limits(mut self, limits: ConnectionLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Serve the listener on the current runtime until it stops, or until the returned task is aborted (which
    /// ends every connection it serves).
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(serve(self.listener, self.proxy, self.limits))
    }
}

/// The sandbox setup for `settings`, and in domain-allowlist mode the proxy (its route made, its listener to be
/// served with [`Pending::spawn`]).
pub fn prepare(
    settings: &Settings,
    audit: Option<Arc<AuditLog>>,
    asker: Option<Arc<dyn DomainAsker>>,
) -> anyhow::Result<(SandboxSetup, Option<Pending>)> {
    let copy_on_write =
        settings.copy_on_write_base.clone().map(|layers| (layers, settings.copy_on_write.clone()));
    let mut setup = SandboxSetup {
        hidden: settings.hidden.clone(),
        keychain: settings.macos_keychain,
        proxy: None,
        copy_on_write,
        tool_files: settings.tool_files.clone(),
    };
    let NetworkPolicy::Proxied(rules) = &settings.network else {
        return Ok((setup, None));
    };
    if settings.sandbox_policy.is_unrestricted() {
        return Ok((setup, None));
    }
    let no_proxy = uexec_domain::network::namespace_no_proxy(rules);
    let (route, listener) = crate::platform::proxy_route(describe(rules), no_proxy)?;
    let proxy = Arc::new(Proxy::new(rules.clone(), audit, asker));
    setup.proxy = Some(route);
    Ok((setup, Some(Pending { listener, proxy, limits: ConnectionLimits::solo() })))
}

/// The rules in words: `pypi.org, *.npmjs.org (denied: x.com)`.
pub fn describe(rules: &DomainRules) -> String {
    let list = |patterns: &[uexec_domain::network::DomainPattern]| {
        patterns.iter().map(|p| p.text.clone()).collect::<Vec<_>>().join(", ")
    };
    if rules.deny.is_empty() {
        list(&rules.allow)
    } else {
        format!("{} (denied: {})", list(&rules.allow), list(&rules.deny))
    }
}

/// Serve `listener` until the runtime stops or the task is aborted. Each connection is served on its own task,
/// owned by this one (aborting it ends them all); errors end only that connection.
pub async fn serve(listener: std::net::TcpListener, proxy: Arc<Proxy>, limits: ConnectionLimits) {
    let listener = match listener.set_nonblocking(true).and_then(|()| TcpListener::from_std(listener)) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!("the network proxy cannot listen: {e}");
            return;
        }
    };
    let own = Arc::new(tokio::sync::Semaphore::new(limits.per_proxy.max(1)));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // At most `per_proxy` at once (and what the shared bound leaves): more wait in the listen queue instead of
        // using up the server's descriptors.
        let Ok(slot) = own.clone().acquire_owned().await else {
            return;
        };
        let shared = match &limits.shared {
            Some(shared) => match shared.clone().acquire_owned().await {
                Ok(permit) => Some(permit),
                Err(_) => return,
            },
            None => None,
        };
        while connections.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((stream, _)) => {
                let proxy = proxy.clone();
                connections.spawn(async move {
                    let _slots = (slot, shared);
                    if let Err(e) = handle(stream, &proxy).await {
                        tracing::debug!("proxy connection ended: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("the network proxy cannot accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A parsed request head.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    /// `CONNECT` or not.
    connect: bool,
    /// The host, canonical.
    host: Host,
    /// The port.
    port: u16,
    /// For a plain request: the head to send upstream (origin form, the one `Host`, canonical framing,
    /// `Connection: close`, no hop-by-hop headers).
    forward: Vec<u8>,
    /// For a plain request: the body the head declares.
    body: Body,
}

/// The body of a plain request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// None (neither `Content-Length` nor `Transfer-Encoding`).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Why a head is not a proxy request (the `400` body).
#[derive(Debug, PartialEq, Eq)]
struct BadRequest(String);

/// Headers never forwarded: hop-by-hop ones (RFC 9110 7.6.1), `Host` (the proxy writes its own) and the framing
/// (written again, canonical).
const DROPPED: &[&str] =
    &["host", "connection", "keep-alive", "te", "trailer", "upgrade", "transfer-encoding", "content-length"];

/// True for a byte of a header name (an RFC 9110 token).
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parse a request head (without the final empty line).
fn parse_head(head: &str) -> Result<Request, BadRequest> {
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default();
    if !first.bytes().all(|b| (0x21..0x7f).contains(&b) || b == b' ') {
        return Err(BadRequest(format!("malformed request line {first:?}")));
    }
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest(format!("malformed request line {first:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(BadRequest(format!("unsupported version {version:?}")));
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target, None)?;
        return Ok(Request { connect: true, host, port, forward: Vec::new(), body: Body::Empty });
    }
    let Some(rest) =
        target.get(..7).filter(|scheme| scheme.eq_ignore_ascii_case("http://")).map(|_| &target[7..])
    else {
        return Err(BadRequest(format!(
            "this is uexec's network proxy: send CONNECT host:port or an absolute http:// URL, not {target:?}"
        )));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err(BadRequest(format!(
            "userinfo in the request target {target:?} is not accepted (send credentials in a header)"
        )));
    }
    let (host, port) = split_authority(authority, Some(80))?;
    let path = path.split('#').next().unwrap_or_default();
    let path = if path.is_empty() {
        "/".to_owned()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let mut headers: Vec<(&str, &str)> = Vec::new();
    for line in lines {
        let malformed = || BadRequest(format!("malformed header line {line:?}"));
        let (name, value) = line.split_once(':').ok_or_else(malformed)?;
        if name.is_empty() || !name.bytes().all(token_byte) {
            // Also a folded line (leading whitespace) and whitespace before the colon.
            return Err(malformed());
        }
        if value.chars().any(|c| c.is_ascii_control() && c != '\t') {
            return Err(malformed());
        }
        headers.push((name, value.trim_matches([' ', '\t'])));
    }
    let body = framing(&headers)?;
    let hop_by_hop: Vec<String> = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, value)| value.split(','))
        .map(|token| token.trim().to_ascii_lowercase())
        .collect();
    let host_header = if port == 80 { host.to_string() } else { host.authority(port) };
    let mut forward = format!("{method} {path} {version}\r\nHost: {host_header}\r\n");
    for (name, value) in &headers {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("proxy-") || DROPPED.contains(&lower.as_str()) || hop_by_hop.contains(&lower) {
            continue;
        }
        forward.push_str(&format!("{name}: {value}\r\n"));
    }
    match body {
        Body::Empty => {}
        Body::Length(n) => forward.push_str(&format!("Content-Length: {n}\r\n")),
        Body::Chunked => forward.push_str("Transfer-Encoding: chunked\r\n"),
    }
    forward.push_str("Connection: close\r\n\r\n");
    Ok(Request { connect: false, host, port, forward: forward.into_bytes(), body })
}

/// The body a request's headers declare: one `Content-Length` value (repeated identically at most), or
/// `Transfer-Encoding: chunked` alone; anything else (both, other codings, differing lengths) is refused, so the
/// upstream cannot read the body differently from the proxy.
fn framing(headers: &[(&str, &str)]) -> Result<Body, BadRequest> {
    let values = |wanted: &str| -> Vec<String> {
        headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .flat_map(|(_, value)| value.split(','))
            .map(|v| v.trim().to_ascii_lowercase())
            .collect()
    };
    let codings = values("transfer-encoding");
    let lengths = values("content-length");
    match (codings.as_slice(), lengths.as_slice()) {
        ([], []) => Ok(Body::Empty),
        ([only], []) if only == "chunked" => Ok(Body::Chunked),
        ([], [first, ..]) => {
            let valid = !first.is_empty() && first.len() <= 18 && first.bytes().all(|b| b.is_ascii_digit());
            match first.parse::<u64>() {
                Ok(n) if valid && lengths.iter().all(|l| l == first) => Ok(Body::Length(n)),
                _ => Err(BadRequest(format!("bad Content-Length {lengths:?}"))),
            }
        }
        (_, []) => Err(BadRequest(format!("unsupported Transfer-Encoding {codings:?} (only chunked)"))),
        _ => Err(BadRequest("both Transfer-Encoding and Content-Length".to_owned())),
    }
}

/// `host:port` (`[v6]:port`), the host canonical; `default` when the port is absent. An IPv6 address needs its
/// brackets (`::1:443` would be ambiguous).
fn split_authority(text: &str, default: Option<u16>) -> Result<(Host, u16), BadRequest> {
    let bad = || BadRequest(format!("bad host and port {text:?}"));
    let (host, port) = if text.starts_with('[') {
        match text.rsplit_once("]:") {
            Some((host, port)) => (&text[..host.len() + 1], Some(port)),
            None => (text, None),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(port) => parse_port(port).ok_or_else(bad)?,
        None => default.ok_or_else(bad)?,
    };
    if host.contains(':') && !host.starts_with('[') {
        return Err(bad());
    }
    let host = Host::parse(host).ok_or_else(|| {
        BadRequest(format!(
            "bad host {host:?}: not an ASCII host name or IP address (no userinfo, zone id or percent-encoding)"
        ))
    })?;
    Ok((host, port))
}

/// Serve one connection.
async fn handle(mut client: TcpStream, proxy: &Proxy) -> std::io::Result<()> {
    let (head, rest) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(Some(parts))) => parts,
        Ok(Ok(None)) => return respond(&mut client, 400, "uexec: request head missing or too long\n").await,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Ok(()),
    };
    let request = match parse_head(&head) {
        Ok(request) => request,
        Err(BadRequest(why)) => return respond(&mut client, 400, &format!("uexec: {why}\n")).await,
    };
    let (host, port) = (&request.host, request.port);
    let verdict = proxy.rules.decide_host(host, port);
    let verdict = proxy.settle(&host.to_string(), port, verdict).await;
    if verdict != Verdict::Allowed {
        return refuse(&mut client, proxy, host, port, &verdict).await;
    }
    let resolved = match host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => match resolve(name, port).await {
            Ok(found) => found,
            Err(why) => return respond(&mut client, 502, &format!("uexec: {why}\n")).await,
        },
    };
    let addresses = match proxy.rules.connectable(host, port, &resolved) {
        Ok(addresses) => addresses,
        Err(verdict) => return refuse(&mut client, proxy, host, port, &verdict).await,
    };
    let mut upstream = match connect(host, &addresses).await {
        Ok(stream) => stream,
        Err(why) => return respond(&mut client, 502, &format!("uexec: {why}\n")).await,
    };
    if !request.connect {
        return forward_plain(&mut client, &mut upstream, &request, rest).await;
    }
    client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await?;
    upstream.write_all(&rest).await?;
    relay(&mut client, &mut upstream, IDLE_TIMEOUT).await
}

/// Copy bytes both ways until both sides have ended, or until nothing moved for `idle` (a write that waits as
/// long counts as nothing moving): an idle tunnel does not hold the server's descriptors forever.
async fn relay(a: &mut TcpStream, b: &mut TcpStream, idle: Duration) -> std::io::Result<()> {
    let (mut a_read, mut a_write) = a.split();
    let (mut b_read, mut b_write) = b.split();
    let (mut a_buf, mut b_buf) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let (mut a_open, mut b_open) = (true, true);
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "the tunnel was idle too long");
    while a_open || b_open {
        tokio::select! {
            read = a_read.read(&mut a_buf), if a_open => {
                let n = read?;
                if n == 0 {
                    a_open = false;
                    let _ = b_write.shutdown().await;
                } else {
                    tokio::time::timeout(idle, b_write.write_all(&a_buf[..n])).await.map_err(|_| timed_out())??;
                }
            }
            read = b_read.read(&mut b_buf), if b_open => {
                let n = read?;
                if n == 0 {
                    b_open = false;
                    let _ = a_write.shutdown().await;
                } else {
                    tokio::time::timeout(idle, a_write.write_all(&b_buf[..n])).await.map_err(|_| timed_out())??;
                }
            }
            () = tokio::time::sleep(idle) => return Err(timed_out()),
        }
    }
    Ok(())
}

/// Refuse `host:port` for `verdict`: a `403` naming it, an audit record, an entry in the refusals.
async fn refuse(
    client: &mut TcpStream,
    proxy: &Proxy,
    host: &Host,
    port: u16,
    verdict: &Verdict,
) -> std::io::Result<()> {
    let target = host.authority(port);
    let reason = match verdict {
        Verdict::Denied(pattern) => format!("deny pattern {pattern}"),
        Verdict::DeniedAddress { pattern, address } => {
            format!("resolves to {}, deny pattern {pattern}", Host::Ip(*address))
        }
        Verdict::LocalOnly => "resolves only to local addresses".to_owned(),
        Verdict::Invalid => "not a host name or address".to_owned(),
        Verdict::NotAllowed | Verdict::Allowed => "not on the domain allowlist".to_owned(),
    };
    let allow = matches!(verdict, Verdict::NotAllowed | Verdict::Allowed).then(|| host.to_string());
    let refusal = Refusal::Connect { target: target.clone(), reason, allow };
    if let Some(audit) = &proxy.audit {
        let mut record = crate::audit::refusal_record(&refusal);
        record.insert("by".into(), json!("proxy"));
        audit.record(record);
    }
    proxy.refusals.record(refusal);
    tracing::info!(target = %target, "network proxy refused a connection");
    respond(client, 403, &refusal_text(&host.to_string(), port, verdict)).await
}

/// Forward one plain request: its head, exactly the body it declares (while the response is relayed, for
/// `Expect: 100-continue`), then the response until the upstream closes. What the client sends after the body is
/// never forwarded: it is read and dropped (when the client closes its side, so does the proxy towards the
/// upstream, as for a tunnel), and after the response for at most [`LINGER`] before the connection closes.
async fn forward_plain(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    request: &Request,
    rest: Vec<u8>,
) -> std::io::Result<()> {
    let (client_read, mut client_write) = client.split();
    let (mut upstream_read, mut upstream_write) = upstream.split();
    let mut body = tokio::io::BufReader::new(std::io::Cursor::new(rest).chain(client_read));
    {
        let send = async {
            upstream_write.write_all(&request.forward).await?;
            send_body(request.body, &mut body, &mut upstream_write).await?;
            tokio::io::copy(&mut body, &mut tokio::io::sink()).await?;
            upstream_write.shutdown().await
        };
        let receive = async {
            relay_response(&mut upstream_read, &mut client_write).await?;
            client_write.shutdown().await
        };
        tokio::pin!(send, receive);
        tokio::select! {
            received = &mut receive => received?,
            sent = &mut send => {
                sent?;
                receive.await?;
            }
        }
    }
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; 4096];
        let mut total = 0;
        while total < LINGER_BYTES {
            match body.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
    Ok(())
}

/// Relay the upstream's answer to a plain request until the upstream closes: interim (`1xx`) heads as they are,
/// the final head with `Connection: close` (and without the upstream's `Connection`, `Keep-Alive` and
/// `Proxy-Connection`), so that the client does not send another request on this connection (it would be dropped
/// unanswered: see [`forward_plain`]); then the rest as it comes. An answer that does not start with an HTTP/1
/// head is relayed untouched.
async fn relay_response<R, W>(from: &mut R, to: &mut W) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut from = tokio::io::BufReader::new(from);
    loop {
        let mut head: Vec<Vec<u8>> = Vec::new();
        let mut size = 0;
        loop {
            let mut line = Vec::new();
            let n = (&mut from).take((MAX_HEAD - size) as u64 + 1).read_until(b'\n', &mut line).await?;
            size += n;
            let ended = line.ends_with(b"\n");
            let blank = line == b"\r\n" || line == b"\n";
            if !ended || size > MAX_HEAD || (head.is_empty() && !line.starts_with(b"HTTP/1.")) {
                // Not a head this proxy reads: what was read and the rest go as they are.
                for part in head.iter().chain(std::iter::once(&line)) {
                    to.write_all(part).await?;
                }
                tokio::io::copy_buf(&mut from, to).await?;
                return Ok(());
            }
            if blank {
                break;
            }
            head.push(line);
        }
        let status = head[0].get(9..12).and_then(|code| std::str::from_utf8(code).ok()?.parse::<u16>().ok());
        let interim = status.is_some_and(|code| (100..200).contains(&code) && code != 101);
        let mut out = Vec::with_capacity(size + 32);
        for line in &head {
            let name = line.split(|b| *b == b':').next().unwrap_or_default().to_ascii_lowercase();
            let hop = [&b"connection"[..], b"keep-alive", b"proxy-connection"].contains(&name.as_slice());
            if !interim && hop {
                continue;
            }
            out.extend_from_slice(
                line.strip_suffix(b"\r\n").or_else(|| line.strip_suffix(b"\n")).unwrap_or(line),
            );
            out.extend_from_slice(b"\r\n");
        }
        if !interim {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        to.write_all(&out).await?;
        if !interim {
            break;
        }
    }
    tokio::io::copy_buf(&mut from, to).await?;
    Ok(())
}

/// Copy the request body `kind` from `from` to `to`: `Content-Length` bytes exactly, or a chunked body re-framed
/// (sizes in lower-case hex, extensions and trailers dropped). Ends with an error (and the request is dropped)
/// when the client's body ends early or is not valid chunked encoding.
async fn send_body<R, W>(kind: Body, from: &mut R, to: &mut W) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("request body: {what}"));
    match kind {
        Body::Empty => Ok(()),
        Body::Length(n) => copy_exact(from, to, n).await,
        Body::Chunked => loop {
            let line = read_line(from, MAX_CHUNK_LINE).await?;
            let size = line.split(|b| *b == b';').next().unwrap_or_default();
            let size = size.strip_suffix(b" ").unwrap_or(size);
            if size.is_empty() || size.len() > 15 || !size.iter().all(u8::is_ascii_hexdigit) {
                return Err(invalid("bad chunk size"));
            }
            let size = std::str::from_utf8(size)
                .ok()
                .and_then(|text| u64::from_str_radix(text, 16).ok())
                .ok_or_else(|| invalid("bad chunk size"))?;
            if size == 0 {
                let mut trailers = 0;
                while !read_line(from, MAX_HEAD).await?.is_empty() {
                    trailers += 1;
                    if trailers > 100 {
                        return Err(invalid("too many trailer lines"));
                    }
                }
                return to.write_all(b"0\r\n\r\n").await;
            }
            to.write_all(format!("{size:x}\r\n").as_bytes()).await?;
            copy_exact(from, to, size).await?;
            if !read_line(from, 0).await?.is_empty() {
                return Err(invalid("chunk data longer than its size"));
            }
            to.write_all(b"\r\n").await?;
        },
    }
}

/// Copy exactly `n` bytes.
async fn copy_exact<R, W>(from: &mut R, to: &mut W, n: u64) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let copied = tokio::io::copy_buf(&mut from.take(n), to).await?;
    if copied == n {
        Ok(())
    } else {
        Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "request body shorter than declared"))
    }
}

/// One line ending in CRLF, of at most `limit` bytes before it, without the CRLF; an error for a longer line,
/// a bare CR or LF, or the end of the stream.
async fn read_line<R: AsyncBufRead + Unpin>(from: &mut R, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    from.take(limit as u64 + 2).read_until(b'\n', &mut line).await?;
    match line.strip_suffix(b"\r\n") {
        Some(text) if !text.contains(&b'\r') && !text.contains(&b'\n') => Ok(text.to_vec()),
        _ => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "request body: malformed line")),
    }
}

/// The host as the rules normalise it (for records and notes).
fn normal_host(host: &str) -> String {
    Host::parse(host).map_or_else(|| host.to_owned(), |h| h.to_string())
}

/// Read up to the end of the head: the head text and the bytes already read after it. `None` when the
/// connection ends first or the head exceeds [`MAX_HEAD`].
async fn read_head(client: &mut TcpStream) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        let searched_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf[searched_from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = searched_from + at;
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            return Ok(Some((head, buf[end + 4..].to_vec())));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

/// Write a short response with `body` and close.
async fn respond(client: &mut TcpStream, status: u16, body: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(response.as_bytes()).await?;
    client.shutdown().await
}

/// The addresses `name` resolves to (the system's resolver, once).
async fn resolve(name: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    #[cfg(test)]
    if let Some(found) = tests::fake_dns(name) {
        return Ok(found);
    }
    let found = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((name, port)))
        .await
        .map_err(|_| format!("resolving {name} timed out"))?
        .map_err(|e| format!("cannot resolve {name}: {e}"))?;
    Ok(found.map(|addr| addr.ip()).collect())
}

/// Connect to each of `addresses` in turn (the ones the rules checked, nothing else).
async fn connect(host: &Host, addresses: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = format!("{host} has no address");
    for addr in addresses {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = format!("cannot connect to {host} ({addr}): {e}"),
            Err(_) => last = format!("connecting to {host} ({addr}) timed out"),
        }
    }
    Err(last)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use uexec_domain::network::DomainPattern;

    use super::*;

    /// Names under `.rebind.test` the tests answer for (the resolver is the system's for every other name):
    /// each lookup takes the next answer, the last one repeating; and how many lookups there were.
    static FAKE_DNS: Mutex<Vec<FakeName>> = Mutex::new(Vec::new());

    /// A name, its answers in turn, the lookups so far.
    type FakeName = (String, Vec<Vec<IpAddr>>, usize);

    pub(super) fn fake_dns(name: &str) -> Option<Vec<IpAddr>> {
        let mut fakes = FAKE_DNS.lock().unwrap();
        let (_, answers, lookups) = fakes.iter_mut().find(|(n, _, _)| n == name)?;
        *lookups += 1;
        Some(answers.get(*lookups - 1).or(answers.last()).cloned().unwrap_or_default())
    }

    fn fake_dns_lookups(name: &str) -> usize {
        FAKE_DNS.lock().unwrap().iter().find(|(n, _, _)| n == name).map_or(0, |(_, _, lookups)| *lookups)
    }

    fn rules(allow: &[&str], deny: &[&str]) -> DomainRules {
        DomainRules {
            allow: allow.iter().map(|p| DomainPattern::parse(p).unwrap()).collect(),
            deny: deny.iter().map(|p| DomainPattern::parse(p).unwrap()).collect(),
        }
    }

    fn forward_of(head: &str) -> String {
        String::from_utf8(parse_head(head).unwrap().forward).unwrap()
    }

    #[test]
    fn connect_and_absolute_form_heads_parse() {
        let r = parse_head("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443").unwrap();
        assert_eq!((r.connect, r.host.to_string(), r.port), (true, "pypi.org".to_owned(), 443));
        let r = parse_head("CONNECT [::1]:8443 HTTP/1.1").unwrap();
        assert_eq!((r.host.to_string(), r.port), ("[::1]".to_owned(), 8443));
        let r = parse_head("CONNECT 0xc6120009:443 HTTP/1.1").unwrap();
        assert_eq!(r.host.to_string(), "198.18.0.9");
        let r = parse_head(
            "GET HTTP://Example.COM./a?b=1#frag HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\n\
             Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nProxy-Authorization: x\r\nAccept: */*",
        )
        .unwrap();
        assert_eq!(
            (r.connect, r.host.to_string(), r.port, r.body),
            (false, "example.com".to_owned(), 80, Body::Empty)
        );
        assert_eq!(
            String::from_utf8(r.forward).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = parse_head("GET http://example.com:8080?q HTTP/1.0").unwrap();
        assert_eq!(r.port, 8080);
        assert!(
            String::from_utf8(r.forward)
                .unwrap()
                .starts_with("GET /?q HTTP/1.0\r\nHost: example.com:8080\r\n")
        );
        for bad in [
            "GET /path HTTP/1.1",
            "CONNECT pypi.org HTTP/1.1",
            "CONNECT :443 HTTP/1.1",
            "GET",
            "CONNECT a:0 HTTP/1.1",
            "CONNECT a:+443 HTTP/1.1",
            "CONNECT ::1:443 HTTP/1.1",
            "CONNECT [fe80::1%25eth0]:443 HTTP/1.1",
            "CONNECT %31%32%37.0.0.1:443 HTTP/1.1",
            "CONNECT user@pypi.org:443 HTTP/1.1",
            "GET https://x/ HTTP/1.1",
            "GET http://x/ HTTP/2",
            "GET http://user@example.com/ HTTP/1.1",
            "GET http://allowed.test@forbidden.test/ HTTP/1.1",
            "GET http://forbidden.test\\@allowed.test/ HTTP/1.1",
            "GET http://ex%61mple.com/ HTTP/1.1",
            "GET http://[::ffff:127.0.0.1%lo]/ HTTP/1.1",
            "GET http://a.com/x\nHost:b.com HTTP/1.1",
            "GET\thttp://a.com/ HTTP/1.1",
        ] {
            assert!(parse_head(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_host_header_names_the_host_the_rule_checked() {
        // RFC 9112 3.2.2: a proxy replaces whatever Host the client wrote with the request line's authority.
        for extra in [
            "Host: forbidden.test",
            "Host: forbidden.test\r\nHost: other.test",
            "Host: user@forbidden.test",
            "HOST:forbidden.test",
            "X-Before: 1\r\nhost: forbidden.test:80",
        ] {
            let forward = forward_of(&format!("GET http://allowed.test/ HTTP/1.1\r\n{extra}\r\nAccept: */*"));
            assert!(forward.starts_with("GET / HTTP/1.1\r\nHost: allowed.test\r\n"), "{forward}");
            assert!(!forward.to_ascii_lowercase().contains("forbidden"), "{forward}");
            assert_eq!(forward.to_ascii_lowercase().matches("\r\nhost:").count(), 1, "{forward}");
        }
        // No Host at all (HTTP/1.0): one is added.
        assert!(
            forward_of("GET http://[::1]:8080/ HTTP/1.0")
                .starts_with("GET / HTTP/1.0\r\nHost: [::1]:8080\r\n")
        );
        // Lines a server could read as another header are refused, not forwarded.
        for bad in [
            "X-A: 1\r\n Host: forbidden.test",
            "X-A: 1\r\n\tHost: forbidden.test",
            "Host : forbidden.test",
            "X-A: 1\nHost: forbidden.test",
            "X-A: 1\rHost: forbidden.test",
            "Host\u{0}: forbidden.test",
            "no colon here",
            ": empty name",
        ] {
            let head = format!("GET http://allowed.test/ HTTP/1.1\r\n{bad}");
            assert!(parse_head(&head).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_body_is_framed_once_and_unambiguously() {
        let head = |headers: &str| format!("POST http://a.test/ HTTP/1.1\r\n{headers}");
        assert_eq!(parse_head(&head("Content-Length: 5")).unwrap().body, Body::Length(5));
        assert_eq!(
            parse_head(&head("Content-Length: 5\r\nContent-Length: 5")).unwrap().body,
            Body::Length(5)
        );
        assert_eq!(parse_head(&head("Transfer-Encoding: Chunked")).unwrap().body, Body::Chunked);
        assert!(forward_of(&head("Content-Length: 007")).contains("\r\nContent-Length: 7\r\n"));
        for bad in [
            "Content-Length: 5\r\nTransfer-Encoding: chunked",
            "Content-Length: 5\r\nContent-Length: 6",
            "Content-Length: 5, 6",
            "Content-Length: -1",
            "Content-Length: +5",
            "Content-Length: 0x5",
            "Content-Length: ",
            "Transfer-Encoding: gzip, chunked",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
            "Transfer-Encoding: identity",
        ] {
            assert!(parse_head(&head(bad)).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn chunked_bodies_are_reframed_and_end_at_the_last_chunk() {
        let mut out = Vec::new();
        let mut from: &[u8] =
            b"5;ext=1\r\nhello\r\nA \r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        send_body(Body::Chunked, &mut from, &mut out).await.unwrap();
        assert_eq!(out, b"5\r\nhello\r\na\r\n0123456789\r\n0\r\n\r\n");
        assert_eq!(from, b"GET / HTTP/1.1\r\n\r\n");
        for bad in [
            &b"5\r\nhelloX\r\n0\r\n\r\n"[..],
            b"5\nhello\r\n0\r\n\r\n",
            b"-5\r\nhello\r\n0\r\n\r\n",
            b"ffffffffffffffffff\r\n",
            b"5\r\nhel",
            b"\r\n",
        ] {
            let mut from = bad;
            assert!(send_body(Body::Chunked, &mut from, &mut Vec::new()).await.is_err(), "{bad:?}");
        }
        let mut from: &[u8] = b"abc";
        assert!(send_body(Body::Length(4), &mut from, &mut Vec::new()).await.is_err());
    }

    #[tokio::test]
    async fn the_final_response_head_says_the_connection_closes() {
        let relay = |upstream: &'static str| async move {
            let mut out = Vec::new();
            relay_response(&mut upstream.as_bytes(), &mut out).await.unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            relay(
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
                 Content-Length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\n\r\n"
            )
            .await,
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n\
             hiHTTP/1.1 200 OK\r\n\r\n"
        );
        assert_eq!(
            relay("HTTP/1.0 204 No\nProxy-Connection: x\n\n").await,
            "HTTP/1.0 204 No\r\nConnection: close\r\n\r\n"
        );
        // Not an HTTP/1 head: untouched.
        for raw in ["SSH-2.0-x\r\n\r\nrest", "", "HTTP/1.1 200 OK\r\nno end", "HTTP/2 200\r\n\r\n"] {
            assert_eq!(relay(raw).await, raw);
        }
    }

    /// A refusal of `target` (`host:port`) as off the allowlist.
    fn off_list(target: &str) -> Refusal {
        let host = target.rsplit_once(':').map_or(target, |(host, _)| host);
        Refusal::Connect {
            target: target.to_owned(),
            reason: "not on the domain allowlist".into(),
            allow: Some(host.to_owned()),
        }
    }

    /// The targets of `refusals`.
    fn targets(refusals: &[Refusal]) -> Vec<String> {
        refusals
            .iter()
            .filter_map(|r| match r {
                Refusal::Connect { target, .. } => Some(target.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn refusals_are_listed_per_call_and_capped() {
        let refusals = Refusals::default();
        refusals.record(off_list("a.com:443"));
        let mark = refusals.mark();
        assert!(refusals.since(mark).is_empty());
        refusals.record(off_list("b.com:443"));
        refusals.record(off_list("b.com:443"));
        assert_eq!(targets(&refusals.since(mark)), vec!["b.com:443".to_owned()]);
        assert_eq!(targets(&refusals.since(0)), vec!["a.com:443".to_owned(), "b.com:443".to_owned()]);
        for i in 0..1000 {
            refusals.record(off_list(&format!("h{i}:1")));
        }
        assert_eq!(refusals.since(0).len(), MAX_REMEMBERED);
        let note = Refusals::note(&[off_list("x.com:443")]).unwrap();
        assert!(
            note.starts_with(
                "[uexec] sandbox refused: connection to x.com:443 (not on the domain allowlist)"
            ) && note.contains("--allow-domain x.com"),
            "{note}"
        );
        assert_eq!(Refusals::note(&[]), None);
    }

    #[test]
    fn a_poisoned_refusal_list_still_records_and_lists() {
        let refusals = Refusals::default();
        refusals.record(off_list("a.com:443"));
        std::thread::scope(|scope| {
            let holder = scope.spawn(|| {
                let _list = refusals.list.lock().unwrap();
                panic!("a holder panics");
            });
            assert!(holder.join().is_err());
        });
        assert!(refusals.list.is_poisoned());
        refusals.record(off_list("b.com:443"));
        assert_eq!(refusals.since(0), vec![off_list("a.com:443"), off_list("b.com:443")]);
    }

    /// What the front end served: per request, the `Host` values and the body it received, and the address it
    /// was reached at.
    type Served = Arc<Mutex<Vec<String>>>;

    /// A shared front end on `127.0.0.1:P` and `127.0.0.2:P`, as lax as some are: it serves every request it
    /// reads on a connection, pipelined ones too and after `Connection: close`, answering each with
    /// `hosts=[...] body=...` (what it received) and recording the same with ` at=ADDRESS`.
    async fn front_end() -> (u16, Served) {
        let mut tries = 0;
        let (first, second) = loop {
            let first = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = first.local_addr().unwrap().port();
            match TcpListener::bind(("127.0.0.2", port)).await {
                Ok(second) => break (first, second),
                // The port is taken on 127.0.0.2: another one (a few tries; 127.0.0.2 itself must work).
                Err(_) if tries < 20 => tries += 1,
                Err(e) => panic!("cannot listen on 127.0.0.2: {e}"),
            }
        };
        let port = first.local_addr().unwrap().port();
        let served: Served = Arc::default();
        for listener in [first, second] {
            let served = served.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve_requests(stream, served.clone()));
                }
            });
        }
        (port, served)
    }

    async fn serve_requests(stream: TcpStream, served: Served) {
        let at = stream.local_addr().unwrap().ip();
        let mut reader = tokio::io::BufReader::new(stream);
        loop {
            let mut lines = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" {
                    break;
                }
                lines.push(line.trim_end().to_owned());
            }
            let header = |name: &str| -> Vec<String> {
                lines
                    .iter()
                    .filter_map(|l| l.split_once(':'))
                    .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.trim().to_owned())
                    .collect()
            };
            let mut body = Vec::new();
            if let Some(n) = header("content-length").first() {
                body.resize(n.parse().unwrap(), 0);
                reader.read_exact(&mut body).await.unwrap();
            } else if !header("transfer-encoding").is_empty() {
                loop {
                    let mut size = String::new();
                    reader.read_line(&mut size).await.unwrap();
                    let size = usize::from_str_radix(size.trim(), 16).unwrap();
                    let mut chunk = vec![0; size + 2];
                    reader.read_exact(&mut chunk).await.unwrap();
                    if size == 0 {
                        break;
                    }
                    body.extend_from_slice(&chunk[..size]);
                }
            }
            let answer = format!("hosts={:?} body={}", header("host"), String::from_utf8_lossy(&body));
            served.lock().unwrap().push(format!("{answer} at={at}"));
            let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}", answer.len());
            if reader.get_mut().write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    /// A proxy for `rules` on loopback: its port and refusals.
    fn start_proxy(rules: DomainRules) -> (u16, Arc<Refusals>) {
        let proxy = Arc::new(Proxy::new(rules, None, None));
        let refusals = proxy.refusals.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(serve(listener, proxy, ConnectionLimits { per_proxy: 4, shared: None }));
        (port, refusals)
    }

    /// Send `bytes` to the proxy, close the sending side, and read everything until the proxy closes.
    async fn exchange(proxy: u16, bytes: &str) -> String {
        let run = async {
            let mut c = TcpStream::connect(("127.0.0.1", proxy)).await.unwrap();
            c.write_all(bytes.as_bytes()).await.unwrap();
            c.shutdown().await.unwrap();
            let mut answer = Vec::new();
            c.read_to_end(&mut answer).await.unwrap();
            String::from_utf8_lossy(&answer).into_owned()
        };
        tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .unwrap_or_else(|_| panic!("no answer in time to {bytes:?}"))
    }

    /// Every spelling of 127.0.0.1 a resolver or the kernel reads as that address, as a `printf` pattern for the
    /// last byte (the twin, 127.0.0.2, is the same spelling with 2).
    fn spellings(last: u8) -> Vec<String> {
        vec![
            format!("127.0.0.{last}"),
            format!("127.0.0.{last}."),
            format!("0x7f00000{last}"),
            format!("0X7F00000{last}"),
            format!("0x7f.0.0.0x{last}"),
            format!("0177.0.0.0{last}"),
            format!("{}", 0x7f00_0000_u32 + u32::from(last)),
            format!("127.{last}"),
            format!("127.0.{last}"),
            format!("[::ffff:127.0.0.{last}]"),
            format!("[::ffff:7f00:{last}]"),
            format!("[0:0:0:0:0:FFFF:7F00:000{last}]"),
        ]
    }

    #[tokio::test]
    async fn a_denied_address_is_refused_in_every_spelling_and_its_twin_is_reached() {
        let (upstream, served) = front_end().await;
        for pattern in ["127.0.0.1", "0x7f000001", "[::ffff:7f00:1]", "127.0.0.0/31"] {
            let (proxy, refusals) = start_proxy(rules(&["*"], &[pattern]));
            for (denied, twin) in spellings(1).into_iter().zip(spellings(2)) {
                let answer = exchange(
                    proxy,
                    &format!("CONNECT {denied}:{upstream} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"),
                )
                .await;
                assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{pattern} {denied}: {answer}");
                assert!(answer.contains(&format!("127.0.0.1:{upstream} refused")), "{answer}");
                let answer = exchange(
                    proxy,
                    &format!(
                        "GET http://{denied}:{upstream}/ HTTP/1.1\r\nHost: 127.0.0.2:{upstream}\r\n\r\n"
                    ),
                )
                .await;
                assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{pattern} {denied}: {answer}");
                assert_eq!(targets(&refusals.since(0)), vec![format!("127.0.0.1:{upstream}")]);

                let answer = exchange(
                    proxy,
                    &format!("CONNECT {twin}:{upstream} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n"),
                )
                .await;
                assert!(answer.starts_with("HTTP/1.1 200 Connection Established"), "{twin}: {answer}");
                assert!(answer.ends_with("hosts=[\"t\"] body="), "{twin}: {answer}");
                let answer =
                    exchange(proxy, &format!("GET http://{twin}:{upstream}/ HTTP/1.1\r\n\r\n")).await;
                assert!(
                    answer.ends_with(&format!("hosts=[\"127.0.0.2:{upstream}\"] body=")),
                    "{twin}: {answer}"
                );
            }
        }
        // Nothing reached the denied address: every request served came through the twin.
        let served = served.lock().unwrap().clone();
        assert_eq!(served.len(), 4 * 12 * 2, "{served:?}");
        assert!(served.iter().all(|s| s.ends_with(" at=127.0.0.2")), "{served:?}");
    }

    #[tokio::test]
    async fn a_name_resolving_to_a_denied_address_is_refused_and_otherwise_reached() {
        let (upstream, _served) = front_end().await;
        let allowed = [format!("localhost:{upstream}"), format!("127.0.0.1:{upstream}")];
        let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
        // `localhost` resolves to 127.0.0.1 (from /etc/hosts): denied in any spelling, the name is refused.
        let (proxy, refusals) = start_proxy(rules(&allowed, &["2130706433"]));
        for name in ["localhost", "LocalHost.", "LOCALHOST"] {
            let answer = exchange(proxy, &format!("GET http://{name}:{upstream}/ HTTP/1.1\r\n\r\n")).await;
            assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{name}: {answer}");
            assert!(
                answer.contains("resolves to 127.0.0.1") && answer.contains("deny pattern 127.0.0.1"),
                "{answer}"
            );
            let answer = exchange(proxy, &format!("CONNECT {name}:{upstream} HTTP/1.1\r\n\r\n")).await;
            assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{name}: {answer}");
        }
        assert_eq!(targets(&refusals.since(0)), vec![format!("localhost:{upstream}")]);
        // The twin: the same rules denying 127.0.0.2 instead; the name reaches the front end, named as itself.
        let (proxy, _) = start_proxy(rules(&allowed, &["127.0.0.2"]));
        let answer = exchange(
            proxy,
            &format!("GET http://LocalHost.:{upstream}/ HTTP/1.1\r\nHost: forbidden.test\r\n\r\n"),
        )
        .await;
        assert!(answer.ends_with(&format!("hosts=[\"localhost:{upstream}\"] body=")), "{answer}");
        // A name leads to a local address only when an allow rule names that address.
        let (proxy, _) = start_proxy(rules(&[&format!("localhost:{upstream}")], &[]));
        let answer = exchange(proxy, &format!("GET http://localhost:{upstream}/ HTTP/1.1\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{answer}");
        assert!(answer.contains("resolves only to loopback"), "{answer}");
    }

    #[tokio::test]
    async fn the_connection_goes_to_the_address_checked_and_a_rebinding_answer_changes_nothing() {
        let (upstream, served) = front_end().await;
        let name = "a.rebind.test";
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        // The first answer is allowed (127.0.0.2, named by an allow rule), every later one is denied (127.0.0.1).
        FAKE_DNS.lock().unwrap().push((
            name.to_owned(),
            vec![vec![ip("127.0.0.2")], vec![ip("127.0.0.1")]],
            0,
        ));
        let allow = [format!("{name}:{upstream}"), format!("127.0.0.2:{upstream}")];
        let (proxy, _) = start_proxy(rules(&[&allow[0], &allow[1]], &["127.0.0.1"]));
        let answer =
            exchange(proxy, &format!("GET http://{name}:{upstream}/ HTTP/1.1\r\nHost: x\r\n\r\n")).await;
        assert!(answer.ends_with(&format!("hosts=[\"{name}:{upstream}\"] body=")), "{answer}");
        // One lookup, and the connection went to its answer (a second lookup would have said 127.0.0.1).
        assert_eq!(fake_dns_lookups(name), 1);
        assert_eq!(
            served.lock().unwrap().clone(),
            vec![format!("hosts=[\"{name}:{upstream}\"] body= at=127.0.0.2")]
        );
        // The next request sees the new answer, and is refused for it.
        let answer = exchange(proxy, &format!("CONNECT {name}:{upstream} HTTP/1.1\r\n\r\n")).await;
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden") && answer.contains("resolves to 127.0.0.1"),
            "{answer}"
        );
        assert_eq!(fake_dns_lookups(name), 2);
        assert_eq!(served.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn the_upstream_gets_the_host_the_rule_allowed_and_one_request_only() {
        let (upstream, served) = front_end().await;
        let (proxy, _) = start_proxy(rules(&[&format!("127.0.0.2:{upstream}")], &[]));
        let target = format!("http://127.0.0.2:{upstream}");
        let host = format!("127.0.0.2:{upstream}");
        // The Host the command wrote (one, several, with userinfo) is replaced by the request line's.
        for headers in
            ["Host: forbidden.test", "Host: forbidden.test\r\nHost: x.test", "Host: u@forbidden.test", ""]
        {
            let answer = exchange(
                proxy,
                &format!("GET {target}/ HTTP/1.1\r\n{headers}\r\n\r\n").replace("\r\n\r\n\r\n", "\r\n\r\n"),
            )
            .await;
            assert!(answer.starts_with("HTTP/1.1 200 OK"), "{headers}: {answer}");
            assert!(answer.ends_with(&format!("hosts=[\"{host}\"] body=")), "{headers}: {answer}");
        }
        // A second request on the connection (pipelined, or smuggled after the declared body) never reaches the
        // upstream the first was checked for.
        let second = "GET http://127.0.0.1/ HTTP/1.1\r\nHost: forbidden.test\r\n\r\n";
        for first in [
            format!("GET {target}/ HTTP/1.1\r\nHost: a\r\n\r\n"),
            format!("POST {target}/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"),
            format!("POST {target}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
            format!("GET {target}/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
        ] {
            served.lock().unwrap().clear();
            let answer = exchange(proxy, &format!("{first}{second}")).await;
            assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 1, "{first}: {answer}");
            assert!(answer.contains("\r\nConnection: close\r\n\r\n"), "{answer}");
            let served = served.lock().unwrap().clone();
            assert_eq!(served.len(), 1, "{first}: {served:?}");
            assert!(served[0].starts_with(&format!("hosts=[\"{host}\"]")), "{served:?}");
            assert!(!served[0].contains("forbidden"), "{served:?}");
        }
        assert_eq!(served.lock().unwrap().clone(), vec![format!("hosts=[\"{host}\"] body= at=127.0.0.2")]);
        // Ambiguous framing is refused before anything is sent.
        served.lock().unwrap().clear();
        let answer = exchange(
            proxy,
            &format!("POST {target}/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{second}"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request"), "{answer}");
        assert!(served.lock().unwrap().is_empty());
    }
    /// A proxy for nothing (every host refused at once), serving with `limits`, and its port.
    fn refusing_proxy(limits: ConnectionLimits) -> u16 {
        let rules =
            DomainRules { allow: vec![DomainPattern::parse("allowed.invalid").unwrap()], deny: vec![] };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(serve(listener, Arc::new(Proxy::new(rules, None, None)), limits));
        port
    }

    /// Send a CONNECT to a refused host on a new connection: the answer's first line, or `None` when none came
    /// within `wait`.
    async fn ask(port: u16, wait: Duration) -> Option<String> {
        let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        c.write_all(b"CONNECT refused.invalid:443 HTTP/1.1\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        match tokio::time::timeout(wait, c.read_to_string(&mut answer)).await {
            Ok(_) => Some(answer.lines().next().unwrap_or_default().to_owned()),
            Err(_) => None,
        }
    }

    #[tokio::test]
    async fn a_proxy_at_its_quota_serves_no_more_but_leaves_the_shared_bound_to_the_others() {
        let shared = Arc::new(tokio::sync::Semaphore::new(3));
        let limits = ConnectionLimits { per_proxy: 2, shared: Some(shared) };
        let (x, y) = (refusing_proxy(limits.clone()), refusing_proxy(limits));
        // X's commands hold two connections without a request head.
        let held: Vec<TcpStream> = hold(x, 2).await;
        // X's third waits for its quota; Y is served meanwhile.
        let waiting = tokio::spawn(ask(x, Duration::from_secs(60)));
        // (Several of Y's, one after the other: time enough for X's third to be served, were it not held back.)
        for _ in 0..5 {
            let answer = ask(y, Duration::from_secs(60)).await;
            assert_eq!(answer.as_deref(), Some("HTTP/1.1 403 Forbidden"));
        }
        assert!(!waiting.is_finished(), "X's third connection was served beyond its quota");
        // Once X lets one go, its third is served.
        drop(held);
        assert_eq!(waiting.await.unwrap().as_deref(), Some("HTTP/1.1 403 Forbidden"));
    }

    async fn hold(port: u16, n: usize) -> Vec<TcpStream> {
        let mut held = Vec::new();
        for _ in 0..n {
            held.push(TcpStream::connect(("127.0.0.1", port)).await.unwrap());
        }
        held
    }

    #[tokio::test]
    async fn an_idle_tunnel_is_closed_and_a_busy_one_is_not() {
        async fn pair() -> (TcpStream, TcpStream) {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let near = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
            let (far, _) = listener.accept().await.unwrap();
            (near, far)
        }
        let idle = Duration::from_secs(2);
        // Busy: a byte every 100 ms for longer than the idle bound, then both ends close.
        let ((mut a, mut a_far), (mut b, mut b_far)) = (pair().await, pair().await);
        let relayed = tokio::spawn(async move { relay(&mut a_far, &mut b_far, idle).await });
        for _ in 0..40 {
            a.write_all(b"x").await.unwrap();
            let mut byte = [0u8; 1];
            b.read_exact(&mut byte).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!relayed.is_finished(), "a busy tunnel was closed");
        drop((a, b));
        assert!(relayed.await.unwrap().is_ok());
        // Idle: nothing moves, and the relay ends by itself.
        let ((_a, mut a_far), (_b, mut b_far)) = (pair().await, pair().await);
        let ended = tokio::time::timeout(Duration::from_secs(60), relay(&mut a_far, &mut b_far, idle)).await;
        let error = ended.expect("the idle tunnel stayed open").unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
    }
}
