//! The network proxy of the domain-allowlist mode, served by uexec itself outside the sandbox.
//!
//! Sandboxed commands reach it as `http://127.0.0.1:PORT` (on Linux inside their loopback-only network
//! namespace, where the listener was created; on macOS on the host's loopback, the only address the Seatbelt
//! profile lets them reach). Per connection it reads one request head (at most [`MAX_HEAD`] bytes):
//! - `CONNECT host:port` (TLS and any other tunnel): checked, then `200` and the bytes relayed both ways;
//! - an absolute-form request (`GET http://host/path HTTP/1.1`, plain HTTP): checked, rewritten to origin form
//!   with `Connection: close` and without `Proxy-*` headers, sent on, and the bytes relayed both ways;
//! - anything else: `400`.
//!
//! The check is `uexec_domain::network::DomainRules::decide` on the host as written. A refused host gets a `403`
//! whose body names it and the setting that allows it, an audit record (`network_refused`), and an entry in
//! [`Refusals`], from which each tool call's response lists the hosts refused while it ran. The proxy resolves
//! names itself (commands have no DNS) and does not connect a name to a loopback, link-local, multicast or
//! unspecified address (DNS answers pointing at the host's own services or a cloud metadata endpoint); an
//! allowed IP literal is connected as written.
//!
//! Connections are bounded ([`ConnectionLimits`]): a proxy serves its quota at once (more wait in its listen
//! queue), under a bound it may share with the other proxies of a server (one per HTTP client); a head must
//! arrive within [`HEAD_TIMEOUT`], and a tunnel without a byte either way for [`IDLE_TIMEOUT`] is closed.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uexec_domain::network::{DomainRules, Host, NetworkPolicy, Verdict, refusal_text};

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

/// How many refusals are remembered for tool responses.
const MAX_REMEMBERED: usize = 256;

/// Hosts refused recently, numbered, so that a tool call can list those refused while it ran.
#[derive(Debug, Default)]
pub struct Refusals {
    next: AtomicU64,
    list: Mutex<VecDeque<(u64, String)>>,
}

impl Refusals {
    /// The number of the next refusal: pass it to [`Refusals::since`] at the end of a call.
    pub fn mark(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }

    /// Remember a refused `host:port`.
    fn record(&self, target: String) {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut list) = self.list.lock() {
            if list.len() == MAX_REMEMBERED {
                list.pop_front();
            }
            list.push_back((n, target));
        }
    }

    /// The distinct targets refused since `mark`, in order.
    pub fn since(&self, mark: u64) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        if let Ok(list) = self.list.lock() {
            for (_, target) in list.iter().filter(|(n, _)| *n >= mark) {
                if !out.contains(target) {
                    out.push(target.clone());
                }
            }
        }
        out
    }

    /// The note a tool response carries for `targets` (none when empty).
    pub fn note(targets: &[String]) -> Option<String> {
        (!targets.is_empty()).then(|| {
            format!(
                "[uexec] Network: refused {} (not on the domain allowlist; allow with --allow-domain DOMAIN or \
                 [network] allow in the config)",
                targets.join(", ")
            )
        })
    }
}

/// Who can be asked whether a host off the allowlist may be reached for the rest of the session (the person,
/// through the MCP client, under `on-request`).
#[async_trait::async_trait]
pub trait DomainAsker: Send + Sync + std::fmt::Debug {
    /// Ask about `host` (normalised, ASCII) on `port`: `Some(true)` to allow it for the session, `Some(false)`
    /// to refuse it for the session, `None` when nobody can be asked now.
    async fn ask(&self, host: &str, port: u16, rules: &str) -> Option<bool>;
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
    /// Who is asked about a host off the allowlist (none: refused at once).
    pub asker: Option<Arc<dyn DomainAsker>>,
    /// Hosts a person allowed (`true`) or refused (`false`) for this session.
    pub answered: Mutex<Vec<(String, bool)>>,
    /// One question at a time (connections to the same host often come in bursts).
    pub asking: tokio::sync::Mutex<()>,
}

