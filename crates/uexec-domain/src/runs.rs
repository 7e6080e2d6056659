//! What a command runs, read from its words: one model of wrappers, shells, interpreters, build runners and
//! git's own options, used by every rule that asks "what does this run?" (the planted-program analysis and the
//! known-safe rule of [`crate::known_safe`], the prefix approvals of [`crate::rules`]).
//!
//! [`what_runs`] walks one argv and lists, in order, everything that chooses what executes:
//!
//! - **Wrappers** (`timeout 30 X`, `nice -n 5 X`, `env A=b X`, `sudo -u u X`, `xargs X`, `exec X`, `nohup X`,
//!   `stdbuf -oL X`, `flock f X`, `strace X`, `watch X`, ...) run the program after their own options: both
//!   are listed ([`Runs::Program`]) and the wrapped command is walked in turn. `env NAME=VALUE` sets a variable
//!   for it ([`Runs::Assignment`]).
//! - **Shells** run a script file (`bash run-tests.sh`, `. ./env.sh`, `source x`: [`Runs::Script`]) or a `-c`
//!   string, which is split as a plain script and walked; a shell that reads its commands from its input
//!   (`cat x | bash`, `bash -s`) runs what nobody can read from the words.
//! - **Interpreters** run a script file and import from its directory (`python3 x.py`), or import from the
//!   working directory (`python3 -m pip`, `python3 -c ...`, `node -e ...`: [`Runs::ImportsFrom`]); their
//!   `-I`/`-r`/`-f` options name more code.
//! - **Build and test runners** (`make`, `cargo test`, `npm run`, `uv run`, `pytest`, ...) run the project
//!   files of the working directory ([`Runs::Project`]).
//! - **git** runs in the repository its options choose (`-C`, `--git-dir`, `--work-tree`, `-c`, `--exec-path`:
//!   [`Runs::Git`]).
//! - `cd`, `pushd` and `popd` change the directory later commands run in ([`Runs::ChangesDirectory`]).
//!
//! Anything the model cannot read (an unknown option of a wrapper, a script that is not plain, `eval` of a
//! non-plain string, a program whose command comes from its input) is [`Runs::Unknown`]: a rule must treat it
//! as code a sandboxed command could have written. The model is pure: which of these paths lie in a writable
//! root is the caller's question (`crate::known_safe`).

/// One thing a command runs, or that chooses what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runs {
    /// A program, named by a path or found through `PATH` (shell builtins included; the caller knows them).
    Program(String),
    /// A file run as code by `by` (`bash`, `python3`, `source`, `make -f`), named as written (relative to the
    /// working directory unless absolute).
    Script {
        /// What runs it.
        by: String,
        /// The file, as written.
        path: String,
    },
    /// `by` imports modules from the entries of a directory: `dir` as written, or the working directory
    /// (`None`).
    ImportsFrom {
        /// What imports (`python3 -m`, `node -e`).
        by: String,
        /// The directory, as written; `None`: the working directory.
        dir: Option<String>,
    },
    /// A build or test runner runs the project files of the working directory (`what` says which).
    Project(&'static str),
    /// git, with what its global options choose.
    Git(GitRun),
    /// A variable set for what follows (`env NAME=VALUE cmd`).
    Assignment {
        /// The name.
        name: String,
        /// The value.
        value: String,
    },
    /// The working directory of later commands changes (`cd`, `pushd`, `popd`).
    ChangesDirectory,
    /// What runs cannot be read from the words; says why.
    Unknown(String),
}

/// git's global options, as far as they choose what git runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitRun {
    /// `-C <dir>` options, in order (each relative to the one before).
    pub dirs: Vec<String>,
    /// `--git-dir`.
    pub git_dir: Option<String>,
    /// `--work-tree`.
    pub work_tree: Option<String>,
    /// `--exec-path=<dir>`.
    pub exec_path: Option<String>,
    /// `-c` or `--config-env` was given (inline configuration can name a program or include a file).
    pub inline_config: bool,
    /// The subcommand, when one is named.
    pub subcommand: Option<String>,
}

/// How deep wrapped commands and nested `-c` scripts are followed; deeper is [`Runs::Unknown`].
pub const MAX_DEPTH: usize = 8;

/// Shells: `-c` strings and script files.
const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh", "rbash"];

