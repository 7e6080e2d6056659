//! The settings of a listening server (`--listen`): its address and its bearer token, from the flag, the
//! environment, the config file, or generated into a private directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use uexec_domain::trust::SandboxWrites;
use uexec_engine::writable_by_sandbox;

use super::state::{private_home, server_file_roots};
use super::{ProcessContext, Settings, absolute};
use crate::cli::ServeArgs;
/// The environment variable naming the bearer token file (after `--auth-token-file`, before the config).
pub const AUTH_TOKEN_FILE_ENV: &str = "UEXEC_AUTH_TOKEN_FILE";

/// The shortest bearer token accepted: shorter ones are guessable.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The bearer token, kept out of `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(Vec<u8>);

impl AuthToken {
    /// A token from `bytes` (unit tests).
    #[cfg(test)]
    pub fn for_tests(bytes: &[u8]) -> Self {
        AuthToken(bytes.to_vec())
    }

    /// The token's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthToken(..)")
    }
}

/// Where the server's bearer token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// A file the person named (`--auth-token-file`, `$UEXEC_AUTH_TOKEN_FILE`, `[server] auth_token_file`).
    File(PathBuf),
    /// Generated at start; written (mode 0600) into this directory once the server knows its address.
    Generated(PathBuf),
}

/// The validated settings of `uexec mcp --listen`.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Where to listen.
    pub listen: std::net::SocketAddr,
    /// The bearer token every request but the probes must carry: there is always one.
    pub token: AuthToken,
    /// Where it comes from (the file is hidden from sandboxed commands).
    pub token_origin: TokenOrigin,
    /// MCP clients held at once.
    pub max_clients: usize,
    /// Live sessions per client (the engine's `max_sessions`), after the memory bound.
    pub sessions_per_client: usize,
    /// Live sessions across all clients, after the memory bound.
    pub sessions_total: usize,
    /// How long a client without an open connection keeps its sessions.
    pub client_grace: std::time::Duration,
    /// How long calls in flight may take to finish on SIGTERM.
    pub shutdown_deadline: std::time::Duration,
}

impl ServerSettings {
    /// Resolve the flags over the config's `[server]` section (in `settings`) over the defaults; `None` without
    /// `--listen` (stdio). The limits of `settings` turn memory bounds into session caps.
    pub fn resolve(
        args: &ServeArgs,
        settings: &Settings,
        ctx: &ProcessContext,
    ) -> Result<Option<ServerSettings>> {
        let Some(listen) = args.listen else { return Ok(None) };
        let (file, limits) = (&settings.server, &settings.limits);
        let token_file = match &args.auth_token_file {
            Some(path) => Some(absolute(&ctx.cwd, path)),
            None => match (ctx.env)(AUTH_TOKEN_FILE_ENV).filter(|v| !v.is_empty()) {
                Some(path) => Some(absolute(&ctx.cwd, Path::new(&path))),
                None => file.auth_token_file.clone(),
            },
        };
        let buffer = limits.output_buffer_bytes.max(1);
        let pick = |flag: Option<usize>, key: Option<usize>, default: usize| flag.or(key).unwrap_or(default);
        let max_clients = pick(args.max_clients, file.max_clients, 64);
        let per_client =
            pick(args.max_sessions_per_client, file.max_sessions_per_client, limits.max_sessions);
        let total = pick(args.max_sessions_total, file.max_sessions_total, 512);
        let memory_per_client = pick(args.memory_per_client, file.memory_per_client, 64 << 20);
        let memory_total = pick(args.memory_total, file.memory_total, 512 << 20);
        let sessions_per_client = per_client.min(memory_per_client / buffer);
        let sessions_total = total.min(memory_total / buffer);
        for (value, what) in [
            (max_clients, "max_clients must be at least 1".to_owned()),
            (
                sessions_per_client,
                format!(
                    "max_sessions_per_client and memory_per_client must allow at least one session (one session \
                     buffers up to {buffer} bytes of output)"
                ),
            ),
            (
                sessions_total,
                format!(
                    "max_sessions_total and memory_total must allow at least one session (one session buffers up \
                     to {buffer} bytes of output)"
                ),
            ),
        ] {
            if value == 0 {
                bail!("{what}");
            }
        }
        // The token last: a start refused for its limits generates nothing.
        let roots = server_file_roots(settings);
        let (token, token_origin) = match token_file {
            Some(path) => {
                if let Some(found) = writable_by_sandbox(&path, &roots) {
                    bail!(
                        "refusing the auth token file {}: {}, where a sandboxed command could read it (after moving \
                         the directory above it) or replace it with a token of its own; keep it outside the \
                         workspace, /tmp, $TMPDIR and every writable root, or leave the token out on a loopback \
                         address and uexec generates one",
                        path.display(),
                        found.describe()
                    );
                }
                (read_token(&path)?, TokenOrigin::File(path))
            }
            None => {
                if !listen.ip().is_loopback() {
                    bail!(
                        "refusing to listen on {listen} without a bearer token file: give one with \
                         --auth-token-file FILE (or ${AUTH_TOKEN_FILE_ENV}, or [server] auth_token_file); only on a \
                         loopback address (127.0.0.1 or [::1]) does uexec generate a token itself"
                    );
                }
                (generate_token()?, TokenOrigin::Generated(generated_token_home(settings, &roots)?))
            }
        };
        let secs = |flag: Option<u64>, key: Option<u64>, default: u64| {
            std::time::Duration::from_secs(flag.or(key).unwrap_or(default))
        };
        Ok(Some(ServerSettings {
            listen,
            token,
            token_origin,
            max_clients,
            sessions_per_client,
            sessions_total,
            client_grace: secs(args.client_grace_secs, file.client_grace_secs, 60),
            shutdown_deadline: secs(args.shutdown_deadline_secs, file.shutdown_deadline_secs, 20),
        }))
    }
}

