//! Which adapters this platform gets: the sandbox chosen by `cfg(target_os)`, and the explicit stub for
//! platforms without one (a typed error, never a silent fallback to running unsandboxed).

use std::path::PathBuf;
use std::sync::Arc;

use uexec_domain::hidden::HiddenPaths;
use uexec_domain::{Protection, ProtectionStatus};
use uexec_domain::{ProtectionReport, SandboxKind, SandboxPolicy};
use uexec_ports::process::ProcessSpawner;
use uexec_ports::{Sandbox, SandboxError, SandboxRequest, SandboxedSpawn};

/// The sandbox of this platform, hiding nothing (for tests).
#[cfg(test)]
pub fn sandbox() -> Arc<dyn Sandbox> {
    sandbox_with(&SandboxSetup::default())
}

/// What the app adds to the platform's sandbox beyond the policy of each command.
#[derive(Debug, Clone, Default)]
pub struct SandboxSetup {
    /// The secret locations commands cannot read.
    pub hidden: HiddenPaths,
    /// macOS: commands may ask the keychain (`macos_keychain = true`).
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))]
    pub keychain: bool,
    /// Domain-allowlist mode: where commands reach the proxy.
    pub proxy: Option<ProxyRoute>,
    /// The directories `workspace-write` commands see copy-on-write, as `(name, path)`, and the directory of
    /// their upper layers' slots (Linux; elsewhere they stay read-only).
    pub copy_on_write: Option<(PathBuf, Vec<(String, PathBuf)>)>,
    /// Which other tools' files stay read-only (`allow_tool_files`).
    pub tool_files: uexec_domain::tool_files::ToolFiles,
    /// Linux: where the sandbox records the placeholders it makes and keeps loose git objects aside
    /// (`<state>/sandbox-leftovers`), so that it removes them when the last command ends.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub leftovers: Option<PathBuf>,
}

/// How sandboxed commands reach the proxy.
#[derive(Debug, Clone)]
pub enum ProxyRoute {
    /// Linux: a network namespace with only loopback, the proxy's listener inside.
    #[cfg(target_os = "linux")]
    Namespace(uexec_sandbox_linux::ProxyNamespace),
    /// Elsewhere: a port on the host's loopback, the only address the sandbox lets commands reach.
    #[cfg(not(target_os = "linux"))]
    Port(u16),
}

/// Make the proxy's route and its listening socket (the caller serves it). `rules` describes what the proxy
/// allows, for the protection report; `no_proxy` is the commands' `NO_PROXY` in the proxy's namespace (Linux:
/// `uexec_domain::network::namespace_no_proxy`; elsewhere loopback is the host's and every loopback host is
/// reached directly).
pub fn proxy_route(rules: String, no_proxy: String) -> anyhow::Result<(ProxyRoute, std::net::TcpListener)> {
    #[cfg(target_os = "linux")]
    {
        let (ns, listener) = uexec_sandbox_linux::ProxyNamespace::create(rules)?;
        Ok((ProxyRoute::Namespace(ns.with_no_proxy(no_proxy)), listener))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (rules, no_proxy);
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        Ok((ProxyRoute::Port(port), listener))
    }
}

/// The sandbox of this platform with `setup`, for the commands of [`spawner`].
pub fn sandbox_with(setup: &SandboxSetup) -> Arc<dyn Sandbox> {
    #[cfg(target_os = "linux")]
    {
        sandbox_in(setup, uexec_pty::sandbox_pid_namespace())
    }
    #[cfg(not(target_os = "linux"))]
    {
        sandbox_in(setup)
    }
}

/// A spawner and a sandbox for one client of a server that serves several (`--listen`): the client's sandboxed
/// commands get a PID namespace of their own (one sandbox per client: they see and signal each other across the
/// client's sessions, never another client's), which dies with the client's engine.
pub fn client_spawner_and_sandbox(setup: &SandboxSetup) -> (Arc<dyn ProcessSpawner>, Arc<dyn Sandbox>) {
    let spawner = uexec_pty::PtySpawner::default().with_own_sandbox_namespace();
    #[cfg(target_os = "linux")]
    let sandbox =
        sandbox_in(setup, spawner.sandbox_pid_namespace().map_err(|e| std::io::Error::other(e.to_string())));
    #[cfg(not(target_os = "linux"))]
    let sandbox = sandbox_in(setup);
    (crate::fdlimit::restore_in_children(Arc::new(spawner)), sandbox)
}

