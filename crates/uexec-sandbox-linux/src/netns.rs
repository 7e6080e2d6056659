//! The network namespace of domain-allowlist mode: made once per server (the app makes one per client of a
//! server with several), with only loopback up, and a TCP listener on `127.0.0.1` inside it that the app serves
//! as its proxy (from outside the sandbox).
//!
//! How: a short-lived helper thread calls `unshare(CLONE_NEWNET)` (a namespace change of that thread only),
//! brings `lo` up, binds the listener (a socket belongs to the namespace it was created in, whoever accepts on
//! it later), opens `/proc/thread-self/ns/net` and exits. The server keeps the listener (and accepts on it from
//! its own namespace, so the connections it makes onward use the host's network) and the namespace descriptor,
//! which every proxied command's child enters with `setns(fd, CLONE_NEWNET)` before anything else. No helper
//! binary and no process outlives the server: the namespace lives as long as its descriptor and sockets.
#![allow(unsafe_code)] // Reason: unshare, the interface ioctls and setns are raw system calls.

use std::fs::File;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// Why the proxy's network namespace could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyNamespaceError {
    /// The helper thread could not start or did not finish.
    #[error("the network namespace helper thread failed: {0}")]
    Thread(String),
    /// A step failed (most often `unshare(CLONE_NEWNET)` without `CAP_SYS_ADMIN`).
    #[error(
        "the domain allowlist needs a network namespace with only loopback ({stage}: {source}); it needs \
         CAP_SYS_ADMIN (run uexec as root or with that capability), or use --network / --no-network"
    )]
    Step {
        /// The step.
        stage: &'static str,
        /// Its error.
        source: std::io::Error,
    },
}

/// The proxy's network namespace and port, shared by every proxied command of one server (or one client).
#[derive(Debug, Clone)]
pub struct ProxyNamespace {
    /// `/proc/thread-self/ns/net` of the helper thread.
    ns: Arc<OwnedFd>,
    /// The listener's port on `127.0.0.1` inside the namespace.
    port: u16,
    /// What the proxy lets through, for the report (`pypi.org, *.npmjs.org; denied: ...`).
    rules: String,
    /// The commands' `NO_PROXY` (`uexec_domain::network::namespace_no_proxy`).
    no_proxy: String,
}

impl ProxyNamespace {
    /// Make the namespace and the listener (needs `CAP_SYS_ADMIN`). `rules` describes what the proxy allows, for
    /// the protection report.
    pub fn create(rules: String) -> Result<(ProxyNamespace, TcpListener), ProxyNamespaceError> {
        let helper = std::thread::Builder::new()
            .name("uexec-netns".into())
            .spawn(make_namespace)
            .map_err(|e| ProxyNamespaceError::Thread(e.to_string()))?;
        let (ns, listener) = helper
            .join()
            .map_err(|_| ProxyNamespaceError::Thread("it panicked".into()))?
            .map_err(|(stage, source)| ProxyNamespaceError::Step { stage, source })?;
        let port = listener
            .local_addr()
            .map_err(|source| ProxyNamespaceError::Step { stage: "reading the listener's address", source })?
            .port();
        let no_proxy = uexec_domain::network::LOOPBACK_NO_PROXY.to_owned();
        Ok((ProxyNamespace { ns: Arc::new(ns), port, rules, no_proxy }, listener))
    }

    /// The proxy's port on `127.0.0.1` inside the namespace.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the proxy lets through, in words.
    pub fn rules(&self) -> &str {
        &self.rules
    }

    /// Give commands `no_proxy` as `NO_PROXY` (the loopback hosts they reach directly, in the namespace; see
    /// `uexec_domain::network::namespace_no_proxy`). Without it, every loopback host.
    pub fn with_no_proxy(mut self, no_proxy: String) -> Self {
        self.no_proxy = no_proxy;
        self
    }

    /// The commands' `NO_PROXY`.
    pub fn no_proxy(&self) -> &str {
        &self.no_proxy
    }

    /// The namespace descriptor (kept alive by the hook that enters it).
    pub(crate) fn descriptor(&self) -> Arc<OwnedFd> {
        Arc::clone(&self.ns)
    }
}

