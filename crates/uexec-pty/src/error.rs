//! The port's errors built from OS failures: the failing call and the OS error number are kept, never
//! flattened into text.

use std::io;

use uexec_ports::process::{OsError, ProcessError, SpawnError};

/// The errno of `error` (`EIO` when it carries none).
pub(crate) fn errno_of(error: &io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EIO)
}

/// `call` failed with `errno`, while talking to a process.
pub(crate) fn os_error(call: &'static str, errno: rustix::io::Errno) -> ProcessError {
    ProcessError::Os(OsError::new(call, errno.raw_os_error()))
}

/// `call` failed with `error`, while talking to a process.
pub(crate) fn io_error(call: &'static str, error: &io::Error) -> ProcessError {
    ProcessError::Os(OsError::new(call, errno_of(error)))
}

/// `call` failed with `error`, while spawning.
pub(crate) fn spawn_io_error(call: &'static str, error: &io::Error) -> SpawnError {
    SpawnError::Os(OsError::new(call, errno_of(error)))
}
