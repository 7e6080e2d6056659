//! Golden tests: the whole profile and command line for each kind of policy, compared with files under
//! `tests/golden/`. Set `UEXEC_BLESS=1` to rewrite the files after an intended change (then review the diff).
//! Each case also checks, with the SBPL evaluator, what the profile allows.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use uexec_domain::GitEntry;
use uexec_domain::SandboxPolicy;
use uexec_sandbox_macos::{SeatbeltLaunch, build_launch};

use crate::fake_fs::FakeFs;
use crate::{check_profile, sexpr};

const TMPDIR: &str = "/var/folders/zz/abc123/T";

/// A Mac with a home directory, a repository, a worktree of a monorepo and the usual /tmp and $TMPDIR.
fn mac() -> FakeFs {
    FakeFs::macos()
        .dir("/Users/dev/project/src")
        .dir("/Users/dev/project/.git")
        .dir("/Users/dev/cache")
        .dir("/Users/dev/mono/.git/worktrees/wt")
        .dir("/Users/dev/mono/wt")
        .dir("/Users/dev/shared-uexec")
        .dir("/private/var/folders/zz/abc123/T")
        .dir("/private/tmp/uexec-tmp")
        .dir("/opt/data")
        .link("/Users/dev/mono/.uexec", "/Users/dev/shared-uexec")
        .git("/Users/dev/project", GitEntry::Directory)
        .git("/Users/dev/mono", GitEntry::Directory)
        .git(
            "/Users/dev/mono/wt",
            GitEntry::File { gitdir: PathBuf::from("/Users/dev/mono/.git/worktrees/wt") },
        )
}

fn workspace(roots: &[&str], network: bool, exclude_tmpdir: bool) -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite {
        writable_roots: roots.iter().map(PathBuf::from).collect(),
        network_access: network,
        exclude_slash_tmp: false,
        exclude_tmpdir_env_var: exclude_tmpdir,
    }
}

/// Compares `actual` with the golden file `name`, or rewrites it under `UEXEC_BLESS=1`.
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("UEXEC_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!("missing golden file {} ({err}); run with UEXEC_BLESS=1", path.display())
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .map_or_else(|| expected.lines().count().min(actual.lines().count()) + 1, |i| i + 1);
        panic!(
            "{} differs from the generated text (first difference at line {line}); if the change is intended, \
             rerun with UEXEC_BLESS=1 and review the diff\n--- generated ---\n{actual}",
            path.display()
        );
    }
}

/// The command line after the profile, one argument a line, the profile itself replaced by a placeholder.
fn args_text(launch: &SeatbeltLaunch) -> String {
    let mut out = String::new();
    for (i, arg) in launch.argv.iter().enumerate() {
        let text = if i == 2 { "<profile>".to_owned() } else { arg.to_str().unwrap().to_owned() };
        assert!(!text.contains('\n'));
        out.push_str(&text);
        out.push('\n');
    }
    out
}

struct Case {
    name: &'static str,
    policy: SandboxPolicy,
    cwd: &'static str,
    tmpdir: Option<&'static str>,
    /// `(operation, path, allowed?)` checked against the profile.
    probes: &'static [(&'static str, &'static str, bool)],
}

