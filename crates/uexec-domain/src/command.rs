//! Commands as argv: splitting a `bash -lc` script into plain sub-commands, the known-safe (read-only) command
//! classifier of the `untrusted` approval policy, and the canonical form used as an approval cache key (spec A6).
//!
//! A command is parsed once per call into a [`ParsedCommand`]: its words, the shell and how it was named, the
//! script's plain commands, every command it runs in order, whether its words only read, and what it says of
//! `apply_patch`. The known-safe rule, the command rules, prefix offers and approvals, the approval key and the
//! text a person reads all take that value; nothing outside this module splits a script again.
//!
//! The splitter is deliberately small and conservative: it accepts only scripts whose meaning is a list of plain
//! commands with literal words, and answers `None` for everything else, so nothing it cannot fully understand is
//! ever classified as safe.

/// Shells whose `-c` / `-lc` scripts are split into sub-commands.
const SHELLS: [&str; 3] = ["bash", "sh", "zsh"];

/// Commands that are read-only whatever their arguments.
const ALWAYS_SAFE: [&str; 23] = [
    "cat", "cd", "cut", "echo", "expr", "false", "grep", "head", "id", "ls", "nl", "paste", "pwd", "rev",
    "seq", "stat", "tail", "tr", "true", "uname", "wc", "which", "whoami",
];

/// `find` options that execute commands, delete or write files.
const FIND_UNSAFE_OPTIONS: [&str; 9] =
    ["-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint", "-fprint0", "-fprintf"];

/// `git` subcommands that only read (given no unsafe option, see [`git_option_is_unsafe`]).
const GIT_READ_ONLY_SUBCOMMANDS: [&str; 12] = [
    "status",
    "log",
    "diff",
    "show",
    "blame",
    "grep",
    "ls-files",
    "ls-tree",
    "rev-parse",
    "describe",
    "shortlog",
    "cat-file",
];

/// `git branch` flags that only list branches.
const GIT_BRANCH_LIST_FLAGS: [&str; 12] = [
    "-a",
    "--all",
    "-r",
    "--remotes",
    "-v",
    "-vv",
    "--verbose",
    "--show-current",
    "--no-color",
    "--color",
    "-l",
    "--list",
];

/// Shell reserved words: a script using one is not a plain command list.
const RESERVED_WORDS: [&str; 17] = [
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "function",
    "select", "time", "coproc", "in",
];

/// How deep `bash -lc "bash -lc '...'"` nesting is followed before giving up (not safe).
pub const MAX_SHELL_NESTING: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `&&`, `||` or `|`: a command must follow.
    Join,
    /// `;`: ends a command.
    Semicolon,
    /// A newline: ends a command if there is one.
    Newline,
}

#[derive(Debug, Default)]
struct Word {
    text: String,
    /// Some part of the word was quoted or escaped.
    quoted: bool,
    /// The word contains an unquoted `=` (an assignment in command position).
    unquoted_eq: bool,
}

#[derive(Debug)]
enum Token {
    Word(Word),
    Op(Op),
}

/// Splits a shell script into tokens, or `None` if it uses anything beyond literal words and list operators.
fn tokenize(script: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut word: Option<Word> = None;
    let mut chars = script.chars().peekable();
    let finish = |word: &mut Option<Word>, tokens: &mut Vec<Token>| {
        if let Some(w) = word.take() {
            tokens.push(Token::Word(w));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => finish(&mut word, &mut tokens),
            '\n' => {
                finish(&mut word, &mut tokens);
                tokens.push(Token::Op(Op::Newline));
            }
            ';' => {
                finish(&mut word, &mut tokens);
                if chars.peek() == Some(&';') || chars.peek() == Some(&'&') {
                    return None;
                }
                tokens.push(Token::Op(Op::Semicolon));
            }
            '&' => {
                finish(&mut word, &mut tokens);
                // A single `&` (a background job) is not a plain command list.
                chars.next_if_eq(&'&')?;
                tokens.push(Token::Op(Op::Join));
            }
            '|' => {
                finish(&mut word, &mut tokens);
                if chars.peek() == Some(&'&') {
                    return None; // `|&` also pipes stderr; keep it simple
                }
                chars.next_if_eq(&'|');
                tokens.push(Token::Op(Op::Join));
            }
            '\'' => {
                let w = word.get_or_insert_with(Word::default);
                w.quoted = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        other => w.text.push(other),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(Word::default);
                w.quoted = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '$' | '`' => return None,
                        '\\' => match chars.next()? {
                            escaped @ ('$' | '`' | '"' | '\\') => w.text.push(escaped),
                            '\n' => {}
                            other => {
                                w.text.push('\\');
                                w.text.push(other);
                            }
                        },
                        other => w.text.push(other),
                    }
                }
            }
            '\\' => match chars.next()? {
                '\n' => {} // line continuation
                escaped => {
                    let w = word.get_or_insert_with(Word::default);
                    w.quoted = true;
                    w.text.push(escaped);
                }
            },
            // Expansions, redirections, subshells, groups, globs, tilde, history and negation.
            '$' | '`' | '<' | '>' | '(' | ')' | '{' | '}' | '*' | '?' | '[' | ']' | '~' | '!' => return None,
            '#' if word.is_none() => return None, // a comment
            '=' => {
                let w = word.get_or_insert_with(Word::default);
                w.unquoted_eq = true;
                w.text.push('=');
            }
            other => word.get_or_insert_with(Word::default).text.push(other),
        }
    }
    finish(&mut word, &mut tokens);
    Some(tokens)
}

