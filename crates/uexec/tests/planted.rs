//! `uexec run` after a sandboxed command planted a `.git` or `.uexec`: the next
//! command still writes to the workspace and to `/tmp`, finishes promptly and without reading a planted file
//! whole, and cannot remove or rewrite the planted entry (it protects only itself).
//!
//! Each test re-runs itself (this test binary, filtered to the one test) under `unshare -m` in a private mount
//! namespace whose `/tmp` is a fresh tmpfs, so the commands plant in `/tmp` exactly as an attacker would without
//! touching the machine's real `/tmp`. Inside, every command goes through the `uexec` binary and its sandbox.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// Set (to the test's name) in the copy of the test binary that runs inside the private namespace.
const PRIVATE_TMP_ENV: &str = "UEXEC_TEST_PLANTED_PRIVATE_TMP";

/// The tmpfs source name that marks the private `/tmp`.
const TMPFS_NAME: &str = "uexec-planted-tmp";

/// How long one `uexec run` may take before it counts as a hang (generous: the machine is shared).
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The most memory (max RSS, KiB) `uexec run -- touch ...` may use: its ordinary size is a few MiB, and reading
/// a planted 1 GiB `.git` whole would need 1 GiB.
const MAX_RSS_KIB: u64 = 256 * 1024;

/// Run `body` in a copy of this test binary inside a private mount namespace with its own tmpfs on `/tmp`;
/// the outer run asserts the inner one ran exactly `test` and passed.
fn with_private_tmp(test: &str, body: impl FnOnce()) {
    if std::env::var(PRIVATE_TMP_ENV).as_deref() == Ok(test) {
        assert!(is_private_tmpfs(), "/tmp is not the private tmpfs");
        body();
        return;
    }
    let script = format!(
        "mount -t tmpfs -o mode=1777,size=2g,nosuid,nodev {TMPFS_NAME} /tmp && \
         exec \"$@\""
    );
    let mut child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
        .arg(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(PRIVATE_TMP_ENV, test)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("unshare -m");
    let (out, err, status) = common::collect_output(&mut child, Duration::from_secs(600));
    let status =
        status.unwrap_or_else(|| panic!("{test} in a private /tmp did not finish (a hang):\n{out}\n{err}"));
    assert!(status.success() && out.contains("1 passed"), "{test} in a private /tmp failed:\n{out}\n{err}");
}

/// True when `/tmp` is the tmpfs [`with_private_tmp`] mounted.
fn is_private_tmpfs() -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .is_ok_and(|mounts| mounts.lines().any(|l| l.starts_with(&format!("{TMPFS_NAME} /tmp tmpfs"))))
}

/// The workspace.
fn ws() -> PathBuf {
    PathBuf::from("/tmp/ws")
}

/// What `uexec run` did.
#[derive(Debug)]
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// The maximum resident set size of `uexec` (and the command), in KiB, as GNU time measured it.
    max_rss_kib: u64,
}

/// `uexec run -- bash -c <script>` in the workspace with the default policy (workspace-write, `/tmp` writable),
/// under `/usr/bin/time`; fails the test when it does not finish within [`RUN_TIMEOUT`].
fn uexec_run(script: &str) -> Run {
    let rss_file = PathBuf::from("/tmp/uexec-run-rss");
    let _ = std::fs::remove_file(&rss_file);
    let mut child = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&rss_file)
        .args(["-f", "%M"])
        .arg(env!("CARGO_BIN_EXE_uexec"))
        .args(["run", "--", "bash", "-c", script])
        .current_dir(ws())
        .env("SHELL", "/bin/bash")
        .env("HOME", "/tmp/home")
        .env("XDG_CONFIG_HOME", "/tmp/home/.no-config")
        .env_remove("RUST_LOG")
        .env_remove("TMPDIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn uexec run");
    let (stdout, stderr, status) = common::collect_output(&mut child, RUN_TIMEOUT);
    let status = status.unwrap_or_else(|| {
        panic!("`uexec run -- bash -c {script:?}` did not finish within {RUN_TIMEOUT:?} (a hang):\n{stdout}\n{stderr}")
    });
    let rss = std::fs::read_to_string(&rss_file).unwrap_or_default();
    let max_rss_kib = rss
        .lines()
        .filter_map(|line| line.trim().parse::<u64>().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no max RSS from /usr/bin/time: {rss:?}"));
    Run { status, stdout, stderr, max_rss_kib }
}

/// A fresh `/tmp/ws/src` and `/tmp/home`.
fn setup() {
    std::fs::create_dir_all(ws().join("src")).expect("mkdir ws");
    std::fs::create_dir_all("/tmp/home/.no-config").expect("mkdir home");
}

/// What an entry is, to see that a sandboxed command could not change it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    Symlink(PathBuf),
    File { size: u64, content_head: Vec<u8> },
    Fifo,
}

fn shape(entry: &Path) -> Shape {
    let meta = std::fs::symlink_metadata(entry).unwrap_or_else(|e| panic!("{}: {e}", entry.display()));
    let kind = meta.file_type();
    if kind.is_symlink() {
        Shape::Symlink(std::fs::read_link(entry).expect("readlink"))
    } else if kind.is_fifo() {
        Shape::Fifo
    } else {
        assert!(kind.is_file(), "{}: unexpected {kind:?}", entry.display());
        let mut head = Vec::new();
        std::fs::File::open(entry).expect("open").take(64).read_to_end(&mut head).expect("read");
        Shape::File { size: meta.size(), content_head: head }
    }
}

