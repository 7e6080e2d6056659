//! Which session to prune when the store is full (spec A4).
//!
//! The `protected_recent` most recently used sessions are never picked. Among the others, the least recently
//! used session that has exited goes first; if none has exited, the least recently used one. Ties in recency are
//! broken by id (the smaller id counts as less recent), so the choice is deterministic.

use crate::session::SessionId;

/// What pruning needs to know about one live session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneCandidate {
    /// The session.
    pub id: SessionId,
    /// Monotonic use tick: larger means more recently used.
    pub last_used: u64,
    /// True when its process has exited.
    pub exited: bool,
}

/// The session to prune, or `None` when every candidate is protected.
pub fn choose_session_to_prune(candidates: &[PruneCandidate], protected_recent: usize) -> Option<SessionId> {
    let mut by_recency: Vec<&PruneCandidate> = candidates.iter().collect();
    // Most recent first.
    by_recency.sort_by_key(|c| std::cmp::Reverse((c.last_used, c.id)));
    let prunable = by_recency.get(protected_recent..)?;
    // `prunable` is most recent first, so the last match is the least recently used one.
    prunable.iter().rev().find(|c| c.exited).or_else(|| prunable.last()).map(|c| c.id)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn candidate(id: u32, last_used: u64, exited: bool) -> PruneCandidate {
        PruneCandidate { id: SessionId(id), last_used, exited }
    }

    /// Sessions 1000.. used at ticks 1.., none exited.
    fn running(count: u32) -> Vec<PruneCandidate> {
        (0..count).map(|i| candidate(1000 + i, u64::from(i) + 1, false)).collect()
    }

    #[test]
    fn exited_lru_outside_protected_set_goes_first() {
        let mut sessions = running(20);
        sessions[5].exited = true; // tick 6
        sessions[9].exited = true; // tick 10
        assert_eq!(choose_session_to_prune(&sessions, 8), Some(SessionId(1005)));
    }

    #[test]
    fn without_exited_sessions_plain_lru() {
        let mut sessions = running(20);
        sessions.reverse();
        assert_eq!(choose_session_to_prune(&sessions, 8), Some(SessionId(1000)));
    }

    #[test]
    fn exited_session_inside_protected_set_is_not_picked() {
        let mut sessions = running(20);
        sessions[19].exited = true; // the most recent: protected
        sessions[12].exited = true; // tick 13: the 8th most recent (ticks 13..=20 are protected)
        assert_eq!(choose_session_to_prune(&sessions, 8), Some(SessionId(1000)));
    }

    #[test]
    fn nothing_prunable() {
        assert_eq!(choose_session_to_prune(&running(8), 8), None);
        assert_eq!(choose_session_to_prune(&[], 8), None);
        assert_eq!(choose_session_to_prune(&running(9), 8), Some(SessionId(1000)));
        assert_eq!(choose_session_to_prune(&running(3), 0), Some(SessionId(1000)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn never_picks_a_protected_session(
            (ticks, exited) in (0usize..80).prop_flat_map(|n| (
                Just((1..=n as u64).collect::<Vec<_>>()).prop_shuffle(),
                proptest::collection::vec(any::<bool>(), n),
            )),
            protected in 0usize..12,
        ) {
            let sessions: Vec<_> = ticks
                .iter()
                .zip(&exited)
                .enumerate()
                .map(|(i, (&tick, &exited))| candidate(1000 + i as u32, tick, exited))
                .collect();
            let chosen = choose_session_to_prune(&sessions, protected);
            if sessions.len() <= protected {
                prop_assert_eq!(chosen, None);
            } else {
                let chosen = sessions.iter().find(|c| Some(c.id) == chosen).unwrap();
                let more_recent = sessions.iter().filter(|c| c.last_used > chosen.last_used).count();
                prop_assert!(more_recent >= protected);
                // Oracle: the unprotected sessions, least recent first.
                let mut rest: Vec<_> = sessions.clone();
                rest.sort_by_key(|c| c.last_used);
                rest.truncate(sessions.len() - protected);
                let expected = rest.iter().find(|c| c.exited).or(rest.first()).unwrap();
                prop_assert_eq!(chosen.id, expected.id);
            }
        }
    }
}
