#!/usr/bin/env python3
"""Real Python MCP clients from PyPI against `uexec mcp`: the OpenAI Agents SDK and langchain-mcp-adapters.

Usage:
    python3 tests/py_clients/run.py --install-only
    python3 tests/py_clients/run.py --uexec target/debug/uexec SCRIPT [ARGS ...]

Creates (or reuses) a virtualenv at target/py-clients-venv with the pinned packages below, then runs
tests/py_clients/SCRIPT with it. Exits with the script's status, or 2 when the environment could not be set
up (no python venv module, PyPI unreachable, ...): never a silent skip. .ci/run installs the venv once
(`--install-only`); crates/uexec/tests/python_clients.rs runs the scripts.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / "target" / "py-clients-venv"
# The clients, pinned: bump deliberately (the tests drive each one's documented defaults).
REQUIREMENTS = ["openai-agents==0.24.0", "langchain-mcp-adapters==0.3.2", "mcp==1.30.0"]
MARKER = VENV / ".uexec-requirements"


def venv_python() -> Path:
    return VENV / "bin" / "python"


def venv_ready() -> bool:
    python = venv_python()
    wanted = "\n".join(REQUIREMENTS)
    if not python.exists() or not MARKER.exists() or MARKER.read_text().strip() != wanted:
        return False
    probe = subprocess.run([str(python), "-c", "import agents, langchain_mcp_adapters, mcp"], capture_output=True)
    return probe.returncode == 0


def ensure_venv() -> Path:
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / "py-clients-venv.lock", "w") as lock:
        # Two runs at once must not both build the venv.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if venv_ready():
            return venv_python()
        print(f"run.py: creating {VENV} with {' '.join(REQUIREMENTS)}", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run(
            [str(venv_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *REQUIREMENTS],
            check=True,
        )
        MARKER.write_text("\n".join(REQUIREMENTS) + "\n")
        if not venv_ready():
            raise RuntimeError(f"{REQUIREMENTS} installed but the imports fail in {VENV}")
        return venv_python()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--install-only", action="store_true", help="create the venv and exit")
    parser.add_argument("--uexec", help="path to the uexec binary")
    parser.add_argument("script", nargs="?", help="the test script in tests/py_clients")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    try:
        python = ensure_venv()
    except (OSError, subprocess.CalledProcessError, RuntimeError) as e:
        print(f"run.py: cannot set up the Python clients in {VENV}: {e}", file=sys.stderr)
        return 2
    if args.install_only:
        return 0
    if not args.uexec or not args.script:
        parser.error("--uexec and SCRIPT are required unless --install-only")
    uexec = Path(args.uexec).resolve()
    if not os.access(uexec, os.X_OK):
        print(f"run.py: {uexec} is not an executable file", file=sys.stderr)
        return 2
    script = Path(__file__).with_name(args.script)
    return subprocess.run([str(python), str(script), "--uexec", str(uexec), *args.args]).returncode


if __name__ == "__main__":
    sys.exit(main())
