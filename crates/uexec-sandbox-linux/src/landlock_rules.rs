//! The Landlock ruleset: built in the parent (a file descriptor), enforced in the child with
//! `landlock_restrict_self`.
//!
//! Rules: read and execute everywhere; every write right beneath each writable root (except creating device
//! nodes); read, write and truncate on `/dev/null` and `/dev/tty`. The ruleset handles every filesystem right of
//! the ABI, `IOCTL_DEV` included (ABI >= 5): device ioctls work on `/dev/null`, `/dev/tty` and the command's own
//! terminal only, so a sandboxed root cannot drive `/dev/loop-control`, `/dev/kvm` or a disk through a
//! descriptor opened for reading (the dangerous terminal ioctls are denied by seccomp). With the network off and
//! ABI >= 4 it also handles TCP bind/connect with no rule, so even a TCP socket received from outside cannot
//! connect. With ABI >= 6 it scopes signals and abstract UNIX sockets: the
//! command cannot signal or connect to processes outside the sandbox (the uexec server, the test runner, ...).
//!
//! The crate's `HardRequirement` compatibility level turns any right the kernel cannot enforce into an error
//! instead of silently dropping it.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};

/// The highest ABI whose rights this crate has vetted; newer kernels are used at this level.
pub(crate) const MAX_VETTED_ABI: u32 = 7;
/// The ABI from which every write is controlled (`LANDLOCK_ACCESS_FS_TRUNCATE`).
pub(crate) const FULL_FILESYSTEM_ABI: u32 = 3;
/// The ABI that controls TCP bind/connect.
pub(crate) const NETWORK_ABI: u32 = 4;
/// The ABI with signal and abstract UNIX socket scoping.
pub(crate) const SCOPE_ABI: u32 = 6;

/// What the ruleset allows.
#[derive(Debug)]
pub(crate) struct RulesetSpec<'a> {
    /// The ABI to use (at most [`MAX_VETTED_ABI`]).
    pub(crate) abi: u32,
    /// Canonical writable directories, each with a descriptor opened without following symlinks
    /// ([`open_roots`]).
    pub(crate) writable_roots: &'a [(PathBuf, OwnedFd)],
    /// Copy-on-write views (their path, and their detached overlay mount, whose root is the root of every copy
    /// a command attaches): writable beneath like a root. Landlock rules are on inodes and a rule on the
    /// person's directory would not reach through the mount that covers it, so the rule is on the overlay's.
    pub(crate) overlay_roots: &'a [(&'a Path, &'a OwnedFd)],
    /// Files that may be written (`/dev/null`, `/dev/tty`), when they exist.
    pub(crate) writable_files: &'a [PathBuf],
    /// Deny TCP bind/connect (network off).
    pub(crate) deny_tcp: bool,
    /// Scope signals to the domain (ABI >= 6). Off when the command runs in a PID namespace that holds only
    /// this server's sandboxed commands: that namespace scopes its signals, and they may signal each other.
    pub(crate) scope_signals: bool,
}

/// The `landlock` crate's ABI for a number.
fn abi_of(abi: u32) -> ABI {
    ABI::from(i32::try_from(abi.min(MAX_VETTED_ABI)).unwrap_or(0))
}

/// The filesystem rights the ruleset handles at `abi`.
pub(crate) fn handled_fs(abi: u32) -> BitFlags<AccessFs> {
    AccessFs::from_all(abi_of(abi))
}

/// The rights of the rule the child adds for its own terminal, as the kernel's bit mask.
pub(crate) fn terminal_access(abi: u32) -> u64 {
    let ioctl = if handled_fs(abi).contains(AccessFs::IoctlDev) {
        crate::sys::LANDLOCK_ACCESS_FS_IOCTL_DEV
    } else {
        0
    };
    crate::sys::LANDLOCK_ACCESS_FS_READ_WRITE_FILE | ioctl
}

