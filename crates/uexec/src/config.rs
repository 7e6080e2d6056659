//! The TOML configuration file: its format, where it is found, and errors that name the key and the line.
//!
//! Every key is optional; unknown keys are errors. Example (all keys):
//!
//! ```toml
//! approval_policy = "on-request"        # untrusted | on-failure | on-request | never
//! sandbox = "workspace-write"           # read-only | workspace-write | danger-full-access
//! writable_roots = ["/var/cache/build"] # extra writable directories (relative: to this file's directory)
//! network = false                       # or a table: [network] allow = ["pypi.org", "*.npmjs.org"], deny = [...]
//! exclude_slash_tmp = false             # leave /tmp out of the writable roots
//! exclude_tmpdir_env_var = false        # leave $TMPDIR out of the writable roots
//! allow_degraded_sandbox = false
//! shell = "/bin/bash"                   # default shell of exec_command (else $SHELL, else /bin/bash)
//! report_protections = true             # note the sandbox after every exec_command output (default false)
//! client_timeout_secs = 330             # like --client-timeout-secs: what the MCP client waits for one call
//! audit_log = "/var/log/uexec.jsonl"    # like --audit-log
//! hide_secrets = true                   # the default: ~/.ssh, ~/.aws, ~/.netrc, ... unreadable when sandboxed
//! hidden_paths = [".env*"]              # more unreadable paths: `~/x`, `/abs`, or workspace globs (* ? **)
//! macos_keychain = false                # the default: sandboxed commands cannot ask the keychain (macOS)
//! allow_tool_files = [".vscode"]        # other tools' files sandboxed commands may write (default: none of
//!                                       # .vscode .idea .zed .cursor .claude .codex .gemini .devcontainer
//!                                       # .mcp.json .envrc .ripgreprc)
//! copy_on_write = ["~/.gradle", "~/.m2"] # more directories sandboxed commands see copy-on-write (Linux; cargo's
//!                                       # home always is): `~/x` or `/abs`
//!
//! [env]
//! inherit = "all"                       # "all", "none", or a list of names to keep: ["PATH", "HOME"]
//! exclude_secrets = true                # the default: drop *KEY*, *SECRET*, *TOKEN*, *PASSWORD*, *PASSWD*,
//!                                       # *PASSPHRASE*, *CREDENTIAL*, *COOKIE*, *_PAT, *_PWD, *_AUTH
//! pass_through = ["GH_TOKEN"]           # inherited secrets a command gets on purpose (exact names); also --pass-env
//! set = { RUST_BACKTRACE = "1" }
//!
//! [limits]                              # uexec_domain::limits::Limits, every field optional
//! max_sessions = 64
//! output_buffer_bytes = 1048576
//! early_exit_grace_ms = 150             # a sandboxed command ending this soon is judged for a sandbox denial
//! approval_timeout_ms = 600000          # a question unanswered this long refuses the call (sooner when the
//!                                       # client gives up on the call sooner)
//!
//! [server]                              # `uexec mcp --listen` only (flags override every key)
//! auth_token_file = "/run/secrets/uexec/token" # like --auth-token-file (relative: to this file's directory)
//! max_clients = 64                      # MCP clients (MCP sessions) held at once
//! max_sessions_per_client = 64          # live command sessions per client (the oldest is pruned beyond)
//! max_sessions_total = 512              # live command sessions across all clients (exec_command refused beyond)
//! memory_per_client = 67108864          # output buffer bytes per client (caps its sessions too)
//! memory_total = 536870912              # output buffer bytes across all clients (caps sessions in total)
//! client_grace_secs = 60                # a disconnected client's sessions are killed after this long
//! shutdown_deadline_secs = 20           # on SIGTERM: how long calls in flight may take to finish
//!
//! [[rules]]                             # command prefix rules; the most restrictive match wins
//! prefix = ["git", "push"]
//! decision = "ask"                      # allow | ask | forbid
//! ```
//!
//! Rules are an array of tables rather than a `"git push" = "ask"` map so that a prefix is an exact argv prefix:
//! no quoting or splitting rules to learn, and arguments with spaces work.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use toml::Spanned;
use uexec_domain::ApprovalPolicy;
use uexec_domain::limits::Limits;
use uexec_domain::rules::RuleDecision;

use crate::cli::SandboxMode;

