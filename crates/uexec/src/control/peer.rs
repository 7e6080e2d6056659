//! Who is at the other end of a control socket: the one rule that both sides apply, the server to its client
//! and `uexec sessions`/`attach`/`kill` to the server they found.
//!
//! Reaching the socket is not a credential. A sandboxed command could reach a control directory that was
//! not hidden from it (made after it started, or under an `$XDG_RUNTIME_DIR` inside a writable root) and plant
//! a socket of its own there, which a person's `uexec attach --write` would then type into; or connect to a
//! server's socket and type into a session that runs outside the sandbox. So each side checks the peer the
//! kernel names (`SO_PEERCRED`: its uid and pid) and refuses one that is **more confined than itself**: every
//! command uexec sandboxes has `no_new_privs` set and at least one more seccomp filter than the server that
//! started it, and a person's terminal has neither. "More confined" is:
//!
//! - another uid, or a pid the kernel cannot name here (a peer in another PID namespace): refused;
//! - more seccomp filters than this process (`Seccomp_filters` in `/proc/<pid>/status`; on kernels without it,
//!   seccomp filtering where this process has none);
//! - `no_new_privs` where this process has not.
//!
//! A server started inside another sandbox (with more filters than the person's terminal) is therefore refused
//! by a terminal outside it: run `uexec sessions` from inside that sandbox too. On other platforms than Linux
//! the peer's confinement is not read (macOS has no `/proc`): only its uid is checked.

/// What confines a process, as far as it decides this rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code, reason = "read from /proc, on Linux only"))]
pub struct Confinement {
    /// How many seccomp filters it runs under.
    pub seccomp_filters: u32,
    /// `no_new_privs` is set.
    pub no_new_privs: bool,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code, reason = "read from /proc, on Linux only"))]
impl Confinement {
    /// Read from the text of `/proc/<pid>/status`. `None` when neither seccomp line is there.
    pub fn from_status(status: &str) -> Option<Confinement> {
        let field = |name: &str| {
            status.lines().find_map(|line| line.strip_prefix(name)).map(|rest| rest.trim().to_owned())
        };
        let no_new_privs = field("NoNewPrivs:").is_some_and(|v| v == "1");
        let seccomp_filters = match field("Seccomp_filters:") {
            Some(count) => count.parse().ok()?,
            // Before Linux 5.9: only the mode (2: filtering).
            None => u32::from(field("Seccomp:")? == "2"),
        };
        Some(Confinement { seccomp_filters, no_new_privs })
    }

    /// Why `self` (the peer) is more confined than `me`, if it is.
    pub fn more_confined_than(&self, me: &Confinement) -> Option<String> {
        if self.seccomp_filters > me.seccomp_filters {
            return Some(format!(
                "it runs under {} seccomp filters, this process under {}",
                self.seccomp_filters, me.seccomp_filters
            ));
        }
        if self.no_new_privs && !me.no_new_privs {
            return Some("it runs with no_new_privs, this process without".to_owned());
        }
        None
    }
}

/// Refuse the peer `pid` (as `SO_PEERCRED` named it) when it may be a sandboxed command: `Err` says why.
#[cfg(target_os = "linux")]
pub fn check(pid: Option<i32>) -> Result<(), String> {
    let pid = pid.filter(|p| *p > 0).ok_or_else(|| "the kernel does not name its process here".to_owned())?;
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .as_deref()
            .and_then(Confinement::from_status)
            .ok_or_else(|| format!("{path} cannot be read"))
    };
    let me = read("/proc/self/status")?;
    let peer = read(&format!("/proc/{pid}/status"))?;
    match peer.more_confined_than(&me) {
        Some(why) => Err(format!("process {pid} may be a sandboxed command: {why}")),
        None => Ok(()),
    }
}

/// Not read on this platform (see the module documentation).
#[cfg(not(target_os = "linux"))]
pub fn check(_pid: Option<i32>) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn status(filters: Option<u32>, mode: u32, nnp: u32) -> String {
        let filters = filters.map(|n| format!("Seccomp_filters:\t{n}\n")).unwrap_or_default();
        format!("Name:\tx\nNoNewPrivs:\t{nnp}\nSeccomp:\t{mode}\n{filters}Cpus_allowed:\t3\n")
    }

    #[test]
    fn a_peer_with_more_filters_or_no_new_privs_is_more_confined() {
        let terminal = Confinement::from_status(&status(Some(0), 0, 0)).unwrap();
        let sandboxed = Confinement::from_status(&status(Some(2), 2, 1)).unwrap();
        let container = Confinement::from_status(&status(Some(1), 2, 0)).unwrap();
        assert!(sandboxed.more_confined_than(&terminal).is_some());
        assert!(sandboxed.more_confined_than(&container).is_some());
        assert!(
            terminal.more_confined_than(&sandboxed).is_none(),
            "a terminal may attach to a confined server"
        );
        assert!(
            container.more_confined_than(&container).is_none(),
            "equals are fine: a container's own shell"
        );
        // no_new_privs alone (a sandbox without an extra filter).
        let nnp = Confinement::from_status(&status(Some(0), 0, 1)).unwrap();
        assert!(nnp.more_confined_than(&terminal).unwrap().contains("no_new_privs"));
        // Old kernels: the mode only.
        let old = Confinement::from_status(&status(None, 2, 0)).unwrap();
        assert_eq!(old.seccomp_filters, 1);
        assert!(old.more_confined_than(&Confinement::from_status(&status(None, 0, 0)).unwrap()).is_some());
        assert_eq!(Confinement::from_status("Name:\tx\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_not_more_confined_than_itself_and_a_missing_pid_is_refused() {
        assert_eq!(check(Some(std::process::id() as i32)), Ok(()));
        assert!(check(None).is_err());
        assert!(check(Some(0)).is_err());
    }
}
