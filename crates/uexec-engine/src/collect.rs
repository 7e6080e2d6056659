//! Collecting a session's output for one yield window, with early return on exit and on waiting-for-input.
//!
//! A window ends at the first of:
//! 1. the process is finished (exited, trailing output drained, `End` emitted): returns at once, so
//!    `sleep 0.05` with a 31 s window takes ~0.1 s;
//! 2. the deadline;
//! 3. (PTY sessions, spec B4) the terminal's foreground process is blocked reading the terminal
//!    ([`InputState::WaitingForInput`]) and the output has settled.
//!
//! Rule 3 must not return while output the process wrote before blocking is still on its way: the kernel hands
//! PTY output to the master asynchronously, and with the reader task's wake-up that takes from microseconds to
//! milliseconds on a busy 2-core machine. So the waiting state must be seen **twice**, [`CONFIRM_AFTER`]
//! (2 ms) apart, with no output in between and the reader task parked (it found the stream empty) both times.
//! Because the process was already blocked at the first sighting, everything it wrote had been written by
//! then, and the confirmation gives it 2 ms to arrive. When the first sighting may happen:
//! - as soon as the reader parks, once the process has printed something since the window's mark (spawn or
//!   write): output after our write shows the input was consumed (a shell echoes it; the kernel's line
//!   discipline echoes and wakes the reader in the same pass), and the PTY adapter reports `WaitingForInput`
//!   only when the foreground process sleeps in a terminal read *and* no typed input is pending;
//! - [`QUIET_SETTLE`] (40 ms) after the mark when nothing was printed (a password prompt with echo off, a
//!   program that reads silently): long enough for a woken reader to be scheduled, so the state seen is the
//!   one after it consumed the input, not before.
//!
//! An interactive turn (`echo hi` in `bash -i`) then takes ~3-4 ms (the `engine_roundtrip` benchmark; the
//! reference sleeps 100 ms after a write and then waits for the whole window). Returning at the first
//! sighting measured 1.0-1.5x the raw PTY round trip, but 1-20% of those responses lacked the last bytes (the
//! prompt, sometimes the command's output): completeness wins.
//!
//! While the process is busy, the input state is re-checked every tenth of the quiet time, at least every
//! [`MIN_INPUT_POLL_INTERVAL`] (1 ms, so a shell that blocks just after its prompt is seen at once) and at most
//! every [`MAX_INPUT_POLL_INTERVAL`] (250 ms, so a long silent job costs a `/proc` scan only now and then). Pipe
//! sessions never return early for input: their state is [`InputState::Unknown`].

use std::time::Duration;

use tokio::time::Instant;
use uexec_ports::InputState;

use crate::session::Session;

/// The delay between the two sightings of the waiting state.
pub const CONFIRM_AFTER: Duration = Duration::from_millis(2);
/// The earliest first sighting when nothing was printed since the window's mark.
pub const QUIET_SETTLE: Duration = Duration::from_millis(40);
/// The shortest interval between input-state checks (right after output).
pub const MIN_INPUT_POLL_INTERVAL: Duration = Duration::from_millis(1);
/// The longest interval between input-state checks, reached after seconds of quiet.
pub const MAX_INPUT_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The re-check interval after `quiet` without output: a tenth of it, within
/// [[`MIN_INPUT_POLL_INTERVAL`], [`MAX_INPUT_POLL_INTERVAL`]].
fn poll_interval(quiet: Duration) -> Duration {
    (quiet / 10).clamp(MIN_INPUT_POLL_INTERVAL, MAX_INPUT_POLL_INTERVAL)
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
    // The first sighting of the waiting state: when, and the output count then.
    let mut sighted: Option<(Instant, u64)> = None;
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
            if sighted.is_some_and(|(_, seq)| seq != snapshot.output_seq || !snapshot.reader_parked) {
                sighted = None;
            }
            let printed = snapshot.output_seq > mark.output_seq;
            let activity = if printed { snapshot.last_output.max(mark.at) } else { mark.at };
            match sighted {
                Some((at, _)) if now >= at + CONFIRM_AFTER => {
                    if waiting(session) {
                        return true;
                    }
                    sighted = None;
                    wake = wake.min(now + poll_interval(now.saturating_duration_since(activity)));
                }
                Some((at, _)) => wake = wake.min(at + CONFIRM_AFTER),
                None => {
                    let earliest = if printed { activity } else { mark.at + QUIET_SETTLE };
                    if now < earliest {
                        wake = wake.min(earliest);
                    } else if snapshot.reader_parked && waiting(session) {
                        sighted = Some((now, snapshot.output_seq));
                        wake = wake.min(now + CONFIRM_AFTER);
                    } else {
                        // Busy, or the reader is between a wake-up and its next read: look again soon (a
                        // parking reader also wakes us).
                        wake = wake.min(now + poll_interval(now.saturating_duration_since(activity)));
                    }
                }
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
        assert_eq!(poll_interval(Duration::ZERO), MIN_INPUT_POLL_INTERVAL);
        assert_eq!(poll_interval(Duration::from_millis(50)), Duration::from_millis(5));
        assert_eq!(poll_interval(Duration::from_millis(1000)), Duration::from_millis(100));
        assert_eq!(poll_interval(Duration::from_secs(60)), MAX_INPUT_POLL_INTERVAL);
    }
}
