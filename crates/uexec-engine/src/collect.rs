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
//! PTY output to the master asynchronously, and the reader task needs a moment to pull it into the buffer.
//! The port's contract closes the first gap: [`InputState::WaitingForInput`] promises that every byte the
//! foreground process wrote before blocking has already been read from the terminal by the output stream (the
//! PTY adapter flushes the kernel's buffer and checks that the master is drained). The engine closes the
//! second: it returns only when the reader task was parked (it found the stream empty) with the same output
//! count both before and after the input-state check, so whatever was read before the check is in the buffer.
//! When the first check may happen:
//! - as soon as the reader parks, once the process has printed something since the window's mark (spawn or
//!   write): output after our write shows the input was consumed (a shell echoes it; the kernel's line
//!   discipline echoes and wakes the reader in the same pass), and the PTY adapter reports `WaitingForInput`
//!   only when the foreground process sleeps in a terminal read *and* no typed input is pending;
//! - [`QUIET_SETTLE`] (40 ms) after the mark when nothing was printed (a password prompt with echo off, a
//!   program that reads silently): long enough for a woken reader to be scheduled, so the state seen is the
//!   one after it consumed the input, not before.
//!
//! While the process is busy, the input state is re-checked every tenth of the quiet time, at least every
//! [`MIN_INPUT_POLL_INTERVAL`] (1 ms, so a shell that blocks just after its prompt is seen at once) and at most
//! every [`MAX_INPUT_POLL_INTERVAL`] (250 ms, so a long silent job costs a `/proc` scan only now and then). Pipe
//! sessions never return early for input: their state is [`InputState::Unknown`]; nor do PTY sessions of an
//! adapter that cannot detect input waits (the portable process core, on macOS): [`InputState::Unavailable`].

use std::time::Duration;

use tokio::time::Instant;
use uexec_domain::buffer::HeadTailBuffer;
use uexec_ports::process::InputState;

use crate::session::Session;

/// The earliest first sighting when nothing was printed since the window's mark.
pub(crate) const QUIET_SETTLE: Duration = Duration::from_millis(40);
/// The shortest interval between input-state checks (right after output).
pub(crate) const MIN_INPUT_POLL_INTERVAL: Duration = Duration::from_millis(1);
/// The longest interval between input-state checks, reached after seconds of quiet.
pub(crate) const MAX_INPUT_POLL_INTERVAL: Duration = Duration::from_millis(250);

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
#[derive(Debug, Clone)]
pub(crate) struct Collected {
    /// The output since the previous call: the session buffer that held it, with what it dropped from the
    /// middle (its marker stands there).
    pub(crate) output: HeadTailBuffer,
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
    let output = session.take_output();
    Collected { output, exit_code, waiting_for_input: waiting_for_input && exit_code.is_none() }
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
            let earliest = if printed { activity } else { mark.at + QUIET_SETTLE };
            if now < earliest {
                wake = wake.min(earliest);
            } else if snapshot.reader_parked && waiting(session) {
                // Everything written before the process blocked was read before the check (the port's
                // contract); the reader parked on the same count after it, so all of it is in the buffer.
                let after = session.snapshot();
                if after.reader_parked && after.output_seq == snapshot.output_seq && !after.finished {
                    return true;
                }
                wake = wake.min(now + MIN_INPUT_POLL_INTERVAL);
            } else {
                // Busy, or the reader is between a wake-up and its next read: look again soon (a parking
                // reader also wakes us).
                wake = wake.min(now + poll_interval(now.saturating_duration_since(activity)));
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
