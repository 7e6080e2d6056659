//! Which mechanisms a command gets, and the protection report that says so.
//!
//! A [`Plan`] is decided from the policy and the [`KernelSupport`]; building the Landlock ruleset or the seccomp
//! programs can still fail, which turns the mechanism off in the plan (with the reason). The report is then a
//! pure function of the plan: every protection is `enforced`, `partial`, `off` or `not requested`, and the adapter
//! refuses to run a command whose report is degraded unless the request accepts degradation.

use uexec_domain::{Protection, ProtectionStatus};
use uexec_domain::{ProtectionReport, SandboxKind, SandboxPolicy};

use crate::child::{KEPT_CAPABILITIES, MountMode};
use crate::landlock_rules::{FULL_FILESYSTEM_ABI, MAX_VETTED_ABI, NETWORK_ABI, SCOPE_ABI};
use crate::layout::FsLayout;
use crate::support;
use crate::support::{Availability, KernelSupport, MountNamespace};

/// The setting that accepts degraded protection, as named in errors.
pub const DEGRADED_SETTING: &str = "allow_degraded_sandbox = true (or --allow-degraded-sandbox)";

/// The mechanisms one command gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// `read-only` or `workspace-write`.
    pub(crate) mode: &'static str,
    /// True for `workspace-write`.
    pub(crate) workspace_write: bool,
    /// True when the policy disables the network.
    pub(crate) network_off: bool,
    /// The kernel's Landlock ABI (0: no Landlock).
    pub(crate) kernel_abi: u32,
    /// The Landlock ABI used (0: Landlock not used).
    pub(crate) landlock_abi: u32,
    /// Why Landlock is not used.
    pub(crate) landlock_missing: Option<String>,
    /// Whether the seccomp filter is installed.
    pub(crate) seccomp: bool,
    /// Why it is not.
    pub(crate) seccomp_missing: Option<String>,
    /// The mount namespace, if any.
    pub(crate) mounts: Option<MountMode>,
    /// Why there is none.
    pub(crate) mounts_missing: Option<String>,
    /// True when the process has capabilities to give up (root, or a capable service).
    pub(crate) privileged: bool,
    /// True when secret locations are to be hidden (the sandbox was given patterns).
    pub(crate) hide: bool,
    /// Domain-allowlist mode: the proxy's port and what it allows (the network is then on, through it only).
    pub(crate) proxy: Option<(u16, String)>,
    /// The command runs in the process adapter's PID namespace for sandboxed commands (shared by all of this
    /// server's): signals are scoped by that namespace, not by Landlock, and `/proc` shows all of it.
    pub(crate) shared_pid_namespace: bool,
    /// The directories to show `workspace-write` commands copy-on-write (as configured, before resolving).
    pub(crate) copy_on_write: Vec<std::path::PathBuf>,
    /// Where their layers live (`<state>/sandbox-overlays`).
    pub(crate) copy_on_write_base: Option<std::path::PathBuf>,
    /// Why this kernel cannot give commands copy-on-write views, if it cannot.
    pub(crate) copy_on_write_unavailable: Option<String>,
    /// Which other tools' files stay read-only, in words (`uexec_domain::tool_files::ToolFiles::text`).
    pub(crate) tool_files: String,
    /// The network is off and the command enters the offline namespace (loopback only, every address local,
    /// lookups answered and recorded by the sandbox's responder).
    pub(crate) offline: bool,
    /// Why the network is off without the offline namespace, when it is.
    pub(crate) offline_missing: Option<String>,
    /// The command can enter the proxy's network namespace: it was made the way the command's mount namespace
    /// is (with `CAP_SYS_ADMIN`, or in the sandbox's user namespace).
    pub(crate) proxy_enterable: bool,
    /// Why the sandbox's user namespace could not be made (without `CAP_SYS_ADMIN`: the commands then nest a
    /// user namespace of their own, and get neither the network namespaces nor the overlays).
    pub(crate) userns_missing: Option<String>,
    /// Why the commands in the sandbox's user namespace get no PID namespace of the sandbox's own (`None`: they
    /// do, or they do not run in that user namespace).
    pub(crate) pid_namespace_missing: Option<String>,
}