/// Wrappers: `(program, options taking a value (short letters, long names), positional words before the
/// command)`. An option not listed and not a flag the wrapper knows makes the rest [`Runs::Unknown`] only when
/// it is not a plain flag (`-x` without a value is skipped).
struct Wrapper {
    name: &'static str,
    short_values: &'static [char],
    long_values: &'static [&'static str],
    positionals: usize,
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "timeout",
        short_values: &['s', 'k'],
        long_values: &["--signal", "--kill-after"],
        positionals: 1,
    },
    Wrapper { name: "nice", short_values: &['n'], long_values: &["--adjustment"], positionals: 0 },
    Wrapper { name: "nohup", short_values: &[], long_values: &[], positionals: 0 },
    Wrapper { name: "setsid", short_values: &[], long_values: &[], positionals: 0 },
    Wrapper {
        name: "stdbuf",
        short_values: &['i', 'o', 'e'],
        long_values: &["--input", "--output", "--error"],
        positionals: 0,
    },
    Wrapper {
        name: "ionice",
        short_values: &['c', 'n'],
        long_values: &["--class", "--classdata"],
        positionals: 0,
    },
    Wrapper { name: "chrt", short_values: &[], long_values: &[], positionals: 1 },
    Wrapper { name: "taskset", short_values: &[], long_values: &[], positionals: 1 },
    Wrapper {
        name: "time",
        short_values: &['f', 'o'],
        long_values: &["--format", "--output"],
        positionals: 0,
    },
    Wrapper { name: "command", short_values: &[], long_values: &[], positionals: 0 },
    Wrapper { name: "builtin", short_values: &[], long_values: &[], positionals: 0 },
    Wrapper { name: "exec", short_values: &['a'], long_values: &[], positionals: 0 },
    Wrapper { name: "unbuffer", short_values: &[], long_values: &[], positionals: 0 },
    Wrapper { name: "catchsegv", short_values: &[], long_values: &[], positionals: 0 },
    Wrapper { name: "faketime", short_values: &['f'], long_values: &[], positionals: 1 },
    Wrapper {
        name: "sudo",
        short_values: &['u', 'g', 'U', 'C', 'h', 'p', 'r', 't', 'T'],
        long_values: &[
            "--user",
            "--group",
            "--other-user",
            "--close-from",
            "--host",
            "--prompt",
            "--role",
            "--type",
            "--command-timeout",
        ],
        positionals: 0,
    },
    Wrapper { name: "doas", short_values: &['u', 'C'], long_values: &[], positionals: 0 },
    Wrapper {
        name: "runuser",
        short_values: &['u', 'g', 'G'],
        long_values: &["--user", "--group", "--supp-group"],
        positionals: 0,
    },
    Wrapper {
        name: "xargs",
        short_values: &['I', 'n', 'P', 'L', 's', 'd', 'E', 'a'],
        long_values: &[
            "--max-args",
            "--max-procs",
            "--max-lines",
            "--max-chars",
            "--delimiter",
            "--eof",
            "--arg-file",
            "--replace",
            "--process-slot-var",
        ],
        positionals: 0,
    },
    Wrapper {
        name: "flock",
        short_values: &['w', 'E'],
        long_values: &["--timeout", "--conflict-exit-code"],
        positionals: 1,
    },
    Wrapper {
        name: "strace",
        short_values: &['o', 'e', 's', 'a', 'E', 'u', 'I', 'b', 'O', 'S', 'X', 'P', 'U'],
        long_values: &[
            "--output",
            "--expr",
            "--string-limit",
            "--columns",
            "--env",
            "--user",
            "--interruptible",
            "--detach-on",
            "--summary-sort-by",
            "--trace-path",
        ],
        positionals: 0,
    },
    Wrapper {
        name: "ltrace",
        short_values: &['o', 'e', 's', 'a', 'u', 'n', 'l', 'L', 'x', 'A', 'F', 'w'],
        long_values: &["--output"],
        positionals: 0,
    },
    Wrapper { name: "valgrind", short_values: &[], long_values: &[], positionals: 0 },
    Wrapper {
        name: "watch",
        short_values: &['n', 'q'],
        long_values: &["--interval", "--equexit"],
        positionals: 0,
    },
];

/// Programs that run commands in ways this model does not follow: they make the rest unknown.
const OPAQUE: &[&str] = &[
    "chroot",
    "unshare",
    "nsenter",
    "parallel",
    "gdb",
    "pkexec",
    "firejail",
    "bwrap",
    "systemd-run",
    "expect",
    "tmux",
    "screen",
    "nohup.exe",
];

/// Interpreters of a script file (beyond the shells and the ones [`interpreter`] reads more closely).
const SCRIPT_INTERPRETERS: &[&str] = &[
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "rscript",
    "julia",
    "php",
    "pwsh",
    "powershell",
    "osascript",
    "tsx",
    "ts-node",
];

