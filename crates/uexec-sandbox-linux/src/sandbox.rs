//! The [`Sandbox`] port on Linux: prepares the Landlock ruleset, the seccomp programs and the mount plan in the
//! parent, and hands the spawner a [`ChildSetup`](uexec_ports::process::ChildSetup) hook that applies them in the child.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use uexec_domain::denial::Refusal;
use uexec_domain::hidden::HiddenPaths;
use uexec_domain::tool_files::ToolFiles;
use uexec_domain::{ProtectionReport, SandboxKind, SandboxPolicy};
use uexec_ports::process::PidScope;
use uexec_ports::{RefusalQuery, Sandbox, SandboxError, SandboxRequest, SandboxedSpawn};

use crate::child::{self, MAX_MOUNT_ROOTS, MountMode, MountPlan, MountRoot, Mounts, SandboxChild};
use crate::copy_on_write::{CopyOnWrite, CopyOnWriteDir, Overlay};
use crate::hidden::{HiddenLayout, Hide};
use crate::landlock_rules::{self, RulesetSpec};
use crate::layout::{FsLayout, c_path};
use crate::netns::{OfflineNamespace, ProxyNamespace};
use crate::plan::{DEGRADED_SETTING, Plan, degraded_summary};
use crate::seccomp::{self, SeccompPrograms, Sockets};
use crate::support::{self, KernelSupport, MountNamespace};
use crate::template::Templates;

/// Cached seccomp programs for one network setting (building them is pure, so once per process is enough).
type ProgramCache = OnceLock<Result<Arc<SeccompPrograms>, String>>;

/// The Linux sandbox: Landlock + seccomp + a private read-only mount namespace, fail-closed.
///
/// [`Default`] probes the running kernel (once, lazily); [`LinuxSandbox::with_support`] uses the given
/// [`KernelSupport`] instead, to simulate a weaker kernel.
#[derive(Debug, Default)]
pub struct LinuxSandbox {
    /// The injected kernel support, if any.
    injected: Option<KernelSupport>,
    /// The probed kernel support.
    detected: OnceLock<KernelSupport>,
    /// The support after a command's setup showed the mount namespace refused after all (see
    /// `Sandbox::replan_after_setup_failure`): every later plan is made from it.
    replanned: OnceLock<KernelSupport>,
    /// Seccomp programs: `[network off, network on, network through the proxy]`.
    programs: [ProgramCache; 3],
    /// The secret locations commands cannot read.
    hidden: HiddenPaths,
    /// Domain-allowlist mode: a policy with network access reaches only the proxy in this namespace.
    proxy: Option<ProxyNamespace>,
    /// The empty read-only tmpfs copied over hidden directories (made on first use; `None` when it cannot be).
    empty_dir: OnceLock<Option<Arc<OwnedFd>>>,
    /// The PID namespace every command runs in, shared by this server's sandboxed commands only.
    shared_pid_namespace: Option<SharedPidNamespace>,
    /// Without `CAP_SYS_ADMIN` and without [`LinuxSandbox::with_pid_namespace`]: the PID namespace of this
    /// sandbox's commands, owned by the sandbox's user namespace (made on the first command in it), or why it
    /// could not be made.
    user_pid_namespace: OnceLock<Result<crate::userns::UserPidNamespace, String>>,
    /// Mount namespaces built once per plan (see `crate::template`).
    templates: Templates,
    /// The directories commands see copy-on-write under `workspace-write` (see [`LinuxSandbox::with_copy_on_write`]).
    copy_on_write: Option<CopyOnWrite>,
    /// The most entries the search for hidden locations lists per command (`None`:
    /// [`uexec_domain::hidden::MAX_VISITED`]).
    hidden_budget: Option<usize>,
    /// Which other tools' files stay read-only (all by default: see [`LinuxSandbox::with_tool_files`]).
    tool_files: ToolFiles,
    /// The last protection report made, with the plan and layout it was made from: a command whose plan and
    /// layout are those again (most commands of a session) gets a copy instead of the report formatted anew.
    last_report: Mutex<Option<(Plan, FsLayout, ProtectionReport)>>,
    /// The network namespace of commands with the network off, with its DNS responder (made on the first such
    /// command in the privileged mode; `None` when it cannot be: those commands then get the seccomp filter
    /// alone, and no record of their lookups).
    offline: OnceLock<Option<OfflineNamespace>>,
    /// The record of what commands need on the host (placeholders, kept loose objects), taken away when none
    /// does (see [`LinuxSandbox::with_state_dir`]); `None`: placeholders of directories stay, absent tool files
    /// get none, and loose objects beyond the pins are not kept.
    keeper: Option<crate::keep::Keeper>,
}

/// A lease taken in `prepare`, finished if the prepare fails (nothing is spawned then).
struct Lease<'a> {
    keeper: Option<&'a crate::keep::Keeper>,
    id: Option<u64>,
}

