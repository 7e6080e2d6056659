//! A minimal agent loop: a scripted "model" drives a Python REPL through `exec_command` and `write_stdin`, the
//! way an agent drives uexec over MCP. Each turn the model reads the last response and picks one action: type
//! the next line when the REPL shows its prompt, poll with empty input while it is busy, stop once it exited.
//!
//! ```sh
//! cargo run -p uexec-examples --example agent_loop
//! ```
//!
//! The REPL runs in the platform's sandbox (`workspace-write`): its write into the workspace succeeds, its write
//! to `/etc` fails. The program exits non-zero if the transcript lacks either, or the REPL does not exit 0.

// An example program: printing is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::VecDeque;
use std::error::Error;
use std::sync::Arc;

use uexec_engine::{Engine, EngineConfig, EngineDeps, ExecCommandRequest, ExecResponse, WriteStdinRequest};
use uexec_ports::{EventSink, ExecEvent};

/// What the model does next.
#[derive(Debug)]
enum Action {
    /// Type this into the session.
    Write(String),
    /// Wait for more output (an empty `write_stdin`).
    Poll,
    /// The session is over.
    Stop,
}

/// The "model": a fixed list of lines, typed one per prompt.
struct ScriptedModel {
    lines: VecDeque<&'static str>,
}

impl ScriptedModel {
    fn next_action(&mut self, last: &ExecResponse) -> Action {
        if last.exit_code.is_some() || last.session_id.is_none() {
            return Action::Stop;
        }
        // uexec says when the terminal's foreground process waits for input; the prompt says it too where the
        // platform cannot tell.
        if last.waiting_for_input || last.output.trim_end().ends_with(">>>") {
            return self.lines.pop_front().map_or(Action::Stop, |line| Action::Write(line.to_owned()));
        }
        Action::Poll
    }
}

/// Events are not needed here.
struct Ignore;

impl EventSink for Ignore {
    fn emit(&self, _event: ExecEvent) {}
}

/// The most turns the loop takes: the script needs six.
const MAX_TURNS: usize = 20;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let workspace = tempfile::tempdir()?;
    let mut config = EngineConfig::new(workspace.path().to_path_buf());
    config.base_env = std::env::vars_os().collect();
    let deps = EngineDeps {
        spawner: uexec_examples::spawner(),
        sandbox: uexec_examples::sandbox(),
        // The default policy (`on-request`) asks only for commands that want to leave the sandbox; this loop
        // never asks, so the approver is never called.
        approver: Arc::new(Refuse),
        events: Arc::new(Ignore),
    };
    let engine = Engine::new(config, deps);
    let mut model = ScriptedModel {
        lines: VecDeque::from([
            "x = 6 * 7\n",
            "print(f'the answer is {x}')\n",
            "print(open('notes.txt', 'w').write('kept in the workspace\\n'), 'bytes written')\n",
            "open('/etc/uexec-agent-loop', 'w')\n",
            "exit()\n",
        ]),
    };

    let start = ExecCommandRequest {
        cmd: "python3 -q -i".to_owned(),
        tty: true,
        login: Some(false),
        yield_time_ms: Some(10_000),
        ..ExecCommandRequest::default()
    };
    println!("> exec_command {:?}", start.cmd);
    let mut last = engine.exec_command(start).await?;
    let mut transcript = last.output.clone();
    print_response(&last);
    let session_id = last.session_id.ok_or("python exited before its first prompt")?;

    for _ in 0..MAX_TURNS {
        let chars = match model.next_action(&last) {
            Action::Stop => break,
            Action::Write(line) => line,
            Action::Poll => String::new(),
        };
        println!("> write_stdin {chars:?}");
        let request = WriteStdinRequest {
            session_id,
            chars,
            yield_time_ms: Some(5_000),
            ..WriteStdinRequest::default()
        };
        last = engine.write_stdin(request).await?;
        transcript.push_str(&last.output);
        print_response(&last);
    }
    engine.shutdown().await;

    let checks = [
        ("the computed answer", transcript.contains("the answer is 42")),
        ("the write in the workspace", workspace.path().join("notes.txt").exists()),
        (
            "the refused write to /etc",
            transcript.contains("PermissionError") || transcript.contains("Read-only file system"),
        ),
        ("exit status 0", last.exit_code == Some(0)),
    ];
    for (what, ok) in checks {
        if !ok {
            return Err(format!("the transcript lacks {what}").into());
        }
    }
    println!("the model finished its script: every check holds");
    Ok(())
}

/// What the model would read.
fn print_response(response: &ExecResponse) {
    println!(
        "  session {:?}, exit {:?}, waiting for input {}:\n{}",
        response.session_id.map(|id| id.0),
        response.exit_code,
        response.waiting_for_input,
        indent(&response.output)
    );
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("    | {line}")).collect::<Vec<_>>().join("\n")
}

/// Refuses every question (none is asked in this loop).
struct Refuse;

#[async_trait::async_trait]
impl uexec_ports::Approver for Refuse {
    async fn request_approval(
        &self,
        _request: uexec_ports::ApprovalRequest,
    ) -> Result<uexec_domain::ReviewDecision, uexec_ports::ApprovalError> {
        Ok(uexec_domain::ReviewDecision::Denied)
    }
}
