//! The secrets the server's environment points at: the credential stores hidden by default, where their
//! variables move them (`CARGO_HOME`, `GNUPGHOME`, `KUBECONFIG`, ...), the files named by variables whose names
//! look like secrets (`GOOGLE_APPLICATION_CREDENTIALS`, `RESTIC_PASSWORD_FILE`), and the sockets of the person's
//! agents (ssh-agent, gpg-agent, gnome-keyring, gcr, 1Password), which sign and decrypt with keys the hidden
//! locations keep out of reach.
//!
//! The environment read is the server's own (the person's), read once where the other hidden locations are
//! worked out, and passed in as a value: this module reads nothing. Every location comes out as an exact path
//! ([`crate::hidden::HiddenPattern::exact`]), hidden by the sandbox like the defaults.
//!
//! An agent socket is hidden unless the environment policy passes its variable to commands
//! ([`EnvPolicy::keeps`]: `--pass-env SSH_AUTH_SOCK`, `[env] pass_through`, or `exclude_secrets = false`): then
//! the variable reaches the command and its socket stays reachable, which the report says
//! ([`EnvironmentSecrets::reachable`]). A passed socket inside a hidden credential store stays hidden with it.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::env::{AGENT_VARIABLES, EnvPolicy, is_secret_name};
use crate::hidden::DEFAULT_SECRETS;

/// What a variable names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    /// The credential store itself (a file or a directory).
    Itself,
    /// A `:`-separated list of stores (`KUBECONFIG`).
    List,
    /// These entries of the directory it names.
    Within(&'static [&'static str]),
}

/// The variables that move a default credential store (or name one the defaults cover under the home), with
/// what they name. Lower-case twins are looked up too (`npm_config_userconfig`).
const RELOCATED: [(&str, Names); 23] = [
    ("CARGO_HOME", Names::Within(&["credentials", "credentials.toml"])),
    ("GNUPGHOME", Names::Itself),
    ("DOCKER_CONFIG", Names::Within(&["config.json"])),
    ("KUBECONFIG", Names::List),
    ("AWS_SHARED_CREDENTIALS_FILE", Names::Itself),
    ("AWS_CONFIG_FILE", Names::Itself),
    ("NPM_CONFIG_USERCONFIG", Names::Itself),
    ("PGPASSFILE", Names::Itself),
    ("GOOGLE_APPLICATION_CREDENTIALS", Names::Itself),
    ("AZURE_CONFIG_DIR", Names::Itself),
    ("CLOUDSDK_CONFIG", Names::Itself),
    ("GH_CONFIG_DIR", Names::Within(&["hosts.yml"])),
    ("NETRC", Names::Itself),
    ("PYPIRC", Names::Itself),
    ("REGISTRY_AUTH_FILE", Names::Itself),
    ("PASSWORD_STORE_DIR", Names::Itself),
    ("OCI_CLI_CONFIG_FILE", Names::Itself),
    ("TF_CLI_CONFIG_FILE", Names::Itself),
    ("HUB_CONFIG", Names::Itself),
    // The X11 cookie: with it a command can type into the person's other windows.
    ("XAUTHORITY", Names::Itself),
    (
        "XDG_CONFIG_HOME",
        Names::Within(&["gcloud", "containers/auth.json", "git/credentials", "gh/hosts.yml", "hub"]),
    ),
    ("XDG_DATA_HOME", Names::Within(&["keyrings"])),
    // podman's and skopeo's default auth file.
    ("XDG_RUNTIME_DIR", Names::Within(&["containers/auth.json"])),
];

/// Home-relative secrets beside [`DEFAULT_SECRETS`] that only this module knows: the X11 cookie, and agents
/// whose sockets live in the home (1Password's, Bitwarden's).
const HOME_EXTRAS: [&str; 1] = [".Xauthority"];

/// Agent locations under the home (hidden unless they hold a passed agent socket).
const HOME_AGENTS: [&str; 2] = [".1password", ".bitwarden-ssh-agent.sock"];

