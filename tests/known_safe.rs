//! Known safe against planted configuration, end to end: real git, real processes (`uexec_pty::PtySpawner`),
//! the real Linux sandbox, the engine under `untrusted`.
//!
//! Each program-running git setting is planted in a repository that sandboxed commands can write; the known-safe
//! git command that would run it must need a person's approval (a denying approver is asked, with
//! `ApprovalKind::Run`), and the planted program must not run (its marker file stays absent). Each has an
//! allowed twin: approved, or in a repository out of the sandbox's reach, the same command does run the program
//! (the marker appears), so the settings are real and the tests can fail.
//!
//! The planted `/tmp/.git` tests run in a child process in a private mount namespace with its own `/tmp` (a
//! tmpfs): the test re-executes its own binary under `unshare --mount`, and never touches the machine's `/tmp`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use uexec_domain::limits::EARLY_EXIT_GRACE_MS;
use uexec_domain::{ApprovalPolicy, ReviewDecision, SandboxPolicy};
use uexec_engine::{Engine, EngineConfig, EngineDeps, ExecCommandRequest, ExecError, ExecResponse};
use uexec_ports::{ApprovalError, ApprovalKind, ApprovalRequest, Approver, EventSink, ExecEvent};
use uexec_pty::PtySpawner;
use uexec_sandbox_linux::LinuxSandbox;

/// An approver that records every question and answers `decision` (`None`: nobody can be asked).
struct Asked {
    decision: Option<ReviewDecision>,
    requests: Mutex<Vec<ApprovalRequest>>,
}

impl Asked {
    fn new(decision: Option<ReviewDecision>) -> Arc<Self> {
        Arc::new(Asked { decision, requests: Mutex::new(Vec::new()) })
    }

    fn kinds(&self) -> Vec<ApprovalKind> {
        self.requests.lock().unwrap().iter().map(|r| r.kind).collect()
    }
}

#[async_trait]
impl Approver for Asked {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
        self.requests.lock().unwrap().push(request);
        self.decision.ok_or_else(|| ApprovalError::Unavailable("nobody to ask in this test".into()))
    }
}

struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: ExecEvent) {}
}

/// `workspace-write` with only the workspace writable (no `/tmp`, no `$TMPDIR`): the other temporary
/// directories of a test are out of the sandbox's reach.
fn workspace_only() -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    }
}

/// An engine under `untrusted` whose workspace is `workspace`, with a clean environment plus `env`.
fn untrusted_engine(
    workspace: &Path,
    sandbox: SandboxPolicy,
    env: &[(&str, &str)],
    approver: Arc<Asked>,
) -> Engine {
    untrusted_engine_with_grace(workspace, sandbox, env, approver, EARLY_EXIT_GRACE_MS)
}

/// The early-exit grace that covers [`run_in`]'s whole yield window: every run that ends within it is judged
/// for a sandbox denial, however slow the machine.
const WHOLE_WINDOW_GRACE_MS: u64 = 10_000;

/// [`untrusted_engine`] with an early-exit grace of `grace_ms`.
fn untrusted_engine_with_grace(
    workspace: &Path,
    sandbox: SandboxPolicy,
    env: &[(&str, &str)],
    approver: Arc<Asked>,
    grace_ms: u64,
) -> Engine {
    let mut config = EngineConfig::new(workspace.to_path_buf());
    config.limits.early_exit_grace_ms = grace_ms;
    config.approval_policy = ApprovalPolicy::Untrusted;
    config.sandbox_policy = sandbox;
    config.report_protections = false;
    let mut base_env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), "/nonexistent-home".into()),
        ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
    ];
    for (name, value) in env {
        base_env.retain(|(n, _)| n != name);
        base_env.push(((*name).into(), (*value).into()));
    }
    config.base_env = base_env;
    Engine::new(
        config,
        EngineDeps {
            spawner: Arc::new(PtySpawner::default()),
            sandbox: Arc::new(LinuxSandbox::default()),
            approver,
            events: Arc::new(NoEvents),
        },
    )
}

