//! What uexec gives where people run it: as root, as an ordinary user (user namespaces available) and in a
//! container whose seccomp profile forbids new namespaces (emulated by `container-sim`, the `tests` package's
//! binary). The same tests run in each: `cargo xtask ci` runs this binary once as root (with the rest of the
//! suite), once as an ordinary user and once under `container-sim`, naming the environment in
//! `UEXEC_TEST_ENVIRONMENT`; each test first checks that the environment is what it is said to be, then that the
//! protection report matches what commands meet there, with an allowed probe beside every denied one.
//!
//! Root and the ordinary user get every protection (the report says so, and `.git`, the outside and the hidden
//! directories hold; the domain allowlist, the recorded lookups of the offline namespace and the copy-on-write
//! views work for both, the user's made in the sandbox's user namespace); in the container the sandbox refuses to run without `--allow-degraded-sandbox`, naming the
//! cause and the remedies, and runs with it under Landlock and seccomp with an honest note, never claiming a
//! refusal it did not make.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::fs;

use serde_json::json;

use common::{
    McpServer, Transport, Workspace, exit_code, is_error, marker_seconds, text, uexec_command, wait_gone,
    wait_present,
};

/// Where this test process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Environment {
    /// Root with `CAP_SYS_ADMIN`, no seccomp filter.
    Root,
    /// An ordinary user, no seccomp filter: user namespaces work.
    User,
    /// Under a seccomp filter that forbids new namespaces and mounts (root without `CAP_SYS_ADMIN`, or a user).
    Container,
}

/// The environment, as this process sees it; when `UEXEC_TEST_ENVIRONMENT` names one, it must agree (so a
/// run that was meant to be in a container and is not fails instead of passing as root).
fn environment() -> Environment {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let filtered = status.lines().any(|l| l.starts_with("Seccomp:") && l.trim_end().ends_with('2'));
    let root = rustix::process::geteuid().is_root();
    let seen = match (filtered, root) {
        (true, _) => Environment::Container,
        (false, true) => Environment::Root,
        (false, false) => Environment::User,
    };
    if let Ok(said) = std::env::var("UEXEC_TEST_ENVIRONMENT") {
        let expected = match said.as_str() {
            "root" => Environment::Root,
            "user" => Environment::User,
            "container" => Environment::Container,
            other => panic!("UEXEC_TEST_ENVIRONMENT={other}: expected root, user or container"),
        };
        assert_eq!(seen, expected, "UEXEC_TEST_ENVIRONMENT={said}, but this process sees {seen:?}");
    }
    seen
}

