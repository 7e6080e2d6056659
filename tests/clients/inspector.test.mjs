// The MCP Inspector CLI (`mcp-inspector --cli`, from the npm package @modelcontextprotocol/inspector) drives
// `uexec mcp`: tools/list with its schema portability check (--strict), and tools/call of every tool. Each CLI call
// starts its own server, so calls that name a session test the error a model reads for an unknown one.
//
// Run: UEXEC_BIN=target/debug/uexec node tests/clients/inspector.test.mjs (crates/uexec/tests/real_clients.rs does).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { CLIENTS_DIR, parseUnifiedExec, scratchDir, uexecBin } from './lib/harness.mjs';

const INSPECTOR = path.join(CLIENTS_DIR, 'node_modules', '@modelcontextprotocol', 'inspector', 'clients', 'launcher', 'build', 'index.js');
// The CLI's exit codes: 0 success, 5 a tool result with isError.
const EXIT_TOOL_ERROR = 5;

const workspace = path.join(scratchDir('inspector'), 'workspace');
fs.mkdirSync(workspace);

function inspector(args) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [INSPECTOR, '--cli', ...args, '--', uexecBin(), 'mcp', '--cd', workspace], {
      cwd: workspace,
      env: { ...process.env, MCP_CATALOG_PATH: path.join(workspace, '..', 'catalog.json') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Calls one tool; returns the CLI's exit code and the tool result it printed. */
async function callTool(name, toolArgs = []) {
  const args = ['--method', 'tools/call', '--tool-name', name];
  if (toolArgs.length) args.push('--tool-arg', ...toolArgs);
  const run = await inspector(args);
  let result = null;
  try {
    result = JSON.parse(run.stdout);
  } catch {
    // Left null: the assertion below names what was printed.
  }
  assert.ok(result?.content, `${name}: no tool result (exit ${run.code}): ${run.stdout}${run.stderr}`);
  return { code: run.code, result, text: result.content.map((c) => c.text ?? '').join('\n') };
}

test('tools/list: five tools, and no schema portability error (--strict)', async () => {
  const run = await inspector(['--method', 'tools/list', '--strict']);
  assert.equal(run.code, 0, `mcp-inspector --strict failed (${run.code}): ${run.stderr}`);
  const { tools } = JSON.parse(run.stdout);
  assert.deepEqual(tools.map((t) => t.name).sort(), ['close_session', 'exec_command', 'list_sessions', 'read_screen', 'write_stdin']);
  for (const tool of tools) {
    assert.equal(tool.inputSchema.type, 'object', tool.name);
    assert.ok(tool.annotations?.title, `${tool.name}: no annotations`);
  }
});

test('tools/call exec_command', async () => {
  const { code, result, text } = await callTool('exec_command', ['cmd=echo hi from the inspector', 'login=false']);
  assert.equal(code, 0);
  assert.notEqual(result.isError, true);
  assert.match(text, /Process exited with code 0\n/);
  assert.match(text, /\nhi from the inspector\n$/);
});

test('tools/call exec_command answers in the Codex unified-exec format', async () => {
  const { text } = await callTool('exec_command', ['cmd=echo hi', 'login=false']);
  const parsed = parseUnifiedExec(text);
  assert.ok(parsed, `not readable by the Codex CLI's parser: ${JSON.stringify(text)}`);
  assert.equal(parsed.output, 'hi\n');
});

test('tools/call list_sessions', async () => {
  const { code, result } = await callTool('list_sessions');
  assert.equal(code, 0);
  assert.notEqual(result.isError, true);
});

for (const name of ['write_stdin', 'close_session', 'read_screen']) {
  test(`tools/call ${name} on an unknown session: a tool error naming it`, async () => {
    const { code, result, text } = await callTool(name, ['session_id=424242']);
    assert.equal(code, EXIT_TOOL_ERROR);
    assert.equal(result.isError, true);
    assert.match(text, /424242/);
  });
}

test('tools/call exec_command without cmd: a tool error the model can read, not a protocol error', async () => {
  const run = await inspector(['--method', 'tools/call', '--tool-name', 'exec_command']);
  assert.equal(run.code, EXIT_TOOL_ERROR, `exit ${run.code}: ${run.stdout}${run.stderr}`);
  const result = JSON.parse(run.stdout);
  assert.equal(result.isError, true);
  assert.match(result.content[0].text, /cmd/);
});
