//! One spawned command: its output buffers, its screen, its exit, and the two background tasks that feed them.
//!
//! Lifecycle of a session id (who does what, in order):
//!
//! 1. **Reserved**: `exec_command` reserves the id in the store before approval; every failure path (and a
//!    dropped call) releases it.
//! 2. **Spawning**: approval and sandbox choice are done; the process is spawned. On success the engine emits
//!    `Begin` and starts two tasks: the *reader* (pulls [`OutputStream::next_chunk`] into the buffers) and the
//!    *waiter* (awaits [`ProcessControl::wait`]).
//! 3. **Live**: the session is in the store. It is stored *before* the first window is collected, with the
//!    `exec_command` call holding its call lock, so a caller that gives up cannot orphan the process, and no
//!    other call can touch it until the first response is out. At the end of the window it is *committed*:
//!    counted for pruning and reported with its id.
//! 4. **Exited**: the waiter saw the exit, waited up to [`POST_EXIT_CLOSE_WAIT_MS`] for the output to close,
//!    emitted `End` (exactly once per spawned process, guarded by a flag) and marked the session finished;
//!    once the process tree is gone (the output closed, or what held it killed) it hands the sandbox's lease
//!    back (`Sandbox::finish`: the sandbox may remove what it made on the host for the command).
//! 5. **Reaped**: the next call on the session returns its last output with the exit code, removes it from the
//!    store and releases the id. Pruning, `close_session` and `shutdown` take the session out of the store
//!    first, then kill its tree ([`ProcessControl::kill_tree`]) and hand the lease back; `End` comes from
//!    whoever finishes first. The lease goes back exactly once (`crate::lease`).
//!
//! Who touches the buffers when: the reader appends (under the session's short `std` mutex, never held across
//! an await); the call that holds the session's call lock takes the pending output ("output since the previous
//! call"); the transcript (for `End`) is only appended to and read once. Waiters are woken through a
//! `tokio::sync::watch` counter bumped on every change. The reader also feeds the screen (PTY sessions; see
//! `screen` for why its memory is bounded). Input the process has not taken in yet waits in background writes,
//! at most `SessionSpec::input_backlog_bytes` of it; every buffer of a session has a fixed cap.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use uexec_domain::buffer::HeadTailBuffer;
use uexec_domain::limits::{MAX_OUTPUT_DELTA_BYTES, POST_EXIT_CLOSE_WAIT_MS};
use uexec_domain::terminal_text::ModeFilter;
use uexec_domain::{ExitStatus, ProtectionReport, SessionId};
use uexec_ports::process::{OutputStream, ProcessControl, ProcessError, SpawnedProcess};
use uexec_ports::{EventSink, ExecEvent};

use crate::api::SessionState;
use crate::error::ExecError;
use crate::lease::LeaseGuard;
use crate::screen::Screen;
use crate::utf8::DeltaSplitter;
use crate::watch::{PIPE_PRESENT_BYTES, Watch, Watchers};

/// A background write of input (see [`Session::write_input`]).
type InputWrite = tokio::task::JoinHandle<Result<(), ProcessError>>;

/// Takes a write's bytes off the input backlog when the write ends.
struct BacklogRelease {
    backlog: Arc<AtomicUsize>,
    len: usize,
}

impl Drop for BacklogRelease {
    fn drop(&mut self) {
        self.backlog.fetch_sub(self.len, Ordering::SeqCst);
    }
}

/// The most output parsed into the screen model at a time: the reader yields to the runtime between slices.
///
/// Parsing is the costliest part of reading a PTY (a program printing at full speed scrolls the screen
/// thousands of times per chunk: about 2 ms for a 64 KiB chunk here). Every ready task of the runtime waits its
/// turn behind every other, so with 64 sessions streaming, a call woken at its deadline waited for 64 whole
/// chunks to be parsed, once for the timer and again at each later step of its answer (rmcp, the stdout
/// writer): 100 to 200 ms past its window. A slice this size costs about 0.2 ms to parse.
pub(crate) const SCREEN_SLICE_BYTES: usize = 4096;

