//! A path's canonical form with the metadata of what it names, the short way when the path is already
//! canonical: the one path resolver of the layout (`layout.rs`) and the hidden locations (`hidden.rs`).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// `path` with every symbolic link resolved, as `fs::canonicalize` gives it, the metadata of what it names, and
/// whether `path` was canonical already (absolute, no `.` or `..`, no symbolic link on the way or at the end).
/// That common case costs one `openat2` with `RESOLVE_NO_SYMLINKS` and an `fstat` (`realpath` reads every
/// component's link, one call each); any other path goes through `fs::canonicalize`.
pub(crate) fn canonicalize(path: &Path) -> io::Result<(PathBuf, fs::Metadata, bool)> {
    let plain = path.is_absolute()
        && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if plain && let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) {
        match crate::sys::open_path_no_symlinks(&c_path) {
            Ok(fd) => {
                let metadata = fs::File::from(fd).metadata()?;
                return Ok((path.components().collect(), metadata, true));
            }
            // A symbolic link on the way: resolved below.
            Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {}
            Err(error) => return Err(error),
        }
    }
    let canonical = fs::canonicalize(path)?;
    let metadata = fs::metadata(&canonical)?;
    Ok((canonical, metadata, false))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn canonicalize_takes_the_short_way_only_for_plain_paths() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(base.join("real/dir")).unwrap();
        fs::write(base.join("real/dir/file"), "x").unwrap();
        symlink(base.join("real"), base.join("link")).unwrap();
        symlink(base.join("real/dir/file"), base.join("file-link")).unwrap();
        let (path, meta, plain) = canonicalize(&base.join("real/dir")).unwrap();
        assert_eq!((path, meta.is_dir(), plain), (base.join("real/dir"), true, true));
        // A link on the way, a final link (its target is what counts: a hidden `~/.ssh -> dotfiles/ssh`
        // covers the target), `..`: resolved as `fs::canonicalize` does.
        for (given, expected, is_dir) in [
            (base.join("link/dir"), base.join("real/dir"), true),
            (base.join("file-link"), base.join("real/dir/file"), false),
            (base.join("real/dir/../dir/file"), base.join("real/dir/file"), false),
        ] {
            let (path, meta, plain) = canonicalize(&given).unwrap();
            assert_eq!((path, meta.is_dir(), plain), (expected, is_dir, false), "{}", given.display());
        }
        assert_eq!(canonicalize(&base.join("none")).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(canonicalize(&base.join("link/none")).unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}
