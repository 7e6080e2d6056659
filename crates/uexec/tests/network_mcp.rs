//! Network by domain end to end through `uexec mcp` and `uexec run`, with the real package registries this
//! machine reaches: their hosts are read at test time from pip's and npm's own configuration (never written in
//! the repository). With those hosts allowed, `pip download` and `npm view` work inside the sandbox; another
//! host gets the proxy's 403 (and the response and the audit log name it); a literal IP over TCP, a UDP DNS
//! query and ICMP find no route; without the proxy variables nothing gets out. Each denied probe is paired with
//! an allowed one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use common::*;
use serde_json::{Value, json};

/// The host of a URL (`https://pypi.org/simple` -> `pypi.org`).
fn host_of(url: &str) -> String {
    let rest = url.trim().split_once("://").map_or(url.trim(), |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    authority.split(':').next().unwrap_or_default().to_owned()
}

/// The output of a configuration query, trimmed.
fn query(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The hosts pip downloads from here: its index (`PIP_INDEX_URL`, else `index-url` in `pip config list`, else
/// pip's own default index) and pip's default file host.
fn pip_hosts() -> Vec<String> {
    let python = "import sys; from pip._internal.models.index import PyPI; print(PyPI.simple_url); \
                  print(PyPI.file_storage_domain)";
    let defaults = query("python3", &["-c", python]);
    let mut lines = defaults.lines();
    let (default_index, file_host) = (lines.next().unwrap().to_owned(), lines.next().unwrap().to_owned());
    let configured = std::env::var("PIP_INDEX_URL").ok().or_else(|| {
        query("python3", &["-m", "pip", "config", "list"]).lines().find_map(|line| {
            let (key, value) = line.split_once('=')?;
            key.ends_with("index-url").then(|| value.trim_matches(['\'', '"']).to_owned())
        })
    });
    let mut hosts = vec![host_of(&configured.unwrap_or(default_index))];
    if !hosts.contains(&file_host) {
        hosts.push(file_host);
    }
    hosts
}

/// The host of npm's registry (`npm config get registry`).
fn npm_host() -> String {
    host_of(&query("npm", &["config", "get", "registry"]))
}

/// Run `cmd` to its end through `exec_command` and `write_stdin` polls: every response's full text.
fn run_to_end(server: &mut McpServer, cmd: &str) -> Vec<String> {
    let mut texts = Vec::new();
    let mut r: Value =
        server.call("exec_command", json!({ "cmd": cmd, "login": false, "yield_time_ms": 30000 }));
    loop {
        texts.push(text(&r));
        if exit_code(&r).is_some() {
            return texts;
        }
        let id = session_id(&r);
        r = server.call("write_stdin", json!({ "session_id": id, "chars": "", "yield_time_ms": 30000 }));
    }
}

/// Everything the command printed across `texts`.
fn printed(texts: &[String]) -> String {
    texts
        .iter()
        .filter_map(|t| t.split_once("\nOutput:\n").map(|(_, o)| o.to_owned()))
        .collect::<Vec<_>>()
        .join("")
}

const PROBES: &str = r#"
import os, socket
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno)
port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
attempt("proxy-port", lambda: socket.create_connection(("127.0.0.1", port), timeout=10).close())
attempt("tcp-literal-ip", lambda: socket.create_connection(("1.1.1.1", 443), timeout=10).close())
def dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04pypi\x03org\x00\x00\x01\x00\x01", ("8.8.8.8", 53))
attempt("udp-dns", dns)
def ping():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("1.1.1.1", 0))
attempt("icmp", ping)
def ping_dgram():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("1.1.1.1", 0))
attempt("icmp-dgram", ping_dgram)
attempt("resolve", lambda: socket.getaddrinfo("pypi.org", 443))
"#;

