//! The command line as typed: raw values straight from clap, validated later into [`crate::settings::Settings`]
//! (the ripgrep split between low-level arguments and the validated configuration).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const TOP_AFTER_HELP: &str = "\
Examples:
  uexec mcp                                  serve MCP over stdio; commands may write only in the current directory
  uexec run -- make test                     run one command in this terminal under the sandbox
  uexec run --sandbox read-only -- bash      a shell that cannot write anywhere
  uexec sessions                             every live session of every uexec server of yours
  uexec attach 12345                         watch a session's terminal (--write: type into it; Ctrl-] detaches)
  uexec answer 4242 3 approve                answer an approval question that server asks
  uexec sandbox-report                       what this machine can enforce
  uexec sandbox-profile --platform macos     the Seatbelt profile the macOS sandbox would use

Configuration: --config FILE, else $XDG_CONFIG_HOME/uexec/config.toml (else ~/.config/uexec/config.toml) when it
exists. Flags override the file. Logs go to stderr; filter them with RUST_LOG (e.g. RUST_LOG=uexec=debug).";

const MCP_AFTER_HELP: &str = "\
Tools: exec_command, write_stdin (the unified-exec interface), list_sessions, close_session, read_screen.

Approvals: when the MCP client declares the elicitation capability, a person is asked (approve / approve for
this session / deny). Otherwise the approval policy decides alone, and a command that would need a person is
refused with a message naming the setting that would allow it.

Examples:
  uexec mcp
  uexec mcp --cd ~/src/project --audit-log ~/.local/state/uexec/audit.jsonl
  uexec mcp --approval-policy untrusted --network
  uexec mcp --sandbox read-only --writable-root /var/cache/build

Client configuration (e.g. an mcpServers entry): command \"uexec\", args [\"mcp\", \"--cd\", \"/path/to/project\"].

Network service (MCP Streamable HTTP at /mcp, plus /healthz, /readyz and Prometheus /metrics):
  uexec mcp --listen 127.0.0.1:8080
  uexec mcp --listen 0.0.0.0:8080 --auth-token-file /run/secrets/uexec/token --log-format json
Every request but /healthz and /readyz needs `Authorization: Bearer TOKEN`. The token is read from
--auth-token-file, else the file named by $UEXEC_AUTH_TOKEN_FILE, else [server] auth_token_file (refused inside a
writable root); without one, a loopback server generates a token into a private file
($XDG_RUNTIME_DIR/uexec/listen-tokens, else ~/.local/state/uexec/listen-tokens) and says where; other addresses
need a file. The token file is hidden from sandboxed commands. Each MCP session gets its own sessions, invisible to other
clients.";

const RUN_AFTER_HELP: &str = "\
When stdin and stdout are both terminals the command gets its own pseudo-terminal, relayed to yours in raw mode
(restored on exit; window resizes are forwarded). Otherwise (a pipeline, a redirection, a CI job) the command is
handed uexec's own stdin, stdout and stderr as they are: it reads stdin to its end, its stdout and stderr stay
apart, and `uexec run -- yes | head -n1` ends as `yes | head -n1` does.

Exit status: the command's exit code, 128+N when it was killed by signal N, 125 when nothing ran (invalid
configuration, or the sandbox cannot be enforced), 126 when the program is not executable, 127 when it is not
found.

Nobody is asked for approval (you typed the command): the approval policy and command rules apply to the MCP
server's commands, and --approval-policy is refused here. The environment policy's inherit/exclude_secrets/set
apply, but not the variables forced on MCP commands (TERM, NO_COLOR, PAGER, ...).

Examples:
  uexec run -- cargo build
  uexec run --network -- npm install
  uexec run --allow-domain registry.npmjs.org -- npm install
  uexec run --sandbox read-only -- bash
  uexec run --writable-root ~/.cache -- make";

const SESSIONS_AFTER_HELP: &str = "\
Every uexec mcp server (stdio or --listen) serves a control socket that only you can reach: in
$XDG_RUNTIME_DIR/uexec/control (else ~/.local/state/uexec/control), mode 0700, hidden from every sandboxed command.
Columns: the server (its pid and kind), the client of an HTTP server, the session id, its state (running,
waiting-for-input, exited), age, output size, sandbox, working directory and command. Below: the approval questions
waiting for a person, each with everything it shows (answer one with `uexec answer SERVER QUESTION DECISION`).
--history lists what was approved, denied and refused instead.

