//! The inert placeholders the Linux sandbox makes where a protected entry is absent (the plan says which and
//! what: `uexec_plan::Entry::Absent`), so that a read-only mount covers it and the kernel refuses its creation:
//! an empty directory or file, a `commondir` naming its git directory, a link to nowhere. Each one made is
//! recorded for its removal once no command needs it (`crate::keep`).

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use uexec_domain::gitdir::{ABSENT_LINK_TARGET, WhenAbsent};

use crate::sys::Placeholder;

/// Where the placeholders of one layout go: made on the host (each one made recorded, for its removal once no
/// command needs it: `crate::keep`), or, for a layout that is only read (what a finished command's refusals
/// name), not made at all: an absent entry is then taken as protected, as it was while the command ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placeholders {
    /// Make nothing.
    pub(crate) dry: bool,
    /// What was made, in the order it was made.
    pub(crate) made: Vec<uexec_domain::leftovers::Made>,
}

impl Placeholders {
    /// Create the placeholder `path` (see [`create_placeholder`]) unless dry, recording what was made.
    pub(crate) fn create(&mut self, path: &Path, placeholder: WhenAbsent) -> io::Result<()> {
        if self.dry {
            return Ok(());
        }
        create_placeholder(path, placeholder, &mut self.made)
    }
}

/// Create the empty directory or file `path` (absent) in its parent, opened without following any symlink, with
/// the parent's owner: an inert placeholder for a mount to cover. Its parent (`objects/info`) is created the same
/// way when absent. An entry that appears meanwhile (`EEXIST`) is fine: whatever it is gets protected. What this
/// call made is appended to `made` (never what was there already).
pub(crate) fn create_placeholder(
    path: &Path,
    placeholder: WhenAbsent,
    made: &mut Vec<uexec_domain::leftovers::Made>,
) -> io::Result<()> {
    use uexec_domain::leftovers::{Made, MadeKind};
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let dir = match open_dir(parent) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound && parent.ends_with("objects/info") => {
            create_placeholder(parent, WhenAbsent::EmptyDir, made)?;
            open_dir(parent)?
        }
        Err(e) => return Err(e),
    };
    let name = CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let target = CString::new(ABSENT_LINK_TARGET).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let (placeholder, kind) = match placeholder {
        WhenAbsent::EmptyDir => (Placeholder::Dir, MadeKind::Dir),
        WhenAbsent::SelfCommonDir => (Placeholder::File(b".\n"), MadeKind::File),
        WhenAbsent::AbsentLink => (Placeholder::Link(&target), MadeKind::Link),
        WhenAbsent::EmptyFile | WhenAbsent::WholeReadOnly => (Placeholder::File(b""), MadeKind::File),
    };
    if let Some(inode) = crate::sys::create_placeholder_at(&dir, &name, placeholder)? {
        made.push(Made { kind, inode, path: path.as_os_str().as_bytes().to_vec() });
    }
    Ok(())
}

/// `parent` as a directory descriptor, opened without following a symlink.
fn open_dir(parent: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(parent.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    crate::sys::open_dir_no_symlinks(&c)
}
