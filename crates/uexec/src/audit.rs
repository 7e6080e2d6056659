//! The audit log: an [`EventSink`] appending one JSON object per line to a file opened with `O_APPEND`.
//!
//! Recorded: every approval request and decision, every command's begin (`command` as approved, `argv` exactly
//! as executed with the sandbox's wrapper and the shell flag actually used, cwd, tty, sandbox, protections)
//! and end (exit code, duration, output size, and the begin's argv, cwd and sandbox again so an end line stands
//! alone), every refusal of the sandboxes and of the allowlist proxy (one `sandbox_refused` record each, one
//! shape for every kind: [`refusal_record`]), and every write to a session's stdin (what was typed into a shell
//! is as much a command as the command that started it). The person's desk (`control::desk`) adds who answered each
//! question (`question_answered`: `client`, `http` or `control`), every refusal of the approval policy or a command
//! rule (`policy_refused`) and every decision about a host of the allowlist mode (`network_decision`); the operator
//! adds attaches, typing (how much, never what) and kills. Output itself is not recorded, only its size: the log
//! is for who ran what where and under which protection, and stays small.
//!
//! Every line carries `time` (RFC 3339, UTC, milliseconds) and `unix_ms`. Each record is one `write(2)` of a
//! whole line on an unbuffered append-only file, so it is on disk (in the page cache) when `emit` returns and
//! concurrent writers never interleave inside a line. `emit` holds a mutex only for that one write. A write
//! that takes only part of the line (a disk that fills up mid-record) is undone: the file is truncated back to
//! where the record began, so the log stays whole JSON lines and the record counts as lost, like one that did
//! not fit at all. Should the truncation fail too, the next record starts on a line of its own.
//!
//! When the log cannot be written (disk full, the directory gone, an I/O error), commands still run: the audit
//! log records what happened, it protects nothing (the sandbox and the approvals do), and refusing every command
//! because a disk filled up would stop the agent without making anything safer. Instead the failure is loud: the
//! first failed record after a good one is reported on stderr with its error, the lost records are counted,
//! the return to a good write is reported with how many were lost, and the process reports the total when it
//! exits. A log removed (or replaced, as by a rotation) while running is recreated at its path before the next
//! record, so records never go to a file nobody can see. A log made unwritable (`chmod`) after it was opened is
//! still written through the descriptor opened at start. RELIABILITY.md lists the cases and their tests.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};
use uexec_domain::denial::Refusal;
use uexec_domain::{ProtectionReport, SessionId};
use uexec_ports::{EventSink, ExecEvent};

/// What a `begin` said about a command, repeated on its `end`.
#[derive(Debug, Clone)]
struct BeginInfo {
    command: Vec<String>,
    cwd: PathBuf,
    protections: ProtectionReport,
}

/// An append-only JSON Lines audit log.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
    open_commands: Mutex<HashMap<(String, SessionId), BeginInfo>>,
    failures: AtomicU64,
    /// Records lost since the last good write (0 while the log is healthy).
    lost_in_a_row: AtomicU64,
    /// True while the last write failed.
    failing: AtomicBool,
    /// Part of a record stayed in the file (a short write that could not be undone): the next record starts
    /// with a newline, so it is a line of its own.
    torn: AtomicBool,
}

/// What a record is appended to: one write at a time, its end, and a way back to an earlier end.
trait Append {
    /// One `write(2)`: how many bytes it took.
    fn write_once(&mut self, bytes: &[u8]) -> std::io::Result<usize>;
    /// The offset right after the last write.
    fn position(&mut self) -> std::io::Result<u64>;
    /// Cut the file back to `len` bytes.
    fn truncate(&mut self, len: u64) -> std::io::Result<()>;
}

impl Append for File {
    fn write_once(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        Write::write(self, bytes)
    }

    fn position(&mut self) -> std::io::Result<u64> {
        std::io::Seek::stream_position(self)
    }

    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.set_len(len)
    }
}

