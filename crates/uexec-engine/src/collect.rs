//! Collecting a session's output for one yield window, with early return on exit and on waiting-for-input.
//!
//! A window ends at the first of:
//! 1. the process is finished (exited, trailing output drained, `End` emitted): returns at once, so
//!    `sleep 0.05` with a 31 s window takes ~0.1 s;
//! 2. the deadline;
//! 3. (PTY sessions, spec B4) the terminal's foreground process is blocked reading the terminal
//!    ([`InputState::WaitingForInput`]) and the output has settled.
//!
//! Settling (rule 3) has two speeds:
//! - [`FAST_SETTLE`] (2 ms after the last chunk) once the process has printed something since the window's
//!   mark (spawn or write), and the reader task is parked (it found the stream empty after the last chunk).
//!   Output after our write shows the input was consumed (a shell echoes it; the kernel's line discipline
//!   echoes and wakes the reader in the same pass), and the PTY adapter reports `WaitingForInput` only when
//!   the foreground process sleeps in a terminal read *and* no typed input is pending; so a process seen
//!   waiting again is done with our input. The 2 ms are for output it wrote just before blocking: the kernel
//!   hands PTY output to the master asynchronously, and on a busy 2-core machine that, plus waking the reader
//!   task, takes from microseconds to milliseconds.
//! - [`QUIET_SETTLE`] (40 ms after the mark) when nothing was printed since the mark (a password prompt with
//!   echo off, a program that reads silently): long enough for a woken reader to be scheduled, so the state
//!   seen is the one after it consumed the input, not before.
//!
//! Why not faster: returning as soon as the reader is parked and the process waits measured 1.0-1.5x the raw
//! PTY round trip, but 1-20% of the responses then lacked the last bytes (the prompt, sometimes the command's
//! output), which the port cannot detect (the adapter reads only after an epoll wake-up). A 2 ms settle
//! costs ~2-3 ms per interactive turn and returned every response complete in the benchmark, idle and under
//! load. (The reference sleeps 100 ms after a write and then waits for the whole window.)
//!
//! While the output is quiet and the process is busy, the input state is re-checked every
//! [`INPUT_POLL_INTERVAL`] (20 ms), backing off to [`MAX_INPUT_POLL_INTERVAL`] (250 ms) as the quiet lasts: the
//! check reads `/proc` in the PTY adapter. Pipe sessions never return early for input: their state is
//! [`InputState::Unknown`].

use std::time::Duration;

use tokio::time::Instant;
use uexec_ports::InputState;

use crate::session::Session;

/// Settle time after the last chunk, once the process has printed something since the window's mark.
pub const FAST_SETTLE: Duration = Duration::from_millis(2);
/// Settle time when nothing was printed since the window's mark.
pub const QUIET_SETTLE: Duration = Duration::from_millis(40);
/// How often the input state is re-checked right after output went quiet.
pub const INPUT_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// The longest interval between input-state checks, reached after a few seconds of quiet.
pub const MAX_INPUT_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The re-check interval after `quiet` without output: a tenth of the quiet time, within
/// [[`INPUT_POLL_INTERVAL`], [`MAX_INPUT_POLL_INTERVAL`]]. A prompt that appears right after a burst of output is
/// seen within 20 ms; a long silent job costs a `/proc` scan only every 250 ms.
fn poll_interval(quiet: Duration) -> Duration {
    (quiet / 10).clamp(INPUT_POLL_INTERVAL, MAX_INPUT_POLL_INTERVAL)
}

/// Where a window starts: its time and the number of output chunks seen at that time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    pub(crate) at: Instant,
    pub(crate) output_seq: u64,
}

impl Mark {
    /// The mark for a window starting now.
    pub(crate) fn now(session: &Session) -> Mark {
        Mark { at: Instant::now(), output_seq: session.snapshot().output_seq }
    }
}

/// What one window produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Collected {
    /// The output since the previous call.
    pub(crate) bytes: Vec<u8>,
    /// Set when the process is finished.
    pub(crate) exit_code: Option<i32>,
    /// The window ended early because the process waits for input.
    pub(crate) waiting_for_input: bool,
}

/// Collect output until the process finishes, `deadline` passes, or (PTY) it waits for input.
pub(crate) async fn collect(session: &Session, mark: Mark, deadline: Instant) -> Collected {
    let waiting_for_input = wait_window(session, mark, deadline).await;
    let snapshot = session.snapshot();
    let exit_code = if snapshot.finished { snapshot.exit_code } else { None };
    Collected {
        bytes: session.take_output(),
        exit_code,
        waiting_for_input: waiting_for_input && exit_code.is_none(),
    }
}

/// Wait for the end of the window; true when it ended because the process waits for input.
async fn wait_window(session: &Session, mark: Mark, deadline: Instant) -> bool {
    let mut rx = session.subscribe();
    let detect = session.spec.tty;
    loop {
        rx.borrow_and_update();
        let snapshot = session.snapshot();
        if snapshot.finished {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let mut wake = deadline;
        if detect {
            let printed = snapshot.output_seq > mark.output_seq;
            let activity = if printed { snapshot.last_output.max(mark.at) } else { mark.at };
            let settle = if printed { FAST_SETTLE } else { QUIET_SETTLE };
            let settled_at = activity + settle;
            if now >= settled_at {
                // A reader between a wake-up and its next read may hold output: wait for it to park.
                if (!printed || snapshot.reader_parked) && waiting(session) {
                    return true;
                }
                wake = wake.min(now + poll_interval(now.saturating_duration_since(activity)));
            } else {
                wake = wake.min(settled_at);
            }
        }
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    tokio::time::sleep_until(wake).await;
                }
            }
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}

fn waiting(session: &Session) -> bool {
    session.control.input_state() == InputState::WaitingForInput
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_poll_backs_off_with_the_quiet_time() {
        assert_eq!(poll_interval(Duration::ZERO), INPUT_POLL_INTERVAL);
        assert_eq!(poll_interval(Duration::from_millis(1000)), Duration::from_millis(100));
        assert_eq!(poll_interval(Duration::from_secs(60)), MAX_INPUT_POLL_INTERVAL);
    }
}