/// Build and test runners that run a project's files in the working directory, or a program from the project's
/// environment there (`uv run`, `npx`): what they run, in words, for a `(program, subcommand)`.
fn project_runner(command: &[String]) -> Option<&'static str> {
    let name = base_name(command.first()?);
    let sub = command.get(1).map(String::as_str).unwrap_or_default();
    let tests = "the tests and conftest.py files of the working directory";
    Some(match name {
        "make" | "gmake" | "bmake" => "make's Makefile and recipes in the working directory",
        "just" => "the justfile of the working directory",
        "rake" => "the Rakefile of the working directory",
        "gradle" | "gradlew" | "mvn" | "mvnw" | "ant" | "sbt" => "the build files of the working directory",
        "npm" | "pnpm" | "yarn" | "bun"
            if !matches!(sub, "view" | "info" | "ls" | "list" | "whoami" | "config" | "-v" | "--version") =>
        {
            "the package.json scripts of the working directory"
        }
        "npx" | "pnpx" | "bunx" => "a program of the working directory's node_modules",
        "cargo" if !matches!(sub, "--version" | "-V" | "search" | "tree" | "metadata") => {
            "the build scripts and code of the working directory's crate"
        }
        "go" if matches!(sub, "run" | "test" | "generate" | "build" | "install" | "vet") => {
            "the code of the working directory's module"
        }
        "uv" | "poetry" | "pdm" | "hatch" | "pipenv" | "rye" | "pixi"
            if matches!(sub, "run" | "sync" | "install" | "build" | "shell" | "exec" | "tool") =>
        {
            "a program of the working directory's project environment"
        }
        "uvx" => "a program of the working directory's project environment",
        "bundle" if sub == "exec" => "a program of the working directory's bundle",
        "pytest" | "tox" | "nox" => tests,
        "pip" | "pip3" if sub == "install" && command[2..].iter().any(|a| is_local_path(a)) => {
            "the setup code of a package in the working directory"
        }
        _ => return None,
    })
}

/// The file name of a program word (`/usr/bin/python3` -> `python3`).
fn base_name(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// Whether an install argument names a local directory or file rather than a package.
fn is_local_path(arg: &str) -> bool {
    arg == "." || arg.starts_with("./") || arg.starts_with("../") || arg.starts_with('/') || arg == "-e"
}

/// Whether `name` names a Python interpreter (`python3.12`, `pypy3`).
fn is_python(name: &str) -> bool {
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    trimmed == "python" || trimmed.starts_with("pypy")
}

/// How a `-c` string is split into plain commands: `crate::command`'s splitter, which
/// [`crate::command::ParsedCommand`] passes in (a command is parsed once per call, there).
pub type Split<'a> = &'a dyn Fn(&str) -> Option<Vec<Vec<String>>>;

/// Everything `argv` runs, in order (see the module documentation), splitting `-c` strings with `split`.
/// Called once per command by [`crate::command::ParsedCommand::new`]; read it with
/// [`crate::command::ParsedCommand::runs`].
pub fn what_runs(argv: &[String], split: Split<'_>) -> Vec<Runs> {
    let mut out = Vec::new();
    walk(argv, 0, false, split, &mut out);
    out
}

/// The first part of `runs` that cannot be read from the words, and why.
pub fn unknown_part(runs: &[Runs]) -> Option<&str> {
    runs.iter().find_map(|r| match r {
        Runs::Unknown(why) => Some(why.as_str()),
        _ => None,
    })
}

/// Walk one command. `appended`: the command gets more arguments from elsewhere (`xargs`), so an operand
/// missing from its words may still come.
fn walk(argv: &[String], depth: usize, appended: bool, split: Split<'_>, out: &mut Vec<Runs>) {
    let Some(program) = argv.first() else { return };
    if depth > MAX_DEPTH {
        out.push(Runs::Unknown(format!("commands nested deeper than {MAX_DEPTH} levels")));
        return;
    }
    let name = base_name(program);
    let args = &argv[1..];
    // Assignments in front of a command (`A=b cmd`, from `env` or `exec`'s callers) are handled by `env`.
    out.push(Runs::Program(program.clone()));
    match name {
        "cd" | "pushd" | "popd" => out.push(Runs::ChangesDirectory),
        "." | "source" => match args.first() {
            Some(file) => {
                out.push(Runs::Script { by: name.to_owned(), path: file.clone() });
                if !file.contains('/') {
                    // Searched in PATH first.
                    out.push(Runs::Program(file.clone()));
                }
            }
            None => out.push(Runs::Unknown(format!("{name} without a file"))),
        },
        "eval" => script_string(&args.join(" "), "eval", depth, split, out),
        "env" => env(args, depth, appended, split, out),
        "busybox" => walk(args, depth + 1, appended, split, out),
        "git" => out.push(Runs::Git(git(args))),
        "su" | "script" => match option_value(args, "-c", "--command") {
            Some(script) => script_string(script, name, depth, split, out),
            None => out
                .push(Runs::Unknown(format!("{name} starts a shell that reads its commands from its input"))),
        },
        _ if SHELLS.contains(&name) => shell(name, args, depth, appended, split, out),
        _ if OPAQUE.contains(&name) => {
            out.push(Runs::Unknown(format!("what {name} runs is not read from its words")))
        }
        _ => {
            if let Some(wrapper) = WRAPPERS.iter().find(|w| w.name == name) {
                wrapped(wrapper, args, depth, appended, split, out);
                return;
            }
            if let Some(what) = project_runner(argv) {
                out.push(Runs::Project(what));
            }
            interpreter(name, args, appended, out);
            file_options(name, args, out);
        }
    }
}

/// A `-c` string (of a shell, `eval`, `watch`, `su -c`): split as a plain script and walked, or unknown.
fn script_string(script: &str, by: &str, depth: usize, split: Split<'_>, out: &mut Vec<Runs>) {
    match split(script) {
        Some(commands) => {
            for command in commands {
                walk(&command, depth + 1, false, split, out);
            }
        }
        None => out.push(Runs::Unknown(format!("the script {by} runs is not a list of plain commands"))),
    }
}

/// The value of option `short` (`-c x`, `-cx`) or `long` (`--command x`, `--command=x`) in `args`.
fn option_value<'a>(args: &'a [String], short: &str, long: &str) -> Option<&'a str> {
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if word == short || word == long {
            return words.next().map(String::as_str);
        }
        if let Some(value) = word.strip_prefix(long).and_then(|rest| rest.strip_prefix('=')) {
            return Some(value);
        }
        if let Some(value) = word.strip_prefix(short).filter(|v| !v.is_empty() && !short.starts_with("--")) {
            return Some(value);
        }
    }
    None
}

