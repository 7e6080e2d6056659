//! Unit tests of profile rendering and root merging (golden files and properties live in `tests/`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use uexec_domain::SandboxPolicy;
use uexec_plan::FakeHost;
use uexec_ports::SandboxError;

use super::*;

/// No tool file protected: these tests look at `.git` and `.uexec` alone.
fn no_tools() -> ToolFiles {
    let names: Vec<&str> = uexec_domain::tool_files::TOOL_ENTRIES.iter().map(|e| e.name).collect();
    ToolFiles::allowing(&names).unwrap()
}

/// `/tmp` a link to `/private/tmp`, and `roots`, each with a `.uexec` directory and a `.git` file (naming the
/// gitdir `git` pairs with the root, or nothing); the regular files `files`.
fn fake(roots: &[&str], git: &[(&str, &str)], files: &[&str]) -> FakeHost {
    let mut host = FakeHost::new().dir("/private/tmp").link("/tmp", "/private/tmp");
    for root in roots {
        let names = git.iter().find(|(r, _)| r == root).map(|(_, gitdir)| format!("gitdir: {gitdir}\n"));
        host = host.dir(format!("{root}/.uexec")).content(format!("{root}/.git"), names.unwrap_or_default());
    }
    for file in files {
        host = host.file(file);
    }
    host
}

fn workspace(roots: &[&str], network: bool) -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite {
        writable_roots: roots.iter().map(PathBuf::from).collect(),
        network_access: network,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    }
}

fn argv() -> Vec<OsString> {
    vec![OsString::from("true")]
}

/// The path parameters (roots and read-only entries), without the every-spelling expressions.
fn params(launch: &SeatbeltLaunch) -> Vec<(String, String)> {
    launch
        .params
        .iter()
        .filter(|(n, _)| is_root_param(n) || is_read_only_param(n))
        .map(|(n, v)| (n.clone(), v.to_string_lossy().into_owned()))
        .collect()
}

#[test]
fn no_roots_means_no_write_rule() {
    let text = render_profile(&SandboxPolicy::ReadOnly { network_access: false }, &[], 0, 0);
    assert!(text.starts_with(BASE_PROFILE));
    assert!(!text.contains("(allow file-write*"));
    assert!(!text.contains("(allow network"));
    assert!(!text.contains("(allow system-socket"), "no Unix socket without a writable root");
}

#[test]
fn roots_render_as_alternatives_with_their_exclusions() {
    let text = render_profile(&workspace(&[], true), &[2, 0], 1, 1);
    let allow = "(allow file-write*\n  (subpath (param \"WRITABLE_ROOT_0\"))\n  (subpath (param \"WRITABLE_ROOT_1\")))\n";
    assert!(text.contains(allow), "{text}");
    // The exclusions come last, after the network part and the fixed denials: the last rule wins.
    let deny = "(deny file-write*\n  (subpath (param \"WRITABLE_ROOT_0_RO_0\"))\n  \
                (regex (param \"WRITABLE_ROOT_0_RO_0_ANY\"))\n  (subpath (param \"WRITABLE_ROOT_0_RO_1\"))\n  \
                (regex (param \"WRITABLE_ROOT_0_RO_1_ANY\")))\n";
    let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle} missing in {text}"));
    assert!(at(allow) < at(NETWORK_PROFILE) && at(NETWORK_PROFILE) < at(DENIALS_PROFILE));
    assert!(at(DENIALS_PROFILE) < at(deny) && at(deny) < at("(regex (param \"PROTECTED_ANCESTOR_0\"))"));
    // No new entry in a closed directory (a repository's modules/): creation only, last of all.
    assert!(at("(deny file-write-create\n  (regex (param \"CLOSED_DIR_0\")))") > at(deny), "{text}");
    assert!(
        text.contains("(allow network-outbound (remote unix-socket (subpath (param \"WRITABLE_ROOT_1\"))))")
    );
}

