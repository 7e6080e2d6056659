//! Process probes: ptrace, io_uring, signals, namespaces, mounts, privileges; each denied probe has an allowed twin.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::{Scratch, bash, denied, prepare, py, py_unsandboxed, run_request, workspace_only};

/// Starts a sibling `sleep`, then tries PTRACE_ATTACH and process_vm_readv on it.
const PTRACE_PROBE: &str = r#"
import ctypes, os, subprocess, time
libc = ctypes.CDLL(None, use_errno=True)
sib = subprocess.Popen(["sleep", "30"])
time.sleep(0.05)
r = libc.ptrace(16, sib.pid, None, None)  # PTRACE_ATTACH
print("ptrace", r, ctypes.get_errno())
if r == 0:
    os.waitpid(sib.pid, 0); libc.ptrace(17, sib.pid, None, None)  # PTRACE_DETACH
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8); remote = iovec(0x400000, 8)
r = libc.process_vm_readv(sib.pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
print("vm_readv", 0 if r >= 0 else -1, ctypes.get_errno() if r < 0 else 0)
sib.kill(); sib.wait()
"#;

#[test]
fn ptrace_of_a_sibling_is_denied() {
    let s = Scratch::new();
    let twin = py_unsandboxed(&s.ws, PTRACE_PROBE);
    assert!(twin.stdout.contains("ptrace 0 "), "unsandboxed ptrace should work: {twin:?}");
    let probe = py(workspace_only(vec![], false), &s.ws, PTRACE_PROBE);
    assert!(probe.stdout.contains(&format!("ptrace -1 {}", libc::EPERM)), "{probe:?}");
    assert!(probe.stdout.contains(&format!("vm_readv -1 {}", libc::EPERM)), "{probe:?}");
}

/// io_uring_setup(8, &params): prints the fd or the errno.
const IO_URING_PROBE: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 8, params)
print("io_uring", fd if fd < 0 else "fd", ctypes.get_errno() if fd < 0 else 0)
"#;

#[test]
fn io_uring_is_denied() {
    let s = Scratch::new();
    let twin = py_unsandboxed(&s.ws, IO_URING_PROBE);
    assert!(twin.stdout.contains("io_uring fd"), "io_uring should work unsandboxed here: {twin:?}");
    let probe = py(workspace_only(vec![], true), &s.ws, IO_URING_PROBE);
    assert!(probe.stdout.contains(&format!("io_uring -1 {}", libc::EPERM)), "{probe:?}");
}

#[test]
fn signals_to_processes_outside_the_sandbox_are_denied() {
    let s = Scratch::new();
    let code = r#"
import os, signal, subprocess
child = subprocess.Popen(["sleep", "30"])
os.kill(child.pid, signal.SIGTERM); child.wait()
print("own-child", child.returncode)
try:
    os.kill(os.getppid(), 0); print("parent ok")
except PermissionError as e:
    print("parent errno", e.errno)
"#;
    let probe = py(workspace_only(vec![], false), &s.ws, code);
    assert!(probe.stdout.contains(&format!("own-child -{}", libc::SIGTERM)), "{probe:?}");
    assert!(probe.stdout.contains(&format!("parent errno {}", libc::EPERM)), "{probe:?}");
    let twin = py_unsandboxed(&s.ws, code);
    assert!(twin.stdout.contains("parent ok"), "{twin:?}");
}

#[test]
fn namespaces_and_mounts_are_denied() {
    let s = Scratch::new();
    fs::create_dir_all(s.ws.join("mnt")).unwrap();
    let policy = || workspace_only(vec![], true);
    for attack in [
        "unshare -r true",
        "unshare -m true",
        "unshare -n true",
        "mount -t tmpfs none mnt",
        "mount --bind / mnt",
        "mount -o remount,rw /",
    ] {
        let probe = bash(policy(), &s.ws, attack);
        assert!(!probe.ok() && denied(&probe.text()), "{attack}: {probe:?}");
    }
    // clone3 fails with ENOSYS, so libc falls back to clone(2) (whose flags the filter sees): forks still work.
    let code = r#"
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(435, None, 0)
print("clone3", r, ctypes.get_errno())
print("fork", subprocess.run(["true"]).returncode)
"#;
    let probe = py(policy(), &s.ws, code);
    assert!(probe.stdout.contains(&format!("clone3 -1 {}", libc::ENOSYS)), "{probe:?}");
    assert!(probe.stdout.contains("fork 0"), "{probe:?}");
    assert!(bash(policy(), &s.ws, "true & wait && echo forked").stdout.contains("forked"));
}

