//! The environment of a spawned command (spec A5): what is inherited, what is set, and what is always forced.

use std::collections::BTreeMap;
use std::ffi::OsString;

use serde::{Deserialize, Serialize};

/// Variables every command gets, overriding everything else: no colours, no pagers, a UTF-8 C locale.
pub const FORCED_ENV: [(&str, &str); 9] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("LANG", "C.UTF-8"),
    ("LC_CTYPE", "C.UTF-8"),
    ("LC_ALL", "C.UTF-8"),
    ("COLORTERM", ""),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GH_PAGER", "cat"),
];

/// The terminal type of a session with a terminal (`tty: true`): a real one, so full-screen programs (`top`,
/// `vim`, `less`) draw frames in place that `read_screen` renders as a person would see them. A command without a
/// terminal keeps [`FORCED_ENV`]'s `dumb`, the reference's value, so what a model reads of a plain command is
/// what it reads through the Codex CLI. Colours stay off either way (`NO_COLOR`).
pub const TERMINAL_TYPE: &str = "xterm-256color";

/// `env` (built by [`build_env`]) for a session with a terminal when `tty` is true: `TERM` is
/// [`TERMINAL_TYPE`]; unchanged otherwise.
pub fn with_terminal_type(mut env: Vec<(OsString, OsString)>, tty: bool) -> Vec<(OsString, OsString)> {
    if tty {
        for (name, value) in &mut env {
            if name == "TERM" {
                *value = OsString::from(TERMINAL_TYPE);
            }
        }
    }
    env
}

/// The variable that tells a command which sandbox it runs under (spec A5).
pub const ENV_SANDBOX: &str = "UEXEC_SANDBOX";

/// The variable set to `1` when the command's network access is disabled (spec A5).
pub const ENV_NETWORK_DISABLED: &str = "UEXEC_SANDBOX_NETWORK_DISABLED";

/// `env` with the sandbox variables of `kind`: `UEXEC_SANDBOX=<kind>`, and `UEXEC_SANDBOX_NETWORK_DISABLED=1` when
/// `network` is false. Inherited values of these names are replaced, so a command never sees a stale claim.
pub fn with_sandbox_vars(
    env: Vec<(OsString, OsString)>,
    kind: crate::SandboxKind,
    network: bool,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<_> =
        env.into_iter().filter(|(name, _)| name != ENV_SANDBOX && name != ENV_NETWORK_DISABLED).collect();
    env.push((ENV_SANDBOX.into(), kind.as_str().into()));
    if !network {
        env.retain(|(name, _)| !NETWORK_OFF_ENV.iter().any(|(n, _)| name == n));
        env.push((ENV_NETWORK_DISABLED.into(), "1".into()));
        env.extend(NETWORK_OFF_ENV.iter().map(|(n, v)| (OsString::from(n), OsString::from(v))));
    }
    env
}

/// What sandboxed commands get with the network off, replacing inherited values: package managers do not retry
/// a network that cannot answer (pip retried for about 10 s, npm for about 30 s, cargo three times with
/// back-off). Each variable is one the tool reads as that setting only (npm knows `fetch-retries`, so it prints
/// no warning).
pub const NETWORK_OFF_ENV: [(&str, &str); 4] = [
    ("PIP_RETRIES", "0"),
    ("npm_config_fetch_retries", "0"),
    ("CARGO_NET_RETRY", "0"),
    ("UV_HTTP_RETRIES", "0"),
];

