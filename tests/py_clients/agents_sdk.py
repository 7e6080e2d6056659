"""The OpenAI Agents SDK (`openai-agents` from PyPI) with its defaults drives `uexec mcp` for a scripted model:
`MCPServerStdio` / `MCPServerStreamableHttp` with the default `client_session_timeout_seconds` (5 s).

A command that takes longer than the client waits (`sleep 6`) must come back in time with its session id (not
"An error occurred while running the tool"), with uexec's note saying why the wait was cut, once; the model's
poll then gets the command's output.

With `--documented`, the configuration README.md gives instead: `client_session_timeout_seconds=30` and
`uexec mcp --client-timeout-secs 30`: nothing is cut and the command's output comes in its first answer.

Usage: agents_sdk.py --uexec BIN --transport stdio|http [--documented]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from agents import Agent, Runner, set_default_openai_api, set_default_openai_client, set_tracing_disabled
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from openai import AsyncOpenAI

from common import TOKEN, ScriptedModel, Workspace, session_id_of

MARKER = "slow-command-finished"


def script(outputs: list[str]):
    if not outputs:
        return ("exec_command", {"cmd": f"sleep 6; echo {MARKER}"})
    last = outputs[-1]
    if MARKER in last or "error" in last.lower() and "session ID" not in last:
        return "done"
    return ("write_stdin", {"session_id": session_id_of(last), "chars": "", "yield_time_ms": 30000})


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uexec", required=True)
    parser.add_argument("--transport", choices=["stdio", "http"], required=True)
    parser.add_argument("--documented", action="store_true")
    args = parser.parse_args()
    extra = ["--client-timeout-secs", "30"] if args.documented else []
    timeout = {"client_session_timeout_seconds": 30} if args.documented else {}
    workspace = Workspace(args.uexec)
    model = ScriptedModel(script)
    try:
        set_tracing_disabled(True)
        set_default_openai_api("responses")
        set_default_openai_client(AsyncOpenAI(base_url=model.base_url, api_key="scripted"), use_for_tracing=False)
        # The defaults a user of the SDK gets: no client_session_timeout_seconds (5 s).
        if args.transport == "stdio":
            server = MCPServerStdio(
                params={"command": args.uexec, "args": workspace.stdio_args(*extra), "env": workspace.env},
                name="uexec",
                **timeout,
            )
        else:
            url = workspace.listen(*extra)
            server = MCPServerStreamableHttp(
                params={"url": url, "headers": {"Authorization": f"Bearer {TOKEN}"}}, name="uexec", **timeout
            )
        started = time.monotonic()
        async with server:
            agent = Agent(name="agent", instructions="Use the tools.", mcp_servers=[server], model="scripted")
            result = await Runner.run(agent, "Run the slow command.", max_turns=8)
        elapsed = time.monotonic() - started
        outputs = model.outputs_seen[-1]
        print(f"agents_sdk over {args.transport}: {len(outputs)} tool results in {elapsed:.1f} s", file=sys.stderr)
        for i, text in enumerate(outputs):
            print(f"--- tool result {i + 1}:\n{text}", file=sys.stderr)
        assert result.final_output == "done", result.final_output
        assert outputs, "the model got no tool result"
        first = outputs[0]
        if args.documented:
            assert len(outputs) == 1 and MARKER in first and "Process exited with code 0" in first, outputs
            assert "[uexec] Waited" not in first, first
            return 0
        assert "An error occurred" not in first, f"the client gave up before uexec answered: {first}"
        assert "Process running with session ID" in first, first
        assert "[uexec] Waited 3.5 s, not 10 s" in first and "gives up after 5 s" in first, first
        assert MARKER in outputs[-1], f"the poll did not get the command's output: {outputs}"
        assert all("An error occurred" not in o for o in outputs), outputs
        # The note is said once per connection.
        assert sum(o.count("[uexec] Waited") for o in outputs) == 1, outputs
        return 0
    finally:
        model.close()
        workspace.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