/// How the shell of a `[shell, -lc|-c, script]` command was named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellNaming {
    /// Bare (`bash`): the one found on `PATH`.
    Bare,
    /// By its path in a system directory (`/bin/bash`, `/usr/bin/zsh`).
    SystemPath,
    /// By any other path (`./bash`, `/tmp/x/bash`, a caller's `shell` argument): it may be any program a caller
    /// planted under that name, so its script says nothing about what runs.
    OtherPath,
}

impl ShellNaming {
    /// Whether the shell is trusted to be the real bash, sh or zsh.
    pub fn is_trusted(self) -> bool {
        self != ShellNaming::OtherPath
    }
}

/// What a shell script says of `apply_patch` (`crate::patch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyPatchForm {
    /// Nothing: not a shell script, or a script without an `apply_patch` call.
    Absent,
    /// The whole script is one `apply_patch` call (after a prelude of `cd`/`set` commands).
    Whole(crate::patch::PatchInvocation),
    /// The script is a bare patch (`*** Begin Patch` ...), which a shell would run line by line.
    BarePatch,
    /// An `apply_patch` call among other commands, which a shell would answer with "command not found".
    AmongOthers,
}

/// A command as every rule reads it, parsed once per call: its argv (which it dereferences to) and what the
/// rules need of it. Serialized as its argv; built from one with [`ParsedCommand::new`] or `From<Vec<String>>`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "Vec<String>", into = "Vec<String>")]
pub struct ParsedCommand {
    argv: Vec<String>,
    /// How the shell was named, when `argv` is `[bash|sh|zsh, -lc|-c, script]`.
    shell: Option<ShellNaming>,
    /// The script's plain commands (whatever the shell's naming), `None` when the splitter refuses it.
    script_commands: Option<Vec<Vec<String>>>,
    /// Every command it runs, in order ([`ParsedCommand::commands_in_order`]).
    in_order: Option<Vec<Vec<String>>>,
    read_only: bool,
    apply_patch: ApplyPatchForm,
    /// What it runs ([`crate::runs::what_runs`], with this module's splitter).
    runs: Vec<crate::runs::Runs>,
}

impl ParsedCommand {
    /// Parse `argv` (each script once, nested scripts included).
    pub fn new(argv: Vec<String>) -> Self {
        let script = shell_script(&argv);
        let shell = script.and_then(|_| argv.first()).map(|shell| shell_naming(shell));
        let script_commands = script.and_then(parse_plain_script);
        let mut in_order = Vec::new();
        let in_order = walk(&argv, script_commands.as_deref(), 0, &mut in_order).map(|()| in_order);
        let read_only = in_order.as_deref().is_some_and(|commands| {
            commands.iter().all(|command| match shell_script(command) {
                Some(_) => trusted_shell_script(command).is_some(),
                None => program_is_read_only(command),
            })
        });
        let apply_patch = match &argv[..] {
            [shell, _, script] if is_patch_shell(shell) => apply_patch_form(script),
            _ => ApplyPatchForm::Absent,
        };
        let runs = crate::runs::what_runs(&argv, &parse_plain_script);
        ParsedCommand { argv, shell, script_commands, in_order, read_only, apply_patch, runs }
    }

    /// The words.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The script of `[shell, -lc|-c, script]` when the shell is bash, sh or zsh, however it was named.
    pub fn script(&self) -> Option<&str> {
        self.shell.and_then(|_| self.argv.get(2)).map(String::as_str)
    }

    /// How the shell was named, when the command is a shell script.
    pub fn shell_naming(&self) -> Option<ShellNaming> {
        self.shell
    }

