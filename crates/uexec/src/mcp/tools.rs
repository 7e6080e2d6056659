//! The MCP tools: their names, JSON schemas and descriptions (spec A1, so that models trained on the reference
//! interface use them unchanged), argument parsing with precise messages, and the rendering of results.
//!
//! Arguments follow the current Codex `exec_command`/`write_stdin` schema. Every Codex argument is accepted:
//! those uexec can honour have their Codex meaning; `additional_permissions` (and the `sandbox_permissions`
//! value `with_additional_permissions`, which asks for it) cannot be granted per command here, so the command
//! runs under the default sandbox, as the schema tells the model. Arguments no tool knows are ignored, not
//! errors: models send arguments of other Codex versions. A present argument of the wrong type is an error
//! (a tool result with `isError: true`, see the `server` module).

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};
use uexec_domain::{ProtectionReport, SandboxPermissions, SessionId};
use uexec_engine::{ExecCommandRequest, ExecResponse, SessionState, SessionSummary, WriteStdinRequest};

/// `exec_command`.
pub const EXEC_COMMAND: &str = "exec_command";
/// `write_stdin`.
pub const WRITE_STDIN: &str = "write_stdin";
/// `list_sessions`.
pub const LIST_SESSIONS: &str = "list_sessions";
/// `close_session`.
pub const CLOSE_SESSION: &str = "close_session";
/// `read_screen`.
pub const READ_SCREEN: &str = "read_screen";

