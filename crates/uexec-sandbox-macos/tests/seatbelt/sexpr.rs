//! A small SBPL reader (s-expressions with strings, `#"regex"` literals and `;` comments) and an evaluator of
//! every rule a generated profile uses (files, terminals, networks and Unix sockets, mach services, sysctls,
//! POSIX IPC, signals), so tests can check what a profile actually allows.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One datum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sexp {
    /// A symbol or number: `allow`, `file-write*`, `1`.
    Atom(String),
    /// A string literal, escapes decoded.
    Str(String),
    /// A `#"..."` regex literal, as written.
    Regex(String),
    /// A parenthesised list.
    List(Vec<Sexp>),
}

/// Reads every top-level datum of `text`. Errors name the line.
pub fn parse(text: &str) -> Result<Vec<Sexp>, String> {
    let bytes: Vec<char> = text.chars().collect();
    let mut pos = 0;
    let mut line = 1;
    let mut stack: Vec<(usize, Vec<Sexp>)> = Vec::new();
    let mut top = Vec::new();
    while pos < bytes.len() {
        let c = bytes[pos];
        let datum = match c {
            '\n' => {
                line += 1;
                pos += 1;
                continue;
            }
            c if c.is_whitespace() => {
                pos += 1;
                continue;
            }
            ';' => {
                while pos < bytes.len() && bytes[pos] != '\n' {
                    pos += 1;
                }
                continue;
            }
            '(' => {
                stack.push((line, Vec::new()));
                pos += 1;
                continue;
            }
            ')' => {
                pos += 1;
                let Some((_, items)) = stack.pop() else {
                    return Err(format!("line {line}: unbalanced ')'"));
                };
                Sexp::List(items)
            }
            '"' => {
                let (s, next, lines) = read_string(&bytes, pos + 1, line)?;
                pos = next;
                line += lines;
                Sexp::Str(s)
            }
            '#' if bytes.get(pos + 1) == Some(&'"') => {
                // `#"..."` is SBPL's raw string: a backslash is itself (regexes keep `\.`).
                let (s, next, lines) = read_raw(&bytes, pos + 2, line)?;
                pos = next;
                line += lines;
                Sexp::Regex(s)
            }
            _ => {
                let start = pos;
                while pos < bytes.len() && !bytes[pos].is_whitespace() && !"()\";".contains(bytes[pos]) {
                    pos += 1;
                }
                Sexp::Atom(bytes[start..pos].iter().collect())
            }
        };
        match stack.last_mut() {
            Some((_, items)) => items.push(datum),
            None => top.push(datum),
        }
    }
    if let Some((opened, _)) = stack.last() {
        return Err(format!("line {opened}: '(' never closed"));
    }
    Ok(top)
}

