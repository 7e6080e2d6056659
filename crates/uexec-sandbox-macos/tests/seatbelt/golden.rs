//! Golden tests: the whole profile and command line for each kind of policy, compared with files under
//! `tests/golden/`. Set `UEXEC_BLESS=1` to rewrite the files after an intended change (then review the diff).
//! Each case also checks, with the SBPL evaluator, what the profile allows.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use uexec_domain::GitEntry;
use uexec_domain::SandboxPolicy;
use uexec_sandbox_macos::{SeatbeltLaunch, build_launch};

use crate::fake_fs::FakeFs;
use crate::sexpr::{Request, ip, unix};
use crate::{check_profile, sexpr};

const TMPDIR: &str = "/var/folders/zz/abc123/T";

/// A Mac with a home directory, a repository, a worktree of a monorepo and the usual /tmp and $TMPDIR.
fn mac() -> FakeFs {
    FakeFs::macos()
        .dir("/Users/dev/project/src")
        .dir("/Users/dev/project/.git")
        .dir("/Users/dev/cache")
        .file("/Users/dev/mono/.git/worktrees/wt/HEAD")
        .content("/Users/dev/mono/.git/worktrees/wt/commondir", "../..\n")
        .dir("/Users/dev/mono/wt")
        .dir("/Users/dev/shared-uexec")
        .dir("/private/var/folders/zz/abc123/T")
        .dir("/private/var/folders/zz/abc123/C")
        .dir("/private/tmp/ws/.git")
        .dir("/private/tmp/ws/src")
        .dir("/Users/dev/fresh")
        .dir("/private/tmp/uexec-tmp")
        // A `.git` that is no git directory (the old fake's `.git` entries were set apart from its directories).
        .file("/opt/data/.git")
        .link("/Users/dev/mono/.uexec", "/Users/dev/shared-uexec")
        .git("/Users/dev/project", GitEntry::Directory)
        .git("/Users/dev/mono", GitEntry::Directory)
        .git("/private/tmp/ws", GitEntry::Directory)
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
    /// `(request, allowed?)` checked against the profile: every denied probe has an allowed twin.
    probes: Vec<(Request, bool)>,
}

fn file(op: &str, path: &str) -> Request {
    Request::file(op, path)
}

fn mach(name: &str) -> Request {
    Request::named("mach-lookup", name)
}

/// Probes every profile must answer the same way, whatever the policy. Each denial is paired with the allowed
/// operation that looks most like it.
fn common_probes() -> Vec<(Request, bool)> {
    const PTY: &str = "com.apple.sandbox.pty";
    vec![
        (file("file-write-data", "/dev/null"), true),
        (file("file-write-data", "/dev/fd/2"), true),
        (file("file-write-create", "/dev/fd/2x"), false),
        (file("file-ioctl", "/dev/disk0"), false),
        (file("file-write-data", "/dev/disk0"), false),
        // Terminals: another tab's slave can be neither read (keystrokes) nor written (fake prompts) ...
        (file("file-read-data", "/dev/ttys004"), false),
        (file("file-write-data", "/dev/ttys004"), false),
        // ... while a PTY the command opened itself can, and the inherited one takes ioctls and /dev/tty.
        (file("file-read-data", "/dev/ttys004").with_extension(PTY), true),
        (file("file-write-data", "/dev/ttys004").with_extension(PTY), true),
        (file("file-write-mode", "/dev/ttys004").with_extension(PTY), false),
        (file("file-ioctl", "/dev/ttys004"), true),
        (file("file-ioctl", "/dev/ptmx"), true),
        (file("file-write-data", "/dev/tty"), true),
        (file("file-read-data", "/dev/tty"), true),
        (file("file-write-data", "/private/etc/passwd"), false),
        (file("file-write-create", "/Users/dev/.ssh/authorized_keys"), false),
        (file("file-read-data", "/Users/dev/.ssh/id_ed25519"), true),
        (file("file-read-data", "/usr/lib/dyld"), true),
        // The keychain is out; user lookups are in.
        (mach("com.apple.SecurityServer"), false),
        (mach("com.apple.securityd.xpc"), false),
        (mach("com.apple.system.opendirectoryd.libinfo"), true),
        // ps lists nothing: no process table, from sysctl or sysmond.
        (mach("com.apple.sysmond"), false),
        (Request::named("sysctl-read", "kern.proc.all"), false),
        (Request::named("sysctl-read", "kern.proc.pid.4242"), true),
        // Interfaces offline too.
        (Request::named("sysctl-read", "net.routetable.0.0.3.0"), true),
        // POSIX shared memory under the runtimes' names only.
        (Request::named("ipc-posix-shm-write-create", "/__KMP_REGISTERED_LIB_4242"), true),
        (Request::named("ipc-posix-shm-read-data", "/__KMP_REGISTERED_LIB_4242"), true),
        (Request::named("ipc-posix-shm-write-create", "/psm_1f2e3d4c"), true),
        (Request::named("ipc-posix-shm-write-unlink", "/PostgreSQL.1804289383"), true),
        (Request::named("ipc-posix-shm-read-data", "apple.cfprefs.501"), true),
        (Request::named("ipc-posix-shm-write-data", "apple.cfprefs.501"), false),
        (Request::named("ipc-posix-shm-read-data", "/com.someone.else"), false),
        (Request::named("ipc-posix-shm-write-create", "/__KMP_REGISTERED_LIB_x"), false),
        // Signals: the command's own sandbox only.
        (Request::signal("same-sandbox"), true),
        (Request::signal("other"), false),
        // The person's servers, whatever the mode: Docker, tmux, launchd's agent sockets, screen, VS Code.
        (Request::connect(unix("/Users/dev/.docker/run/docker.sock")), false),
        (Request::connect(unix("/private/var/run/docker.sock")), false),
        (Request::connect(unix("/private/tmp/tmux-501/default")), false),
        (Request::connect(unix("/private/tmp/TMUX-501/default")), false),
        (Request::connect(unix("/private/tmp/com.apple.launchd.AbC123/Listeners")), false),
        (Request::connect(unix("/private/tmp/.screen/S-dev/4242.ttys004.mac")), false),
        (Request::connect(unix("/private/var/folders/zz/abc123/T/vscode-ipc-1234.sock")), false),
        (Request::connect(unix("/Users/dev/.gnupg/S.gpg-agent")), false),
    ]
}