#[test]
fn dangerous_syscalls_fail_with_eperm() {
    let s = Scratch::new();
    let code = r#"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in [("bpf", 321, (0, None, 0)), ("perf_event_open", 298, (None, 0, -1, -1, 0)),
                       ("keyctl", 250, (0, 0)), ("userfaultfd", 323, (0,)), ("setns", 308, (0, 0)),
                       ("personality", 135, (0x0040000,)), ("open_by_handle_at", 304, (0, None, 0)),
                       ("init_module", 175, (None, 0, None)), ("sethostname", 170, (b"x", 1))]:
    r = libc.syscall(nr, *args)
    print(name, r, ctypes.get_errno())
print("personality-query", libc.syscall(135, 0xffffffff) >= 0)
"#;
    let probe = py(workspace_only(vec![], true), &s.ws, code);
    for name in [
        "bpf",
        "perf_event_open",
        "keyctl",
        "userfaultfd",
        "setns",
        "personality",
        "open_by_handle_at",
        "init_module",
        "sethostname",
    ] {
        assert!(probe.stdout.contains(&format!("{name} -1 {}\n", libc::EPERM)), "{name}: {probe:?}");
    }
    assert!(probe.stdout.contains("personality-query True"), "{probe:?}");
}

#[test]
fn status_shows_no_new_privs_seccomp_and_reduced_capabilities() {
    let s = Scratch::new();
    let probe = bash(
        workspace_only(vec![], false),
        &s.ws,
        "grep -E '^(NoNewPrivs|Seccomp|CapPrm|CapEff|CapInh|CapAmb):' /proc/self/status; \
         echo $UEXEC_SANDBOX $UEXEC_SANDBOX_NETWORK_DISABLED",
    );
    assert!(probe.ok(), "{probe:?}");
    let field = |name: &str| {
        probe
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("Seccomp"), "2");
    // chown dac_override fowner fsetid kill setgid setuid setpcap net_bind_service net_raw sys_chroot audit_write:
    // bash was exec'd as root after the hook, and root's exec did not give everything back (no_new_privs).
    assert_eq!(field("CapPrm"), "00000000200425fb");
    assert_eq!(field("CapEff"), "00000000200425fb");
    assert_eq!(field("CapAmb"), "0000000000000000");
    assert!(probe.stdout.contains("linux-landlock-seccomp 1"), "{probe:?}");
    let on = bash(workspace_only(vec![], true), &s.ws, "echo \"[$UEXEC_SANDBOX_NETWORK_DISABLED]\"");
    assert!(on.stdout.contains("[]"), "{on:?}");
}

