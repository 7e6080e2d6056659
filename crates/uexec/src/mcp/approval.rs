//! The approver behind the MCP server: asks the person at the client through MCP elicitation.
//!
//! One seam, three routes. The engine has one [`Approver`] per client (the engine's approval port); the route
//! to the person travels with the call that asks: the MCP handler runs the engine's `exec_command` future inside
//! [`AskVia::scope`], and a question the engine asks during that future goes exactly where its call's client can
//! be asked (no registry of calls to look the route up in, no lock, and no other call's connection):
//!
//! 1. [`AskVia::Request`]: the client negotiated a version with server-to-client elicitation
//!    ([`super::protocol`]) and declared the capability. The server sends it an `elicitation/create` request and
//!    waits for the answer.
//! 2. [`AskVia::InputRequired`]: the client negotiated a version whose questions ride on the tool result
//!    (2026-07-28 and later) and declared elicitation. The question goes to the tool-call handler, which answers
//!    the `tools/call` with an `InputRequiredResult`; the answer comes back with the client's retry of the call.
//! 3. [`AskVia::Nobody`]: the client cannot be asked. The configured policy decides alone: whatever would need
//!    a person is refused, with a message saying what needed approval and which setting would allow it. A
//!    question asked outside any call's scope (which the engine never does) is refused the same way, with a
//!    message saying so and a warning in the log.
//!
//! The proxy's domain question (allowlist mode) comes to the same approver through the engine
//! (`Engine::network_access`, which asks the port's `request_network_access` and remembers the answer): it
//! belongs to no call, so it goes to the client's own connection, which the approver learns from the first call
//! of its client ([`McpApprover::connect`]). Each client has its own approver (over HTTP, one per MCP session),
//! so a question only ever reaches the client whose command caused it.
//!
//! How long a question may wait has one home, the engine's deadline (`[limits] approval_timeout_ms`, shortened
//! to what the client waits for the call): the engine drops a question it gives up on, which withdraws the
//! client's form and releases the session id. Nothing here keeps a clock of its own.

use std::future::Future;
use std::sync::OnceLock;

