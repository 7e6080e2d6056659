//! The heuristic that tells a sandbox denial from an ordinary failure (spec A6).
//!
//! A run counts as denied by the sandbox when it exited non-zero and either its output (lower-cased) contains one
//! of [`SANDBOX_DENIED_KEYWORDS`], or its exit code is 159 (128 + SIGSYS: killed by a seccomp filter). Exit codes
//! 2, 126 and 127 (usage error, not executable, not found) without such output are ordinary failures. The caller
//! applies the early-exit grace window; this function only judges the exit code and output.
//!
//! That heuristic is the fallback. Where the sandbox can say what it refused, the evidence is a list of
//! [`Refusal`]s instead: name lookups the sandbox answered itself with the network off (recorded by the
//! sandbox, never read from the output), connections the allowlist proxy refused, and file or process refusals
//! the output names and the sandbox's plan confirms ([`FilePlan::classify`], [`process_refusals`]: there the
//! evidence is the output's wording, and the note says so). [`refusal_note`] is the one text every mode uses.

use serde::{Deserialize, Serialize};

use crate::tool_files::ToolEntry;

/// Lower-case fragments of the messages a sandbox denial produces.
pub const SANDBOX_DENIED_KEYWORDS: [&str; 7] = [
    "operation not permitted",
    "permission denied",
    "read-only file system",
    "seccomp",
    "sandbox",
    "landlock",
    "failed to write file",
];

/// Exit code of a process killed by SIGSYS (signal 31 on Linux), which a seccomp filter can cause.
pub const SIGSYS_EXIT_CODE: i32 = 128 + 31;

/// At most this many characters of the output line that looked like a denial are kept as evidence.
pub const EVIDENCE_LINE_CHARS: usize = 200;

/// What made a run look denied by the sandbox: shown to the person asked whether to retry it without the
/// sandbox, and in the note returned when it is not retried.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DenialEvidence {
    /// The exit code of the sandboxed run.
    pub exit_code: i32,
    /// The first output line containing a denial keyword (lossy UTF-8, trimmed, at most
    /// [`EVIDENCE_LINE_CHARS`] characters around the keyword, cut parts marked `...`); `None` when only the exit
    /// code (159, SIGSYS) says so. The command wrote it: display it escaped.
    pub line: Option<String>,
    /// What the sandbox refused, when it knows (empty: only the heuristic says so).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<Refusal>,
}

impl DenialEvidence {
    /// Whether the sandbox itself recorded what it refused (its DNS responder, its proxy), rather than only the
    /// command's output saying so: output is the command's to write, so a planted program can print any denial.
    pub fn confirmed_by_sandbox(&self) -> bool {
        self.refusals.iter().any(|refusal| refusal.source() == EvidenceSource::Sandbox)
    }

    /// Where the evidence comes from, in words, for a person deciding on a retry.
    pub fn provenance(&self) -> &'static str {
        if self.confirmed_by_sandbox() {
            "recorded by the sandbox itself"
        } else {
            "only the command's output says so, and a command can print anything"
        }
    }

    /// One line for a person: the exit code and the output line, quoted with every control, bidi, zero-width
    /// or other invisible character escaped (`uexec_domain::question::escape_visible`), so the command cannot
    /// shape the text.
    pub fn describe(&self) -> String {
        self.describe_with(crate::visible::escape_visible)
    }

    /// [`Self::describe`] with the output line as the command printed it, for text that is escaped as a whole
    /// afterwards (an approval question: `uexec_domain::question` escapes its headline), so nothing is escaped twice.
    pub fn describe_raw(&self) -> String {
        self.describe_with(str::to_owned)
    }

    fn describe_with(&self, show: impl Fn(&str) -> String) -> String {
        if !self.refusals.is_empty() {
            let what: Vec<String> = self.refusals.iter().take(MAX_NOTED).map(|r| show(&r.what())).collect();
            return format!("exit code {}; the sandbox refused: {}", self.exit_code, what.join("; "));
        }
        match &self.line {
            Some(line) => format!("exit code {}, output line \"{}\"", self.exit_code, show(line)),
            None if self.exit_code == SIGSYS_EXIT_CODE => {
                format!("exit code {} (killed by SIGSYS: a system call filter)", self.exit_code)
            }
            None => format!("exit code {}", self.exit_code),
        }
    }
}

/// Why a run that exited with `exit_code` and printed `output` looks denied by the sandbox, or `None` when it
/// does not (see the module documentation).
pub fn denial_evidence(exit_code: i32, output: &[u8]) -> Option<DenialEvidence> {
    if exit_code == 0 {
        return None;
    }
    for line in output.split(|b| *b == b'\n') {
        let lower = line.to_ascii_lowercase();
        let found = SANDBOX_DENIED_KEYWORDS
            .iter()
            .find_map(|keyword| lower.windows(keyword.len()).position(|w| w == keyword.as_bytes()));
        if let Some(at) = found {
            return Some(DenialEvidence { exit_code, line: Some(excerpt(line, at)), refusals: Vec::new() });
        }
    }
    (exit_code == SIGSYS_EXIT_CODE).then_some(DenialEvidence { exit_code, line: None, refusals: Vec::new() })
}

/// The evidence for a retry decision when the sandbox gave `refusals` (`Some`: it can say what it refused, so
/// the keyword heuristic is not used; `None`: it cannot, and [`denial_evidence`] decides). A run counts as
/// denied when it exited non-zero and the sandbox refused something, or when it was killed by SIGSYS.
pub fn evidence_from(
    exit_code: i32,
    output: &[u8],
    refusals: Option<Vec<Refusal>>,
) -> Option<DenialEvidence> {
    let Some(refusals) = refusals else { return denial_evidence(exit_code, output) };
    if exit_code == 0 {
        return None;
    }
    if refusals.is_empty() {
        return (exit_code == SIGSYS_EXIT_CODE).then_some(DenialEvidence { exit_code, line: None, refusals });
    }
    Some(DenialEvidence { exit_code, line: None, refusals })
}

/// At most this many refusals are named in one note (the rest are counted).
pub const MAX_NOTED: usize = 4;