/// A malformed argument: becomes a tool result with `isError: true`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{tool}: {message}")]
pub struct ArgError {
    /// The tool.
    pub tool: &'static str,
    /// What is wrong, naming the argument.
    pub message: String,
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// Every tool this server offers.
pub fn all_tools() -> Vec<Tool> {
    let exec = Tool::new(
        EXEC_COMMAND,
        "Runs a command in a shell (optionally in a PTY) and returns its output, or a session ID to keep \
         interacting with it through write_stdin if it is still running when the wait ends.",
        schema(json!({
            "type": "object",
            "properties": {
                "cmd": { "type": "string", "description": "Shell command to execute." },
                "workdir": { "type": "string", "description": "Working directory to run the command in; relative paths resolve against the server's working directory, which is the default." },
                "shell": { "type": "string", "description": "Shell binary to launch. Defaults to the user's default shell ($SHELL, else /bin/bash)." },
                "tty": { "type": "boolean", "default": false, "description": "Whether to allocate a TTY (a 24x80 PTY) for the command. Defaults to false (plain pipes, stdin closed); set to true for interactive programs you will talk to with write_stdin." },
                "yield_time_ms": { "type": "number", "default": 10000, "description": "How long to wait (in milliseconds) for output before yielding; clamped to [250, 30000]. A command that exits sooner returns at once." },
                "max_output_tokens": { "type": "number", "default": 10000, "description": "Maximum number of tokens of output to return (4 bytes each). Excess output is truncated from the middle." },
                "login": { "type": "boolean", "default": true, "description": "Whether to run the shell with login semantics (-lc rather than -c). Defaults to true." },
                "sandbox_permissions": { "type": "string", "enum": ["use_default", "require_escalated", "with_additional_permissions"], "default": "use_default", "description": "Sandbox permissions for the command. Set to \"require_escalated\" to ask to run it without sandbox restrictions (a person approves); defaults to \"use_default\". A result line such as `[uexec] network off: example.com` or `[uexec] read-only: /path` says what the sandbox refused; run the command again with \"require_escalated\" and a justification if it needs that access. \"with_additional_permissions\" is accepted but this server cannot grant additional_permissions: the command runs under the default sandbox." },
                "justification": { "type": "string", "description": "Only with sandbox_permissions \"require_escalated\": a one-sentence explanation, shown to the person asked, of why the command must run outside the sandbox." },
                "prefix_rule": { "type": "array", "items": { "type": "string" }, "description": "Only with sandbox_permissions \"require_escalated\": a short command prefix (e.g. [\"git\", \"pull\"] or [\"pytest\"]) the person asked may approve for the rest of the session, so that later commands starting with it run without asking again. It must be a prefix of this command; a bare shell or interpreter is not offered." },
                "additional_permissions": {
                    "type": "object",
                    "description": "Accepted for compatibility; not granted by this server (the command runs under the default sandbox).",
                    "properties": {
                        "network": { "type": "object", "properties": { "enabled": { "type": "boolean" } } },
                        "file_system": { "type": "object", "properties": {
                            "read": { "type": "array", "items": { "type": "string" } },
                            "write": { "type": "array", "items": { "type": "string" } }
                        } }
                    }
                }
            },
            "required": ["cmd"]
        })),
    )
    .with_annotations(ToolAnnotations::with_title("Run a command").destructive(true).open_world(true));

    let write = Tool::new(
        WRITE_STDIN,
        "Writes characters to the stdin of a running exec_command session and returns the output produced since \
         the previous call. Send an empty string to just wait for more output.",
        schema(json!({
            "type": "object",
            "properties": {
                "session_id": { "type": "integer", "description": "Identifier of the running session (from exec_command)." },
                "chars": { "type": "string", "default": "", "description": "Characters to write, verbatim (no newline is added; \\u0003 is Ctrl-C, \\u0004 is Ctrl-D). May be empty to poll for output." },
                "yield_time_ms": { "type": "number", "default": 250, "description": "How long to wait (in milliseconds) for output before yielding; clamped to [250, 30000], or to [5000, 300000] for an empty poll." },
                "max_output_tokens": { "type": "number", "default": 10000, "description": "Maximum number of tokens of output to return (4 bytes each). Excess output is truncated from the middle." }
            },
            "required": ["session_id"]
        })),
    )
    .with_annotations(ToolAnnotations::with_title("Write to a session").destructive(true).open_world(true));

    let list = Tool::new(
        LIST_SESSIONS,
        "Lists the live exec_command sessions: id, command, age, idle time, state, and the full report of what \
         the sandbox enforces, said once for every session it is the same for.",
        schema(json!({ "type": "object", "properties": {} })),
    )
    .with_raw_output_schema(schema(json!({
        "type": "object",
        "properties": { "sessions": { "type": "array", "items": { "type": "object" } } },
        "required": ["sessions"]
    })))
    .with_annotations(ToolAnnotations::with_title("List sessions").read_only(true).open_world(false));

    let close = Tool::new(
        CLOSE_SESSION,
        "Closes a session: kills its whole process tree and returns its remaining output and exit code.",
        schema(json!({
            "type": "object",
            "properties": { "session_id": { "type": "integer", "description": "Identifier of the session to close." } },
            "required": ["session_id"]
        })),
    )
    .with_annotations(ToolAnnotations::with_title("Close a session").destructive(true).open_world(false));

    let screen = Tool::new(
        READ_SCREEN,
        "Returns the rendered screen (24x80 text, as a person would see it) of a tty=true session: useful for \
         full-screen programs such as vim, less or top, whose raw output is escape codes.",
        schema(json!({
            "type": "object",
            "properties": { "session_id": { "type": "integer", "description": "Identifier of a tty=true session." } },
            "required": ["session_id"]
        })),
    )
    .with_annotations(ToolAnnotations::with_title("Read a terminal screen").read_only(true).open_world(false));

    vec![exec, write, list, close, screen]
}

/// Typed access to one tool call's arguments, with messages that name the argument.
struct Args<'a> {
    tool: &'static str,
    map: &'a JsonObject,
}

impl<'a> Args<'a> {
    /// The arguments of `tool`. Names the tool does not know are ignored (see the module doc).
    fn new(tool: &'static str, map: &'a JsonObject) -> Self {
        Args { tool, map }
    }

    fn error(&self, message: String) -> ArgError {
        ArgError { tool: self.tool, message }
    }

