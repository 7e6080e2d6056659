//! The server-wide sandbox's mount templates: commands with one mount plan share a namespace built once, which
//! keeps every protection of a namespace built per command, and a template that no longer matches the host (a
//! protected path re-created, a mount made after it) is never used.

use std::fs;
use std::os::fd::AsFd;
use std::path::Path;

use uexec_ports::Sandbox;
use uexec_sandbox_linux::LinuxSandbox;

use crate::common::{Probe, Scratch, denied, request, workspace_only};
use crate::process::{pid_namespace_with_init, run_in_pid_namespace, spawn_in_pid_namespace};

/// A server-wide sandbox (its commands in `namespace`) and what its commands run.
struct Server {
    sandbox: LinuxSandbox,
    namespace: fs::File,
    init: std::process::Child,
}

impl Server {
    fn new() -> Server {
        let (init, namespace) = pid_namespace_with_init();
        let sandbox = LinuxSandbox::default()
            .with_pid_namespace(namespace.as_fd())
            .expect("the namespace is identified");
        Server { sandbox, namespace, init }
    }

    /// `bash -c script` in `ws`, its first output line its mount namespace (`mnt:[inode]`), and the rest.
    fn run(&self, ws: &Path, script: &str) -> (String, Probe) {
        let script = format!("readlink /proc/self/ns/mnt; {script}");
        let prepared = self
            .sandbox
            .prepare(request(workspace_only(vec![], false), &["bash", "-c", &script], ws))
            .expect("this machine enforces every protection");
        let mut probe = run_in_pid_namespace(&self.namespace, &prepared.spawn);
        let (first, rest) = probe.stdout.split_once('\n').unwrap_or((&probe.stdout, ""));
        let namespace = first.trim().to_owned();
        assert!(namespace.starts_with("mnt:["), "{probe:?}");
        probe.stdout = rest.to_owned();
        (namespace, probe)
    }
}

/// A sandboxed `sleep` kept running: it keeps its mount namespace alive, so namespaces compared with it are
/// told apart by inode (a namespace's inode number is reused as soon as it is freed).
struct Resident {
    child: std::process::Child,
    /// Its mount namespace (`mnt:[inode]`).
    namespace: String,
    /// Its UTS namespace (`uts:[inode]`).
    uts: String,
}

impl Server {
    /// Start `sleep 60` in `ws` under the sandbox, as [`Server::run`] would run a command.
    fn resident(&self, ws: &Path) -> Resident {
        let prepared = self
            .sandbox
            .prepare(request(workspace_only(vec![], false), &["sleep", "60"], ws))
            .expect("this machine enforces every protection");
        let mut command = crate::common::command(&prepared.spawn, &[], &[]);
        command.stdin(std::process::Stdio::null());
        let child = spawn_in_pid_namespace(&self.namespace, &mut command).expect("spawn the resident");
        // `spawn` returned after the exec, so the child's setup (its mount namespace) is done.
        let ns = |kind: &str| {
            fs::read_link(format!("/proc/{}/ns/{kind}", child.id())).unwrap().to_string_lossy().into_owned()
        };
        let (namespace, uts) = (ns("mnt"), ns("uts"));
        Resident { child, namespace, uts }
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.init.kill();
        let _ = self.init.wait();
    }
}

/// This process's namespace of kind `kind` (`mnt`, `uts`).
fn own_namespace(kind: &str) -> String {
    fs::read_link(format!("/proc/self/ns/{kind}")).unwrap().to_string_lossy().into_owned()
}

const PROBES: &str = "echo data > out.txt && echo wrote-ws; \
                      echo x > ../outside/new.txt 2>&1 || true; \
                      echo x > .git/config 2>&1 || true; \
                      mv .git moved 2>&1 || true; \
                      cat ../outside/secret.txt";