/// The sandbox of this platform with `setup`, whose commands run in the sandbox PID namespace `namespace`
/// (uexec-pty's, when it has one): then they share it, one sandbox per server (or client), whose commands see
/// and signal each other. Without it (or when it cannot be used) each command keeps its own signal scope and
/// `hidepid` view, which is safe, only less convenient.
/// The offline network namespace started before this thread entered a PID namespace (`uexec run` without a
/// terminal), for the one sandbox such a process makes.
#[cfg(target_os = "linux")]
static EARLY_OFFLINE: std::sync::Mutex<Option<uexec_sandbox_linux::OfflineNamespace>> =
    std::sync::Mutex::new(None);

/// Start the offline network namespace of commands with the network off now, while this process can still start
/// threads (see `uexec_sandbox_linux::OfflineNamespace::start`); the next sandbox made uses it.
pub fn start_offline_namespace_early() {
    #[cfg(target_os = "linux")]
    match uexec_sandbox_linux::OfflineNamespace::start() {
        Ok(offline) => {
            *EARLY_OFFLINE.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(offline);
        }
        Err(error) => tracing::debug!(%error, "no offline network namespace: lookups are not recorded"),
    }
}

#[cfg(target_os = "linux")]
fn sandbox_in(
    setup: &SandboxSetup,
    namespace: std::io::Result<Option<std::os::fd::OwnedFd>>,
) -> Arc<dyn Sandbox> {
    use std::os::fd::AsFd;
    let base = || {
        let sandbox = uexec_sandbox_linux::LinuxSandbox::default()
            .with_hidden(setup.hidden.clone())
            .with_tool_files(setup.tool_files.clone());
        let sandbox = match &setup.leftovers {
            Some(dir) => sandbox.with_state_dir(dir.clone()),
            None => sandbox,
        };
        match &setup.copy_on_write {
            Some((layers, dirs)) => sandbox.with_copy_on_write(
                layers.clone(),
                dirs.iter()
                    .map(|(name, path)| uexec_sandbox_linux::CopyOnWriteDir {
                        name: name.clone(),
                        path: path.clone(),
                    })
                    .collect(),
            ),
            None => sandbox,
        }
    };
    let shared =
        namespace.and_then(|namespace| namespace.map(|ns| base().with_pid_namespace(ns.as_fd())).transpose());
    let sandbox = match shared {
        Ok(Some(shared)) => shared,
        Ok(None) => base(),
        Err(error) => {
            tracing::warn!(%error, "sandboxed commands keep their own signal scope: no shared PID namespace");
            base()
        }
    };
    let early = EARLY_OFFLINE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    let sandbox = match early {
        Some(offline) => sandbox.with_offline_namespace(offline),
        None => sandbox,
    };
    match &setup.proxy {
        Some(ProxyRoute::Namespace(ns)) => Arc::new(sandbox.with_proxy(ns.clone())),
        None => Arc::new(sandbox),
    }
}