/// Agent locations under `$XDG_RUNTIME_DIR`: gpg-agent's socket directory, the systemd user ssh-agent,
/// gnome-keyring's and gcr's ssh and control sockets.
const RUNTIME_AGENTS: [&str; 5] = ["gnupg", "ssh-agent.socket", "openssh_agent", "keyring", "gcr"];

/// The agent variables that name a socket (`GPG_AGENT_INFO` as `path:pid:protocol`).
const AGENT_SOCKETS: [&str; 3] = ["SSH_AUTH_SOCK", "GPG_AGENT_INFO", "GNOME_KEYRING_CONTROL"];

/// One location to hide, with what named it (for the report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretLocation {
    /// The path as the environment gives it (absolute; relative values are taken against the server's cwd).
    pub path: PathBuf,
    /// What named it: `$CARGO_HOME/credentials.toml`, `SSH_AUTH_SOCK`, `~/.Xauthority`.
    pub text: String,
}

/// What [`environment_secrets`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvironmentSecrets {
    /// The locations to hide, without duplicates, in a fixed order.
    pub hidden: Vec<SecretLocation>,
    /// Agent sockets the policy leaves reachable on purpose, or that stay hidden although passed, as sentences
    /// for the report.
    pub reachable: Vec<String>,
}

/// The secrets the server's environment `env` points at (see the module documentation), for a server started
/// in `cwd` with the home `home`, whose commands get the environment `policy` builds. The caller asks only when
/// the defaults are hidden (`hide_secrets`).
pub fn environment_secrets(
    env: &[(OsString, OsString)],
    home: Option<&Path>,
    cwd: &Path,
    policy: &EnvPolicy,
) -> EnvironmentSecrets {
    let var = |name: &str| -> Option<OsString> {
        env.iter().rev().find(|(n, v)| n == name && !v.is_empty()).map(|(_, v)| v.clone())
    };
    let absolute = |value: &OsString| -> PathBuf {
        let path = PathBuf::from(value);
        if path.is_absolute() { path } else { cwd.join(path) }
    };
    let mut found = EnvironmentSecrets::default();
    let push = |found: &mut EnvironmentSecrets, path: PathBuf, text: String| {
        if path.parent().is_some() && !found.hidden.iter().any(|l| l.path == path) {
            found.hidden.push(SecretLocation { path, text });
        }
    };

    // The credential stores: where their variables move them.
    for (name, names) in RELOCATED {
        let value = var(name).or_else(|| var(&name.to_ascii_lowercase()));
        let Some(value) = value else { continue };
        match names {
            Names::Itself => push(&mut found, absolute(&value), format!("${name}")),
            Names::List => {
                for part in value.to_string_lossy().split(':').filter(|p| !p.is_empty()) {
                    push(&mut found, absolute(&OsString::from(part)), format!("${name}"));
                }
            }
            Names::Within(entries) => {
                let dir = absolute(&value);
                for entry in entries {
                    push(&mut found, dir.join(entry), format!("${name}/{entry}"));
                }
            }
        }
    }
    // Files named by variables whose names look like secrets (`*_CREDENTIALS`, `*_KEY_FILE`, `*_TOKEN_FILE`): a
    // value that is one absolute path, at least two levels deep (`/usr` or `/etc` named by a `*_KEY_DIR` would
    // take the system away from every command).
    for (name, value) in env {
        let name = name.to_string_lossy();
        let text = value.to_string_lossy();
        let deep =
            PathBuf::from(value).components().filter(|c| matches!(c, Component::Normal(_))).count() >= 2;
        if is_secret_name(&name)
            && !AGENT_VARIABLES.iter().any(|agent| name.eq_ignore_ascii_case(agent))
            && text.starts_with('/')
            && deep
            && !text.contains(':')
            && !text.contains('\n')
        {
            push(&mut found, PathBuf::from(value), format!("${name}"));
        }
    }
    if let Some(home) = home {
        for rel in HOME_EXTRAS {
            push(&mut found, home.join(rel), format!("~/{rel}"));
        }
    }

    // The agents: each named socket, and the places agents keep theirs.
    let stores: Vec<(PathBuf, String)> = home
        .map(|home| {
            DEFAULT_SECRETS.iter().map(|rel| (home.join(rel), format!("~/{rel}"))).collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .chain(found.hidden.iter().map(|l| (l.path.clone(), l.text.clone())))
        .collect();
    let mut passed: Vec<PathBuf> = Vec::new();
    for name in AGENT_SOCKETS {
        let Some(value) = var(name) else { continue };
        let text = value.to_string_lossy().into_owned();
        let socket = match name {
            "GPG_AGENT_INFO" => text.split(':').next().unwrap_or_default().to_owned(),
            _ => text.clone(),
        };
        if socket.is_empty() {
            continue;
        }
        let socket = absolute(&OsString::from(&socket));
        if policy.keeps(name) {
            match stores.iter().find(|(store, _)| socket.starts_with(store)) {
                Some((_, store)) => found.reachable.push(format!(
                    "{name}={} is passed to commands, but its socket lies in the hidden {store}: unreachable",
                    socket.display()
                )),
                None => found.reachable.push(format!(
                    "{name}={} is passed to commands on purpose: its agent is reachable",
                    socket.display()
                )),
            }
            passed.push(socket);
        } else {
            push(&mut found, socket, name.to_owned());
        }
    }
    let gpg_passed = policy.keeps("GPG_AGENT_INFO") && var("GPG_AGENT_INFO").is_some();
    let mut places: Vec<(PathBuf, String)> = Vec::new();
    if let Some(runtime) = var("XDG_RUNTIME_DIR") {
        let runtime = absolute(&runtime);
        places
            .extend(RUNTIME_AGENTS.iter().map(|rel| (runtime.join(rel), format!("$XDG_RUNTIME_DIR/{rel}"))));
    }
    if let Some(home) = home {
        places.extend(HOME_AGENTS.iter().map(|rel| (home.join(rel), format!("~/{rel}"))));
    }
    for (place, text) in places {
        let holds_passed = passed.iter().any(|socket| socket.starts_with(&place))
            || (gpg_passed && place.ends_with("gnupg"));
        if holds_passed {
            found
                .reachable
                .push(format!("{} holds an agent socket passed on purpose: not hidden", place.display()));
        } else {
            push(&mut found, place, text);
        }
    }
    found
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    fn paths(found: &EnvironmentSecrets) -> Vec<String> {
        found.hidden.iter().map(|l| l.path.display().to_string()).collect()
    }

    #[test]
    fn relocated_stores_are_hidden_where_their_variables_put_them() {
        let vars = env(&[
            ("CARGO_HOME", "/opt/cargo"),
            ("GNUPGHOME", "/srv/gpg"),
            ("KUBECONFIG", "/k/a:/k/b::"),
            ("npm_config_userconfig", "rel/npmrc"),
            ("XDG_CONFIG_HOME", "/c"),
            ("DOCKER_CONFIG", ""),
            ("PATH", "/usr/bin"),
        ]);
        let found =
            environment_secrets(&vars, Some(Path::new("/h")), Path::new("/srv/cwd"), &EnvPolicy::default());
        let found = paths(&found);
        for expected in [
            "/opt/cargo/credentials",
            "/opt/cargo/credentials.toml",
            "/srv/gpg",
            "/k/a",
            "/k/b",
            "/srv/cwd/rel/npmrc",
            "/c/gcloud",
            "/c/gh/hosts.yml",
            "/h/.Xauthority",
        ] {
            assert!(found.contains(&expected.to_owned()), "{expected}: {found:?}");
        }
        // The twins: an empty variable and an unrelated one name nothing.
        assert!(!found.iter().any(|p| p.contains("config.json") || p.starts_with("/usr")), "{found:?}");
    }

    #[test]
    fn files_named_by_secret_variables_are_hidden_but_not_plain_values() {
        let vars = env(&[
            ("RESTIC_PASSWORD_FILE", "/etc/restic/pw"),
            ("SOPS_AGE_KEY_FILE", "/h/age.txt"),
            ("API_TOKEN", "abc/def"),
            ("MY_KEYS", "/a:/b"),
            ("CONFIG_FILE", "/etc/app.conf"),
            ("APT_KEY_DIR", "/usr"),
            ("SIGNING_KEY_DIR", "/etc/"),
        ]);
        let found = paths(&environment_secrets(&vars, None, Path::new("/"), &EnvPolicy::default()));
        assert_eq!(found, vec!["/etc/restic/pw".to_owned(), "/h/age.txt".to_owned()]);
    }

    #[test]
    fn agent_sockets_are_hidden_unless_their_variable_is_passed() {
        let vars = env(&[
            ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
            ("GPG_AGENT_INFO", "/run/user/1/gnupg/S.gpg-agent:0:1"),
            ("XDG_RUNTIME_DIR", "/run/user/1"),
        ]);
        let home = Some(Path::new("/h"));
        let found = environment_secrets(&vars, home, Path::new("/"), &EnvPolicy::default());
        let hidden = paths(&found);
        for expected in [
            "/tmp/ssh-x/agent.1",
            "/run/user/1/gnupg/S.gpg-agent",
            "/run/user/1/gnupg",
            "/run/user/1/keyring",
            "/run/user/1/ssh-agent.socket",
            "/h/.1password",
        ] {
            assert!(hidden.contains(&expected.to_owned()), "{expected}: {hidden:?}");
        }
        assert!(found.reachable.is_empty());
        // Passed on purpose: the socket stays reachable and the report says so; the other agents stay hidden.
        let policy = EnvPolicy { pass_through: vec!["SSH_AUTH_SOCK".into()], ..EnvPolicy::default() };
        let found = environment_secrets(&vars, home, Path::new("/"), &policy);
        let hidden = paths(&found);
        assert!(!hidden.contains(&"/tmp/ssh-x/agent.1".to_owned()), "{hidden:?}");
        assert!(hidden.contains(&"/run/user/1/gnupg".to_owned()), "{hidden:?}");
        assert_eq!(found.reachable.len(), 1, "{:?}", found.reachable);
        assert!(found.reachable[0].contains("SSH_AUTH_SOCK=/tmp/ssh-x/agent.1"), "{:?}", found.reachable);
        // A passed socket in a runtime agent directory leaves that directory visible.
        let keyring =
            env(&[("SSH_AUTH_SOCK", "/run/user/1/keyring/ssh"), ("XDG_RUNTIME_DIR", "/run/user/1")]);
        let found = environment_secrets(&keyring, home, Path::new("/"), &policy);
        assert!(!paths(&found).contains(&"/run/user/1/keyring".to_owned()));
        // A passed socket inside a hidden credential store stays hidden with it, and the report says so.
        let in_store = env(&[("SSH_AUTH_SOCK", "/h/.ssh/agent.sock")]);
        let found = environment_secrets(&in_store, home, Path::new("/"), &policy);
        assert!(found.reachable[0].contains("unreachable"), "{:?}", found.reachable);
        // exclude_secrets = false passes every secret variable, the agents' too.
        let everything = EnvPolicy { exclude_secrets: false, ..EnvPolicy::default() };
        let found = environment_secrets(&vars, home, Path::new("/"), &everything);
        let hidden = paths(&found);
        assert!(!hidden.iter().any(|p| p.starts_with("/tmp/ssh-x") || p.contains("gnupg")), "{hidden:?}");
        assert!(hidden.contains(&"/run/user/1/keyring".to_owned()), "no variable names it: {hidden:?}");
    }
}