impl Plan {
    /// The plan for `policy` on a kernel with `support`. `policy` must not be `danger-full-access`.
    pub(crate) fn new(policy: &SandboxPolicy, support: &KernelSupport) -> Plan {
        let (mounts, mounts_missing) = match &support.mount_namespace {
            MountNamespace::Privileged => (Some(MountMode::Privileged), None),
            MountNamespace::UserNamespace => (Some(MountMode::UserNamespace), None),
            MountNamespace::Unavailable(why) => (None, Some(why.clone())),
        };
        let (seccomp, seccomp_missing) = match &support.seccomp {
            Availability::Available => (true, None),
            Availability::Unavailable(why) => (false, Some(why.clone())),
        };
        Plan {
            mode: policy.mode_str(),
            workspace_write: matches!(policy, SandboxPolicy::WorkspaceWrite { .. }),
            network_off: !policy.has_network_access(),
            kernel_abi: support.landlock_abi,
            landlock_abi: support.landlock_abi.min(MAX_VETTED_ABI),
            landlock_missing: if support.landlock_abi == 0 {
                Some(support.landlock_missing.clone().unwrap_or_else(|| "Landlock is unavailable".into()))
            } else {
                None
            },
            seccomp,
            seccomp_missing,
            mounts,
            mounts_missing,
            privileged: support::has_effective_capability(crate::sys::CAP_SETPCAP)
                || support::has_effective_capability(crate::sys::CAP_SYS_ADMIN),
            hide: false,
            proxy: None,
            shared_pid_namespace: false,
            copy_on_write: Vec::new(),
            copy_on_write_base: None,
            copy_on_write_unavailable: None,
            tool_files: uexec_domain::tool_files::ToolFiles::all().text(),
            offline: false,
            offline_missing: None,
            proxy_enterable: mounts == Some(MountMode::Privileged),
            userns_missing: None,
            pid_namespace_missing: None,
        }
    }

    /// Landlock could not be set up after all.
    pub(crate) fn without_landlock(&mut self, why: String) {
        self.landlock_abi = 0;
        self.landlock_missing = Some(why);
    }

    /// The seccomp programs could not be built after all.
    pub(crate) fn without_seccomp(&mut self, why: String) {
        self.seccomp = false;
        self.seccomp_missing = Some(why);
    }

    /// What this plan enforces; `layout` makes the details concrete (paths) when known.
    pub(crate) fn report(&self, layout: Option<&FsLayout>) -> ProtectionReport {
        let protections = vec![
            self.filesystem(layout),
            self.metadata(),
            self.read_only_subpaths(layout),
            self.hidden(layout),
            self.copy_on_write(layout),
            self.network(),
            protection(
                "no_new_privs",
                ProtectionStatus::Enforced,
                "PR_SET_NO_NEW_PRIVS: setuid/setgid bits and file capabilities grant nothing".into(),
            ),
            self.ptrace(),
            self.io_uring(),
            self.syscalls(),
            self.scopes(),
            self.capabilities(),
            self.refusal_evidence(),
        ];
        ProtectionReport {
            sandbox: SandboxKind::LinuxLandlockSeccomp,
            policy: self.mode.to_owned(),
            protections,
            escape_reason: None,
        }
    }

    /// Landlock, in words.
    fn landlock_name(&self) -> String {
        if self.kernel_abi > self.landlock_abi && self.landlock_abi > 0 {
            format!("landlock ABI {} (used as ABI {})", self.kernel_abi, self.landlock_abi)
        } else {
            format!("landlock ABI {}", self.landlock_abi)
        }
    }

    /// Why Landlock is not used.
    fn no_landlock(&self) -> String {
        format!("no Landlock: {}", self.landlock_missing.as_deref().unwrap_or("unavailable"))
    }

    /// Why seccomp is not used.
    fn no_seccomp(&self) -> String {
        format!("no seccomp: {}", self.seccomp_missing.as_deref().unwrap_or("unavailable"))
    }

    /// Why there is no mount namespace, in full (said once, by `metadata`, the first protection it takes away).
    fn no_mounts(&self) -> String {
        format!("no private mount namespace: {}", self.mounts_missing.as_deref().unwrap_or("unavailable"))
    }