/// `uexec ARGS` in `ws`: exit code, stdout, stderr.
fn run(ws: &Workspace, args: &[&str]) -> (Option<i32>, String, String) {
    let out = uexec_command(ws, args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What the refusal of a container's sandbox says: the cause, the remedy and the setting that accepts it.
fn assert_names_cause_and_remedy(said: &str) {
    for needle in [
        "unshare(CLONE_NEWUSER|CLONE_NEWNS) failed with EPERM",
        "likely cause: this process runs under",
        "seccomp filter",
        "--security-opt seccomp=unconfined",
        "docs/deploy.md",
        "--allow-degraded-sandbox",
    ] {
        assert!(said.contains(needle), "missing {needle:?} in: {said}");
    }
}

#[test]
fn the_report_says_what_this_environment_enforces() {
    let ws = Workspace::new();
    let (code, report, stderr) = run(&ws, &["sandbox-report"]);
    assert_eq!(code, Some(0), "{stderr}");
    let line = report.lines().find(|l| l.trim_start().starts_with("mount namespace:")).unwrap_or_default();
    let owned = report
        .lines()
        .find(|l| l.trim_start().starts_with("network namespaces, overlays:"))
        .unwrap_or_default();
    match environment() {
        Environment::Root => {
            assert!(line.contains("available (CAP_SYS_ADMIN)"), "{report}");
            assert!(owned.contains("made with CAP_SYS_ADMIN"), "{report}");
        }
        Environment::User => {
            assert!(line.contains("available (unprivileged user namespace)"), "{report}");
            assert!(owned.contains("made in the sandbox's user namespace"), "{report}");
        }
        Environment::Container => {
            assert!(owned.contains("unavailable"), "{report}");
            assert!(line.contains("unavailable"), "{report}");
            assert!(line.contains("seccomp filter"), "the cause is named: {report}");
            assert!(report.contains("cannot be fully enforced here"), "{report}");
            assert!(report.contains("hidden_paths        off"), "{report}");
        }
    }
    if environment() != Environment::Container {
        assert!(report.contains("every protection of this policy is enforced here"), "{report}");
    }
    // Without a PID namespace of its own (the container) a command's `/proc` lists the host's processes, and the
    // report says so; the user's commands share their sandbox's namespace and its `/proc` (root's, outside a
    // server, get one `hidepid` procfs each).
    let scopes = report.lines().find(|l| l.trim_start().starts_with("scopes")).unwrap_or_default();
    assert_eq!(scopes.contains("/proc is the host's"), environment() == Environment::Container, "{report}");
    assert_eq!(
        scopes.contains("/proc shows only that namespace"),
        environment() == Environment::User,
        "{report}"
    );
}

/// Writes into the workspace, into `.git/config` and outside every writable root, saying which held.
fn write_probe(ws: &Workspace) -> String {
    fs::create_dir_all(ws.path().join(".git")).unwrap();
    fs::write(ws.path().join(".git/config"), "[core]\n").unwrap();
    let outside = ws.outside.path().join("planted");
    format!(
        "echo in > ok.txt && echo in-written; (echo x >> .git/config && echo git-written || echo git-refused); \
         (echo out > {} && echo out-written || echo out-refused)",
        outside.display()
    )
}

#[test]
fn uexec_run_confines_or_refuses_naming_the_remedy() {
    let ws = Workspace::new();
    let probe = write_probe(&ws);
    let (code, stdout, stderr) = run(&ws, &["run", "--", "bash", "-c", &probe]);
    if environment() == Environment::Container {
        assert_ne!(code, Some(0), "{stdout}{stderr}");
        assert_names_cause_and_remedy(&stderr);
        assert!(stderr.contains("nothing was run"), "{stderr}");
        assert!(!ws.path().join("ok.txt").exists(), "nothing ran before the refusal");

        let (code, stdout, stderr) =
            run(&ws, &["run", "--allow-degraded-sandbox", "--", "bash", "-c", &probe]);
        assert_eq!(code, Some(0), "{stdout}{stderr}");
        // Landlock still holds the outside; `.git` is writable, and the note says so.
        assert!(stdout.contains("in-written") && stdout.contains("out-refused"), "{stdout}{stderr}");
        assert!(stdout.contains("git-written"), "{stdout}");
        assert!(stderr.contains("read_only_subpaths: off"), "the degraded note: {stderr}");
        assert!(!ws.outside.path().join("planted").exists());
        return;
    }
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("in-written"), "the allowed probe: {stdout}{stderr}");
    assert!(stdout.contains("git-refused") && stdout.contains("out-refused"), "{stdout}{stderr}");
    assert_eq!(fs::read_to_string(ws.path().join(".git/config")).unwrap(), "[core]\n");
    assert!(!ws.outside.path().join("planted").exists());
}

#[test]
fn the_mcp_server_runs_a_login_shell_or_refuses_naming_the_remedy() {
    let ws = Workspace::new();
    let call = json!({ "cmd": "echo $((40 + 2))", "login": true, "yield_time_ms": 10000 });
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let r = server.call("exec_command", call.clone());
    if environment() == Environment::Container {
        assert!(is_error(&r), "{r}");
        assert_names_cause_and_remedy(&text(&r));
        drop(server);
        let mut degraded = McpServer::start_initialized(&ws, &["--allow-degraded-sandbox"], false);
        let r = degraded.call("exec_command", call);
        assert!(!is_error(&r) && exit_code(&r) == Some(0), "{r}");
        let said = text(&r);
        assert!(said.contains("\n42\n"), "{said}");
        assert!(said.contains("[uexec] Sandbox:") && said.contains("hidden_paths off"), "{said}");
        return;
    }
    assert!(!is_error(&r) && exit_code(&r) == Some(0), "{r}");
    let said = text(&r);
    assert!(said.contains("\n42\n") && !said.contains("[uexec] Sandbox:"), "nothing degraded: {said}");
}

/// `cmd` through `uexec mcp --allow-degraded-sandbox` (which accepts nothing less where nothing is degraded): the
/// response's text.
fn exec(server: &mut McpServer, cmd: &str) -> String {
    let r = server.call("exec_command", json!({ "cmd": cmd, "login": false, "yield_time_ms": 30000 }));
    assert!(!is_error(&r), "{r}");
    text(&r)
}

#[test]
fn a_hidden_directory_looks_empty_and_no_refusal_is_claimed_that_was_not_made() {
    let ws = Workspace::new();
    // `uexec_command` makes the workspace the home: `~/.ssh` is one of the hidden credential stores.
    fs::create_dir_all(ws.path().join(".ssh")).unwrap();
    fs::write(ws.path().join(".ssh/id_test"), "PRIVATE-KEY\n").unwrap();
    fs::write(ws.path().join("notes.txt"), "visible\n").unwrap();
    let mut server = McpServer::start_initialized(&ws, &["--allow-degraded-sandbox"], false);
    let said = exec(&mut server, "ls -A ~/.ssh; echo listed=$?; cat ~/.ssh/id_test");
    if environment() == Environment::Container {
        // Not hidden here, and the note says so; none pretends the sandbox refused anything under it.
        assert!(said.contains("id_test") && said.contains("PRIVATE-KEY"), "{said}");
        assert!(said.contains("hidden_paths off"), "{said}");
        assert!(!said.contains("[uexec] hidden:"), "{said}");
        return;
    }
    assert!(said.contains("listed=0"), "an empty directory, listed without an error: {said}");
    assert!(!said.contains("id_test\n") && !said.contains("PRIVATE-KEY"), "{said}");
    assert!(said.contains("[uexec] hidden: "), "the refusal is named: {said}");
    // The allowed twin: a file beside the hidden directory reads, and nothing is noted.
    let said = exec(&mut server, "cat notes.txt");
    assert!(said.contains("visible") && !said.contains("[uexec] hidden:"), "{said}");
}

#[test]
fn a_network_refusal_is_named_and_a_permission_error_of_the_persons_own_is_not() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &["--allow-degraded-sandbox"], false);
    let said = exec(&mut server, "curl -sS --max-time 20 https://pkgs.example.org/");
    let expected = match environment() {
        // The offline namespace's responder recorded the lookup (the user's namespace is made in the sandbox's
        // user namespace).
        Environment::Root | Environment::User => "[uexec] network off: pkgs.example.org",
        // Nothing records it: the resolver's failure in the output is the evidence, and the note says so.
        Environment::Container => "[uexec] network off [from output]",
    };
    assert!(said.contains(expected), "{said}");
    // The twin: the wording of a permission error on a file the sandbox lets every command read is no evidence.
    let said = exec(&mut server, "echo 'cat: /etc/shadow: Permission denied' >&2; exit 1");
    assert!(said.contains("exited with code 1") && !said.contains("[uexec] network off"), "{said}");
}

