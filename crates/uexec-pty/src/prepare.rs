//! Checking a [`SpawnRequest`] and turning it into C strings before anything is created: every bad input
//! becomes a typed [`SpawnError`] here, with nothing spawned and no fd opened.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Access, FileType};
use uexec_ports::process::{SpawnError, SpawnRequest};

use crate::token::{SESSION_TOKEN_VAR, SessionToken};

/// The search path used when the request's environment has no `PATH` (what a login shell would set).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A request, checked and converted: what the child needs, as C strings.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The resolved program path handed to `execve`.
    pub(crate) program: CString,
    /// `argv`, as given (`argv[0]` unchanged).
    pub(crate) argv: Vec<CString>,
    /// `NAME=value` strings: the request's environment plus the session token.
    pub(crate) envp: Vec<CString>,
    /// The working directory.
    pub(crate) cwd: CString,
}

/// Check `request` and convert it. The session token is added to the environment (replacing any
/// inherited one).
pub(crate) fn prepare(request: &SpawnRequest, token: &SessionToken) -> Result<Prepared, SpawnError> {
    let Some(program) = request.argv.first() else {
        return Err(SpawnError::EmptyArgv);
    };
    let argv = request
        .argv
        .iter()
        .enumerate()
        .map(|(index, arg)| c_string(arg.as_bytes(), || format!("argument {index}")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut envp = Vec::with_capacity(request.env.len() + 1);
    for (name, value) in &request.env {
        if name.as_bytes() == SESSION_TOKEN_VAR.as_bytes() {
            continue;
        }
        let mut entry = Vec::with_capacity(name.len() + value.len() + 1);
        entry.extend_from_slice(name.as_bytes());
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        envp.push(c_string(&entry, || format!("environment variable {}", name.to_string_lossy()))?);
    }
    envp.push(token.env_entry());
    let cwd = c_string(request.cwd.as_os_str().as_bytes(), || "cwd".to_owned())?;
    check_cwd(&request.cwd)?;
    let resolved = resolve_program(program, &request.env, &request.cwd)?;
    let program = c_string(resolved.as_os_str().as_bytes(), || "argument 0".to_owned())?;
    Ok(Prepared { program, argv, envp, cwd })
}

fn c_string(bytes: &[u8], what: impl FnOnce() -> String) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| SpawnError::NulByte { what: what() })
}

fn check_cwd(cwd: &Path) -> Result<(), SpawnError> {
    match rustix::fs::stat(cwd) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => Ok(()),
        _ => Err(SpawnError::BadCwd { cwd: cwd.to_path_buf() }),
    }
}

/// What a candidate path is.
enum Candidate {
    Executable,
    NotExecutable,
    Missing,
}

fn probe(path: &Path) -> Candidate {
    match rustix::fs::stat(path) {
        Err(_) => Candidate::Missing,
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile => {
            Candidate::NotExecutable
        }
        Ok(_) => match rustix::fs::access(path, Access::EXEC_OK) {
            Ok(()) => Candidate::Executable,
            Err(_) => Candidate::NotExecutable,
        },
    }
}

/// Resolve `program` like `execvp` would in the child: a name with a `/` is a path (relative to `cwd`),
/// anything else is looked up in the `PATH` of `env` (empty or relative entries relative to `cwd`).
pub(crate) fn resolve_program(
    program: &OsStr,
    env: &[(OsString, OsString)],
    cwd: &Path,
) -> Result<PathBuf, SpawnError> {
    let not_found = || SpawnError::ProgramNotFound { program: program.to_string_lossy().into_owned() };
    if program.is_empty() {
        return Err(not_found());
    }
    if program.as_bytes().contains(&b'/') {
        let path = cwd.join(program);
        return match probe(&path) {
            Candidate::Executable => Ok(path),
            Candidate::NotExecutable => Err(SpawnError::NotExecutable { path }),
            Candidate::Missing => Err(not_found()),
        };
    }
    let search_path = env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_bytes().to_vec())
        .unwrap_or_else(|| DEFAULT_PATH.as_bytes().to_vec());
    let mut not_executable = None;
    for dir in search_path.split(|byte| *byte == b':') {
        let dir = if dir.is_empty() { cwd.to_path_buf() } else { cwd.join(OsString::from_vec(dir.to_vec())) };
        let path = dir.join(program);
        match probe(&path) {
            Candidate::Executable => return Ok(path),
            Candidate::NotExecutable => {
                if not_executable.is_none() {
                    not_executable = Some(path);
                }
            }
            Candidate::Missing => {}
        }
    }
    match not_executable {
        Some(path) => Err(SpawnError::NotExecutable { path }),
        None => Err(not_found()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn env(path: &str) -> Vec<(OsString, OsString)> {
        vec![(OsString::from("PATH"), OsString::from(path))]
    }

    #[test]
    fn finds_a_program_on_path() {
        let found =
            resolve_program(OsStr::new("sh"), &env("/nonexistent:/bin:/usr/bin"), Path::new("/")).unwrap();
        assert!(found.ends_with("sh"), "{found:?}");
        assert!(found.starts_with("/bin") || found.starts_with("/usr/bin"), "{found:?}");
    }

    #[test]
    fn missing_program_is_not_found() {
        let error =
            resolve_program(OsStr::new("uexec-no-such-program"), &env("/bin:/usr/bin"), Path::new("/"));
        assert_eq!(error, Err(SpawnError::ProgramNotFound { program: "uexec-no-such-program".into() }));
    }

    #[test]
    fn directory_on_path_is_not_executable() {
        // `/usr` contains `bin`, a directory: found but not executable.
        let error = resolve_program(OsStr::new("bin"), &env("/usr"), Path::new("/"));
        assert_eq!(error, Err(SpawnError::NotExecutable { path: PathBuf::from("/usr/bin") }));
    }

    #[test]
    fn relative_path_resolves_against_cwd() {
        let found = resolve_program(OsStr::new("./sh"), &env(""), Path::new("/bin")).unwrap();
        assert_eq!(found, PathBuf::from("/bin/./sh"));
    }
}
