//! Real processes in real PTYs and pipes: streams, terminal, input, exit, signals, bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use uexec_pty::{
    ChildSetup, ChildSetupFailure, ExitStatus, InputState, OutputStream, ProcessControl, ProcessError,
    ProcessSpawner, PtySize, PtySpawner, SpawnError,
};

fn spawn(request: uexec_pty::SpawnRequest) -> uexec_pty::PtyProcess {
    PtySpawner::default().spawn_request(request).expect("spawn")
}

#[tokio::test]
async fn isatty_is_true_in_pty_mode_and_false_in_pipe_mode() {
    let script =
        "for fd in 0 1 2; do if [ -t $fd ]; then printf \"$fd:y \"; else printf \"$fd:n \"; fi; done; echo";
    let mut pty = spawn(sh(script, true));
    let text = String::from_utf8(drain(&mut pty.output).await).unwrap();
    assert_eq!(text.trim(), "0:y 1:y 2:y");
    let mut pipes = spawn(sh(script, false));
    let text = String::from_utf8(drain(&mut pipes.output).await).unwrap();
    assert_eq!(text.trim(), "0:n 1:n 2:n");
}

#[tokio::test]
async fn pty_child_leads_its_session_and_group_with_the_terminal_as_controlling_tty() {
    let mut process = spawn(sh("tty; stty size; exec sleep 30", true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "24 80").await;
    assert!(text.contains("/dev/pts/"), "{text:?}");
    let pid = process.control.pid() as i32;
    let fields = stat_fields(pid);
    assert_eq!(fields[2], pid.to_string(), "pgid");
    assert_eq!(fields[3], pid.to_string(), "sid");
    assert_ne!(fields[4], "0", "tty_nr: a controlling terminal");
    assert_eq!(fields[5], pid.to_string(), "tpgid: the terminal's foreground group");
    process.control.kill_tree().await.unwrap();
}

#[tokio::test]
async fn pipe_child_has_dev_null_stdin_and_one_pipe_for_stdout_and_stderr() {
    let mut process = spawn(request(&["sleep", "30"], false));
    let pid = process.control.pid();
    let link = |fd: u32| std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
    assert_eq!(link(0), std::path::PathBuf::from("/dev/null"));
    assert!(link(1).to_string_lossy().starts_with("pipe:"), "{:?}", link(1));
    assert_eq!(link(1), link(2));
    let fields = stat_fields(pid as i32);
    assert_eq!(fields[2], pid.to_string(), "pgid");
    assert_eq!(fields[3], pid.to_string(), "sid");
    process.control.kill_tree().await.unwrap();
    assert_eq!(drain(&mut process.output).await, b"");
}

#[tokio::test]
async fn stdout_and_stderr_are_merged_in_order_in_pipe_mode() {
    let mut process = spawn(sh("echo one; echo two >&2; echo three; echo four >&2", false));
    let text = String::from_utf8(drain(&mut process.output).await).unwrap();
    assert_eq!(text, "one\ntwo\nthree\nfour\n");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
}

#[tokio::test]
async fn inherit_mode_hands_the_hosts_own_stdio_to_the_child() {
    // The child records what its fds 0, 1 and 2 are; they must be this process's (nextest's pipes or files).
    let dir = std::env::temp_dir().join(format!("uexec-pty-inherit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("fds");
    let script = format!(
        "fds=$(for fd in 0 1 2; do readlink /proc/$$/fd/$fd; done); echo \"$fds\" > {}; exit 3",
        record.display()
    );
    let mut request = sh(&script, false);
    request.mode = uexec_pty::IoMode::Inherit;
    let mut process = spawn(request);
    // Nothing to read: the output ends at once, and the control half neither writes nor resizes.
    assert_eq!(process.output.next_chunk().await.unwrap(), None);
    assert!(!process.control.is_tty());
    assert_eq!(process.control.write(b"x").await, Err(ProcessError::StdinClosed));
    assert_eq!(process.control.resize(PtySize::default()), Err(ProcessError::NotATerminal));
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(3));
    let theirs = std::fs::read_to_string(&record).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let ours: Vec<String> = (0..3)
        .map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap().display().to_string())
        .collect();
    assert_eq!(theirs.lines().collect::<Vec<_>>(), ours);
    // Nothing is left of the session: killing it finds nothing and keeps the status.
    assert_eq!(process.control.kill_tree().await.unwrap(), ExitStatus::Code(3));
}

#[tokio::test]
async fn argv_cwd_and_environment_are_exactly_the_requested_ones() {
    let mut request =
        request(&["sh", "-c", "pwd; printf '%s|' \"$@\"; echo; env | sort", "zero", "a b", "", "c"], false);
    request.cwd = "/usr".into();
    let mut process = spawn(request);
    let text = String::from_utf8(drain(&mut process.output).await).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("/usr"));
    assert_eq!(lines.next(), Some("a b||c|"));
    let env: Vec<&str> = lines.collect();
    let token = format!("UEXEC_SESSION_TOKEN={}", process.control.token().as_str());
    for expected in ["HOME=/tmp", "LANG=C.UTF-8", "TERM=dumb", token.as_str()] {
        assert!(env.contains(&expected), "{expected} missing from {env:?}");
    }
    // sh adds PWD, SHLVL and `_`; nothing else from the test process may leak in.
    for line in &env {
        let name = line.split('=').next().unwrap();
        assert!(
            [
                "PATH",
                "HOME",
                "TERM",
                "LANG",
                "LC_ALL",
                "PS1",
                "UEXEC_SESSION_TOKEN",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD"
            ]
            .contains(&name),
            "unexpected variable {line:?}"
        );
    }
}