impl Lease<'_> {
    /// The id, now the caller's to finish (`0`: none).
    fn keep(mut self) -> u64 {
        self.id.take().unwrap_or(0)
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let (Some(keeper), Some(id)) = (self.keeper, self.id) {
            keeper.finish(id);
        }
    }
}

/// See [`LinuxSandbox::with_pid_namespace`].
#[derive(Debug)]
struct SharedPidNamespace {
    /// The namespace (device and inode of its `nsfs` file).
    id: (u64, u64),
    /// A read-only procfs for it, made once (`None` where the kernel cannot make one for another namespace:
    /// each command then mounts its own).
    procfs: Option<Arc<OwnedFd>>,
}

impl LinuxSandbox {
    /// A sandbox that believes the kernel offers `support` (for tests and for `uexec sandbox-report --simulate`).
    /// Mechanisms missing from `support` are not used even if the kernel has them; mechanisms `support` claims but
    /// the kernel lacks make `prepare` fail (or degrade, when accepted), never silently pass.
    pub fn with_support(support: KernelSupport) -> Self {
        LinuxSandbox { injected: Some(support), ..LinuxSandbox::default() }
    }

    /// This sandbox, keeping the other tools' files of `uexec_domain::tool_files` that `tool_files` protects
    /// read-only in the writable roots (all of them by default; the person allows some with `allow_tool_files`).
    #[must_use]
    pub fn with_tool_files(mut self, tool_files: ToolFiles) -> Self {
        self.tool_files = tool_files;
        self
    }

    /// This sandbox, keeping its record of what commands need on the host under `dir` (a directory of the
    /// server's state, outside every writable root and hidden from commands; uexec's is
    /// `~/.local/state/uexec/sandbox-leftovers`): the placeholders it makes in the person's project are removed
    /// when the last command of any server on that workspace ends (or, after a crash, when the next sandbox
    /// starts: this call cleans what dead servers left), absent tool files get a placeholder too, and every loose
    /// object of a protected repository is kept aside and put back if a command removed it. See
    /// `crate::keep`.
    #[must_use]
    pub fn with_state_dir(mut self, dir: PathBuf) -> Self {
        self.keeper = Some(crate::keep::Keeper::new(dir));
        self
    }

    /// This sandbox, hiding `hidden` from every command (expanded again for each one).
    #[must_use]
    pub fn with_hidden(mut self, hidden: HiddenPaths) -> Self {
        self.hidden = hidden;
        self
    }

    /// This sandbox, listing at most `budget` entries per command when it searches for hidden locations (instead
    /// of [`uexec_domain::hidden::MAX_VISITED`]). What the search does not get through is hidden as a whole.
    #[must_use]
    pub fn with_hidden_search_budget(mut self, budget: usize) -> Self {
        self.hidden_budget = Some(budget);
        self
    }

    /// This sandbox in domain-allowlist mode: a policy with network access runs its commands in `proxy`'s
    /// network namespace (loopback only) with the proxy variables set; the app serves the proxy's listener.
    #[must_use]
    pub fn with_proxy(mut self, proxy: ProxyNamespace) -> Self {
        self.proxy = Some(proxy);
        self
    }

