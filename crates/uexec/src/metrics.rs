//! Prometheus metrics of the HTTP server, fed by the engine's events (the `EventSink` port) and by the server's
//! own admission and lifecycle decisions, rendered in the Prometheus text exposition format (version 0.0.4).
//!
//! Every value is an atomic counter: recording never blocks and never fails (the `EventSink` contract). The
//! engine is not queried: what the engine does is known from what it emits (`Begin`, `End`, `OutputDelta`,
//! `ApprovalRequested`, `ApprovalDecided`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use uexec_domain::ReviewDecision;
use uexec_ports::{ApprovalKind, EventSink, ExecEvent};

/// Upper bounds (seconds) of the spawn latency histogram's buckets.
pub const SPAWN_LATENCY_BUCKETS: [f64; 12] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// The outcomes `uexec_approvals_total` is labelled with, in rendering order.
const APPROVAL_OUTCOMES: [&str; 7] = [
    "approved",
    "approved_for_session",
    "approved_prefix_for_session",
    "denied",
    "abort",
    "error",
    "approved_with_retry",
];

/// The server's metrics, shared by every client.
#[derive(Debug, Default)]
pub struct Metrics {
    clients_open: AtomicI64,
    clients_total: AtomicU64,
    clients_expired: AtomicU64,
    clients_refused: AtomicU64,
    sessions_open: AtomicI64,
    calls_in_flight: AtomicI64,
    sessions_refused: AtomicU64,
    spawns: AtomicU64,
    spawn_latency_buckets: [AtomicU64; SPAWN_LATENCY_BUCKETS.len()],
    spawn_latency_count: AtomicU64,
    spawn_latency_sum_micros: AtomicU64,
    approvals: [AtomicU64; APPROVAL_OUTCOMES.len()],
    sandbox_denials: AtomicU64,
    output_bytes: AtomicU64,
    network_refused: AtomicU64,
    unauthorized: AtomicU64,
    connections_dropped: AtomicU64,
}

impl Metrics {
    /// A new MCP client (an MCP session) was admitted.
    pub fn client_opened(&self) {
        self.clients_open.fetch_add(1, Ordering::Relaxed);
        self.clients_total.fetch_add(1, Ordering::Relaxed);
    }

