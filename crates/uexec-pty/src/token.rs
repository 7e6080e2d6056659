//! The session token: a random marker put into every spawned child's environment, by which the processes
//! of a session are found again even after they left its process group, its session and its parent.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::sync::OnceLock;

/// The environment variable that carries the session token: `UEXEC_SESSION_TOKEN=<32 lowercase hex>`.
/// The first 16 hex digits identify the host process (the same for all its sessions), the last 16 the
/// session. Every child of a session inherits it unless it clears its environment; [`kill_tree`] kills
/// every process that carries it.
///
/// [`kill_tree`]: uexec_ports::process::ProcessControl::kill_tree
pub const SESSION_TOKEN_VAR: &str = "UEXEC_SESSION_TOKEN";

/// A session's token.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionToken {
    /// `UEXEC_SESSION_TOKEN=<hex>`.
    entry: CString,
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SessionToken").field(&self.as_str()).finish()
    }
}

impl SessionToken {
    /// A new token: this host's prefix plus 64 random bits.
    pub(crate) fn new() -> io::Result<Self> {
        let host = host_prefix()?;
        let session = random_u64()?;
        let entry = format!("{SESSION_TOKEN_VAR}={host}{session:016x}");
        let entry = CString::new(entry).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
        Ok(SessionToken { entry })
    }

    /// The token (32 lowercase hex digits).
    pub fn as_str(&self) -> &str {
        let entry = self.entry.to_str().unwrap_or_default();
        entry.split_once('=').map(|(_, value)| value).unwrap_or_default()
    }

    /// The `NAME=value` environment entry.
    pub(crate) fn env_entry(&self) -> CString {
        self.entry.clone()
    }

    /// The bytes to look for in `/proc/<pid>/environ` (an entry, terminated by NUL or the end).
    pub(crate) fn environ_entry(&self) -> &[u8] {
        self.entry.as_bytes()
    }
}

/// `UEXEC_SESSION_TOKEN=<this host's 16 hex digits>`: how every token of this host's sessions starts.
#[cfg(target_os = "linux")]
pub(crate) fn host_entry_prefix() -> io::Result<String> {
    Ok(format!("{SESSION_TOKEN_VAR}={}", host_prefix()?))
}

/// The 16 hex digits shared by all sessions of this host process.
pub(crate) fn host_prefix() -> io::Result<&'static str> {
    static HOST: OnceLock<String> = OnceLock::new();
    if let Some(host) = HOST.get() {
        return Ok(host);
    }
    let value = format!("{:016x}", random_u64()?);
    Ok(HOST.get_or_init(|| value))
}

/// 64 random bits from the kernel: `getrandom` on Linux, `/dev/urandom` elsewhere.
fn random_u64() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    #[cfg(target_os = "linux")]
    {
        let mut filled = 0;
        while filled < bytes.len() {
            let written =
                rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty())?;
            filled += written;
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    }
    Ok(u64::from_ne_bytes(bytes))
}

/// True when the NUL-separated `environ` contains `entry` as a whole entry.
pub(crate) fn environ_contains(environ: &[u8], entry: &[u8]) -> bool {
    environ.split(|byte| *byte == 0).any(|item| item == entry)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn tokens_share_the_host_prefix_and_differ() {
        let a = SessionToken::new().unwrap();
        let b = SessionToken::new().unwrap();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(a.as_str()[..16], b.as_str()[..16]);
        assert_ne!(a, b);
    }

    #[test]
    fn environ_match_is_exact() {
        let token = SessionToken::new().unwrap();
        let entry = token.environ_entry().to_vec();
        let mut environ = b"A=1\0".to_vec();
        environ.extend_from_slice(&entry);
        environ.push(0);
        assert!(environ_contains(&environ, &entry));
        let mut longer = entry.clone();
        longer.push(b'0');
        assert!(!environ_contains(&longer, &entry));
        assert!(!environ_contains(b"A=1\0", &entry));
    }
}
