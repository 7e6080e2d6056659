//! Network probes: non-unix sockets fail with the network off and work with it on; unix sockets always work.

use std::net::{TcpListener, UdpSocket};

use crate::common::{Scratch, py, workspace_only};

/// Creates a TCP and a UDP socket and connects both to 127.0.0.1:`port`; prints one line per step.
fn connect_probe(tcp_port: u16, udp_port: u16) -> String {
    format!(
        r#"
import socket
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno, e.strerror)
def tcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.settimeout(10)
    s.connect(("127.0.0.1", {tcp_port})); s.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", {udp_port})); s.send(b"x"); s.close()
attempt("tcp", tcp)
attempt("udp", udp)
attempt("tcp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close())
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
attempt("inet-pair", lambda: socket.socketpair(socket.AF_INET))
"#
    )
}

#[test]
fn network_sockets_reach_nothing_when_the_network_is_off_and_work_when_on() {
    let s = Scratch::new();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let code = connect_probe(tcp.local_addr().unwrap().port(), udp.local_addr().unwrap().port());

    // The command is in the offline namespace: TCP is denied by Landlock, the UDP datagram goes to the
    // namespace's own loopback (never the host's listener), netlink and AF_INET pairs are seccomp's EPERM.
    let off = py(workspace_only(vec![], false), &s.ws, &code);
    let line = |name: &str| {
        off.stdout.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_default().to_owned()
    };
    assert!(line("tcp").contains(&format!("errno {}", libc::EACCES)), "{off:?}");
    for name in ["netlink", "inet-pair"] {
        assert!(line(name).contains(&format!("errno {}", libc::EPERM)), "{name}: {off:?}");
    }
    let mut buf = [0u8; 8];
    assert!(udp.recv(&mut buf).is_err(), "the sandboxed datagram reached the host: {off:?}");

    let on = py(workspace_only(vec![], true), &s.ws, &code);
    for name in ["tcp", "udp", "tcp6"] {
        assert!(on.stdout.contains(&format!("{name} ok")), "{name}: {on:?}");
    }
    tcp.set_nonblocking(true).unwrap();
    assert!(tcp.accept().is_ok(), "the sandboxed TCP connect with the network on did not arrive");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while udp.recv(&mut buf).is_err() {
        assert!(std::time::Instant::now() < deadline, "the datagram with the network on did not arrive");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// With the network off a name lookup fails at once (the sandbox's responder answers REFUSED), and the sandbox
/// records the name: `Sandbox::refusals` lists it as a lookup, and only the names looked up since the mark.
/// The twins: `localhost` still resolves (from `/etc/hosts`) and is not recorded; with the network on nothing is
/// recorded.
#[test]
fn a_lookup_with_the_network_off_fails_at_once_and_is_recorded() {
    use uexec_domain::denial::Refusal;
    use uexec_ports::{RefusalQuery, Sandbox};
    let s = Scratch::new();
    let sandbox = uexec_sandbox_linux::LinuxSandbox::default();
    // The lookup has a deadline (SIGALRM ends the probe, printing nothing) below the resolver's own 5 s timeout:
    // only an answer, not the resolver giving up, makes it print.
    let code = r#"
import signal, socket
signal.alarm(4)
try:
    socket.getaddrinfo("pkgs.example.org", 443); print("resolved")
except socket.gaierror as e:
    print("gaierror", e.errno)
signal.alarm(0)
print("localhost", socket.getaddrinfo("localhost", 80)[0][4][0])
"#;
    let run = |network: bool| {
        let policy = workspace_only(vec![], network);
        let python = crate::common::python();
        let argv = [python.to_str().unwrap(), "-c", code];
        let mark = sandbox.refusal_mark();
        let prepared = sandbox.prepare(crate::common::request(policy.clone(), &argv, &s.ws)).unwrap();
        let probe = crate::common::run(&prepared);
        let query = RefusalQuery {
            mark,
            policy: &policy,
            workspace: &s.ws,
            tmpdir: None,
            cwd: &s.ws,
            output: probe.stdout.as_bytes(),
            exit_code: Some(probe.code),
        };
        let refusals = sandbox.refusals(&query);
        (probe, refusals)
    };
    let (off, refusals) = run(false);
    assert!(off.stdout.contains("gaierror"), "no answer to the lookup before its deadline: {off:?}");
    assert!(off.stdout.contains("localhost 127.0.0.1") || off.stdout.contains("localhost ::1"), "{off:?}");
    assert_eq!(refusals, Some(vec![Refusal::Lookup { name: "pkgs.example.org".into() }]), "{off:?}");
    let protections =
        sandbox.prepare(crate::common::request(workspace_only(vec![], false), &["true"], &s.ws));
    let report = protections.unwrap().report.to_string();
    assert!(report.contains("uexec's responder"), "{report}");
    // Only what was looked up since the mark.
    let query = RefusalQuery {
        mark: sandbox.refusal_mark(),
        policy: &workspace_only(vec![], false),
        workspace: &s.ws,
        tmpdir: None,
        cwd: &s.ws,
        output: b"",
        exit_code: Some(0),
    };
    assert_eq!(sandbox.refusals(&query), Some(Vec::new()));
    let (_, refusals) = run(true);
    assert_eq!(refusals, Some(Vec::new()), "nothing is recorded with the network on");
}

#[test]
fn unix_sockets_and_asyncio_keep_working_with_the_network_off() {
    let s = Scratch::new();
    let code = r#"
import asyncio, socket, threading
a, b = socket.socketpair()
a.sendall(b"ping"); assert b.recv(4) == b"ping"
a.sendmsg([b"msg"]); assert b.recvmsg(3)[0] == b"msg"
a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
srv = socket.socket(socket.AF_UNIX); srv.bind("sock"); srv.listen(1)
cli = socket.socket(socket.AF_UNIX); cli.connect("sock"); conn, _ = srv.accept()
cli.send(b"hello"); assert conn.recv(5) == b"hello"
d1, d2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
d1.send(b"dg"); assert d2.recv(2) == b"dg"
async def main():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    threading.Thread(target=lambda: loop.call_soon_threadsafe(fut.set_result, 42)).start()
    return await asyncio.wait_for(fut, 10)
print("asyncio", asyncio.run(main()))
"#;
    let probe = py(workspace_only(vec![], false), &s.ws, code);
    assert!(probe.ok() && probe.stdout.contains("asyncio 42"), "{probe:?}");
}

/// Domain-allowlist mode: the command sits in the proxy's network namespace. It reaches the proxy's listener on
/// loopback (and gets the proxy variables), and nothing else: a literal IP over TCP, UDP (a DNS query) and ICMP
/// find no route; netlink sockets cannot even be made. The same probe with the network on reaches out.
#[test]
fn through_the_proxy_only_the_proxy_listener_is_reachable() {
    use uexec_ports::Sandbox;
    let s = Scratch::new();
    let (ns, listener) = uexec_sandbox_linux::ProxyNamespace::create("example.com".into()).unwrap();
    let port = ns.port();
    let code = format!(
        r#"
import os, socket
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno)
def proxy():
    s = socket.create_connection(("127.0.0.1", {port}), timeout=10); s.sendall(b"hi"); s.close()
def tcp_ip():
    socket.create_connection(("1.1.1.1", 443), timeout=10).close()
def udp_dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
    s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03pypi\x03org\x00\x00\x01\x00\x01", ("8.8.8.8", 53))
    s.recv(512)
def icmp():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("1.1.1.1", 0))
def local_server():
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    c = socket.create_connection(srv.getsockname(), timeout=5); c.close(); srv.close()
attempt("proxy", proxy)
attempt("tcp-ip", tcp_ip)
attempt("udp-dns", udp_dns)
attempt("icmp", icmp)
attempt("local-server", local_server)
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
print("HTTPS_PROXY", os.environ.get("HTTPS_PROXY"))
"#
    );
    let python = crate::common::python();
    let argv = [python.to_str().unwrap(), "-c", code.as_str()];
    let sandbox = uexec_sandbox_linux::LinuxSandbox::default().with_proxy(ns);
    let prepared =
        sandbox.prepare(crate::common::request(workspace_only(vec![], true), &argv, &s.ws)).unwrap();
    let out = crate::common::run(&prepared);
    let line =
        |name: &str| out.stdout.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_default();
    assert_eq!(line("proxy"), "proxy ok", "{out:?}");
    assert_eq!(line("local-server"), "local-server ok", "{out:?}");
    for name in ["tcp-ip", "udp-dns", "icmp"] {
        assert_eq!(line(name), format!("{name} errno {}", libc::ENETUNREACH), "{out:?}");
    }
    assert_eq!(line("netlink"), format!("netlink errno {}", libc::EPERM), "{out:?}");
    assert_eq!(line("HTTPS_PROXY"), format!("HTTPS_PROXY http://127.0.0.1:{port}"), "{out:?}");
    let network = prepared.report.protections.iter().find(|p| p.name == "network").unwrap();
    assert!(network.detail.contains(&format!("127.0.0.1:{port}")), "{network:?}");
    listener.set_nonblocking(true).unwrap();
    let (mut conn, _) = listener.accept().expect("the proxy connection arrived on the listener");
    let mut buf = [0u8; 2];
    std::io::Read::read_exact(&mut conn, &mut buf).unwrap();
    assert_eq!(&buf, b"hi");

    // The twin: the network on (no proxy) reaches a literal IP's route (a UDP socket connects), and the proxy
    // variables are not set.
    let on = py(workspace_only(vec![], true), &s.ws, &code);
    assert_ne!(
        on.stdout.lines().find(|l| l.starts_with("udp-dns ")).unwrap_or_default(),
        format!("udp-dns errno {}", libc::ENETUNREACH),
        "{on:?}"
    );
    assert!(on.stdout.contains("netlink ok"), "{on:?}");
}