/// Check what [`PROBES`] printed: the workspace is writable; outside it and `.git` are not.
fn assert_protected(s: &Scratch, probe: &Probe) {
    assert!(probe.stdout.contains("wrote-ws"), "{probe:?}");
    assert!(probe.stdout.contains("original"), "reading outside works: {probe:?}");
    assert!(denied(&probe.text()), "{probe:?}");
    assert_eq!(Scratch::read(&s.outside.join("new.txt")), "<missing>", "{probe:?}");
    assert_eq!(Scratch::read(&s.ws.join(".git/config")), "[core]\n", "{probe:?}");
    assert!(s.ws.join(".git").is_dir() && !s.ws.join("moved").exists(), "{probe:?}");
}

#[test]
fn commands_with_one_plan_share_a_namespace_that_keeps_every_protection() {
    let s = Scratch::new();
    fs::create_dir(s.ws.join(".git")).unwrap();
    fs::write(s.ws.join(".git/config"), "[core]\n").unwrap();
    let server = Server::new();
    let first = server.resident(&s.ws);
    // The second command with this plan builds the template; later ones enter it.
    let second = server.resident(&s.ws);
    assert_ne!(first.namespace, second.namespace, "the first command built a namespace of its own");
    assert_ne!(second.namespace, own_namespace("mnt"), "never the server's namespace");
    // Each command still has a UTS namespace of its own (the process adapter finds a session's processes by it).
    let third = server.resident(&s.ws);
    assert_eq!(third.namespace, second.namespace);
    assert_ne!(third.uts, second.uts, "a UTS namespace per command");
    assert!(![&first.uts, &second.uts, &third.uts].contains(&&own_namespace("uts")));
    for _ in 0..2 {
        let (namespace, probe) = server.run(&s.ws, PROBES);
        assert_protected(&s, &probe);
        assert_eq!(namespace, second.namespace, "one namespace for one plan: {probe:?}");
    }
    // Another working directory inside the same workspace has the same plan: the same namespace, entered there.
    fs::create_dir(s.ws.join("sub")).unwrap();
    let argv = ["bash", "-c", "readlink /proc/self/ns/mnt; pwd"];
    let prepared = server
        .sandbox
        .prepare(uexec_ports::SandboxRequest {
            workspace: s.ws.clone(),
            ..request(workspace_only(vec![], false), &argv, &s.ws.join("sub"))
        })
        .unwrap();
    let probe = run_in_pid_namespace(&server.namespace, &prepared.spawn);
    assert_eq!(probe.stdout, format!("{}\n{}\n", second.namespace, s.ws.join("sub").display()), "{probe:?}");
    // A plan that differs (one more writable root) gets a namespace of its own, with that root writable.
    let extra = s.base.join("extra");
    fs::create_dir(&extra).unwrap();
    let script =
        format!("readlink /proc/self/ns/mnt; echo y > {}/e.txt && echo wrote-extra", extra.display());
    let argv = ["bash", "-c", script.as_str()];
    for _ in 0..3 {
        let prepared = server
            .sandbox
            .prepare(request(workspace_only(vec![extra.clone()], false), &argv, &s.ws))
            .unwrap();
        let probe = run_in_pid_namespace(&server.namespace, &prepared.spawn);
        assert!(probe.stdout.contains("wrote-extra"), "{probe:?}");
        assert!(!probe.stdout.contains(&second.namespace), "{probe:?}");
        // Its twin: the first plan's commands cannot write there.
        let (_, probe) = server.run(&s.ws, &format!("echo z > {}/z.txt", extra.display()));
        assert!(denied(&probe.stderr), "{probe:?}");
    }
    // The first plan's template is still the one in use.
    let (again, probe) = server.run(&s.ws, PROBES);
    assert_protected(&s, &probe);
    assert_eq!(again, second.namespace);
}

