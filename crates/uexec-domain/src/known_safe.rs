//! The second half of the known-safe rule: a command on the read-only list is known safe only if nothing it
//! runs could have been chosen by a file in a writable root.
//!
//! [`ParsedCommand::is_read_only`] judges the words of a command. That is not enough: `git status` runs
//! `core.fsmonitor`, `git diff` runs `diff.external`, textconv and filter drivers, `git log` runs `pager.log`,
//! and every program is looked up through `PATH`. Whatever a sandboxed command can write, it can plant: a
//! repository's config (`/tmp/x/.git/config`, a nested `sub/.git`, a `/tmp/.git` that git discovers from every
//! directory under `/tmp`), `~/.gitconfig` when `HOME` lies in a writable root, a `ls` in a `PATH` directory.
//! A protected `.git` (read-only inside the sandbox) does not help: it is protected only from commands that
//! started after it existed, so one started before can still create it, and one running now can create a
//! `.git` nearer to the working directory at any time.
//!
//! The rule ([`check_known_safe`]): with the command's environment, working directory and the policy's writable
//! roots (all resolved through symlinks by the caller), a command that passes the word check is known safe
//! unless
//!
//! 0. what it runs is read by one model ([`crate::runs::what_runs`]): the programs behind wrappers (`timeout`,
//!    `env`, `nice`, `xargs`, `exec`, ...), the script files of shells and interpreters, the directories an
//!    interpreter imports from (`python3 -m pip` imports from the working directory), the project files of build
//!    and test runners, and git's `-C`, `--git-dir`, `--work-tree`, `--exec-path` and `-c`; each of these in a
//!    writable root is code a sandboxed command could have written ([`NotKnownSafe::WritableCode`]), and what
//!    the model cannot read counts as such code ([`NotKnownSafe::CannotTell`]);
//! 1. any `PATH` directory, or a file the environment names for loading code or shell startup (`LD_PRELOAD`,
//!    `LD_LIBRARY_PATH`, `LD_AUDIT`, `GCONV_PATH`, `BASH_ENV`, `ENV`, `PYTHONSTARTUP`; the interpreters' search
//!    paths `PYTHONPATH`, `NODE_PATH`, `PERL5LIB`, `RUBYLIB`, `CLASSPATH`, ...; for zsh, `$ZDOTDIR`/`$HOME`
//!    `.zshenv`), lies in a writable root, or an interpreter's options variable (`NODE_OPTIONS`, `RUBYOPT`,
//!    `PERL5OPT`, `JAVA_TOOL_OPTIONS`) loads code;
//! 2. for `git`:
//!    - a `cd` runs before it in the same script (git would discover a repository from a directory this rule
//!      did not look at);
//!    - the working directory lies in a writable root (git discovers `.git` upward from there, and a `.git`
//!      can be created in any directory of a writable root, now or while git starts);
//!    - the first `.git` found upward is anything but a directory or a symlink to one, or that directory, or
//!      the work tree holding it, lies in a writable root or contains one (a nested repository, a submodule
//!      or a `.gitattributes` in a writable root);
//!    - `GIT_DIR`, `GIT_WORK_TREE` or `GIT_COMMON_DIR` names such a tree; `GIT_EXEC_PATH`,
//!      `GIT_CONFIG_GLOBAL`, `GIT_CONFIG_SYSTEM`, `GIT_CONFIG`, the global config (`~/.gitconfig`,
//!      `$XDG_CONFIG_HOME/git/config` or `~/.config/git/config`) or the system config (`/etc/gitconfig`)
//!      lies in a writable root, or `GIT_EXTERNAL_DIFF` names a program there; or `GIT_CONFIG_PARAMETERS` /
//!      `GIT_CONFIG_COUNT` is set (inline config can include a file);
//! 3. for `rg`, `RIPGREP_CONFIG_PATH` lies in a writable root (the config file can add `--pre`).
//!
//! A relative path in the environment (`PATH=bin:...`) is judged from the working directory, and makes the
//! command not known safe when the script runs `cd` (it would then be looked up from elsewhere).
//!
//! "Lies in a writable root" is path arithmetic on resolved paths and ignores the sandbox's read-only subpaths
//! (see above). A path that cannot be resolved fails closed. The caller answers the two questions of
//! [`FsView`] (lstat and realpath, never a file's contents); this module does no I/O.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use crate::command::ParsedCommand;
use crate::runs::{GitRun, Runs};
use crate::trust::SandboxWrites;