/// The configuration file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `approval_policy`.
    pub approval_policy: Option<ApprovalPolicy>,
    /// `sandbox`.
    pub sandbox: Option<SandboxMode>,
    /// `writable_roots`.
    #[serde(default)]
    pub writable_roots: Vec<Spanned<PathBuf>>,
    /// `network`: a switch, or the `[network]` table of allowed and denied domains.
    pub network: Option<NetworkConfig>,
    /// `exclude_slash_tmp`.
    pub exclude_slash_tmp: Option<bool>,
    /// `exclude_tmpdir_env_var`.
    pub exclude_tmpdir_env_var: Option<bool>,
    /// `allow_degraded_sandbox`.
    pub allow_degraded_sandbox: Option<bool>,
    /// `shell`.
    pub shell: Option<Spanned<String>>,
    /// `report_protections`.
    pub report_protections: Option<bool>,
    /// `client_timeout_secs`.
    pub client_timeout_secs: Option<u64>,
    /// `audit_log`.
    pub audit_log: Option<Spanned<PathBuf>>,
    /// `hide_secrets`.
    pub hide_secrets: Option<bool>,
    /// `hidden_paths`.
    #[serde(default)]
    pub hidden_paths: Vec<Spanned<String>>,
    /// `macos_keychain`.
    pub macos_keychain: Option<bool>,
    /// `allow_tool_files`.
    #[serde(default)]
    pub allow_tool_files: Vec<Spanned<String>>,
    /// `copy_on_write`.
    #[serde(default)]
    pub copy_on_write: Vec<Spanned<String>>,
    /// `[env]`.
    pub env: Option<EnvSection>,
    /// `[limits]`.
    pub limits: Option<Spanned<Limits>>,
    /// `[[rules]]`.
    #[serde(default)]
    pub rules: Vec<Spanned<RuleEntry>>,
    /// `[server]`.
    pub server: Option<ServerSection>,
}

/// `[server]`: the network server's limits (`uexec mcp --listen`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// The file holding the bearer token.
    pub auth_token_file: Option<PathBuf>,
    /// MCP clients held at once.
    pub max_clients: Option<usize>,
    /// Live command sessions per client.
    pub max_sessions_per_client: Option<usize>,
    /// Live command sessions across all clients.
    pub max_sessions_total: Option<usize>,
    /// Output buffer bytes per client.
    pub memory_per_client: Option<usize>,
    /// Output buffer bytes across all clients.
    pub memory_total: Option<usize>,
    /// Seconds a disconnected client's sessions are kept.
    pub client_grace_secs: Option<u64>,
    /// Seconds calls in flight may take to finish on SIGTERM.
    pub shutdown_deadline_secs: Option<u64>,
}

/// `network = true|false`, or `[network]` with `allow` and `deny` domain lists (the allowlist mode: commands
/// reach only uexec's proxy, which connects to allowed domains only; `deny` wins).
#[derive(Debug, Clone)]
pub enum NetworkConfig {
    /// `network = true` (the host's network) or `false` (none).
    Switch(bool),
    /// `[network]`.
    Domains(NetworkSection),
}

impl<'de> Deserialize<'de> for NetworkConfig {
    /// Says what is allowed here, never the Rust type (`network = "yes"`: "expected `network = true`, ...").
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NetworkVisitor;
        impl<'de> Visitor<'de> for NetworkVisitor {
            type Value = NetworkConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "`network = true`, `network = false`, or a `[network]` table with `allow` and `deny` lists of \
                     domains",
                )
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<NetworkConfig, E> {
                Ok(NetworkConfig::Switch(v))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<NetworkConfig, A::Error> {
                NetworkSection::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(NetworkConfig::Domains)
            }
        }
        deserializer.deserialize_any(NetworkVisitor)
    }
}

/// `[network]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    /// Domains commands may reach through the proxy.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Domains they never reach.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `[env]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// Which inherited variables to keep.
    pub inherit: Option<InheritSpec>,
    /// Drop variables whose names look like secrets (default: true).
    pub exclude_secrets: Option<bool>,
    /// Inherited variables kept although their names look like secrets.
    #[serde(default)]
    pub pass_through: Vec<String>,
    /// Variables to set.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

/// `inherit = "all" | "none" | ["NAME", ...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InheritSpec {
    /// Keep every inherited variable.
    All,
    /// Keep none.
    None,
    /// Keep only these.
    Only(Vec<String>),
}