/// What a command with the network off can and cannot reach.
fn offline_probes() -> Vec<(Request, bool)> {
    vec![
        (Request::connect(ip("93.184.216.34", 443)), false),
        (Request::connect(ip("127.0.0.1", 8080)), false),
        (Request::bind(ip("127.0.0.1", 8080)), false),
        (Request::connect(unix("/private/var/run/mDNSResponder")), false),
        (mach("com.apple.trustd.agent"), false),
    ]
}

/// What a command with the network on can and cannot reach.
fn online_probes() -> Vec<(Request, bool)> {
    vec![
        (Request::connect(ip("93.184.216.34", 443)), true),
        (Request::connect(ip("8.8.8.8", 53)), true),
        (Request::bind(ip("0.0.0.0", 8080)), true),
        (Request::inbound(ip("192.168.1.5", 8080)), true),
        (Request::connect(unix("/private/var/run/mDNSResponder")), true),
        (mach("com.apple.trustd.agent"), true),
        (mach("com.apple.trustd"), true),
    ]
}

/// `workspace-write` in `/Users/dev/project` (a repository): sockets, case and firmlink spellings, renames of
/// the parents of `.git`, the per-user cache.
fn workspace_probes() -> Vec<(Request, bool)> {
    vec![
        (file("file-write-data", "/Users/dev/project/src/main.rs"), true),
        (file("file-write-data", "/Users/dev/project/.git/config"), false),
        (file("file-write-unlink", "/Users/dev/project/.git"), false),
        // Case-insensitive volume: .GIT is .git.
        (file("file-write-create", "/Users/dev/project/.GIT/hooks/pre-commit"), false),
        (file("file-write-data", "/Users/dev/Project/.Git/config"), false),
        // The Data volume's spelling of the same file.
        (file("file-write-data", "/System/Volumes/Data/Users/dev/project/.git/config"), false),
        // Git works: the index, objects, refs, logs and the state of a rebase are writable (the twins) ...
        (file("file-write-create", "/Users/dev/project/.git/index.lock"), true),
        (file("file-write-create", "/Users/dev/project/.git/objects/ab/cdef0123"), true),
        (file("file-write-create", "/Users/dev/project/.git/refs/heads/topic.lock"), true),
        (file("file-write-create", "/Users/dev/project/.git/rebase-merge/git-rebase-todo"), true),
        (file("file-write-unlink", "/Users/dev/project/.git/index.lock"), true),
        // ... while what git runs or reads as configuration is not, present or absent, in any spelling.
        (file("file-write-create", "/Users/dev/project/.git/hooks/post-checkout"), false),
        (file("file-write-create", "/Users/dev/project/.git/config.worktree"), false),
        (file("file-write-create", "/Users/dev/project/.git/commondir"), false),
        (file("file-write-create", "/Users/dev/project/.git/info/attributes"), false),
        (file("file-write-create", "/Users/dev/project/.git/objects/info/alternates"), false),
        (file("file-write-create", "/Users/dev/project/.git/Objects/Info/Alternates"), false),
        // git worktree add and git submodule add make new git dirs (protected from the next command on).
        (file("file-write-create", "/Users/dev/project/.git/worktrees/wt/commondir"), true),
        (file("file-write-create", "/Users/dev/project/.git/modules/lib/config"), true),
        (file("file-write-unlink", "/Users/dev/project/.git/hooks"), false),
        (file("file-write-unlink", "/Users/dev/project/.git/objects"), false),
        (file("file-write-unlink", "/Users/dev/project/.git/refs"), true),
        // Absent .uexec: not protected, as on Linux.
        (file("file-write-create", "/Users/dev/project/.uexec/config.toml"), true),
        (file("file-write-create", "/Users/dev/project-other/x"), false),
        // The workspace, the parent of .git, cannot be renamed; a directory beside .git can.
        (file("file-write-unlink", "/Users/dev/project"), false),
        (file("file-write-unlink", "/Users/dev/PROJECT"), false),
        (file("file-write-unlink", "/Users/dev/project/src"), true),
        (file("file-write-create", "/private/tmp/x"), true),
        (file("file-write-create", "/tmp/x"), false),
        (file("file-write-create", "/private/var/folders/zz/abc123/T/x"), true),
        (file("file-write-create", "/private/var/folders/zz/other/x"), false),
        // The per-user cache beside $TMPDIR: module caches.
        (file("file-write-create", "/private/var/folders/zz/abc123/C/clang/ModuleCache/X.pcm"), true),
        (file("file-write-create", "/private/var/folders/zz/other/C/clang/ModuleCache/X.pcm"), false),
        // Unix sockets: the command's own, beneath the writable roots; never inside .git.
        (Request::socket("AF_UNIX"), true),
        (Request::bind(unix("/Users/dev/project/.s.sock")), true),
        (Request::connect(unix("/Users/dev/project/.s.sock")), true),
        (Request::bind(unix("/private/tmp/mp-4242/listener-x")), true),
        (Request::connect(unix("/private/tmp/mp-4242/listener-x")), true),
        (Request::bind(unix("/Users/dev/project/.git/fsmonitor--daemon.ipc")), false),
        (Request::bind(unix("/Users/dev/elsewhere.sock")), false),
        (Request::connect(unix("/Users/dev/elsewhere.sock")), false),
    ]
}

