//! Package caches that work inside the sandbox without opening the person's own: under `workspace-write`,
//! sandboxed commands get environment variables that point package managers at a cache directory owned by the
//! sandbox (a writable root of sandboxed commands only); commands that run outside the sandbox never get them,
//! so they never read what a sandboxed command wrote there (a poisoned cache would run outside the sandbox).
//!
//! [`CACHE_TOOLS`] is the list: each entry names the tool, the variable and the subdirectory of the sandbox's
//! cache root. To cover a tool, add an entry (a variable the tool reads for its cache directory, and only for
//! that) and a line in docs/sandbox.md.
//!
//! A variable that also moves configuration or credentials, such as `CARGO_HOME` (cargo's config, credentials,
//! installed binaries and registry cache in one directory), does not qualify while the person has that
//! directory: pointing it elsewhere would lose their configuration and break offline builds from their cache.
//! The Linux sandbox shows such a directory copy-on-write instead (an overlay whose upper layer belongs to the
//! sandbox: `uexec-sandbox-linux`'s `with_copy_on_write`). Only when the person has no such directory at all
//! (nothing to lose) is the variable redirected here ([`Redirect::WhenAbsent`]).

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
    /// Only when the directory the tool would use otherwise (the variable's value when absolute, else
    /// `home_default` under `$HOME`) does not exist: the person has none, so there is no configuration or
    /// credential to lose (when it exists, the sandbox shows it copy-on-write).
    WhenAbsent {
        /// The tool's default directory, relative to the home (`.cargo`).
        home_default: &'static str,
    },
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
///
/// Each tool gets only variables it reads: npm reads every `npm_config_*` variable and warns on each it does not
/// know (`npm warn Unknown env config "store-dir"` on every npm command), so the only `npm_config_*` variable
/// here is npm's own. pnpm 11 and later read their store from `pnpm_config_store_dir` (and no longer from
/// `npm_config_store_dir`); pnpm 9 and 10 read it only from `npm_config_store_dir`, or default to
/// `$PNPM_HOME/store`, so they get a pnpm home of the sandbox's when the person has none.
pub const CACHE_TOOLS: [CacheTool; 11] = [
    CacheTool { tool: "npm", var: "npm_config_cache", dir: "npm", redirect: Redirect::Always },
    CacheTool {
        tool: "pnpm 11 and later (store)",
        var: "pnpm_config_store_dir",
        dir: "pnpm-store",
        redirect: Redirect::Always,
    },
    CacheTool {
        tool: "pnpm 9 and 10 (store, a person without a pnpm home)",
        var: "PNPM_HOME",
        dir: "pnpm-home",
        redirect: Redirect::WhenAbsent { home_default: ".local/share/pnpm" },
    },
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
    CacheTool {
        tool: "cargo (a person without a cargo home)",
        var: "CARGO_HOME",
        dir: "cargo",
        redirect: Redirect::WhenAbsent { home_default: ".cargo" },
    },
];

