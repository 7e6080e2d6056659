//! What the app adds to a generated profile: hidden secret locations (`deny file-read* file-write*` on each,
//! under every spelling, passed as `HIDDEN_i` / `HIDDEN_i_ANY` parameters like every path), the keychain when
//! the person opts in, and, in domain-allowlist mode, a network part that reaches only the uexec proxy's port
//! and loopback.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use uexec_domain::hidden::{HiddenPaths, HiddenPattern, MAX_VISITED};
use uexec_plan::HostView;
use uexec_ports::SandboxError;

use crate::profile::{NETWORK_PROFILE, SeatbeltLaunch, ancestors_in_roots, any_param};
use crate::spelling::any_spelling;

/// The network part for allowlist mode (`PORT` is replaced by the proxy's port).
pub const PROXY_PROFILE: &str = include_str!("seatbelt_proxy.sbpl");

/// The keychain, for a person who opts in (`macos_keychain = true`).
pub const KEYCHAIN_PROFILE: &str = "\n; --- The keychain (the person opted in: macos_keychain = true) ------------------------------------------\n\
; securityd hands out stored passwords and tokens to whoever asks (git credential-osxkeychain get, security\n\
; find-generic-password -w), without a prompt for items the person's tools created.\n\
(allow mach-lookup\n  (global-name \"com.apple.SecurityServer\")\n  (global-name \"com.apple.securityd.xpc\"))\n";

/// The macOS secret stores hidden with the defaults (`uexec_domain::hidden::DEFAULT_SECRETS`), under the home:
/// the keychains (the legacy login keychain and the data-protection keychain's files), every browser's cookie
/// and password stores (Safari's cookies are plain files; Chromium-family and Firefox profiles hold cookies,
/// saved logins and session tokens), Mail and Messages data.
pub const MACOS_SECRETS: [&str; 15] = [
    "~/Library/Keychains",
    "~/Library/Cookies",
    "~/Library/Safari",
    "~/Library/Containers/com.apple.Safari",
    "~/Library/Application Support/Google/Chrome",
    "~/Library/Application Support/Chromium",
    "~/Library/Application Support/BraveSoftware",
    "~/Library/Application Support/Microsoft Edge",
    "~/Library/Application Support/Vivaldi",
    "~/Library/Application Support/Arc",
    "~/Library/Application Support/Firefox",
    "~/Library/Mail",
    "~/Library/Containers/com.apple.mail",
    "~/Library/Messages",
    "~/Library/Group Containers/group.com.apple.notes",
];

/// `hidden` with [`MACOS_SECRETS`] added when it holds every default pattern (`hide_secrets` is on): the
/// macOS stores join the defaults and leave with them.
pub fn with_macos_secrets(hidden: &HiddenPaths) -> HiddenPaths {
    let defaults = HiddenPattern::defaults();
    if defaults.is_empty() || !defaults.iter().all(|d| hidden.patterns.contains(d)) {
        return hidden.clone();
    }
    let mut out = hidden.clone();
    for text in MACOS_SECRETS {
        if let Ok(pattern) = HiddenPattern::parse(text)
            && !out.patterns.contains(&pattern)
        {
            out.patterns.push(pattern);
        }
    }
    out
}

/// The name of hidden path `i`'s parameter.
pub fn hidden_param(i: usize) -> String {
    format!("HIDDEN_{i}")
}

/// The name of the `k`-th ancestor of a hidden path that lies in a writable root.
fn hidden_ancestor_param(k: usize) -> String {
    format!("HIDDEN_ANCESTOR_{k}")
}

/// What [`extend_launch`] adds.
#[derive(Debug, Clone, Default)]
pub struct Extras<'a> {
    /// Canonical hidden paths.
    pub hidden: &'a [PathBuf],
    /// Domain-allowlist mode: the proxy's port.
    pub proxy_port: Option<u16>,
    /// The person opted in to the keychain.
    pub keychain: bool,
}

