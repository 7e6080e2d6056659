// Claude Code (`claude -p`, from the npm package @anthropic-ai/claude-code) drives `uexec mcp` as an MCP server, with
// a scripted model (lib/scripted_messages.mjs, an Anthropic Messages API server) dictating the tool calls and
// recording the tool results Claude Code sends back, which is what a model reads: a one-shot command, a 200-line
// output and a Python REPL through write_stdin. By default a result may cost the model no more tokens than the same
// result in the Codex CLI's unified-exec text.
//
// Run: UEXEC_BIN=target/debug/uexec node tests/clients/claude.test.mjs (crates/uexec/tests/real_clients.rs does).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { CLIENTS_DIR, parseUnifiedExec, scratchDir, tokens, uexecBin } from './lib/harness.mjs';
import { resultText, startScriptedMessages } from './lib/scripted_messages.mjs';

const CLAUDE = path.join(CLIENTS_DIR, 'node_modules', '@anthropic-ai', 'claude-code', 'bin', 'claude.exe');

/** The fields of a result whatever its form: the Codex text, or the structuredContent JSON. */
function fields(text) {
  const parsed = parseUnifiedExec(text);
  if (parsed) return parsed;
  try {
    const json = JSON.parse(text);
    return { exitCode: json.exit_code ?? null, sessionId: json.session_id ?? null, output: json.output ?? '' };
  } catch {
    assert.fail(`neither unified-exec text nor JSON: ${JSON.stringify(text).slice(0, 300)}`);
  }
}

function sessionIdOf(content) {
  const id = fields(resultText(content)).sessionId;
  if (!Number.isInteger(id)) throw new Error(`no session id in ${JSON.stringify(content).slice(0, 300)}`);
  return id;
}

/** The Codex CLI's text for the same result (the shape of its unified-exec output), as the token reference. */
function codexText({ exitCode, sessionId, output }) {
  return [
    'Chunk ID: 000000',
    'Wall time: 0.0000 seconds',
    ...(exitCode != null ? [`Process exited with code ${exitCode}`] : []),
    ...(sessionId != null ? [`Process running with session ID ${sessionId}`] : []),
    `Original token count: ${tokens(output)}`,
    `Output:\n${output}`,
  ].join('\n');
}

const script = [
  { id: 'toolu_echo', name: 'mcp__uexec__exec_command', input: { cmd: 'echo hi', login: false } },
  { id: 'toolu_seq200', name: 'mcp__uexec__exec_command', input: { cmd: 'seq 1 200', login: false } },
  { id: 'toolu_py_start', name: 'mcp__uexec__exec_command', input: { cmd: 'python3 -i', tty: true, yield_time_ms: 10000, login: false } },
  {
    id: 'toolu_py_eval',
    name: 'mcp__uexec__write_stdin',
    input: (results) => ({ session_id: sessionIdOf(results.get('toolu_py_start')), chars: '1+1\n', yield_time_ms: 10000 }),
  },
  {
    id: 'toolu_py_close',
    name: 'mcp__uexec__close_session',
    input: (results) => ({ session_id: sessionIdOf(results.get('toolu_py_start')) }),
  },
];

let model;
let run;
const figures = {};

before(async () => {
  const scratch = scratchDir('claude');
  const workspace = path.join(scratch, 'workspace');
  const home = path.join(scratch, 'home');
  for (const dir of [workspace, home]) fs.mkdirSync(dir, { recursive: true });
  const mcpConfig = path.join(scratch, 'mcp.json');
  fs.writeFileSync(mcpConfig, JSON.stringify({ mcpServers: { uexec: { command: uexecBin(), args: ['mcp', '--cd', workspace] } } }));
  model = await startScriptedMessages(script);
  const env = {
    ...process.env,
    HOME: home,
    CLAUDE_CONFIG_DIR: path.join(home, '.claude'),
    ANTHROPIC_BASE_URL: model.baseUrl,
    ANTHROPIC_API_KEY: 'sk-scripted-model',
    // MCP tools offered directly rather than found through the tool-search tool; no traffic but to the model.
    ENABLE_TOOL_SEARCH: 'false',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_TELEMETRY: '1',
  };
  delete env.ANTHROPIC_AUTH_TOKEN;
  const args = [
    '-p',
    'Run the scripted commands.',
    '--mcp-config',
    mcpConfig,
    '--strict-mcp-config',
    '--allowedTools',
    'mcp__uexec',
    '--output-format',
    'stream-json',
    '--verbose',
  ];
  run = await new Promise((resolve) => {
    const child = spawn(CLAUDE, args, { cwd: workspace, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
  if (run.code !== 0 || process.env.UEXEC_CLIENTS_VERBOSE) {
    console.log(`claude exited with ${run.code}\n--- stdout\n${run.stdout.slice(-4000)}\n--- stderr\n${run.stderr.slice(-4000)}`);
  }
});

after(async () => {
  await model?.close();
  if (Object.keys(figures).length > 0) console.log(`tokens a model reads through Claude Code: ${JSON.stringify(figures)}`);
});

function result(id) {
  assert.ok(model.results.has(id), `Claude Code sent no result for ${id}; scripted-model errors: ${model.errors.join('; ')}`);
  return resultText(model.results.get(id));
}

test('claude -p completes the scripted turn with uexec connected', () => {
  assert.equal(run.code, 0, run.stderr.slice(-2000));
  assert.match(run.stdout, /"name":"uexec","status":"connected"/);
  assert.deepEqual(model.errors, []);
  for (const step of script) assert.ok(model.results.has(step.id), `no result for ${step.id}`);
});

test('one-shot command and a 200-line output', () => {
  const echo = fields(result('toolu_echo'));
  assert.equal(echo.exitCode, 0);
  assert.equal(echo.output, 'hi\n');
  const seq = fields(result('toolu_seq200'));
  assert.equal(seq.output, `${Array.from({ length: 200 }, (_, i) => i + 1).join('\n')}\n`);
});

test('a Python REPL driven through write_stdin', () => {
  assert.match(fields(result('toolu_py_eval')).output, /(^|\n)2\r?\n/);
  assert.doesNotMatch(result('toolu_py_close'), /unknown|failed/i);
});

test('tokens a model reads: no more than the Codex unified-exec text of the same result', () => {
  const failures = [];
  for (const [id, label] of [
    ['toolu_echo', 'echo hi'],
    ['toolu_seq200', 'seq 1 200'],
  ]) {
    const text = result(id);
    const read = tokens(text);
    const bound = tokens(codexText(fields(text)));
    figures[label] = { uexec: read, codex_text: bound };
    console.log(`${label}: a model reads ${read} tokens through Claude Code, the Codex text would cost ${bound}`);
    if (read > bound) failures.push(`${label}: ${read} tokens > ${bound}: ${JSON.stringify(text).slice(0, 200)}`);
  }
  assert.deepEqual(failures, []);
});