Examples:
  uexec sessions
  uexec sessions --json | jq '.[].sessions[].session_id'
  uexec sessions --history";

const ATTACH_AFTER_HELP: &str = "\
Shows the session's terminal: a PTY session's rendered 24x80 screen first, then its output live; a pipe session's
newest output, then the stream. Read-only by default: your keys go nowhere. With --write your keys go to the
program (for example a password at a prompt without echo: the model never reads it). Ctrl-] detaches and is never
sent to the program (read-only, Ctrl-C detaches too). The model's calls read what they would read without you;
the session keeps its size (24x80), whatever yours. Several people may watch at once. Attaching, typing (how many
bytes, never what) and detaching are audit-log records of the server.

Examples:
  uexec attach 12345
  uexec attach --write 12345
  uexec attach --server 4242 --client 2 12345";

const ANSWER_AFTER_HELP: &str = "\
Answers a question the server's approval asks (the same question the MCP client shows), with one of the answers
its form offers (uexec sessions lists them): approve runs the command this once, approve-retry this once and again
without the sandbox if the sandbox blocks it (offered under the policies that retry), approve-session for the rest
of the client's session, approve-prefix every command starting with the prefix the question offers, deny refuses
it; a host's question (allowlist mode) takes approve-session or deny. The first answer decides, from the client,
the operator page or here; a question answered already is refused with a message. The answer is an audit-log
record of the server (question_answered, by control).

Examples:
  uexec sessions                             the questions are listed below the sessions
  uexec answer 4242 3 approve
  uexec answer 4242 3 deny";

const KILL_AFTER_HELP: &str = "\
Kills the session's process tree. The model's next write_stdin on it reads its last output and that it ended.

Examples:
  uexec kill 12345
  uexec kill --server 4242                   every session of that server";

const REPORT_AFTER_HELP: &str = "\
Examples:
  uexec sandbox-report
  uexec sandbox-report --sandbox read-only --network
  uexec sandbox-report --json | jq .report.protections";

const PROFILE_AFTER_HELP: &str = "\
Works on every platform: the profile is generated, not applied.

Examples:
  uexec sandbox-profile --platform macos
  uexec sandbox-profile --platform macos --network --writable-root /opt/cache -- make test";

/// `uexec`: run commands for models and people, sandboxed.
#[derive(Debug, Parser)]
#[command(
    name = "uexec",
    version,
    about = "Unified exec: an MCP server and a command runner that sandbox every command",
    after_help = TOP_AFTER_HELP,
    arg_required_else_help = true
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, global = true, default_value = "text", value_name = "FORMAT")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the Model Context Protocol over stdio, or over HTTP with --listen (exec_command, write_stdin, ...).
    #[command(after_help = MCP_AFTER_HELP)]
    Mcp(McpArgs),
    /// Run one command under the sandbox, attached to this terminal, and exit with its exit code.
    #[command(after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// List every live session of every uexec server of yours on this machine.
    #[command(after_help = SESSIONS_AFTER_HELP)]
    Sessions(SessionsArgs),
    /// Watch a live session's terminal; --write hands you the keyboard. Ctrl-] detaches.
    #[command(after_help = ATTACH_AFTER_HELP)]
    Attach(AttachArgs),
    /// Kill a live session, or every session of one server.
    #[command(after_help = KILL_AFTER_HELP)]
    Kill(KillArgs),
    /// Answer an approval question waiting for a person (as listed by `uexec sessions`).
    #[command(after_help = ANSWER_AFTER_HELP)]
    Answer(AnswerArgs),
    /// Show what this machine can enforce, and what the given policy would enforce.
    #[command(name = "sandbox-report", after_help = REPORT_AFTER_HELP)]
    SandboxReport(ReportArgs),
    /// Print the sandbox profile and argv a platform's sandbox would use for a command.
    #[command(name = "sandbox-profile", after_help = PROFILE_AFTER_HELP)]
    SandboxProfile(ProfileArgs),
    /// Apply a patch in the apply_patch format to the files of the working directory (what an intercepted
    /// `apply_patch` call runs as).
    #[command(name = "apply-patch", hide = true)]
    ApplyPatch(ApplyPatchArgs),
}

