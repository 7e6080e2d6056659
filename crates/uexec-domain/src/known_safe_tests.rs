//! Unit and property tests of the known-safe rule against an in-memory file system.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// An in-memory view: symlinks (path -> target, absolute) and `.git` entries by directory.
#[derive(Default)]
struct FakeFs {
    links: BTreeMap<PathBuf, PathBuf>,
    git: BTreeMap<PathBuf, DotGit>,
    broken: Vec<PathBuf>,
}

impl FakeFs {
    fn git(mut self, dir: &str, kind: DotGit) -> Self {
        self.git.insert(PathBuf::from(dir), kind);
        self
    }
    fn link(mut self, from: &str, to: &str) -> Self {
        self.links.insert(PathBuf::from(from), PathBuf::from(to));
        self
    }
}

impl FsView for FakeFs {
    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        let mut out = PathBuf::from("/");
        for (hops, component) in path.components().enumerate() {
            if hops > 64 {
                return None;
            }
            match component {
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(name) => {
                    out.push(name);
                    if self.broken.contains(&out) {
                        return None;
                    }
                    if let Some(target) = self.links.get(&out) {
                        out = self.resolve(target)?;
                    }
                }
            }
        }
        Some(out)
    }

    fn dot_git(&self, dir: &Path) -> DotGit {
        self.git.get(dir).copied().unwrap_or(DotGit::Absent)
    }
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

fn bash(script: &str) -> Vec<String> {
    argv(&["bash", "-lc", script])
}

fn env(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    vars.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
}

const BASE_ENV: [(&str, &str); 2] = [("PATH", "/usr/bin:/bin"), ("HOME", "/home/u")];

/// The roots as given and as `fs` resolves them (what `SandboxWrites::gather` does with the host's realpath).
fn writes_of(fs: &FakeFs, roots: &[PathBuf]) -> SandboxWrites {
    let mut all = roots.to_vec();
    all.extend(roots.iter().filter_map(|r| fs.resolve(r)));
    all.dedup();
    SandboxWrites::from_roots(all)
}

fn roots(list: &[&str]) -> Vec<PathBuf> {
    list.iter().map(PathBuf::from).collect()
}

/// The usual layout: a workspace `/home/u/ws` and `/tmp` writable; a repository at `/home/u/repo`
/// (not writable).
fn check(argv: &[String], cwd: &str, vars: &[(&str, &str)], fs: &FakeFs) -> Result<(), NotKnownSafe> {
    check_in(argv, cwd, vars, &["/home/u/ws", "/tmp"], fs)
}

fn check_in(
    argv: &[String],
    cwd: &str,
    vars: &[(&str, &str)],
    writable: &[&str],
    fs: &FakeFs,
) -> Result<(), NotKnownSafe> {
    let mut environment = env(&BASE_ENV);
    environment.extend(env(vars));
    let writes = writes_of(fs, &roots(writable));
    let ctx = KnownSafeContext { writes: &writes, cwd: Path::new(cwd), env: &environment };
    check_known_safe(&ParsedCommand::new(argv.to_vec()), &ctx, fs)
}

fn repo_fs() -> FakeFs {
    FakeFs::default()
        .git("/home/u/repo", DotGit::Directory)
        .git("/home/u/ws", DotGit::Directory)
        .git("/tmp/x", DotGit::Directory)
}

#[test]
fn git_in_a_repository_outside_the_writable_roots_is_known_safe() {
    let fs = repo_fs();
    for cmd in [
        argv(&["git", "status"]),
        argv(&["git", "diff"]),
        bash("git log --oneline && git show HEAD"),
        argv(&["git", "cat-file", "-p", "HEAD"]),
    ] {
        assert_eq!(check(&cmd, "/home/u/repo", &[], &fs), Ok(()), "{cmd:?}");
        assert_eq!(check(&cmd, "/home/u/repo/src/deep", &[], &fs), Ok(()), "{cmd:?}");
    }
}