/// How a refusal is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceSource {
    /// The sandbox recorded it itself (its DNS responder, its proxy): not read from the output.
    Sandbox,
    /// The output names it, and the sandbox's plan says it refuses it: only the output's wording says the
    /// command tried.
    Output,
}

/// Why a file was refused, from the sandbox's plan.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum FileRule {
    /// The policy is `read-only`: nothing is writable.
    ReadOnlyPolicy,
    /// Outside every writable root.
    OutsideRoots,
    /// A protected entry inside a writable root (`.git/config`, hooks, `.uexec`).
    Protected {
        /// The protected entry that holds the path.
        entry: String,
    },
    /// Another tool's file in the workspace (`.vscode`, `.mcp.json`: `crate::tool_files`), which the person can
    /// allow by name.
    ToolFile {
        /// The protected entry that holds the path.
        entry: String,
        /// Its name in `crate::tool_files::TOOL_ENTRIES` (`.vscode`).
        name: String,
    },
    /// The sandbox's `/proc`: read-only, other processes' memory, environment and descriptors out of reach,
    /// and kernel state that needs a capability the sandbox drops (`/proc/self/stack`).
    Proc,
    /// A hidden secret location.
    Hidden {
        /// The hidden location that holds the path.
        location: String,
    },
}

/// One thing the sandbox refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Refusal {
    /// A name lookup with the network off (the sandbox answered it itself).
    Lookup {
        /// The name looked up (lower-case, without the final dot).
        name: String,
    },
    /// A connection the sandbox refused (`host:port`, or an address).
    Connect {
        /// What was connected to.
        target: String,
        /// Why: `network off`, `not on the domain allowlist`, `deny pattern ...`.
        reason: String,
        /// The host to name in `--allow-domain`, when one would allow it.
        allow: Option<String>,
    },
    /// A file access the plan refuses.
    File {
        /// The path (as the output wrote it, made absolute).
        path: String,
        /// The rule.
        rule: FileRule,
    },
    /// A signal to a process outside the command's sandbox.
    Signal {
        /// The process, as the output named it.
        target: String,
    },
    /// Tracing or debugging (ptrace and friends), which the sandbox always refuses.
    Trace,
    /// Network access with the network off where nothing recorded the lookup (no offline namespace): the
    /// seccomp filter refuses every socket but a unix one, and the output shows a resolver or socket failure.
    Network,
}

impl Refusal {
    /// How this refusal is known.
    pub fn source(&self) -> EvidenceSource {
        match self {
            Refusal::Lookup { .. } | Refusal::Connect { .. } => EvidenceSource::Sandbox,
            Refusal::File { .. } | Refusal::Signal { .. } | Refusal::Trace | Refusal::Network => {
                EvidenceSource::Output
            }
        }
    }

    /// What was refused, in the fewest words that say it, for a model's note (`network off: pypi.org`).
    pub fn short(&self) -> String {
        match self {
            Refusal::Lookup { name } => format!("network off: {name}"),
            Refusal::Connect { target, reason, .. } => format!("{reason}: {target}"),
            Refusal::File { path, rule: FileRule::Hidden { .. } | FileRule::Proc } => {
                format!("hidden: {path}")
            }
            Refusal::File { path, rule: FileRule::ReadOnlyPolicy | FileRule::OutsideRoots } => {
                format!("read-only: {path}")
            }
            Refusal::File { path, rule: FileRule::Protected { .. } | FileRule::ToolFile { .. } } => {
                format!("protected: {path}")
            }
            Refusal::Signal { target } => format!("signal refused: {target}"),
            Refusal::Trace => "ptrace refused".to_owned(),
            Refusal::Network => "network off".to_owned(),
        }
    }

    /// What was refused and why, in a few words (`lookup of pypi.org (network off)`).
    pub fn what(&self) -> String {
        let reason = self.reason();
        match self {
            Refusal::Lookup { name } => format!("lookup of {name} ({reason})"),
            Refusal::Connect { target, .. } => format!("connection to {target} ({reason})"),
            Refusal::File { path, rule: FileRule::Hidden { .. } | FileRule::Proc } => {
                format!("access to {path} ({reason})")
            }
            Refusal::File { path, .. } => format!("write to {path} ({reason})"),
            Refusal::Signal { target } => format!("signal to process {target} ({reason})"),
            Refusal::Trace => format!("ptrace ({reason})"),
            Refusal::Network => format!("network access ({reason})"),
        }
    }