/// Name fragments (matched case-insensitively, anywhere in the name) of variables dropped when `exclude_secrets`
/// is on, which is the default: the reference's `KEY` (so `*_KEY`, `*_API_KEY`, `*_PRIVATE_KEY`), `SECRET` and
/// `TOKEN`, plus the password and credential names they miss (`DB_PASSWORD`, `PGPASSWORD`, `GPG_PASSPHRASE`,
/// `AWS_SHARED_CREDENTIALS_FILE`, `*_COOKIE`). A variable a command needs on purpose is named in
/// [`EnvPolicy::pass_through`].
pub const SECRET_NAME_PATTERNS: [&str; 8] =
    ["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "COOKIE"];

/// Name endings (matched case-insensitively) of variables dropped with [`SECRET_NAME_PATTERNS`]: names too
/// short to match anywhere without hitting `PATH` or `OLDPWD` (`GITHUB_PAT`, `MYSQL_PWD`, `NPM_AUTH`).
pub const SECRET_NAME_SUFFIXES: [&str; 3] = ["_PAT", "_PWD", "_AUTH"];

/// Variables (exact names, matched case-insensitively) dropped with [`SECRET_NAME_PATTERNS`] although their
/// names do not look like secrets: they lead to the person's agents (ssh-agent, gpg-agent, gnome-keyring), which
/// sign and decrypt with keys the hidden locations keep out of reach. Their sockets are hidden as well
/// ([`crate::hidden_env`]); naming one in [`EnvPolicy::pass_through`] passes the variable and leaves its socket
/// reachable.
pub const AGENT_VARIABLES: [&str; 4] =
    ["SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "GNOME_KEYRING_CONTROL"];

/// Which variables of the server's environment a command inherits.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnvInherit {
    /// Every variable.
    #[default]
    All,
    /// None.
    None,
    /// Only the variables with these exact names.
    Only(Vec<String>),
}

/// How a command's environment is built.
///
/// The default inherits every variable except those whose names look like secrets ([`is_secret_name`]): agents
/// run in environments full of keys, and a command (or a program a repository names) must not read them unless
/// a person passed them through by name ([`EnvPolicy::pass_through`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct EnvPolicy {
    /// Which inherited variables are kept.
    pub inherit: EnvInherit,
    /// Drop inherited variables whose names look like secrets ([`SECRET_NAME_PATTERNS`]). Default: true.
    pub exclude_secrets: bool,
    /// Inherited variables kept even though their names look like secrets (exact names). They are still subject
    /// to `inherit`.
    pub pass_through: Vec<String>,
    /// Variables set explicitly (after inheritance, before the forced ones).
    pub set: Vec<(String, String)>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        EnvPolicy {
            inherit: EnvInherit::All,
            exclude_secrets: true,
            pass_through: Vec::new(),
            set: Vec::new(),
        }
    }
}

/// True when `name` looks like it holds a secret, or leads to an agent that holds keys ([`AGENT_VARIABLES`]).
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_PATTERNS.iter().any(|pattern| upper.contains(pattern))
        || SECRET_NAME_SUFFIXES.iter().any(|suffix| upper.ends_with(suffix))
        || AGENT_VARIABLES.iter().any(|agent| upper == *agent)
}

impl EnvPolicy {
    /// True when an inherited variable `name` reaches commands under this policy (`inherit`, then the secret
    /// filter with its `pass_through`). What the login snapshot restores and which agent sockets stay reachable
    /// follow the same answer.
    pub fn keeps(&self, name: &str) -> bool {
        let inherit = match &self.inherit {
            EnvInherit::All => true,
            EnvInherit::None => false,
            EnvInherit::Only(names) => names.iter().any(|n| n == name),
        };
        inherit && !self.drops_secret(name)
    }

    /// True when the secret filter drops `name` (whatever `inherit` says): `exclude_secrets` is on, the name
    /// looks like a secret and `pass_through` does not name it.
    pub fn drops_secret(&self, name: &str) -> bool {
        self.exclude_secrets && is_secret_name(name) && !self.pass_through.iter().any(|n| n == name)
    }
}

/// The environment of a command: `inherited` filtered by `policy`, then `policy.set`, then [`FORCED_ENV`]; later
/// values win. Sorted by name, one entry per name.
pub fn build_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    policy: &EnvPolicy,
) -> Vec<(OsString, OsString)> {
    let mut env = policy_env(inherited, policy);
    for (name, value) in FORCED_ENV {
        env.insert(name.into(), value.into());
    }
    env.into_iter().collect()
}

/// `inherited` filtered by `policy`, then `policy.set`, without [`FORCED_ENV`]: the environment of a command
/// attached to a person's own terminal (`uexec run`), where colours and pagers are wanted. Sorted by name.
pub fn filter_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    policy: &EnvPolicy,
) -> Vec<(OsString, OsString)> {
    policy_env(inherited, policy).into_iter().collect()
}

