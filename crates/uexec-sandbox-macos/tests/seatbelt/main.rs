//! Integration tests of the Seatbelt profile generator and adapter (one binary, modules by theme). They run on
//! any Unix host: nothing here needs macOS.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod adapter;
mod canonical;
mod extras;
mod fake_fs;
mod gitdirs;
mod golden;
mod planted;
mod props;
mod sexpr;

use std::ffi::OsString;

use std::path::PathBuf;

use uexec_domain::SandboxPolicy;
use uexec_ports::SandboxRequest;
use uexec_ports::process::{IoMode, SpawnRequest};
use uexec_sandbox_macos::SeatbeltLaunch;

/// A request to run `echo hi` in `cwd` (also the workspace) under `policy`, degraded protection allowed.
pub fn request(cwd: PathBuf, policy: SandboxPolicy) -> SandboxRequest {
    SandboxRequest {
        workspace: cwd.clone(),
        spawn: SpawnRequest {
            argv: vec!["echo".into(), "hi".into()],
            cwd,
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            mode: IoMode::Pipes,
            setup: Vec::new(),
            pid_scope: Default::default(),
        },
        policy,
        tmpdir: None,
        allow_degraded: true,
    }
}

/// True for the name of a path parameter: a writable root `WRITABLE_ROOT_i` or a read-only entry
/// `WRITABLE_ROOT_i_RO_j` (not their every-spelling expressions, `_ANY`, nor the ancestors).
pub fn is_path_param(name: &str) -> bool {
    name.starts_with("WRITABLE_ROOT_") && !name.ends_with("_ANY")
}

/// True for the name of a writable root's parameter.
pub fn is_root_param(name: &str) -> bool {
    is_path_param(name) && !name.contains("_RO_")
}

/// The path parameters of `launch`, in order.
pub fn path_params(launch: &SeatbeltLaunch) -> Vec<(String, OsString)> {
    launch.params.iter().filter(|(n, _)| is_path_param(n)).cloned().collect()
}

/// Structural checks every generated profile must pass: it reads as balanced s-expressions, opens with
/// `(version 1)` and `(deny default)`, has only `allow`/`deny` rules after that, references only its
/// parameters and every one of them, and every regular expression (literal or parameter) is ASCII and
/// compiles. Returns the parsed forms.
pub fn check_profile(launch: &SeatbeltLaunch) -> Vec<sexpr::Sexp> {
    use sexpr::Sexp;
    let forms = sexpr::parse(&launch.profile).unwrap_or_else(|err| panic!("profile does not parse: {err}"));
    assert_eq!(forms[0], Sexp::List(vec![Sexp::Atom("version".into()), Sexp::Atom("1".into())]));
    assert_eq!(forms[1], Sexp::List(vec![Sexp::Atom("deny".into()), Sexp::Atom("default".into())]));
    for form in &forms[1..] {
        let Sexp::List(items) = form else { panic!("top-level atom {form:?}") };
        assert!(
            matches!(items.first(), Some(Sexp::Atom(head)) if head == "allow" || head == "deny"),
            "unexpected top-level form {form:?}"
        );
    }
    let names: Vec<String> = launch.params.iter().map(|(name, _)| name.clone()).collect();
    let references = sexpr::param_references(&forms);
    for name in &references {
        assert!(names.contains(name), "the profile references the undefined parameter {name}");
    }
    for name in &names {
        assert!(references.contains(name), "the parameter {name} is never referenced");
        assert_eq!(names.iter().filter(|n| *n == name).count(), 1, "{name} is defined twice");
    }
    for (name, value) in &launch.params {
        if name.ends_with("_ANY") || name.contains("ANCESTOR") {
            let text = value.to_str().unwrap();
            assert!(text.is_ascii(), "{name}={text:?}");
            regex_lite::Regex::new(text).unwrap_or_else(|e| panic!("{name}={text:?}: {e}"));
        }
    }
    forms
}