/// After the sandbox hooks: become `nobody` (a non-root user for whom setuid-root binaries would matter).
fn become_nobody() -> std::io::Result<()> {
    // SAFETY: async-signal-safe libc calls in the forked child.
    let failed = unsafe {
        libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0
    };
    if failed { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

#[test]
fn setuid_binaries_gain_nothing_and_stay_confined() {
    let s = Scratch::new();
    // Setuid-root copies of `id` and `touch`, reachable by nobody.
    let bin = s.base.join("bin");
    fs::create_dir_all(&bin).unwrap();
    for dir in [&s.base, &bin, &s.ws, &s.outside] {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o777)).unwrap();
    }
    for tool in ["id", "touch"] {
        fs::copy(format!("/usr/bin/{tool}"), bin.join(tool)).unwrap();
        fs::set_permissions(bin.join(tool), fs::Permissions::from_mode(0o4755)).unwrap();
    }
    let id = bin.join("id").display().to_string();
    let touch = bin.join("touch").display().to_string();
    let target = s.outside.join("by-setuid").display().to_string();

    // Twin without the sandbox: the setuid bit works (effective uid 0) and the file can be created.
    let plain = crate::common::spawn_request(
        &["bash", "-c", &format!("{id} -u; {touch} {target} && echo created")],
        &s.ws,
    );
    let twin = run_request(&plain, &[become_nobody]);
    assert!(twin.stdout.starts_with("0\n") && twin.stdout.contains("created"), "{twin:?}");
    fs::remove_file(&target).unwrap();

    let script = format!(
        "{id} -u; {touch} {target} || echo denied; /usr/bin/mount --bind / {} || echo mount-denied",
        s.ws.display()
    );
    let prepared = prepare(workspace_only(vec![], false), &["bash", "-c", &script], &s.ws);
    let probe = run_request(&prepared.spawn, &[become_nobody]);
    assert!(probe.stdout.starts_with("65534\n"), "setuid raised privileges: {probe:?}");
    assert!(probe.stdout.contains("denied") && probe.stdout.contains("mount-denied"), "{probe:?}");
    assert!(!s.outside.join("by-setuid").exists());
}

#[test]
fn the_parents_memory_environment_and_limits_are_out_of_reach() {
    let s = Scratch::new();
    let code = r#"
import os, resource
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno)
ppid = os.getppid()
attempt("own-environ", lambda: open("/proc/self/environ", "rb").read())
attempt("parent-environ", lambda: open(f"/proc/{ppid}/environ", "rb").read())
attempt("parent-mem", lambda: open(f"/proc/{ppid}/mem", "rb").read(1))
attempt("parent-fds", lambda: os.readlink(f"/proc/{ppid}/fd/0"))
attempt("parent-root", lambda: os.listdir(f"/proc/{ppid}/root/"))
attempt("own-limits", lambda: resource.prlimit(0, resource.RLIMIT_NOFILE))
attempt("parent-limits", lambda: resource.prlimit(ppid, resource.RLIMIT_NOFILE, (0, 0)))
"#;
    let probe = py(workspace_only(vec![], false), &s.ws, code);
    assert!(probe.stdout.contains("own-environ ok") && probe.stdout.contains("own-limits ok"), "{probe:?}");
    // Hidden altogether (ENOENT) by the sandbox's `hidepid=ptraceable` procfs; the inherited `/proc` (when no
    // fresh one can be mounted) answers EACCES through Landlock's ptrace restriction instead.
    for attack in ["parent-environ", "parent-mem", "parent-fds", "parent-root"] {
        assert!(probe.stdout.contains(&format!("{attack} errno {}", libc::ENOENT)), "{attack}: {probe:?}");
    }
    assert!(probe.stdout.contains(&format!("parent-limits errno {}", libc::EPERM)), "{probe:?}");
    let twin = py_unsandboxed(
        &s.ws,
        code.replace("(0, 0)", "resource.prlimit(ppid, resource.RLIMIT_NOFILE)").as_str(),
    );
    assert!(
        twin.stdout.contains("parent-environ ok") && twin.stdout.contains("parent-limits ok"),
        "{twin:?}"
    );
}

