//! What the app adds to a profile, checked with the SBPL evaluator on a fake Mac: the allowlist mode's network
//! part (the proxy, loopback, TLS trust, no DNS), the keychain opt-in, and hidden locations under every
//! spelling (firmlinks, case, `/.vol`) with the directories above them. Every denial has its allowed twin.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use uexec_domain::{GitEntry, SandboxPolicy};
use uexec_sandbox_macos::{Extras, SeatbeltLaunch, build_launch, extend_launch};

use crate::fake_fs::FakeFs;
use crate::sexpr::{Request, ip, unix};
use crate::{check_profile, sexpr};

const PORT: u16 = 41234;

fn mac() -> FakeFs {
    FakeFs::macos()
        .dir("/Users/dev/project/.git")
        .dir("/Users/dev/project/config")
        .dir("/Users/dev/project/src")
        .git("/Users/dev/project", GitEntry::Directory)
}

fn launch(policy: &SandboxPolicy, extras: &Extras<'_>) -> SeatbeltLaunch {
    let plain =
        build_launch(policy, Path::new("/Users/dev/project"), None, &[OsString::from("true")], &mac())
            .unwrap();
    extend_launch(plain, extras)
}

fn check(launch: &SeatbeltLaunch, probes: &[(Request, bool)], case: &str) {
    let forms = check_profile(launch);
    for (request, expected) in probes {
        let allowed = sexpr::decide(&forms, request, &launch.params).unwrap();
        assert_eq!(allowed, *expected, "{case}: {request:?}");
    }
}

fn workspace(network: bool) -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        network_access: network,
        exclude_slash_tmp: false,
        exclude_tmpdir_env_var: true,
    }
}

#[test]
fn allowlist_mode_reaches_the_proxy_loopback_and_tls_trust_and_nothing_else() {
    for policy in [SandboxPolicy::ReadOnly { network_access: true }, workspace(true)] {
        let launch = launch(&policy, &Extras { proxy_port: Some(PORT), ..Extras::default() });
        let probes = [
            (Request::connect(ip("127.0.0.1", PORT)), true),
            (Request::connect(ip("::1", PORT)), true),
            // What SBPL cannot name: the JVM and .NET are told to use IPv4 instead (sandbox_tests).
            (Request::connect(ip("::ffff:127.0.0.1", PORT)), false),
            (Request::connect(ip("93.184.216.34", 443)), false),
            (Request::connect(ip("93.184.216.34", PORT)), false),
            // No DNS: neither a resolver on the network nor mDNSResponder.
            (Request::connect(ip("8.8.8.8", 53)), false),
            (Request::connect(unix("/private/var/run/mDNSResponder")), false),
            // Loopback for tests and dev servers, never reachable from the LAN.
            (Request::bind(ip("127.0.0.1", 3000)), true),
            (Request::inbound(ip("127.0.0.1", 3000)), true),
            (Request::connect(ip("127.0.0.1", 3000)), true),
            (Request::bind(ip("192.168.1.5", 3000)), false),
            (Request::inbound(ip("192.168.1.5", 3000)), false),
            // TLS verification (Go, Swift, native-tls), without the keychain.
            (Request::named("mach-lookup", "com.apple.trustd.agent"), true),
            (Request::named("mach-lookup", "com.apple.trustd"), true),
            (Request::named("mach-lookup", "com.apple.SecurityServer"), false),
            (Request::connect(unix("/Users/dev/.docker/run/docker.sock")), false),
        ];
        check(&launch, &probes, policy.mode_str());
        assert!(!launch.profile.contains("(remote ip \"*:*\")"), "{}", launch.profile);
    }
    // The twin: with the network on and no proxy, everything IP and DNS.
    let open = launch(&workspace(true), &Extras::default());
    check(
        &open,
        &[
            (Request::connect(ip("93.184.216.34", 443)), true),
            (Request::connect(unix("/private/var/run/mDNSResponder")), true),
            (Request::named("mach-lookup", "com.apple.SecurityServer"), false),
        ],
        "open",
    );
    // Offline, the proxy port changes nothing: no network part to replace.
    let offline = launch(&workspace(false), &Extras { proxy_port: Some(PORT), ..Extras::default() });
    check(&offline, &[(Request::connect(ip("127.0.0.1", PORT)), false)], "offline");
}

