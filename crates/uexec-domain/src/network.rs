//! Network by domain: the policy (`off`, `on`, or through uexec's proxy with allowed and denied domains), the
//! matching rules for hosts and for the addresses they resolve to, the environment that points commands at the
//! proxy, and the text of a refusal.
//!
//! The rules are decided twice per request, both times here (pure: the caller does the I/O and passes what it
//! found), and the proxy connects to exactly the addresses the second decision returned:
//! 1. [`DomainRules::decide_host`] on the host as the request named it, in its one canonical form ([`Host`]);
//! 2. [`DomainRules::connectable`] on the addresses that host stands for (for a name, what the resolver answered;
//!    for an address, itself), before any connection is made.
//!
//! Hosts ([`Host::parse`]): a host is an IP address or a name, never both.
//! - Every spelling a resolver reads as an IPv4 address is that address: the dotted quad and `inet_aton`'s other
//!   forms (`3323068425`, `0xc6120009`, `0306.022.0.011`, `198.18.9`, `198.9`, `0xC6.0x12.0.9`), with or
//!   without one trailing dot. A host whose last label starts with a digit is an IPv4 address or invalid, never a
//!   name (no top-level domain starts with a digit): no name is ever given to a resolver that would read it as a
//!   number.
//! - An IPv6 address, bracketed or not (`[::1]`, `::1`); an IPv4-mapped one (`::ffff:198.18.0.9`,
//!   `[::ffff:c612:9]`) *is* its IPv4 address, since a connection to it reaches that address.
//! - A name is ASCII only (an internationalised name must be written in its `xn--` form), lower-cased, without
//!   one trailing dot (`Example.COM.` is `example.com`).
//! - Anything else is invalid and refused: zone ids (`fe80::1%eth0`), percent-encoding, userinfo, spaces,
//!   control characters, IPv6 with an octal or hex IPv4 tail, numbers that overflow.
//!
//! Patterns ([`DomainPattern::parse`]) are parsed the same way, so `--deny-domain 0xc6120009` is the rule
//! `198.18.0.9`:
//! - `example.com` matches that name only; `*.example.com` every name below it (`a.example.com`,
//!   `a.b.example.com`) but not `example.com` itself; `*` every host and address;
//! - an address (`10.0.0.1`, `[::1]`, any spelling above) matches that address; a range `10.0.0.0/8`,
//!   `fd00::/8` every address in it; name patterns never match an address;
//! - a pattern may name a port (`example.com:8443`, `[::1]:8080`; not a range): it then matches that port only.
//!
//! Decisions:
//! - the deny list wins over the allow list;
//! - a deny pattern naming an address or range also matches an IPv6 address that carries that IPv4 address
//!   for routing: NAT64's well-known prefix (`64:ff9b::c612:9`) and the IPv4-compatible form (`::198.18.0.9`);
//! - a name is allowed by a name pattern (or `*`), an address by an address pattern (or `*`): allowing
//!   `10.0.0.5` does not allow a name that resolves to it, and allowing a name allows the addresses it resolves to;
//! - a name that resolves to any address a deny pattern matches is refused (all of it, not only that address);
//! - a name is never connected to a loopback, link-local (cloud metadata; also AWS's `fd00:ec2::254` and
//!   Alibaba's `100.100.100.200`), multicast, broadcast or unspecified address (DNS answers pointing at the
//!   host's own services) unless an allow pattern names that address or its range (not `*`): a name then
//!   reaches nothing its address could not reach written as an address;
//! - a deny list of names cannot stop another name for the same address: `--deny-domain evil.example` does not
//!   refuse `other.example` that resolves to the same address. Deny the address (or range) to stop every name
//!   and spelling for it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The network a sandboxed command gets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum NetworkPolicy {
    /// No network (the default): only unix sockets.
    #[default]
    Off,
    /// The host's network, unfiltered.
    On,
    /// Only uexec's proxy, which lets through what the rules allow.
    Proxied(DomainRules),
}

impl NetworkPolicy {
    /// True when commands reach any network (directly or through the proxy).
    pub fn has_access(&self) -> bool {
        !matches!(self, NetworkPolicy::Off)
    }

    /// `off`, `on` or `allowlist`, for messages.
    pub fn mode_str(&self) -> &'static str {
        match self {
            NetworkPolicy::Off => "off",
            NetworkPolicy::On => "on",
            NetworkPolicy::Proxied(_) => "allowlist",
        }
    }
}

/// Allowed and denied host patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct DomainRules {
    /// Hosts the proxy connects to (`*` for every host).
    pub allow: Vec<DomainPattern>,
    /// Hosts it never connects to, whatever `allow` says.
    pub deny: Vec<DomainPattern>,
}

/// What the rules say about one host (or the addresses it resolved to) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Connect.
    Allowed,
    /// No allow pattern matches.
    NotAllowed,
    /// A deny pattern matches the host (its text).
    Denied(String),
    /// The host resolves to an address a deny pattern matches.
    DeniedAddress {
        /// The deny pattern's text.
        pattern: String,
        /// The address it matched.
        address: IpAddr,
    },
    /// A name resolves only to local addresses (loopback, link-local, ...) that no allow pattern names.
    LocalOnly,
    /// The host is not a valid ASCII host name or IP address.
    Invalid,
}

impl DomainRules {
    /// The verdict for `host` (as the request wrote it, any spelling) and `port`.
    pub fn decide(&self, host: &str, port: u16) -> Verdict {
        match Host::parse(host) {
            Some(host) => self.decide_host(&host, port),
            None => Verdict::Invalid,
        }
    }

    /// The verdict for a parsed host on `port`: the first decision, before anything is resolved.
    pub fn decide_host(&self, host: &Host, port: u16) -> Verdict {
        if let Some(deny) = self.deny.iter().find(|p| p.denies(host, port)) {
            return Verdict::Denied(deny.text.clone());
        }
        if self.allow.iter().any(|p| p.matches(host, port)) { Verdict::Allowed } else { Verdict::NotAllowed }
    }