use async_trait::async_trait;
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema};
use rmcp::service::{Peer, RequestContext, RoleServer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use uexec_domain::command::ParsedCommand;
use uexec_domain::question::{Question, escape_visible_capped};
use uexec_domain::{ApprovalPolicy, ReviewDecision, SandboxPolicy};
use uexec_ports::{ApprovalError, ApprovalKind, ApprovalRequest, Approver, NetworkAccessRequest};

pub use super::protocol::FormStyle;
use super::protocol::{self, Elicitation};

/// The elicitation answer values.
pub const APPROVE: &str = "approve";
/// See [`APPROVE`].
pub const APPROVE_FOR_SESSION: &str = "approve_for_session";
/// See [`APPROVE`].
pub const DENY: &str = "deny";
/// See [`APPROVE`]: offered only with a prefix (the caller's `prefix_rule`, when it may be offered).
pub const APPROVE_PREFIX_FOR_SESSION: &str = "approve_prefix_for_session";
/// See [`APPROVE`]: offered for a sandboxed run under the policies that retry (`untrusted`, `on-failure`):
/// approve, and rerun it without the sandbox, unasked, if the sandbox records a refusal.
pub const APPROVE_WITH_RETRY: &str = "approve_with_retry";

/// A question waiting for the tool-call handler to forward it (protocol 2026-07-28 and later).
#[derive(Debug)]
pub struct PendingQuestion {
    /// The question.
    pub request: ApprovalRequest,
    /// Where the answer goes.
    pub answer: oneshot::Sender<ReviewDecision>,
}

/// How the client of one call can be asked: the route that travels with the call.
#[derive(Debug, Clone)]
pub enum AskVia {
    /// Send an `elicitation/create` request to this peer (the call's own client), with a form the negotiated
    /// protocol version defines; the token is the call's (cancelled by the client's `notifications/cancelled`):
    /// a cancelled call's question is abandoned and the command does not run.
    Request(Peer<RoleServer>, CancellationToken, FormStyle),
    /// Hand the question to the tool-call handler of this call (`InputRequiredResult`).
    InputRequired(mpsc::Sender<PendingQuestion>),
    /// The client cannot be asked.
    Nobody,
}

tokio::task_local! {
    /// The route of the call whose engine future is running (set by [`AskVia::scope`]).
    static CALL_ROUTE: AskVia;
}

impl AskVia {
    /// How the client of the call `context` belongs to can be asked, by the negotiated protocol version
    /// ([`super::protocol`]) and the capability it declared; `questions` reach the call's handler (the
    /// `InputRequiredResult` route).
    pub fn for_call(
        context: &RequestContext<RoleServer>,
        questions: mpsc::Sender<PendingQuestion>,
    ) -> AskVia {
        let elicitation = context.client_capabilities().and_then(|caps| caps.elicitation).is_some_and(|e| {
            // Declaring `elicitation: {}` means form mode; a client declaring only `url` cannot show our form.
            e.form.is_some() || e.url.is_none()
        });
        if !elicitation {
            return AskVia::Nobody;
        }
        let version = context.protocol_version().map(|v| v.as_str().to_owned()).unwrap_or_default();
        match protocol::behaviour(&version).elicitation {
            Elicitation::None => AskVia::Nobody,
            Elicitation::Request { style, .. } => {
                AskVia::Request(context.peer.clone(), context.ct.clone(), style)
            }
            Elicitation::OnResult => AskVia::InputRequired(questions),
        }
    }

    /// Run `call` (the engine future of one call) with this route: every question it asks goes this way.
    pub async fn scope<F: Future>(self, call: F) -> F::Output {
        CALL_ROUTE.scope(self, call).await
    }

    /// The route of the running call, if any.
    fn current() -> Option<AskVia> {
        CALL_ROUTE.try_with(AskVia::clone).ok()
    }
}

/// The client's own connection, for questions that belong to no call (the proxy's).
#[derive(Debug, Clone)]
struct ClientLine {
    peer: Peer<RoleServer>,
    style: FormStyle,
}

/// The [`Approver`] of one MCP client.
#[derive(Debug)]
pub struct McpApprover {
    policy: ApprovalPolicy,
    sandbox: SandboxPolicy,
    /// Set by the first call of a client that takes `elicitation/create` requests.
    client: OnceLock<ClientLine>,
}

impl McpApprover {
    /// An approver for a client of a server whose approval policy is `policy` and sandbox policy `sandbox`.
    pub fn new(policy: ApprovalPolicy, sandbox: SandboxPolicy) -> Self {
        McpApprover { policy, sandbox, client: OnceLock::new() }
    }

    /// The elicitation that asks about `request`, its choices written in `style`.
    pub fn elicit_params(
        &self,
        request: &ApprovalRequest,
        style: FormStyle,
    ) -> Result<ElicitRequestParams, ApprovalError> {
        elicit_params(request, &self.sandbox, self.policy, style)
    }

    /// Learn the client's own connection from the route of one of its calls (a client that takes
    /// `elicitation/create` requests; its peer is the same for every call of the connection).
    pub fn connect(&self, via: &AskVia) {
        if let AskVia::Request(peer, _, style) = via {
            let _ = self.client.set(ClientLine { peer: peer.clone(), style: *style });
        }
    }

    /// Why nobody can approve `request`, and what would allow it.
    pub fn unavailable_message(&self, request: &ApprovalRequest) -> String {
        let command = display_command(&request.command);
        let cannot_ask =
            "this MCP client cannot ask a person (it did not declare the elicitation capability)";
        match request.kind {
            ApprovalKind::Run => {
                let prefix = suggested_prefix(&request.command);
                let rule = uexec_domain::response::command_excerpt(&format!(
                    "[[rules]] prefix = [{}] decision = \"allow\"",
                    prefix.iter().map(|w| format!("{w:?}")).collect::<Vec<_>>().join(", ")
                ));
                let policy_hint = if self.policy == ApprovalPolicy::Untrusted {
                    " or start uexec with --approval-policy on-request (sandboxed commands then run without asking),"
                } else {
                    ""
                };
                let reason = request
                    .reason
                    .as_deref()
                    .map(|r| r.trim_end_matches("; run it?").trim_end_matches('?'))
                    .unwrap_or("the approval policy or a command rule says ask");
                format!(
                    "`{command}` needs a person's approval ({reason}), and {cannot_ask}. To run it without asking, \
                     add the command rule `{rule}` to the config file,{policy_hint} or use a client that supports \
                     elicitation"
                )
            }
            ApprovalKind::Escalation => format!(
                "running `{command}` outside the sandbox (sandbox_permissions=require_escalated) needs a person's \
                 approval, and {cannot_ask}. Run it inside the sandbox (omit sandbox_permissions), or start uexec with \
                 --sandbox danger-full-access to run every command unsandboxed"
            ),
            // The engine returns the sandboxed output with this as the reason there was no retry.
            ApprovalKind::RetryWithoutSandbox => format!(
                "retrying it without the sandbox needs a person's approval, and {cannot_ask}; to let it do what it \
                 needs inside the sandbox: --writable-root DIR (write access to DIR), --network (network access)"
            ),
        }
    }
}

#[async_trait]
impl Approver for McpApprover {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<ReviewDecision, ApprovalError> {
        let Some(via) = AskVia::current() else {
            tracing::warn!(call = %request.call_id, "a question outside any MCP call: nobody to ask, refused");
            return Err(ApprovalError::Unavailable(format!(
                "{} (the question was asked outside the MCP call that needed it, so nobody could be asked)",
                self.unavailable_message(&request)
            )));
        };
        match via {
            AskVia::Nobody => Err(ApprovalError::Unavailable(self.unavailable_message(&request))),
            AskVia::Request(peer, call_cancelled, style) => {
                let params = self.elicit_params(&request, style)?;
                tokio::select! {
                    result = elicit(&peer, params) => {
                        let result =
                            result.map_err(|e| ApprovalError::Failed(format!("elicitation failed: {e}")))?;
                        decision_from_elicit(&result)
                    }
                    // The caller cancelled the call while the person was being asked: a late answer must not
                    // run the command.
                    () = call_cancelled.cancelled() => Ok(ReviewDecision::Abort),
                }
            }
            AskVia::InputRequired(questions) => {
                let (answer, answered) = oneshot::channel();
                questions
                    .send(PendingQuestion { request, answer })
                    .await
                    .map_err(|_| ApprovalError::Failed("the client abandoned the call".to_owned()))?;
                // The engine's deadline bounds the wait (it drops this future when it passes).
                answered
                    .await
                    .map_err(|_| ApprovalError::Failed("the client abandoned the question".to_owned()))
            }
        }
    }

    /// The domain question of the allowlist mode, which the engine asks for the proxy
    /// (`Engine::network_access`: the engine decides whether to ask and remembers the answer): through the
    /// client's own connection when it takes `elicitation/create` requests ([`McpApprover::connect`]). It
    /// belongs to no call (a proxied connection cannot be tied to one), so it never borrows a call's route. A
    /// client whose questions ride on tool results (2026-07-28 and later), or that cannot be asked, gets no
    /// question: the host is refused, and the tool response notes it.
    async fn request_network_access(
        &self,
        request: NetworkAccessRequest,
    ) -> Result<ReviewDecision, ApprovalError> {
        let Some(line) = self.client.get().cloned() else {
            return Err(ApprovalError::Unavailable(format!(
                "the client cannot be asked whether sandboxed commands may reach {}",
                request.host
            )));
        };
        let params = domain_elicit_params(&request.host, request.port, &request.rules, line.style)?;
        let result = elicit(&line.peer, params)
            .await
            .map_err(|e| ApprovalError::Failed(format!("elicitation failed: {e}")))?;
        decision_from_elicit(&result)
    }
}

/// Ask the client `params` as an `elicitation/create` request, for as long as the engine's deadline lets the
/// question wait (rmcp's own request timeout is off: one deadline decides). When the
/// question is given up before the client answers (the call was cancelled, the engine's deadline passed, the
/// person answered from the page or the terminal first: the future is dropped), the client is told with
/// `notifications/cancelled`, so that it withdraws the form the person would otherwise still see.
async fn elicit(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
) -> Result<ElicitResult, rmcp::ServiceError> {
    use rmcp::model::{ClientResult, ElicitRequest, ServerRequest};
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    let options = rmcp::service::PeerRequestOptions::no_options();
    let handle = peer.send_request_with_option(request, options).await?;
    let mut guard = WithdrawOnDrop { peer: Some(peer.clone()), id: handle.id.clone() };
    let result = handle.await_response().await;
    guard.peer = None;
    match result? {
        ClientResult::ElicitResult(result) => Ok(result),
        _ => Err(rmcp::ServiceError::UnexpectedResponse),
    }
}

/// Sends `notifications/cancelled` for request `id` when dropped while still armed (`peer` set).
struct WithdrawOnDrop {
    peer: Option<Peer<RoleServer>>,
    id: rmcp::model::RequestId,
}

impl Drop for WithdrawOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let param = rmcp::model::CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the question was answered elsewhere or given up".to_owned()),
        );
        runtime.spawn(async move {
            if let Err(error) = peer.notify_cancelled(param).await {
                tracing::debug!(%error, "could not withdraw an elicitation");
            }
        });
    }
}

