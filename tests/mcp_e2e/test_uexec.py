"""The uexec MCP server driven by the official Python MCP SDK. Run through run.py (it provides the venv).

Each test starts its own `uexec mcp` in a fresh temporary workspace, over stdio or (`--transport http`) as a
Streamable HTTP server on a loopback port with a bearer token (`uexec mcp --listen 127.0.0.1:0`), which the SDK
reaches with its `streamable_http_client`. Over HTTP the server offers protocol versions up to 2025-11-25 (the last
with MCP sessions, which hold a client's command sessions), so `mode="auto"` falls back to the initialize
handshake there. Both protocol generations are
exercised: the SDK's default (`mode="auto"`, which negotiates 2026-07-28 via server/discover, where approvals
travel as InputRequiredResult rounds) and the initialize handshake (`mode="legacy"`, where approvals are
elicitation/create requests from the server).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Awaitable, Callable

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
import mcp.types as types

UEXEC = ""
TRANSPORT = "stdio"
TOKEN = "e2e-" + secrets.token_hex(24)
TESTS: list[Callable[[], Awaitable[None]]] = []
TIMEOUT_S = 90


def test(fn: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    TESTS.append(fn)
    return fn


class Workspace:
    """A temporary workspace under /tmp, and a directory outside every writable root (not under /tmp)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="uexec-e2e-", dir="/tmp"))
        outside_base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path.home()
        self.outside = Path(tempfile.mkdtemp(prefix="uexec-e2e-outside-", dir=outside_base))
        assert not str(self.outside).startswith("/tmp/"), self.outside
        self.server: subprocess.Popen[bytes] | None = None

    def close(self) -> None:
        if self.server is not None:
            # SIGTERM: the server drains, kills every session and exits.
            self.server.terminate()
            try:
                assert self.server.wait(timeout=30) == 0, f"uexec exited with {self.server.returncode}"
            finally:
                if self.server.returncode is None:
                    self.server.kill()
                    self.server.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.outside, ignore_errors=True)

    def params(self, *extra: str) -> Any:
        env = {
            "SHELL": "/bin/bash",
            # The login shell (-lc) reads ~/.bash_profile: keep this machine's profile out of the outputs.
            "HOME": str(self.dir),
            # No user config file, and no $TMPDIR (it would be a writable root).
            "XDG_CONFIG_HOME": str(self.dir / ".no-config"),
        }
        if TRANSPORT == "stdio":
            return StdioServerParameters(command=UEXEC, args=["mcp", *extra], cwd=str(self.dir), env=env)
        return self.http_server(env, *extra)

    def http_server(self, env: dict[str, str], *extra: str) -> Any:
        """Start `uexec mcp --listen` on a free loopback port; the SDK's Streamable HTTP transport to it."""
        token_file = self.outside / "token"
        token_file.write_text(TOKEN + "\n")
        base = {k: os.environ[k] for k in ("PATH", "USER", "LOGNAME", "TERM") if k in os.environ}
        self.server = subprocess.Popen(
            [UEXEC, "mcp", "--listen", "127.0.0.1:0", "--auth-token-file", str(token_file), *extra],
            cwd=str(self.dir),
            env={**base, **env},
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self.server.stderr is not None
        url = None
        for raw in self.server.stderr:
            line = raw.decode(errors="replace")
            match = re.search(r"listening on (http://\S+)", line)
            if match:
                url = match.group(1)
                break
            sys.stderr.write(line)
        assert url is not None, "uexec mcp --listen did not say where it listens"
        stderr = self.server.stderr
        # Keep reading its logs so the server never blocks on a full pipe.
        threading.Thread(target=lambda: [sys.stderr.write(l.decode(errors="replace")) for l in stderr], daemon=True).start()
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        return streamable_http_client(url, http_client=http)


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1, result.content
    block = result.content[0]
    assert isinstance(block, types.TextContent), block
    return block.text


def output_of(text: str) -> str:
    marker = "\nOutput:\n"
    assert marker in text, text
    return text.split(marker, 1)[1]


def header_of(r: types.CallToolResult, prefix: str) -> str | None:
    """The value of a header line of an exec response (exec results carry no structured copy of the text)."""
    head = text_of(r).split("\nOutput:", 1)[0]
    for line in head.split("\n"):
        if line.startswith(prefix):
            return line[len(prefix):]
    return None


def exit_code_of(r: types.CallToolResult) -> int | None:
    value = header_of(r, "Process exited with code ")
    return None if value is None else int(value)


def session_of(r: types.CallToolResult) -> int | None:
    value = header_of(r, "Process running with session ID ")
    return None if value is None else int(value)


async def call(client: Client, name: str, args: dict[str, Any]) -> types.CallToolResult:
    return await client.call_tool(name, args)


async def poll_until(client: Client, session_id: int, predicate: Callable[[str], bool], seconds: float = 30) -> str:
    """Poll a session (empty writes) until the accumulated output satisfies `predicate`."""
    seen = ""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        r = await call(client, "write_stdin", {"session_id": session_id, "chars": "", "yield_time_ms": 5000})
        assert not r.is_error, text_of(r)
        seen += output_of(text_of(r))
        if predicate(seen) or exit_code_of(r) is not None:
            return seen
    return seen


# --------------------------------------------------------------------------------------------------------------


@test
async def tools_are_listed_with_the_reference_schemas() -> None:
    ws = Workspace()
    try:
        async with Client(ws.params()) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"exec_command", "write_stdin", "list_sessions", "close_session"} <= set(tools), tools.keys()
            exec_schema = tools["exec_command"].input_schema
            assert exec_schema["type"] == "object"
            assert exec_schema["required"] == ["cmd"], exec_schema
            props = exec_schema["properties"]
            expected = {
                "cmd": "string",
                "workdir": "string",
                "shell": "string",
                "tty": "boolean",
                "yield_time_ms": "number",
                "max_output_tokens": "number",
                "login": "boolean",
                "sandbox_permissions": "string",
                "justification": "string",
                "prefix_rule": "array",
                "additional_permissions": "object",
            }
            assert {k: v["type"] for k, v in props.items()} == expected, props
            assert props["sandbox_permissions"]["enum"] == ["use_default", "require_escalated", "with_additional_permissions"]
            assert props["yield_time_ms"]["default"] == 10000
            assert props["tty"]["default"] is False and props["login"]["default"] is True
            write_schema = tools["write_stdin"].input_schema
            assert write_schema["required"] == ["session_id"], write_schema
            wprops = write_schema["properties"]
            assert wprops["session_id"]["type"] == "integer"
            assert wprops["chars"]["type"] == "string"
            assert wprops["yield_time_ms"]["type"] == "number" and wprops["yield_time_ms"]["default"] == 250
            assert wprops["max_output_tokens"]["type"] == "number"
            assert tools["close_session"].input_schema["required"] == ["session_id"]
            for name in ("exec_command", "write_stdin"):
                assert tools[name].description, name
                # No outputSchema: a result must then carry no structuredContent, which costs a model more
                # tokens than the text in clients that prefer it (the Codex CLI).
                assert tools[name].output_schema is None, name
    finally:
        ws.close()


