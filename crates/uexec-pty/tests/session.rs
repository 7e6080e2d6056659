//! The process port's contract on real processes in real PTYs and pipes (streams, terminal, input, exit,
//! signals, kill, bad input), run against both implementations: `<test>::fast` on the Linux fast path
//! (`PtySpawner::default()`), `<test>::portable` on the portable POSIX core (`PtySpawner::portable()`), the code
//! macOS runs. Input-wait detection, which only the fast path has, is tested in `input_state.rs`.
// The tests observe the processes through Linux's /proc (states, fds, groups), so they run on Linux only.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use uexec_pty::{
    ChildSetup, ChildSetupFailure, ExitStatus, InputState, OutputStream, ProcessControl, ProcessError,
    ProcessSpawner, PtySize, PtySpawner, SpawnError,
};

/// Starting a request that must start.
trait Start {
    fn start(&self, request: uexec_pty::SpawnRequest) -> uexec_pty::PtyProcess;
}

impl Start for PtySpawner {
    fn start(&self, request: uexec_pty::SpawnRequest) -> uexec_pty::PtyProcess {
        self.spawn_request(request).expect("spawn")
    }
}

async fn isatty_is_true_in_pty_mode_and_false_in_pipe_mode(spawner: PtySpawner) {
    let script =
        "for fd in 0 1 2; do if [ -t $fd ]; then printf \"$fd:y \"; else printf \"$fd:n \"; fi; done; echo";
    let mut pty = spawner.start(sh(script, true));
    let text = String::from_utf8(drain(&mut pty.output).await).unwrap();
    assert_eq!(text.trim(), "0:y 1:y 2:y");
    let mut pipes = spawner.start(sh(script, false));
    let text = String::from_utf8(drain(&mut pipes.output).await).unwrap();
    assert_eq!(text.trim(), "0:n 1:n 2:n");
}

