//! What the app adds to a generated profile: hidden secret locations (`deny file-read*` on each, passed as
//! `HIDDEN_i` parameters like every path) and, in domain-allowlist mode, a network part that reaches only the
//! uexec proxy's port on localhost.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use uexec_domain::hidden::{DirLister, EntryKind, HiddenPaths, check_directories, expand};
use uexec_ports::SandboxError;

use crate::profile::{NETWORK_PROFILE, SeatbeltLaunch};

/// The network part for allowlist mode: only TCP to the proxy on localhost (`PORT` is replaced by the number).
pub const PROXY_PROFILE: &str = "; --- Network through the uexec proxy only ------------------------------------------------------------\n\
; Domain-allowlist mode: the only network operation is a TCP connection to the proxy uexec serves on this\n\
; port of localhost; every other address, UDP and DNS included, stays refused by (deny default).\n\
(allow network-outbound (remote tcp \"localhost:PORT\"))\n";

/// The name of hidden path `i`'s parameter.
pub fn hidden_param(i: usize) -> String {
    format!("HIDDEN_{i}")
}

/// Add `hidden` (canonical paths) and, when `proxy_port` is set and the profile enables the network, the
/// proxy-only network part to `launch`. Paths only travel as parameters.
pub fn extend_launch(
    mut launch: SeatbeltLaunch,
    hidden: &[PathBuf],
    proxy_port: Option<u16>,
) -> SeatbeltLaunch {
    let mut profile = launch.profile.clone();
    if let Some(port) = proxy_port
        && profile.contains(NETWORK_PROFILE)
    {
        profile = profile.replace(NETWORK_PROFILE, &PROXY_PROFILE.replace("PORT", &port.to_string()));
    }
    if !hidden.is_empty() {
        profile.push_str(
            "\n; --- Hidden secret locations (canonical paths, passed as -D parameters) ------------------------------\n\
             ; Last rule wins: these override the reads everywhere allowed above.\n(deny file-read* file-write*",
        );
        for i in 0..hidden.len() {
            let _ = write!(profile, "\n  (subpath (param \"{}\"))", hidden_param(i));
        }
        profile.push_str(")\n");
        // Connecting to a unix socket is a network operation to Seatbelt, not a read: a hidden agent socket
        // (`SSH_AUTH_SOCK`) stays unreachable with the network on as well.
        profile.push_str("(deny network-outbound");
        for i in 0..hidden.len() {
            let _ = write!(profile, "\n  (remote unix-socket (subpath (param \"{}\")))", hidden_param(i));
        }
        profile.push_str(")\n");
    }
    let first_param = 3;
    let end_of_params = first_param + launch.params.len();
    let mut argv: Vec<OsString> = Vec::with_capacity(launch.argv.len() + hidden.len());
    argv.extend(launch.argv[..2].iter().cloned());
    argv.push(OsString::from(profile.as_str()));
    argv.extend(launch.argv[first_param..end_of_params].iter().cloned());
    for (i, path) in hidden.iter().enumerate() {
        let mut arg = OsString::from(format!("-D{}=", hidden_param(i)));
        arg.push(path.as_os_str());
        argv.push(arg);
        launch.params.push((hidden_param(i), path.clone().into_os_string()));
    }
    argv.extend(launch.argv[end_of_params..].iter().cloned());
    launch.profile = profile;
    launch.argv = argv;
    launch
}

/// The canonical paths `hidden` names for a command whose workspace is `workspace` and whose working directory
/// is `cwd` (links under the home and exact locations are resolved to their targets; Seatbelt matches resolved
/// paths). A location that is or holds the workspace or the working directory refuses the command, as on Linux
/// (`uexec_domain::hidden::check_directories`).
///
/// # Errors
/// [`SandboxError::InHiddenLocation`].
pub fn resolve_hidden(
    hidden: &HiddenPaths,
    workspace: &Path,
    cwd: &Path,
) -> Result<Vec<PathBuf>, SandboxError> {
    if hidden.is_empty() {
        return Ok(Vec::new());
    }
    let mut found: Vec<(PathBuf, String)> = Vec::new();
    for (path, _, pattern) in expand(&hidden.patterns, hidden.home.as_deref(), workspace, &mut FsLister).paths
    {
        if let Ok(canonical) = fs::canonicalize(&path)
            && !found.iter().any(|(p, _)| *p == canonical)
        {
            found.push((canonical, pattern));
        }
    }
    let canonical_of = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    check_directories(&found, &canonical_of(workspace), &canonical_of(cwd))
        .map_err(SandboxError::InHiddenLocation)?;
    Ok(found.into_iter().map(|(path, _)| path).collect())
}

/// The real file system, read without following links.
struct FsLister;

/// The kind of an entry from its `lstat` file type.
fn kind_of(file_type: fs::FileType) -> EntryKind {
    if file_type.is_symlink() {
        EntryKind::Symlink
    } else if file_type.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::Other
    }
}

impl DirLister for FsLister {
    fn kind(&mut self, path: &Path) -> Option<EntryKind> {
        fs::symlink_metadata(path).ok().map(|m| kind_of(m.file_type()))
    }

    fn entries(&mut self, dir: &Path) -> Vec<(String, EntryKind)> {
        let Ok(read) = fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut entries: Vec<(String, EntryKind)> = read
            .filter_map(Result::ok)
            .filter_map(|e| Some((e.file_name().into_string().ok()?, kind_of(e.file_type().ok()?))))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use uexec_domain::SandboxPolicy;
    use uexec_domain::hidden::HiddenPattern;

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
        let hidden = resolve_hidden(&paths, &ws, &ws).unwrap();
        assert_eq!(hidden, vec![home.join(".ssh"), home.join(".netrc"), ws.join(".env")]);
        // Issue 22, class 4: a working directory or workspace in a hidden location refuses the command, as on
        // Linux; the twin above (beside the locations) is not refused.
        for (workspace, cwd) in [(&ws, &home.join(".ssh")), (&home.join(".ssh"), &ws)] {
            let error = resolve_hidden(&paths, workspace, cwd).unwrap_err();
            assert!(matches!(error, SandboxError::InHiddenLocation(_)), "{error}");
        }

        let policy = SandboxPolicy::ReadOnly { network_access: true };
        let argv = vec![OsString::from("cat"), OsString::from("x")];
        let launch = build_launch(&policy, &ws, None, &argv, &crate::RealFs).unwrap();
        let launch = extend_launch(launch, &hidden, Some(41234));
        assert!(launch.profile.contains("(allow network-outbound (remote tcp \"localhost:41234\"))"));
        assert!(!launch.profile.contains("(allow network*)"), "{}", launch.profile);
        assert!(launch.profile.contains("(deny file-read* file-write*\n  (subpath (param \"HIDDEN_0\"))"));
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
        let mut expected = OsString::from("-DHIDDEN_1=");
        expected.push(home.join(".netrc"));
        assert!(launch.argv[..dash].contains(&expected));
        // The twin: without extras, the open network part stays and nothing is denied.
        let plain = build_launch(&policy, &ws, None, &argv, &crate::RealFs).unwrap();
        let same = extend_launch(plain.clone(), &[], None);
        assert_eq!(same, plain);
        assert!(plain.profile.contains("(allow network*)"));
    }
}