#[test]
fn git_whose_working_directory_lies_in_a_writable_root_is_not_known_safe() {
    let fs = repo_fs();
    for cwd in ["/home/u/ws", "/home/u/ws/sub", "/tmp/x", "/tmp/ws-without-repo", "/tmp"] {
        let result = check(&argv(&["git", "status"]), cwd, &[], &fs);
        // A root's own repository is named (coverable when shown); anywhere inside a root, it is code.
        let expected_coverable = cwd == "/home/u/ws" || cwd == "/tmp";
        assert!(result.as_ref().is_err_and(|e| e.is_coverable() == expected_coverable), "{cwd}: {result:?}");
        // Other known-safe commands still are.
        assert_eq!(check(&argv(&["ls", "-la"]), cwd, &[], &fs), Ok(()), "{cwd}");
    }
    // A symlinked working directory is judged where it leads.
    let fs = repo_fs().link("/home/u/shortcut", "/tmp/x");
    assert!(check(&argv(&["git", "status"]), "/home/u/shortcut", &[], &fs).is_err());
}

#[test]
fn git_is_not_known_safe_when_its_repository_or_work_tree_touches_a_writable_root() {
    // `.git` a symlink into a writable root.
    let fs = FakeFs::default().git("/home/u/repo", DotGit::Symlink).link("/home/u/repo/.git", "/tmp/planted");
    let result = check(&argv(&["git", "status"]), "/home/u/repo", &[], &fs);
    assert!(matches!(result, Err(NotKnownSafe::WritableCode { .. })), "{result:?}");
    // `.git` a symlink to a directory outside: fine.
    let fs =
        FakeFs::default().git("/home/u/repo", DotGit::Symlink).link("/home/u/repo/.git", "/srv/git/repo");
    assert_eq!(check(&argv(&["git", "status"]), "/home/u/repo", &[], &fs), Ok(()));
    // A gitdir file is not followed: not known safe.
    let fs = FakeFs::default().git("/home/u/repo", DotGit::Other);
    assert_eq!(
        check(&argv(&["git", "status"]), "/home/u/repo", &[], &fs),
        Err(NotKnownSafe::GitEntryNotADirectory(PathBuf::from("/home/u/repo/.git")))
    );
    // A repository at /home/u: its work tree contains the writable workspace (nested `.git`, submodules,
    // `.gitattributes` there are plantable).
    let fs = FakeFs::default().git("/home/u", DotGit::Directory);
    assert!(check(&argv(&["git", "status"]), "/home/u/notes", &[], &fs).is_err());
    // The nearest `.git` wins: a repository below /home/u that does not contain the workspace is fine.
    let fs = FakeFs::default().git("/home/u", DotGit::Directory).git("/home/u/notes", DotGit::Directory);
    assert_eq!(check(&argv(&["git", "status"]), "/home/u/notes", &[], &fs), Ok(()));
    // A writable root inside `.git` itself.
    let fs = repo_fs();
    let result = check_in(&argv(&["git", "log"]), "/home/u/repo", &[], &["/home/u/repo/.git/x"], &fs);
    assert!(result.is_err());
}

#[test]
fn git_outside_any_repository_is_known_safe_when_no_directory_above_is_writable() {
    let fs = FakeFs::default();
    assert_eq!(check(&argv(&["git", "diff", "--no-index", "a", "b"]), "/srv/data", &[], &fs), Ok(()));
}

#[test]
fn git_after_cd_is_not_known_safe_but_before_it_is() {
    let fs = repo_fs();
    assert_eq!(
        check(&bash("cd /tmp/x && git status"), "/home/u/repo", &[], &fs),
        Err(NotKnownSafe::GitAfterCd)
    );
    assert_eq!(
        check(&bash("cd /tmp/x; bash -lc 'git status'"), "/home/u/repo", &[], &fs),
        Err(NotKnownSafe::GitAfterCd)
    );
    assert_eq!(check(&bash("git status && cd /tmp && ls"), "/home/u/repo", &[], &fs), Ok(()));
    // The word check still rejects what it always rejected.
    assert_eq!(
        check(&bash("git -C /tmp/x status"), "/home/u/repo", &[], &fs),
        Err(NotKnownSafe::NotReadOnly)
    );
    assert_eq!(check(&argv(&["rm", "x"]), "/home/u/repo", &[], &fs), Err(NotKnownSafe::NotReadOnly));
}

