//! Configured command rules: argv prefixes that are always allowed, always asked about, or forbidden.
//!
//! Evaluation: a `[shell, -lc, script]` whose script splits into plain sub-commands (see
//! [`ParsedCommand::script_commands`]) is judged per sub-command; any other argv (including an unparseable
//! script) is judged as a whole. For one command, the matching rule with the longest prefix decides (equal
//! lengths: the more restrictive). Across sub-commands the most restrictive decision wins (Forbid > Ask > Allow),
//! and `Allow` holds only when every sub-command is allowed: `ls && rm x` with only an `ls` rule has no decision.
//!
//! Prefix rules alone are easy to get around (`command git push`, `git -c x push`, `/usr/bin/git push`, or
//! `git push 2>&1 | head`, a script the splitter refuses). So a command that mentions every word of a `forbid` or
//! `ask` rule's prefix without starting with it needs at least a person's approval (`Ask`): for a plain command,
//! the prefix's words appear in order (paths compared by their last component); for an unparseable script, they
//! appear anywhere as loose tokens. A false alarm (`echo git push`) costs a question; a miss would run what the
//! rules forbid.

use serde::{Deserialize, Serialize};

use crate::command::ParsedCommand;

/// What a rule says about a matching command. Ordered from least to most restrictive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleDecision {
    /// Run without asking.
    Allow,
    /// Ask a person first.
    Ask,
    /// Refuse.
    Forbid,
}

/// One rule: commands whose argv starts with `prefix` get `decision`. An empty prefix matches every command.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixRule {
    /// The argv prefix, word by word.
    pub prefix: Vec<String>,
    /// The decision for matching commands.
    pub decision: RuleDecision,
}

/// The configured rules.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommandRules {
    /// The rules, in any order.
    pub rules: Vec<PrefixRule>,
}

impl CommandRules {
    /// The decision for `argv` (see the module docs), or `None` when the rules say nothing.
    pub fn evaluate(&self, command: &ParsedCommand) -> Option<RuleDecision> {
        let mut commands: Vec<&[String]> = match command.script_commands() {
            Some(script) => script.iter().map(Vec::as_slice).collect(),
            None => vec![command.argv()],
        };
        // A shell named by an untrusted path may be any program: its sub-commands still count (a `forbid` among
        // them forbids), but an `allow` needs the whole argv allowed too.
        if command.untrusted_shell() {
            commands.push(command.argv());
        }
        let decisions: Vec<Option<RuleDecision>> = commands.iter().map(|c| self.evaluate_one(c)).collect();
        let suspected = if commands.iter().any(|c| self.mentions_restricted_rule(c)) {
            Some(RuleDecision::Ask)
        } else {
            self.suspected_in_unparsed_script(command)
        };
        let Some(strictest) = decisions.iter().flatten().max().copied() else {
            return suspected;
        };
        if strictest == RuleDecision::Allow && decisions.iter().any(Option::is_none) {
            return suspected;
        }
        Some(suspected.map_or(strictest, |s| s.max(strictest)))
    }

    /// True when `command` does not start with a `forbid`/`ask` prefix but contains its words in order.
    fn mentions_restricted_rule(&self, command: &[String]) -> bool {
        self.rules
            .iter()
            .filter(|rule| rule.decision != RuleDecision::Allow && !rule.prefix.is_empty())
            .filter(|rule| !command.starts_with(&rule.prefix))
            .any(|rule| {
                let mut words = command.iter().map(|w| w.rsplit('/').next().unwrap_or(w));
                rule.prefix.iter().all(|p| words.any(|w| w == p))
            })
    }

    /// `Ask` when `argv` is a shell script the splitter refuses and it mentions every word of a `forbid` or `ask`
    /// rule's prefix (see the module docs).
    fn suspected_in_unparsed_script(&self, command: &ParsedCommand) -> Option<RuleDecision> {
        let script = command.script()?;
        if command.script_commands().is_some() {
            return None;
        }
        let words = loose_words(script);
        self.rules
            .iter()
            .filter(|rule| rule.decision != RuleDecision::Allow && !rule.prefix.is_empty())
            .any(|rule| rule.prefix.iter().all(|w| words.iter().any(|t| t == w)))
            .then_some(RuleDecision::Ask)
    }

