//! The network namespaces of the sandbox: the domain-allowlist mode's (made once per server; the app makes one
//! per client of a server with several), with only loopback up and a TCP listener on `127.0.0.1` inside it that
//! the app serves as its proxy (from outside the sandbox), and the offline one of commands with the network off.
//!
//! How, with `CAP_SYS_ADMIN`: a short-lived helper thread calls `unshare(CLONE_NEWNET)` (a namespace change of
//! that thread only), brings `lo` up, binds the socket (a socket belongs to the namespace it was created in,
//! whoever accepts on it later), opens `/proc/thread-self/ns/net` and exits. Without it (an ordinary user): the
//! same steps in a forked helper that entered the sandbox's user namespace first (`crate::userns`), which sends
//! the descriptors back; the namespace is then owned by that user namespace, and a command enters both. The
//! server keeps the socket (and serves it from its own namespace, so the connections the proxy makes onward use
//! the host's network) and the namespace descriptor, which every such command's child enters with
//! `setns(fd, CLONE_NEWNET)`. No helper binary and no process outlives the server: the namespace lives as long
//! as its descriptor and sockets.
#![allow(unsafe_code)] // Reason: unshare, the interface ioctls, the sockets and setns are raw system calls.

use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::userns::{self, StepFailure};

/// Why the proxy's network namespace could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyNamespaceError {
    /// The helper thread could not start or did not finish.
    #[error("the network namespace helper thread failed: {0}")]
    Thread(String),
    /// A step failed.
    #[error(
        "the domain allowlist needs a network namespace with only loopback, which {how} could not make \
         ({stage} failed with {errno}; {cause}); {remedies}; or use --network / --no-network"
    )]
    Step {
        /// How it was made: "uexec with CAP_SYS_ADMIN" or "uexec in a user namespace of its own".
        how: &'static str,
        /// The step.
        stage: &'static str,
        /// Its error, in words.
        errno: String,
        /// The likely cause (`support::likely_cause`).
        cause: String,
        /// What restores it.
        remedies: &'static str,
    },
}

impl ProxyNamespaceError {
    /// The error for `failure`, made `privileged` (on a thread) or in the sandbox's user namespace.
    fn step(privileged: bool, failure: StepFailure) -> Self {
        ProxyNamespaceError::Step {
            how: if privileged {
                "uexec with CAP_SYS_ADMIN"
            } else {
                "uexec (without CAP_SYS_ADMIN) in a user namespace of its own"
            },
            stage: failure.stage,
            errno: crate::support::errno_text(failure.errno),
            cause: crate::support::likely_cause(failure.errno),
            remedies: crate::support::FULL_PROTECTION_REMEDIES,
        }
    }
}

/// The proxy's network namespace and port, shared by every proxied command of one server (or one client).
#[derive(Debug, Clone)]
pub struct ProxyNamespace {
    /// `/proc/thread-self/ns/net` of the helper.
    ns: Arc<OwnedFd>,
    /// The sandbox's user namespace that owns `ns`, when it was made without `CAP_SYS_ADMIN`.
    userns: Option<Arc<OwnedFd>>,
    /// The listener's port on `127.0.0.1` inside the namespace.
    port: u16,
    /// What the proxy lets through, for the report (`pypi.org, *.npmjs.org; denied: ...`).
    rules: String,
    /// The commands' `NO_PROXY` (`uexec_domain::network::namespace_no_proxy`).
    no_proxy: String,
}

impl ProxyNamespace {
    /// Make the namespace and the listener: on a thread with `CAP_SYS_ADMIN`, else in the sandbox's user
    /// namespace (see the module's documentation). `rules` describes what the proxy allows, for the protection
    /// report.
    ///
    /// # Errors
    /// A step was refused (the error names it, its errno and the likely cause).
    pub fn create(rules: String) -> Result<(ProxyNamespace, TcpListener), ProxyNamespaceError> {
        Self::create_as(rules, has_sys_admin())
    }