    /// The second decision, for a host [`DomainRules::decide_host`] allowed: which of `resolved` (for a name, the
    /// resolver's answer; for an address, that address) may be connected to, in order, IPv4-mapped addresses as
    /// IPv4 and without repeats. Connect to these and nothing else (never resolve the name again). Refused
    /// ([`Verdict::DeniedAddress`]) when any address is denied; [`Verdict::LocalOnly`] when a name had addresses
    /// but only local ones no allow pattern names. An empty list means the resolver found nothing.
    pub fn connectable(
        &self,
        host: &Host,
        port: u16,
        resolved: &[IpAddr],
    ) -> Result<Vec<SocketAddr>, Verdict> {
        let mut addresses: Vec<IpAddr> = Vec::new();
        for ip in resolved.iter().map(|ip| canonical_ip(*ip)) {
            if !addresses.contains(&ip) {
                addresses.push(ip);
            }
        }
        for address in &addresses {
            let as_host = Host::Ip(*address);
            if let Some(deny) = self.deny.iter().find(|p| p.denies(&as_host, port)) {
                return Err(Verdict::DeniedAddress { pattern: deny.text.clone(), address: *address });
            }
        }
        if matches!(host, Host::Name(_)) {
            let found = !addresses.is_empty();
            addresses.retain(|ip| !is_local(*ip) || self.allow.iter().any(|p| p.names_address(*ip, port)));
            if found && addresses.is_empty() {
                return Err(Verdict::LocalOnly);
            }
        }
        Ok(addresses.into_iter().map(|ip| SocketAddr::new(ip, port)).collect())
    }
}

/// A host as the rules see it: a normalised name or an IP address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A lower-case ASCII name without a trailing dot, whose last label does not start with a digit.
    Name(String),
    /// An IP address; never an IPv4-mapped IPv6 one (that is its IPv4 address).
    Ip(IpAddr),
}

impl Host {
    /// Parse `text` in any spelling the module documentation lists (`Example.com.`, `10.0.0.1`, `0x0a000001`,
    /// `[::1]`, `::1`, `[::ffff:10.0.0.1]`); `None` for anything else.
    pub fn parse(text: &str) -> Option<Host> {
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner.strip_suffix(']')?;
            return inner.parse::<Ipv6Addr>().ok().map(|ip| Host::Ip(canonical_ip(IpAddr::V6(ip))));
        }
        if text.contains(':') {
            return text.parse::<Ipv6Addr>().ok().map(|ip| Host::Ip(canonical_ip(IpAddr::V6(ip))));
        }
        let trimmed = text.strip_suffix('.').unwrap_or(text);
        if trimmed.rsplit('.').next().is_some_and(|last| last.starts_with(|c: char| c.is_ascii_digit())) {
            return inet_aton(trimmed).map(|ip| Host::Ip(IpAddr::V4(ip)));
        }
        let name = trimmed.to_ascii_lowercase();
        if name.is_empty() || name.len() > 253 {
            return None;
        }
        let labels_ok = name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
        labels_ok.then_some(Host::Name(name))
    }

    /// The host as the authority of a URL or a `Host` header writes it, with `port` (`example.com:8080`,
    /// `[::1]:443`).
    pub fn authority(&self, port: u16) -> String {
        format!("{self}:{port}")
    }
}

impl fmt::Display for Host {
    /// `example.com`, `10.0.0.1`, `[::1]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
        }
    }
}

/// An IPv4 address in any form `inet_aton` reads (and the resolver therefore connects to): one to four parts
/// separated by dots, each decimal, octal (leading `0`) or hexadecimal (leading `0x`/`0X`), every part but the
/// last one byte, the last filling the remaining bytes (`198.18.9` is `198.18.0.9`, `3323068425` is
/// `198.18.0.9`). Unlike `inet_aton`, nothing may follow (no whitespace), and a part that overflows is refused
/// rather than wrapped.
fn inet_aton(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        values.push(inet_aton_part(part)?);
    }
    let (last, leading) = values.split_last()?;
    let mut value: u32 = 0;
    for (i, byte) in leading.iter().enumerate() {
        let byte = u8::try_from(*byte).ok()?;
        value |= u32::from(byte) << (24 - 8 * i);
    }
    let room_bits = 32 - 8 * leading.len();
    if room_bits < 32 && *last >= 1u64 << room_bits {
        return None;
    }
    value |= u32::try_from(*last).ok()?;
    Some(Ipv4Addr::from(value))
}

/// One part of an `inet_aton` address; `None` when it is not a number or exceeds 32 bits.
fn inet_aton_part(part: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    // At most 32 significant bits: longer digit strings (leading zeros aside) overflow.
    let significant = digits.trim_start_matches('0');
    if digits.is_empty() || significant.len() > 11 || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let value = if significant.is_empty() { 0 } else { u64::from_str_radix(significant, radix).ok()? };
    (value <= u64::from(u32::MAX)).then_some(value)
}

/// `ip` as a connection reaches it: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the IPv4 address.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The IPv4 address an IPv6 address carries for routing besides the mapped form: NAT64's well-known prefix
/// `64:ff9b::/96` (RFC 6052: a NAT64 gateway connects to that IPv4 address) and the deprecated IPv4-compatible
/// form `::a.b.c.d` (not `::` or `::1`, whose first byte would be 0).
fn embedded_ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else {
        return None;
    };
    let s = v6.segments();
    let tail = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0);
    let compatible = s[..6].iter().all(|x| *x == 0) && tail.octets()[0] != 0;
    (nat64 || compatible).then_some(tail)
}

/// Every address `ip` stands for when a deny rule is checked: itself (canonical) and the IPv4 address it
/// embeds ([`embedded_ipv4`]).
fn identities(ip: IpAddr) -> Vec<IpAddr> {
    let ip = canonical_ip(ip);
    let mut all = vec![ip];
    if let Some(v4) = embedded_ipv4(ip) {
        all.push(IpAddr::V4(v4));
    }
    all
}

/// Cloud metadata endpoints outside the link-local ranges: AWS's IPv6 one (`fd00:ec2::254`) and Alibaba Cloud's
/// (`100.100.100.200`).
const METADATA: [IpAddr; 2] = [
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];

/// True for an address a name must not lead to unless an allow rule names it: loopback, link-local (cloud
/// metadata endpoints, and the `METADATA` ones elsewhere), unspecified, multicast, broadcast, also when
/// embedded in an IPv6 address.
pub fn is_local(ip: IpAddr) -> bool {
    identities(ip).into_iter().any(|ip| {
        METADATA.contains(&ip)
            || match ip {
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
                }
            }
    })
}

/// One allow or deny pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DomainPattern {
    /// What it matches.
    kind: PatternKind,
    /// The port it is limited to.
    port: Option<u16>,
    /// The text it was parsed from (normalised), for messages.
    pub text: String,
}

