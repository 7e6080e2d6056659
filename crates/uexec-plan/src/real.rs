//! The real host ([`RealHost`]): `std::fs` for `lstat`, `readlink` and `realpath`, and `rustix` for what must
//! not follow a symbolic link: a listing opens its directory with `O_NOFOLLOW`; a small file is opened, and a
//! path reached, on Linux with `openat2` and `RESOLVE_NO_SYMLINKS` (no link anywhere on the way), elsewhere with
//! `O_NOFOLLOW` (no link at the end).

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use uexec_domain::gitdir::GitFileProblem;

use crate::host::{HostView, Kind, Meta, Unreached};

/// The host's file system, read without following what a command could have planted (see [`HostView`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct RealHost;

impl HostView for RealHost {
    fn lstat(&self, path: &Path) -> io::Result<Meta> {
        let meta = std::fs::symlink_metadata(path)?;
        let file_type = meta.file_type();
        let kind = if file_type.is_symlink() {
            Kind::Symlink
        } else if file_type.is_dir() {
            Kind::Dir
        } else if file_type.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        Ok(Meta { kind, len: meta.len(), birth: meta.created().ok() })
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }

    fn each_entry(&self, dir: &Path, visit: &mut dyn FnMut(&OsStr, Kind) -> bool) -> io::Result<bool> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(CWD, dir, flags, Mode::empty())?;
        let mut listing = Dir::read_from(&fd)?;
        while let Some(entry) = listing.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let kind = match entry.file_type() {
                FileType::Directory => Kind::Dir,
                FileType::RegularFile => Kind::File,
                FileType::Symlink => Kind::Symlink,
                // A file system that does not fill in `d_type` costs one `lstat` of the entry.
                FileType::Unknown => {
                    match rustix::fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(stat) => kind_of_mode(FileType::from_raw_mode(stat.st_mode as _)),
                        Err(e) if e == Errno::NOENT => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => Kind::Other,
            };
            if !visit(OsStr::from_bytes(name), kind) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn read_small_file(&self, path: &Path, limit: u64) -> Result<Vec<u8>, GitFileProblem> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW;
        let file = match open_no_symlinks(path, flags) {
            Ok(fd) => std::fs::File::from(fd),
            Err(e) if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) => {
                return Err(GitFileProblem::Symlink);
            }
            Err(e) => return Err(GitFileProblem::Unreadable(e.to_string())),
        };
        let meta = file.metadata().map_err(|e| GitFileProblem::Unreadable(e.to_string()))?;
        if !meta.is_file() {
            return Err(GitFileProblem::NotARegularFile);
        }
        if meta.len() > limit {
            return Err(GitFileProblem::TooLarge { size: meta.len() });
        }
        let mut content = Vec::new();
        // One byte more than the limit: a file that grew since `fstat` is still refused, never read whole.
        file.take(limit + 1)
            .read_to_end(&mut content)
            .map_err(|e| GitFileProblem::Unreadable(e.to_string()))?;
        if content.len() as u64 > limit {
            return Err(GitFileProblem::TooLarge { size: content.len() as u64 });
        }
        Ok(content)
    }

    /// On Linux one `openat2` with `RESOLVE_NO_SYMLINKS` and an `fstat`; elsewhere an `lstat` a component.
    fn reach(&self, path: &Path) -> Result<Kind, Unreached> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        match openat2_no_symlinks(path, OFlags::PATH) {
            Some(Ok(fd)) => {
                let stat =
                    rustix::fs::fstat(&fd).map_err(|e| Unreached::Missing(io::Error::from(e).to_string()))?;
                return Ok(kind_of_mode(FileType::from_raw_mode(stat.st_mode as _)));
            }
            Some(Err(e)) if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) => {
                return Err(Unreached::ThroughSymlink);
            }
            Some(Err(e)) => return Err(Unreached::Missing(e.to_string())),
            // No `openat2`: a component at a time.
            None => {}
        }
        crate::host::reach_by_lstat(&|at| self.lstat(at), path)
    }

    /// On Linux a path canonical already (absolute, no `.` or `..`, no symbolic link on the way or at the end:
    /// the common case, a writable root asked for again) costs one `openat2` with `RESOLVE_NO_SYMLINKS` (`realpath`
    /// reads every component's link, one call each); any other path goes through `std::fs::canonicalize`.
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if path.is_absolute()
            && path
                .components()
                .all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)))
        {
            match openat2_no_symlinks(path, OFlags::PATH) {
                Some(Ok(_)) => return Ok(path.components().collect()),
                // A symbolic link on the way (or no `openat2`): resolved below.
                Some(Err(e)) if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) => {}
                None => {}
                Some(Err(e)) => return Err(e),
            }
        }
        std::fs::canonicalize(path)
    }
}

