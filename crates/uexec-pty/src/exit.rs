//! Knowing when a session leader may have exited, through the tokio reactor: a pidfd (Linux fast path), a
//! kqueue with `EVFILT_PROC`/`NOTE_EXIT` (portable core on macOS), or `SIGCHLD` (portable core elsewhere).
//! Reaping itself (`waitid`/`waitpid`) is `reap`'s; this only says when to try.

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::BorrowedFd;
use std::os::fd::OwnedFd;

use rustix::process::Pid;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::sys::{self, Backend};

/// What wakes a leader's waiters.
pub(crate) enum ExitWatch {
    /// The leader's pidfd: readable once it has exited.
    #[cfg(target_os = "linux")]
    PidFd(AsyncFd<OwnedFd>),
    /// A kqueue with the leader's `NOTE_EXIT`; `None` when it had exited before it could be watched.
    #[cfg(target_os = "macos")]
    Kqueue(Option<AsyncFd<OwnedFd>>),
    /// `SIGCHLD`, delivered through tokio's signal driver: any child's change wakes every waiter, which
    /// then tries to reap its own leader.
    #[cfg(not(target_os = "macos"))]
    ChildSignal,
}

/// A waiter's registration, made before it checks the leader, so that an exit right after the check is not
/// missed.
pub(crate) enum Armed {
    /// The fd-based watches need none: their readiness stays set.
    Nothing,
    /// A `SIGCHLD` listener.
    #[cfg(not(target_os = "macos"))]
    Signal(tokio::signal::unix::Signal),
}

impl ExitWatch {
    /// The watch for the leader `pid` created with `backend` (`pidfd`: the one the Linux fast path got at
    /// creation). Needs a tokio runtime with IO enabled.
    pub(crate) fn new(backend: Backend, pid: Pid, pidfd: Option<OwnedFd>) -> io::Result<ExitWatch> {
        let _ = pid;
        match (backend, pidfd) {
            #[cfg(target_os = "linux")]
            (Backend::Linux, Some(pidfd)) => Ok(ExitWatch::PidFd(sys::register(pidfd, Interest::READABLE)?)),
            #[cfg(target_os = "linux")]
            (Backend::Linux, None) => Err(io::Error::from_raw_os_error(libc::EBADF)),
            #[cfg(target_os = "macos")]
            (Backend::Portable, _) => match sys::kqueue_for_exit(pid)? {
                Some(queue) => Ok(ExitWatch::Kqueue(Some(sys::register(queue, Interest::READABLE)?))),
                None => Ok(ExitWatch::Kqueue(None)),
            },
            #[cfg(not(target_os = "macos"))]
            (Backend::Portable, _) => {
                // Installs tokio's SIGCHLD handler now, so that no exit before the first wait is missed.
                drop(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?);
                Ok(ExitWatch::ChildSignal)
            }
        }
    }

    /// The leader's pidfd, on the Linux fast path.
    #[cfg(target_os = "linux")]
    pub(crate) fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            ExitWatch::PidFd(pidfd) => Some(std::os::fd::AsFd::as_fd(pidfd.get_ref())),
            #[cfg(not(target_os = "macos"))]
            ExitWatch::ChildSignal => None,
        }
    }

    /// Register a waiter; call before checking whether the leader has exited.
    pub(crate) fn arm(&self) -> io::Result<Armed> {
        match self {
            #[cfg(not(target_os = "macos"))]
            ExitWatch::ChildSignal => {
                Ok(Armed::Signal(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?))
            }
            #[allow(unreachable_patterns, reason = "the fd-based variants exist per platform")]
            _ => Ok(Armed::Nothing),
        }
    }

    /// Wait until the leader may have exited. `still_running` is asked after a wake-up: when it says the
    /// leader still runs, the readiness is cleared so that the next wait blocks again.
    pub(crate) async fn changed(&self, armed: Armed, still_running: impl Fn() -> bool) -> io::Result<()> {
        match (self, armed) {
            #[cfg(target_os = "linux")]
            (ExitWatch::PidFd(pidfd), _) => {
                let mut ready = pidfd.readable().await?;
                if still_running() {
                    ready.clear_ready();
                }
                Ok(())
            }
            #[cfg(target_os = "macos")]
            (ExitWatch::Kqueue(Some(queue)), _) => {
                let mut ready = queue.readable().await?;
                sys::drain_kqueue(std::os::fd::AsFd::as_fd(queue.get_ref()));
                if still_running() {
                    ready.clear_ready();
                }
                Ok(())
            }
            #[cfg(target_os = "macos")]
            (ExitWatch::Kqueue(None), _) => {
                let _ = still_running;
                Ok(())
            }
            #[cfg(not(target_os = "macos"))]
            (ExitWatch::ChildSignal, Armed::Signal(mut signal)) => {
                let _ = still_running;
                signal.recv().await;
                Ok(())
            }
            #[cfg(not(target_os = "macos"))]
            (ExitWatch::ChildSignal, Armed::Nothing) => {
                let _ = still_running;
                Err(io::Error::from_raw_os_error(libc::EINVAL))
            }
        }
    }
}
