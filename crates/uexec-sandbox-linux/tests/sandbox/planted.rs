//! Planted protected entries: a `.git` or `.uexec` that one sandboxed command creates must not freeze writable
//! roots for later commands, and reading a planted `.git` must neither hang nor cost more than a few KiB.
//!
//! Each test re-runs itself (this test binary, filtered to the one test) in a private mount namespace whose `/tmp`
//! is a fresh tmpfs, so the scenarios plant in `/tmp` exactly as an attacker would without touching the machine's
//! real `/tmp`. Inside, every probe still runs in a child process under the sandbox.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use uexec_domain::{ProtectionReport, SandboxPolicy};
use uexec_ports::Sandbox;
use uexec_sandbox_linux::LinuxSandbox;

use crate::common::{Probe, denied, request, run};

/// Set (to the test's name) in the copy of the test binary that runs inside the private namespace.
const PRIVATE_TMP_ENV: &str = "UEXEC_TEST_PRIVATE_TMP";

/// Run `body` in a copy of this test binary inside a private mount namespace with its own tmpfs on `/tmp`.
/// `test` is the test's name as the harness knows it (`planted::name`); the outer run asserts the inner one ran
/// exactly that test and passed.
fn with_private_tmp(test: &str, body: impl FnOnce()) {
    if std::env::var(PRIVATE_TMP_ENV).as_deref() == Ok(test) {
        assert!(is_private_tmpfs(), "/tmp is not the private tmpfs");
        body();
        return;
    }
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(PRIVATE_TMP_ENV, test)
        .env("TMPDIR", "/tmp")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec and makes async-signal-safe system calls only.
    unsafe {
        command.pre_exec(|| {
            let check =
                |ret: libc::c_int| if ret == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) };
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                c"uexec-test-tmp".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=1777,size=4g".as_ptr().cast(),
            ))
        });
    }
    let child = command.spawn().expect("re-run the test binary");
    let Some((status, out, err)) = crate::common::finish(child, Duration::from_secs(240)) else {
        panic!("{test} in a private /tmp did not finish within 240 s (a hang)");
    };
    assert!(status.success() && out.contains("1 passed"), "{test} in a private /tmp failed:\n{out}\n{err}");
}

/// True when `/tmp` is the tmpfs mounted by [`with_private_tmp`].
fn is_private_tmpfs() -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .is_ok_and(|mounts| mounts.lines().any(|l| l.starts_with("uexec-test-tmp /tmp tmpfs")))
}

/// Workspace-write with `/tmp` as a writable root (as by default), the workspace being `/tmp/ws`.
fn tmp_policy() -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite {
        writable_roots: vec![],
        network_access: false,
        exclude_slash_tmp: false,
        exclude_tmpdir_env_var: true,
    }
}

/// The workspace.
fn ws() -> PathBuf {
    PathBuf::from("/tmp/ws")
}

/// Empty the private `/tmp` and make `/tmp/ws/src`.
fn reset() {
    for entry in std::fs::read_dir("/tmp").expect("/tmp") {
        let path = entry.expect("entry").path();
        let meta = std::fs::symlink_metadata(&path).expect("lstat");
        if meta.is_dir() {
            std::fs::remove_dir_all(&path).expect("rm -r");
        } else {
            std::fs::remove_file(&path).expect("rm");
        }
    }
    std::fs::create_dir_all(ws().join("src")).expect("mkdir");
}

/// Run `script` with bash under [`tmp_policy`] in the workspace; also returns the report.
fn sandboxed(script: &str) -> (Probe, ProtectionReport) {
    let prepared = LinuxSandbox::default()
        .prepare(request(tmp_policy(), &["bash", "-c", script], &ws()))
        .expect("prepare");
    (run(&prepared), prepared.report)
}

/// The detail of the report's `read_only_subpaths` line.
fn subpaths(report: &ProtectionReport) -> String {
    report.protections.iter().find(|p| p.name == "read_only_subpaths").expect("listed").detail.clone()
}