/// Add `extras` to `launch`: the proxy-only network part in place of the open one (when the profile enables the
/// network), the keychain, and last the hidden locations. Paths only travel as parameters.
pub fn extend_launch(mut launch: SeatbeltLaunch, extras: &Extras<'_>) -> SeatbeltLaunch {
    let hidden = extras.hidden;
    let mut profile = launch.profile.clone();
    if let Some(port) = extras.proxy_port
        && profile.contains(NETWORK_PROFILE)
    {
        profile = profile.replace(NETWORK_PROFILE, &PROXY_PROFILE.replace("PORT", &port.to_string()));
    }
    if extras.keychain {
        profile.push_str(KEYCHAIN_PROFILE);
    }
    let ancestors = ancestors_in_roots(hidden, &launch.writable_roots());
    if !hidden.is_empty() {
        profile.push_str(
            "\n; --- Hidden secret locations (canonical paths and every spelling, passed as -D parameters) ----------\n\
             ; Last rule wins: these override the reads everywhere allowed above. /.vol/<volume>/<inode> opens a file\n\
             ; by number, so it is closed too.\n(deny file-read* file-write*",
        );
        for i in 0..hidden.len() {
            let name = hidden_param(i);
            let _ = write!(
                profile,
                "\n  (subpath (param \"{name}\"))\n  (regex (param \"{}\"))",
                any_param(&name)
            );
        }
        profile.push_str("\n  (regex #\"^/\\.[Vv][Oo][Ll]/\"))\n");
        // Connecting to a unix socket is a network operation to Seatbelt, not a read: a hidden agent socket
        // (`SSH_AUTH_SOCK`) stays unreachable with the network on as well.
        profile.push_str("(deny network-outbound");
        for i in 0..hidden.len() {
            let name = hidden_param(i);
            let _ = write!(
                profile,
                "\n  (remote unix-socket (subpath (param \"{name}\")))\n  (remote unix-socket (path-regex (param \"{}\")))",
                any_param(&name)
            );
        }
        profile.push_str(")\n");
        if !ancestors.is_empty() {
            profile.push_str(
                "; No directory above a hidden location that lies in a writable root can be renamed or removed (a\n\
                 ; renamed parent would carry it to a path no rule names).\n(deny file-write-unlink",
            );
            for k in 0..ancestors.len() {
                let _ = write!(profile, "\n  (regex (param \"{}\"))", hidden_ancestor_param(k));
            }
            profile.push_str(")\n");
        }
    }
    let mut added: Vec<(String, OsString)> = Vec::new();
    for (i, path) in hidden.iter().enumerate() {
        added.push((hidden_param(i), path.clone().into_os_string()));
    }
    for (i, path) in hidden.iter().enumerate() {
        added.push((any_param(&hidden_param(i)), OsString::from(any_spelling(path, true))));
    }
    for (k, ancestor) in ancestors.iter().enumerate() {
        added.push((hidden_ancestor_param(k), OsString::from(any_spelling(ancestor, false))));
    }
    let first_param = 3;
    let end_of_params = first_param + launch.params.len();
    let mut argv: Vec<OsString> = Vec::with_capacity(launch.argv.len() + added.len());
    argv.extend(launch.argv[..2].iter().cloned());
    argv.push(OsString::from(profile.as_str()));
    argv.extend(launch.argv[first_param..end_of_params].iter().cloned());
    for (name, value) in &added {
        let mut arg = OsString::from(format!("-D{name}="));
        arg.push(value);
        argv.push(arg);
    }
    argv.extend(launch.argv[end_of_params..].iter().cloned());
    launch.params.extend(added);
    launch.profile = profile;
    launch.argv = argv;
    launch
}