/// The exit code reported when a process's status is unknown.
pub(crate) const UNKNOWN_EXIT_CODE: i32 = -1;

/// What a session is, apart from its process.
#[derive(Debug, Clone)]
pub(crate) struct SessionSpec {
    pub(crate) id: SessionId,
    pub(crate) call_id: String,
    pub(crate) command: Vec<String>,
    pub(crate) cmd: String,
    pub(crate) cwd: PathBuf,
    pub(crate) tty: bool,
    pub(crate) buffer_bytes: usize,
    /// The shell starts without login because its startup files lie in a writable root (`uexec_domain::startup`).
    pub(crate) startup_guarded: bool,
    /// Most bytes of input that may wait for the process to read them (see [`Session::write_input`]).
    pub(crate) input_backlog_bytes: usize,
}

/// Mutable state shared by the reader, the waiter and the calls.
struct Shared {
    /// Output since the previous call.
    pending: HeadTailBuffer,
    /// All output, for `End` (emptied once `End` is out). It is fed the same shared chunks as `pending`, so
    /// the bytes both keep (under load, the newest output: both tails) are held once.
    transcript: HeadTailBuffer,
    /// Number of chunks received so far.
    output_seq: u64,
    /// Bytes of output received so far.
    output_bytes: u64,
    /// When the last chunk arrived (spawn time before the first).
    last_output: Instant,
    /// The reader saw the end of the output.
    output_closed: bool,
    /// The reader asked for more output and there was none: it is parked until the stream is readable again.
    /// Set when a poll of `next_chunk` returns pending, cleared when it returns a chunk.
    reader_parked: bool,
    /// The exit code, once the process exited (-1 when unknown).
    exit_code: Option<i32>,
    /// Exit seen, trailing output drained (or given up on), `End` emitted.
    finished: bool,
    /// The newest output (at most [`PIPE_PRESENT_BYTES`]) kept when `End` took the transcript: what a person
    /// who watches a pipe session after it exited sees of it.
    kept_output: Option<Vec<u8>>,
    /// Terminal sessions: what takes the mode, colour and title sequences out of the text the model reads
    /// (and the transcript); the screen and the watchers get every byte.
    text_filter: Option<ModeFilter>,
}

impl Shared {
    /// Append `text` (output as the model reads it) to the pending output and the transcript, which share it.
    fn push_text(&mut self, text: &Arc<[u8]>) {
        self.pending.push_shared(text);
        self.transcript.push_shared(text);
    }
}

/// The newest [`PIPE_PRESENT_BYTES`] of `all`.
fn newest(all: &[u8]) -> Vec<u8> {
    all.get(all.len().saturating_sub(PIPE_PRESENT_BYTES)..).unwrap_or_default().to_vec()
}

/// A point-in-time view of a session for the collector.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    pub(crate) finished: bool,
    /// The reader found the stream empty after its last chunk (see `Shared::reader_parked`).
    pub(crate) reader_parked: bool,
    pub(crate) exit_code: Option<i32>,
    pub(crate) output_seq: u64,
    pub(crate) last_output: Instant,
}

