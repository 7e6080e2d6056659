//! `uexec apply-patch -- <patch>...`: the program an intercepted `apply_patch` call runs as (the engine spawns
//! it like any command: approved, sandboxed and audited the same way). It joins its arguments into the patch,
//! applies it in its working directory and prints what the reference's `apply_patch` prints: the summary on
//! stdout and exit code 0, or the error on stderr and exit code 1.
//!
//! The patch is parsed and applied in memory first (`uexec_domain::patch`), so a patch that does not apply
//! changes nothing; then the files are written in patch order. A write the sandbox refuses (outside the
//! writable roots, into `.git` or `.uexec`, through a symlink that leaves a root) fails with the reference's
//! text, and the patch stops there.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use uexec_domain::patch::{FileOp, apply_patch, parse_patch};

/// The subcommand's name.
pub const SUBCOMMAND: &str = "apply-patch";

/// Run: `args` are the pieces of the patch (the engine splits a long patch to stay under the kernel's limit
/// on one argument).
pub fn main(args: &[OsString]) -> ExitCode {
    let mut patch = String::new();
    for arg in args {
        match arg.to_str() {
            Some(piece) => patch.push_str(piece),
            None => return fail("Error: apply_patch requires a UTF-8 PATCH argument."),
        }
    }
    let parsed = match parse_patch(&patch) {
        Ok(parsed) => parsed,
        Err(error) => return fail(&error.to_string()),
    };
    let outcome = match apply_patch(&parsed, |path| std::fs::read_to_string(path).map_err(|e| e.to_string()))
    {
        Ok(outcome) => outcome,
        Err(error) => return fail(&error.to_string()),
    };
    for op in &outcome.ops {
        if let Err(text) = perform(op) {
            return fail(&text);
        }
    }
    let mut stdout = std::io::stdout().lock();
    if stdout.write_all(outcome.summary().as_bytes()).and_then(|()| stdout.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The argv that runs `argv` when it is the direct form of a call, `["apply_patch" | "applypatch", patch]`:
/// this binary's subcommand with the patch (so `uexec run -- apply_patch "$patch"` works as in the reference).
pub fn direct_call(argv: &[OsString]) -> Option<Vec<OsString>> {
    let [name, patch] = argv else { return None };
    if name != "apply_patch" && name != "applypatch" {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    Some(vec![exe.into_os_string(), OsString::from(SUBCOMMAND), OsString::from("--"), patch.clone()])
}

fn perform(op: &FileOp) -> Result<(), String> {
    match op {
        FileOp::Write { path, contents } => {
            let file = Path::new(path);
            if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .map_err(|_| format!("Failed to create parent directories for {path}"))?;
            }
            std::fs::write(file, contents).map_err(|_| op.failure_text())
        }
        FileOp::Remove { path, .. } => std::fs::remove_file(path).map_err(|_| op.failure_text()),
    }
}

fn fail(text: &str) -> ExitCode {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{text}");
    ExitCode::FAILURE
}
