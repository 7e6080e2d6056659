//! Session ids and chunk ids: a tiny seeded PRNG and an allocator that never hands out an id in use.
//!
//! The allocator is pure: randomness comes from a [`SplitMix64`] seeded by the caller, so the adapter that owns
//! a real random source decides the seed and tests can use [`IdAllocator::deterministic`].

use std::collections::HashSet;

use thiserror::Error;

use crate::limits::{SESSION_ID_MAX, SESSION_ID_MIN};
use crate::session::SessionId;

/// How many ids the range `[SESSION_ID_MIN, SESSION_ID_MAX)` holds.
const ID_RANGE: u32 = SESSION_ID_MAX - SESSION_ID_MIN;

/// Random draws tried before the allocator falls back to scanning for a free id.
const RANDOM_ATTEMPTS: usize = 32;

/// SplitMix64 (Steele, Lea, Flood 2014): a small, fast, seedable generator. Not cryptographic; ids only need to
/// look random and be unique, uniqueness is enforced by [`IdAllocator`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator started at `seed`; equal seeds give equal sequences.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Why no session id could be reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum IdError {
    /// Every id in `[1000, 100000)` is reserved.
    #[error("all {ID_RANGE} session ids are in use")]
    Exhausted,
}

#[derive(Debug, Clone)]
enum Mode {
    Random(SplitMix64),
    Sequential { next: u32 },
}

/// Hands out session ids in `[SESSION_ID_MIN, SESSION_ID_MAX)`, never one that is currently reserved.
///
/// An id is reserved from [`IdAllocator::reserve`] until [`IdAllocator::release`]; callers reserve before
/// approval and release on every failure path and when the session is removed.
#[derive(Debug, Clone)]
pub struct IdAllocator {
    mode: Mode,
    reserved: HashSet<u32>,
}

impl IdAllocator {
    /// Random-looking ids drawn from a generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        IdAllocator { mode: Mode::Random(SplitMix64::new(seed)), reserved: HashSet::new() }
    }

    /// Ids 1000, 1001, ... in order (wrapping at the end of the range), skipping reserved ones. For tests.
    pub fn deterministic() -> Self {
        IdAllocator { mode: Mode::Sequential { next: SESSION_ID_MIN }, reserved: HashSet::new() }
    }

    /// Reserves a free id.
    pub fn reserve(&mut self) -> Result<SessionId, IdError> {
        if self.reserved.len() >= ID_RANGE as usize {
            return Err(IdError::Exhausted);
        }
        let start = match &mut self.mode {
            Mode::Random(rng) => {
                let mut last = SESSION_ID_MIN;
                for _ in 0..RANDOM_ATTEMPTS {
                    let candidate = random_id(rng);
                    if self.reserved.insert(candidate) {
                        return Ok(SessionId(candidate));
                    }
                    last = candidate;
                }
                last
            }
            Mode::Sequential { next } => *next,
        };
        let id = self.first_free_from(start).ok_or(IdError::Exhausted)?;
        self.reserved.insert(id);
        if let Mode::Sequential { next } = &mut self.mode {
            *next = wrap_next(id);
        }
        Ok(SessionId(id))
    }

    /// Releases `id`; true when it was reserved.
    pub fn release(&mut self, id: SessionId) -> bool {
        self.reserved.remove(&id.0)
    }

    /// True when `id` is currently reserved.
    #[cfg(test)]
    pub(crate) fn is_reserved(&self, id: SessionId) -> bool {
        self.reserved.contains(&id.0)
    }

    /// How many ids are currently reserved.
    pub fn reserved_count(&self) -> usize {
        self.reserved.len()
    }

    /// The first id at or after `start` (wrapping around the range) that is not reserved.
    fn first_free_from(&self, start: u32) -> Option<u32> {
        let mut id = start.clamp(SESSION_ID_MIN, SESSION_ID_MAX - 1);
        for _ in 0..ID_RANGE {
            if !self.reserved.contains(&id) {
                return Some(id);
            }
            id = wrap_next(id);
        }
        None
    }
}