    /// This sandbox for a process adapter that starts every sandboxed command it prepares (each asks for
    /// [`PidScope::Sandbox`]) in the PID namespace `namespace`, which holds nothing but such commands, as
    /// `uexec-pty` does once `contain_descendants` has made one (`PtySpawner::sandbox_pid_namespace`). The
    /// commands then see each other in `/proc` and may signal each other (sessions can manage each other's
    /// processes): Landlock no longer scopes their signals, the namespace does, and `/proc` shows the whole
    /// namespace (no `hidepid`): a procfs for it made here once (Linux 6.15: `pidns=`) and copied onto each
    /// command's `/proc`, or, where it cannot be, one mounted by each command. Fails closed: each command first
    /// checks that it runs in `namespace`, and does not start (`EPERM`) otherwise.
    ///
    /// # Errors
    /// `namespace` cannot be identified (`fstat`).
    pub fn with_pid_namespace(mut self, namespace: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Self> {
        let stat = namespace_id(namespace)?;
        let procfs = match crate::sys::procfs_for(namespace) {
            Ok(fd) => Some(Arc::new(fd)),
            Err(error) => {
                tracing::debug!(%error, "no procfs made for the sandbox PID namespace: each command mounts its own");
                None
            }
        };
        self.shared_pid_namespace = Some(SharedPidNamespace { id: stat, procfs });
        Ok(self)
    }

    /// This sandbox, showing each of `dirs` to `workspace-write` commands as a writable copy-on-write view: an
    /// overlayfs whose lower layer is the directory (never written) and whose upper layer is
    /// `<base>/<slot>/<name>/upper`, where `base` is a directory of the sandbox's own outside every writable root
    /// (the server's state directory) and the slot (`0`, `1`, ...) the first one no other sandbox holds (a
    /// `flock` held while this sandbox lives). Commands outside the sandbox keep using the directory itself, so
    /// nothing a sandboxed command writes there reaches them (cargo's `CARGO_HOME`: new crates can be fetched,
    /// the person's cache is never poisoned).
    ///
    /// The overlays are made on the first command that needs them, once: only under `workspace-write` in the
    /// privileged mount mode, on Linux 6.15 or later, for directories that exist. A command gets a view only when
    /// neither the directory nor its layers overlap one of its writable roots. Otherwise the directory simply
    /// stays read-only, and the report's `copy_on_write` entry says why; hidden paths inside it stay hidden.
    #[must_use]
    pub fn with_copy_on_write(mut self, base: PathBuf, dirs: Vec<CopyOnWriteDir>) -> Self {
        self.copy_on_write = (!dirs.is_empty()).then(|| CopyOnWrite::new(base, dirs));
        self
    }

    /// The views this sandbox made, as `(directory, upper layer)` (empty until a command needed them).
    pub fn copy_on_write_layers(&self) -> Vec<(PathBuf, PathBuf)> {
        let made = self.copy_on_write.as_ref().and_then(CopyOnWrite::made_yet);
        made.map(|made| made.overlays.iter().map(|o| (o.path.clone(), o.upper.clone())).collect())
            .unwrap_or_default()
    }

    /// The overlays `plan`'s command gets, recorded with the skipped ones in `layout` (made on first use).
    fn overlays_for(&self, plan: &Plan, layout: &mut FsLayout) -> Vec<&Overlay> {
        let Some(cow) = &self.copy_on_write else {
            return Vec::new();
        };
        // Offline a command can fetch nothing new, and the person's caches serve it read-only as they are (cargo
        // builds `--offline` from a read-only home without a warning): no view, and no overlay made and torn down
        // (about 1 ms of every `uexec run`).
        let in_user_namespace = match plan.mounts {
            Some(MountMode::Privileged) => false,
            Some(MountMode::SandboxUserNamespace) => true,
            _ => return Vec::new(),
        };
        if !plan.workspace_write || plan.network_off {
            return Vec::new();
        }
        let made = cow.made(in_user_namespace);
        layout.copy_on_write_skipped.clone_from(&made.skipped);
        let mut used = Vec::new();
        for overlay in &made.overlays {
            let clash = layout.roots.iter().find_map(|root| {
                if overlay.path.starts_with(root) {
                    Some(format!("inside the writable root {}", root.display()))
                } else if root.starts_with(&overlay.path) {
                    Some(format!("holds the writable root {}", root.display()))
                } else if overlay.layers.starts_with(root) || root.starts_with(&overlay.layers) {
                    Some(format!(
                        "its layers {} overlap the writable root {}, where commands could write them directly",
                        overlay.layers.display(),
                        root.display()
                    ))
                } else {
                    None
                }
            });
            match clash {
                Some(why) => layout.copy_on_write_skipped.push(format!("{}: {why}", overlay.path.display())),
                None => {
                    layout.copy_on_write.push((overlay.path.clone(), overlay.upper.clone()));
                    used.push(overlay);
                }
            }
        }
        used
    }

    /// The kernel support this sandbox works with.
    pub fn support(&self) -> &KernelSupport {
        if let Some(support) = self.replanned.get() {
            return support;
        }
        match &self.injected {
            Some(support) => support,
            None => self.detected.get_or_init(KernelSupport::detect),
        }
    }

    /// The seccomp programs for `sockets`, built once.
    fn programs(&self, sockets: Sockets) -> Result<Arc<SeccompPrograms>, String> {
        let cache = &self.programs[sockets as usize];
        cache.get_or_init(|| seccomp::build(sockets).map(Arc::new)).clone()
    }

    /// The empty read-only tmpfs for hidden directories, made once (`None` when the kernel or the process's
    /// privileges do not allow it: each child then mounts one itself).
    fn empty_dir(&self) -> Option<Arc<OwnedFd>> {
        self.empty_dir
            .get_or_init(|| match crate::sys::empty_read_only_tmpfs() {
                Ok(fd) => Some(Arc::new(fd)),
                Err(error) => {
                    tracing::debug!(%error, "no shared empty tmpfs: each command mounts its own");
                    None
                }
            })
            .clone()
    }

    /// This sandbox, giving commands with the network off `offline` (started early by a process that cannot
    /// start threads later, as `uexec run` once it entered a PID namespace) instead of making its own.
    #[must_use]
    pub fn with_offline_namespace(self, offline: OfflineNamespace) -> Self {
        let _ = self.offline.set(Some(offline));
        self
    }

    /// This sandbox without the offline namespace: commands with the network off get the seccomp filter alone
    /// (`AF_UNIX` sockets only), and their lookups are not recorded (`Sandbox::refusals` then says nothing for
    /// them, and callers fall back to the keyword heuristic). For comparison and for hosts that want it so.
    #[must_use]
    pub fn without_offline_namespace(self) -> Self {
        let _ = self.offline.set(None);
        self
    }

    /// The offline namespace's descriptor for a command whose mount namespace is made as `mode`, made on first
    /// use (see the `offline` field), or why there is none for it.
    fn offline(&self, mode: Option<MountMode>) -> Result<Arc<OwnedFd>, String> {
        let offline = self.offline.get_or_init(|| match OfflineNamespace::start() {
            Ok(ns) => Some(ns),
            Err(error) => {
                tracing::debug!(%error, "no offline network namespace: lookups are not recorded");
                None
            }
        });
        let Some(offline) = offline else {
            return Err("its thread could not start".into());
        };
        let made = offline.namespace().map_err(|failure| failure.text())?;
        // A command enters the namespace from the user namespace that owns it.
        match (mode, &made.owner) {
            (Some(MountMode::Privileged), None) => Ok(made.ns),
            (Some(MountMode::SandboxUserNamespace), Some(owner)) if crate::userns::is_shared(owner) => {
                Ok(made.ns)
            }
            _ => Err("it was made in another user namespace than the commands' mount namespace".into()),
        }
    }

    /// The PID namespace of this sandbox's commands in the sandbox's user namespace, made on first use (see the
    /// `user_pid_namespace` field), or why there is none.
    fn user_pid_namespace(&self) -> Result<&crate::userns::UserPidNamespace, &str> {
        self.user_pid_namespace
            .get_or_init(|| crate::userns::UserPidNamespace::make().map_err(|failure| failure.text()))
            .as_ref()
            .map_err(String::as_str)
    }

    /// The PID namespace of a command made as `mode` (device, inode), and for the sandbox's user namespace its
    /// descriptor (the command enters it), when it runs in one.
    fn command_pid_namespace(&self, mode: Option<MountMode>) -> (Option<(u64, u64)>, Option<Arc<OwnedFd>>) {
        if let Some(shared) = &self.shared_pid_namespace {
            return (Some(shared.id), None);
        }
        match (mode, self.user_pid_namespace.get()) {
            (Some(MountMode::SandboxUserNamespace), Some(Ok(ns))) => {
                (Some(ns.id), Some(ns.namespace.clone()))
            }
            _ => (None, None),
        }
    }

    /// The offline namespace, when it was made.
    fn made_offline(&self) -> Option<&OfflineNamespace> {
        self.offline.get().and_then(Option::as_ref).filter(|offline| offline.is_made())
    }

    /// The plan for `policy`: hidden paths and the proxy as configured.
    fn plan(&self, policy: &SandboxPolicy) -> Plan {
        let mut plan = Plan::new(policy, self.support());
        // Without CAP_SYS_ADMIN the commands enter the sandbox's user namespace, where the network namespaces
        // and overlays are made; where it cannot be made they nest a user namespace of their own.
        if plan.mounts == Some(MountMode::UserNamespace) {
            match crate::userns::shared() {
                Ok(_) => plan.mounts = Some(MountMode::SandboxUserNamespace),
                Err(failure) => plan.userns_missing = Some(failure.text()),
            }
        }
        plan.hide = !self.hidden.is_empty();
        plan.tool_files = self.tool_files.text();
        plan.shared_pid_namespace = self.shared_pid_namespace.is_some();
        if plan.mounts == Some(MountMode::SandboxUserNamespace) && self.shared_pid_namespace.is_none() {
            match self.user_pid_namespace() {
                Ok(_) => plan.shared_pid_namespace = true,
                Err(why) => plan.pid_namespace_missing = Some(why.to_owned()),
            }
        }
        if let Some(cow) = &self.copy_on_write {
            plan.copy_on_write = cow.dirs.iter().map(|d| d.path.clone()).collect();
            plan.copy_on_write_base = Some(cow.base.clone());
            plan.copy_on_write_unavailable = crate::copy_on_write::kernel_copies_detached_mounts().err();
        }
        if policy.has_network_access()
            && let Some(proxy) = &self.proxy
        {
            plan.proxy = Some((proxy.port(), proxy.rules().to_owned()));
            plan.proxy_enterable = match (plan.mounts, proxy.owner()) {
                (Some(MountMode::Privileged), None) => true,
                (Some(MountMode::SandboxUserNamespace), Some(owner)) => crate::userns::is_shared(owner),
                _ => false,
            };
        }
        // `Some(None)`: made without it (`without_offline_namespace`), or it could not be started.
        let without = matches!(self.offline.get(), Some(None));
        let owned = matches!(plan.mounts, Some(MountMode::Privileged | MountMode::SandboxUserNamespace));
        plan.offline = plan.network_off && plan.seccomp && owned && !without;
        if plan.network_off && !plan.offline {
            plan.offline_missing = Some(if !plan.seccomp {
                "it needs seccomp".to_owned()
            } else if without {
                "this sandbox was made without it".to_owned()
            } else {
                match plan.mounts {
                    None => "it needs a private mount namespace".to_owned(),
                    _ => format!(
                        "without CAP_SYS_ADMIN it needs the sandbox's user namespace, which could not be made: {}",
                        plan.userns_missing.as_deref().unwrap_or("unknown")
                    ),
                }
            });
        }
        plan
    }
}

impl Sandbox for LinuxSandbox {
    fn kind(&self) -> SandboxKind {
        SandboxKind::LinuxLandlockSeccomp
    }

