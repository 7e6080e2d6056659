"""What the client tests share: a temporary workspace, `uexec mcp` over stdio or Streamable HTTP, and a
scripted Responses API server standing in for the model (no model API is reached)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

TOKEN = "py-clients-" + secrets.token_hex(24)


class Workspace:
    """A temporary workspace under /tmp, a directory outside every writable root, and the server's environment."""

    def __init__(self, uexec: str) -> None:
        self.uexec = uexec
        self.dir = Path(tempfile.mkdtemp(prefix="uexec-pyc-", dir="/tmp"))
        outside_base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path.home()
        self.outside = Path(tempfile.mkdtemp(prefix="uexec-pyc-outside-", dir=outside_base))
        self.server: subprocess.Popen[bytes] | None = None
        base = {k: os.environ[k] for k in ("PATH", "USER", "LOGNAME", "TERM") if k in os.environ}
        self.env = {
            **base,
            "SHELL": "/bin/bash",
            # The login shell reads ~/.bash_profile: keep this machine's profile out of the outputs.
            "HOME": str(self.dir),
            # No user config file, and no $TMPDIR (it would be a writable root).
            "XDG_CONFIG_HOME": str(self.dir / ".no-config"),
        }

    def stdio_args(self, *extra: str) -> list[str]:
        return ["mcp", "--cd", str(self.dir), *extra]

    def listen(self, *extra: str) -> str:
        """Start `uexec mcp --listen` on a free loopback port with a bearer token; its MCP URL."""
        token_file = self.outside / "token"
        token_file.write_text(TOKEN + "\n")
        self.server = subprocess.Popen(
            [self.uexec, "mcp", "--listen", "127.0.0.1:0", "--auth-token-file", str(token_file), *extra],
            cwd=str(self.dir),
            env=self.env,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self.server.stderr is not None
        for raw in self.server.stderr:
            line = raw.decode(errors="replace")
            match = re.search(r"listening on (http://\S+)", line)
            if match:
                stderr = self.server.stderr
                # Keep reading its logs so the server never blocks on a full pipe.
                threading.Thread(target=lambda: [sys.stderr.write(l.decode(errors="replace")) for l in stderr], daemon=True).start()
                return match.group(1)
            sys.stderr.write(line)
        raise AssertionError("uexec mcp --listen did not say where it listens")

    def close(self) -> None:
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(timeout=30)
            finally:
                if self.server.returncode is None:
                    self.server.kill()
                    self.server.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.outside, ignore_errors=True)


def session_id_of(text: str) -> int:
    match = re.search(r"Process running with session ID (\d+)", text)
    assert match, f"no session id in: {text}"
    return int(match.group(1))


class ScriptedModel:
    """A Responses API server (`POST /v1/responses`, not streamed) whose next answer `script` decides from the
    function-call outputs it has been sent so far: `script(outputs)` returns a tool call `(name, arguments)` or
    a final text (a str)."""

    def __init__(self, script: Callable[[list[str]], Any]) -> None:
        self.script = script
        self.outputs_seen: list[list[str]] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                outputs = [
                    item["output"] if isinstance(item.get("output"), str) else json.dumps(item.get("output"))
                    for item in body.get("input", [])
                    if isinstance(item, dict) and item.get("type") == "function_call_output"
                ]
                model.outputs_seen.append(outputs)
                step = model.script(outputs)
                n = len(model.outputs_seen)
                if isinstance(step, str):
                    item = {
                        "type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": step, "annotations": []}],
                    }
                else:
                    name, arguments = step
                    item = {
                        "type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name,
                        "arguments": json.dumps(arguments), "status": "completed",
                    }
                answer = json.dumps({
                    "id": f"resp_{n}", "object": "response", "created_at": int(time.time()), "status": "completed",
                    "model": body.get("model", "scripted"), "output": [item], "parallel_tool_calls": False,
                    "tool_choice": "auto", "tools": [], "temperature": 1.0, "top_p": 1.0,
                    "usage": {
                        "input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0},
                    },
                }).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
