//! The login environment, loaded once: what a login shell's startup files leave behind (exported variables,
//! functions, aliases, shell options) is captured once per server and replayed for every later command, which
//! then starts a non-login shell.
//!
//! The engine runs [`capture_script`] as `[shell, "-lc", script]` under the placement the commands will get
//! (the same sandbox policy), reads its merged output, splits it with [`parse_capture`] into what the startup
//! files printed (for the server log) and the captured state, and writes [`render_bash`]'s text to a file that
//! no sandboxed command can write. A command then runs as `[shell, "-c", cmd]` with `BASH_ENV` naming that
//! file: bash sources it before the command, and the file's first act is to restore the command's own
//! `BASH_ENV` (or unset it), so scripts the command starts do not source the snapshot again.
//!
//! Only what the startup files changed is replayed: a variable is exported when its captured value differs
//! from the value the capture started with, and unset when the startup files removed it; the variables a
//! spawn sets per process ([`NEVER_REPLAYED`]: the session token that finds a session's processes, the
//! shell's own bookkeeping) are never touched. The snapshot is refreshed when one of [`snapshot_inputs`]
//! changes (the engine compares their identity, size and modification time).
//!
//! Only bash is covered ([`SnapshotShell::of`]); other shells keep starting as login shells.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::env::EnvPolicy;
use crate::quote::single_quoted;
use crate::startup::startup_files;

/// A shell whose login environment can be captured and replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SnapshotShell {
    /// GNU bash: replayed through `BASH_ENV`, which every non-interactive bash sources.
    Bash,
}

impl SnapshotShell {
    /// The snapshot kind of `shell` (a path or a name), or `None` for a shell that keeps its login start.
    pub fn of(shell: &str) -> Option<SnapshotShell> {
        match shell.rsplit('/').next() {
            Some("bash") => Some(SnapshotShell::Bash),
            _ => None,
        }
    }

    /// The variable through which the shell sources the snapshot.
    pub fn loader_var(self) -> &'static str {
        match self {
            SnapshotShell::Bash => "BASH_ENV",
        }
    }
}

/// System-wide files a login bash reads besides the user's own ([`startup_files`]).
const SYSTEM_FILES: [&str; 4] = ["/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/etc/environment"];

/// Every path whose change makes a snapshot stale: the user's startup files (and `$HOME`, `$ZDOTDIR`, the
/// files named by `BASH_ENV` and `ENV`), and the system files a login shell reads (a directory such as
/// `/etc/profile.d` changes when a file is added to it or removed). Files a startup file sources from
/// elsewhere (a version manager's scripts) are not followed: touching `~/.bashrc` refreshes the snapshot.
pub fn snapshot_inputs(var: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    // `$HOME` and `$ZDOTDIR` themselves change whenever a file is added to them: their files count, not they.
    let dirs: Vec<PathBuf> =
        ["HOME", "ZDOTDIR"].iter().filter_map(|name| var(name)).map(PathBuf::from).collect();
    let mut files: Vec<PathBuf> = startup_files(var).into_iter().filter(|f| !dirs.contains(f)).collect();
    files.extend(SYSTEM_FILES.iter().map(PathBuf::from));
    files
}

/// Variables a snapshot never sets nor unsets: the per-process session token (`kill_tree` finds a session's
/// processes by it), the snapshot's own loader, and what the shell maintains or refuses to have assigned.
pub const NEVER_REPLAYED: [&str; 13] = [
    "UEXEC_SESSION_TOKEN",
    "BASH_ENV",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "SHELLOPTS",
    "BASHOPTS",
    "BASH_VERSINFO",
    "EUID",
    "UID",
    "PPID",
    "BASHPID",
];

/// The section names of a capture's output, in order.
const SECTIONS: [&str; 6] = ["env", "functions", "aliases", "options", "baseline", "end"];

/// `bash` options that only make sense in an interactive shell (history, job control, line editing): never
/// replayed into a command's shell.
const INTERACTIVE_SET_OPTIONS: [&str; 4] = ["history", "monitor", "emacs", "vi"];

