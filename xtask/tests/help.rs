//! Every command of `cargo xtask` answers `--help` with its usage, runs nothing and exits 0; a bad argument is
//! a clear error, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).output().expect("xtask runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The commands `cargo xtask help` lists.
fn commands() -> Vec<String> {
    let out = xtask(&["help"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .skip_while(|l| *l != "commands:")
        .filter_map(|l| l.strip_prefix("  ").filter(|l| !l.starts_with(' ')))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn every_command_answers_help() {
    let commands = commands();
    for expected in
        ["ci", "layering", "tidy", "deploy", "examples", "package", "soak-fleet", "bench", "soak", "fuzz"]
    {
        assert!(commands.iter().any(|c| c == expected), "{expected} is listed: {commands:?}");
    }
    for command in &commands {
        for flag in ["--help", "-h"] {
            let out = xtask(&[command, flag]);
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert!(out.status.success(), "{command} {flag}: {stderr}");
            assert!(stdout.starts_with(&format!("usage: cargo xtask {command}")), "{command}: {stdout}");
            assert!(stdout.lines().count() >= 3, "{command} {flag} describes the command: {stdout}");
            assert!(stderr.is_empty(), "{command} {flag} runs nothing: {stderr}");
        }
    }
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    for args in [
        &["nonsense"][..],
        &["nonsense", "--help"],
        &["tidy", "--frobnicate"],
        &["soak-fleet", "--servers"],
        &["soak-fleet", "--uexec", "/bin/true"],
        &["bench", "--only"],
        &["fuzz", "--secs", "--only", "x"],
        &["soak", "--sessions"],
    ] {
        let out = xtask(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?} fails: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.starts_with("Error: "), "{args:?} says why: {stderr}");
    }
}