    fn report(&self, policy: &SandboxPolicy) -> ProtectionReport {
        if policy.is_unrestricted() {
            return full_access_report();
        }
        self.plan(policy).report(None)
    }

    fn prepare(&self, request: SandboxRequest) -> Result<SandboxedSpawn, SandboxError> {
        let SandboxRequest { mut spawn, workspace, policy, tmpdir, allow_degraded } = request;
        if policy.is_unrestricted() {
            // A caller runs it unsandboxed with the `FullAccessPolicy` escape reason instead.
            return Err(SandboxError::Unrestricted);
        }
        if !spawn.cwd.is_absolute() || !spawn.cwd.is_dir() {
            return Err(SandboxError::InvalidPath {
                path: spawn.cwd.clone(),
                reason: "the working directory does not exist, is not a directory or is not absolute".into(),
            });
        }
        let mut plan = self.plan(&policy);
        // Held from before any placeholder is made until the command is finished (or this prepare fails).
        let lease = Lease {
            keeper: self.keeper.as_ref(),
            id: self.keeper.as_ref().and_then(|k| k.begin(&workspace)),
        };
        let mut layout = match lease.id {
            Some(_) => FsLayout::resolve_recorded(&policy, &workspace, tmpdir.as_deref(), &self.tool_files)?,
            None => FsLayout::resolve(&policy, &workspace, tmpdir.as_deref(), &self.tool_files)?,
        };
        let made = std::mem::take(&mut layout.placeholders.made);
        let repositories = std::mem::take(&mut layout.repositories);
        if let (Some(keeper), Some(id)) = (lease.keeper, lease.id) {
            for note in keeper.record(id, &made, &repositories) {
                if !layout.ignored.contains(&note) {
                    layout.ignored.push(note);
                }
            }
        }
        let budget = self.hidden_budget.unwrap_or(uexec_domain::hidden::MAX_VISITED);
        layout.hidden = HiddenLayout::resolve(&self.hidden, &workspace, &spawn.cwd, budget)?;
        let roots = layout.mount_roots().into_iter().map(Path::to_path_buf).collect::<Vec<_>>();
        layout.hidden.hide_other_names(&roots.iter().map(PathBuf::as_path).collect::<Vec<_>>(), budget);
        let overlays = self.overlays_for(&plan, &mut layout);
        let offline = if plan.offline {
            match self.offline(plan.mounts) {
                Ok(ns) => Some(ns),
                Err(why) => {
                    plan.offline = false;
                    plan.offline_missing = Some(why);
                    None
                }
            }
        } else {
            None
        };

        let landlock = if plan.landlock_abi > 0 {
            let roots = landlock_rules::open_roots(&layout.roots)?;
            match build_ruleset(&plan, &layout, &roots, &overlays) {
                Ok(fd) => Some(fd),
                Err(why) => {
                    plan.without_landlock(why);
                    None
                }
            }
        } else {
            None
        };
        let programs = if plan.seccomp {
            let sockets = match (plan.network_off, plan.proxy.is_some()) {
                // The offline namespace has no way out: IP sockets reach its loopback only.
                (true, _) if plan.offline => Sockets::UnixAndIp,
                (true, _) => Sockets::UnixOnly,
                (false, true) => Sockets::UnixAndIp,
                (false, false) => Sockets::Any,
            };
            match self.programs(sockets) {
                Ok(programs) => Some(programs),
                Err(why) => {
                    plan.without_seccomp(format!("building the filter failed: {why}"));
                    None
                }
            }
        } else {
            None
        };

        let report = self.report_for(&plan, &layout);
        if report.is_degraded() {
            if !allow_degraded {
                let mut missing = degraded_summary(&report);
                if plan.mounts.is_none() {
                    missing = format!("{missing}; {}", support::FULL_PROTECTION_REMEDIES);
                }
                return Err(SandboxError::Unenforceable {
                    missing,
                    setting: Some(DEGRADED_SETTING.to_owned()),
                });
            }
            // The caller says so where the person sees it (`[uexec] Sandbox:`); this is for the debug log.
            tracing::debug!(report = %report, "running with degraded sandbox protection, as the policy allows");
        }

        let mounts = match plan.mounts {
            Some(mode) => {
                let mut mounts = mount_plan(mode, &layout, &spawn.cwd)?;
                mounts.proc_hidepid = !plan.shared_pid_namespace;
                // In the sandbox's PID namespace of an ordinary user's sandbox: a procfs of it, or no command.
                mounts.fresh_proc = mode == MountMode::SandboxUserNamespace && plan.shared_pid_namespace;
                mounts.procfs = self.shared_pid_namespace.as_ref().and_then(|shared| shared.procfs.clone());
                if !mounts.hidden_dirs.is_empty() {
                    mounts.empty_dir = self.empty_dir();
                }
                for overlay in &overlays {
                    mounts.copy_on_write.push((c_path(&overlay.path)?, overlay.mount.clone()));
                }
                match self.templates.namespace_for(&mounts) {
                    Some((namespace, None)) => {
                        Some(Mounts::Enter { namespace, cwd: mounts.cwd, proc_for: None })
                    }
                    Some((namespace, Some(pid_namespace))) => Some(Mounts::Enter {
                        namespace,
                        cwd: mounts.cwd.clone(),
                        proc_for: Some((pid_namespace, Box::new(mounts))),
                    }),
                    None => Some(Mounts::Build(Box::new(mounts))),
                }
            }
            None => None,
        };
        let netns = match (&self.proxy, &plan.proxy, offline) {
            (Some(proxy), Some(_), _) => Some(proxy.descriptor()),
            (_, _, offline) => offline,
        };
        let userns = match plan.mounts {
            Some(MountMode::SandboxUserNamespace) => {
                Some(crate::userns::shared().map_err(|failure| SandboxError::Unenforceable {
                    missing: failure.text(),
                    setting: None,
                })?)
            }
            _ => None,
        };
        // In the sandbox's user namespace every capability the command holds is one there: none is kept (the
        // person has none outside either).
        let keep_capabilities = if userns.is_some() { 0 } else { child::kept_mask() };
        let (in_pid_namespace, pid_namespace) = self.command_pid_namespace(plan.mounts);
        let hook = SandboxChild {
            pid_namespace: pid_namespace.filter(|_| userns.is_some()),
            userns,
            netns,
            mounts,
            keep_capabilities,
            landlock,
            terminal_access: landlock_rules::terminal_access(plan.landlock_abi),
            seccomp: programs,
            in_pid_namespace,
        };
        let requires_fork = uexec_ports::process::ChildSetup::requires_fork(&hook);
        tracing::debug!(report = %report, requires_fork, "sandbox prepared");
        spawn.setup.push(Arc::new(hook));
        spawn.env = sandbox_env(std::mem::take(&mut spawn.env), !plan.network_off);
        if let (Some((port, _)), Some(proxy)) = (&plan.proxy, &self.proxy) {
            let names = uexec_domain::network::proxy_env_names();
            spawn.env.retain(|(name, _)| !names.iter().any(|n| name == n.as_str()));
            spawn.env.extend(
                uexec_domain::network::proxy_env_with(*port, proxy.no_proxy())
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into())),
            );
        }
        // Every sandboxed command shares the process adapter's sandbox PID namespace, where there is one.
        spawn.pid_scope = PidScope::Sandbox;
        Ok(SandboxedSpawn { spawn, report, lease: uexec_ports::SandboxLease(lease.keep()) })
    }

    fn finish(&self, lease: uexec_ports::SandboxLease) {
        if let Some(keeper) = &self.keeper
            && lease != uexec_ports::SandboxLease::NONE
        {
            keeper.finish(lease.0);
        }
    }

    fn replan_after_setup_failure(&self, stage: &str, errno: i32) -> bool {
        if !child::is_mount_stage(stage)
            || !matches!(errno, libc::EPERM | libc::EACCES | libc::ENOSPC | libc::EUSERS | libc::ENOSYS)
            || !self.support().mount_namespace.is_available()
        {
            return false;
        }
        let mut support = self.support().clone();
        support.mount_namespace = MountNamespace::Unavailable(format!(
            "a command's setup failed at {stage} with {} ({})",
            support::errno_text(errno),
            support::likely_cause(errno)
        ));
        tracing::warn!(stage, errno, "the mount namespace was refused at spawn time: planning without it");
        // A second failure racing this one finds it set: either way, later plans are made without it.
        let _ = self.replanned.set(support);
        true
    }

    fn refusal_mark(&self) -> u64 {
        self.made_offline().map_or(0, |offline| offline.log().mark())
    }

    fn refusals<'a>(&self, query: &RefusalQuery<'a>) -> Option<Vec<Refusal>> {
        if query.policy.is_unrestricted() {
            return None;
        }
        let mut found = Vec::new();
        let failed = query.exit_code.is_some_and(|code| code != 0);
        if !query.policy.has_network_access() {
            match self.made_offline() {
                Some(offline) => found
                    .extend(offline.log().since(query.mark).into_iter().map(|name| Refusal::Lookup { name })),
                // Without the responder nothing records a lookup: a resolver or socket failure in the output of
                // a failed command is the evidence (network wording only, never a file's "Permission denied").
                None if failed => found.extend(uexec_domain::denial::network_refusals(query.output)),
                None => {}
            }
        }
        if failed {
            let budget = self.hidden_budget.unwrap_or(uexec_domain::hidden::MAX_VISITED);
            let enforced = crate::refusals::Enforced {
                mounts: self.support().mount_namespace.is_available(),
                landlock: self.support().landlock_abi > 0,
            };
            found.extend(crate::refusals::from_output(
                query,
                &self.hidden,
                &self.tool_files,
                budget,
                enforced,
            ));
        }
        Some(found)
    }
}