/// What became of one record.
#[derive(Debug)]
enum Appended {
    /// Written whole.
    Whole,
    /// Not written: nothing of it stays (a part that was written is cut off again).
    Lost(std::io::Error),
    /// Not written, and a part of it stays in the file (cutting it off failed too).
    Torn(std::io::Error),
}

/// Append one record's `line`, first ending a part of an earlier record that stayed in the file (`torn`), and
/// note in `torn` whether a part of this one stays.
fn append_record(file: &mut impl Append, line: &str, torn: &mut bool) -> std::io::Result<()> {
    let appended = if *torn {
        append_whole(file, format!("\n{line}").as_bytes())
    } else {
        append_whole(file, line.as_bytes())
    };
    match appended {
        Appended::Whole => {
            *torn = false;
            Ok(())
        }
        Appended::Lost(e) => Err(e),
        Appended::Torn(e) => {
            *torn = true;
            Err(e)
        }
    }
}

/// Append `line` (one record and its newline) in one write. A short write is undone by truncating the file back
/// to where the record began (an `O_APPEND` write starts at the end of the file: its end minus what it took).
fn append_whole(file: &mut impl Append, line: &[u8]) -> Appended {
    let written = loop {
        match file.write_once(line) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Appended::Lost(e),
            Ok(n) => break n,
        }
    };
    if written == line.len() {
        return Appended::Whole;
    }
    let short = std::io::Error::other(format!(
        "short write: {written} of {} bytes (no space left on the device?)",
        line.len()
    ));
    if written == 0 {
        return Appended::Lost(short);
    }
    let undone = file.position().and_then(|end| file.truncate(end.saturating_sub(written as u64)));
    match undone {
        Ok(()) => Appended::Lost(short),
        Err(e) => Appended::Torn(std::io::Error::other(format!("{short}; cutting it off failed: {e}"))),
    }
}