/// Reads a string body starting after its opening quote: returns the decoded text, the position after the
/// closing quote and how many newlines it spanned.
fn read_string(chars: &[char], mut pos: usize, line: usize) -> Result<(String, usize, usize), String> {
    let mut out = String::new();
    let mut lines = 0;
    loop {
        let Some(&c) = chars.get(pos) else {
            return Err(format!("line {line}: unterminated string"));
        };
        pos += 1;
        match c {
            '"' => return Ok((out, pos, lines)),
            '\\' => {
                let Some(&escaped) = chars.get(pos) else {
                    return Err(format!("line {line}: unterminated escape"));
                };
                pos += 1;
                out.push(match escaped {
                    'n' => '\n',
                    't' => '\t',
                    '"' | '\\' => escaped,
                    other => return Err(format!("line {line}: unknown escape \\{other}")),
                });
            }
            '\n' => {
                lines += 1;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
}

/// Reads a raw `#"..."` body after its opening quote: everything up to the next `"`.
fn read_raw(chars: &[char], pos: usize, line: usize) -> Result<(String, usize, usize), String> {
    let end = chars[pos..]
        .iter()
        .position(|c| *c == '"')
        .ok_or_else(|| format!("line {line}: unterminated regex"))?;
    let text: String = chars[pos..pos + end].iter().collect();
    let lines = text.matches('\n').count();
    Ok((text, pos + end + 1, lines))
}

/// Every `(param "NAME")` in `forms`, in order of appearance.
pub fn param_references(forms: &[Sexp]) -> Vec<String> {
    let mut out = Vec::new();
    for form in forms {
        if let Sexp::List(items) = form {
            if let [Sexp::Atom(head), Sexp::Str(name)] = items.as_slice()
                && head == "param"
            {
                out.push(name.clone());
            }
            out.extend(param_references(items));
        }
    }
    out
}

/// An address a network operation names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    /// An IP endpoint: the host as the kernel reports it (`127.0.0.1`, `::1`, `::ffff:127.0.0.1`,
    /// `93.184.216.34`) and the port.
    Ip(String, u16),
    /// A Unix socket's path.
    Unix(PathBuf),
}

/// One operation a process attempts, with everything a filter may look at.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The operation (`file-write-data`, `network-outbound`, `mach-lookup`, `sysctl-read`, ...).
    pub op: String,
    /// The file the operation is on (file operations).
    pub path: Option<PathBuf>,
    /// The vnode type of `path` (`CHARACTER-DEVICE`, `DIRECTORY`, `REGULAR-FILE`); by default a character
    /// device under `/dev/`, else a regular file.
    pub vnode: Option<String>,
    /// The sandbox extensions the file carries (`com.apple.sandbox.pty` on a PTY opened inside the sandbox).
    pub extensions: Vec<String>,
    /// The local address (bind, inbound).
    pub local: Option<Addr>,
    /// The remote address (outbound).
    pub remote: Option<Addr>,
    /// The name a non-file operation is about: a mach service, a sysctl, a POSIX IPC name, an IOKit class.
    pub name: Option<String>,
    /// `socket-domain` of `system-socket` (`AF_UNIX`, `AF_INET`).
    pub socket_domain: Option<String>,
    /// Which process a signal or process-info operation targets: `same-sandbox` or `other`.
    pub target: Option<String>,
}

impl Request {
    /// `op` on the file `path`.
    pub fn file(op: &str, path: impl Into<PathBuf>) -> Self {
        Request { op: op.into(), path: Some(path.into()), ..Request::default() }
    }
    /// The same request on a file carrying `extension`.
    pub fn with_extension(mut self, extension: &str) -> Self {
        self.extensions.push(extension.into());
        self
    }
    /// `connect()` to `addr`.
    pub fn connect(addr: Addr) -> Self {
        Request { op: "network-outbound".into(), remote: Some(addr), ..Request::default() }
    }
    /// `bind()` to `addr`.
    pub fn bind(addr: Addr) -> Self {
        Request { op: "network-bind".into(), local: Some(addr), ..Request::default() }
    }
    /// Accepting a connection on the local address `addr`.
    pub fn inbound(addr: Addr) -> Self {
        Request { op: "network-inbound".into(), local: Some(addr), ..Request::default() }
    }
    /// `op` on the name `name` (`mach-lookup`, `sysctl-read`, `ipc-posix-shm-write-create`, ...).
    pub fn named(op: &str, name: &str) -> Self {
        Request { op: op.into(), name: Some(name.into()), ..Request::default() }
    }
    /// `socket(domain, ...)`.
    pub fn socket(domain: &str) -> Self {
        Request { op: "system-socket".into(), socket_domain: Some(domain.into()), ..Request::default() }
    }
    /// A signal to a process in the same sandbox or another (`same-sandbox`, `other`).
    pub fn signal(target: &str) -> Self {
        Request { op: "signal".into(), target: Some(target.into()), ..Request::default() }
    }
}

/// `IP:port` of a TCP or UDP endpoint.
pub fn ip(host: &str, port: u16) -> Addr {
    Addr::Ip(host.into(), port)
}

/// A Unix socket at `path`.
pub fn unix(path: &str) -> Addr {
    Addr::Unix(path.into())
}

/// Whether the profile allows `operation` on the file `path`, given its parameters ([`decide`]).
pub fn allows(
    forms: &[Sexp],
    operation: &str,
    path: &Path,
    params: &[(String, OsString)],
) -> Result<bool, String> {
    decide(forms, &Request::file(operation, path), params)
}

/// Whether the profile allows `request`, given its parameters, the way Seatbelt decides: the profile starts
/// with `(deny default)`, and of the rules whose operation covers the request and one of whose filters matches
/// (a rule without filters always matches), the **last** one decides, `allow` or `deny` (so a later deny
/// overrides an earlier allow and a later allow an earlier deny). Filters: `literal`/`path`, `subpath`, `regex`
/// (on the file's path), `vnode-type`, `extension`, `require-all`/`require-any`/`require-not`, `local` and
/// `remote` with `ip`/`tcp`/`udp "host:port"` (host `*` or `localhost`, which is 127.0.0.1 and ::1 only, as
/// SBPL's) or `unix-socket` with path filters, `global-name`, `sysctl-name`/`-prefix`/`-regex`,
/// `ipc-posix-name`/`-prefix`/`-regex`, `iokit-registry-entry-class`, `socket-domain`, `target`. Anything else,
/// a filter the request has no field for, or an operation name that is not SBPL's, is an error: a profile that
/// outgrows the evaluator fails the tests instead of passing them blindly.
pub fn decide(forms: &[Sexp], request: &Request, params: &[(String, OsString)]) -> Result<bool, String> {
    let mut allowed: Option<bool> = None;
    for form in forms {
        let Sexp::List(items) = form else { return Err(format!("top-level atom {form:?}")) };
        let Some(Sexp::Atom(head)) = items.first() else { return Err(format!("form without head {form:?}")) };
        let ops: Vec<&str> = items[1..]
            .iter()
            .map_while(|item| match item {
                Sexp::Atom(op) => Some(op.as_str()),
                _ => None,
            })
            .collect();
        let filters = &items[1 + ops.len()..];
        let verdict = match head.as_str() {
            "version" => continue,
            "deny" if ops == ["default"] && filters.is_empty() => {
                if allowed.is_some() {
                    return Err("(deny default) after other rules".into());
                }
                allowed = Some(false);
                continue;
            }
            "deny" => false,
            "allow" => true,
            other => return Err(format!("unknown top-level form {other}")),
        };
        if allowed.is_none() {
            return Err("a rule before (deny default)".into());
        }
        for op in &ops {
            check_operation(op)?;
        }
        if !ops.iter().any(|op| op_matches(op, &request.op)) {
            continue;
        }
        let mut matched = filters.is_empty();
        for filter in filters {
            if eval_filter(filter, request, params)? {
                matched = true;
            }
        }
        if matched {
            allowed = Some(verdict);
        }
    }
    allowed.ok_or_else(|| "no (deny default)".to_owned())
}

/// The operation names (and `*` families) the evaluator knows are SBPL's.
const OPERATIONS: &[&str] = &[
    "default",
    "process-exec",
    "process-fork",
    "signal",
    "process-info*",
    "file-read*",
    "file-read-data",
    "file-read-metadata",
    "file-write*",
    "file-write-data",
    "file-write-create",
    "file-write-unlink",
    "file-write-mode",
    "file-write-owner",
    "file-write-flags",
    "file-write-times",
    "file-write-xattr",
    "file-ioctl",
    "user-preference-read",
    "pseudo-tty",
    "mach-host*",
    "mach-lookup",
    "sysctl-read",
    "sysctl-write",
    "iokit-open",
    "ipc-posix-sem",
    "ipc-posix-shm*",
    "ipc-posix-shm-read-data",
    "ipc-posix-shm-read-metadata",
    "ipc-posix-shm-write-create",
    "ipc-posix-shm-write-data",
    "ipc-posix-shm-write-unlink",
    "network*",
    "network-outbound",
    "network-inbound",
    "network-bind",
    "system-socket",
];

fn check_operation(op: &str) -> Result<(), String> {
    if OPERATIONS.contains(&op) { Ok(()) } else { Err(format!("operation {op} unknown to the evaluator")) }
}

/// `file-write*` covers `file-write-data`; a name without `*` covers itself.
fn op_matches(rule_op: &str, operation: &str) -> bool {
    match rule_op.strip_suffix('*') {
        Some(prefix) => operation.starts_with(prefix),
        None => rule_op == operation,
    }
}

fn eval_filter(filter: &Sexp, request: &Request, params: &[(String, OsString)]) -> Result<bool, String> {
    let Sexp::List(items) = filter else { return Err(format!("filter is not a list: {filter:?}")) };
    let Some(Sexp::Atom(head)) = items.first() else { return Err(format!("filter without head {filter:?}")) };
    let args = &items[1..];
    let path = || request.path.as_deref().ok_or_else(|| format!("{head} on a request without a path"));
    let name = || request.name.as_deref().ok_or_else(|| format!("{head} on a request without a name"));
    match (head.as_str(), args) {
        ("literal" | "path" | "path-literal", [arg]) => Ok(path()? == string_arg(arg, params)?.as_path()),
        ("subpath", [arg]) => Ok(path()?.starts_with(string_arg(arg, params)?)),
        // `path-regex` is the spelling Claude Code's sandbox runtime uses inside `unix-socket`.
        ("regex" | "path-regex", [arg]) => {
            regex_matches(&regex_arg(arg, params)?, &path()?.to_string_lossy())
        }
        ("vnode-type", [Sexp::Atom(kind)]) => {
            let default = if path()?.starts_with("/dev/") { "CHARACTER-DEVICE" } else { "REGULAR-FILE" };
            Ok(request.vnode.as_deref().unwrap_or(default) == kind)
        }
        ("extension", [Sexp::Str(ext)]) => Ok(request.extensions.iter().any(|e| e == ext)),
        ("require-all", _) => {
            for arg in args {
                if !eval_filter(arg, request, params)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        ("require-any", _) => {
            for arg in args {
                if eval_filter(arg, request, params)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        ("require-not", [arg]) => Ok(!eval_filter(arg, request, params)?),
        ("local" | "remote", [Sexp::Atom(kind), rest @ ..]) => {
            let addr = if head == "local" { request.local.as_ref() } else { request.remote.as_ref() };
            address_matches(kind, rest, addr, params)
        }
        ("global-name" | "iokit-registry-entry-class", [Sexp::Str(value)]) => Ok(name()? == value),
        ("sysctl-name" | "ipc-posix-name", [Sexp::Str(value)]) => Ok(name()? == value),
        ("sysctl-name-prefix" | "ipc-posix-name-prefix", [Sexp::Str(prefix)]) => {
            Ok(name()?.starts_with(prefix.as_str()))
        }
        ("sysctl-name-regex" | "ipc-posix-name-regex", [arg]) => {
            regex_matches(&regex_arg(arg, params)?, name()?)
        }
        ("socket-domain", [Sexp::Atom(domain)]) => {
            Ok(request.socket_domain.as_deref() == Some(domain.as_str()))
        }
        ("target", [Sexp::Atom(target)]) => Ok(request.target.as_deref() == Some(target.as_str())),
        _ => Err(format!("unsupported filter {filter:?}")),
    }
}

/// `(local|remote ip|tcp|udp "host:port")` or `(local|remote unix-socket <path filters>)`.
fn address_matches(
    kind: &str,
    rest: &[Sexp],
    addr: Option<&Addr>,
    params: &[(String, OsString)],
) -> Result<bool, String> {
    match (kind, rest) {
        ("ip" | "tcp" | "udp", [Sexp::Str(spec)]) => {
            let (host, port) =
                spec.rsplit_once(':').ok_or_else(|| format!("address {spec} without a port"))?;
            if host != "*" && host != "localhost" {
                // What sandbox-exec says: "host must be * or localhost in network address".
                return Err(format!("host must be * or localhost in network address: {spec}"));
            }
            let port_ok = |p: u16| port == "*" || port.parse::<u16>().is_ok_and(|q| q == p);
            if port != "*" && port.parse::<u16>().is_err() {
                return Err(format!("bad port in {spec}"));
            }
            Ok(match addr {
                Some(Addr::Ip(h, p)) => (host == "*" || h == "127.0.0.1" || h == "::1") && port_ok(*p),
                _ => false,
            })
        }
        ("unix-socket", filters) => {
            let Some(Addr::Unix(path)) = addr else { return Ok(false) };
            if filters.is_empty() {
                return Ok(true);
            }
            let inner = Request::file("network-outbound", path.clone());
            for filter in filters {
                if eval_filter(filter, &inner, params)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        _ => Err(format!("unsupported address ({kind} {rest:?})")),
    }
}

/// A string literal, or `(param "NAME")` looked up in `params` (bytes kept as they are).
fn string_arg(arg: &Sexp, params: &[(String, OsString)]) -> Result<PathBuf, String> {
    match arg {
        Sexp::Str(s) => Ok(s.into()),
        Sexp::List(_) => Ok(Path::new(OsStr::from_bytes(param_value(arg, params)?.as_bytes())).to_path_buf()),
        _ => Err(format!("unsupported string argument {arg:?}")),
    }
}

/// The value of `(param "NAME")`.
fn param_value<'a>(arg: &Sexp, params: &'a [(String, OsString)]) -> Result<&'a OsString, String> {
    match arg {
        Sexp::List(items) => match items.as_slice() {
            [Sexp::Atom(head), Sexp::Str(name)] if head == "param" => params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
                .ok_or_else(|| format!("undefined parameter {name}")),
            _ => Err(format!("unsupported string argument {arg:?}")),
        },
        _ => Err(format!("unsupported string argument {arg:?}")),
    }
}

/// A regex literal (`#"..."` or a string) or a parameter holding one, which must be ASCII (the generator's
/// expressions are).
fn regex_arg(arg: &Sexp, params: &[(String, OsString)]) -> Result<String, String> {
    match arg {
        Sexp::Regex(r) | Sexp::Str(r) => Ok(r.clone()),
        Sexp::List(_) => {
            let value = param_value(arg, params)?;
            let text = value.to_str().ok_or_else(|| format!("regex parameter {value:?} is not UTF-8"))?;
            if !text.is_ascii() {
                return Err(format!("regex parameter {text:?} is not ASCII"));
            }
            Ok(text.to_owned())
        }
        _ => Err(format!("unsupported regex argument {arg:?}")),
    }
}

/// Whether `regex` (POSIX-extended syntax, as SBPL's; `regex_lite` reads the subset uexec uses the same way)
/// matches `text`.
fn regex_matches(regex: &str, text: &str) -> Result<bool, String> {
    let compiled =
        regex_lite::Regex::new(&format!("(?s){regex}")).map_err(|e| format!("regex {regex}: {e}"))?;
    Ok(compiled.is_match(text))
}

#[test]
fn reader_handles_strings_escapes_regexes_and_comments() {
    let forms = parse("(a \"x ) ; \\\" y\" #\"^/d[0-9]+$\") ; trailing ( comment\n(b (c))").unwrap();
    assert_eq!(
        forms,
        vec![
            Sexp::List(vec![
                Sexp::Atom("a".into()),
                Sexp::Str("x ) ; \" y".into()),
                Sexp::Regex("^/d[0-9]+$".into())
            ]),
            Sexp::List(vec![Sexp::Atom("b".into()), Sexp::List(vec![Sexp::Atom("c".into())])]),
        ]
    );
}

#[test]
fn reader_rejects_unbalanced_and_unterminated_input() {
    assert!(parse("(a (b)").unwrap_err().contains("never closed"));
    assert!(parse("(a))").unwrap_err().contains("unbalanced"));
    assert!(parse("(a \"b)").unwrap_err().contains("unterminated"));
    assert!(parse("(a \"\\q\")").unwrap_err().contains("unknown escape"));
    assert!(parse("; (only a comment").unwrap().is_empty());
}

#[test]
fn evaluator_applies_require_not_and_params() {
    let forms = parse(
        "(version 1)(deny default)(allow file-write* (require-all (subpath (param \"R\")) \
         (require-not (subpath (param \"R_RO\")))))(allow file-ioctl (regex #\"^/dev/ttys[0-9]+$\"))",
    )
    .unwrap();
    let params = vec![("R".to_owned(), OsString::from("/w")), ("R_RO".to_owned(), OsString::from("/w/.git"))];
    assert!(allows(&forms, "file-write-data", Path::new("/w/a"), &params).unwrap());
    assert!(!allows(&forms, "file-write-data", Path::new("/w/.git/config"), &params).unwrap());
    assert!(!allows(&forms, "file-write-data", Path::new("/wx"), &params).unwrap());
    assert!(!allows(&forms, "file-read-data", Path::new("/w/a"), &params).unwrap());
    assert!(allows(&forms, "file-ioctl", Path::new("/dev/ttys012"), &params).unwrap());
    assert!(!allows(&forms, "file-ioctl", Path::new("/dev/ttys"), &params).unwrap());
    assert!(allows(&forms, "file-write-data", Path::new("/w/a"), &[]).is_err());
}

#[test]
fn the_last_matching_rule_decides_so_a_later_deny_overrides_an_earlier_allow() {
    let forms = parse(
        "(version 1)(deny default)(allow file-read*)(deny file-read* (subpath \"/h\") (regex #\"^/[Hh]2(/.*)?$\"))\
         (allow file-read-metadata (literal \"/h/ok\"))",
    )
    .unwrap();
    let read = |path: &str| decide(&forms, &Request::file("file-read-data", path), &[]).unwrap();
    let meta = |path: &str| decide(&forms, &Request::file("file-read-metadata", path), &[]).unwrap();
    assert!(read("/x") && !read("/h") && !read("/h/a") && !read("/H2/a") && read("/h3"));
    // A later allow overrides the deny again, for its operation only.
    assert!(meta("/h/ok") && !read("/h/ok") && !meta("/h/other"));
    // Rules before (deny default), unknown operations and unknown filters are errors.
    assert!(
        decide(
            &parse("(allow file-read*)(deny default)").unwrap(),
            &Request::file("file-read-data", "/"),
            &[]
        )
        .is_err()
    );
    assert!(
        decide(
            &parse("(deny default)(allow file-reed*)").unwrap(),
            &Request::file("file-read-data", "/"),
            &[]
        )
        .is_err()
    );
    assert!(
        decide(
            &parse("(deny default)(allow file-read* (frobnicate \"x\"))").unwrap(),
            &Request::file("file-read-data", "/"),
            &[]
        )
        .is_err()
    );
}

#[test]
fn the_evaluator_holds_network_unix_socket_mach_sysctl_ipc_signal_and_extension_rules() {
    let forms = parse(
        "(version 1)(deny default)\
         (allow network-outbound (remote ip \"localhost:8080\"))\
         (allow network-bind (local ip \"localhost:*\"))\
         (allow network-outbound (remote unix-socket (subpath (param \"R\"))))\
         (deny network-outbound (remote unix-socket (regex #\"/tmux-[0-9]+/\")))\
         (allow mach-lookup (global-name \"com.apple.trustd.agent\"))\
         (allow sysctl-read (sysctl-name \"hw.ncpu\") (sysctl-name-prefix \"net.routetable.\"))\
         (allow ipc-posix-shm-write-create (ipc-posix-name-regex #\"^/__KMP_REGISTERED_LIB_[0-9]+$\") \
           (ipc-posix-name-prefix \"/psm_\"))\
         (allow signal (target same-sandbox))\
         (allow system-socket (socket-domain AF_UNIX))\
         (allow file-read* (require-all (regex #\"^/dev/ttys[0-9]+$\") (extension \"com.apple.sandbox.pty\")))",
    )
    .unwrap();
    let params = vec![("R".to_owned(), OsString::from("/private/tmp"))];
    let ok = |r: Request| decide(&forms, &r, &params).unwrap();
    assert!(ok(Request::connect(ip("127.0.0.1", 8080))) && ok(Request::connect(ip("::1", 8080))));
    assert!(!ok(Request::connect(ip("::ffff:127.0.0.1", 8080))), "SBPL's localhost is 127.0.0.1 and ::1");
    assert!(!ok(Request::connect(ip("127.0.0.1", 8081))) && !ok(Request::connect(ip("93.184.216.34", 8080))));
    assert!(ok(Request::bind(ip("127.0.0.1", 3000))) && !ok(Request::bind(ip("192.168.1.5", 3000))));
    assert!(ok(Request::connect(unix("/private/tmp/ws/s.sock"))));
    assert!(!ok(Request::connect(unix("/private/tmp/tmux-501/default"))));
    assert!(!ok(Request::connect(unix("/private/var/run/docker.sock"))));
    assert!(!ok(Request::bind(unix("/private/tmp/ws/s.sock"))), "bind is another operation");
    assert!(ok(Request::named("mach-lookup", "com.apple.trustd.agent")));
    assert!(!ok(Request::named("mach-lookup", "com.apple.SecurityServer")));
    assert!(
        ok(Request::named("sysctl-read", "net.routetable.0.0"))
            && !ok(Request::named("sysctl-read", "kern.proc.all"))
    );
    assert!(ok(Request::named("ipc-posix-shm-write-create", "/__KMP_REGISTERED_LIB_42")));
    assert!(ok(Request::named("ipc-posix-shm-write-create", "/psm_1a2b")));
    assert!(!ok(Request::named("ipc-posix-shm-write-create", "/__KMP_REGISTERED_LIB_x")));
    assert!(!ok(Request::named("ipc-posix-shm-read-data", "/psm_1a2b")));
    assert!(ok(Request::signal("same-sandbox")) && !ok(Request::signal("other")));
    assert!(ok(Request::socket("AF_UNIX")) && !ok(Request::socket("AF_INET")));
    assert!(ok(Request::file("file-read-data", "/dev/ttys003").with_extension("com.apple.sandbox.pty")));
    assert!(!ok(Request::file("file-read-data", "/dev/ttys003")));
    // An address SBPL refuses to compile is an error here too.
    let bad = parse("(version 1)(deny default)(allow network-outbound (remote ip \"10.0.0.1:80\"))").unwrap();
    assert!(decide(&bad, &Request::connect(ip("10.0.0.1", 80)), &[]).is_err());
}
