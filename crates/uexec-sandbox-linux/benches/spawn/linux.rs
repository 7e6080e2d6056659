//! The bench on Linux: see `spawn.rs` for what it measures and how to run it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout, unsafe_code)]

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uexec_domain::SandboxPolicy;
use uexec_domain::hidden::{HiddenPaths, HiddenPattern};
use uexec_ports::process::{ChildSetup, IoMode, PtySize, SpawnRequest};
use uexec_ports::{Sandbox, SandboxRequest};
use uexec_sandbox_linux::{Availability, KernelSupport, LinuxSandbox, MountNamespace};

/// A NUL-terminated argv/envp array (pointers into `strings`).
struct CArray {
    _strings: Vec<CString>,
    pointers: Vec<*const libc::c_char>,
}

impl CArray {
    fn new<S: AsRef<OsStr>>(items: impl IntoIterator<Item = S>) -> CArray {
        let strings: Vec<CString> =
            items.into_iter().map(|s| CString::new(s.as_ref().as_bytes()).unwrap()).collect();
        let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        pointers.push(std::ptr::null());
        CArray { _strings: strings, pointers }
    }
}

/// Fork a child on a new PTY, run `hooks`, exec `program`; wait for it. Returns the exit code.
fn spawn_in_pty(
    program: &CString,
    argv: &CArray,
    envp: &CArray,
    cwd: &CString,
    hooks: &[Arc<dyn ChildSetup>],
) -> i32 {
    // SAFETY: single-threaded bench; the child only makes async-signal-safe calls and the hooks (whose contract
    // is to be async-signal-safe) before execve or _exit.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0);
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 64];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(slave >= 0);
        let saved_stderr = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
        let pid = libc::fork();
        if pid == 0 {
            if libc::setsid() < 0
                || libc::dup2(slave, 0) < 0
                || libc::dup2(slave, 1) < 0
                || libc::dup2(slave, 2) < 0
                || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0
                || libc::chdir(cwd.as_ptr()) < 0
            {
                libc::_exit(120);
            }
            for hook in hooks {
                if let Err(failure) = hook.run_in_child() {
                    // Say which step failed on the bench's stderr (the child's fd 2 is the PTY now).
                    let text = format!("hook failed: {} (errno {})\n", failure.stage, failure.errno);
                    libc::write(saved_stderr, text.as_ptr().cast(), text.len());
                    libc::_exit(121);
                }
            }
            libc::execve(program.as_ptr(), argv.pointers.as_ptr(), envp.pointers.as_ptr());
            libc::_exit(127);
        }
        assert!(pid > 0);
        libc::close(slave);
        libc::close(saved_stderr);
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        libc::close(master);
        if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) }
    }
}

/// One measured mode.
struct Mode {
    name: &'static str,
    samples: Vec<Duration>,
    /// CPU time per sample (this thread and the child).
    cpu: Vec<Duration>,
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn p90(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() * 9 / 10]
}