/// What a pattern matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum PatternKind {
    /// Every host.
    Any,
    /// Exactly this host.
    Exact(Host),
    /// Every name strictly below this one.
    Below(String),
    /// Every address in this range (the network address, host bits cleared, and the prefix length).
    Range(IpAddr, u8),
}

/// Why a pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid domain pattern {text:?}: {reason} (write `example.com`, `*.example.com`, `example.com:443`, an IP \
     address, a range `10.0.0.0/8` or `*`)"
)]
pub struct DomainPatternError {
    /// The pattern.
    pub text: String,
    /// Why.
    pub reason: &'static str,
}

impl DomainPattern {
    /// Parse `text` (see the module documentation).
    pub fn parse(text: &str) -> Result<DomainPattern, DomainPatternError> {
        let error = |reason| DomainPatternError { text: text.to_owned(), reason };
        let trimmed = text.trim();
        if trimmed.contains("://") {
            return Err(error("a domain, not a URL"));
        }
        if let Some((address, prefix)) = trimmed.rsplit_once('/') {
            return parse_range(address, prefix).ok_or_else(|| {
                error("a domain, not a URL (a range is an IP address, `/` and a prefix length: 10.0.0.0/8)")
            });
        }
        let (host, port) = split_port(trimmed).ok_or_else(|| error("bad port"))?;
        if host == "*" {
            return Ok(DomainPattern { kind: PatternKind::Any, port, text: normal_text("*", port) });
        }
        if let Some(rest) = host.strip_prefix("*.") {
            return match Host::parse(rest) {
                Some(Host::Name(name)) => Ok(DomainPattern {
                    text: normal_text(&format!("*.{name}"), port),
                    kind: PatternKind::Below(name),
                    port,
                }),
                _ => Err(error("a wildcard must be followed by a host name")),
            };
        }
        if host.contains('*') {
            return Err(error("`*` is allowed only as the whole pattern or as a leading `*.`"));
        }
        match Host::parse(host) {
            Some(parsed) => {
                let text = normal_text(&parsed.to_string(), port);
                Ok(DomainPattern { kind: PatternKind::Exact(parsed), port, text })
            }
            None => Err(error("not an ASCII host name or IP address")),
        }
    }

    /// True when this pattern, in an allow list, matches `host` on `port`: names by name, addresses by address
    /// (exactly, or in the range).
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.kind, host) {
            (PatternKind::Any, _) => true,
            (PatternKind::Exact(want), got) => want == got,
            (PatternKind::Below(parent), Host::Name(name)) => {
                name.len() > parent.len() + 1
                    && name.ends_with(parent.as_str())
                    && name.as_bytes()[name.len() - parent.len() - 1] == b'.'
            }
            (PatternKind::Range(net, prefix), Host::Ip(ip)) => in_range(*ip, *net, *prefix),
            (PatternKind::Below(_), Host::Ip(_)) | (PatternKind::Range(..), Host::Name(_)) => false,
        }
    }

    /// True when this pattern, in a deny list, matches `host` on `port`: as [`DomainPattern::matches`], and an
    /// address also by the IPv4 address it embeds (NAT64, IPv4-compatible).
    pub fn denies(&self, host: &Host, port: u16) -> bool {
        match host {
            Host::Ip(ip) => identities(*ip).into_iter().any(|ip| self.matches(&Host::Ip(ip), port)),
            Host::Name(_) => self.matches(host, port),
        }
    }

    /// True when this pattern names `ip` itself (an address or a range, not `*`) on `port`.
    fn names_address(&self, ip: IpAddr, port: u16) -> bool {
        matches!(self.kind, PatternKind::Exact(Host::Ip(_)) | PatternKind::Range(..))
            && self.matches(&Host::Ip(canonical_ip(ip)), port)
    }

    /// [`DomainPattern::names_address`] on the pattern's own port, or on any when it has none.
    fn names_address_on_any_port(&self, ip: IpAddr) -> bool {
        self.names_address(ip, self.port.unwrap_or(1))
    }
}

/// A range pattern `10.0.0.0/8`, `fd00::/8`, `[fd00::]/8`, `::ffff:10.0.0.0/104` (an IPv4-mapped range is the
/// IPv4 range); host bits are cleared.
fn parse_range(address: &str, prefix: &str) -> Option<DomainPattern> {
    if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix: u8 = prefix.parse().ok()?;
    let Host::Ip(ip) = Host::parse(address)? else {
        return None;
    };
    let (net, prefix) = match (ip, address.contains(':')) {
        // An IPv4-mapped address written as IPv6: its prefix counts the 96 bits of `::ffff:`.
        (IpAddr::V4(v4), true) => (IpAddr::V4(v4), prefix.checked_sub(96)?),
        (ip, _) => (ip, prefix),
    };
    let net = match net {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(mask_u32(u32::from(v4), prefix)?)),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(mask_u128(u128::from(v6), prefix)?)),
    };
    let shown = match net {
        IpAddr::V6(v6) => format!("{v6}/{prefix}"),
        IpAddr::V4(v4) => format!("{v4}/{prefix}"),
    };
    Some(DomainPattern { kind: PatternKind::Range(net, prefix), port: None, text: shown })
}

/// `value` with all but the first `prefix` bits cleared; `None` past 32 bits.
fn mask_u32(value: u32, prefix: u8) -> Option<u32> {
    match prefix {
        0 => Some(0),
        1..=32 => Some(value & (u32::MAX << (32 - u32::from(prefix)))),
        _ => None,
    }
}

/// `value` with all but the first `prefix` bits cleared; `None` past 128 bits.
fn mask_u128(value: u128, prefix: u8) -> Option<u128> {
    match prefix {
        0 => Some(0),
        1..=128 => Some(value & (u128::MAX << (128 - u32::from(prefix)))),
        _ => None,
    }
}

/// True when `ip` lies in `net/prefix` (of the same family).
fn in_range(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => mask_u32(u32::from(ip), prefix) == Some(u32::from(net)),
        (IpAddr::V6(ip), IpAddr::V6(net)) => mask_u128(u128::from(ip), prefix) == Some(u128::from(net)),
        _ => false,
    }
}

/// `host` and `host:port`, with the port parsed (`[::1]:443` too). `None` for a bad port.
fn split_port(text: &str) -> Option<(&str, Option<u16>)> {
    if text.starts_with('[') {
        return match text.rsplit_once("]:") {
            Some((host, port)) => Some((&text[..host.len() + 1], Some(parse_port(port)?))),
            None => Some((text, None)),
        };
    }
    match text.rsplit_once(':') {
        // Two colons or more and no brackets: a bare IPv6 address.
        Some((host, _)) if host.contains(':') => Some((text, None)),
        Some((host, port)) => Some((host, Some(parse_port(port)?))),
        None => Some((text, None)),
    }
}