impl<'de> Deserialize<'de> for InheritSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InheritVisitor;
        impl<'de> Visitor<'de> for InheritVisitor {
            type Value = InheritSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"all\", \"none\" or a list of variable names")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<InheritSpec, E> {
                match v {
                    "all" => Ok(InheritSpec::All),
                    "none" => Ok(InheritSpec::None),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<InheritSpec, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(InheritSpec::Only(names))
            }
        }
        deserializer.deserialize_any(InheritVisitor)
    }
}

/// One `[[rules]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    /// The argv prefix the rule matches.
    pub prefix: Vec<String>,
    /// What happens to a matching command.
    pub decision: RuleDecision,
}

/// A configuration file that cannot be used: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// The file is not valid TOML for this format, or a value is invalid.
    #[error("invalid config file {}:{line}:{column}: {message}\n  {line} | {source_line}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong, naming the key.
        message: String,
        /// The offending line, for context.
        source_line: String,
    },
}

/// A loaded configuration file and the text it came from (for error positions).
#[derive(Debug)]
pub struct LoadedConfig {
    /// The file.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
    /// Its parsed content.
    pub file: ConfigFile,
}

impl LoadedConfig {
    /// An error about the value at `span`, naming `key`.
    pub fn error_at(&self, span: Range<usize>, key: &str, message: impl fmt::Display) -> ConfigError {
        invalid(&self.path, &self.text, span.start, format!("`{key}`: {message}"))
    }

    /// The directory relative paths in the file are resolved against.
    pub fn base_dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("/"))
    }
}

/// Where the configuration comes from: `--config FILE` (must exist), else the XDG location if it exists.
pub fn locate(
    explicit: Option<&Path>,
    get_env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<(PathBuf, bool)> {
    if let Some(path) = explicit {
        return Some((path.to_path_buf(), true));
    }
    let base = get_env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| get_env("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    let path = base.join("uexec").join("config.toml");
    Some((path, false))
}

/// Read and parse `path`. `required` makes a missing file an error; otherwise a missing file is `Ok(None)`.
pub fn load(path: &Path, required: bool) -> Result<Option<LoadedConfig>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ConfigError::Read { path: path.to_path_buf(), reason: e.to_string() }),
    };
    let file = parse(path, &text)?;
    Ok(Some(LoadedConfig { path: path.to_path_buf(), text, file }))
}

/// Parse configuration text; errors carry the line and column.
pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, ConfigError> {
    toml::from_str::<ConfigFile>(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        let message = e.message().trim().to_owned();
        let message = match key_on_line(text, offset) {
            Some(key) if !message.contains(&format!("`{key}`")) => format!("`{key}`: {message}"),
            _ => message,
        };
        invalid(path, text, offset, message)
    })
}

fn invalid(path: &Path, text: &str, offset: usize, message: String) -> ConfigError {
    let (line, column) = line_col(text, offset);
    let source_line = text.lines().nth(line - 1).unwrap_or_default().to_owned();
    ConfigError::Invalid { path: path.to_path_buf(), line, column, message, source_line }
}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = before.get(line_start..).map(|s| s.chars().count()).unwrap_or(0) + 1;
    (line, column)
}