impl Proxy {
    /// A proxy for `rules` that asks nobody.
    pub fn new(
        rules: DomainRules,
        audit: Option<Arc<AuditLog>>,
        asker: Option<Arc<dyn DomainAsker>>,
    ) -> Self {
        Proxy {
            rules,
            refusals: Arc::new(Refusals::default()),
            audit,
            asker,
            answered: Mutex::new(Vec::new()),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    /// What a person already answered about `host`.
    fn answer_for(&self, host: &str) -> Option<bool> {
        self.answered.lock().ok()?.iter().find(|(h, _)| h == host).map(|(_, allowed)| *allowed)
    }

    /// The final verdict for a host the rules did not allow: a person's session answer (asked now if nobody was
    /// asked yet and someone can be), else the rules'.
    async fn settle(&self, host: &str, port: u16, verdict: Verdict) -> Verdict {
        if verdict != Verdict::NotAllowed {
            return verdict;
        }
        let host = normal_host(host);
        let Some(asker) = &self.asker else {
            return verdict;
        };
        if let Some(answer) = self.answer_for(&host) {
            return if answer { Verdict::Allowed } else { verdict };
        }
        let _one_at_a_time = self.asking.lock().await;
        if let Some(answer) = self.answer_for(&host) {
            return if answer { Verdict::Allowed } else { verdict };
        }
        match asker.ask(&host, port, &describe(&self.rules)).await {
            Some(answer) => {
                if let Ok(mut answered) = self.answered.lock() {
                    answered.push((host, answer));
                }
                if answer { Verdict::Allowed } else { verdict }
            }
            None => verdict,
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
    let mut setup = SandboxSetup { hidden: settings.hidden.clone(), proxy: None, copy_on_write };
    let NetworkPolicy::Proxied(rules) = &settings.network else {
        return Ok((setup, None));
    };
    if settings.sandbox_policy.is_unrestricted() {
        return Ok((setup, None));
    }
    let (route, listener) = crate::platform::proxy_route(describe(rules))?;
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
    /// The host as written (brackets kept for IPv6).
    host: String,
    /// The port.
    port: u16,
    /// For a plain request: the head to send upstream (origin form, `Connection: close`, no `Proxy-*`).
    forward: Vec<u8>,
}

/// Why a head is not a proxy request (the `400` body).
#[derive(Debug, PartialEq, Eq)]
struct BadRequest(String);

/// Parse a request head (without the final empty line).
fn parse_head(head: &str) -> Result<Request, BadRequest> {
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default();
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
        return Ok(Request { connect: true, host, port, forward: Vec::new() });
    }
    let Some(rest) = target.strip_prefix("http://").or_else(|| target.strip_prefix("HTTP://")) else {
        return Err(BadRequest(format!(
            "this is uexec's network proxy: send CONNECT host:port or an absolute http:// URL, not {target:?}"
        )));
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (host, port) = split_authority(authority, Some(80))?;
    let path = if path.is_empty() {
        "/".to_owned()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let mut forward = format!("{method} {path} {version}\r\n");
    for line in lines {
        let name = line.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
        if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
            continue;
        }
        forward.push_str(line);
        forward.push_str("\r\n");
    }
    forward.push_str("Connection: close\r\n\r\n");
    Ok(Request { connect: false, host, port, forward: forward.into_bytes() })
}

/// `host:port` (`[v6]:port`); `default` when the port is absent.
fn split_authority(text: &str, default: Option<u16>) -> Result<(String, u16), BadRequest> {
    let bad = || BadRequest(format!("bad host and port {text:?}"));
    let (host, port) = if text.starts_with('[') {
        match text.rsplit_once("]:") {
            Some((host, port)) => (format!("{host}]"), Some(port)),
            None => (text.to_owned(), None),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (text.to_owned(), None),
        }
    };
    let port = match port {
        Some(port) => port.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?,
        None => default.ok_or_else(bad)?,
    };
    if host.is_empty() {
        return Err(bad());
    }
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
    let verdict = proxy.rules.decide(&request.host, request.port);
    let verdict = proxy.settle(&request.host, request.port, verdict).await;
    if verdict != Verdict::Allowed {
        let target = format!("{}:{}", normal_host(&request.host), request.port);
        proxy.refusals.record(target.clone());
        if let Some(audit) = &proxy.audit
            && let serde_json::Value::Object(record) = json!({
                "event": "network_refused",
                "host": normal_host(&request.host),
                "port": request.port,
                "reason": match &verdict {
                    Verdict::Denied(pattern) => format!("deny pattern {pattern}"),
                    Verdict::Invalid => "invalid host".to_owned(),
                    _ => "not on the allowlist".to_owned(),
                },
            })
        {
            audit.record(record);
        }
        tracing::info!(target = %target, "network proxy refused a connection");
        return respond(&mut client, 403, &refusal_text(&request.host, request.port, &verdict)).await;
    }
    let mut upstream = match connect(&request.host, request.port).await {
        Ok(stream) => stream,
        Err(why) => return respond(&mut client, 502, &format!("uexec: {why}\n")).await,
    };
    if request.connect {
        client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await?;
    } else {
        upstream.write_all(&request.forward).await?;
    }
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

/// The host as the rules normalise it (for records and notes).
fn normal_host(host: &str) -> String {
    match Host::parse(host) {
        Some(Host::Name(name)) => name,
        Some(Host::Ip(IpAddr::V6(ip))) => format!("[{ip}]"),
        Some(Host::Ip(ip)) => ip.to_string(),
        None => host.to_owned(),
    }
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

/// True for an address a name must not lead to.
fn forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.to_ipv4_mapped().is_some_and(|v4| forbidden(IpAddr::V4(v4)))
        }
    }
}

/// Resolve and connect (each address in turn).
async fn connect(host: &str, port: u16) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = match Host::parse(host) {
        Some(Host::Ip(ip)) => vec![SocketAddr::new(ip, port)],
        _ => {
            let found = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((host, port)))
                .await
                .map_err(|_| format!("resolving {host} timed out"))?
                .map_err(|e| format!("cannot resolve {host}: {e}"))?;
            let all: Vec<SocketAddr> = found.collect();
            let usable: Vec<SocketAddr> = all.iter().copied().filter(|a| !forbidden(a.ip())).collect();
            if usable.is_empty() && !all.is_empty() {
                return Err(format!(
                    "{host} resolves only to local, link-local or multicast addresses, which the proxy does not \
                     connect a name to"
                ));
            }
            usable
        }
    };
    let mut last = format!("{host} has no address");
    for addr in addrs {
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

    #[test]
    fn connect_and_absolute_form_heads_parse() {
        let r = parse_head("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443").unwrap();
        assert_eq!((r.connect, r.host.as_str(), r.port), (true, "pypi.org", 443));
        let r = parse_head("CONNECT [::1]:8443 HTTP/1.1").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("[::1]", 8443));
        let r = parse_head(
            "GET http://user@example.com/a?b=1 HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\n\
             Connection: keep-alive\r\nProxy-Authorization: x\r\nAccept: */*",
        )
        .unwrap();
        assert_eq!((r.connect, r.host.as_str(), r.port), (false, "example.com", 80));
        assert_eq!(
            String::from_utf8(r.forward).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = parse_head("GET http://example.com:8080?q HTTP/1.0").unwrap();
        assert_eq!(r.port, 8080);
        assert!(String::from_utf8(r.forward).unwrap().starts_with("GET /?q HTTP/1.0\r\n"));
        for bad in [
            "GET /path HTTP/1.1",
            "CONNECT pypi.org HTTP/1.1",
            "CONNECT :443 HTTP/1.1",
            "GET",
            "CONNECT a:0 HTTP/1.1",
            "GET https://x/ HTTP/1.1",
            "GET http://x/ HTTP/2",
        ] {
            assert!(parse_head(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_never_lead_to_local_addresses() {
        for local in
            ["127.0.0.1", "0.0.0.0", "169.254.169.254", "::1", "fe80::1", "::ffff:127.0.0.1", "224.0.0.1"]
        {
            assert!(forbidden(local.parse().unwrap()), "{local}");
        }
        for public in ["151.101.0.223", "10.1.2.3", "2a04:4e42::223"] {
            assert!(!forbidden(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn refusals_are_listed_per_call_and_capped() {
        let refusals = Refusals::default();
        refusals.record("a.com:443".into());
        let mark = refusals.mark();
        assert!(refusals.since(mark).is_empty());
        refusals.record("b.com:443".into());
        refusals.record("b.com:443".into());
        assert_eq!(refusals.since(mark), vec!["b.com:443".to_owned()]);
        assert_eq!(refusals.since(0), vec!["a.com:443".to_owned(), "b.com:443".to_owned()]);
        for i in 0..1000 {
            refusals.record(format!("h{i}:1"));
        }
        assert_eq!(refusals.since(0).len(), MAX_REMEMBERED);
        let note = Refusals::note(&["x.com:443".into()]).unwrap();
        assert!(note.starts_with("[uexec] Network: refused x.com:443") && note.contains("--allow-domain"));
        assert_eq!(Refusals::note(&[]), None);
    }

    #[tokio::test]
    async fn a_refused_host_gets_a_403_naming_it_and_an_allowed_one_is_tunnelled() {
        // An upstream on the host's loopback, allowed as an IP literal (names never lead to loopback).
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_port = upstream.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = upstream.accept().await.unwrap();
            s.write_all(b"hello from upstream").await.unwrap();
        });
        let rules = DomainRules {
            allow: vec![DomainPattern::parse(&format!("127.0.0.1:{upstream_port}")).unwrap()],
            deny: vec![],
        };
        let proxy = Arc::new(Proxy::new(rules, None, None));
        let refusals = proxy.refusals.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(serve(listener, proxy, ConnectionLimits { per_proxy: 4, shared: None }));

        let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        c.write_all(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{answer}");
        assert!(answer.contains("--allow-domain example.com"), "{answer}");
        assert_eq!(refusals.since(0), vec!["example.com:443".to_owned()]);

        let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        c.write_all(format!("CONNECT 127.0.0.1:{upstream_port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, "HTTP/1.1 200 Connection Established\r\n\r\nhello from upstream");
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