/// A service on the host's `127.0.0.1`: each connection gets one request answered with `served`; the count of
/// requests answered.
fn host_service() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ =
                write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nserved\n");
        }
    });
    (port, served)
}

/// The domain allowlist: an allowed host (the host's `127.0.0.1:PORT`) is reached through the proxy, a denied
/// one gets the proxy's 403 and the note names it; as root and as an ordinary user (whose proxy namespace is
/// made in the sandbox's user namespace). In the container the network namespace cannot be made, and uexec
/// refuses to start in that mode, naming the refused step and its cause: nothing runs.
#[test]
fn the_domain_allowlist_reaches_an_allowed_host_and_refuses_a_denied_one() {
    let ws = Workspace::new();
    let (port, served) = host_service();
    let allow = format!("127.0.0.1:{port}");
    let script = format!(
        "echo \"allowed=$(curl -sS --max-time 20 http://127.0.0.1:{port}/)\"; \
         curl -sS --max-time 20 -o /dev/null -w 'denied %{{http_code}}\\n' -x \"$HTTP_PROXY\" http://denied.example/"
    );
    let (code, stdout, stderr) = run(
        &ws,
        &["run", "--allow-domain", &allow, "--deny-domain", "denied.example", "--", "sh", "-c", &script],
    );
    let served = served.load(std::sync::atomic::Ordering::SeqCst);
    if environment() == Environment::Container {
        assert_ne!(code, Some(0), "{stdout}{stderr}");
        for needle in
            ["the domain allowlist needs a network namespace", "failed with EPERM", "seccomp filter"]
        {
            assert!(stderr.contains(needle), "missing {needle:?} in: {stderr}");
        }
        assert!(stdout.is_empty() && served == 0, "nothing ran: {stdout} ({served} served)");
        return;
    }
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("allowed=served\n"), "the allowed host, through the proxy: {stdout}{stderr}");
    assert!(stdout.contains("denied 403\n"), "the denied host: {stdout}{stderr}");
    assert!(
        stderr.contains("sandbox refused: connection to denied.example:80 (deny pattern denied.example)"),
        "{stderr}"
    );
    assert_eq!(served, 1, "only the allowed request reached the host's service");
}