/// A wrapper: skip its options and positionals, then walk the command it runs.
fn wrapped(
    wrapper: &Wrapper,
    args: &[String],
    depth: usize,
    appended: bool,
    split: Split<'_>,
    out: &mut Vec<Runs>,
) {
    let name = wrapper.name;
    let mut i = 0;
    let mut positionals = wrapper.positionals;
    while let Some(word) = args.get(i) {
        if word == "--" {
            i += 1;
            break;
        }
        if let Some(long) = word.strip_prefix("--") {
            let name_part = long.split('=').next().unwrap_or(long);
            let takes_value = wrapper.long_values.iter().any(|l| l.trim_start_matches('-') == name_part);
            i += if takes_value && !long.contains('=') { 2 } else { 1 };
            continue;
        }
        if word.len() > 1 && word.starts_with('-') {
            // A cluster of flags, the last of which may take a value (`-n5`, `-n 5`, `-oL`).
            let letters: Vec<char> = word[1..].chars().collect();
            let mut consumed_next = false;
            for (at, letter) in letters.iter().enumerate() {
                if wrapper.short_values.contains(letter) {
                    consumed_next = at + 1 == letters.len();
                    break;
                }
            }
            // A numeric option (`nice -5`) is a value of its own.
            i += if consumed_next { 2 } else { 1 };
            continue;
        }
        if positionals > 0 {
            positionals -= 1;
            i += 1;
            continue;
        }
        break;
    }
    let rest = &args[i.min(args.len())..];
    match name {
        // `command -v x` only looks a name up.
        "command" if args.iter().any(|a| a == "-v" || a == "-V") => {}
        // watch runs its words through `sh -c`, joined by spaces.
        "watch" if !args.iter().any(|a| a == "-x" || a == "--exec") => {
            if !rest.is_empty() {
                script_string(&rest.join(" "), "watch", depth, split, out);
            }
        }
        "flock" if args.iter().any(|a| a == "-c" || a == "--command") => {
            match option_value(args, "-c", "--command") {
                Some(script) => script_string(script, "flock", depth, split, out),
                None => out.push(Runs::Unknown("flock -c without a command".into())),
            }
        }
        // A process id, not a command.
        "ionice" | "taskset" | "chrt" | "strace" | "ltrace" if args.iter().any(|a| a == "-p") => {}
        "sudo"
            if args.iter().any(|a| a == "-i" || a == "-s" || a == "--login" || a == "--shell")
                && rest.is_empty() =>
        {
            out.push(Runs::Unknown("sudo starts a shell that reads its commands from its input".into()));
        }
        "xargs" if rest.is_empty() => {}
        "xargs" => walk(rest, depth + 1, true, split, out),
        _ if rest.is_empty() => {}
        _ => walk(rest, depth + 1, appended, split, out),
    }
}

/// `env [-i] [-u NAME] [NAME=VALUE]... [command]`.
fn env(args: &[String], depth: usize, appended: bool, split: Split<'_>, out: &mut Vec<Runs>) {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        match word.as_str() {
            "--" => {
                i += 1;
                break;
            }
            "-u" | "--unset" => i += 2,
            "-C" | "--chdir" => {
                out.push(Runs::Unknown("env -C changes the directory the command runs in".into()));
                return;
            }
            "-S" | "--split-string" => {
                // The string is split into words; the rest follows them.
                let mut words: Vec<String> = args
                    .get(i + 1)
                    .map(|s| s.split_whitespace().map(str::to_owned).collect())
                    .unwrap_or_default();
                words.extend(args.iter().skip(i + 2).cloned());
                let mut with_env = vec!["env".to_owned()];
                with_env.extend(words);
                if depth >= MAX_DEPTH {
                    out.push(Runs::Unknown("env -S nested too deep".into()));
                } else {
                    env(&with_env[1..], depth + 1, appended, split, out);
                }
                return;
            }
            w if w.starts_with("--unset=")
                || w.starts_with("--chdir=")
                || w.starts_with("-S") && w.len() > 2 =>
            {
                if w.starts_with("--unset=") {
                    i += 1;
                } else {
                    out.push(Runs::Unknown(format!("env option {w} is not followed")));
                    return;
                }
            }
            w if w.starts_with('-') && w.len() > 1 => i += 1,
            w => match w.split_once('=') {
                Some((name, value)) if !name.is_empty() => {
                    out.push(Runs::Assignment { name: name.to_owned(), value: value.to_owned() });
                    i += 1;
                }
                _ => break,
            },
        }
    }
    let rest = &args[i.min(args.len())..];
    if !rest.is_empty() {
        walk(rest, depth + 1, appended, split, out);
    }
}