    /// What kind of thing was refused, as the audit record names it: `lookup`, `connect`, `write`, `access`,
    /// `signal` or `ptrace`.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Lookup { .. } => "lookup",
            Refusal::Connect { .. } => "connect",
            Refusal::File { rule: FileRule::Hidden { .. } | FileRule::Proc, .. } => "access",
            Refusal::File { .. } => "write",
            Refusal::Signal { .. } => "signal",
            Refusal::Trace => "ptrace",
            Refusal::Network => "network",
        }
    }

    /// What was refused: the name, `host:port`, path or process (`None` for ptrace, which names none).
    pub fn target(&self) -> Option<&str> {
        match self {
            Refusal::Lookup { name } => Some(name),
            Refusal::Connect { target, .. } | Refusal::Signal { target } => Some(target),
            Refusal::File { path, .. } => Some(path),
            Refusal::Trace | Refusal::Network => None,
        }
    }

    /// Why it was refused (`network off`, `outside the writable roots`, `protected entry /w/.git/config`).
    pub fn reason(&self) -> String {
        match self {
            Refusal::Lookup { .. } | Refusal::Network => "network off".to_owned(),
            Refusal::Connect { reason, .. } => reason.clone(),
            Refusal::File { path, rule } => match rule {
                FileRule::ReadOnlyPolicy => "read-only sandbox".to_owned(),
                FileRule::OutsideRoots => "outside the writable roots".to_owned(),
                FileRule::Protected { entry } if entry == path => "protected entry".to_owned(),
                FileRule::Protected { entry } => format!("protected entry {entry}"),
                FileRule::ToolFile { entry, .. } if entry == path => "tool file rule".to_owned(),
                FileRule::ToolFile { name, .. } => format!("tool file rule {name}"),
                FileRule::Hidden { location } => format!("hidden secret location {location}"),
                FileRule::Proc => "the sandbox's /proc".to_owned(),
            },
            Refusal::Signal { .. } => "outside the sandbox".to_owned(),
            Refusal::Trace => "debuggers and tracers are denied".to_owned(),
        }
    }

    /// This refusal as the audit log records it (the one shape of every kind, see [`RefusalRecord`]).
    pub fn record(&self) -> RefusalRecord {
        RefusalRecord {
            kind: self.kind(),
            target: self.target().map(str::to_owned),
            reason: self.reason(),
            allow: self.how(),
            source: self.source(),
            text: self.what(),
        }
    }

    /// The setting or approval that would allow it, for a caller of the MCP tools (the audit record's).
    fn how(&self) -> String {
        self.how_with(MCP_ESCAPE)
    }

    /// The setting that would allow it, with `escape` the way out of the sandbox for the interface in use.
    fn how_with(&self, escape: &str) -> String {
        match self {
            Refusal::Lookup { name } => {
                format!("--allow-domain {name}, network = true, or {escape}")
            }
            Refusal::Connect { allow: Some(host), .. } => {
                format!("--allow-domain {host} ([network] allow in the config), or {escape}")
            }
            Refusal::Connect { allow: None, .. } => {
                format!("a change to the [network] rules (--deny-domain), or {escape}")
            }
            Refusal::File { rule: FileRule::ReadOnlyPolicy, .. } => {
                format!("--sandbox workspace-write with the directory as a writable root, or {escape}")
            }
            Refusal::File { rule: FileRule::OutsideRoots, .. } => {
                format!("--writable-root DIR (writable_roots in the config), or {escape}")
            }
            Refusal::File { rule: FileRule::Protected { .. } | FileRule::Proc, .. } => {
                format!("only {escape}")
            }
            Refusal::File { rule: FileRule::ToolFile { name, .. }, .. } => match ToolEntry::named(name) {
                // Shorter than the others ("in the config" and who approves left out): the key names itself.
                Some(tool) => {
                    format!("{}, or {}", tool.allow_setting(), escape.split(" (").next().unwrap_or(escape))
                }
                None => format!("only {escape}"),
            },
            Refusal::File { rule: FileRule::Hidden { .. }, .. } => {
                format!("hidden_paths / hide_secrets in the config, or {escape}")
            }
            Refusal::Signal { .. } | Refusal::Trace => format!("only {escape}"),
            Refusal::Network => format!("--allow-domain HOST, network = true, or {escape}"),
        }
    }
}

/// One refusal in the audit log: the same fields whatever refused it (the offline namespace's responder, the
/// allowlist proxy, the plan matched against the output), in one `sandbox_refused` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusalRecord {
    /// [`Refusal::kind`].
    pub kind: &'static str,
    /// [`Refusal::target`].
    pub target: Option<String>,
    /// [`Refusal::reason`].
    pub reason: String,
    /// The setting or approval that would allow it.
    pub allow: String,
    /// How it is known.
    pub source: EvidenceSource,
    /// [`Refusal::what`]: what the note says of it.
    pub text: String,
}

/// The one note for what the sandbox refused during a command (`None` when nothing): one line, each distinct
/// refusal named once (at most [`MAX_NOTED`], the rest counted), what would allow it, and, for refusals known
/// only from the output's wording, that this is the evidence. Every name in it passed the sandbox's parsing
/// (a host name, a path from the output made visible with [`crate::visible::escape_visible`]).
pub fn refusal_note(refusals: &[Refusal]) -> Option<String> {
    refusal_text(refusals).map(|text| format!("[uexec] {text}"))
}

/// The short note a model reads in a tool result (`None` when nothing was refused), without its `[uexec] `
/// prefix (`crate::response::ResponseText::refused`): what was refused, in as few words as say it
/// (`network off: example.com`), each distinct refusal once (at most [`MAX_NOTED`], the
/// rest counted), marked `[from output]` when only the output's wording shows it. It costs a few tokens on every
/// call that meets the sandbox; what would allow it is the tool description's, said once per session (a
/// Codex-trained model asks for `sandbox_permissions=require_escalated`).
pub fn model_note(refusals: &[Refusal]) -> Option<String> {
    let distinct = distinct(refusals);
    if distinct.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = distinct
        .iter()
        .take(MAX_NOTED)
        .map(|refusal| {
            let wording = if refusal.source() == EvidenceSource::Output { " [from output]" } else { "" };
            format!("{}{wording}", crate::visible::escape_visible(&refusal.short()))
        })
        .collect();
    let more = distinct.len().saturating_sub(MAX_NOTED);
    if more > 0 {
        parts.push(format!("{more} more"));
    }
    Some(parts.join("; "))
}

/// Each refusal once, in order.
fn distinct(refusals: &[Refusal]) -> Vec<&Refusal> {
    let mut distinct: Vec<&Refusal> = Vec::new();
    for refusal in refusals {
        if !distinct.contains(&refusal) {
            distinct.push(refusal);
        }
    }
    distinct
}

/// The way out of the sandbox a caller of the MCP tools has: a person approves the command unsandboxed.
pub const MCP_ESCAPE: &str = "sandbox_permissions=require_escalated (a person approves)";

/// The way out of the sandbox a person at `uexec run` has.
pub const RUN_ESCAPE: &str = "--sandbox danger-full-access (no sandbox)";

/// [`refusal_note`] without its `[uexec] ` prefix: the person's note (`uexec run`), with what would allow each
/// refusal in `uexec run`'s own flags and config keys.
pub fn refusal_text(refusals: &[Refusal]) -> Option<String> {
    let distinct = distinct(refusals);
    if distinct.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < distinct.len().min(MAX_NOTED) {
        let refusal = distinct[i];
        let how = refusal.how_with(RUN_ESCAPE);
        let mut what = vec![crate::visible::escape_visible(&refusal.what())];
        // Refusals allowed the same way share one "allow:".
        while i + 1 < distinct.len().min(MAX_NOTED)
            && distinct[i + 1].how_with(RUN_ESCAPE) == how
            && !matches!(distinct[i + 1], Refusal::Lookup { .. } | Refusal::Connect { allow: Some(_), .. })
        {
            i += 1;
            what.push(crate::visible::escape_visible(&distinct[i].what()));
        }
        let wording = if refusal.source() == EvidenceSource::Output { " [seen in the output]" } else { "" };
        parts.push(format!("{}{wording}; allow: {how}", what.join(", ")));
        i += 1;
    }
    let more = distinct.len().saturating_sub(MAX_NOTED);
    let tail = if more > 0 { format!(" (and {more} more)") } else { String::new() };
    Some(format!("sandbox refused: {}{tail}.", parts.join(". ")))
}

