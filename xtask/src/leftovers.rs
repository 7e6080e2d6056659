//! The last step of `cargo xtask ci`: no process of uexec's outlives the suite. A session's processes die with
//! it and with their server, in tests too: an init of a sessions' PID namespace (`uexec-init`), a host's
//! watchdog (`uexec-watchdog`) or a `uexec` still alive once every test has ended was left behind (orphaned,
//! under pid 1 or whatever subreaper adopted it). What was there before the suite started is not counted.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// The process names (`/proc/<pid>/comm`) that are uexec's.
const NAMES: [&str; 3] = ["uexec-init", "uexec-watchdog", "uexec"];

/// How long the last ones may take to go (a watchdog scans `/proc` once more after its host is gone).
const GRACE: Duration = Duration::from_secs(15);

/// The processes of uexec's alive now: pid and name.
pub(crate) fn scan() -> BTreeSet<(u32, String)> {
    let mut found = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (comm) state ppid ...`: the name may hold spaces and parentheses, the last ')' ends it.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let name = &stat[open + 1..close];
        let state = stat[close + 1..].split_whitespace().next();
        if NAMES.contains(&name) && state != Some("Z") {
            found.insert((pid, name.to_owned()));
        }
    }
    found
}

/// Fail when processes of uexec's that were not there `before` are still alive after [`GRACE`].
pub(crate) fn check(before: &BTreeSet<(u32, String)>) -> Result<()> {
    let deadline = Instant::now() + GRACE;
    loop {
        let left: Vec<(u32, String)> = scan().difference(before).cloned().collect();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let named: Vec<String> = left.iter().map(|(pid, name)| format!("{name} ({pid})")).collect();
            bail!("processes of uexec's outlived the suite: {}", named.join(", "));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A process of uexec's left behind is found by name (a subshell that renames itself `uexec-init`, left
    /// running by a shell that exits at once) and reported until it is gone; what was there before is not.
    #[test]
    fn an_orphaned_init_is_found_and_what_was_there_before_is_not() {
        let before = scan();
        assert!(check(&before).is_ok());
        // The subshell names itself (`echo` is a builtin: /proc/self is the subshell) and waits for its sleep
        // (`; true`: bash would otherwise exec the last command, which renames it).
        let script = "(echo -n uexec-init > /proc/self/comm; sleep 30; true) & exit 0";
        let status = std::process::Command::new("bash").args(["-c", script]).status().unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        let orphan = loop {
            let new: Vec<(u32, String)> = scan().difference(&before).cloned().collect();
            if let Some(found) = new.into_iter().next() {
                break found;
            }
            assert!(Instant::now() < deadline, "the orphan was not found");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(orphan.1, "uexec-init");
        let pid = orphan.0.to_string();
        let _ = std::process::Command::new("pkill").args(["-9", "-P", &pid]).status();
        let _ = std::process::Command::new("kill").args(["-9", &pid]).status();
        assert!(check(&before).is_ok(), "gone once killed");
    }
}