    /// An MCP client's state was dropped (it closed its MCP session, or it expired, or the server stopped).
    pub fn client_closed(&self) {
        self.clients_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// A disconnected client's grace ran out: its sessions are killed.
    pub fn client_expired(&self) {
        self.clients_expired.fetch_add(1, Ordering::Relaxed);
    }

    /// A tool call started.
    pub fn call_started(&self) {
        self.calls_in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A tool call ended (answered, cancelled or cut off).
    pub fn call_finished(&self) {
        self.calls_in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// A new client was refused because the server holds its maximum number of clients.
    pub fn client_refused(&self) {
        self.clients_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// How many `exec_command` calls were refused so far because the server held its maximum number of sessions.
    pub fn set_sessions_refused(&self, total: u64) {
        self.sessions_refused.store(total, Ordering::Relaxed);
    }

    /// A request without the right bearer token was refused.
    pub fn unauthorized(&self) {
        self.unauthorized.fetch_add(1, Ordering::Relaxed);
    }

    /// How many HTTP connections were closed before they presented the token (to make room, or at their
    /// deadline), so far.
    pub fn set_connections_dropped(&self, total: u64) {
        self.connections_dropped.store(total, Ordering::Relaxed);
    }

    /// How many connections the network proxy has refused so far (to domains the policy does not allow).
    pub fn set_network_refused(&self, total: u64) {
        self.network_refused.store(total, Ordering::Relaxed);
    }

    fn record_spawn_latency(&self, latency: Duration) {
        let seconds = latency.as_secs_f64();
        for (bucket, bound) in self.spawn_latency_buckets.iter().zip(SPAWN_LATENCY_BUCKETS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.spawn_latency_count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.spawn_latency_sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn record_approval(&self, decision: Option<ReviewDecision>) {
        let index = match decision {
            Some(ReviewDecision::Approved) => 0,
            Some(ReviewDecision::ApprovedForSession) => 1,
            Some(ReviewDecision::ApprovedPrefixForSession) => 2,
            Some(ReviewDecision::Denied) => 3,
            Some(ReviewDecision::Abort) => 4,
            None => 5,
            Some(ReviewDecision::ApprovedWithRetry) => 6,
        };
        self.approvals[index].fetch_add(1, Ordering::Relaxed);
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        gauge(&mut out, "uexec_clients_open", "MCP clients (MCP sessions) holding engine state.", {
            self.clients_open.load(Ordering::Relaxed)
        });
        counter(&mut out, "uexec_clients_total", "MCP clients admitted.", load(&self.clients_total));
        counter(
            &mut out,
            "uexec_clients_expired_total",
            "Disconnected MCP clients whose grace ran out (their sessions were killed).",
            load(&self.clients_expired),
        );
        counter(
            &mut out,
            "uexec_clients_refused_total",
            "New MCP clients refused at the client limit.",
            load(&self.clients_refused),
        );
        gauge(&mut out, "uexec_sessions_open", "Live command sessions across every client.", {
            self.sessions_open.load(Ordering::Relaxed)
        });
        gauge(&mut out, "uexec_calls_in_flight", "Tool calls being served.", {
            self.calls_in_flight.load(Ordering::Relaxed)
        });
        counter(
            &mut out,
            "uexec_sessions_refused_total",
            "exec_command calls refused at the total session or memory limit.",
            load(&self.sessions_refused),
        );
        counter(&mut out, "uexec_spawns_total", "Commands spawned.", load(&self.spawns));
        let _ = writeln!(
            out,
            "# HELP uexec_spawn_latency_seconds From the exec_command call (or a person's approval) to the spawned \
             process.\n# TYPE uexec_spawn_latency_seconds histogram"
        );
        for (bucket, bound) in self.spawn_latency_buckets.iter().zip(SPAWN_LATENCY_BUCKETS) {
            let _ = writeln!(out, "uexec_spawn_latency_seconds_bucket{{le=\"{bound}\"}} {}", load(bucket));
        }
        let count = load(&self.spawn_latency_count);
        let _ = writeln!(out, "uexec_spawn_latency_seconds_bucket{{le=\"+Inf\"}} {count}");
        let sum = load(&self.spawn_latency_sum_micros) as f64 / 1e6;
        let _ = writeln!(out, "uexec_spawn_latency_seconds_sum {sum}");
        let _ = writeln!(out, "uexec_spawn_latency_seconds_count {count}");
        let _ = writeln!(
            out,
            "# HELP uexec_approvals_total Questions to a person, by outcome (error: no answer).\n# TYPE \
             uexec_approvals_total counter"
        );
        for (value, outcome) in self.approvals.iter().zip(APPROVAL_OUTCOMES) {
            let _ = writeln!(out, "uexec_approvals_total{{outcome=\"{outcome}\"}} {}", load(value));
        }
        counter(
            &mut out,
            "uexec_sandbox_denials_total",
            "Sandbox denials detected within the early-exit grace (a retry without the sandbox was considered).",
            load(&self.sandbox_denials),
        );
        counter(&mut out, "uexec_output_bytes_total", "Bytes of command output.", load(&self.output_bytes));
        counter(
            &mut out,
            "uexec_network_refused_total",
            "Connections to domains the network policy does not allow.",
            load(&self.network_refused),
        );
        counter(
            &mut out,
            "uexec_http_unauthorized_total",
            "HTTP requests refused for a missing or wrong bearer token.",
            load(&self.unauthorized),
        );
        counter(
            &mut out,
            "uexec_http_connections_dropped_total",
            "HTTP connections closed before presenting the token (to make room for newer ones, or at their deadline).",
            load(&self.connections_dropped),
        );
        out
    }
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: i64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

/// The event sink of one client's engine: feeds the shared [`Metrics`], measures spawn latency, and passes every event on (to the audit log, when there is one).
pub struct ClientEvents {
    metrics: Arc<Metrics>,
    next: Arc<dyn EventSink>,
    /// When each `exec_command` call in flight started (or a person last answered it), by call id.
    started: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for ClientEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientEvents").finish_non_exhaustive()
    }
}

impl ClientEvents {
    /// Events of one client, counted in `metrics` and passed on to `next`.
    pub fn new(metrics: Arc<Metrics>, next: Arc<dyn EventSink>) -> Self {
        ClientEvents { metrics, next, started: Mutex::new(HashMap::new()) }
    }

    /// An `exec_command` call started: the spawn latency is measured from here.
    pub fn exec_started(&self, call_id: &str) {
        self.started().insert(call_id.to_owned(), Instant::now());
    }

    /// An `exec_command` call ended (with or without a spawn).
    pub fn exec_finished(&self, call_id: &str) {
        self.started().remove(call_id);
    }

    fn started(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.started.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl EventSink for ClientEvents {
    fn emit(&self, event: ExecEvent) {
        match &event {
            ExecEvent::Begin { call_id, .. } => {
                self.metrics.sessions_open.fetch_add(1, Ordering::Relaxed);
                self.metrics.spawns.fetch_add(1, Ordering::Relaxed);
                // A retry outside the sandbox is a second spawn of the same call: measured from the first.
                if let Some(at) = self.started().get(call_id).copied() {
                    self.metrics.record_spawn_latency(at.elapsed());
                }
            }
            ExecEvent::End { .. } => {
                self.metrics.sessions_open.fetch_sub(1, Ordering::Relaxed);
            }
            ExecEvent::OutputDelta { chunk, .. } => {
                self.metrics.output_bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
            ExecEvent::ApprovalRequested { request } if request.kind == ApprovalKind::RetryWithoutSandbox => {
                self.metrics.sandbox_denials.fetch_add(1, Ordering::Relaxed);
            }
            ExecEvent::ApprovalDecided { call_id, decision, .. } => {
                self.metrics.record_approval(*decision);
                // The time a person took is not spawn latency.
                if let Some(at) = self.started().get_mut(call_id) {
                    *at = Instant::now();
                }
            }
            _ => {}
        }
        self.next.emit(event);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use uexec_domain::{ProtectionReport, SessionId};
    use uexec_ports::ApprovalRequest;

    use super::*;

    #[derive(Default)]
    struct Collect(Mutex<Vec<ExecEvent>>);

    impl EventSink for Collect {
        fn emit(&self, event: ExecEvent) {
            self.0.lock().unwrap().push(event);
        }
    }

    fn begin(call_id: &str) -> ExecEvent {
        ExecEvent::Begin {
            call_id: call_id.into(),
            session_id: SessionId(1000),
            command: vec!["true".into()],
            argv: vec!["true".into()],
            cwd: "/".into(),
            tty: false,
            protections: ProtectionReport::unsandboxed(
                "danger-full-access",
                uexec_domain::EscapeReason::FullAccessPolicy,
            ),
        }
    }

    fn end(call_id: &str) -> ExecEvent {
        ExecEvent::End {
            call_id: call_id.into(),
            session_id: SessionId(1000),
            exit_code: 0,
            aggregated_output: String::new(),
            duration: Duration::ZERO,
        }
    }

    fn value(text: &str, series: &str) -> String {
        text.lines()
            .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .to_owned()
    }

    #[test]
    fn events_of_every_client_are_counted_and_passed_on() {
        let metrics = Arc::new(Metrics::default());
        let next = Arc::new(Collect::default());
        let a = ClientEvents::new(metrics.clone(), next.clone());
        let b = ClientEvents::new(metrics.clone(), next.clone());
        a.exec_started("c1");
        a.emit(begin("c1"));
        a.exec_finished("c1");
        b.emit(begin("c2"));
        b.emit(ExecEvent::OutputDelta {
            call_id: "c2".into(),
            session_id: SessionId(1000),
            chunk: vec![b'x'; 7],
        });
        assert_eq!(metrics.sessions_open.load(Ordering::Relaxed), 2);
        b.emit(end("c2"));
        assert_eq!(metrics.sessions_open.load(Ordering::Relaxed), 1);
        let text = metrics.render();
        assert_eq!(value(&text, "uexec_spawns_total"), "2");
        assert_eq!(value(&text, "uexec_sessions_open"), "1");
        assert_eq!(value(&text, "uexec_output_bytes_total"), "7");
        // Only the call whose start was seen has a latency.
        assert_eq!(value(&text, "uexec_spawn_latency_seconds_count"), "1");
        assert_eq!(value(&text, "uexec_spawn_latency_seconds_bucket{le=\"+Inf\"}"), "1");
        assert_eq!(next.0.lock().unwrap().len(), 4, "every event reaches the next sink");
    }

    #[test]
    fn approvals_are_counted_by_outcome_and_denials_by_retry_questions() {
        let metrics = Arc::new(Metrics::default());
        let events = ClientEvents::new(metrics.clone(), Arc::new(Collect::default()));
        let request = |kind| ApprovalRequest {
            call_id: "c".into(),
            session_id: SessionId(1000),
            command: uexec_domain::command::ParsedCommand::new(vec!["ls".into()]),
            cwd: "/".into(),
            kind,
            reason: None,
            warnings: Vec::new(),
            denial: None,
            prefix_offer: None,
        };
        events.emit(ExecEvent::ApprovalRequested { request: request(ApprovalKind::Run) });
        events.emit(ExecEvent::ApprovalRequested { request: request(ApprovalKind::RetryWithoutSandbox) });
        for decision in [Some(ReviewDecision::Denied), Some(ReviewDecision::Denied), None] {
            events.emit(ExecEvent::ApprovalDecided { call_id: "c".into(), decision, error: None });
        }
        let text = metrics.render();
        assert_eq!(value(&text, "uexec_sandbox_denials_total"), "1");
        assert_eq!(value(&text, "uexec_approvals_total{outcome=\"denied\"}"), "2");
        assert_eq!(value(&text, "uexec_approvals_total{outcome=\"error\"}"), "1");
        assert_eq!(value(&text, "uexec_approvals_total{outcome=\"approved\"}"), "0");
    }

    #[test]
    fn the_histogram_is_cumulative() {
        let metrics = Metrics::default();
        metrics.record_spawn_latency(Duration::from_millis(3));
        metrics.record_spawn_latency(Duration::from_secs(60));
        let text = metrics.render();
        assert_eq!(value(&text, "uexec_spawn_latency_seconds_bucket{le=\"0.001\"}"), "0");
        assert_eq!(value(&text, "uexec_spawn_latency_seconds_bucket{le=\"0.005\"}"), "1");
        assert_eq!(value(&text, "uexec_spawn_latency_seconds_bucket{le=\"5\"}"), "1");
        assert_eq!(value(&text, "uexec_spawn_latency_seconds_bucket{le=\"+Inf\"}"), "2");
        assert_eq!(value(&text, "uexec_spawn_latency_seconds_count"), "2");
    }
}
