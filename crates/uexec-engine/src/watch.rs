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
//! A watcher that does not keep up is never waited for and never dropped: its queue is bounded in bytes, by what
//! the chunks it holds keep alive (a piece pins its whole read chunk, so pieces of one chunk count it once), at
//! most the session's own buffer ([`Watchers::new`]; one chunk when a single chunk is larger). A piece that would
//! exceed it makes room by dropping the oldest pieces, and the watcher is told how many bytes it missed
//! ([`WatchEvent::Skipped`]) before the pieces that follow them. Resizes are the session's: a watcher has no size.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// The most bytes a watcher's queue keeps alive when the session's buffer is larger (a session's default
/// buffer: 1 MiB).
pub const WATCH_QUEUE_BYTES: usize = 1024 * 1024;

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

    fn len(&self) -> usize {
        self.range.len()
    }
}

/// What a watcher receives after the present.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// Output, in order.
    Output(OutputPiece),
    /// The watcher fell behind: this many bytes of output, right before what follows, were dropped for it.
    Skipped {
        /// How many bytes.
        bytes: u64,
    },
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
    pub(crate) events: Arc<Queue>,
}

impl Watch {
    /// The next event; `None` once the session is gone, or exited (after `Exited`).
    pub async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            if let Some(next) = self.events.take() {
                return next;
            }
            self.events.ready.notified().await;
        }
    }
}

/// What one watcher has not read yet.
#[derive(Debug, Default)]
struct Pending {
    pieces: VecDeque<OutputPiece>,
    /// Bytes the queued pieces keep alive (their chunks, each counted once per run of pieces sharing it).
    held: usize,
    /// Bytes dropped ahead of `pieces`, not yet reported.
    skipped: u64,
    exit_code: Option<i32>,
    /// Nothing more comes (the exit was reported, or the session is gone).
    ended: bool,
}

/// One watcher's queue, shared by the session's [`Watchers`] and the person's [`Watch`].
#[derive(Debug)]
pub(crate) struct Queue {
    pending: Mutex<Pending>,
    ready: Notify,
    limit: usize,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes `piece` adds to what the queue keeps alive: its chunk, unless the newest queued piece shares it.
    fn cost(pending: &Pending, piece: &OutputPiece) -> usize {
        match pending.pieces.back() {
            Some(last) if Arc::ptr_eq(&last.chunk, &piece.chunk) => 0,
            _ => piece.chunk.len(),
        }
    }

    fn push(&self, piece: OutputPiece) {
        {
            let mut pending = self.lock();
            if pending.ended {
                return;
            }
            let mut cost = Queue::cost(&pending, &piece);
            while pending.held + cost > self.limit {
                let Some(oldest) = pending.pieces.pop_front() else { break };
                pending.skipped += oldest.len() as u64;
                // The oldest piece's chunk is freed unless the next piece shares it.
                let shared =
                    pending.pieces.front().is_some_and(|next| Arc::ptr_eq(&next.chunk, &oldest.chunk));
                if !shared {
                    pending.held = pending.held.saturating_sub(oldest.chunk.len());
                }
                cost = Queue::cost(&pending, &piece);
            }
            pending.held += cost;
            pending.pieces.push_back(piece);
        }
        self.ready.notify_one();
    }

    fn end(&self, exit_code: Option<i32>) {
        {
            let mut pending = self.lock();
            if pending.exit_code.is_none() && !pending.ended {
                pending.exit_code = exit_code;
            }
            pending.ended = true;
        }
        self.ready.notify_one();
    }

    /// The next event (`Some(None)`: the stream ended), or `None` when there is nothing yet.
    fn take(&self) -> Option<Option<WatchEvent>> {
        let mut pending = self.lock();
        if pending.skipped > 0 {
            let bytes = std::mem::take(&mut pending.skipped);
            return Some(Some(WatchEvent::Skipped { bytes }));
        }
        if let Some(piece) = pending.pieces.pop_front() {
            let shared = pending.pieces.front().is_some_and(|next| Arc::ptr_eq(&next.chunk, &piece.chunk));
            if !shared {
                pending.held = pending.held.saturating_sub(piece.chunk.len());
            }
            return Some(Some(WatchEvent::Output(piece)));
        }
        if let Some(exit_code) = pending.exit_code.take() {
            return Some(Some(WatchEvent::Exited { exit_code }));
        }
        pending.ended.then_some(None)
    }

