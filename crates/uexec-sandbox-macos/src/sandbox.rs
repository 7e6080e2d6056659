//! The [`Sandbox`] port on Seatbelt: wraps a command in `sandbox-exec` and reports what the profile enforces.
//!
//! The adapter exists on every OS so the app can show the macOS profile anywhere, but it refuses to prepare a
//! command where `sandbox-exec` cannot run, unless it was built with [`SeatbeltSandbox::for_inspection`]:
//! nothing ever silently runs unsandboxed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use uexec_domain::hidden::HiddenPaths;
use uexec_domain::{Protection, ProtectionStatus};
use uexec_domain::{ProtectionReport, SandboxKind, SandboxPolicy};
use uexec_ports::process::PidScope;
use uexec_ports::{Sandbox, SandboxError, SandboxRequest, SandboxedSpawn};

use crate::extras::{Extras, extend_launch, resolve_hidden, with_macos_secrets};
use crate::profile::{BASE_PROFILE, NETWORK_PROFILE, SANDBOX_EXEC, SeatbeltLaunch, build_launch_with};
use uexec_domain::tool_files::ToolFiles;
use uexec_plan::{HostView, RealHost};

#[cfg(test)]
use uexec_domain::env::{ENV_NETWORK_DISABLED, ENV_SANDBOX};

/// Whether this host can run `sandbox-exec`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// macOS with `/usr/bin/sandbox-exec` present.
    Available,
    /// Not: the reason, for errors and reports.
    Unavailable(String),
}

impl Host {
    /// Looks at the running host.
    fn detect() -> Self {
        if !cfg!(target_os = "macos") {
            Host::Unavailable(format!("sandbox-exec is macOS-only; this host runs {}", std::env::consts::OS))
        } else if !Path::new(SANDBOX_EXEC).is_file() {
            Host::Unavailable(format!("{SANDBOX_EXEC} is missing on this Mac"))
        } else {
            Host::Available
        }
    }
}

/// The macOS sandbox: `sandbox-exec` with a profile generated from the policy.
///
/// [`Default`] gives the enforcing adapter (the one the app uses on macOS); [`SeatbeltSandbox::for_inspection`]
/// gives one that also prepares commands where `sandbox-exec` is unavailable, for showing the profile and the
/// command line (running such a command fails: `/usr/bin/sandbox-exec` does not exist there).
#[derive(Debug, Clone)]
pub struct SeatbeltSandbox {
    view: Arc<dyn HostView>,
    host: Host,
    generate_only: bool,
    hidden: HiddenPaths,
    proxy_port: Option<u16>,
    keychain: bool,
    tool_files: ToolFiles,
}

impl Default for SeatbeltSandbox {
    /// The enforcing adapter on the real filesystem: `prepare` fails with [`SandboxError::Unsupported`] where
    /// `sandbox-exec` is unavailable.
    fn default() -> Self {
        SeatbeltSandbox {
            view: Arc::new(RealHost),
            host: Host::detect(),
            generate_only: false,
            hidden: HiddenPaths::default(),
            proxy_port: None,
            keychain: false,
            tool_files: ToolFiles::all(),
        }
    }
}

impl SeatbeltSandbox {
    /// An adapter that generates profiles and command lines on any host, for inspection. Its reports still say
    /// plainly when `sandbox-exec` is unavailable here (every protection `off`).
    pub fn for_inspection() -> Self {
        SeatbeltSandbox { generate_only: true, ..SeatbeltSandbox::default() }
    }

    /// The same adapter reading the file system through `view` (`uexec_plan::FakeHost` in tests).
    #[must_use]
    pub fn with_view(self, view: Arc<dyn HostView>) -> Self {
        SeatbeltSandbox { view, ..self }
    }

    /// The same adapter hiding `hidden` from every command (`deny file-read*` on each match, under every
    /// spelling). When `hidden` holds the default secret locations, the macOS secret stores join them
    /// (`~/Library/Keychains`, browser cookie and password stores, Mail and Messages).
    #[must_use]
    pub fn with_hidden(self, hidden: HiddenPaths) -> Self {
        SeatbeltSandbox { hidden: with_macos_secrets(&hidden), ..self }
    }

    /// The same adapter keeping the other tools' files `tool_files` protects (`uexec_domain::tool_files`; all of
    /// them by default) read-only in every writable root.
    #[must_use]
    pub fn with_tool_files(self, tool_files: ToolFiles) -> Self {
        SeatbeltSandbox { tool_files, ..self }
    }

    /// The same adapter letting commands reach the keychain (`com.apple.SecurityServer`) when `allow` is true:
    /// what the person opts in to with `macos_keychain = true`. Off by default, because the keychain gives out
    /// stored tokens without a prompt (`git credential-osxkeychain get`).
    #[must_use]
    pub fn with_keychain(self, allow: bool) -> Self {
        SeatbeltSandbox { keychain: allow, ..self }
    }