    /// The decision of the longest matching prefix for one plain command.
    fn evaluate_one(&self, argv: &[String]) -> Option<RuleDecision> {
        self.rules
            .iter()
            .filter(|rule| argv.starts_with(&rule.prefix))
            .max_by_key(|rule| (rule.prefix.len(), rule.decision))
            .map(|rule| rule.decision)
    }
}

/// Programs that run whatever their arguments say: a prefix naming one approves everything (`["bash"]`,
/// `["sh", "-c"]`, `["env"]`, `["sudo"]`, `["xargs"]`), so it is never offered as a session approval.
const RUNS_ANYTHING: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox", "env", "sudo",
    "doas", "su", "runuser", "pkexec", "nohup", "nice", "ionice", "timeout", "time", "stdbuf", "setsid",
    "xargs", "exec", "eval", "command", "builtin", "chroot", "unshare", "nsenter", "script", "watch",
    "strace", "ltrace", "gdb", "flock", "parallel", "ssh", "docker", "podman", "kubectl",
];

/// Interpreters: a prefix of one with only options after it (`["python3"]`, `["python3", "-c"]`,
/// `["node", "-e"]`) approves any program; one naming what it runs (`["python3", "-m", "pytest"]`) does not.
const INTERPRETERS: &[&str] = &[
    "python",
    "node",
    "nodejs",
    "deno",
    "bun",
    "perl",
    "ruby",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "osascript",
    "pwsh",
    "powershell",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "rscript",
    "julia",
    "java",
    "npx",
    "bunx",
    "pnpx",
    "irb",
    "ipython",
    "sed",
];

/// Whether `word` (a program, maybe a path) names an interpreter, `python3.12` and `pypy3` included.
fn is_interpreter(program: &str) -> bool {
    let name = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.').to_ascii_lowercase();
    INTERPRETERS.contains(&name.as_str()) || name.starts_with("pypy")
}

/// The prefix to offer a person as "approve commands starting with this for the session" (Codex's
/// `prefix_rule`), when `prefix` may be offered for the command `argv`:
/// 1. it is a real prefix of the command: of its argv, or, for a `[shell, -lc|-c, script]` with a system
///    shell whose script splits into plain commands, of one of them (a later command is admitted only when
///    every one of its sub-commands is, see [`CommandRules::evaluate`]);
/// 2. it is not empty, and no word is empty or holds a NUL;
/// 3. it does not name a program that runs whatever it is told (a shell, `env`, `sudo`, `xargs`, ...), nor an
///    interpreter with nothing but options after it.
///
/// `None` when any of this fails: the question then offers no prefix.
pub fn session_prefix_offer(prefix: &[String], command: &ParsedCommand) -> Option<Vec<String>> {
    let first = prefix.first()?;
    if prefix.iter().any(|w| w.is_empty() || w.contains('\0')) {
        return None;
    }
    let program = first.rsplit('/').next().unwrap_or(first);
    if RUNS_ANYTHING.contains(&program) {
        return None;
    }
    if is_interpreter(program) && prefix[1..].iter().all(|w| w.starts_with('-')) {
        return None;
    }
    // A prefix that itself runs other code (`git -c x`, `npm exec`, `find -exec`), or that stops before
    // naming what a runner or git runs (`uv run`, `git`), approves more than it shows.
    if runs_other_code(prefix).is_some() || (program == "git" && prefix.len() < 2) {
        return None;
    }
    let commands = command.plain_commands()?;
    if crate::runs::unknown_part(command.runs()).is_some() {
        return None;
    }
    commands.iter().any(|command| command.starts_with(prefix)).then(|| prefix.to_vec())
}