/// The device and inode of the file behind `fd`.
fn namespace_id(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::from(fd.try_clone_to_owned()?);
    let metadata = file.metadata()?;
    Ok((metadata.dev(), metadata.ino()))
}

impl LinuxSandbox {
    /// The protection report of `plan` with `layout`: the last one made when both are equal to what it was
    /// made from (it is a function of them), else made and remembered.
    fn report_for(&self, plan: &Plan, layout: &FsLayout) -> ProtectionReport {
        let mut last = self.last_report.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((known_plan, known_layout, report)) = last.as_ref()
            && known_plan == plan
            && known_layout == layout
        {
            return report.clone();
        }
        let report = plan.report(Some(layout));
        *last = Some((plan.clone(), layout.clone(), report.clone()));
        report
    }
}

/// The report for `danger-full-access`: this sandbox enforces nothing for it.
fn full_access_report() -> ProtectionReport {
    ProtectionReport {
        sandbox: SandboxKind::None,
        policy: SandboxPolicy::DangerFullAccess.mode_str().to_owned(),
        protections: Vec::new(),
        escape_reason: Some(uexec_domain::EscapeReason::FullAccessPolicy),
    }
}

/// The Landlock ruleset for `plan` and `layout`.
fn build_ruleset(
    plan: &Plan,
    layout: &FsLayout,
    roots: &[(PathBuf, OwnedFd)],
    overlays: &[&Overlay],
) -> Result<OwnedFd, String> {
    let overlay_roots: Vec<(&Path, &OwnedFd)> =
        overlays.iter().map(|o| (o.path.as_path(), &*o.mount)).collect();
    landlock_rules::build(&RulesetSpec {
        abi: plan.landlock_abi,
        writable_roots: roots,
        overlay_roots: &overlay_roots,
        writable_files: &layout.writable_files,
        deny_tcp: plan.network_off,
        scope_signals: !plan.shared_pid_namespace,
    })
}