#[test]
fn git_configuration_named_by_the_environment_or_home_must_lie_outside_the_writable_roots() {
    let fs = repo_fs();
    let git = argv(&["git", "status"]);
    let cwd = "/home/u/repo";
    for vars in [
        &[("HOME", "/tmp/home")][..],
        &[("XDG_CONFIG_HOME", "/home/u/ws/.config")],
        &[("GIT_CONFIG_GLOBAL", "/tmp/gitconfig")],
        &[("GIT_CONFIG_SYSTEM", "/tmp/gitconfig")],
        &[("GIT_CONFIG", "/tmp/gitconfig")],
        &[("GIT_EXEC_PATH", "/tmp/libexec")],
        &[("GIT_DIR", "/tmp/x/.git")],
        &[("GIT_WORK_TREE", "/tmp/x")],
        &[("GIT_COMMON_DIR", "/home/u/ws/.git")],
        &[("GIT_DIR", "/home/u")],
        &[("GIT_EXTERNAL_DIFF", "/tmp/difftool --flag")],
    ] {
        assert!(check(&git, cwd, vars, &fs).is_err(), "{vars:?}");
        // Not git: unaffected.
        assert_eq!(check(&argv(&["cat", "f"]), cwd, vars, &fs), Ok(()), "{vars:?}");
    }
    for vars in [&[("GIT_CONFIG_PARAMETERS", "'core.pager'='less'")][..], &[("GIT_CONFIG_COUNT", "1")]] {
        assert_eq!(check(&git, cwd, vars, &fs), Err(NotKnownSafe::GitInlineConfig), "{vars:?}");
    }
    // Allowed twins: the same variables pointing outside.
    for vars in [
        &[("HOME", "/root")][..],
        &[("XDG_CONFIG_HOME", "/home/u/.config")],
        &[("GIT_CONFIG_GLOBAL", "/dev/null")],
        &[("GIT_CONFIG_NOSYSTEM", "1"), ("GIT_CONFIG_SYSTEM", "/etc/gitconfig")],
        &[("GIT_EXEC_PATH", "/usr/lib/git-core")],
        &[("GIT_DIR", "/home/u/repo/.git")],
        &[("GIT_EXTERNAL_DIFF", "difft")],
        &[("GIT_EXTERNAL_DIFF", "/usr/bin/difft")],
    ] {
        assert_eq!(check(&git, cwd, vars, &fs), Ok(()), "{vars:?}");
    }
    // The system config in a writable root (a policy that makes /etc writable).
    assert!(check_in(&git, cwd, &[], &["/etc"], &fs).is_err());
}

#[test]
fn a_writable_path_directory_makes_every_command_unsafe() {
    let fs = repo_fs();
    for path in
        ["/home/u/ws/node_modules/.bin:/usr/bin", "/usr/bin:/tmp/bin", "/usr/bin::/bin", "bin:/usr/bin"]
    {
        // Empty and relative entries are the working directory, here a writable one.
        let result = check(&argv(&["ls"]), "/home/u/ws", &[("PATH", path)], &fs);
        assert!(matches!(result, Err(NotKnownSafe::Writable { .. })), "{path}: {result:?}");
    }
    // A relative entry judged from a directory out of reach is fine, until the script changes directory.
    assert_eq!(check(&argv(&["ls"]), "/srv", &[("PATH", "bin:/usr/bin")], &fs), Ok(()));
    let result = check(&bash("cd /tmp/x && ls"), "/srv", &[("PATH", "bin:/usr/bin")], &fs);
    assert!(matches!(result, Err(NotKnownSafe::Unresolved { .. })), "{result:?}");
    let result = check(&bash("cd /tmp/x && bash -c ls"), "/srv", &[("BASH_ENV", "env.sh")], &fs);
    assert!(matches!(result, Err(NotKnownSafe::Unresolved { .. })), "{result:?}");
    assert_eq!(check(&bash("cd /tmp/x && ls"), "/srv", &[], &fs), Ok(()));
    // A symlinked PATH directory that leads into a writable root, even one that does not exist yet.
    let fs = repo_fs().link("/home/u/bin", "/tmp/bin");
    assert!(check(&argv(&["ls"]), "/srv", &[("PATH", "/home/u/bin:/usr/bin")], &fs).is_err());
    assert_eq!(check(&argv(&["ls"]), "/srv", &[("PATH", "/usr/local/bin:/usr/bin")], &fs), Ok(()));
}