/// Programs that run another program named in their arguments once past a subcommand (`uv run X`,
/// `npm exec X`): a prefix that stops at that subcommand approves any program.
const RUNNERS: &[(&str, &[&str])] = &[
    ("uv", &["run", "tool"]),
    ("uvx", &[]),
    ("pipx", &["run"]),
    ("poetry", &["run"]),
    ("pdm", &["run"]),
    ("hatch", &["run"]),
    ("pipenv", &["run"]),
    ("rye", &["run"]),
    ("conda", &["run"]),
    ("mamba", &["run"]),
    ("npm", &["exec", "x", "run", "run-script", "create", "init"]),
    ("pnpm", &["exec", "dlx", "run", "create"]),
    ("yarn", &["exec", "dlx", "run", "create"]),
    ("bun", &["x", "run", "create"]),
    ("cargo", &["run", "install"]),
    ("go", &["run", "generate", "tool"]),
    ("bundle", &["exec"]),
    ("nix", &["run", "shell", "develop"]),
    ("nix-shell", &[]),
    ("direnv", &["exec"]),
    ("pyenv", &["exec"]),
    ("rbenv", &["exec"]),
    ("dotnet", &["run", "exec"]),
    ("mise", &["exec", "x", "run"]),
];

/// git's built-in commands: anything else after `git` is an alias (config) or a `git-<name>` program found on
/// `PATH`, either of which runs anything. Left out on purpose: the built-ins that run a program their arguments
/// or config name (`bisect run`, `submodule foreach`, `filter-branch`, `difftool`, `mergetool`, `rebase -x`
/// is caught by its option, `send-email`, `instaweb`).
const GIT_BUILTINS: &[&str] = &[
    "add",
    "am",
    "annotate",
    "apply",
    "archive",
    "blame",
    "branch",
    "bundle",
    "cat-file",
    "check-ignore",
    "checkout",
    "cherry",
    "cherry-pick",
    "clean",
    "clone",
    "commit",
    "config",
    "count-objects",
    "describe",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "fetch",
    "for-each-ref",
    "format-patch",
    "fsck",
    "gc",
    "grep",
    "hash-object",
    "init",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "merge",
    "merge-base",
    "mv",
    "notes",
    "pull",
    "push",
    "range-diff",
    "rebase",
    "reflog",
    "remote",
    "repack",
    "replace",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "shortlog",
    "show",
    "show-branch",
    "show-ref",
    "sparse-checkout",
    "stash",
    "status",
    "switch",
    "symbolic-ref",
    "tag",
    "update-index",
    "update-ref",
    "verify-commit",
    "verify-tag",
    "version",
    "whatchanged",
    "worktree",
    "write-tree",
];

/// Whether `sub` is one of git's built-in commands (anything else runs an alias or a `git-<sub>` program).
pub(crate) fn is_git_builtin(sub: &str) -> bool {
    GIT_BUILTINS.contains(&sub)
}

