//! One sandbox per server, end to end through `uexec mcp` and `uexec run`: sandboxed sessions see and signal
//! each other's processes (a dev server started in one session is stopped from another with `kill` or `pkill`)
//! and nothing outside the server's sandbox; `ps`, `$$` and `/proc` agree in every mode; under
//! danger-full-access a command sees and signals the host's processes; `close_session` still kills only its
//! session's tree, and a SIGKILL of the server still kills everything, danger-full-access daemons included.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::json;

/// `$$`, the pid `ps` shows for the shell, `/proc/self`'s target as seen by the shell, and the pid field of
/// `/proc/$$/status`, on one line each: they must all be the same number.
const IDENTITY: &str = "echo \"dollar=$$\"; echo \"ps=$(ps -o pid= -p $$ | tr -d ' ')\"; \
                        echo \"status=$(awk '/^Pid:/ {print $2}' /proc/$$/status)\"; \
                        printf 'parent_sees='; cut -d' ' -f4 /proc/self/stat; true";

/// Parse `name=value` lines of `IDENTITY`'s output and check they all name the shell's pid.
fn assert_identity_agrees(out: &str) -> u32 {
    let value = |name: &str| -> String {
        out.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name}= in {out}"))
            .trim()
            .to_owned()
    };
    let dollar = value("dollar");
    assert_eq!(value("ps"), dollar, "ps and $$ disagree: {out}");
    assert_eq!(value("status"), dollar, "/proc/$$/status and $$ disagree: {out}");
    assert_eq!(value("parent_sees"), dollar, "a child's /proc/self/stat ppid and $$ disagree: {out}");
    dollar.parse().unwrap()
}

/// A host process started by the test itself (outside any uexec server): `sleep <marker>`.
fn host_sleeper(marker: &str) -> Child {
    let child = Command::new("sleep").arg(marker).stdin(Stdio::null()).spawn().unwrap();
    assert_eq!(wait_present(&["sleep", marker], Duration::from_secs(20)).len(), 1);
    child
}

