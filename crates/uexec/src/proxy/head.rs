//! What the allowlist proxy reads from a sandboxed command before it decides: the request head (parsed by
//! `httparse`, the parser hyper uses, under uexec's own rules) and the framing of a plain request's body (copied
//! re-framed).
//!
//! uexec's rules on top of `httparse`, which accepts more (as a server may): at most [`MAX_HEAD`] bytes and
//! [`MAX_HEADERS`] header lines; every line ends in CRLF (a bare CR or LF is refused: one upstream could read it
//! as the end of a line and another not); the request target is ASCII; a folded line (obs-fold) and whitespace
//! before a colon are refused (as `httparse` does in a request); and the body has one unambiguous framing
//! ([`framing`]). The request then goes upstream rewritten: origin form, one `Host`, canonical framing,
//! `Connection: close`, no hop-by-hop headers.
//!
//! The fuzz targets `proxy_head` and `proxy_body` feed it (`crate::fuzz_bodies`).

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use uexec_domain::network::{Host, parse_port};

/// The longest request head read, its final empty line included.
pub const MAX_HEAD: usize = 64 * 1024;

/// The most header lines a request head may have (hyper's default too).
pub const MAX_HEADERS: usize = 100;

/// The longest chunk-size line of a chunked request body.
pub const MAX_CHUNK_LINE: usize = 4096;

/// The most trailer lines after the last chunk of a chunked request body.
pub const MAX_TRAILERS: usize = 100;

/// A parsed request head.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// `CONNECT` or not.
    pub connect: bool,
    /// The host, canonical.
    pub host: Host,
    /// The port.
    pub port: u16,
    /// For a plain request: the head to send upstream (origin form, the one `Host`, canonical framing,
    /// `Connection: close`, no hop-by-hop headers).
    pub forward: Vec<u8>,
    /// For a plain request: the body the head declares.
    pub body: Body,
}

/// The body of a plain request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// None (neither `Content-Length` nor `Transfer-Encoding`).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Why a head is not a proxy request (the `400` body).
#[derive(Debug, PartialEq, Eq)]
pub struct BadRequest(pub String);

/// Headers never forwarded: hop-by-hop ones (RFC 9110 7.6.1), `Host` (the proxy writes its own) and the framing
/// (written again, canonical).
const DROPPED: &[&str] =
    &["host", "connection", "keep-alive", "te", "trailer", "upgrade", "transfer-encoding", "content-length"];

/// The length of the head at the start of `buf` (its final empty line included), when `buf` holds all of it;
/// the bytes before `searched` were looked at already (none of them ends the head).
pub fn head_end(buf: &[u8], searched: usize) -> Option<usize> {
    let from = searched.saturating_sub(3).min(buf.len());
    buf[from..].windows(4).position(|w| w == b"\r\n\r\n").map(|at| from + at + 4)
}

/// Read up to the end of the head: the head (its final empty line included) and the bytes already read after
/// it. `None` when the stream ends first or the head is longer than [`MAX_HEAD`].
pub async fn read_head<R: AsyncRead + Unpin>(from: &mut R) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        let searched = buf.len();
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf, searched) {
            if end > MAX_HEAD {
                return Ok(None);
            }
            let rest = buf.split_off(end);
            return Ok(Some((buf, rest)));
        }
        if buf.len() >= MAX_HEAD {
            return Ok(None);
        }
    }
}

/// The line of `head` (without its CRLF) that holds the byte at `at`, for messages.
fn line_at(head: &[u8], at: usize) -> String {
    let at = at.min(head.len());
    let start = head[..at].windows(2).rposition(|w| w == b"\r\n").map_or(0, |p| p + 2);
    let end = head[at..].windows(2).position(|w| w == b"\r\n").map_or(head.len(), |p| at + p);
    String::from_utf8_lossy(&head[start..end.max(start)]).into_owned()
}