#[test]
fn read_only_subpaths_of_a_nested_root_are_carved_out_of_its_parent_root() {
    let fake = fake(&["/w", "/w/sub"], &[], &[]);
    let launch =
        build_launch_with(&workspace(&["/w"], false), Path::new("/w/sub"), None, &argv(), &fake, &no_tools())
            .unwrap();
    assert_eq!(
        params(&launch),
        [
            ("WRITABLE_ROOT_0", "/w"),
            ("WRITABLE_ROOT_0_RO_0", "/w/.git"),
            ("WRITABLE_ROOT_0_RO_1", "/w/.uexec"),
            ("WRITABLE_ROOT_0_RO_2", "/w/sub/.git"),
            ("WRITABLE_ROOT_0_RO_3", "/w/sub/.uexec"),
            ("WRITABLE_ROOT_1", "/w/sub"),
            ("WRITABLE_ROOT_1_RO_0", "/w/sub/.git"),
            ("WRITABLE_ROOT_1_RO_1", "/w/sub/.uexec"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
    );
}

#[test]
fn only_a_gitdir_inside_its_own_root_is_listed_and_the_others_are_reported() {
    // Protected: a git directory inside the root its .git file belongs to. Not: outside every root, in another
    // root, the other root itself.
    let fake = fake(
        &["/wt", "/other", "/third", "/private/tmp"],
        &[
            ("/wt", "/wt/gitdirs/wt"),
            ("/other", "/elsewhere/wt"),
            ("/third", "/tmp/gitdirs/x"),
            ("/private/tmp", "/other"),
        ],
        &["/wt/gitdirs/wt/HEAD", "/private/tmp/gitdirs/x/HEAD"],
    );
    let launch = build_launch_with(
        &SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![PathBuf::from("/other"), PathBuf::from("/third")],
            network_access: false,
            exclude_slash_tmp: false,
            exclude_tmpdir_env_var: true,
        },
        Path::new("/wt"),
        None,
        &argv(),
        &fake,
        &no_tools(),
    )
    .unwrap();
    assert_eq!(
        params(&launch),
        [
            ("WRITABLE_ROOT_0", "/other"),
            ("WRITABLE_ROOT_0_RO_0", "/other/.git"),
            ("WRITABLE_ROOT_0_RO_1", "/other/.uexec"),
            ("WRITABLE_ROOT_1", "/third"),
            ("WRITABLE_ROOT_1_RO_0", "/third/.git"),
            ("WRITABLE_ROOT_1_RO_1", "/third/.uexec"),
            ("WRITABLE_ROOT_2", "/wt"),
            ("WRITABLE_ROOT_2_RO_0", "/wt/.git"),
            ("WRITABLE_ROOT_2_RO_1", "/wt/.uexec"),
            ("WRITABLE_ROOT_2_RO_2", "/wt/gitdirs/wt"),
            ("WRITABLE_ROOT_3", "/private/tmp"),
            ("WRITABLE_ROOT_3_RO_0", "/private/tmp/.git"),
            ("WRITABLE_ROOT_3_RO_1", "/private/tmp/.uexec"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
    );
    assert_eq!(launch.writable_root_count(), 4);
    assert_eq!(launch.read_only_subpath_count(), 9);
    assert_eq!(
        launch.ignored,
        [
            "gitdir /elsewhere/wt: outside every writable root (read-only anyway)",
            "gitdir /tmp/gitdirs/x: lies in the writable root /private/tmp, not in /third where its .git is",
            // A HEAD file alone is not a repository git can use: denied as a whole.
            "/wt/gitdirs/wt: read-only as a whole (no objects directory)",
            "gitdir /other: is the writable root /other (protecting it would freeze the root)",
        ]
    );
}

#[test]
fn roots_that_canonicalise_alike_are_one_root() {
    let fake = fake(&[], &[], &[]);
    let launch =
        build_launch(&workspace(&["/private/tmp"], false), Path::new("/tmp"), None, &argv(), &fake).unwrap();
    assert_eq!(launch.writable_root_count(), 1);
    assert_eq!(launch.params[0].1, OsString::from("/private/tmp"));
}

#[test]
fn full_access_and_empty_argv_have_no_launch() {
    let fake = fake(&["/w"], &[], &[]);
    let err =
        build_launch(&SandboxPolicy::DangerFullAccess, Path::new("/w"), None, &argv(), &fake).unwrap_err();
    assert!(matches!(err, SandboxError::Unrestricted), "{err}");
    let err = build_launch(&workspace(&[], false), Path::new("/w"), None, &[], &fake).unwrap_err();
    assert!(matches!(err, SandboxError::EmptyCommand), "{err}");
}

#[test]
fn a_missing_or_relative_root_is_an_invalid_path() {
    let fake = fake(&["/w"], &[], &[]);
    let err =
        build_launch(&workspace(&["/gone/root"], false), Path::new("/w"), None, &argv(), &fake).unwrap_err();
    assert!(matches!(err, SandboxError::InvalidPath { ref path, .. } if path == Path::new("/gone/root")));
    let err = build_launch(&workspace(&["rel"], false), Path::new("/w"), None, &argv(), &fake).unwrap_err();
    assert!(matches!(err, SandboxError::InvalidPath { ref path, .. } if path == Path::new("rel")));
}

#[test]
fn read_only_policy_ignores_cwd_and_tmpdir() {
    let fake = fake(&["/w"], &[], &[]);
    let launch = build_launch(
        &SandboxPolicy::ReadOnly { network_access: false },
        Path::new("/gone"),
        Some(Path::new("/gone/tmp")),
        &argv(),
        &fake,
    )
    .unwrap();
    assert!(launch.params.is_empty());
    assert_eq!(launch.writable_root_count(), 0);
}

/// A root reached through a symbolic link inside a writable root (`$TMPDIR` replaced by a link a command made)
/// is not writable, as on Linux; the twin, a configured root that is a link in a directory no command can
/// write, is.
#[test]
fn a_root_reached_through_a_symlink_inside_a_writable_root_is_refused() {
    let fake = FakeHost::new()
        .dir("/w")
        .dir("/victim")
        .dir("/real")
        .link("/w/tmp", "/victim")
        .link("/cache", "/real");
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: vec![PathBuf::from("/cache")],
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: false,
    };
    let launch = build_launch(&policy, Path::new("/w"), Some(Path::new("/w/tmp")), &argv(), &fake).unwrap();
    let roots: Vec<&OsString> = launch
        .params
        .iter()
        .filter(|(name, _)| !name.contains("_RO_") && name.starts_with("WRITABLE_ROOT_"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(roots, [&OsString::from("/real"), &OsString::from("/w")]);
    assert!(!launch.params.iter().any(|(_, v)| Path::new(v).starts_with("/victim")), "{:?}", launch.params);
    assert!(launch.ignored.iter().any(|n| n.starts_with("/w/tmp: not writable")), "{:?}", launch.ignored);
}

#[test]
fn relative_roots_are_refused() {
    let fake = fake(&["/private/tmp/w"], &[], &[]);
    let launch = build_launch(&workspace(&["w"], false), Path::new("/private/tmp/w"), None, &argv(), &fake);
    assert!(matches!(launch, Err(SandboxError::InvalidPath { path, .. }) if path == Path::new("w")));
}

#[test]
fn existing_paths_must_exist() {
    let fake = fake(&["/private/tmp/w"], &[], &[]);
    let launch =
        build_launch(&workspace(&["/tmp"], false), Path::new("/tmp/w"), None, &argv(), &fake).unwrap();
    assert!(launch.params.contains(&("WRITABLE_ROOT_0".to_owned(), OsString::from("/private/tmp"))));
    let err = build_launch(&workspace(&["/nowhere"], false), Path::new("/tmp/w"), None, &argv(), &fake)
        .unwrap_err();
    match err {
        SandboxError::InvalidPath { path, reason } => {
            assert_eq!(path, PathBuf::from("/nowhere"));
            assert!(!reason.is_empty());
        }
        other => panic!("unexpected error {other:?}"),
    }
}