    /// The value of `name`, treating JSON `null` as absent.
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    fn string(&self, name: &str) -> Result<Option<String>, ArgError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.error(format!("`{name}` must be a string, got {}", kind(other)))),
        }
    }

    fn required_string(&self, name: &str) -> Result<String, ArgError> {
        self.string(name)?.ok_or_else(|| self.error(format!("missing required argument `{name}` (a string)")))
    }

    fn strings(&self, name: &str) -> Result<Option<Vec<String>>, ArgError> {
        let wrong =
            |got: &Value| self.error(format!("`{name}` must be an array of strings, got {}", kind(got)));
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(wrong(other)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(wrong(other)),
        }
    }

    fn bool(&self, name: &str) -> Result<Option<bool>, ArgError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.error(format!("`{name}` must be a boolean, got {}", kind(other)))),
        }
    }

    /// A non-negative number; fractions are truncated, values beyond `u64` saturate (the engine clamps).
    fn count(&self, name: &str) -> Result<Option<u64>, ArgError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                if let Some(v) = n.as_u64() {
                    return Ok(Some(v));
                }
                match n.as_f64() {
                    Some(f) if f.is_finite() && f >= 0.0 => {
                        // Saturating float-to-int conversion is the documented behaviour of `as`.
                        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                        let v = f as u64;
                        Ok(Some(v))
                    }
                    _ => Err(self.error(format!("`{name}` must be a non-negative number, got {n}"))),
                }
            }
            Some(other) => {
                Err(self.error(format!("`{name}` must be a non-negative number, got {}", kind(other))))
            }
        }
    }

    fn session_id(&self, name: &str) -> Result<SessionId, ArgError> {
        let value = self
            .get(name)
            .ok_or_else(|| self.error(format!("missing required argument `{name}` (an integer)")))?;
        match value {
            Value::Number(n) => {
                n.as_u64().and_then(|v| u32::try_from(v).ok()).map(SessionId).ok_or_else(|| {
                    self.error(format!("`{name}` must be a non-negative integer session id, got {n}"))
                })
            }
            other => Err(self.error(format!("`{name}` must be an integer, got {}", kind(other)))),
        }
    }
}

fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) if s.chars().count() > 40 => "a string".to_owned(),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

fn to_usize(v: Option<u64>) -> Option<usize> {
    v.map(|v| usize::try_from(v).unwrap_or(usize::MAX))
}

/// Parse `exec_command` arguments.
pub fn parse_exec(map: &JsonObject) -> Result<ExecCommandRequest, ArgError> {
    let args = Args::new(EXEC_COMMAND, map);
    let sandbox_permissions = match args.string("sandbox_permissions")?.as_deref() {
        // Additional permissions cannot be granted per command here: the default sandbox applies.
        None | Some("use_default" | "with_additional_permissions") => SandboxPermissions::UseDefault,
        Some("require_escalated") => SandboxPermissions::RequireEscalated,
        Some(other) => {
            return Err(args.error(format!(
                "`sandbox_permissions` must be \"use_default\", \"require_escalated\" or \
                 \"with_additional_permissions\", got {}",
                kind(&Value::String(other.to_owned()))
            )));
        }
    };
    if let Some(extra) = args.get("additional_permissions")
        && !extra.is_object()
    {
        return Err(args.error(format!("`additional_permissions` must be an object, got {}", kind(extra))));
    }
    Ok(ExecCommandRequest {
        cmd: args.required_string("cmd")?,
        workdir: args.string("workdir")?.filter(|w| !w.is_empty()).map(PathBuf::from),
        shell: args.string("shell")?.filter(|s| !s.is_empty()),
        tty: args.bool("tty")?.unwrap_or(false),
        yield_time_ms: args.count("yield_time_ms")?,
        max_output_tokens: to_usize(args.count("max_output_tokens")?),
        login: args.bool("login")?,
        sandbox_permissions,
        justification: args.string("justification")?,
        prefix_rule: args.strings("prefix_rule")?,
        call_id: None,
        max_wait: None,
    })
}