#[test]
fn loader_and_shell_startup_variables_in_writable_roots_make_every_command_unsafe() {
    let fs = repo_fs();
    for vars in [
        &[("LD_PRELOAD", "/tmp/evil.so")][..],
        &[("LD_PRELOAD", "libok.so /home/u/ws/evil.so")],
        &[("LD_LIBRARY_PATH", "/usr/lib:/tmp/lib")],
        &[("LD_AUDIT", "/tmp/a.so")],
        &[("GCONV_PATH", "/tmp/gconv")],
        &[("BASH_ENV", "/tmp/env.sh")],
        &[("ENV", "/home/u/ws/.env.sh")],
    ] {
        assert!(check(&argv(&["ls"]), "/srv", vars, &fs).is_err(), "{vars:?}");
    }
    assert_eq!(check(&argv(&["ls"]), "/srv", &[("LD_PRELOAD", "libjemalloc.so")], &fs), Ok(()));
    // zsh reads .zshenv even for `zsh -c`.
    let zsh = argv(&["zsh", "-c", "ls"]);
    assert!(check(&zsh, "/srv", &[("HOME", "/tmp/home")], &fs).is_err());
    assert!(check(&zsh, "/srv", &[("ZDOTDIR", "/home/u/ws")], &fs).is_err());
    assert_eq!(check(&zsh, "/srv", &[], &fs), Ok(()));
    assert_eq!(check(&argv(&["bash", "-c", "ls"]), "/srv", &[("HOME", "/tmp/home")], &fs), Ok(()));
}

#[test]
fn ripgrep_config_in_a_writable_root_is_not_known_safe() {
    let fs = repo_fs();
    assert!(check(&argv(&["rg", "x"]), "/srv", &[("RIPGREP_CONFIG_PATH", "/tmp/rgrc")], &fs).is_err());
    assert_eq!(check(&argv(&["rg", "x"]), "/srv", &[("RIPGREP_CONFIG_PATH", "/home/u/.rgrc")], &fs), Ok(()));
}

#[test]
fn without_writable_roots_nothing_can_have_been_planted() {
    let fs = repo_fs();
    for cwd in ["/tmp/x", "/home/u/ws"] {
        assert_eq!(check_in(&argv(&["git", "status"]), cwd, &[("HOME", "/tmp")], &[], &fs), Ok(()));
    }
    assert_eq!(check_in(&bash("rm x"), "/tmp", &[], &[], &fs), Err(NotKnownSafe::NotReadOnly));
}

#[test]
fn unresolvable_paths_fail_closed() {
    let mut fs = repo_fs();
    fs.broken.push(PathBuf::from("/home/u/loop"));
    let result = check(&argv(&["ls"]), "/srv", &[("PATH", "/home/u/loop/bin:/usr/bin")], &fs);
    assert!(matches!(result, Err(NotKnownSafe::Unresolved { .. })), "{result:?}");
    let result = check(&argv(&["git", "status"]), "/home/u/loop", &[], &fs);
    assert!(matches!(result, Err(NotKnownSafe::Unresolved { .. })), "{result:?}");
}