/// What `dir/.git` is, seen without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DotGit {
    /// Nothing there.
    Absent,
    /// A directory (not a symlink).
    Directory,
    /// A symlink (to anything).
    Symlink,
    /// A file (a `gitdir:` file of a linked worktree or a submodule) or anything else.
    Other,
}

/// The file-system questions the rule asks; the caller answers them.
pub trait FsView {
    /// `path` (absolute) with every symlink resolved as far as it exists, the part that does not exist appended
    /// as written; `None` when it cannot be resolved (a loop, an error other than "not found").
    fn resolve(&self, path: &Path) -> Option<PathBuf>;
    /// Every place the lookup of `path` (absolute) passes through, the final location last (see
    /// [`crate::trust`]); `None` when it cannot be looked up. The default is the path as given and as
    /// resolved, for views that know no more.
    fn lookup(&self, path: &Path) -> Option<Vec<PathBuf>> {
        let resolved = self.resolve(path)?;
        Some(vec![path.to_path_buf(), resolved])
    }
    /// What `dir/.git` is (lstat: a symlink is reported, not followed).
    fn dot_git(&self, dir: &Path) -> DotGit;
    /// Whether `path` names something a `PATH` search would run (an existing entry that is not a directory).
    /// The default knows nothing: no program is found through `PATH`.
    fn is_program(&self, _path: &Path) -> bool {
        false
    }
}

/// Everything the rule needs about one command besides its argv.
#[derive(Debug, Clone, Copy)]
pub struct KnownSafeContext<'a> {
    /// Where sandboxed commands may have written (gathered once per call, [`crate::trust`]).
    pub writes: &'a SandboxWrites,
    /// The command's working directory (absolute).
    pub cwd: &'a Path,
    /// The command's environment, exactly as it will be spawned.
    pub env: &'a [(OsString, OsString)],
}

/// Why a command is not known safe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NotKnownSafe {
    /// Its words are not a read-only command ([`ParsedCommand::is_read_only`]).
    NotReadOnly,
    /// Something that chooses what runs lies in a writable root (or contains one).
    Writable {
        /// What it is (`PATH`, `the git repository`, ...).
        what: String,
        /// Its resolved path.
        path: PathBuf,
    },
    /// A path that chooses what runs could not be resolved.
    Unresolved {
        /// What it is.
        what: String,
        /// The path as given.
        path: PathBuf,
    },
    /// `git` runs after a `cd` in the same script.
    GitAfterCd,
    /// The `.git` git would use is a file or something else this rule does not follow.
    GitEntryNotADirectory(PathBuf),
    /// `GIT_CONFIG_PARAMETERS` or `GIT_CONFIG_COUNT` is set.
    GitInlineConfig,
    /// The command runs code a sandboxed command can write, whose content may differ at every run: a program
    /// named by (or found at) a path in a writable root, or a build or test runner that runs the project files
    /// of a working directory in one (a `Makefile`, `package.json` scripts, build scripts, tests). No earlier
    /// approval covers such a run outside the sandbox: what it runs now is not what was approved.
    WritableCode {
        /// What runs (`the program ./build.sh`, `make's Makefile and recipes`).
        what: String,
        /// Where it lies (the program, or the working directory).
        path: PathBuf,
    },
    /// What the command runs cannot be read from its words ([`Runs::Unknown`]: a script that is not plain, a
    /// shell reading its commands from its input, a wrapper option this rule does not know); it counts as code
    /// a sandboxed command could have written.
    CannotTell(String),
}

