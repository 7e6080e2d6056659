//! Property tests: whatever bytes a path holds, the profile text does not change and the path round-trips
//! byte for byte as a parameter; and the profile allows writes exactly where the policy's writable roots say.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use uexec_domain::SandboxPolicy;
use uexec_domain::gitdir::gitdir_protection;
use uexec_domain::{GitEntry, PROTECTED_SUBDIRS};
use uexec_sandbox_macos::build_launch;

use crate::fake_fs::FakeFs;
use crate::{check_profile, sexpr};

/// What a root's `.git` is, in a generated case.
#[derive(Debug, Clone)]
enum Git {
    Absent,
    Directory,
    /// A worktree whose gitdir is inside root `usize` (modulo the root count).
    WorktreeOf(usize),
    /// A worktree whose gitdir lies outside every root.
    Outside,
}

/// One generated root: optionally nested in an earlier root, its name bytes and its `.git`.
#[derive(Debug, Clone)]
struct RootSpec {
    parent: Option<usize>,
    name: Vec<u8>,
    git: Git,
}

/// Name bytes: anything but NUL and `/`, weighted towards what could break a profile if it were spliced in.
fn name_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => any::<u8>().prop_filter("no NUL or slash", |b| *b != 0 && *b != b'/'),
        1 => prop::sample::select(vec![b'"', b'(', b')', b'\n', b'\\', b';', b'#', b' ', 0xff, 0xc3]),
    ];
    prop::collection::vec(byte, 1..16)
}

fn root_specs() -> impl Strategy<Value = Vec<RootSpec>> {
    let git = prop_oneof![
        Just(Git::Absent),
        Just(Git::Directory),
        (0usize..4).prop_map(Git::WorktreeOf),
        Just(Git::Outside)
    ];
    prop::collection::vec((prop::option::of(0usize..4), name_bytes(), git), 1..5).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (parent, name, git))| RootSpec { parent: parent.filter(|p| *p < i), name, git })
            .collect()
    })
}

/// The absolute path of each root; with `benign`, the same shape with plain names.
fn root_paths(specs: &[RootSpec], benign: bool) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let mut name = format!("uexec-marker-{i}-").into_bytes();
        if benign {
            name.push(b'x');
        } else {
            name.extend_from_slice(&spec.name);
        }
        let base = spec.parent.map_or_else(|| PathBuf::from("/"), |p| paths[p].clone());
        paths.push(base.join(OsStr::from_bytes(&name)));
    }
    paths
}

/// True when the path of root `j` holds a newline, which no `.git` file can name (git reads its first line).
fn has_newline(specs: &[RootSpec], j: usize) -> bool {
    specs[j].name.contains(&b'\n') || specs[j].parent.is_some_and(|p| has_newline(specs, p))
}

/// The fake filesystem (everything exists, nothing is a symlink) with each root's `.git` (a file naming a gitdir
/// with a newline, which git cannot read, names one outside every root instead, whatever the bytes).
fn filesystem(specs: &[RootSpec], paths: &[PathBuf]) -> FakeFs {
    let mut fs = FakeFs::everything_exists();
    for (i, (spec, path)) in specs.iter().zip(paths).enumerate() {
        let entry = match spec.git {
            Git::Absent => GitEntry::Absent,
            Git::Directory => GitEntry::Directory,
            Git::WorktreeOf(j) if !has_newline(specs, j % paths.len()) => {
                GitEntry::File { gitdir: paths[j % paths.len()].join(format!(".git/worktrees/wt{i}")) }
            }
            Git::WorktreeOf(_) | Git::Outside => {
                GitEntry::File { gitdir: PathBuf::from(format!("/gitdirs/wt{i}")) }
            }
        };
        fs = fs.git(path, entry);
    }
    fs
}

