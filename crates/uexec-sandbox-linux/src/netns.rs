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