#[tokio::test]
async fn a_pty_starts_at_24x80_and_resize_delivers_sigwinch_with_the_new_size() {
    let script = "trap 'echo WINCH $(stty size)' WINCH; stty size; echo READY; while :; do sleep 0.05; done";
    let mut process = spawn(request(&["bash", "-c", script], true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "READY").await;
    assert!(text.contains("24 80"), "{text:?}");
    process.control.resize(PtySize { rows: 40, cols: 100 }).unwrap();
    read_until(&mut process.output, &mut text, "WINCH 40 100").await;
    process.control.kill_tree().await.unwrap();
}

#[tokio::test]
async fn bash_interactive_keeps_state_across_writes() {
    let mut process = spawn(request(&["bash", "--norc", "--noprofile", "-i"], true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "PROMPT$ ").await;
    process.control.write(b"X=42\n").await.unwrap();
    read_until(&mut process.output, &mut text, "PROMPT$ ").await;
    process.control.write(b"echo val=$X\n").await.unwrap();
    read_until(&mut process.output, &mut text, "val=42").await;
    process.control.write(b"exit 5\n").await.unwrap();
    drain(&mut process.output).await;
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(5));
}

#[tokio::test]
async fn python_interactive_prompt_round_trip() {
    let mut process = spawn(request(&["python3", "-i", "-q"], true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, ">>> ").await;
    process.control.write(b"print(6 * 7)\n").await.unwrap();
    read_until(&mut process.output, &mut text, "42\r\n>>> ").await;
    process.control.write(b"\x04").await.unwrap();
    drain(&mut process.output).await;
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
}

#[tokio::test]
async fn cat_ends_on_ctrl_d() {
    let mut process = spawn(request(&["cat"], true));
    process.control.write(b"hello\n").await.unwrap();
    let mut text = String::new();
    // The terminal echoes the line, then cat prints it.
    read_until(&mut process.output, &mut text, "hello\r\nhello\r\n").await;
    process.control.write(b"\x04").await.unwrap();
    drain(&mut process.output).await;
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
}

#[tokio::test]
async fn exit_code_and_killing_signal_are_reported_in_both_modes() {
    for tty in [true, false] {
        let mut process = spawn(sh("exit 17", tty));
        drain(&mut process.output).await;
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(17), "tty={tty}");
        assert_eq!(process.control.try_wait().unwrap(), Some(ExitStatus::Code(17)));

        let mut process = spawn(request(&["bash", "-c", "kill -9 $$"], tty));
        drain(&mut process.output).await;
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Signal(9), "tty={tty}");
    }
}

#[tokio::test]
async fn output_written_right_before_exit_is_delivered_in_order() {
    for tty in [true, false] {
        let mut process = spawn(sh("seq 1 20000; printf LAST; exit 3", tty));
        let text = String::from_utf8(drain(&mut process.output).await).unwrap().replace("\r\n", "\n");
        let expected: String = (1..=20000).map(|n| format!("{n}\n")).collect::<String>() + "LAST";
        assert!(text == expected, "tty={tty}: {} bytes, expected {}", text.len(), expected.len());
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(3));
    }
}

