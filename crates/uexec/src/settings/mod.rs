//! The validated configuration: defaults, then the config file, then the flags; paths resolved and checked.
//!
//! Settings read the process environment here only (`$SHELL`, `$HOME`, `$XDG_CONFIG_HOME`, the current
//! directory), through a [`ProcessContext`] the caller passes in, so precedence is testable without touching the
//! process. The app's other reads (the commands' base environment, `RUST_LOG`, `$TMPDIR`) are listed in
//! `ARCHITECTURE.md`, "Cross-cutting concerns".

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use uexec_domain::env::{EnvInherit, EnvPolicy};
use uexec_domain::hidden::HiddenPaths;
use uexec_domain::limits::Limits;
use uexec_domain::network::{DomainPattern, DomainRules, NetworkPolicy};
use uexec_domain::rules::{CommandRules, PrefixRule};
use uexec_domain::tool_files::{ALLOW_KEY, ToolFiles};
use uexec_domain::trust::SandboxWrites;
use uexec_domain::{ApprovalPolicy, SandboxPolicy};
use uexec_engine::{gather_writes, writable_by_sandbox};

use crate::cli::{ApprovalArg, PolicyArgs, SandboxMode};

mod hiding;
mod server;
mod state;

use crate::config::{self, InheritSpec, LoadedConfig, ServerSection};
pub use hiding::*;
pub use server::*;
pub use state::*;

/// What the process environment contributes, passed in explicitly.
#[derive(Debug, Clone)]
pub struct ProcessContext {
    /// The current directory.
    pub cwd: PathBuf,
    /// Looks up an environment variable.
    pub env: fn(&str) -> Option<OsString>,
    /// The whole environment (for the secrets it points at: `uexec_domain::hidden_env`).
    pub vars: fn() -> Vec<(OsString, OsString)>,
}

impl ProcessContext {
    /// The real process: `std::env::current_dir()` and `std::env::var_os`.
    pub fn current() -> Result<Self> {
        let cwd = std::env::current_dir().context("cannot determine the current directory")?;
        Ok(ProcessContext { cwd, env: |name| std::env::var_os(name), vars: || std::env::vars_os().collect() })
    }
}

/// Everything a subcommand needs to know about policy, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The workspace (canonical): commands run here and it is writable under workspace-write.
    pub cwd: PathBuf,
    /// `$TMPDIR` as the server's commands inherit it (absolute, non-empty), read once here for the whole app.
    pub tmpdir: Option<PathBuf>,
    /// The sandbox policy.
    pub sandbox_policy: SandboxPolicy,
    /// When to ask a person.
    pub approval_policy: ApprovalPolicy,
    /// Accept partly enforced protection.
    pub allow_degraded_sandbox: bool,
    /// The environment policy of spawned commands.
    pub env_policy: EnvPolicy,
    /// Session, buffer and window limits.
    pub limits: Limits,
    /// Command prefix rules.
    pub rules: CommandRules,
    /// The default shell of exec_command.
    pub shell: String,
    /// Note the protections in force after every `exec_command` response's output (default false: only a
    /// command run outside the sandbox after an approval or a denial, or under a degraded sandbox, gets it).
    pub report_protections: bool,
    /// What the MCP client waits for one tool call, in seconds (0: as long as it takes), from
    /// `--client-timeout-secs` over the config's `client_timeout_secs`; `None`: learnt from the client
    /// (`uexec_domain::client_wait`).
    pub client_timeout_secs: Option<u64>,
    /// Audit log file, from the flag or the config.
    pub audit_log: Option<PathBuf>,
    /// The config file that was read, if any.
    pub config_file: Option<PathBuf>,
    /// The secret locations sandboxed commands cannot read.
    pub hidden: HiddenPaths,
    /// macOS: sandboxed commands may ask the keychain (`macos_keychain = true`; default false).
    pub macos_keychain: bool,
    /// Which other tools' files stay read-only to sandboxed commands (`allow_tool_files`; default all).
    pub tool_files: ToolFiles,
    /// The network of sandboxed commands: off, on, or through the proxy (`sandbox_policy`'s network access is
    /// true for the last two).
    pub network: NetworkPolicy,
    /// The server's own state (`$XDG_STATE_HOME/uexec`, else `~/.local/state/uexec`): login snapshots live under
    /// it. The engine uses it only when it lies outside every writable root.
    pub state_dir: Option<PathBuf>,
    /// Where a listening server started without a token file keeps the token it generates, in order of
    /// preference ([`generated_token_dirs`]); hidden from every sandboxed command.
    pub token_dirs: Vec<PathBuf>,
    /// Where servers keep their control sockets (`crate::control`), in order of preference
    /// ([`control_dirs`]); hidden from every sandboxed command.
    pub control_dirs: Vec<PathBuf>,
    /// The sandbox's package-cache directory (`<state_dir>/sandbox-cache`, created mode 0700) under
    /// workspace-write: one of the policy's writable roots, named to sandboxed commands' package managers by
    /// `uexec_domain::caches`. `None` in the other modes, or when it cannot be created.
    pub sandbox_cache: Option<PathBuf>,
    /// The directories sandboxed commands see copy-on-write under workspace-write, as `(name, path)`: the
    /// person's cargo home (`$CARGO_HOME` when absolute, else `~/.cargo`) and the config's `copy_on_write`.
    /// Their upper layers live in slots under [`Settings::copy_on_write_base`].
    pub copy_on_write: Vec<(String, PathBuf)>,
    /// `<state_dir>/sandbox-overlays` under workspace-write; `None` otherwise (no copy-on-write view).
    pub copy_on_write_base: Option<PathBuf>,
    /// The config's `[server]` section (paths made absolute), for `uexec mcp --listen`.
    pub server: ServerSection,
}

impl Settings {
    /// Resolve `args` (and `audit_log_flag`) on top of the config file on top of the defaults.
    pub fn resolve(
        args: &PolicyArgs,
        audit_log_flag: Option<&Path>,
        ctx: &ProcessContext,
    ) -> Result<Settings> {
        let (config_path, required) = match config::locate(args.config.as_deref(), &ctx.env) {
            Some((path, required)) => (Some(absolute(&ctx.cwd, &path)), required),
            None => (None, false),
        };
        let tmpdir = tmpdir_of(ctx);
        let cwd = args.cwd.as_deref().map(|p| absolute(&ctx.cwd, p)).unwrap_or_else(|| ctx.cwd.clone());
        let flag_roots: Vec<PathBuf> = args.writable_roots.iter().map(|r| absolute(&ctx.cwd, r)).collect();
        // Checked before the file is read: a planted config is not even parsed.
        if let Some(path) = &config_path {
            check_config_location(
                path,
                required,
                &possible_writable_roots(&flag_roots, &cwd, tmpdir.as_deref()),
            )?;
        }
        let loaded = match &config_path {
            Some(path) => config::load(path, required)?,
            None => None,
        };
        if let Some(loaded) = &loaded {
            // The roots the file itself adds.
            let mut roots = flag_roots;
            roots.extend(loaded.file.writable_roots.iter().map(|r| absolute(loaded.base_dir(), r.get_ref())));
            check_config_location(
                &loaded.path,
                required,
                &possible_writable_roots(&roots, &cwd, tmpdir.as_deref()),
            )?;
        }
        let settings = resolve_with(args, audit_log_flag, ctx, loaded.as_ref())?;
        make_own_dirs(&settings);
        Ok(settings)
    }
}

/// Make every directory of uexec's own that sandboxed commands must not see (the control sockets' and the
/// generated tokens' directories of every uexec of this user, the snapshots of unsandboxed shells, the audit
/// log's directory) before any command starts: a location is hidden from a sandboxed command only if it exists
/// when the command starts, and a server started later would otherwise make its directory where a long-running
/// command of this one can reach it (its socket, its token). Each is made mode 0700 (and owned by this user),
/// unless it lies in a writable root (no server uses it there, and nothing is left in the person's tree); a
/// directory that cannot be made is logged, and a server that needs it later refuses to use it
/// ([`control_home`], [`generated_token_home`]).
fn make_own_dirs(settings: &Settings) {
    use std::os::unix::fs::DirBuilderExt;
    let roots = server_file_roots(settings);
    let mut dirs: Vec<PathBuf> = settings.control_dirs.iter().chain(&settings.token_dirs).cloned().collect();
    for place in own_state(settings.state_dir.as_deref(), settings.audit_log.as_deref(), None) {
        // A file (the audit log, the one place kept with rotated copies): its directory.
        if place.rotated {
            dirs.extend(place.path.parent().map(Path::to_path_buf));
        } else {
            dirs.push(place.path);
        }
    }
    for dir in dirs {
        if writable_by_sandbox(&dir, &roots).is_some() {
            continue;
        }
        if let Err(error) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir) {
            tracing::debug!(dir = %dir.display(), %error, "a directory uexec hides could not be made in advance");
        }
    }
}