/// A later command writes into the workspace, its `src` and `/tmp`; all must succeed.
const LATER_WRITES: &str =
    "echo a > /tmp/ws/f && echo b > /tmp/g && echo c > /tmp/ws/src/h && mkdir /tmp/ws/d";

#[test]
fn planted_links_protect_only_themselves() {
    with_private_tmp("planted::planted_links_protect_only_themselves", || {
        for (plant, entry) in [
            ("ln -s /tmp/ws /tmp/.git", "/tmp/.git"),
            ("ln -s /tmp /tmp/.uexec", "/tmp/.uexec"),
            ("ln -s /tmp/ws /tmp/ws/.uexec", "/tmp/ws/.uexec"),
            ("ln -s /tmp /tmp/ws/.git", "/tmp/ws/.git"),
            ("ln -s / /tmp/.git", "/tmp/.git"),
            ("ln -s src /tmp/ws/.git", "/tmp/ws/.git"),
            ("ln -s /tmp/ws/src /tmp/.uexec", "/tmp/.uexec"),
            ("ln -s /no/such/dir /tmp/ws/.git", "/tmp/ws/.git"),
            ("ln -s /proc/self/cwd /tmp/.git", "/tmp/.git"),
        ] {
            reset();
            let (planted, _) = sandboxed(plant);
            assert!(planted.ok(), "{plant}: {planted:?}");
            let (later, report) = sandboxed(LATER_WRITES);
            assert!(later.ok(), "after `{plant}` a later command cannot write: {later:?}\n{report}");
            let detail = subpaths(&report);
            assert!(detail.contains(&format!("{entry}: a symlink to")), "{plant}: {detail}");
            // The twin: the link itself stays protected (a mount point in the sandbox), nothing is removed.
            let (remove, _) = sandboxed(&format!("rm -f {entry}"));
            assert!(!remove.ok(), "{plant}: the link could be removed: {remove:?}");
            assert!(std::fs::symlink_metadata(entry).is_ok_and(|m| m.file_type().is_symlink()), "{plant}");
        }
    });
}

#[test]
fn planted_gitdir_files_protect_only_themselves() {
    with_private_tmp("planted::planted_gitdir_files_protect_only_themselves", || {
        for (plant, why) in [
            ("printf 'gitdir: /tmp/ws\\n' > /tmp/.git", "is the writable root /tmp/ws"),
            ("printf 'gitdir: ws\\n' > /tmp/.git", "is the writable root /tmp/ws"),
            ("printf 'gitdir:/tmp' > /tmp/ws/.git", "is the writable root /tmp"),
            ("printf 'gitdir: ..\\n' > /tmp/ws/.git", "is the writable root /tmp"),
            ("printf 'gitdir: ../..\\n' > /tmp/ws/.git", "contains the writable root"),
            ("printf 'gitdir: /\\n' > /tmp/.git", "contains the writable root"),
            ("printf 'gitdir: .\\n' > /tmp/ws/.git", "is the writable root /tmp/ws"),
            // A git-looking directory of the workspace, named by /tmp's .git: not /tmp's own.
            (
                "echo ref > /tmp/ws/src/HEAD && printf 'gitdir: /tmp/ws/src\\n' > /tmp/.git",
                "not in /tmp where",
            ),
            // A directory of the workspace that is no git directory.
            ("printf 'gitdir: src\\n' > /tmp/ws/.git", "not a git directory"),
            // A directory of /tmp outside the workspace, named by the workspace's .git.
            (
                "mkdir /tmp/x && echo ref > /tmp/x/HEAD && printf 'gitdir: /tmp/x\\n' > .git",
                "not in /tmp/ws where",
            ),
            ("ln -s /tmp /tmp/ws/link && printf 'gitdir: link\\n' > .git", "goes through a symlink"),
            ("ln -s / /tmp/ws/link && printf 'gitdir: link/tmp\\n' > .git", "goes through a symlink"),
            ("printf 'gitdir: /tmp/ws/../ws/./\\n' > /tmp/.git", "is the writable root /tmp/ws"),
            ("printf 'gitdir: /proc/self/cwd\\n' > /tmp/.git", "read-only anyway"),
            ("printf 'gitdir: /dev/shm\\n' > /tmp/.git", "is the writable root /dev/shm"),
        ] {
            reset();
            let (planted, _) = sandboxed(plant);
            assert!(planted.ok(), "{plant}: {planted:?}");
            let (later, report) = sandboxed(LATER_WRITES);
            assert!(later.ok(), "after `{plant}` a later command cannot write: {later:?}\n{report}");
            let detail = subpaths(&report);
            assert!(detail.contains(why), "{plant}: {detail}");
        }
    });
}