    /// The script when the shell is trusted to be the real bash, sh or zsh ([`ShellNaming::is_trusted`]).
    pub fn trusted_script(&self) -> Option<&str> {
        self.script().filter(|_| self.shell.is_some_and(ShellNaming::is_trusted))
    }

    /// A shell script whose shell was named by a path that may hold any program.
    pub fn untrusted_shell(&self) -> bool {
        self.shell == Some(ShellNaming::OtherPath)
    }

    /// The script's plain commands, whatever its shell's naming; `None` when it is not a script or the
    /// splitter refuses it ([`parse_plain_script`]).
    pub fn script_commands(&self) -> Option<&[Vec<String>]> {
        self.script_commands.as_deref()
    }

    /// The plain commands a person reads the command as: a trusted shell's script's commands, or the argv
    /// itself when it is not a shell script; `None` for a shell named by an untrusted path or a script the
    /// splitter refuses (nothing can be said of what runs).
    pub fn plain_commands(&self) -> Option<Vec<&[String]>> {
        match self.shell {
            None => Some(vec![&self.argv[..]]),
            Some(naming) if naming.is_trusted() => {
                Some(self.script_commands.as_ref()?.iter().map(Vec::as_slice).collect())
            }
            Some(_) => None,
        }
    }

    /// Every command it runs, in the order a shell runs them: the argv itself and, when it is a trusted shell
    /// script, each of its sub-commands (and theirs, for nested shells), depth first. `None` when a script
    /// cannot be split or nests deeper than [`MAX_SHELL_NESTING`]. The known-safe rule walks this list to learn
    /// which programs run, which shells start, and whether a `cd` comes before a `git`.
    pub fn commands_in_order(&self) -> Option<&[Vec<String>]> {
        self.in_order.as_deref()
    }

    /// True when its words only read: the plain commands of spec A6 with any arguments, read-only forms of
    /// `find`, `git`, `sed -n`, `rg` and `uniq`, and trusted shell scripts all of whose sub-commands are
    /// read-only. Programs named with a path (`/bin/ls`, `./ls`) are not. This judges the words only: a command
    /// is known safe when, in addition, nothing it runs was chosen by a writable file
    /// ([`crate::known_safe::check_known_safe`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The command as an approval cache key: a trusted shell script that is exactly one plain command is that
    /// command's argv; anything else is the argv unchanged.
    pub fn canonical(&self) -> Vec<String> {
        match self.plain_commands().as_deref() {
            Some([only]) if self.shell.is_some() => only.to_vec(),
            _ => self.argv.clone(),
        }
    }

    /// Everything it runs, read by one model of wrappers, shells, interpreters, runners and git's options
    /// ([`crate::runs`]).
    pub fn runs(&self) -> &[crate::runs::Runs] {
        &self.runs
    }

    /// What the script says of `apply_patch`.
    pub fn apply_patch(&self) -> &ApplyPatchForm {
        &self.apply_patch
    }

    /// The same shell script run with `-lc` (`login`) or `-c`: the flag changes nothing the parse found.
    pub fn with_login(mut self, login: bool) -> Self {
        if self.shell.is_some() {
            let flag = if login { "-lc" } else { "-c" };
            self.argv[1] = flag.to_owned();
            if let Some(first) = self.in_order.as_mut().and_then(|commands| commands.first_mut()) {
                first[1] = flag.to_owned();
            }
        }
        self
    }
}

impl std::ops::Deref for ParsedCommand {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.argv
    }
}

impl From<Vec<String>> for ParsedCommand {
    fn from(argv: Vec<String>) -> Self {
        ParsedCommand::new(argv)
    }
}

impl From<ParsedCommand> for Vec<String> {
    fn from(command: ParsedCommand) -> Self {
        command.argv
    }
}

impl PartialEq<Vec<String>> for ParsedCommand {
    fn eq(&self, other: &Vec<String>) -> bool {
        &self.argv == other
    }
}

fn shell_naming(shell: &str) -> ShellNaming {
    if !shell.contains('/') {
        ShellNaming::Bare
    } else if SYSTEM_SHELL_DIRS
        .iter()
        .any(|dir| shell.strip_prefix(dir).is_some_and(|name| !name.contains('/')))
    {
        ShellNaming::SystemPath
    } else {
        ShellNaming::OtherPath
    }
}

/// Shells whose scripts are read for an `apply_patch` call (by name, wherever they are: the call is never run
/// by the shell but by the configured patch program).
fn is_patch_shell(shell: &str) -> bool {
    let name = shell.rsplit('/').next().unwrap_or(shell);
    SHELLS.contains(&name)
}