/// A failing step and its error.
type StepError = (&'static str, std::io::Error);

/// On the helper thread: the new namespace, `lo` up, the listener, the namespace descriptor.
fn make_namespace() -> Result<(OwnedFd, TcpListener), StepError> {
    // SAFETY: unshare takes an integer flag set; CLONE_NEWNET changes only the calling thread's namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(("unshare(CLONE_NEWNET)", std::io::Error::last_os_error()));
    }
    loopback_up().map_err(|e| ("bringing lo up", e))?;
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| ("binding 127.0.0.1", e))?;
    let ns = File::open("/proc/thread-self/ns/net").map_err(|e| ("opening /proc/thread-self/ns/net", e))?;
    Ok((OwnedFd::from(ns), listener))
}

/// `ioctl(SIOCSIFFLAGS)` adding `IFF_UP` to `lo` (a new namespace's loopback starts down).
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket takes integers; the result is checked and owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    let socket = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: an all-zero `ifreq` is valid (a name of NULs and a zero union).
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of the live `ifreq`.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &raw mut request) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the union's flags member was just written by the kernel.
    unsafe { request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the live `ifreq`.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &raw const request) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The most name lookups remembered for responses.
const MAX_LOOKUPS: usize = 256;

/// How often the responder looks whether its sandbox is gone.
const RESPONDER_TICK: std::time::Duration = std::time::Duration::from_millis(500);

/// Name lookups the offline namespace's responder refused, numbered so that a command's response lists those
/// made while it ran.
#[derive(Debug, Default)]
pub(crate) struct LookupLog {
    next: std::sync::atomic::AtomicU64,
    list: std::sync::Mutex<std::collections::VecDeque<(u64, String)>>,
}

