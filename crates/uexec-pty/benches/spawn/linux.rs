//! The bench on Linux: see `spawn.rs` for what it measures and how to run it.
#![allow(
    unsafe_code,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark binary: raw fork/posix_spawn baselines need libc, results go to stdout"
)]

use std::any::Any;
use std::ffi::{CString, c_char};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Instant;

use rustix::pty::OpenptFlags;
use uexec_pty::{IoMode, OutputStream, ProcessControl, PtySize, PtySpawner, SpawnRequest};

const ENV: [(&str, &str); 4] =
    [("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", "/tmp"), ("TERM", "dumb"), ("LANG", "C.UTF-8")];

/// argv/envp as C strings plus null-terminated pointer arrays.
struct CArgs {
    _strings: Vec<CString>,
    pointers: Vec<*const c_char>,
}

impl CArgs {
    fn new<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Self {
        let strings: Vec<CString> = items.into_iter().map(|s| CString::new(s.as_ref()).unwrap()).collect();
        let mut pointers: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        pointers.push(std::ptr::null());
        CArgs { _strings: strings, pointers }
    }

    fn as_ptr(&self) -> *const *const c_char {
        self.pointers.as_ptr()
    }

    fn as_mut_ptr(&self) -> *const *mut c_char {
        self.pointers.as_ptr().cast()
    }
}

struct Command {
    program: CString,
    argv: CArgs,
    envp: CArgs,
    args: Vec<String>,
}

impl Command {
    fn new(args: &[&str]) -> Self {
        Command {
            program: CString::new(args[0]).unwrap(),
            argv: CArgs::new(args),
            envp: CArgs::new(ENV.iter().map(|(k, v)| format!("{k}={v}"))),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn request(&self) -> SpawnRequest {
        SpawnRequest {
            argv: self.args.iter().map(Into::into).collect(),
            cwd: PathBuf::from("/"),
            env: ENV.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
            mode: IoMode::Pty(PtySize::default()),
            setup: Vec::new(),
            pid_scope: Default::default(),
        }
    }
}

fn open_master() -> OwnedFd {
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
    rustix::pty::grantpt(&master).unwrap();
    rustix::pty::unlockpt(&master).unwrap();
    rustix::termios::tcsetwinsize(
        &master,
        rustix::termios::Winsize { ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0 },
    )
    .unwrap();
    master
}

/// Blocking reads of 64 KiB until EOF/EIO; returns the byte count.
fn drain_blocking(master: &OwnedFd) -> u64 {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match rustix::io::read(master, &mut buffer) {
            Ok(0) | Err(rustix::io::Errno::IO) => return total,
            Ok(n) => total += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(error) => panic!("read: {error}"),
        }
    }
}

fn wait_pid(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &raw mut status, 0) };
}

/// What a variant leaves to be closed after the timed part (its PTY master, its process handle).
type Leftover = Box<dyn Any>;

/// The fork-based limit: fork, setsid, slave as 0/1/2 and controlling terminal, execve.
fn raw_fork(command: &Command) -> (u64, Leftover) {
    let master = open_master();
    let slave = rustix::pty::ioctl_tiocgptpeer(
        &master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    )
    .unwrap();
    let slave_fd = slave.as_raw_fd();
    // SAFETY: the child only makes async-signal-safe calls on data prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above; `_exit` if exec fails.
        unsafe {
            libc::setsid();
            libc::dup2(slave_fd, 0);
            libc::dup2(slave_fd, 1);
            libc::dup2(slave_fd, 2);
            libc::ioctl(0, libc::TIOCSCTTY, 0);
            libc::execve(command.program.as_ptr(), command.argv.as_ptr(), command.envp.as_ptr());
            libc::_exit(127);
        }
    }
    assert!(pid > 0, "fork failed");
    drop(slave);
    let bytes = drain_blocking(&master);
    wait_pid(pid);
    (bytes, Box::new(master))
}

/// The fork-free limit: glibc posix_spawn with POSIX_SPAWN_SETSID, the slave opened as fd 0 (which makes it
/// the controlling terminal) and dup'ed to 1 and 2.
fn raw_posix_spawn(command: &Command) -> (u64, Leftover) {
    let master = open_master();
    let slave_path = rustix::pty::ptsname(&master, Vec::new()).unwrap();
    let mut pid: libc::pid_t = 0;
    // SAFETY: attr and file actions are initialised, used and destroyed here; all strings outlive the call.
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawnattr_init(&raw mut attr);
        libc::posix_spawnattr_setflags(&raw mut attr, libc::POSIX_SPAWN_SETSID);
        libc::posix_spawn_file_actions_init(&raw mut actions);
        libc::posix_spawn_file_actions_addopen(&raw mut actions, 0, slave_path.as_ptr(), libc::O_RDWR, 0);
        libc::posix_spawn_file_actions_adddup2(&raw mut actions, 0, 1);
        libc::posix_spawn_file_actions_adddup2(&raw mut actions, 0, 2);
        let rc = libc::posix_spawn(
            &raw mut pid,
            command.program.as_ptr(),
            &raw const actions,
            &raw const attr,
            command.argv.as_mut_ptr(),
            command.envp.as_mut_ptr(),
        );
        assert_eq!(rc, 0, "posix_spawn failed");
        libc::posix_spawn_file_actions_destroy(&raw mut actions);
        libc::posix_spawnattr_destroy(&raw mut attr);
    }
    let bytes = drain_blocking(&master);
    wait_pid(pid);
    (bytes, Box::new(master))
}