/// The sandbox of this platform with `setup` (one PID namespace here: the host's).
#[cfg(not(target_os = "linux"))]
fn sandbox_in(setup: &SandboxSetup) -> Arc<dyn Sandbox> {
    // No overlay without Linux: the copy-on-write directories stay read-only to sandboxed commands here.
    let _ = &setup.copy_on_write;
    #[cfg(target_os = "macos")]
    {
        let sandbox = uexec_sandbox_macos::SeatbeltSandbox::default()
            .with_hidden(setup.hidden.clone())
            .with_tool_files(setup.tool_files.clone())
            .with_keychain(setup.keychain);
        match &setup.proxy {
            Some(ProxyRoute::Port(port)) => Arc::new(sandbox.with_proxy_port(*port)),
            None => Arc::new(sandbox),
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = setup;
        Arc::new(UnsupportedSandbox)
    }
}

/// What this machine offers the sandbox, as `(mechanism, state)` lines for `uexec sandbox-report`.
pub fn machine_support() -> Vec<(String, String)> {
    #[cfg(target_os = "linux")]
    {
        use uexec_sandbox_linux::{Availability, KernelSupport, MountNamespace};
        let support = KernelSupport::detect();
        let landlock = match (support.landlock_abi, &support.landlock_missing) {
            (0, Some(reason)) => format!("unavailable: {reason}"),
            (0, None) => "unavailable".to_owned(),
            (abi, _) => format!("ABI {abi}"),
        };
        let seccomp = match &support.seccomp {
            Availability::Available => "available".to_owned(),
            Availability::Unavailable(reason) => format!("unavailable: {reason}"),
        };
        let mounts = match &support.mount_namespace {
            MountNamespace::Privileged => "available (CAP_SYS_ADMIN)".to_owned(),
            MountNamespace::UserNamespace => "available (unprivileged user namespace)".to_owned(),
            MountNamespace::Unavailable(reason) => format!("unavailable: {reason}"),
        };
        // What the domain allowlist, the offline namespace and the copy-on-write views are made in.
        let owned = match &support.mount_namespace {
            MountNamespace::Privileged => "made with CAP_SYS_ADMIN".to_owned(),
            MountNamespace::UserNamespace => match uexec_sandbox_linux::user_namespace_availability() {
                Availability::Available => {
                    "made in the sandbox's user namespace (no CAP_SYS_ADMIN)".to_owned()
                }
                Availability::Unavailable(reason) => format!("unavailable: {reason}"),
            },
            MountNamespace::Unavailable(_) => "unavailable: no mount namespace".to_owned(),
        };
        vec![
            ("landlock".to_owned(), landlock),
            ("seccomp".to_owned(), seccomp),
            ("mount namespace".to_owned(), mounts),
            ("network namespaces, overlays".to_owned(), owned),
        ]
    }
    #[cfg(target_os = "macos")]
    {
        let sandbox = uexec_sandbox_macos::SeatbeltSandbox::default();
        let state = match sandbox.unavailable_reason() {
            None => "available".to_owned(),
            Some(reason) => format!("unavailable: {reason}"),
        };
        vec![("sandbox-exec".to_owned(), state)]
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        vec![("sandbox".to_owned(), format!("none for {}", std::env::consts::OS))]
    }
}

/// The process spawner (PTY or pipes): uexec-pty's Linux fast path on Linux, its portable POSIX core elsewhere
/// (on macOS composed with the Seatbelt sandbox above; input-wait detection reports itself unavailable there).
/// Its commands get the descriptor limit uexec started with (`fdlimit`).
pub fn spawner() -> Arc<dyn ProcessSpawner> {
    crate::fdlimit::restore_in_children(Arc::new(uexec_pty::PtySpawner::default()))
}

/// The sandbox of a platform uexec has no sandbox for: every `prepare` fails with
/// [`SandboxError::Unsupported`], so nothing runs unless the policy is `danger-full-access` (for which the
/// engine never calls a sandbox).
///
/// Compiled on every platform so that its test runs everywhere; only platforms without a sandbox use it.
#[cfg_attr(any(target_os = "linux", target_os = "macos"), allow(dead_code))]
#[derive(Debug, Clone, Copy, Default)]
pub struct UnsupportedSandbox;

impl Sandbox for UnsupportedSandbox {
    fn kind(&self) -> SandboxKind {
        SandboxKind::None
    }

    fn report(&self, policy: &SandboxPolicy) -> ProtectionReport {
        let detail = format!("no sandbox exists for {}", std::env::consts::OS);
        ProtectionReport {
            sandbox: SandboxKind::None,
            policy: policy.mode_str().to_owned(),
            protections: ["filesystem", "network"]
                .into_iter()
                .map(|name| Protection {
                    name: name.to_owned(),
                    status: ProtectionStatus::Off,
                    detail: detail.clone(),
                })
                .collect(),
            escape_reason: None,
        }
    }

    fn prepare(&self, request: SandboxRequest) -> Result<SandboxedSpawn, SandboxError> {
        Err(SandboxError::Unsupported(format!(
            "{} (policy {}); only --sandbox danger-full-access can run commands here",
            std::env::consts::OS,
            request.policy.mode_str()
        )))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use uexec_ports::process::{IoMode, SpawnRequest};

    use super::*;

    #[test]
    fn unsupported_sandbox_refuses_and_reports_everything_off() {
        let sandbox = UnsupportedSandbox;
        let policy = SandboxPolicy::default();
        let report = sandbox.report(&policy);
        assert!(report.is_degraded());
        assert_eq!(report.policy, "workspace-write");
        let request = SandboxRequest {
            spawn: SpawnRequest {
                argv: vec!["true".into()],
                cwd: "/".into(),
                env: Vec::new(),
                mode: IoMode::Pipes,
                setup: Vec::new(),
                pid_scope: Default::default(),
            },
            workspace: "/".into(),
            policy,
            tmpdir: None,
            allow_degraded: true,
        };
        let err = sandbox.prepare(request).unwrap_err();
        assert!(matches!(err, SandboxError::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("danger-full-access"));
    }
}