#[test]
fn abstract_unix_sockets_outside_the_sandbox_are_unreachable() {
    use std::os::linux::net::SocketAddrExt;
    let s = Scratch::new();
    let name = format!("uexec-sbx-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let code = format!(
        r#"
import socket
def attempt(label, f):
    try:
        f(); print(label, "ok")
    except OSError as e:
        print(label, "errno", e.errno)
def outside():
    c = socket.socket(socket.AF_UNIX); c.connect("\0{name}")
def inside():
    srv = socket.socket(socket.AF_UNIX); srv.bind("\0{name}-inside"); srv.listen(1)
    c = socket.socket(socket.AF_UNIX); c.connect("\0{name}-inside")
attempt("outside", outside)
attempt("inside", inside)
"#
    );
    // With the network on the command shares the host's network namespace, where the name exists: Landlock's
    // scope refuses it. With the network off it is in the offline namespace, whose abstract names are its own:
    // the host's name is not there at all.
    let probe = py(workspace_only(vec![], true), &s.ws, &code);
    assert!(probe.stdout.contains("inside ok"), "{probe:?}");
    assert!(probe.stdout.contains(&format!("outside errno {}", libc::EPERM)), "{probe:?}");
    let probe = py(workspace_only(vec![], false), &s.ws, &code);
    assert!(probe.stdout.contains("inside ok"), "{probe:?}");
    assert!(probe.stdout.contains(&format!("outside errno {}", libc::ECONNREFUSED)), "{probe:?}");
    let twin = py_unsandboxed(&s.ws, &code);
    assert!(twin.stdout.contains("outside ok"), "{twin:?}");
}

/// A 32-bit system call (`int 0x80`, i386 getpid) from a 64-bit process: another audit architecture.
#[cfg(target_arch = "x86_64")]
const INT80_PROBE: &str = r#"
import ctypes, mmap, os
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax, 20; int 0x80; ret
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("i386 getpid", f() == os.getpid())
"#;

#[cfg(target_arch = "x86_64")]
#[test]
fn foreign_architecture_syscalls_kill_the_process_with_status_159() {
    let s = Scratch::new();
    let twin = py_unsandboxed(&s.ws, INT80_PROBE);
    assert!(twin.stdout.contains("i386 getpid True"), "int 0x80 should work unsandboxed: {twin:?}");
    let python = crate::common::python();
    let script = format!("{} -c '{}'; echo status=$?", python.display(), INT80_PROBE.replace('\'', "\""));
    let probe = bash(workspace_only(vec![], false), &s.ws, &script);
    assert!(probe.stdout.contains("status=159") && !probe.stdout.contains("i386 getpid"), "{probe:?}");
}

#[test]
fn device_ioctls_work_only_on_the_commands_own_devices() {
    // RNDGETENTCNT on /dev/urandom opened for reading: harmless, and the same path as LOOP_CTL_* on
    // /dev/loop-control or KVM_CREATE_VM on /dev/kvm, which a read-only descriptor allowed before.
    let s = Scratch::new();
    let code = "import fcntl, os\nfd = os.open('/dev/urandom', os.O_RDONLY)\ntry:\n fcntl.ioctl(fd, 0x80045200, b'1234')\n print('ioctl-ok')\nexcept OSError as e: print('errno', e.errno)";
    let free = py_unsandboxed(&s.ws, code);
    assert_eq!(free.stdout.trim(), "ioctl-ok", "{free:?}");
    let sandboxed = py(workspace_only(vec![], false), &s.ws, code);
    assert_eq!(sandboxed.stdout.trim(), format!("errno {}", libc::EACCES), "{sandboxed:?}");
    // /dev/null keeps its ioctls (FIONREAD-like queries some tools make).
    let null = py(
        workspace_only(vec![], false),
        &s.ws,
        "import fcntl, os, termios\nfd = os.open('/dev/null', os.O_RDWR)\ntry:\n fcntl.ioctl(fd, termios.TCGETS, bytes(64))\nexcept OSError as e: print('errno', e.errno)",
    );
    // Not a terminal: ENOTTY from the driver, not EACCES from Landlock.
    assert_eq!(null.stdout.trim(), format!("errno {}", libc::ENOTTY), "{null:?}");
}

