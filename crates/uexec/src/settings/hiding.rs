//! What uexec hides from sandboxed commands of its own state: the audit log, the snapshots, the copy-on-write
//! layers, each found by its literal path and by what it resolves to.

use std::path::{Path, PathBuf};

use uexec_domain::hidden::{HiddenPaths, HiddenPattern};

use anyhow::Result;
use uexec_domain::env::EnvPolicy;
use uexec_domain::hidden_env::environment_secrets;

use super::server::AUTH_TOKEN_FILE_ENV;
use super::state::{control_dirs, generated_token_dirs, leftovers_dirs, sandbox_leftovers_dir};
use super::{ProcessContext, absolute};
use crate::config::LoadedConfig;
/// The server's own state: every place it writes that holds other sessions' data or its credentials, which
/// sandboxed commands must not read (one HTTP client's commands would read another's command lines): the audit
/// log and its rotated copies, the snapshots of commands that run outside the sandbox (`<state>/snapshots/host`:
/// what a login shell outside the sandbox saw), the copy-on-write layers of every slot
/// (`<state>/sandbox-overlays`; a command sees its own view through the overlay, never the layers), and the
/// bearer token file of `--listen`. Not listed, because sandboxed commands use
/// them: `<state>/sandbox-cache` (a writable root) and `<state>/snapshots/sandboxed` (sourced by sandboxed
/// shells; it holds no secret-named variable, `uexec_domain::snapshot::render_bash`).
pub fn own_state(
    state_dir: Option<&Path>,
    audit_log: Option<&Path>,
    token_file: Option<&Path>,
) -> Vec<OwnState> {
    let mut out = Vec::new();
    if let Some(log) = audit_log {
        out.push(OwnState { path: log.to_path_buf(), what: "the audit log", rotated: true });
    }
    if let Some(state) = state_dir {
        let snapshots = state.join("snapshots").join("host");
        out.push(OwnState { path: snapshots, what: "the snapshots of unsandboxed shells", rotated: false });
        let layers = state.join("sandbox-overlays");
        out.push(OwnState { path: layers, what: "the copy-on-write layers", rotated: false });
        let leftovers = sandbox_leftovers_dir(state);
        out.push(OwnState {
            path: leftovers,
            what: "the sandbox's placeholder record and kept objects",
            rotated: false,
        });
    }
    if let Some(token) = token_file {
        out.push(OwnState { path: token.to_path_buf(), what: "the auth token file", rotated: false });
    }
    out
}

/// One place of the server's own state ([`own_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnState {
    /// The path (a file or a directory).
    pub path: PathBuf,
    /// What it is, for the report.
    pub what: &'static str,
    /// Its rotated copies (`<name>.*` beside it: `audit.jsonl.1`, `audit.jsonl.2.gz`) are hidden too.
    pub rotated: bool,
}

/// Hide every place of `state` from sandboxed commands.
pub fn hide_own_state(hidden: &mut HiddenPaths, state: &[OwnState]) {
    for place in state {
        hide_exact(hidden, &place.path, place.what);
        if !place.rotated {
            continue;
        }
        // The copies a rotation leaves beside the file: a glob on its (resolved) name, when the path can be
        // written as one (no wildcard or `..` of its own).
        let resolved = resolved_once(&place.path);
        let text = format!("{}.*", resolved.display());
        let plain = resolved.to_str().is_some_and(|p| !p.contains(['*', '?']) && !p.contains("/../"));
        match HiddenPattern::parse(&text) {
            Ok(pattern) if plain && !hidden.patterns.contains(&pattern) => hidden.patterns.push(pattern),
            _ => {}
        }
    }
}

/// Hide `path` exactly (named `what` in the report), resolved once now: links on the way and at the end are
/// followed here, so a link a sandboxed command plants later chooses nothing. When the path differs from what
/// it resolves to, both are hidden; a path that does not exist yet is kept with its existing directories
/// resolved (it is hidden once it appears).
pub fn hide_exact(hidden: &mut HiddenPaths, path: &Path, what: &str) {
    let mut paths = vec![path.to_path_buf()];
    paths.push(resolved_once(path));
    paths.dedup();
    for path in paths {
        match HiddenPattern::exact(&path, what) {
            Some(pattern) if !hidden.patterns.contains(&pattern) => hidden.patterns.push(pattern),
            Some(_) => {}
            None => {
                tracing::warn!(path = %path.display(), "{what} cannot be hidden: its path is not absolute UTF-8")
            }
        }
    }
}

/// `path` with every link resolved: `canonicalize` when it exists, else its nearest existing ancestor
/// canonicalized with the rest appended.
pub(crate) fn resolved_once(path: &Path) -> PathBuf {
    if let Ok(canonical) = std::fs::canonicalize(path) {
        return canonical;
    }
    let mut rest = Vec::new();
    let mut at = path;
    while let Some(parent) = at.parent() {
        // The last component as written (`..` included: dropping it would name another file).
        if let Some(last) = at.components().next_back() {
            rest.push(last.as_os_str().to_os_string());
        }
        if let Ok(canonical) = std::fs::canonicalize(parent) {
            return rest.iter().rev().fold(canonical, |acc, name| acc.join(name));
        }
        at = parent;
    }
    path.to_path_buf()
}