#[test]
fn reasons_read_as_sentences() {
    let text = NotKnownSafe::Writable { what: "the git repository".into(), path: PathBuf::from("/tmp/.git") }
        .to_string();
    assert_eq!(text, "the git repository (/tmp/.git) can be written by sandboxed commands");
    assert!(NotKnownSafe::GitAfterCd.to_string().contains("cd"));
    let planted = NotKnownSafe::GitEntryNotADirectory(PathBuf::from("/tmp/a\n\u{202e}b/.git")).to_string();
    assert_eq!(planted, "git would use /tmp/a\\u{a}\\u{202e}b/.git, which is not a directory");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the layout: git whose working directory lies in a writable root is never known safe, and git
    /// whose nearest repository's work tree neither lies in nor contains a writable root (with a clean
    /// environment) always is.
    #[test]
    fn git_is_known_safe_exactly_when_its_repository_is_out_of_reach(
        cwd_parts in proptest::collection::vec(0usize..3, 1..5),
        root_parts in proptest::collection::vec(proptest::collection::vec(0usize..3, 1..4), 0..3),
        repo_depth in proptest::option::of(0usize..5),
    ) {
        const NAMES: [&str; 3] = ["a", "b", "c"];
        let join = |parts: &[usize]| {
            let mut p = PathBuf::from("/w");
            for i in parts { p.push(NAMES[*i]); }
            p
        };
        let cwd = join(&cwd_parts);
        let writable: Vec<PathBuf> = root_parts.iter().map(|p| join(p)).collect();
        let mut fs = FakeFs::default();
        let repo = repo_depth.map(|d| join(&cwd_parts[..d.min(cwd_parts.len())]));
        if let Some(repo) = &repo {
            fs.git.insert(repo.clone(), DotGit::Directory);
        }
        let environment = env(&[("PATH", "/usr/bin")]);
        let writes = writes_of(&fs, &writable);
        let ctx = KnownSafeContext { writes: &writes, cwd: &cwd, env: &environment };
        let result = check_known_safe(&ParsedCommand::new(argv(&["git", "status"])), &ctx, &fs);
        let cwd_writable = writable.iter().any(|r| cwd.starts_with(r));
        if cwd_writable {
            prop_assert!(result.is_err());
        }
        let reachable = match &repo {
            Some(repo) => writable.iter().any(|r| repo.starts_with(r) || r.starts_with(repo)),
            None => false,
        };
        if !cwd_writable && !reachable {
            prop_assert_eq!(result.clone(), Ok(()));
        }
        if reachable {
            prop_assert!(result.is_err());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `ls` (no git, no rg) is known safe exactly when no PATH directory lies in a writable root.
    #[test]
    fn a_plain_command_is_known_safe_exactly_when_path_is_out_of_reach(
        path_dirs in proptest::collection::vec(proptest::collection::vec(0usize..3, 1..4), 1..4),
        root_parts in proptest::collection::vec(proptest::collection::vec(0usize..3, 1..3), 1..3),
    ) {
        const NAMES: [&str; 3] = ["a", "b", "c"];
        let join = |parts: &[usize]| {
            let mut p = PathBuf::from("/w");
            for i in parts { p.push(NAMES[*i]); }
            p
        };
        let dirs: Vec<PathBuf> = path_dirs.iter().map(|p| join(p)).collect();
        let writable: Vec<PathBuf> = root_parts.iter().map(|p| join(p)).collect();
        let path = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":");
        let environment = env(&[("PATH", &path)]);
        let writes = writes_of(&FakeFs::default(), &writable);
        let ctx = KnownSafeContext { writes: &writes, cwd: Path::new("/srv"), env: &environment };
        let result = check_known_safe(&ParsedCommand::new(argv(&["ls", "-la"])), &ctx, &FakeFs::default());
        let reachable = dirs.iter().any(|d| writable.iter().any(|r| d.starts_with(r)));
        prop_assert_eq!(result.is_ok(), !reachable, "{:?}", result);
    }
}

/// Outside the sandbox, a build or test runner in a writable working directory, and a program named by a
/// path in a writable root, run code a sandboxed command can rewrite between runs: never coverable by an earlier
/// approval. The twins: the same runner in a directory out of reach, and a read-only use of the runner.
#[test]
fn runners_of_writable_project_files_and_writable_programs_are_writable_code() {
    let fs = repo_fs();
    let planted = |script: &str, cwd: &str| {
        let mut environment = env(&BASE_ENV);
        environment.extend(env(&[]));
        let writes = writes_of(&fs, &roots(&["/home/u/ws", "/tmp"]));
        let ctx = KnownSafeContext { writes: &writes, cwd: Path::new(cwd), env: &environment };
        check_planted(&ParsedCommand::new(bash(script)), &ctx, &fs)
    };
    for (script, cwd) in [
        ("make test", "/home/u/ws"),
        ("npm test", "/home/u/ws/app"),
        ("cargo build --release", "/tmp/x"),
        ("python3 -m pytest -q", "/home/u/ws"),
        ("./build.sh", "/home/u/ws"),
        ("/tmp/tool --run", "/srv"),
    ] {
        let error = planted(script, cwd).unwrap_err();
        assert!(
            matches!(error, NotKnownSafe::WritableCode { .. }) && !error.is_coverable(),
            "{script}: {error}"
        );
        assert!(error.to_string().contains("may differ from what was approved"), "{error}");
    }
    for (script, cwd) in [("make test", "/srv"), ("npm view left-pad", "/home/u/ws"), ("ls", "/home/u/ws")] {
        assert_eq!(planted(script, cwd), Ok(()), "{script} in {cwd}");
    }
    // Only what the words show stays coverable; what cannot be followed counts as writable code.
    assert!(NotKnownSafe::GitInlineConfig.is_coverable() && NotKnownSafe::NotReadOnly.is_coverable());
    assert!(NotKnownSafe::Writable { what: "x".into(), path: "/w".into() }.is_coverable());
    assert!(!NotKnownSafe::GitAfterCd.is_coverable());
    assert!(!NotKnownSafe::CannotTell("x".into()).is_coverable());
}

/// `check_planted` of `argv` in `cwd` with `vars`, the workspace `/home/u/ws` and `/tmp` writable.
fn planted_argv(argv: Vec<String>, cwd: &str, vars: &[(&str, &str)]) -> Result<(), NotKnownSafe> {
    let fs = repo_fs();
    let mut environment = env(&BASE_ENV);
    environment.extend(env(vars));
    let writes = writes_of(&fs, &roots(&["/home/u/ws", "/tmp"]));
    let ctx = KnownSafeContext { writes: &writes, cwd: Path::new(cwd), env: &environment };
    check_planted(&ParsedCommand::new(argv), &ctx, &fs)
}

#[test]
fn wrappers_shells_and_interpreters_are_seen_through() {
    // Denied: what runs lies in a writable root, behind a wrapper, a shell, `.` or an interpreter.
    for (script, cwd) in [
        ("bash run-tests.sh", "/home/u/ws"),
        ("timeout 30 ./run-tests.sh", "/home/u/ws"),
        ("timeout -s KILL 20 ./build.sh", "/home/u/ws"),
        ("nice -n 5 ./x", "/home/u/ws"),
        ("env FOO=1 ./x", "/home/u/ws"),
        ("xargs -0 ./x", "/home/u/ws"),
        (". ./env.sh", "/home/u/ws"),
        ("source env.sh", "/home/u/ws"),
        ("sh /tmp/t.sh", "/srv"),
        ("timeout 5 bash /tmp/t.sh", "/srv"),
        ("python3 tools/gen.py", "/home/u/ws"),
        ("python3 -m pip install requests", "/home/u/ws"),
        ("python3 -c 'import json'", "/home/u/ws"),
        ("node -e 1", "/home/u/ws"),
        ("perl /tmp/x.pl", "/srv"),
        ("awk -f /tmp/prog.awk data", "/srv"),
        ("sed -f /tmp/e.sed f", "/srv"),
        ("nohup uv run serve", "/home/u/ws"),
    ] {
        let error = planted_argv(bash(script), cwd, &[]).unwrap_err();
        assert!(matches!(error, NotKnownSafe::WritableCode { .. }), "{script}: {error:?}");
        assert!(!error.is_coverable(), "{script}");
    }
    // Allowed twins: the same shapes with nothing in a writable root.
    for (script, cwd) in [
        ("timeout 30 ls", "/home/u/ws"),
        ("bash /usr/share/doc/x.sh", "/srv"),
        ("nice -n 5 ls", "/srv"),
        ("python3 -m pip install requests", "/srv"),
        ("python3 -I -m pip install requests", "/home/u/ws"),
        ("env FOO=1 ls", "/home/u/ws"),
        ("xargs -0 rm", "/home/u/ws"),
    ] {
        assert_eq!(planted_argv(bash(script), cwd, &[]), Ok(()), "{script} in {cwd}");
    }
}

#[test]
fn what_cannot_be_read_from_the_words_counts_as_written_code() {
    for script in ["./x > out", "cat x | bash", "eval \"$(cat f)\"", "bash -s", "xargs sh", "env -C /tmp ls"]
    {
        let error = planted_argv(bash(script), "/srv", &[]).unwrap_err();
        assert!(!error.is_coverable(), "{script}: {error:?}");
    }
    // A plain script of programs outside every root is read whole.
    assert_eq!(planted_argv(bash("ls && git --version"), "/srv", &[]), Ok(()));
}

#[test]
fn git_options_name_the_repository_that_is_checked() {
    for script in [
        "git -C /tmp/evil status",
        "git -C /tmp -C evil status",
        "git --git-dir=/tmp/evil/.git log",
        "git --work-tree /tmp/w status",
        "git --exec-path=/tmp/bin status",
        "timeout 20 git -C /tmp/evil status",
    ] {
        let error = planted_argv(bash(script), "/srv", &[]).unwrap_err();
        assert!(!error.is_coverable(), "{script}: {error:?}");
    }
    assert_eq!(planted_argv(bash("git -C /home/u/repo status"), "/srv", &[]), Ok(()));
    assert_eq!(
        planted_argv(bash("git -c core.pager=cat log"), "/srv", &[]),
        Err(NotKnownSafe::GitInlineConfig)
    );
    // An env assignment is seen by what it wraps.
    assert!(planted_argv(bash("env GIT_DIR=/tmp/evil/.git git log"), "/srv", &[]).is_err());
    assert!(planted_argv(bash("env PATH=/tmp/bin ls"), "/srv", &[]).is_err());
}

#[test]
fn interpreter_search_paths_and_options_in_writable_roots_are_named_and_scrubbed() {
    let fs = repo_fs();
    let writes = writes_of(&fs, &roots(&["/home/u/ws", "/tmp"]));
    for (name, value) in [
        ("PYTHONPATH", "/usr/lib/x:/tmp/py"),
        ("NODE_PATH", "/home/u/ws/node_modules"),
        ("PERL5LIB", "/tmp/perl"),
        ("RUBYLIB", "/tmp/rb"),
        ("PYTHONSTARTUP", "/tmp/start.py"),
        ("NODE_OPTIONS", "--max-old-space-size=100 --require /srv/x.js"),
        ("JAVA_TOOL_OPTIONS", "-javaagent:/tmp/a.jar"),
    ] {
        assert!(planted_argv(argv(&["ls"]), "/srv", &[(name, value)]).is_err(), "{name}");
        let environment = env(&[(name, value), ("PATH", "/usr/bin")]);
        let (kept, removed) = without_plantable_entries(&environment, Path::new("/srv"), &writes, &fs);
        assert!(removed.iter().any(|r| r.contains(name)), "{name}: {removed:?}");
        assert!(
            !kept.iter().any(|(k, v)| k == name && v.to_string_lossy().contains("/tmp")),
            "{name}: {kept:?}"
        );
    }
    // Allowed twins: outside every root, or options that load nothing.
    for (name, value) in [
        ("PYTHONPATH", "/usr/lib/py"),
        ("NODE_OPTIONS", "--max-old-space-size=100"),
        ("PERL5LIB", "/opt/perl"),
    ] {
        assert_eq!(planted_argv(argv(&["ls"]), "/srv", &[(name, value)]), Ok(()), "{name}");
        let environment = env(&[(name, value)]);
        let (kept, removed) = without_plantable_entries(&environment, Path::new("/srv"), &writes, &fs);
        assert!(removed.is_empty() && kept == environment, "{name}: {removed:?}");
    }
}