/// The app's one reading of `$TMPDIR` (the engine reads each command's own, `uexec_engine::place`): absolute and
/// non-empty, else none.
fn tmpdir_of(ctx: &ProcessContext) -> Option<PathBuf> {
    (ctx.env)("TMPDIR").map(PathBuf::from).filter(|t| t.is_absolute())
}

/// Every directory a sandboxed command of this or an earlier start may have written to, whatever the sandbox
/// mode: `extra` roots, the workspace `cwd`, `/tmp`, `/dev/shm` and `tmpdir` (`uexec_domain::trust`), before
/// the policy is known.
fn possible_writable_roots(extra: &[PathBuf], cwd: &Path, tmpdir: Option<&Path>) -> SandboxWrites {
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: extra.to_vec(),
        network_access: false,
        exclude_slash_tmp: false,
        exclude_tmpdir_env_var: false,
    };
    gather_writes(&policy, cwd, tmpdir, &[])
}

/// Refuse a config file a sandboxed command could have written: one inside a writable
/// root, a symlink into one, or one reached through a symlink or directory that lies in one. An explicit
/// `--config` is the person's own choice: it is read, and the exception is reported on stderr.
fn check_config_location(path: &Path, explicit: bool, writes: &SandboxWrites) -> Result<()> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    let Some(found) = writable_by_sandbox(path, writes) else {
        return Ok(());
    };
    if explicit {
        tracing::warn!(
            "reading the config file {} given with --config although {}: commands could have written it",
            path.display(),
            found.describe()
        );
        return Ok(());
    }
    bail!(
        "refusing the config file {}: {}, so a sandboxed command could have written it (and turned the sandbox off for this start); move it outside the writable roots, or name it with --config FILE if you wrote it",
        path.display(),
        found.describe()
    )
}

fn resolve_with(
    args: &PolicyArgs,
    audit_log_flag: Option<&Path>,
    ctx: &ProcessContext,
    loaded: Option<&LoadedConfig>,
) -> Result<Settings> {
    let empty = config::ConfigFile::default();
    let file = loaded.map(|l| &l.file).unwrap_or(&empty);

    let cwd_arg = args.cwd.as_deref().map(|p| absolute(&ctx.cwd, p)).unwrap_or_else(|| ctx.cwd.clone());
    let cwd = std::fs::canonicalize(&cwd_arg)
        .with_context(|| format!("workspace directory {} is not usable", cwd_arg.display()))?;
    if !cwd.is_dir() {
        bail!("workspace {} is not a directory", cwd.display());
    }

    let approval_policy = match args.approval_policy {
        Some(flag) => approval_from_arg(flag),
        None => file.approval_policy.unwrap_or_default(),
    };
    let mode = args.sandbox.or(file.sandbox).unwrap_or(SandboxMode::WorkspaceWrite);
    let network_policy = network_policy(args, file.network.as_ref())?;
    let network = network_policy.has_access();
    if mode == SandboxMode::DangerFullAccess && matches!(network_policy, NetworkPolicy::Proxied(_)) {
        // Fail closed: without a sandbox nothing keeps commands to the proxy, so the rules would be a wish.
        bail!(
            "domain rules (--allow-domain, --deny-domain, [network] allow/deny) cannot be enforced under \
             --sandbox danger-full-access: commands run without a sandbox and reach the host's network directly; \
             choose a sandbox (workspace-write, read-only) or drop the rules"
        );
    }

    if mode != SandboxMode::WorkspaceWrite && !args.writable_roots.is_empty() {
        bail!(
            "--writable-root applies only to --sandbox workspace-write (the sandbox is {})",
            mode_str(mode)
        );
    }
    let mut writable_roots = writable_roots(args, ctx, loaded)?;
    let state_dir = state_dir(&ctx.env);
    // The sandbox's own package caches: a writable root of sandboxed commands, never the person's caches.
    let sandbox_cache = match (mode, &state_dir) {
        (SandboxMode::WorkspaceWrite, Some(state)) => sandbox_cache_root(state),
        _ => None,
    };
    if let Some(cache) = &sandbox_cache {
        push_unique(&mut writable_roots, cache.clone());
    }

    let sandbox_policy = match mode {
        SandboxMode::ReadOnly => SandboxPolicy::ReadOnly { network_access: network },
        SandboxMode::WorkspaceWrite => SandboxPolicy::WorkspaceWrite {
            writable_roots,
            network_access: network,
            exclude_slash_tmp: file.exclude_slash_tmp.unwrap_or(false),
            exclude_tmpdir_env_var: file.exclude_tmpdir_env_var.unwrap_or(false),
        },
        SandboxMode::DangerFullAccess => SandboxPolicy::DangerFullAccess,
    };

    let allow_degraded_sandbox = args.allow_degraded_sandbox || file.allow_degraded_sandbox.unwrap_or(false);

    let env_policy = env_policy(args, file)?;

    let limits = limits(loaded)?;
    let rules = command_rules(loaded)?;
    let shell = shell(ctx, loaded)?;

    let audit_log = match (audit_log_flag, &file.audit_log, loaded) {
        (Some(flag), _, _) => Some(absolute(&ctx.cwd, flag)),
        (None, Some(path), Some(loaded)) => Some(absolute(loaded.base_dir(), path.get_ref())),
        _ => None,
    };
    if let Some(path) = &audit_log {
        let tmpdir = tmpdir_of(ctx);
        let sandbox_dirs: Vec<PathBuf> =
            state_dir.iter().flat_map(|state| sandbox_state_dirs(state)).collect();
        refuse_audit_log_in_writable_root(
            path,
            &gather_writes(&sandbox_policy, &cwd, tmpdir.as_deref(), &sandbox_dirs),
        )?;
    }

    let home = (ctx.env)("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let CopyOnWrite { dirs: copy_on_write, base: copy_on_write_base } =
        copy_on_write(mode, state_dir.as_deref(), home.as_deref(), ctx, loaded)?;
    let Hidden { hidden, token_dirs, control_dirs } =
        hidden_paths(ctx, loaded, home, state_dir.as_deref(), audit_log.as_deref(), &env_policy)?;
    let macos_keychain = file.macos_keychain.unwrap_or(false);
    let tool_files = tool_files(loaded)?;

    Ok(Settings {
        cwd,
        tmpdir: tmpdir_of(ctx),
        sandbox_policy,
        approval_policy,
        allow_degraded_sandbox,
        env_policy,
        limits,
        rules: CommandRules { rules },
        shell,
        report_protections: file.report_protections.unwrap_or(false),
        client_timeout_secs: file.client_timeout_secs,
        audit_log,
        config_file: loaded.map(|l| l.path.clone()),
        hidden,
        macos_keychain,
        tool_files,
        network: network_policy,
        state_dir,
        token_dirs,
        control_dirs,
        sandbox_cache,
        copy_on_write,
        copy_on_write_base,
        server: match (&file.server, loaded) {
            (Some(server), Some(loaded)) => ServerSection {
                auth_token_file: server.auth_token_file.as_deref().map(|p| absolute(loaded.base_dir(), p)),
                ..server.clone()
            },
            _ => ServerSection::default(),
        },
    })
}

/// The writable roots of the config file (relative to it) and of `--writable-root` (relative to the working
/// directory), canonical and existing, each once.
fn writable_roots(
    args: &PolicyArgs,
    ctx: &ProcessContext,
    loaded: Option<&LoadedConfig>,
) -> Result<Vec<PathBuf>> {
    let mut writable_roots = Vec::new();
    if let Some(loaded) = loaded {
        for root in &loaded.file.writable_roots {
            let path = absolute(loaded.base_dir(), root.get_ref());
            let canonical = std::fs::canonicalize(&path).map_err(|e| {
                loaded.error_at(root.span(), "writable_roots", format!("{}: {e}", path.display()))
            })?;
            if !canonical.is_dir() {
                return Err(loaded.error_at(root.span(), "writable_roots", "not a directory").into());
            }
            push_unique(&mut writable_roots, canonical);
        }
    }
    for root in &args.writable_roots {
        let path = absolute(&ctx.cwd, root);
        let canonical = std::fs::canonicalize(&path)
            .with_context(|| format!("--writable-root {} is not usable", path.display()))?;
        if !canonical.is_dir() {
            bail!("--writable-root {} is not a directory", canonical.display());
        }
        push_unique(&mut writable_roots, canonical);
    }
    Ok(writable_roots)
}

/// The environment policy of the config's `[env]`, with the variables `--pass-env` names passed through.
fn env_policy(args: &PolicyArgs, file: &config::ConfigFile) -> Result<EnvPolicy> {
    let mut env_policy = match &file.env {
        Some(env) => EnvPolicy {
            inherit: match env.inherit.clone().unwrap_or(InheritSpec::All) {
                InheritSpec::All => EnvInherit::All,
                InheritSpec::None => EnvInherit::None,
                InheritSpec::Only(names) => EnvInherit::Only(names),
            },
            exclude_secrets: env.exclude_secrets.unwrap_or(true),
            pass_through: env.pass_through.clone(),
            set: env.set.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        },
        None => EnvPolicy::default(),
    };
    for name in &args.pass_env {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            bail!("--pass-env {name:?} is not a variable name");
        }
        if !env_policy.pass_through.contains(name) {
            env_policy.pass_through.push(name.clone());
        }
    }
    Ok(env_policy)
}

