//! Network by domain: the policy (`off`, `on`, or through uexec's proxy with allowed and denied domains), the
//! matching rules for host names, the environment that points commands at the proxy, and the text of a refusal.
//!
//! Matching rules (pure; the proxy applies them to the host of every `CONNECT` and absolute-form request):
//! - host names are ASCII only (an internationalised name must be written in its `xn--` form), compared without
//!   case and without one trailing dot (`Example.COM.` is `example.com`);
//! - a pattern `example.com` matches that host only; `*.example.com` matches every name below it
//!   (`a.example.com`, `a.b.example.com`) but not `example.com` itself; `*` matches every host;
//! - a pattern may name a port (`example.com:8443`): it then matches that port only; without one, any port;
//! - an IP literal (`10.0.0.1`, `[::1]`) matches only a pattern that is the same literal; wildcards never match
//!   one;
//! - the deny list wins over the allow list.

use std::net::IpAddr;

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

/// What the rules say about one host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Connect.
    Allowed,
    /// No allow pattern matches.
    NotAllowed,
    /// A deny pattern matches (its text).
    Denied(String),
    /// The host is not a valid ASCII host name or IP literal.
    Invalid,
}

impl DomainRules {
    /// The verdict for `host` (as the request wrote it) and `port`.
    pub fn decide(&self, host: &str, port: u16) -> Verdict {
        let Some(host) = Host::parse(host) else {
            return Verdict::Invalid;
        };
        if let Some(deny) = self.deny.iter().find(|p| p.matches(&host, port)) {
            return Verdict::Denied(deny.text.clone());
        }
        if self.allow.iter().any(|p| p.matches(&host, port)) { Verdict::Allowed } else { Verdict::NotAllowed }
    }
}

/// A host as the rules see it: a normalised name or an IP address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A lower-case ASCII name without a trailing dot.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Host {
    /// Parse `text` (`Example.com.`, `10.0.0.1`, `[::1]`, `::1`); `None` for anything else.
    pub fn parse(text: &str) -> Option<Host> {
        let bracketed = text.strip_prefix('[').and_then(|t| t.strip_suffix(']'));
        if let Some(inner) = bracketed {
            return inner.parse::<std::net::Ipv6Addr>().ok().map(|ip| Host::Ip(IpAddr::V6(ip)));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Some(Host::Ip(ip));
        }
        let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
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
        // A name made of digits and dots only would be an IP address some resolvers accept (`1.2.3`).
        let numeric = name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        (labels_ok && !numeric).then_some(Host::Name(name))
    }
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
}

/// Why a pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid domain pattern {text:?}: {reason} (write `example.com`, `*.example.com`, `example.com:443` or `*`)"
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
        if trimmed.contains("://") || trimmed.contains('/') {
            return Err(error("a domain, not a URL"));
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
                let shown = match &parsed {
                    Host::Name(name) => name.clone(),
                    Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
                    Host::Ip(ip) => ip.to_string(),
                };
                Ok(DomainPattern { kind: PatternKind::Exact(parsed), port, text: normal_text(&shown, port) })
            }
            None => Err(error("not an ASCII host name or IP address")),
        }
    }

    /// True when this pattern matches `host` on `port`.
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
            (PatternKind::Below(_), Host::Ip(_)) => false,
        }
    }
}

/// `host` and `host:port`, with the port parsed (`[::1]:443` too). `None` for a bad port.
fn split_port(text: &str) -> Option<(&str, Option<u16>)> {
    if text.starts_with('[') {
        return match text.rsplit_once("]:") {
            Some((host, port)) => Some((&text[..host.len() + 1], Some(port.parse().ok()?))),
            None => Some((text, None)),
        };
    }
    match text.rsplit_once(':') {
        // Two colons or more and no brackets: a bare IPv6 address.
        Some((host, _)) if host.contains(':') => Some((text, None)),
        Some((host, port)) => Some((host, Some(port.parse().ok().filter(|p| *p != 0)?))),
        None => Some((text, None)),
    }
}

/// The normalised text of a pattern.
fn normal_text(host: &str, port: Option<u16>) -> String {
    match port {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// The environment that points a command at the proxy on `127.0.0.1:port`: the usual variables in both cases,
/// `NO_PROXY` for loopback, and what npm, pip, cargo and yarn read (git and curl read the usual ones).
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
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
        env.push((name.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
    }
    env
}

/// The names [`proxy_env`] sets (an inherited value of one of them is replaced).
pub fn proxy_env_names() -> Vec<String> {
    proxy_env(1).into_iter().map(|(name, _)| name).collect()
}

/// The body of the proxy's 403 answer: the host, why, and the setting that would allow it.
pub fn refusal_text(host: &str, port: u16, verdict: &Verdict) -> String {
    let shown = Host::parse(host).map_or_else(
        || host.to_owned(),
        |h| match h {
            Host::Name(name) => name,
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
            Host::Ip(ip) => ip.to_string(),
        },
    );
    match verdict {
        Verdict::Denied(pattern) => format!(
            "uexec: connection to {shown}:{port} refused: the host matches the deny pattern {pattern} \
             ([network] deny / --deny-domain)\n"
        ),
        Verdict::Invalid => {
            format!("uexec: connection to {host:?} refused: not an ASCII host name or IP address\n")
        }
        Verdict::NotAllowed | Verdict::Allowed => format!(
            "uexec: connection to {shown}:{port} refused: {shown} is not an allowed domain. To allow it, start \
             uexec with --allow-domain {shown} or add it to `[network] allow = [\"{shown}\"]` in the config\n"
        ),
    }
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
        assert_eq!(r.decide("1.2.3", 80), Verdict::Invalid);
    }

    #[test]
    fn invalid_hosts_and_patterns() {
        let r = rules(&["*"], &[]);
        for bad in ["", ".", "a..b", "-a.com", "a-.com", "bücher.de", "a b.com", "a/b"] {
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

    fn label() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9]{0,6}"
    }

    proptest! {
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
}
