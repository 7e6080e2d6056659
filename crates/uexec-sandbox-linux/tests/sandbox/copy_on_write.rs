//! Copy-on-write views (cargo's home): a sandboxed command reads the person's directory, writes and modifies
//! files in it through the overlay, the next command of the same sandbox sees those writes, the person's
//! directory stays byte for byte what it was, the rest of the home stays read-only, a hidden credentials file
//! inside the view stays hidden, and two sandboxes never share an upper layer.

use std::fs;
use std::path::{Path, PathBuf};

use uexec_domain::ProtectionStatus;
use uexec_domain::hidden::{HiddenPaths, HiddenPattern};
use uexec_ports::{Sandbox, SandboxedSpawn};
use uexec_sandbox_linux::{CopyOnWriteDir, LinuxSandbox};

use crate::common::{Probe, Scratch, request, run, workspace_only};

/// Every file beneath `dir` with its bytes, sorted (directories as entries without content).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut entries = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(dir).unwrap().to_path_buf();
            if fs::symlink_metadata(&path).unwrap().is_dir() {
                entries.push((relative, None));
                stack.push(path);
            } else {
                entries.push((relative, Some(fs::read(&path).unwrap())));
            }
        }
    }
    entries.sort();
    entries
}

/// A fake home with a cargo home holding a cached crate file and credentials.
struct Fixture {
    scratch: Scratch,
    home: PathBuf,
    cargo: PathBuf,
    overlays: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let scratch = Scratch::new();
        let home = scratch.base.join("home");
        let cargo = home.join(".cargo");
        fs::create_dir_all(cargo.join("registry/cache")).unwrap();
        fs::write(cargo.join("registry/cache/crate.txt"), "original\n").unwrap();
        fs::write(cargo.join("config.toml"), "[net]\n").unwrap();
        fs::write(cargo.join("credentials.toml"), "SECRET\n").unwrap();
        fs::write(home.join(".bashrc"), "# the person's\n").unwrap();
        let overlays = scratch.base.join("state/sandbox-overlays");
        Fixture { scratch, home, cargo, overlays }
    }

    /// A sandbox hiding the default secrets of the fake home, with or without the copy-on-write view.
    fn sandbox(&self, copy_on_write: bool) -> LinuxSandbox {
        let hidden = HiddenPaths {
            home: Some(self.home.clone()),
            patterns: HiddenPattern::defaults(),
            reachable: Vec::new(),
        };
        let sandbox = LinuxSandbox::default().with_hidden(hidden);
        if !copy_on_write {
            return sandbox;
        }
        let dirs = vec![CopyOnWriteDir { name: "cargo".into(), path: self.cargo.clone() }];
        sandbox.with_copy_on_write(self.overlays.clone(), dirs)
    }

    fn prepare(&self, sandbox: &LinuxSandbox, script: &str) -> SandboxedSpawn {
        let request = request(workspace_only(vec![], true), &["bash", "-c", script], &self.scratch.ws);
        sandbox.prepare(request).unwrap()
    }

    fn run(&self, sandbox: &LinuxSandbox, script: &str) -> Probe {
        run(&self.prepare(sandbox, script))
    }
}

/// Try to write `path`: prints `wrote <path>` or `denied <path>`.
fn try_write(path: &Path) -> String {
    format!(
        "if echo poison >> '{0}' 2>/dev/null; then echo 'wrote {0}'; else echo 'denied {0}'; fi\n",
        path.display()
    )
}