/// `env` for a sandboxed command whose sandbox owns the cache directory `root`: every [`CACHE_TOOLS`]
/// variable that applies (`network`: the command can reach the network; `is_dir`: whether a directory exists,
/// for [`Redirect::WhenAbsent`]) set to its subdirectory of `root`, replacing any value the command would have
/// inherited.
pub fn with_cache_vars(
    env: Vec<(OsString, OsString)>,
    root: &Path,
    network: bool,
    is_dir: &dyn Fn(&Path) -> bool,
) -> Vec<(OsString, OsString)> {
    let redirected: Vec<&str> = CACHE_TOOLS
        .iter()
        .filter(|tool| match tool.redirect {
            Redirect::Always => true,
            Redirect::WithNetwork => network,
            Redirect::WhenAbsent { home_default } => {
                !persons_dir(&env, tool.var, home_default).is_some_and(|dir| is_dir(&dir))
            }
        })
        .map(|tool| tool.var)
        .collect();
    let applies = |tool: &CacheTool| redirected.contains(&tool.var);
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

/// The directory named by `var` in `env` when absolute, else `home_default` under `$HOME` (when absolute).
fn persons_dir(env: &[(OsString, OsString)], var: &str, home_default: &str) -> Option<std::path::PathBuf> {
    let value = |name: &str| {
        env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| Path::new(v)).filter(|p| p.is_absolute())
    };
    value(var).map(Path::to_path_buf).or_else(|| value("HOME").map(|home| home.join(home_default)))
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
        let env = with_cache_vars(env, Path::new("/state/cache"), true, &|_| false);
        assert_eq!(env.iter().filter(|(n, _)| n == "npm_config_cache").count(), 1);
        assert_eq!(value(&env, "npm_config_cache"), Some(&OsString::from("/state/cache/npm")));
        assert_eq!(value(&env, "PATH"), Some(&OsString::from("/bin")));
        for tool in CACHE_TOOLS {
            let path = value(&env, tool.var).unwrap();
            assert!(Path::new(path).starts_with("/state/cache/"), "{}", tool.tool);
        }
    }

    #[test]
    fn npm_is_given_no_variable_it_does_not_read() {
        // npm reads every `npm_config_*` variable (any case) as its own setting and warns on those it does not
        // know: the only one set is npm's cache.
        let env = with_cache_vars(Vec::new(), Path::new("/c"), true, &|_| false);
        let npm: Vec<_> = env
            .iter()
            .filter(|(name, _)| name.to_string_lossy().to_ascii_lowercase().starts_with("npm_config_"))
            .map(|(name, _)| name.clone())
            .collect();
        assert_eq!(npm, vec![OsString::from("npm_config_cache")]);
        // pnpm still gets its store: the variable pnpm 11 reads, and a pnpm home for pnpm 9-10.
        assert_eq!(value(&env, "pnpm_config_store_dir"), Some(&OsString::from("/c/pnpm-store")));
        assert_eq!(value(&env, "PNPM_HOME"), Some(&OsString::from("/c/pnpm-home")));
        // A person's pnpm home (global packages, pnpm itself) is never replaced.
        let own = vec![("HOME".into(), "/home/me".into())];
        let env = with_cache_vars(own, Path::new("/c"), true, &|dir| {
            dir == Path::new("/home/me/.local/share/pnpm")
        });
        assert_eq!(value(&env, "PNPM_HOME"), None);
        assert_eq!(value(&env, "pnpm_config_store_dir"), Some(&OsString::from("/c/pnpm-store")));
    }

    #[test]
    fn offline_the_go_module_cache_stays_the_persons() {
        let env = vec![("GOMODCACHE".into(), "/home/me/go/pkg/mod".into())];
        let env = with_cache_vars(env, Path::new("/c"), false, &|_| false);
        assert_eq!(value(&env, "GOMODCACHE"), Some(&OsString::from("/home/me/go/pkg/mod")));
        assert_eq!(value(&env, "GOCACHE"), Some(&OsString::from("/c/go-build")));
    }

    #[test]
    fn the_cargo_home_is_redirected_only_when_the_person_has_none() {
        let existing = |p: &Path| p == Path::new("/home/me/.cargo") || p == Path::new("/opt/cargo");
        let cargo = |env: Vec<(OsString, OsString)>| {
            value(&with_cache_vars(env, Path::new("/c"), true, &existing), "CARGO_HOME").cloned()
        };
        let home = || ("HOME".into(), "/home/me".into());
        assert_eq!(cargo(vec![home()]), None, "~/.cargo exists: left alone");
        assert_eq!(
            cargo(vec![home(), ("CARGO_HOME".into(), "/opt/cargo".into())]),
            Some("/opt/cargo".into())
        );
        assert_eq!(cargo(vec![("HOME".into(), "/home/new".into())]), Some("/c/cargo".into()));
        let missing = vec![home(), ("CARGO_HOME".into(), "/opt/none".into())];
        assert_eq!(cargo(missing), Some("/c/cargo".into()), "a CARGO_HOME that does not exist is replaced");
        // A relative CARGO_HOME is not where cargo looks first: `~/.cargo`, which exists here.
        assert_eq!(cargo(vec![home(), ("CARGO_HOME".into(), "rel".into())]), Some("rel".into()));
        assert_eq!(cargo(Vec::new()), Some("/c/cargo".into()), "no home at all: nothing to lose");
    }

    #[test]
    fn no_variable_moves_configuration_or_credentials_the_person_has() {
        for tool in CACHE_TOOLS {
            for forbidden in ["GOPATH", "npm_config_userconfig", "PIP_CONFIG_FILE", "HOME"] {
                assert_ne!(tool.var, forbidden);
            }
            if tool.var == "CARGO_HOME" {
                assert!(
                    matches!(tool.redirect, Redirect::WhenAbsent { .. }),
                    "only when the person has none"
                );
            }
        }
        let dirs: Vec<_> = CACHE_TOOLS.iter().map(|t| t.dir).collect();
        let mut unique = dirs.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), dirs.len(), "each tool has its own subdirectory");
    }
}
