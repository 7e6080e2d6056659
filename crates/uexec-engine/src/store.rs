//! The session store: id reservation, live sessions, recency and pruning (spec A4).
//!
//! One `std` mutex guards the whole store; it is held only for map and counter updates, never across an await
//! (killing a pruned session happens after the lock is released).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;
use uexec_domain::SessionId;
use uexec_domain::ids::{IdAllocator, SplitMix64};
use uexec_domain::limits::PROTECTED_RECENT_SESSIONS;
use uexec_domain::prune::{PruneCandidate, choose_session_to_prune};

use crate::budget::SessionBudget;
use crate::error::ExecError;
use crate::session::Session;

struct Entry {
    session: Arc<Session>,
    /// Monotonic use counter: larger = more recent.
    last_used: u64,
    last_used_at: Instant,
    /// Stored while its first window is collected: not yet counted for pruning, never pruned.
    provisional: bool,
}

struct Inner {
    ids: IdAllocator,
    rng: SplitMix64,
    sessions: HashMap<SessionId, Entry>,
    tick: u64,
    /// Set by [`Store::drain`] (shutdown): no id is reserved and no session stored any more.
    closed: bool,
    /// Shared with other engines: one unit per reserved id.
    budget: Option<SessionBudget>,
}

impl Inner {
    /// Release a reserved id, and its unit of the shared budget.
    fn release(&mut self, id: SessionId) {
        if self.ids.release(id)
            && let Some(budget) = &self.budget
        {
            budget.give_back();
        }
    }
}

/// Live sessions and reserved ids.
pub(crate) struct Store {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("sessions", &self.lock().sessions.len()).finish_non_exhaustive()
    }
}

impl Drop for Store {
    /// An engine dropped without its shutdown gives back what its ids held of a shared budget.
    fn drop(&mut self) {
        let inner = self.lock();
        if let Some(budget) = &inner.budget {
            for _ in 0..inner.ids.reserved_count() {
                budget.give_back();
            }
        }
    }
}

/// One listed session with its recency.
pub(crate) struct Listed {
    pub(crate) session: Arc<Session>,
    pub(crate) last_used_at: Instant,
}