/// Probes every profile must answer the same way, whatever the policy.
const COMMON_PROBES: &[(&str, &str, bool)] = &[
    ("file-write-data", "/dev/null", true),
    ("file-write-data", "/dev/ttys004", true),
    ("file-ioctl", "/dev/ttys004", true),
    ("file-ioctl", "/dev/ptmx", true),
    ("file-write-data", "/dev/tty", true),
    ("file-write-mode", "/dev/ttys004", false),
    ("file-write-data", "/dev/fd/2", true),
    ("file-write-create", "/dev/fd/2x", false),
    ("file-ioctl", "/dev/disk0", false),
    ("file-write-data", "/dev/disk0", false),
    ("file-write-data", "/private/etc/passwd", false),
    ("file-write-create", "/Users/dev/.ssh/authorized_keys", false),
    ("file-read-data", "/Users/dev/.ssh/id_ed25519", true),
    ("file-read-data", "/usr/lib/dyld", true),
];

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "read_only",
            policy: SandboxPolicy::ReadOnly { network_access: false },
            cwd: "/Users/dev/project",
            tmpdir: Some(TMPDIR),
            probes: &[
                ("file-write-data", "/Users/dev/project/src/main.rs", false),
                ("file-write-create", "/private/tmp/x", false),
                ("file-write-create", "/private/var/folders/zz/abc123/T/x", false),
            ],
        },
        Case {
            name: "read_only_network",
            policy: SandboxPolicy::ReadOnly { network_access: true },
            cwd: "/Users/dev/project",
            tmpdir: None,
            probes: &[("file-write-data", "/Users/dev/project/src/main.rs", false)],
        },
        Case {
            name: "workspace_write",
            policy: workspace(&[], false, false),
            cwd: "/Users/dev/project",
            tmpdir: Some(TMPDIR),
            probes: &[
                ("file-write-data", "/Users/dev/project/src/main.rs", true),
                ("file-write-data", "/Users/dev/project/.git/config", false),
                ("file-write-unlink", "/Users/dev/project/.git", false),
                ("file-write-create", "/Users/dev/project/.uexec/config.toml", false),
                ("file-write-create", "/Users/dev/project-other/x", false),
                ("file-write-create", "/private/tmp/x", true),
                ("file-write-create", "/tmp/x", false),
                ("file-write-create", "/private/var/folders/zz/abc123/T/x", true),
                ("file-write-create", "/private/var/folders/zz/other/x", false),
            ],
        },
        Case {
            name: "workspace_write_network",
            policy: workspace(&[], true, false),
            cwd: "/Users/dev/project",
            tmpdir: Some(TMPDIR),
            probes: &[
                ("file-write-data", "/Users/dev/project/src/main.rs", true),
                ("file-write-data", "/Users/dev/project/.git/HEAD", false),
            ],
        },
        Case {
            name: "several_roots",
            policy: workspace(&["/Users/dev/cache", "/opt/data", "/private/tmp"], false, true),
            cwd: "/Users/dev/project",
            tmpdir: Some(TMPDIR),
            probes: &[
                ("file-write-create", "/Users/dev/cache/x", true),
                ("file-write-create", "/opt/data/x", true),
                ("file-write-create", "/opt/data/.git/hooks/pre-commit", false),
                ("file-write-create", "/Users/dev/project/x", true),
                ("file-write-create", "/private/tmp/x", true),
                ("file-write-create", "/private/var/folders/zz/abc123/T/x", false),
            ],
        },
        Case {
            name: "nested_read_only",
            policy: workspace(&["/Users/dev/mono"], false, false),
            cwd: "/Users/dev/mono/wt",
            tmpdir: Some("/tmp/uexec-tmp"),
            probes: &[
                ("file-write-data", "/Users/dev/mono/wt/lib.rs", true),
                ("file-write-data", "/Users/dev/mono/README", true),
                ("file-write-create", "/Users/dev/mono/wt/.git", false),
                ("file-write-data", "/Users/dev/mono/.git/worktrees/wt/HEAD", false),
                ("file-write-create", "/Users/dev/mono/wt/.uexec/x", false),
                ("file-write-unlink", "/Users/dev/mono/.uexec", false),
                ("file-write-create", "/Users/dev/shared-uexec/config.toml", false),
                ("file-write-create", "/private/tmp/uexec-tmp/x", true),
                ("file-write-create", "/private/tmp/uexec-tmp/.git/x", false),
                ("file-write-create", "/private/tmp/.uexec", false),
            ],
        },
    ]
}

#[test]
fn profiles_and_command_lines_match_the_golden_files() {
    let fs = mac();
    let argv = vec![OsString::from("bash"), OsString::from("-lc"), OsString::from("make test")];
    for case in cases() {
        let launch =
            build_launch(&case.policy, Path::new(case.cwd), case.tmpdir.map(Path::new), &argv, &fs).unwrap();
        let forms = check_profile(&launch);
        golden(&format!("{}.sbpl", case.name), &launch.profile);
        golden(&format!("{}.args", case.name), &args_text(&launch));
        for &(op, path, expected) in COMMON_PROBES.iter().chain(case.probes) {
            let allowed = sexpr::allows(&forms, op, Path::new(path), &launch.params).unwrap();
            assert_eq!(allowed, expected, "{}: {op} {path}", case.name);
        }
        let network = launch.profile.contains("(allow network*)");
        assert_eq!(network, case.policy.has_network_access(), "{}", case.name);
    }
}