fn apply_patch_form(script: &str) -> ApplyPatchForm {
    if let Some(call) = crate::patch::shell_invocation(script) {
        ApplyPatchForm::Whole(call)
    } else if crate::patch::parse_patch(script).is_ok() {
        ApplyPatchForm::BarePatch
    } else if crate::patch::calls_apply_patch(script) {
        ApplyPatchForm::AmongOthers
    } else {
        ApplyPatchForm::Absent
    }
}

/// Pushes `argv` and, when it is a trusted shell script (whose plain commands are `commands`), the commands it
/// runs, depth first; `None` when a script cannot be split or nests too deep. Each nested script is split once.
fn walk(
    argv: &[String],
    commands: Option<&[Vec<String>]>,
    depth: usize,
    out: &mut Vec<Vec<String>>,
) -> Option<()> {
    out.push(argv.to_vec());
    if trusted_shell_script(argv).is_none() {
        return Some(());
    }
    if depth >= MAX_SHELL_NESTING {
        return None;
    }
    for command in commands? {
        let nested = trusted_shell_script(command).and_then(parse_plain_script);
        walk(command, nested.as_deref(), depth + 1, out)?;
    }
    Some(())
}

/// Splits a `bash -lc` script into its plain sub-commands (argv each), joined by `&&`, `||`, `;`, `|` or
/// newlines. Words may be bare, single-quoted, double-quoted (without `$` or backticks inside) or
/// backslash-escaped. Anything else gives `None`: redirections, subshells, command or variable substitution,
/// unquoted glob, brace or tilde characters, comments, background jobs, assignments (`A=b cmd`), reserved
/// words, empty commands, and empty scripts.
pub fn parse_plain_script(script: &str) -> Option<Vec<Vec<String>>> {
    let mut commands: Vec<Vec<String>> = Vec::new();
    let mut current: Vec<Word> = Vec::new();
    // True after `&&`, `||` or `|`: a command must follow.
    let mut expect_command = false;
    let push = |current: &mut Vec<Word>, commands: &mut Vec<Vec<String>>| -> Option<()> {
        let first = current.first()?;
        if first.unquoted_eq || (!first.quoted && RESERVED_WORDS.contains(&first.text.as_str())) {
            return None;
        }
        commands.push(current.drain(..).map(|w| w.text).collect());
        Some(())
    };
    for token in tokenize(script)? {
        match token {
            Token::Word(word) => {
                current.push(word);
                expect_command = false;
            }
            Token::Op(Op::Join) => {
                push(&mut current, &mut commands)?;
                expect_command = true;
            }
            Token::Op(Op::Semicolon) => push(&mut current, &mut commands)?,
            Token::Op(Op::Newline) => {
                if !current.is_empty() {
                    push(&mut current, &mut commands)?;
                }
            }
        }
    }
    if !current.is_empty() {
        push(&mut current, &mut commands)?;
    }
    if expect_command || commands.is_empty() {
        return None;
    }
    Some(commands)
}

/// The script of `[shell, "-lc" | "-c", script]` when `shell` (possibly with a directory) is bash, sh or zsh.
fn shell_script(argv: &[String]) -> Option<&str> {
    let [shell, flag, script] = argv else {
        return None;
    };
    let name = shell.rsplit('/').next().unwrap_or(shell);
    (SHELLS.contains(&name) && (flag == "-lc" || flag == "-c")).then_some(script.as_str())
}

/// Directories whose shells are trusted to be the real bash, sh or zsh.
const SYSTEM_SHELL_DIRS: [&str; 6] = [
    "/bin/",
    "/usr/bin/",
    "/usr/local/bin/",
    "/opt/homebrew/bin/",
    "/run/current-system/sw/bin/",
    "/usr/pkg/bin/",
];

/// The script of `[shell, "-lc" | "-c", script]` when `shell` is bash, sh or zsh named bare (found on `PATH`) or
/// by its path in a system directory. A shell named by any other path (`./bash`, `/tmp/x/bash`, the `shell`
/// argument of a call) may be any program the caller planted under that name: its "script" says nothing about
/// what runs, so it is neither known-safe nor keyed as the script's command.
fn trusted_shell_script(argv: &[String]) -> Option<&str> {
    let script = shell_script(argv)?;
    shell_naming(argv.first()?).is_trusted().then_some(script)
}