/// What a command sees in `/proc`: the test runner (standing for the uexec server), a command of another sandbox
/// (standing for another session or another server's command, its argv carrying a marker), and its own child.
fn proc_probe(server: u32, other: u32) -> String {
    format!(
        r#"
import os, subprocess
import time
child = subprocess.Popen(["sleep", "30"])
def read(pid, name):
    try:
        return open("/proc/%s/%s" % (pid, name), "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError as e:
        return "errno %d" % e.errno
print("server:", read({server}, "cmdline"))
print("server-environ:", read({server}, "environ")[:20])
print("other:", read({other}, "cmdline"))
for _ in range(1000):
    if read(child.pid, "cmdline").startswith("sleep"):
        break
    time.sleep(0.01)
print("child:", read(child.pid, "cmdline"))
pids = [p for p in os.listdir("/proc") if p.isdigit()]
print("marker:", any("uexec-proc-" + "marker" in read(p, "cmdline") for p in pids))
try:
    os.kill({other}, 0); print("signal: ok")
except OSError as e:
    print("signal: errno", e.errno)
child.kill()
"#
    )
}

#[test]
fn proc_shows_only_the_commands_own_processes() {
    let s = Scratch::new();
    // Another sandboxed command whose argv holds a "secret".
    let other_spawn = prepare(
        workspace_only(vec![], false),
        &["bash", "-c", "exec -a uexec-proc-marker--password=hunter2 sleep 60"],
        &s.ws,
    );
    let mut other = crate::common::command(&other_spawn.spawn, &[], &[])
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("spawn the other command");
    // Wait until it has exec'd sleep under its marker name.
    let started = std::time::Instant::now();
    while !fs::read(format!("/proc/{}/cmdline", other.id()))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("uexec-proc-marker"))
    {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the other command did not start");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let code = proc_probe(std::process::id(), other.id());

    let twin = py_unsandboxed(&s.ws, &code);
    let probe = py(workspace_only(vec![], false), &s.ws, &code);
    let _ = other.kill();
    let _ = other.wait();

    assert!(twin.stdout.contains("server: ") && !twin.stdout.contains("server: errno"), "{twin:?}");
    assert!(twin.stdout.contains("marker: True") && twin.stdout.contains("signal: ok"), "{twin:?}");
    // Sandboxed: its own child is visible, the server and the other command are not, nor signalable.
    assert!(probe.stdout.contains("child: sleep 30"), "{probe:?}");
    let enoent = libc::ENOENT;
    assert!(probe.stdout.contains(&format!("server: errno {enoent}")), "{probe:?}");
    assert!(probe.stdout.contains(&format!("server-environ: errno {enoent}")), "{probe:?}");
    assert!(probe.stdout.contains(&format!("other: errno {enoent}")), "{probe:?}");
    assert!(probe.stdout.contains("marker: False"), "{probe:?}");
    assert!(probe.stdout.contains(&format!("signal: errno {}", libc::EPERM)), "{probe:?}");
}

/// A PID namespace whose init is `sleep 60` (started from a thread that unshared one): the init, and the
/// namespace's descriptor.
pub(crate) fn pid_namespace_with_init() -> (std::process::Child, fs::File) {
    let init = std::thread::spawn(|| {
        // SAFETY: CLONE_NEWPID only changes where this (test-owned, short-lived) thread's children are created.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWPID) }, 0, "unshare(CLONE_NEWPID) as root");
        std::process::Command::new("sleep").arg("60").stdin(std::process::Stdio::null()).spawn().unwrap()
    })
    .join()
    .expect("the namespace thread");
    let namespace = fs::File::open(format!("/proc/{}/ns/pid", init.id())).unwrap();
    (init, namespace)
}

/// Prepare `bash -c script` with a sandbox whose commands run in the PID namespace `namespace`.
fn prepare_shared(s: &Scratch, namespace: &fs::File, script: &str) -> uexec_ports::SandboxedSpawn {
    use std::os::fd::AsFd;
    use uexec_ports::Sandbox;
    uexec_sandbox_linux::LinuxSandbox::default()
        .with_pid_namespace(namespace.as_fd())
        .expect("the namespace is identified")
        .prepare(crate::common::request(workspace_only(vec![], false), &["bash", "-c", script], &s.ws))
        .expect("this machine enforces every protection")
}

/// Spawn `command` in the PID namespace `namespace`, from a fresh thread that entered it first (`setns`). The
/// thread only creates the child (a thread whose children go to another PID namespace cannot start threads,
/// and reading the output takes two).
pub(crate) fn spawn_in_pid_namespace(
    namespace: &fs::File,
    command: &mut std::process::Command,
) -> std::io::Result<std::process::Child> {
    use std::os::fd::AsRawFd;
    let fd = namespace.as_raw_fd();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: setns with an open namespace descriptor; CLONE_NEWPID only changes where this thread's
                // children are created.
                assert_eq!(unsafe { libc::setns(fd, libc::CLONE_NEWPID) }, 0, "setns(CLONE_NEWPID) as root");
                command.spawn()
            })
            .join()
            .expect("the spawning thread")
    })
}

