//! Benchmark: `exec_command` of `true` with `login: true` against the same call with `login: false`, in the
//! sandbox (workspace-write), on a HOME whose `.bashrc` takes 100 ms (its `.profile` sources it, as Debian's
//! does). With the login snapshot, the startup files run once per server: the target is a ratio of at most
//! 1.2. The same call on an engine without a snapshot directory (every command a login shell) is measured for
//! comparison.
//!
//! Run: `cargo bench -p tests --bench login_snapshot` (`-- --quick` for 15 rounds instead of 60). Prints the
//! medians, p10 and p90. A figure, not a test: nothing is asserted about timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout)]

#[cfg(target_os = "linux")]
mod bench {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use tests::NobodyToAsk;
    use uexec_engine::{Engine, EngineConfig, EngineDeps, ExecCommandRequest};
    use uexec_ports::{EventSink, ExecEvent};
    use uexec_pty::PtySpawner;
    use uexec_sandbox_linux::LinuxSandbox;

    struct Discard;

    impl EventSink for Discard {
        fn emit(&self, _event: ExecEvent) {}
    }

    fn engine(workspace: &Path, home: &Path, snapshot_dir: Option<&Path>) -> Engine {
        let mut config = EngineConfig::new(workspace.to_path_buf());
        config.base_env = std::env::vars_os()
            .filter(|(k, _)| k != "HOME" && k != "TMPDIR" && k != "BASH_ENV")
            .chain([("HOME".into(), home.as_os_str().to_owned())])
            .collect();
        config.snapshot_dir = snapshot_dir.map(Path::to_path_buf);
        Engine::new(
            config,
            EngineDeps {
                spawner: Arc::new(PtySpawner::default()),
                sandbox: Arc::new(LinuxSandbox::default()),
                approver: Arc::new(NobodyToAsk),
                events: Arc::new(Discard),
            },
        )
    }

    async fn once(engine: &Engine, login: bool) -> Duration {
        let start = Instant::now();
        let r = engine
            .exec_command(ExecCommandRequest {
                cmd: "true".into(),
                login: Some(login),
                yield_time_ms: Some(30_000),
                ..Default::default()
            })
            .await
            .unwrap();
        let elapsed = start.elapsed();
        assert_eq!(r.exit_code, Some(0), "{}", r.output);
        elapsed
    }

    fn median(samples: &mut [Duration]) -> (f64, f64, f64) {
        samples.sort();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1000.0;
        (at(0.5), at(0.1), at(0.9))
    }

    pub fn main() {
        let quick = std::env::args().any(|a| a == "--quick");
        let rounds = if quick { 15 } else { 60 };
        // Outside /tmp: neither HOME nor the snapshots may lie in a writable root.
        let base = tempfile::Builder::new().prefix("uexec-bench-login-").tempdir_in("/var/tmp").unwrap();
        let (workspace, home, state) =
            (base.path().join("ws"), base.path().join("home"), base.path().join("state"));
        for dir in [&workspace, &home] {
            std::fs::create_dir(dir).unwrap();
        }
        std::fs::write(home.join(".bashrc"), "sleep 0.1\nexport FROM_BASHRC=1\n").unwrap();
        std::fs::write(home.join(".profile"), ". \"$HOME/.bashrc\"\n").unwrap();
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let snapshots = engine(&workspace, &home, Some(&state));
            let plain = engine(&workspace, &home, None);
            // Warm up (the first login call captures the snapshot).
            for _ in 0..3 {
                once(&snapshots, true).await;
                once(&snapshots, false).await;
            }
            once(&plain, true).await;
            let (mut login, mut no_login, mut every) = (Vec::new(), Vec::new(), Vec::new());
            // The order alternates each round: the call right after the 100 ms one (the CPU idle in between)
            // is the slower one, whichever it is, so neither side always takes that place.
            for round in 0..rounds {
                every.push(once(&plain, true).await);
                if round % 2 == 0 {
                    login.push(once(&snapshots, true).await);
                    no_login.push(once(&snapshots, false).await);
                } else {
                    no_login.push(once(&snapshots, false).await);
                    login.push(once(&snapshots, true).await);
                }
            }
            snapshots.shutdown().await;
            plain.shutdown().await;
            let (l, l10, l90) = median(&mut login);
            let (n, n10, n90) = median(&mut no_login);
            let (e, e10, e90) = median(&mut every);
            println!(
                "login_snapshot: {rounds} rounds of sandboxed exec_command `true`, .bashrc sleeps 100 ms"
            );
            println!("  login: true (snapshot)        median {l:.2} ms (p10 {l10:.2}, p90 {l90:.2})");
            println!("  login: false                  median {n:.2} ms (p10 {n10:.2}, p90 {n90:.2})");
            println!("  login: true (no snapshot dir) median {e:.2} ms (p10 {e10:.2}, p90 {e90:.2})");
            println!("metric: login-snapshot-ratio = {:.3}", l / n);
            println!("target: exec_command login/no-login with a 100 ms .bashrc = {:.2}x (<= 1.2x)", l / n);
        });
    }
}

fn main() {
    #[cfg(target_os = "linux")]
    bench::main();
}