/// Parse `write_stdin` arguments.
pub fn parse_write(map: &JsonObject) -> Result<WriteStdinRequest, ArgError> {
    let args = Args::new(WRITE_STDIN, map);
    Ok(WriteStdinRequest {
        session_id: args.session_id("session_id")?,
        chars: args.string("chars")?.unwrap_or_default(),
        yield_time_ms: args.count("yield_time_ms")?,
        max_output_tokens: to_usize(args.count("max_output_tokens")?),
        max_wait: None,
    })
}

/// Parse the arguments of a tool that takes only `session_id`.
pub fn parse_session_only(tool: &'static str, map: &JsonObject) -> Result<SessionId, ArgError> {
    Args::new(tool, map).session_id("session_id")
}

/// `list_sessions` takes no arguments (any given are ignored).
pub fn parse_no_args(tool: &'static str, map: &JsonObject) -> Result<(), ArgError> {
    let _ = Args::new(tool, map);
    Ok(())
}

/// A successful exec response: the reference text only.
///
/// No `structuredContent` (and so no `outputSchema`, which would make it mandatory): clients such as the Codex
/// CLI hand a model the structured JSON instead of the text when a result has one, and that JSON costs more
/// tokens than the text (escaped newlines and quotes, field names), on every call. The text carries every field,
/// in the reference's layout that models are trained on; the full protection report is in `list_sessions`.
pub fn exec_result(response: &ExecResponse) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(response.to_text())])
}