impl AuditLog {
    /// Open (create) `path` for appending. The parent directory must exist.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AuditLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            open_commands: Mutex::new(HashMap::new()),
            failures: AtomicU64::new(0),
            lost_in_a_row: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            torn: AtomicBool::new(false),
        })
    }

    /// How many records could not be written.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Write one record (a JSON object), adding the timestamps.
    pub fn record(&self, mut record: Map<String, Value>) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let unix_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let mut line = Map::new();
        line.insert("time".into(), Value::String(rfc3339_utc_millis(unix_ms)));
        line.insert("unix_ms".into(), json!(unix_ms));
        line.append(&mut record);
        let mut text = Value::Object(line).to_string();
        text.push('\n');
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let result = match self.reopen_if_replaced(&mut file) {
            Err(e) => Err(e),
            Ok(reopened) => {
                // A part of an earlier record may stay at the end of this file, not of a new one.
                let mut torn = !reopened && self.torn.load(Ordering::Relaxed);
                let appended = append_record(&mut *file, &text, &mut torn);
                self.torn.store(torn, Ordering::Relaxed);
                appended
            }
        };
        // Counted under the same lock as the write: the lost records a recovery reports are exactly those that
        // failed before it.
        match result {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    let lost = self.lost_in_a_row.swap(0, Ordering::Relaxed);
                    tracing::warn!(
                        path = %self.path.display(),
                        "the audit log is writable again; {lost} record(s) were lost"
                    );
                }
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                self.lost_in_a_row.fetch_add(1, Ordering::Relaxed);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        path = %self.path.display(),
                        error = %e,
                        "cannot write the audit log; commands keep running, their records are lost until it \
                         can be written again"
                    );
                }
            }
        }
        drop(file);
    }

    /// Reopen the log at its path when the open file is no longer the one there (removed, or renamed away by a
    /// rotation): a new file is created (true). A character device (`/dev/full`, `/dev/null`) is left as it is.
    fn reopen_if_replaced(&self, file: &mut File) -> std::io::Result<bool> {
        let open = file.metadata()?;
        if !open.file_type().is_file() {
            return Ok(false);
        }
        let same = match std::fs::metadata(&self.path) {
            Ok(at_path) => at_path.dev() == open.dev() && at_path.ino() == open.ino(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        if !same {
            *file = OpenOptions::new().create(true).append(true).open(&self.path)?;
            tracing::warn!(path = %self.path.display(), "the audit log was removed or replaced; recreated it");
        }
        Ok(!same)
    }

    fn remember_begin(&self, key: (String, SessionId), info: BeginInfo) {
        self.open_commands.lock().unwrap_or_else(PoisonError::into_inner).insert(key, info);
    }

    fn take_begin(&self, key: &(String, SessionId)) -> Option<BeginInfo> {
        self.open_commands.lock().unwrap_or_else(PoisonError::into_inner).remove(key)
    }
}

impl EventSink for AuditLog {
    fn emit(&self, event: ExecEvent) {
        let record = match event {
            ExecEvent::Begin { call_id, session_id, command, argv, cwd, tty, protections } => {
                let record = json!({
                    "event": "begin",
                    "call_id": call_id,
                    "session_id": session_id,
                    "command": command,
                    "argv": argv,
                    "cwd": cwd,
                    "tty": tty,
                    "sandbox": protections.sandbox,
                    "protections": protections,
                });
                self.remember_begin((call_id, session_id), BeginInfo { command, cwd, protections });
                record
            }
            ExecEvent::End { call_id, session_id, exit_code, aggregated_output, duration } => {
                let begin = self.take_begin(&(call_id.clone(), session_id));
                json!({
                    "event": "end",
                    "call_id": call_id,
                    "session_id": session_id,
                    "exit_code": exit_code,
                    "duration_ms": u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
                    "output_bytes": aggregated_output.len(),
                    "command": begin.as_ref().map(|b| &b.command),
                    "cwd": begin.as_ref().map(|b| &b.cwd),
                    "sandbox": begin.as_ref().map(|b| b.protections.sandbox),
                    "protections": begin.as_ref().map(|b| &b.protections),
                })
            }
            ExecEvent::TerminalInteraction { call_id, session_id, chars } => json!({
                "event": "stdin",
                "call_id": call_id,
                "session_id": session_id,
                "chars": chars,
            }),
            ExecEvent::ApprovalRequested { request } => json!({
                "event": "approval_requested",
                "call_id": request.call_id,
                "session_id": request.session_id,
                "kind": request.kind,
                "command": request.command,
                "cwd": request.cwd,
                "reason": request.reason,
                "warnings": request.warnings,
            }),
            ExecEvent::ApprovalDecided { call_id, decision, error } => json!({
                "event": "approval_decided",
                "call_id": call_id,
                "decision": decision,
                "error": error,
            }),
            ExecEvent::Refused { call_id, session_id, refusals } => {
                // A connection the allowlist proxy refused is recorded by the proxy as it refuses it
                // (`crate::proxy`), once per connection, whichever call notes it.
                for refusal in refusals.iter().filter(|r| !matches!(r, Refusal::Connect { .. })) {
                    let mut record = refusal_record(refusal);
                    record.insert("call_id".into(), json!(call_id));
                    record.insert("session_id".into(), json!(session_id));
                    self.record(record);
                }
                return;
            }
            ExecEvent::OutputDelta { .. } => return,
            // Future event kinds are recorded as they serialise.
            #[allow(unreachable_patterns)]
            other => match serde_json::to_value(&other) {
                Ok(value) => json!({ "event": "other", "data": value }),
                Err(_) => return,
            },
        };
        if let Value::Object(map) = record {
            self.record(map);
        }
    }
}

/// The audit record of one refusal, whatever refused it: `{"event":"sandbox_refused","kind",
/// "target","reason","allow","source","text"}` (`uexec_domain::denial::RefusalRecord`).
pub fn refusal_record(refusal: &Refusal) -> Map<String, Value> {
    let mut record = Map::new();
    record.insert("event".into(), json!("sandbox_refused"));
    if let Ok(Value::Object(fields)) = serde_json::to_value(refusal.record()) {
        record.extend(fields);
    }
    record
}

/// `unix_ms` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_utc_millis(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let millis = unix_ms % 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if m <= 2 { y + 1 } else { y };
    (year, u32::try_from(m).unwrap_or(1), u32::try_from(d).unwrap_or(1))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use uexec_domain::{ReviewDecision, SandboxKind};
    use uexec_ports::{ApprovalKind, ApprovalRequest};

    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339_utc_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_utc_millis(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_utc_millis(1_767_225_599_999), "2025-12-31T23:59:59.999Z");
    }

    fn lines(path: &Path) -> Vec<Value> {
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    #[test]
    fn begin_end_and_approvals_are_recorded_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, "{\"existing\":true}\n").unwrap();
        let log = AuditLog::open(&path).unwrap();
        let protections = ProtectionReport {
            sandbox: SandboxKind::LinuxLandlockSeccomp,
            policy: "workspace-write".into(),
            protections: Vec::new(),
            escape_reason: None,
        };
        log.emit(ExecEvent::ApprovalRequested {
            request: ApprovalRequest {
                call_id: "c1".into(),
                session_id: SessionId(1000),
                command: uexec_domain::command::ParsedCommand::new(vec!["git".into(), "push".into()]),
                cwd: "/w".into(),
                kind: ApprovalKind::Run,
                reason: None,
                warnings: Vec::new(),
                prefix_offer: None,
                denial: None,
            },
        });
        log.emit(ExecEvent::ApprovalDecided {
            call_id: "c1".into(),
            decision: Some(ReviewDecision::Approved),
            error: None,
        });
        log.emit(ExecEvent::Begin {
            call_id: "c1".into(),
            session_id: SessionId(1000),
            command: vec!["git".into(), "push".into()],
            argv: vec!["sandbox-exec".into(), "-p".into(), "(profile)".into(), "git".into(), "push".into()],
            cwd: "/w".into(),
            tty: false,
            protections,
        });
        log.emit(ExecEvent::OutputDelta {
            call_id: "c1".into(),
            session_id: SessionId(1000),
            chunk: b"x".to_vec(),
        });
        log.emit(ExecEvent::End {
            call_id: "c1".into(),
            session_id: SessionId(1000),
            exit_code: 3,
            aggregated_output: "hello".into(),
            duration: Duration::from_millis(1500),
        });
        let lines = lines(&path);
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert_eq!(lines[0]["existing"], true, "appends, never truncates");
        assert_eq!(lines[1]["event"], "approval_requested");
        assert_eq!(lines[1]["kind"], "run");
        assert_eq!(lines[2]["decision"], "approved");
        assert_eq!(lines[3]["event"], "begin");
        assert_eq!(lines[3]["sandbox"], "linux-landlock-seccomp");
        assert_eq!(lines[3]["argv"], json!(["sandbox-exec", "-p", "(profile)", "git", "push"]));
        assert_eq!(lines[4]["event"], "end");
        assert_eq!(lines[4]["exit_code"], 3);
        assert_eq!(lines[4]["duration_ms"], 1500);
        assert_eq!(lines[4]["output_bytes"], 5);
        assert_eq!(lines[4]["command"], json!(["git", "push"]));
        assert_eq!(lines[4]["cwd"], "/w");
        assert!(lines[4]["time"].as_str().unwrap().ends_with('Z'));
        assert!(lines[4]["unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(log.failures(), 0);
    }

    #[test]
    fn each_refusal_is_one_record_of_one_shape_and_the_proxys_are_its_own() {
        use uexec_domain::denial::FileRule;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let connect = Refusal::Connect {
            target: "a.com:443".into(),
            reason: "not on the domain allowlist".into(),
            allow: Some("a.com".into()),
        };
        log.emit(ExecEvent::Refused {
            call_id: "c1".into(),
            session_id: SessionId(1000),
            refusals: vec![
                Refusal::Lookup { name: "pypi.org".into() },
                connect.clone(),
                Refusal::File { path: "/etc/hosts".into(), rule: FileRule::OutsideRoots },
            ],
        });
        // What the proxy writes when it refuses (`crate::proxy`).
        let mut by_proxy = refusal_record(&connect);
        by_proxy.insert("by".into(), json!("proxy"));
        log.record(by_proxy);
        let lines = lines(&path);
        assert_eq!(lines.len(), 3, "the engine's connect is the proxy's record: {lines:#?}");
        for line in &lines {
            assert_eq!(line["event"], "sandbox_refused");
            for field in ["kind", "target", "reason", "allow", "source", "text"] {
                assert!(line[field].is_string(), "{field} in {line}");
            }
        }
        assert_eq!(
            lines.iter().map(|l| l["kind"].as_str().unwrap()).collect::<Vec<_>>(),
            ["lookup", "write", "connect"]
        );
        assert_eq!(lines[0]["call_id"], "c1");
        assert_eq!(lines[0]["session_id"], 1000);
        assert_eq!(lines[1]["target"], "/etc/hosts");
        assert_eq!(lines[1]["reason"], "outside the writable roots");
        assert_eq!(lines[1]["source"], "output");
        assert_eq!(lines[2]["by"], "proxy");
        assert_eq!(lines[2]["target"], "a.com:443");
        assert!(lines[2]["allow"].as_str().unwrap().starts_with("--allow-domain a.com"), "{}", lines[2]);
    }

    fn stdin_record(log: &AuditLog, chars: &str) {
        log.emit(ExecEvent::TerminalInteraction {
            call_id: "c".into(),
            session_id: SessionId(1000),
            chars: chars.into(),
        });
    }

    #[test]
    fn a_full_disk_loses_records_counted_and_never_panics() {
        let log = AuditLog::open(Path::new("/dev/full")).unwrap();
        stdin_record(&log, "one");
        stdin_record(&log, "two");
        assert_eq!(log.failures(), 2);
        assert!(log.failing.load(Ordering::Relaxed));
        assert_eq!(log.lost_in_a_row.load(Ordering::Relaxed), 2);
    }

    /// A disk with `room` bytes left: a write takes what fits (a short write), then fails with ENOSPC.
    struct SmallDisk {
        data: Vec<u8>,
        room: usize,
        /// Writes that fail with EINTR before taking anything.
        interrupts: usize,
        truncate_fails: bool,
    }

    impl Append for SmallDisk {
        fn write_once(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.interrupts > 0 {
                self.interrupts -= 1;
                return Err(std::io::Error::from(std::io::ErrorKind::Interrupted));
            }
            let free = self.room.saturating_sub(self.data.len());
            if free == 0 {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            let n = free.min(bytes.len());
            self.data.extend_from_slice(&bytes[..n]);
            Ok(n)
        }

        fn position(&mut self) -> std::io::Result<u64> {
            Ok(self.data.len() as u64)
        }

        fn truncate(&mut self, len: u64) -> std::io::Result<()> {
            if self.truncate_fails {
                return Err(std::io::Error::from_raw_os_error(5));
            }
            self.data.truncate(len as usize);
            Ok(())
        }
    }

    fn record_line(n: usize) -> String {
        format!("{}\n", json!({ "event": "stdin", "n": n, "chars": "x".repeat(n % 97) }))
    }

    #[test]
    fn a_disk_that_fills_mid_record_leaves_whole_lines_and_every_lost_record_is_counted() {
        for room in [0, 1, 50, 333, 1000, 4096] {
            let mut disk = SmallDisk { data: Vec::new(), room, interrupts: 1, truncate_fails: false };
            let (mut torn, mut lost) = (false, 0);
            for n in 0..100 {
                if append_record(&mut disk, &record_line(n), &mut torn).is_err() {
                    lost += 1;
                }
            }
            // Room again: the next records are whole lines after the kept ones.
            disk.room = usize::MAX;
            for n in 100..103 {
                append_record(&mut disk, &record_line(n), &mut torn).unwrap();
            }
            assert!(!torn);
            let text = String::from_utf8(disk.data).unwrap();
            let kept: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            assert!(text.ends_with('\n'));
            assert_eq!(kept.len() - 3 + lost, 100, "room {room}: every record is kept or counted as lost");
            let numbers: Vec<u64> = kept.iter().map(|l| l["n"].as_u64().unwrap()).collect();
            assert!(numbers.windows(2).all(|w| w[0] < w[1]), "in order: {numbers:?}");
            assert_eq!(&numbers[numbers.len() - 3..], [100, 101, 102]);
        }
    }

    #[test]
    fn a_part_that_cannot_be_cut_off_is_ended_before_the_next_record() {
        let room = record_line(1).len() + 10;
        let mut disk = SmallDisk { data: Vec::new(), room, interrupts: 0, truncate_fails: true };
        let mut torn = false;
        assert!(append_record(&mut disk, &record_line(1), &mut torn).is_ok());
        assert!(append_record(&mut disk, &record_line(2), &mut torn).is_err());
        assert!(torn, "a part of the record stays");
        disk.room = usize::MAX;
        append_record(&mut disk, &record_line(3), &mut torn).unwrap();
        assert!(!torn);
        let text = String::from_utf8(disk.data).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text:?}");
        assert_eq!(serde_json::from_str::<Value>(lines[0]).unwrap()["n"], 1);
        assert!(
            serde_json::from_str::<Value>(lines[1]).is_err(),
            "the part that stayed is a line of its own"
        );
        assert_eq!(serde_json::from_str::<Value>(lines[2]).unwrap()["n"], 3);
    }

    #[test]
    fn a_log_removed_or_renamed_away_while_running_is_recreated_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        stdin_record(&log, "first");
        std::fs::remove_file(&path).unwrap();
        stdin_record(&log, "after removal");
        let rotated = dir.path().join("audit.jsonl.1");
        std::fs::rename(&path, &rotated).unwrap();
        stdin_record(&log, "after rotation");
        assert_eq!(log.failures(), 0);
        assert_eq!(
            lines(&rotated).iter().map(|l| l["chars"].clone()).collect::<Vec<_>>(),
            [json!("after removal")]
        );
        assert_eq!(
            lines(&path).iter().map(|l| l["chars"].clone()).collect::<Vec<_>>(),
            [json!("after rotation")]
        );
    }

    #[test]
    fn a_log_whose_directory_is_gone_fails_loudly_and_recovers_when_it_is_back() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("logs");
        std::fs::create_dir(&sub).unwrap();
        let path = sub.join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        stdin_record(&log, "first");
        std::fs::remove_dir_all(&sub).unwrap();
        stdin_record(&log, "lost");
        assert_eq!(log.failures(), 1);
        assert!(log.failing.load(Ordering::Relaxed));
        std::fs::create_dir(&sub).unwrap();
        stdin_record(&log, "back");
        assert!(!log.failing.load(Ordering::Relaxed));
        assert_eq!(log.lost_in_a_row.load(Ordering::Relaxed), 0);
        assert_eq!(log.failures(), 1, "the total stays for the exit report");
        assert_eq!(lines(&path).iter().map(|l| l["chars"].clone()).collect::<Vec<_>>(), [json!("back")]);
    }

    #[test]
    fn a_log_made_unwritable_after_opening_is_still_written_through_its_descriptor() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        stdin_record(&log, "still recorded");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(log.failures(), 0);
        assert_eq!(lines(&path)[0]["chars"], "still recorded");
    }
}
