//! Helpers shared by the integration tests: requests, output collection, /proc inspection.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use uexec_pty::{IoMode, OutputStream, PidScope, PtySize, SpawnRequest};

/// Generous limit for anything that should happen "soon" on a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A small, complete environment.
pub fn env() -> Vec<(OsString, OsString)> {
    [
        ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ("HOME", "/tmp"),
        ("TERM", "dumb"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("PS1", "PROMPT$ "),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect()
}

pub fn request(argv: &[&str], tty: bool) -> SpawnRequest {
    SpawnRequest {
        argv: argv.iter().map(OsString::from).collect(),
        cwd: PathBuf::from("/"),
        env: env(),
        mode: if tty { IoMode::Pty(PtySize::default()) } else { IoMode::Pipes },
        setup: Vec::new(),
        pid_scope: Default::default(),
    }
}

pub fn sh(script: &str, tty: bool) -> SpawnRequest {
    request(&["sh", "-c", script], tty)
}

/// `request` in the sandbox's PID namespace ([`PidScope::Sandbox`]).
pub fn in_sandbox(mut request: SpawnRequest) -> SpawnRequest {
    request.pid_scope = PidScope::Sandbox;
    request
}

/// The children of `parent` whose command name is `comm`.
pub fn children_named(parent: u32, comm: &str) -> Vec<i32> {
    let parent = parent.to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(name) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some((_, after)) = stat.rsplit_once(')') else { continue };
        if name.trim_end() == comm && after.split_whitespace().nth(1) == Some(parent.as_str()) {
            found.push(pid);
        }
    }
    found
}

/// Read chunks until `needle` has appeared in the text after `from` bytes; returns everything read so far.
pub async fn read_until(output: &mut (dyn OutputStream + '_), text: &mut String, needle: &str) {
    let deadline = Instant::now() + PATIENCE;
    let start = text.len();
    loop {
        if text.get(start..).is_some_and(|rest| rest.contains(needle)) {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, output.next_chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None)) => panic!("output ended before {needle:?} appeared; got {text:?}"),
            Ok(Err(error)) => panic!("read failed: {error}"),
            Err(_) => panic!("timed out waiting for {needle:?}; got {text:?}"),
        }
    }
}

/// Read everything until the end of output.
pub async fn drain(output: &mut (dyn OutputStream + '_)) -> Vec<u8> {
    let mut all = Vec::new();
    let read = async {
        while let Some(chunk) = output.next_chunk().await.unwrap() {
            all.extend_from_slice(&chunk);
        }
    };
    tokio::time::timeout(PATIENCE, read).await.expect("output did not end");
    all
}

/// A marker unique to this test process and call, to find our processes by command line.
pub fn marker() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    // `sleep` accepts a fractional duration: the fraction is the marker.
    format!("1000.{}{:03}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Live (non-zombie) `sleep <marker>` processes.
pub fn sleepers(marker: &str) -> Vec<i32> {
    let needle = format!("sleep\0{marker}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        if pid as u32 == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if cmdline == needle.as_bytes() && state(pid).is_some_and(|s| s != 'Z') {
            found.push(pid);
        }
    }
    found
}

/// The state letter of `pid`, `None` if it is gone.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().next()?.chars().next()
}

/// Fields of /proc/<pid>/stat after the command name (index 0 = state).
pub fn stat_fields(pid: i32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit_once(')').unwrap().1.split_whitespace().map(str::to_owned).collect()
}

/// Wait until `check` holds, or fail after PATIENCE.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Open fds of this process.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Children of this process that are zombies.
pub fn zombie_children() -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut zombies = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some((_, after)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.first() == Some(&"Z") && fields.get(1) == Some(&me.as_str()) {
            zombies.push(pid);
        }
    }
    zombies
}

/// Many sessions exiting with their own codes while other sessions are killed (`kill_tree`) and dropped
/// (background sweeps) around them, `rounds` times: every exit status must reach its own session. A sweep or
/// a reaper that reaped another session's leader made that session report "reaped by someone else" (-1).
pub async fn exit_codes_survive_concurrent_kills(spawner: uexec_pty::PtySpawner, rounds: usize) {
    use std::sync::Arc;

    use uexec_pty::{ExitStatus, ProcessControl};

    let spawner = Arc::new(spawner);
    for round in 0..rounds {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..24 {
            let spawner = Arc::clone(&spawner);
            let code = (round * 24 + i) % 200 + 1;
            tasks.spawn(async move {
                let script = format!("sleep 0.0{}; exit {code}", i % 7);
                let mut process = spawner.spawn_request(sh(&script, i % 3 == 0)).unwrap();
                drain(&mut process.output).await;
                let status = process.control.wait().await;
                assert_eq!(status.unwrap(), ExitStatus::Code(i32::try_from(code).unwrap()), "round {round}");
            });
        }
        for i in 0..6 {
            let spawner = Arc::clone(&spawner);
            tasks.spawn(async move {
                let process = spawner.spawn_request(sh("sleep 600 & sleep 600", i % 2 == 0)).unwrap();
                tokio::time::sleep(Duration::from_millis(5 * i)).await;
                let status = process.control.kill_tree().await.unwrap();
                assert!(matches!(status, ExitStatus::Signal(_)), "{status:?}");
            });
        }
        for i in 0..6 {
            let spawner = Arc::clone(&spawner);
            tasks.spawn(async move {
                let process = spawner.spawn_request(sh("sleep 600 & exec sleep 600", i % 2 == 1)).unwrap();
                tokio::time::sleep(Duration::from_millis(3 * i)).await;
                drop(process);
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }
}
