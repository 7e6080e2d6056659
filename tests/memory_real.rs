//! The server's memory stays bounded whatever a session prints: hostile escape streams through a real PTY, the
//! engine's reader, its output buffers and its screen model, measured as this process's peak RSS.
//!
//! One test per binary: the measurement is of the whole process, so nothing else may run in it meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stderr)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use uexec_engine::{EngineConfig, ExecCommandRequest, WriteStdinRequest};
use uexec_ports::{EventSink, ExecEvent};

use tests::unsandboxed_engine;

/// Keeps nothing (the application's sinks write deltas to a client or drop them; a recorder would hold every
/// byte and measure itself).
struct Discard;

impl EventSink for Discard {
    fn emit(&self, _event: ExecEvent) {}
}

/// A field of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|line| line.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Reset this process's peak RSS (`VmHWM`) to its current RSS.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", b"5").unwrap();
}

/// Run `script` in a PTY session, polling as an agent would, until `marker` is on its screen; then answer the
/// script's final `read` and wait for its exit. Returns the exit code.
async fn run_to_marker(engine: &uexec_engine::Engine, script: &str, marker: &str) -> Option<i32> {
    let request = ExecCommandRequest {
        cmd: script.to_owned(),
        tty: true,
        yield_time_ms: Some(2_000),
        ..Default::default()
    };
    let response = engine.exec_command(request).await.unwrap();
    let id = response.session_id.unwrap_or_else(|| panic!("the script waits for input: {response:?}"));
    let start = Instant::now();
    let mut answered = false;
    loop {
        if !answered {
            let screen = engine.screen(id).await.unwrap();
            if screen.contains(marker) {
                answered = true;
            }
        }
        let chars = if answered { "\n" } else { "" }.to_owned();
        let poll = WriteStdinRequest {
            session_id: id,
            chars,
            yield_time_ms: Some(5_000),
            max_output_tokens: None,
            max_wait: None,
        };
        let polled = engine.write_stdin(poll).await.unwrap();
        if polled.exit_code.is_some() {
            assert!(answered, "{script}: exited before {marker} was on the screen");
            return polled.exit_code;
        }
        assert!(start.elapsed() < Duration::from_secs(240), "{script}: {marker} never reached the screen");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_escape_streams_flood_without_growing_the_server() {
    let mut config = EngineConfig::new(std::env::temp_dir());
    config.base_env = std::env::vars_os().collect();
    let engine = unsandboxed_engine(config, Arc::new(Discard));
    // Warm up: the runtime's threads, the allocator's arenas, one session's buffers and screen.
    let warm =
        "head -c 3000000 /dev/zero | tr '\\0' x; printf '\\033]0;t\\007\\033[1mwarm\\033[m\\n'; read -r _";
    assert_eq!(run_to_marker(&engine, warm, "warm").await, Some(0));

    // Each stream opens a sequence and never ends it (or ends it only after megabytes), then prints a marker
    // that must reach the screen. `fill N C` prints N bytes of C.
    const FILL: &str = "fill() { head -c \"$1\" /dev/zero | tr '\\0' \"$2\"; };";
    let streams = [
        ("unterminated OSC title", "printf '\\033]0;'; fill 32M A"),
        ("OSC clipboard", "printf '\\033]52;c;'; fill 8M Q; printf '\\007'"),
        ("DCS", "printf '\\033P1$r'; fill 4M x"),
        ("sixel", "printf '\\033Pq#0;2;0;0;0#0'; fill 4M '~'"),
        ("APC", "printf '\\033_Gf=100;'; fill 4M A"),
        ("PM and SOS", "printf '\\033^'; fill 2M p; printf '\\033X'; fill 2M s"),
        ("CSI digits", "printf '\\033['; fill 4M 9; printf 'm'"),
        ("CSI parameters", "printf '\\033[1'; fill 4M ';'; printf 'm'"),
        (
            "many-parameter SGR",
            "i=0; while [ $i -lt 20000 ]; do printf '\\033[1;2;3;4;5;6;7;8;9;38;5;1;48;5;2;0m'; i=$((i+1)); done",
        ),
    ];
    reset_peak();
    let baseline = status_kib("VmRSS:");
    for (what, stream) in streams {
        // The marker is printed in two parts, so that only the printed text can show it whole.
        let script =
            format!("{FILL} {stream}; printf '\\033\\\\\\030\\r\\nEND-%s\\r\\n' OF-STREAM; read -r _");
        let exit = run_to_marker(&engine, &script, "END-OF-STREAM").await;
        assert_eq!(exit, Some(0), "{what}");
        let growth = status_kib("VmHWM:").saturating_sub(baseline);
        eprintln!("{what}: peak RSS {growth} KiB above the baseline");
        // One session: 1 MiB of pending output, 1 MiB of transcript, a 64 KiB read chunk, the screen (bounded by
        // the escape guard), and the rest of the process's churn. Unguarded, the OSC title alone grows the server
        // by its length (32 MiB here, 200 MiB in the example).
        assert!(growth < 12 * 1024, "{what}: the server's peak RSS grew by {growth} KiB");
    }
    engine.shutdown().await;
}