impl NotKnownSafe {
    /// Whether an approval of the same command given before, shown this same reason, can cover it: when what
    /// was found is in the command's words ([`NotKnownSafe::NotReadOnly`], [`NotKnownSafe::GitInlineConfig`]) or
    /// is a place the person was shown and the sandbox protects ([`NotKnownSafe::Writable`]: a root's own
    /// repository). Never for code a sandboxed command can write ([`NotKnownSafe::WritableCode`]: its content
    /// may have changed since), nor for what cannot be resolved or read from the words
    /// ([`NotKnownSafe::CannotTell`], [`NotKnownSafe::Unresolved`], a `.git` file, git after `cd`), which counts
    /// as such code.
    pub fn is_coverable(&self) -> bool {
        matches!(
            self,
            NotKnownSafe::NotReadOnly | NotKnownSafe::GitInlineConfig | NotKnownSafe::Writable { .. }
        )
    }
}

impl std::fmt::Display for NotKnownSafe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotKnownSafe::NotReadOnly => write!(f, "not a known read-only command"),
            NotKnownSafe::Writable { what, path } => {
                write!(f, "{what} ({}) can be written by sandboxed commands", shown(path))
            }
            NotKnownSafe::Unresolved { what, path } => {
                write!(f, "{what} ({}) cannot be resolved", shown(path))
            }
            NotKnownSafe::GitAfterCd => write!(f, "git runs after a cd in the same script"),
            NotKnownSafe::GitEntryNotADirectory(path) => {
                write!(f, "git would use {}, which is not a directory", shown(path))
            }
            NotKnownSafe::GitInlineConfig => {
                write!(f, "GIT_CONFIG_PARAMETERS or GIT_CONFIG_COUNT is set")
            }
            NotKnownSafe::CannotTell(why) => write!(
                f,
                "what it runs cannot be read from its words ({why}), so it may run code that sandboxed commands \
                 wrote"
            ),
            NotKnownSafe::WritableCode { what, path } => write!(
                f,
                "{what} ({}) can be written by sandboxed commands, and may differ from what was approved",
                shown(path)
            ),
        }
    }
}

/// A path as a person reads it: invisible and control characters escaped (a directory name is anyone's choice).
fn shown(path: &Path) -> String {
    crate::question::escape_path(path)
}

/// Whether `command` is known safe in `ctx` (see the module documentation): `Ok` when it is.
pub fn check_known_safe(
    command: &ParsedCommand,
    ctx: &KnownSafeContext<'_>,
    fs: &dyn FsView,
) -> Result<(), NotKnownSafe> {
    if !command.is_read_only() {
        return Err(NotKnownSafe::NotReadOnly);
    }
    check_runs(command.runs(), ctx, fs)
}

/// Whether anything `command` runs could have been chosen by a file a sandboxed command wrote, whatever its words
/// (the analysis of [`check_known_safe`] without the read-only test): for a command placed outside the sandbox
/// (an escalation, a retry after a denial, a command a prefix approval admits). `Ok` when nothing was found.
/// What it runs is read by one model of wrappers, shells, interpreters, runners and git's options
/// ([`crate::runs::what_runs`]); what that model cannot read ([`Runs::Unknown`]) counts as code a sandboxed
/// command could have written ([`NotKnownSafe::CannotTell`]).
pub fn check_planted(
    command: &ParsedCommand,
    ctx: &KnownSafeContext<'_>,
    fs: &dyn FsView,
) -> Result<(), NotKnownSafe> {
    check_runs(command.runs(), ctx, fs)
}