    /// The same, short, for the other protections it takes away.
    fn no_mounts_short(&self) -> &'static str {
        "no private mount namespace (see metadata)"
    }

    /// Why the commands cannot have what needs a namespace owned by the sandbox (a network namespace, an
    /// overlay), or `None` when they can.
    fn no_owned_namespaces(&self) -> Option<String> {
        match self.mounts {
            Some(MountMode::Privileged | MountMode::SandboxUserNamespace) => None,
            Some(MountMode::UserNamespace) => Some(format!(
                "without CAP_SYS_ADMIN it needs the sandbox's user namespace, which could not be made: {}",
                self.userns_missing.as_deref().unwrap_or("unknown")
            )),
            None => Some(self.no_mounts_short().to_owned()),
        }
    }

    fn filesystem(&self, layout: Option<&FsLayout>) -> Protection {
        let writes = match (self.workspace_write, layout) {
            (false, _) => "write only /dev/null, /dev/tty and its own terminal".to_owned(),
            (true, None) => {
                "write only beneath the writable roots (configured, cwd, /tmp, $TMPDIR), /dev/null, /dev/tty and \
                 its own terminal"
                    .to_owned()
            }
            (true, Some(layout)) => {
                let mut text = format!(
                    "write only beneath {} and /dev/null, /dev/tty, its own terminal",
                    paths(&layout.roots)
                );
                text.push_str(&uexec_plan::roots_text(
                    &layout.missing_roots,
                    &layout.refused_roots,
                    &layout.worktree_repositories,
                ));
                text
            }
        };
        match (self.landlock_abi, self.mounts.is_some()) {
            (0, true) => protection(
                "filesystem",
                ProtectionStatus::Partial,
                format!(
                    "{}, only read-only mounts restrict writes (device nodes such as block devices stay writable)",
                    self.no_landlock()
                ),
            ),
            (0, false) => protection("filesystem", ProtectionStatus::Off, self.no_landlock()),
            (abi, _) if abi >= FULL_FILESYSTEM_ABI => protection(
                "filesystem",
                ProtectionStatus::Enforced,
                format!("{}: read everywhere, {writes}", self.landlock_name()),
            ),
            (abi, true) => protection(
                "filesystem",
                ProtectionStatus::Enforced,
                format!(
                    "{}: read everywhere, {writes}, truncation (not controlled before ABI {FULL_FILESYSTEM_ABI}) \
                     is stopped by the read-only mounts",
                    abi_text(abi)
                ),
            ),
            (abi, false) => protection(
                "filesystem",
                ProtectionStatus::Partial,
                format!(
                    "{}: read everywhere, {writes}, truncate(2) and O_TRUNC are not controlled before ABI \
                     {FULL_FILESYSTEM_ABI}",
                    abi_text(abi)
                ),
            ),
        }
    }

    fn metadata(&self) -> Protection {
        match self.mounts {
            Some(mode) => protection(
                "metadata",
                ProtectionStatus::Enforced,
                format!(
                    "private mount namespace ({}): every mount read-only except the writable roots, so chmod, \
                     chown, utimes, xattrs and chattr outside them fail with EROFS",
                    mode_text(mode)
                ),
            ),
            None => protection(
                "metadata",
                ProtectionStatus::Off,
                format!(
                    "{}, chmod, chown, utimes and xattrs outside the writable roots are not prevented (Landlock \
                     does not cover metadata)",
                    self.no_mounts()
                ),
            ),
        }
    }

    fn read_only_subpaths(&self, layout: Option<&FsLayout>) -> Protection {
        if !self.workspace_write {
            return protection(
                "read_only_subpaths",
                ProtectionStatus::NotRequested,
                "read-only policy: nothing is writable".into(),
            );
        }
        let Some(mode) = self.mounts else {
            return protection(
                "read_only_subpaths",
                ProtectionStatus::Off,
                format!(
                    "{}, Landlock cannot exempt .git or .uexec inside a writable root",
                    self.no_mounts_short()
                ),
            );
        };
        let what = match layout {
            None => format!(
                ".uexec and a .git file or symlink in each writable root and in each directory at the \
                 workspace's top level, and inside each git directory (a root's .git, a repository's nested at \
                 the workspace's top level, the gitdir a .git file names, the git dirs of their linked \
                 worktrees and submodules) over what git runs or reads as configuration: {}; history: {}",
                uexec_domain::gitdir::protected_git_entries_text(),
                uexec_domain::gitdir::history_text()
            ),
            Some(layout) => {
                let mut text = if layout.protected.is_empty() {
                    "none present".to_owned()
                } else {
                    format!(
                        "{} (in a git directory {}; history: {})",
                        paths(&layout.protected),
                        uexec_domain::gitdir::protected_git_entries_text(),
                        uexec_domain::gitdir::history_text()
                    )
                };
                text.push_str(&uexec_plan::entries_text(&layout.closed, &layout.absent, &layout.ignored));
                text
            }
        };
        let detail = format!(
            "read-only bind mounts in a private mount namespace ({}) over {what}; and {} (set {} to allow \
                 one): they cannot be written, renamed or removed (EROFS/EBUSY), absent ones without a \
                 placeholder can be created",
            mode_text(mode),
            self.tool_files,
            uexec_domain::tool_files::ALLOW_KEY,
        );
        // A top level that could not be examined whole: what lies beyond is not protected, so this is partial
        // (and the command refused unless degradation is allowed), never enforced.
        match layout.and_then(|layout| layout.unexamined.as_ref()) {
            Some(why) => protection(
                "read_only_subpaths",
                ProtectionStatus::Partial,
                format!("not every repository nested at the workspace's top level: {why}; {detail}"),
            ),
            None => protection("read_only_subpaths", ProtectionStatus::Enforced, detail),
        }
    }

    fn hidden(&self, layout: Option<&FsLayout>) -> Protection {
        if !self.hide {
            return protection(
                "hidden_paths",
                ProtectionStatus::NotRequested,
                "no secret locations configured".into(),
            );
        }
        let Some(mode) = self.mounts else {
            return protection(
                "hidden_paths",
                ProtectionStatus::Off,
                format!("{}, secret locations under the home stay readable", self.no_mounts_short()),
            );
        };
        let what = match layout.map(|l| &l.hidden) {
            None => "the well-known credential stores under the home and the configured globs".to_owned(),
            Some(hidden) => {
                let mut text = if hidden.is_empty() {
                    "none present".to_owned()
                } else {
                    hidden.all().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                };
                if !hidden.unexamined.is_empty() {
                    text.push_str(&format!(
                        " (the search for the configured patterns did not get through {}: hidden as a whole; \
                         remove what filled them, or narrow the pattern: `config/.env*` rather than `.env*`)",
                        paths(&hidden.unexamined)
                    ));
                }
                if !hidden.skipped.is_empty() {
                    text.push_str(&format!(" (not hidden: {})", hidden.skipped.join("; ")));
                }
                if !hidden.reachable.is_empty() {
                    text.push_str(&format!(" (reachable on purpose: {})", hidden.reachable.join("; ")));
                }
                text
            }
        };
        if layout.is_some_and(|l| l.hidden.truncated) {
            return protection(
                "hidden_paths",
                ProtectionStatus::Partial,
                format!(
                    "{what}; the search for the configured patterns did not get through a directory that holds \
                     the workspace or working directory (or through more than {} directories), so matches \
                     there stay readable: remove what filled it, or narrow the pattern (`config/.env*` rather \
                     than `.env*`)",
                    uexec_domain::hidden::MAX_UNEXAMINED
                ),
            );
        }
        protection(
            "hidden_paths",
            ProtectionStatus::Enforced,
            format!(
                "unreadable in a private mount namespace ({}): {what}; a hidden directory is an empty read-only \
                 tmpfs, opening a hidden file fails with EACCES",
                mode_text(mode)
            ),
        )
    }

    /// The copy-on-write views. What they protect holds in every case: the person's directories are never
    /// written by a sandboxed command (with a view, writes land in the sandbox's upper layer; without one, the
    /// directory is read-only like the rest of the file system), so a missing view is no degradation.
    fn copy_on_write(&self, layout: Option<&FsLayout>) -> Protection {
        const NAME: &str = "copy_on_write";
        let dirs = paths(&self.copy_on_write);
        if self.copy_on_write.is_empty() {
            return protection(NAME, ProtectionStatus::NotRequested, "no copy-on-write directories".into());
        }
        if !self.workspace_write {
            return protection(
                NAME,
                ProtectionStatus::NotRequested,
                format!("read-only policy: {dirs} stay read-only like everything else"),
            );
        }
        if self.network_off {
            return protection(
                NAME,
                ProtectionStatus::NotRequested,
                format!(
                    "network off: {dirs} stay read-only, never written (nothing new can be fetched; what they \
                     hold is used as it is); a command with network sees them copy-on-write"
                ),
            );
        }
        let unavailable = self
            .no_owned_namespaces()
            .map(|why| format!("an overlay {why}"))
            .or_else(|| self.copy_on_write_unavailable.clone());
        if let Some(why) = unavailable {
            return protection(
                NAME,
                ProtectionStatus::Enforced,
                format!("{dirs} stay read-only, never written: no copy-on-write view ({why})"),
            );
        }
        let base = self.copy_on_write_base.as_ref().map_or_else(String::new, |b| b.display().to_string());
        let text = match layout {
            None => format!(
                "writable copy-on-write views (overlayfs) of {dirs}: the person's directories are never written, \
                 writes land in the sandbox's upper layers under {base}, which commands outside the sandbox \
                 never use"
            ),
            Some(layout) => {
                let views: Vec<String> = layout
                    .copy_on_write
                    .iter()
                    .map(|(dir, upper)| format!("{} (writes land in {})", dir.display(), upper.display()))
                    .collect();
                let mut text = if views.is_empty() {
                    "no copy-on-write view".to_owned()
                } else {
                    format!(
                        "writable copy-on-write views (overlayfs) of {}; the person's directories are never \
                         written, and commands outside the sandbox never use the upper layers",
                        views.join(", ")
                    )
                };
                if !layout.copy_on_write_skipped.is_empty() {
                    text.push_str(&format!(
                        " (read-only, no view: {})",
                        layout.copy_on_write_skipped.join("; ")
                    ));
                }
                text
            }
        };
        protection(NAME, ProtectionStatus::Enforced, text)
    }

    fn network(&self) -> Protection {
        if let Some((port, rules)) = &self.proxy {
            return match (self.seccomp, self.proxy_enterable) {
                (true, true) => protection(
                    "network",
                    ProtectionStatus::Enforced,
                    format!(
                        "a network namespace with only loopback: the one way out is uexec's proxy on \
                         127.0.0.1:{port}, which allows {rules} and resolves names itself; seccomp: sockets \
                         other than unix, IPv4 and IPv6 fail with EPERM (no netlink, no packet sockets)"
                    ),
                ),
                _ => protection(
                    "network",
                    ProtectionStatus::Off,
                    format!(
                        "the domain allowlist needs seccomp and a way into the proxy's network namespace ({}; {})",
                        if self.seccomp { "seccomp available" } else { "no seccomp" },
                        self.no_owned_namespaces().unwrap_or_else(|| {
                            "the proxy's namespace was not made the way the commands' mount namespace is \
                             (with CAP_SYS_ADMIN, or in the sandbox's user namespace)"
                                .to_owned()
                        })
                    ),
                ),
            };
        }
        if !self.network_off {
            return protection(
                "network",
                ProtectionStatus::NotRequested,
                "network access allowed by the policy".into(),
            );
        }
        let tcp = self.landlock_abi >= NETWORK_ABI;
        match (self.seccomp, tcp) {
            (true, _) if self.offline => protection(
                "network",
                ProtectionStatus::Enforced,
                format!(
                    "a network namespace with only loopback, every address routed to it: nothing leaves, a \
                     connection fails at once, and a name lookup gets REFUSED at once from uexec's responder, \
                     which records the name for the response's note; seccomp: sockets other than unix, IPv4 and \
                     IPv6 fail with EPERM{}",
                    if tcp { "; landlock denies TCP bind/connect" } else { "" }
                ),
            ),
            (true, _) => protection(
                "network",
                ProtectionStatus::Enforced,
                format!(
                    "seccomp: socket/socketpair other than AF_UNIX fail with EPERM (unix sockets keep working){}",
                    if tcp { ", and landlock denies TCP bind/connect" } else { "" }
                ),
            ),
            (false, true) => protection(
                "network",
                ProtectionStatus::Partial,
                format!(
                    "{}, landlock denies TCP bind/connect only (UDP and raw sockets work)",
                    self.no_seccomp()
                ),
            ),
            (false, false) => protection("network", ProtectionStatus::Off, self.no_seccomp()),
        }
    }

    fn ptrace(&self) -> Protection {
        match (self.seccomp, self.landlock_abi > 0) {
            (true, _) => protection(
                "ptrace",
                ProtectionStatus::Enforced,
                "seccomp: ptrace, process_vm_readv/writev and pidfd_getfd fail with EPERM".into(),
            ),
            (false, true) => protection(
                "ptrace",
                ProtectionStatus::Partial,
                format!("{}, landlock only allows tracing processes inside the sandbox", self.no_seccomp()),
            ),
            (false, false) => protection("ptrace", ProtectionStatus::Off, self.no_seccomp()),
        }
    }

    fn io_uring(&self) -> Protection {
        if self.seccomp {
            protection(
                "io_uring",
                ProtectionStatus::Enforced,
                "seccomp: io_uring_setup/enter/register fail with EPERM".into(),
            )
        } else {
            protection("io_uring", ProtectionStatus::Off, self.no_seccomp())
        }
    }

    fn syscalls(&self) -> Protection {
        if !self.seccomp {
            return protection("syscalls", ProtectionStatus::Off, self.no_seccomp());
        }
        let ioctls: Vec<&str> = crate::seccomp::DENIED_IOCTLS.iter().map(|(_, name)| *name).collect();
        protection(
            "syscalls",
            ProtectionStatus::Enforced,
            format!(
                "seccomp: EPERM for bpf, perf_event_open, userfaultfd, kexec, kernel modules, keyrings, \
                 fanotify, mount and friends, setns, clone/unshare with namespace flags, swap, reboot, clock and \
                 hostname changes, quotas, acct, open-by-handle, {} and vhangup, personality changes, prlimit64 \
                 on other processes, ENOSYS for clone3 and x32 calls, other architectures killed (exit 159)",
                ioctls.join("/")
            ),
        )
    }

    fn scopes(&self) -> Protection {
        if self.landlock_abi >= SCOPE_ABI {
            let detail = if self.shared_pid_namespace {
                "landlock: no abstract UNIX socket connections outside the command's own sandbox; signals reach \
                 this server's sandboxed commands only (they share one PID namespace, which holds nothing else, \
                 and /proc shows only that namespace)"
                    .to_owned()
            } else if self.mounts == Some(MountMode::Privileged) {
                "landlock: no signals to and no abstract UNIX socket connections with processes outside the \
                 sandbox"
                    .to_owned()
            } else {
                // No procfs of its own without a PID namespace: the inherited `/proc` lists the host's processes.
                let why = match &self.pid_namespace_missing {
                    Some(why) => format!("the sandbox's PID namespace could not be made: {why}"),
                    None => {
                        "no PID namespace without CAP_SYS_ADMIN or the sandbox's user namespace".to_owned()
                    }
                };
                format!(
                    "landlock: no signals to and no abstract UNIX socket connections with processes outside the \
                     sandbox; /proc is the host's ({why}): other processes' command lines are visible, their \
                     memory and environment are not"
                )
            };
            protection("scopes", ProtectionStatus::Enforced, detail)
        } else {
            let why = if self.landlock_abi == 0 {
                self.no_landlock()
            } else {
                format!("landlock ABI {} < {SCOPE_ABI}", self.landlock_abi)
            };
            protection(
                "scopes",
                ProtectionStatus::Off,
                format!(
                    "{why}: the command can signal processes outside the sandbox (the uexec server) and connect \
                     to their abstract UNIX sockets"
                ),
            )
        }
    }

    fn capabilities(&self) -> Protection {
        let kept: Vec<&str> = KEPT_CAPABILITIES.iter().map(|(_, name)| *name).collect();
        let detail = if self.mounts == Some(MountMode::SandboxUserNamespace) {
            "every capability dropped (the command held them in the sandbox's user namespace only), ambient set \
             cleared, no_new_privs keeps exec from raising them"
                .to_owned()
        } else if self.privileged {
            format!(
                "permitted and effective sets reduced to {}, ambient set cleared, no_new_privs keeps exec from \
                 raising them",
                kept.join(" ")
            )
        } else {
            "no capability is gained across exec (unprivileged, ambient set cleared)".to_owned()
        };
        protection("capabilities", ProtectionStatus::Enforced, detail)
    }

    /// Where the notes of what the sandbox refused come from (`Sandbox::refusals`): the sandbox's own record,
    /// the plan matched against the output, or, as the fallback, only the keyword heuristic. Never degrades the
    /// report: it says how a refusal is known, it protects nothing.
    fn refusal_evidence(&self) -> Protection {
        const NAME: &str = "refusal_evidence";
        const PLAN: &str = "matched against the plan: the paths and process operations a failing command's \
                            output names (noted \"seen in the output\")";
        let recorded = if self.proxy.is_some() {
            "recorded by the sandbox: the connections the domain-allowlist proxy refused"
        } else if !self.network_off {
            "no network refusal to record (network allowed)"
        } else if self.offline {
            "recorded by the sandbox: name lookups (the offline namespace's responder)"
        } else {
            return protection(
                NAME,
                ProtectionStatus::NotRequested,
                format!(
                    "lookups not recorded: without the offline namespace ({}) nothing records a lookup, so a \
                     network refusal is known from a failing command's resolver or socket errors (noted \"seen \
                     in the output\"); {PLAN}; no keyword heuristic",
                    self.offline_missing.as_deref().unwrap_or("it was not made")
                ),
            );
        };
        protection(NAME, ProtectionStatus::Enforced, format!("{recorded}; {PLAN}; no keyword heuristic"))
    }
}

