//! Package caches that work inside the sandbox without opening the person's own: under `workspace-write`,
//! sandboxed commands get environment variables that point package managers at a cache directory owned by the
//! sandbox (a writable root of sandboxed commands only); commands that run outside the sandbox never get them,
//! so they never read what a sandboxed command wrote there (a poisoned cache would run outside the sandbox).
//!
//! [`CACHE_TOOLS`] is the list: each entry names the tool, the variable and the subdirectory of the sandbox's
//! cache root. To cover a tool, add an entry (a variable the tool reads for its cache directory, and only for
//! that: a variable that also moves configuration or credentials, such as `CARGO_HOME`, does not qualify) and a
//! line in docs/sandbox.md.

use std::ffi::OsString;
use std::path::Path;

/// When a tool's cache is redirected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirect {
    /// Always: the tool needs a writable cache, and what it caches can be fetched again.
    Always,
    /// Only when the command has network: offline, the person's read-only cache is what lets it work (a fresh
    /// empty cache could not be filled).
    WithNetwork,
}

/// One tool's cache variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheTool {
    /// The tool, for documentation and reports.
    pub tool: &'static str,
    /// The variable that names its cache directory.
    pub var: &'static str,
    /// The subdirectory of the sandbox's cache root.
    pub dir: &'static str,
    /// When the variable is set.
    pub redirect: Redirect,
}

/// The covered tools.
pub const CACHE_TOOLS: [CacheTool; 9] = [
    CacheTool { tool: "npm", var: "npm_config_cache", dir: "npm", redirect: Redirect::Always },
    CacheTool { tool: "pnpm", var: "npm_config_store_dir", dir: "pnpm-store", redirect: Redirect::Always },
    CacheTool { tool: "yarn", var: "YARN_CACHE_FOLDER", dir: "yarn", redirect: Redirect::Always },
    CacheTool { tool: "pip", var: "PIP_CACHE_DIR", dir: "pip", redirect: Redirect::Always },
    CacheTool { tool: "uv", var: "UV_CACHE_DIR", dir: "uv", redirect: Redirect::Always },
    CacheTool { tool: "go (build cache)", var: "GOCACHE", dir: "go-build", redirect: Redirect::Always },
    CacheTool {
        tool: "go (module cache)",
        var: "GOMODCACHE",
        dir: "go-mod",
        redirect: Redirect::WithNetwork,
    },
    CacheTool {
        tool: "XDG-aware tools (pnpm metadata, node-gyp, pre-commit, ...)",
        var: "XDG_CACHE_HOME",
        dir: "xdg",
        redirect: Redirect::Always,
    },
    CacheTool { tool: "corepack", var: "COREPACK_HOME", dir: "corepack", redirect: Redirect::Always },
];

/// `env` for a sandboxed command whose sandbox owns the cache directory `root`: every [`CACHE_TOOLS`]
/// variable that applies (`network`: the command can reach the network) set to its subdirectory of `root`,
/// replacing any value the command would have inherited.
pub fn with_cache_vars(
    env: Vec<(OsString, OsString)>,
    root: &Path,
    network: bool,
) -> Vec<(OsString, OsString)> {
    let applies = |tool: &CacheTool| tool.redirect == Redirect::Always || network;
    let mut env: Vec<_> = env
        .into_iter()
        .filter(|(name, _)| !CACHE_TOOLS.iter().any(|tool| applies(tool) && name == tool.var))
        .collect();
    env.extend(
        CACHE_TOOLS
            .iter()
            .filter(|tool| applies(tool))
            .map(|tool| (OsString::from(tool.var), root.join(tool.dir).into_os_string())),
    );
    env
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn value<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsString> {
        env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    #[test]
    fn every_tool_points_inside_the_root_and_replaces_the_inherited_value() {
        let env = vec![("npm_config_cache".into(), "/home/me/.npm".into()), ("PATH".into(), "/bin".into())];
        let env = with_cache_vars(env, Path::new("/state/cache"), true);
        assert_eq!(env.iter().filter(|(n, _)| n == "npm_config_cache").count(), 1);
        assert_eq!(value(&env, "npm_config_cache"), Some(&OsString::from("/state/cache/npm")));
        assert_eq!(value(&env, "PATH"), Some(&OsString::from("/bin")));
        for tool in CACHE_TOOLS {
            let path = value(&env, tool.var).unwrap();
            assert!(Path::new(path).starts_with("/state/cache/"), "{}", tool.tool);
        }
    }

    #[test]
    fn offline_the_go_module_cache_stays_the_persons() {
        let env = vec![("GOMODCACHE".into(), "/home/me/go/pkg/mod".into())];
        let env = with_cache_vars(env, Path::new("/c"), false);
        assert_eq!(value(&env, "GOMODCACHE"), Some(&OsString::from("/home/me/go/pkg/mod")));
        assert_eq!(value(&env, "GOCACHE"), Some(&OsString::from("/c/go-build")));
    }

    #[test]
    fn no_variable_moves_configuration_or_credentials() {
        for tool in CACHE_TOOLS {
            for forbidden in ["CARGO_HOME", "GOPATH", "npm_config_userconfig", "PIP_CONFIG_FILE", "HOME"] {
                assert_ne!(tool.var, forbidden);
            }
        }
        let dirs: Vec<_> = CACHE_TOOLS.iter().map(|t| t.dir).collect();
        let mut unique = dirs.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), dirs.len(), "each tool has its own subdirectory");
    }
}