/// Where `head` has a CR not followed by LF, or an LF not preceded by CR.
fn bare_line_end(head: &[u8]) -> Option<usize> {
    head.iter().enumerate().position(|(i, b)| match b {
        b'\r' => head.get(i + 1) != Some(&b'\n'),
        b'\n' => i == 0 || head[i - 1] != b'\r',
        _ => false,
    })
}

/// True for a byte of a header name (an RFC 9110 token).
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The first header line (after the request line) that is not `name: value` with a token name and a value
/// without control characters but tab: what `httparse` refused, named in the `400`.
fn bad_header_line(head: &[u8]) -> Option<String> {
    let text = head.strip_suffix(b"\r\n\r\n").unwrap_or(head);
    let mut lines = text.split(|b| *b == b'\n').map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    lines.next();
    lines
        .find(|line| {
            let Some(colon) = line.iter().position(|b| *b == b':') else { return true };
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            name.is_empty()
                || !name.iter().copied().all(token_byte)
                || value.iter().any(|b| (b.is_ascii_control() && *b != b'\t') || *b == 0x7f)
        })
        .map(|line| String::from_utf8_lossy(line).into_owned())
}

/// `bytes` without spaces and tabs at either end.
fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| !matches!(b, b' ' | b'\t')).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !matches!(b, b' ' | b'\t')).map_or(start, |p| p + 1);
    &bytes[start..end.max(start)]
}

/// Parse a request head, its final empty line included (as [`read_head`] returns it).
pub fn parse_head(head: &[u8]) -> Result<Request, BadRequest> {
    let first_end = head.windows(2).position(|w| w == b"\r\n").unwrap_or(head.len());
    let first = String::from_utf8_lossy(&head[..first_end]).into_owned();
    let malformed_line = || BadRequest(format!("malformed request line {first:?}"));
    if let Some(at) = bare_line_end(head) {
        return Err(if at < first_end {
            malformed_line()
        } else {
            BadRequest(format!("malformed header line {:?}", line_at(head, at)))
        });
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut slots);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        Ok(_) => return Err(malformed_line()),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(BadRequest(format!("more than {MAX_HEADERS} header lines")));
        }
        Err(httparse::Error::Version) => {
            let version = first.rsplit(' ').next().unwrap_or_default();
            return Err(BadRequest(format!("unsupported version {version:?}")));
        }
        Err(_) => {
            return Err(match bad_header_line(&head[first_end..]) {
                Some(line) => BadRequest(format!("malformed header line {line:?}")),
                None => malformed_line(),
            });
        }
    }
    let (Some(method), Some(target), Some(minor)) = (parsed.method, parsed.path, parsed.version) else {
        return Err(malformed_line());
    };
    if !target.is_ascii() {
        return Err(malformed_line());
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
    let headers: Vec<(&str, &[u8])> = parsed.headers.iter().map(|h| (h.name, trim(h.value))).collect();
    let body = framing(&headers)?;
    let hop_by_hop: Vec<String> = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, value)| {
            String::from_utf8_lossy(value).split(',').map(str::to_owned).collect::<Vec<_>>()
        })
        .map(|token| token.trim().to_ascii_lowercase())
        .collect();
    let host_header = if port == 80 { host.to_string() } else { host.authority(port) };
    let mut forward = format!("{method} {path} HTTP/1.{minor}\r\nHost: {host_header}\r\n").into_bytes();
    for (name, value) in &headers {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("proxy-") || DROPPED.contains(&lower.as_str()) || hop_by_hop.contains(&lower) {
            continue;
        }
        forward.extend_from_slice(name.as_bytes());
        forward.extend_from_slice(b": ");
        forward.extend_from_slice(value);
        forward.extend_from_slice(b"\r\n");
    }
    match body {
        Body::Empty => {}
        Body::Length(n) => forward.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes()),
        Body::Chunked => forward.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
    }
    forward.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Request { connect: false, host, port, forward, body })
}