/// The copy-on-write view of the person's cargo home (network on, workspace-write): a sandboxed write lands in
/// the sandbox's upper layer, the person's directory is never written, a second run sees the first one's writes,
/// and beside the view the file system stays read-only; as root and as an ordinary user (whose overlay is made
/// in the sandbox's user namespace). In the container (degraded, as accepted) there is no view: the cargo home
/// stays read-only, and the write is refused.
#[test]
fn a_copy_on_write_view_takes_the_writes_and_the_persons_directory_is_never_written() {
    let ws = Workspace::new();
    let (cargo, state) = (ws.outside.path().join("cargo"), ws.outside.path().join("state"));
    fs::create_dir_all(&cargo).unwrap();
    fs::create_dir_all(&state).unwrap();
    fs::write(cargo.join("file"), "original\n").unwrap();
    let script = "(echo poison >> \"$CARGO_HOME/file\" && echo view-written || echo view-refused); \
                  cat \"$CARGO_HOME/file\"; (echo x > \"$CARGO_HOME/../planted\" && echo planted || echo planted-refused); \
                  echo \"ids $(id -u):$(id -g) owner $(stat -c %u:%g \"$CARGO_HOME/file\")\"";
    let run_once = || {
        let out =
            uexec_command(&ws, &["run", "--network", "--allow-degraded-sandbox", "--", "sh", "-c", script])
                .env("CARGO_HOME", &cargo)
                .env("XDG_STATE_HOME", &state)
                .output()
                .unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (stdout, stderr) = run_once();
    assert!(stdout.contains("planted-refused"), "beside the view, read-only: {stdout}{stderr}");
    assert!(!ws.outside.path().join("planted").exists());
    assert_eq!(
        fs::read_to_string(cargo.join("file")).unwrap(),
        "original\n",
        "the person's file is unchanged"
    );
    // Inside, the person's ids are their own, and so is the owner of their file (in the view, too).
    let ids = format!("{}:{}", rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
    assert!(stdout.contains(&format!("ids {ids} owner {ids}\n")), "{stdout}{stderr}");
    if environment() == Environment::Container {
        assert!(stdout.contains("view-refused") && stdout.contains("original\n"), "{stdout}{stderr}");
        return;
    }
    assert!(stdout.contains("view-written\noriginal\npoison\n"), "{stdout}{stderr}");
    let upper = state.join("uexec/sandbox-overlays/0/cargo/upper/file");
    assert_eq!(fs::read_to_string(&upper).unwrap(), "original\npoison\n", "the write is in the upper layer");
    // The next run finds the same layer (and the person's directory still unchanged).
    let (stdout, stderr) = run_once();
    assert!(stdout.contains("view-written\noriginal\npoison\npoison\n"), "{stdout}{stderr}");
    assert_eq!(fs::read_to_string(cargo.join("file")).unwrap(), "original\n");
}

/// No process outlives the server, whoever runs it: a background job of a sandboxed session (and one of an
/// unsandboxed session) dies when the server is SIGKILLed: with the PID namespace's init as root, by the
/// host's watchdog as an ordinary user and in the container. The twin: while the server lives, the jobs run.
#[test]
fn background_jobs_die_with_a_sigkilled_server() {
    let ws = Workspace::new();
    let sandboxed = marker_seconds(41);
    let unsandboxed = marker_seconds(42);
    let mut server = McpServer::start(&ws, &["--allow-degraded-sandbox"]);
    server.initialize(true);
    // A session that stays open (a session's processes die when it ends): the shell, its leader, waits for a
    // job of its own, which a SIGKILL of the server would leave behind with only a parent-death signal.
    let job = |marker: &str| format!("sleep {marker} >/dev/null 2>&1 & echo started; wait");
    let r =
        server.call("exec_command", json!({ "cmd": job(&sandboxed), "login": false, "yield_time_ms": 500 }));
    assert!(!is_error(&r) && text(&r).contains("started"), "{r}");
    // Outside the sandbox, after the person approves it.
    server.answers = vec!["approve".into()];
    let r = server.call(
        "exec_command",
        json!({ "cmd": job(&unsandboxed), "login": false, "yield_time_ms": 500,
                "sandbox_permissions": "require_escalated", "justification": "test" }),
    );
    assert!(!is_error(&r) && text(&r).contains("started"), "{r}");
    for marker in [&sandboxed, &unsandboxed] {
        let alive = wait_present(&["sleep", marker], std::time::Duration::from_secs(30));
        assert!(!alive.is_empty(), "the job runs while the server lives ({marker})");
    }
    // SAFETY: kill with a plain pid and signal.
    assert_eq!(unsafe { libc::kill(server.pid() as i32, libc::SIGKILL) }, 0);
    for marker in [&sandboxed, &unsandboxed] {
        let left = wait_gone(&["sleep", marker], std::time::Duration::from_secs(30));
        assert!(left.is_empty(), "{left:?} outlived the server ({marker}, {:?})", environment());
    }
}

/// Start `sleep MARKER` as a background job of a session of `server` that stays open.
fn start_job(server: &mut McpServer, marker: &str) {
    let cmd = format!("sleep {marker} >/dev/null 2>&1 & echo started; wait");
    let r = server.call("exec_command", json!({ "cmd": cmd, "login": false, "yield_time_ms": 500 }));
    assert!(!is_error(&r) && text(&r).contains("started"), "{r}");
    assert!(
        !wait_present(&["sleep", marker], std::time::Duration::from_secs(30)).is_empty(),
        "{marker} runs"
    );
}

/// What a sandboxed command of `server` lists of the processes it can see (their command lines).
fn listed(server: &mut McpServer) -> String {
    exec(server, "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; ps axww -o args")
}

/// One PID namespace per server and per HTTP client, with its own `/proc`: a sandboxed command lists its own
/// server's (client's) background job, the allowed twin, and never another server's or client's command line,
/// as root and as an ordinary user (the sandbox's PID namespace, made in its user namespace). In the container
/// there is none: the other's command line shows, and the report says `/proc` is the host's.
#[test]
fn each_server_and_each_http_client_sees_only_its_own_commands() {
    let ws = Workspace::new();
    let isolated = environment() != Environment::Container;
    let (mine, theirs) = (marker_seconds(60), marker_seconds(61));
    let mut first = McpServer::start_initialized(&ws, &["--allow-degraded-sandbox"], false);
    let mut second = McpServer::start_initialized(&ws, &["--allow-degraded-sandbox"], false);
    start_job(&mut first, &mine);
    start_job(&mut second, &theirs);
    let seen = listed(&mut first);
    assert!(seen.contains(&format!("sleep {mine}")), "the server's own job is listed: {seen}");
    assert_eq!(
        seen.contains(&format!("sleep {theirs}")),
        !isolated,
        "another server's job ({isolated}): {seen}"
    );
    if isolated {
        assert!(!seen.contains("uexec mcp"), "no server's command line is listed: {seen}");
    }

    // Two clients of one listening server.
    let (mine, theirs) = (marker_seconds(62), marker_seconds(63));
    let mut server =
        McpServer::start_initialized_over(Transport::Http, &ws, &["--allow-degraded-sandbox"], false);
    let mut other = server.another_http_client();
    other.initialize(false);
    start_job(&mut server, &mine);
    start_job(&mut other, &theirs);
    let seen = listed(&mut server);
    assert!(seen.contains(&format!("sleep {mine}")), "the client's own job is listed: {seen}");
    assert_eq!(
        seen.contains(&format!("sleep {theirs}")),
        !isolated,
        "another client's job ({isolated}): {seen}"
    );
    let seen = listed(&mut other);
    assert!(seen.contains(&format!("sleep {theirs}")), "the other client's own job is listed: {seen}");
    assert_eq!(
        seen.contains(&format!("sleep {mine}")),
        !isolated,
        "the first client's job ({isolated}): {seen}"
    );

    // The report says which it is.
    let (code, report, stderr) = run(&ws, &["sandbox-report"]);
    assert_eq!(code, Some(0), "{stderr}");
    let scopes = report.lines().find(|l| l.trim_start().starts_with("scopes")).unwrap_or_default();
    assert_eq!(scopes.contains("/proc is the host's"), !isolated, "{report}");
}

/// A sandboxed daemon that cleared its environment and left its session carries nothing the host's watchdog
/// finds it by: it dies with a SIGKILLed server where the sandbox has a PID namespace (root's, and the ordinary
/// user's, made in the sandbox's user namespace), and survives in the container, which has none (the README's
/// environment table says so). The twin: it runs while the server lives.
#[test]
fn a_scrubbed_sandboxed_daemon_dies_with_a_sigkilled_server_where_there_is_a_pid_namespace() {
    let ws = Workspace::new();
    let (marker, leader) = (marker_seconds(64), marker_seconds(65));
    let mut server = McpServer::start_initialized(&ws, &["--allow-degraded-sandbox"], false);
    // The session stays open (its leader sleeps), so that only the server's death can end the daemon.
    let cmd = format!(
        "env -i /bin/sh -c \"(setsid sleep {marker} >/dev/null 2>&1 &)\"; echo started; sleep {leader} >/dev/null"
    );
    let r = server.call("exec_command", json!({ "cmd": cmd, "login": false, "yield_time_ms": 500 }));
    assert!(!is_error(&r) && text(&r).contains("started"), "{r}");
    let alive = wait_present(&["sleep", &marker], std::time::Duration::from_secs(30));
    assert!(!alive.is_empty(), "the daemon runs while the server lives");
    assert!(!wait_present(&["sleep", &leader], std::time::Duration::from_secs(30)).is_empty());
    // SAFETY: kill with a plain pid and signal.
    assert_eq!(unsafe { libc::kill(server.pid() as i32, libc::SIGKILL) }, 0);
    // The session's own process, which carries its token, dies everywhere (the watchdog's sweep is done then).
    let left = wait_gone(&["sleep", &leader], std::time::Duration::from_secs(30));
    assert!(left.is_empty(), "{left:?}: the session's leader outlived the server");
    if environment() == Environment::Container {
        let left = wait_present(&["sleep", &marker], std::time::Duration::from_secs(5));
        for pid in &left {
            // SAFETY: kill with a plain pid and signal (the test's own leftover).
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        assert_eq!(left, alive, "no PID namespace in the container: the scrubbed daemon outlives the server");
    } else {
        let left = wait_gone(&["sleep", &marker], std::time::Duration::from_secs(30));
        assert!(left.is_empty(), "{left:?} outlived the server ({:?})", environment());
    }
}

/// A signal to a process outside the sandbox: as root and as the user the commands run in a PID namespace that
/// holds none (the kernel answers "No such process", nothing is noted or recorded); in the container, where no
/// PID namespace can be made, Landlock's signal scope refuses it (EPERM), and the note and the audit record name
/// the process. The twin in each: a signal to the command's own process is delivered, and nothing is noted.
#[test]
fn a_signal_outside_the_sandbox_finds_none_or_is_refused_and_named() {
    let ws = Workspace::new();
    let audit = ws.outside.path().join("audit.jsonl");
    let args = ["--allow-degraded-sandbox", "--network", "--audit-log", audit.to_str().unwrap()];
    let mut server = McpServer::start_initialized(&ws, &args, false);
    let outside = std::process::id();
    let said = exec(&mut server, &format!("kill -0 {outside}"));
    let records = || -> Vec<serde_json::Value> {
        fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|r| r["event"] == "sandbox_refused")
            .collect()
    };
    if environment() == Environment::Container {
        assert!(said.contains("Operation not permitted"), "the kernel refused it: {said}");
        assert!(said.contains(&format!("[uexec] signal refused: {outside}")), "{said}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while records().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let found = records();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0]["kind"], "signal", "{found:?}");
        assert_eq!(found[0]["target"], outside.to_string(), "{found:?}");
    } else {
        assert!(said.contains("No such process") && !said.contains("signal refused"), "{said}");
    }
    let said = exec(&mut server, "kill -0 $$ && echo delivered");
    assert!(said.contains("delivered") && !said.contains("signal refused"), "{said}");
    drop(server);
    let expected = usize::from(environment() == Environment::Container);
    assert_eq!(records().len(), expected, "{:?}", records());
}