/// The checks of both rules over what a command runs, in order.
fn check_runs(runs: &[Runs], ctx: &KnownSafeContext<'_>, fs: &dyn FsView) -> Result<(), NotKnownSafe> {
    if ctx.writes.roots().is_empty() {
        return Ok(());
    }
    let changes_directory = runs.contains(&Runs::ChangesDirectory);
    let mut checker = Checker { ctx, fs, changes_directory, assigned: Vec::new() };
    checker.check_env_loading()?;
    let mut cd_seen = false;
    for run in runs {
        match run {
            Runs::Program(program) => {
                checker.check_program(program)?;
                let name = program.rsplit('/').next().unwrap_or(program);
                match name {
                    "zsh" => checker.check_zsh()?,
                    "rg" => checker.check_path_var(
                        "RIPGREP_CONFIG_PATH",
                        "the ripgrep config file (RIPGREP_CONFIG_PATH)",
                    )?,
                    _ => {}
                }
            }
            Runs::ChangesDirectory => cd_seen = true,
            Runs::Script { by, path } => {
                checker
                    .outside(&format!("the file {path} that {by} runs"), Path::new(path))
                    .map_err(as_code)?;
            }
            Runs::ImportsFrom { by, dir } => {
                let (what, dir) = match dir {
                    Some(dir) => (format!("the directory {dir} that {by} imports from"), PathBuf::from(dir)),
                    None => (format!("the working directory, which {by} imports from"), PathBuf::from(".")),
                };
                checker.entries_outside(&what, &dir).map_err(as_code)?;
            }
            Runs::Project(what) => {
                let lookup = checker.lookup(what, ctx.cwd)?;
                if let Some(found) = ctx.writes.holding_entries(&lookup) {
                    return Err(NotKnownSafe::WritableCode {
                        what: (*what).to_owned(),
                        path: found.location,
                    });
                }
            }
            Runs::Git(_) if cd_seen => return Err(NotKnownSafe::GitAfterCd),
            Runs::Git(git) => checker.check_git(git)?,
            Runs::Assignment { name, value } => {
                checker.assigned.push((OsString::from(name), OsString::from(value)));
                checker.check_env_loading()?;
            }
            Runs::Unknown(why) => return Err(NotKnownSafe::CannotTell(why.clone())),
        }
    }
    Ok(())
}

/// The variables that make every program load code, or every shell source a file, with their list separators
/// and whether their entries are directories (whose entries matter) rather than files.
const LOADER_VARS: [(&str, &[char], bool); 12] = [
    ("LD_PRELOAD", &[' ', ':'], false),
    ("LD_LIBRARY_PATH", &[':', ';'], true),
    ("LD_AUDIT", &[':'], false),
    ("GCONV_PATH", &[':'], true),
    // Interpreters' module search paths: `python3 -m pip` imports a planted `pip/` from any of them.
    ("PYTHONPATH", &[':'], true),
    ("PYTHONHOME", &[':'], true),
    ("PYTHONUSERBASE", &[], true),
    ("NODE_PATH", &[':'], true),
    ("PERL5LIB", &[':'], true),
    ("PERLLIB", &[':'], true),
    ("RUBYLIB", &[':'], true),
    ("CLASSPATH", &[':'], true),
];

/// Variables holding an interpreter's options, and the options among them that load code (a module, an agent,
/// a class path): with one of these, what the interpreter runs is chosen by a file this rule does not follow.
const OPTION_VARS: [(&str, &[&str]); 6] = [
    ("NODE_OPTIONS", &["-r", "--require", "--import", "--loader", "--experimental-loader", "--env-file"]),
    ("RUBYOPT", &["-r", "-I"]),
    ("PERL5OPT", &["-M", "-m", "-I"]),
    ("JAVA_TOOL_OPTIONS", JAVA_LOADING),
    ("_JAVA_OPTIONS", JAVA_LOADING),
    ("JDK_JAVA_OPTIONS", JAVA_LOADING),
];

/// The Java options that load code.
const JAVA_LOADING: &[&str] = &[
    "-javaagent",
    "-agentpath",
    "-agentlib",
    "-Xbootclasspath",
    "-cp",
    "-classpath",
    "--class-path",
    "-Djava.class.path",
];

/// The first option of `value` (an [`OPTION_VARS`] variable's) that loads code, if any.
fn loading_option<'v>(value: &'v str, loading: &[&str]) -> Option<&'v str> {
    value.split_whitespace().find(|word| loading.iter().any(|option| word.starts_with(option)))
}

/// Shell builtins and keywords: found by no `PATH` search.
const SHELL_BUILTINS: [&str; 30] = [
    "cd", "echo", "printf", "test", "[", "true", "false", "pwd", "export", "unset", "set", "read", "type",
    "exit", "return", "shift", "wait", "umask", "ulimit", "alias", "unalias", "hash", "getopts", "local",
    "declare", "readonly", "trap", "times", ":", "let",
];

