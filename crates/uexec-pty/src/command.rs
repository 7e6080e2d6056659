//! [`Command`]: a builder for a [`SpawnRequest`] with the defaults a library user expects (the current
//! environment and directory, a 24x80 PTY).

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::Arc;

use uexec_ports::process::{ChildSetup, IoMode, PidScope, PtySize, SpawnError, SpawnRequest};

/// A command to start with [`PtySpawner::spawn_command`](crate::PtySpawner::spawn_command).
///
/// Defaults: the environment and working directory of the calling process, a PTY of 24x80.
#[derive(Debug, Clone)]
pub struct Command {
    argv: Vec<OsString>,
    cwd: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    mode: IoMode,
    setup: Vec<Arc<dyn ChildSetup>>,
    pid_scope: PidScope,
}

impl Command {
    /// A command running `program` (looked up in the `PATH` of its environment unless it has a `/`).
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Command {
            argv: vec![program.as_ref().to_owned()],
            cwd: None,
            env: std::env::vars_os().collect(),
            mode: IoMode::Pty(PtySize::default()),
            setup: Vec::new(),
            pid_scope: PidScope::Host,
        }
    }

    /// Append an argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.argv.push(arg.as_ref().to_owned());
        self
    }

    /// Append arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.argv.extend(args.into_iter().map(|arg| arg.as_ref().to_owned()));
        self
    }

    /// Run in `dir` instead of the current directory.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Set an environment variable (replacing an existing one).
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        let name = name.as_ref();
        self.env.retain(|(existing, _)| existing != name);
        self.env.push((name.to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Remove an environment variable.
    pub fn env_remove(mut self, name: impl AsRef<OsStr>) -> Self {
        let name = name.as_ref();
        self.env.retain(|(existing, _)| existing != name);
        self
    }

    /// Start from an empty environment.
    pub fn env_clear(mut self) -> Self {
        self.env.clear();
        self
    }

    /// Run in a PTY of `size` (the default, at 24x80).
    pub fn pty(mut self, size: PtySize) -> Self {
        self.mode = IoMode::Pty(size);
        self
    }

    /// Run without a terminal: stdin is `/dev/null`, stdout and stderr one pipe.
    pub fn pipes(mut self) -> Self {
        self.mode = IoMode::Pipes;
        self
    }

    /// Run on this process's own stdin, stdout and stderr (no PTY, no pipe): see [`IoMode::Inherit`].
    pub fn inherit_stdio(mut self) -> Self {
        self.mode = IoMode::Inherit;
        self
    }

    /// Add a hook run in the child just before `exec`.
    pub fn setup(mut self, hook: Arc<dyn ChildSetup>) -> Self {
        self.setup.push(hook);
        self
    }

    /// Which PID namespace the process runs in (default [`PidScope::Host`]; see [`PidScope`]).
    pub fn pid_scope(mut self, scope: PidScope) -> Self {
        self.pid_scope = scope;
        self
    }

    /// The request this command describes.
    pub fn into_request(self) -> Result<SpawnRequest, SpawnError> {
        let cwd = match self.cwd {
            Some(cwd) => cwd,
            None => std::env::current_dir().map_err(|_| SpawnError::BadCwd { cwd: PathBuf::from(".") })?,
        };
        Ok(SpawnRequest {
            argv: self.argv,
            cwd,
            env: self.env,
            mode: self.mode,
            setup: self.setup,
            pid_scope: self.pid_scope,
        })
    }
}