/// The elicitation asking whether `host` may be reached for the rest of the session. `host` went through
/// `uexec_domain::network::Host::parse` (ASCII letters, digits, `-`, `_`, `.`, or an IP literal) and `rules` is
/// made of parsed patterns: neither can carry a control character or a line break.
pub fn domain_elicit_params(
    host: &str,
    port: u16,
    rules: &str,
    style: FormStyle,
) -> Result<ElicitRequestParams, ApprovalError> {
    let choices = [
        (APPROVE_FOR_SESSION, format!("Allow {host} for this session")),
        (DENY, "Deny (the command gets HTTP 403)".to_owned()),
    ];
    let property =
        decision_property(style, "Allow this host for the rest of the session, or refuse it.", &choices);
    let schema: ElicitationSchema = serde_json::from_value(json!({
        "type": "object",
        "properties": { "decision": property },
        "required": ["decision"]
    }))
    .map_err(|e| ApprovalError::Failed(format!("cannot build the elicitation schema: {e}")))?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!(
            "Allow network access to {host}?\n\nA sandboxed command asked uexec's proxy for {host}:{port}, which \
             is not on the domain allowlist ({rules}). Allowing it lets every sandboxed command of this session \
             reach {host} on any port; to allow it for good, add it to `[network] allow` in the config."
        ),
        requested_schema: schema,
    })
}