/// The scenario: one `uexec run` plants with `plant`, leaving `entry`; the next `uexec run -- touch ws/ok /tmp/ok`
/// (in the workspace) succeeds promptly, writes both files and stays small; and a sandboxed command can neither
/// remove, rename nor rewrite `entry`.
fn planted(plant: &str, entry: &str) {
    setup();
    let entry = Path::new(entry);
    let run = uexec_run(plant);
    assert!(run.status.success(), "planting failed: {run:?}");
    let planted = shape(entry);

    let run = uexec_run("touch /tmp/ws/ok /tmp/ws/src/ok /tmp/ok && echo touched");
    assert!(
        run.status.success() && run.stdout.contains("touched"),
        "after {plant:?}: {:?}\n{}\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
    for file in ["/tmp/ws/ok", "/tmp/ws/src/ok", "/tmp/ok"] {
        assert!(Path::new(file).is_file(), "after {plant:?}: {file} was not written");
    }
    assert!(
        run.max_rss_kib < MAX_RSS_KIB,
        "after {plant:?}: uexec run used {} KiB (more than {MAX_RSS_KIB})",
        run.max_rss_kib
    );

    // The planted entry protects itself: removing, renaming and rewriting it fail (the allowed twin: a file
    // beside it is created, renamed and removed by the same command).
    let e = entry.display();
    let script = format!(
        "d=$(dirname {e}); touch \"$d/beside\" && mv \"$d/beside\" \"$d/beside2\" && rm \"$d/beside2\" && \
         echo beside-ok; rm -f {e} && echo removed; mv {e} {e}.moved && echo renamed; \
         if [ -f {e} ] && [ ! -L {e} ]; then printf x >> {e} && echo appended; : > {e} && echo truncated; fi; \
         true"
    );
    let run = uexec_run(&script);
    assert!(run.status.success(), "{run:?}");
    assert!(run.stdout.contains("beside-ok"), "the directory of {e} is not writable: {run:?}");
    for done in ["removed", "renamed", "appended", "truncated"] {
        assert!(!run.stdout.contains(done), "{e} was {done} from inside the sandbox: {run:?}");
    }
    assert_eq!(shape(entry), planted, "{e} changed");
    assert!(!Path::new(&format!("{e}.moved")).exists());
}

#[test]
fn a_git_symlink_to_the_workspace_freezes_nothing() {
    with_private_tmp("a_git_symlink_to_the_workspace_freezes_nothing", || {
        planted("ln -s /tmp/ws /tmp/.git", "/tmp/.git");
    });
}

#[test]
fn a_git_file_naming_the_workspace_freezes_nothing() {
    with_private_tmp("a_git_file_naming_the_workspace_freezes_nothing", || {
        // With a HEAD, so that the workspace looks like a git directory: the rule refuses it, not the lookup.
        planted(
            "printf 'ref: refs/heads/main\\n' > /tmp/ws/HEAD && printf 'gitdir: /tmp/ws\\n' > /tmp/.git",
            "/tmp/.git",
        );
    });
}

#[test]
fn a_git_file_naming_its_own_root_by_dots_freezes_nothing() {
    with_private_tmp("a_git_file_naming_its_own_root_by_dots_freezes_nothing", || {
        planted(
            "printf 'ref: refs/heads/main\\n' > /tmp/ws/HEAD && printf 'gitdir: ../ws\\n' > /tmp/ws/.git",
            "/tmp/ws/.git",
        );
    });
}

#[test]
fn a_git_file_naming_an_ancestor_freezes_nothing() {
    with_private_tmp("a_git_file_naming_an_ancestor_freezes_nothing", || {
        planted(
            "printf 'ref: refs/heads/main\\n' > /tmp/HEAD && printf 'gitdir: /tmp\\n' > /tmp/ws/.git",
            "/tmp/ws/.git",
        );
    });
}

#[test]
fn a_uexec_symlink_to_tmp_freezes_nothing() {
    with_private_tmp("a_uexec_symlink_to_tmp_freezes_nothing", || {
        planted("ln -s /tmp /tmp/.uexec", "/tmp/.uexec");
    });
}

#[test]
fn a_uexec_symlink_in_the_workspace_to_itself_freezes_nothing() {
    with_private_tmp("a_uexec_symlink_in_the_workspace_to_itself_freezes_nothing", || {
        planted("ln -s /tmp/ws /tmp/ws/.uexec", "/tmp/ws/.uexec");
    });
}

#[test]
fn a_huge_git_file_of_zeros_is_not_read() {
    with_private_tmp("a_huge_git_file_of_zeros_is_not_read", || {
        planted("truncate -s 1G /tmp/.git", "/tmp/.git");
    });
}

#[test]
fn a_huge_git_file_is_not_read() {
    with_private_tmp("a_huge_git_file_is_not_read", || {
        planted("printf 'gitdir: /tmp/ws\\n' > /tmp/.git && truncate -s 1G /tmp/.git", "/tmp/.git");
    });
}

#[test]
fn a_git_symlink_to_kmsg_does_not_hang() {
    with_private_tmp("a_git_symlink_to_kmsg_does_not_hang", || {
        planted("ln -s /proc/kmsg /tmp/.git", "/tmp/.git");
    });
}

#[test]
fn a_git_fifo_does_not_hang() {
    with_private_tmp("a_git_fifo_does_not_hang", || {
        planted("mkfifo /tmp/.git", "/tmp/.git");
    });
}