/// A failed call: the message as text, `isError: true`.
pub fn error_result(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// `list_sessions`' result: the one place with the full protection report, of each session and of what a new
/// command would run under (exec responses carry a one-line note at most).
pub fn sessions_result(sessions: &[SessionSummary], new_commands: &ProtectionReport) -> CallToolResult {
    let items: Vec<Value> = sessions
        .iter()
        .map(|s| {
            let (state, exit_code) = match s.state {
                SessionState::Running => ("running", None),
                SessionState::Exited { exit_code } => ("exited", Some(exit_code)),
            };
            json!({
                "session_id": s.session_id.0,
                "cmd": s.cmd,
                "command": s.command,
                "tty": s.tty,
                "age_seconds": s.age.as_secs_f64(),
                "idle_seconds": s.idle.as_secs_f64(),
                "state": state,
                "exit_code": exit_code,
                "sandbox": s.sandbox,
                // Said once, below, for every session it is the same for: `null` means "as `protections`".
                "protections": (s.protections != *new_commands).then_some(&s.protections),
            })
        })
        .collect();
    let mut text = if sessions.is_empty() {
        "No live sessions.".to_owned()
    } else {
        let mut lines = vec![format!("{} live session(s):", sessions.len())];
        for s in sessions {
            let state = match s.state {
                SessionState::Running => "running".to_owned(),
                SessionState::Exited { exit_code } => format!("exited with code {exit_code}"),
            };
            lines.push(format!(
                "Session {}: {state}, started {:.1} s ago, idle {:.1} s, {}, sandbox {}: {}",
                s.session_id,
                s.age.as_secs_f64(),
                s.idle.as_secs_f64(),
                if s.tty { "tty" } else { "pipes" },
                s.sandbox.as_str(),
                s.cmd
            ));
            if s.protections != *new_commands {
                lines.push(format!("  protections: {}", s.protections.summary_line()));
            }
        }
        lines.join("\n")
    };
    let same = sessions.iter().filter(|s| s.protections == *new_commands).count();
    let which = match (same, sessions.len()) {
        (_, 0) => "New commands run under",
        (same, all) if same == all => "These sessions and new commands run under",
        (0, _) => "New commands run under",
        _ => "New commands (and the sessions without a protections line) run under",
    };
    text.push_str(&format!("\n{which}: {}", new_commands.summary_line()));
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(json!({ "sessions": items, "protections": new_commands }));
    result
}

/// `read_screen`'s result: the screen text only (as for [`exec_result`], a structured copy would double it).
pub fn screen_result(screen: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(screen)])
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn obj(v: Value) -> JsonObject {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn tools_have_the_reference_names_and_required_arguments() {
        let tools = all_tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, vec![EXEC_COMMAND, WRITE_STDIN, LIST_SESSIONS, CLOSE_SESSION, READ_SCREEN]);
        let exec = &tools[0].input_schema;
        assert_eq!(exec["required"], json!(["cmd"]));
        let props = exec["properties"].as_object().unwrap();
        let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            vec![
                "additional_permissions",
                "cmd",
                "justification",
                "login",
                "max_output_tokens",
                "prefix_rule",
                "sandbox_permissions",
                "shell",
                "tty",
                "workdir",
                "yield_time_ms"
            ]
        );
        assert_eq!(props["yield_time_ms"]["default"], 10000);
        assert_eq!(props["tty"]["default"], false);
        assert_eq!(props["login"]["default"], true);
        let write = &tools[1].input_schema;
        assert_eq!(write["required"], json!(["session_id"]));
        assert_eq!(write["properties"]["session_id"]["type"], "integer");
        assert_eq!(write["properties"]["yield_time_ms"]["default"], 250);
    }

    /// What a model reads from a tool result through the Codex CLI: the structured content when the result has
    /// one (serialised JSON), else the text.
    fn model_reads(result: &CallToolResult) -> String {
        match &result.structured_content {
            Some(value) if !value.is_null() => value.to_string(),
            _ => result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect(),
        }
    }

    /// The token estimate (4 bytes a token) of what a model reads, against the reference's text for the same
    /// call, for `echo hi` and a 200-line output, with the report of this machine's real sandbox attached as an
    /// `exec_command` response carries it. Before this rule the server sent a structured copy with the full
    /// report (the `before` figure, rebuilt here as it was): 589 tokens against 27 for `echo hi`, 1962 against
    /// 1250 for 200 lines (`cargo test -p uexec --bin uexec a_model_reads -- --nocapture`).
    #[test]
    fn a_model_reads_no_more_tokens_than_the_reference_text() {
        use uexec_domain::response::ResponseText;
        use uexec_domain::truncate::approx_token_count;

        let report = crate::platform::sandbox().report(&uexec_domain::SandboxPolicy::default());
        let two_hundred: String = (1..=200).map(|i| format!("line {i} of the \"output\"\n")).collect();
        for (name, output) in [("echo hi", "hi\n".to_owned()), ("200 lines", two_hundred)] {
            let response = ExecResponse {
                chunk_id: "0a1b2c".into(),
                wall_time: std::time::Duration::from_millis(12),
                exit_code: Some(0),
                session_id: None,
                original_token_count: approx_token_count(output.len()),
                output: output.clone(),
                waiting_for_input: false,
                says_waiting: false,
                refused: None,
                warning: None,
                protections: None,
            };
            let reference = ResponseText {
                chunk_id: response.chunk_id.clone(),
                wall_time: response.wall_time,
                exit_code: response.exit_code,
                session_id: None,
                original_token_count: Some(response.original_token_count),
                output,
                ..ResponseText::default()
            }
            .render();
            let before = json!({
                "chunk_id": response.chunk_id,
                "wall_time_seconds": response.wall_time.as_secs_f64(),
                "exit_code": response.exit_code,
                "session_id": null,
                "original_token_count": response.original_token_count,
                "output": response.output,
                "waiting_for_input": false,
                "warning": null,
                "protections": report,
            })
            .to_string();
            let after = model_reads(&exec_result(&response));
            let (reference, before, after) = (
                approx_token_count(reference.len()),
                approx_token_count(before.len()),
                approx_token_count(after.len()),
            );
            #[allow(clippy::print_stderr)] // The figures the issue asks for, shown with `--nocapture`.
            {
                eprintln!("{name}: reference text {reference} tokens, before {before}, after {after}");
            }
            assert!(
                after <= reference,
                "{name}: a model reads {after} tokens, the reference text is {reference}"
            );
            assert!(before > reference, "{name}: the baseline must show what was fixed");
            // With the sandbox note an exec_command response may carry, the cost stays one short line.
            let noted = ExecResponse { protections: Some(report.clone()), ..response };
            let noted = approx_token_count(model_reads(&exec_result(&noted)).len());
            assert!(noted <= reference + 30, "{name}: {noted} tokens with the sandbox note");
        }
    }

    #[test]
    fn exec_results_carry_the_text_only_and_list_sessions_the_full_report() {
        for tool in all_tools() {
            assert!(tool.output_schema.is_none() || tool.name == LIST_SESSIONS, "{}", tool.name);
        }
        let report = crate::platform::sandbox().report(&uexec_domain::SandboxPolicy::default());
        let summary = SessionSummary {
            session_id: SessionId(1234),
            command: vec!["bash".into(), "-lc".into(), "sleep 9".into()],
            cmd: "sleep 9".into(),
            tty: false,
            age: std::time::Duration::from_secs(1),
            idle: std::time::Duration::from_secs(1),
            state: SessionState::Running,
            sandbox: report.sandbox,
            protections: report.clone(),
        };
        // The protections are said once, for every session they are the same for.
        let many: Vec<SessionSummary> =
            (0..5).map(|i| SessionSummary { session_id: SessionId(1234 + i), ..summary.clone() }).collect();
        let listed = sessions_result(&many, &report);
        let structured = listed.structured_content.clone().unwrap();
        assert_eq!(structured["sessions"][0]["protections"], Value::Null);
        assert_eq!(structured["protections"], serde_json::to_value(&report).unwrap());
        let text = model_reads(&CallToolResult::success(listed.content.clone()));
        assert_eq!(text.matches(&report.summary_line()).count(), 1, "{text}");
        assert!(text.contains("These sessions and new commands run under: "), "{text}");
        let one = model_reads(&CallToolResult::success(sessions_result(&many[..1], &report).content));
        assert!(text.len() < one.len() + 4 * 200, "each more session costs one line: {text}");
        // A session whose protections differ (it escaped, it was degraded) says its own.
        let mut other = report.clone();
        other.policy = "read-only".into();
        let differs = SessionSummary { protections: other.clone(), ..summary.clone() };
        let listed = sessions_result(&[differs, summary], &report);
        let structured = listed.structured_content.clone().unwrap();
        assert_eq!(structured["sessions"][0]["protections"], serde_json::to_value(&other).unwrap());
        assert_eq!(structured["sessions"][1]["protections"], Value::Null);
        let text = model_reads(&CallToolResult::success(listed.content.clone()));
        assert!(text.contains(&format!("  protections: {}", other.summary_line())), "{text}");
        let empty = model_reads(&CallToolResult::success(sessions_result(&[], &report).content));
        assert_eq!(empty, format!("No live sessions.\nNew commands run under: {}", report.summary_line()));
    }

    #[test]
    fn exec_arguments_parse_with_defaults() {
        let req = parse_exec(&obj(json!({ "cmd": "ls" }))).unwrap();
        assert_eq!(req.cmd, "ls");
        assert!(!req.tty);
        assert_eq!(req.login, None);
        assert_eq!(req.yield_time_ms, None);
        assert_eq!(req.sandbox_permissions, SandboxPermissions::UseDefault);
        let req = parse_exec(&obj(json!({
            "cmd": "bash -i", "tty": true, "yield_time_ms": 1500.7, "max_output_tokens": 50, "login": false,
            "workdir": "sub", "sandbox_permissions": "require_escalated", "justification": "why", "shell": null
        })))
        .unwrap();
        assert!(req.tty);
        assert_eq!(req.yield_time_ms, Some(1500));
        assert_eq!(req.max_output_tokens, Some(50));
        assert_eq!(req.login, Some(false));
        assert_eq!(req.workdir, Some(PathBuf::from("sub")));
        assert_eq!(req.shell, None);
        assert_eq!(req.sandbox_permissions, SandboxPermissions::RequireEscalated);
    }

    #[test]
    fn malformed_arguments_name_the_argument() {
        let cases = [
            (json!({}), "missing required argument `cmd`"),
            (json!({ "cmd": 5 }), "`cmd` must be a string, got number 5"),
            (json!({ "cmd": "x", "tty": "yes" }), "`tty` must be a boolean"),
            (
                json!({ "cmd": "x", "yield_time_ms": -5 }),
                "`yield_time_ms` must be a non-negative number, got -5",
            ),
            (json!({ "cmd": "x", "yield_time_ms": "soon" }), "`yield_time_ms` must be a non-negative number"),
            (json!({ "cmd": "x", "sandbox_permissions": "root" }), "`sandbox_permissions` must be"),
            (
                json!({ "cmd": "x", "prefix_rule": [1] }),
                "`prefix_rule` must be an array of strings, got number 1",
            ),
            (
                json!({ "cmd": "x", "additional_permissions": "all" }),
                "`additional_permissions` must be an object",
            ),
        ];
        for (args, expected) in cases {
            let err = parse_exec(&obj(args.clone())).unwrap_err().to_string();
            assert!(err.starts_with("exec_command: "), "{err}");
            assert!(err.contains(expected), "{args}: {err}");
        }
    }

    #[test]
    fn unknown_arguments_are_ignored_and_codex_arguments_accepted() {
        let req = parse_exec(&obj(json!({
            "cmd": "git pull", "command": "y", "with_additional_permissions": true,
            "sandbox_permissions": "with_additional_permissions", "prefix_rule": ["git", "pull"],
            "additional_permissions": { "file_system": { "write": ["/x"] } }
        })))
        .unwrap();
        assert_eq!(req.sandbox_permissions, SandboxPermissions::UseDefault);
        assert_eq!(req.prefix_rule, Some(vec!["git".to_owned(), "pull".to_owned()]));
        let req = parse_write(&obj(json!({ "session_id": 1000, "extra": 1 }))).unwrap();
        assert_eq!(req.session_id, SessionId(1000));
        assert!(parse_no_args(LIST_SESSIONS, &obj(json!({ "verbose": true }))).is_ok());
    }

    #[test]
    fn huge_yields_saturate_instead_of_failing() {
        let req = parse_exec(&obj(json!({ "cmd": "x", "yield_time_ms": 1e300 }))).unwrap();
        assert_eq!(req.yield_time_ms, Some(u64::MAX));
        let req = parse_write(&obj(json!({ "session_id": 1000, "yield_time_ms": u64::MAX }))).unwrap();
        assert_eq!(req.yield_time_ms, Some(u64::MAX));
    }

    #[test]
    fn write_arguments_parse_and_validate() {
        let req = parse_write(&obj(json!({ "session_id": 1234 }))).unwrap();
        assert_eq!(req.session_id, SessionId(1234));
        assert_eq!(req.chars, "");
        for (args, expected) in [
            (json!({}), "missing required argument `session_id`"),
            (json!({ "session_id": "1234" }), "`session_id` must be an integer, got string \"1234\""),
            (json!({ "session_id": -1 }), "non-negative integer"),
            (json!({ "session_id": 1.5 }), "non-negative integer"),
            (json!({ "session_id": 99_999_999_999u64 }), "non-negative integer"),
            (json!({ "session_id": 1, "chars": 7 }), "`chars` must be a string"),
        ] {
            let err = parse_write(&obj(args.clone())).unwrap_err().to_string();
            assert!(err.contains(expected), "{args}: {err}");
        }
    }
}