@test
async def short_command_returns_exit_code_and_reference_text() -> None:
    ws = Workspace()
    try:
        async with Client(ws.params()) as client:
            r = await call(client, "exec_command", {"cmd": "echo hello; exit 3"})
            assert not r.is_error, text_of(r)
            text = text_of(r)
            lines = text.split("\n")
            assert re.fullmatch(r"Chunk ID: [0-9a-f]{6}", lines[0]), text
            assert re.fullmatch(r"Wall time: \d+\.\d{4} seconds", lines[1]), text
            assert lines[2] == "Process exited with code 3", text
            assert "Process running with session ID" not in text
            assert output_of(text) == "hello\n", text
            assert lines[3] == "Original token count: 2", text
            # Clients such as the Codex CLI give a model the structured content instead of the text: none here.
            assert r.structured_content is None, r.structured_content
    finally:
        ws.close()


@test
async def interactive_bash_keeps_state_across_write_stdin() -> None:
    ws = Workspace()
    try:
        async with Client(ws.params()) as client:
            r = await call(client, "exec_command", {"cmd": "bash -i", "tty": True, "yield_time_ms": 1500})
            assert not r.is_error, text_of(r)
            session = session_of(r)
            assert isinstance(session, int), text_of(r)
            assert f"Process running with session ID {session}" in text_of(r)

            r = await call(
                client,
                "write_stdin",
                {"session_id": session, "chars": "cd /usr && export UEXEC_E2E=forty-two\n", "yield_time_ms": 1000},
            )
            assert not r.is_error, text_of(r)
            r = await call(
                client, "write_stdin", {"session_id": session, "chars": "echo \"$UEXEC_E2E:$(pwd)\"\n", "yield_time_ms": 2000}
            )
            seen = output_of(text_of(r))
            if "forty-two:/usr" not in seen:
                seen += await poll_until(client, session, lambda s: "forty-two:/usr" in s)
            assert "forty-two:/usr" in seen, seen

            listed = await call(client, "list_sessions", {})
            ids = [s["session_id"] for s in listed.structured_content["sessions"]]
            assert session in ids, listed.structured_content

            r = await call(client, "write_stdin", {"session_id": session, "chars": "exit 7\n", "yield_time_ms": 3000})
            exit_code = exit_code_of(r)
            deadline = time.monotonic() + 30
            while exit_code is None and time.monotonic() < deadline:
                r = await call(client, "write_stdin", {"session_id": session, "chars": "", "yield_time_ms": 5000})
                exit_code = exit_code_of(r)
            assert exit_code == 7, text_of(r)
            assert f"Process exited with code 7" in text_of(r)

            r = await call(client, "write_stdin", {"session_id": session, "chars": "echo gone\n"})
            assert r.is_error and text_of(r).startswith(f"write_stdin failed: Unknown process id {session}. "), text_of(r)
    finally:
        ws.close()


