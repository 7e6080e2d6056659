//! Canonicalisation: macOS's `/tmp` and `/var` symlinks (through the fake filesystem), real symlinks made in a
//! temporary directory (through the real one), and paths that cannot be canonicalised.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use uexec_domain::SandboxPolicy;
use uexec_plan::RealHost;
use uexec_ports::SandboxError;
use uexec_sandbox_macos::build_launch;

use crate::fake_fs::FakeFs;

fn params(launch: &uexec_sandbox_macos::SeatbeltLaunch) -> Vec<(String, PathBuf)> {
    crate::path_params(launch).into_iter().map(|(n, v)| (n, PathBuf::from(v))).collect()
}

fn argv() -> Vec<OsString> {
    vec![OsString::from("true")]
}

#[test]
fn tmp_and_var_become_their_private_spellings() {
    let fs = FakeFs::macos().dir("/private/tmp/build").dir("/private/var/folders/zz/abc/T");
    let launch = build_launch(
        &SandboxPolicy::default(),
        Path::new("/tmp/build"),
        Some(Path::new("/var/folders/zz/abc/T/")),
        &argv(),
        &fs,
    )
    .unwrap();
    let roots: Vec<PathBuf> =
        params(&launch).into_iter().filter(|(n, _)| !n.contains("_RO_")).map(|(_, v)| v).collect();
    assert_eq!(
        roots,
        [
            PathBuf::from("/private/tmp/build"),
            PathBuf::from("/private/tmp"),
            PathBuf::from("/private/var/folders/zz/abc/T")
        ]
    );
    // No parameter keeps a /tmp or /var spelling, read-only subpaths included.
    for (name, value) in params(&launch) {
        assert!(value.starts_with("/private"), "{name}={}", value.display());
    }
}

#[test]
fn a_root_given_twice_under_two_spellings_is_one_root() {
    let fs = FakeFs::macos().dir("/private/tmp/w");
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: vec![PathBuf::from("/private/tmp/w"), PathBuf::from("/tmp/w/../w")],
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    };
    let launch = build_launch(&policy, Path::new("/tmp/w"), None, &argv(), &fs).unwrap();
    assert_eq!(launch.writable_root_count(), 1);
    assert_eq!(launch.params[0], ("WRITABLE_ROOT_0".to_owned(), OsString::from("/private/tmp/w")));
}

#[test]
fn real_symlinks_are_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(base.join("real/.git")).unwrap();
    std::fs::create_dir(base.join("data")).unwrap();
    std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
    std::os::unix::fs::symlink(base.join("data"), base.join("real/.uexec")).unwrap();

    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    };
    // Only .git and .uexec (the other tools' files, protected by name whatever they are, are not the point).
    let names: Vec<&str> = uexec_domain::tool_files::TOOL_ENTRIES.iter().map(|e| e.name).collect();
    let no_tools = uexec_domain::tool_files::ToolFiles::allowing(&names).unwrap();
    let launch = uexec_sandbox_macos::build_launch_with(
        &policy,
        &base.join("link"),
        None,
        &argv(),
        &RealHost,
        &no_tools,
    )
    .unwrap();
    // The .git directory entry by entry (what git runs or reads as configuration; it has no worktree, submodule
    // or object yet) ...
    let git = base.join("real/.git");
    let mut expected: Vec<PathBuf> =
        uexec_domain::gitdir::protected_git_entries(uexec_domain::gitdir::GitDirKind::Repository)
            .iter()
            .map(|e| git.join(e.name))
            .collect();
    // ... and the symlinked .uexec protected as the link (it cannot be replaced) ...
    expected.push(base.join("real/.uexec"));
    let mut want = vec![("WRITABLE_ROOT_0".to_owned(), base.join("real"))];
    want.extend(expected.into_iter().enumerate().map(|(j, p)| (format!("WRITABLE_ROOT_0_RO_{j}"), p)));
    assert_eq!(params(&launch), want);
    // ... and its target lies outside every root, so it is not writable either.
    assert!(!launch.params.iter().any(|(_, v)| Path::new(v).starts_with(base.join("data"))));
}

#[test]
fn a_nonexistent_root_is_an_invalid_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("does-not-exist");
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: vec![missing.clone()],
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    };
    let err = build_launch(&policy, dir.path(), None, &argv(), &RealHost).unwrap_err();
    match err {
        SandboxError::InvalidPath { path, reason } => {
            assert_eq!(path, missing);
            assert!(reason.contains("No such file"), "{reason}");
        }
        other => panic!("expected InvalidPath, got {other:?}"),
    }
}

#[test]
fn a_symlink_loop_is_an_invalid_path() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    std::os::unix::fs::symlink(dir.path().join("b"), &a).unwrap();
    std::os::unix::fs::symlink(&a, dir.path().join("b")).unwrap();
    let err = build_launch(&SandboxPolicy::default(), &a, None, &argv(), &RealHost).unwrap_err();
    assert!(matches!(err, SandboxError::InvalidPath { ref path, .. } if *path == a), "{err:?}");
}

#[test]
fn a_missing_tmpdir_is_an_invalid_path_unless_excluded() {
    let fs = FakeFs::macos().dir("/private/tmp/w");
    let err = build_launch(
        &SandboxPolicy::default(),
        Path::new("/tmp/w"),
        Some(Path::new("/var/folders/gone/T")),
        &argv(),
        &fs,
    )
    .unwrap_err();
    assert!(
        matches!(err, SandboxError::InvalidPath { ref path, .. } if path == Path::new("/var/folders/gone/T"))
    );

    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        network_access: false,
        exclude_slash_tmp: false,
        exclude_tmpdir_env_var: true,
    };
    let launch =
        build_launch(&policy, Path::new("/tmp/w"), Some(Path::new("/var/folders/gone/T")), &argv(), &fs)
            .unwrap();
    assert_eq!(launch.writable_root_count(), 2);
}

#[test]
fn a_real_git_directory_is_writable_but_its_configuration_and_pack_files() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let git = base.join(".git");
    std::fs::create_dir_all(git.join("objects/pack")).unwrap();
    std::fs::create_dir_all(git.join("refs/heads")).unwrap();
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(git.join("objects/pack/pack-1.pack"), "x").unwrap();
    std::fs::write(git.join("objects/pack/pack-1.idx"), "x").unwrap();
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        network_access: false,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    };
    let launch = build_launch(&policy, &base, None, &argv(), &RealHost).unwrap();
    let forms = crate::check_profile(&launch);
    let allows = |op: &str, path: PathBuf| crate::sexpr::allows(&forms, op, &path, &launch.params).unwrap();
    // The packed history cannot be removed or rewritten; new packs, objects, refs and the index can be written.
    for pack in ["pack-1.pack", "pack-1.idx"] {
        assert!(!allows("file-write-unlink", git.join("objects/pack").join(pack)), "{pack}");
        assert!(!allows("file-write-data", git.join("objects/pack").join(pack)), "{pack}");
    }
    assert!(!allows("file-write-unlink", git.join("objects/pack")));
    assert!(allows("file-write-create", git.join("objects/pack/pack-2.pack")));
    assert!(allows("file-write-unlink", git.join("objects/pack/tmp_pack_x")));
    assert!(allows("file-write-create", git.join("objects/ab/cdef")));
    assert!(allows("file-write-create", git.join("index.lock")));
    assert!(allows("file-write-create", git.join("refs/heads/topic")));
    assert!(!allows("file-write-create", git.join("hooks/post-checkout")));
    assert!(!allows("file-write-create", git.join("config")));
}