/// The mount work for `layout`, as C strings.
fn mount_plan(mode: MountMode, layout: &FsLayout, cwd: &Path) -> Result<MountPlan, SandboxError> {
    let roots = layout.mount_roots();
    if roots.len() > MAX_MOUNT_ROOTS {
        return Err(SandboxError::TooManyWritableRoots { count: roots.len(), max: MAX_MOUNT_ROOTS });
    }
    let (uid_map, gid_map) = if mode == MountMode::UserNamespace {
        let (uid, gid) = support::effective_ids();
        (format!("{uid} {uid} 1\n").into_bytes(), format!("{gid} {gid} 1\n").into_bytes())
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(MountPlan {
        mode,
        uid_map,
        gid_map,
        readonly_everything: !layout.roots.iter().any(|r| r == Path::new("/")),
        roots: roots
            .into_iter()
            .map(|root| Ok(MountRoot { path: c_path(root)?, nodev: !Path::new("/dev").starts_with(root) }))
            .collect::<Result<_, SandboxError>>()?,
        pinned: layout.pinned_dirs().iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        closed: layout.closed.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        protected: layout.protected.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        nodev: if dev_pts_is_a_mount() { vec![c"/dev/pts".to_owned()] } else { Vec::new() },
        hidden_pinned: layout.hidden_pinned_dirs().iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        hidden_dirs: layout.hidden.dirs.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        hidden_files: layout.hidden.files.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        empty_dir: None,
        copy_on_write: Vec::new(),
        cwd: c_path(cwd)?,
        proc_hidepid: true,
        fresh_proc: false,
        procfs: None,
    })
}

/// True when `/dev/pts` is a mount point of its own (a devpts), so it can be made `nodev`. Checked once.
fn dev_pts_is_a_mount() -> bool {
    static MOUNTED: OnceLock<bool> = OnceLock::new();
    *MOUNTED.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata("/dev/pts"), std::fs::metadata("/dev")) {
            (Ok(pts), Ok(dev)) => pts.dev() != dev.dev(),
            _ => false,
        }
    })
}