    /// Bytes the queue keeps alive now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().held
    }
}

/// The watchers of one session.
#[derive(Debug)]
pub(crate) struct Watchers {
    /// How many are registered: read before anything else, so that nobody watching costs one load.
    count: AtomicUsize,
    queues: Mutex<Vec<Arc<Queue>>>,
    /// The most bytes one watcher's queue keeps alive.
    limit: usize,
}

impl Watchers {
    /// Watchers whose queues keep at most `limit` bytes alive each (the session's buffer size), capped at
    /// [`WATCH_QUEUE_BYTES`].
    pub(crate) fn new(limit: usize) -> Watchers {
        Watchers {
            count: AtomicUsize::new(0),
            queues: Mutex::new(Vec::new()),
            limit: limit.min(WATCH_QUEUE_BYTES),
        }
    }

    fn queues(&self) -> MutexGuard<'_, Vec<Arc<Queue>>> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Register a watcher; call it under the lock the reader sends under (see the module doc).
    pub(crate) fn register(&self) -> Arc<Queue> {
        let queue = Arc::new(Queue { pending: Mutex::default(), ready: Notify::new(), limit: self.limit });
        let mut queues = self.queues();
        queues.push(Arc::clone(&queue));
        self.count.store(queues.len(), Ordering::Relaxed);
        queue
    }

    /// Whether anybody watches (one relaxed load).
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Hand `range` of `chunk` to every watcher, forgetting those that left.
    pub(crate) fn send(&self, chunk: &Arc<[u8]>, range: Range<usize>) {
        if !self.any() {
            return;
        }
        let mut queues = self.queues();
        // Only this list holds a queue whose watcher left.
        queues.retain(|queue| Arc::strong_count(queue) > 1);
        for queue in queues.iter() {
            queue.push(OutputPiece { chunk: Arc::clone(chunk), range: range.clone() });
        }
        self.count.store(queues.len(), Ordering::Relaxed);
    }

    /// Tell every watcher the process ended, and let them go.
    pub(crate) fn exited(&self, exit_code: i32) {
        if !self.any() {
            return;
        }
        let mut queues = self.queues();
        for queue in queues.drain(..) {
            queue.end(Some(exit_code));
        }
        self.count.store(0, Ordering::Relaxed);
    }
}