fn portable(command: &Command) -> (u64, Leftover) {
    use portable_pty::{CommandBuilder, PtySize as PortableSize, native_pty_system};
    let pair = native_pty_system()
        .openpty(PortableSize { rows: 24, cols: 80, pixel_width: 0, pixel_height: 0 })
        .unwrap();
    let mut builder = CommandBuilder::new(&command.args[0]);
    builder.args(&command.args[1..]);
    builder.env_clear();
    for (name, value) in ENV {
        builder.env(name, value);
    }
    builder.cwd("/");
    let mut child = pair.slave.spawn_command(builder).unwrap();
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().unwrap();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break, // EIO: the slave side is closed.
        }
    }
    child.wait().unwrap();
    (total, Box::new((reader, pair.master, child)))
}

/// Ours: spawn, read every chunk, wait for the exit.
fn ours(runtime: &tokio::runtime::Runtime, spawner: &PtySpawner, command: &Command) -> (u64, Leftover) {
    runtime.block_on(async {
        let mut process = spawner.spawn_request(command.request()).unwrap();
        let mut total = 0u64;
        while let Some(chunk) = process.output.next_chunk().await.unwrap() {
            total += chunk.len() as u64;
        }
        process.control.wait().await.unwrap();
        (total, Box::new(process) as Leftover)
    })
}

/// Makes this process look like a real server: touched memory and a few threads.
struct Ballast {
    memory: Vec<u8>,
    _threads: Vec<std::thread::JoinHandle<()>>,
}

impl Ballast {
    fn new(megabytes: usize, threads: usize) -> Self {
        let mut memory = vec![0u8; megabytes * 1024 * 1024];
        for (index, byte) in memory.iter_mut().enumerate().step_by(4096) {
            *byte = (index / 4096) as u8 | 1;
        }
        let threads = (0..threads)
            .map(|_| {
                std::thread::spawn(|| {
                    loop {
                        std::thread::park();
                    }
                })
            })
            .collect();
        Ballast { memory, _threads: threads }
    }
}

#[derive(Default)]
struct Samples {
    name: &'static str,
    values: Vec<f64>,
}

impl Samples {
    fn named(name: &'static str) -> Self {
        Samples { name, values: Vec::new() }
    }

    fn quantile(&self, q: f64) -> f64 {
        let mut sorted = self.values.clone();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return f64::NAN;
        }
        let index = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[index]
    }

    fn median(&self) -> f64 {
        self.quantile(0.5)
    }
}

pub(crate) fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|arg| arg == "--quick") || std::env::var_os("UEXEC_BENCH_QUICK").is_some();
    // `--only spawn` or `--only throughput` runs one part (cargo passes `--bench`, which is ignored).
    let only = args.iter().position(|arg| arg == "--only").and_then(|i| args.get(i + 1)).cloned();
    let ballast_mb = 300;
    let ballast_threads = 8;
    println!(
        "uexec-pty spawn bench ({}): parent with {ballast_mb} MB touched memory, {ballast_threads} extra threads",
        if quick { "quick" } else { "full" }
    );
    let ballast = Ballast::new(ballast_mb, ballast_threads);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let spawner = PtySpawner::default();
    let spawn_ratio = (only.as_deref() != Some("throughput")).then(|| spawn_bench(&runtime, &spawner, quick));
    let throughput_ratio =
        (only.as_deref() != Some("spawn")).then(|| throughput_bench(&runtime, &spawner, quick));
    println!();
    if let Some(ratio) = spawn_ratio {
        println!("target: spawn uexec-pty/posix_spawn = {ratio:.2} (<= 1.15)");
    }
    if let Some(ratio) = throughput_ratio {
        println!("target: throughput uexec-pty/raw = {ratio:.2} (>= 0.90)");
    }
    std::hint::black_box(&ballast.memory);
}

