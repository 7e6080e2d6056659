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
fn network_sockets_fail_when_the_network_is_off_and_work_when_on() {
    let s = Scratch::new();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let code = connect_probe(tcp.local_addr().unwrap().port(), udp.local_addr().unwrap().port());

    let off = py(workspace_only(vec![], false), &s.ws, &code);
    for name in ["tcp", "udp", "tcp6", "netlink", "inet-pair"] {
        let line = off.stdout.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_default();
        assert!(line.contains(&format!("errno {}", libc::EPERM)), "{name}: {off:?}");
    }
    assert!(off.stdout.contains("Operation not permitted"));

    let on = py(workspace_only(vec![], true), &s.ws, &code);
    for name in ["tcp", "udp", "tcp6"] {
        assert!(on.stdout.contains(&format!("{name} ok")), "{name}: {on:?}");
    }
    tcp.set_nonblocking(true).unwrap();
    assert!(tcp.accept().is_ok(), "the sandboxed TCP connect with the network on did not arrive");
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