/// A shell: its `-c` string, its script file, or its input.
fn shell(name: &str, args: &[String], depth: usize, appended: bool, split: Split<'_>, out: &mut Vec<Runs>) {
    let mut i = 0;
    let mut dash_c = false;
    let mut reads_input = false;
    while let Some(word) = args.get(i) {
        if word == "--" || word == "-" {
            i += 1;
            break;
        }
        if let Some(long) = word.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") {
                if let Some(file) = args.get(i + 1) {
                    out.push(Runs::Script { by: format!("{name} --{long}"), path: file.clone() });
                }
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        if (word.starts_with('-') || word.starts_with('+')) && word.len() > 1 {
            let letters = &word[1..];
            dash_c |= word.starts_with('-') && letters.contains('c');
            reads_input |= word.starts_with('-') && letters.contains('s');
            // `-o option`, `-O shopt` take a value.
            i += if letters.ends_with('o') || letters.ends_with('O') { 2 } else { 1 };
            continue;
        }
        break;
    }
    let operand = args.get(i);
    match operand {
        Some(script) if dash_c => script_string(script, name, depth, split, out),
        None if dash_c && appended => {
            out.push(Runs::Unknown(format!("the script {name} -c runs comes from elsewhere")))
        }
        None if dash_c => out.push(Runs::Unknown(format!("{name} -c without a script"))),
        Some(file) if !reads_input => out.push(Runs::Script { by: name.to_owned(), path: file.clone() }),
        _ => out.push(Runs::Unknown(format!("{name} reads the commands it runs from its input"))),
    }
}