/// Options, per program, that make it run a program or code its arguments (or a file they name) choose:
/// `(program, long options (a word equal to one, or starting with it and `=`), short option letters (alone or
/// in a cluster `-xvf`))`.
const CODE_OPTIONS: &[(&str, &[&str], &[char])] = &[
    (
        "git",
        &[
            "--exec",
            "--upload-pack",
            "--receive-pack",
            "--extcmd",
            "--tool",
            "--template",
            "--config",
            "--open-files-in-pager",
            "--ext-diff",
            "--textconv",
            "--exec-path",
            "--config-env",
            "--git-dir",
            "--work-tree",
            "--run",
            "--filter",
            "--separate-git-dir",
            "--reference",
            "--gpg-sign",
        ],
        &['x', 'O'],
    ),
    (
        "find",
        &["-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls", "-delete"],
        &[],
    ),
    (
        "tar",
        &[
            "--to-command",
            "--use-compress-program",
            "--checkpoint-action",
            "--info-script",
            "--new-volume-script",
            "--rsh-command",
            "--rmt-command",
            "--index-file",
        ],
        &['I', 'F'],
    ),
    ("rsync", &["--rsh", "--rsync-path", "--config", "--daemon"], &['e']),
    ("scp", &[], &['o', 'S', 'F', 'D']),
    ("sftp", &[], &['o', 'S', 'F', 'D', 'b']),
    ("make", &["--file", "--makefile", "--eval", "--directory", "--include-dir"], &['f', 'E', 'C', 'I']),
    ("gmake", &["--file", "--makefile", "--eval", "--directory", "--include-dir"], &['f', 'E', 'C', 'I']),
    ("cargo", &["--config", "--manifest-path", "-Z"], &['Z']),
    (
        "npm",
        &["--call", "--script-shell", "--node-options", "--userconfig", "--globalconfig", "--prefix"],
        &['c'],
    ),
    ("pnpm", &["--shell-emulator", "--config", "--dir"], &['c', 'C']),
    ("yarn", &["--cwd"], &[]),
    ("go", &["-exec", "-toolexec", "-modfile", "-overlay"], &[]),
    ("zip", &["--unzip-command", "-TT"], &[]),
    ("man", &["--pager", "--html", "--preprocessor"], &['P', 'H', 'p']),
    ("less", &["--lesskey-file"], &[]),
    ("curl", &["--config"], &['K']),
    ("wget", &["--execute", "--config"], &['e']),
    ("pytest", &["-p", "--confcutdir", "--rootdir", "-c", "--override-ini"], &['p', 'c', 'o']),
];

/// Why `command` (one plain command's argv) runs code that its words do not name as a program, when it does:
/// a runner or interpreter told to run something (`uv run`, `npm exec`, `python -c`), git with options before
/// its subcommand (`git -c alias.x='!sh' x`) or a subcommand that is not built in (an alias, a `git-<name>` on
/// `PATH`), or an option that runs a program (`find -exec`, `tar --to-command`, `rsync -e`, `cargo --config`,
/// `make -f`, a `make` variable such as `SHELL=`). A prefix approval never covers such a command.
pub fn runs_other_code(command: &[String]) -> Option<String> {
    let program = command.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    let args = &command[1..];
    if RUNS_ANYTHING.contains(&name) || is_editor(name) {
        return Some(format!("{name} runs whatever its arguments say"));
    }
    if is_interpreter(name) && args.iter().all(|a| a.starts_with('-')) {
        return Some(format!("{name} with only options runs the code they give"));
    }
    if let Some(at) = runner_program(command) {
        return match command.get(at..).filter(|rest| !rest.is_empty()) {
            // What it runs is named: judged as that program's own command.
            Some(rest) if command[1..at].iter().all(|a| !a.starts_with('-') || a == "--") => {
                runs_other_code(rest)
            }
            Some(_) => Some(format!("{name} options before the program it runs can choose what runs")),
            None => Some(format!("{name} runs the program its arguments name")),
        };
    }
    if name == "git" {
        match args.first() {
            Some(sub) if sub.starts_with('-') => {
                return Some(
                    "git options before the subcommand (-c, -C, --exec-path, ...) can run any program".into(),
                );
            }
            Some(sub) if !GIT_BUILTINS.contains(&sub.as_str()) => {
                return Some(format!(
                    "git {sub} is not a built-in git command (an alias or a git-{sub} program runs)"
                ));
            }
            _ => {}
        }
    }
    // `git clone -u <program>` (upload-pack), `git clone -c core.hooksPath=...` (its checkout runs the hooks).
    if name == "git"
        && matches!(args.first().map(String::as_str), Some("clone" | "ls-remote" | "fetch" | "pull"))
        && args.iter().any(|a| a == "-u" || a == "-c" || a.starts_with("-u") || a.starts_with("-c"))
    {
        return Some("git clone/fetch -u or -c can choose a program or hooks that run".into());
    }
    if matches!(name, "make" | "gmake") && args.iter().any(|a| a.contains('=')) {
        return Some(format!(
            "{name} variables set on the command line (SHELL=, MAKEFLAGS=) choose what runs"
        ));
    }
    let (_, long, short) = CODE_OPTIONS.iter().find(|(p, _, _)| *p == name)?;
    args.iter()
        .find(|arg| {
            let long_hit = long.iter().any(|opt| {
                arg.as_str() == *opt || arg.strip_prefix(opt).is_some_and(|rest| rest.starts_with('='))
            });
            let cluster = arg.strip_prefix('-').filter(|rest| {
                !rest.starts_with('-') && rest.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            });
            let short_hit = cluster.is_some_and(|letters| {
                letters.chars().take_while(char::is_ascii_alphanumeric).any(|c| short.contains(&c))
            });
            long_hit || short_hit
        })
        .map(|arg| format!("{name} {arg} runs a program or code its arguments choose"))
}