@test
async def unknown_session_is_a_tool_error() -> None:
    ws = Workspace()
    try:
        async with Client(ws.params()) as client:
            r = await call(client, "write_stdin", {"session_id": 4242, "chars": "x"})
            assert r.is_error
            assert text_of(r).startswith("write_stdin failed: Unknown process id 4242. "), text_of(r)
            # It says why a session can be unknown to this connection, and how to keep one.
            assert "belong to the MCP connection that started them" in text_of(r), text_of(r)
            assert "Uexec-Workspace" in text_of(r), text_of(r)
            r = await call(client, "close_session", {"session_id": 4242})
            assert r.is_error and "Unknown process id 4242" in text_of(r), text_of(r)
    finally:
        ws.close()


def expected_truncation() -> tuple[str, int]:
    """The spec A2 worked example, computed independently: 999 lines of 36 bytes, budget 50 tokens."""
    lines = [f"EXEC-LINE-{i:04d} {'x' * 20}\n" for i in range(1, 1000)]
    data = "".join(lines)
    assert len(data) == 35964
    budget = 50 * 4
    head, tail = data[: budget // 2], data[len(data) - budget // 2 :]
    removed_tokens = -(-(len(data) - budget) // 4)
    original_tokens = -(-len(data) // 4)
    return f"Total output lines: 999\n\n{head}\u2026{removed_tokens} tokens truncated\u2026{tail}", original_tokens


@test
async def truncation_matches_the_spec_example() -> None:
    ws = Workspace()
    try:
        async with Client(ws.params()) as client:
            cmd = "for i in $(seq 1 999); do printf 'EXEC-LINE-%04d %s\\n' \"$i\" xxxxxxxxxxxxxxxxxxxx; done"
            r = await call(client, "exec_command", {"cmd": cmd, "max_output_tokens": 50})
            assert not r.is_error, text_of(r)
            text = text_of(r)
            expected_output, original_tokens = expected_truncation()
            assert original_tokens == 8991
            assert "Original token count: 8991" in text, text
            assert "\u20268941 tokens truncated\u2026" in text, text
            assert output_of(text) == expected_output, repr(output_of(text))
            assert exit_code_of(r) == 0
    finally:
        ws.close()


@test
async def default_sandbox_refuses_writes_outside_the_workspace() -> None:
    ws = Workspace()
    try:
        async with Client(ws.params()) as client:
            target = ws.outside / "escaped.txt"
            r = await call(client, "exec_command", {"cmd": f"echo secret > {target}"})
            text = text_of(r)
            assert not r.is_error, text
            assert exit_code_of(r) not in (None, 0), text
            out = output_of(text).lower()
            assert "permission denied" in out or "read-only file system" in out, text
            assert not target.exists(), "the sandbox let a write outside the workspace through"

            # A workdir outside the workspace is where the command starts, not a writable root.
            r = await call(client, "exec_command", {"cmd": "echo secret > escaped.txt", "workdir": str(ws.outside)})
            text = text_of(r)
            assert exit_code_of(r) not in (None, 0), text
            assert not target.exists(), "a workdir outside the workspace made it writable"

            r = await call(client, "exec_command", {"cmd": "echo inside > inside.txt && cat inside.txt"})
            assert exit_code_of(r) == 0, text_of(r)
            assert (ws.dir / "inside.txt").read_text() == "inside\n"
            # The full protection report is in list_sessions; a session stays listed while it runs.
            r = await call(client, "exec_command", {"cmd": "sleep 30", "yield_time_ms": 250})
            listed = await call(client, "list_sessions", {})
            # Said once: a session whose protections are those of new commands lists null.
            protections = listed.structured_content["sessions"][0]["protections"] or listed.structured_content["protections"]
            assert protections["policy"] == "workspace-write", protections
            await call(client, "close_session", {"session_id": session_of(r)})
    finally:
        ws.close()


def answering(decisions: list[str], asked: list[str]) -> Callable[..., Awaitable[types.ElicitResult]]:
    async def callback(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        decision = decisions.pop(0)
        if decision == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": decision})

    return callback


async def approval_round(mode: str) -> None:
    ws = Workspace()
    try:
        asked: list[str] = []
        callback = answering(["approve", "deny", "decline"], asked)
        async with Client(ws.params("--approval-policy", "untrusted"), mode=mode, elicitation_callback=callback) as client:
            r = await call(client, "exec_command", {"cmd": "touch approved.txt"})
            assert not r.is_error, text_of(r)
            assert exit_code_of(r) == 0, text_of(r)
            assert (ws.dir / "approved.txt").exists()
            assert len(asked) == 1 and "touch approved.txt" in asked[0], asked

            r = await call(client, "exec_command", {"cmd": "touch denied.txt"})
            assert r.is_error, text_of(r)
            assert text_of(r) == "exec_command failed for `touch denied.txt`: rejected by user", text_of(r)
            assert not (ws.dir / "denied.txt").exists()

            r = await call(client, "exec_command", {"cmd": "touch declined.txt"})
            assert r.is_error and "rejected by user" in text_of(r), text_of(r)
            assert not (ws.dir / "declined.txt").exists()

            # Known-safe commands are not asked about under `untrusted`.
            r = await call(client, "exec_command", {"cmd": "echo safe"})
            assert not r.is_error and output_of(text_of(r)) == "safe\n", text_of(r)
            assert len(asked) == 3, asked
    finally:
        ws.close()


@test
async def approvals_through_input_required_rounds() -> None:
    await approval_round("auto")


@test
async def approvals_through_elicitation_requests() -> None:
    await approval_round("legacy")


@test
async def without_elicitation_the_policy_refuses_and_says_why() -> None:
    ws = Workspace()
    try:
        async with Client(ws.params("--approval-policy", "untrusted")) as client:
            r = await call(client, "exec_command", {"cmd": "touch nope.txt"})
            assert r.is_error, text_of(r)
            text = text_of(r)
            assert text.startswith("exec_command failed for `touch nope.txt`: "), text
            assert "elicitation" in text and "[[rules]]" in text, text
            assert not (ws.dir / "nope.txt").exists()
    finally:
        ws.close()


@test
async def bad_input_is_a_clear_error_and_sessions_survive() -> None:
    ws = Workspace()
    try:
        async with Client(ws.params()) as client:
            r = await call(client, "exec_command", {"cmd": "cat", "tty": True, "yield_time_ms": 500})
            session = session_of(r)
            assert isinstance(session, int), text_of(r)

            async def expect_protocol_error(name: str, args: dict[str, Any], needle: str) -> None:
                try:
                    r = await call(client, name, args)
                except MCPError as e:
                    assert e.code == -32602, (e.code, e.message)
                    assert needle in e.message, e.message
                    return
                raise AssertionError(f"{name}{args} returned {r}")

            async def expect_tool_error(name: str, args: dict[str, Any], needle: str) -> None:
                # SEP-1303: bad arguments are tool results the model can read, not protocol errors.
                r = await call(client, name, args)
                assert r.is_error, (name, args, r)
                assert needle in text_of(r), text_of(r)

            await expect_protocol_error("no_such_tool", {}, "unknown tool")
            await expect_tool_error("write_stdin", {"session_id": "abc"}, "`session_id` must be an integer")
            await expect_tool_error("exec_command", {"cmd": ["ls"]}, "`cmd` must be a string")
            await expect_tool_error("exec_command", {}, "missing required argument `cmd`")
            await expect_tool_error("exec_command", {"cmd": "true", "yield_time_ms": -1}, "yield_time_ms")
            await expect_tool_error("write_stdin", {"session_id": session, "max_output_tokens": -5}, "max_output_tokens")

            huge = "y" * (10 * 1024 * 1024)
            r = await call(client, "write_stdin", {"session_id": session, "chars": huge})
            assert r.is_error and text_of(r).startswith("write_stdin failed: "), text_of(r)[:300]

            # Huge yields are clamped, not refused: an exiting command still returns at once.
            start = time.monotonic()
            r = await call(client, "exec_command", {"cmd": "true", "yield_time_ms": 10**15})
            assert not r.is_error and exit_code_of(r) == 0, text_of(r)
            assert time.monotonic() - start < 20

            r = await call(client, "write_stdin", {"session_id": session, "chars": "still-alive\n", "yield_time_ms": 1000})
            seen = output_of(text_of(r))
            if "still-alive" not in seen:
                seen += await poll_until(client, session, lambda s: "still-alive" in s)
            assert "still-alive" in seen, seen
            r = await call(client, "close_session", {"session_id": session})
            assert not r.is_error, text_of(r)
    finally:
        ws.close()


# --------------------------------------------------------------------------------------------------------------


async def run_one(fn: Callable[[], Awaitable[None]]) -> None:
    await asyncio.wait_for(fn(), timeout=TIMEOUT_S)


def main() -> int:
    global UEXEC, TRANSPORT
    parser = argparse.ArgumentParser()
    parser.add_argument("--uexec", required=True)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args()
    UEXEC = args.uexec
    TRANSPORT = args.transport
    selected = [t for t in TESTS if not args.only or any(o in t.__name__ for o in args.only)]
    if not selected:
        print("test_uexec.py: no test selected", file=sys.stderr)
        return 1
    failures = 0
    for fn in selected:
        start = time.monotonic()
        try:
            asyncio.run(run_one(fn))
        except BaseException as e:  # noqa: BLE001 - report every failure, keep going
            if isinstance(e, KeyboardInterrupt):
                raise
            failures += 1
            print(f"FAIL {fn.__name__} ({time.monotonic() - start:.1f}s)", flush=True)
            traceback.print_exception(e)
        else:
            print(f"ok   {fn.__name__} ({time.monotonic() - start:.1f}s)", flush=True)
    print(f"{len(selected) - failures} passed, {failures} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