/// The rights granted beneath a writable root: everything handled but creating device nodes.
pub(crate) fn root_access(abi: u32) -> BitFlags<AccessFs> {
    handled_fs(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

/// Build the ruleset and return its file descriptor (close-on-exec, as the kernel creates it).
pub(crate) fn build(spec: &RulesetSpec<'_>) -> Result<OwnedFd, String> {
    let abi = abi_of(spec.abi);
    let fs = handled_fs(spec.abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(fs)
        .map_err(|e| format!("landlock: {e}"))?;
    if spec.deny_tcp && spec.abi >= NETWORK_ABI {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(|e| format!("landlock network rights: {e}"))?;
    }
    if spec.abi >= SCOPE_ABI {
        let scopes = if spec.scope_signals { Scope::from_all(abi) } else { Scope::AbstractUnixSocket.into() };
        ruleset = ruleset.scope(scopes).map_err(|e| format!("landlock scopes: {e}"))?;
    }
    let mut created = ruleset.create().map_err(|e| format!("landlock_create_ruleset: {e}"))?;
    created = add(created, Path::new("/"), AccessFs::from_read(abi))?;
    for (root, fd) in spec.writable_roots {
        created = created
            .add_rule(PathBeneath::new(fd, root_access(spec.abi)))
            .map_err(|e| format!("landlock: rule for {}: {e}", root.display()))?;
    }
    for (path, fd) in spec.overlay_roots {
        created = created
            .add_rule(PathBeneath::new(*fd, root_access(spec.abi)))
            .map_err(|e| format!("landlock: rule for the copy-on-write view of {}: {e}", path.display()))?;
    }
    let file_rights =
        (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev) & fs;
    for file in spec.writable_files {
        created = add(created, file, file_rights)?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| "landlock: the kernel did not create a ruleset".to_owned())
}

/// Open each canonical writable root without following symlinks: a root swapped for a symlink since it was
/// resolved (by a sandboxed command, when its parent is writable) is an error (nothing runs, degraded or not)
/// instead of a rule for the symlink's target.
pub(crate) fn open_roots(roots: &[PathBuf]) -> Result<Vec<(PathBuf, OwnedFd)>, uexec_ports::SandboxError> {
    roots
        .iter()
        .map(|root| {
            let fd = crate::sys::open_dir_no_symlinks(&crate::layout::c_path(root)?).map_err(|e| {
                uexec_ports::SandboxError::InvalidPath {
                    path: root.clone(),
                    reason: format!("the writable root changed since it was resolved: {e}"),
                }
            })?;
            Ok((root.clone(), fd))
        })
        .collect()
}

/// Add a path-beneath rule for `path`.
fn add(
    created: landlock::RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<landlock::RulesetCreated, String> {
    let fd = PathFd::new(path).map_err(|e| format!("landlock: cannot open {}: {e}", path.display()))?;
    created
        .add_rule(PathBeneath::new(fd, access))
        .map_err(|e| format!("landlock: rule for {}: {e}", path.display()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn handled_rights_follow_the_abi() {
        assert!(!handled_fs(2).contains(AccessFs::Truncate));
        assert!(handled_fs(3).contains(AccessFs::Truncate | AccessFs::Refer));
        assert!(handled_fs(7).contains(AccessFs::IoctlDev) && !handled_fs(4).contains(AccessFs::IoctlDev));
        assert_eq!(terminal_access(7), crate::sys::LANDLOCK_ACCESS_FS_READ_WRITE_FILE | (1 << 15));
        assert_eq!(terminal_access(4), crate::sys::LANDLOCK_ACCESS_FS_READ_WRITE_FILE);
        // A newer kernel is used at the vetted level: no unknown right is handled.
        assert_eq!(handled_fs(12), handled_fs(MAX_VETTED_ABI));
        assert!(!root_access(7).contains(AccessFs::MakeBlock));
        assert!(root_access(7).contains(AccessFs::MakeReg | AccessFs::Refer | AccessFs::WriteFile));
    }

    #[test]
    fn builds_a_ruleset_on_this_kernel() {
        let dir = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        let roots = open_roots(std::slice::from_ref(&dir)).unwrap();
        let spec = RulesetSpec {
            abi: 7,
            writable_roots: &roots,
            overlay_roots: &[],
            writable_files: &[PathBuf::from("/dev/null")],
            deny_tcp: true,
            scope_signals: true,
        };
        build(&spec).unwrap();
    }
}