/// Hidden-path patterns that name exactly `path` (its components taken literally, never refused): for the
/// canonical path (the file a link or a `..` leads to; for a path that does not exist yet, its nearest existing
/// ancestor's canonical path and the rest, since the hidden-path walk follows no link on the way), and for the
/// path as written when it has no `..`.
pub fn literal_patterns(path: &Path) -> Vec<HiddenPattern> {
    // Exact locations (`HiddenPattern::exact`): literal components, so a `*` or `?` in a path names itself.
    let pattern = |path: &Path| -> Option<HiddenPattern> {
        if path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            return None;
        }
        HiddenPattern::exact(path, path.display().to_string())
    };
    let mut patterns: Vec<HiddenPattern> = Vec::new();
    for candidate in [canonical_prefix(path), Some(path.to_path_buf())].into_iter().flatten() {
        if let Some(p) = pattern(&candidate)
            && !patterns.iter().any(|q| q.components == p.components)
        {
            patterns.push(p);
        }
    }
    patterns
}

/// `path` canonical, or its nearest existing ancestor canonical followed by the components that do not exist yet
/// (`None` when one of those is `..`, or nothing resolves).
pub(crate) fn canonical_prefix(path: &Path) -> Option<PathBuf> {
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut at = path;
    loop {
        if let Ok(canonical) = std::fs::canonicalize(at) {
            return Some(rest.iter().rev().fold(canonical, |dir, name| dir.join(name)));
        }
        match (at.parent(), at.components().next_back()) {
            (Some(parent), Some(std::path::Component::Normal(name))) => {
                rest.push(name);
                at = parent;
            }
            _ => return None,
        }
    }
}

/// What sandboxed commands never see, and where uexec keeps what it hides of its own.
#[derive(Debug)]
pub(crate) struct Hidden {
    /// The hidden locations.
    pub(crate) hidden: HiddenPaths,
    /// Where generated bearer tokens are kept.
    pub(crate) token_dirs: Vec<PathBuf>,
    /// Where control sockets are kept.
    pub(crate) control_dirs: Vec<PathBuf>,
}

/// The hidden locations: the default secret locations (unless `hide_secrets = false`) and the config's
/// `hidden_paths`; the bearer tokens and control sockets of every uexec of this user and the sandbox's record
/// of its placeholders; the credential stores and files the server's environment points at; and uexec's own
/// state (the audit log, the snapshots, the copy-on-write layers).
pub(crate) fn hidden_paths(
    ctx: &ProcessContext,
    loaded: Option<&LoadedConfig>,
    home: Option<PathBuf>,
    state_dir: Option<&Path>,
    audit_log: Option<&Path>,
    env_policy: &EnvPolicy,
) -> Result<Hidden> {
    let hide_defaults = loaded.and_then(|l| l.file.hide_secrets).unwrap_or(true);
    let mut patterns = if hide_defaults { HiddenPattern::defaults() } else { Vec::new() };
    if let Some(loaded) = loaded {
        for glob in &loaded.file.hidden_paths {
            let pattern = HiddenPattern::parse(glob.get_ref())
                .map_err(|e| loaded.error_at(glob.span(), "hidden_paths", e))?;
            patterns.push(pattern);
        }
    }
    // The bearer tokens of listening servers are hidden from every sandboxed command of every uexec that shares
    // where they are kept (the generated tokens' directory, the file the environment or the config names), not
    // only from their own server's: no sandboxed command reaches any uexec listener as a client.
    let token_dirs = generated_token_dirs(&ctx.env, state_dir);
    for dir in &token_dirs {
        patterns.extend(literal_patterns(dir));
    }
    // So are the control sockets of every server (`crate::control`): a command that could attach to a session
    // could type into one that runs outside the sandbox.
    let control_dirs = control_dirs(&ctx.env, state_dir);
    for dir in &control_dirs {
        patterns.extend(literal_patterns(dir));
    }
    // And the sandbox's record of its placeholders (wherever it goes): a command that held its lock would keep
    // them in the workspace, one that wrote it could name what the server removes.
    for dir in leftovers_dirs(&control_dirs) {
        patterns.extend(literal_patterns(&dir));
    }
    if let Some(file) = (ctx.env)(AUTH_TOKEN_FILE_ENV).filter(|v| !v.is_empty()) {
        patterns.extend(literal_patterns(&absolute(&ctx.cwd, Path::new(&file))));
    }
    if let Some(loaded) = loaded
        && let Some(server) = &loaded.file.server
        && let Some(token) = &server.auth_token_file
    {
        patterns.extend(literal_patterns(&absolute(loaded.base_dir(), token)));
    }
    let mut hidden = HiddenPaths { home, patterns, reachable: Vec::new() };
    if hide_defaults {
        // The server's own environment, read once here where the other locations are worked out.
        let mut vars = (ctx.vars)();
        // gpg-agent, podman and the systemd user agents use the runtime directory even when the variable is unset.
        if !vars.iter().any(|(name, value)| name == "XDG_RUNTIME_DIR" && !value.is_empty()) {
            let uid = rustix::process::getuid().as_raw();
            vars.push(("XDG_RUNTIME_DIR".into(), format!("/run/user/{uid}").into()));
        }
        let found = environment_secrets(&vars, hidden.home.as_deref(), &ctx.cwd, env_policy);
        for location in found.hidden {
            hide_exact(&mut hidden, &location.path, &location.text);
        }
        hidden.reachable = found.reachable;
    }
    hide_own_state(&mut hidden, &own_state(state_dir, audit_log, None));
    Ok(Hidden { hidden, token_dirs, control_dirs })
}