/// The body a request's headers declare: one `Content-Length` value (repeated identically at most), or
/// `Transfer-Encoding: chunked` alone; anything else (both, other codings, differing lengths) is refused, so the
/// upstream cannot read the body differently from the proxy (request smuggling).
pub fn framing(headers: &[(&str, &[u8])]) -> Result<Body, BadRequest> {
    let values = |wanted: &str| -> Vec<String> {
        headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .flat_map(|(_, value)| {
                String::from_utf8_lossy(value)
                    .split(',')
                    .map(|v| v.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
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
pub fn split_authority(text: &str, default: Option<u16>) -> Result<(Host, u16), BadRequest> {
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

/// Copy the request body `kind` from `from` to `to`: `Content-Length` bytes exactly, or a chunked body re-framed
/// (sizes in lower-case hex, extensions and trailers dropped). Ends with an error (and the request is dropped)
/// when the client's body ends early or is not valid chunked encoding.
pub async fn send_body<R, W>(kind: Body, from: &mut R, to: &mut W) -> std::io::Result<()>
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
                    if trailers > MAX_TRAILERS {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;

    /// `head` (without its final empty line) parsed.
    fn parse(head: &str) -> Result<Request, BadRequest> {
        parse_head(format!("{head}\r\n\r\n").as_bytes())
    }

    /// The output of a future over in-memory readers and writers, which never waits.
    fn poll_ready<T>(future: impl Future<Output = std::io::Result<T>>) -> Option<T> {
        match std::pin::pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(output) => output.ok(),
            Poll::Pending => panic!("an in-memory read waited"),
        }
    }

    fn forward_of(head: &str) -> String {
        String::from_utf8(parse(head).unwrap().forward).unwrap()
    }

    #[test]
    fn connect_and_absolute_form_heads_parse() {
        let r = parse("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443").unwrap();
        assert_eq!((r.connect, r.host.to_string(), r.port), (true, "pypi.org".to_owned(), 443));
        let r = parse("CONNECT [::1]:8443 HTTP/1.1").unwrap();
        assert_eq!((r.host.to_string(), r.port), ("[::1]".to_owned(), 8443));
        let r = parse("CONNECT 0xc6120009:443 HTTP/1.1").unwrap();
        assert_eq!(r.host.to_string(), "198.18.0.9");
        let r = parse(
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
        let r = parse("GET http://example.com:8080?q HTTP/1.0").unwrap();
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
            assert!(parse(bad).is_err(), "{bad:?}");
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
            assert!(parse(&head).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_body_is_framed_once_and_unambiguously() {
        let head = |headers: &str| format!("POST http://a.test/ HTTP/1.1\r\n{headers}");
        assert_eq!(parse(&head("Content-Length: 5")).unwrap().body, Body::Length(5));
        assert_eq!(parse(&head("Content-Length: 5\r\nContent-Length: 5")).unwrap().body, Body::Length(5));
        assert_eq!(parse(&head("Transfer-Encoding: Chunked")).unwrap().body, Body::Chunked);
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
            assert!(parse(&head(bad)).is_err(), "{bad:?}");
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

    #[test]
    fn a_head_ends_at_its_first_empty_line_and_no_later_than_max_head() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody", 0), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r", 0), None);
        // Found when the four bytes straddle two reads.
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\n", 17), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n", 0), None, "bare LFs end no head");
        let read = |input: Vec<u8>| {
            let mut from = input.as_slice();
            poll_ready(read_head(&mut from)).unwrap()
        };
        let (head, rest) = read(b"CONNECT a.test:443 HTTP/1.1\r\n\r\nhello".to_vec()).unwrap();
        assert_eq!(
            (head.as_slice(), rest.as_slice()),
            (&b"CONNECT a.test:443 HTTP/1.1\r\n\r\n"[..], &b"hello"[..])
        );
        // Exactly MAX_HEAD bytes is a head; one more is not, nor a stream that ends first.
        let sized = |len: usize| {
            let mut head = b"GET http://a.test/ HTTP/1.1\r\nX: ".to_vec();
            head.resize(len - 4, b'x');
            head.extend_from_slice(b"\r\n\r\n");
            head
        };
        assert_eq!(read(sized(MAX_HEAD)).map(|(head, _)| head.len()), Some(MAX_HEAD));
        assert!(parse_head(&sized(MAX_HEAD)).is_ok());
        assert_eq!(read(sized(MAX_HEAD + 1)), None);
        assert_eq!(read(vec![b'x'; 3 * MAX_HEAD]), None);
        assert_eq!(read(b"GET http://a.test/ HTTP/1.1\r\n".to_vec()), None);
    }

    #[test]
    fn at_most_max_headers_header_lines() {
        let head = |n: usize| {
            let lines: String = (0..n).map(|i| format!("X-{i}: {i}\r\n")).collect();
            format!("GET http://a.test/ HTTP/1.1\r\n{lines}")
        };
        let forward = forward_of(head(MAX_HEADERS).trim_end());
        assert_eq!(forward.matches("\r\nX-").count(), MAX_HEADERS, "{forward}");
        let Err(BadRequest(why)) = parse(head(MAX_HEADERS + 1).trim_end()) else {
            panic!("too many accepted")
        };
        assert_eq!(why, format!("more than {MAX_HEADERS} header lines"));
    }

    #[test]
    fn a_bad_request_line_or_header_line_is_named_in_the_refusal() {
        let why = |head: &str| parse(head).unwrap_err().0;
        assert_eq!(
            why("GET  http://a.test/ HTTP/1.1"),
            "malformed request line \"GET  http://a.test/ HTTP/1.1\""
        );
        assert_eq!(
            why("GET http://a.test/ HTTP/1.1 "),
            "malformed request line \"GET http://a.test/ HTTP/1.1 \""
        );
        assert_eq!(why("GET http://a.test/ HTTP/2.0"), "unsupported version \"HTTP/2.0\"");
        assert_eq!(why("GET http://a.test/ HTTP/1.2"), "unsupported version \"HTTP/1.2\"");
        assert_eq!(
            why("GET http://a.test/\u{e9} HTTP/1.1"),
            "malformed request line \"GET http://a.test/\u{e9} HTTP/1.1\""
        );
        assert_eq!(
            why("\u{1}GET http://a.test/ HTTP/1.1"),
            "malformed request line \"\\u{1}GET http://a.test/ HTTP/1.1\""
        );
        assert_eq!(why(""), "malformed request line \"\"");
        assert_eq!(
            why("GET http://a.test/ HTTP/1.1\r\nX-A: 1\r\nX-B : 2\r\nX-C: 3"),
            "malformed header line \"X-B : 2\""
        );
        assert_eq!(
            why("GET http://a.test/ HTTP/1.1\r\nX-A: 1\nX-B: 2"),
            "malformed header line \"X-A: 1\\nX-B: 2\""
        );
        assert_eq!(
            why("GET http://a.test/ HTTP/1.1\r\nX-A: a\u{7f}b"),
            "malformed header line \"X-A: a\\u{7f}b\""
        );
        // A request line split by a bare LF is the request line's fault.
        assert!(why("GET http://a.test/ HTTP/1.1\nX-A: 1").starts_with("malformed request line"));
        // Empty lines before the request line are skipped (RFC 9112 2.2).
        assert!(parse("\r\nGET http://a.test/ HTTP/1.1").is_ok());
    }

    #[test]
    fn a_folded_header_line_is_refused_in_every_position() {
        for folded in [
            "X-A: 1\r\n continued",
            "X-A: 1\r\n\tcontinued",
            "X-A: 1\r\n Host: forbidden.test",
            " X-A: 1",
            "\tX-A: 1",
            "X-A: 1\r\n \r\nX-B: 2",
        ] {
            let head = format!("GET http://allowed.test/ HTTP/1.1\r\n{folded}");
            assert!(parse(&head).unwrap_err().0.starts_with("malformed header line"), "{folded:?}");
        }
    }

    #[test]
    fn header_values_are_forwarded_as_their_bytes() {
        // obs-text (bytes from 0x80 on) passes as it came; leading and trailing whitespace does not.
        let head = b"GET http://a.test/ HTTP/1.1\r\nX-A: \t caf\xe9 \t\r\nX-B:\r\n\r\n";
        let forward = parse_head(head).unwrap().forward;
        assert_eq!(
            forward,
            b"GET / HTTP/1.1\r\nHost: a.test\r\nX-A: caf\xe9\r\nX-B: \r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn duplicate_and_conflicting_framing_headers() {
        let head = |headers: &str| format!("POST http://a.test/ HTTP/1.1\r\n{headers}");
        // The same length repeated (in one line or several) is one length; any difference is refused.
        for same in [
            "Content-Length: 5\r\ncontent-length: 5",
            "Content-Length: 5, 5",
            "Content-Length:5\r\nContent-Length: 5 ",
        ] {
            assert_eq!(parse(&head(same)).map(|r| r.body), Ok(Body::Length(5)), "{same:?}");
            assert_eq!(forward_of(&head(same)).matches("Content-Length").count(), 1);
        }
        for smuggled in [
            "Content-Length: 5\r\nContent-Length: 50",
            "Content-Length: 5\r\nContent-Length: 05",
            "Content-Length: 5\r\nTransfer-Encoding: chunked",
            "Transfer-Encoding: chunked\r\nContent-Length: 5",
            "Transfer-Encoding: chunked\r\nContent-Length: 0",
            "Transfer-Encoding: chunked, identity",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip",
            "Transfer-Encoding: xchunked",
            "Transfer-Encoding: \"chunked\"",
            "Content-Length: 99999999999999999999",
            "Content-Length: 1_000",
        ] {
            assert!(parse(&head(smuggled)).is_err(), "{smuggled:?}");
        }
        let Err(BadRequest(why)) = parse(&head("Content-Length: 5\r\nTransfer-Encoding: chunked")) else {
            panic!("smuggling accepted")
        };
        assert_eq!(why, "both Transfer-Encoding and Content-Length");
    }

    #[test]
    fn chunked_framing_edges() {
        let reframe = |input: &[u8]| {
            let mut from = input;
            let mut out = Vec::new();
            poll_ready(send_body(Body::Chunked, &mut from, &mut out)).map(|()| (out, from.to_vec()))
        };
        // Upper-case hex, leading zeros, an extension with a quoted string: one canonical framing.
        let (out, rest) = reframe(b"00A;name=\"x;y\"\r\n0123456789\r\n000\r\n\r\nnext").unwrap();
        assert_eq!((out.as_slice(), rest.as_slice()), (&b"a\r\n0123456789\r\n0\r\n\r\n"[..], &b"next"[..]));
        // The re-framed body reads the same again.
        assert_eq!(reframe(&out).unwrap(), (out.clone(), Vec::new()));
        // A chunk-size line at the limit is read; one byte more is not.
        let mut long = vec![b'0'; 14];
        long.push(b'1');
        long.push(b';');
        long.resize(MAX_CHUNK_LINE, b'x');
        long.extend_from_slice(b"\r\nz\r\n0\r\n\r\n");
        assert_eq!(reframe(&long).unwrap().0, b"1\r\nz\r\n0\r\n\r\n");
        long.insert(20, b'x');
        assert!(reframe(&long).is_none());
        // Trailers: up to MAX_TRAILERS lines, dropped.
        let trailers = |n: usize| {
            let mut body = b"0\r\n".to_vec();
            for i in 0..n {
                body.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
            }
            body.extend_from_slice(b"\r\n");
            body
        };
        assert_eq!(reframe(&trailers(MAX_TRAILERS)).unwrap().0, b"0\r\n\r\n");
        assert!(reframe(&trailers(MAX_TRAILERS + 1)).is_none());
        // One space before the CRLF is tolerated (what some clients send); at the start it is not.
        assert_eq!(reframe(b"5 \r\nhello\r\n0\r\n\r\n").unwrap().0, b"5\r\nhello\r\n0\r\n\r\n");
        for bad in [
            &b" 5\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhello\r\n0\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"1000000000000000\r\n",
            b"5\r\nhello\r\n0\r\nX: 1\n\r\n",
        ] {
            assert!(reframe(bad).is_none(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