#[test]
fn allowed_registries_work_and_everything_else_is_refused() {
    let ws = Workspace::new();
    let mut hosts = pip_hosts();
    hosts.push(npm_host());
    let audit = ws.outside.path().join("audit.jsonl");
    let mut args: Vec<String> = vec!["--audit-log".into(), audit.display().to_string()];
    for host in &hosts {
        args.push("--allow-domain".into());
        args.push(host.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = McpServer::start_initialized(&ws, &args, false);

    // Allowed: pip and npm reach their registries through the proxy (caches inside the workspace: the person's
    // own are read-only here).
    // No local wheel directory: the file must come over the network.
    let pip = run_to_end(
        &mut server,
        "env -u PIP_FIND_LINKS -u PIP_NO_INDEX pip download --no-deps --no-cache-dir -d dl six 2>&1 | tail -5",
    );
    assert!(printed(&pip).contains("Downloading six"), "{pip:?}");
    assert!(printed(&pip).contains("Successfully downloaded six"), "{pip:?}");
    assert!(std::fs::read_dir(ws.path().join("dl")).unwrap().count() == 1);
    let npm =
        run_to_end(&mut server, "npm_config_cache=$PWD/.npm-cache npm view is-number version 2>/dev/null");
    let version = printed(&npm);
    assert!(
        version.lines().any(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_digit() || c == '.')),
        "{npm:?}"
    );
    assert!(
        !pip.iter().chain(&npm).any(|t| t.contains("[uexec] not on the domain allowlist")),
        "{pip:?} {npm:?}"
    );

    // Refused: a host not on the list gets the 403 naming it and the setting; the response notes it.
    let refused = run_to_end(
        &mut server,
        "curl -sS https://example.com/ 2>&1; curl -sS -x \"$HTTP_PROXY\" http://example.org/x",
    );
    let out = printed(&refused);
    assert!(out.contains("CONNECT tunnel failed, response 403"), "{refused:?}");
    assert!(
        out.contains("example.org is not an allowed domain") && out.contains("--allow-domain example.org"),
        "{refused:?}"
    );
    let last = refused.last().unwrap();
    assert!(
        last.contains("[uexec] not on the domain allowlist: example.com:443")
            && last.contains("not on the domain allowlist: example.org:80"),
        "{refused:?}"
    );
    assert_eq!(last.matches("[uexec] not on the domain allowlist").count(), 1, "one note: {refused:?}");
    let log = std::fs::read_to_string(&audit).unwrap();
    let refused: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["event"] == "sandbox_refused" && r["target"] == "example.com:443")
        .collect();
    assert!(!refused.is_empty(), "{log}");
    let record = &refused[0];
    assert_eq!(record["kind"], "connect", "{record}");
    assert_eq!(record["reason"], "not on the domain allowlist", "{record}");
    assert!(record["allow"].as_str().unwrap().starts_with("--allow-domain example.com"), "{record}");
    assert_eq!(record["by"], "proxy", "{record}");

    // No other way out: the proxy's port is reachable, nothing else is.
    let probes = printed(&run_to_end(&mut server, &format!("python3 -c '{PROBES}'")));
    assert!(probes.contains("proxy-port ok"), "{probes}");
    // ENETUNREACH (Linux numbering).
    let unreachable = 101;
    for name in ["tcp-literal-ip", "udp-dns", "icmp"] {
        assert!(probes.contains(&format!("{name} errno {unreachable}")), "{name}: {probes}");
    }
    assert!(!probes.contains("icmp-dgram ok") && !probes.contains("resolve ok"), "{probes}");

    // Without the proxy variables: the allowed host itself is out of reach (no DNS, no route); the twin with
    // them reaches it.
    let pypi = &hosts[0];
    // The address the host's own resolver gives (read now, not written here).
    let address = query("python3", &["-c", &format!("import socket; print(socket.gethostbyname('{pypi}'))")]);
    let direct = printed(&run_to_end(
        &mut server,
        &format!(
            "curl -sS -o /dev/null -w 'with proxy %{{http_code}}\\n' https://{pypi}/; \
             unset HTTPS_PROXY https_proxy HTTP_PROXY http_proxy ALL_PROXY all_proxy; \
             curl -sS -m 10 -o /dev/null https://{pypi}/ 2>&1 || echo 'direct failed'; \
             curl -sS -m 10 -o /dev/null --resolve {pypi}:443:{address} https://{pypi}/ 2>&1 || echo 'by address failed'"
        ),
    ));
    assert!(direct.contains("with proxy 200") || direct.contains("with proxy 30"), "{direct}");
    assert!(direct.contains("direct failed") && direct.contains("by address failed"), "{direct}");
}