/// The kind of a file type from a mode.
fn kind_of_mode(file_type: FileType) -> Kind {
    match file_type {
        FileType::Directory => Kind::Dir,
        FileType::RegularFile => Kind::File,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// Open `path` with `flags` (close-on-exec), failing with `ELOOP` on a symbolic link: on Linux anywhere on the
/// way (`openat2` with `RESOLVE_NO_SYMLINKS`; a kernel without `openat2` falls back to `O_NOFOLLOW`), elsewhere
/// at the end (`O_NOFOLLOW`).
fn open_no_symlinks(path: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Some(result) = openat2_no_symlinks(path, flags) {
        return result;
    }
    rustix::fs::openat(CWD, path, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(io::Error::from)
}

/// `openat2` of `path` with `flags` (close-on-exec) and `RESOLVE_NO_SYMLINKS`; `None` on a kernel without it.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn openat2_no_symlinks(path: &Path, flags: OFlags) -> Option<io::Result<OwnedFd>> {
    use rustix::fs::ResolveFlags;
    match rustix::fs::openat2(CWD, path, flags | OFlags::CLOEXEC, Mode::empty(), ResolveFlags::NO_SYMLINKS) {
        Err(e) if e == Errno::NOSYS => None,
        result => Some(result.map_err(io::Error::from)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn small_files_are_read_only_when_small_regular_and_reached_without_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let host: &dyn HostView = &RealHost;
        fs::write(base.join("small"), "12345").unwrap();
        assert_eq!(host.read_small_file(&base.join("small"), 10), Ok(b"12345".to_vec()));
        assert_eq!(host.read_small_file(&base.join("small"), 4), Err(GitFileProblem::TooLarge { size: 5 }));
        // 1 GiB (sparse): not read at all.
        let big = fs::File::create(base.join("big")).unwrap();
        big.set_len(1 << 30).unwrap();
        assert_eq!(
            host.read_small_file(&base.join("big"), 4096),
            Err(GitFileProblem::TooLarge { size: 1 << 30 })
        );
        // A FIFO is not waited on; a link at the end is refused.
        assert!(std::process::Command::new("mkfifo").arg(base.join("fifo")).status().unwrap().success());
        assert_eq!(host.read_small_file(&base.join("fifo"), 10), Err(GitFileProblem::NotARegularFile));
        std::os::unix::fs::symlink(base.join("small"), base.join("link")).unwrap();
        assert_eq!(host.read_small_file(&base.join("link"), 10), Err(GitFileProblem::Symlink));
        // A link on the way: refused on Linux (where every gitdir is opened so).
        std::os::unix::fs::symlink(&base, base.join("dir-link")).unwrap();
        if cfg!(target_os = "linux") {
            assert_eq!(host.read_small_file(&base.join("dir-link/small"), 10), Err(GitFileProblem::Symlink));
        }
        assert!(matches!(host.read_small_file(&base.join("none"), 10), Err(GitFileProblem::Unreadable(_))));
    }

    #[test]
    fn listings_and_reach_follow_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let host: &dyn HostView = &RealHost;
        fs::create_dir_all(base.join("real/sub")).unwrap();
        fs::write(base.join("real/file"), "").unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc", base.join("real/to-etc")).unwrap();
        let mut listed = host.list(&base.join("real"), 10).entries;
        listed.sort();
        assert_eq!(
            listed,
            vec![("file".into(), Kind::File), ("sub".into(), Kind::Dir), ("to-etc".into(), Kind::Symlink)]
        );
        assert!(host.list(&base.join("real"), 10).complete);
        let cut = host.list(&base.join("real"), 2);
        assert_eq!((cut.entries.len(), cut.complete), (2, false));
        // A link is not listed through, nor reached.
        let through = host.list(&base.join("link"), 10);
        assert!(through.entries.is_empty() && through.error.is_some(), "{through:?}");
        assert_eq!(host.reach(&base.join("real/sub")), Ok(Kind::Dir));
        assert_eq!(host.reach(&base.join("link/sub")), Err(Unreached::ThroughSymlink));
        assert_eq!(host.reach(&base.join("link")), Err(Unreached::ThroughSymlink));
        assert!(matches!(host.reach(&base.join("none")), Err(Unreached::Missing(_))));
        assert_eq!(host.symlink_target(&base.join("link")), Some(base.join("real")));
        assert_eq!(host.canonicalize(&base.join("link/sub")).unwrap(), base.join("real/sub"));
        assert_eq!(host.lstat(&base.join("link")).unwrap().kind, Kind::Symlink);
    }

    #[test]
    fn canonicalize_takes_the_short_way_only_for_plain_paths() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let host: &dyn HostView = &RealHost;
        fs::create_dir_all(base.join("real/dir")).unwrap();
        fs::write(base.join("real/dir/file"), "x").unwrap();
        symlink(base.join("real"), base.join("link")).unwrap();
        symlink(base.join("real/dir/file"), base.join("file-link")).unwrap();
        assert_eq!(host.canonicalize(&base.join("real/dir")).unwrap(), base.join("real/dir"));
        // A link on the way, a final link (its target is what counts: a hidden `~/.ssh -> dotfiles/ssh` covers
        // the target), `..`: resolved as `std::fs::canonicalize` does.
        for (given, expected) in [
            (base.join("link/dir"), base.join("real/dir")),
            (base.join("file-link"), base.join("real/dir/file")),
            (base.join("real/dir/../dir/file"), base.join("real/dir/file")),
        ] {
            assert_eq!(host.canonicalize(&given).unwrap(), expected, "{}", given.display());
        }
        assert_eq!(host.canonicalize(&base.join("none")).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(host.canonicalize(&base.join("link/none")).unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}