/// The choices of the approval form: (value, title). With a prefix to offer, approve every command starting
/// with it for the session, as Codex offers its `prefix_rule`. For a sandboxed run under a policy that retries
/// (`untrusted`, `on-failure`), "approve" is for the sandbox only, and a rerun without the sandbox is its own
/// choice: otherwise the rerun asks again.
fn choices(
    request: &ApprovalRequest,
    sandbox: &SandboxPolicy,
    policy: ApprovalPolicy,
) -> Vec<(&'static str, String)> {
    let retries = request.kind == ApprovalKind::Run
        && !sandbox.is_unrestricted()
        && matches!(policy, ApprovalPolicy::Untrusted | ApprovalPolicy::OnFailure);
    let mut choices = if retries {
        vec![
            (APPROVE, "Approve once, in the sandbox only (a rerun without the sandbox asks again)".to_owned()),
            (
                APPROVE_WITH_RETRY,
                "Approve once, and if the sandbox blocks it, rerun it WITHOUT the sandbox without asking again"
                    .to_owned(),
            ),
            (APPROVE_FOR_SESSION, "Approve for this session, in the sandbox only".to_owned()),
        ]
    } else {
        vec![
            (APPROVE, "Approve once".to_owned()),
            (APPROVE_FOR_SESSION, "Approve for this session".to_owned()),
        ]
    };
    if let Some(prefix) = &request.prefix_offer {
        // Escaped and capped like every command a person reads (`display_command`).
        let prefix = display_words(prefix);
        choices.push((
            APPROVE_PREFIX_FOR_SESSION,
            // What the prefix admits (`uexec_domain::rules::prefix_covers` and `runs_other_code`): this directory and repository
            // only, never a form that runs another program.
            format!(
                "Approve for this session every command starting with `{prefix}` in {} (this directory and \
                 repository only; not forms that run other programs, such as -c, --exec or --config)",
                uexec_domain::question::escape_path(&request.cwd)
            ),
        ));
    }
    choices.push((DENY, "Deny".to_owned()));
    choices
}

/// The `decision` property of the form, written in `style`.
fn decision_schema(
    style: FormStyle,
    request: &ApprovalRequest,
    sandbox: &SandboxPolicy,
    policy: ApprovalPolicy,
) -> Value {
    decision_property(
        style,
        "Approve once, approve this command for the rest of the session, or deny it.",
        &choices(request, sandbox, policy),
    )
}

/// A string `decision` property offering `choices` (value, title), written in `style`.
fn decision_property(style: FormStyle, description: &str, choices: &[(&str, String)]) -> Value {
    let mut property = json!({
        "type": "string",
        "title": "Decision",
        "description": description,
    });
    match style {
        FormStyle::OneOf => {
            property["oneOf"] =
                choices.iter().map(|(value, title)| json!({ "const": value, "title": title })).collect();
        }
        FormStyle::LegacyEnum => {
            property["enum"] = choices.iter().map(|(value, _)| json!(value)).collect();
            property["enumNames"] = choices.iter().map(|(_, title)| json!(title)).collect();
        }
    }
    property
}

/// The elicitation sent to the person.
pub fn elicit_params(
    request: &ApprovalRequest,
    sandbox: &SandboxPolicy,
    policy: ApprovalPolicy,
    style: FormStyle,
) -> Result<ElicitRequestParams, ApprovalError> {
    let schema: ElicitationSchema = serde_json::from_value(json!({
        "type": "object",
        "properties": { "decision": decision_schema(style, request, sandbox, policy) },
        "required": ["decision"]
    }))
    .map_err(|e| ApprovalError::Failed(format!("cannot build the elicitation schema: {e}")))?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question_text(request, sandbox, policy),
        requested_schema: schema,
    })
}