#[test]
fn sandboxed_sessions_see_and_stop_each_others_processes_and_nothing_else() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &[], false);
    let (dev, daemon, outside, bystander) =
        (marker_seconds(40), marker_seconds(41), marker_seconds(42), marker_seconds(43));
    let mut host = host_sleeper(&outside);

    // Session A: a "dev server" in the foreground; session C: a daemon that left its session.
    let r = server.call("exec_command", json!({ "cmd": format!("exec sleep {dev}"), "yield_time_ms": 250 }));
    let dev_session = session_id(&r);
    // (The session must stay open: when a session ends, whatever it left running is killed.)
    let r = server.call(
        "exec_command",
        json!({
            "cmd": format!("setsid sleep {daemon} > /dev/null 2>&1 < /dev/null & echo STARTED; exec sleep {daemon}9"),
            "login": false,
            "yield_time_ms": 500,
        }),
    );
    assert!(output(&r).contains("STARTED"), "{r}");
    let daemon_session = session_id(&r);
    let r = server
        .call("exec_command", json!({ "cmd": format!("exec sleep {bystander}"), "yield_time_ms": 250 }));
    let bystander_session = session_id(&r);
    assert_eq!(wait_present(&["sleep", &dev], Duration::from_secs(20)).len(), 1);
    assert_eq!(wait_present(&["sleep", &daemon], Duration::from_secs(20)).len(), 1);

    // Session B sees both, and not the host's process or the server.
    let probe = format!(
        "ps -eo pid=,args= | grep -c '[s]leep {dev}'; pgrep -f '^sleep {daemon}$' >/dev/null && echo daemon-seen; \
         pgrep -f '^sleep {outside}$' >/dev/null && echo HOST-SEEN; kill -0 {host} 2>/dev/null && echo HOST-SIGNALLED; \
         echo server-count=$(ps -eo args= | grep -c '[u]exec mcp'); true",
        host = host.id()
    );
    let out = output(&server.call("exec_command", json!({ "cmd": probe, "login": false })));
    let mut lines = out.lines();
    assert_eq!(lines.next().map(str::trim), Some("1"), "the other session's process is listed: {out}");
    assert!(out.contains("daemon-seen"), "pgrep finds the other session's daemon: {out}");
    assert!(!out.contains("HOST-SEEN"), "a host process is visible from the sandbox: {out}");
    assert!(!out.contains("HOST-SIGNALLED"), "a host process can be signalled from the sandbox: {out}");
    assert!(out.contains("server-count=0"), "the server (or an init showing its arguments) is listed: {out}");

    // It cannot read another session's environment, open files or directory (each command keeps its own Landlock
    // domain, so no ptrace access across sessions), while its own are readable: the twin.
    let probe = format!(
        "p=$(pgrep -f '^sleep {dev}$'); tr '\\0' '\\n' < /proc/$p/environ | grep -c UEXEC_SESSION_TOKEN || echo environ-closed; \
         readlink /proc/$p/fd/0 >/dev/null 2>&1 || echo fd-closed; readlink /proc/$p/cwd >/dev/null 2>&1 || echo cwd-closed; \
         readlink /proc/$$/cwd >/dev/null && tr '\\0' '\\n' < /proc/$$/environ | grep -c UEXEC_SESSION_TOKEN"
    );
    let out = output(&server.call("exec_command", json!({ "cmd": probe, "login": false })));
    assert!(
        out.contains("environ-closed") && out.contains("fd-closed") && out.contains("cwd-closed"),
        "{out}"
    );
    assert_eq!(out.lines().last().map(str::trim), Some("1"), "its own environment is readable: {out}");

    // ... and stops them: `kill <pid from ps>` and `pkill -f`.
    let stop = format!(
        "kill $(pgrep -f '^sleep {dev}$') && echo killed-dev; pkill -f '^sleep {daemon}$' && echo killed-daemon; \
         kill {host} 2>/dev/null || echo host-untouchable",
        host = host.id()
    );
    let out = output(&server.call("exec_command", json!({ "cmd": stop, "login": false })));
    assert!(out.contains("killed-dev") && out.contains("killed-daemon"), "{out}");
    assert!(out.contains("host-untouchable"), "{out}");
    assert!(wait_gone(&["sleep", &dev], Duration::from_secs(20)).is_empty(), "the dev server survived kill");
    assert!(wait_gone(&["sleep", &daemon], Duration::from_secs(20)).is_empty(), "the daemon survived pkill");
    let r =
        server.call("write_stdin", json!({ "session_id": dev_session, "chars": "", "yield_time_ms": 2000 }));
    assert!(text(&r).contains("Process exited"), "session A saw its process end: {r}");
    assert!(host.try_wait().unwrap().is_none(), "the host's process was signalled");
    assert_eq!(pids_with_cmdline(&["sleep", &outside]).len(), 1);

    // ps, $$ and /proc agree inside the sandbox.
    let out = output(&server.call("exec_command", json!({ "cmd": IDENTITY, "login": false })));
    assert_identity_agrees(&out);

    // close_session still kills its own tree only, a daemon that scrubbed its environment, left the session and
    // was re-parented included (the sessions' commands share a mount namespace built for their plan; each has a
    // UTS namespace of its own, which marks it).
    let cmd =
        format!("sleep {dev}1 & env -i /bin/sh -c \"(setsid sh -c 'sleep {dev}3 & exit' &)\"; sleep {dev}2");
    let r = server.call("exec_command", json!({ "cmd": cmd, "yield_time_ms": 250 }));
    let closing = session_id(&r);
    assert_eq!(wait_present(&["sleep", &format!("{dev}1")], Duration::from_secs(20)).len(), 1);
    let scrubbed = wait_present(&["sleep", &format!("{dev}3")], Duration::from_secs(20));
    assert_eq!(scrubbed.len(), 1);
    let ns = |pid: u32, kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap();
    let bystander_pid = pids_with_cmdline(&["sleep", &bystander])[0];
    assert_eq!(ns(scrubbed[0], "mnt"), ns(bystander_pid, "mnt"), "one plan, one mount namespace");
    assert_ne!(ns(scrubbed[0], "uts"), ns(bystander_pid, "uts"), "a UTS namespace per command");
    server.call("close_session", json!({ "session_id": closing }));
    for n in 1..=3 {
        assert!(wait_gone(&["sleep", &format!("{dev}{n}")], Duration::from_secs(20)).is_empty());
    }
    assert_eq!(pids_with_cmdline(&["sleep", &bystander]).len(), 1, "another session's process was killed");
    server.call("close_session", json!({ "session_id": bystander_session }));
    server.call("close_session", json!({ "session_id": daemon_session }));
    assert!(wait_gone(&["sleep", &format!("{daemon}9")], Duration::from_secs(20)).is_empty());
    assert!(wait_gone(&["sleep", &bystander], Duration::from_secs(20)).is_empty());
    host.kill().unwrap();
    host.wait().unwrap();
}