fn policy_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    policy: &EnvPolicy,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = BTreeMap::new();
    for (name, value) in inherited {
        if policy.keeps(&name.to_string_lossy()) {
            env.insert(name, value);
        }
    }
    for (name, value) in &policy.set {
        env.insert(name.into(), value.into());
    }
    env
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect()
    }

    fn get<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsString> {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    const INHERITED: [(&str, &str); 5] = [
        ("PATH", "/usr/bin"),
        ("HOME", "/root"),
        ("OPENAI_API_KEY", "sk-1"),
        ("gh_token", "t"),
        ("TERM", "xterm-256color"),
    ];

    #[test]
    fn inherit_all_then_forced_vars_override() {
        let everything = EnvPolicy { exclude_secrets: false, ..EnvPolicy::default() };
        let env = build_env(vars(&INHERITED), &everything);
        assert_eq!(get(&env, "PATH").unwrap(), "/usr/bin");
        assert_eq!(get(&env, "OPENAI_API_KEY").unwrap(), "sk-1");
        assert_eq!(get(&env, "TERM").unwrap(), "dumb");
        for (name, value) in FORCED_ENV {
            assert_eq!(get(&env, name).unwrap(), value);
        }
        let mut sorted = names(&env);
        sorted.sort();
        sorted.dedup();
        assert_eq!(names(&env), sorted);
    }

    /// A session with a terminal gets a real terminal type; a command without one keeps the reference's `dumb`,
    /// and every other forced variable (no colours, no pager) stays for both.
    #[test]
    fn a_terminal_session_gets_a_real_terminal_type_and_keeps_colours_off() {
        let env = build_env(vars(&INHERITED), &EnvPolicy::default());
        let terminal = with_terminal_type(env.clone(), true);
        assert_eq!(get(&terminal, "TERM").unwrap(), TERMINAL_TYPE);
        assert_eq!(terminal.iter().filter(|(n, _)| n == "TERM").count(), 1);
        assert_eq!(get(&terminal, "NO_COLOR").unwrap(), "1");
        assert_eq!(get(&terminal, "PAGER").unwrap(), "cat");
        assert_eq!(with_terminal_type(env.clone(), false), env);
        assert_eq!(get(&env, "TERM").unwrap(), "dumb");
    }

    /// Secrets of the server's environment stay out of commands by default.
    #[test]
    fn secrets_are_dropped_by_default() {
        let policy = EnvPolicy::default();
        assert!(policy.exclude_secrets);
        let inherited = vars(&[
            ("FOO_API_KEY", "a"),
            ("AWS_SECRET_ACCESS_KEY", "b"),
            ("AWS_SESSION_TOKEN", "c"),
            ("GITHUB_TOKEN", "d"),
            ("SSH_PRIVATE_KEY", "e"),
            ("DB_PASSWORD", "f"),
            ("GPG_PASSPHRASE", "g"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "h"),
            ("SESSION_COOKIE", "i"),
            ("client_secret", "j"),
            ("HOME", "/h"),
            ("PATH", "/bin"),
        ]);
        for env in [build_env(inherited.clone(), &policy), filter_env(inherited.clone(), &policy)] {
            assert_eq!(names(&env).iter().filter(|n| ["HOME", "PATH"].contains(&n.as_str())).count(), 2);
            for (name, _) in &inherited {
                let name = name.to_string_lossy();
                assert_eq!(get(&env, &name).is_some(), name == "HOME" || name == "PATH", "{name}");
            }
        }
        let from_json: EnvPolicy = serde_json::from_str("{}").unwrap();
        assert!(from_json.exclude_secrets, "an [env] section that does not say keeps the default");
    }

    #[test]
    fn pass_through_keeps_named_secrets_only() {
        let policy = EnvPolicy { pass_through: vec!["GH_TOKEN".into()], ..EnvPolicy::default() };
        let env = build_env(vars(&[("GH_TOKEN", "t"), ("gh_token", "u"), ("NPM_TOKEN", "n")]), &policy);
        assert_eq!(get(&env, "GH_TOKEN").unwrap(), "t");
        assert!(get(&env, "gh_token").is_none() && get(&env, "NPM_TOKEN").is_none());
        let only = EnvPolicy { inherit: EnvInherit::Only(vec!["HOME".into()]), ..policy };
        assert!(
            get(&build_env(vars(&[("GH_TOKEN", "t")]), &only), "GH_TOKEN").is_none(),
            "inherit still applies"
        );
    }

    #[test]
    fn secrets_are_dropped_when_asked() {
        let policy = EnvPolicy { exclude_secrets: true, ..EnvPolicy::default() };
        let env = build_env(vars(&INHERITED), &policy);
        assert!(get(&env, "OPENAI_API_KEY").is_none());
        assert!(get(&env, "gh_token").is_none());
        assert!(get(&env, "HOME").is_some());
        assert!(is_secret_name("MY_Secret_VALUE"));
        assert!(
            is_secret_name("PGPASSWORD")
                && is_secret_name("DB_PASSWD")
                && is_secret_name("GOOGLE_CREDENTIALS")
        );
        assert!(!is_secret_name("PATH"));
        assert!(is_secret_name("GITHUB_PAT") && is_secret_name("mysql_pwd") && is_secret_name("NPM_AUTH"));
        for plain in
            ["PWD", "OLDPWD", "XDG_DATA_DIRS", "GIT_AUTHOR_NAME", "SSH_CONNECTION", "SSH_ASKPASS", "HOME"]
        {
            assert!(!is_secret_name(plain), "{plain}");
        }
        // The agents' variables are secrets too.
        for agent in
            ["SSH_AUTH_SOCK", "ssh_auth_sock", "SSH_AGENT_PID", "GPG_AGENT_INFO", "GNOME_KEYRING_CONTROL"]
        {
            assert!(is_secret_name(agent), "{agent}");
        }
    }

    #[test]
    fn inherit_none_and_allow_list() {
        let none =
            build_env(vars(&INHERITED), &EnvPolicy { inherit: EnvInherit::None, ..EnvPolicy::default() });
        assert_eq!(none.len(), FORCED_ENV.len());
        let only = EnvPolicy { inherit: EnvInherit::Only(vec!["HOME".into()]), ..EnvPolicy::default() };
        let env = build_env(vars(&INHERITED), &only);
        assert_eq!(get(&env, "HOME").unwrap(), "/root");
        assert!(get(&env, "PATH").is_none());
    }

    #[test]
    fn set_overrides_inherited_but_not_forced_and_last_wins() {
        let policy = EnvPolicy {
            set: vec![
                ("PATH".into(), "/opt/bin".into()),
                ("PAGER".into(), "less".into()),
                ("X".into(), "1".into()),
                ("X".into(), "2".into()),
            ],
            ..EnvPolicy::default()
        };
        let env = build_env(vars(&INHERITED), &policy);
        assert_eq!(get(&env, "PATH").unwrap(), "/opt/bin");
        assert_eq!(get(&env, "PAGER").unwrap(), "cat");
        assert_eq!(get(&env, "X").unwrap(), "2");
        assert_eq!(env.iter().filter(|(k, _)| k == "X").count(), 1);
    }

    #[test]
    fn policy_reads_from_kebab_case_and_rejects_unknown_fields() {
        let policy: EnvPolicy = serde_json::from_str(
            r#"{"inherit": {"only": ["HOME"]}, "exclude-secrets": true, "set": [["A", "b"]]}"#,
        )
        .unwrap();
        assert_eq!(policy.inherit, EnvInherit::Only(vec!["HOME".into()]));
        assert!(policy.exclude_secrets);
        assert_eq!(policy.set, vec![("A".to_owned(), "b".to_owned())]);
        let none: EnvPolicy = serde_json::from_str(r#"{"inherit": "none"}"#).unwrap();
        assert_eq!(none.inherit, EnvInherit::None);
        assert!(serde_json::from_str::<EnvPolicy>(r#"{"inherits": "all"}"#).is_err());
    }

    #[test]
    fn sandbox_vars_replace_inherited_claims() {
        let env =
            vec![(OsString::from(ENV_NETWORK_DISABLED), OsString::from("0")), ("HOME".into(), "/h".into())];
        let mut env_retrying = env.clone();
        env_retrying.push(("PIP_RETRIES".into(), "5".into()));
        let closed = with_sandbox_vars(env_retrying, crate::SandboxKind::MacosSeatbelt, false);
        let mut expected: Vec<(OsString, OsString)> = vec![
            ("HOME".into(), "/h".into()),
            (ENV_SANDBOX.into(), "macos-seatbelt".into()),
            (ENV_NETWORK_DISABLED.into(), "1".into()),
        ];
        expected.extend(NETWORK_OFF_ENV.iter().map(|(n, v)| (OsString::from(n), OsString::from(v))));
        assert_eq!(closed, expected, "no retries into a network that is off, whatever was inherited");
        let open = with_sandbox_vars(env, crate::SandboxKind::LinuxLandlockSeccomp, true);
        assert_eq!(
            open,
            vec![("HOME".into(), "/h".into()), (ENV_SANDBOX.into(), "linux-landlock-seccomp".into())]
        );
    }
}