/// The text of the question, rendered by [`uexec_domain::question::render_question`]: what a person reads is
/// what runs (invisible characters escaped, every line of the script numbered, caller text never in column 0,
/// long commands cut in plain view). The headline is this module's fixed text. Under `untrusted` and `on-failure` a command a person approved is run again
/// without the sandbox, without asking, when it looks blocked by the sandbox (spec A6): the question says so.
pub fn question_text(request: &ApprovalRequest, sandbox: &SandboxPolicy, policy: ApprovalPolicy) -> String {
    let headline = uexec_domain::question::headline(request.kind, sandbox, policy, request.denial.as_ref());
    uexec_domain::question::render_question(&Question {
        headline: &headline,
        argv: &request.command,
        cwd: &request.cwd,
        reason: request.reason.as_deref(),
        warnings: &request.warnings,
        evidence: request.denial.as_ref(),
    })
}

/// Map an elicitation answer to a decision: accept with a decision value; decline = denied; cancel = abort.
pub fn decision_from_elicit(result: &ElicitResult) -> Result<ReviewDecision, ApprovalError> {
    match result.action {
        ElicitationAction::Accept => {
            let decision = result.content.as_ref().and_then(|c| c.get("decision")).and_then(Value::as_str);
            match decision {
                Some(APPROVE) => Ok(ReviewDecision::Approved),
                Some(APPROVE_WITH_RETRY) => Ok(ReviewDecision::ApprovedWithRetry),
                Some(APPROVE_FOR_SESSION) => Ok(ReviewDecision::ApprovedForSession),
                Some(APPROVE_PREFIX_FOR_SESSION) => Ok(ReviewDecision::ApprovedPrefixForSession),
                Some(DENY) => Ok(ReviewDecision::Denied),
                Some(other) => Err(ApprovalError::Failed(format!("unknown decision {other:?}"))),
                None => Err(ApprovalError::Failed("the answer has no `decision`".to_owned())),
            }
        }
        ElicitationAction::Decline => Ok(ReviewDecision::Denied),
        ElicitationAction::Cancel => Ok(ReviewDecision::Abort),
        #[allow(unreachable_patterns)]
        _ => Err(ApprovalError::Failed("unsupported elicitation action".to_owned())),
    }
}

/// The command on one line for a refusal message: the script of `[shell, -lc|-c, script]` when the shell is a
/// system shell, else the shell-quoted argv, with invisible characters and line breaks escaped
/// ([`uexec_domain::question::escape_visible`]) and cut after [`DISPLAY_MAX_CHARS`] characters. A caller-chosen
/// `shell` (a program it planted as `/tmp/x/bash`) is shown: the script alone (`ls`) would say nothing about
/// what runs.
pub fn display_command(command: &ParsedCommand) -> String {
    match command.trusted_script() {
        Some(script) => escape_visible_capped(script, DISPLAY_MAX_CHARS),
        None => display_words(command),
    }
}

/// Words (an argv, a prefix) on one line: shell-quoted, escaped and capped like [`display_command`].
pub fn display_words(words: &[String]) -> String {
    let text = uexec_domain::quote::shell_words(words);
    escape_visible_capped(&text, DISPLAY_MAX_CHARS)
}

/// At most this many characters of a command are quoted in a refusal message.
pub const DISPLAY_MAX_CHARS: usize = 400;

