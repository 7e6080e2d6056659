//! Async PTY and pipe process sessions on rustix (not yet built: see issue 3).