async fn run_in(engine: &Engine, cwd: &Path, cmd: &str) -> Result<ExecResponse, ExecError> {
    engine
        .exec_command(ExecCommandRequest {
            cmd: cmd.to_owned(),
            workdir: Some(cwd.to_path_buf()),
            yield_time_ms: Some(10_000),
            login: Some(false),
            ..Default::default()
        })
        .await
}

/// Run git (outside any sandbox: this is the test setting things up, as a person would).
fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", "/nonexistent-home")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?} in {}: {output:?}", dir.display());
}

/// A repository at `dir` with one committed, then modified, file `f.txt` whose attributes select the diff
/// driver `tc` and the filter `fl`.
fn make_repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    std::fs::write(dir.join(".gitattributes"), "*.txt diff=tc filter=fl\n").unwrap();
    std::fs::write(dir.join("f.txt"), "one\n").unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "init"]);
    std::fs::write(dir.join("f.txt"), "one\ntwo\n").unwrap();
}

/// A program that records that it ran in `marker`, then behaves as a filter (copies its file argument or its
/// input to its output).
fn make_program(path: &Path, marker: &Path) {
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\necho \"ran $0 $*\" >> '{}'\nif [ -f \"$1\" ]; then cat \"$1\"; else cat; fi\n",
            marker.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A fresh directory outside every place a sandboxed command may ever write (`/var/tmp`: not `/tmp`, which
/// counts whatever today's policy, `uexec_domain::trust`).
fn canonical_tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("uexec-known-safe-").tempdir_in("/var/tmp").unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

/// One program-running setting and the known-safe command that runs it.
struct Setting {
    key: &'static str,
    command: &'static str,
}

const SETTINGS: [Setting; 6] = [
    Setting { key: "core.fsmonitor", command: "git status" },
    Setting { key: "diff.external", command: "git diff" },
    Setting { key: "diff.tc.textconv", command: "git diff" },
    Setting { key: "filter.fl.clean", command: "git diff" },
    Setting { key: "filter.fl.smudge", command: "git cat-file --filters HEAD:f.txt" },
    // `include.path` names a file whose own settings run the program.
    Setting { key: "include.path", command: "git status" },
];

/// Plant `setting` in the repository at `repo` so that it runs `program`.
fn plant(repo: &Path, setting: &Setting, program: &Path) {
    if setting.key == "include.path" {
        let included = repo.join(".git/included");
        std::fs::write(&included, format!("[core]\n\tfsmonitor = {}\n", program.display())).unwrap();
        git(repo, &["config", "include.path", included.to_str().unwrap()]);
    } else {
        git(repo, &["config", setting.key, program.to_str().unwrap()]);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_program_running_git_setting_in_a_writable_repository_needs_approval_and_does_not_run() {
    for setting in &SETTINGS {
        let (_ws_guard, ws) = canonical_tempdir();
        let repo = ws.join("repo");
        make_repo(&repo);
        let marker = ws.join("marker");
        let program = ws.join("planted.sh");
        make_program(&program, &marker);
        plant(&repo, setting, &program);
        // Git writes the blobs it hands an external diff into `$TMPDIR` (else `/tmp`, read-only to these
        // sandboxed commands): a temporary directory in the workspace, the same for the probes and the twin.
        let tmp = ws.join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let env = [("TMPDIR", tmp.to_str().unwrap())];

        // Denied: asked once (a run question), nothing ran.
        let asked = Asked::new(Some(ReviewDecision::Denied));
        let engine = untrusted_engine(&ws, workspace_only(), &env, Arc::clone(&asked));
        let error = run_in(&engine, &repo, setting.command).await.unwrap_err();
        assert_eq!(error, ExecError::Rejected, "{}", setting.key);
        assert_eq!(asked.kinds(), vec![ApprovalKind::Run], "{}", setting.key);
        assert!(!marker.exists(), "{}: the planted program ran without approval", setting.key);

        // Nobody to ask: refused, nothing ran.
        let nobody = Asked::new(None);
        let engine = untrusted_engine(&ws, workspace_only(), &env, Arc::clone(&nobody));
        let error = run_in(&engine, &repo, setting.command).await.unwrap_err();
        assert!(matches!(error, ExecError::ApprovalUnavailable(_)), "{}: {error:?}", setting.key);
        assert!(!marker.exists(), "{}", setting.key);

        // The allowed twin: a person approves, and the setting does run its program (inside the sandbox, which
        // lets it write the workspace).
        let approve = Asked::new(Some(ReviewDecision::Approved));
        let engine = untrusted_engine(&ws, workspace_only(), &env, Arc::clone(&approve));
        let ran = run_in(&engine, &repo, setting.command).await.unwrap();
        assert_eq!(ran.exit_code, Some(0), "{}: {}", setting.key, ran.output);
        assert!(marker.exists(), "{}: the setting should run its program once approved", setting.key);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_in_a_repository_out_of_the_sandboxs_reach_stays_known_safe() {
    // The person's own repository (not writable by sandboxed commands) with a program-running setting the
    // person chose: known safe, it runs without asking (the marker, in the workspace, says it ran).
    let (_ws_guard, ws) = canonical_tempdir();
    let (_repo_guard, outside) = canonical_tempdir();
    let repo = outside.join("repo");
    make_repo(&repo);
    let marker = ws.join("marker");
    let program = outside.join("fsmonitor.sh");
    make_program(&program, &marker);
    git(&repo, &["config", "core.fsmonitor", program.to_str().unwrap()]);
    let nobody = Asked::new(None);
    let engine = untrusted_engine(&ws, workspace_only(), &[], Arc::clone(&nobody));
    let response = run_in(&engine, &repo, "git status --short").await.unwrap();
    assert_eq!(response.exit_code, Some(0), "{response:?}");
    assert!(response.output.contains("f.txt"), "{response:?}");
    assert!(nobody.kinds().is_empty());
    assert!(marker.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_repositories_found_by_discovery_links_home_git_dir_and_path_need_approval() {
    let (_ws_guard, ws) = canonical_tempdir();
    let (_out_guard, outside) = canonical_tempdir();
    let marker = ws.join("marker");
    let program = ws.join("planted.sh");
    make_program(&program, &marker);
    // A planted repository in the workspace.
    let planted = ws.join("planted");
    make_repo(&planted);
    git(&planted, &["config", "core.fsmonitor", program.to_str().unwrap()]);
    // A trusted repository outside, with no settings.
    let trusted = outside.join("trusted");
    make_repo(&trusted);

    struct Case {
        name: &'static str,
        cwd: PathBuf,
        env: Vec<(&'static str, String)>,
        cmd: String,
    }
    let mut cases = Vec::new();

    // A nested `sub/.git` below the working directory's repository: cwd in the workspace.
    let nested = ws.join("sub");
    make_repo(&nested);
    git(&nested, &["config", "core.fsmonitor", program.to_str().unwrap()]);
    cases.push(Case { name: "nested sub/.git", cwd: nested.clone(), env: vec![], cmd: "git status".into() });
    // A directory with no repository of its own inside the workspace: discovery finds the planted one above.
    std::fs::create_dir_all(planted.join("deep/er")).unwrap();
    cases.push(Case {
        name: "discovered upward",
        cwd: planted.join("deep/er"),
        env: vec![],
        cmd: "git status".into(),
    });
    // A `.git` symlink in a directory outside the sandbox's reach, leading into the workspace.
    let linked = outside.join("linked");
    std::fs::create_dir(&linked).unwrap();
    std::os::unix::fs::symlink(planted.join(".git"), linked.join(".git")).unwrap();
    cases.push(Case { name: ".git symlink", cwd: linked.clone(), env: vec![], cmd: "git status".into() });
    // A `gitdir:` file outside pointing into the workspace.
    let gitfile = outside.join("gitfile");
    std::fs::create_dir(&gitfile).unwrap();
    std::fs::write(gitfile.join(".git"), format!("gitdir: {}\n", planted.join(".git").display())).unwrap();
    cases.push(Case { name: "gitdir file", cwd: gitfile.clone(), env: vec![], cmd: "git status".into() });
    // The trusted repository, but a `cd` into the planted one first.
    cases.push(Case {
        name: "cd first",
        cwd: trusted.clone(),
        env: vec![],
        cmd: format!("cd {} && git status", planted.display()),
    });
    // HOME (and with it ~/.gitconfig) in the workspace.
    let home = ws.join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join(".gitconfig"), format!("[core]\n\tfsmonitor = {}\n", program.display()))
        .unwrap();
    cases.push(Case {
        name: "HOME",
        cwd: trusted.clone(),
        env: vec![("HOME", home.display().to_string())],
        cmd: "git status".into(),
    });
    // XDG_CONFIG_HOME in the workspace.
    std::fs::create_dir_all(home.join("xdg/git")).unwrap();
    std::fs::write(home.join("xdg/git/config"), format!("[core]\n\tfsmonitor = {}\n", program.display()))
        .unwrap();
    cases.push(Case {
        name: "XDG_CONFIG_HOME",
        cwd: trusted.clone(),
        env: vec![("XDG_CONFIG_HOME", home.join("xdg").display().to_string())],
        cmd: "git status".into(),
    });
    // GIT_DIR naming the planted repository.
    cases.push(Case {
        name: "GIT_DIR",
        cwd: trusted.clone(),
        env: vec![("GIT_DIR", planted.join(".git").display().to_string())],
        cmd: "git status".into(),
    });
    // A PATH directory in the workspace holding a planted `ls`.
    let bin = ws.join("bin");
    std::fs::create_dir(&bin).unwrap();
    make_program(&bin.join("ls"), &marker);
    cases.push(Case {
        name: "PATH",
        cwd: trusted.clone(),
        env: vec![("PATH", format!("{}:/usr/bin:/bin", bin.display()))],
        cmd: "ls".into(),
    });

    for case in &cases {
        let asked = Asked::new(Some(ReviewDecision::Denied));
        let env: Vec<(&str, &str)> = case.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let engine = untrusted_engine(&ws, workspace_only(), &env, Arc::clone(&asked));
        let result = run_in(&engine, &case.cwd, &case.cmd).await;
        assert_eq!(result.unwrap_err(), ExecError::Rejected, "{}", case.name);
        assert_eq!(asked.kinds(), vec![ApprovalKind::Run], "{}", case.name);
        assert!(!marker.exists(), "{}: the planted program ran", case.name);
    }

    // Twins: the trusted repository with the default HOME and PATH runs git and ls without asking.
    for cmd in ["git status", "ls"] {
        let nobody = Asked::new(None);
        let engine = untrusted_engine(&ws, workspace_only(), &[], Arc::clone(&nobody));
        let response = run_in(&engine, &trusted, cmd).await.unwrap();
        assert_eq!(response.exit_code, Some(0), "{cmd}: {response:?}");
        assert!(nobody.kinds().is_empty(), "{cmd}");
    }
    // And the planted HOME's config really runs its program when a person approves.
    let approve = Asked::new(Some(ReviewDecision::Approved));
    let engine =
        untrusted_engine(&ws, workspace_only(), &[("HOME", home.to_str().unwrap())], Arc::clone(&approve));
    run_in(&engine, &trusted, "git status").await.unwrap();
    assert!(marker.exists());
}

/// Over-blocking regression: a known-safe command the sandbox denies, under `untrusted` with nobody to ask,
/// returns its output and exit code with a note, instead of a tool error that drops the output; it is not run
/// outside the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_denial_with_nobody_to_ask_returns_the_output_and_a_note() {
    let (_ws_guard, ws) = canonical_tempdir();
    // A known-safe read that only the sandbox denies: a process's kernel stack needs CAP_SYS_ADMIN, which the
    // sandbox drops (this test runs as root, outside it).
    let read_my_environ = "cat /proc/self/stack";
    // Every run that ends within its window is judged (the grace is the whole window): the run is judged a
    // denial, the retry is asked about, and nobody answers.
    let nobody = Asked::new(None);
    let engine =
        untrusted_engine_with_grace(&ws, workspace_only(), &[], Arc::clone(&nobody), WHOLE_WINDOW_GRACE_MS);
    let response = run_in(&engine, &ws, read_my_environ).await.unwrap();
    assert_eq!(response.exit_code, Some(1), "{response:?}");
    assert!(response.output.contains("Permission denied"), "{response:?}");
    assert_eq!(nobody.kinds(), vec![ApprovalKind::RetryWithoutSandbox], "{response:?}");
    // What was refused, in the model's few words (the path from the output, the rule from the plan), apart
    // from why nothing was retried.
    let refused = response.refused.clone().unwrap();
    assert_eq!(refused, "hidden: /proc/self/stack [from output]", "{response:?}");
    let note = response.warning.clone().unwrap();
    assert!(note.contains("exit code 1") && note.contains("not run again without the sandbox"), "{note}");
    let request = nobody.requests.lock().unwrap()[0].clone();
    assert!(request.reason.unwrap().contains("FULL ACCESS"));
    let denial = request.denial.unwrap();
    assert!(denial.describe().contains("the sandbox refused: access to /proc/self/stack"), "{denial:?}");
    // Its twin: a person approves the retry, which then runs outside the sandbox and reads it.
    let approve = Asked::new(Some(ReviewDecision::Approved));
    let engine =
        untrusted_engine_with_grace(&ws, workspace_only(), &[], Arc::clone(&approve), WHOLE_WINDOW_GRACE_MS);
    let response = run_in(&engine, &ws, read_my_environ).await.unwrap();
    assert_eq!(response.exit_code, Some(0), "{response:?}");
    assert_eq!(approve.kinds(), vec![ApprovalKind::RetryWithoutSandbox]);
}

// ---------------------------------------------------------------------------------------------------------------
// A planted /tmp/.git, in a private mount namespace with its own /tmp.
// ---------------------------------------------------------------------------------------------------------------

/// Set in the child that runs a test body inside the private mount namespace.
const PRIVATE_TMP_CHILD: &str = "UEXEC_TEST_PRIVATE_TMP_CHILD";
/// Created by the child's shell right after mounting the private `/tmp`.
const PRIVATE_TMP_SENTINEL: &str = "/tmp/.uexec-private-tmp";

/// Runs `body` in a child process (this test binary, running only the test `name`) inside a private mount
/// namespace whose `/tmp` and `/mnt` are fresh tmpfs mounts. In the child, runs `body` directly.
fn in_private_tmp(name: &str, body: impl FnOnce()) {
    if std::env::var_os(PRIVATE_TMP_CHILD).is_some() {
        // Refuse to plant anything unless /tmp is the fresh private one.
        let entries: Vec<_> = std::fs::read_dir("/tmp").unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(entries, vec![PathBuf::from(PRIVATE_TMP_SENTINEL)], "/tmp is not the private tmpfs");
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "mount -t tmpfs uexec-test-tmp /tmp && mount -t tmpfs uexec-test-mnt /mnt && touch {PRIVATE_TMP_SENTINEL} \
         && exec \"$0\" \"$@\""
    );
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(&exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(PRIVATE_TMP_CHILD, "1")
        .env_remove("TMPDIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed: {}\n{stdout}\n{stderr}", output.status);
    // The child really ran the test (libtest's summary), not zero tests.
    assert!(stdout.contains("1 passed"), "the child ran no test:\n{stdout}\n{stderr}");
}

/// `/tmp/.git` planted three ways (a repository, a symlink to one, a `gitdir:` file): git discovers it from
/// `/tmp/ws`, which has no repository of its own. With `/tmp` writable (the default policy) git there is not
/// known safe: asked, and the planted `core.fsmonitor` does not run. Twin: with only `/mnt/ws` writable, the
/// same `/tmp/.git` (now placed by the person) is known safe from `/tmp/elsewhere`, and it does run.
#[test]
fn a_planted_tmp_git_is_not_known_safe() {
    in_private_tmp("a_planted_tmp_git_is_not_known_safe", || {
        runtime().block_on(async {
            let ws = PathBuf::from("/tmp/ws");
            let elsewhere = PathBuf::from("/tmp/elsewhere");
            let mnt_ws = PathBuf::from("/mnt/ws");
            for dir in [&ws, &elsewhere, &mnt_ws] {
                std::fs::create_dir_all(dir).unwrap();
            }
            let real = PathBuf::from("/tmp/real");
            make_repo(&real);
            for (marker_dir, layout) in [(&ws, "dir"), (&ws, "symlink"), (&ws, "gitfile")] {
                let marker = marker_dir.join("marker");
                let program = PathBuf::from("/tmp/planted.sh");
                make_program(&program, &marker);
                git(&real, &["config", "core.fsmonitor", program.to_str().unwrap()]);
                let _ = std::fs::remove_dir_all("/tmp/.git");
                let _ = std::fs::remove_file("/tmp/.git");
                match layout {
                    "dir" => {
                        Command::new("cp").args(["-a", "/tmp/real/.git", "/tmp/.git"]).status().unwrap();
                    }
                    "symlink" => std::os::unix::fs::symlink("/tmp/real/.git", "/tmp/.git").unwrap(),
                    _ => std::fs::write("/tmp/.git", "gitdir: /tmp/real/.git\n").unwrap(),
                }
                let asked = Asked::new(Some(ReviewDecision::Denied));
                let engine = untrusted_engine(&ws, SandboxPolicy::default(), &[], Arc::clone(&asked));
                let error = run_in(&engine, &ws, "git status").await.unwrap_err();
                assert_eq!(error, ExecError::Rejected, "{layout}");
                assert_eq!(asked.kinds(), vec![ApprovalKind::Run], "{layout}");
                assert!(!marker.exists(), "{layout}: the planted fsmonitor ran");
            }
            // Excluding /tmp from today's writable roots does not make it trusted: what an earlier command
            // planted there is still there (`uexec_domain::trust`).
            let _ = std::fs::remove_file("/tmp/.git");
            let _ = std::fs::remove_dir_all("/tmp/.git");
            Command::new("cp").args(["-a", "/tmp/real/.git", "/tmp/.git"]).status().unwrap();
            let marker = mnt_ws.join("marker");
            make_program(Path::new("/tmp/planted.sh"), &marker);
            let asked = Asked::new(Some(ReviewDecision::Denied));
            let engine = untrusted_engine(&mnt_ws, workspace_only(), &[], Arc::clone(&asked));
            let error = run_in(&engine, &elsewhere, "git status").await.unwrap_err();
            assert_eq!(error, ExecError::Rejected);
            assert_eq!(asked.kinds(), vec![ApprovalKind::Run]);
            assert!(!marker.exists(), "the planted fsmonitor ran");
            // The twin: a repository outside every place sandboxed commands write, discovered upward from a
            // directory below it, runs its program without asking.
            let (_guard, outside) = canonical_tempdir();
            let repo = outside.join("repo");
            make_repo(&repo);
            std::fs::create_dir_all(repo.join("deep")).unwrap();
            let program = outside.join("fsmonitor.sh");
            make_program(&program, &marker);
            git(&repo, &["config", "core.fsmonitor", program.to_str().unwrap()]);
            let nobody = Asked::new(None);
            let engine = untrusted_engine(&mnt_ws, workspace_only(), &[], Arc::clone(&nobody));
            let response = run_in(&engine, &repo.join("deep"), "git status").await.unwrap();
            assert!(nobody.kinds().is_empty(), "{response:?}");
            assert!(
                marker.exists(),
                "git should have discovered the repository and run its fsmonitor: {response:?}"
            );
        });
    });
}