/// Whether one plain command (not a shell script) only reads, by its program and arguments.
fn program_is_read_only(argv: &[String]) -> bool {
    let Some((program, args)) = argv.split_first() else {
        return false;
    };
    match program.as_str() {
        name if ALWAYS_SAFE.contains(&name) => true,
        "find" => !args.iter().any(|a| FIND_UNSAFE_OPTIONS.contains(&a.as_str())),
        "rg" => is_safe_rg(args),
        "git" => is_safe_git(args),
        "sed" => is_safe_sed(args),
        "uniq" => is_safe_uniq(args),
        _ => false,
    }
}

/// `rg` without options that run other programs (`--pre`, `--hostname-bin`, `-z`/`--search-zip`).
fn is_safe_rg(args: &[String]) -> bool {
    !args.iter().any(|arg| {
        let arg = arg.as_str();
        arg == "--pre"
            || arg.starts_with("--pre=")
            || arg == "--hostname-bin"
            || arg.starts_with("--hostname-bin=")
            || arg == "--search-zip"
            || (arg.starts_with('-') && !arg.starts_with("--") && arg.contains('z'))
    })
}

/// `git [--no-pager] <read-only subcommand> <args>` without options that write files or run programs. Any other
/// global option (`-c`, `-C`, `--git-dir`, ...) makes it unsafe: `-c` can set a pager or hook command.
fn is_safe_git(args: &[String]) -> bool {
    let args = match args.split_first() {
        Some((first, rest)) if first == "--no-pager" => rest,
        _ => args,
    };
    let Some((subcommand, rest)) = args.split_first() else {
        return false;
    };
    if rest.iter().any(|arg| git_option_is_unsafe(arg)) {
        return false;
    }
    match subcommand.as_str() {
        "branch" => {
            let listing = rest.iter().any(|a| a == "--list" || a == "-l");
            rest.iter()
                .all(|a| GIT_BRANCH_LIST_FLAGS.contains(&a.as_str()) || (listing && !a.starts_with('-')))
        }
        name => GIT_READ_ONLY_SUBCOMMANDS.contains(&name),
    }
}

/// Long options of read-only git subcommands that write files or run programs.
const GIT_UNSAFE_LONG_OPTIONS: [&str; 5] =
    ["--output", "--ext-diff", "--exec", "--open-files-in-pager", "--paginate"];

/// Options of read-only git subcommands that write files or run programs. Git's option parser accepts any
/// unambiguous abbreviation of a long option (`git grep --open-files-in='sh -c ...'` runs a shell command), so a
/// long option whose name is a prefix of an unsafe one (`--o`, `--open`, `--out`, ...) is unsafe too, and short
/// option clusters carry `-O<pager>` anywhere (`git grep -nO'sh -c ...'`), so any `O` in a cluster is unsafe.
fn git_option_is_unsafe(arg: &str) -> bool {
    if let Some(long) = arg.strip_prefix("--") {
        let name = long.split_once('=').map_or(long, |(name, _)| name);
        return !name.is_empty()
            && GIT_UNSAFE_LONG_OPTIONS.iter().any(|unsafe_option| {
                let unsafe_name = &unsafe_option[2..];
                unsafe_name.starts_with(name) || name.starts_with(unsafe_name)
            });
    }
    arg.starts_with('-') && arg.contains('O')
}

/// `sed -n <N>p|<N>,<M>p [file...]`: printing a line range.
fn is_safe_sed(args: &[String]) -> bool {
    let [flag, script, files @ ..] = args else {
        return false;
    };
    flag == "-n" && is_line_range_print(script) && files.iter().all(|f| !f.starts_with('-'))
}

/// `N p` or `N,M p` with decimal line numbers.
fn is_line_range_print(script: &str) -> bool {
    let Some(range) = script.strip_suffix('p') else {
        return false;
    };
    let is_number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match range.split_once(',') {
        Some((from, to)) => is_number(from) && is_number(to),
        None => is_number(range),
    }
}