/// A port: 1 to 65535 in decimal digits (no sign, no spaces).
pub fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|p| *p != 0)
}

/// The normalised text of a pattern.
fn normal_text(host: &str, port: Option<u16>) -> String {
    match port {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// The `NO_PROXY` of a command whose loopback is the host's (macOS): every loopback host, reached directly.
pub const LOOPBACK_NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The `NO_PROXY` of a command in the proxy's network namespace (Linux), where loopback is the namespace's own
/// (the servers the server's sandboxed commands start), and the host's loopback is reached only through the
/// proxy, by an allow pattern that names the address. Each of `127.0.0.1` and `::1` that an allow pattern names
/// (the address in any spelling, with a port or not, or a range holding it; never `*`) is left out, so that a
/// proxy-aware client sends it to the proxy, which connects to the host's service the rule allowed; the others,
/// and `localhost` (a name pattern never reaches a loopback address: [`DomainRules::connectable`]), stay direct.
pub fn namespace_no_proxy(rules: &DomainRules) -> String {
    let named = |ip: IpAddr| rules.allow.iter().any(|p| p.names_address_on_any_port(ip));
    let mut hosts = vec!["localhost"];
    if !named(IpAddr::V4(Ipv4Addr::LOCALHOST)) {
        hosts.push("127.0.0.1");
    }
    if !named(IpAddr::V6(Ipv6Addr::LOCALHOST)) {
        hosts.push("::1");
    }
    hosts.join(",")
}

/// The environment that points a command at the proxy on `127.0.0.1:port`: the usual variables in both cases,
/// `NO_PROXY` for loopback ([`LOOPBACK_NO_PROXY`]), and what npm, pip, cargo and yarn read (git and curl read
/// the usual ones).
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    proxy_env_with(port, LOOPBACK_NO_PROXY)
}

/// [`proxy_env`] with `no_proxy` as `NO_PROXY` (see [`namespace_no_proxy`]).
pub fn proxy_env_with(port: u16, no_proxy: &str) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let mut env = Vec::new();
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "npm_config_proxy",
        "npm_config_https_proxy",
        "PIP_PROXY",
        "CARGO_HTTP_PROXY",
        "YARN_HTTP_PROXY",
        "YARN_HTTPS_PROXY",
    ] {
        env.push((name.to_owned(), url.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.to_owned(), no_proxy.to_owned()));
    }
    env
}

/// The names [`proxy_env`] sets (an inherited value of one of them is replaced).
pub fn proxy_env_names() -> Vec<String> {
    proxy_env(1).into_iter().map(|(name, _)| name).collect()
}

/// The body of the proxy's 403 answer: the host, why, and the setting that would allow it.
pub fn refusal_text(host: &str, port: u16, verdict: &Verdict) -> String {
    let shown = Host::parse(host).map_or_else(|| host.to_owned(), |h| h.to_string());
    match verdict {
        Verdict::Denied(pattern) => format!(
            "uexec: connection to {shown}:{port} refused: the host matches the deny pattern {pattern} \
             ([network] deny / --deny-domain)\n"
        ),
        Verdict::DeniedAddress { pattern, address } => format!(
            "uexec: connection to {shown}:{port} refused: it resolves to {}, which the deny pattern {pattern} \
             matches ([network] deny / --deny-domain)\n",
            Host::Ip(*address)
        ),
        Verdict::LocalOnly => format!(
            "uexec: connection to {shown}:{port} refused: {shown} resolves only to loopback, link-local, \
             multicast or unspecified addresses, which the proxy connects a name to only when an allow pattern \
             names the address\n"
        ),
        Verdict::Invalid => {
            format!(
                "uexec: connection to {host:?} refused: not an ASCII host name or IP address (no userinfo, \
                 zone id or percent-encoding)\n"
            )
        }
        Verdict::NotAllowed | Verdict::Allowed => format!(
            "uexec: connection to {shown}:{port} refused: {shown} is not an allowed domain. To allow it, start \
             uexec with --allow-domain {shown} or add it to `[network] allow = [\"{shown}\"]` in the config\n"
        ),
    }
}

/// The name a DNS query asks about (lower-case ASCII, without the final dot) and the end of its question
/// section, or `None` when `packet` is not a standard query with one question whose name is a host name
/// (labels of letters, digits, `-` and `_`, at most 63 bytes each and 253 in all; no compression).
pub fn dns_question(packet: &[u8]) -> Option<(String, usize)> {
    if packet.len() < 12 || packet[2] & 0x80 != 0 || packet[2] & 0x78 != 0 {
        return None; // a response, or not a standard query
    }
    if u16::from_be_bytes([packet[4], packet[5]]) != 1 {
        return None;
    }
    let mut at = 12;
    let mut name = String::new();
    loop {
        let len = usize::from(*packet.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        // The name with this label (and the dot before it) stays within 253 bytes.
        if len > 63 || name.len() + usize::from(!name.is_empty()) + len > 253 {
            return None;
        }
        let label = packet.get(at..at + len)?;
        if !label.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_') {
            return None;
        }
        if !name.is_empty() {
            name.push('.');
        }
        name.extend(label.iter().map(|b| char::from(b.to_ascii_lowercase())));
        at += len;
    }
    let end = at + 4; // type and class
    (end <= packet.len() && !name.is_empty()).then_some((name, end))
}

/// The `REFUSED` answer to `query` (its header and question, as [`dns_question`] delimited them): the same id,
/// opcode, `RD` and question, with `QR`, `RA` and rcode 5, and no records.
pub fn dns_refusal(query: &[u8]) -> Vec<u8> {
    let mut reply = query.to_vec();
    if reply.len() >= 12 {
        reply[2] = 0x80 | (query[2] & 0x79); // QR, the opcode and RD kept
        reply[3] = 0x80 | 5; // RA, REFUSED
        reply[6..12].fill(0); // no answer, authority or additional records
    }
    reply
}