#[test]
fn uexec_run_takes_the_same_route_and_names_refused_hosts() {
    let ws = Workspace::new();
    let pypi = pip_hosts().remove(0);
    let out = uexec_command(&ws, &["run", "--allow-domain", &pypi, "--deny-domain", "bad.example", "--", "bash", "-c"])
        .arg(format!(
            "curl -sS -o /dev/null -w 'allowed %{{http_code}}\\n' https://{pypi}/; curl -sS https://bad.example/ 2>&1; \
             curl -sS -x \"$HTTP_PROXY\" http://bad.example/ ; true"
        ))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("allowed 200") || stdout.contains("allowed 30"), "{stdout} {stderr}");
    assert!(stdout.contains("response 403"), "{stdout}");
    assert!(stdout.contains("matches the deny pattern bad.example"), "{stdout}");
    assert!(
        stderr.contains("[uexec] sandbox refused: connection to bad.example:443 (deny pattern bad.example)")
            && stderr.contains("connection to bad.example:80 (deny pattern bad.example)"),
        "{stderr}"
    );
}

over_both_transports!(
    under_on_request_a_person_can_allow_a_refused_domain_for_the_session,
    a_domain_question_reaches_the_client_while_none_of_its_calls_is_in_flight,
);

fn under_on_request_a_person_can_allow_a_refused_domain_for_the_session(t: Transport) {
    let ws = Workspace::new();
    let pypi = pip_hosts().remove(0);
    let npm = npm_host();
    let mut server = McpServer::start_initialized_over(t, &ws, &["--allow-domain", &pypi], true);
    server.answers = vec!["approve_for_session".into(), "deny".into()];
    let probe = |host: &str| {
        format!("curl -sS -o /dev/null -w '{host} %{{http_code}}\\n' https://{host}/ 2>&1; true")
    };

    // Off the list: the person is asked, allows it, the connection goes through; the next one is not asked.
    let first = run_to_end(&mut server, &probe(&npm));
    assert!(printed(&first).contains(&format!("{npm} 200")), "{first:?}");
    assert_eq!(server.elicitations.len(), 1, "{:?}", server.elicitations);
    let message = server.elicitations[0]["message"].as_str().unwrap();
    assert!(message.contains(&format!("Allow network access to {npm}?")), "{message}");
    assert!(message.contains(&pypi), "{message}");
    let again = run_to_end(&mut server, &probe(&npm));
    assert!(printed(&again).contains(&format!("{npm} 200")), "{again:?}");
    assert_eq!(server.elicitations.len(), 1);

    // Denied by the person: 403, noted, and remembered too.
    let denied = run_to_end(&mut server, &probe("example.com"));
    assert!(printed(&denied).contains("response 403"), "{denied:?}");
    assert!(
        denied.last().unwrap().contains(": example.com:443") && denied.last().unwrap().contains("\n[uexec] "),
        "{denied:?}"
    );
    let again = run_to_end(&mut server, &probe("example.com"));
    assert!(printed(&again).contains("response 403"), "{again:?}");
    assert_eq!(server.elicitations.len(), 2);
    // A listed host is never asked about.
    let listed = run_to_end(&mut server, &probe(&pypi));
    assert!(!printed(&listed).contains("response 403"), "{listed:?}");
    assert_eq!(server.elicitations.len(), 2);
}