/// `env` with the `UEXEC_SANDBOX*` variables: `UEXEC_SANDBOX=linux-landlock-seccomp`, and
/// `UEXEC_SANDBOX_NETWORK_DISABLED=1` when `network` is false. Inherited values of these names are replaced.
pub(crate) fn sandbox_env(env: Vec<(OsString, OsString)>, network: bool) -> Vec<(OsString, OsString)> {
    uexec_domain::env::with_sandbox_vars(env, SandboxKind::LinuxLandlockSeccomp, network)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]
mod tests {
    use std::os::fd::FromRawFd;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    use uexec_domain::hidden::HiddenPattern;
    use uexec_ports::process::{IoMode, SpawnRequest};

    use super::*;

    #[test]
    fn a_report_is_reused_only_for_the_same_plan_and_layout() {
        let sandbox = LinuxSandbox::default();
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        let policy = SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![],
            network_access: false,
            exclude_slash_tmp: true,
            exclude_tmpdir_env_var: true,
        };
        let plan = sandbox.plan(&policy);
        let layout = FsLayout::resolve(&policy, &ws, None, &sandbox.tool_files).unwrap();
        let first = sandbox.report_for(&plan, &layout);
        assert_eq!(first, plan.report(Some(&layout)));
        assert_eq!(sandbox.report_for(&plan, &layout), first);
        // Another layout (a root more) and another plan (the network on) each get their own.
        let mut wider = layout.clone();
        wider.roots.push(PathBuf::from("/srv/extra"));
        let report = sandbox.report_for(&plan, &wider);
        assert_eq!(report, plan.report(Some(&wider)));
        assert_ne!(report, first);
        let mut open = plan.clone();
        open.network_off = false;
        assert_eq!(sandbox.report_for(&open, &layout), open.report(Some(&layout)));
        assert_eq!(sandbox.report_for(&plan, &layout), first);
    }

    /// Run `script` under `sandbox` (workspace-write in `workspace`) and return its stdout.
    fn run(sandbox: &LinuxSandbox, workspace: &Path, script: &str) -> String {
        let request = SandboxRequest {
            spawn: SpawnRequest {
                argv: vec!["sh".into(), "-c".into(), script.into()],
                cwd: workspace.to_path_buf(),
                env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                mode: IoMode::Pipes,
                setup: Vec::new(),
                pid_scope: Default::default(),
            },
            workspace: workspace.to_path_buf(),
            policy: SandboxPolicy::WorkspaceWrite {
                writable_roots: Vec::new(),
                network_access: false,
                exclude_tmpdir_env_var: true,
                exclude_slash_tmp: true,
            },
            tmpdir: None,
            allow_degraded: false,
        };
        let spawn = sandbox.prepare(request).unwrap().spawn;
        let hooks = spawn.setup.clone();
        let mut command = Command::new(&spawn.argv[0]);
        command.args(&spawn.argv[1..]).current_dir(&spawn.cwd).env_clear().envs(spawn.env.iter().cloned());
        // SAFETY: the hooks run in the forked child before exec and only make system calls (`ChildSetup`).
        unsafe {
            command.pre_exec(move || {
                for hook in &hooks {
                    hook.run_in_child()
                        .map_err(|failure| std::io::Error::from_raw_os_error(failure.errno))?;
                }
                Ok(())
            });
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn hidden_directories_are_covered_when_the_shared_tmpfs_cannot_be_copied() {
        let scratch = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(scratch.path()).unwrap();
        let (home, workspace) = (base.join("home"), base.join("ws"));
        for dir in [".ssh", ".aws"] {
            std::fs::create_dir_all(home.join(dir)).unwrap();
            std::fs::write(home.join(dir).join("key"), "SECRET\n").unwrap();
        }
        std::fs::create_dir_all(&workspace).unwrap();
        let script = format!(
            "ls -A {0}/.ssh {0}/.aws; cat {0}/.ssh/key {0}/.aws/key 2>/dev/null; true",
            home.display()
        );
        let hidden = || HiddenPaths {
            home: Some(home.clone()),
            patterns: vec![HiddenPattern::parse("~/.ssh").unwrap(), HiddenPattern::parse("~/.aws").unwrap()],
            reachable: Vec::new(),
        };
        // A detached copy made in this process's mount namespace cannot be copied from the child's new one
        // (EINVAL), as a kernel before 6.15 refuses the real shared tmpfs: the child falls back to a tmpfs of its
        // own for the first directory and a copy of it for the second.
        let flags = crate::sys::OPEN_TREE_CLONE | crate::sys::OPEN_TREE_CLOEXEC | crate::sys::AT_RECURSIVE;
        let at_fdcwd = libc::AT_FDCWD as isize as usize;
        // SAFETY: open_tree on a static path; the returned descriptor is owned by the OwnedFd below.
        let fd = unsafe {
            crate::sys::syscall(libc::SYS_open_tree, [at_fdcwd, c"/tmp".as_ptr() as usize, flags, 0, 0, 0])
        }
        .unwrap();
        // SAFETY: `fd` was just returned by open_tree and is owned by nobody else.
        let uncopyable = Arc::new(unsafe { OwnedFd::from_raw_fd(i32::try_from(fd).unwrap()) });
        let fallback = LinuxSandbox::default().with_hidden(hidden());
        fallback.empty_dir.set(Some(uncopyable)).unwrap();
        let shared = LinuxSandbox::default().with_hidden(hidden());
        for sandbox in [&fallback, &shared] {
            let out = run(sandbox, &workspace, &script);
            // Both directories list empty (not the keys, nor what a wrong mount would show) and nothing is read.
            let empty = format!("{0}/.aws:\n\n{0}/.ssh:\n", home.display());
            assert_eq!(out, empty);
        }
        assert!(shared.empty_dir.get().unwrap().is_some(), "the shared tmpfs is made on this kernel");
        // The twin: without hidden locations both keys are listed and read.
        let out = run(&LinuxSandbox::default(), &workspace, &script);
        assert_eq!(out.matches("key").count(), 2, "{out}");
        assert_eq!(out.matches("SECRET").count(), 2, "{out}");
    }
}