#[test]
fn danger_full_access_sees_and_signals_host_processes_and_dies_with_the_server() {
    let ws = Workspace::new();
    let mut server = McpServer::start_initialized(&ws, &["--sandbox", "danger-full-access"], false);
    let (outside, job, daemon) = (marker_seconds(44), marker_seconds(45), marker_seconds(46));
    let mut host = host_sleeper(&outside);

    // ps, $$ and /proc agree, with the host's numbering: the server's pid is visible as its parent's.
    let out = output(&server.call("exec_command", json!({ "cmd": IDENTITY, "login": false })));
    assert_identity_agrees(&out);
    let probe = format!(
        "ps -o pid= -p {server}; echo parent=$(ps -o ppid= -p $$ | tr -d ' ')",
        server = server.pid()
    );
    let out = output(&server.call("exec_command", json!({ "cmd": probe, "login": false })));
    assert_eq!(
        out.lines().next().map(str::trim),
        Some(server.pid().to_string().as_str()),
        "the server is listed: {out}"
    );
    assert!(
        out.contains(&format!("parent={}", server.pid())),
        "the shell's parent is the server, by its host pid: {out}"
    );

    // The host's process is listed by ps and pgrep with its host pid, and `kill` stops it.
    let probe = format!("pgrep -f '^sleep {outside}$'; kill $(pgrep -f '^sleep {outside}$') && echo killed");
    let out = output(&server.call("exec_command", json!({ "cmd": probe, "login": false })));
    assert!(out.lines().any(|line| line.trim() == host.id().to_string()), "pgrep shows the host pid: {out}");
    assert!(out.contains("killed"), "{out}");
    let status = host.wait().unwrap();
    assert!(!status.success(), "the host's process was stopped by the command: {status}");

    // A background job and a daemon of a danger-full-access session die with the server, even by SIGKILL.
    let r = server.call("exec_command", json!({ "cmd": "bash -i", "tty": true, "yield_time_ms": 500 }));
    let shell = session_id(&r);
    server.call(
        "write_stdin",
        json!({ "session_id": shell, "chars": format!("sleep {job} &\n"), "yield_time_ms": 500 }),
    );
    server.call(
        "write_stdin",
        json!({ "session_id": shell, "chars": format!("setsid sleep {daemon} > /dev/null 2>&1 < /dev/null &\n"), "yield_time_ms": 500 }),
    );
    assert_eq!(wait_present(&["sleep", &job], Duration::from_secs(20)).len(), 1);
    assert_eq!(wait_present(&["sleep", &daemon], Duration::from_secs(20)).len(), 1);
    let status = Command::new("kill").args(["-KILL", &server.pid().to_string()]).status().unwrap();
    assert!(status.success());
    assert!(server.wait_exit(Duration::from_secs(30)).is_some());
    assert!(wait_gone(&["sleep", &job], Duration::from_secs(30)).is_empty(), "a background job survived");
    assert!(wait_gone(&["sleep", &daemon], Duration::from_secs(30)).is_empty(), "a daemon survived");
}

#[test]
fn uexec_run_agrees_on_pids_in_every_mode() {
    let ws = Workspace::new();
    let modes: [&[&str]; 5] = [
        &["--sandbox", "workspace-write"],
        &["--sandbox", "read-only"],
        &["--network"],
        &["--allow-domain", "example.com"],
        &["--sandbox", "danger-full-access"],
    ];
    for mode in modes {
        let mut args = vec!["run"];
        args.extend_from_slice(mode);
        args.extend_from_slice(&["--", "sh", "-c", IDENTITY]);
        let out = uexec_command(&ws, &args).stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "{mode:?}: {out:?}");
        let shell = assert_identity_agrees(&String::from_utf8_lossy(&out.stdout));
        if mode.contains(&"danger-full-access") {
            assert!(shell > 2, "{mode:?}: a host pid, not the namespace's second: {shell}");
        } else {
            assert!(shell <= 3, "{mode:?}: the sandbox namespace's numbering: {shell}");
        }
    }
}