fn cases() -> Vec<Case> {
    let joined = |parts: Vec<Vec<(Request, bool)>>| parts.into_iter().flatten().collect::<Vec<_>>();
    vec![
        Case {
            name: "read_only",
            policy: SandboxPolicy::ReadOnly { network_access: false },
            cwd: "/Users/dev/project",
            tmpdir: Some(TMPDIR),
            probes: joined(vec![
                offline_probes(),
                vec![
                    (file("file-write-data", "/Users/dev/project/src/main.rs"), false),
                    (file("file-write-create", "/private/tmp/x"), false),
                    (file("file-write-create", "/private/var/folders/zz/abc123/T/x"), false),
                    (file("file-write-create", "/private/var/folders/zz/abc123/C/x"), false),
                    (Request::socket("AF_UNIX"), false),
                    (Request::connect(unix("/Users/dev/project/.s.sock")), false),
                ],
            ]),
        },
        Case {
            name: "read_only_network",
            policy: SandboxPolicy::ReadOnly { network_access: true },
            cwd: "/Users/dev/project",
            tmpdir: None,
            probes: joined(vec![
                online_probes(),
                vec![
                    (file("file-write-data", "/Users/dev/project/src/main.rs"), false),
                    (Request::connect(unix("/Users/dev/project/.s.sock")), false),
                ],
            ]),
        },
        Case {
            name: "workspace_write",
            policy: workspace(&[], false, false),
            cwd: "/Users/dev/project",
            tmpdir: Some(TMPDIR),
            probes: joined(vec![offline_probes(), workspace_probes()]),
        },
        Case {
            name: "workspace_write_network",
            policy: workspace(&[], true, false),
            cwd: "/Users/dev/project",
            tmpdir: Some(TMPDIR),
            probes: joined(vec![online_probes(), workspace_probes()]),
        },
        Case {
            name: "fresh_workspace",
            policy: workspace(&[], false, false),
            cwd: "/Users/dev/fresh",
            tmpdir: Some(TMPDIR),
            probes: vec![
                // git init, cargo init, uv init: an absent .git is not protected (the Linux rule) ...
                (file("file-write-create", "/Users/dev/fresh/.git"), true),
                (file("file-write-create", "/Users/dev/fresh/.git/config"), true),
                // ... while the repository next door keeps its own.
                (file("file-write-create", "/Users/dev/project/.git/config"), false),
                // Other tools' files cannot be created even where absent, nor the workspace moved to plant
                // them under another name (mv fresh f2; mkdir f2/.vscode; mv f2 fresh); their twins can.
                (file("file-write-create", "/Users/dev/fresh/.vscode/tasks.json"), false),
                (file("file-write-create", "/Users/dev/fresh/.mcp.json"), false),
                (file("file-write-unlink", "/Users/dev/fresh"), false),
                (file("file-write-create", "/Users/dev/fresh/src/.vscode"), true),
                (file("file-write-create", "/Users/dev/fresh/mcp.json"), true),
            ],
        },
        Case {
            name: "tmp_workspace",
            policy: workspace(&[], false, true),
            cwd: "/tmp/ws",
            tmpdir: None,
            probes: vec![
                // mv ws w2; write w2/.git/hooks; mv w2 ws: the first step is refused, in every spelling.
                (file("file-write-unlink", "/private/tmp/ws"), false),
                (file("file-write-unlink", "/private/tmp/WS"), false),
                (file("file-write-unlink", "/System/Volumes/Data/private/tmp/ws"), false),
                (file("file-write-unlink", "/private/tmp"), false),
                (file("file-write-data", "/private/tmp/ws/.git/hooks/pre-commit"), false),
                // The twins: another directory of /tmp is renamed freely, the workspace's files written.
                (file("file-write-unlink", "/private/tmp/other"), true),
                (file("file-write-create", "/private/tmp/w2/x"), true),
                (file("file-write-data", "/private/tmp/ws/src/lib.rs"), true),
            ],
        },
        Case {
            name: "several_roots",
            policy: workspace(&["/Users/dev/cache", "/opt/data", "/private/tmp"], false, true),
            cwd: "/Users/dev/project",
            tmpdir: Some(TMPDIR),
            probes: vec![
                (file("file-write-create", "/Users/dev/cache/x"), true),
                (file("file-write-create", "/opt/data/x"), true),
                (file("file-write-create", "/opt/data/.git/hooks/pre-commit"), false),
                (file("file-write-create", "/Users/dev/project/x"), true),
                (file("file-write-create", "/private/tmp/x"), true),
                (file("file-write-create", "/private/var/folders/zz/abc123/T/x"), false),
            ],
        },
        Case {
            name: "nested_read_only",
            policy: workspace(&["/Users/dev/mono"], false, false),
            cwd: "/Users/dev/mono/wt",
            tmpdir: Some("/tmp/uexec-tmp"),
            probes: vec![
                (file("file-write-data", "/Users/dev/mono/wt/lib.rs"), true),
                (file("file-write-data", "/Users/dev/mono/README"), true),
                (file("file-write-create", "/Users/dev/mono/wt/.git"), false),
                // The worktree commits (its HEAD is written), its admin files stay read-only.
                (file("file-write-data", "/Users/dev/mono/.git/worktrees/wt/HEAD"), true),
                (file("file-write-data", "/Users/dev/mono/.git/worktrees/wt/commondir"), false),
                (file("file-write-create", "/Users/dev/mono/.git/worktrees/wt/gitdir"), false),
                (file("file-write-unlink", "/Users/dev/mono/.git/worktrees"), false),
                (file("file-write-unlink", "/Users/dev/mono/.uexec"), false),
                (file("file-write-create", "/Users/dev/shared-uexec/config.toml"), false),
                (file("file-write-create", "/private/tmp/uexec-tmp/x"), true),
                (file("file-write-create", "/private/tmp/uexec-tmp/.git/x"), true),
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
        for (request, expected) in common_probes().into_iter().chain(case.probes) {
            let allowed = sexpr::decide(&forms, &request, &launch.params).unwrap();
            assert_eq!(allowed, expected, "{}: {request:?}", case.name);
        }
        let network = launch.profile.contains("(allow network-outbound (remote ip \"*:*\"))");
        assert_eq!(network, case.policy.has_network_access(), "{}", case.name);
        assert!(!launch.profile.contains("(allow network*)"), "{}", case.name);
    }
}