    /// The same adapter in domain-allowlist mode: a policy with network access reaches only TCP `port` on
    /// localhost, where the app serves its proxy.
    #[must_use]
    pub fn with_proxy_port(self, port: u16) -> Self {
        SeatbeltSandbox { proxy_port: Some(port), ..self }
    }

    /// Why `sandbox-exec` cannot run on this host, or `None` when it can.
    pub fn unavailable_reason(&self) -> Option<&str> {
        match &self.host {
            Host::Available => None,
            Host::Unavailable(reason) => Some(reason),
        }
    }

    /// The profile and command line for a command, without the host check (what `prepare` would return).
    ///
    /// # Errors
    /// As [`build_launch`], and [`SandboxError::InHiddenLocation`] for a workspace in a hidden location.
    pub fn launch(
        &self,
        policy: &SandboxPolicy,
        cwd: &Path,
        tmpdir: Option<&Path>,
        argv: &[OsString],
    ) -> Result<SeatbeltLaunch, SandboxError> {
        self.launch_in(policy, cwd, cwd, tmpdir, argv)
    }

    /// [`SeatbeltSandbox::launch`] for a command of the workspace `workspace` that starts in `cwd`.
    fn launch_in(
        &self,
        policy: &SandboxPolicy,
        workspace: &Path,
        cwd: &Path,
        tmpdir: Option<&Path>,
        argv: &[OsString],
    ) -> Result<SeatbeltLaunch, SandboxError> {
        let hidden = resolve_hidden(&*self.view, &self.hidden, workspace, cwd)?;
        let launch = build_launch_with(policy, workspace, tmpdir, argv, &*self.view, &self.tool_files)?;
        Ok(extend_launch(
            launch,
            &Extras { hidden: &hidden, proxy_port: self.proxy_port, keychain: self.keychain },
        ))
    }

    /// The report for `policy`; with a `launch`, its details count the actual roots.
    fn build_report(&self, policy: &SandboxPolicy, launch: Option<&SeatbeltLaunch>) -> ProtectionReport {
        let mut report = report(policy, self.unavailable_reason(), launch);
        if matches!(policy, SandboxPolicy::WorkspaceWrite { .. })
            && let Some(filesystem) = report.protections.iter_mut().find(|p| p.name == "filesystem")
        {
            filesystem.detail.push_str(&format!(
                "; read-only: {} (set {} to allow one)",
                self.tool_files.text(),
                uexec_domain::tool_files::ALLOW_KEY
            ));
        }
        report.protections.push(if self.keychain {
            protection(
                "keychain",
                ProtectionStatus::NotRequested,
                "reachable: the person opted in (macos_keychain = true)".to_owned(),
            )
        } else {
            enforced(
                "keychain",
                "com.apple.SecurityServer denied: stored passwords and tokens stay out of reach".to_owned(),
                self.unavailable_reason(),
            )
        });
        report
    }
}

impl Sandbox for SeatbeltSandbox {
    fn kind(&self) -> SandboxKind {
        SandboxKind::MacosSeatbelt
    }

    fn report(&self, policy: &SandboxPolicy) -> ProtectionReport {
        self.build_report(policy, None)
    }

    fn prepare(&self, request: SandboxRequest) -> Result<SandboxedSpawn, SandboxError> {
        if let Some(reason) = self.unavailable_reason()
            && !self.generate_only
        {
            return Err(SandboxError::Unsupported(format!(
                "{reason}; nothing was run (SeatbeltSandbox::for_inspection generates the profile without running it)"
            )));
        }
        // Seatbelt enforces the whole profile or refuses to start the command: there is no partial mode for
        // `allow_degraded` to accept.
        let SandboxRequest { mut spawn, workspace, policy, tmpdir, allow_degraded: _ } = request;
        let launch = self.launch_in(&policy, &workspace, &spawn.cwd, tmpdir.as_deref(), &spawn.argv)?;
        let mut report = self.build_report(&policy, Some(&launch));
        if !self.hidden.is_empty() {
            let hidden: Vec<String> = launch
                .params
                .iter()
                .filter(|(name, _)| name.starts_with("HIDDEN_"))
                .map(|(_, path)| PathBuf::from(path).display().to_string())
                .collect();
            let mut what = if hidden.is_empty() { "none present".to_owned() } else { hidden.join(", ") };
            if !self.hidden.reachable.is_empty() {
                what.push_str(&format!(" (reachable on purpose: {})", self.hidden.reachable.join("; ")));
            }
            report.protections.push(enforced(
                "hidden_paths",
                format!("deny file-read* and file-write* on {what}"),
                self.unavailable_reason(),
            ));
        }
        if let Some(port) = self.proxy_port.filter(|_| policy.has_network_access())
            && let Some(network) = report.protections.iter_mut().find(|p| p.name == "network")
        {
            *network = enforced(
                "network",
                format!(
                    "only TCP to uexec's proxy on localhost:{port}, which applies the domain allowlist and \
                     resolves names itself, and loopback (the host's: services on 127.0.0.1 are reachable); \
                     every other address, UDP and DNS denied; Unix sockets only beneath the writable roots"
                ),
                self.unavailable_reason(),
            );
        }
        spawn.argv = launch.argv;
        spawn.env = sandbox_env(std::mem::take(&mut spawn.env), policy.has_network_access());
        if let Some(port) = self.proxy_port.filter(|_| policy.has_network_access()) {
            let names = uexec_domain::network::proxy_env_names();
            spawn.env.retain(|(name, _)| !names.iter().any(|n| name == n.as_str()));
            spawn.env.extend(
                uexec_domain::network::proxy_env(port).into_iter().map(|(k, v)| (k.into(), v.into())),
            );
            spawn.env = ipv4_loopback_env(std::mem::take(&mut spawn.env));
        }
        // Every sandboxed command shares the process adapter's sandbox PID namespace, where there is one.
        spawn.pid_scope = PidScope::Sandbox;
        Ok(SandboxedSpawn { spawn, report, lease: uexec_ports::SandboxLease::NONE })
    }

