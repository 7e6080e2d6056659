//! Cargo: under workspace-write, sandboxed commands see the person's `CARGO_HOME` copy-on-write
//! (an overlay whose upper layer belongs to the sandbox), end to end through `uexec mcp` with the real cargo and
//! crates.io: a crate the person fetched beforehand builds `--offline` inside the sandbox, a sandboxed
//! `cargo fetch` of a crate the person never fetched succeeds with the crates.io hosts allowed, the person's
//! `CARGO_HOME` gets no new or changed file, and a command outside the sandbox does not see what the sandboxed
//! one fetched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::{Value, json};

/// The crate the person fetched beforehand (tiny, no dependencies).
const CACHED: (&str, &str) = ("cfg-if", "1.0.0");
/// The crate only a sandboxed command fetches (tiny, no dependencies).
const FETCHED: (&str, &str) = ("fnv", "1.0.7");

/// The directory of the real toolchain's `cargo` and `rustc` (`rustup which cargo`), not the rustup proxies.
fn toolchain_bin() -> PathBuf {
    let out = Command::new("rustup").args(["which", "cargo"]).output().expect("rustup is installed here");
    assert!(out.status.success(), "{out:?}");
    let cargo = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    cargo.parent().unwrap().to_path_buf()
}

/// Every file and directory beneath `dir` with its bytes, sorted.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut entries = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(dir).unwrap().to_path_buf();
            if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                entries.push((relative, None));
                stack.push(path);
            } else {
                entries.push((relative, Some(std::fs::read(&path).unwrap())));
            }
        }
    }
    entries.sort();
    entries
}

/// A cargo package named `name` in `dir` depending on `dep` (exact version).
fn package(dir: &Path, name: &str, dep: (&str, &str)) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n{} = \"={}\"\n",
        dep.0, dep.1
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "pub fn f() -> u8 { 1 }\n").unwrap();
}

/// Run `cmd` to its end (`exec_command`, then `write_stdin` polls) with `extra` arguments: all it printed and
/// its exit code.
fn run_to_end(server: &mut McpServer, cmd: &str, extra: Value) -> (String, Option<i64>) {
    let mut args = json!({ "cmd": cmd, "login": false, "yield_time_ms": 30000 });
    for (key, value) in extra.as_object().unwrap() {
        args[key] = value.clone();
    }
    let mut r: Value = server.call("exec_command", args);
    let mut printed = String::new();
    loop {
        printed.push_str(&output(&r));
        if let Some(code) = exit_code(&r) {
            return (printed, Some(code));
        }
        if is_error(&r) {
            return (format!("{printed}{r}"), None);
        }
        let id = session_id(&r);
        r = server.call("write_stdin", json!({ "session_id": id, "chars": "", "yield_time_ms": 30000 }));
    }
}

#[test]
fn sandboxed_cargo_fetches_and_builds_through_a_copy_on_write_cargo_home() {
    let ws = Workspace::new();
    let outside = std::fs::canonicalize(ws.outside.path()).unwrap();
    let (home, state, cargo_home) = (outside.join("home"), outside.join("state"), outside.join("cargo-home"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&cargo_home).unwrap();
    let bin = toolchain_bin();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());

    // The person fetches CACHED outside any sandbox.
    let person = outside.join("person-project");
    package(&person, "person", CACHED);
    let fetched = Command::new(bin.join("cargo"))
        .arg("fetch")
        .current_dir(&person)
        .env("CARGO_HOME", &cargo_home)
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(fetched.status.success(), "{fetched:?}");
    let crate_file = |(name, version): (&str, &str)| format!("{name}-{version}.crate");
    let cached_list = |dir: &Path| -> String {
        let cache = dir.join("registry/cache");
        let mut names = Vec::new();
        for registry in std::fs::read_dir(&cache).into_iter().flatten() {
            for file in std::fs::read_dir(registry.unwrap().path()).unwrap() {
                names.push(file.unwrap().file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        names.join(",")
    };
    assert_eq!(cached_list(&cargo_home), crate_file(CACHED));
    let before = snapshot(&cargo_home);

    // Builds go to a target directory in the workspace: the one this test suite may have been given
    // (`.ci/run` sets `CARGO_TARGET_DIR` outside /tmp) is read-only to sandboxed commands.
    let target = ws.path().join("cargo-target");
    let env = [
        ("HOME", home.to_str().unwrap()),
        ("XDG_STATE_HOME", state.to_str().unwrap()),
        ("CARGO_HOME", cargo_home.to_str().unwrap()),
        ("CARGO_TARGET_DIR", target.to_str().unwrap()),
        ("PATH", path.as_str()),
    ];
    let args = ["--allow-domain", "index.crates.io", "--allow-domain", "static.crates.io"];
    let mut server = McpServer::start_with_env(&ws, &args, &env);
    server.initialize(true);

    // The person has a cargo home: sandboxed commands keep it (as a copy-on-write view), never another one.
    let (out, code) = run_to_end(&mut server, "echo \"[$CARGO_HOME]\"", json!({}));
    assert_eq!((out.trim(), code), (format!("[{}]", cargo_home.display()).as_str(), Some(0)));

    // The crate the person fetched builds offline inside the sandbox (cargo unpacks it into its home: the view).
    package(&ws.path().join("offline"), "offline", CACHED);
    let (out, code) =
        run_to_end(&mut server, "cd offline && cargo build --offline 2>&1 && echo BUILT-OFFLINE", json!({}));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("BUILT-OFFLINE") && !out.contains("read-only"), "{out}");

    // A crate the person never fetched: a sandboxed `cargo fetch` gets it from crates.io through the proxy.
    package(&ws.path().join("online"), "online", FETCHED);
    let (out, code) = run_to_end(&mut server, "cd online && cargo fetch 2>&1 && echo FETCHED", json!({}));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("FETCHED"), "{out}");

    // Inside the sandbox both crates are in the cargo home; the twin outside shows only the person's.
    let list = "ls \"$CARGO_HOME\"/registry/cache/*/ | sort | tr '\\n' ,";
    let (inside, code) = run_to_end(&mut server, list, json!({}));
    assert_eq!(code, Some(0), "{inside}");
    assert_eq!(inside.trim(), format!("{},{},", crate_file(CACHED), crate_file(FETCHED)));
    server.answers = vec!["approve".into()];
    let escalated = json!({ "sandbox_permissions": "require_escalated", "justification": "compare" });
    let (unsandboxed, code) = run_to_end(&mut server, list, escalated);
    assert_eq!(code, Some(0), "{unsandboxed}");
    assert_eq!(
        unsandboxed.trim(),
        format!("{},", crate_file(CACHED)),
        "nothing the sandbox fetched is seen outside"
    );

    // The person's CARGO_HOME has no new or changed file; the sandbox's upper layer holds what it wrote.
    assert_eq!(snapshot(&cargo_home), before, "the person's CARGO_HOME changed");
    let upper = state.join("uexec/sandbox-overlays/0/cargo/upper");
    assert_eq!(cached_list(&upper), crate_file(FETCHED), "{}", upper.display());
    assert!(upper.join("registry/src").is_dir(), "the offline build unpacked its crate into the upper layer");
}