    /// [`ProxyNamespace::create`], `privileged` (on a thread) or not (in the sandbox's user namespace).
    fn create_as(
        rules: String,
        privileged: bool,
    ) -> Result<(ProxyNamespace, TcpListener), ProxyNamespaceError> {
        let (ns, listener, userns) = if privileged {
            let helper = std::thread::Builder::new()
                .name("uexec-netns".into())
                .spawn(|| owned(proxy_namespace_here()))
                .map_err(|e| ProxyNamespaceError::Thread(e.to_string()))?;
            let [ns, listener] = helper
                .join()
                .map_err(|_| ProxyNamespaceError::Thread("it panicked".into()))?
                .map_err(|failure| ProxyNamespaceError::step(true, failure))?;
            (ns, listener, None)
        } else {
            let [ns, listener] = userns::in_user_namespace(&NET_STEPS, proxy_namespace_here)
                .map_err(|failure| ProxyNamespaceError::step(false, failure))?;
            let userns = userns::shared().map_err(|failure| ProxyNamespaceError::step(false, failure))?;
            (ns, listener, Some(userns))
        };
        let listener = TcpListener::from(listener);
        let port = listener
            .local_addr()
            .map_err(|e| {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                ProxyNamespaceError::step(
                    privileged,
                    StepFailure::new("reading the listener's address", errno),
                )
            })?
            .port();
        let no_proxy = uexec_domain::network::LOOPBACK_NO_PROXY.to_owned();
        Ok((ProxyNamespace { ns: Arc::new(ns), userns, port, rules, no_proxy }, listener))
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

    /// The user namespace that owns it (`None`: the initial one, made with `CAP_SYS_ADMIN`).
    pub(crate) fn owner(&self) -> Option<&Arc<OwnedFd>> {
        self.userns.as_ref()
    }
}

/// True when this thread has `CAP_SYS_ADMIN`: the network namespaces are then made on a thread, as before.
fn has_sys_admin() -> bool {
    crate::support::has_effective_capability(crate::sys::CAP_SYS_ADMIN)
}

/// The descriptors of a helper thread, owned (a thread, unlike a forked helper, shares this process's table).
fn owned<const N: usize>(fds: Result<[i32; N], StepFailure>) -> Result<[OwnedFd; N], StepFailure> {
    // SAFETY: each descriptor was opened by the helper thread for this caller and is owned by nobody else.
    fds.map(|fds| fds.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The steps of the network namespaces, as [`StepFailure`]s name them.
const UNSHARE_NET: &str = "unshare(CLONE_NEWNET)";
const LOOPBACK_UP: &str = "bringing lo up";
const BIND_LISTENER: &str = "binding 127.0.0.1";
const OPEN_NET_NS: &str = "opening /proc/thread-self/ns/net";
const ROUTE_V4: &str = "routing every IPv4 address to lo";
const BIND_RESPONDER: &str = "binding the responder's port 53";
const NET_STEPS: [&str; 6] = [UNSHARE_NET, LOOPBACK_UP, BIND_LISTENER, OPEN_NET_NS, ROUTE_V4, BIND_RESPONDER];

/// On the helper (thread or process): a new network namespace, `lo` up, a TCP listener on `127.0.0.1:0` in it,
/// the namespace descriptor: `[namespace, listener]`. Raw system calls only (a forked helper must not allocate).
fn proxy_namespace_here() -> Result<[i32; 2], StepFailure> {
    userns::unshare(libc::CLONE_NEWNET, UNSHARE_NET)?;
    loopback_up().map_err(|errno| StepFailure::new(LOOPBACK_UP, errno))?;
    let listener =
        bound_socket(libc::AF_INET, libc::SOCK_STREAM, 0).map_err(|e| StepFailure::new(BIND_LISTENER, e))?;
    let ns =
        userns::open_read_only(c"/proc/thread-self/ns/net", OPEN_NET_NS).inspect_err(|_| close(listener))?;
    Ok([ns, listener])
}

/// A socket of `family` and `kind` bound to loopback (IPv4, for a listener: then listening) or to every
/// address (`port` 53, the responder), close-on-exec, as a raw descriptor; or the errno.
fn bound_socket(family: i32, kind: i32, port: u16) -> Result<i32, i32> {
    // SAFETY: socket takes integers.
    let fd = unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last_errno());
    }
    let ret = if family == libc::AF_INET6 {
        // SAFETY: an all-zero sockaddr_in6 is the unspecified address, port 0.
        let mut address: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        address.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        address.sin6_port = port.to_be();
        let len = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        // SAFETY: bind reads `len` bytes of the live address.
        unsafe { libc::bind(fd, (&raw const address).cast(), len) }
    } else {
        // SAFETY: an all-zero sockaddr_in is 0.0.0.0, port 0.
        let mut address: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        address.sin_family = libc::AF_INET as libc::sa_family_t;
        address.sin_port = port.to_be();
        if port == 0 {
            address.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        }
        let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: bind reads `len` bytes of the live address.
        unsafe { libc::bind(fd, (&raw const address).cast(), len) }
    };
    // SAFETY: listen takes integers.
    if ret != 0 || (kind == libc::SOCK_STREAM && unsafe { libc::listen(fd, libc::SOMAXCONN) } != 0) {
        let errno = last_errno();
        close(fd);
        return Err(errno);
    }
    Ok(fd)
}

/// Close a raw descriptor this helper opened.
fn close(fd: i32) {
    // SAFETY: closing a descriptor the caller opened and still owns.
    unsafe { libc::close(fd) };
}

/// The calling thread's errno.
fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// An `AF_INET` datagram socket for the interface ioctls, as a raw descriptor.
fn ioctl_socket() -> Result<i32, i32> {
    // SAFETY: socket takes integers.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 { Err(last_errno()) } else { Ok(fd) }
}

/// `ifreq` naming `lo`.
fn lo_request() -> libc::ifreq {
    // SAFETY: an all-zero `ifreq` is valid (a name of NULs and a zero union).
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    request
}

/// `ioctl(SIOCSIFFLAGS)` adding `IFF_UP` to `lo` (a new namespace's loopback starts down); or the errno.
fn loopback_up() -> Result<(), i32> {
    let socket = ioctl_socket()?;
    let mut request = lo_request();
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of the live `ifreq`.
    let result = if unsafe { libc::ioctl(socket, libc::SIOCGIFFLAGS, &raw mut request) } != 0 {
        Err(last_errno())
    } else {
        // SAFETY: the union's flags member was just written by the kernel.
        unsafe { request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
        // SAFETY: SIOCSIFFLAGS reads the live `ifreq`.
        if unsafe { libc::ioctl(socket, libc::SIOCSIFFLAGS, &raw const request) } != 0 {
            Err(last_errno())
        } else {
            Ok(())
        }
    };
    close(socket);
    result
}

/// The interface index of `lo` (`SIOCGIFINDEX`); or the errno.
fn loopback_index() -> Result<u32, i32> {
    let socket = ioctl_socket()?;
    let mut request = lo_request();
    // SAFETY: SIOCGIFINDEX reads the name and writes the index of the live `ifreq`.
    let result = if unsafe { libc::ioctl(socket, libc::SIOCGIFINDEX, &raw mut request) } != 0 {
        Err(last_errno())
    } else {
        // SAFETY: the union's index member was just written by the kernel.
        Ok(unsafe { request.ifr_ifru.ifru_ifindex } as u32)
    };
    close(socket);
    result
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

/// The network namespace of commands with the network off: only loopback, and every IPv4 and IPv6 address
/// routed to it (`local 0.0.0.0/0` and `local ::/0`), so nothing leaves, a connection fails at once, and a DNS
/// query to whatever server `/etc/resolv.conf` names reaches the responder on port 53 of the namespace, which
/// answers `REFUSED` at once and records the name (see [`LookupLog`]). Made once per sandbox, on its first such
/// command (or started early by the app with [`OfflineNamespace::start`] and given to the sandbox with
/// `LinuxSandbox::with_offline_namespace`, for a process that cannot start threads later), with `CAP_SYS_ADMIN`
/// on the responder's thread, else in the sandbox's user namespace (see the module's documentation); the
/// responder is a thread of the server that ends soon after the sandbox.
#[derive(Debug)]
pub struct OfflineNamespace {
    /// The helper's answer, until it is read.
    pending: std::sync::Mutex<Option<std::sync::mpsc::Receiver<Result<Made, StepFailure>>>>,
    /// The namespace, once the helper made it (`Err`: why it could not).
    made: std::sync::OnceLock<Result<Made, StepFailure>>,
    log: Arc<LookupLog>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

/// A network namespace made, and the user namespace that owns it (`None`: the initial one).
#[derive(Debug, Clone)]
pub(crate) struct Made {
    /// The network namespace.
    pub(crate) ns: Arc<OwnedFd>,
    /// Its owner, when made in the sandbox's user namespace.
    pub(crate) owner: Option<Arc<OwnedFd>>,
}

impl Drop for OfflineNamespace {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl OfflineNamespace {
    /// Start making the namespace and its responder on a thread of their own; returns at once. The first
    /// command that needs it waits for it (about 0.8 ms after the start with `CAP_SYS_ADMIN`; in the sandbox's
    /// user namespace a forked helper makes it, a little longer).
    ///
    /// # Errors
    /// The thread cannot start.
    pub fn start() -> Result<OfflineNamespace, ProxyNamespaceError> {
        Self::start_as(has_sys_admin())
    }

    /// [`OfflineNamespace::start`], `privileged` (on the thread) or not (in the sandbox's user namespace).
    fn start_as(privileged: bool) -> Result<OfflineNamespace, ProxyNamespaceError> {
        let log = Arc::new(LookupLog::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (thread_log, thread_stop) = (Arc::clone(&log), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("uexec-offline-dns".into())
            .spawn(move || match make_offline_namespace(privileged) {
                Ok((made, socket)) => {
                    if tx.send(Ok(made)).is_ok() {
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

    /// The namespace, waiting for the helper the first time, or why it could not be made.
    pub(crate) fn namespace(&self) -> Result<Made, StepFailure> {
        self.made
            .get_or_init(|| {
                let pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                let made = match pending.map(|rx| rx.recv()) {
                    Some(Ok(made)) => made,
                    _ => Err(StepFailure::new(
                        "the offline namespace's thread, which ended without an answer",
                        libc::ECHILD,
                    )),
                };
                if let Err(failure) = &made {
                    tracing::debug!(
                        stage = failure.stage,
                        errno = failure.errno,
                        "no offline network namespace: lookups are not recorded"
                    );
                }
                made
            })
            .clone()
    }

    /// Whether the namespace exists (without waiting for it).
    pub(crate) fn is_made(&self) -> bool {
        self.made.get().is_some_and(Result::is_ok)
    }

    /// The lookups refused.
    pub(crate) fn log(&self) -> &LookupLog {
        &self.log
    }
}

/// On the responder's thread: the namespace (on this thread, or in a forked helper in the sandbox's user
/// namespace) and the responder's socket.
fn make_offline_namespace(privileged: bool) -> Result<(Made, std::net::UdpSocket), StepFailure> {
    let ([ns, socket], owner) = if privileged {
        (owned(offline_namespace_here())?, None)
    } else {
        let fds = userns::in_user_namespace(&NET_STEPS, offline_namespace_here)?;
        (fds, Some(userns::shared()?))
    };
    let socket = std::net::UdpSocket::from(socket);
    socket.set_read_timeout(Some(RESPONDER_TICK)).map_err(|e| {
        StepFailure::new("setting the responder's timeout", e.raw_os_error().unwrap_or(libc::EIO))
    })?;
    Ok((Made { ns: Arc::new(ns), owner }, socket))
}

/// On the helper (thread or process): a new network namespace, `lo` up with every address local, the
/// responder's socket on port 53: `[namespace, socket]`. Raw system calls only (a forked helper must not
/// allocate).
fn offline_namespace_here() -> Result<[i32; 2], StepFailure> {
    userns::unshare(libc::CLONE_NEWNET, UNSHARE_NET)?;
    loopback_up().map_err(|errno| StepFailure::new(LOOPBACK_UP, errno))?;
    every_address_local(libc::AF_INET as u8).map_err(|errno| StepFailure::new(ROUTE_V4, errno))?;
    // IPv6 may be disabled: then no IPv6 address reaches anything anyway.
    let family =
        if every_address_local(libc::AF_INET6 as u8).is_ok() { libc::AF_INET6 } else { libc::AF_INET };
    let socket =
        bound_socket(family, libc::SOCK_DGRAM, 53).map_err(|e| StepFailure::new(BIND_RESPONDER, e))?;
    let ns =
        userns::open_read_only(c"/proc/thread-self/ns/net", OPEN_NET_NS).inspect_err(|_| close(socket))?;
    Ok([ns, socket])
}

/// `ip route add local <family's everything> dev lo table local` over rtnetlink; or the errno. Raw system calls
/// on stack buffers only.
fn every_address_local(family: u8) -> Result<(), i32> {
    const RT_TABLE_LOCAL: u8 = 255;
    const RTPROT_BOOT: u8 = 3;
    const RT_SCOPE_HOST: u8 = 254;
    const RTN_LOCAL: u8 = 2;
    const RTA_OIF: u16 = 4;
    let lo = loopback_index()?;
    // SAFETY: socket takes integers.
    let socket =
        unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
    if socket < 0 {
        return Err(last_errno());
    }
    let message = route_message(family, lo, RT_TABLE_LOCAL, RTPROT_BOOT, RT_SCOPE_HOST, RTN_LOCAL, RTA_OIF);
    // SAFETY: send reads `message.len()` bytes of the live buffer.
    let sent = unsafe { libc::send(socket, message.as_ptr().cast(), message.len(), 0) };
    let mut reply = [0u8; 256];
    let got = if sent < 0 {
        -1
    } else {
        // SAFETY: recv writes at most `reply.len()` bytes into the live buffer.
        unsafe { libc::recv(socket, reply.as_mut_ptr().cast(), reply.len(), 0) }
    };
    let errno = if got < 0 { last_errno() } else { 0 };
    close(socket);
    if got < 0 {
        return Err(errno);
    }
    // An NLMSG_ERROR whose error is 0 is the acknowledgement.
    let got = usize::try_from(got).unwrap_or(0);
    if got >= 20 && u16::from_ne_bytes([reply[4], reply[5]]) == libc::NLMSG_ERROR as u16 {
        let error = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
        return if error != 0 { Err(-error) } else { Ok(()) };
    }
    Err(libc::EPROTO)
}

/// The `RTM_NEWROUTE` request of [`every_address_local`]: `nlmsghdr`, `rtmsg`, one `RTA_OIF` attribute.
fn route_message(family: u8, lo: u32, table: u8, protocol: u8, scope: u8, kind: u8, oif: u16) -> [u8; 36] {
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
    let mut message = [0u8; 36];
    message[0..4].copy_from_slice(&36u32.to_ne_bytes()); // nlmsg_len
    message[4..6].copy_from_slice(&libc::RTM_NEWROUTE.to_ne_bytes()); // nlmsg_type
    message[6..8].copy_from_slice(&flags.to_ne_bytes());
    message[8..12].copy_from_slice(&1u32.to_ne_bytes()); // nlmsg_seq; nlmsg_pid stays 0
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (0).
    message[16..24].copy_from_slice(&[family, 0, 0, 0, table, protocol, scope, kind]);
    message[28..30].copy_from_slice(&8u16.to_ne_bytes()); // rta_len
    message[30..32].copy_from_slice(&oif.to_ne_bytes());
    message[32..36].copy_from_slice(&lo.to_ne_bytes());
    message
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
    use std::os::fd::AsRawFd;

    use super::*;

    /// Enter `made` on a fresh thread, as a command's child does: the owning user namespace first, then the
    /// network namespace (a thread of a multi-threaded process cannot enter a user namespace, so a forked
    /// child runs `probe` when there is one, and reports through its exit status).
    pub(super) fn inside(made: &Made, probe: impl FnOnce() -> bool + Send) -> bool {
        let ns = made.ns.as_raw_fd();
        match &made.owner {
            None => std::thread::scope(|scope| {
                scope
                    .spawn(|| {
                        // SAFETY: setns on an open namespace descriptor, changing only this thread.
                        assert_eq!(unsafe { libc::setns(ns, libc::CLONE_NEWNET) }, 0);
                        probe()
                    })
                    .join()
                    .unwrap()
            }),
            Some(owner) => {
                let owner = owner.as_raw_fd();
                // SAFETY: the child only enters the namespaces, runs the probe (socket calls) and exits.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    // SAFETY: setns on open namespace descriptors in the single-threaded child.
                    let ok = unsafe {
                        libc::setns(owner, libc::CLONE_NEWUSER) == 0
                            && libc::setns(ns, libc::CLONE_NEWNET) == 0
                    } && probe();
                    // SAFETY: _exit ends the child at once.
                    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
                }
                let mut status = 0;
                // SAFETY: waiting for the child forked above.
                assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
            }
        }
    }

    #[test]
    fn the_listener_lives_in_a_namespace_of_its_own_and_accepts_from_it() {
        // With CAP_SYS_ADMIN on a thread, and as an ordinary user does it: in the sandbox's user namespace.
        for privileged in [true, false] {
            let (ns, listener) = ProxyNamespace::create_as("test".into(), privileged).unwrap();
            assert_ne!(ns.port(), 0);
            assert_eq!(ns.owner().is_some(), !privileged);
            // From this thread's (the host's) namespace, the port is not the listener: nothing answers there, or
            // something else does, but never this listener.
            listener.set_nonblocking(true).unwrap();
            let _ = std::net::TcpStream::connect(("127.0.0.1", ns.port()));
            assert!(listener.accept().is_err(), "a host-side connection reached the namespace's listener");
            // From inside the namespace, it is; and nothing else is reachable: no route to any other address.
            let port = ns.port();
            let made = Made { ns: ns.descriptor(), owner: ns.owner().cloned() };
            assert!(inside(&made, || {
                let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
                let unreachable = std::net::TcpStream::connect(("1.1.1.1", 443))
                    .is_err_and(|e| e.raw_os_error() == Some(libc::ENETUNREACH));
                stream.write_all(b"ping").is_ok() && unreachable
            }));
            listener.set_nonblocking(false).unwrap();
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4];
            conn.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"ping");
        }
    }

    #[test]
    fn the_route_request_is_a_well_formed_netlink_message() {
        let message = route_message(libc::AF_INET as u8, 1, 255, 3, 254, 2, 4);
        assert_eq!(u32::from_ne_bytes(message[0..4].try_into().unwrap()), 36);
        assert_eq!(u16::from_ne_bytes(message[4..6].try_into().unwrap()), libc::RTM_NEWROUTE);
        assert_eq!(&message[16..24], &[libc::AF_INET as u8, 0, 0, 0, 255, 3, 254, 2]);
        assert_eq!(u16::from_ne_bytes(message[28..30].try_into().unwrap()), 8);
        assert_eq!(u32::from_ne_bytes(message[32..36].try_into().unwrap()), 1);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::print_stderr)]
mod offline_tests {
    use super::*;

    #[test]
    fn the_offline_namespace_answers_a_query_at_once_and_records_the_name() {
        for privileged in [true, false] {
            let started = std::time::Instant::now();
            let offline = OfflineNamespace::start_as(privileged).unwrap();
            let made = offline.namespace().unwrap();
            eprintln!("offline namespace made in {:?} (privileged: {privileged})", started.elapsed());
            assert_eq!(made.owner.is_some(), !privileged);
            let mark = offline.log().mark();
            let answered = tests::inside(&made, || {
                let Ok(socket) = std::net::UdpSocket::bind(("0.0.0.0", 0)) else { return false };
                let _ = socket.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                let query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04pkgs\x07example\x03org\x00\x00\x01\x00\x01";
                // Any server address: every address is the namespace's own.
                if socket.send_to(query, ("192.0.2.53", 53)).is_err() {
                    return false;
                }
                let mut reply = [0u8; 512];
                let Ok(n) = socket.recv(&mut reply) else { return false };
                // Nothing else answers: a connection anywhere is refused at once.
                let refused = std::net::TcpStream::connect(("192.0.2.1", 443))
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
                n > 3 && &reply[..2] == b"\x12\x34" && reply[3] & 0x0f == 5 && refused
            });
            assert!(answered, "the responder answered REFUSED and nothing else was reachable");
            assert_eq!(offline.log().since(mark), vec!["pkgs.example.org".to_owned()]);
            assert!(offline.log().since(offline.log().mark()).is_empty());
        }
    }
}
