//! A limit on live sessions that several engines share (a server with many clients): each engine's store takes
//! one unit when it reserves a session id and gives it back when the id is released, so a session counts once
//! from the call that reserves it (waiting for approval, spawning, in its first window) to its removal.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Session ids in use across the engines that share it, at most `limit`. Clones share the count.
#[derive(Debug, Clone)]
pub struct SessionBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: usize,
    used: AtomicUsize,
    refused: AtomicU64,
}

impl SessionBudget {
    /// A budget of `limit` sessions.
    pub fn new(limit: usize) -> SessionBudget {
        SessionBudget {
            inner: Arc::new(Inner { limit, used: AtomicUsize::new(0), refused: AtomicU64::new(0) }),
        }
    }

    /// The most sessions at once.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Sessions counted now: stored sessions and calls that reserved an id.
    pub fn in_use(&self) -> usize {
        self.inner.used.load(Ordering::SeqCst)
    }

    /// How many reservations were refused at the limit so far.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::SeqCst)
    }

    /// Take one unit; false (and counted as refused) at the limit.
    pub(crate) fn take(&self) -> bool {
        let limit = self.inner.limit;
        let taken = self
            .inner
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < limit).then_some(n + 1));
        if taken.is_err() {
            self.inner.refused.fetch_add(1, Ordering::SeqCst);
        }
        taken.is_ok()
    }

    /// Give one unit back.
    pub(crate) fn give_back(&self) {
        let _ = self.inner.used.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_refuses_at_its_limit_counts_refusals_and_frees_what_is_given_back() {
        let budget = SessionBudget::new(2);
        let other = budget.clone();
        assert!(budget.take() && other.take());
        assert!(!budget.take() && !other.take());
        assert_eq!((budget.in_use(), budget.refused()), (2, 2));
        other.give_back();
        assert!(budget.take());
        budget.give_back();
        budget.give_back();
        budget.give_back();
        assert_eq!(budget.in_use(), 0, "never below zero");
    }
}
