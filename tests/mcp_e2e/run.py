#!/usr/bin/env python3
"""End-to-end tests of `uexec mcp` through the official Python MCP SDK (a client we did not write).

Usage:
    python3 tests/mcp_e2e/run.py --uexec target/debug/uexec [--transport stdio|http] [--only NAME ...]

Creates (or reuses) a virtualenv at target/mcp-venv with the `mcp` package from PyPI, then runs
tests/mcp_e2e/test_uexec.py with it. Exits 0 when every test passed, 1 when a test failed, 2 when the
environment could not be set up (no python venv module, PyPI unreachable, ...): never a silent skip.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / "target" / "mcp-venv"
# The SDK major version the tests are written against; bump deliberately.
REQUIREMENT = "mcp>=2.3,<3"
MARKER = VENV / ".uexec-requirement"


def venv_python() -> Path:
    return VENV / "bin" / "python"


def venv_ready() -> bool:
    python = venv_python()
    if not python.exists() or not MARKER.exists() or MARKER.read_text().strip() != REQUIREMENT:
        return False
    probe = subprocess.run([str(python), "-c", "import mcp, mcp.client"], capture_output=True)
    return probe.returncode == 0


def ensure_venv() -> Path:
    VENV.parent.mkdir(parents=True, exist_ok=True)
    lock_path = VENV.parent / "mcp-venv.lock"
    with open(lock_path, "w") as lock:
        # Two runs at once must not both build the venv.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if venv_ready():
            return venv_python()
        print(f"run.py: creating {VENV} with {REQUIREMENT}", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run(
            [str(venv_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", REQUIREMENT],
            check=True,
        )
        MARKER.write_text(REQUIREMENT + "\n")
        if not venv_ready():
            raise RuntimeError(f"{REQUIREMENT} installed but `import mcp` fails in {VENV}")
        return venv_python()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uexec", required=True, help="path to the uexec binary")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="how the SDK reaches uexec")
    parser.add_argument("--only", action="append", default=[], help="run only tests whose name contains this")
    args = parser.parse_args()

    uexec = Path(args.uexec).resolve()
    if not os.access(uexec, os.X_OK):
        print(f"run.py: {uexec} is not an executable file", file=sys.stderr)
        return 2
    try:
        python = ensure_venv()
    except (OSError, subprocess.CalledProcessError, RuntimeError) as e:
        print(f"run.py: cannot set up the Python MCP client in {VENV}: {e}", file=sys.stderr)
        return 2
    command = [str(python), str(Path(__file__).with_name("test_uexec.py")), "--uexec", str(uexec)]
    command += ["--transport", args.transport]
    for name in args.only:
        command += ["--only", name]
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())