/// Whether a name looked up means the command wanted the network: a name with a dot that is not the
/// machine's own (`localhost` and below it), reverse (`.arpa`) or link-local (`.local`).
pub fn is_network_lookup(name: &str) -> bool {
    name.contains('.')
        && !["localhost", "arpa", "local"]
            .iter()
            .any(|tld| name == *tld || name.ends_with(&format!(".{tld}")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn rules(allow: &[&str], deny: &[&str]) -> DomainRules {
        DomainRules {
            allow: allow.iter().map(|p| DomainPattern::parse(p).unwrap()).collect(),
            deny: deny.iter().map(|p| DomainPattern::parse(p).unwrap()).collect(),
        }
    }

    #[test]
    fn exact_wildcard_port_and_any() {
        let r = rules(&["pypi.org", "*.pythonhosted.org", "example.com:8443"], &[]);
        assert_eq!(r.decide("pypi.org", 443), Verdict::Allowed);
        assert_eq!(r.decide("PyPI.org.", 443), Verdict::Allowed);
        assert_eq!(r.decide("www.pypi.org", 443), Verdict::NotAllowed);
        assert_eq!(r.decide("files.pythonhosted.org", 443), Verdict::Allowed);
        assert_eq!(r.decide("a.b.pythonhosted.org", 80), Verdict::Allowed);
        assert_eq!(r.decide("pythonhosted.org", 443), Verdict::NotAllowed);
        assert_eq!(r.decide("evilpythonhosted.org", 443), Verdict::NotAllowed);
        assert_eq!(r.decide("example.com", 8443), Verdict::Allowed);
        assert_eq!(r.decide("example.com", 443), Verdict::NotAllowed);
        let any = rules(&["*"], &["*.internal", "10.0.0.1"]);
        assert_eq!(any.decide("anything.example", 1), Verdict::Allowed);
        assert_eq!(any.decide("db.internal", 5432), Verdict::Denied("*.internal".into()));
        assert_eq!(any.decide("10.0.0.1", 80), Verdict::Denied("10.0.0.1".into()));
    }

    #[test]
    fn ip_literals_match_only_themselves() {
        let r = rules(&["*.example.com", "192.168.1.5", "[::1]:8080"], &[]);
        assert_eq!(r.decide("192.168.1.5", 22), Verdict::Allowed);
        assert_eq!(r.decide("192.168.1.6", 22), Verdict::NotAllowed);
        assert_eq!(r.decide("[::1]", 8080), Verdict::Allowed);
        assert_eq!(r.decide("::1", 8080), Verdict::Allowed);
        assert_eq!(r.decide("[::1]", 80), Verdict::NotAllowed);
        // `inet_aton` reads `1.2.3` as 1.2.0.3: so do the rules.
        assert_eq!(r.decide("1.2.3", 80), Verdict::NotAllowed);
        assert_eq!(Host::parse("1.2.3"), Some(Host::Ip("1.2.0.3".parse().unwrap())));
        // An address pattern never allows a name, a name pattern never an address.
        let r = rules(&["localhost", "10.0.0.5"], &[]);
        assert_eq!(r.decide("10.0.0.5", 80), Verdict::Allowed);
        assert_eq!(r.decide("127.0.0.1", 80), Verdict::NotAllowed);
        assert_eq!(r.decide("localhost", 80), Verdict::Allowed);
    }

    /// Every spelling below is 198.18.0.9 to `getaddrinfo`/`inet_aton` (or, IPv6, to the kernel): each is the
    /// address, and a deny rule for it (written in any of them) refuses all of them.
    const SPELLINGS_OF_198_18_0_9: &[&str] = &[
        "198.18.0.9",
        "198.18.0.9.",
        "3323068425",
        "3323068425.",
        "0xc6120009",
        "0XC6120009",
        "0xc6.0x12.0.9",
        "0xC6.0X12.0x0.0x9",
        "0306.022.0.011",
        "0306.022.00.011",
        "000000306.18.0.9",
        "198.18.9",
        "198.1179657",
        "0xc6.0x120009",
        "0306.0x12.9",
        "[::ffff:198.18.0.9]",
        "::ffff:198.18.0.9",
        "::ffff:c612:9",
        "[::FFFF:C612:0009]",
        "[0:0:0:0:0:ffff:c612:9]",
        "0000:0000:0000:0000:0000:ffff:c612:0009",
    ];

    #[test]
    fn every_spelling_of_a_denied_address_is_denied() {
        let want = Host::Ip("198.18.0.9".parse().unwrap());
        for spelling in SPELLINGS_OF_198_18_0_9 {
            assert_eq!(Host::parse(spelling).as_ref(), Some(&want), "{spelling}");
        }
        for pattern in SPELLINGS_OF_198_18_0_9 {
            let r = rules(&["*"], &[pattern]);
            assert_eq!(r.deny[0].text, "198.18.0.9", "{pattern}");
            for spelling in SPELLINGS_OF_198_18_0_9 {
                assert_eq!(
                    r.decide(spelling, 443),
                    Verdict::Denied("198.18.0.9".into()),
                    "{pattern} {spelling}"
                );
            }
            // The twin one address over passes, written the same ways.
            for twin in ["198.18.0.8", "0xc6120008", "3323068424", "[::ffff:c612:8]", "0306.022.0.010"] {
                assert_eq!(r.decide(twin, 443), Verdict::Allowed, "{pattern} {twin}");
            }
            // And a name that resolves to it is refused; one resolving to the twin is connected to.
            let name = Host::parse("Allowed.Example.").unwrap();
            for resolved in ["198.18.0.9", "::ffff:198.18.0.9", "64:ff9b::c612:9"] {
                assert_eq!(
                    r.connectable(&name, 443, &["203.0.113.1".parse().unwrap(), resolved.parse().unwrap()]),
                    Err(Verdict::DeniedAddress {
                        pattern: "198.18.0.9".into(),
                        address: canonical_ip(resolved.parse().unwrap())
                    }),
                    "{resolved}"
                );
            }
            assert_eq!(
                r.connectable(&name, 443, &["::ffff:198.18.0.8".parse().unwrap()]),
                Ok(vec!["198.18.0.8:443".parse().unwrap()])
            );
        }
    }

    #[test]
    fn what_no_resolver_reads_the_same_way_is_invalid() {
        for bad in [
            "198.18.0.9 ",
            " 198.18.0.9",
            "198.18.0.256",
            "198.18.65536",
            "198.16777216",
            "4294967296",
            "99999999999999999999999",
            "0x",
            "0x.1.2.3",
            "08",
            "0306.028.0.011",
            "0x1g",
            "1.2.3.4.5",
            "198..0.9",
            "198.18.0.9..",
            ".198.18.0.9",
            "a.b.123",
            "example.0x12",
            "[fe80::1%eth0]",
            "fe80::1%eth0",
            "[fe80::1%25eth0]",
            "%31%39%38.18.0.9",
            "198.18.0.%39",
            "user@198.18.0.9",
            "allowed.test@198.18.0.9",
            "[198.18.0.9]",
            "::ffff:0306.022.0.011",
            "::ffff:0xc6.0x12.0.9",
            "[::ffff:198.18.0.9",
            "::ffff:198.18.0.9]",
            "[[::1]]",
            "[v1.x]",
            "198.18.0.9\t",
            "exa%6dple.com",
            "example.com\u{0}",
        ] {
            assert_eq!(Host::parse(bad), None, "{bad:?}");
            assert!(DomainPattern::parse(bad).is_err() || bad.trim() != bad, "{bad:?}");
        }
    }

    #[test]
    fn deny_rules_see_the_ipv4_address_inside_nat64_and_compatible_ipv6() {
        let r = rules(&["*"], &["198.18.0.9"]);
        for embedded in ["[64:ff9b::c612:9]", "[64:ff9b::198.18.0.9]", "[::198.18.0.9]", "::c612:9"] {
            assert_eq!(r.decide(embedded, 80), Verdict::Denied("198.18.0.9".into()), "{embedded}");
        }
        for other in ["[64:ff9b::c612:8]", "[64:ff9b:1::c612:9]", "[2001:db8::c612:9]", "[::1]"] {
            assert_eq!(r.decide(other, 80), Verdict::Allowed, "{other}");
        }
        // Allowing the IPv4 address does not allow its NAT64 twin (allow rules match the address exactly).
        let r = rules(&["198.18.0.9"], &[]);
        assert_eq!(r.decide("[::ffff:198.18.0.9]", 80), Verdict::Allowed);
        assert_eq!(r.decide("[64:ff9b::c612:9]", 80), Verdict::NotAllowed);
    }

    #[test]
    fn ranges_match_every_address_in_them() {
        let r = rules(&["*"], &["198.18.0.0/15", "fd00::/8", "[2001:db8::]/32", "::ffff:10.0.0.0/104"]);
        assert_eq!(r.deny[0].text, "198.18.0.0/15");
        assert_eq!(r.deny[2].text, "2001:db8::/32");
        assert_eq!(r.deny[3].text, "10.0.0.0/8");
        for denied in ["198.18.0.0", "198.19.255.255", "0xc6130101", "[::ffff:198.19.1.1]", "[fd12::1]"] {
            assert!(matches!(r.decide(denied, 1), Verdict::Denied(_)), "{denied}");
        }
        for denied in ["[2001:db8:ffff::1]", "10.200.0.1", "[64:ff9b::a01:203]"] {
            assert!(matches!(r.decide(denied, 1), Verdict::Denied(_)), "{denied}");
        }
        for allowed in
            ["198.17.255.255", "198.20.0.0", "[fe00::1]", "[2001:db9::1]", "11.0.0.0", "example.com"]
        {
            assert_eq!(r.decide(allowed, 1), Verdict::Allowed, "{allowed}");
        }
        assert_eq!(DomainPattern::parse("10.1.2.3/8").unwrap().text, "10.0.0.0/8");
        assert_eq!(DomainPattern::parse("0.0.0.0/0").unwrap().text, "0.0.0.0/0");
        let allow_range = rules(&["10.0.0.0/8"], &[]);
        assert_eq!(allow_range.decide("10.9.8.7", 22), Verdict::Allowed);
        assert_eq!(allow_range.decide("11.9.8.7", 22), Verdict::NotAllowed);
        assert_eq!(allow_range.decide("ten.example", 22), Verdict::NotAllowed);
        for bad in [
            "10.0.0.0/33",
            "fd00::/129",
            "x.com/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/8:443",
            "::ffff:10.0.0.0/95",
            "10.0.0.0/0008",
            "*/8",
        ] {
            assert!(DomainPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_never_lead_to_local_addresses_unless_an_allow_rule_names_them() {
        let name = Host::parse("dev.example").unwrap();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let any = rules(&["*"], &[]);
        for local in
            ["127.0.0.1", "0.0.0.0", "169.254.169.254", "::1", "fe80::1", "::ffff:127.0.0.1", "224.0.0.1"]
        {
            assert_eq!(any.connectable(&name, 80, &[ip(local)]), Err(Verdict::LocalOnly), "{local}");
            // An address written as one is connected to as written.
            let literal = Host::Ip(canonical_ip(ip(local)));
            assert_eq!(
                any.connectable(&literal, 80, &[ip(local)]),
                Ok(vec![SocketAddr::new(canonical_ip(ip(local)), 80)])
            );
        }
        for local in
            ["64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "255.255.255.255", "fd00:ec2::254", "100.100.100.200"]
        {
            assert!(is_local(ip(local)), "{local}");
        }
        for public in ["151.101.0.223", "10.1.2.3", "2a04:4e42::223", "64:ff9b::9765:df"] {
            assert!(!is_local(ip(public)), "{public}");
        }
        // Local answers are dropped from a mixed answer; repeats and mapped forms are folded.
        assert_eq!(
            any.connectable(&name, 80, &[ip("127.0.0.1"), ip("::ffff:203.0.113.7"), ip("203.0.113.7")]),
            Ok(vec!["203.0.113.7:80".parse().unwrap()])
        );
        assert_eq!(any.connectable(&name, 80, &[]), Ok(vec![]));
        // Named by an allow rule (an address or a range, on that port): reachable by name too.
        let named = rules(&["dev.example", "127.0.0.2:8080", "fe80::/10"], &[]);
        assert_eq!(
            named.connectable(&name, 8080, &[ip("127.0.0.2")]),
            Ok(vec!["127.0.0.2:8080".parse().unwrap()])
        );
        assert_eq!(named.connectable(&name, 8081, &[ip("127.0.0.2")]), Err(Verdict::LocalOnly));
        assert_eq!(named.connectable(&name, 8080, &[ip("127.0.0.1")]), Err(Verdict::LocalOnly));
        assert_eq!(named.connectable(&name, 1, &[ip("fe80::5")]), Ok(vec!["[fe80::5]:1".parse().unwrap()]));
    }

    #[test]
    fn invalid_hosts_and_patterns() {
        let r = rules(&["*"], &[]);
        for bad in ["", ".", "a..b", "-a.com", "a-.com", "bücher.de", "a b.com", "a/b", "a.com..", "a:b"] {
            assert_eq!(r.decide(bad, 443), Verdict::Invalid, "{bad:?}");
        }
        assert_eq!(r.decide("xn--bcher-kva.de", 443), Verdict::Allowed);
        for bad in
            ["https://pypi.org", "pypi.org/simple", "a*.com", "*.", "*.*.com", "pypi.org:0", "pypi.org:x", ""]
        {
            assert!(DomainPattern::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(DomainPattern::parse("*.Example.COM.:443").unwrap().text, "*.example.com:443");
    }

    #[test]
    fn refusals_name_the_setting() {
        let text = refusal_text("Example.com", 443, &Verdict::NotAllowed);
        assert!(text.contains("--allow-domain example.com"), "{text}");
        assert!(text.contains("[network] allow"), "{text}");
        let text = refusal_text("x.internal", 80, &Verdict::Denied("*.internal".into()));
        assert!(text.contains("deny pattern *.internal"), "{text}");
        let verdict =
            Verdict::DeniedAddress { pattern: "10.0.0.0/8".into(), address: "10.1.2.3".parse().unwrap() };
        let text = refusal_text("DB.example.", 5432, &verdict);
        assert!(text.contains("db.example:5432") && text.contains("resolves to 10.1.2.3"), "{text}");
        assert!(text.contains("deny pattern 10.0.0.0/8"), "{text}");
        let text = refusal_text("0xc6120009", 80, &Verdict::Denied("198.18.0.9".into()));
        assert!(text.contains("connection to 198.18.0.9:80"), "{text}");
    }

    #[test]
    fn proxy_env_covers_the_usual_names() {
        let env = proxy_env(3128);
        for name in
            ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "ALL_PROXY", "PIP_PROXY", "npm_config_https_proxy"]
        {
            assert!(env.iter().any(|(n, v)| n == name && v == "http://127.0.0.1:3128"), "{name}");
        }
        assert!(env.iter().any(|(n, v)| n == "NO_PROXY" && v.contains("localhost")));
        assert_eq!(proxy_env_names().len(), env.len());
    }

    #[test]
    fn an_allowed_loopback_address_goes_through_the_proxy_in_the_namespace() {
        // Without a rule naming it, loopback is the namespace's own, reached directly.
        for allow in [&["pypi.org"][..], &["*"], &["localhost:8080"], &["127.0.0.2"], &["10.0.0.0/8"]] {
            assert_eq!(namespace_no_proxy(&rules(allow, &[])), LOOPBACK_NO_PROXY, "{allow:?}");
        }
        // A rule naming the host's 127.0.0.1 (any spelling, a port, a range) sends it to the proxy.
        for allow in
            ["127.0.0.1:8080", "127.0.0.1", "0x7f000001:5432", "127.0.0.0/8", "[::ffff:127.0.0.1]:80"]
        {
            assert_eq!(namespace_no_proxy(&rules(&[allow], &[])), "localhost,::1", "{allow}");
        }
        assert_eq!(namespace_no_proxy(&rules(&["[::1]:3000"], &[])), "localhost,127.0.0.1");
        assert_eq!(namespace_no_proxy(&rules(&["127.0.0.1:1", "::1"], &[])), "localhost");
        let env = proxy_env_with(3128, "localhost,::1");
        assert!(env.iter().any(|(n, v)| n == "no_proxy" && v == "localhost,::1"));
        assert_eq!(proxy_env_names().len(), env.len());
    }

    fn label() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9]{0,6}"
    }

    /// How one IPv4 address is written: how many `inet_aton` parts (1 to 4), each part's radix (10, 8, 16, or 17
    /// for upper-case hex), a trailing dot; or (`mapped` 1 to 4) one of the IPv4-mapped IPv6 forms.
    #[derive(Debug, Clone)]
    struct Spelling {
        parts: usize,
        radices: [u32; 4],
        dot: bool,
        mapped: u8,
    }

    fn spelling() -> impl Strategy<Value = Spelling> {
        (
            1usize..=4,
            prop::array::uniform4(prop::sample::select(vec![10u32, 8, 16, 17])),
            any::<bool>(),
            0u8..=4,
        )
            .prop_map(|(parts, radices, dot, mapped)| Spelling { parts, radices, dot, mapped })
    }

    fn part(value: u32, radix: u32) -> String {
        match radix {
            8 => format!("0{value:o}"),
            16 => format!("0x{value:x}"),
            17 => format!("0X{value:X}"),
            _ => value.to_string(),
        }
    }

    /// `ip` written as `how` says.
    fn spell(ip: Ipv4Addr, how: &Spelling) -> String {
        let value = u32::from(ip);
        let [a, b, c, d] = ip.octets();
        let (hi, lo) = (value >> 16, value & 0xffff);
        match how.mapped {
            1 => return format!("[::ffff:{ip}]"),
            2 => return format!("::FFFF:{hi:X}:{lo:x}"),
            3 => return format!("[0:0:0:0:0:ffff:{hi:04x}:{lo:04x}]"),
            4 => return format!("::ffff:{ip}"),
            _ => {}
        }
        let leading = how.parts - 1;
        let mut out: Vec<String> = [a, b, c, d][..leading]
            .iter()
            .zip(how.radices)
            .map(|(byte, r)| part(u32::from(*byte), r))
            .collect();
        let rest = if leading == 0 { value } else { value & (u32::MAX >> (8 * leading)) };
        out.push(part(rest, how.radices[3]));
        let mut text = out.join(".");
        if how.dot {
            text.push('.');
        }
        text
    }

    proptest! {
        #[test]
        fn every_spelling_of_a_denied_address_is_denied_and_its_twin_passes(
            denied in any::<u32>(),
            how in spelling(),
            pattern_how in spelling(),
            port in 1u16..,
        ) {
            let denied = Ipv4Addr::from(denied);
            let twin = Ipv4Addr::from(u32::from(denied) ^ 1);
            prop_assert_eq!(Host::parse(&spell(denied, &how)), Some(Host::Ip(IpAddr::V4(denied))));
            let r = rules(&["*"], &[&spell(denied, &pattern_how)]);
            prop_assert_eq!(r.deny[0].text.clone(), denied.to_string());
            prop_assert_eq!(r.decide(&spell(denied, &how), port), Verdict::Denied(denied.to_string()));
            prop_assert_eq!(r.decide(&spell(twin, &how), port), Verdict::Allowed);
            // A name resolving to it (in either family's form) is refused, one resolving to the twin is not.
            let name = Host::parse("pkg.example").unwrap();
            let mapped = IpAddr::V6(denied.to_ipv6_mapped());
            let refused = matches!(r.connectable(&name, port, &[mapped]), Err(Verdict::DeniedAddress { .. }));
            prop_assert!(refused, "a name resolving to {} was not refused", mapped);
            let twin_mapped = IpAddr::V6(twin.to_ipv6_mapped());
            let expected = if is_local(IpAddr::V4(twin)) {
                Err(Verdict::LocalOnly)
            } else {
                Ok(vec![SocketAddr::new(IpAddr::V4(twin), port)])
            };
            prop_assert_eq!(r.connectable(&name, port, &[twin_mapped]), expected);
            // An allow rule for an address matches it in every spelling as well.
            let allow = rules(&[&spell(denied, &pattern_how)], &[]);
            prop_assert_eq!(allow.decide(&spell(denied, &how), port), Verdict::Allowed);
            prop_assert_eq!(allow.decide(&spell(twin, &how), port), Verdict::NotAllowed);
        }

        #[test]
        fn a_range_denies_exactly_its_addresses(net in any::<u32>(), prefix in 0u8..=32, probe in any::<u32>(), how in spelling()) {
            let r = rules(&["*"], &[&format!("{}/{prefix}", Ipv4Addr::from(net))]);
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            let inside = (net & mask) == (probe & mask);
            let verdict = r.decide(&spell(Ipv4Addr::from(probe), &how), 443);
            prop_assert_eq!(matches!(verdict, Verdict::Denied(_)), inside);
        }

        #[test]
        fn a_name_is_never_something_a_resolver_reads_as_an_address(text in "[0-9a-fA-FxX.:%\\[\\]-]{0,24}") {
            if let Some(Host::Name(name)) = Host::parse(&text) {
                prop_assert!(name.parse::<IpAddr>().is_err(), "{}", name);
                prop_assert!(!name.contains(':') && !name.contains('%'), "{}", name);
                let last = name.rsplit('.').next().unwrap_or_default();
                prop_assert!(!last.starts_with(|c: char| c.is_ascii_digit()), "{}", name);
            }
        }

        #[test]
        fn case_and_a_trailing_dot_never_change_a_verdict(labels in prop::collection::vec(label(), 1..4), port in 1u16..) {
            let host = labels.join(".");
            let r = rules(&["*.example.com", "pypi.org"], &["bad.example.com"]);
            let upper = format!("{}.", host.to_uppercase());
            prop_assert_eq!(r.decide(&host, port), r.decide(&upper, port));
            let below = format!("{host}.example.com");
            prop_assert_eq!(r.decide(&below.to_uppercase(), port), r.decide(&below, port));
        }

        #[test]
        fn a_wildcard_matches_exactly_the_names_below(labels in prop::collection::vec(label(), 1..4), parent in label()) {
            let parent = format!("{parent}.com");
            let r = rules(&[&format!("*.{parent}")], &[]);
            let below = format!("{}.{parent}", labels.join("."));
            prop_assert_eq!(r.decide(&below, 443), Verdict::Allowed);
            prop_assert_eq!(r.decide(&parent, 443), Verdict::NotAllowed);
            let glued = format!("{}{parent}", labels.join("."));
            prop_assert_eq!(r.decide(&glued, 443), Verdict::NotAllowed);
        }

        #[test]
        fn deny_always_wins(labels in prop::collection::vec(label(), 1..4), port in 1u16..) {
            let host = labels.join(".");
            let r = rules(&["*", &host], &[&host]);
            prop_assert!(matches!(r.decide(&host, port), Verdict::Denied(_)));
        }

        #[test]
        fn a_port_pattern_matches_only_its_port(labels in prop::collection::vec(label(), 1..3), port in 1u16.., other in 1u16..) {
            let host = labels.join(".");
            let r = rules(&[&format!("{host}:{port}")], &[]);
            prop_assert_eq!(r.decide(&host, port), Verdict::Allowed);
            prop_assert_eq!(r.decide(&host, other) == Verdict::Allowed, other == port);
        }

        #[test]
        fn decide_never_panics(host in "\\PC{0,40}", port in any::<u16>()) {
            let _ = rules(&["*.a.com", "b.com:1"], &["c.d"]).decide(&host, port);
            let _ = DomainPattern::parse(&host);
        }
    }

    /// A query for `name` as glibc sends it (id 0x1234, RD, type A, class IN, an EDNS record after it).
    fn query(name: &str) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
        for label in name.split('.') {
            q.push(u8::try_from(label.len()).unwrap());
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        q.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
        q
    }

    #[test]
    fn a_dns_query_is_read_and_refused() {
        let q = query("PyPI.org");
        let (name, end) = dns_question(&q).unwrap();
        assert_eq!(name, "pypi.org");
        assert_eq!(end, 12 + 10 + 4);
        let reply = dns_refusal(&q[..end]);
        assert_eq!(&reply[..2], &[0x12, 0x34]);
        assert_eq!(reply[2], 0x81, "QR and RD");
        assert_eq!(reply[3] & 0x0f, 5, "REFUSED");
        assert_eq!(&reply[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&reply[12..], &q[12..end]);
        // Not queries, or not host names: ignored.
        let mut response = q.clone();
        response[2] |= 0x80;
        assert_eq!(dns_question(&response), None);
        assert_eq!(dns_question(&q[..20]), None);
        assert_eq!(dns_question(&query("a b.com")), None);
        let mut compressed = q.clone();
        compressed[12] = 0xc0;
        assert_eq!(dns_question(&compressed), None);
        assert_eq!(dns_question(&[]), None);
        // At most 253 bytes in all: four labels of 63, 63, 63 and 61 bytes are a name; one byte more is not.
        let name = |last: usize| ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(last)].join(".");
        assert_eq!(dns_question(&query(&name(61))).map(|(n, _)| n.len()), Some(253));
        assert_eq!(dns_question(&query(&name(62))), None);
    }

    #[test]
    fn only_lookups_of_other_machines_count() {
        assert!(is_network_lookup("pypi.org"));
        assert!(is_network_lookup("registry.npmjs.org"));
        for own in ["localhost", "x.localhost", "myhost", "1.0.0.127.in-addr.arpa", "printer.local"] {
            assert!(!is_network_lookup(own), "{own}");
        }
    }
}
