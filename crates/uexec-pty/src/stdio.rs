//! The parent's side of a child's standard streams: a new PTY, or the output pipe and `/dev/null`.

use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::OFlags;
use rustix::pty::OpenptFlags;
use rustix::termios::{InputModes, OptionalActions, Winsize};
use uexec_ports::process::PtySize;

use crate::sys::{self, Backend};

/// Make `fd` non-blocking.
pub(crate) fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | OFlags::NONBLOCK)?;
    Ok(())
}

/// A new PTY of `size`: the master (non-blocking, close-on-exec) and the slave (close-on-exec, not our
/// controlling terminal), both `>= 3`. The line discipline is the kernel's default plus `IUTF8`. The Linux
/// fast path opens the slave from the master (`TIOCGPTPEER`, no path lookup); the portable core opens
/// `ptsname(master)`. Returns the failing call with the error.
pub(crate) fn open_pty(
    size: PtySize,
    backend: Backend,
) -> Result<(OwnedFd, OwnedFd), (&'static str, io::Error)> {
    let step = |call: &'static str| move |error: rustix::io::Errno| (call, io::Error::from(error));
    #[cfg(target_os = "linux")]
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
        .map_err(step("posix_openpt"))?;
    #[cfg(not(target_os = "linux"))]
    let master = {
        let master =
            rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).map_err(step("posix_openpt"))?;
        rustix::io::fcntl_setfd(&master, rustix::io::FdFlags::CLOEXEC).map_err(step("fcntl"))?;
        master
    };
    rustix::pty::grantpt(&master).map_err(step("grantpt"))?;
    rustix::pty::unlockpt(&master).map_err(step("unlockpt"))?;
    let slave = match backend {
        #[cfg(target_os = "linux")]
        Backend::Linux => rustix::pty::ioctl_tiocgptpeer(
            &master,
            OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
        )
        .map_err(step("ioctl(TIOCGPTPEER)"))?,
        Backend::Portable => {
            let path = rustix::pty::ptsname(&master, Vec::new()).map_err(step("ptsname"))?;
            rustix::fs::open(
                path.as_c_str(),
                OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(step("open"))?
        }
    };
    rustix::termios::tcsetwinsize(
        &slave,
        Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 },
    )
    .map_err(step("tcsetwinsize"))?;
    let mut termios = rustix::termios::tcgetattr(&slave).map_err(step("tcgetattr"))?;
    termios.input_modes |= InputModes::IUTF8;
    rustix::termios::tcsetattr(&slave, OptionalActions::Now, &termios).map_err(step("tcsetattr"))?;
    set_nonblocking(&master).map_err(|e| ("fcntl", e))?;
    let master = sys::fd_at_least_3(master).map_err(|e| ("fcntl", e))?;
    let slave = sys::fd_at_least_3(slave).map_err(|e| ("fcntl", e))?;
    Ok((master, slave))
}

/// The pipe mode's fds: the output pipe's read end (non-blocking) and write end, and `/dev/null` for stdin,
/// all close-on-exec and `>= 3`.
pub(crate) fn open_pipes() -> Result<(OwnedFd, OwnedFd, OwnedFd), (&'static str, io::Error)> {
    let (read, write) = sys::pipe_cloexec().map_err(|e| ("pipe", e))?;
    set_nonblocking(&read).map_err(|e| ("fcntl", e))?;
    let null = rustix::fs::open(c"/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, rustix::fs::Mode::empty())
        .map_err(|e| ("open", io::Error::from(e)))?;
    let at_least_3 = |fd| sys::fd_at_least_3(fd).map_err(|e| ("fcntl", e));
    Ok((at_least_3(read)?, at_least_3(write)?, at_least_3(null)?))
}