fn random_id(rng: &mut SplitMix64) -> u32 {
    // The modulo bias over a 64-bit draw is below 2^-40: irrelevant for ids.
    let offset = rng.next_u64() % u64::from(ID_RANGE);
    SESSION_ID_MIN + u32::try_from(offset).unwrap_or(0)
}

fn wrap_next(id: u32) -> u32 {
    if id + 1 >= SESSION_ID_MAX { SESSION_ID_MIN } else { id + 1 }
}

/// The chunk id of a response: the low 24 bits of `random` as 6 lowercase hex digits.
pub fn chunk_id(random: u64) -> String {
    format!("{:06x}", random & 0x00FF_FFFF)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn splitmix_matches_reference_values() {
        // Reference outputs of SplitMix64 seeded with 0 (as published with the algorithm).
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(rng.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn chunk_id_is_six_lowercase_hex_digits() {
        assert_eq!(chunk_id(0), "000000");
        assert_eq!(chunk_id(0xABCDEF), "abcdef");
        assert_eq!(chunk_id(u64::MAX), "ffffff");
        assert_eq!(chunk_id(0x1234_5678_9A0B_0C0D), "0b0c0d");
    }

    #[test]
    fn deterministic_ids_count_up_and_skip_reserved() {
        let mut ids = IdAllocator::deterministic();
        assert_eq!(ids.reserve(), Ok(SessionId(1000)));
        assert_eq!(ids.reserve(), Ok(SessionId(1001)));
        assert!(ids.release(SessionId(1000)));
        assert!(!ids.release(SessionId(1000)));
        assert_eq!(ids.reserve(), Ok(SessionId(1002)));
        assert!(ids.is_reserved(SessionId(1001)));
        assert!(!ids.is_reserved(SessionId(1000)));
        assert_eq!(ids.reserved_count(), 2);
    }

    #[test]
    fn exhaustion_is_an_error_and_release_makes_room() {
        for mut ids in [IdAllocator::deterministic(), IdAllocator::new(7)] {
            let mut seen = HashSet::new();
            for _ in 0..ID_RANGE {
                let id = ids.reserve().unwrap();
                assert!((SESSION_ID_MIN..SESSION_ID_MAX).contains(&id.0));
                assert!(seen.insert(id), "id {id} handed out twice");
            }
            assert_eq!(ids.reserve(), Err(IdError::Exhausted));
            assert!(ids.release(SessionId(54_321)));
            assert_eq!(ids.reserve(), Ok(SessionId(54_321)));
            assert_eq!(ids.reserve(), Err(IdError::Exhausted));
        }
    }

    #[test]
    fn random_ids_depend_on_the_seed() {
        let draw = |seed| {
            let mut ids = IdAllocator::new(seed);
            (0..8).map(|_| ids.reserve().unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn never_hands_out_a_reserved_id(
            seed in any::<u64>(),
            deterministic in any::<bool>(),
            ops in proptest::collection::vec((any::<bool>(), any::<prop::sample::Index>()), 1..300),
        ) {
            let mut ids = if deterministic { IdAllocator::deterministic() } else { IdAllocator::new(seed) };
            let mut held: Vec<SessionId> = Vec::new();
            for (reserve, index) in ops {
                if reserve || held.is_empty() {
                    let id = ids.reserve().unwrap();
                    prop_assert!((SESSION_ID_MIN..SESSION_ID_MAX).contains(&id.0));
                    prop_assert!(!held.contains(&id), "{} was still reserved", id);
                    held.push(id);
                } else {
                    let id = held.swap_remove(index.index(held.len()));
                    prop_assert!(ids.release(id));
                }
                prop_assert_eq!(ids.reserved_count(), held.len());
                for id in &held {
                    prop_assert!(ids.is_reserved(*id));
                }
            }
        }
    }
}