#[test]
fn a_template_whose_protected_path_was_re_created_is_not_used() {
    let s = Scratch::new();
    fs::create_dir(s.ws.join(".git")).unwrap();
    fs::write(s.ws.join(".git/config"), "[core]\n").unwrap();
    let server = Server::new();
    server.run(&s.ws, "true");
    let template = server.resident(&s.ws);
    let (namespace, _) = server.run(&s.ws, "true");
    assert_eq!(namespace, template.namespace, "the template is in use");
    // Outside the sandbox, `.git` is moved away and made again: the template's read-only mount stayed on the
    // old directory, so the new one would be writable in it.
    fs::rename(s.ws.join(".git"), s.ws.join("old-git")).unwrap();
    fs::create_dir(s.ws.join(".git")).unwrap();
    fs::write(s.ws.join(".git/config"), "[core]\n").unwrap();
    let script = "echo x > .git/config; echo y > old-git/config && echo wrote-old";
    for _ in 0..3 {
        let (namespace, probe) = server.run(&s.ws, script);
        assert_ne!(namespace, template.namespace, "{probe:?}");
        assert!(denied(&probe.stderr), "{probe:?}");
        assert_eq!(Scratch::read(&s.ws.join(".git/config")), "[core]\n", "{probe:?}");
        // The twin: the old directory is an ordinary workspace directory now, and writable.
        assert!(probe.stdout.contains("wrote-old"), "{probe:?}");
    }
}

/// A tmpfs mounted on a directory of this process's mount namespace, unmounted when dropped.
struct TmpfsMount(std::ffi::CString);