/// What the sandbox's plan makes of paths, for matching a failing path against it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilePlan {
    /// `read-only`: nothing is writable.
    pub read_only: bool,
    /// The writable roots (canonical).
    pub writable_roots: Vec<String>,
    /// The protected entries inside them (canonical).
    pub protected: Vec<String>,
    /// Those of [`FilePlan::protected`] that are other tools' files (`crate::tool_files`), each with its name.
    pub tool_files: Vec<(String, String)>,
    /// The hidden locations (canonical), directories and files.
    pub hidden: Vec<String>,
    /// Files writable outside the roots (`/dev/null`, `/dev/tty`).
    pub writable_files: Vec<String>,
}

/// True when `path` is `base` or lies beneath it (component-wise).
fn beneath(path: &str, base: &str) -> bool {
    let base = base.trim_end_matches('/');
    base.is_empty() || path == base || path.strip_prefix(base).is_some_and(|rest| rest.starts_with('/'))
}

/// The kind of error an output line reports for a path, from its wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileError {
    /// `EROFS`: what a write outside the writable roots, or to a protected entry, gets (read-only mounts).
    ReadOnly,
    /// `EACCES` or `EPERM`: what opening a hidden file or a device gets (and many ordinary failures).
    Denied,
    /// `EBUSY` or `EXDEV`: what renaming or removing a protected or hidden entry (a mount point) gets.
    Busy,
    /// `ENOENT`: what reading inside a hidden directory gets (and many ordinary failures).
    Missing,
}

/// The wordings of each [`FileError`] (lower-case), in C library and Python spellings.
const FILE_ERRORS: [(&str, FileError); 10] = [
    ("read-only file system", FileError::ReadOnly),
    ("[errno 30]", FileError::ReadOnly),
    ("erofs", FileError::ReadOnly),
    ("device or resource busy", FileError::Busy),
    ("invalid cross-device link", FileError::Busy),
    ("permission denied", FileError::Denied),
    ("operation not permitted", FileError::Denied),
    ("[errno 13]", FileError::Denied),
    ("no such file or directory", FileError::Missing),
    ("[errno 2]", FileError::Missing),
];

impl FilePlan {
    /// The rule of this plan that explains `error` on `path` (absolute, normalised), or `None` when the plan
    /// does not (the failure is an ordinary one: a file this user cannot read, a missing file, a test that
    /// prints "Permission denied"). A hidden location explains every error; the read-only mounts explain
    /// `EROFS` outside the writable roots and on protected entries; mount points explain `EBUSY` on protected
    /// entries; Landlock explains `EACCES` on devices other than the writable ones; the sandbox's `/proc` (read-only,
    /// other processes out of reach, capabilities dropped) explains `EROFS`, `EACCES` and `EPERM` there.
    pub fn classify(&self, path: &str, error: FileError) -> Option<FileRule> {
        if let Some(location) = self.hidden.iter().filter(|h| beneath(path, h)).max_by_key(|h| h.len()) {
            return Some(FileRule::Hidden { location: location.clone() });
        }
        if self.writable_files.iter().any(|f| f == path) {
            return None;
        }
        if beneath(path, "/proc") && matches!(error, FileError::ReadOnly | FileError::Denied) {
            return Some(FileRule::Proc);
        }
        let protected = self.protected.iter().filter(|p| beneath(path, p)).max_by_key(|p| p.len());
        let in_root = self.writable_roots.iter().any(|root| beneath(path, root));
        let outside = if self.read_only { FileRule::ReadOnlyPolicy } else { FileRule::OutsideRoots };
        let rule = |entry: &String| match self.tool_files.iter().find(|(tool, _)| tool == entry) {
            Some((_, name)) => FileRule::ToolFile { entry: entry.clone(), name: name.clone() },
            None => FileRule::Protected { entry: entry.clone() },
        };
        match error {
            FileError::ReadOnly => match protected {
                Some(entry) if !self.read_only => Some(rule(entry)),
                _ if self.read_only || !in_root => Some(outside),
                _ => None,
            },
            FileError::Busy => protected.map(rule),
            FileError::Denied => (beneath(path, "/dev") && !in_root).then_some(outside),
            FileError::Missing => None,
        }
    }
}

/// At most this many output lines (from the end) are searched for failing paths.
pub const MAX_SEARCHED_LINES: usize = 200;

/// Paths named on output lines that report an error: each path as written (quoted or bare, absolute or
/// relative) with the error the line's wording names, from the last [`MAX_SEARCHED_LINES`] lines, each pair
/// once. The caller makes them absolute and canonical, then asks [`FilePlan::classify`].
pub fn failing_paths(output: &[u8]) -> Vec<(String, FileError)> {
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(MAX_SEARCHED_LINES);
    let mut paths: Vec<(String, FileError)> = Vec::new();
    for line in &lines[start..] {
        let lower = line.to_ascii_lowercase();
        let Some((at, error)) = FILE_ERRORS.iter().find_map(|(w, e)| lower.find(w).map(|at| (at, *e))) else {
            continue;
        };
        let mut words = paths_in(line);
        // `/usr/bin/bash: line 1: /x: Read-only file system`: the program that prints, not a path it failed on.
        if let Some((program, between)) = line.get(..at).and_then(|before| before.split_once(": "))
            && !program.contains(char::is_whitespace)
            && between.contains(": ")
        {
            words.retain(|w| w != program);
        }
        // `prog: NAME: Read-only file system`: the word right before the message names the path, slash or not.
        if let Some(before) = line.get(..at).and_then(|b| b.strip_suffix(": "))
            && let Some(word) = before.rsplit(": ").next()
            && !word.is_empty()
            && !word.contains(char::is_whitespace)
            && !words.iter().any(|w| w == word)
            && word != before
        {
            words.push(word.to_owned());
        }
        for path in words {
            if !paths.iter().any(|(p, e)| *p == path && *e == error) {
                paths.push((path, error));
            }
        }
    }
    paths
}