/// `shopt` options the shell sets itself and refuses to have changed.
const FIXED_SHOPT_OPTIONS: [&str; 2] = ["login_shell", "restricted_shell"];

fn marker(nonce: u64, section: &str) -> Vec<u8> {
    format!("\0{nonce:016x}:{section}\0").into_bytes()
}

/// The marker after which a capture has printed everything (a reader stops there: a daemon the startup files
/// left behind may keep the output open).
pub fn end_marker(nonce: u64) -> Vec<u8> {
    marker(nonce, "end")
}

/// The script a login shell runs to print its state after its startup files: each section starts with a
/// NUL-delimited marker carrying `nonce` (what the startup files printed comes before the first one), exported
/// variables as NUL-terminated `NAME=value` records (builtins only: the startup files may have changed `PATH`).
pub fn capture_script(shell: SnapshotShell, nonce: u64) -> String {
    match shell {
        SnapshotShell::Bash => {
            let m = |section: &str| format!("printf '\\0%s\\0' '{nonce:016x}:{section}'");
            [
                m("env"),
                "for __uexec_v in $(compgen -e); do printf '%s=%s\\0' \"$__uexec_v\" \"${!__uexec_v}\"; done"
                    .to_owned(),
                m("functions"),
                "declare -f".to_owned(),
                m("aliases"),
                "alias -p".to_owned(),
                m("options"),
                "shopt -p".to_owned(),
                "set +o".to_owned(),
                m("baseline"),
                // The options a plain `bash -c` starts with: only the differences are replayed.
                "BASH_ENV= \"$BASH\" -c 'shopt -p; set +o'".to_owned(),
                m("end"),
            ]
            .join("\n")
        }
    }
}

/// What a capture found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// What the startup files printed (before the first marker): for the server log, never for a command.
    pub startup_output: Vec<u8>,
    /// The exported variables after the startup files, in the shell's order, as the bytes the shell printed
    /// (names and values of a Unix environment are bytes; the caller compares them with its own environment
    /// through `OsStr::as_encoded_bytes`, the same bytes on Unix).
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// `declare -f`: the functions, as shell code.
    pub functions: String,
    /// `alias -p`: the aliases, as shell code.
    pub aliases: String,
    /// `shopt -p` and `set +o`: the options, as shell code.
    pub options: String,
    /// The same for a plain `bash -c` (no startup files): what a command's shell has without the snapshot.
    pub baseline: String,
}

/// Why a capture's output could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// A section marker is missing (the shell exited early, or its startup files did not return).
    #[error("the login shell's output lacks its {0} section (did a startup file exit or hang?)")]
    MissingSection(&'static str),
    /// A section that must be text is not UTF-8.
    #[error("the {0} section of the login shell's output is not UTF-8")]
    NotText(&'static str),
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|at| at + from)
}

/// Split a capture's merged output (see [`capture_script`]) into what the startup files printed and the state.
pub fn parse_capture(output: &[u8], nonce: u64) -> Result<Captured, CaptureError> {
    let mut bounds = Vec::with_capacity(SECTIONS.len());
    let mut from = 0;
    for section in SECTIONS {
        let mark = marker(nonce, section);
        let at = find(output, &mark, from).ok_or(CaptureError::MissingSection(section))?;
        bounds.push((at, at + mark.len()));
        from = at + mark.len();
    }
    let body = |i: usize| &output[bounds[i].1..bounds[i + 1].0];
    let text = |i: usize| String::from_utf8(body(i).to_vec()).map_err(|_| CaptureError::NotText(SECTIONS[i]));
    let env = body(0)
        .split(|b| *b == 0)
        .filter(|record| !record.is_empty())
        .filter_map(|record| {
            let eq = record.iter().position(|b| *b == b'=')?;
            Some((record[..eq].to_vec(), record[eq + 1..].to_vec()))
        })
        .collect();
    Ok(Captured {
        startup_output: output[..bounds[0].0].to_vec(),
        env,
        functions: text(1)?,
        aliases: text(2)?,
        options: text(3)?,
        baseline: text(4)?,
    })
}