    /// A tool whose own sandbox cannot start inside Seatbelt (`crate::nested_sandbox_hint`): the script's words
    /// are the tool's (`bash -lc "swift build"` names `swift`).
    fn denial_hint(&self, argv: &[OsString], output: &[u8]) -> Option<String> {
        let words: Vec<OsString> = argv
            .iter()
            .flat_map(|arg| arg.to_string_lossy().split_whitespace().map(OsString::from).collect::<Vec<_>>())
            .collect();
        crate::nested_sandbox_hint(&words, output).map(str::to_owned)
    }
}

/// `env` with the `UEXEC_SANDBOX*` variables of a Seatbelt command: `UEXEC_SANDBOX=macos-seatbelt`, and
/// `UEXEC_SANDBOX_NETWORK_DISABLED=1` when `network` is false. Inherited values of these names are replaced, so
/// a command never sees a stale claim.
pub(crate) fn sandbox_env(env: Vec<(OsString, OsString)>, network: bool) -> Vec<(OsString, OsString)> {
    macos_locale(uexec_domain::env::with_sandbox_vars(env, SandboxKind::MacosSeatbelt, network))
}

/// The locale uexec forces (`C.UTF-8`, `uexec_domain::env::FORCED_ENV`) exists on macOS only from macOS 15;
/// on 13 and 14 bash, perl and Ruby warn or refuse. `en_US.UTF-8` exists on every macOS and is the same UTF-8
/// character type with C-like collation for what uexec forces it for; other values are the person's own.
pub(crate) const MACOS_UTF8_LOCALE: &str = "en_US.UTF-8";

/// `env` with every `LANG`, `LC_CTYPE`, `LC_ALL` of `C.UTF-8` replaced by [`MACOS_UTF8_LOCALE`].
pub(crate) fn macos_locale(env: Vec<(OsString, OsString)>) -> Vec<(OsString, OsString)> {
    env.into_iter()
        .map(|(name, value)| {
            let forced = ["LANG", "LC_CTYPE", "LC_ALL"].iter().any(|n| name == *n);
            if forced && (value == "C.UTF-8" || value == "C.utf8") {
                (name, OsString::from(MACOS_UTF8_LOCALE))
            } else {
                (name, value)
            }
        })
        .collect()
}

/// `env` telling dual-stack runtimes to use IPv4 sockets, so their connection to the proxy on 127.0.0.1 is
/// `127.0.0.1`, which Seatbelt's `localhost` matches, not `::ffff:127.0.0.1`, which it does not and SBPL cannot
/// name (openai/codex#42925): the JVM (`-Djava.net.preferIPv4Stack=true`, appended to the person's
/// `JAVA_TOOL_OPTIONS`) and .NET (`DOTNET_SYSTEM_NET_DISABLEIPV6=1`). In allowlist mode nothing but loopback is
/// reachable, so no IPv6 address is lost.
pub(crate) fn ipv4_loopback_env(mut env: Vec<(OsString, OsString)>) -> Vec<(OsString, OsString)> {
    const PREFER: &str = "-Djava.net.preferIPv4Stack=true";
    match env.iter_mut().find(|(name, _)| name == "JAVA_TOOL_OPTIONS") {
        Some((_, value)) if !value.to_string_lossy().contains(PREFER) => {
            value.push(" ");
            value.push(PREFER);
        }
        Some(_) => {}
        None => env.push(("JAVA_TOOL_OPTIONS".into(), PREFER.into())),
    }
    env.retain(|(name, _)| name != "DOTNET_SYSTEM_NET_DISABLEIPV6");
    env.push(("DOTNET_SYSTEM_NET_DISABLEIPV6".into(), "1".into()));
    env
}