/// The path-like words of `line`: quoted strings (`'x'`, `"x"`, `` `x' ``, `‘x’`) containing a `/` or naming a
/// dot file, and bare words containing a `/` (not a URL), with trailing `:`/`,`/`;`/`.` dropped.
fn paths_in(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let close = match c {
            '\'' | '"' => Some(c),
            '`' | '‘' => Some(if c == '`' { '\'' } else { '’' }),
            _ => None,
        };
        if let Some(close) = close
            && let Some(len) = chars[i + 1..].iter().position(|&d| d == close || (c == '`' && d == '`'))
        {
            let word: String = chars[i + 1..i + 1 + len].iter().collect();
            if word.contains('/') || word.starts_with('.') {
                found.push(word);
            }
            i += len + 2;
            continue;
        }
        let at_word_start =
            i == 0 || chars[i - 1].is_whitespace() || chars[i - 1] == '(' || chars[i - 1] == '=';
        if at_word_start && !c.is_whitespace() {
            let len =
                chars[i..].iter().position(|d| d.is_whitespace() || *d == ')').unwrap_or(chars.len() - i);
            let word: String = chars[i..i + len].iter().collect();
            let word = word.trim_end_matches([':', ',', ';', '.']).to_owned();
            if word.len() > 1 && word.contains('/') && !word.contains("://") {
                found.push(word);
            }
            i += len;
            continue;
        }
        i += 1;
    }
    found
}

