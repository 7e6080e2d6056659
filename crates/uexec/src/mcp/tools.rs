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
use uexec_domain::{SandboxPermissions, SessionId};
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

/// The output schema shared by every tool that returns an exec response.
fn exec_output_schema() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {
            "chunk_id": { "type": "string", "description": "Six lowercase hex digits identifying this chunk of output." },
            "wall_time_seconds": { "type": "number", "description": "Time spent in this call." },
            "exit_code": { "type": ["integer", "null"], "description": "Set when the process exited during this call." },
            "session_id": { "type": ["integer", "null"], "description": "Set while the process is still running; pass it to write_stdin." },
            "original_token_count": { "type": "integer", "description": "Approximate tokens (bytes / 4) of the output before truncation." },
            "output": { "type": "string", "description": "Output since the previous call, truncated to max_output_tokens." },
            "waiting_for_input": { "type": "boolean", "description": "The program in the terminal is blocked reading input." },
            "warning": { "type": ["string", "null"] },
            "protections": { "type": ["object", "null"], "description": "What the sandbox enforces for this command." }
        },
        "required": ["chunk_id", "wall_time_seconds", "exit_code", "session_id", "original_token_count", "output", "waiting_for_input"]
    }))
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
                "sandbox_permissions": { "type": "string", "enum": ["use_default", "require_escalated", "with_additional_permissions"], "default": "use_default", "description": "Sandbox permissions for the command. Set to \"require_escalated\" to ask to run it without sandbox restrictions (a person approves); defaults to \"use_default\". \"with_additional_permissions\" is accepted but this server cannot grant additional_permissions: the command runs under the default sandbox." },
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
    .with_raw_output_schema(exec_output_schema())
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
    .with_raw_output_schema(exec_output_schema())
    .with_annotations(ToolAnnotations::with_title("Write to a session").destructive(true).open_world(true));

    let list = Tool::new(
        LIST_SESSIONS,
        "Lists the live exec_command sessions: id, command, age, idle time, state and sandbox.",
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
    .with_raw_output_schema(exec_output_schema())
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
    .with_raw_output_schema(schema(json!({
        "type": "object",
        "properties": { "session_id": { "type": "integer" }, "screen": { "type": "string" } },
        "required": ["session_id", "screen"]
    })))
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

/// The structured form of an exec response.
pub fn exec_structured(response: &ExecResponse) -> Value {
    json!({
        "chunk_id": response.chunk_id,
        "wall_time_seconds": response.wall_time.as_secs_f64(),
        "exit_code": response.exit_code,
        "session_id": response.session_id.map(|id| id.0),
        "original_token_count": response.original_token_count,
        "output": response.output,
        "waiting_for_input": response.waiting_for_input,
        "warning": response.warning,
        "protections": response.protections,
    })
}

/// A successful exec response: the reference text, plus the structured form.
pub fn exec_result(response: &ExecResponse) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(response.to_text())]);
    result.structured_content = Some(exec_structured(response));
    result
}

/// A failed call: the message as text, `isError: true`.
pub fn error_result(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// `list_sessions`' result.
pub fn sessions_result(sessions: &[SessionSummary]) -> CallToolResult {
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
            })
        })
        .collect();
    let text = if sessions.is_empty() {
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
        }
        lines.join("\n")
    };
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(json!({ "sessions": items }));
    result
}

/// `read_screen`'s result.
pub fn screen_result(session_id: SessionId, screen: String) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(screen.clone())]);
    result.structured_content = Some(json!({ "session_id": session_id.0, "screen": screen }));
    result
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