/// The config's `[limits]`, checked, else the defaults.
fn limits(loaded: Option<&LoadedConfig>) -> Result<Limits> {
    match loaded.and_then(|loaded| loaded.file.limits.as_ref().map(|limits| (loaded, limits))) {
        Some((loaded, limits)) => {
            validate_limits(limits.get_ref()).map_err(|msg| loaded.error_at(limits.span(), "limits", msg))?;
            Ok(limits.get_ref().clone())
        }
        None => Ok(Limits::default()),
    }
}

/// The config's command rules (`[[rules]]`), each prefix a non-empty list of non-empty words.
fn command_rules(loaded: Option<&LoadedConfig>) -> Result<Vec<PrefixRule>> {
    let mut rules = Vec::new();
    if let Some(loaded) = loaded {
        for rule in &loaded.file.rules {
            let entry = rule.get_ref();
            if entry.prefix.is_empty() || entry.prefix.iter().any(String::is_empty) {
                return Err(loaded
                    .error_at(rule.span(), "rules.prefix", "a prefix is a non-empty list of non-empty words")
                    .into());
            }
            rules.push(PrefixRule { prefix: entry.prefix.clone(), decision: entry.decision });
        }
    }
    Ok(rules)
}

/// The shell of commands: the config's `shell`, else `$SHELL`, else `/bin/bash`.
fn shell(ctx: &ProcessContext, loaded: Option<&LoadedConfig>) -> Result<String> {
    match loaded.and_then(|loaded| loaded.file.shell.as_ref().map(|shell| (loaded, shell))) {
        Some((loaded, shell)) => {
            if shell.get_ref().trim().is_empty() {
                return Err(loaded.error_at(shell.span(), "shell", "must not be empty").into());
            }
            Ok(shell.get_ref().clone())
        }
        None => Ok((ctx.env)("SHELL")
            .and_then(|s| s.into_string().ok())
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "/bin/bash".to_owned())),
    }
}

/// The directories sandboxed commands see copy-on-write (the cargo home, then the config's `copy_on_write`,
/// each once, named), and where their layers go under workspace-write (made now, mode 0700, so that it exists,
/// and is hidden, before the first command: a command started before another sandbox made its slot must not
/// read that slot's layers).
fn copy_on_write(
    mode: SandboxMode,
    state_dir: Option<&Path>,
    home: Option<&Path>,
    ctx: &ProcessContext,
    loaded: Option<&LoadedConfig>,
) -> Result<CopyOnWrite> {
    let mut copy_on_write = Vec::new();
    if let Some(cargo) = cargo_home(&ctx.env) {
        copy_on_write.push(("cargo".to_owned(), cargo));
    }
    if let Some(loaded) = loaded {
        for dir in &loaded.file.copy_on_write {
            let path = expand_home(dir.get_ref(), home)
                .map_err(|msg| loaded.error_at(dir.span(), "copy_on_write", msg))?;
            if !copy_on_write.iter().any(|(_, p)| *p == path) {
                let name = layer_name(&path, copy_on_write.len());
                copy_on_write.push((name, path));
            }
        }
    }
    let base = match (mode, state_dir) {
        (SandboxMode::WorkspaceWrite, Some(state)) => Some(state.join("sandbox-overlays")),
        _ => None,
    };
    if let Some(base) = &base {
        use std::os::unix::fs::DirBuilderExt;
        if let Err(error) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(base) {
            tracing::debug!(dir = %base.display(), %error, "the copy-on-write layers' directory cannot be made");
        }
    }
    Ok(CopyOnWrite { dirs: copy_on_write, base })
}

/// The copy-on-write directories, named, and where their layers go.
#[derive(Debug)]
struct CopyOnWrite {
    dirs: Vec<(String, PathBuf)>,
    base: Option<PathBuf>,
}

/// The other tools' files the config lets sandboxed commands write (`allow_tool_files`).
fn tool_files(loaded: Option<&LoadedConfig>) -> Result<ToolFiles> {
    let mut allowed_tools: Vec<String> = Vec::new();
    if let Some(loaded) = loaded {
        for name in &loaded.file.allow_tool_files {
            ToolFiles::allowing(&[name.get_ref()]).map_err(|e| loaded.error_at(name.span(), ALLOW_KEY, e))?;
            allowed_tools.push(name.get_ref().clone());
        }
    }
    Ok(ToolFiles::allowing(&allowed_tools).unwrap_or_default())
}

/// The network policy from the flags over the config: `--no-network` is off; `--network` is on (through the
/// proxy when a deny list exists); `--allow-domain` (or a `[network]` table with `allow`) is the allowlist
/// mode, the flag's and the config's domains together; `network = true|false` is on or off.
fn network_policy(args: &PolicyArgs, file: Option<&config::NetworkConfig>) -> Result<NetworkPolicy> {
    let section = match file {
        Some(config::NetworkConfig::Domains(section)) => section.clone(),
        _ => config::NetworkSection::default(),
    };
    let parse = |list: &[String], what: &str| -> Result<Vec<DomainPattern>> {
        list.iter().map(|d| DomainPattern::parse(d).with_context(|| format!("{what} {d:?}"))).collect()
    };
    let mut allow = parse(&section.allow, "[network] allow")?;
    allow.extend(parse(&args.allow_domains, "--allow-domain")?);
    let mut deny = parse(&section.deny, "[network] deny")?;
    deny.extend(parse(&args.deny_domains, "--deny-domain")?);
    if args.no_network {
        return Ok(NetworkPolicy::Off);
    }
    if args.network {
        if deny.is_empty() {
            return Ok(NetworkPolicy::On);
        }
        let any = parse(&["*".to_owned()], "--network")?;
        return Ok(NetworkPolicy::Proxied(DomainRules { allow: any, deny }));
    }
    if !allow.is_empty() {
        return Ok(NetworkPolicy::Proxied(DomainRules { allow, deny }));
    }
    if !deny.is_empty() {
        bail!(
            "--deny-domain and [network] deny need something allowed: --network, --allow-domain or [network] allow"
        );
    }
    Ok(match file {
        Some(config::NetworkConfig::Switch(true)) => NetworkPolicy::On,
        _ => NetworkPolicy::Off,
    })
}