/// One spawned command.
pub(crate) struct Session {
    pub(crate) spec: SessionSpec,
    /// What this attempt runs under.
    pub(crate) protections: ProtectionReport,
    pub(crate) control: Arc<dyn ProcessControl>,
    pub(crate) started: Instant,
    /// Serialises calls on this session (taken by the call, never by the store).
    pub(crate) call_lock: Arc<tokio::sync::Mutex<()>>,
    /// Input of an earlier `write_stdin` that the process had not taken in by the end of that call's window:
    /// it goes on being written in the background, and later input is written after it.
    input_in_flight: Mutex<Option<InputWrite>>,
    /// Bytes of input handed to the writer and not yet taken in (or given up on): at most
    /// `spec.input_backlog_bytes`, so a process that never reads cannot make the server hold input without end.
    input_backlog: Arc<AtomicUsize>,
    events: Arc<dyn EventSink>,
    /// The rendered terminal (PTY sessions only). Its own lock: parsing a chunk can take milliseconds (a
    /// program printing at full speed scrolls the screen thousands of times per chunk), and under `shared`
    /// that held off every call waiting for a snapshot, past its window.
    screen: Option<Mutex<Screen>>,
    shared: Mutex<Shared>,
    changed: watch::Sender<u64>,
    end_emitted: AtomicBool,
    removed: AtomicBool,
    /// A response said the program waits for input, and none has found it busy since
    /// ([`uexec_domain::response::waiting_note`]).
    waiting_said: AtomicBool,
    /// People watching the session (`crate::watch`).
    watchers: Watchers,
    /// The sandbox's lease of the command, finished once its process tree is gone
    /// ([`Session::release_sandbox`]).
    lease: Mutex<Option<LeaseGuard>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.spec.id)
            .field("cmd", &self.spec.cmd)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Wrap a freshly spawned process and start its reader and waiter tasks. Must run inside a tokio runtime.
    pub(crate) fn start(
        spec: SessionSpec,
        protections: ProtectionReport,
        process: SpawnedProcess,
        events: Arc<dyn EventSink>,
        lease: LeaseGuard,
    ) -> Arc<Session> {
        let now = Instant::now();
        let screen = if spec.tty { Screen::new().map(Mutex::new) } else { None };
        let shared = Shared {
            pending: HeadTailBuffer::new(spec.buffer_bytes),
            transcript: HeadTailBuffer::new(spec.buffer_bytes),
            output_seq: 0,
            output_bytes: 0,
            last_output: now,
            output_closed: false,
            reader_parked: false,
            exit_code: None,
            finished: false,
            kept_output: None,
            text_filter: spec.tty.then(ModeFilter::new),
        };
        let (changed, _) = watch::channel(0);
        let watchers = Watchers::new(spec.buffer_bytes);
        let session = Arc::new(Session {
            spec,
            protections,
            control: process.control,
            started: now,
            call_lock: Arc::new(tokio::sync::Mutex::new(())),
            input_in_flight: Mutex::new(None),
            input_backlog: Arc::new(AtomicUsize::new(0)),
            events,
            screen,
            shared: Mutex::new(shared),
            changed,
            end_emitted: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            waiting_said: AtomicBool::new(false),
            watchers,
            lease: Mutex::new(Some(lease)),
        });
        tokio::spawn(read_loop(Arc::clone(&session), process.output));
        tokio::spawn(wait_loop(Arc::clone(&session)));
        session
    }

    /// Whether this response says that the program waits for input (`waiting`: it returned at a prompt;
    /// `has_output`: it carries output), remembering it for the
    /// session's next response (one atomic step, so two responses never both say it).
    pub(crate) fn note_waiting(&self, waiting: bool, has_output: bool) -> bool {
        let decide = |said| uexec_domain::response::waiting_note(said, waiting, has_output);
        match self.waiting_said.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |said| Some(decide(said).1))
        {
            Ok(said) | Err(said) => decide(said).0,
        }
    }

    /// Write `bytes` to the process's input, after any input still in flight, waiting at most until `deadline`.
    /// `Ok(None)` when the process has not taken all of it in by then (it does not read, or reads slowly): the
    /// write goes on in the background instead of holding the call (and the session) until the process
    /// reads or exits. [`ExecError::InputBacklogFull`] (nothing written) when the input still waiting plus
    /// `bytes` would exceed `spec.input_backlog_bytes`.
    pub(crate) async fn write_input(
        &self,
        bytes: Vec<u8>,
        deadline: Instant,
    ) -> Result<Option<Result<(), ProcessError>>, ExecError> {
        let len = bytes.len();
        let limit = self.spec.input_backlog_bytes;
        self.input_backlog
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |waiting| {
                waiting.checked_add(len).filter(|total| *total <= limit)
            })
            .map_err(|waiting| ExecError::InputBacklogFull { waiting, limit })?;
        let earlier = self.input_in_flight.lock().unwrap_or_else(PoisonError::into_inner).take();
        let control = Arc::clone(&self.control);
        let backlog = Arc::clone(&self.input_backlog);
        let mut write = tokio::spawn(async move {
            // Counted down however the write ends (done, failed, or the task dropped at shutdown).
            let _done = BacklogRelease { backlog, len };
            if let Some(earlier) = earlier {
                // Its outcome was nobody's to report any more; only the order matters.
                let _ = earlier.await;
            }
            control.write(&bytes).await
        });
        Ok(match tokio::time::timeout_at(deadline, &mut write).await {
            Ok(Ok(result)) => Some(result),
            Ok(Err(join)) => return Err(ExecError::InputWriterFailed(join.to_string())),
            Err(_elapsed) => {
                *self.input_in_flight.lock().unwrap_or_else(PoisonError::into_inner) = Some(write);
                None
            }
        })
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver that sees every later change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The current state.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let shared = self.lock();
        Snapshot {
            finished: shared.finished,
            reader_parked: shared.reader_parked,
            exit_code: shared.exit_code,
            output_seq: shared.output_seq,
            last_output: shared.last_output,
        }
    }

    /// For listings.
    pub(crate) fn state(&self) -> SessionState {
        match self.lock().exit_code {
            Some(exit_code) => SessionState::Exited { exit_code },
            None => SessionState::Running,
        }
    }

    /// Feed `chunk` to the screen (PTY sessions), [`SCREEN_SLICE_BYTES`] at a time with a yield to the
    /// runtime in between; before the chunk goes into the buffers, so output a call has taken is always on the
    /// screen too.
    /// Each slice goes to the watchers under the screen's lock, right after it is parsed (`crate::watch`).
    async fn feed_screen(&self, chunk: &Arc<[u8]>) {
        let Some(screen) = &self.screen else { return };
        let mut start = 0;
        while start < chunk.len() {
            let end = chunk.len().min(start + SCREEN_SLICE_BYTES);
            {
                let mut screen = screen.lock().unwrap_or_else(PoisonError::into_inner);
                screen.process(chunk.get(start..end).unwrap_or_default());
                self.watchers.send(chunk, start..end);
            }
            start = end;
            if start < chunk.len() {
                tokio::task::yield_now().await;
            }
        }
    }

    fn push_output(&self, chunk: &Arc<[u8]>) {
        {
            let mut shared = self.lock();
            let text = match shared.text_filter.as_mut().map(|filter| filter.filter(chunk)) {
                Some(Cow::Owned(text)) => Arc::from(text),
                // No sequence to remove: the chunk itself, shared with the screen and the watchers.
                Some(Cow::Borrowed(_)) | None => Arc::clone(chunk),
            };
            shared.push_text(&text);
            shared.output_seq += 1;
            shared.output_bytes += chunk.len() as u64;
            if self.screen.is_none() {
                // Pipe sessions hand the chunk on under this lock (`crate::watch`).
                self.watchers.send(chunk, 0..chunk.len());
            }
            shared.last_output = Instant::now();
            shared.reader_parked = false;
        }
        self.bump();
    }

    /// The reader is about to poll the stream (and may read): it is not parked. No wake-up: waiters only act on
    /// a parked reader.
    fn mark_reader_busy(&self) {
        self.lock().reader_parked = false;
    }

    fn mark_reader_parked(&self) {
        {
            let mut shared = self.lock();
            if shared.reader_parked {
                return;
            }
            shared.reader_parked = true;
        }
        self.bump();
    }

    fn mark_output_closed(&self) {
        {
            let mut shared = self.lock();
            // An unfinished sequence at the very end is text after all.
            if let Some(held) = shared.text_filter.as_mut().map(ModeFilter::finish).filter(|h| !h.is_empty())
            {
                shared.push_text(&Arc::from(held));
            }
            shared.output_closed = true;
        }
        self.bump();
    }

    fn mark_exited(&self, code: i32) {
        {
            let mut shared = self.lock();
            if shared.exit_code.is_none() {
                shared.exit_code = Some(code);
            }
        }
        self.bump();
    }

    /// Emit `End` (once) and mark the session finished.
    fn finish(&self) {
        if !self.end_emitted.swap(true, Ordering::SeqCst) {
            // The transcript is needed for this event only: taken out (later output is not kept for it) and
            // rendered outside the lock.
            let (exit_code, transcript) = {
                let mut shared = self.lock();
                let transcript = std::mem::replace(&mut shared.transcript, HeadTailBuffer::new(0));
                if self.screen.is_none() {
                    shared.kept_output = Some(newest(&transcript.to_bytes()));
                }
                (shared.exit_code.unwrap_or(UNKNOWN_EXIT_CODE), transcript)
            };
            let aggregated_output = transcript.to_string_lossy();
            drop(transcript);
            self.events.emit(ExecEvent::End {
                call_id: self.spec.call_id.clone(),
                session_id: self.spec.id,
                exit_code,
                aggregated_output,
                duration: self.started.elapsed(),
            });
        }
        let exit_code = {
            let mut shared = self.lock();
            if shared.exit_code.is_none() {
                shared.exit_code = Some(UNKNOWN_EXIT_CODE);
            }
            shared.finished = true;
            shared.exit_code.unwrap_or(UNKNOWN_EXIT_CODE)
        };
        self.watchers.exited(exit_code);
        self.bump();
    }

    /// Bytes of output received so far.
    pub(crate) fn output_bytes(&self) -> u64 {
        self.lock().output_bytes
    }

    /// Start watching (`crate::watch`): the present, registered where the reader hands on what follows it.
    pub(crate) fn watch(&self) -> Watch {
        let (present, events) = match &self.screen {
            Some(screen) => {
                let screen = screen.lock().unwrap_or_else(PoisonError::into_inner);
                (screen.formatted(), self.watchers.register())
            }
            None => {
                let shared = self.lock();
                // After `End` took the transcript, the newest output it kept.
                let present = match &shared.kept_output {
                    Some(last) => last.clone(),
                    None => newest(&shared.transcript.to_bytes()),
                };
                (present, self.watchers.register())
            }
        };
        let finished = {
            let shared = self.lock();
            shared.finished.then(|| shared.exit_code.unwrap_or(UNKNOWN_EXIT_CODE))
        };
        if let Some(exit_code) = finished {
            // Finished before (or while) it registered: say so, whether or not `finish` saw it.
            self.watchers.exited(exit_code);
        }
        Watch { present, tty: self.screen.is_some(), events }
    }

    /// Take the output since the previous call, as the buffer that held it (no byte is copied; what it dropped
    /// from the middle counts in the token totals). While the process may still write, an incomplete UTF-8
    /// sequence at the end is kept for the next call rather than rendered as a replacement character.
    pub(crate) fn take_output(&self) -> HeadTailBuffer {
        let mut shared = self.lock();
        if shared.finished { shared.pending.take_buffer() } else { shared.pending.take_complete_buffer() }
    }

    /// The output since the previous call, without taking it.
    pub(crate) fn peek_output(&self) -> Vec<u8> {
        self.lock().pending.to_bytes()
    }

    /// The rendered screen (PTY sessions), spec B5.
    pub(crate) fn screen_contents(&self) -> Option<String> {
        let screen = self.screen.as_ref()?;
        Some(screen.lock().unwrap_or_else(PoisonError::into_inner).contents())
    }

    /// Mark the session as taken out of the store; returns false if it already was.
    pub(crate) fn mark_removed(&self) -> bool {
        !self.removed.swap(true, Ordering::SeqCst)
    }

    /// True once the session left the store (reaped, pruned, closed).
    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }

    /// Wait until the session is finished or `deadline`; true if finished.
    pub(crate) async fn wait_finished(&self, deadline: Instant) -> bool {
        let mut rx = self.subscribe();
        loop {
            rx.borrow_and_update();
            if self.lock().finished {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        tokio::time::sleep_until(deadline).await;
                    }
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    async fn wait_output_closed(&self, deadline: Instant) {
        let mut rx = self.subscribe();
        loop {
            rx.borrow_and_update();
            if self.lock().output_closed || Instant::now() >= deadline {
                return;
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        tokio::time::sleep_until(deadline).await;
                    }
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Record how the process ended; an error (logged as `what`) leaves the exit code unknown.
    fn mark_exit_result(&self, result: Result<ExitStatus, ProcessError>, what: &str) {
        match result {
            Ok(status) => self.mark_exited(status.code()),
            Err(err) => {
                tracing::warn!(session_id = %self.spec.id, error = %err, "{what}");
                self.mark_exited(UNKNOWN_EXIT_CODE);
            }
        }
    }

    /// The command's process tree is gone: the sandbox may undo what it made for it (`Sandbox::finish`).
    fn release_sandbox(&self) {
        let lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop(lease);
    }

    /// Kill the process tree, drain trailing output, emit `End` if nobody did yet; returns the exit code.
    pub(crate) async fn terminate(&self) -> i32 {
        let result = self.control.kill_tree().await;
        let killed = result.is_ok();
        self.mark_exit_result(result, "kill_tree failed");
        if killed {
            self.release_sandbox();
        }
        self.wait_output_closed(Instant::now() + Duration::from_millis(POST_EXIT_CLOSE_WAIT_MS)).await;
        self.finish();
        self.snapshot().exit_code.unwrap_or(UNKNOWN_EXIT_CODE)
    }
}

/// The reader task: output chunks into the buffers, the screen and `OutputDelta` events.
async fn read_loop(session: Arc<Session>, mut output: Box<dyn OutputStream>) {
    let mut splitter = DeltaSplitter::new(MAX_OUTPUT_DELTA_BYTES);
    loop {
        let mut next = output.next_chunk();
        // Poll by hand to see the stream run dry: a pending poll means it had nothing at that moment.
        // The flag is cleared *before* every poll, because a poll may read bytes: a waiter that sees the reader
        // parked, then the terminal drained, then the reader still parked on the same count knows that nothing
        // was read in between that is not in the buffer yet (see `collect`).
        let result = std::future::poll_fn(|cx| {
            session.mark_reader_busy();
            match next.as_mut().poll(cx) {
                Poll::Pending => {
                    session.mark_reader_parked();
                    Poll::Pending
                }
                ready => ready,
            }
        })
        .await;
        drop(next);
        match result {
            Ok(Some(chunk)) => {
                if chunk.is_empty() {
                    continue;
                }
                // One copy of the chunk, shared by the pending output, the transcript and the watchers.
                let chunk: Arc<[u8]> = Arc::from(chunk);
                session.feed_screen(&chunk).await;
                session.push_output(&chunk);
                for piece in splitter.feed(&chunk) {
                    emit_delta(&session, piece);
                }
                // A stream that is always ready (`yes` on a PTY) never returns pending, and an adapter's readiness
                // wait need not count against tokio's cooperative budget. Without yielding after every chunk the
                // reader kept its worker thread, and the call it had just woken (queued in that worker's LIFO
                // slot, which other workers do not steal from) missed its window by tens of seconds.
                tokio::task::yield_now().await;
            }
            Ok(None) => break,
            Err(err) => {
                tracing::debug!(session_id = %session.spec.id, error = %err, "output stream ended with an error");
                break;
            }
        }
    }
    for piece in splitter.finish() {
        emit_delta(&session, piece);
    }
    session.mark_output_closed();
}

fn emit_delta(session: &Session, chunk: Vec<u8>) {
    session.events.emit(ExecEvent::OutputDelta {
        call_id: session.spec.call_id.clone(),
        session_id: session.spec.id,
        chunk,
    });
}

/// The waiter task: the exit, then up to [`POST_EXIT_CLOSE_WAIT_MS`] for trailing output, then `End`.
async fn wait_loop(session: Arc<Session>) {
    let result = session.control.wait().await;
    session.mark_exit_result(result, "waiting for the process failed");
    session.wait_output_closed(Instant::now() + Duration::from_millis(POST_EXIT_CLOSE_WAIT_MS)).await;
    session.finish();
    if !session.lock().output_closed {
        // Descendants still hold the output open (`server &` without a terminal): the session has ended, so
        // they end too (spec B3), as they do when they do not hold it; otherwise they, this session and its
        // reader would live on unseen.
        if let Err(err) = session.control.kill_tree().await {
            tracing::warn!(session_id = %session.spec.id, error = %err, "killing what outlived the process failed");
            // Something may still run under the sandbox's mounts: the lease is kept until the session is dropped.
            return;
        }
    }
    session.release_sandbox();
}