/// The key assigned on the line containing `offset` (`key = value`), if the line is an assignment.
fn key_on_line(text: &str, offset: usize) -> Option<String> {
    let (line, _) = line_col(text, offset);
    let source = text.lines().nth(line - 1)?;
    let (key, _) = source.split_once('=')?;
    let key = key.trim().trim_matches('"');
    let valid =
        !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    valid.then(|| key.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<ConfigFile, ConfigError> {
        parse(Path::new("/etc/uexec.toml"), text)
    }

    #[test]
    fn full_example_parses() {
        let text = r#"
approval_policy = "untrusted"
sandbox = "read-only"
writable_roots = ["/var/cache"]
network = true
exclude_slash_tmp = true
exclude_tmpdir_env_var = false
allow_degraded_sandbox = true
shell = "/bin/zsh"
report_protections = false
client_timeout_secs = 330
audit_log = "/tmp/audit.jsonl"

[env]
inherit = ["PATH", "HOME"]
exclude_secrets = true
set = { RUST_BACKTRACE = "1" }

[limits]
max_sessions = 10

[[rules]]
prefix = ["git", "push"]
decision = "ask"

[[rules]]
prefix = ["rm"]
decision = "forbid"
"#;
        let file = parse_str(text).unwrap();
        assert_eq!(file.approval_policy, Some(ApprovalPolicy::Untrusted));
        assert_eq!(file.sandbox, Some(SandboxMode::ReadOnly));
        assert_eq!(file.writable_roots[0].get_ref(), &PathBuf::from("/var/cache"));
        assert!(matches!(file.network, Some(NetworkConfig::Switch(true))));
        let env = file.env.unwrap();
        assert_eq!(env.inherit, Some(InheritSpec::Only(vec!["PATH".into(), "HOME".into()])));
        assert_eq!(env.set.get("RUST_BACKTRACE").map(String::as_str), Some("1"));
        assert_eq!(file.limits.unwrap().get_ref().max_sessions, 10);
        assert_eq!(file.rules.len(), 2);
        assert_eq!(file.rules[0].get_ref().prefix, vec!["git".to_owned(), "push".to_owned()]);
        assert_eq!(file.rules[1].get_ref().decision, RuleDecision::Forbid);
    }

    #[test]
    fn empty_file_is_all_defaults() {
        let file = parse_str("").unwrap();
        assert!(file.approval_policy.is_none() && file.rules.is_empty() && file.limits.is_none());
    }

    #[test]
    fn unknown_key_is_an_error_naming_key_and_line() {
        let err = parse_str("network = false\nnetwrok = true\n").unwrap_err().to_string();
        assert!(err.contains("netwrok"), "{err}");
        assert!(err.contains("/etc/uexec.toml:2:"), "{err}");
    }

    #[test]
    fn unknown_key_in_a_section_is_an_error() {
        let err = parse_str("[limits]\nmax_sesions = 3\n").unwrap_err().to_string();
        assert!(err.contains("max_sesions") && err.contains(":2:"), "{err}");
        let err =
            parse_str("[[rules]]\nprefix = [\"a\"]\ndecision = \"ask\"\nwhy = 1\n").unwrap_err().to_string();
        assert!(err.contains("why") && err.contains(":4:"), "{err}");
    }

    #[test]
    fn wrong_type_names_the_key_and_line() {
        let err = parse_str("sandbox = \"read-only\"\n\nnetwork = \"yes\"\n").unwrap_err().to_string();
        assert!(err.contains("`network`"), "{err}");
        assert!(err.contains(":3:"), "{err}");
        assert!(err.contains("network = \"yes\""), "{err}");
    }

    #[test]
    fn bad_enum_values_are_errors() {
        let err = parse_str("approval_policy = \"sometimes\"\n").unwrap_err().to_string();
        assert!(err.contains("approval_policy") && err.contains("sometimes"), "{err}");
        let err = parse_str("[env]\ninherit = \"some\"\n").unwrap_err().to_string();
        assert!(err.contains("inherit") && err.contains(":2:"), "{err}");
        let err = parse_str("[[rules]]\nprefix = [\"a\"]\ndecision = \"maybe\"\n").unwrap_err().to_string();
        assert!(err.contains("decision") && err.contains(":3:"), "{err}");
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("abc\ndef", 0), (1, 1));
        assert_eq!(line_col("abc\ndef", 5), (2, 2));
        assert_eq!(line_col("abc", 99), (1, 4));
    }

    #[test]
    fn locate_prefers_explicit_then_xdg_then_home() {
        let env = |name: &str| match name {
            "XDG_CONFIG_HOME" => Some("/xdg".into()),
            "HOME" => Some("/home/u".into()),
            _ => None,
        };
        assert_eq!(locate(Some(Path::new("/c.toml")), &env), Some((PathBuf::from("/c.toml"), true)));
        assert_eq!(locate(None, &env), Some((PathBuf::from("/xdg/uexec/config.toml"), false)));
        let home_only = |name: &str| (name == "HOME").then(|| "/home/u".into());
        assert_eq!(
            locate(None, &home_only),
            Some((PathBuf::from("/home/u/.config/uexec/config.toml"), false))
        );
        let relative_xdg = |name: &str| match name {
            "XDG_CONFIG_HOME" => Some("rel".into()),
            "HOME" => Some("/h".into()),
            _ => None,
        };
        assert_eq!(locate(None, &relative_xdg), Some((PathBuf::from("/h/.config/uexec/config.toml"), false)));
        assert_eq!(locate(None, &|_| None), None);
    }

    #[test]
    fn missing_optional_file_is_none_and_missing_explicit_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("none.toml");
        assert!(load(&path, false).unwrap().is_none());
        let err = load(&path, true).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
    }
}