/// The proxy's question belongs to no call: it goes to the client's own connection, also when none of the
/// client's calls is in flight (a command running in the background reaches for a host off the list).
fn a_domain_question_reaches_the_client_while_none_of_its_calls_is_in_flight(t: Transport) {
    let ws = Workspace::new();
    let pypi = pip_hosts().remove(0);
    let npm = npm_host();
    let mut server = McpServer::start_initialized_over(t, &ws, &["--allow-domain", &pypi], true);
    // Connects once the file `go` exists, which the test makes with no call in flight.
    let cmd = format!(
        "until [ -e go ]; do sleep 0.05; done; curl -sS -o /dev/null -w '{npm} %{{http_code}}\\n' https://{npm}/ 2>&1; true"
    );
    let r = server.call("exec_command", json!({ "cmd": cmd, "login": false, "yield_time_ms": 250 }));
    let session = session_id(&r);
    std::fs::write(ws.path().join("go"), "").unwrap();
    let question = server.wait_method("elicitation/create");
    let message = question["params"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("Allow network access to {npm}?")), "{message}");
    server.send(&json!({ "jsonrpc": "2.0", "id": question["id"].clone(),
        "result": { "action": "accept", "content": { "decision": "approve_for_session" } } }));
    let mut seen = String::new();
    loop {
        let r =
            server.call("write_stdin", json!({ "session_id": session, "chars": "", "yield_time_ms": 30000 }));
        seen.push_str(&output(&r));
        if exit_code(&r).is_some() {
            break;
        }
    }
    assert!(seen.contains(&format!("{npm} 200")), "{seen}");
}

/// What a test front end served: the `Host` values of each request.
type Served = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A front end on the host's `127.0.0.1:P` and `127.0.0.2:P` (one port): each connection gets one request
/// answered with `hosts=<the Host values it received>`.
fn front_end() -> (u16, Served) {
    use std::io::{BufRead, BufReader, Write};
    let mut tries = 0;
    let (first, second) = loop {
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        match std::net::TcpListener::bind(("127.0.0.2", port)) {
            Ok(second) => break (first, second),
            // The port is taken on 127.0.0.2: another one (a few tries; 127.0.0.2 itself must work).
            Err(_) if tries < 20 => tries += 1,
            Err(e) => panic!("cannot listen on 127.0.0.2: {e}"),
        }
    };
    let port = first.local_addr().unwrap().port();
    let served = Served::default();
    for listener in [first, second] {
        let served = served.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut hosts = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("host")
                    {
                        hosts.push(value.trim().to_owned());
                    }
                }
                let answer = format!("hosts={}", hosts.join(","));
                served.lock().unwrap().push(answer.clone());
                let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}", answer.len());
            }
        });
    }
    (port, served)
}

/// Raw requests to the proxy (`$HTTP_PROXY`) for 127.0.0.1 and 127.0.0.2 in the spellings a resolver reads as
/// them: for each, a `CONNECT` carrying a request and a plain request with a forged `Host`; then a direct
/// connection that ignores the proxy.
const SPELLINGS: &str = r#"
import os, socket, sys
proxy = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
port = int(sys.argv[1])
def ask(text):
    s = socket.create_connection(("127.0.0.1", proxy), timeout=30)
    s.sendall(text.encode())
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data.decode(errors="replace").splitlines()
        data += chunk