/// `uexec apply-patch`.
#[derive(Debug, Clone, Args)]
pub struct ApplyPatchArgs {
    /// The patch, possibly in several pieces that are joined.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "PATCH")]
    pub patch: Vec<OsString>,
}

/// `--sandbox` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Read everything, write nothing.
    ReadOnly,
    /// Read everything, write in the workspace, /tmp, $TMPDIR and the writable roots.
    WorkspaceWrite,
    /// No sandbox at all.
    DangerFullAccess,
}

/// `--approval-policy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApprovalArg {
    /// Only known-safe read-only commands run without asking.
    Untrusted,
    /// Run sandboxed; ask before retrying outside the sandbox after a denial.
    OnFailure,
    /// Ask only when the caller requests escalation (default).
    OnRequest,
    /// Never ask; what would need asking is refused.
    Never,
}

/// The policy flags, the same on every subcommand that runs or describes commands.
#[derive(Debug, Clone, Default, Args)]
pub struct PolicyArgs {
    /// Sandbox policy [default: workspace-write].
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,
    /// An extra directory commands may write to under workspace-write (repeatable; added to the config's).
    #[arg(long = "writable-root", value_name = "DIR")]
    pub writable_roots: Vec<PathBuf>,
    /// Allow network access (default: off).
    #[arg(long, conflicts_with = "no_network")]
    pub network: bool,
    /// Deny network access even when the config file allows it.
    #[arg(long)]
    pub no_network: bool,
    /// Allow network access to DOMAIN only, through uexec's proxy (repeatable; `*.example.com` for every name
    /// below it, `example.com:8443` for one port, `*` for every host; added to the config's `[network] allow`).
    #[arg(long = "allow-domain", value_name = "DOMAIN", conflicts_with = "no_network")]
    pub allow_domains: Vec<String>,
    /// Never connect to DOMAIN, whatever is allowed (repeatable; with --network: every other host, through the
    /// proxy; added to the config's `[network] deny`).
    #[arg(long = "deny-domain", value_name = "DOMAIN", conflicts_with = "no_network")]
    pub deny_domains: Vec<String>,
    /// When to ask a person [default: on-request].
    #[arg(long, value_enum, value_name = "POLICY")]
    pub approval_policy: Option<ApprovalArg>,
    /// Configuration file (TOML). Default: $XDG_CONFIG_HOME/uexec/config.toml when it exists.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Run even when the sandbox can only be partly enforced (default: refuse, nothing runs).
    #[arg(long)]
    pub allow_degraded_sandbox: bool,
    /// Pass the inherited variable NAME to commands although its name looks like a secret (repeatable; added to
    /// the config's `[env] pass_through`). Variables named like *KEY*, *TOKEN*, *SECRET*, ... are dropped
    /// otherwise.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// The workspace: commands run here and may write here under workspace-write [default: current directory].
    #[arg(short = 'C', long = "cd", value_name = "DIR")]
    pub cwd: Option<PathBuf>,
}