/// The canonical paths `hidden` names for a command whose workspace is `workspace` and whose working directory
/// is `cwd`, in the order found: the plan's (`uexec_plan::plan_hidden`, read through `host`; links under the home
/// are hidden through their targets: Seatbelt matches resolved paths). A location that is or holds the workspace or
/// the working directory refuses the command, as on Linux; so does a search that could not name what it left
/// unsearched (Seatbelt has no partial mode).
///
/// # Errors
/// [`SandboxError::InHiddenLocation`], [`SandboxError::Unenforceable`].
pub fn resolve_hidden(
    host: &dyn HostView,
    hidden: &HiddenPaths,
    workspace: &Path,
    cwd: &Path,
) -> Result<Vec<PathBuf>, SandboxError> {
    let plan = uexec_plan::plan_hidden(host, hidden, workspace, cwd, MAX_VISITED)
        .map_err(SandboxError::InHiddenLocation)?;
    if plan.truncated {
        return Err(SandboxError::Unenforceable {
            missing: format!(
                "the hidden locations' search left directories unsearched that cannot be hidden as a whole \
                 ({}): remove what a command filled them with, or open a smaller directory as the workspace",
                plan.skipped.join("; ")
            ),
            setting: None,
        });
    }
    Ok(plan.in_order)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use uexec_domain::SandboxPolicy;
    use uexec_domain::hidden::HiddenPattern;

    use std::fs;

    use super::*;
    use crate::profile::build_launch;

    #[test]
    fn hidden_paths_become_parameters_of_a_final_deny_and_the_proxy_replaces_the_open_network() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let home = base.join("home");
        let ws = base.join("ws \"x\")");
        fs::create_dir_all(home.join(".ssh")).unwrap();
        fs::write(home.join(".netrc"), "x").unwrap();
        fs::write(home.join(".netrc-twin"), "x").unwrap();
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join(".env"), "x").unwrap();
        let mut patterns = HiddenPattern::defaults();
        patterns.push(HiddenPattern::parse(".env*").unwrap());
        let paths = HiddenPaths { home: Some(home.clone()), patterns, reachable: Vec::new() };
        let hidden = resolve_hidden(&uexec_plan::RealHost, &paths, &ws, &ws).unwrap();
        // The search names what it finds in one directory in name order.
        assert_eq!(hidden, vec![home.join(".netrc"), home.join(".ssh"), ws.join(".env")]);
        // A working directory or workspace in a hidden location refuses the command, as on
        // Linux; the twin above (beside the locations) is not refused.
        for (workspace, cwd) in [(&ws, &home.join(".ssh")), (&home.join(".ssh"), &ws)] {
            let error = resolve_hidden(&uexec_plan::RealHost, &paths, workspace, cwd).unwrap_err();
            assert!(matches!(error, SandboxError::InHiddenLocation(_)), "{error}");
        }

        let policy = SandboxPolicy::ReadOnly { network_access: true };
        let argv = vec![OsString::from("cat"), OsString::from("x")];
        let launch = build_launch(&policy, &ws, None, &argv, &uexec_plan::RealHost).unwrap();
        let launch =
            extend_launch(launch, &Extras { hidden: &hidden, proxy_port: Some(41234), keychain: false });
        assert!(launch.profile.contains("(allow network-outbound (remote ip \"localhost:41234\"))"));
        assert!(!launch.profile.contains("(remote ip \"*:*\")"), "{}", launch.profile);
        assert!(!launch.profile.contains("mDNSResponder\")))"), "no DNS in allowlist mode");
        assert!(launch.profile.contains("(deny file-read* file-write*\n  (subpath (param \"HIDDEN_0\"))"));
        assert!(launch.profile.contains("(regex (param \"HIDDEN_0_ANY\"))"));
        assert!(launch.profile.contains("(subpath (param \"HIDDEN_2\"))"));
        assert!(
            launch
                .profile
                .contains("(deny network-outbound\n  (remote unix-socket (subpath (param \"HIDDEN_0\")))")
        );
        // No path in the text.
        assert!(!launch.profile.contains(base.to_str().unwrap()));
        assert_eq!(launch.argv[2], OsString::from(launch.profile.as_str()));
        let dash = launch.argv.iter().position(|a| a == "--").unwrap();
        assert_eq!(&launch.argv[dash + 1..], &argv[..]);
        let mut expected = OsString::from("-DHIDDEN_0=");
        expected.push(home.join(".netrc"));
        assert!(launch.argv[..dash].contains(&expected));
        // The twin: without extras, the open network part stays and nothing is denied.
        let plain = build_launch(&policy, &ws, None, &argv, &uexec_plan::RealHost).unwrap();
        let same = extend_launch(plain.clone(), &Extras::default());
        assert_eq!(same, plain);
        assert!(plain.profile.contains("(allow network-outbound (remote ip \"*:*\"))"));
    }
}