for last in (1, 2):
    for host in [f"0x7f00000{last}", str(0x7f000000 + last), f"0177.0.0.0{last}", f"127.{last}",
                 f"[::ffff:127.0.0.{last}]", f"[::ffff:7f00:{last}]", f"127.0.0.{last}."]:
        connect = ask(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: tunnel\r\n\r\n")
        plain = ask(f"GET http://{host}:{port}/ HTTP/1.1\r\nHost: forbidden.test\r\n\r\n")
        print(f"{last} {host} connect={connect[0]} | plain={plain[0]} | {plain[-1]}")
try:
    socket.create_connection(("127.0.0.2", port), timeout=10)
    print("direct connected")
except OSError as e:
    print(f"direct errno {e.errno}")
"#;

/// `--network --deny-domain ADDRESS` is enforced for every sandboxed command, whatever its
/// environment: the command is in the proxy's loopback-only namespace, and the proxy refuses the address in
/// every spelling (`0x7f000001`, `2130706433`, `0177.0.0.01`, `127.1`, `[::ffff:7f00:1]`, a trailing dot) while
/// the twin address in the same spellings is reached, with the `Host` header the rule checked.
#[test]
fn network_with_a_deny_list_refuses_every_spelling_of_the_address_and_only_the_proxy_leads_out() {
    let ws = Workspace::new();
    let (port, served) = front_end();
    let port_text = port.to_string();
    let out = uexec_command(
        &ws,
        &["run", "--network", "--deny-domain", "127.0.0.1", "--", "python3", "-c", SPELLINGS, &port_text],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.iter().filter(|l| l.starts_with("1 ")).count(), 7, "{stdout} {stderr}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("2 ")).count(), 7, "{stdout} {stderr}");
    for line in &lines {
        if line.starts_with("1 ") {
            assert!(line.contains("connect=HTTP/1.1 403 Forbidden | plain=HTTP/1.1 403 Forbidden"), "{line}");
            assert!(line.contains(&format!("127.0.0.1:{port} refused: the host matches the deny")), "{line}");
        } else if line.starts_with("2 ") {
            assert!(
                line.contains("connect=HTTP/1.1 200 Connection Established | plain=HTTP/1.1 200 OK"),
                "{line}"
            );
            assert!(line.ends_with(&format!("| hosts=127.0.0.2:{port}")), "{line}");
        }
    }
    // Outside the proxy there is no way to the host: the namespace's own loopback has nothing on the port.
    assert!(stdout.contains("direct errno 111"), "{stdout}");
    assert!(stderr.contains(&format!("[uexec] sandbox refused: connection to 127.0.0.1:{port}")), "{stderr}");
    let served = served.lock().unwrap().clone();
    assert_eq!(served.iter().filter(|s| *s == "hosts=tunnel").count(), 7, "{served:?}");
    assert_eq!(served.iter().filter(|s| **s == format!("hosts=127.0.0.2:{port}")).count(), 7, "{served:?}");
    assert_eq!(served.len(), 14, "{served:?}");
}

/// An allowed literal `127.0.0.1:PORT` is the host's service, reached through the proxy
/// with the client's defaults (no `--noproxy ''`): the rule takes `127.0.0.1` out of `NO_PROXY`, while
/// `localhost` stays the namespace's own loopback (nothing listens there). The twin `127.0.0.2:PORT`, not
/// allowed, gets the proxy's 403.
#[test]
fn an_allowed_loopback_address_is_the_hosts_and_reached_with_the_clients_defaults() {
    let ws = Workspace::new();
    let (port, served) = front_end();
    let script = format!(
        "echo \"no_proxy=$NO_PROXY\"; \
         echo \"curl=$(curl -s http://127.0.0.1:{port}/)\"; \
         echo \"twin=$(curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.2:{port}/)\"; \
         python3 -c 'import urllib.request; print(\"python=\" + urllib.request.urlopen(\"http://127.0.0.1:{port}/\", timeout=30).read().decode())'; \
         curl -s -o /dev/null http://localhost:{port}/; echo \"localhost=$?\""
    );
    let allow = format!("127.0.0.1:{port}");
    let out =
        uexec_command(&ws, &["run", "--allow-domain", &allow, "--", "sh", "-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("no_proxy=localhost,::1\n"), "{stdout} {stderr}");
    assert!(stdout.contains(&format!("curl=hosts=127.0.0.1:{port}\n")), "{stdout} {stderr}");
    assert!(stdout.contains(&format!("python=hosts=127.0.0.1:{port}\n")), "{stdout} {stderr}");
    assert!(stdout.contains("twin=403\n"), "{stdout} {stderr}");
    // curl exit 7: connection refused on the namespace's own loopback.
    assert!(stdout.contains("localhost=7\n"), "{stdout} {stderr}");
    let served = served.lock().unwrap().clone();
    assert_eq!(served, vec![format!("hosts=127.0.0.1:{port}"); 2], "{served:?}");
}

/// The Codex CLI's two network-denial scenarios of its unified-exec suite
/// (`unified_exec_network_denial_emits_failed_background_end_event` and
/// `unified_exec_short_lived_network_denial_emits_failed_end_event`), replayed through `uexec mcp` in the
/// domain-allowlist mode (Codex's "limited" managed network): a Python program sends a plain request for a host
/// off the list to the proxy named by `HTTP_PROXY`. In the background scenario the call returns after 50 ms with
/// the session running and a later `write_stdin` reads the refusal; in the short-lived one the call's own
/// response has it. Either way the model reads the one refusal note naming the host and how to allow it, and
/// the audit log has its record; the twin, a host on the list, gets no note.
#[test]
fn the_codex_network_denial_scenarios_replayed_name_the_refused_host() {
    let ws = Workspace::new();
    let audit = ws.outside.path().join("audit.jsonl");
    let args = ["--audit-log", audit.to_str().unwrap(), "--allow-domain", "allowed.invalid"];
    let mut server = McpServer::start_initialized(&ws, &args, false);
    let request = |host: &str, tail: &str| {
        format!(
            "python3 -c \"import os, socket, time, urllib.parse; time.sleep(0.3); \
             proxy = urllib.parse.urlparse(os.environ['HTTP_PROXY']); \
             sock = socket.create_connection((proxy.hostname, proxy.port), timeout=2); \
             sock.sendall(b'GET http://{host}/ HTTP/1.1\\r\\nHost: {host}\\r\\n\\r\\n'); \
             print(sock.recv(1024).split(b'\\r\\n')[0].decode()){tail}\""
        )
    };
    let note = |host: &str| format!("[uexec] not on the domain allowlist: {host}:80");

    // The background scenario: `yield_time_ms` 50, the program keeps running for 5 s after its request.
    let host = "codex-network-denied.invalid";
    let first = server.call(
        "exec_command",
        json!({ "cmd": request(host, "; time.sleep(5)"), "yield_time_ms": 50, "login": false }),
    );
    assert_eq!(exit_code(&first), None, "{first}");
    let id = session_id(&first);
    let mut texts = vec![text(&first)];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !texts.iter().any(|t| t.contains(&note(host))) {
        assert!(std::time::Instant::now() < deadline, "no refusal note: {texts:?}");
        let poll =
            server.call("write_stdin", json!({ "session_id": id, "chars": "", "yield_time_ms": 2000 }));
        texts.push(text(&poll));
        if exit_code(&poll).is_some() {
            break;
        }
    }
    let all = texts.join("\n");
    assert!(all.contains("HTTP/1.1 403"), "{texts:?}");
    assert!(all.contains(&note(host)), "{texts:?}");
    assert_eq!(all.matches("[uexec] not on the domain allowlist").count(), 1, "noted once: {texts:?}");

    // The short-lived scenario: the response that reports the exit has the output and the note.
    let host = "codex-short-network-denied.invalid";
    let short = run_to_end(&mut server, &request(host, ""));
    let last = short.last().unwrap();
    assert!(printed(&short).contains("HTTP/1.1 403"), "{short:?}");
    assert!(last.contains(&note(host)), "{short:?}");

    // The audit log has one record per refused connection.
    let log = std::fs::read_to_string(&audit).unwrap();
    for host in ["codex-network-denied.invalid:80", "codex-short-network-denied.invalid:80"] {
        let records = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["event"] == "sandbox_refused" && r["target"] == host)
            .count();
        assert_eq!(records, 1, "{host}: {log}");
    }

    // The twin: a host on the list is not refused (it does not resolve, so the proxy answers 502), no note.
    let allowed = run_to_end(&mut server, &request("allowed.invalid", ""));
    assert!(!printed(&allowed).contains("403"), "{allowed:?}");
    assert!(!allowed.iter().any(|t| t.contains("[uexec] not on the domain allowlist")), "{allowed:?}");
}
