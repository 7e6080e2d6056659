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
//! The head is parsed, and the body's framing read, in [`head`]: `httparse` under uexec's own rules.
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

pub(crate) mod head;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uexec_domain::denial::Refusal;
use uexec_domain::network::{DomainRules, Host, NetworkPolicy, Verdict, refusal_text};

use self::head::{BadRequest, MAX_HEAD, Request, parse_head, read_head, send_body};
use crate::audit::AuditLog;
use crate::platform::SandboxSetup;
use crate::settings::Settings;

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

    /// The note a tool response carries for `refused` (none when empty): the model's few words of every mode
    /// (`uexec_domain::denial::model_note`).
    pub fn note(refused: &[Refusal]) -> Option<String> {
        uexec_domain::denial::model_note(refused).map(|note| format!("[uexec] {note}"))
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
        leftovers: crate::settings::sandbox_leftovers(settings),
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

/// The host as the rules normalise it (for records and notes).
fn normal_host(host: &str) -> String {
    Host::parse(host).map_or_else(|| host.to_owned(), |h| h.to_string())
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
        assert_eq!(note, "[uexec] not on the domain allowlist: x.com:443");
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
