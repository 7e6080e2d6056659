//! The unified exec engine (not yet built: see issue 4).