impl LookupLog {
    /// The number of the next lookup.
    pub(crate) fn mark(&self) -> u64 {
        self.next.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn record(&self, name: String) {
        let mut list = self.list.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if list.len() == MAX_LOOKUPS {
            list.pop_front();
        }
        list.push_back((n, name));
    }

    /// The distinct names looked up since `mark`, in order.
    pub(crate) fn since(&self, mark: u64) -> Vec<String> {
        let list = self.list.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<String> = Vec::new();
        for (_, name) in list.iter().filter(|(n, _)| *n >= mark) {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
        out
    }
}

/// The network namespace of commands with the network off (privileged mode): only loopback, and every IPv4
/// and IPv6 address routed to it (`local 0.0.0.0/0` and `local ::/0`), so nothing leaves, a connection fails at
/// once, and a DNS query to whatever server `/etc/resolv.conf` names reaches the responder on port 53 of the
/// namespace, which answers `REFUSED` at once and records the name (see [`LookupLog`]). Made once per sandbox, on
/// its first such command (or started early by the app with [`OfflineNamespace::start`] and given to the sandbox
/// with `LinuxSandbox::with_offline_namespace`, for a process that cannot start threads later); the responder is
/// a thread of the server that ends soon after the sandbox.
#[derive(Debug)]
pub struct OfflineNamespace {
    /// The helper's answer, until it is read.
    pending: std::sync::Mutex<Option<std::sync::mpsc::Receiver<Result<OwnedFd, StepError>>>>,
    /// The namespace, once the helper made it (`None`: it could not).
    made: std::sync::OnceLock<Option<Arc<OwnedFd>>>,
    log: Arc<LookupLog>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for OfflineNamespace {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl OfflineNamespace {
    /// Start making the namespace and its responder on a thread of their own (needs `CAP_SYS_ADMIN`); returns
    /// at once. The first command that needs it waits for it (about 0.8 ms after the start).
    ///
    /// # Errors
    /// The thread cannot start.
    pub fn start() -> Result<OfflineNamespace, ProxyNamespaceError> {
        let log = Arc::new(LookupLog::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (thread_log, thread_stop) = (Arc::clone(&log), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("uexec-offline-dns".into())
            .spawn(move || match make_offline_namespace() {
                Ok((ns, socket)) => {
                    if tx.send(Ok(ns)).is_ok() {
                        serve_refusals(&socket, &thread_log, &thread_stop);
                    }
                }
                Err(error) => {
                    let _ = tx.send(Err(error));
                }
            })
            .map_err(|e| ProxyNamespaceError::Thread(e.to_string()))?;
        Ok(OfflineNamespace {
            pending: std::sync::Mutex::new(Some(rx)),
            made: std::sync::OnceLock::new(),
            log,
            stop,
        })
    }

    /// The namespace descriptor, waiting for the helper the first time (`None`: it could not be made).
    pub(crate) fn descriptor(&self) -> Option<Arc<OwnedFd>> {
        self.made
            .get_or_init(|| {
                let pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                match pending.map(|rx| rx.recv()) {
                    Some(Ok(Ok(ns))) => Some(Arc::new(ns)),
                    Some(Ok(Err((stage, error)))) => {
                        tracing::debug!(stage, %error, "no offline network namespace: lookups are not recorded");
                        None
                    }
                    _ => None,
                }
            })
            .clone()
    }

    /// Whether the namespace exists (without waiting for it).
    pub(crate) fn is_made(&self) -> bool {
        self.made.get().is_some_and(Option::is_some)
    }

    /// The lookups refused.
    pub(crate) fn log(&self) -> &LookupLog {
        &self.log
    }
}

/// On the responder's thread: the namespace, `lo` up with every address local, the responder's socket.
fn make_offline_namespace() -> Result<(OwnedFd, std::net::UdpSocket), StepError> {
    // SAFETY: unshare takes an integer flag set; CLONE_NEWNET changes only the calling thread's namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(("unshare(CLONE_NEWNET)", std::io::Error::last_os_error()));
    }
    loopback_up().map_err(|e| ("bringing lo up", e))?;
    every_address_local(libc::AF_INET as u8).map_err(|e| ("routing every IPv4 address to lo", e))?;
    // IPv6 may be disabled: then no IPv6 address reaches anything anyway.
    let v6 = every_address_local(libc::AF_INET6 as u8).is_ok();
    let socket = if v6 {
        std::net::UdpSocket::bind(("::", 53)).map_err(|e| ("binding [::]:53", e))?
    } else {
        std::net::UdpSocket::bind(("0.0.0.0", 53)).map_err(|e| ("binding 0.0.0.0:53", e))?
    };
    socket.set_read_timeout(Some(RESPONDER_TICK)).map_err(|e| ("setting the responder's timeout", e))?;
    let ns = File::open("/proc/thread-self/ns/net").map_err(|e| ("opening /proc/thread-self/ns/net", e))?;
    Ok((OwnedFd::from(ns), socket))
}

/// `ip route add local <family's everything> dev lo table local` over rtnetlink.
fn every_address_local(family: u8) -> std::io::Result<()> {
    const RT_TABLE_LOCAL: u8 = 255;
    const RTPROT_BOOT: u8 = 3;
    const RT_SCOPE_HOST: u8 = 254;
    const RTN_LOCAL: u8 = 2;
    const RTA_OIF: u16 = 4;
    // SAFETY: socket takes integers; the result is checked and owned below.
    let fd =
        unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    let socket = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: if_nametoindex reads a NUL-terminated name.
    let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
    if lo == 0 {
        return Err(std::io::Error::last_os_error());
    }
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
    let mut message = Vec::with_capacity(36);
    message.extend_from_slice(&36u32.to_ne_bytes()); // nlmsg_len
    message.extend_from_slice(&libc::RTM_NEWROUTE.to_ne_bytes()); // nlmsg_type
    message.extend_from_slice(&flags.to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes()); // nlmsg_seq
    message.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    message.extend_from_slice(&[family, 0, 0, 0, RT_TABLE_LOCAL, RTPROT_BOOT, RT_SCOPE_HOST, RTN_LOCAL]);
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.extend_from_slice(&8u16.to_ne_bytes()); // rta_len
    message.extend_from_slice(&RTA_OIF.to_ne_bytes());
    message.extend_from_slice(&lo.to_ne_bytes());
    // SAFETY: send reads `message.len()` bytes of the live buffer.
    let sent = unsafe { libc::send(socket.as_raw_fd(), message.as_ptr().cast(), message.len(), 0) };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut reply = [0u8; 256];
    // SAFETY: recv writes at most `reply.len()` bytes into the live buffer.
    let got = unsafe { libc::recv(socket.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
    if got < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // An NLMSG_ERROR whose error is 0 is the acknowledgement.
    let got = usize::try_from(got).unwrap_or(0);
    if got >= 20 && u16::from_ne_bytes([reply[4], reply[5]]) == libc::NLMSG_ERROR as u16 {
        let error = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
        if error != 0 {
            return Err(std::io::Error::from_raw_os_error(-error));
        }
        return Ok(());
    }
    Err(std::io::Error::other("no acknowledgement from rtnetlink"))
}

/// Answer every DNS query on `socket` with `REFUSED` at once, recording the name, until `stop`.
fn serve_refusals(socket: &std::net::UdpSocket, log: &LookupLog, stop: &std::sync::atomic::AtomicBool) {
    let mut buf = [0u8; 1500];
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let Ok((len, peer)) = socket.recv_from(&mut buf) else { continue };
        let Some((name, question_end)) = uexec_domain::network::dns_question(&buf[..len]) else { continue };
        if uexec_domain::network::is_network_lookup(&name) {
            log.record(name);
        }
        let reply = uexec_domain::network::dns_refusal(&buf[..question_end]);
        let _ = socket.send_to(&reply, peer);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn the_listener_lives_in_a_namespace_of_its_own_and_accepts_from_it() {
        let (ns, listener) = ProxyNamespace::create("test".into()).unwrap();
        assert_ne!(ns.port(), 0);
        // From this thread's (the host's) namespace, the port is not the listener: nothing answers there, or
        // something else does, but never this listener.
        listener.set_nonblocking(true).unwrap();
        let _ = std::net::TcpStream::connect(("127.0.0.1", ns.port()));
        assert!(listener.accept().is_err(), "a host-side connection reached the namespace's listener");
        // From a thread inside the namespace, it is.
        let fd = ns.descriptor();
        let port = ns.port();
        let client = std::thread::spawn(move || {
            // SAFETY: setns on an open namespace descriptor, changing only this thread.
            assert_eq!(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.write_all(b"ping").unwrap();
            // Nothing else is reachable: no route to any other address.
            let err = std::net::TcpStream::connect(("1.1.1.1", 443)).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ENETUNREACH), "{err}");
        });
        client.join().unwrap();
        listener.set_nonblocking(false).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::print_stderr)]
mod offline_tests {
    use super::*;

    #[test]
    fn the_offline_namespace_answers_a_query_at_once_and_records_the_name() {
        let started = std::time::Instant::now();
        let offline = OfflineNamespace::start().unwrap();
        let fd = offline.descriptor().unwrap();
        eprintln!("offline namespace made in {:?}", started.elapsed());
        let mark = offline.log().mark();
        let answer = std::thread::spawn(move || {
            // SAFETY: setns on an open namespace descriptor, changing only this thread.
            assert_eq!(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            let socket = std::net::UdpSocket::bind(("0.0.0.0", 0)).unwrap();
            socket.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
            let query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04pkgs\x07example\x03org\x00\x00\x01\x00\x01";
            // Any server address: every address is the namespace's own.
            socket.send_to(query, ("192.0.2.53", 53)).unwrap();
            let mut reply = [0u8; 512];
            let n = socket.recv(&mut reply).unwrap();
            // Nothing else answers: a connection anywhere is refused at once.
            let refused = std::net::TcpStream::connect(("192.0.2.1", 443)).unwrap_err();
            (reply[..n].to_vec(), refused.kind())
        })
        .join()
        .unwrap();
        let (reply, refused) = answer;
        assert_eq!(&reply[..2], b"\x12\x34");
        assert_eq!(reply[3] & 0x0f, 5, "REFUSED: {reply:?}");
        assert_eq!(refused, std::io::ErrorKind::ConnectionRefused);
        assert_eq!(offline.log().since(mark), vec!["pkgs.example.org".to_owned()]);
        assert!(offline.log().since(offline.log().mark()).is_empty());
    }
}