/// A fresh bearer token: 32 bytes from the system's random source, in hex.
pub(crate) fn generate_token() -> Result<AuthToken> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .context("cannot read /dev/urandom to generate a bearer token")?;
    Ok(AuthToken(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>().into_bytes()))
}

/// The directory a generated token goes to: the first of [`Settings::token_dirs`] outside every possible
/// writable root, created mode 0700 and canonical (refused when someone else owns it).
pub(crate) fn generated_token_home(settings: &Settings, roots: &SandboxWrites) -> Result<PathBuf> {
    let mut refused = Vec::new();
    let what = "a generated bearer token (give a token file with --auth-token-file FILE)";
    if let Some(home) = private_home(&settings.token_dirs, roots, what, &mut refused)? {
        return Ok(home);
    }
    let tried = if refused.is_empty() {
        "no runtime or state directory is known ($XDG_RUNTIME_DIR, $XDG_STATE_HOME, $HOME)".to_owned()
    } else {
        format!("sandboxed commands could reach every place it could be kept ({})", refused.join("; "))
    };
    bail!(
        "cannot generate a bearer token for --listen: {tried}. Give a token file outside every writable root with \
         --auth-token-file FILE, or set $XDG_RUNTIME_DIR or $XDG_STATE_HOME to a private directory outside them"
    )
}

/// Write a generated `token` for the server listening on `local` into `dir` (mode 0600, replacing the file of
/// an earlier server on the same address): the file's path.
pub fn write_generated_token(dir: &Path, local: std::net::SocketAddr, token: &AuthToken) -> Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(format!("{}-{}.token", local.ip(), local.port()));
    let partial = dir.join(format!(".{}-{}.token.{}", local.ip(), local.port(), std::process::id()));
    let _ = std::fs::remove_file(&partial);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let mut content = token.as_bytes().to_vec();
    content.push(b'\n');
    file.write_all(&content)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, &path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(path)
}

/// Read a bearer token file: its content without surrounding whitespace, at least [`MIN_TOKEN_BYTES`] long.
pub(crate) fn read_token(path: &Path) -> Result<AuthToken> {
    let raw =
        std::fs::read(path).with_context(|| format!("cannot read the auth token file {}", path.display()))?;
    let token = raw.trim_ascii();
    if token.len() < MIN_TOKEN_BYTES {
        bail!(
            "the auth token in {} is {} bytes long; use at least {MIN_TOKEN_BYTES} random bytes (e.g. `openssl rand \
             -hex 32`)",
            path.display(),
            token.len()
        );
    }
    if token.iter().any(|b| !b.is_ascii_graphic()) {
        bail!("the auth token in {} must be printable ASCII without spaces", path.display());
    }
    Ok(AuthToken(token.to_vec()))
}