/// Spawn to exit and drained, `/bin/true` in a PTY, for the fast path and the portable core. Returns the ratio
/// of medians uexec-pty (fast path)/posix_spawn.
fn spawn_bench(runtime: &tokio::runtime::Runtime, spawner: &PtySpawner, quick: bool) -> f64 {
    let rounds = if quick { 40 } else { 400 };
    let true_command = Command::new(&["/bin/true"]);
    // What macOS runs, measured here against the fast path: its fork pays for the parent's size.
    let portable_core = PtySpawner::portable();
    let mut spawn = [
        Samples::named("uexec-pty"),
        Samples::named("raw posix_spawn (limit)"),
        Samples::named("raw fork"),
        Samples::named("portable-pty"),
        Samples::named("uexec-pty portable core (fork)"),
    ];
    let mut closes: Vec<Samples> = spawn.iter().map(|samples| Samples::named(samples.name)).collect();
    for round in 0..rounds + 5 {
        for offset in 0..spawn.len() {
            let which = (round + offset) % spawn.len();
            let start = Instant::now();
            let (bytes, leftover) = match which {
                0 => ours(runtime, spawner, &true_command),
                1 => raw_posix_spawn(&true_command),
                2 => raw_fork(&true_command),
                3 => portable(&true_command),
                _ => ours(runtime, &portable_core, &true_command),
            };
            let elapsed = start.elapsed();
            let closing = Instant::now();
            drop(leftover);
            let closed = closing.elapsed();
            assert_eq!(bytes, 0);
            // The first rounds warm up caches and the runtime.
            if round >= 5 {
                spawn[which].values.push(elapsed.as_secs_f64() * 1e3);
                closes[which].values.push(closed.as_secs_f64() * 1e3);
            }
        }
    }
    let posix = spawn[1].median();
    let fork = spawn[2].median();
    println!();
    println!("Spawn to exit and drained: /bin/true in a 24x80 PTY ({rounds} interleaved rounds)");
    println!(
        "{:<36} {:>10} {:>10} {:>10} {:>12} {:>8} {:>14}",
        "variant", "median ms", "p25 ms", "p75 ms", "/posix_spawn", "/fork", "then close ms"
    );
    for (samples, close) in spawn.iter().zip(&closes) {
        let median = samples.median();
        println!(
            "{:<36} {:>10.3} {:>10.3} {:>10.3} {:>12.2} {:>8.2} {:>14.3}",
            samples.name,
            median,
            samples.quantile(0.25),
            samples.quantile(0.75),
            median / posix,
            median / fork,
            close.median()
        );
    }
    println!(
        "(\"then close\": dropping what is left, the PTY master above all; not part of the timed spawn.)"
    );
    let ours = spawn[0].median();
    println!("metric: pty-spawn-ms = {ours:.3}");
    println!(
        "peer-row: | portable-pty | `/bin/true` in a new PTY, spawn to exit and drained | {:.3} ms | {ours:.3} ms | {:.2}x |",
        spawn[3].median(),
        spawn[3].median() / ours
    );
    ours / posix
}

/// PTY throughput of `head -c N /dev/zero`. Returns the ratio of medians uexec-pty/raw.
fn throughput_bench(runtime: &tokio::runtime::Runtime, spawner: &PtySpawner, quick: bool) -> f64 {
    let (flood_bytes, rounds) = if quick { (32u64 << 20, 3) } else { (256u64 << 20, 7) };
    let flood = Command::new(&["/usr/bin/head", "-c", &flood_bytes.to_string(), "/dev/zero"]);
    let mut throughput = [
        Samples::named("uexec-pty"),
        Samples::named("raw read loop (limit)"),
        Samples::named("portable-pty"),
    ];
    // Each variant's throughput divided by the raw loop's of the same round (adjacent in time, so the
    // load of a shared machine affects both alike).
    let mut paired: Vec<Samples> = throughput.iter().map(|samples| Samples::named(samples.name)).collect();
    for round in 0..rounds {
        let mut this_round = [0.0f64; 3];
        for offset in 0..throughput.len() {
            let which = (round + offset) % throughput.len();
            let start = Instant::now();
            let bytes = match which {
                0 => ours(runtime, spawner, &flood).0,
                1 => raw_posix_spawn(&flood).0,
                _ => portable(&flood).0,
            };
            let seconds = start.elapsed().as_secs_f64();
            assert_eq!(bytes, flood_bytes, "{} lost bytes", throughput[which].name);
            this_round[which] = bytes as f64 / seconds / 1e6;
            throughput[which].values.push(this_round[which]);
        }
        for (which, samples) in paired.iter_mut().enumerate() {
            samples.values.push(this_round[which] / this_round[1]);
        }
    }
    let raw = throughput[1].median();
    println!();
    println!("PTY throughput: head -c {flood_bytes} /dev/zero ({rounds} interleaved rounds)");
    println!(
        "{:<36} {:>11} {:>10} {:>10} {:>12} {:>14}",
        "variant", "median MB/s", "min", "max", "/raw", "paired /raw"
    );
    for (samples, pair) in throughput.iter().zip(&paired) {
        let median = samples.median();
        println!(
            "{:<36} {:>11.1} {:>10.1} {:>10.1} {:>12.2} {:>14.2}",
            samples.name,
            median,
            samples.quantile(0.0),
            samples.quantile(1.0),
            median / raw,
            pair.median()
        );
    }
    println!("(\"paired /raw\": median over rounds of the ratio to the raw loop of the same round.)");
    let ours = throughput[0].median();
    println!(
        "peer-row: | portable-pty | PTY throughput, `head -c {flood_bytes} /dev/zero` | {:.0} MB/s | {ours:.0} MB/s | {:.2}x |",
        throughput[2].median(),
        throughput[2].median() / ours
    );
    ours / raw
}