/// A `copy_on_write` entry as a path: `~/x` under `home`, or absolute.
fn expand_home(text: &str, home: Option<&Path>) -> std::result::Result<PathBuf, String> {
    let path = if text == "~" {
        return Err("the whole home cannot be copy-on-write (its writable roots would be hidden)".into());
    } else if let Some(rest) = text.strip_prefix("~/") {
        home.ok_or("`~/` needs an absolute $HOME")?.join(rest)
    } else {
        PathBuf::from(text)
    };
    if !path.is_absolute() || path.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(format!("{text:?}: write `~/dir` or an absolute path without `..`"));
    }
    if path == Path::new("/") {
        return Err("`/` cannot be copy-on-write".into());
    }
    Ok(path)
}

/// The name of a copy-on-write directory's layers: its last component without leading dots, in safe
/// characters, followed by `-<index>` (unique among the entries).
fn layer_name(path: &Path, index: usize) -> String {
    let last = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let cleaned: String = last
        .trim_start_matches('.')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    format!("{}-{index}", if cleaned.is_empty() { "dir" } else { &cleaned })
}

/// A sandboxed command may write beneath every writable root: an audit log there could be truncated or filled
/// with forged records, or replaced by a symlink that makes the (unsandboxed) server append elsewhere. The check
/// is [`writable_by_sandbox`] over every place sandboxed commands may write (`uexec_domain::trust`), the same as
/// for the config file and the shell's startup files.
fn refuse_audit_log_in_writable_root(path: &Path, writes: &SandboxWrites) -> Result<()> {
    if let Some(found) = writable_by_sandbox(path, writes) {
        bail!(
            "audit log {} lies in the writable root {} ({}), where sandboxed commands could rewrite it; put it \
             outside the writable roots (for example ~/.local/state/uexec/audit.jsonl)",
            path.display(),
            found.root.display(),
            found.describe()
        );
    }
    Ok(())
}

/// Range checks the type system cannot express; the message names the offending field.
fn validate_limits(limits: &Limits) -> std::result::Result<(), String> {
    let checks: [(bool, &str); 10] = [
        (limits.max_sessions >= 1, "max_sessions must be at least 1"),
        (limits.warning_sessions >= 1, "warning_sessions must be at least 1"),
        (limits.output_buffer_bytes >= 1024, "output_buffer_bytes must be at least 1024"),
        (limits.max_output_tokens >= 1, "max_output_tokens must be at least 1"),
        (
            limits.default_max_output_tokens >= 1
                && limits.default_max_output_tokens <= limits.max_output_tokens,
            "default_max_output_tokens must be between 1 and max_output_tokens",
        ),
        (
            limits.min_yield_time_ms <= limits.max_yield_time_ms,
            "min_yield_time_ms must not exceed max_yield_time_ms",
        ),
        (
            limits.min_poll_yield_time_ms <= limits.max_poll_yield_time_ms,
            "min_poll_yield_time_ms must not exceed max_poll_yield_time_ms",
        ),
        (limits.max_write_bytes >= 1, "max_write_bytes must be at least 1"),
        (
            limits.early_exit_grace_ms <= limits.max_yield_time_ms,
            "early_exit_grace_ms must not exceed max_yield_time_ms (the grace ends with the yield window)",
        ),
        (
            limits.approval_timeout_ms >= 1_000,
            "approval_timeout_ms must be at least 1000 (a person needs time to read the question)",
        ),
    ];
    match checks.iter().find(|(ok, _)| !ok) {
        Some((_, message)) => Err((*message).to_owned()),
        None => Ok(()),
    }
}

fn approval_from_arg(arg: ApprovalArg) -> ApprovalPolicy {
    match arg {
        ApprovalArg::Untrusted => ApprovalPolicy::Untrusted,
        ApprovalArg::OnFailure => ApprovalPolicy::OnFailure,
        ApprovalArg::OnRequest => ApprovalPolicy::OnRequest,
        ApprovalArg::Never => ApprovalPolicy::Never,
    }
}

fn mode_str(mode: SandboxMode) -> &'static str {
    match mode {
        SandboxMode::ReadOnly => "read-only",
        SandboxMode::WorkspaceWrite => "workspace-write",
        SandboxMode::DangerFullAccess => "danger-full-access",
    }
}

fn absolute(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() { path.to_path_buf() } else { base.join(path) }
}