fn policy(paths: &[PathBuf], network: bool) -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite {
        writable_roots: paths[1..].to_vec(),
        network_access: network,
        exclude_slash_tmp: true,
        exclude_tmpdir_env_var: true,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn path_bytes_never_reach_the_profile_and_round_trip_as_params(
        specs in root_specs(),
        network in any::<bool>(),
    ) {
        let paths = root_paths(&specs, false);
        let fs = filesystem(&specs, &paths);
        let argv = vec![OsString::from("true")];
        let launch = build_launch(&policy(&paths, network), &paths[0], None, &argv, &fs).unwrap();
        check_profile(&launch);
        prop_assert!(!launch.profile.contains("uexec-marker"));

        // Same shape, plain names: the same text.
        let benign_paths = root_paths(&specs, true);
        let benign_fs = filesystem(&specs, &benign_paths);
        let benign = build_launch(&policy(&benign_paths, network), &benign_paths[0], None, &argv, &benign_fs)
            .unwrap();
        prop_assert_eq!(&launch.profile, &benign.profile);

        // Every root is a parameter, byte for byte, and every parameter is one `-DNAME=value` argument.
        let values: Vec<&[u8]> = launch.params.iter().map(|(_, v)| v.as_bytes()).collect();
        for path in &paths {
            prop_assert!(values.contains(&path.as_os_str().as_bytes()), "{:?} is not a parameter", path);
        }
        let separator = launch.argv.iter().position(|a| a == "--").unwrap();
        prop_assert_eq!(separator, 3 + launch.params.len());
        for ((name, value), arg) in launch.params.iter().zip(&launch.argv[3..separator]) {
            let mut expected = format!("-D{name}=").into_bytes();
            expected.extend_from_slice(value.as_bytes());
            prop_assert_eq!(arg.clone().into_vec(), expected);
        }
        prop_assert_eq!(&launch.argv[separator + 1..], &argv[..]);
    }

    #[test]
    fn writes_are_allowed_exactly_under_roots_outside_every_read_only_subpath(specs in root_specs()) {
        let paths = root_paths(&specs, false);
        let fs = filesystem(&specs, &paths);
        let policy = policy(&paths, false);
        let launch = build_launch(&policy, &paths[0], None, &[OsString::from("true")], &fs).unwrap();
        let forms = check_profile(&launch);

        // The oracle: the domain's writable roots, read as "under some root and under no read-only subpath",
        // where a gitdir counts only when the domain's rule protects it (every gitdir here has a HEAD).
        let roots = policy.writable_roots(&paths[0], None, |root| {
            uexec_plan::git_entry(&fs, root)
        });
        let all_roots: Vec<PathBuf> = roots.iter().map(|r| r.root.clone()).collect();
        // A root's `.git` directory is read-only entry by entry: what git runs or reads as configuration,
        // worktrees/ and modules/, and objects/pack (this fake cannot list it, so it is protected whole).
        let git_dir = |ro: &PathBuf| {
            ro.file_name() == Some(OsStr::new(".git"))
                && ro.parent().is_some_and(|root| uexec_plan::git_entry(&fs, root) == GitEntry::Directory)
        };
        let entries = |ro: &PathBuf| -> Vec<PathBuf> {
            use uexec_domain::gitdir::{GitDirKind, protected_git_entries};
            let mut out: Vec<PathBuf> =
                protected_git_entries(GitDirKind::Repository).iter().map(|e| ro.join(e.name)).collect();
            out.extend(["worktrees", "modules", "objects/pack"].map(|n| ro.join(n)));
            out
        };
        let read_only_owned: Vec<PathBuf> = roots
            .iter()
            .flat_map(|r| {
                r.read_only_subpaths.iter().filter(|ro| {
                    PROTECTED_SUBDIRS.iter().any(|name| **ro == r.root.join(name))
                        || gitdir_protection(ro, &r.root, &all_roots).is_ok()
                })
            })
            .flat_map(|ro| if git_dir(ro) { entries(ro) } else { vec![ro.clone()] })
            .collect();
        let read_only: Vec<&PathBuf> = read_only_owned.iter().collect();
        let writable = |p: &Path| {
            roots.iter().any(|r| p.starts_with(&r.root)) && !read_only.iter().any(|ro| p.starts_with(ro))
        };

        let mut probes: Vec<PathBuf> = vec![PathBuf::from("/outside"), PathBuf::from("/gitdirs/wt0/HEAD")];
        for root in &roots {
            probes.push(root.root.join("file"));
            probes.push(root.root.with_extension("sibling"));
            for ro in &root.read_only_subpaths {
                // A `.git` directory exists (creating it fails with EEXIST whatever the profile says, and it
                // cannot be renamed away: it is above its protected entries); what lies in it is probed.
                if !git_dir(ro) {
                    probes.push(ro.clone());
                }
                probes.push(ro.join("config"));
                probes.push(ro.join("index.lock"));
                probes.push(ro.join("hooks/post-checkout"));
            }
        }
        // Names with control or non-ASCII bytes widen the deny expressions (`spelling`: they deny a little more,
        // never less), which can reach into a nested root's writable `.git`: there only "never less" holds.
        let widened = paths.iter().any(|p| p.as_os_str().as_bytes().iter().any(|b| !b.is_ascii() || b.is_ascii_control()));
        for probe in probes {
            let allowed = sexpr::allows(&forms, "file-write-create", &probe, &launch.params).unwrap();
            let in_git_dir = read_only_owned.iter().any(|ro| ro.parent().is_some_and(|git| probe.starts_with(git) && git.ends_with(".git")));
            if widened && in_git_dir && !allowed {
                continue;
            }
            prop_assert_eq!(allowed, writable(&probe), "{:?}", probe);
        }
        // Every read-only entry is denied under the upper-case spelling of its own name too (a
        // case-insensitive volume), whatever bytes the name holds.
        for root in &roots {
            for ro in read_only.iter().filter(|ro| ro.starts_with(&root.root)) {
                let Some(name) = ro.file_name() else { continue };
                let upper = OsStr::from_bytes(&name.as_bytes().to_ascii_uppercase()).to_owned();
                let variant = ro.with_file_name(upper).join("config");
                let allowed = sexpr::allows(&forms, "file-write-create", &variant, &launch.params).unwrap();
                prop_assert!(!allowed, "{:?} is writable", variant);
            }
        }
    }
}
