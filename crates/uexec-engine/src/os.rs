//! The engine's few file-system calls whose shape differs by OS (permission bits, a file's identity), so the
//! rest of the engine type-checks for every target (`cargo xtask ci` checks Windows as well as macOS). uexec
//! runs commands on Linux and macOS only; on other systems these answer conservatively.

use std::fs::{DirBuilder, File, Metadata, OpenOptions};
use std::io;
use std::path::Path;

/// What identifies a file's version: device, inode, size and modification time (seconds, nanoseconds).
pub(crate) type FileVersion = (u64, u64, u64, i64, i64);

/// The version of the file `meta` describes.
#[cfg(unix)]
pub(crate) fn file_version(meta: &Metadata) -> FileVersion {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec())
}

/// The version of the file `meta` describes (no device or inode here: size and modification time).
#[cfg(not(unix))]
pub(crate) fn file_version(meta: &Metadata) -> FileVersion {
    let modified = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    let (secs, nanos) = modified.map_or((0, 0), |d| (d.as_secs(), d.subsec_nanos()));
    (0, 0, meta.len(), i64::try_from(secs).unwrap_or(i64::MAX), i64::from(nanos))
}

/// True when `meta` is a regular file someone may execute.
#[cfg(unix)]
pub(crate) fn is_executable(meta: &Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.is_file() && meta.permissions().mode() & 0o111 != 0
}

/// True when `meta` is a regular file (no execute bit here).
#[cfg(not(unix))]
pub(crate) fn is_executable(meta: &Metadata) -> bool {
    meta.is_file()
}

/// Creates `path`, which must not exist, readable and writable by its owner only (0600).
pub(crate) fn create_private_file(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Creates `path` and its missing parents, the new ones usable by their owner only (0700).
pub(crate) fn create_private_dir_all(path: &Path) -> io::Result<()> {
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

/// The content of the regular file `path` when it holds at most `limit` bytes: opened without following a
/// symlink, without blocking and without becoming a controlling terminal (a FIFO or device planted there is
/// never waited on), checked with `fstat`. `None` for anything else.
#[cfg(unix)]
pub(crate) fn read_small_regular_file(path: &Path, limit: u64) -> Option<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty()).ok()?;
    bounded_read(File::from(fd), limit)
}

/// The content of the regular file `path` when it holds at most `limit` bytes (checked with `lstat` first).
#[cfg(not(unix))]
pub(crate) fn read_small_regular_file(path: &Path, limit: u64) -> Option<Vec<u8>> {
    if !std::fs::symlink_metadata(path).ok()?.is_file() {
        return None;
    }
    bounded_read(File::open(path).ok()?, limit)
}

fn bounded_read(file: File, limit: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > limit {
        return None;
    }
    let mut content = Vec::new();
    file.take(limit + 1).read_to_end(&mut content).ok()?;
    (content.len() as u64 <= limit).then_some(content)
}