/// Where the program that a runner runs is named in `command` (`uv run pytest`: 2), when `command` is a runner
/// told to run one (`uv run`, `npm exec`, `uvx`); the length of `command` when it names none.
fn runner_program(command: &[String]) -> Option<usize> {
    let program = command.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    let (_, subcommands) = RUNNERS.iter().find(|(runner, _)| *runner == name)?;
    let word = |from: usize| command[from..].iter().position(|a| !a.starts_with('-')).map(|i| from + i);
    match word(1) {
        Some(i) if subcommands.is_empty() => Some(i),
        Some(i) if subcommands.contains(&command[i].as_str()) => word(i + 1).or(Some(command.len())),
        None if subcommands.is_empty() => Some(command.len()),
        _ => None,
    }
}

/// Editors run commands of their own (`vim -c '!sh'`, `:!`): a prefix of one approves anything.
fn is_editor(name: &str) -> bool {
    matches!(name, "vi" | "vim" | "nvim" | "view" | "ex" | "emacs" | "emacsclient" | "nano" | "ed" | "code")
}

/// Whether an approved `prefix` covers `command` (one plain command): it starts with the prefix, and runs no
/// code the prefix does not name ([`runs_other_code`]).
pub fn prefix_covers(prefix: &[String], command: &[String]) -> bool {
    // A runner's program must be named by the prefix itself: `npm` does not cover `npm exec anything`.
    let names_the_program = runner_program(command).is_none_or(|at| at < prefix.len());
    !prefix.is_empty()
        && command.starts_with(prefix)
        && names_the_program
        && runs_other_code(command).is_none()
}

/// Whether `argv` is admitted by the prefixes a person approved, with the configured `rules` still in force:
/// the prefixes count as `allow` rules beside them (a longer configured `ask` or `forbid` still decides), and
/// every plain command of the script must be covered by one of the prefixes ([`prefix_covers`]) or allowed by a
/// configured rule. A script the splitter refuses, or a shell named by an untrusted path, is never admitted.
pub fn approved_prefixes_admit(
    rules: &CommandRules,
    prefixes: &[Vec<String>],
    command: &ParsedCommand,
) -> bool {
    if prefixes.is_empty() {
        return false;
    }
    let Some(commands) = command.plain_commands() else { return false };
    // What the one model of wrappers and interpreters cannot read (`crate::runs`) is never approved by a prefix.
    if crate::runs::unknown_part(command.runs()).is_some() {
        return false;
    }
    let mut merged = rules.clone();
    merged.rules.extend(
        prefixes.iter().map(|prefix| PrefixRule { prefix: prefix.clone(), decision: RuleDecision::Allow }),
    );
    if merged.evaluate(command) != Some(RuleDecision::Allow) {
        return false;
    }
    commands.iter().all(|command| {
        prefixes.iter().any(|p| prefix_covers(p, command))
            || rules.evaluate_one(command) == Some(RuleDecision::Allow)
    })
}