/// A consumer that keeps only the last `cap` bytes, as the engine's head/tail buffer does.
struct CappedConsumer {
    tail: std::collections::VecDeque<u8>,
    cap: usize,
    total: u64,
    largest_chunk: usize,
}

impl CappedConsumer {
    fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        self.largest_chunk = self.largest_chunk.max(chunk.len());
        self.tail.extend(chunk);
        let excess = self.tail.len().saturating_sub(self.cap);
        self.tail.drain(..excess);
    }
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_256_mib_flood_is_drained_completely_with_a_capped_consumer() {
    const FLOOD: u64 = 256 * 1024 * 1024;
    for tty in [true, false] {
        let rss_before = peak_rss_kib();
        let mut process = spawn(sh(&format!("head -c {FLOOD} /dev/zero; printf END"), tty));
        let mut consumer =
            CappedConsumer { tail: Default::default(), cap: 1024 * 1024, total: 0, largest_chunk: 0 };
        let read = async {
            while let Some(chunk) = process.output.next_chunk().await.unwrap() {
                consumer.push(&chunk);
            }
        };
        tokio::time::timeout(Duration::from_secs(300), read).await.expect("flood not drained");
        assert_eq!(consumer.total, FLOOD + 3, "tty={tty}");
        assert!(consumer.tail.iter().rev().take(3).eq(b"DNE".iter()), "tty={tty}: ends with END");
        assert!(consumer.largest_chunk <= uexec_pty::MAX_CHUNK_BYTES);
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
        let growth = peak_rss_kib().saturating_sub(rss_before);
        assert!(growth < 64 * 1024, "tty={tty}: peak RSS grew by {growth} KiB: output was buffered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_writes_are_delivered_verbatim_through_partial_writes() {
    let mut process = spawn(sh("stty -echo; echo READY; wc -c", true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "READY").await;
    // 1 MiB in lines of 64 bytes: far more than the terminal's 4 KiB input queue, so the writes block
    // (EAGAIN) and resume many times.
    let line = [b'x'; 63].iter().copied().chain(std::iter::once(b'\n')).collect::<Vec<u8>>();
    let payload: Vec<u8> = line.iter().copied().cycle().take(1024 * 1024).collect();
    let control = Arc::clone(&process.control);
    let writer = tokio::spawn(async move {
        control.write(&payload).await.unwrap();
        control.write(b"\x04").await.unwrap();
    });
    read_until(&mut process.output, &mut text, "1048576").await;
    writer.await.unwrap();
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
}

#[tokio::test]
async fn writing_to_an_exited_process_is_a_typed_error() {
    let mut process = spawn(sh("exit 0", true));
    drain(&mut process.output).await;
    process.control.wait().await.unwrap();
    assert_eq!(process.control.write(b"late\n").await, Err(ProcessError::Exited));
    assert_eq!(process.control.signal(uexec_pty::Signal::Terminate), Err(ProcessError::Exited));

    let process = spawn(request(&["sleep", "30"], false));
    assert_eq!(process.control.write(b"x").await, Err(ProcessError::StdinClosed));
    assert_eq!(process.control.resize(PtySize { rows: 1, cols: 1 }), Err(ProcessError::NotATerminal));
    assert_eq!(process.control.input_state(), InputState::Unknown);
    process.control.kill_tree().await.unwrap();
}

#[tokio::test]
async fn signal_goes_to_the_whole_process_group() {
    let marker = marker();
    let mut process = spawn(sh(&format!("sleep {marker} & sleep {marker} & echo STARTED; wait"), false));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("both sleeps started", || sleepers(&marker).len() == 2).await;
    process.control.signal(uexec_pty::Signal::Terminate).unwrap();
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Signal(15));
    eventually("the group's sleeps are gone", || sleepers(&marker).is_empty()).await;
}

#[tokio::test]
async fn kill_tree_kills_background_and_setsid_children() {
    let marker = marker();
    let script = format!("sleep {marker} & setsid sleep {marker} & echo STARTED; wait");
    let mut process = spawn(request(&["bash", "-c", &script], true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("both sleeps started", || sleepers(&marker).len() == 2).await;
    let status = process.control.kill_tree().await.unwrap();
    assert!(matches!(status, ExitStatus::Signal(1 | 9 | 15)), "{status:?}");
    eventually("the sleeps are gone", || sleepers(&marker).is_empty()).await;
    // Idempotent.
    assert_eq!(process.control.kill_tree().await.unwrap(), status);
}

#[tokio::test]
async fn kill_tree_kills_a_double_forked_daemon_after_the_leader_exited() {
    let marker = marker();
    let script = format!("(setsid sh -c 'sleep {marker} & exit' &); echo STARTED");
    let mut process = spawn(sh(&script, false));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("the daemon started", || sleepers(&marker).len() == 1).await;
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
    let daemon = sleepers(&marker)[0];
    let fields = stat_fields(daemon);
    assert_ne!(fields[3], process.control.pid().to_string(), "the daemon left the session");
    assert_eq!(process.control.kill_tree().await.unwrap(), ExitStatus::Code(0));
    eventually("the daemon is gone", || sleepers(&marker).is_empty()).await;
}

/// Puts the child in a new mount namespace, as the Linux sandbox does.
#[derive(Debug)]
struct MountNamespaceHook;

// SAFETY: unshare is a plain system call; nothing allocates.
unsafe impl ChildSetup for MountNamespaceHook {
    fn run_in_child(&self) -> Result<(), ChildSetupFailure> {
        // SAFETY: only CLONE_NEWNS, in a forked child that owns its file descriptor table and filesystem
        // context; no Rust code in this process relies on the mount namespace.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
            .map_err(|e| ChildSetupFailure { stage: "unshare", errno: e.raw_os_error() })
    }

    fn requires_fork(&self) -> bool {
        true
    }
}

/// Regression: a daemon that scrubbed its environment (no session token), left the session and was re-parented
/// survived `close_session` of a sandboxed command. In a private mount namespace it is found; its twin in the
/// host's namespace is not (so host processes are never matched by namespace).
#[tokio::test]
async fn kill_tree_kills_a_scrubbed_daemon_in_the_leaders_private_mount_namespace() {
    for private in [true, false] {
        let marker = marker();
        let script = format!("env -i /bin/sh -c \"(setsid sh -c 'sleep {marker} & exit' &)\"; echo STARTED");
        let mut request = sh(&script, false);
        if private {
            request.setup = vec![Arc::new(MountNamespaceHook)];
        }
        let mut process = spawn(request);
        let mut text = String::new();
        read_until(&mut process.output, &mut text, "STARTED").await;
        eventually("the daemon started", || sleepers(&marker).len() == 1).await;
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
        let daemon = sleepers(&marker)[0];
        let environ = std::fs::read(format!("/proc/{daemon}/environ")).unwrap();
        assert!(!environ.windows(19).any(|w| w == b"UEXEC_SESSION_TOKEN"), "the daemon has no token");
        assert_ne!(stat_fields(daemon)[3], process.control.pid().to_string(), "the daemon left the session");
        assert_eq!(process.control.kill_tree().await.unwrap(), ExitStatus::Code(0));
        if private {
            eventually("the daemon is gone", || sleepers(&marker).is_empty()).await;
        } else {
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(sleepers(&marker), vec![daemon], "a host-namespace process is not matched");
            rustix::process::kill_process(
                rustix::process::Pid::from_raw(daemon).unwrap(),
                rustix::process::Signal::KILL,
            )
            .unwrap();
            eventually("the twin daemon is gone", || sleepers(&marker).is_empty()).await;
        }
    }
}

#[tokio::test]
async fn dropping_the_control_kills_the_tree() {
    let marker = marker();
    let mut process = spawn(sh(&format!("setsid sleep {marker} & echo STARTED; sleep {marker}"), true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("both sleeps started", || sleepers(&marker).len() == 2).await;
    drop(process.control);
    eventually("everything is gone", || sleepers(&marker).is_empty()).await;
    drain(&mut process.output).await;
}

#[tokio::test]
async fn input_state_tells_a_waiting_prompt_from_a_busy_foreground() {
    let mut process = spawn(request(&["bash", "--norc", "--noprofile", "-i"], true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "PROMPT$ ").await;
    let control = Arc::clone(&process.control);
    eventually("bash at its prompt waits for input", || control.input_state() == InputState::WaitingForInput)
        .await;
    process.control.write(b"sleep 5\n").await.unwrap();
    eventually("bash running sleep in the foreground is busy", || control.input_state() == InputState::Busy)
        .await;
    // Check it stays busy for a while (sleep 5 is still running well within this).
    for _ in 0..5 {
        assert_eq!(control.input_state(), InputState::Busy);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    read_until(&mut process.output, &mut text, "PROMPT$ ").await;
    eventually("back at the prompt", || control.input_state() == InputState::WaitingForInput).await;
    process.control.kill_tree().await.unwrap();
    assert_eq!(process.control.input_state(), InputState::Unknown);

    let mut python = spawn(request(&["python3", "-i", "-q"], true));
    let mut text = String::new();
    read_until(&mut python.output, &mut text, ">>> ").await;
    let control = Arc::clone(&python.control);
    eventually("python at its prompt waits for input", || {
        control.input_state() == InputState::WaitingForInput
    })
    .await;
    python.control.write(b"import time; time.sleep(5)\n").await.unwrap();
    eventually("python sleeping is busy", || control.input_state() == InputState::Busy).await;
    python.control.kill_tree().await.unwrap();
}

#[tokio::test]
async fn a_password_prompt_reading_dev_tty_waits_for_input() {
    // getpass (like sudo and ssh) reads /dev/tty, not the slave's own fd, with echo off.
    let script = "import getpass; p = getpass.getpass('PW: '); print('LEN', len(p))";
    let mut python = spawn(request(&["python3", "-c", script], true));
    let mut text = String::new();
    read_until(&mut python.output, &mut text, "PW: ").await;
    let control = Arc::clone(&python.control);
    eventually("getpass reading /dev/tty waits for input", || {
        control.input_state() == InputState::WaitingForInput
    })
    .await;
    python.control.write(b"secret\n").await.unwrap();
    read_until(&mut python.output, &mut text, "LEN 6").await;
    assert_eq!(python.control.wait().await.unwrap(), ExitStatus::Code(0));
}

#[tokio::test]
async fn an_idle_session_costs_no_cpu() {
    // CPU time of this thread, which runs the current-thread runtime and so the reader and waiter tasks
    // (other tests may run in other threads of this process).
    fn cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }
    let mut process = spawn(request(&["sleep", "30"], true));
    let control = Arc::clone(&process.control);
    let reader = tokio::spawn(async move { process.output.next_chunk().await });
    let waiter = tokio::spawn(async move { control.wait().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = cpu_ticks();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks() - before;
    // Clock ticks are 10 ms: a busy-polling reader would burn ~200 of them in 2 s.
    assert!(used <= 10, "{used} ticks of CPU in {:?} while idle", start.elapsed());
    assert!(!reader.is_finished() && !waiter.is_finished());
    reader.abort();
    waiter.abort();
}

#[tokio::test]
async fn a_session_outlives_the_thread_that_spawned_it() {
    // The parent-death signal is tied to the creating thread: a session spawned from a short-lived thread
    // (like tokio's spawn_blocking threads) must not die with it.
    let runtime = tokio::runtime::Handle::current();
    let process = std::thread::spawn(move || {
        let _entered = runtime.enter();
        PtySpawner::default().spawn_request(request(&["sleep", "30"], false)).unwrap()
    })
    .join()
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(process.control.try_wait().unwrap(), None, "the session died with the spawning thread");
    assert!(matches!(process.control.kill_tree().await.unwrap(), ExitStatus::Signal(_)));
}

#[tokio::test]
async fn host_fds_do_not_leak_into_children() {
    // A descriptor without close-on-exec, as careless code in the host might leave.
    let file = std::fs::File::open("/proc/self/status").unwrap();
    let inheritable = rustix::io::dup(&file).unwrap();
    let flags = rustix::io::fcntl_getfd(&inheritable).unwrap();
    assert!(!flags.contains(rustix::io::FdFlags::CLOEXEC));
    for tty in [true, false] {
        let process = spawn(request(&["sleep", "30"], tty));
        let pid = process.control.pid();
        let fds = || {
            let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            fds.sort();
            fds
        };
        // The kernel wakes the parent of a vfork child before it closes the close-on-exec fds: give the exec
        // a moment to finish. A leaked fd would stay forever.
        eventually("the child has only fds 0, 1 and 2", || fds() == ["0", "1", "2"]).await;
        process.control.kill_tree().await.unwrap();
    }
    drop(inheritable);
}

#[derive(Debug)]
struct FailingHook;

// SAFETY: run_in_child makes no call at all.
unsafe impl ChildSetup for FailingHook {
    fn run_in_child(&self) -> Result<(), ChildSetupFailure> {
        Err(ChildSetupFailure { stage: "test_hook", errno: libc::EPERM })
    }
}

#[derive(Debug)]
struct FileLimitHook {
    limit: u64,
    fork: bool,
}

// SAFETY: setrlimit is a plain system call on values prepared before the spawn; nothing allocates.
unsafe impl ChildSetup for FileLimitHook {
    fn run_in_child(&self) -> Result<(), ChildSetupFailure> {
        let limit = rustix::process::Rlimit { current: Some(self.limit), maximum: Some(self.limit) };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, limit)
            .map_err(|e| ChildSetupFailure { stage: "setrlimit", errno: e.raw_os_error() })
    }

    fn requires_fork(&self) -> bool {
        self.fork
    }
}

#[tokio::test]
async fn setup_hooks_run_in_the_child_in_both_clone_modes() {
    for fork in [false, true] {
        let mut request = sh("ulimit -n", false);
        request.setup =
            vec![Arc::new(FileLimitHook { limit: 77, fork }), Arc::new(FileLimitHook { limit: 66, fork })];
        let mut process = spawn(request);
        let text = String::from_utf8(drain(&mut process.output).await).unwrap();
        assert_eq!(text.trim(), "66", "fork={fork}: hooks run in order");
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
    }
    for fork in [false, true] {
        let mut request = sh("echo ran", true);
        request.setup = vec![Arc::new(FileLimitHook { limit: 50, fork }), Arc::new(FailingHook)];
        let error = PtySpawner::default().spawn_request(request).unwrap_err();
        assert_eq!(error, SpawnError::ChildSetup { stage: "test_hook", errno: libc::EPERM });
    }
}

#[tokio::test]
async fn bad_input_gives_typed_errors() {
    let spawner = PtySpawner::default();
    let error = |request| spawner.spawn(request).map(|_| ()).unwrap_err();

    assert_eq!(
        error(request(&["uexec-no-such-program"], true)),
        SpawnError::ProgramNotFound { program: "uexec-no-such-program".into() }
    );
    assert_eq!(
        error(request(&["/nonexistent/program"], false)),
        SpawnError::ProgramNotFound { program: "/nonexistent/program".into() }
    );
    let dir = std::env::temp_dir().join(format!("uexec-pty-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("not-executable");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let path = script.to_str().unwrap();
    assert_eq!(error(request(&[path], true)), SpawnError::NotExecutable { path: script.clone() });
    let mut bad_cwd = request(&["true"], true);
    bad_cwd.cwd = "/nonexistent/dir".into();
    assert_eq!(error(bad_cwd), SpawnError::BadCwd { cwd: "/nonexistent/dir".into() });
    let mut file_cwd = request(&["true"], true);
    file_cwd.cwd = script.clone();
    assert_eq!(error(file_cwd), SpawnError::BadCwd { cwd: script.clone() });
    assert_eq!(error(request(&["echo", "a\0b"], true)), SpawnError::NulByte { what: "argument 1".into() });
    let mut nul_env = request(&["true"], false);
    nul_env.env.push(("BAD".into(), "x\0y".into()));
    assert_eq!(error(nul_env), SpawnError::NulByte { what: "environment variable BAD".into() });
    assert_eq!(error(request(&[], true)), SpawnError::EmptyArgv);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn spawning_outside_a_runtime_is_a_typed_error() {
    let error = PtySpawner::default().spawn_request(request(&["true"], true)).unwrap_err();
    assert_eq!(error, SpawnError::NoRuntime);
}

/// A Python program that prints `READY`, then blocks in one kind of wait (`mode`), then prints `LATE`.
const WAITS: &str = r#"
import os, select, sys
mode = sys.argv[1]
r, w = os.pipe()
print("READY", flush=True)
if mode == "select":
    select.select([0], [], [])
elif mode == "select-timeout":
    select.select([0], [], [], 3)
elif mode == "select-pipe":
    select.select([0, r], [], [])
elif mode == "select-pipe-timeout":
    select.select([0, r], [], [], 3)
elif mode == "poll":
    p = select.poll(); p.register(0, select.POLLIN); p.poll()
elif mode == "poll-timeout":
    p = select.poll(); p.register(0, select.POLLIN); p.poll(3000)
elif mode == "poll-pipe":
    p = select.poll(); p.register(0, select.POLLIN); p.register(r, select.POLLIN); p.poll()
elif mode == "epoll":
    e = select.epoll(); e.register(0, select.EPOLLIN); e.poll()
elif mode == "epoll-timeout":
    e = select.epoll(); e.register(0, select.EPOLLIN); e.poll(3)
elif mode == "epoll-pipe":
    e = select.epoll(); e.register(0, select.EPOLLIN); e.register(r, select.EPOLLIN); e.poll()
print("LATE", flush=True)
"#;

/// The system call `pid`'s main thread is blocked in (`None` while it runs).
fn blocked_in(pid: u32) -> Option<i64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok().filter(|n: &i64| *n >= 0)
}

/// Start `WAITS` in `mode`; return it once its main thread sleeps in a select/poll/epoll wait.
async fn waiting_in(mode: &str) -> uexec_pty::PtyProcess {
    let mut python = spawn(request(&["python3", "-c", WAITS, mode], true));
    let mut text = String::new();
    read_until(&mut python.output, &mut text, "READY").await;
    let pid = python.control.pid();
    let waits = [
        libc::SYS_select,
        libc::SYS_pselect6,
        libc::SYS_poll,
        libc::SYS_ppoll,
        libc::SYS_epoll_wait,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
    ];
    eventually(&format!("{mode}: blocked in a wait"), || blocked_in(pid).is_some_and(|n| waits.contains(&n)))
        .await;
    python
}

#[tokio::test]
async fn a_wait_for_the_terminal_alone_and_without_timeout_is_waiting_for_input() {
    for mode in ["select", "poll", "epoll"] {
        let python = waiting_in(mode).await;
        let control = Arc::clone(&python.control);
        eventually(&format!("{mode} on the terminal alone waits for input"), || {
            control.input_state() == InputState::WaitingForInput
        })
        .await;
        python.control.kill_tree().await.unwrap();
    }
}

#[tokio::test]
async fn a_wait_with_a_timeout_or_on_another_fd_is_not_waiting_for_input() {
    // ssh -t, docker exec -it and event loops with timers: they print without any input, so an empty poll must
    // not come back early with nothing. Each mode is blocked in its wait (checked) and sampled while it lasts.
    for mode in [
        "select-timeout",
        "select-pipe",
        "select-pipe-timeout",
        "poll-timeout",
        "poll-pipe",
        "epoll-timeout",
        "epoll-pipe",
    ] {
        let python = waiting_in(mode).await;
        let pid = python.control.pid();
        for _ in 0..10 {
            let state = python.control.input_state();
            assert_ne!(state, InputState::WaitingForInput, "{mode}: reported as waiting for input");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(blocked_in(pid).is_some(), "{mode}: the wait ended while sampled");
        python.control.kill_tree().await.unwrap();
    }
}

#[tokio::test]
async fn bash_read_with_a_timeout_is_not_waiting_for_input_and_without_one_is() {
    let mut timed =
        spawn(request(&["bash", "--norc", "--noprofile", "-c", "echo READY; read -t 30 x; echo LATE"], true));
    let mut text = String::new();
    read_until(&mut timed.output, &mut text, "READY").await;
    let pid = timed.control.pid();
    eventually("read -t blocked", || blocked_in(pid).is_some()).await;
    for _ in 0..10 {
        assert_ne!(timed.control.input_state(), InputState::WaitingForInput, "read -t 30");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    timed.control.kill_tree().await.unwrap();

    let mut plain =
        spawn(request(&["bash", "--norc", "--noprofile", "-c", "echo READY; read x; echo LATE"], true));
    let mut text = String::new();
    read_until(&mut plain.output, &mut text, "READY").await;
    let control = Arc::clone(&plain.control);
    eventually("read waits for input", || control.input_state() == InputState::WaitingForInput).await;
    plain.control.kill_tree().await.unwrap();
}
