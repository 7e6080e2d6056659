//! What `uexec run` reads of a command's output, for the note that names what the sandbox refused (a write to
//! a read-only place shows only in the command's own error message), without changing what the command sees.
//!
//! - In a terminal, uexec relays the command's PTY already: the relay keeps the newest output ([`Tail`]).
//! - Otherwise the command gets uexec's own streams (`IoMode::Inherit`). When standard error is a pipe (a CI
//!   log, `2>&1 | tee`, a program capturing it), uexec hands the command a pipe of its own in its place and
//!   copies every byte to the original, keeping the newest: a pipe stays a pipe, and when standard output is
//!   the same pipe both go through the one new pipe, so their order is the command's. A terminal or a file is
//!   handed over as it is (a program may ask what it writes to): the note then says what the sandbox itself
//!   recorded only. When the reader of the original goes away, uexec stops reading too, so the command meets a
//!   closed pipe as it would have.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustix::fs::{FileType, fstat};
use rustix::io::fcntl_dupfd_cloexec;

/// The most output kept for the note: the newest bytes (error messages come last).
pub const TAIL_BYTES: usize = 64 * 1024;

/// How long uexec waits, once the command's whole tree is gone, for the copy to reach the end of its pipe.
/// Only a process outside the tree holding the pipe could make it wait that long; the note then reads what
/// was copied by then.
const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// The newest [`TAIL_BYTES`] of a command's output, shared by the copy and the note.
#[derive(Debug, Clone, Default)]
pub struct Tail(Arc<Mutex<VecDeque<u8>>>);

impl Tail {
    /// Keep `bytes` (the oldest go first beyond [`TAIL_BYTES`], without moving the rest: a relay pushes every
    /// chunk).
    pub fn push(&self, bytes: &[u8]) {
        let bytes = bytes.get(bytes.len().saturating_sub(TAIL_BYTES)..).unwrap_or_default();
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let over = (kept.len() + bytes.len()).saturating_sub(TAIL_BYTES);
        kept.drain(..over);
        kept.extend(bytes);
    }

    /// What is kept.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().collect()
    }
}

/// uexec's standard error (and standard output when it is the same pipe) replaced by a new pipe until the
/// command is spawned.
#[derive(Debug)]
pub struct Interposed {
    /// The new pipe's reading end.
    read: OwnedFd,
    /// The original standard error, where the copy goes.
    target: OwnedFd,
    /// The original standard output too, when it was the same pipe.
    stdout: Option<OwnedFd>,
}

/// Hand standard error (and standard output, when it is the same pipe) to the next spawned command through a
/// new pipe, when standard error is a pipe; `None` changes nothing. Call [`Interposed::start`] right after the
/// spawn, whether it succeeded or not: until then uexec's own streams are the new pipe too.
pub fn interpose() -> Option<Interposed> {
    let stderr = rustix::stdio::stderr();
    let err = fstat(stderr).ok()?;
    if FileType::from_raw_mode(err.st_mode) != FileType::Fifo {
        return None;
    }
    let stdout = rustix::stdio::stdout();
    let same = fstat(stdout).is_ok_and(|out| out.st_dev == err.st_dev && out.st_ino == err.st_ino);
    let (read, write) = cloexec_pipe()?;
    let target = fcntl_dupfd_cloexec(stderr, 3).ok()?;
    let saved_stdout = if same { Some(fcntl_dupfd_cloexec(stdout, 3).ok()?) } else { None };
    rustix::stdio::dup2_stderr(&write).ok()?;
    if same && rustix::stdio::dup2_stdout(&write).is_err() {
        // Put standard error back: nothing changes.
        let _ = rustix::stdio::dup2_stderr(&target);
        return None;
    }
    Some(Interposed { read, target, stdout: saved_stdout })
}

/// A new pipe whose ends no spawned program inherits.
fn cloexec_pipe() -> Option<(OwnedFd, OwnedFd)> {
    #[cfg(target_os = "linux")]
    {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        // No pipe2 here: `uexec run` spawns nothing else while this is made.
        let (read, write) = rustix::pipe::pipe().ok()?;
        for end in [&read, &write] {
            rustix::io::fcntl_setfd(end, rustix::io::FdFlags::CLOEXEC).ok()?;
        }
        Some((read, write))
    }
}