fn push_unique(roots: &mut Vec<PathBuf>, root: PathBuf) {
    if !roots.contains(&root) {
        roots.push(root);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::cli::ServeArgs;
    use uexec_domain::rules::RuleDecision;

    fn ctx(cwd: &Path) -> ProcessContext {
        ProcessContext {
            cwd: cwd.to_path_buf(),
            env: |name| (name == "SHELL").then(|| "/bin/zsh".into()),
            vars: Vec::new,
        }
    }

    #[test]
    fn network_policy_from_flags_and_config() {
        let dir = tempfile::tempdir().unwrap();
        let resolve = |args: PolicyArgs, text: &str| {
            let cfg = loaded(dir.path(), text);
            resolve_with(&args, None, &ctx(dir.path()), Some(&cfg))
        };
        let flags = |allow: &[&str], deny: &[&str]| PolicyArgs {
            allow_domains: allow.iter().map(|s| s.to_string()).collect(),
            deny_domains: deny.iter().map(|s| s.to_string()).collect(),
            ..PolicyArgs::default()
        };
        let s = resolve(flags(&[], &[]), "").unwrap();
        assert_eq!(s.network, NetworkPolicy::Off);
        assert!(!s.sandbox_policy.has_network_access());
        let s = resolve(
            flags(&["PyPI.org."], &[]),
            "[network]\nallow = [\"*.npmjs.org\"]\ndeny = [\"x.npmjs.org\"]\n",
        )
        .unwrap();
        let NetworkPolicy::Proxied(rules) = &s.network else { panic!("{:?}", s.network) };
        assert!(s.sandbox_policy.has_network_access());
        assert_eq!(crate::proxy::describe(rules), "*.npmjs.org, pypi.org (denied: x.npmjs.org)");
        let s = resolve(PolicyArgs { network: true, ..flags(&[], &["evil.com"]) }, "").unwrap();
        let NetworkPolicy::Proxied(rules) = &s.network else { panic!("{:?}", s.network) };
        assert_eq!(crate::proxy::describe(rules), "* (denied: evil.com)");
        assert_eq!(
            resolve(PolicyArgs { network: true, ..flags(&[], &[]) }, "").unwrap().network,
            NetworkPolicy::On
        );
        assert_eq!(resolve(flags(&[], &[]), "network = true\n").unwrap().network, NetworkPolicy::On);
        let off = PolicyArgs { no_network: true, ..flags(&[], &[]) };
        assert_eq!(resolve(off, "[network]\nallow = [\"pypi.org\"]\n").unwrap().network, NetworkPolicy::Off);
        let err = resolve(flags(&["https://pypi.org/simple"], &[]), "").unwrap_err().to_string();
        assert!(err.contains("--allow-domain"), "{err}");
        let err = resolve(flags(&[], &["x.com"]), "").unwrap_err().to_string();
        assert!(err.contains("need something allowed"), "{err}");
        assert!(config::parse(Path::new("c.toml"), "[network]\nallow = [\"a\"]\nallw = []\n").is_err());
    }

    #[test]
    fn allowed_tool_files_from_config() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = loaded(dir.path(), "allow_tool_files = [\".vscode\", \".mcp.json\"]\n");
        let settings = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap();
        assert_eq!(settings.tool_files.allowed(), &[".vscode", ".mcp.json"]);
        let none = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), None).unwrap();
        assert!(none.tool_files.allowed().is_empty() && none.tool_files.protected().count() > 5);
        let cfg = loaded(dir.path(), "allow_tool_files = [\".vscod\"]\n");
        let err = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap_err();
        assert!(err.to_string().contains("allow_tool_files") && err.to_string().contains(".vscod"), "{err}");
    }

    #[test]
    fn hidden_paths_from_config() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = loaded(dir.path(), "hidden_paths = [\".env*\", \"~/.config/tool/token\"]\n");
        let s = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap();
        // Beside the exact locations the environment names (the runtime directory's agents, here).
        let patterns = |s: &Settings| {
            s.hidden.patterns.iter().filter(|p| p.base != uexec_domain::hidden::Base::Exact).count()
        };
        assert_eq!(patterns(&s), uexec_domain::hidden::DEFAULT_SECRETS.len() + 2);
        let uid = rustix::process::getuid().as_raw();
        let gnupg = format!("/run/user/{uid}/gnupg");
        let exact: Vec<String> =
            s.hidden.patterns.iter().map(|p| format!("/{}", p.components.join("/"))).collect();
        assert!(exact.contains(&gnupg), "without XDG_RUNTIME_DIR, the default runtime directory: {exact:?}");
        let cfg = loaded(dir.path(), "hide_secrets = false\nhidden_paths = [\"x\"]\n");
        let s = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap();
        assert_eq!(s.hidden.patterns.len(), 1);
        let cfg = loaded(dir.path(), "hidden_paths = [\"../up\"]\n");
        let err = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap_err();
        assert!(err.to_string().contains("hidden_paths"), "{err}");
    }

    /// The server's environment is read once for the secrets it points at, and the server's
    /// own state joins the hidden locations whatever `hide_secrets` says.
    #[test]
    fn hidden_locations_include_the_environment_s_secrets_and_the_server_s_own_state() {
        let dir = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        let ctx = ProcessContext {
            cwd: dir.path().join("ws"),
            env: |name| match name {
                "HOME" => Some("/home/me".into()),
                "XDG_STATE_HOME" => Some("/proc/uexec-no-state".into()),
                _ => None,
            },
            vars: || {
                vec![
                    ("CARGO_HOME".into(), "/opt/c*rgo".into()),
                    ("SSH_AUTH_SOCK".into(), "/tmp/ssh-x/agent.1".into()),
                ]
            },
        };
        let exact = |s: &Settings| -> Vec<String> {
            s.hidden
                .patterns
                .iter()
                .filter(|p| p.base == uexec_domain::hidden::Base::Exact)
                .map(|p| format!("/{}", p.components.join("/")))
                .collect()
        };
        let log = dir.path().join("logs/a/../audit.jsonl");
        let read_only = PolicyArgs { sandbox: Some(SandboxMode::ReadOnly), ..PolicyArgs::default() };
        let s = resolve_with(&read_only, Some(&log), &ctx, None).unwrap();
        let hidden = exact(&s);
        for expected in [
            "/opt/c*rgo/credentials.toml",
            "/tmp/ssh-x/agent.1",
            "/proc/uexec-no-state/uexec/snapshots/host",
            "/proc/uexec-no-state/uexec/sandbox-overlays",
        ] {
            assert!(hidden.contains(&expected.to_owned()), "{expected}: {hidden:?}");
        }
        assert!(
            hidden.iter().any(|p| p.ends_with("/a/../audit.jsonl")),
            "the audit log as given: {hidden:?}"
        );
        assert!(s.hidden.reachable.is_empty());
        // Passed on purpose: the socket is not hidden and the report will say so.
        let passed = PolicyArgs { pass_env: vec!["SSH_AUTH_SOCK".into()], ..read_only.clone() };
        let s = resolve_with(&passed, Some(&log), &ctx, None).unwrap();
        assert!(!exact(&s).contains(&"/tmp/ssh-x/agent.1".to_owned()));
        assert!(s.hidden.reachable.iter().any(|r| r.contains("SSH_AUTH_SOCK")), "{:?}", s.hidden.reachable);
        // hide_secrets = false: the person's secrets are not hidden, the server's own state still is.
        let cfg = loaded(dir.path(), "hide_secrets = false\n");
        let s = resolve_with(&read_only, Some(&log), &ctx, Some(&cfg)).unwrap();
        let hidden = exact(&s);
        assert!(!hidden.iter().any(|p| p.contains("rgo") || p.contains("ssh-x")), "{hidden:?}");
        assert!(hidden.iter().any(|p| p.ends_with("snapshots/host")), "{hidden:?}");
    }

    #[test]
    fn copy_on_write_is_the_cargo_home_plus_the_config_under_workspace_write_only() {
        let dir = tempfile::tempdir().unwrap();
        // A state directory that cannot be created: nothing is made by this test.
        let ctx = |cargo_home: bool| ProcessContext {
            cwd: dir.path().to_path_buf(),
            env: if cargo_home {
                |name| match name {
                    "HOME" => Some("/home/me".into()),
                    "XDG_STATE_HOME" => Some("/proc/uexec-no-state".into()),
                    "CARGO_HOME" => Some("/opt/cargo".into()),
                    _ => None,
                }
            } else {
                |name| match name {
                    "HOME" => Some("/home/me".into()),
                    "XDG_STATE_HOME" => Some("/proc/uexec-no-state".into()),
                    "CARGO_HOME" => Some("relative/cargo".into()),
                    _ => None,
                }
            },
            vars: Vec::new,
        };
        let cfg = loaded(dir.path(), "copy_on_write = [\"~/.gradle\", \"/opt/m2\", \"~/.gradle\"]\n");
        let s = resolve_with(&PolicyArgs::default(), None, &ctx(true), Some(&cfg)).unwrap();
        let expected = |cargo: &str| {
            vec![
                ("cargo".to_owned(), PathBuf::from(cargo)),
                ("gradle-1".to_owned(), PathBuf::from("/home/me/.gradle")),
                ("m2-2".to_owned(), PathBuf::from("/opt/m2")),
            ]
        };
        assert_eq!(s.copy_on_write, expected("/opt/cargo"));
        assert_eq!(s.copy_on_write_base, Some(PathBuf::from("/proc/uexec-no-state/uexec/sandbox-overlays")));
        // A relative CARGO_HOME is not cargo's: `~/.cargo` is.
        let s = resolve_with(&PolicyArgs::default(), None, &ctx(false), Some(&cfg)).unwrap();
        assert_eq!(s.copy_on_write, expected("/home/me/.cargo"));
        let read_only = PolicyArgs { sandbox: Some(SandboxMode::ReadOnly), ..PolicyArgs::default() };
        let s = resolve_with(&read_only, None, &ctx(true), Some(&cfg)).unwrap();
        assert_eq!(s.copy_on_write_base, None);
        for bad in ["\"~\"", "\"/\"", "\"rel\"", "\"~/a/../b\""] {
            let cfg = loaded(dir.path(), &format!("copy_on_write = [{bad}]\n"));
            let err = resolve_with(&PolicyArgs::default(), None, &ctx(true), Some(&cfg)).unwrap_err();
            assert!(err.to_string().contains("copy_on_write"), "{bad}: {err}");
        }
    }

    fn loaded(dir: &Path, text: &str) -> LoadedConfig {
        let path = dir.join("config.toml");
        LoadedConfig { file: config::parse(&path, text).unwrap(), path, text: text.to_owned() }
    }

    fn env_token_ctx(cwd: &Path) -> ProcessContext {
        ProcessContext {
            cwd: cwd.to_path_buf(),
            env: |name| (name == AUTH_TOKEN_FILE_ENV).then(|| "env-token".into()),
            vars: Vec::new,
        }
    }

    /// A workspace, and a directory outside it and outside `/tmp` (no possible writable root) for token files.
    fn server_dirs() -> (tempfile::TempDir, tempfile::TempDir) {
        let workspace = tempfile::Builder::new().prefix("uexec-ws-").tempdir_in("/tmp").unwrap();
        let outside = tempfile::Builder::new().prefix("uexec-settings-").tempdir_in("/var/tmp").unwrap();
        (workspace, outside)
    }

    /// The settings of a server whose workspace is `workspace`, started in `ctx`, keeping generated tokens in
    /// `token_dirs` and with `file` as its `[server]` section.
    fn server_base(
        workspace: &Path,
        ctx: &ProcessContext,
        token_dirs: &[PathBuf],
        file: ServerSection,
    ) -> Settings {
        let args = PolicyArgs { cwd: Some(workspace.to_path_buf()), ..PolicyArgs::default() };
        let mut settings = resolve_with(&args, None, ctx, None).unwrap();
        settings.token_dirs = token_dirs.to_vec();
        settings.server = file;
        settings
    }

    #[test]
    fn the_token_comes_from_the_flag_then_the_environment_then_the_config() {
        let (workspace, dir) = server_dirs();
        for name in ["flag-token", "env-token", "config-token"] {
            std::fs::write(dir.path().join(name), format!("  {name}-0123456789abcdef\n")).unwrap();
        }
        let file = ServerSection {
            auth_token_file: Some(dir.path().join("config-token")),
            ..ServerSection::default()
        };
        let listen = Some("0.0.0.0:8080".parse().unwrap());
        let token = |args: &ServeArgs, ctx: &ProcessContext| {
            let base = server_base(workspace.path(), ctx, &[], file.clone());
            let settings = ServerSettings::resolve(args, &base, ctx).unwrap().unwrap();
            assert!(matches!(settings.token_origin, TokenOrigin::File(_)));
            String::from_utf8(settings.token.as_bytes().to_vec()).unwrap()
        };
        let flag = ServeArgs { listen, auth_token_file: Some("flag-token".into()), ..ServeArgs::default() };
        assert_eq!(token(&flag, &env_token_ctx(dir.path())), "flag-token-0123456789abcdef");
        let no_flag = ServeArgs { listen, ..ServeArgs::default() };
        assert_eq!(token(&no_flag, &env_token_ctx(dir.path())), "env-token-0123456789abcdef");
        assert_eq!(token(&no_flag, &ctx(dir.path())), "config-token-0123456789abcdef");
        let base = server_base(workspace.path(), &ctx(dir.path()), &[], file.clone());
        assert!(
            !format!("{:?}", ServerSettings::resolve(&no_flag, &base, &ctx(dir.path())).unwrap())
                .contains("config-token-0123456789abcdef"),
            "Debug never shows the token"
        );
    }

    #[test]
    fn a_token_file_a_sandboxed_command_could_reach_is_refused_and_dot_dot_paths_work() {
        let (workspace, dir) = server_dirs();
        let body = "0123456789abcdef0123456789abcdef\n";
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("token"), body).unwrap();
        std::fs::write(workspace.path().join("token"), body).unwrap();
        let in_tmp = tempfile::Builder::new().prefix("uexec-tok-").tempdir_in("/tmp").unwrap();
        std::fs::write(in_tmp.path().join("token"), body).unwrap();
        let ctx = ctx(dir.path());
        let base = server_base(workspace.path(), &ctx, &[], ServerSection::default());
        let serve = |file: PathBuf| ServeArgs {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            auth_token_file: Some(file),
            ..ServeArgs::default()
        };
        for reachable in [
            workspace.path().join("token"),
            in_tmp.path().join("token"),
            // Through `..` from outside into the workspace: the lookup is followed, not the text.
            dir.path()
                .join("sub/../../../..")
                .join(workspace.path().strip_prefix("/").unwrap())
                .join("token"),
        ] {
            let error = ServerSettings::resolve(&serve(reachable.clone()), &base, &ctx).unwrap_err();
            assert!(error.to_string().contains("refusing the auth token file"), "{reachable:?}: {error}");
        }
        // The allowed twins: outside every writable root, also through `..`.
        for outside in [dir.path().join("token"), dir.path().join("sub/../token"), "sub/../token".into()] {
            let settings = ServerSettings::resolve(&serve(outside.clone()), &base, &ctx).unwrap().unwrap();
            assert_eq!(settings.token.as_bytes(), body.trim().as_bytes(), "{outside:?}");
        }
        // A path that does not exist yet, below a link, is hidden below the link's target too.
        std::os::unix::fs::symlink(dir.path().join("sub"), dir.path().join("link")).unwrap();
        let hidden: Vec<PathBuf> = literal_patterns(&dir.path().join("link/later/token"))
            .iter()
            .map(|p| PathBuf::from("/").join(p.components.join("/")))
            .collect();
        let sub = std::fs::canonicalize(dir.path().join("sub")).unwrap();
        assert_eq!(hidden, [sub.join("later/token"), dir.path().join("link/later/token")]);
        // A `..` path is hidden where it leads.
        let canonical = std::fs::canonicalize(dir.path().join("token")).unwrap();
        let patterns = literal_patterns(&dir.path().join("sub/../token"));
        assert_eq!(patterns.len(), 1, "{patterns:?}");
        assert_eq!(PathBuf::from("/").join(patterns[0].components.join("/")), canonical);
        // Literal: a `*` or `?` in a token path names itself.
        assert_eq!(patterns[0].base, uexec_domain::hidden::Base::Exact);
    }

    #[test]
    fn without_a_token_file_a_loopback_server_generates_a_private_token() {
        let (workspace, dir) = server_dirs();
        let none = ServerSection::default();
        let ctx = ctx(dir.path());
        let tokens = dir.path().join("run/uexec/listen-tokens");
        let base = server_base(workspace.path(), &ctx, std::slice::from_ref(&tokens), none.clone());
        let serve = |addr: &str| ServeArgs { listen: Some(addr.parse().unwrap()), ..ServeArgs::default() };
        assert!(ServerSettings::resolve(&ServeArgs::default(), &base, &ctx).unwrap().is_none());
        let mut seen = Vec::new();
        for loopback in ["127.0.0.1:0", "[::1]:8080"] {
            let settings = ServerSettings::resolve(&serve(loopback), &base, &ctx).unwrap().unwrap();
            let canonical = std::fs::canonicalize(&tokens).unwrap();
            assert_eq!(settings.token_origin, TokenOrigin::Generated(canonical.clone()));
            let token = settings.token.as_bytes().to_vec();
            assert!(token.len() == 64 && token.iter().all(u8::is_ascii_hexdigit), "{token:?}");
            assert!(!seen.contains(&token), "every start gets a fresh token");
            seen.push(token);
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&canonical).unwrap().permissions().mode() & 0o777, 0o700);
            let written = write_generated_token(&canonical, settings.listen, &settings.token).unwrap();
            let meta = std::fs::metadata(&written).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{written:?}");
            assert_eq!(std::fs::read(&written).unwrap().trim_ascii(), settings.token.as_bytes());
        }
        // A directory someone else may enter is made private again.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o755)).unwrap();
        ServerSettings::resolve(&serve("127.0.0.1:0"), &base, &ctx).unwrap().unwrap();
        assert_eq!(std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777, 0o700);
        // Beyond loopback a token file is required.
        for open in ["0.0.0.0:8080", "[::]:8080", "10.0.0.1:8080"] {
            let error = ServerSettings::resolve(&serve(open), &base, &ctx).unwrap_err();
            assert!(error.to_string().contains("refusing to listen"), "{error}");
        }
        std::fs::write(dir.path().join("short"), "abc\n").unwrap();
        let short = ServeArgs { auth_token_file: Some("short".into()), ..serve("127.0.0.1:0") };
        assert!(ServerSettings::resolve(&short, &base, &ctx).is_err());
        // Never kept where sandboxed commands write: the next place is taken, or none.
        let in_workspace = workspace.path().join("tokens");
        let base = server_base(workspace.path(), &ctx, &[in_workspace.clone(), tokens.clone()], none.clone());
        let settings = ServerSettings::resolve(&serve("127.0.0.1:0"), &base, &ctx).unwrap().unwrap();
        assert_eq!(settings.token_origin, TokenOrigin::Generated(std::fs::canonicalize(&tokens).unwrap()));
        assert!(!in_workspace.exists());
        let base = server_base(workspace.path(), &ctx, &[in_workspace, "/tmp/uexec-tokens-x".into()], none);
        let error = ServerSettings::resolve(&serve("127.0.0.1:0"), &base, &ctx).unwrap_err();
        assert!(error.to_string().contains("cannot generate a bearer token"), "{error}");
    }

    #[test]
    fn every_uexec_hides_the_tokens_and_control_sockets_of_servers() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ProcessContext {
            cwd: dir.path().to_path_buf(),
            env: |name| match name {
                "XDG_RUNTIME_DIR" => Some("/run/user/4242".into()),
                "XDG_STATE_HOME" => Some("/var/lib/someone/state".into()),
                AUTH_TOKEN_FILE_ENV => Some("/etc/uexec/../uexec-token".into()),
                _ => None,
            },
            vars: Vec::new,
        };
        let cfg = loaded(dir.path(), "hide_secrets = false\n[server]\nauth_token_file = \"/srv/tok\"\n");
        let s = resolve_with(&PolicyArgs::default(), None, &ctx, Some(&cfg)).unwrap();
        let dirs = ["/run/user/4242/uexec/listen-tokens", "/var/lib/someone/state/uexec/listen-tokens"];
        assert_eq!(s.token_dirs, dirs.map(PathBuf::from));
        let hidden: Vec<String> =
            s.hidden.patterns.iter().map(|p| format!("/{}", p.components.join("/"))).collect();
        // The `..` path does not resolve here: hidden where it leads once it does (canonical), not as written.
        // The control sockets' directories of every server (`crate::control`) as well.
        let control = ["/run/user/4242/uexec/control", "/var/lib/someone/state/uexec/control"];
        assert_eq!(s.control_dirs, control.map(PathBuf::from));
        // And the places of the sandbox's record of its placeholders, the state directory's first.
        let leftovers =
            ["/var/lib/someone/state/uexec/sandbox-leftovers", "/run/user/4242/uexec/sandbox-leftovers"];
        assert_eq!(
            hidden[..7],
            [dirs[0], dirs[1], control[0], control[1], leftovers[0], leftovers[1], "/srv/tok"],
            "{hidden:?}"
        );
        // Then the server's own state (`own_state`), hidden whatever `hide_secrets` says.
        assert!(hidden[7..].iter().all(|p| p.starts_with("/var/lib/someone/state/uexec/")), "{hidden:?}");
    }

    #[test]
    fn the_server_section_is_read_with_paths_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = loaded(dir.path(), "[server]\nauth_token_file = \"tok\"\nmax_clients = 3\n");
        let s = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap();
        assert_eq!(s.server.auth_token_file, Some(dir.path().join("tok")));
        assert_eq!(s.server.max_clients, Some(3));
        assert!(
            config::parse(&dir.path().join("c.toml"), "[server]\nmax_client = 3\n").is_err(),
            "unknown keys"
        );
    }

    #[test]
    fn memory_bounds_cap_sessions_and_flags_override_the_config() {
        let (workspace, dir) = server_dirs();
        let file = ServerSection {
            max_sessions_total: Some(100),
            memory_per_client: Some(3 * 1024 * 1024 + 5),
            client_grace_secs: Some(7),
            ..ServerSection::default()
        };
        let ctx = ctx(dir.path());
        let mut base = server_base(workspace.path(), &ctx, &[dir.path().join("tokens")], file);
        base.limits = Limits { output_buffer_bytes: 1024 * 1024, ..Limits::default() };
        let args = ServeArgs { listen: Some("127.0.0.1:0".parse().unwrap()), ..ServeArgs::default() };
        let s = ServerSettings::resolve(&args, &base, &ctx).unwrap().unwrap();
        assert_eq!((s.sessions_per_client, s.sessions_total, s.client_grace.as_secs()), (3, 100, 7));
        let args = ServeArgs { max_sessions_total: Some(9), memory_total: Some(4 * 1024 * 1024), ..args };
        let s = ServerSettings::resolve(&args, &base, &ctx).unwrap().unwrap();
        assert_eq!(s.sessions_total, 4, "the memory bound is the tighter one");
        let none = ServeArgs { memory_per_client: Some(1000), ..args };
        assert!(ServerSettings::resolve(&none, &base, &ctx).is_err());
    }

    #[test]
    fn defaults_are_workspace_write_here_without_network_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let s = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), None).unwrap();
        let cwd = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(s.cwd, cwd);
        assert_eq!(s.sandbox_policy, SandboxPolicy::default());
        assert!(!s.sandbox_policy.has_network_access());
        assert_eq!(s.approval_policy, ApprovalPolicy::OnRequest);
        assert!(!s.allow_degraded_sandbox);
        assert_eq!(s.shell, "/bin/zsh");
        assert!(!s.report_protections);
        assert_eq!(s.limits, Limits::default());
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("cache")).unwrap();
        std::fs::create_dir(dir.path().join("extra")).unwrap();
        let cfg = loaded(
            dir.path(),
            "approval_policy = \"never\"\nnetwork = true\nwritable_roots = [\"cache\"]\nshell = \"/bin/sh\"\n\
             [[rules]]\nprefix = [\"git\", \"push\"]\ndecision = \"ask\"\n",
        );
        let args = PolicyArgs {
            approval_policy: Some(ApprovalArg::Untrusted),
            no_network: true,
            writable_roots: vec![PathBuf::from("extra")],
            ..PolicyArgs::default()
        };
        let s = resolve_with(&args, None, &ctx(dir.path()), Some(&cfg)).unwrap();
        assert_eq!(s.approval_policy, ApprovalPolicy::Untrusted);
        assert!(!s.sandbox_policy.has_network_access());
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let SandboxPolicy::WorkspaceWrite { writable_roots, .. } = &s.sandbox_policy else { panic!() };
        assert_eq!(writable_roots, &vec![base.join("cache"), base.join("extra")]);
        assert_eq!(s.shell, "/bin/sh");
        assert_eq!(s.rules.rules.len(), 1);
        assert_eq!(s.rules.rules[0].decision, RuleDecision::Ask);

        let s = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap();
        assert_eq!(s.approval_policy, ApprovalPolicy::Never);
        assert!(s.sandbox_policy.has_network_access());
    }

    #[test]
    fn missing_writable_root_in_the_file_names_key_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = loaded(dir.path(), "network = false\nwritable_roots = [\"/definitely/not/here\"]\n");
        let err = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("writable_roots") && text.contains(":2:"), "{text}");
    }

    #[test]
    fn invalid_limits_and_rules_name_key_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = loaded(dir.path(), "\n[limits]\nmin_yield_time_ms = 5000\nmax_yield_time_ms = 10\n");
        let err = format!(
            "{:#}",
            resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap_err()
        );
        assert!(err.contains("limits") && err.contains("min_yield_time_ms"), "{err}");
        // The early-exit grace is a limit like the others, and ends with the yield window.
        let cfg = loaded(dir.path(), "[limits]\nearly_exit_grace_ms = 5000\n");
        let settings = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap();
        assert_eq!(settings.limits.early_exit_grace_ms, 5000);
        let cfg = loaded(dir.path(), "[limits]\nearly_exit_grace_ms = 30001\n");
        let err = format!(
            "{:#}",
            resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap_err()
        );
        assert!(err.contains("early_exit_grace_ms must not exceed max_yield_time_ms"), "{err}");
        let cfg = loaded(dir.path(), "[[rules]]\nprefix = []\ndecision = \"allow\"\n");
        let err = format!(
            "{:#}",
            resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap_err()
        );
        assert!(err.contains("rules.prefix") && err.contains(":1:"), "{err}");
    }

    #[test]
    fn writable_root_flag_needs_workspace_write() {
        let dir = tempfile::tempdir().unwrap();
        let args = PolicyArgs {
            sandbox: Some(SandboxMode::ReadOnly),
            writable_roots: vec![dir.path().to_path_buf()],
            ..PolicyArgs::default()
        };
        let err = resolve_with(&args, None, &ctx(dir.path()), None).unwrap_err().to_string();
        assert!(err.contains("--writable-root"), "{err}");
    }

    #[test]
    fn read_only_and_full_access_map_to_policies() {
        let dir = tempfile::tempdir().unwrap();
        let args =
            PolicyArgs { sandbox: Some(SandboxMode::ReadOnly), network: true, ..PolicyArgs::default() };
        let s = resolve_with(&args, None, &ctx(dir.path()), None).unwrap();
        assert_eq!(s.sandbox_policy, SandboxPolicy::ReadOnly { network_access: true });
        let args = PolicyArgs { sandbox: Some(SandboxMode::DangerFullAccess), ..PolicyArgs::default() };
        let s = resolve_with(&args, None, &ctx(dir.path()), None).unwrap();
        assert_eq!(s.sandbox_policy, SandboxPolicy::DangerFullAccess);
        // Domain rules cannot bind unsandboxed commands: refused at start (fail closed), not silently dropped.
        let with = |network: bool, allow: &[&str], deny: &[&str]| PolicyArgs {
            sandbox: Some(SandboxMode::DangerFullAccess),
            network,
            allow_domains: allow.iter().map(|s| s.to_string()).collect(),
            deny_domains: deny.iter().map(|s| s.to_string()).collect(),
            ..PolicyArgs::default()
        };
        for args in [with(true, &[], &["198.18.0.9"]), with(false, &["pypi.org"], &[])] {
            let err = resolve_with(&args, None, &ctx(dir.path()), None).unwrap_err().to_string();
            assert!(err.contains("cannot be enforced under --sandbox danger-full-access"), "{err}");
        }
        let cfg = loaded(
            dir.path(),
            "sandbox = \"danger-full-access\"\n[network]\ndeny = [\"x.com\"]\nallow = [\"*\"]\n",
        );
        assert!(resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).is_err());
        // The twins: the same rules in a sandbox, and full access with the plain network switch.
        let sandboxed =
            PolicyArgs { sandbox: Some(SandboxMode::WorkspaceWrite), ..with(true, &[], &["198.18.0.9"]) };
        assert!(resolve_with(&sandboxed, None, &ctx(dir.path()), None).is_ok());
        assert!(resolve_with(&with(true, &[], &[]), None, &ctx(dir.path()), None).is_ok());
    }

    #[test]
    fn env_section_maps_to_env_policy() {
        let dir = tempfile::tempdir().unwrap();
        let cfg =
            loaded(dir.path(), "[env]\ninherit = \"none\"\nexclude_secrets = true\nset = { A = \"1\" }\n");
        let s = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap();
        assert_eq!(
            s.env_policy,
            EnvPolicy {
                inherit: EnvInherit::None,
                exclude_secrets: true,
                pass_through: Vec::new(),
                set: vec![("A".into(), "1".into())]
            }
        );
    }

    /// Secrets are excluded unless the config says otherwise; names are passed on purpose.
    #[test]
    fn secrets_are_excluded_by_default_and_passed_through_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let s = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), None).unwrap();
        assert!(s.env_policy.exclude_secrets && s.env_policy.pass_through.is_empty());
        let cfg = loaded(dir.path(), "[env]\nset = { A = \"1\" }\npass_through = [\"GH_TOKEN\"]\n");
        let args = PolicyArgs { pass_env: vec!["NPM_TOKEN".into()], ..PolicyArgs::default() };
        let s = resolve_with(&args, None, &ctx(dir.path()), Some(&cfg)).unwrap();
        assert!(s.env_policy.exclude_secrets, "an [env] section without exclude_secrets keeps the default");
        assert_eq!(s.env_policy.pass_through, vec!["GH_TOKEN".to_owned(), "NPM_TOKEN".to_owned()]);
        let cfg = loaded(dir.path(), "[env]\nexclude_secrets = false\n");
        let s = resolve_with(&PolicyArgs::default(), None, &ctx(dir.path()), Some(&cfg)).unwrap();
        assert!(!s.env_policy.exclude_secrets);
        let bad = PolicyArgs { pass_env: vec!["A=B".into()], ..PolicyArgs::default() };
        assert!(resolve_with(&bad, None, &ctx(dir.path()), None).is_err());
    }

    #[test]
    fn audit_log_flag_wins_and_file_paths_are_relative_to_the_file() {
        // Both outside every place sandboxed commands may write (see the test below for those).
        let dir = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let workspace = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let cfg = loaded(dir.path(), "audit_log = \"audit.jsonl\"\n");
        let args = PolicyArgs { sandbox: Some(SandboxMode::ReadOnly), ..PolicyArgs::default() };
        let s = resolve_with(&args, None, &ctx(workspace.path()), Some(&cfg));
        // The audit path resolves against the config file's directory, the flag's against the cwd.
        assert_eq!(s.unwrap().audit_log, Some(dir.path().join("audit.jsonl")));
        let in_config_dir = PolicyArgs { cwd: Some(workspace.path().to_path_buf()), ..args.clone() };
        let s = resolve_with(&in_config_dir, Some(Path::new("x.jsonl")), &ctx(dir.path()), Some(&cfg));
        assert_eq!(s.unwrap().audit_log, Some(dir.path().join("x.jsonl")));
    }

    /// Regression: an audit log inside a writable root could be rewritten (forged records) by sandboxed commands.
    #[test]
    fn an_audit_log_inside_a_writable_root_is_refused_under_workspace_write() {
        let workspace = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let outside = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let link = outside.path().join("into-workspace");
        std::os::unix::fs::symlink(workspace.path(), &link).unwrap();
        let args = PolicyArgs { cwd: Some(workspace.path().to_path_buf()), ..PolicyArgs::default() };
        let resolve = |log: &Path| resolve_with(&args, Some(log), &ctx(Path::new("/")), None);
        for inside in [
            workspace.path().join("audit.jsonl"),
            workspace.path().join("not/yet/created/audit.jsonl"),
            link.join("audit.jsonl"),
            PathBuf::from("/tmp/audit.jsonl"),
        ] {
            let error = resolve(&inside).unwrap_err().to_string();
            assert!(error.contains("lies in the writable root"), "{inside:?}: {error}");
        }
        // The allowed twin: outside every root. Under read-only the workspace still counts: what a sandboxed
        // command wrote there under an earlier workspace-write start is still there (`uexec_domain::trust`).
        let ok = outside.path().join("audit.jsonl");
        assert_eq!(resolve(&ok).unwrap().audit_log, Some(ok.clone()));
        let read_only = PolicyArgs { sandbox: Some(SandboxMode::ReadOnly), ..args.clone() };
        let log = workspace.path().join("audit.jsonl");
        assert!(resolve_with(&read_only, Some(&log), &ctx(Path::new("/")), None).is_err());
        assert!(resolve_with(&read_only, Some(&ok), &ctx(Path::new("/")), None).is_ok());
    }

    /// A config file a sandboxed command could have written is refused unless explicit.
    #[test]
    fn a_config_inside_a_writable_root_is_refused_unless_given_explicitly() {
        let workspace = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let outside = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let ws = workspace.path();
        let roots = possible_writable_roots(&[], ws, None);
        let write = |path: &Path| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "sandbox = \"danger-full-access\"\n").unwrap();
        };
        // Inside the workspace ($HOME/.config or $XDG_CONFIG_HOME under it).
        let inside = ws.join(".config/uexec/config.toml");
        write(&inside);
        // A symlink outside every root that points into the workspace.
        let link_to_inside = outside.path().join("link-to-inside.toml");
        std::os::unix::fs::symlink(&inside, &link_to_inside).unwrap();
        // A directory symlink inside the workspace that points outside: the link itself can be re-pointed.
        let real = outside.path().join("real");
        write(&real.join("config.toml"));
        std::os::unix::fs::symlink(&real, ws.join("cfg")).unwrap();
        let through_link_in_root = ws.join("cfg/config.toml");
        // A file symlink inside the workspace pointing to a file outside.
        let file_link = ws.join("config-link.toml");
        std::os::unix::fs::symlink(real.join("config.toml"), &file_link).unwrap();
        // Under /tmp, whatever the workspace.
        let tmp = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let in_tmp = tmp.path().join("uexec/config.toml");
        write(&in_tmp);
        for path in [&inside, &link_to_inside, &through_link_in_root, &file_link, &in_tmp] {
            let error = check_config_location(path, false, &roots).unwrap_err().to_string();
            assert!(error.contains("refusing the config file") && error.contains("writable root"), "{error}");
            assert!(error.contains(&path.display().to_string()), "{error}");
            assert!(check_config_location(path, true, &roots).is_ok(), "--config is the person's choice");
        }
        // The allowed twins: a real file outside every root, a missing file inside one.
        assert!(check_config_location(&real.join("config.toml"), false, &roots).is_ok());
        assert!(check_config_location(&ws.join("missing/config.toml"), false, &roots).is_ok());
        // A root added by --writable-root counts too.
        let extra = possible_writable_roots(&[outside.path().to_path_buf()], ws, None);
        assert!(check_config_location(&real.join("config.toml"), false, &extra).is_err());
        // $TMPDIR counts.
        let with_tmpdir = possible_writable_roots(&[], ws, Some(outside.path()));
        assert!(check_config_location(&real.join("config.toml"), false, &with_tmpdir).is_err());
    }

    #[test]
    fn missing_workspace_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let args = PolicyArgs { cwd: Some(dir.path().join("nope")), ..PolicyArgs::default() };
        let err = resolve_with(&args, None, &ctx(dir.path()), None).unwrap_err().to_string();
        assert!(err.contains("nope"), "{err}");
    }
}