impl Drop for Watchers {
    /// The session is gone: every watcher's stream ends after what it has not read yet.
    fn drop(&mut self) {
        for queue in self.queues().drain(..) {
            queue.end(None);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn watch(queue: Arc<Queue>) -> Watch {
        Watch { present: Vec::new(), tty: false, events: queue }
    }

    async fn drain(watch: &mut Watch) -> Vec<WatchEvent> {
        let mut events = Vec::new();
        while let Some(event) = watch.next().await {
            events.push(event);
        }
        events
    }

    #[tokio::test]
    async fn every_watcher_gets_each_piece_and_the_exit() {
        let watchers = Watchers::new(1 << 20);
        assert!(!watchers.any());
        let mut a = watch(watchers.register());
        let mut b = watch(watchers.register());
        let chunk: Arc<[u8]> = Arc::from(&b"hello world"[..]);
        watchers.send(&chunk, 0..5);
        watchers.send(&chunk, 5..11);
        watchers.exited(3);
        assert!(!watchers.any());
        for w in [&mut a, &mut b] {
            let events = drain(w).await;
            let text: Vec<u8> = events
                .iter()
                .filter_map(|e| match e {
                    WatchEvent::Output(p) => Some(p.as_bytes().to_vec()),
                    _ => None,
                })
                .flatten()
                .collect();
            assert_eq!(text, b"hello world");
            assert!(matches!(events.last(), Some(WatchEvent::Exited { exit_code: 3 })), "{events:?}");
        }
    }

    #[tokio::test]
    async fn a_stalled_watcher_keeps_at_most_its_limit_and_is_told_what_it_missed() {
        let limit = 256 * 1024;
        let watchers = Watchers::new(limit);
        let mut slow = watch(watchers.register());
        let fast = watch(watchers.register());
        // 64 MiB in 64 KiB chunks, each handed on as 16 slices of 4 KiB (a PTY session's reader).
        let mut sent = 0u64;
        let mut fast_seen = 0u64;
        for n in 0..1024u32 {
            let chunk: Arc<[u8]> = Arc::from(vec![(n % 251) as u8; 64 * 1024]);
            for slice in 0..16 {
                watchers.send(&chunk, slice * 4096..(slice + 1) * 4096);
                sent += 4096;
                assert!(slow.events.held() <= limit, "{} bytes held after {sent}", slow.events.held());
                while let Some(Some(WatchEvent::Output(piece))) = fast.events.take() {
                    fast_seen += piece.as_bytes().len() as u64;
                }
            }
        }
        assert_eq!(fast_seen, sent, "a watcher that keeps up misses nothing");
        watchers.exited(0);
        let events = drain(&mut slow).await;
        let WatchEvent::Skipped { bytes: skipped } = events[0] else { panic!("{:?}", events[0]) };
        let kept: u64 = events
            .iter()
            .map(|e| match e {
                WatchEvent::Output(p) => p.as_bytes().len() as u64,
                _ => 0,
            })
            .sum();
        assert_eq!(skipped + kept, sent, "what was skipped and what was kept add up");
        assert_eq!(kept, limit as u64, "the newest output fills the limit");
        // The kept bytes are the newest: the last chunk's value.
        let WatchEvent::Output(last) = &events[events.len() - 2] else { panic!() };
        assert_eq!(last.as_bytes()[0], (1023 % 251) as u8);
        assert!(matches!(events.last(), Some(WatchEvent::Exited { exit_code: 0 })));
    }

    #[tokio::test]
    async fn a_watcher_that_falls_behind_twice_is_told_each_time() {
        let watchers = Watchers::new(8);
        let mut w = watch(watchers.register());
        let chunk: Arc<[u8]> = Arc::from(&b"abcd"[..]);
        let other: Arc<[u8]> = Arc::from(&b"efgh"[..]);
        let third: Arc<[u8]> = Arc::from(&b"ijkl"[..]);
        for c in [&chunk, &other, &third] {
            watchers.send(c, 0..4);
        }
        assert!(matches!(w.next().await, Some(WatchEvent::Skipped { bytes: 4 })));
        assert!(matches!(w.next().await, Some(WatchEvent::Output(p)) if p.as_bytes() == b"efgh"));
        for c in [&chunk, &other] {
            watchers.send(c, 0..4);
        }
        assert!(matches!(w.next().await, Some(WatchEvent::Skipped { bytes: 4 })));
        assert!(matches!(w.next().await, Some(WatchEvent::Output(p)) if p.as_bytes() == b"abcd"));
        assert!(matches!(w.next().await, Some(WatchEvent::Output(p)) if p.as_bytes() == b"efgh"));
        // A chunk larger than the limit alone is still delivered.
        let big: Arc<[u8]> = Arc::from(&b"0123456789"[..]);
        watchers.send(&big, 0..10);
        assert!(matches!(w.next().await, Some(WatchEvent::Output(p)) if p.as_bytes() == b"0123456789"));
    }

    #[tokio::test]
    async fn a_watcher_that_left_is_forgotten_at_the_next_piece_and_a_gone_session_ends_the_stream() {
        let watchers = Watchers::new(1024);
        drop(watchers.register());
        let mut stays = watch(watchers.register());
        assert_eq!(watchers.count.load(Ordering::Relaxed), 2);
        watchers.send(&Arc::from(&b"x"[..]), 0..1);
        assert_eq!(watchers.count.load(Ordering::Relaxed), 1);
        drop(watchers);
        assert!(matches!(stays.next().await, Some(WatchEvent::Output(_))));
        assert!(stays.next().await.is_none());
    }
}