impl TmpfsMount {
    fn new(path: &Path) -> TmpfsMount {
        let target = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mount with static strings and a NUL-terminated target.
        let ret = unsafe {
            libc::mount(c"tmpfs".as_ptr(), target.as_ptr(), c"tmpfs".as_ptr(), 0, c"size=64k".as_ptr().cast())
        };
        assert_eq!(ret, 0, "mount tmpfs as root: {}", std::io::Error::last_os_error());
        TmpfsMount(target)
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        // SAFETY: umount2 of the NUL-terminated path mounted above.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
fn a_mount_made_on_the_host_after_the_template_is_seen() {
    let s = Scratch::new();
    fs::create_dir(s.ws.join("disk")).unwrap();
    fs::write(s.ws.join("disk/under.txt"), "under the mount\n").unwrap();
    let server = Server::new();
    server.run(&s.ws, "true");
    let template = server.resident(&s.ws);
    let (namespace, probe) = server.run(&s.ws, "cat disk/under.txt");
    assert_eq!(probe.stdout, "under the mount\n", "{probe:?}");
    assert_eq!(namespace, template.namespace, "the template is in use");
    // Outside the sandbox a file system is mounted in the workspace after the template was built.
    let _mount = TmpfsMount::new(&s.ws.join("disk"));
    fs::write(s.ws.join("disk/on.txt"), "on the mount\n").unwrap();
    for _ in 0..3 {
        let (namespace, probe) =
            server.run(&s.ws, "cat disk/on.txt; echo more > disk/more.txt && echo wrote");
        assert_eq!(probe.stdout, "on the mount\nwrote\n", "{probe:?}");
        assert_ne!(namespace, template.namespace);
        assert_eq!(Scratch::read(&s.ws.join("disk/more.txt")), "more\n");
    }
    // The twin: what the template showed is still under the mount, where commands no longer look.
    assert_eq!(Scratch::read(&s.ws.join("disk/under.txt")), "<missing>");
}

/// Start a prepared command in this process's PID namespace (no shared sandbox namespace), stdin closed.
fn start_here(spawn: &uexec_ports::process::SpawnRequest) -> Resident {
    let mut command = crate::common::command(spawn, &[], &[]);
    command.stdin(std::process::Stdio::null());
    let child = command.spawn().expect("spawn");
    let ns = |kind: &str| {
        fs::read_link(format!("/proc/{}/ns/{kind}", child.id())).unwrap().to_string_lossy().into_owned()
    };
    let (namespace, uts) = (ns("mnt"), ns("uts"));
    Resident { child, namespace, uts }
}

#[test]
fn the_per_command_sandbox_enters_a_template_only_in_the_pid_namespace_its_proc_shows() {
    let s = Scratch::new();
    let sandbox = LinuxSandbox::default();
    let prepare = |argv: &[&str]| {
        sandbox.prepare(request(workspace_only(vec![], false), argv, &s.ws)).expect("enforceable here")
    };
    let _first = start_here(&prepare(&["sleep", "60"]).spawn);
    let second = start_here(&prepare(&["sleep", "60"]).spawn);
    let third = start_here(&prepare(&["sleep", "60"]).spawn);
    assert_eq!(second.namespace, third.namespace, "one namespace for one plan");
    assert_ne!(second.uts, third.uts, "a UTS namespace per command");
    // In the template, the fresh `hidepid=ptraceable` procfs still shows each command its own processes only
    // (the other commands' `sleep 60` are hidden), and `$$`, `/proc` and `ps` agree.
    let script = "readlink /proc/self/ns/mnt; ps -eo args= | grep -c '^sleep 60' || true; \
                  echo \"dollar=$$ parent_sees=$(cut -d' ' -f4 /proc/self/stat)\"; echo x > out.txt && echo wrote";
    let probe = crate::common::run(&prepare(&["bash", "-c", script]));
    let lines: Vec<&str> = probe.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&second.namespace.as_str()), "{probe:?}");
    assert_eq!(lines.get(1), Some(&"0"), "other commands' processes are hidden: {probe:?}");
    let identity = lines.get(2).copied().unwrap_or_default();
    let (dollar, parent) = identity.split_once(' ').unwrap_or_default();
    assert_eq!(dollar.strip_prefix("dollar="), parent.strip_prefix("parent_sees="), "{probe:?}");
    assert_eq!(lines.get(3), Some(&"wrote"), "{probe:?}");
    // In another PID namespace the template's /proc would be the wrong one (`$$` would name another process
    // there, or none): the command builds its own namespace, whose /proc is its PID namespace's.
    let (mut init, namespace) = pid_namespace_with_init();
    let script = "readlink /proc/self/ns/mnt; echo \"dollar=$$ ps=$(ps -o pid= -p $$ | tr -d ' ')\"";
    let probe = run_in_pid_namespace(&namespace, &prepare(&["bash", "-c", script]).spawn);
    init.kill().unwrap();
    init.wait().unwrap();
    let lines: Vec<&str> = probe.stdout.lines().collect();
    assert_ne!(lines.first(), Some(&second.namespace.as_str()), "{probe:?}");
    let identity = lines.get(1).copied().unwrap_or_default();
    let (dollar, ps) = identity.split_once(' ').unwrap_or_default();
    assert_eq!(dollar.strip_prefix("dollar="), ps.strip_prefix("ps="), "{probe:?}");
}

#[test]
fn a_template_keeps_git_hooks_protected_when_they_are_removed_and_made_again_outside() {
    let s = Scratch::new();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").arg("-C").arg(&s.ws).args(args).output().unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    git(&["init", "-q"]);
    let server = Server::new();
    server.run(&s.ws, "true");
    let template = server.resident(&s.ws);
    let (namespace, _) = server.run(&s.ws, "true");
    assert_eq!(namespace, template.namespace, "the template is in use");
    // Outside the sandbox the hooks directory goes away; the next command's placeholder is a new directory, which
    // the template's mount does not cover.
    fs::remove_dir_all(s.ws.join(".git/hooks")).unwrap();
    let script = "touch .git/hooks/post-checkout; touch .git/index.test && echo wrote-git";
    for _ in 0..3 {
        let (namespace, probe) = server.run(&s.ws, script);
        assert_ne!(namespace, template.namespace, "{probe:?}");
        assert!(denied(&probe.stderr), "{probe:?}");
        assert!(!s.ws.join(".git/hooks/post-checkout").exists(), "{probe:?}");
        // The twin: the rest of the git directory is writable.
        assert!(probe.stdout.contains("wrote-git"), "{probe:?}");
    }
}