#[test]
fn the_keychain_opens_only_when_the_person_opts_in() {
    for network in [false, true] {
        let policy = SandboxPolicy::ReadOnly { network_access: network };
        let closed = launch(&policy, &Extras::default());
        check(&closed, &[(Request::named("mach-lookup", "com.apple.SecurityServer"), false)], "closed");
        let open = launch(&policy, &Extras { keychain: true, ..Extras::default() });
        check(
            &open,
            &[
                (Request::named("mach-lookup", "com.apple.SecurityServer"), true),
                (Request::named("mach-lookup", "com.apple.securityd.xpc"), true),
            ],
            "open",
        );
    }
}

#[test]
fn hidden_locations_are_denied_under_every_spelling_and_their_parents_cannot_be_renamed() {
    let hidden = [PathBuf::from("/Users/dev/.ssh"), PathBuf::from("/Users/dev/project/config/.env")];
    for policy in [workspace(false), workspace(true), SandboxPolicy::ReadOnly { network_access: false }] {
        let launch = launch(&policy, &Extras { hidden: &hidden, ..Extras::default() });
        let read = |path: &str| Request::file("file-read-data", path);
        let mut probes = vec![
            (read("/Users/dev/.ssh/id_ed25519"), false),
            (read("/Users/dev/.SSH/id_ed25519"), false),
            (read("/users/Dev/.Ssh/config"), false),
            (read("/System/Volumes/Data/Users/dev/.ssh/id_ed25519"), false),
            (Request::file("file-read-metadata", "/Users/dev/.ssh"), false),
            (read("/.vol/16777220/4242"), false),
            (read("/.VOL/16777220/4242"), false),
            (read("/Users/dev/project/config/.env"), false),
            (read("/Users/dev/project/config/.ENV"), false),
            (read("/System/Volumes/Data/Users/dev/project/config/.env"), false),
            // The twins: the rest of the home and the workspace, under either spelling.
            (read("/Users/dev/.sshrc"), true),
            (read("/Users/dev/.zshrc"), true),
            (read("/System/Volumes/Data/Users/dev/project/src/main.rs"), true),
            (read("/Users/dev/project/config/settings.toml"), true),
            (read("/.vol"), true),
        ];
        if policy.has_network_access() || matches!(policy, SandboxPolicy::WorkspaceWrite { .. }) {
            probes.extend([
                // mv config c2; cat c2/.env: the first step is refused; a sibling directory moves freely.
                (Request::file("file-write-unlink", "/Users/dev/project/config"), false),
                (Request::file("file-write-unlink", "/Users/dev/project/CONFIG"), false),
                (Request::file("file-write-unlink", "/Users/dev/project/src"), true),
                (Request::file("file-write-data", "/Users/dev/project/config/.env"), false),
                (Request::file("file-write-data", "/Users/dev/project/config/settings.toml"), true),
            ]);
        }
        check(&launch, &probes, policy.mode_str());
    }
    // The twin: without hidden locations, the same reads are allowed.
    let plain = launch(&workspace(false), &Extras::default());
    check(
        &plain,
        &[
            (Request::file("file-read-data", "/Users/dev/.ssh/id_ed25519"), true),
            (Request::file("file-read-data", "/System/Volumes/Data/Users/dev/.ssh/id_ed25519"), true),
        ],
        "plain",
    );
}

#[test]
fn other_tools_files_of_every_root_are_denied_present_or_not_unless_allowed() {
    use uexec_domain::tool_files::ToolFiles;
    let fs = mac().dir("/Users/dev/project/.claude");
    let build = |tools: &ToolFiles| {
        uexec_sandbox_macos::build_launch_with(
            &workspace(false),
            Path::new("/Users/dev/project"),
            None,
            &[OsString::from("true")],
            &fs,
            tools,
        )
        .unwrap()
    };
    let write = |path: &str| Request::file("file-write-data", path);
    let create = |path: &str| Request::file("file-write-create", path);
    let protected = build(&ToolFiles::all());
    check(
        &protected,
        &[
            // Present and absent, any spelling, and renaming the entry away.
            (write("/Users/dev/project/.claude/settings.json"), false),
            (create("/Users/dev/project/.vscode"), false),
            (create("/Users/dev/project/.vscode/tasks.json"), false),
            (write("/System/Volumes/Data/Users/dev/project/.VSCode/tasks.json"), false),
            (create("/Users/dev/project/.mcp.json"), false),
            (Request::file("file-write-unlink", "/Users/dev/project/.claude"), false),
            // The twins: names beside them, and the same names deeper in the tree.
            (create("/Users/dev/project/.vscodex"), true),
            (create("/Users/dev/project/src/.vscode"), true),
            (write("/Users/dev/project/src/main.rs"), true),
            (create("/Users/dev/project/mcp.json"), true),
            // Every writable root's, present or not (`/tmp` here), and only at its top level.
            (create("/private/tmp/.vscode/tasks.json"), false),
            (create("/tmp/.mcp.json"), false),
            (create("/private/tmp/x/.vscode"), true),
            (create("/private/tmp/.vscodex"), true),
        ],
        "all protected",
    );
    let allowed = build(&ToolFiles::allowing(&[".vscode"]).unwrap());
    check(
        &allowed,
        &[
            (create("/Users/dev/project/.vscode/tasks.json"), true),
            (write("/Users/dev/project/.claude/settings.json"), false),
        ],
        ".vscode allowed",
    );
}

