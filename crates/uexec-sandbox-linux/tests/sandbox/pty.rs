//! PTY probes: a sandboxed interactive bash in a real pseudo-terminal (posix_openpt), and TIOCSTI.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use uexec_ports::process::SpawnRequest;

use crate::common::{PROBE_TIMEOUT, Scratch, command, prepare, python, spawn_request, workspace_only};

/// A pseudo-terminal pair.
struct Pty {
    master: File,
    slave: OwnedFd,
}

/// Open a PTY with posix_openpt/grantpt/unlockpt/ptsname_r.
fn open_pty() -> Pty {
    // SAFETY: plain libc calls; every result is checked; the buffer outlives ptsname_r.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = File::from_raw_fd(master);
        assert_eq!(libc::grantpt(master.as_raw_fd()), 0);
        assert_eq!(libc::unlockpt(master.as_raw_fd()), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()), 0);
        let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(slave >= 0, "open slave: {}", std::io::Error::last_os_error());
        Pty { master, slave: OwnedFd::from_raw_fd(slave) }
    }
}

/// Become a session leader with stdin (the PTY slave) as the controlling terminal, as the real spawner does
/// before the sandbox hooks.
fn session_on_tty() -> std::io::Result<()> {
    // SAFETY: setsid and ioctl(TIOCSCTTY) are async-signal-safe and take no pointers.
    if unsafe { libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 } {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Start `spawn` on the PTY's slave.
fn spawn_on_pty(spawn: &SpawnRequest, pty: &Pty) -> Child {
    let mut cmd = command(spawn, &[session_on_tty], &[]);
    let slave = || Stdio::from(pty.slave.try_clone().expect("dup slave"));
    cmd.stdin(slave()).stdout(slave()).stderr(slave());
    cmd.spawn().expect("spawn on pty")
}

/// Read from the master until `needle` appears (or the timeout); returns everything read.
fn read_until(master: &mut File, needle: &str, seen: &mut String) -> bool {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    while !seen.contains(needle) {
        if started.elapsed() > PROBE_TIMEOUT {
            return false;
        }
        let mut pfd = libc::pollfd { fd: master.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 200) };
        if ready <= 0 {
            continue;
        }
        match master.read(&mut buf) {
            Ok(0) | Err(_) => return seen.contains(needle),
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    true
}

/// Wait for `child` (bounded).
fn wait(child: &mut Child) -> i32 {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code().unwrap_or(-1);
        }
        if started.elapsed() > PROBE_TIMEOUT {
            let _ = child.kill();
            panic!("process on the pty did not exit");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn interactive_bash_works_in_a_pty_under_the_sandbox() {
    let s = Scratch::new();
    let mut prepared =
        prepare(workspace_only(vec![], false), &["bash", "--norc", "--noprofile", "-i"], &s.ws);
    prepared.spawn.env.push(("PS1".into(), "sbx$ ".into()));
    let mut pty = open_pty();
    let mut child = spawn_on_pty(&prepared.spawn, &pty);
    let mut seen = String::new();
    assert!(read_until(&mut pty.master, "sbx$ ", &mut seen), "no prompt: {seen:?}");
    let outside = s.outside.join("secret.txt");
    writeln!(pty.master, "echo $((6*7)) > answer; tty; stty size; echo done-$((1+1))").unwrap();
    assert!(read_until(&mut pty.master, "done-2", &mut seen), "{seen:?}");
    assert!(seen.contains("/dev/pts/"), "tty should name the pty: {seen:?}");
    // The own terminal reopened by path, as `tee /dev/stderr` does.
    writeln!(pty.master, "echo via-path | tee /dev/stderr > /proc/self/fd/1 && echo reopened-$((3+3))")
        .unwrap();
    assert!(read_until(&mut pty.master, "reopened-6", &mut seen), "{seen:?}");
    writeln!(pty.master, "echo pwned > {} || echo refused-$((2+2))", outside.display()).unwrap();
    assert!(read_until(&mut pty.master, "refused-4", &mut seen), "{seen:?}");
    writeln!(pty.master, "read -r line; echo got-$line").unwrap();
    writeln!(pty.master, "typed").unwrap();
    assert!(read_until(&mut pty.master, "got-typed", &mut seen), "{seen:?}");
    writeln!(pty.master, "exit 3").unwrap();
    assert_eq!(wait(&mut child), 3, "{seen:?}");
    assert_eq!(Scratch::read(&s.ws.join("answer")), "42\n");
    assert_eq!(Scratch::read(&outside), "original\n");
}

/// Push a character into the terminal's input queue with TIOCSTI.
const TIOCSTI_PROBE: &str = r#"
import fcntl, termios
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x"); print("tiocsti ok")
except OSError as e:
    print("tiocsti errno", e.errno)
"#;

fn run_tiocsti(spawn: &SpawnRequest) -> String {
    let mut pty = open_pty();
    let mut child = spawn_on_pty(spawn, &pty);
    let mut seen = String::new();
    read_until(&mut pty.master, "tiocsti ", &mut seen);
    read_until(&mut pty.master, "\n", &mut seen);
    wait(&mut child);
    seen
}

#[test]
fn tiocsti_keystroke_injection_is_denied() {
    let s = Scratch::new();
    let python = python();
    let argv = [python.to_str().unwrap(), "-c", TIOCSTI_PROBE];
    let twin = run_tiocsti(&spawn_request(&argv, &s.ws));
    assert!(twin.contains("tiocsti ok"), "TIOCSTI should work unsandboxed (as root): {twin:?}");
    let prepared = prepare(workspace_only(vec![], false), &argv, &s.ws);
    let probe = run_tiocsti(&prepared.spawn);
    assert!(probe.contains(&format!("tiocsti errno {}", libc::EPERM)), "{probe:?}");
}

#[test]
fn other_terminals_cannot_be_opened() {
    let s = Scratch::new();
    // Another terminal (the user's, say), made by the test; its slave path is what a command would try.
    let other = open_pty();
    let path = std::fs::read_link(format!("/proc/self/fd/{}", other.slave.as_raw_fd())).unwrap();
    let code = format!(
        r#"
import os
for mode, name in [(os.O_RDONLY | os.O_NONBLOCK, "read"), (os.O_WRONLY, "write")]:
    try:
        os.close(os.open("{path}", mode | os.O_NOCTTY)); print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno)
"#,
        path = path.display()
    );
    let twin = crate::common::py_unsandboxed(&s.ws, &code);
    assert!(twin.stdout.contains("read ok") && twin.stdout.contains("write ok"), "{twin:?}");
    let probe = crate::common::py(workspace_only(vec![], false), &s.ws, &code);
    assert!(probe.stdout.contains(&format!("read errno {}", libc::EACCES)), "{probe:?}");
    assert!(probe.stdout.contains(&format!("write errno {}", libc::EACCES)), "{probe:?}");
}

/// Read the line discipline (TIOCGETD), then set N_NULL (27, which discards all output) with TIOCSETD and, if
/// that worked, put N_TTY (0) back at once so that the result can be printed.
const TIOCSETD_PROBE: &str = r#"
import fcntl, struct, termios
print("getd", struct.unpack("i", fcntl.ioctl(0, termios.TIOCGETD, b"\0" * 4))[0])
try:
    fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", 27))
    fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", 0))
    print("tiocsetd ok")
except OSError as e:
    print("tiocsetd errno", e.errno)
"#;

fn run_tiocsetd(spawn: &SpawnRequest) -> String {
    let mut pty = open_pty();
    let mut child = spawn_on_pty(spawn, &pty);
    let mut seen = String::new();
    read_until(&mut pty.master, "tiocsetd ", &mut seen);
    // The end of the `tiocsetd` line (the `getd` line before it has a line break of its own).
    let mut line = seen.find("tiocsetd ").map(|at| seen.split_off(at)).unwrap_or_default();
    read_until(&mut pty.master, "\n", &mut line);
    seen.push_str(&line);
    wait(&mut child);
    seen
}

#[test]
fn tiocsetd_cannot_hide_output_from_the_terminal() {
    let s = Scratch::new();
    let python = python();
    let argv = [python.to_str().unwrap(), "-c", TIOCSETD_PROBE];
    let twin = run_tiocsetd(&spawn_request(&argv, &s.ws));
    assert!(
        twin.contains("getd 0") && twin.contains("tiocsetd ok"),
        "TIOCSETD should work unsandboxed: {twin:?}"
    );
    let prepared = prepare(workspace_only(vec![], false), &argv, &s.ws);
    let probe = run_tiocsetd(&prepared.spawn);
    assert!(probe.contains("getd 0"), "the query stays allowed: {probe:?}");
    assert!(probe.contains(&format!("tiocsetd errno {}", libc::EPERM)), "{probe:?}");
}