#[test]
fn the_view_is_writable_the_persons_directory_is_never_written_and_secrets_stay_hidden() {
    let f = Fixture::new();
    let before = snapshot(&f.cargo);
    let sandbox = f.sandbox(true);
    let cache = f.cargo.join("registry/cache");
    let mut script = format!(
        "cat '{0}/crate.txt' && echo new > '{0}/new.txt' && echo modified >> '{0}/crate.txt' && \
         mkdir -p '{1}/registry/src/x' && echo src > '{1}/registry/src/x/lib.rs' && echo VIEW-WRITTEN\n",
        cache.display(),
        f.cargo.display()
    );
    script.push_str(&try_write(&f.home.join(".bashrc")));
    script.push_str(&try_write(&f.home.join("planted")));
    let credentials = f.cargo.join("credentials.toml");
    script.push_str(&format!(
        "if cat '{0}' 2>/dev/null; then echo 'read {0}'; else echo 'hidden {0}'; fi\n",
        credentials.display()
    ));
    let prepared = f.prepare(&sandbox, &script);
    let out = run(&prepared);
    assert!(out.ok(), "{out:?}");
    assert!(out.stdout.starts_with("original\nVIEW-WRITTEN\n"), "{out:?}");
    assert!(out.stdout.contains(&format!("denied {}", f.home.join(".bashrc").display())), "{out:?}");
    assert!(out.stdout.contains(&format!("denied {}", f.home.join("planted").display())), "{out:?}");
    assert!(out.stdout.contains(&format!("hidden {}", credentials.display())), "{out:?}");
    assert!(!out.stdout.contains("SECRET"), "{out:?}");

    // The person's directory is unchanged, byte for byte; the writes are in the sandbox's upper layer.
    assert_eq!(snapshot(&f.cargo), before);
    assert_eq!(fs::read_to_string(f.home.join(".bashrc")).unwrap(), "# the person's\n");
    assert!(!f.home.join("planted").exists());
    let layers = sandbox.copy_on_write_layers();
    let canonical = fs::canonicalize(&f.cargo).unwrap();
    let upper = fs::canonicalize(&f.overlays).unwrap().join("0/cargo/upper");
    assert_eq!(layers, vec![(canonical.clone(), upper.clone())]);
    assert_eq!(fs::read_to_string(upper.join("registry/cache/new.txt")).unwrap(), "new\n");
    assert_eq!(fs::read_to_string(upper.join("registry/cache/crate.txt")).unwrap(), "original\nmodified\n");

    // The report names the view and its upper layer.
    let entry = prepared.report.protections.iter().find(|p| p.name == "copy_on_write").unwrap();
    assert_eq!(entry.status, ProtectionStatus::Enforced);
    assert!(
        entry.detail.contains(&format!("{} (writes land in {})", canonical.display(), upper.display())),
        "{entry:?}"
    );
    assert!(!prepared.report.is_degraded(), "{}", prepared.report);

    // The next command of the same sandbox sees the first one's writes; the credentials stay hidden.
    let again = f.run(
        &sandbox,
        &format!(
            "cat '{0}/new.txt' '{0}/crate.txt' '{1}/registry/src/x/lib.rs'; cat '{2}' 2>/dev/null || echo HIDDEN",
            cache.display(),
            f.cargo.display(),
            credentials.display()
        ),
    );
    assert_eq!(again.stdout, "new\noriginal\nmodified\nsrc\nHIDDEN\n", "{again:?}");

    // The twin: without the view the same directory is read-only to sandboxed commands.
    let plain = f.run(&f.sandbox(false), &try_write(&cache.join("crate.txt")));
    assert_eq!(plain.stdout, format!("denied {}\n", cache.join("crate.txt").display()), "{plain:?}");
    assert_eq!(snapshot(&f.cargo), before);
}

#[test]
fn two_sandboxes_take_different_slots_and_do_not_see_each_others_writes() {
    let f = Fixture::new();
    let first = f.sandbox(true);
    let second = f.sandbox(true);
    let new = f.cargo.join("registry/cache/new.txt");
    let out = f.run(&first, &format!("echo first > '{}' && echo OK", new.display()));
    assert_eq!(out.stdout, "OK\n", "{out:?}");
    let out =
        f.run(&second, &format!("cat '{0}' 2>/dev/null || echo ABSENT; echo second > '{0}'", new.display()));
    assert_eq!(out.stdout, "ABSENT\n", "{out:?}");
    let (a, b) = (first.copy_on_write_layers(), second.copy_on_write_layers());
    assert_eq!((a.len(), b.len()), (1, 1));
    assert_ne!(a[0].1, b[0].1, "each sandbox has its own upper layer");
    assert!(a[0].1.ends_with("0/cargo/upper") && b[0].1.ends_with("1/cargo/upper"), "{a:?} {b:?}");
    assert_eq!(fs::read_to_string(a[0].1.join("registry/cache/new.txt")).unwrap(), "first\n");
    assert_eq!(fs::read_to_string(b[0].1.join("registry/cache/new.txt")).unwrap(), "second\n");
    assert!(!new.exists());
    // Once the first sandbox is gone, its slot (and its layer) is free for the next one.
    drop(first);
    let third = f.sandbox(true);
    let out = f.run(&third, &format!("cat '{}'", new.display()));
    assert_eq!(out.stdout, "first\n", "{out:?}");
    assert_eq!(third.copy_on_write_layers()[0].1, a[0].1);
}