/// Run `spawn` in the PID namespace `namespace`: created by a fresh thread that entered it first (`setns`).
pub(crate) fn run_in_pid_namespace(
    namespace: &fs::File,
    spawn: &uexec_ports::process::SpawnRequest,
) -> crate::common::Probe {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let mut command = crate::common::command(spawn, &[], &[]);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = spawn_in_pid_namespace(namespace, &mut command).expect("spawn the probe");
    let (status, stdout, stderr) =
        crate::common::finish(child, crate::common::PROBE_TIMEOUT).expect("the probe finishes");
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    crate::common::Probe { code, stdout, stderr }
}

#[test]
fn a_shared_pid_namespace_sandbox_runs_only_in_its_namespace() {
    let s = Scratch::new();
    let (mut init, namespace) = pid_namespace_with_init();
    // In its namespace the command runs; `$$`, `ps` and `/proc` agree, and `/proc` (the procfs made once for
    // the namespace) shows the namespace's other process, its init.
    let script = "echo pid=$$; ps -o pid= -p $$; ps -o args= -p 1; \
                  mount | grep -c 'on /proc type proc.*hidepid' || true";
    let probe = run_in_pid_namespace(&namespace, &prepare_shared(&s, &namespace, script).spawn);
    init.kill().unwrap();
    init.wait().unwrap();
    assert!(probe.ok(), "{probe:?}");
    let lines: Vec<&str> = probe.stdout.lines().map(str::trim).collect();
    let pid = lines.first().and_then(|line| line.strip_prefix("pid=")).expect("pid=");
    assert_ne!(pid, "1", "{probe:?}");
    assert_eq!(lines.get(1), Some(&pid), "ps agrees with $$: {probe:?}");
    assert_eq!(lines.get(2), Some(&"sleep 60"), "the namespace's init is listed: {probe:?}");
    assert_eq!(lines.get(3), Some(&"0"), "the shared namespace's /proc hides nothing: {probe:?}");
    // The twins: the same prepared command in the test's own namespace, or in another new one, is refused before
    // it runs (its signals would no longer be scoped, its /proc would not be its namespace's).
    let (mut other_init, other) = pid_namespace_with_init();
    let prepared = prepare_shared(&s, &namespace, "echo RAN");
    let error = crate::common::command(&prepared.spawn, &[], &[])
        .stdin(std::process::Stdio::null())
        .output()
        .expect_err("a shared-namespace command in the server's own namespace must not start");
    assert_eq!(error.raw_os_error(), Some(libc::EPERM), "{error}");
    let mut command = crate::common::command(&prepared.spawn, &[], &[]);
    command.stdin(std::process::Stdio::null());
    let fd = std::os::fd::AsRawFd::as_raw_fd(&other);
    let spawned = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: as in `run_in_pid_namespace`.
                assert_eq!(unsafe { libc::setns(fd, libc::CLONE_NEWPID) }, 0);
                command.spawn()
            })
            .join()
            .expect("the probe thread")
    });
    other_init.kill().unwrap();
    other_init.wait().unwrap();
    let error = spawned.expect_err("a shared-namespace command in another namespace must not start");
    assert_eq!(error.raw_os_error(), Some(libc::EPERM), "{error}");
    // And the default sandbox (own signal scope, hidepid) runs in the test's namespace as before.
    let probe = bash(workspace_only(vec![], false), &s.ws, "mount | grep -c 'on /proc type proc.*hidepid'");
    assert_eq!(probe.stdout.trim(), "1", "{probe:?}");
}
