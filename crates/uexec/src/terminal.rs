//! The user's terminal for `uexec run`: is stdin a terminal, its size, and raw mode restored on drop.

use std::os::fd::BorrowedFd;

use rustix::termios::{OptionalActions, Termios, isatty, tcgetattr, tcgetwinsize, tcsetattr};
use uexec_ports::process::PtySize;

/// The standard input.
pub fn stdin_fd() -> BorrowedFd<'static> {
    rustix::stdio::stdin()
}

/// The standard output.
pub fn stdout_fd() -> BorrowedFd<'static> {
    rustix::stdio::stdout()
}

/// The standard error.
pub fn stderr_fd() -> BorrowedFd<'static> {
    rustix::stdio::stderr()
}

/// True when `fd` is a terminal.
pub fn is_terminal(fd: BorrowedFd<'_>) -> bool {
    isatty(fd)
}

/// The size of the terminal on `fd`, if it is one and reports a size.
pub fn window_size(fd: BorrowedFd<'_>) -> Option<PtySize> {
    let ws = tcgetwinsize(fd).ok()?;
    (ws.ws_row > 0 && ws.ws_col > 0).then_some(PtySize { rows: ws.ws_row, cols: ws.ws_col })
}

/// Raw mode on a terminal, restored to the original settings when dropped (also on panic and early return).
#[derive(Debug)]
pub struct RawMode {
    fd: BorrowedFd<'static>,
    original: Termios,
}

impl RawMode {
    /// Put the terminal on `fd` in raw mode: no echo, no line editing, no signals from keys (Ctrl-C reaches
    /// the command as a byte), no output processing.
    pub fn enable(fd: BorrowedFd<'static>) -> std::io::Result<RawMode> {
        let original = tcgetattr(fd)?;
        let mut raw = original.clone();
        raw.make_raw();
        tcsetattr(fd, OptionalActions::Flush, &raw)?;
        Ok(RawMode { fd, original })
    }

    /// Restore the original settings now.
    pub fn restore(&self) {
        if let Err(e) = tcsetattr(self.fd, OptionalActions::Now, &self.original) {
            tracing::warn!("cannot restore the terminal settings: {e}");
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        self.restore();
    }
}