#[test]
fn a_genuine_gitdir_inside_its_root_stays_read_only() {
    with_private_tmp("planted::a_genuine_gitdir_inside_its_root_stays_read_only", || {
        reset();
        let gitdir = ws().join("gitdirs/wt");
        std::fs::create_dir_all(&gitdir).expect("mkdir");
        std::fs::write(gitdir.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(ws().join(".git"), "gitdir: gitdirs/wt\n").expect(".git");
        let (allowed, report) = sandboxed(&format!("{LATER_WRITES} && echo x > gitdirs/other"));
        assert!(allowed.ok(), "{allowed:?}\n{report}");
        for attack in ["echo evil > gitdirs/wt/HEAD", "touch gitdirs/wt/config", "rm .git", "mv gitdirs gone"]
        {
            let (probe, _) = sandboxed(attack);
            let text = probe.text().to_lowercase();
            assert!(!probe.ok() && (denied(&text) || text.contains("busy")), "{attack}: {probe:?}");
        }
        assert_eq!(std::fs::read_to_string(gitdir.join("HEAD")).expect("HEAD"), "ref: refs/heads/main\n");
    });
}

/// Bytes this process has read so far (`rchar` of `/proc/self/io`).
fn bytes_read() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").expect("/proc/self/io");
    io.lines().find_map(|l| l.strip_prefix("rchar: ")).expect("rchar").trim().parse().expect("number")
}

#[test]
fn hostile_git_files_neither_hang_nor_exhaust_prepare() {
    with_private_tmp("planted::hostile_git_files_neither_hang_nor_exhaust_prepare", || {
        for (plant, why) in [
            ("truncate -s 1G /tmp/.git", "more than any gitdir file"),
            (
                "{ printf 'gitdir: /tmp/ws/src\\n'; head -c 8000 /dev/zero; } > /tmp/ws/.git",
                "more than any gitdir file",
            ),
            ("ln -s /proc/kmsg /tmp/.git", "a symlink"),
            ("ln -s /dev/zero /tmp/ws/.git", "a symlink"),
            ("ln -s /proc/self/fd/0 /tmp/ws/.git", "a symlink"),
            ("mkfifo /tmp/.git", "not a regular file"),
            ("mkfifo /tmp/ws/.git", "not a regular file"),
            (
                "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/tmp/.git\")'",
                "not a regular file",
            ),
        ] {
            reset();
            let (planted, _) = sandboxed(plant);
            assert!(planted.ok(), "{plant}: {planted:?}");
            // prepare runs on its own thread so that a hang fails the test instead of blocking it.
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let before = bytes_read();
                let prepared = LinuxSandbox::default().prepare(request(
                    tmp_policy(),
                    &["bash", "-c", LATER_WRITES],
                    Path::new("/tmp/ws"),
                ));
                let _ = tx.send((prepared, bytes_read() - before));
            });
            let (prepared, read) = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("after `{plant}` prepare hangs"));
            let prepared = prepared.expect("prepare");
            assert!(read < 256 * 1024, "after `{plant}` prepare read {read} bytes");
            let detail = subpaths(&prepared.report);
            assert!(detail.contains(why), "{plant}: {detail}");
            let later = run(&prepared);
            assert!(later.ok(), "after `{plant}`: {later:?}");
            // The twin: the planted entry itself is protected.
            let entry = if plant.contains("/tmp/ws/.git") { "/tmp/ws/.git" } else { "/tmp/.git" };
            let (remove, _) = sandboxed(&format!("rm -f {entry}"));
            assert!(!remove.ok(), "{plant}: {remove:?}");
        }
    });
}