/// `path` made absolute against `cwd` (and `~` against `home`) and normalised lexically (`.` and `..`
/// removed); `None` for an empty path or a `~` without a home.
pub fn absolute_path(path: &str, cwd: &str, home: Option<&str>) -> Option<String> {
    let joined = if let Some(rest) = path.strip_prefix("~/") {
        format!("{}/{rest}", home?)
    } else if path.starts_with('/') {
        path.to_owned()
    } else if path.is_empty() {
        return None;
    } else {
        format!("{cwd}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// Signal and ptrace refusals the output reports (`kill: (123) - Operation not permitted`, `kill: sending
/// signal to 123 failed: Operation not permitted`, `ptrace(PTRACE_TRACEME): Operation not permitted`,
/// `ptrace: Operation not permitted`): the sandbox refuses every ptrace, and signals beyond its scope. The
/// evidence is the output's wording.
pub fn process_refusals(output: &[u8]) -> Vec<Refusal> {
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(MAX_SEARCHED_LINES);
    let mut found = Vec::new();
    for line in &lines[start..] {
        let lower = line.to_ascii_lowercase();
        if !lower.contains("operation not permitted") {
            continue;
        }
        let refusal = if lower.contains("ptrace") || lower.contains("process_vm_") {
            Refusal::Trace
        } else if let Some(rest) = lower.find("kill").map(|at| &line[at..]) {
            let target: String = rest
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(char::is_ascii_digit)
                .take(10)
                .collect();
            if target.is_empty() {
                continue;
            }
            Refusal::Signal { target }
        } else {
            continue;
        };
        if !found.contains(&refusal) {
            found.push(refusal);
        }
    }
    found
}

/// Lower-case fragments of what a resolver or a socket call prints when the network is cut off: a lookup
/// that cannot open a socket, a connection refused by a filter, an unreachable network.
const NETWORK_FAILURES: [&str; 10] = [
    "could not resolve host",
    "temporary failure in name resolution",
    "name or service not known",
    "no address associated with hostname",
    "failed to resolve",
    "failed to lookup address",
    "network is unreachable",
    "socket: operation not permitted",
    "connect: operation not permitted",
    "getaddrinfo",
];

/// A network refusal the output reports, for a command that ran with the network off where nothing records its
/// lookups (no offline namespace): the evidence is the output's wording, and only network wording counts, so a
/// file the person cannot read (`cat /etc/shadow`) is not taken for the sandbox's refusal.
pub fn network_refusals(output: &[u8]) -> Vec<Refusal> {
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(MAX_SEARCHED_LINES);
    let seen = lines[start..].iter().any(|line| {
        let lower = line.to_ascii_lowercase();
        NETWORK_FAILURES.iter().any(|phrase| lower.contains(phrase))
    });
    if seen { vec![Refusal::Network] } else { Vec::new() }
}

/// True when a run that exited with `exit_code` and printed `output` was most likely denied by the sandbox.
#[cfg(test)]
pub(crate) fn is_likely_sandbox_denied(exit_code: i32, output: &[u8]) -> bool {
    denial_evidence(exit_code, output).is_some()
}

/// The part of `line` around byte `at`, at most [`EVIDENCE_LINE_CHARS`] characters.
fn excerpt(line: &[u8], at: usize) -> String {
    let before = String::from_utf8_lossy(&line[..at]);
    let after = String::from_utf8_lossy(&line[at..]);
    let before: Vec<char> = before.chars().collect();
    let after: Vec<char> = after.trim_end().chars().collect();
    let keep_before = before.len().min(EVIDENCE_LINE_CHARS / 2);
    let keep_after = after.len().min(EVIDENCE_LINE_CHARS - keep_before);
    let mut text = String::new();
    if keep_before < before.len() {
        text.push_str("...");
    }
    text.extend(&before[before.len() - keep_before..]);
    text.extend(&after[..keep_after]);
    if keep_after < after.len() {
        text.push_str("...");
    }
    text.trim_start().to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_keyword_counts_case_insensitively() {
        for output in [
            "touch: cannot touch 'x': Operation not permitted",
            "bash: /etc/x: Permission denied",
            "mkdir: cannot create directory: Read-only file system",
            "killed by SECCOMP",
            "Sandbox: deny file-write",
            "LandLock restriction",
            "error: Failed to write file 'a.txt'",
        ] {
            assert!(is_likely_sandbox_denied(1, output.as_bytes()), "{output}");
        }
    }

    #[test]
    fn exit_zero_is_never_a_denial() {
        assert!(!is_likely_sandbox_denied(0, b"Permission denied"));
        assert!(!is_likely_sandbox_denied(0, b""));
    }

    #[test]
    fn usage_not_executable_and_not_found_alone_are_not_denials() {
        for code in [2, 126, 127] {
            assert!(!is_likely_sandbox_denied(code, b"bash: foo: command not found"));
            assert!(!is_likely_sandbox_denied(code, b""));
        }
        // With a denial message they are.
        assert!(is_likely_sandbox_denied(126, b"bash: ./run.sh: Permission denied"));
    }

    #[test]
    fn sigsys_exit_is_a_denial_even_without_output() {
        assert!(is_likely_sandbox_denied(159, b""));
        assert!(!is_likely_sandbox_denied(1, b"plain failure"));
        assert!(!is_likely_sandbox_denied(137, b""));
    }

    #[test]
    fn evidence_is_the_first_line_with_a_keyword_cut_around_it() {
        let output = b"building\nstep 2\r\ntouch: cannot touch '/etc/x': Permission denied\nmore: Read-only file system\n";
        let evidence = denial_evidence(1, output).unwrap();
        assert_eq!(evidence.exit_code, 1);
        assert_eq!(evidence.line.as_deref(), Some("touch: cannot touch '/etc/x': Permission denied"));
        assert_eq!(
            evidence.describe(),
            "exit code 1, output line \"touch: cannot touch '/etc/x': Permission denied\""
        );
        let long = format!("{}operation not permitted{}", "a".repeat(500), "b".repeat(500));
        let line = denial_evidence(1, long.as_bytes()).unwrap().line.unwrap();
        assert!(line.starts_with("...") && line.ends_with("...") && line.contains("operation not permitted"));
        assert!(line.chars().count() <= EVIDENCE_LINE_CHARS + 6, "{}", line.chars().count());
        assert_eq!(denial_evidence(159, b"").unwrap().line, None);
        assert!(denial_evidence(159, b"").unwrap().describe().contains("SIGSYS"));
        assert_eq!(denial_evidence(0, b"permission denied"), None);
        assert_eq!(denial_evidence(1, b"plain failure"), None);
    }

    #[test]
    fn evidence_shown_to_a_person_escapes_what_the_command_printed() {
        let output = "x: permission denied\u{1b}[2J\u{202e}\u{200b}\r\u{7}".as_bytes();
        let text = denial_evidence(1, output).unwrap().describe();
        assert!(
            text.chars().all(|c| !c.is_control() && !matches!(c, '\u{202a}'..='\u{202e}' | '\u{200b}')),
            "{text:?}"
        );
        assert!(
            text.contains("\\u{1b}") && text.contains("\\u{202e}") && text.contains("\\u{200b}"),
            "{text}"
        );
    }

    #[test]
    fn non_utf8_output_is_searched_too() {
        assert!(is_likely_sandbox_denied(1, b"\xff\xfeOPERATION NOT PERMITTED\xff"));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod refusal_tests {
    use super::*;

    fn plan() -> FilePlan {
        FilePlan {
            read_only: false,
            writable_roots: vec!["/ws".into(), "/tmp".into()],
            protected: vec![
                "/ws/.git/config".into(),
                "/ws/.git/hooks".into(),
                "/ws/.uexec".into(),
                "/ws/.vscode".into(),
            ],
            tool_files: vec![("/ws/.vscode".into(), ".vscode".into())],
            hidden: vec!["/home/me/.ssh".into(), "/ws/.env".into()],
            writable_files: vec!["/dev/null".into()],
        }
    }

    #[test]
    fn the_plan_names_the_rule_and_allows_what_it_allows() {
        use FileError::*;
        let plan = plan();
        assert_eq!(plan.classify("/etc/hosts", ReadOnly), Some(FileRule::OutsideRoots));
        assert_eq!(
            plan.classify("/wsx/a", ReadOnly),
            Some(FileRule::OutsideRoots),
            "a sibling, common prefix"
        );
        assert_eq!(
            plan.classify("/ws/.git/hooks/pre-commit", ReadOnly),
            Some(FileRule::Protected { entry: "/ws/.git/hooks".into() })
        );
        assert_eq!(
            plan.classify("/ws/.git/config", Busy),
            Some(FileRule::Protected { entry: "/ws/.git/config".into() })
        );
        for error in [ReadOnly, Denied, Busy, Missing] {
            assert_eq!(
                plan.classify("/home/me/.ssh/id_rsa", error),
                Some(FileRule::Hidden { location: "/home/me/.ssh".into() })
            );
        }
        let vscode = FileRule::ToolFile { entry: "/ws/.vscode".into(), name: ".vscode".into() };
        assert_eq!(plan.classify("/ws/.vscode/tasks.json", ReadOnly), Some(vscode.clone()));
        assert_eq!(plan.classify("/ws/.vscode", Busy), Some(vscode));
        assert_eq!(plan.classify("/ws/src/.vscode/tasks.json", ReadOnly), None);
        assert_eq!(plan.classify("/ws/.env", Denied), Some(FileRule::Hidden { location: "/ws/.env".into() }));
        assert_eq!(plan.classify("/dev/sda", Denied), Some(FileRule::OutsideRoots));
        assert_eq!(plan.classify("/proc/self/stack", Denied), Some(FileRule::Proc));
        assert_eq!(plan.classify("/proc/nope", Missing), None);
        // The twins: inside a root and not protected, or an error the sandbox does not cause there.
        assert_eq!(plan.classify("/ws/src/main.rs", ReadOnly), None);
        assert_eq!(plan.classify("/ws/.git/objects/ab", ReadOnly), None);
        assert_eq!(plan.classify("/tmp/x", ReadOnly), None);
        assert_eq!(plan.classify("/dev/null", Denied), None);
        assert_eq!(plan.classify("/etc/shadow", Denied), None, "an ordinary permission failure");
        assert_eq!(plan.classify("/etc/nope", Missing), None, "an ordinary missing file");
        assert_eq!(plan.classify("/ws/.git/config", Denied), None);
        let read_only = FilePlan { read_only: true, ..plan };
        assert_eq!(read_only.classify("/ws/a", ReadOnly), Some(FileRule::ReadOnlyPolicy));
        assert_eq!(read_only.classify("/ws/.git/config", ReadOnly), Some(FileRule::ReadOnlyPolicy));
        assert_eq!(read_only.classify("/dev/null", ReadOnly), None);
    }

    #[test]
    fn failing_paths_come_only_from_lines_reporting_an_error() {
        use FileError::*;
        let output = b"touching /ws/ok\n\
            touch: cannot touch '/etc/hosts': Read-only file system\n\
            bash: /etc/passwd: Permission denied\n\
            PermissionError: [Errno 13] Permission denied: '/ws/.git/config'\n\
            OSError: [Errno 30] Read-only file system: \"rel/x\"\n\
            mv: cannot move `a' to `../b': Device or resource busy\n\
            error: could not lock config file .git/config: Read-only file system\n\
            see https://example.com/x: no such file or directory\n";
        let expected: Vec<(String, FileError)> = vec![
            ("/etc/hosts".into(), ReadOnly),
            ("/etc/passwd".into(), Denied),
            ("/ws/.git/config".into(), Denied),
            ("rel/x".into(), ReadOnly),
            ("../b".into(), Busy),
            (".git/config".into(), ReadOnly),
        ];
        assert_eq!(failing_paths(output), expected);
        assert!(failing_paths(b"test failed: Permission denied\n").is_empty(), "no path, no evidence");
        assert!(failing_paths(b"wrote /ws/a ok\n").is_empty());
        assert_eq!(
            failing_paths(b"bash: line 1: out.txt: Read-only file system\n"),
            vec![("out.txt".to_owned(), ReadOnly)]
        );
        assert_eq!(
            failing_paths(b"/usr/bin/bash: line 1: /o/new.txt: Read-only file system\n"),
            vec![("/o/new.txt".to_owned(), ReadOnly)],
            "the shell that prints is not a failing path"
        );
        assert_eq!(
            failing_paths(b"/etc/hosts: Read-only file system\n"),
            vec![("/etc/hosts".to_owned(), ReadOnly)],
            "a line that begins with the path"
        );
    }

    #[test]
    fn paths_are_made_absolute_and_normalised() {
        assert_eq!(absolute_path("../b", "/ws/sub", None).as_deref(), Some("/ws/b"));
        assert_eq!(absolute_path("./x/./y", "/ws", None).as_deref(), Some("/ws/x/y"));
        assert_eq!(absolute_path("~/.ssh/k", "/ws", Some("/home/me")).as_deref(), Some("/home/me/.ssh/k"));
        assert_eq!(absolute_path("~/.ssh/k", "/ws", None), None);
        assert_eq!(absolute_path("/../../etc", "/ws", None).as_deref(), Some("/etc"));
    }

    #[test]
    fn signals_and_ptrace_are_read_from_the_output() {
        let output = b"bash: kill: (4242) - Operation not permitted\n\
            strace: ptrace(PTRACE_TRACEME, ...): Operation not permitted\n\
            kill: (1) - No such process\n";
        assert_eq!(process_refusals(output), vec![Refusal::Signal { target: "4242".into() }, Refusal::Trace]);
        assert!(process_refusals(b"kill: (7) - No such process\n").is_empty());
        assert!(process_refusals(b"mkdir: Operation not permitted\n").is_empty());
    }

    #[test]
    fn one_note_names_each_refusal_once_and_how_to_allow_it() {
        let lookups = [
            Refusal::Lookup { name: "pypi.org".into() },
            Refusal::Lookup { name: "pypi.org".into() },
            Refusal::Lookup { name: "files.pythonhosted.org".into() },
        ];
        let note = refusal_note(&lookups).unwrap();
        assert_eq!(note.matches("pypi.org (network off)").count(), 1, "{note}");
        assert!(note.starts_with("[uexec] sandbox refused: lookup of pypi.org (network off)"), "{note}");
        assert!(
            note.contains("--allow-domain pypi.org, network = true, or --sandbox danger-full-access"),
            "{note}"
        );
        assert!(note.contains("--allow-domain files.pythonhosted.org"), "{note}");
        assert!(!note.contains('\n'));
        let proxy = [Refusal::Connect {
            target: "example.com:443".into(),
            reason: "not on the domain allowlist".into(),
            allow: Some("example.com".into()),
        }];
        let note = refusal_note(&proxy).unwrap();
        assert!(
            note.starts_with(
                "[uexec] sandbox refused: connection to example.com:443 (not on the domain allowlist)"
            ),
            "{note}"
        );
        assert!(note.contains("--allow-domain example.com"), "{note}");
        let file = [Refusal::File { path: "/etc/hosts".into(), rule: FileRule::OutsideRoots }];
        let note = refusal_note(&file).unwrap();
        assert!(
            note.contains("write to /etc/hosts (outside the writable roots) [seen in the output]"),
            "{note}"
        );
        assert!(note.contains("--writable-root DIR"), "{note}");
        // Another tool's file: the rule and the key that allows it by name, not escalation alone; a protected
        // git entry beside it keeps its own "allow:".
        let tool = [
            Refusal::File {
                path: "/ws/.vscode/tasks.json".into(),
                rule: FileRule::ToolFile { entry: "/ws/.vscode".into(), name: ".vscode".into() },
            },
            Refusal::File {
                path: "/ws/.git/config".into(),
                rule: FileRule::Protected { entry: "/ws/.git/config".into() },
            },
        ];
        let note = refusal_note(&tool).unwrap();
        assert!(
            note.contains(
                "write to /ws/.vscode/tasks.json (tool file rule .vscode) [seen in the output]; allow: \
                 allow_tool_files = [\".vscode\"], or --sandbox danger-full-access"
            ),
            "{note}"
        );
        assert!(
            note.contains("write to /ws/.git/config (protected entry) [seen in the output]; allow: only"),
            "{note}"
        );
        assert_eq!(refusal_note(&[]), None);
        let many: Vec<Refusal> = (0..9).map(|i| Refusal::Lookup { name: format!("h{i}.example") }).collect();
        let note = refusal_note(&many).unwrap();
        assert!(note.ends_with("(and 5 more)."), "{note}");
        // What the command chose is shown escaped.
        let odd = [Refusal::File { path: "/etc/x\u{1b}[2J".into(), rule: FileRule::OutsideRoots }];
        assert!(refusal_note(&odd).unwrap().contains("\\u{1b}"));
    }

    /// A model's note says what was refused in a few words, once each, never how to allow it (the tool
    /// description says that once): `network off: example.com` costs 8 tokens with its prefix, within what a
    /// result may cost beyond Codex's own tool.
    #[test]
    fn a_models_note_is_a_few_words_per_refusal() {
        use crate::truncate::approx_token_count;
        let lookup =
            [Refusal::Lookup { name: "example.com".into() }, Refusal::Lookup { name: "example.com".into() }];
        let note = model_note(&lookup).unwrap();
        assert_eq!(note, "network off: example.com");
        assert!(approx_token_count("[uexec] ".len() + note.len()) <= 9, "{note}");
        let file = [Refusal::File { path: "/etc/x\u{1b}[2J".into(), rule: FileRule::OutsideRoots }];
        let note = model_note(&file).unwrap();
        assert!(note.starts_with("read-only: /etc/x\\u{1b}") && note.ends_with("[from output]"), "{note}");
        let proxy = [Refusal::Connect {
            target: "example.com:443".into(),
            reason: "not on the domain allowlist".into(),
            allow: Some("example.com".into()),
        }];
        assert_eq!(model_note(&proxy).unwrap(), "not on the domain allowlist: example.com:443");
        let many: Vec<Refusal> = (0..9).map(|i| Refusal::Lookup { name: format!("h{i}.example") }).collect();
        assert!(model_note(&many).unwrap().ends_with("; 5 more"));
        assert_eq!(model_note(&[]), None);
    }

    /// The token cost of a note (the reference's estimate, 4 bytes a token) stays small: one refusal is at most
    /// about 46 tokens (46 for a lookup of `registry.npmjs.org`), and a note never grows past [`MAX_NOTED`].
    #[test]
    fn a_note_costs_few_tokens() {
        use crate::truncate::approx_token_count;
        let one = refusal_text(&[Refusal::Lookup { name: "registry.npmjs.org".into() }]).unwrap();
        assert!(approx_token_count(one.len()) <= 46, "{} tokens: {one}", approx_token_count(one.len()));
        let file = refusal_text(&[Refusal::File {
            path: "/home/me/project/.git/config".into(),
            rule: FileRule::Protected { entry: "/home/me/project/.git/config".into() },
        }])
        .unwrap();
        assert!(approx_token_count(file.len()) <= 46, "{} tokens: {file}", approx_token_count(file.len()));
        let tool = refusal_text(&[Refusal::File {
            path: "/home/me/project/.mcp.json".into(),
            rule: FileRule::ToolFile { entry: "/home/me/project/.mcp.json".into(), name: ".mcp.json".into() },
        }])
        .unwrap();
        assert!(approx_token_count(tool.len()) <= 46, "{} tokens: {tool}", approx_token_count(tool.len()));
        let many: Vec<Refusal> =
            (0..50).map(|i| Refusal::Lookup { name: format!("host{i}.example.org") }).collect();
        let note = refusal_text(&many).unwrap();
        assert!(approx_token_count(note.len()) <= 4 * 46 + 10, "{note}");
    }

    #[test]
    fn the_sandbox_s_evidence_replaces_the_keywords() {
        let lookup = vec![Refusal::Lookup { name: "pypi.org".into() }];
        // A denial the keywords miss is one with evidence.
        let evidence = evidence_from(1, b"Could not resolve host: pypi.org", Some(lookup.clone())).unwrap();
        assert!(
            evidence.describe().contains("the sandbox refused: lookup of pypi.org"),
            "{}",
            evidence.describe()
        );
        // An ordinary failure printing a keyword is none when the sandbox refused nothing.
        assert_eq!(evidence_from(1, b"test failed: Permission denied", Some(Vec::new())), None);
        assert!(evidence_from(159, b"", Some(Vec::new())).is_some());
        assert_eq!(evidence_from(0, b"", Some(lookup)), None);
        // Where the sandbox cannot say, the keywords decide.
        assert!(evidence_from(1, b"Permission denied", None).is_some());
    }

    #[test]
    fn every_refusal_is_recorded_in_one_shape() {
        let cases = [
            (
                Refusal::Lookup { name: "pypi.org".into() },
                "lookup",
                Some("pypi.org"),
                "network off",
                "--allow-domain pypi.org",
            ),
            (
                Refusal::Connect {
                    target: "a.com:443".into(),
                    reason: "not on the domain allowlist".into(),
                    allow: Some("a.com".into()),
                },
                "connect",
                Some("a.com:443"),
                "not on the domain allowlist",
                "--allow-domain a.com",
            ),
            (
                Refusal::File { path: "/etc/hosts".into(), rule: FileRule::OutsideRoots },
                "write",
                Some("/etc/hosts"),
                "outside the writable roots",
                "--writable-root DIR",
            ),
            (
                Refusal::File {
                    path: "/h/.ssh/id".into(),
                    rule: FileRule::Hidden { location: "/h/.ssh".into() },
                },
                "access",
                Some("/h/.ssh/id"),
                "hidden secret location /h/.ssh",
                "hidden_paths",
            ),
            (
                Refusal::Signal { target: "1".into() },
                "signal",
                Some("1"),
                "outside the sandbox",
                "only sandbox_permissions",
            ),
            (Refusal::Trace, "ptrace", None, "debuggers and tracers are denied", "only sandbox_permissions"),
        ];
        for (refusal, kind, target, reason, allow) in cases {
            let record = refusal.record();
            assert_eq!(
                (record.kind, record.target.as_deref(), record.reason.as_str()),
                (kind, target, reason)
            );
            assert!(record.allow.starts_with(allow), "{record:?}");
            assert_eq!(record.text, refusal.what());
            assert_eq!(record.source, refusal.source());
            // The person's note (`uexec run`) names the same settings, with its own way out of the sandbox.
            let person = record
                .allow
                .replace(MCP_ESCAPE, RUN_ESCAPE)
                .replace("sandbox_permissions=require_escalated", "--sandbox danger-full-access");
            assert!(refusal_text(std::slice::from_ref(&refusal)).unwrap().contains(&person), "{record:?}");
        }
    }
}