/// The environment for a command placed outside the sandbox: every `PATH` directory and every loader or
/// startup entry (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `LD_AUDIT`, `GCONV_PATH`, `BASH_ENV`, `ENV`) that a sandboxed
/// command could have written is removed (an unresolvable one too: fails closed), so the programs it finds are
/// the ones outside every writable root (an active `.venv/bin` or `node_modules/.bin` is not searched). Returns
/// the environment and one line per removed entry, for the question and the report.
pub fn without_plantable_entries(
    env: &[(OsString, OsString)],
    cwd: &Path,
    writes: &SandboxWrites,
    fs: &dyn FsView,
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let mut removed = Vec::new();
    if writes.roots().is_empty() {
        return (env.to_vec(), removed);
    }
    let plantable = |entry: &str, directory: bool| -> Option<String> {
        let path = absolute(cwd, Path::new(entry));
        let Some(lookup) = fs.lookup(&path) else { return Some("it cannot be resolved".to_owned()) };
        let found = if directory { writes.holding_entries(&lookup) } else { writes.holding(&lookup) };
        found.map(|f| f.describe())
    };
    let mut out = Vec::with_capacity(env.len());
    for (name, value) in env {
        let Some(key) = name.to_str() else {
            out.push((name.clone(), value.clone()));
            continue;
        };
        let list: Option<(&[char], bool)> = match key {
            "PATH" => Some((&[':'], true)),
            "BASH_ENV" | "ENV" | "PYTHONSTARTUP" => Some((&[], false)),
            _ if OPTION_VARS.iter().any(|(n, _)| *n == key) => {
                let loading =
                    OPTION_VARS.iter().find(|(n, _)| *n == key).map(|(_, l)| *l).unwrap_or_default();
                match loading_option(&value.to_string_lossy(), loading) {
                    Some(option) => {
                        removed.push(format!("{key} (its option {} loads code)", shown(Path::new(option))));
                        continue;
                    }
                    None => None,
                }
            }
            _ => LOADER_VARS.iter().find(|(n, _, _)| *n == key).map(|(_, sep, dir)| (*sep, *dir)),
        };
        let Some((separators, directory)) = list else {
            out.push((name.clone(), value.clone()));
            continue;
        };
        let text = value.to_string_lossy();
        let entries: Vec<&str> = if separators.is_empty() {
            vec![&*text]
        } else {
            text.split(|c| separators.contains(&c)).collect()
        };
        let mut kept: Vec<&str> = Vec::new();
        for entry in entries {
            // An empty PATH entry is the working directory; a bare LD_PRELOAD name is searched in the library
            // path, which is judged as LD_LIBRARY_PATH.
            if entry.is_empty() && key != "PATH" {
                continue;
            }
            if key == "LD_PRELOAD" && !entry.contains('/') {
                kept.push(entry);
                continue;
            }
            let looked_up = if entry.is_empty() { "." } else { entry };
            match plantable(looked_up, directory) {
                Some(why) => removed.push(format!("{key} entry {} ({why})", shown(Path::new(looked_up)))),
                None => kept.push(entry),
            }
        }
        if kept.is_empty() && key != "PATH" {
            continue;
        }
        let joiner = separators.first().map(|c| c.to_string()).unwrap_or_default();
        out.push((name.clone(), OsString::from(kept.join(&joiner))));
    }
    (out, removed)
}

struct Checker<'a> {
    ctx: &'a KnownSafeContext<'a>,
    fs: &'a dyn FsView,
    /// The script runs `cd`: a relative path the environment names (`PATH=bin`, `BASH_ENV=env.sh`) may then
    /// be looked up from a directory this rule did not look at.
    changes_directory: bool,
    /// Variables the command sets for what it runs (`env NAME=VALUE cmd`), in order: they override the
    /// environment for every check after them.
    assigned: Vec<(OsString, OsString)>,
}