#[test]
fn no_view_where_it_would_overlap_a_writable_root_or_the_directory_is_missing() {
    let f = Fixture::new();
    // The layers inside a writable root: commands could write the upper layer directly, so there is no view.
    let sandbox = LinuxSandbox::default().with_copy_on_write(
        f.scratch.ws.join("overlays"),
        vec![
            CopyOnWriteDir { name: "cargo".into(), path: f.cargo.clone() },
            CopyOnWriteDir { name: "gradle".into(), path: f.home.join(".gradle") },
        ],
    );
    let target = f.cargo.join("registry/cache/crate.txt");
    let prepared = f.prepare(&sandbox, &try_write(&target));
    let out = run(&prepared);
    assert_eq!(out.stdout, format!("denied {}\n", target.display()), "{out:?}");
    let entry = prepared.report.protections.iter().find(|p| p.name == "copy_on_write").unwrap();
    assert_eq!(entry.status, ProtectionStatus::Enforced, "the person's directory is still never written");
    assert!(entry.detail.contains("overlap the writable root"), "{entry:?}");
    assert!(entry.detail.contains(".gradle: does not exist"), "{entry:?}");
    assert!(!prepared.report.is_degraded());
    // The twin: the same directories with the layers outside every writable root.
    let sandbox = f.sandbox(true);
    let out = f.run(&sandbox, &try_write(&target));
    assert_eq!(out.stdout, format!("wrote {}\n", target.display()), "{out:?}");
    assert_eq!(fs::read_to_string(&target).unwrap(), "original\n");
}

#[test]
fn the_user_namespace_strategy_gets_the_view_in_the_sandboxs_user_namespace() {
    use std::os::unix::fs::MetadataExt;

    use uexec_sandbox_linux::{KernelSupport, MountNamespace};
    // What an ordinary user gets: the commands enter the sandbox's user namespace, where a forked helper made
    // the overlay.
    let f = Fixture::new();
    let before = snapshot(&f.cargo);
    let support = KernelSupport { mount_namespace: MountNamespace::UserNamespace, ..KernelSupport::detect() };
    let dirs = vec![CopyOnWriteDir { name: "cargo".into(), path: f.cargo.clone() }];
    let hidden = HiddenPaths {
        home: Some(f.home.clone()),
        patterns: HiddenPattern::defaults(),
        reachable: Vec::new(),
    };
    let sandbox =
        LinuxSandbox::with_support(support).with_hidden(hidden).with_copy_on_write(f.overlays.clone(), dirs);
    let target = f.cargo.join("registry/cache/crate.txt");
    let credentials = f.cargo.join("credentials.toml");
    let script = format!(
        "{}{}stat -c '%u:%g' '{}'; cat '{}' 2>/dev/null || echo HIDDEN",
        try_write(&target),
        try_write(&f.home.join(".bashrc")),
        target.display(),
        credentials.display()
    );
    let prepared = f.prepare(&sandbox, &script);
    let out = run(&prepared);
    // SAFETY: geteuid and getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    assert_eq!(
        out.stdout,
        format!(
            "wrote {}\ndenied {}\n{uid}:{gid}\nHIDDEN\n",
            target.display(),
            f.home.join(".bashrc").display()
        ),
        "the view is writable, the file keeps the person's ids, the rest stays read-only and hidden: {out:?}"
    );
    let entry = prepared.report.protections.iter().find(|p| p.name == "copy_on_write").unwrap();
    assert!(entry.detail.contains("copy-on-write views (overlayfs)"), "{entry:?}");
    let metadata = prepared.report.protections.iter().find(|p| p.name == "metadata").unwrap();
    assert!(metadata.detail.contains("the sandbox's user namespace"), "{metadata:?}");
    assert!(!prepared.report.is_degraded(), "{}", prepared.report);
    // The person's directory is never written; the write is in the upper layer, owned by the person.
    assert_eq!(snapshot(&f.cargo), before);
    let layers = sandbox.copy_on_write_layers();
    assert_eq!(layers.len(), 1);
    let written = layers[0].1.join("registry/cache/crate.txt");
    assert_eq!(fs::read_to_string(&written).unwrap(), "original\npoison\n");
    assert_eq!(fs::metadata(&written).unwrap().uid(), uid);
    // The twin: without the view the same directory is read-only to sandboxed commands.
    let plain = f.run(&f.sandbox(false), &try_write(&target));
    assert_eq!(plain.stdout, format!("denied {}\n", target.display()), "{plain:?}");
}