/// Interpreters read closely: Python, Node, Perl, Ruby, Java and the plain script interpreters.
fn interpreter(name: &str, args: &[String], appended: bool, out: &mut Vec<Runs>) {
    let lower = name.to_ascii_lowercase();
    let by = name.to_owned();
    let script_and_dir = |out: &mut Vec<Runs>, file: &String| {
        out.push(Runs::Script { by: by.clone(), path: file.clone() });
        let dir = match file.rsplit_once('/') {
            Some(("", _)) => "/".to_owned(),
            Some((dir, _)) => dir.to_owned(),
            None => ".".to_owned(),
        };
        out.push(Runs::ImportsFrom { by: by.clone(), dir: Some(dir) });
    };
    let from_cwd = |out: &mut Vec<Runs>, how: &str| {
        out.push(Runs::ImportsFrom { by: format!("{by} {how}").trim_end().to_owned(), dir: None });
    };
    let missing = |out: &mut Vec<Runs>| {
        if appended {
            out.push(Runs::Unknown(format!("the code {by} runs comes from its input")));
        }
    };
    if is_python(&lower) {
        let mut isolated = false;
        let mut i = 0;
        while let Some(word) = args.get(i) {
            match word.as_str() {
                "-c" | "-m" => {
                    if !isolated {
                        from_cwd(out, word);
                    }
                    return;
                }
                "-" => {
                    out.push(Runs::Unknown(format!("{by} reads its program from its input")));
                    return;
                }
                "-W" | "-X" | "--check-hash-based-pycs" => i += 2,
                w if w.starts_with("-c") || w.starts_with("-m") && !w.starts_with("--") => {
                    if !isolated {
                        from_cwd(out, &w[..2]);
                    }
                    return;
                }
                w if w.starts_with('-') && w.len() > 1 => {
                    isolated |= !w.starts_with("--") && (w.contains('I') || w.contains('P'));
                    i += 1;
                }
                _ => {
                    script_and_dir(out, word);
                    return;
                }
            }
        }
        missing(out);
        if !isolated {
            from_cwd(out, "");
        }
        return;
    }
    match lower.as_str() {
        "node" | "nodejs" | "deno" | "bun" => {
            let mut i = 0;
            let mut evaluates = false;
            // `deno run x.ts`, `bun run x.ts`: the subcommand comes first.
            if matches!(lower.as_str(), "deno" | "bun")
                && args
                    .first()
                    .is_some_and(|a| matches!(a.as_str(), "run" | "test" | "bench" | "serve" | "eval"))
            {
                evaluates = args[0] == "eval";
                i = 1;
            }
            while let Some(word) = args.get(i) {
                let (flag, value) = match word.split_once('=') {
                    Some((f, v)) if f.starts_with("--") => (f, Some(v)),
                    _ => (word.as_str(), None),
                };
                match flag {
                    "-e" | "--eval" | "-p" | "--print" => evaluates = true,
                    "-r" | "--require" | "--import" | "--loader" | "--experimental-loader" | "--env-file" => {
                        let module = value.map(str::to_owned).or_else(|| args.get(i + 1).cloned());
                        match module {
                            Some(m) if m.starts_with("./") || m.starts_with("../") || m.starts_with('/') => {
                                out.push(Runs::Script { by: format!("{by} {flag}"), path: m });
                            }
                            _ => from_cwd(out, flag),
                        }
                        if value.is_none() {
                            i += 1;
                        }
                    }
                    "--" => {
                        i += 1;
                        break;
                    }
                    f if f.starts_with('-') && f.len() > 1 => {}
                    _ => break,
                }
                i += 1;
            }
            match args.get(i) {
                _ if evaluates => from_cwd(out, "-e"),
                Some(file) => script_and_dir(out, file),
                None => {
                    missing(out);
                    from_cwd(out, "");
                }
            }
        }
        "perl" | "ruby" => {
            let mut i = 0;
            let mut evaluates = false;
            while let Some(word) = args.get(i) {
                match word.as_str() {
                    "-e" | "-E" => {
                        evaluates = true;
                        i += 2;
                        continue;
                    }
                    "-I" => {
                        if let Some(dir) = args.get(i + 1) {
                            out.push(Runs::ImportsFrom { by: format!("{by} -I"), dir: Some(dir.clone()) });
                        }
                        i += 2;
                        continue;
                    }
                    "-r" | "-M" | "-m" => {
                        i += 2;
                        continue;
                    }
                    "--" => {
                        i += 1;
                        break;
                    }
                    w if w.starts_with("-I") => {
                        out.push(Runs::ImportsFrom { by: format!("{by} -I"), dir: Some(w[2..].to_owned()) });
                    }
                    w if w.starts_with("-e") || w.starts_with("-E") => evaluates = true,
                    w if w.starts_with('-') && w.len() > 1 => {}
                    _ => break,
                }
                i += 1;
            }
            match args.get(i) {
                _ if evaluates => {}
                Some(file) if file != "-" => out.push(Runs::Script { by: by.clone(), path: file.clone() }),
                _ => out.push(Runs::Unknown(format!("{by} reads its program from its input"))),
            }
        }
        "java" => {
            let mut i = 0;
            let mut class_path = false;
            while let Some(word) = args.get(i) {
                match word.as_str() {
                    "-jar" => {
                        if let Some(jar) = args.get(i + 1) {
                            out.push(Runs::Script { by: "java -jar".into(), path: jar.clone() });
                        }
                        return;
                    }
                    "-cp" | "-classpath" | "--class-path" => {
                        class_path = true;
                        for dir in
                            args.get(i + 1).map(|v| v.split(':').collect::<Vec<_>>()).unwrap_or_default()
                        {
                            out.push(Runs::ImportsFrom { by: "java -cp".into(), dir: Some(dir.to_owned()) });
                        }
                        i += 2;
                        continue;
                    }
                    w if w.starts_with("-javaagent:") || w.starts_with("-agentpath:") => {
                        let path = w
                            .split_once(':')
                            .map(|(_, p)| p.split('=').next().unwrap_or(p))
                            .unwrap_or_default();
                        out.push(Runs::Script { by: "java agent".into(), path: path.to_owned() });
                    }
                    w if w.starts_with('-') => {}
                    w if w.ends_with(".java") => {
                        out.push(Runs::Script { by: "java".into(), path: w.to_owned() });
                        return;
                    }
                    _ => break,
                }
                i += 1;
            }
            if !class_path {
                from_cwd(out, "(class path .)");
            }
        }
        _ if SCRIPT_INTERPRETERS.contains(&lower.as_str()) => {
            let first = args.iter().find(|a| !a.starts_with('-'));
            match first {
                Some(file) => out.push(Runs::Script { by: by.clone(), path: file.clone() }),
                None => missing(out),
            }
        }
        _ => {}
    }
}

/// Options that name a file of code for programs that are not interpreters: `awk -f`, `sed -f`, `make -f`.
fn file_options(name: &str, args: &[String], out: &mut Vec<Runs>) {
    let (short, long): (&str, &str) = match name {
        "awk" | "gawk" | "mawk" | "nawk" | "busybox-awk" => ("-f", "--file"),
        "sed" | "gsed" => ("-f", "--file"),
        "make" | "gmake" | "bmake" => ("-f", "--file"),
        _ => return,
    };
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let file = if word == short || word == long || (name.starts_with('m') && word == "--makefile") {
            words.next().cloned()
        } else if let Some(value) = word.strip_prefix(&format!("{long}=")) {
            Some(value.to_owned())
        } else if word.starts_with(short) && word.len() > 2 && !word.starts_with("--") {
            Some(word[2..].to_owned())
        } else {
            None
        };
        if let Some(file) = file {
            out.push(Runs::Script { by: format!("{name} {short}"), path: file });
        }
    }
}

