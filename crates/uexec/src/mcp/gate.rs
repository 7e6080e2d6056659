//! The HTTP listener's connections before they present the token.
//!
//! Anyone who reaches the listener can open connections, and each holds one of the server's descriptors until
//! it closes. A connection is *waiting* from its accept until one of its requests carries the right bearer
//! token; then it is the client's. Waiting connections are bounded per peer address and in total
//! ([`crate::fdlimit::FdBudget`]). When a new one would pass a bound, the oldest waiting connection (of that peer,
//! else of all) is closed to make room, however young it is: idle connections, however many and however fresh,
//! never keep a newcomer (an authorised client about to send its token) out, and a connection is closed only
//! after every waiting one older than it. A waiting connection is closed [`WAITING_DEADLINE`] after its accept.
//! Connections that presented the token are never closed by this gate.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long a connection may take to present the token.
pub const WAITING_DEADLINE: Duration = Duration::from_secs(10);

/// The waiting connections of one listener.
#[derive(Debug)]
pub struct Gate {
    per_peer: usize,
    total: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Waiting connections, oldest first.
    waiting: VecDeque<Waiting>,
    /// Connections closed to make room or at their deadline.
    dropped: u64,
}

#[derive(Debug)]
struct Waiting {
    id: u64,
    peer: IpAddr,
    closer: CancellationToken,
}

fn lock(mutex: &Mutex<State>) -> MutexGuard<'_, State> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Gate {
    /// A gate holding at most `per_peer` waiting connections of one address and `total` in all (each at least 1).
    pub fn new(per_peer: usize, total: usize) -> Arc<Gate> {
        Arc::new(Gate { per_peer: per_peer.max(1), total: total.max(1), state: Mutex::new(State::default()) })
    }

    /// A connection from `peer` was accepted: it waits, and the oldest waiting connection beyond a
    /// bound is closed to make room. Always `Some`; an `Option` for callers that may refuse in the future.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Ticket> {
        let mut state = lock(&self.state);
        let evict_at = if state.waiting.iter().filter(|w| w.peer == peer).count() >= self.per_peer {
            state.waiting.iter().position(|w| w.peer == peer)
        } else if state.waiting.len() >= self.total {
            (!state.waiting.is_empty()).then_some(0)
        } else {
            None
        };
        if let Some(at) = evict_at {
            evict(&mut state, at);
        }
        let closer = CancellationToken::new();
        let id = state.next;
        state.next += 1;
        state.waiting.push_back(Waiting { id, peer, closer: closer.clone() });
        drop(state);
        Some(Ticket { gate: Arc::clone(self), id, closer, passed: AtomicBool::new(false) })
    }

    /// How many waiting connections were closed so far.
    pub fn dropped(&self) -> u64 {
        lock(&self.state).dropped
    }

    /// How many connections wait now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        lock(&self.state).waiting.len()
    }

    fn remove(&self, id: u64) -> bool {
        let mut state = lock(&self.state);
        match state.waiting.iter().position(|w| w.id == id) {
            Some(at) => {
                state.waiting.remove(at);
                true
            }
            None => false,
        }
    }
}

fn evict(state: &mut State, at: usize) {
    if let Some(waiting) = state.waiting.remove(at) {
        waiting.closer.cancel();
        state.dropped += 1;
    }
}

/// One accepted connection's place at the gate (dropped with the connection).
#[derive(Debug)]
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    closer: CancellationToken,
    passed: AtomicBool,
}

impl Ticket {
    /// The connection presented the token: it is the client's from now on.
    pub fn pass(&self) {
        if !self.passed.swap(true, Ordering::SeqCst) {
            self.gate.remove(self.id);
        }
    }

    /// True once the connection presented the token.
    pub fn passed(&self) -> bool {
        self.passed.load(Ordering::SeqCst)
    }

    /// Cancelled when the gate closes the connection to make room.
    pub fn closer(&self) -> &CancellationToken {
        &self.closer
    }

    /// The connection reached its deadline without the token: it is closed.
    pub fn expire(&self) {
        if !self.passed() && self.gate.remove(self.id) {
            lock(&self.gate.state).dropped += 1;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.passed() {
            self.gate.remove(self.id);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn the_oldest_waiting_connection_of_a_peer_makes_room_for_its_newest() {
        let gate = Gate::new(3, 10);
        let old: Vec<Ticket> = (0..3).map(|_| gate.admit(ip(1)).unwrap()).collect();
        let other = gate.admit(ip(2)).unwrap();
        assert!(old.iter().all(|t| !t.closer().is_cancelled()));
        let newest = gate.admit(ip(1)).unwrap();
        assert!(old[0].closer().is_cancelled(), "the oldest of the peer gives way");
        assert!(!old[1].closer().is_cancelled() && !old[2].closer().is_cancelled());
        assert!(
            !newest.closer().is_cancelled() && !other.closer().is_cancelled(),
            "another peer is untouched"
        );
        assert_eq!((gate.waiting(), gate.dropped()), (4, 1));
    }

    #[test]
    fn beyond_the_total_the_oldest_of_all_gives_way_and_passed_connections_never_do() {
        let gate = Gate::new(10, 3);
        let first = gate.admit(ip(1)).unwrap();
        first.pass();
        let waiting: Vec<Ticket> = (2..5).map(|n| gate.admit(ip(n)).unwrap()).collect();
        assert!(!first.closer().is_cancelled(), "a connection that presented the token is not counted");
        assert!(waiting.iter().all(|t| !t.closer().is_cancelled()));
        let newest = gate.admit(ip(9)).unwrap();
        assert!(waiting[0].closer().is_cancelled() && !newest.closer().is_cancelled());
        assert!(!first.closer().is_cancelled());
        drop(waiting);
        assert_eq!(gate.waiting(), 1, "closed connections leave");
    }

    #[test]
    fn fresh_idle_connections_never_keep_a_newcomer_out_and_leave_oldest_first() {
        // 1100 idle connections opened just now from the client's own address, then the authorised client.
        let gate = Gate::new(64, 512);
        let idle: Vec<Ticket> = (0..1100).map(|_| gate.admit(ip(1)).unwrap()).collect();
        assert_eq!(gate.waiting(), 64, "the peer's bound holds");
        let client = gate.admit(ip(1)).unwrap();
        assert!(!client.closer().is_cancelled(), "the newest is admitted at once");
        assert!(idle[..1037].iter().all(|t| t.closer().is_cancelled()), "the oldest gave way");
        assert!(!idle[1099].closer().is_cancelled());
        // Oldest first: the client is closed only after every idle connection older than it.
        let more: Vec<Ticket> = (0..63).map(|_| gate.admit(ip(1)).unwrap()).collect();
        assert!(!client.closer().is_cancelled(), "63 newer ones closed the 63 older idle ones first");
        assert!(idle.iter().all(|t| t.closer().is_cancelled()));
        client.pass();
        assert_eq!(gate.waiting(), 63, "the client's connection left the gate with its token");
        drop(more);
    }

    #[test]
    fn a_connection_past_its_deadline_leaves_and_is_counted() {
        let gate = Gate::new(2, 2);
        let late = gate.admit(ip(1)).unwrap();
        late.expire();
        assert_eq!((gate.waiting(), gate.dropped()), (0, 1));
        let passed = gate.admit(ip(1)).unwrap();
        passed.pass();
        passed.expire();
        assert_eq!((gate.waiting(), gate.dropped()), (0, 1), "a passed connection does not expire");
    }
}
