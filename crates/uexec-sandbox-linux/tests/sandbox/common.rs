//! Test harness: prepares requests, runs the prepared spawn with a minimal `std::process::Command` spawner whose
//! `pre_exec` runs the sandbox's child hooks (after fork, like the real spawner), and fixtures.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use uexec_domain::SandboxPolicy;
use uexec_ports::process::{ChildSetup, IoMode, SpawnRequest};
use uexec_ports::{SandboxRequest, SandboxedSpawn};
use uexec_sandbox_linux::LinuxSandbox;

/// How long a probe may take on a loaded machine before it is killed.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The output of one probe.
#[derive(Debug)]
pub struct Probe {
    /// Exit code, or 128 + signal.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Probe {
    /// True when the probe exited 0.
    pub fn ok(&self) -> bool {
        self.code == 0
    }

    /// stdout and stderr together, for messages and for `contains` checks.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// The real Python interpreter (not a pyenv shim), found once.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let out = Command::new("python3")
                .args(["-c", "import sys; print(sys.executable)"])
                .output()
                .expect("python3 is required by these tests");
            assert!(out.status.success(), "python3 does not run");
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        })
        .clone()
}

/// A workspace-write policy whose only writable root is the cwd (no /tmp, no $TMPDIR), plus `extra` roots.
pub fn workspace_only(extra: Vec<PathBuf>, network: bool) -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite {
        writable_roots: extra,
        network_access: network,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    }
}

/// A spawn request for `argv` in `cwd` with this process's environment.
pub fn spawn_request(argv: &[&str], cwd: &Path) -> SpawnRequest {
    SpawnRequest {
        argv: argv.iter().map(OsString::from).collect(),
        cwd: cwd.to_path_buf(),
        env: std::env::vars_os().collect(),
        mode: IoMode::Pipes,
        setup: Vec::new(),
        pid_scope: Default::default(),
    }
}

/// A sandbox request (fail-closed: no degradation accepted).
pub fn request(policy: SandboxPolicy, argv: &[&str], cwd: &Path) -> SandboxRequest {
    SandboxRequest {
        spawn: spawn_request(argv, cwd),
        workspace: cwd.to_path_buf(),
        policy,
        tmpdir: None,
        allow_degraded: false,
    }
}

/// Prepare `argv` under `policy` with the real kernel support.
pub fn prepare(policy: SandboxPolicy, argv: &[&str], cwd: &Path) -> SandboxedSpawn {
    use uexec_ports::Sandbox;
    LinuxSandbox::default()
        .prepare(request(policy, argv, cwd))
        .expect("this machine enforces every protection")
}

/// Run `bash -c script` under `policy` in `cwd`.
pub fn bash(policy: SandboxPolicy, cwd: &Path, script: &str) -> Probe {
    run(&prepare(policy, &["bash", "-c", script], cwd))
}

/// Run `python3 -c code` under `policy` in `cwd`.
pub fn py(policy: SandboxPolicy, cwd: &Path, code: &str) -> Probe {
    let python = python();
    let python = python.to_str().expect("utf-8 path");
    run(&prepare(policy, &[python, "-c", code], cwd))
}

/// Run `python3 -c code` without any sandbox (the twin that shows the probe can succeed).
pub fn py_unsandboxed(cwd: &Path, code: &str) -> Probe {
    let python = python();
    let python = python.to_str().expect("utf-8 path");
    run_request(&spawn_request(&[python, "-c", code], cwd), &[])
}

/// Run a prepared spawn.
pub fn run(prepared: &SandboxedSpawn) -> Probe {
    run_request(&prepared.spawn, &[])
}

/// Something a test spawner does in the child before or after the sandbox hooks (become a session leader,
/// drop to another uid, ...).
pub type ChildStep = fn() -> std::io::Result<()>;

/// Run `spawn` with its hooks, then `after` in the child, with piped output and a timeout.
pub fn run_request(spawn: &SpawnRequest, after: &[ChildStep]) -> Probe {
    let mut command = command(spawn, &[], after);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = command.spawn().unwrap_or_else(|e| panic!("spawn {:?} failed: {e}", spawn.argv));
    let Some((status, stdout, stderr)) = finish(child, PROBE_TIMEOUT) else {
        panic!("probe {:?} did not finish within {PROBE_TIMEOUT:?}", spawn.argv);
    };
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Probe { code, stdout, stderr }
}

/// Wait at most `limit` for `child` (stdout and stderr piped), reading both streams meanwhile: its status and
/// output, or `None` (the child killed and reaped) when it did not finish in time.
pub fn finish(
    mut child: std::process::Child,
    limit: Duration,
) -> Option<(std::process::ExitStatus, String, String)> {
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Some((status, out_reader.join().expect("reader"), err_reader.join().expect("reader")))
}

/// A `Command` for `spawn` whose `pre_exec` runs `before`, the sandbox hooks, then `after`.
pub fn command(spawn: &SpawnRequest, before: &[ChildStep], after: &[ChildStep]) -> Command {
    let mut command = Command::new(&spawn.argv[0]);
    command.args(&spawn.argv[1..]).current_dir(&spawn.cwd).env_clear().envs(spawn.env.iter().cloned());
    let hooks: Vec<Arc<dyn ChildSetup>> = spawn.setup.clone();
    let before = before.to_vec();
    let after = after.to_vec();
    // SAFETY: the closure runs in the forked child before exec; the hooks only make raw system calls on data
    // prepared in the parent (their contract), and the steps are async-signal-safe libc calls.
    unsafe {
        command.pre_exec(move || {
            for step in &before {
                step()?;
            }
            for hook in &hooks {
                hook.run_in_child().map_err(|failure| std::io::Error::from_raw_os_error(failure.errno))?;
            }
            for step in &after {
                step()?;
            }
            Ok(())
        });
    }
    command
}

/// A scratch area: `base/ws` (the cwd, the writable root) and `base/outside` (not writable), both with a file.
pub struct Scratch {
    /// Keeps the directory alive.
    _dir: tempfile::TempDir,
    /// Canonical base.
    pub base: PathBuf,
    /// The workspace (writable root).
    pub ws: PathBuf,
    /// A directory outside every writable root.
    pub outside: PathBuf,
}

impl Scratch {
    /// Create it.
    pub fn new() -> Scratch {
        let dir = tempfile::Builder::new().prefix("uexec-sbx-").tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        let ws = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(&ws).expect("ws");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(ws.join("inside.txt"), "inside\n").expect("file");
        std::fs::write(outside.join("secret.txt"), "original\n").expect("file");
        Scratch { _dir: dir, base, ws, outside }
    }

    /// The content of `path`, or "<missing>".
    pub fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|_| "<missing>".into())
    }
}

/// True when `text` contains one of the denial messages the heuristic recognises.
pub fn denied(text: &str) -> bool {
    let lower = text.to_lowercase();
    ["permission denied", "operation not permitted", "read-only file system"]
        .iter()
        .any(|m| lower.contains(m))
}