fn loose_words(script: &str) -> Vec<&str> {
    let mut words = Vec::new();
    for word in script.split(|c: char| c.is_whitespace() || "\'\"`;&|()<>{}$\\".contains(c)) {
        if word.is_empty() {
            continue;
        }
        words.push(word);
        if let Some((_, last)) = word.rsplit_once('/')
            && !last.is_empty()
        {
            words.push(last);
        }
    }
    words
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    /// The rules' functions on a command parsed from `argv`.
    trait OnArgv {
        fn eval(&self, argv: &[String]) -> Option<RuleDecision>;
    }

    impl OnArgv for CommandRules {
        fn eval(&self, argv: &[String]) -> Option<RuleDecision> {
            self.evaluate(&ParsedCommand::new(argv.to_vec()))
        }
    }

    fn session_prefix_offer(prefix: &[String], argv: &[String]) -> Option<Vec<String>> {
        super::session_prefix_offer(prefix, &ParsedCommand::new(argv.to_vec()))
    }

    fn approved_prefixes_admit(rules: &CommandRules, prefixes: &[Vec<String>], argv: &[String]) -> bool {
        super::approved_prefixes_admit(rules, prefixes, &ParsedCommand::new(argv.to_vec()))
    }

    fn rule(prefix: &[&str], decision: RuleDecision) -> PrefixRule {
        PrefixRule { prefix: argv(prefix), decision }
    }

    fn rules() -> CommandRules {
        CommandRules {
            rules: vec![
                rule(&["git"], RuleDecision::Ask),
                rule(&["git", "status"], RuleDecision::Allow),
                rule(&["git", "push"], RuleDecision::Forbid),
                rule(&["ls"], RuleDecision::Allow),
                rule(&["rm", "-rf"], RuleDecision::Forbid),
            ],
        }
    }

    #[test]
    fn longest_prefix_wins_for_one_command() {
        let rules = rules();
        assert_eq!(rules.eval(&argv(&["git", "status", "-s"])), Some(RuleDecision::Allow));
        assert_eq!(rules.eval(&argv(&["git", "log"])), Some(RuleDecision::Ask));
        assert_eq!(rules.eval(&argv(&["git", "push", "origin"])), Some(RuleDecision::Forbid));
        assert_eq!(rules.eval(&argv(&["rm", "x"])), None);
        assert_eq!(rules.eval(&argv(&["gitk"])), None);
    }

    #[test]
    fn scripts_are_judged_per_sub_command() {
        let rules = rules();
        let bash = |s: &str| argv(&["bash", "-lc", s]);
        assert_eq!(rules.eval(&bash("git status && ls")), Some(RuleDecision::Allow));
        assert_eq!(rules.eval(&bash("ls; git log")), Some(RuleDecision::Ask));
        assert_eq!(rules.eval(&bash("ls | git push")), Some(RuleDecision::Forbid));
        assert_eq!(rules.eval(&bash("ls && rm -rf /")), Some(RuleDecision::Forbid));
        // An allowed command next to an unknown one decides nothing.
        assert_eq!(rules.eval(&bash("ls && rm x")), None);
        // Unparseable: only the whole argv is matched.
        assert_eq!(rules.eval(&bash("ls > out")), None);
        // A shell named by an untrusted path: a forbidden sub-command still forbids, an allowed one no longer
        // allows (the planted "shell" may run anything).
        let planted = |s: &str| argv(&["./bash", "-lc", s]);
        assert_eq!(rules.eval(&planted("ls | git push")), Some(RuleDecision::Forbid));
        assert_eq!(rules.eval(&planted("ls")), None);
        assert_eq!(rules.eval(&argv(&["/bin/bash", "-lc", "ls"])), Some(RuleDecision::Allow));
        let whole = CommandRules { rules: vec![rule(&["bash", "-lc"], RuleDecision::Ask)] };
        assert_eq!(whole.eval(&bash("ls > out")), Some(RuleDecision::Ask));
    }

    #[test]
    fn equal_prefixes_take_the_stricter_decision_and_empty_prefix_matches_all() {
        let rules = CommandRules {
            rules: vec![
                rule(&["make"], RuleDecision::Allow),
                rule(&["make"], RuleDecision::Ask),
                rule(&[], RuleDecision::Allow),
            ],
        };
        assert_eq!(rules.eval(&argv(&["make", "all"])), Some(RuleDecision::Ask));
        assert_eq!(rules.eval(&argv(&["anything"])), Some(RuleDecision::Allow));
        assert_eq!(CommandRules::default().eval(&argv(&["ls"])), None);
    }

    #[test]
    fn rules_deserialize_with_lowercase_decisions() {
        let rules: CommandRules =
            serde_json::from_str(r#"{"rules": [{"prefix": ["git", "push"], "decision": "forbid"}]}"#)
                .unwrap();
        assert_eq!(rules.rules, vec![rule(&["git", "push"], RuleDecision::Forbid)]);
        assert!(
            serde_json::from_str::<CommandRules>(r#"{"rules": [{"prefix": [], "decision": "Allow"}]}"#)
                .is_err()
        );
    }

    #[test]
    fn wrapped_or_unparseable_forms_of_a_restricted_command_need_approval() {
        let rules = rules();
        let bash = |script: &str| argv(&["bash", "-lc", script]);
        for bypass in [
            "command git push",
            "git -c core.pager=cat push origin",
            "/usr/bin/git push",
            "env GIT_TRACE=1 git push",
            "git push 2>&1 | head -1",
            "$(echo git) push; git push",
            "timeout 5 rm -rf /",
        ] {
            assert_eq!(rules.eval(&bash(bypass)), Some(RuleDecision::Ask), "{bypass}");
        }
        // The exact forms keep their own decisions, and unrelated commands are not touched.
        assert_eq!(rules.eval(&bash("git push")), Some(RuleDecision::Forbid));
        assert_eq!(rules.eval(&bash("git status && ls")), Some(RuleDecision::Allow));
        assert_eq!(rules.eval(&bash("cargo build 2>&1 | tail -3")), None);
        assert_eq!(rules.eval(&bash("echo push")), None);
        // A direct argv (not a script) is checked the same way.
        assert_eq!(rules.eval(&argv(&["nice", "git", "push"])), Some(RuleDecision::Ask));
    }

    #[test]
    fn session_prefixes_are_offered_only_when_real_and_narrow() {
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let bash = |s: &str| argv(&["bash", "-lc", s]);
        let offer = |prefix: &str, command: &[String]| session_prefix_offer(&words(prefix), command);
        assert_eq!(offer("git pull", &bash("git pull --rebase")), Some(words("git pull")));
        assert_eq!(offer("pytest", &bash("pytest -x tests")), Some(words("pytest")));
        assert_eq!(
            offer("python3 -m pytest", &bash("python3 -m pytest -q")),
            Some(words("python3 -m pytest"))
        );
        assert_eq!(offer("cargo test", &bash("cd x && cargo test -p a")), Some(words("cargo test")));
        assert_eq!(offer("git pull", &argv(&["git", "pull"])), Some(words("git pull")));
        // Not a prefix of the command being approved.
        assert_eq!(offer("git push", &bash("git pull")), None);
        assert_eq!(offer("git pull --force", &bash("git pull")), None);
        assert_eq!(offer("rm", &bash("echo rm")), None);
        // Empty, or words that cannot be argv.
        assert_eq!(session_prefix_offer(&[], &bash("ls")), None);
        assert_eq!(session_prefix_offer(&["".to_owned()], &bash("ls")), None);
        // Programs that run anything, bare interpreters, interpreters with options only.
        for (prefix, command) in [
            ("bash", "bash -c 'rm -rf x'"),
            ("sh -c", "sh -c ls"),
            ("/bin/bash", "/bin/bash x.sh"),
            ("env", "env FOO=1 make"),
            ("sudo make", "sudo make install"),
            ("xargs", "xargs rm"),
            ("python", "python x.py"),
            ("python3 -c", "python3 -c 'print(1)'"),
            ("python3.12", "python3.12 x.py"),
            ("node -e", "node -e 1"),
            ("npx", "npx some-package"),
        ] {
            assert_eq!(offer(prefix, &bash(command)), None, "{prefix} for {command}");
        }
        // A script the splitter refuses, or a shell that is not a system shell: no offer.
        assert_eq!(offer("git", &bash("git pull $(curl x)")), None);
        assert_eq!(offer("ls", &argv(&["/tmp/x/bash", "-lc", "ls"])), None);
    }

    #[test]
    fn prefixes_never_cover_forms_that_run_other_code() {
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let bash = |s: &str| argv(&["bash", "-lc", s]);
        // Each (prefix, a command it must not cover, the covered twin).
        for (prefix, denied, allowed) in [
            ("git status", "git status --exec=x", "git status --short"),
            ("find", "find . -exec sh -c x ;", "find . -name x"),
            ("find .", "find . -execdir rm {} +", "find . -type f"),
            ("tar", "tar --to-command=sh -xf a.tar", "tar -xf a.tar"),
            ("tar", "tar -xIsh -f a.tar", "tar -tzf a.tar"),
            ("rsync", "rsync -e sh a b", "rsync -a a b"),
            ("rsync", "rsync -avze sh a b", "rsync -avz a b"),
            ("rsync", "rsync --rsh=sh a b", "rsync --delete a b"),
            ("npm", "npm exec evil", "npm ci"),
            ("pnpm", "pnpm dlx evil", "pnpm install"),
            ("cargo", "cargo --config build.rustc-wrapper=x build", "cargo build"),
            ("cargo build", "cargo build --config x", "cargo build --release"),
            ("make", "make SHELL=/tmp/x all", "make all"),
            ("make", "make -f /tmp/evil.mk", "make test"),
            ("git rebase", "git rebase -x sh main", "git rebase main"),
            ("git grep", "git grep -O x", "git grep x"),
            ("git clone", "git clone -u sh u", "git clone u"),
            ("git log", "git log --ext-diff -p", "git log -p"),
            ("scp", "scp -oProxyCommand=x a b:", "scp a b:"),
            ("go test", "go test -exec x ./...", "go test ./..."),
            ("uv run pytest", "uv run pytest -p evil", "uv run pytest -q"),
        ] {
            let prefix = words(prefix);
            assert!(!prefix_covers(&prefix, &words(denied)), "{prefix:?} covered {denied}");
            assert!(prefix_covers(&prefix, &words(allowed)), "{prefix:?} did not cover {allowed}");
            let approved = std::slice::from_ref(&prefix);
            let rules = CommandRules::default();
            assert!(!approved_prefixes_admit(&rules, approved, &bash(denied)), "{denied}");
            assert!(approved_prefixes_admit(&rules, approved, &bash(allowed)), "{allowed}");
        }
        // Prefixes that run anything, or stop before naming what runs, are never offered.
        for (prefix, command) in [
            ("git", "git -c alias.x=!sh x"),
            ("git", "git status"),
            ("git -c", "git -c a=b status"),
            ("git foo", "git foo"),
            ("uv run", "uv run x"),
            ("npm exec", "npm exec x"),
            ("cargo run", "cargo run"),
            ("vim", "vim -c x"),
            ("find -exec", "find -exec x ;"),
        ] {
            assert_eq!(session_prefix_offer(&words(prefix), &bash(command)), None, "{prefix}");
        }
        assert_eq!(
            session_prefix_offer(&words("git status"), &bash("git status")),
            Some(words("git status"))
        );
        // A script: every command must be covered; an unparsed one never is.
        let approved = [words("git status"), words("ls")];
        let rules = CommandRules::default();
        assert!(approved_prefixes_admit(&rules, &approved, &bash("git status && ls -la")));
        assert!(!approved_prefixes_admit(&rules, &approved, &bash("git status && rm x")));
        assert!(!approved_prefixes_admit(&rules, &approved, &bash("git status $(x)")));
        assert!(!approved_prefixes_admit(&rules, &approved, &argv(&["/tmp/bash", "-lc", "ls"])));
        // A configured ask rule longer than the prefix still asks.
        let asking = CommandRules { rules: vec![rule(&["git", "status", "--porcelain"], RuleDecision::Ask)] };
        assert!(!approved_prefixes_admit(&asking, &approved, &bash("git status --porcelain")));
    }
}