/// git's global options before the subcommand.
fn git(args: &[String]) -> GitRun {
    let mut run = GitRun::default();
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let (flag, value) = match word.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (word.as_str(), None),
        };
        let next = |i: usize| args.get(i + 1).cloned();
        match flag {
            "-C" => {
                if let Some(dir) = next(i) {
                    run.dirs.push(dir);
                }
                i += 2;
            }
            "-c" => {
                run.inline_config = true;
                i += 2;
            }
            "--config-env" => {
                run.inline_config = true;
                i += if value.is_some() { 1 } else { 2 };
            }
            "--git-dir" => {
                run.git_dir = value.clone().or_else(|| next(i));
                i += if value.is_some() { 1 } else { 2 };
            }
            "--work-tree" => {
                run.work_tree = value.clone().or_else(|| next(i));
                i += if value.is_some() { 1 } else { 2 };
            }
            "--exec-path" => {
                run.exec_path = value.clone();
                i += 1;
            }
            "--namespace" | "--super-prefix" | "--list-cmds" | "--attr-source" => {
                i += if value.is_some() { 1 } else { 2 };
            }
            w if w.starts_with("-C") && w.len() > 2 => {
                run.dirs.push(w[2..].to_owned());
                i += 1;
            }
            w if w.starts_with("-c") && w.len() > 2 => {
                run.inline_config = true;
                i += 1;
            }
            w if w.starts_with('-') => i += 1,
            _ => {
                run.subcommand = Some(word.clone());
                break;
            }
        }
    }
    run
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn argv(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    /// What the command parsed once (as every caller gets it) runs.
    fn what_runs(argv: &[String]) -> Vec<Runs> {
        crate::command::ParsedCommand::new(argv.to_vec()).runs().to_vec()
    }

    fn scripts(text: &str) -> Vec<String> {
        what_runs(&argv(text))
            .into_iter()
            .filter_map(|r| match r {
                Runs::Script { path, .. } => Some(path),
                _ => None,
            })
            .collect()
    }

    fn programs(text: &str) -> Vec<String> {
        what_runs(&argv(text))
            .into_iter()
            .filter_map(|r| match r {
                Runs::Program(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    fn imports_cwd(text: &str) -> bool {
        what_runs(&argv(text)).iter().any(|r| matches!(r, Runs::ImportsFrom { dir: None, .. }))
    }

    #[test]
    fn wrappers_are_seen_through() {
        for (command, program) in [
            ("timeout 30 ./run-tests.sh", "./run-tests.sh"),
            ("timeout -s KILL -k 5 30 ./x", "./x"),
            ("timeout --signal=TERM 30s ./x", "./x"),
            ("nice -n 5 ./x", "./x"),
            ("nice -5 ./x", "./x"),
            ("nohup ./x", "./x"),
            ("env A=b ./x", "./x"),
            ("env -i -u HOME ./x", "./x"),
            ("exec ./x", "./x"),
            ("xargs -n 1 ./x", "./x"),
            ("xargs -0 -I{} ./x {}", "./x"),
            ("stdbuf -oL ./x", "./x"),
            ("stdbuf -o L ./x", "./x"),
            ("sudo -u nobody ./x", "./x"),
            ("flock /tmp/lock ./x", "./x"),
            ("strace -f -o out ./x", "./x"),
            ("time -p ./x", "./x"),
            ("command ./x", "./x"),
            ("setsid -w ./x", "./x"),
            ("timeout 5 nice timeout 3 ./x", "./x"),
            ("watch -n 1 ./x", "./x"),
        ] {
            assert!(
                programs(command).contains(&program.to_owned()),
                "{command}: {:?}",
                what_runs(&argv(command))
            );
        }
        assert!(!programs("command -v ./x").contains(&"./x".to_owned()));
    }

    #[test]
    fn shells_and_sources_run_script_files() {
        assert_eq!(scripts("bash run-tests.sh"), ["run-tests.sh"]);
        assert_eq!(scripts("sh -e -x ./t.sh arg"), ["./t.sh"]);
        assert_eq!(scripts("bash -o pipefail t.sh"), ["t.sh"]);
        assert_eq!(scripts(". ./env.sh"), ["./env.sh"]);
        assert_eq!(scripts("source env.sh"), ["env.sh"]);
        assert_eq!(scripts("timeout 20 bash ./build.sh"), ["./build.sh"]);
        assert_eq!(scripts("bash --rcfile rc -i"), ["rc"]);
        // A -c string is walked as a script.
        assert!(programs("bash -c ./x.sh").contains(&"./x.sh".to_owned()));
        let nested = vec!["sh".to_owned(), "-ec".to_owned(), "timeout 3 ./x".to_owned()];
        assert!(what_runs(&nested).contains(&Runs::Program("./x".into())));
        for unknown in
            ["bash", "bash -s", "cat", "xargs bash", "eval", "su", "chroot / ./x", "env -C /tmp ./x"]
        {
            let runs = what_runs(&argv(unknown));
            let expect = unknown != "cat";
            assert_eq!(runs.iter().any(|r| matches!(r, Runs::Unknown(_))), expect, "{unknown}: {runs:?}");
        }
        let not_plain = vec!["bash".to_owned(), "-c".to_owned(), "./x > out".to_owned()];
        assert!(unknown_part(&what_runs(&not_plain)).is_some());
    }

    #[test]
    fn interpreters_import_from_the_working_directory_or_the_script_directory() {
        assert!(imports_cwd("python3 -m pip install x"));
        assert!(imports_cwd("python3 -c print(1)"));
        assert!(imports_cwd("python3.12 -u -m http.server"));
        assert!(!imports_cwd("python3 -I -m pip"), "isolated mode adds no directory");
        assert!(imports_cwd("node -e x"));
        assert!(imports_cwd("node -r ts-node/register x.js"));
        assert_eq!(scripts("node -r ./hook.js x.js"), ["./hook.js", "x.js"]);
        assert_eq!(scripts("python3 tools/gen.py"), ["tools/gen.py"]);
        assert!(
            what_runs(&argv("python3 tools/gen.py"))
                .contains(&Runs::ImportsFrom { by: "python3".into(), dir: Some("tools".into()) })
        );
        assert_eq!(scripts("node --require=./hook.js app.js"), ["./hook.js", "app.js"]);
        assert_eq!(scripts("perl -I lib x.pl"), ["x.pl"]);
        assert_eq!(scripts("awk -f prog.awk data"), ["prog.awk"]);
        assert_eq!(scripts("sed -f edit.sed file"), ["edit.sed"]);
        assert_eq!(scripts("make -f other.mk"), ["other.mk"]);
        assert_eq!(scripts("java -jar tool.jar"), ["tool.jar"]);
        assert!(what_runs(&argv("xargs python3")).iter().any(|r| matches!(r, Runs::Unknown(_))));
    }

    #[test]
    fn runners_run_project_files() {
        for command in
            ["make", "cargo test", "npm test", "uv run pytest", "npx eslint", "pytest -q", "pip install -e ."]
        {
            assert!(what_runs(&argv(command)).iter().any(|r| matches!(r, Runs::Project(_))), "{command}");
        }
        for command in ["cargo --version", "npm view x", "pip install requests", "ls"] {
            assert!(!what_runs(&argv(command)).iter().any(|r| matches!(r, Runs::Project(_))), "{command}");
        }
    }

    #[test]
    fn git_options_choose_the_repository() {
        let git_of = |text: &str| {
            what_runs(&argv(text))
                .into_iter()
                .find_map(|r| match r {
                    Runs::Git(g) => Some(g),
                    _ => None,
                })
                .unwrap()
        };
        let run = git_of("git -C /tmp/evil -C sub status");
        assert_eq!(run.dirs, ["/tmp/evil", "sub"]);
        assert_eq!(run.subcommand.as_deref(), Some("status"));
        assert_eq!(git_of("git --git-dir=/tmp/g --work-tree /tmp/w log").git_dir.as_deref(), Some("/tmp/g"));
        assert_eq!(
            git_of("git --git-dir=/tmp/g --work-tree /tmp/w log").work_tree.as_deref(),
            Some("/tmp/w")
        );
        assert!(git_of("git -c core.pager=x log").inline_config);
        assert!(git_of("git --config-env=core.pager=X log").inline_config);
        assert_eq!(git_of("git --exec-path=/tmp/e status").exec_path.as_deref(), Some("/tmp/e"));
        assert!(git_of("timeout 5 git -C /x status").dirs == ["/x"]);
    }

    #[test]
    fn assignments_and_directory_changes_are_listed() {
        let runs = what_runs(&argv("env PATH=/tmp/b:/usr/bin LD_PRELOAD=/tmp/x.so ls"));
        assert!(runs.contains(&Runs::Assignment { name: "PATH".into(), value: "/tmp/b:/usr/bin".into() }));
        assert!(runs.contains(&Runs::Assignment { name: "LD_PRELOAD".into(), value: "/tmp/x.so".into() }));
        assert!(what_runs(&argv("cd /tmp")).contains(&Runs::ChangesDirectory));
    }

    #[test]
    fn nesting_is_bounded() {
        let mut words = Vec::new();
        for _ in 0..(MAX_DEPTH + 3) {
            words.push("nice".to_owned());
        }
        words.push("./x".to_owned());
        assert!(what_runs(&words).iter().any(|r| matches!(r, Runs::Unknown(_))));
    }
}