pub(crate) fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let iterations: usize = std::env::var("SPAWN_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 60 } else { 300 });
    let scratch = tempfile::tempdir().unwrap();
    let repo = std::fs::canonicalize(scratch.path()).unwrap();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let env: Vec<(std::ffi::OsString, std::ffi::OsString)> =
        vec![("PATH".into(), "/usr/bin:/bin".into()), ("TERM".into(), "dumb".into())];
    let envp = CArray::new(env.iter().map(|(k, v)| {
        let mut kv = k.clone();
        kv.push("=");
        kv.push(v);
        kv
    }));
    let cwd = CString::new(repo.as_os_str().as_bytes()).unwrap();
    let true_bin = CString::new("/bin/true").unwrap();
    let true_argv = CArray::new(["/bin/true"]);
    let bwrap = which("bwrap");
    let bwrap_argv = CArray::new([
        "bwrap",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--bind",
        "/tmp",
        "/tmp",
        "--unshare-net",
        "--",
        "true",
    ]);
    let bwrap_bin = bwrap.as_ref().map(|p| CString::new(p.as_os_str().as_bytes()).unwrap());

    let sandbox = LinuxSandbox::default();
    // The same without the offline network namespace (the seccomp filter alone keeps the network off): what the
    // namespace and its lookup records cost.
    let no_offline = LinuxSandbox::default().without_offline_namespace();
    // The product hides the default secret locations (`hide_secrets = true`): a sandbox with those patterns over
    // a home holding a typical developer's credential stores (four directories, two files).
    // Outside the writable roots, as a real home is (the target directory, not /tmp).
    let home_scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let home = std::fs::canonicalize(home_scratch.path()).unwrap();
    for dir in [".ssh", ".aws", ".kube", ".config/gcloud"] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
    for file in [".netrc", ".npmrc"] {
        std::fs::write(home.join(file), "secret\n").unwrap();
    }
    // The server-wide sandbox: commands run in a PID namespace shared by the server's sandboxed commands (here the
    // bench's own: it forks the commands itself), with a procfs made once for it and copied onto each `/proc`.
    let own_namespace = std::fs::File::open("/proc/self/ns/pid").unwrap();
    let shared = LinuxSandbox::default()
        .with_pid_namespace(std::os::fd::AsFd::as_fd(&own_namespace))
        .expect("the bench's PID namespace");
    let hiding = LinuxSandbox::default().with_hidden(HiddenPaths {
        home: Some(home.clone()),
        patterns: HiddenPattern::defaults(),
        reachable: Vec::new(),
    });
    // What `uexec mcp` runs by default: the server-wide sandbox hiding the default secret locations.
    let shared_hiding = LinuxSandbox::default()
        .with_pid_namespace(std::os::fd::AsFd::as_fd(&own_namespace))
        .expect("the bench's PID namespace")
        .with_hidden(HiddenPaths {
            home: Some(home.clone()),
            patterns: HiddenPattern::defaults(),
            reachable: Vec::new(),
        });
    let request = || SandboxRequest {
        spawn: SpawnRequest {
            argv: vec!["/bin/true".into()],
            cwd: repo.clone(),
            env: env.clone(),
            mode: IoMode::Pty(PtySize::default()),
            setup: Vec::new(),
            pid_scope: Default::default(),
        },
        workspace: repo.clone(),
        policy: SandboxPolicy::default(),
        tmpdir: None,
        allow_degraded: false,
    };
    let report = sandbox.prepare(request()).expect("the sandbox is enforceable here").report;
    println!("{report}\n");
    let hidden_report = hiding.prepare(request()).expect("the sandbox is enforceable here").report;
    let hidden = hidden_report.protections.iter().find(|p| p.name == "hidden_paths").unwrap();
    println!("with the default hidden locations: {}: {}\n", hidden.status, hidden.detail);

    // Where the time goes: the same hooks with one mechanism left out (simulated by a weaker KernelSupport,
    // degradation accepted).
    let full = sandbox.support().clone();
    let without = |support: KernelSupport| {
        let sandbox = LinuxSandbox::with_support(support);
        move || {
            let mut r = request();
            r.allow_degraded = true;
            sandbox.prepare(r).unwrap().spawn.setup
        }
    };
    let no_mounts = without(KernelSupport {
        mount_namespace: MountNamespace::Unavailable("bench".into()),
        ..full.clone()
    });
    let no_seccomp =
        without(KernelSupport { seccomp: Availability::Unavailable("bench".into()), ..full.clone() });
    let no_landlock = without(KernelSupport { landlock_abi: 0, ..full.clone() });

    if let Ok(n) = std::env::var("SPAWN_BENCH_PROFILE") {
        // Profiling aid (not a measurement): only the sandboxed spawn (with the hidden locations when
        // `SPAWN_BENCH_PROFILE_HIDDEN` is set), `n` times, for `perf record` or `strace -f -T`.
        let hidden = std::env::var_os("SPAWN_BENCH_PROFILE_HIDDEN").is_some();
        let sandbox = match (hidden, std::env::var_os("SPAWN_BENCH_PROFILE_SHARED").is_some()) {
            (false, false) => &sandbox,
            (true, false) => &hiding,
            (false, true) => &shared,
            (true, true) => &shared_hiding,
        };
        for _ in 0..n.parse::<usize>().unwrap() {
            let prepared = sandbox.prepare(request()).unwrap();
            assert_eq!(spawn_in_pty(&true_bin, &true_argv, &envp, &cwd, &prepared.spawn.setup), 0);
        }
        return;
    }
    let mut modes = vec![
        Mode { name: "unsandboxed", samples: Vec::new(), cpu: Vec::new() },
        Mode { name: "uexec sandbox (prepare + hooks)", samples: Vec::new(), cpu: Vec::new() },
        Mode { name: "uexec sandbox (hooks only)", samples: Vec::new(), cpu: Vec::new() },
        Mode { name: "+ hidden secrets (prepare + hooks)", samples: Vec::new(), cpu: Vec::new() },
        Mode { name: "prepare only", samples: Vec::new(), cpu: Vec::new() },
        Mode { name: "hooks without mount namespace", samples: Vec::new(), cpu: Vec::new() },
        Mode { name: "hooks without seccomp", samples: Vec::new(), cpu: Vec::new() },
        Mode { name: "hooks without landlock", samples: Vec::new(), cpu: Vec::new() },
        Mode { name: "server-wide sandbox (prepare + hooks)", samples: Vec::new(), cpu: Vec::new() },
        Mode { name: "server-wide + hidden secrets (prepare + hooks)", samples: Vec::new(), cpu: Vec::new() },
        Mode {
            name: "without the offline namespace (prepare + hooks)",
            samples: Vec::new(),
            cpu: Vec::new(),
        },
    ];
    if bwrap.is_some() {
        modes.push(Mode { name: "bwrap", samples: Vec::new(), cpu: Vec::new() });
    }
    let warmup = 20;
    for i in 0..iterations + warmup {
        // Rotate the order each round so no mode always runs right after another.
        for k in 0..modes.len() {
            let m = (i + k) % modes.len();
            let started = Clock::now();
            // The prepared spawn (its Landlock ruleset closed) and the hooks are dropped after the measurement,
            // as in a real spawner, which drops them while the command runs.
            let (measured, code, keep) = match m {
                0 => {
                    let code = spawn_in_pty(&true_bin, &true_argv, &envp, &cwd, &[]);
                    (started.elapsed(), code, None)
                }
                1 | 3 | 8 | 9 | 10 => {
                    // Timed from `prepare` to the child's exit; mode 3 with the product's default hidden
                    // locations, mode 8 in the server-wide sandbox's PID namespace, mode 9 both (the product's
                    // default).
                    let chosen = match m {
                        1 => &sandbox,
                        3 => &hiding,
                        8 => &shared,
                        9 => &shared_hiding,
                        _ => &no_offline,
                    };
                    let prepared = chosen.prepare(request()).unwrap();
                    let code = spawn_in_pty(&true_bin, &true_argv, &envp, &cwd, &prepared.spawn.setup);
                    (started.elapsed(), code, Some(prepared.spawn.setup))
                }
                2 => {
                    let prepared = sandbox.prepare(request()).unwrap();
                    let started = Clock::now();
                    let code = spawn_in_pty(&true_bin, &true_argv, &envp, &cwd, &prepared.spawn.setup);
                    (started.elapsed(), code, Some(prepared.spawn.setup))
                }
                4 => {
                    let prepared = sandbox.prepare(request()).unwrap();
                    (started.elapsed(), 0, Some(prepared.spawn.setup))
                }
                5..=7 => {
                    let hooks = match m {
                        5 => no_mounts(),
                        6 => no_seccomp(),
                        _ => no_landlock(),
                    };
                    let started = Clock::now();
                    let code = spawn_in_pty(&true_bin, &true_argv, &envp, &cwd, &hooks);
                    (started.elapsed(), code, Some(hooks))
                }
                _ => {
                    let code = spawn_in_pty(bwrap_bin.as_ref().unwrap(), &bwrap_argv, &envp, &cwd, &[]);
                    (started.elapsed(), code, None)
                }
            };
            drop(keep);
            assert_eq!(code, 0, "{} exited {code}", modes[m].name);
            if i >= warmup {
                modes[m].samples.push(measured.0);
                modes[m].cpu.push(measured.1);
            }
        }
    }

    let base = median(&mut modes[0].samples.clone());
    let base_cpu = median(&mut modes[0].cpu.clone());
    println!("spawn-to-exit of /bin/true in a PTY, {iterations} interleaved samples per mode");
    println!(
        "(cpu: CPU time of the bench thread and the child, from CLOCK_THREAD_CPUTIME_ID and RUSAGE_CHILDREN: \
         the work done, without the time spent waiting for a CPU on a loaded machine)"
    );
    println!(
        "{:<46} {:>12} {:>12} {:>14} {:>12} {:>12}",
        "mode", "median", "p90", "vs unsandboxed", "cpu median", "cpu ratio"
    );
    for mode in &mut modes {
        let med = median(&mut mode.samples);
        let p = p90(&mut mode.samples);
        let cpu = median(&mut mode.cpu);
        println!(
            "{:<46} {:>10.1}us {:>10.1}us {:>13.2}x {:>10.1}us {:>11.2}x",
            mode.name,
            med.as_secs_f64() * 1e6,
            p.as_secs_f64() * 1e6,
            med.as_secs_f64() / base.as_secs_f64(),
            cpu.as_secs_f64() * 1e6,
            cpu.as_secs_f64() / base_cpu.as_secs_f64()
        );
    }
    let sandboxed = median(&mut modes[1].samples.clone());
    let sandboxed_cpu = median(&mut modes[1].cpu.clone());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\ntarget: sandboxed spawn / unsandboxed = {:.2} (<= 1.30)",
        sandboxed.as_secs_f64() / base.as_secs_f64()
    );
    println!(
        "target: sandboxed spawn, server-wide sandbox / unsandboxed = {:.2} (<= 1.30)",
        median(&mut modes[8].samples.clone()).as_secs_f64() / base.as_secs_f64()
    );
    println!(
        "the same with the default hidden secret locations (what `uexec mcp` runs by default) = {:.2}",
        median(&mut modes[9].samples.clone()).as_secs_f64() / base.as_secs_f64()
    );
    println!(
        "the same in CPU time: {:.2}; load average {}",
        sandboxed_cpu.as_secs_f64() / base_cpu.as_secs_f64(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let without_offline = median(&mut modes[10].samples.clone());
    let without_offline_cpu = median(&mut modes[10].cpu.clone());
    println!(
        "the offline network namespace (network off: lookups answered and recorded): {:+.1} us per command \
         ({:+.1} us CPU)",
        (sandboxed.as_secs_f64() - without_offline.as_secs_f64()) * 1e6,
        (sandboxed_cpu.as_secs_f64() - without_offline_cpu.as_secs_f64()) * 1e6
    );
    let server_wide_cpu = median(&mut modes[8].cpu.clone());
    println!(
        "server-wide sandbox (what `uexec mcp` and `uexec run` use with a PID namespace) in CPU time: {:.2}",
        server_wide_cpu.as_secs_f64() / base_cpu.as_secs_f64()
    );
    if let Some(bwrap_mode) = modes.iter_mut().find(|m| m.name == "bwrap") {
        let bw = median(&mut bwrap_mode.samples);
        let ours = median(&mut modes[1].samples);
        println!("\nbwrap / uexec sandbox (prepare + hooks): {:.2}x", bw.as_secs_f64() / ours.as_secs_f64());
    } else {
        println!("\nbwrap not found: install bubblewrap to compare");
    }
}

/// A start time: wall clock, and the CPU time used so far by this thread and by the waited-for children.
struct Clock {
    wall: Instant,
    cpu: Duration,
}

impl Clock {
    fn now() -> Clock {
        Clock { wall: Instant::now(), cpu: cpu_used() }
    }

    /// Wall and CPU time since `self`.
    fn elapsed(&self) -> (Duration, Duration) {
        (self.wall.elapsed(), cpu_used().saturating_sub(self.cpu))
    }
}

/// CPU time of this thread plus that of every child waited for (user and system).
fn cpu_used() -> Duration {
    // SAFETY: clock_gettime and getrusage write into the structs passed.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        assert_eq!(libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts), 0);
        let mut ru: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru), 0);
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32) + tv(ru.ru_utime) + tv(ru.ru_stime)
    }
}

/// `program` on the PATH.
fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(program)).find(|p| p.is_file())
}