/// `uniq [options] [input]`: a second operand would be an output file.
fn is_safe_uniq(args: &[String]) -> bool {
    let mut operands = 0;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-f" | "-s" | "-w" => {
                iter.next();
            }
            // After `--` every argument is an operand (`uniq -- in -out` writes `-out`).
            "--" => {
                operands += iter.count();
                break;
            }
            "-" => operands += 1,
            a if a.starts_with('-') => {}
            _ => operands += 1,
        }
    }
    operands <= 1
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    fn bash(script: &str) -> Vec<String> {
        argv(&["bash", "-lc", script])
    }

    fn cmds(commands: &[&[&str]]) -> Option<Vec<Vec<String>>> {
        Some(commands.iter().map(|c| argv(c)).collect())
    }

    fn is_known_safe_command(argv: &[String]) -> bool {
        ParsedCommand::new(argv.to_vec()).is_read_only()
    }

    fn canonical_command(argv: &[String]) -> Vec<String> {
        ParsedCommand::new(argv.to_vec()).canonical()
    }

    #[test]
    fn splits_plain_lists() {
        assert_eq!(parse_plain_script("ls -la"), cmds(&[&["ls", "-la"]]));
        assert_eq!(
            parse_plain_script("ls && pwd || echo 'a b' ; cat x | wc -l"),
            cmds(&[&["ls"], &["pwd"], &["echo", "a b"], &["cat", "x"], &["wc", "-l"]])
        );
        assert_eq!(parse_plain_script("echo \"a 'b' \\\"c\\\"\""), cmds(&[&["echo", "a 'b' \"c\""]]));
        assert_eq!(parse_plain_script("echo a\\ b"), cmds(&[&["echo", "a b"]]));
        assert_eq!(parse_plain_script("ls;"), cmds(&[&["ls"]]));
        assert_eq!(parse_plain_script("\nls &&\n  pwd\n\n"), cmds(&[&["ls"], &["pwd"]]));
        assert_eq!(parse_plain_script("echo ''"), cmds(&[&["echo", ""]]));
        assert_eq!(parse_plain_script("git log --format=%H"), cmds(&[&["git", "log", "--format=%H"]]));
        assert_eq!(parse_plain_script("echo a#b"), cmds(&[&["echo", "a#b"]]));
        assert_eq!(parse_plain_script("'if' x"), cmds(&[&["if", "x"]]));
    }

    #[test]
    fn rejects_anything_but_plain_commands() {
        for script in [
            "",
            "   ",
            "ls > out",
            "ls 2>&1",
            "cat < in",
            "echo $(id)",
            "echo `id`",
            "echo $HOME",
            "echo \"$HOME\"",
            "echo \"`id`\"",
            "(ls)",
            "{ ls; }",
            "ls *.rs",
            "ls ?",
            "ls [ab]",
            "ls ~",
            "! ls",
            "ls # comment",
            "sleep 1 &",
            "A=b ls",
            "ls &&",
            "&& ls",
            "ls | | wc",
            "; ls",
            "ls ;; pwd",
            "ls |& wc",
            "echo 'unterminated",
            "echo \"unterminated",
            "echo \\",
            "if true; then ls; fi",
            "for x in a; do ls; done",
            "cat <<EOF\nx\nEOF",
        ] {
            assert_eq!(parse_plain_script(script), None, "{script:?}");
        }
    }

    #[test]
    fn known_safe_plain_commands() {
        for cmd in [
            argv(&["ls", "-la"]),
            argv(&["cat", "Cargo.toml"]),
            argv(&["grep", "-rn", "foo", "."]),
            argv(&["wc", "-l", "x"]),
            argv(&["find", ".", "-name", "*.rs", "-type", "f"]),
            argv(&["git", "status"]),
            argv(&["git", "log", "--oneline", "-n", "5"]),
            argv(&["git", "--no-pager", "diff", "HEAD~1"]),
            argv(&["git", "branch"]),
            argv(&["git", "branch", "--list", "feat*"]),
            argv(&["sed", "-n", "1,20p", "file.txt"]),
            argv(&["sed", "-n", "5p"]),
            argv(&["rg", "-n", "TODO", "src"]),
            argv(&["uniq", "-c", "in.txt"]),
            bash("ls && pwd"),
            bash("cat a | grep b | wc -l"),
            argv(&["/bin/bash", "-c", "git status; git diff"]),
            argv(&["zsh", "-lc", "bash -lc 'ls'"]),
        ] {
            assert!(is_known_safe_command(&cmd), "{cmd:?}");
        }
    }

    #[test]
    fn not_known_safe() {
        for cmd in [
            argv(&[]),
            argv(&["rm", "-rf", "x"]),
            argv(&["/bin/ls"]),
            argv(&["./ls"]),
            argv(&["find", ".", "-exec", "rm", "{}", ";"]),
            bash("find . -exec rm {} \\;"),
            argv(&["find", ".", "-delete"]),
            argv(&["find", "-delete"]),
            argv(&["find", ".", "-fprint", "out"]),
            argv(&["git", "push"]),
            argv(&["git", "checkout", "main"]),
            argv(&["git", "-c", "core.pager=x", "log"]),
            argv(&["git", "-C", "/tmp", "status"]),
            argv(&["git", "diff", "--output=x.patch"]),
            argv(&["git", "diff", "--ext-diff"]),
            argv(&["git", "grep", "-Ovim", "foo"]),
            argv(&["git", "branch", "new-branch"]),
            argv(&["git", "branch", "-D", "old"]),
            argv(&["git"]),
            argv(&["sed", "-i", "s/a/b/", "f"]),
            argv(&["sed", "-n", "s/a/b/w out", "f"]),
            argv(&["sed", "s/a/b/", "f"]),
            argv(&["rg", "--pre", "sh", "x"]),
            argv(&["rg", "--pre=sh", "x"]),
            argv(&["rg", "-z", "x"]),
            argv(&["rg", "--search-zip", "x"]),
            argv(&["uniq", "in", "out"]),
            bash("ls && rm x"),
            bash("ls > out"),
            bash("echo $(id)"),
            bash("ls; git push"),
            argv(&["bash", "-lc", "ls", "extra"]),
            argv(&["bash", "-x", "ls"]),
            argv(&["fish", "-c", "ls"]),
            argv(&["python3", "-c", "print(1)"]),
        ] {
            assert!(!is_known_safe_command(&cmd), "{cmd:?}");
        }
    }

    /// Regressions: each of these ran a program or wrote a file without approval under `untrusted`.
    #[test]
    fn abbreviations_clusters_operands_and_planted_shells_are_not_known_safe() {
        for cmd in [
            // git's option parser accepts unambiguous abbreviations: runs `sh -c 'touch x'` on the matches.
            argv(&["git", "grep", "--open-files-in=touch x", "foo"]),
            argv(&["git", "grep", "--open=touch x", "foo"]),
            argv(&["git", "grep", "--op", "foo"]),
            bash("git grep --open-files-in='touch x' foo"),
            // `-O<pager>` inside a short option cluster.
            argv(&["git", "grep", "-nOtouch x", "foo"]),
            argv(&["git", "grep", "-iO", "foo"]),
            argv(&["git", "diff", "--out=x.patch"]),
            argv(&["git", "log", "--pag"]),
            // After `--` the second operand is uniq's output file.
            argv(&["uniq", "--", "in", "-out"]),
            argv(&["uniq", "-c", "--", "in", "out"]),
            // A shell named by a path outside the system directories may be any planted program.
            argv(&["./bash", "-lc", "ls"]),
            argv(&["tools/sh", "-c", "ls"]),
            argv(&["/var/tmp/ws/bash", "-lc", "ls"]),
            argv(&["/bin/../var/tmp/bash", "-lc", "ls"]),
            argv(&["bash", "-lc", "./bash -lc ls"]),
        ] {
            assert!(!is_known_safe_command(&cmd), "{cmd:?}");
        }
        // Their allowed twins.
        for cmd in [
            argv(&["git", "grep", "-n", "foo"]),
            argv(&["git", "grep", "--or", "-e", "a", "-e", "b"]),
            argv(&["git", "log", "--oneline", "--pretty=format:%h"]),
            argv(&["uniq", "-c", "in"]),
            argv(&["uniq", "--", "in"]),
            argv(&["/bin/bash", "-lc", "ls"]),
            argv(&["/usr/bin/zsh", "-c", "ls"]),
            argv(&["sh", "-c", "ls"]),
        ] {
            assert!(is_known_safe_command(&cmd), "{cmd:?}");
        }
        // A planted shell is keyed by its whole argv, not as the script's command.
        assert_eq!(canonical_command(&argv(&["./bash", "-lc", "ls"])), argv(&["./bash", "-lc", "ls"]));
        assert_eq!(canonical_command(&argv(&["/bin/bash", "-lc", "ls"])), argv(&["ls"]));
    }

    #[test]
    fn shell_nesting_is_bounded() {
        let mut cmd = argv(&["ls"]);
        for _ in 0..MAX_SHELL_NESTING {
            cmd = bash(&shell_quote(&cmd));
        }
        assert!(is_known_safe_command(&cmd));
        let deeper = bash(&shell_quote(&cmd));
        assert!(!is_known_safe_command(&deeper));
    }

    /// Quotes argv as a shell script (single quotes, `'\''` for a quote).
    fn shell_quote(argv: &[String]) -> String {
        argv.iter().map(|w| format!("'{}'", w.replace('\'', "'\\''"))).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn canonical_command_unwraps_single_plain_commands() {
        assert_eq!(canonical_command(&bash("git status --short")), argv(&["git", "status", "--short"]));
        assert_eq!(canonical_command(&argv(&["/bin/sh", "-c", "'ls' -l"])), argv(&["ls", "-l"]));
        assert_eq!(canonical_command(&bash("ls && pwd")), bash("ls && pwd"));
        assert_eq!(canonical_command(&bash("ls > out")), bash("ls > out"));
        assert_eq!(canonical_command(&argv(&["ls", "-l"])), argv(&["ls", "-l"]));
    }

    #[test]
    fn a_parsed_command_names_its_shell_and_its_apply_patch_form() {
        let naming = |shell: &str| ParsedCommand::new(argv(&[shell, "-c", "ls"])).shell_naming();
        assert_eq!(naming("bash"), Some(ShellNaming::Bare));
        assert_eq!(naming("/usr/bin/zsh"), Some(ShellNaming::SystemPath));
        assert_eq!(naming("/tmp/x/bash"), Some(ShellNaming::OtherPath));
        assert_eq!(naming("/bin/x/bash"), Some(ShellNaming::OtherPath));
        assert_eq!(naming("python3"), None);
        let planted = ParsedCommand::new(argv(&["./bash", "-lc", "ls && pwd"]));
        assert!(planted.untrusted_shell() && planted.trusted_script().is_none());
        assert_eq!(planted.script_commands(), cmds(&[&["ls"], &["pwd"]]).as_deref());
        assert_eq!(planted.plain_commands(), None, "what a planted shell runs cannot be read");
        assert!(!planted.is_read_only());
        let plain = ParsedCommand::new(argv(&["git", "status"]));
        assert_eq!(plain.plain_commands(), Some(vec![plain.argv()]));

        let patch = "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n";
        let whole = ParsedCommand::new(bash(&format!("apply_patch <<'EOF'\n{patch}EOF\n")));
        assert!(
            matches!(whole.apply_patch(), ApplyPatchForm::Whole(call) if call.patch.trim_end() == patch.trim_end()),
            "{whole:?}"
        );
        assert_eq!(ParsedCommand::new(bash(patch)).apply_patch(), &ApplyPatchForm::BarePatch);
        let among = bash(&format!("ls && apply_patch <<'EOF'\n{patch}EOF\n"));
        assert_eq!(ParsedCommand::new(among).apply_patch(), &ApplyPatchForm::AmongOthers);
        assert_eq!(ParsedCommand::new(bash("ls")).apply_patch(), &ApplyPatchForm::Absent);
        assert_eq!(ParsedCommand::new(argv(&["apply_patch", patch])).apply_patch(), &ApplyPatchForm::Absent);
    }

    #[test]
    fn a_parsed_command_serializes_as_its_argv() {
        let command = ParsedCommand::new(bash("git status"));
        let json = serde_json::to_value(&command).unwrap();
        assert_eq!(json, serde_json::json!(["bash", "-lc", "git status"]));
        assert_eq!(serde_json::from_value::<ParsedCommand>(json).unwrap(), command);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Changing the login flag of a parsed command is parsing the command with that flag.
        #[test]
        fn the_login_flag_changes_nothing_the_parse_found(
            script in "[a-z '\"\\\\;|&=#\n-]{0,30}",
            shell in prop_oneof![Just("bash"), Just("/bin/sh"), Just("./zsh"), Just("python3")],
            login: bool,
        ) {
            let flag = if login { "-lc" } else { "-c" };
            let other = if login { "-c" } else { "-lc" };
            let switched = ParsedCommand::new(argv(&[shell, other, &script])).with_login(login);
            let parsed = ParsedCommand::new(argv(&[shell, flag, &script]));
            if parsed.shell_naming().is_some() {
                prop_assert_eq!(switched, parsed);
            }
        }

        /// Quoting any argv and splitting it again gives the argv back.
        #[test]
        fn quoted_argv_round_trips(words in proptest::collection::vec("[ -~\u{e9}\n]{0,12}", 1..6)) {
            // Quoted words are literal: even `if` or `A=b` in command position is just a program name.
            let script = shell_quote(&words);
            prop_assert_eq!(parse_plain_script(&script), Some(vec![words]));
        }

        /// Whatever a script splits into, quoting those commands again and joining them gives the same split;
        /// and the splitter never panics.
        #[test]
        fn split_scripts_requote_to_the_same_commands(script in "[a-z '\"\\\\;|&=#\n-]{0,30}") {
            if let Some(commands) = parse_plain_script(&script) {
                let requoted = commands.iter().map(|c| shell_quote(c)).collect::<Vec<_>>().join(" && ");
                prop_assert_eq!(parse_plain_script(&requoted), Some(commands));
            }
        }
    }
}