/// A shell variable name: a letter or `_`, then letters, digits and `_`.
fn is_identifier(name: &[u8]) -> bool {
    match name.split_first() {
        Some((first, rest)) => {
            (first.is_ascii_alphabetic() || *first == b'_')
                && rest.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        }
        None => false,
    }
}

fn replayed(name: &[u8]) -> bool {
    is_identifier(name) && !NEVER_REPLAYED.iter().any(|n| n.as_bytes() == name)
}

/// The options worth replaying, as at most four commands (one per kind: a line per option costs every
/// command a few hundredths of a millisecond): `shopt -s|-u NAMES` and `set -o|+o NAME ...` from the lines of
/// `options` that are not in `baseline` (what the command's shell starts with anyway), minus the interactive
/// and fixed options. Names are shell words without quoting (letters, digits, `_` and `-` only; anything else
/// is dropped).
fn replayed_options(options: &str, baseline: &str) -> Vec<String> {
    let word = |name: &str| name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let (mut shopt_on, mut shopt_off, mut set_on, mut set_off) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let unchanged: Vec<&str> = baseline.lines().map(str::trim).collect();
    for line in options.lines().filter(|line| !unchanged.contains(&line.trim())) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["shopt", flag, name] if word(name) && !FIXED_SHOPT_OPTIONS.contains(name) => match *flag {
                "-s" => shopt_on.push(*name),
                "-u" => shopt_off.push(*name),
                _ => {}
            },
            ["set", flag, name] if word(name) && !INTERACTIVE_SET_OPTIONS.contains(name) => match *flag {
                "-o" => set_on.push(format!("-o {name}")),
                "+o" => set_off.push(format!("+o {name}")),
                _ => {}
            },
            _ => {}
        }
    }
    let mut commands = Vec::new();
    if !shopt_on.is_empty() {
        commands.push(format!("shopt -s {}", shopt_on.join(" ")));
    }
    if !shopt_off.is_empty() {
        commands.push(format!("shopt -u {}", shopt_off.join(" ")));
    }
    if !set_on.is_empty() {
        commands.push(format!("set {}", set_on.join(" ")));
    }
    if !set_off.is_empty() {
        commands.push(format!("set {}", set_off.join(" ")));
    }
    commands
}