/// The prefix a rule would need to allow `command`: its canonical command (a one-command script is its argv).
fn suggested_prefix(command: &ParsedCommand) -> Vec<String> {
    command.canonical()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use uexec_domain::SessionId;

    use super::*;

    fn request(kind: ApprovalKind, script: &str) -> ApprovalRequest {
        ApprovalRequest {
            call_id: "c".into(),
            session_id: SessionId(1000),
            command: ParsedCommand::new(vec!["/bin/bash".into(), "-lc".into(), script.into()]),
            cwd: "/work".into(),
            kind,
            reason: Some("because".into()),
            warnings: Vec::new(),
            prefix_offer: None,
            denial: None,
        }
    }

    #[test]
    fn elicitation_schema_is_accepted_by_rmcp() {
        let params = elicit_params(
            &request(ApprovalKind::Escalation, "git push"),
            &SandboxPolicy::default(),
            ApprovalPolicy::OnRequest,
            FormStyle::OneOf,
        )
        .unwrap();
        let ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } = params else {
            panic!("form expected")
        };
        assert!(message.contains("WITHOUT the sandbox"));
        assert!(message.contains("git push") && message.contains("/work") && message.contains("because"));
        let schema = serde_json::to_value(&requested_schema).unwrap();
        assert_eq!(schema["required"], json!(["decision"]));
        assert_eq!(schema["properties"]["decision"]["oneOf"][1]["const"], APPROVE_FOR_SESSION);
    }

    #[test]
    fn the_2025_06_18_form_uses_enum_and_enum_names() {
        let params = elicit_params(
            &request(ApprovalKind::Run, "make"),
            &SandboxPolicy::default(),
            ApprovalPolicy::Untrusted,
            FormStyle::LegacyEnum,
        )
        .unwrap();
        let value = serde_json::to_value(&params).unwrap();
        let decision = &value["requestedSchema"]["properties"]["decision"];
        assert_eq!(
            decision["enum"],
            json!([APPROVE, APPROVE_WITH_RETRY, APPROVE_FOR_SESSION, DENY]),
            "{value}"
        );
        assert_eq!(decision["enumNames"].as_array().map(Vec::len), Some(4), "{value}");
        assert!(decision.get("oneOf").is_none(), "{value}");
    }

    #[test]
    fn a_prefix_offer_is_a_fourth_choice_in_both_form_styles() {
        let mut asked = request(ApprovalKind::Escalation, "git pull --rebase");
        asked.prefix_offer = Some(vec!["git".into(), "pull".into()]);
        for style in [FormStyle::OneOf, FormStyle::LegacyEnum] {
            let params =
                elicit_params(&asked, &SandboxPolicy::default(), ApprovalPolicy::OnRequest, style).unwrap();
            let value = serde_json::to_value(&params).unwrap();
            let decision = &value["requestedSchema"]["properties"]["decision"];
            let (values, titles): (Vec<Value>, Vec<Value>) = match style {
                FormStyle::OneOf => decision["oneOf"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| (c["const"].clone(), c["title"].clone()))
                    .unzip(),
                FormStyle::LegacyEnum => (
                    decision["enum"].as_array().unwrap().clone(),
                    decision["enumNames"].as_array().unwrap().clone(),
                ),
            };
            assert_eq!(
                values,
                vec![
                    json!(APPROVE),
                    json!(APPROVE_FOR_SESSION),
                    json!(APPROVE_PREFIX_FOR_SESSION),
                    json!(DENY)
                ]
            );
            assert!(titles[2].as_str().unwrap().contains("starting with `git pull`"), "{titles:?}");
        }
        // Without an offer: three choices.
        let plain = elicit_params(
            &request(ApprovalKind::Escalation, "git pull"),
            &SandboxPolicy::default(),
            ApprovalPolicy::OnRequest,
            FormStyle::OneOf,
        )
        .unwrap();
        let value = serde_json::to_value(&plain).unwrap();
        assert_eq!(
            value["requestedSchema"]["properties"]["decision"]["oneOf"].as_array().map(Vec::len),
            Some(3)
        );
        let accept = ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({ "decision": APPROVE_PREFIX_FOR_SESSION }));
        assert_eq!(decision_from_elicit(&accept).unwrap(), ReviewDecision::ApprovedPrefixForSession);
    }

    #[test]
    fn answers_map_to_decisions() {
        let accept =
            |d: &str| ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "decision": d }));
        assert_eq!(decision_from_elicit(&accept(APPROVE)).unwrap(), ReviewDecision::Approved);
        assert_eq!(
            decision_from_elicit(&accept(APPROVE_FOR_SESSION)).unwrap(),
            ReviewDecision::ApprovedForSession
        );
        assert_eq!(decision_from_elicit(&accept(DENY)).unwrap(), ReviewDecision::Denied);
        assert!(decision_from_elicit(&accept("maybe")).is_err());
        assert!(decision_from_elicit(&ElicitResult::new(ElicitationAction::Accept)).is_err());
        assert_eq!(
            decision_from_elicit(&ElicitResult::new(ElicitationAction::Decline)).unwrap(),
            ReviewDecision::Denied
        );
        assert_eq!(
            decision_from_elicit(&ElicitResult::new(ElicitationAction::Cancel)).unwrap(),
            ReviewDecision::Abort
        );
    }

    #[tokio::test]
    async fn without_a_channel_the_refusal_names_what_would_allow_it() {
        let approver = McpApprover::new(ApprovalPolicy::Untrusted, SandboxPolicy::default());
        let ask = |kind, cmd| AskVia::Nobody.scope(approver.request_approval(request(kind, cmd)));
        let err = ask(ApprovalKind::Run, "git push").await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`git push` needs a person's approval"), "{text}");
        assert!(text.contains(r#"prefix = ["git", "push"] decision = "allow""#), "{text}");
        assert!(text.contains("--approval-policy on-request"), "{text}");
        let err = ask(ApprovalKind::Escalation, "make").await.unwrap_err();
        assert!(err.to_string().contains("danger-full-access"), "{err}");
        let err = ask(ApprovalKind::RetryWithoutSandbox, "make").await.unwrap_err();
        assert!(err.to_string().contains("--writable-root"), "{err}");
    }

    /// A question outside any call's scope is refused, and says why: never a silent "nobody can be asked".
    #[tokio::test]
    async fn a_question_outside_a_call_is_refused_and_says_so() {
        let approver = McpApprover::new(ApprovalPolicy::OnRequest, SandboxPolicy::default());
        let err = approver.request_approval(request(ApprovalKind::Escalation, "make")).await.unwrap_err();
        assert!(matches!(err, ApprovalError::Unavailable(_)), "{err}");
        assert!(err.to_string().contains("outside the MCP call that needed it"), "{err}");
    }

    /// The route travels with the call: each call's question reaches that call's handler only, even when two
    /// calls ask at once through the same approver.
    #[tokio::test]
    async fn input_required_questions_reach_their_own_calls_handler_and_answers_come_back() {
        let approver =
            std::sync::Arc::new(McpApprover::new(ApprovalPolicy::OnRequest, SandboxPolicy::default()));
        let (tx_a, mut rx_a) = mpsc::channel(1);
        let (tx_b, mut rx_b) = mpsc::channel(1);
        let call = |tx, cmd: &'static str| {
            let approver = approver.clone();
            tokio::spawn(AskVia::InputRequired(tx).scope(async move {
                approver.request_approval(request(ApprovalKind::Escalation, cmd)).await
            }))
        };
        let asking_a = call(tx_a, "from-a");
        let asking_b = call(tx_b, "from-b");
        let question_b = rx_b.recv().await.unwrap();
        let question_a = rx_a.recv().await.unwrap();
        assert_eq!(question_a.request.command.last().map(String::as_str), Some("from-a"));
        assert_eq!(question_b.request.command.last().map(String::as_str), Some("from-b"));
        assert_eq!(question_a.request.kind, ApprovalKind::Escalation);
        question_a.answer.send(ReviewDecision::ApprovedForSession).unwrap();
        question_b.answer.send(ReviewDecision::Denied).unwrap();
        assert_eq!(asking_a.await.unwrap().unwrap(), ReviewDecision::ApprovedForSession);
        assert_eq!(asking_b.await.unwrap().unwrap(), ReviewDecision::Denied);
    }

    #[test]
    fn commands_display_as_people_write_them() {
        let shown = |words: &[&str]| {
            display_command(&ParsedCommand::new(words.iter().map(|w| (*w).to_owned()).collect()))
        };
        assert_eq!(shown(&["bash", "-lc", "ls | wc"]), "ls | wc");
        assert_eq!(shown(&["echo", "a b", "it's"]), "echo 'a b' 'it'\\''s'");
        assert_eq!(shown(&["/bin/sh", "-c", "ls"]), "ls");
    }

    #[test]
    fn a_caller_chosen_shell_is_shown_with_its_script() {
        // `shell: "/tmp/x/bash"` (planted by an earlier command) with `cmd: "ls"` must not read as `ls`.
        for shell in ["/tmp/x/bash", "./bash", "python3"] {
            let argv = vec![shell.to_owned(), "-lc".to_owned(), "ls".to_owned()];
            let argv = ParsedCommand::new(argv);
            assert_eq!(display_command(&argv), format!("{shell} -lc ls"));
            let mut escalation = request(ApprovalKind::Escalation, "ls");
            escalation.command = argv;
            let text = question_text(&escalation, &SandboxPolicy::default(), ApprovalPolicy::OnRequest);
            assert!(text.contains(&format!("\nShell: {shell} -lc")), "{text}");
            assert!(text.contains("\n  1 | ls\n"), "{text}");
        }
    }

    #[test]
    fn run_questions_offer_approval_in_the_sandbox_only_and_the_rerun_as_its_own_choice() {
        let run = request(ApprovalKind::Run, "make");
        let values = |policy| {
            let params = elicit_params(&run, &SandboxPolicy::default(), policy, FormStyle::OneOf).unwrap();
            let value = serde_json::to_value(&params).unwrap();
            let choices =
                value["requestedSchema"]["properties"]["decision"]["oneOf"].as_array().cloned().unwrap();
            choices
                .iter()
                .map(|c| (c["const"].as_str().unwrap().to_owned(), c["title"].as_str().unwrap().to_owned()))
                .collect::<Vec<_>>()
        };
        for policy in [ApprovalPolicy::Untrusted, ApprovalPolicy::OnFailure] {
            let text = question_text(&run, &SandboxPolicy::default(), policy);
            assert!(text.contains("a rerun WITHOUT the sandbox asks you again, unless you choose"), "{text}");
            let choices = values(policy);
            assert!(
                choices.iter().any(|(v, t)| v == APPROVE && t.contains("in the sandbox only")),
                "{choices:?}"
            );
            assert!(
                choices.iter().any(|(v, t)| v == APPROVE_WITH_RETRY && t.contains("WITHOUT the sandbox"))
            );
        }
        // The twin: a policy that never retries offers no rerun.
        let text = question_text(&run, &SandboxPolicy::default(), ApprovalPolicy::OnRequest);
        assert!(text.contains("inside the workspace-write sandbox") && !text.contains("WITHOUT"), "{text}");
        assert!(!values(ApprovalPolicy::OnRequest).iter().any(|(v, _)| v == APPROVE_WITH_RETRY));
        let answer = ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({ "decision": APPROVE_WITH_RETRY }));
        assert_eq!(decision_from_elicit(&answer).unwrap(), ReviewDecision::ApprovedWithRetry);
    }

    /// A script that imitates the question's fixed lines, with invisible characters and a
    /// payload 60 lines down, reaches the person escaped, numbered and whole; nothing raw reaches the client,
    /// neither in the message nor in the schema.
    #[test]
    fn hostile_scripts_cannot_imitate_the_question() {
        let script = format!(
            "git status\nin\u{200b} /tmp/ws\n\nReason\u{200b}: ...\n{}touch /outside/x\r\u{1b}[2K\u{202e}cba",
            "\n".repeat(60)
        );
        let mut escalation = request(ApprovalKind::Escalation, &script);
        escalation.reason = Some("fine\n\nWorking directory: /safe\u{2028}x".into());
        escalation.cwd = "/tmp/ws\u{2066}".into();
        let params = elicit_params(
            &escalation,
            &SandboxPolicy::default(),
            ApprovalPolicy::OnRequest,
            FormStyle::OneOf,
        )
        .unwrap();
        let ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } = params else {
            panic!("form expected")
        };
        for raw in ['\u{200b}', '\r', '\u{1b}', '\u{202e}', '\u{2028}', '\u{2066}'] {
            assert!(!message.contains(raw), "{raw:?} reached the client: {message:?}");
        }
        assert!(message.contains("Command: multi-line script, 65 lines"), "{message}");
        assert!(message.contains("  65 | touch /outside/x\\u{d}\\u{1b}[2K\\u{202e}cba\n"), "{message}");
        let fixed: Vec<&str> = message.lines().filter(|l| !l.starts_with("  ")).collect();
        assert_eq!(fixed.iter().filter(|l| l.starts_with("Reason")).count(), 1, "{message}");
        assert_eq!(fixed.iter().filter(|l| l.starts_with("Working directory")).count(), 1, "{message}");
        assert!(message.contains("Working directory: /tmp/ws\\u{2066}\n"), "{message}");
        let schema = serde_json::to_string(&requested_schema).unwrap();
        for caller_text in ["git status", "outside", "fine", "/tmp/ws"] {
            assert!(!schema.contains(caller_text), "{schema}");
        }
    }

    #[tokio::test]
    async fn refusals_quote_the_command_escaped_and_capped() {
        let approver = McpApprover::new(ApprovalPolicy::Untrusted, SandboxPolicy::default());
        let script = format!("ls\n\u{202e}rm -rf x{}", "y".repeat(2000));
        let err =
            approver.request_approval(request(ApprovalKind::Run, &script)).await.unwrap_err().to_string();
        assert!(err.contains("ls\\u{a}\\u{202e}rm -rf x"), "{err}");
        assert!(!err.contains('\u{202e}') && !err.contains("ls\n"), "{err}");
        assert!(err.contains("more characters not shown"), "{err}");
    }

    #[test]
    fn a_retry_question_shows_the_denial_escaped_and_says_full_access() {
        let mut retry = request(ApprovalKind::RetryWithoutSandbox, "git status");
        retry.denial = Some(uexec_domain::denial::DenialEvidence {
            exit_code: 1,
            line: Some("fatal: Permission denied\u{1b}[2J\u{202e}".into()),
            refusals: Vec::new(),
        });
        let text = question_text(&retry, &SandboxPolicy::default(), ApprovalPolicy::OnFailure);
        assert!(text.contains("FULL ACCESS (no sandbox)"), "{text}");
        assert!(
            text.contains("exit code 1, output line \"fatal: Permission denied\\u{1b}[2J\\u{202e}\""),
            "{text}"
        );
        assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}'), "{text:?}");
    }
}