/// A VS Code workspace file present at the workspace's top level (`*.code-workspace`) is denied, as on Linux;
/// a new one, one deeper down and the names beside it stay writable, and the person can allow them.
#[test]
fn a_present_code_workspace_file_is_denied_by_its_suffix() {
    use uexec_domain::tool_files::ToolFiles;
    let fs = mac().file("/Users/dev/project/proj.code-workspace").dir("/Users/dev/project/src");
    let build = |tools: &ToolFiles| {
        uexec_sandbox_macos::build_launch_with(
            &workspace(false),
            Path::new("/Users/dev/project"),
            None,
            &[OsString::from("true")],
            &fs,
            tools,
        )
        .unwrap()
    };
    let write = |path: &str| Request::file("file-write-data", path);
    let create = |path: &str| Request::file("file-write-create", path);
    check(
        &build(&ToolFiles::all()),
        &[
            (write("/Users/dev/project/proj.code-workspace"), false),
            (Request::file("file-write-unlink", "/Users/dev/project/proj.code-workspace"), false),
            (write("/Users/dev/project/proj.code-workspace.bak"), true),
            (create("/Users/dev/project/new.code-workspace"), true),
            (write("/Users/dev/project/src/proj.code-workspace"), true),
        ],
        "protected",
    );
    check(
        &build(&ToolFiles::allowing(&["*.code-workspace"]).unwrap()),
        &[(write("/Users/dev/project/proj.code-workspace"), true)],
        "allowed",
    );
}

/// Repositories nested at the workspace's top level, as on Linux: what git runs or reads as configuration is
/// denied present or not, a work tree's `.git` file cannot be redirected, and a symlinked directory is not
/// followed; the rest of their git directories, and repositories deeper down, stay writable.
#[test]
fn repositories_nested_at_the_workspace_top_level_are_protected() {
    let fs = mac()
        .dir("/Users/dev/ws/vendored/.git/objects")
        .git("/Users/dev/ws/vendored", GitEntry::Directory)
        .dir("/Users/dev/ws/lib")
        .git("/Users/dev/ws/lib", GitEntry::File { gitdir: "/Users/dev/ws/.git/modules/lib".into() })
        .file("/Users/dev/ws/lib/.git")
        .dir("/Users/dev/elsewhere/.git")
        .git("/Users/dev/elsewhere", GitEntry::Directory)
        .link("/Users/dev/ws/link", "/Users/dev/elsewhere")
        .dir("/Users/dev/ws/deep/er/.git")
        .git("/Users/dev/ws/deep/er", GitEntry::Directory);
    let launch = uexec_sandbox_macos::build_launch_with(
        &workspace(false),
        Path::new("/Users/dev/ws"),
        None,
        &[OsString::from("true")],
        &fs,
        &uexec_domain::tool_files::ToolFiles::all(),
    )
    .unwrap();
    let write = |path: &str| Request::file("file-write-data", path);
    let create = |path: &str| Request::file("file-write-create", path);
    check(
        &launch,
        &[
            (write("/Users/dev/ws/vendored/.git/config"), false),
            (create("/Users/dev/ws/vendored/.git/hooks/post-checkout"), false),
            (create("/Users/dev/ws/vendored/.git/info/attributes"), false),
            (create("/Users/dev/ws/vendored/.git/config.worktree"), false),
            (Request::file("file-write-unlink", "/Users/dev/ws/vendored/.git"), false),
            (write("/Users/dev/ws/lib/.git"), false),
            // The twins: the rest of the git directory, the work trees, and what is not looked into.
            (write("/Users/dev/ws/vendored/.git/index"), true),
            (create("/Users/dev/ws/vendored/.git/objects/ab"), true),
            (write("/Users/dev/ws/vendored/src.rs"), true),
            (write("/Users/dev/ws/lib/src.rs"), true),
            (write("/Users/dev/ws/deep/er/.git/config"), true),
        ],
        "nested",
    );
}