/// The snapshot file for a bash command: restore the command's own `BASH_ENV` (from `command_bash_env`: its
/// value in the command's environment, or `None` to unset it), then the functions, options, aliases (with
/// `expand_aliases` on when there are any, so that the command's words can use them) and the variables the
/// startup files changed relative to `started_with` (the environment the capture started with), except the
/// `pinned` ones: variables the command's placement sets (the sandbox's own, its package caches), which the
/// placement sets again for every command and a startup file must not override.
///
/// The environment policy's secret filter applies to what is restored ([`EnvPolicy::drops_secret`]): a
/// variable whose name looks like a secret (`SVC_API_KEY`, `SSH_AUTH_SOCK`) that the startup files export is
/// not written to the file unless the policy passes it on purpose, so no such value reaches a command, nor the
/// disk where sandboxed commands could read it. (Functions and aliases are shell code and are kept as they
/// are: a secret spelled out in one is not recognised.)
pub fn render_bash(
    captured: &Captured,
    started_with: &[(OsString, OsString)],
    pinned: &[OsString],
    command_bash_env: Option<&OsString>,
    policy: &EnvPolicy,
) -> Vec<u8> {
    let bytes = |name: &OsString| name.as_encoded_bytes().to_vec();
    let pinned: Vec<Vec<u8>> = pinned.iter().map(bytes).collect();
    let replayed = |name: &[u8]| replayed(name) && !pinned.iter().any(|p| p == name);
    let restored = |name: &[u8]| replayed(name) && !policy.drops_secret(&String::from_utf8_lossy(name));
    let before = |name: &[u8]| {
        started_with
            .iter()
            .rev()
            .find(|(n, _)| n.as_encoded_bytes() == name)
            .map(|(_, v)| v.as_encoded_bytes())
    };
    let mut out: Vec<u8> = Vec::new();
    out.extend_from_slice(
        b"# uexec login snapshot: the state a login bash had after its startup files, sourced through BASH_ENV.\n",
    );
    match command_bash_env {
        Some(value) => {
            out.extend_from_slice(b"export BASH_ENV=");
            out.extend_from_slice(&single_quoted(value.as_encoded_bytes()));
            out.push(b'\n');
        }
        None => out.extend_from_slice(b"unset BASH_ENV\n"),
    }
    out.extend_from_slice(b"unalias -a 2>/dev/null\n");
    out.extend_from_slice(captured.functions.as_bytes());
    if !captured.functions.ends_with('\n') && !captured.functions.is_empty() {
        out.push(b'\n');
    }
    for line in replayed_options(&captured.options, &captured.baseline) {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b" 2>/dev/null\n");
    }
    let aliases: Vec<&str> = captured.aliases.lines().filter(|l| l.starts_with("alias ")).collect();
    if !aliases.is_empty() {
        out.extend_from_slice(b"shopt -s expand_aliases\n");
        for line in aliases {
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }
    for (name, value) in &captured.env {
        if restored(name) && before(name) != Some(value.as_slice()) {
            out.extend_from_slice(b"export ");
            out.extend_from_slice(name);
            out.push(b'=');
            out.extend_from_slice(&single_quoted(value));
            out.push(b'\n');
        }
    }
    let mut removed: Vec<&[u8]> = started_with
        .iter()
        .map(|(name, _)| name.as_encoded_bytes())
        .filter(|name| replayed(name) && !captured.env.iter().any(|(n, _)| n == name))
        .collect();
    removed.dedup();
    for name in removed {
        out.extend_from_slice(b"unset ");
        out.extend_from_slice(name);
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    fn bytes(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect()
    }

    fn output(nonce: u64, startup: &str, env: &[(&str, &str)], functions: &str, aliases: &str) -> Vec<u8> {
        let mut out = startup.as_bytes().to_vec();
        out.extend(marker(nonce, "env"));
        for (k, v) in env {
            out.extend(format!("{k}={v}\0").into_bytes());
        }
        out.extend(marker(nonce, "functions"));
        out.extend(functions.as_bytes());
        out.extend(marker(nonce, "aliases"));
        out.extend(aliases.as_bytes());
        out.extend(marker(nonce, "options"));
        out.extend(
            b"shopt -u login_shell\nshopt -s extglob\nset -o braceexpand\nset +o monitor\nset +o xtrace\n",
        );
        out.extend(marker(nonce, "baseline"));
        out.extend(b"shopt -u extglob\nset +o xtrace\n");
        out.extend(marker(nonce, "end"));
        out
    }

    #[test]
    fn only_bash_is_snapshotted() {
        assert_eq!(SnapshotShell::of("/bin/bash"), Some(SnapshotShell::Bash));
        assert_eq!(SnapshotShell::of("bash"), Some(SnapshotShell::Bash));
        for other in ["/bin/sh", "/usr/bin/zsh", "/bin/dash", "/usr/bin/fish", ""] {
            assert_eq!(SnapshotShell::of(other), None, "{other}");
        }
    }

    #[test]
    fn startup_output_stays_apart_from_the_state() {
        let out = output(
            7,
            "pyenv: cannot rehash\nhello\n",
            &[("A", "1"), ("PATH", "/x:/bin")],
            "f () \n{ \n    echo f\n}\n",
            "alias ll='ls -l'\n",
        );
        let captured = parse_capture(&out, 7).unwrap();
        assert_eq!(captured.startup_output, b"pyenv: cannot rehash\nhello\n");
        assert_eq!(captured.env, bytes(&[("A", "1"), ("PATH", "/x:/bin")]));
        assert!(captured.functions.contains("echo f"));
        assert_eq!(captured.aliases, "alias ll='ls -l'\n");
        assert_eq!(parse_capture(&out, 8), Err(CaptureError::MissingSection("env")));
        let cut = &out[..out.len() - 5];
        assert_eq!(parse_capture(cut, 7), Err(CaptureError::MissingSection("end")));
    }

    #[test]
    fn a_marker_printed_by_a_startup_file_with_another_nonce_is_startup_output() {
        let mut out = marker(1, "env");
        out.extend(output(2, "", &[("A", "1")], "", ""));
        let captured = parse_capture(&out, 2).unwrap();
        assert_eq!(captured.startup_output, marker(1, "env"));
        assert_eq!(captured.env, bytes(&[("A", "1")]));
    }

    #[test]
    fn only_what_the_startup_files_changed_is_replayed() {
        let captured = parse_capture(
            &output(
                1,
                "",
                &[
                    ("KEEP", "same"),
                    ("CHANGED", "new"),
                    ("ADDED", "it's"),
                    ("UEXEC_SESSION_TOKEN", "capture-token"),
                    ("SHLVL", "2"),
                    ("BAD-NAME", "x"),
                ],
                "",
                "",
            ),
            1,
        )
        .unwrap();
        let started =
            os(&[("KEEP", "same"), ("CHANGED", "old"), ("GONE", "x"), ("UEXEC_SESSION_TOKEN", "t")]);
        let text =
            String::from_utf8(render_bash(&captured, &started, &[], None, &EnvPolicy::default())).unwrap();
        assert!(text.contains("export CHANGED='new'\n"), "{text}");
        assert!(text.contains("export ADDED='it'\\''s'\n"), "{text}");
        assert!(text.contains("unset GONE\n"), "{text}");
        assert!(text.contains("unset BASH_ENV\n"), "{text}");
        for absent in ["KEEP", "UEXEC_SESSION_TOKEN", "SHLVL", "BAD-NAME", "expand_aliases"] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
        let restored = render_bash(
            &captured,
            &started,
            &[],
            Some(&OsString::from("/home/me/.env")),
            &EnvPolicy::default(),
        );
        assert!(String::from_utf8(restored).unwrap().starts_with(
            "# uexec login snapshot: the state a login bash had after its startup files, sourced through \
             BASH_ENV.\nexport BASH_ENV='/home/me/.env'\n"
        ));
    }

    /// The secret filter applies to what a snapshot restores.
    #[test]
    fn secret_named_variables_the_startup_files_export_are_not_restored_unless_passed() {
        let env = [("SVC_API_KEY", "sk-live"), ("SSH_AUTH_SOCK", "/tmp/a.sock"), ("EDITOR", "vi")];
        let captured = parse_capture(&output(5, "", &env, "", ""), 5).unwrap();
        let text =
            |policy: &EnvPolicy| String::from_utf8(render_bash(&captured, &[], &[], None, policy)).unwrap();
        let filtered = text(&EnvPolicy::default());
        assert!(!filtered.contains("sk-live") && !filtered.contains("SVC_API_KEY"), "{filtered}");
        assert!(!filtered.contains("/tmp/a.sock"), "{filtered}");
        // The twin: a plain variable is restored.
        assert!(filtered.contains("export EDITOR='vi'\n"), "{filtered}");
        // Passed on purpose (or with the filter off), it is restored like any other.
        let passed = EnvPolicy { pass_through: vec!["SVC_API_KEY".into()], ..EnvPolicy::default() };
        assert!(text(&passed).contains("export SVC_API_KEY='sk-live'\n"));
        assert!(!text(&passed).contains("/tmp/a.sock"));
        let off = EnvPolicy { exclude_secrets: false, ..EnvPolicy::default() };
        assert!(text(&off).contains("export SSH_AUTH_SOCK='/tmp/a.sock'\n"));
    }

    #[test]
    fn variables_the_placement_sets_are_never_overridden() {
        let out = output(4, "", &[("npm_config_cache", "/home/me/.npm"), ("OTHER", "x")], "", "");
        let captured = parse_capture(&out, 4).unwrap();
        let started = os(&[("npm_config_cache", "/sandbox/npm"), ("UEXEC_SANDBOX", "linux")]);
        let pinned = [OsString::from("npm_config_cache"), OsString::from("UEXEC_SANDBOX")];
        let text = String::from_utf8(render_bash(&captured, &started, &pinned, None, &EnvPolicy::default()))
            .unwrap();
        assert!(!text.contains("npm_config_cache") && !text.contains("UEXEC_SANDBOX"), "{text}");
        assert!(text.contains("export OTHER='x'\n"), "{text}");
    }

    #[test]
    fn options_skip_interactive_and_fixed_ones_and_aliases_turn_expansion_on() {
        let captured = parse_capture(&output(3, "", &[], "", "alias ll='ls -l'\n"), 3).unwrap();
        let text = String::from_utf8(render_bash(&captured, &[], &[], None, &EnvPolicy::default())).unwrap();
        assert!(text.contains("shopt -s extglob 2>/dev/null\n"), "{text}");
        assert!(text.contains("set -o braceexpand 2>/dev/null\n"), "{text}");
        let options =
            "shopt -s a\nshopt -s b\nshopt -u c\nset -o x\nset +o y\nshopt -s $(evil)\nshopt -u same\n";
        let grouped = replayed_options(options, "shopt -u same\nshopt -s b\n");
        assert_eq!(grouped, ["shopt -s a", "shopt -u c", "set -o x", "set +o y"]);
        assert!(!text.contains("login_shell") && !text.contains("monitor"), "{text}");
        assert!(!text.contains("xtrace"), "an option as a plain bash -c has it is not replayed: {text}");
        let expand = text.find("shopt -s expand_aliases\n").unwrap();
        assert!(expand < text.find("alias ll='ls -l'\n").unwrap(), "{text}");
    }

    #[test]
    fn the_capture_script_prints_every_marker_in_order() {
        let script = capture_script(SnapshotShell::Bash, 0xabc);
        let mut from = 0;
        for section in SECTIONS {
            let needle = format!("{:016x}:{section}", 0xabc);
            let at = script[from..].find(&needle).unwrap_or_else(|| panic!("{section} in {script}"));
            from += at + needle.len();
        }
    }

    #[test]
    fn inputs_cover_the_user_and_system_files() {
        let inputs = snapshot_inputs(|name| (name == "HOME").then(|| "/h".into()));
        for expected in ["/h/.bashrc", "/h/.profile", "/etc/profile", "/etc/profile.d"] {
            assert!(inputs.contains(&PathBuf::from(expected)), "{expected}");
        }
        assert!(
            !inputs.contains(&PathBuf::from("/h")),
            "the home directory changes with every new file in it"
        );
    }

    proptest! {
        /// Whatever bytes a value holds, its quoted form is one word that bash reads back as the value: no byte
        /// outside the quotes, and every quote inside is the `'\''` sequence.
        #[test]
        fn quoting_keeps_every_value_in_one_word(value in proptest::collection::vec(1u8..=255, 0..64)) {
            let q = single_quoted(&value);
            prop_assert_eq!(q.first(), Some(&b'\''));
            prop_assert_eq!(q.last(), Some(&b'\''));
            let inner = &q[1..q.len() - 1];
            let unescaped: Vec<u8> = String::from_utf8_lossy(inner).replace("'\\''", "'").into_bytes();
            let expected = String::from_utf8_lossy(&value).into_owned().into_bytes();
            prop_assert_eq!(unescaped, expected);
        }

        /// Whatever the startup files print (without the nonce's marker), the state parses back.
        #[test]
        fn any_startup_output_is_kept_apart(startup in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut out = startup.clone();
            out.extend(output(9, "", &[("A", "1")], "", ""));
            let captured = parse_capture(&out, 9).unwrap();
            prop_assert_eq!(captured.startup_output, startup);
            prop_assert_eq!(captured.env, bytes(&[("A", "1")]));
        }
    }
}