async fn pty_child_leads_its_session_and_group_with_the_terminal_as_controlling_tty(spawner: PtySpawner) {
    let mut process = spawner.start(sh("tty; stty size; exec sleep 30", true));
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

async fn pipe_child_has_dev_null_stdin_and_one_pipe_for_stdout_and_stderr(spawner: PtySpawner) {
    let mut process = spawner.start(request(&["sleep", "30"], false));
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

async fn stdout_and_stderr_are_merged_in_order_in_pipe_mode(spawner: PtySpawner) {
    let mut process = spawner.start(sh("echo one; echo two >&2; echo three; echo four >&2", false));
    let text = String::from_utf8(drain(&mut process.output).await).unwrap();
    assert_eq!(text, "one\ntwo\nthree\nfour\n");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
}

async fn inherit_mode_hands_the_hosts_own_stdio_to_the_child(spawner: PtySpawner) {
    // The child records what its fds 0, 1 and 2 are; they must be this process's (nextest's pipes or files).
    // A directory of its own: under `cargo test` both backends' runs share this process (and its pid).
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("uexec-pty-inherit-{}-{run}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("fds");
    let script = format!(
        "fds=$(for fd in 0 1 2; do readlink /proc/$$/fd/$fd; done); echo \"$fds\" > {}; exit 3",
        record.display()
    );
    let mut request = sh(&script, false);
    request.mode = uexec_pty::IoMode::Inherit;
    let mut process = spawner.start(request);
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

async fn argv_cwd_and_environment_are_exactly_the_requested_ones(spawner: PtySpawner) {
    let mut request =
        request(&["sh", "-c", "pwd; printf '%s|' \"$@\"; echo; env | sort", "zero", "a b", "", "c"], false);
    request.cwd = "/usr".into();
    let mut process = spawner.start(request);
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

async fn a_pty_starts_at_24x80_and_resize_delivers_sigwinch_with_the_new_size(spawner: PtySpawner) {
    let script = "trap 'echo WINCH $(stty size)' WINCH; stty size; echo READY; while :; do sleep 0.05; done";
    let mut process = spawner.start(request(&["bash", "-c", script], true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "READY").await;
    assert!(text.contains("24 80"), "{text:?}");
    process.control.resize(PtySize { rows: 40, cols: 100 }).unwrap();
    read_until(&mut process.output, &mut text, "WINCH 40 100").await;
    process.control.kill_tree().await.unwrap();
}

async fn bash_interactive_keeps_state_across_writes(spawner: PtySpawner) {
    let mut process = spawner.start(request(&["bash", "--norc", "--noprofile", "-i"], true));
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

async fn python_interactive_prompt_round_trip(spawner: PtySpawner) {
    let mut process = spawner.start(request(&["python3", "-i", "-q"], true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, ">>> ").await;
    process.control.write(b"print(6 * 7)\n").await.unwrap();
    read_until(&mut process.output, &mut text, "42\r\n>>> ").await;
    process.control.write(b"\x04").await.unwrap();
    drain(&mut process.output).await;
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
}

async fn cat_ends_on_ctrl_d(spawner: PtySpawner) {
    let mut process = spawner.start(request(&["cat"], true));
    process.control.write(b"hello\n").await.unwrap();
    let mut text = String::new();
    // The terminal echoes the line, then cat prints it.
    read_until(&mut process.output, &mut text, "hello\r\nhello\r\n").await;
    process.control.write(b"\x04").await.unwrap();
    drain(&mut process.output).await;
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
}

async fn exit_code_and_killing_signal_are_reported_in_both_modes(spawner: PtySpawner) {
    for tty in [true, false] {
        let mut process = spawner.start(sh("exit 17", tty));
        drain(&mut process.output).await;
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(17), "tty={tty}");
        assert_eq!(process.control.try_wait().unwrap(), Some(ExitStatus::Code(17)));

        let mut process = spawner.start(request(&["bash", "-c", "kill -9 $$"], tty));
        drain(&mut process.output).await;
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Signal(9), "tty={tty}");
    }
}

async fn output_written_right_before_exit_is_delivered_in_order(spawner: PtySpawner) {
    for tty in [true, false] {
        let mut process = spawner.start(sh("seq 1 20000; printf LAST; exit 3", tty));
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

async fn a_256_mib_flood_is_drained_completely_with_a_capped_consumer(spawner: PtySpawner) {
    const FLOOD: u64 = 256 * 1024 * 1024;
    for tty in [true, false] {
        let rss_before = peak_rss_kib();
        let mut process = spawner.start(sh(&format!("head -c {FLOOD} /dev/zero; printf END"), tty));
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

async fn large_writes_are_delivered_verbatim_through_partial_writes(spawner: PtySpawner) {
    let mut process = spawner.start(sh("stty -echo; echo READY; wc -c", true));
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

async fn writing_to_an_exited_process_is_a_typed_error(spawner: PtySpawner) {
    let mut process = spawner.start(sh("exit 0", true));
    drain(&mut process.output).await;
    process.control.wait().await.unwrap();
    assert_eq!(process.control.write(b"late\n").await, Err(ProcessError::Exited));
    assert_eq!(process.control.signal(uexec_pty::Signal::Terminate), Err(ProcessError::Exited));

    let process = spawner.start(request(&["sleep", "30"], false));
    assert_eq!(process.control.write(b"x").await, Err(ProcessError::StdinClosed));
    assert_eq!(process.control.resize(PtySize { rows: 1, cols: 1 }), Err(ProcessError::NotATerminal));
    assert_eq!(process.control.input_state(), InputState::Unknown);
    process.control.kill_tree().await.unwrap();
}

async fn signal_goes_to_the_whole_process_group(spawner: PtySpawner) {
    let marker = marker();
    let mut process =
        spawner.start(sh(&format!("sleep {marker} & sleep {marker} & echo STARTED; wait"), false));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("both sleeps started", || sleepers(&marker).len() == 2).await;
    process.control.signal(uexec_pty::Signal::Terminate).unwrap();
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Signal(15));
    eventually("the group's sleeps are gone", || sleepers(&marker).is_empty()).await;
}

async fn kill_tree_kills_background_and_setsid_children(spawner: PtySpawner) {
    let marker = marker();
    let script = format!("sleep {marker} & setsid sleep {marker} & echo STARTED; wait");
    let mut process = spawner.start(request(&["bash", "-c", &script], true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("both sleeps started", || sleepers(&marker).len() == 2).await;
    let status = process.control.kill_tree().await.unwrap();
    assert!(matches!(status, ExitStatus::Signal(1 | 9 | 15)), "{status:?}");
    eventually("the sleeps are gone", || sleepers(&marker).is_empty()).await;
    // Idempotent.
    assert_eq!(process.control.kill_tree().await.unwrap(), status);
}

async fn kill_tree_kills_a_double_forked_daemon_after_the_leader_exited(spawner: PtySpawner) {
    let marker = marker();
    let script = format!("(setsid sh -c 'sleep {marker} & exit' &); echo STARTED");
    let mut process = spawner.start(sh(&script, false));
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

/// Puts the child in the mount namespace `0` (shared with other children) and a UTS namespace of its own, as
/// the Linux sandbox does when it reuses a mount namespace built for the command's plan.
#[derive(Debug)]
struct SharedMountOwnUtsHook(std::os::fd::OwnedFd);

// SAFETY: setns and unshare are plain system calls; nothing allocates.
unsafe impl ChildSetup for SharedMountOwnUtsHook {
    fn run_in_child(&self) -> Result<(), ChildSetupFailure> {
        let failed = |stage| move |e: rustix::io::Errno| ChildSetupFailure { stage, errno: e.raw_os_error() };
        // SAFETY: in a forked child that owns its file descriptor table and filesystem context; no Rust code
        // in this process relies on the mount or UTS namespace.
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&self.0),
            Some(rustix::thread::LinkNameSpaceType::Mount),
        )
        .map_err(failed("setns"))?;
        // SAFETY: as above.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWUTS) }
            .map_err(failed("unshare"))
    }

    fn requires_fork(&self) -> bool {
        true
    }
}

/// A new mount namespace (a copy of this process's), made by a short-lived thread, as a descriptor.
fn new_mount_namespace() -> std::os::fd::OwnedFd {
    std::thread::spawn(|| {
        // SAFETY: CLONE_NEWNS (and the CLONE_FS it implies) on this thread only, which then just exits.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }.unwrap();
        std::fs::File::open("/proc/thread-self/ns/mnt").unwrap().into()
    })
    .join()
    .unwrap()
}

/// Sandboxed commands of one plan may share a mount namespace; each has a UTS namespace of its own, and that
/// marks its session: `kill_tree` of one finds its scrubbed, re-parented daemon and leaves the other session's
/// process (in the same mount namespace) alone.
async fn kill_tree_finds_a_scrubbed_daemon_by_its_uts_namespace_and_spares_a_shared_mount_namespace(
    spawner: PtySpawner,
) {
    let shared = Arc::new(new_mount_namespace());
    let hook = || -> Arc<dyn ChildSetup> {
        Arc::new(SharedMountOwnUtsHook(rustix::io::dup(shared.as_ref()).unwrap()))
    };
    let (daemon, bystander) = (marker(), marker());
    let mut request = sh(&format!("sleep {bystander} & echo STARTED; wait"), false);
    request.setup = vec![hook()];
    let mut other = spawner.start(request);
    let mut text = String::new();
    read_until(&mut other.output, &mut text, "STARTED").await;
    let script = format!("env -i /bin/sh -c \"(setsid sh -c 'sleep {daemon} & exit' &)\"; echo STARTED");
    let mut request = sh(&script, false);
    request.setup = vec![hook()];
    let mut process = spawner.start(request);
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("the daemon and the bystander started", || {
        sleepers(&daemon).len() == 1 && sleepers(&bystander).len() == 1
    })
    .await;
    let (daemon_pid, bystander_pid) = (sleepers(&daemon)[0], sleepers(&bystander)[0]);
    let ns = |pid: i32, kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap();
    assert_eq!(ns(daemon_pid, "mnt"), ns(bystander_pid, "mnt"), "one mount namespace");
    assert_ne!(ns(daemon_pid, "uts"), ns(bystander_pid, "uts"), "a UTS namespace each");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
    assert_eq!(process.control.kill_tree().await.unwrap(), ExitStatus::Code(0));
    eventually("the daemon is gone", || sleepers(&daemon).is_empty()).await;
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sleepers(&bystander), vec![bystander_pid], "the other session's process was killed");
    other.control.kill_tree().await.unwrap();
    eventually("the bystander is gone", || sleepers(&bystander).is_empty()).await;
}

/// Regression: a daemon that scrubbed its environment (no session token), left the session and was re-parented
/// survived `close_session` of a sandboxed command. In a private mount namespace it is found; its twin in the
/// host's namespace is not (so host processes are never matched by namespace).
async fn kill_tree_kills_a_scrubbed_daemon_in_the_leaders_private_mount_namespace(spawner: PtySpawner) {
    for private in [true, false] {
        let marker = marker();
        // The leader lives a moment before it starts the daemon: the spawning thread pins its namespaces right
        // after `exec`, and a leader that exits before the thread runs again leaves nothing to pin (a known
        // window, not what this test is about: the scrubbed daemon of a leader that exited later).
        let script = format!(
            "sleep 0.3; env -i /bin/sh -c \"(setsid sh -c 'sleep {marker} & exit' &)\"; echo STARTED"
        );
        let mut request = sh(&script, false);
        if private {
            request.setup = vec![Arc::new(MountNamespaceHook)];
        }
        let mut process = spawner.start(request);
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

async fn dropping_the_control_kills_the_tree(spawner: PtySpawner) {
    let marker = marker();
    let mut process =
        spawner.start(sh(&format!("setsid sleep {marker} & echo STARTED; sleep {marker}"), true));
    let mut text = String::new();
    read_until(&mut process.output, &mut text, "STARTED").await;
    eventually("both sleeps started", || sleepers(&marker).len() == 2).await;
    drop(process.control);
    eventually("everything is gone", || sleepers(&marker).is_empty()).await;
    drain(&mut process.output).await;
}

async fn an_idle_session_costs_no_cpu(spawner: PtySpawner) {
    // CPU time of this thread, which runs the current-thread runtime and so the reader and waiter tasks
    // (other tests may run in other threads of this process).
    fn cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }
    let mut process = spawner.start(request(&["sleep", "30"], true));
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

async fn a_session_outlives_the_thread_that_spawned_it(spawner: PtySpawner) {
    // The parent-death signal is tied to the creating thread: a session spawned from a short-lived thread
    // (like tokio's spawn_blocking threads) must not die with it.
    let runtime = tokio::runtime::Handle::current();
    let process = std::thread::spawn(move || {
        let _entered = runtime.enter();
        spawner.spawn_request(request(&["sleep", "30"], false)).unwrap()
    })
    .join()
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(process.control.try_wait().unwrap(), None, "the session died with the spawning thread");
    assert!(matches!(process.control.kill_tree().await.unwrap(), ExitStatus::Signal(_)));
}

async fn host_fds_do_not_leak_into_children(spawner: PtySpawner) {
    // A descriptor without close-on-exec, as careless code in the host might leave.
    let file = std::fs::File::open("/proc/self/status").unwrap();
    let inheritable = rustix::io::dup(&file).unwrap();
    let flags = rustix::io::fcntl_getfd(&inheritable).unwrap();
    assert!(!flags.contains(rustix::io::FdFlags::CLOEXEC));
    for tty in [true, false] {
        let process = spawner.start(request(&["sleep", "30"], tty));
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

async fn setup_hooks_run_in_the_child_in_both_clone_modes(spawner: PtySpawner) {
    for fork in [false, true] {
        let mut request = sh("ulimit -n", false);
        request.setup =
            vec![Arc::new(FileLimitHook { limit: 77, fork }), Arc::new(FileLimitHook { limit: 66, fork })];
        let mut process = spawner.start(request);
        let text = String::from_utf8(drain(&mut process.output).await).unwrap();
        assert_eq!(text.trim(), "66", "fork={fork}: hooks run in order");
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(0));
    }
    for fork in [false, true] {
        let mut request = sh("echo ran", true);
        request.setup = vec![Arc::new(FileLimitHook { limit: 50, fork }), Arc::new(FailingHook)];
        let error = spawner.spawn_request(request).unwrap_err();
        assert_eq!(error, SpawnError::ChildSetup { stage: "test_hook", errno: libc::EPERM });
    }
}

/// Points the child's children at a PID namespace (`enter_pid_namespace`), as an unprivileged sandbox does with
/// the one of its user namespace.
#[derive(Debug)]
struct PidNamespaceHook {
    namespace: std::os::fd::OwnedFd,
    fork: bool,
}

// SAFETY: setns is a plain system call on a descriptor prepared before the spawn; nothing allocates.
unsafe impl ChildSetup for PidNamespaceHook {
    fn run_in_child(&self) -> Result<(), ChildSetupFailure> {
        Ok(())
    }

    fn enter_pid_namespace(&self) -> Result<bool, ChildSetupFailure> {
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&self.namespace),
            Some(rustix::thread::LinkNameSpaceType::ProcessID),
        )
        .map_err(|e| ChildSetupFailure { stage: "setns(CLONE_NEWPID)", errno: e.raw_os_error() })?;
        Ok(true)
    }

    fn requires_fork(&self) -> bool {
        self.fork
    }
}

/// `NSpid` of `/proc/self/status` as the command prints it: its pid in each namespace, outermost first.
fn nspids(text: &str) -> Vec<u32> {
    let line =
        text.lines().find(|l| l.starts_with("NSpid:")).unwrap_or_else(|| panic!("no NSpid in {text:?}"));
    line.split_whitespace().skip(1).map(|n| n.parse().unwrap()).collect()
}

/// Needs root: entering a PID namespace (`setns(CLONE_NEWPID)`) needs `CAP_SYS_ADMIN`; uexec's unprivileged
/// sandbox does it from its own user namespace (tested as an ordinary user by `uexec/tests/environments.rs`).
/// A hook that points the child's children at a PID namespace gets the command created there, as the spawner's
/// own child: the process the spawner reports (pid, exit code, `kill_tree`) is the command, with a pid of its
/// own in that namespace. The twin: without the hook the command is in the test's namespace. Denied: a hook that
/// asks for it in a child sharing the spawner's memory fails the spawn, naming the step.
async fn as_root_a_hook_moves_the_command_into_a_pid_namespace(spawner: PtySpawner) {
    let marker = marker();
    let init = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "sleep", &marker])
        .spawn()
        .unwrap();
    let init = KillOnDrop(init);
    let path = format!("/proc/{}/ns/pid_for_children", init.0.id());
    let mut namespace = None;
    eventually("the namespace's init runs", || {
        namespace = std::fs::File::open(&path).ok().filter(|_| !sleepers(&marker).is_empty());
        namespace.is_some()
    })
    .await;
    let namespace: std::os::fd::OwnedFd = namespace.unwrap().into();
    // The shell reads its own status (`/proc` is the test's: `/proc/self` is the reader, here the shell itself).
    let script = "while read -r l; do case $l in NSpid*) echo \"$l\";; esac; done < /proc/self/status; \
                  echo pid=$$; exit 7";
    for tty in [false, true] {
        let mut request = sh(script, tty);
        let dup = rustix::io::dup(&namespace).unwrap();
        request.setup = vec![Arc::new(PidNamespaceHook { namespace: dup, fork: true })];
        let mut process = spawner.start(request);
        let pid = process.control.pid();
        let text = String::from_utf8(drain(&mut process.output).await).unwrap();
        let ids = nspids(&text);
        assert_eq!(ids.len(), 2, "in a nested namespace (tty={tty}): {text}");
        assert_eq!(ids[0], pid, "the reported pid is the command's (tty={tty}): {text}");
        assert!(text.contains(&format!("pid={}", ids[1])), "$$ is its pid in the namespace: {text}");
        assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(7));
    }
    // The twin: no hook, the test's own namespace.
    let mut process = spawner.start(sh(script, false));
    let pid = process.control.pid();
    let text = String::from_utf8(drain(&mut process.output).await).unwrap();
    assert_eq!(nspids(&text), vec![pid], "{text}");
    assert_eq!(process.control.wait().await.unwrap(), ExitStatus::Code(7));
    // Denied: asked from a child that shares the spawner's memory (no `requires_fork`), on the fast path.
    let mut request = sh(script, false);
    request.setup =
        vec![Arc::new(PidNamespaceHook { namespace: rustix::io::dup(&namespace).unwrap(), fork: false })];
    match spawner.spawn_request(request) {
        Err(SpawnError::Os(error)) => {
            assert!(error.to_string().contains("CLONE_PARENT"), "{error}");
        }
        // The portable core always forks: the command is moved.
        Ok(mut process) => {
            let text = String::from_utf8(drain(&mut process.output).await).unwrap();
            assert_eq!(nspids(&text).len(), 2, "{text}");
        }
        Err(other) => panic!("{other:?}"),
    }
    drop(init);
}

/// A child process killed (its PID namespace with it) and reaped when dropped, a failed assertion included.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn bad_input_gives_typed_errors(spawner: PtySpawner) {
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
    for spawner in [PtySpawner::default(), PtySpawner::portable()] {
        let error = spawner.spawn_request(request(&["true"], true)).unwrap_err();
        assert_eq!(error, SpawnError::NoRuntime, "{spawner:?}");
    }
}

/// The portable core really runs the portable code (what passes above is what macOS runs): it holds no pidfd
/// for a session, while the fast path holds one per session. Only the pidfds naming the session's own leader
/// are counted (`Pid:` in their fdinfo), so other tests of this process (`cargo test` runs them on threads)
/// opening and closing theirs meanwhile change nothing.
#[tokio::test]
async fn only_the_fast_path_holds_a_pidfd_per_session() {
    let pidfds_of = |pid: u32| {
        std::fs::read_dir("/proc/self/fdinfo")
            .unwrap()
            .flatten()
            .filter(|entry| {
                // A descriptor closed (or reused) since the listing is read as whatever it is now.
                std::fs::read_to_string(entry.path()).is_ok_and(|info| {
                    info.lines().any(|line| line.split_whitespace().eq(["Pid:".to_owned(), pid.to_string()]))
                })
            })
            .count()
    };
    let portable = PtySpawner::portable().start(request(&["sleep", "30"], true));
    let fast = PtySpawner::default().start(request(&["sleep", "30"], true));
    assert_eq!(pidfds_of(portable.control.pid()), 0, "the portable core opened a pidfd");
    assert_eq!(pidfds_of(fast.control.pid()), 1, "the fast path watches its leader through a pidfd");
    portable.control.kill_tree().await.unwrap();
    fast.control.kill_tree().await.unwrap();
}

/// Runs a contract test (an `async fn(PtySpawner)` above) as two tests, `<name>::fast` and `<name>::portable`.
macro_rules! on_both_backends {
    ($name:ident) => {
        on_both_backends!($name, tokio::test);
    };
    ($name:ident, $($test:tt)*) => {
        mod $name {
            use super::*;

            #[$($test)*]
            async fn fast() {
                super::$name(PtySpawner::default()).await;
            }

            #[$($test)*]
            async fn portable() {
                super::$name(PtySpawner::portable()).await;
            }
        }
    };
}

on_both_backends!(isatty_is_true_in_pty_mode_and_false_in_pipe_mode);
on_both_backends!(pty_child_leads_its_session_and_group_with_the_terminal_as_controlling_tty);
on_both_backends!(pipe_child_has_dev_null_stdin_and_one_pipe_for_stdout_and_stderr);
on_both_backends!(stdout_and_stderr_are_merged_in_order_in_pipe_mode);
on_both_backends!(inherit_mode_hands_the_hosts_own_stdio_to_the_child);
on_both_backends!(argv_cwd_and_environment_are_exactly_the_requested_ones);
on_both_backends!(a_pty_starts_at_24x80_and_resize_delivers_sigwinch_with_the_new_size);
on_both_backends!(bash_interactive_keeps_state_across_writes);
on_both_backends!(python_interactive_prompt_round_trip);
on_both_backends!(cat_ends_on_ctrl_d);
on_both_backends!(exit_code_and_killing_signal_are_reported_in_both_modes);
on_both_backends!(output_written_right_before_exit_is_delivered_in_order);
on_both_backends!(
    a_256_mib_flood_is_drained_completely_with_a_capped_consumer,
    tokio::test(flavor = "multi_thread", worker_threads = 2)
);
on_both_backends!(
    large_writes_are_delivered_verbatim_through_partial_writes,
    tokio::test(flavor = "multi_thread", worker_threads = 2)
);
on_both_backends!(writing_to_an_exited_process_is_a_typed_error);
on_both_backends!(signal_goes_to_the_whole_process_group);
on_both_backends!(kill_tree_kills_background_and_setsid_children);
on_both_backends!(kill_tree_kills_a_double_forked_daemon_after_the_leader_exited);
on_both_backends!(kill_tree_kills_a_scrubbed_daemon_in_the_leaders_private_mount_namespace);
on_both_backends!(kill_tree_finds_a_scrubbed_daemon_by_its_uts_namespace_and_spares_a_shared_mount_namespace);
on_both_backends!(dropping_the_control_kills_the_tree);
on_both_backends!(an_idle_session_costs_no_cpu);
on_both_backends!(a_session_outlives_the_thread_that_spawned_it);
on_both_backends!(host_fds_do_not_leak_into_children);
on_both_backends!(setup_hooks_run_in_the_child_in_both_clone_modes);
on_both_backends!(bad_input_gives_typed_errors);
on_both_backends!(as_root_a_hook_moves_the_command_into_a_pid_namespace);