impl Checker<'_> {
    fn var(&self, name: &str) -> Option<&OsStr> {
        self.assigned
            .iter()
            .rev()
            .chain(self.ctx.env.iter().rev())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_os_str())
    }

    fn absolute(&self, what: &str, path: &Path) -> Result<PathBuf, NotKnownSafe> {
        if self.changes_directory && !path.is_absolute() {
            return Err(NotKnownSafe::Unresolved {
                what: format!("{what} (relative, and the script changes directory)"),
                path: path.to_path_buf(),
            });
        }
        Ok(absolute(self.ctx.cwd, path))
    }

    /// The lookup of `path` (every place it passes through, the resolved location last).
    fn lookup(&self, what: &str, path: &Path) -> Result<Vec<PathBuf>, NotKnownSafe> {
        let absolute = self.absolute(what, path)?;
        match self.fs.lookup(&absolute) {
            Some(lookup) if !lookup.is_empty() => Ok(lookup),
            _ => Err(NotKnownSafe::Unresolved { what: what.to_owned(), path: absolute }),
        }
    }

    /// The file `path` must not be one a sandboxed command could have written or redirected.
    fn outside(&self, what: &str, path: &Path) -> Result<PathBuf, NotKnownSafe> {
        let lookup = self.lookup(what, path)?;
        if let Some(found) = self.ctx.writes.holding(&lookup) {
            return Err(NotKnownSafe::Writable { what: what.to_owned(), path: found.location });
        }
        Ok(lookup.last().cloned().unwrap_or_default())
    }

    /// The directory `dir` must not have entries a sandboxed command could have written: not a root, not in
    /// one, not reached through one.
    fn entries_outside(&self, what: &str, dir: &Path) -> Result<PathBuf, NotKnownSafe> {
        let lookup = self.lookup(what, dir)?;
        if let Some(found) = self.ctx.writes.holding_entries(&lookup) {
            return Err(NotKnownSafe::Writable { what: what.to_owned(), path: found.location });
        }
        Ok(lookup.last().cloned().unwrap_or_default())
    }

    /// `dir` must not lie in a writable root, nor contain one.
    fn tree_outside(&self, what: &str, dir: &Path) -> Result<(), NotKnownSafe> {
        let resolved = self.entries_outside(what, dir)?;
        if self.ctx.writes.contained_in(&resolved).is_some() {
            return Err(NotKnownSafe::Writable {
                what: format!("{what} (it contains a writable root)"),
                path: resolved,
            });
        }
        Ok(())
    }

    fn check_path_var(&self, name: &str, what: &str) -> Result<(), NotKnownSafe> {
        match self.var(name).filter(|v| !v.is_empty()) {
            Some(value) => self.outside(what, Path::new(value)).map(drop),
            None => Ok(()),
        }
    }

    /// The program a command runs, found as the shell finds it: by its path when it names one, else in the
    /// first `PATH` directory that has it (builtins are not searched).
    fn check_program(&self, program: &str) -> Result<(), NotKnownSafe> {
        if program.contains('/') {
            return self
                .outside(&format!("the program {program}"), Path::new(program))
                .map(drop)
                .map_err(as_code);
        }
        if SHELL_BUILTINS.contains(&program) || program.is_empty() {
            return Ok(());
        }
        let Some(path) = self.var("PATH") else { return Ok(()) };
        for dir in split_list(path, &[':']) {
            let dir = if dir.is_empty() { ".".to_owned() } else { dir };
            let candidate = self.absolute("a PATH directory", Path::new(&dir))?.join(program);
            if self.fs.is_program(&candidate) {
                return self
                    .outside(&format!("the program {program} found through PATH"), &candidate)
                    .map(drop)
                    .map_err(as_code);
            }
        }
        Ok(())
    }

    /// `PATH` and the variables that make every program load or source a file.
    fn check_env_loading(&self) -> Result<(), NotKnownSafe> {
        if let Some(path) = self.var("PATH") {
            // An empty entry is the working directory.
            for dir in split_list(path, &[':']) {
                let dir = if dir.is_empty() { ".".to_owned() } else { dir };
                self.entries_outside("a PATH directory", Path::new(dir.as_str()))?;
            }
        }
        for (name, separators, directory) in LOADER_VARS {
            if let Some(value) = self.var(name).filter(|v| !v.is_empty()) {
                for entry in split_list(value, separators) {
                    // A bare LD_PRELOAD name is searched in the library path, not relative to the cwd.
                    if entry.is_empty() || (name == "LD_PRELOAD" && !entry.contains('/')) {
                        continue;
                    }
                    let what = format!("a {name} entry");
                    if directory {
                        self.entries_outside(&what, Path::new(entry.as_str()))?;
                    } else {
                        self.outside(&what, Path::new(entry.as_str()))?;
                    }
                }
            }
        }
        for (name, loading) in OPTION_VARS {
            if let Some(value) = self.var(name)
                && let Some(option) = loading_option(&value.to_string_lossy(), loading)
            {
                return Err(NotKnownSafe::Unresolved {
                    what: format!("{name}, whose option {option} loads code"),
                    path: self.ctx.cwd.to_path_buf(),
                });
            }
        }
        self.check_path_var("PYTHONSTARTUP", "the PYTHONSTARTUP file")?;
        self.check_path_var("BASH_ENV", "the BASH_ENV startup file")?;
        self.check_path_var("ENV", "the ENV startup file")?;
        Ok(())
    }

    /// zsh sources `$ZDOTDIR/.zshenv` (else `~/.zshenv`) even for `zsh -c`.
    fn check_zsh(&self) -> Result<(), NotKnownSafe> {
        let dir = self.var("ZDOTDIR").filter(|v| !v.is_empty()).or_else(|| self.var("HOME"));
        match dir.filter(|v| !v.is_empty()) {
            Some(dir) => self.outside("zsh's .zshenv", &Path::new(dir).join(".zshenv")).map(drop),
            None => Ok(()),
        }
    }

    /// git, with what its options choose (`-C`, `--git-dir`, `--work-tree`, `--exec-path`, `-c`) and what its
    /// environment names.
    fn check_git(&self, run: &GitRun) -> Result<(), NotKnownSafe> {
        let set = |name: &str| self.var(name).filter(|v| !v.is_empty());
        if run.inline_config || set("GIT_CONFIG_PARAMETERS").is_some() || set("GIT_CONFIG_COUNT").is_some() {
            return Err(NotKnownSafe::GitInlineConfig);
        }
        for (name, what) in [
            ("GIT_CONFIG_GLOBAL", "the global git config (GIT_CONFIG_GLOBAL)"),
            ("GIT_CONFIG_SYSTEM", "the system git config (GIT_CONFIG_SYSTEM)"),
            ("GIT_CONFIG", "the git config file (GIT_CONFIG)"),
        ] {
            self.check_path_var(name, what)?;
        }
        // `-C` directories, each relative to the one before: where git starts, and what relative options and
        // variables are read from.
        let start = match &run.dirs[..] {
            [] => self.ctx.cwd.to_path_buf(),
            dirs => {
                let joined = dirs.iter().fold(PathBuf::new(), |at, dir| at.join(dir));
                self.absolute("the directory git -C names", &joined)?
            }
        };
        let from_start = |value: &str| start.join(value);
        let exec_path =
            run.exec_path.clone().or_else(|| set("GIT_EXEC_PATH").map(|v| v.to_string_lossy().into_owned()));
        if let Some(dir) = exec_path {
            self.entries_outside("git's program directory (--exec-path, GIT_EXEC_PATH)", &from_start(&dir))
                .map_err(as_code)?;
        }
        // A subcommand that is not built in runs an alias (config, checked below) or `git-<name>` on PATH.
        if let Some(sub) = run.subcommand.as_deref().filter(|s| !crate::rules::is_git_builtin(s)) {
            self.check_program(&format!("git-{sub}"))?;
        }
        // A diff program the environment names (`git diff` runs it): by path, or found through PATH.
        if let Some(program) = set("GIT_EXTERNAL_DIFF").and_then(|v| v.to_str())
            && let Some(first) = program.split_whitespace().next()
        {
            self.check_program(first)?;
        }
        let dirs = [
            ("GIT_DIR", "the git directory (GIT_DIR, --git-dir)", run.git_dir.as_deref()),
            ("GIT_WORK_TREE", "the git work tree (GIT_WORK_TREE, --work-tree)", run.work_tree.as_deref()),
            ("GIT_COMMON_DIR", "the git common directory (GIT_COMMON_DIR)", None),
        ];
        for (name, what, option) in dirs {
            let value =
                option.map(str::to_owned).or_else(|| set(name).map(|v| v.to_string_lossy().into_owned()));
            if let Some(dir) = value {
                // A repository named into a writable root is one a sandboxed command could have made.
                self.tree_outside(what, &from_start(&dir)).map_err(as_code)?;
            }
        }
        if set("GIT_CONFIG_GLOBAL").is_none() {
            let home = set("HOME").map(PathBuf::from);
            if let Some(home) = &home {
                self.outside("the global git config (~/.gitconfig)", &home.join(".gitconfig"))?;
            }
            let xdg = set("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| home.map(|h| h.join(".config")));
            if let Some(xdg) = xdg {
                self.outside("the global git config ($XDG_CONFIG_HOME/git)", &xdg.join("git/config"))?;
            }
        }
        if set("GIT_CONFIG_NOSYSTEM").is_none() && set("GIT_CONFIG_SYSTEM").is_none() {
            self.outside("the system git config", Path::new("/etc/gitconfig"))?;
        }
        // Discovery: git looks for `.git` in the directory it starts in, then in each parent. A directory
        // strictly inside a writable root can get a `.git` from a sandboxed command at any time, and a `.git` in
        // a root that is not the root's own (which the sandbox protects) is written by sandboxed commands: both
        // are code a sandboxed command chose. The root's own repository is named, and an approval shown that
        // reason covers it.
        let what = if run.dirs.is_empty() {
            "the working directory (git discovers a repository from it)"
        } else {
            "the directory git -C names (git discovers a repository from it)"
        };
        let lookup = self.lookup(what, &start)?;
        let cwd = lookup.last().cloned().unwrap_or_default();
        if let Some(found) = self.ctx.writes.holding(&lookup) {
            return Err(NotKnownSafe::WritableCode { what: what.to_owned(), path: found.location });
        }
        let start_is_root = self.ctx.writes.holding_entries(&lookup).is_some();
        for dir in cwd.ancestors() {
            let dot_git = dir.join(".git");
            match self.fs.dot_git(dir) {
                DotGit::Absent => continue,
                DotGit::Directory | DotGit::Symlink => {
                    return match self.tree_outside("the git repository", &dot_git) {
                        Err(NotKnownSafe::Writable { what, path }) if !(start_is_root && dir == cwd) => {
                            Err(NotKnownSafe::WritableCode { what, path })
                        }
                        Err(error) => Err(error),
                        Ok(()) => self.tree_outside("the git work tree", dir),
                    };
                }
                DotGit::Other => return Err(NotKnownSafe::GitEntryNotADirectory(dot_git)),
            }
        }
        if start_is_root {
            return Err(NotKnownSafe::Writable { what: what.to_owned(), path: cwd });
        }
        Ok(())
    }
}

/// A program's content, a script's, a repository's a sandboxed command made: its choice at every run.
fn as_code(error: NotKnownSafe) -> NotKnownSafe {
    match error {
        NotKnownSafe::Writable { what, path } => NotKnownSafe::WritableCode { what, path },
        other => other,
    }
}

/// The entries of a `:`-style list (an empty entry stays, as the empty path).
fn split_list(value: &OsStr, separators: &[char]) -> Vec<String> {
    value.to_string_lossy().split(|c| separators.contains(&c)).map(str::to_owned).collect()
}

/// `path` made absolute against `cwd`, with `.` removed (`..` is left for the resolver: it is not lexical
/// across symlinks).
fn absolute(cwd: &Path, path: &Path) -> PathBuf {
    let joined = if path.is_absolute() { path.to_path_buf() } else { cwd.join(path) };
    joined.components().filter(|c| *c != Component::CurDir).collect()
}

#[cfg(test)]
#[path = "known_safe_tests.rs"]
mod tests;