/// The copy of an interposed pipe, running until the pipe's end.
#[derive(Debug)]
pub struct Copy {
    task: tokio::task::JoinHandle<()>,
}

impl Interposed {
    /// Put uexec's own streams back (the command keeps the new pipe, so the copy ends when the last process
    /// holding it does) and copy the pipe to the original standard error on the current runtime, keeping the
    /// newest bytes in `tail`.
    ///
    /// A task, not a thread: `uexec run` without a terminal may have entered a PID namespace on its only thread,
    /// which can then start no other. The original is a pipe other processes may share, so it stays blocking
    /// (its mode belongs to them too): the copy writes at most `PIPE_BUF` bytes at a time and only when `poll`
    /// says the pipe has room, so no write blocks the runtime, and waits a moment when it has none.
    pub fn start(self, tail: Tail) -> Copy {
        let Interposed { read, target, stdout } = self;
        if let Err(e) = rustix::stdio::dup2_stderr(&target) {
            tracing::warn!("cannot restore standard error: {e}");
        }
        if let Some(stdout) = &stdout
            && let Err(e) = rustix::stdio::dup2_stdout(stdout)
        {
            tracing::warn!("cannot restore standard output: {e}");
        }
        drop(stdout);
        Copy { task: tokio::spawn(copy(read, target, tail)) }
    }
}

/// The most bytes written to a pipe at once without blocking when it has room (POSIX `PIPE_BUF` on Linux).
const PIPE_BUF: usize = 4096;

/// How long the copy waits before asking again whether a full original has room.
const FULL_PIPE_WAIT: Duration = Duration::from_millis(5);

async fn copy(read: OwnedFd, target: OwnedFd, tail: Tail) {
    use tokio::io::AsyncReadExt;
    let Ok(mut from) = tokio::net::unix::pipe::Receiver::from_owned_fd(read) else {
        // The reading end is dropped: the command meets a closed pipe.
        tracing::warn!("cannot copy the command's standard error");
        return;
    };
    let mut buf = vec![0u8; PIPE_BUF];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let bytes = buf.get(..n).unwrap_or_default();
        tail.push(bytes);
        let mut written = 0;
        while written < bytes.len() {
            let mut fds = [rustix::event::PollFd::new(&target, rustix::event::PollFlags::OUT)];
            let ready =
                rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 }));
            let revents = fds[0].revents();
            if ready.is_err()
                || revents.intersects(rustix::event::PollFlags::ERR | rustix::event::PollFlags::HUP)
            {
                // The reader went away: stop reading, so the command meets a closed pipe too.
                return;
            }
            if !revents.contains(rustix::event::PollFlags::OUT) {
                tokio::time::sleep(FULL_PIPE_WAIT).await;
                continue;
            }
            match rustix::io::write(&target, bytes.get(written..).unwrap_or_default()) {
                Ok(n) => written += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }
}

impl Copy {
    /// Wait for the copy to reach the end of the pipe (every process that held it is gone), at most
    /// [`DRAIN_WAIT`].
    pub async fn finish(self) {
        if tokio::time::timeout(DRAIN_WAIT, self.task).await.is_err() {
            tracing::debug!(
                "the copy of standard error did not reach its end; the note reads what it copied"
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_newest_bytes() {
        let tail = Tail::default();
        tail.push(&vec![b'a'; TAIL_BYTES]);
        tail.push(b"Read-only file system");
        let kept = tail.bytes();
        assert_eq!(kept.len(), TAIL_BYTES);
        assert!(kept.ends_with(b"Read-only file system"));
        assert!(kept.starts_with(b"a"));
        // One push larger than the bound keeps its own newest bytes.
        let mut big = vec![b'x'; TAIL_BYTES];
        big.extend_from_slice(b"the end");
        tail.push(&big);
        let kept = tail.bytes();
        assert_eq!(kept.len(), TAIL_BYTES);
        assert!(kept.ends_with(b"the end") && kept.starts_with(b"x"));
    }
}