/// What the profile for `policy` enforces. `unavailable` is why `sandbox-exec` cannot run here (every
/// protection is then `off`, its detail saying what macOS would enforce); `launch` makes the details concrete.
fn report(
    policy: &SandboxPolicy,
    unavailable: Option<&str>,
    launch: Option<&SeatbeltLaunch>,
) -> ProtectionReport {
    let network = policy.has_network_access();
    let mut protections = Vec::new();
    protections.push(match unavailable {
        None => protection(
            "seatbelt",
            ProtectionStatus::Enforced,
            format!("{SANDBOX_EXEC}, deny-default profile"),
        ),
        Some(reason) => protection(
            "seatbelt",
            ProtectionStatus::Off,
            format!(
                "sandbox-exec is unavailable here: {reason}; the other entries say what macOS would enforce"
            ),
        ),
    });

    let filesystem = match (policy, launch) {
        (SandboxPolicy::WorkspaceWrite { .. }, Some(launch)) => {
            let mut text = format!(
                "reads everywhere; writes only under {} writable roots minus {} read-only subpaths (.git, \
                 gitdir, .uexec, the .git of the repositories at the workspace's top level, other tools' files: \
                 under every spelling, and the directories above them cannot be renamed), plus \
                 /dev/null and the command's own terminal",
                launch.writable_root_count(),
                launch.read_only_subpath_count()
            );
            text.push_str(&uexec_plan::entries_text(&launch.closed, &launch.absent, &launch.ignored));
            text.push_str(&uexec_plan::roots_text(&[], &[], &launch.worktree_repositories));
            text
        }
        (SandboxPolicy::WorkspaceWrite { .. }, None) => "reads everywhere; writes only under the writable roots \
             (configured roots, cwd, /tmp, $TMPDIR, the per-user cache directory) minus .git, gitdir and .uexec, \
             plus /dev/null and the command's own terminal"
            .to_owned(),
        _ => "reads everywhere; no writes except /dev/null and the command's own terminal".to_owned(),
    };
    protections.push(enforced("filesystem", filesystem, unavailable));

    protections.push(if network {
        protection(
            "network",
            ProtectionStatus::NotRequested,
            "network access allowed by the policy (IP and DNS; Unix sockets only beneath the writable roots, \
             never the person's tmux, screen, ssh or gpg agents, editors or Docker)"
                .to_owned(),
        )
    } else {
        enforced(
            "network",
            "every IP socket and DNS denied; Unix sockets only beneath the writable roots, never the person's \
             tmux, screen, ssh or gpg agents, editors or Docker"
                .to_owned(),
            unavailable,
        )
    });

    protections.push(enforced(
        "process",
        "exec and fork allowed; signals and process-info only within this command's own sandbox (its process \
         tree: another command of the same server cannot be signalled, unlike Linux); ps, pgrep and top list \
         nothing; no task ports of other processes (no debugger attach)"
            .to_owned(),
        unavailable,
    ));

    let services = match launch {
        Some(launch) => count_global_names(&launch.profile),
        None if network => count_global_names(BASE_PROFILE) + count_global_names(NETWORK_PROFILE),
        None => count_global_names(BASE_PROFILE),
    };
    protections.push(enforced(
        "system_services",
        format!("mach-lookup limited to {services} services; sysctl reads to an allow-list"),
        unavailable,
    ));
    // `Sandbox::refusals` is the port's default here: the Seatbelt violation log is not read.
    protections.push(protection(
        "refusal_evidence",
        ProtectionStatus::NotRequested,
        "keyword heuristic only (the fallback): Seatbelt's refusals (the unified log's sandbox messages) are not \
         read, so a failure counts as the sandbox's when its output holds a denial keyword"
            .to_owned(),
    ));

    ProtectionReport {
        sandbox: SandboxKind::MacosSeatbelt,
        policy: policy.mode_str().to_owned(),
        protections,
        escape_reason: None,
    }
}

/// A protection the profile enforces: `enforced` here, `off` (and "would enforce") where it cannot run.
fn enforced(name: &str, detail: String, unavailable: Option<&str>) -> Protection {
    match unavailable {
        None => protection(name, ProtectionStatus::Enforced, detail),
        Some(_) => protection(name, ProtectionStatus::Off, format!("would enforce: {detail}")),
    }
}

fn protection(name: &str, status: ProtectionStatus, detail: String) -> Protection {
    Protection { name: name.to_owned(), status, detail }
}

/// How many mach services a profile part allows by name.
fn count_global_names(profile: &str) -> usize {
    profile.lines().filter(|line| line.trim_start().starts_with("(global-name \"")).count()
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
