//! Watching a live session on behalf of a person (spec B9): its output as it arrives, apart from the model's.
//!
//! A watcher gets the session's present first (the rendered screen of a PTY session, drawn from a blank
//! terminal; the newest output of a pipe session), then every later piece of output, then the exit. Pieces are
//! shared with the session's own buffers (an `Arc` of the chunk the reader read, and the range of it), never
//! copied, and never taken from them: what the model's next `write_stdin` reads is the same whoever watches.
//!
//! What a session pays with nobody watching: one relaxed atomic load per parsed slice of output (PTY) or per
//! chunk (pipes). No allocation, no lock, no wake-up.
//!
//! The present and the stream meet exactly: a PTY watcher is registered under the screen's lock, and the reader
//! hands each slice to the watchers under the same lock right after parsing it, so the screen a watcher starts
//! from holds exactly the slices it is not sent. A pipe watcher is registered under the buffers' lock, where
//! the reader adds each chunk and hands it on.
//!
//! A watcher that does not keep up (more than [`WATCH_QUEUE`] pieces unread) is dropped: its stream ends, and
//! the session never waits for it. Resizes are the session's: a watcher has no size.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;

/// Most pieces of output a watcher may leave unread before it is dropped.
pub const WATCH_QUEUE: usize = 4096;

/// Most bytes of a pipe session's newest output a watcher starts from.
pub(crate) const PIPE_PRESENT_BYTES: usize = 64 * 1024;

/// A piece of a session's output, shared with the session's buffers.
#[derive(Debug, Clone)]
pub struct OutputPiece {
    chunk: Arc<[u8]>,
    range: Range<usize>,
}

impl OutputPiece {
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.chunk.get(self.range.clone()).unwrap_or_default()
    }
}

/// What a watcher receives after the present.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// Output, in order.
    Output(OutputPiece),
    /// The process ended (-1 when its status is unknown); nothing follows.
    Exited {
        /// The exit code.
        exit_code: i32,
    },
}

/// A person watching one session: [`Watch::present`] first, then [`Watch::next`] until it returns `None`.
#[derive(Debug)]
pub struct Watch {
    /// What to show first: for a PTY session, escape sequences that draw its screen on a blank terminal
    /// (cursor included); for a pipe session, its newest output (at most 64 KiB).
    pub present: Vec<u8>,
    /// The session runs in a PTY.
    pub tty: bool,
    pub(crate) events: mpsc::Receiver<WatchEvent>,
}

impl Watch {
    /// The next event; `None` once the session is gone, exited (after `Exited`) or the watcher fell too far
    /// behind.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        self.events.recv().await
    }
}

/// The watchers of one session.
#[derive(Debug, Default)]
pub(crate) struct Watchers {
    /// How many are registered: read before anything else, so that nobody watching costs one load.
    count: AtomicUsize,
    senders: Mutex<Vec<mpsc::Sender<WatchEvent>>>,
}

impl Watchers {
    /// Register a watcher; call it under the lock the reader sends under (see the module doc).
    pub(crate) fn register(&self) -> mpsc::Receiver<WatchEvent> {
        let (tx, rx) = mpsc::channel(WATCH_QUEUE);
        let mut senders = self.senders.lock().unwrap_or_else(PoisonError::into_inner);
        senders.push(tx);
        self.count.store(senders.len(), Ordering::Relaxed);
        rx
    }

    /// Whether anybody watches (one relaxed load).
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Hand `range` of `chunk` to every watcher, dropping those that fell behind or left.
    pub(crate) fn send(&self, chunk: &Arc<[u8]>, range: Range<usize>) {
        if !self.any() {
            return;
        }
        let piece = OutputPiece { chunk: Arc::clone(chunk), range };
        self.broadcast(WatchEvent::Output(piece), false);
    }

    /// Tell every watcher the process ended, and let them go.
    pub(crate) fn exited(&self, exit_code: i32) {
        if !self.any() {
            return;
        }
        self.broadcast(WatchEvent::Exited { exit_code }, true);
    }

    fn broadcast(&self, event: WatchEvent, last: bool) {
        let mut senders = self.senders.lock().unwrap_or_else(PoisonError::into_inner);
        senders.retain(|tx| tx.try_send(event.clone()).is_ok());
        if last {
            senders.clear();
        }
        self.count.store(senders.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_watcher_gets_each_piece_and_the_exit_and_a_slow_one_is_dropped() {
        let watchers = Watchers::default();
        assert!(!watchers.any());
        let mut fast = watchers.register();
        let mut slow = watchers.register();
        let chunk: Arc<[u8]> = Arc::from(&b"hello world"[..]);
        watchers.send(&chunk, 0..5);
        match fast.recv().await {
            Some(WatchEvent::Output(piece)) => assert_eq!(piece.as_bytes(), b"hello"),
            other => panic!("{other:?}"),
        }
        for _ in 0..WATCH_QUEUE {
            watchers.send(&chunk, 6..11);
            let _ = fast.recv().await;
        }
        // `slow` read nothing: its queue overflowed, so it was dropped; `fast` stays.
        assert_eq!(watchers.count.load(Ordering::Relaxed), 1);
        watchers.exited(3);
        assert!(matches!(fast.recv().await, Some(WatchEvent::Exited { exit_code: 3 })));
        assert!(fast.recv().await.is_none());
        let mut received = 0;
        while slow.recv().await.is_some() {
            received += 1;
        }
        assert_eq!(received, WATCH_QUEUE, "the slow watcher got what fitted, then its stream ended");
        assert!(!watchers.any());
    }

    #[tokio::test]
    async fn a_watcher_that_left_is_forgotten_at_the_next_piece() {
        let watchers = Watchers::default();
        drop(watchers.register());
        assert!(watchers.any());
        watchers.send(&Arc::from(&b"x"[..]), 0..1);
        assert!(!watchers.any());
    }
}
