"""langchain-mcp-adapters (PyPI) drives `uexec mcp` the ways its documentation shows.

Modes:
  stateless-stdio  `MultiServerMCPClient(...).get_tools()`, the documented default: every tool call starts a new
                   stdio server, so a session started by one call is unknown to the next; the error says why and
                   how to keep one.
  stateful-stdio   `async with client.session("uexec")`: one server for the block; the session is continued.
  stateless-http   `get_tools()` against `uexec mcp --listen` with the header `Uexec-Workspace`: every call is a
                   new MCP session, and they all share the workspace's sessions. Paired: the same without the
                   header loses the session, as over stdio.

Usage: langchain.py --uexec BIN --mode MODE
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from langchain_core.tools import ToolException
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

from common import TOKEN, Workspace, session_id_of

START = {"cmd": "read line; echo got:$line", "tty": True, "yield_time_ms": 1000}


def text_of(result: Any) -> str:
    """The text of a tool's result, however the adapter shapes it (a string, or content blocks)."""
    if isinstance(result, str):
        return result
    if isinstance(result, tuple):
        return text_of(result[0])
    if isinstance(result, list):
        return "".join(text_of(item) for item in result)
    if isinstance(result, dict):
        return str(result.get("text", result))
    return str(getattr(result, "text", result))


async def call(tools: list[Any], name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """(is_error, text) of one tool call. The adapter hands an `isError` result's text to the model as the
    tool's output (its `handle_tool_error`); uexec's error texts start with `<tool> failed`."""
    tool = next(t for t in tools if t.name == name)
    try:
        text = text_of(await tool.ainvoke(arguments))
    except ToolException as e:
        text = str(e)
    return text.startswith(f"{name} failed"), text


async def start_and_continue(tools: list[Any]) -> tuple[bool, str]:
    """Start `read line` on a terminal, then send it a line: the write's (is_error, text)."""
    error, started = await call(tools, "exec_command", START)
    assert not error, started
    session = session_id_of(started)
    return await call(tools, "write_stdin", {"session_id": session, "chars": "hello\n", "yield_time_ms": 3000})


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uexec", required=True)
    parser.add_argument("--mode", required=True, choices=["stateless-stdio", "stateful-stdio", "stateless-http"])
    args = parser.parse_args()
    ws = Workspace(args.uexec)
    try:
        if args.mode.endswith("stdio"):
            stdio = {"command": args.uexec, "args": ws.stdio_args(), "env": ws.env, "transport": "stdio"}
            client = MultiServerMCPClient({"uexec": stdio})
            if args.mode == "stateless-stdio":
                error, text = await start_and_continue(await client.get_tools())
                print(f"stateless stdio: {text}", file=sys.stderr)
                assert error and "Unknown process id" in text, text
                assert "belong to the MCP connection that started them" in text, text
                assert 'client.session(\\"uexec\\")' in text or 'client.session("uexec")' in text, text
                assert "Uexec-Workspace" in text, text
            else:
                async with client.session("uexec") as session:
                    error, text = await start_and_continue(await load_mcp_tools(session))
                print(f"stateful stdio: {text}", file=sys.stderr)
                assert not error and "got:hello" in text, text
            return 0
        url = ws.listen()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        shared = {"url": url, "transport": "streamable_http", "headers": {**auth, "Uexec-Workspace": "lc-test"}}
        alone = {"url": url, "transport": "streamable_http", "headers": auth}
        client = MultiServerMCPClient({"shared": shared, "alone": alone})
        error, text = await start_and_continue(await client.get_tools(server_name="shared"))
        print(f"stateless http, shared workspace: {text}", file=sys.stderr)
        assert not error and "got:hello" in text, text
        error, text = await start_and_continue(await client.get_tools(server_name="alone"))
        print(f"stateless http, no workspace: {text}", file=sys.stderr)
        assert error and "Unknown process id" in text, text
        return 0
    finally:
        ws.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