/// `uexec mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Policy.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Append every approval request and decision, and every command's begin and end, to FILE (JSON Lines).
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Reproducible session ids and chunk ids (for tests).
    #[arg(long, value_name = "SEED", hide = true)]
    pub id_seed: Option<u64>,
    /// How long the MCP client waits for one tool call, in seconds (0: as long as it takes). Every wait is cut
    /// to fit in it; without it the client's clientInfo decides (5 s for the Python SDK's default name, which
    /// the OpenAI Agents SDK sends), else 60 s, the TypeScript SDK's default.
    #[arg(long, value_name = "SECS")]
    pub client_timeout_secs: Option<u64>,
    /// The network service.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The flags of `uexec mcp --listen` (each overrides the config's `[server]` key of the same name).
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Serve MCP over Streamable HTTP on ADDR (e.g. 127.0.0.1:8080) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// The file holding the bearer token every request must carry (default: $UEXEC_AUTH_TOKEN_FILE; without
    /// one a loopback server generates a token into a private file and prints where).
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub auth_token_file: Option<PathBuf>,
    /// MCP clients held at once [default: 64].
    #[arg(long, value_name = "N", requires = "listen")]
    pub max_clients: Option<usize>,
    /// Live command sessions per client; beyond, the least recently used is pruned [default: 64].
    #[arg(long, value_name = "N", requires = "listen")]
    pub max_sessions_per_client: Option<usize>,
    /// Live command sessions across all clients; beyond, exec_command is refused [default: 512].
    #[arg(long, value_name = "N", requires = "listen")]
    pub max_sessions_total: Option<usize>,
    /// Output buffer memory per client in bytes: caps its sessions at BYTES / output_buffer_bytes [default: 64 MiB].
    #[arg(long, value_name = "BYTES", requires = "listen")]
    pub memory_per_client: Option<usize>,
    /// Output buffer memory across all clients in bytes [default: 512 MiB].
    #[arg(long, value_name = "BYTES", requires = "listen")]
    pub memory_total: Option<usize>,
    /// Seconds a client with no open connection keeps its sessions (reconnecting with its MCP session id
    /// resumes them); then they are killed [default: 60].
    #[arg(long, value_name = "SECS", requires = "listen")]
    pub client_grace_secs: Option<u64>,
    /// On SIGTERM, seconds calls in flight may take to finish before every session is killed [default: 20].
    #[arg(long, value_name = "SECS", requires = "listen")]
    pub shutdown_deadline_secs: Option<u64>,
}

/// `uexec run`.
#[derive(Debug, Clone, Args)]
// Nobody is asked about a command the person typed: the flag is refused, and not offered.
#[command(mut_arg("approval_policy", |a| a.hide(true)))]
pub struct RunArgs {
    /// Policy.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Append the command's begin and end to FILE (JSON Lines).
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// The command and its arguments (after `--`; a first word starting with `-` needs the `--`, so that a
    /// misspelled flag is reported as one instead of run as the program).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `uexec sessions`.
#[derive(Debug, Clone, Args)]
pub struct SessionsArgs {
    /// Print JSON (one array of servers, each with its sessions and its waiting questions) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print what was approved (once, for the session, by prefix), denied, refused by the policy, refused by
    /// the sandbox, and the decisions about hosts, per session, instead of the live sessions.
    #[arg(long)]
    pub history: bool,
}

/// `uexec answer`.
#[derive(Debug, Clone, Args)]
pub struct AnswerArgs {
    /// The server's pid (as `uexec sessions` lists it).
    #[arg(value_name = "SERVER")]
    pub server: u32,
    /// The question's number (as `uexec sessions` lists it).
    #[arg(value_name = "QUESTION")]
    pub question: u64,
    /// The answer.
    #[arg(value_name = "DECISION", value_parser = ["approve", "approve-retry", "approve-session", "approve-prefix", "deny"])]
    pub decision: String,
}

/// `uexec attach`.
#[derive(Debug, Clone, Args)]
pub struct AttachArgs {
    /// The session id (as `uexec sessions` lists it).
    #[arg(value_name = "ID")]
    pub id: u32,
    /// Type into the session: your keys go to the program (Ctrl-] still detaches).
    #[arg(long)]
    pub write: bool,
    /// The server's pid, when several servers have a session with this id.
    #[arg(long, value_name = "PID")]
    pub server: Option<u32>,
    /// The client of an HTTP server, when several of its clients have a session with this id.
    #[arg(long, value_name = "N")]
    pub client: Option<u64>,
}

/// `uexec kill`.
#[derive(Debug, Clone, Args)]
pub struct KillArgs {
    /// The session id; without one, --server names the server whose sessions are all killed.
    #[arg(value_name = "ID", required_unless_present = "server")]
    pub id: Option<u32>,
    /// The server's pid.
    #[arg(long, value_name = "PID")]
    pub server: Option<u32>,
    /// The client of an HTTP server.
    #[arg(long, value_name = "N")]
    pub client: Option<u64>,
}

/// `uexec sandbox-report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Policy.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Platforms `sandbox-profile` can describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfilePlatform {
    /// Seatbelt through `sandbox-exec`.
    Macos,
}

/// `uexec sandbox-profile`.
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// The platform whose sandbox to describe.
    #[arg(long, value_enum)]
    pub platform: ProfilePlatform,
    /// Policy.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The command to wrap [default: the shell running `true`].
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