#[test]
fn commands_sharing_a_mount_template_share_the_view_and_its_protections() {
    use std::os::fd::AsFd;

    use crate::process::{pid_namespace_with_init, run_in_pid_namespace};
    let f = Fixture::new();
    let before = snapshot(&f.cargo);
    let (mut init, namespace) = pid_namespace_with_init();
    let sandbox = f.sandbox(true).with_pid_namespace(namespace.as_fd()).expect("the namespace is identified");
    let counter = f.cargo.join("registry/cache/counter.txt");
    let credentials = f.cargo.join("credentials.toml");
    let script = format!(
        "readlink /proc/self/ns/mnt; echo x >> '{0}'; wc -l < '{0}'; {1}cat '{2}' 2>/dev/null || echo HIDDEN",
        counter.display(),
        try_write(&f.home.join(".bashrc")),
        credentials.display()
    );
    let mut namespaces = Vec::new();
    for n in 1..=3 {
        let prepared =
            sandbox.prepare(request(workspace_only(vec![], true), &["bash", "-c", &script], &f.scratch.ws));
        let out = run_in_pid_namespace(&namespace, &prepared.unwrap().spawn);
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 4, "{out:?}");
        namespaces.push(lines[0].to_owned());
        assert_eq!(
            lines[1].trim(),
            n.to_string(),
            "each command sees the writes of the ones before: {out:?}"
        );
        assert_eq!(lines[2], format!("denied {}", f.home.join(".bashrc").display()), "{out:?}");
        assert_eq!(lines[3], "HIDDEN", "{out:?}");
    }
    // The second and third commands entered one template (built from the same plan), with the view in it.
    assert_eq!(namespaces[1], namespaces[2], "{namespaces:?}");
    assert_eq!(snapshot(&f.cargo), before);
    assert!(!counter.exists());
    let _ = init.kill();
    let _ = init.wait();
}

#[test]
fn offline_commands_get_no_view_and_no_overlay_is_made() {
    let f = Fixture::new();
    let before = snapshot(&f.cargo);
    let sandbox = f.sandbox(true);
    let cache = f.cargo.join("registry/cache");
    let script = format!("cat '{0}/crate.txt'\n{1}", cache.display(), try_write(&cache.join("crate.txt")));
    let offline = request(workspace_only(vec![], false), &["bash", "-c", &script], &f.scratch.ws);
    let prepared = sandbox.prepare(offline).unwrap();
    let out = run(&prepared);
    // Offline the person's directory serves the command read-only, as it is.
    assert_eq!(out.stdout, format!("original\ndenied {}\n", cache.join("crate.txt").display()), "{out:?}");
    assert_eq!(snapshot(&f.cargo), before);
    assert!(sandbox.copy_on_write_layers().is_empty(), "no overlay was made for an offline command");
    let entry = prepared.report.protections.iter().find(|p| p.name == "copy_on_write").unwrap();
    assert_eq!(entry.status, ProtectionStatus::NotRequested);
    assert!(entry.detail.contains("network off"), "{}", entry.detail);
    // The twin: the same sandbox gives a command with network the view.
    let out = f.run(&sandbox, &try_write(&cache.join("crate.txt")));
    assert_eq!(out.stdout, format!("wrote {}\n", cache.join("crate.txt").display()), "{out:?}");
    assert_eq!(snapshot(&f.cargo), before);
    assert_eq!(sandbox.copy_on_write_layers().len(), 1);
}