/// Every degraded protection as `name: status (detail)`, for the `Unenforceable` error.
pub(crate) fn degraded_summary(report: &ProtectionReport) -> String {
    report
        .protections
        .iter()
        .filter(|p| matches!(p.status, ProtectionStatus::Partial | ProtectionStatus::Off))
        .map(|p| format!("{}: {} ({})", p.name, p.status, p.detail))
        .collect::<Vec<_>>()
        .join("; ")
}

/// One protection.
fn protection(name: &str, status: ProtectionStatus, detail: String) -> Protection {
    Protection { name: name.to_owned(), status, detail }
}

/// `landlock ABI n`.
fn abi_text(abi: u32) -> String {
    format!("landlock ABI {abi}")
}

/// The mount namespace kind, in words.
fn mode_text(mode: MountMode) -> &'static str {
    match mode {
        MountMode::Privileged => "CAP_SYS_ADMIN",
        MountMode::UserNamespace => "user namespace",
        MountMode::SandboxUserNamespace => "the sandbox's user namespace",
    }
}

/// Paths, comma-separated.
fn paths(list: &[std::path::PathBuf]) -> String {
    list.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn full() -> KernelSupport {
        KernelSupport {
            landlock_abi: 7,
            landlock_missing: None,
            seccomp: Availability::Available,
            mount_namespace: MountNamespace::Privileged,
        }
    }

    fn status(report: &ProtectionReport, name: &str) -> ProtectionStatus {
        report.protections.iter().find(|p| p.name == name).map(|p| p.status).unwrap()
    }

    #[test]
    fn hidden_paths_fail_closed_without_mounts_or_when_the_search_stopped() {
        let policy = SandboxPolicy::default();
        let mut plan = Plan::new(&policy, &full());
        assert_eq!(status(&plan.report(None), "hidden_paths"), ProtectionStatus::NotRequested);
        plan.hide = true;
        let mut layout = FsLayout::default();
        layout.hidden.files.push(std::path::PathBuf::from("/h/.netrc"));
        let report = plan.report(Some(&layout));
        assert_eq!(status(&report, "hidden_paths"), ProtectionStatus::Enforced);
        assert!(!report.is_degraded());
        // A directory the search did not get through is hidden as a whole: still enforced, and named.
        layout.hidden.dirs.push(std::path::PathBuf::from("/w/junk"));
        layout.hidden.unexamined.push(std::path::PathBuf::from("/w/junk"));
        let report = plan.report(Some(&layout));
        assert_eq!(status(&report, "hidden_paths"), ProtectionStatus::Enforced);
        let detail = &report.protections.iter().find(|p| p.name == "hidden_paths").unwrap().detail;
        assert!(detail.contains("did not get through /w/junk: hidden as a whole"), "{detail}");
        layout.hidden.truncated = true;
        let report = plan.report(Some(&layout));
        assert_eq!(status(&report, "hidden_paths"), ProtectionStatus::Partial);
        assert!(report.is_degraded());
        let mut no_mounts = Plan::new(
            &policy,
            &KernelSupport { mount_namespace: MountNamespace::Unavailable("test".into()), ..full() },
        );
        no_mounts.hide = true;
        assert_eq!(status(&no_mounts.report(None), "hidden_paths"), ProtectionStatus::Off);
    }

    #[test]
    fn copy_on_write_says_why_there_is_no_view_and_never_degrades() {
        let detail = |plan: &Plan, layout: Option<&FsLayout>| {
            let report = plan.report(layout);
            assert!(!report.is_degraded(), "{report}");
            let entry = report.protections.into_iter().find(|p| p.name == "copy_on_write").unwrap();
            (entry.status, entry.detail)
        };
        let mut offline = Plan::new(&SandboxPolicy::default(), &full());
        assert_eq!(detail(&offline, None).0, ProtectionStatus::NotRequested);
        offline.copy_on_write = vec!["/h/.cargo".into()];
        let (status, text) = detail(&offline, None);
        assert_eq!(status, ProtectionStatus::NotRequested);
        assert!(text.contains("network off: /h/.cargo stay read-only"), "{text}");
        let online = SandboxPolicy::WorkspaceWrite {
            writable_roots: Vec::new(),
            network_access: true,
            exclude_slash_tmp: false,
            exclude_tmpdir_env_var: false,
        };
        let mut plan = Plan::new(&online, &full());
        plan.copy_on_write = vec!["/h/.cargo".into()];
        plan.copy_on_write_base = Some("/s/sandbox-overlays".into());
        let (status, text) = detail(&plan, None);
        assert_eq!(status, ProtectionStatus::Enforced);
        assert!(
            text.contains("copy-on-write views (overlayfs) of /h/.cargo")
                && text.contains("/s/sandbox-overlays")
        );
        let mut layout = FsLayout::default();
        layout.copy_on_write.push(("/h/.cargo".into(), "/s/sandbox-overlays/0/cargo/upper".into()));
        layout.copy_on_write_skipped.push("/h/.m2: does not exist".into());
        let (_, text) = detail(&plan, Some(&layout));
        assert!(text.contains("/h/.cargo (writes land in /s/sandbox-overlays/0/cargo/upper)"), "{text}");
        assert!(text.contains("no view: /h/.m2: does not exist"), "{text}");
        plan.copy_on_write_unavailable = Some("old kernel".into());
        let (status, text) = detail(&plan, None);
        assert_eq!(status, ProtectionStatus::Enforced);
        assert!(text.contains("stay read-only") && text.contains("old kernel"), "{text}");
        plan.copy_on_write_unavailable = None;
        plan.mounts = Some(MountMode::SandboxUserNamespace);
        assert!(detail(&plan, None).1.contains("copy-on-write views (overlayfs)"));
        plan.mounts = Some(MountMode::UserNamespace);
        plan.userns_missing = Some("unshare(CLONE_NEWUSER) failed with EPERM".into());
        let (status, text) = detail(&plan, None);
        assert_eq!(status, ProtectionStatus::Enforced);
        assert!(text.contains("stay read-only") && text.contains("unshare(CLONE_NEWUSER) failed"), "{text}");
        let mut read_only = Plan::new(&SandboxPolicy::ReadOnly { network_access: false }, &full());
        read_only.copy_on_write = plan.copy_on_write.clone();
        assert_eq!(detail(&read_only, None).0, ProtectionStatus::NotRequested);
    }

    #[test]
    fn the_proxied_network_needs_seccomp_and_a_way_into_the_namespace() {
        let policy = SandboxPolicy::ReadOnly { network_access: true };
        let mut plan = Plan::new(&policy, &full());
        plan.proxy = Some((3128, "pypi.org".into()));
        let report = plan.report(None);
        assert_eq!(status(&report, "network"), ProtectionStatus::Enforced);
        let detail = &report.protections.iter().find(|p| p.name == "network").unwrap().detail;
        assert!(detail.contains("127.0.0.1:3128") && detail.contains("pypi.org"), "{detail}");
        // Without CAP_SYS_ADMIN: enforced when the proxy's namespace is the sandbox user namespace's.
        plan.mounts = Some(MountMode::SandboxUserNamespace);
        assert_eq!(status(&plan.report(None), "network"), ProtectionStatus::Enforced);
        plan.proxy_enterable = false;
        let report = plan.report(None);
        assert_eq!(status(&report, "network"), ProtectionStatus::Off);
        plan.mounts = Some(MountMode::UserNamespace);
        plan.userns_missing = Some("setns(CLONE_NEWUSER) failed with EPERM".into());
        let report = plan.report(None);
        let detail = &report.protections.iter().find(|p| p.name == "network").unwrap().detail;
        assert!(detail.contains("the sandbox's user namespace, which could not be made: setns"), "{detail}");
        plan.mounts = Some(MountMode::Privileged);
        plan.proxy_enterable = true;
        plan.seccomp = false;
        assert_eq!(status(&plan.report(None), "network"), ProtectionStatus::Off);
    }

    #[test]
    fn full_support_enforces_everything_requested() {
        let report = Plan::new(&SandboxPolicy::default(), &full()).report(None);
        assert!(!report.is_degraded(), "{report}");
        assert_eq!(status(&report, "network"), ProtectionStatus::Enforced);
        let open = Plan::new(&SandboxPolicy::ReadOnly { network_access: true }, &full()).report(None);
        assert_eq!(status(&open, "network"), ProtectionStatus::NotRequested);
        assert_eq!(status(&open, "read_only_subpaths"), ProtectionStatus::NotRequested);
        assert!(!open.is_degraded());
    }

    #[test]
    fn each_missing_mechanism_degrades_the_report() {
        let policy = SandboxPolicy::default();
        let no_landlock = KernelSupport { landlock_abi: 0, ..full() };
        let report = Plan::new(&policy, &no_landlock).report(None);
        assert_eq!(status(&report, "filesystem"), ProtectionStatus::Partial);
        assert_eq!(status(&report, "scopes"), ProtectionStatus::Off);

        let old = KernelSupport { landlock_abi: 5, ..full() };
        let report = Plan::new(&policy, &old).report(None);
        assert_eq!(status(&report, "filesystem"), ProtectionStatus::Enforced);
        assert_eq!(status(&report, "scopes"), ProtectionStatus::Off);

        let no_seccomp = KernelSupport { seccomp: Availability::Unavailable("test".into()), ..full() };
        let report = Plan::new(&policy, &no_seccomp).report(None);
        assert_eq!(status(&report, "network"), ProtectionStatus::Partial);
        assert_eq!(status(&report, "io_uring"), ProtectionStatus::Off);
        assert_eq!(status(&report, "ptrace"), ProtectionStatus::Partial);

        let no_mounts =
            KernelSupport { mount_namespace: MountNamespace::Unavailable("test".into()), ..full() };
        let report = Plan::new(&policy, &no_mounts).report(None);
        assert_eq!(status(&report, "read_only_subpaths"), ProtectionStatus::Off);
        assert_eq!(status(&report, "metadata"), ProtectionStatus::Off);
        let summary = degraded_summary(&report);
        assert!(
            summary.contains("read_only_subpaths: off") && summary.contains("metadata: off"),
            "{summary}"
        );

        let abi2 = KernelSupport {
            landlock_abi: 2,
            mount_namespace: MountNamespace::Unavailable("x".into()),
            ..full()
        };
        assert_eq!(status(&Plan::new(&policy, &abi2).report(None), "filesystem"), ProtectionStatus::Partial);
    }

    #[test]
    fn the_report_says_where_refusals_are_known_from_and_never_degrades_for_it() {
        let entry = |plan: &Plan| {
            let report = plan.report(None);
            assert!(!report.is_degraded(), "{report}");
            report.protections.into_iter().find(|p| p.name == "refusal_evidence").unwrap()
        };
        let mut offline = Plan::new(&SandboxPolicy::default(), &full());
        offline.offline = true;
        let known = entry(&offline);
        assert_eq!(known.status, ProtectionStatus::Enforced);
        assert!(
            known.detail.contains("name lookups (the offline namespace's responder)"),
            "{}",
            known.detail
        );
        assert!(
            known.detail.contains("matched against the plan")
                && known.detail.ends_with("no keyword heuristic")
        );
        offline.offline = false;
        offline.offline_missing = Some("no seccomp".into());
        let fallback = entry(&offline);
        assert_eq!(fallback.status, ProtectionStatus::NotRequested);
        assert!(
            fallback.detail.starts_with("lookups not recorded: without the offline namespace (no seccomp)"),
            "{}",
            fallback.detail
        );
        let online = SandboxPolicy::ReadOnly { network_access: true };
        let mut proxied = Plan::new(&online, &full());
        proxied.proxy = Some((3128, "pypi.org".into()));
        let known = entry(&proxied);
        assert_eq!(known.status, ProtectionStatus::Enforced);
        assert!(
            known.detail.contains("the connections the domain-allowlist proxy refused"),
            "{}",
            known.detail
        );
        let open = entry(&Plan::new(&online, &full()));
        assert!(open.detail.starts_with("no network refusal to record"), "{}", open.detail);
    }

    #[test]
    fn newer_kernels_are_used_at_the_vetted_abi() {
        let plan = Plan::new(&SandboxPolicy::default(), &KernelSupport { landlock_abi: 9, ..full() });
        assert_eq!(plan.landlock_abi, MAX_VETTED_ABI);
        let report = plan.report(None);
        assert!(report.summary_line().contains("landlock ABI 9 (used as ABI 7)"), "{report}");
    }
}