impl Store {
    /// A store whose ids and chunk ids come from `seed`, counting its reserved ids in `budget`.
    pub(crate) fn new(seed: u64, budget: Option<SessionBudget>) -> Store {
        Store {
            inner: Mutex::new(Inner {
                ids: IdAllocator::new(seed),
                rng: SplitMix64::new(seed ^ 0x9E37_79B9_7F4A_7C15),
                sessions: HashMap::new(),
                tick: 0,
                closed: false,
                budget,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next pseudo-random number (chunk ids, call ids).
    pub(crate) fn next_random(&self) -> u64 {
        self.lock().rng.next_u64()
    }

    /// Reserve a fresh session id.
    pub(crate) fn reserve(&self) -> Result<SessionId, ExecError> {
        let mut inner = self.lock();
        if inner.closed {
            return Err(ExecError::ShuttingDown);
        }
        if let Some(budget) = &inner.budget
            && !budget.take()
        {
            return Err(ExecError::SessionBudgetFull { limit: budget.limit() });
        }
        let reserved = inner.ids.reserve().map_err(|_| ExecError::TooManySessions);
        if reserved.is_err()
            && let Some(budget) = &inner.budget
        {
            budget.give_back();
        }
        reserved
    }

    /// Release an id that has no stored session.
    pub(crate) fn release(&self, id: SessionId) {
        let mut inner = self.lock();
        if !inner.sessions.contains_key(&id) {
            inner.release(id);
        }
    }

    /// Store a session during its first window (its id stays reserved). Refused (false) once the store is
    /// closed: the caller must kill the session, nobody could reach it.
    #[must_use]
    pub(crate) fn insert_provisional(&self, session: Arc<Session>) -> bool {
        let mut inner = self.lock();
        if inner.closed {
            return false;
        }
        inner.tick += 1;
        let tick = inner.tick;
        let id = session.spec.id;
        inner
            .sessions
            .insert(id, Entry { session, last_used: tick, last_used_at: Instant::now(), provisional: true });
        true
    }

    /// Take a session out of the store without releasing its id (a retry reuses it). Only removes `session`
    /// itself, not a later session with the same id.
    pub(crate) fn detach(&self, session: &Arc<Session>) {
        let mut inner = self.lock();
        let id = session.spec.id;
        if inner.sessions.get(&id).is_some_and(|e| Arc::ptr_eq(&e.session, session)) {
            inner.sessions.remove(&id);
        }
    }

    /// Take a session out of the store and release its id. False if it was not stored (already removed).
    pub(crate) fn remove(&self, session: &Arc<Session>) -> bool {
        let mut inner = self.lock();
        let id = session.spec.id;
        if inner.sessions.get(&id).is_some_and(|e| Arc::ptr_eq(&e.session, session)) {
            inner.sessions.remove(&id);
            inner.release(id);
            session.mark_removed();
            true
        } else {
            false
        }
    }

    /// Take the session with this id out of the store and release the id.
    pub(crate) fn remove_id(&self, id: SessionId) -> Option<Arc<Session>> {
        let mut inner = self.lock();
        let entry = inner.sessions.remove(&id)?;
        inner.release(id);
        entry.session.mark_removed();
        Some(entry.session)
    }

    /// The session with this id, its recency refreshed.
    pub(crate) fn touch(&self, id: SessionId) -> Option<Arc<Session>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let entry = inner.sessions.get_mut(&id)?;
        entry.last_used = tick;
        entry.last_used_at = Instant::now();
        Some(Arc::clone(&entry.session))
    }

    /// The session with this id, recency unchanged.
    pub(crate) fn get(&self, id: SessionId) -> Option<Arc<Session>> {
        self.lock().sessions.get(&id).map(|e| Arc::clone(&e.session))
    }

    /// Admit a provisional session as a committed live session and prune down to `max_sessions` committed
    /// sessions: the one way a session joins the sessions the cap counts, whether its call answered or was
    /// cancelled mid-window. Returns the pruned sessions (already out of the store, ids released: the caller
    /// kills them) and the number of live sessions afterwards.
    pub(crate) fn admit(&self, session: &Arc<Session>, max_sessions: usize) -> (Vec<Arc<Session>>, usize) {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let id = session.spec.id;
        if let Some(entry) = inner.sessions.get_mut(&id).filter(|e| Arc::ptr_eq(&e.session, session)) {
            entry.provisional = false;
            entry.last_used = tick;
            entry.last_used_at = Instant::now();
        }
        let mut pruned = Vec::new();
        while inner.sessions.values().filter(|e| !e.provisional).count() > max_sessions {
            let candidates: Vec<PruneCandidate> = inner
                .sessions
                .iter()
                .filter(|(candidate, e)| **candidate != id && !e.provisional)
                .map(|(candidate, e)| PruneCandidate {
                    id: *candidate,
                    last_used: e.last_used,
                    exited: e.session.snapshot().exit_code.is_some(),
                })
                .collect();
            let Some(victim) = choose_session_to_prune(&candidates, PROTECTED_RECENT_SESSIONS) else {
                break;
            };
            let Some(entry) = inner.sessions.remove(&victim) else { break };
            inner.release(victim);
            entry.session.mark_removed();
            pruned.push(entry.session);
        }
        let live = inner.sessions.len();
        (pruned, live)
    }

    /// Number of stored sessions.
    pub(crate) fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Every stored session.
    pub(crate) fn list(&self) -> Vec<Listed> {
        let inner = self.lock();
        let mut listed: Vec<Listed> = inner
            .sessions
            .values()
            .map(|e| Listed { session: Arc::clone(&e.session), last_used_at: e.last_used_at })
            .collect();
        listed.sort_by_key(|l| l.session.spec.id);
        listed
    }

    /// Close the store (shutdown: nothing new is reserved or stored), take every session out of it and release
    /// their ids.
    pub(crate) fn drain(&self) -> Vec<Arc<Session>> {
        let mut inner = self.lock();
        inner.closed = true;
        let entries: Vec<(SessionId, Entry)> = inner.sessions.drain().collect();
        let mut sessions = Vec::with_capacity(entries.len());
        for (id, entry) in entries {
            inner.release(id);
            entry.session.mark_removed();
            sessions.push(entry.session);
        }
        sessions
    }

    /// Number of reserved ids.
    pub(crate) fn reserved_count(&self) -> usize {
        self.lock().ids.reserved_count()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ids_hold_the_shared_budget_until_released_or_the_store_is_gone() {
        let budget = SessionBudget::new(3);
        let a = Store::new(1, Some(budget.clone()));
        let b = Store::new(2, Some(budget.clone()));
        let first = a.reserve().unwrap();
        let _second = a.reserve().unwrap();
        let _third = b.reserve().unwrap();
        assert_eq!(b.reserve().unwrap_err(), ExecError::SessionBudgetFull { limit: 3 });
        a.release(first);
        a.release(first);
        assert_eq!(budget.in_use(), 2, "a release gives back once");
        let _fourth = b.reserve().unwrap();
        drop(a);
        assert_eq!(budget.in_use(), 2, "the dropped store's id is given back");
        drop(b);
        assert_eq!((budget.in_use(), budget.refused()), (0, 1));
    }
}
