// The official TypeScript MCP SDK client (@modelcontextprotocol/sdk: Client + StdioClientTransport) drives
// `uexec mcp`: every tool, the schemas of inputs and outputs (the SDK validates each structuredContent against the
// tool's outputSchema in callTool; every inputSchema must compile with ajv), cancellation followed by a call on the
// same session, a call that times out, and a poll longer than the client's request timeout kept alive by progress
// notifications.
//
// With UEXEC_TRANSPORT=http the same tests run over Streamable HTTP: each connection starts its own
// `uexec mcp --listen 127.0.0.1:0` with a bearer token and reaches it with StreamableHTTPClientTransport.
//
// Run: UEXEC_BIN=target/debug/uexec node tests/clients/sdk.test.mjs (crates/uexec/tests/real_clients.rs does).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import Ajv from 'ajv';

import { parseUnifiedExec, scratchDir, since, uexecBin } from './lib/harness.mjs';

// "Served at once" for a call that must not wait on a cancelled one: the issue asks for 100 ms; a loaded 2-core
// machine gets generous slack, far below the 20 s the cancelled poll would hold the session.
const PROMPT_MS = 5_000;

const HTTP = process.env.UEXEC_TRANSPORT === 'http';

/** Starts `uexec mcp --listen 127.0.0.1:0` with a token; resolves to its URL, its token and a stop function. */
async function startHttpServer(scratch, workspace, extraArgs = []) {
  const token = randomBytes(24).toString('hex');
  const tokenFile = path.join(scratch, 'token');
  fs.writeFileSync(tokenFile, `${token}\n`);
  const server = spawn(uexecBin(), ['mcp', '--cd', workspace, '--listen', '127.0.0.1:0', '--auth-token-file', tokenFile, ...extraArgs], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve({ code, signal })));
  const lines = readline.createInterface({ input: server.stderr });
  const url = await new Promise((resolve, reject) => {
    lines.on('line', (line) => {
      const m = /listening on (http:\/\/\S+)/.exec(line);
      if (m) resolve(m[1]);
      else process.stderr.write(`${line}\n`);
    });
    server.once('exit', (code) => reject(new Error(`uexec mcp --listen exited (${code}) before listening`)));
  });
  const stop = async () => {
    server.kill('SIGTERM');
    const { code, signal } = await exited;
    assert.equal(code, 0, `uexec mcp --listen exited with ${code} (${signal}) on SIGTERM`);
  };
  return { url, token, stop };
}

async function connect(extraArgs = []) {
  const scratch = scratchDir('sdk');
  const workspace = path.join(scratch, 'workspace');
  fs.mkdirSync(workspace);
  let transport;
  let stopServer = async () => {};
  if (HTTP) {
    const server = await startHttpServer(scratch, workspace, extraArgs);
    stopServer = server.stop;
    transport = new StreamableHTTPClientTransport(new URL(server.url), {
      requestInit: { headers: { Authorization: `Bearer ${server.token}` } },
    });
  } else {
    transport = new StdioClientTransport({
      command: uexecBin(),
      args: ['mcp', '--cd', workspace, ...extraArgs],
      stderr: 'pipe',
    });
  }
  const client = new Client({ name: 'uexec-real-clients', version: '0.0.0' });
  await client.connect(transport);
  // callTool validates structuredContent against the outputSchema of tools/list: list first so that it knows them.
  const { tools } = await client.listTools();
  // And every call's arguments are checked here against the tool's own inputSchema, as a validating client would.
  const ajv = new Ajv({ strict: true, allErrors: true });
  inputValidators.set(client, new Map(tools.map((tool) => [tool.name, ajv.compile(tool.inputSchema)])));
  const close = async () => {
    if (HTTP) await transport.terminateSession();
    await client.close();
    await stopServer();
  };
  return { client, tools, workspace, close };
}

const inputValidators = new WeakMap();

/** Fails when `args` do not validate against the inputSchema the server declared for `name`. */
function assertValidInput(client, name, args) {
  const validate = inputValidators.get(client)?.get(name);
  assert.ok(validate, `no inputSchema for ${name}`);
  assert.ok(validate(args), `${name} ${JSON.stringify(args)} rejected by its own inputSchema: ${JSON.stringify(validate.errors)}`);
}

async function withClient(fn, extraArgs = []) {
  const session = await connect(extraArgs);
  try {
    await fn(session);
  } finally {
    await session.close();
  }
}

function text(result) {
  return result.content.filter((block) => block.type === 'text').map((block) => block.text).join('\n');
}

/** Calls a tool with arguments its inputSchema accepts, and fails on an error result, with its text. */
async function call(client, name, args, options) {
  assertValidInput(client, name, args);
  const result = await client.callTool({ name, arguments: args }, undefined, options);
  assert.ok(!result.isError, `${name} ${JSON.stringify(args)} failed: ${text(result)}`);
  return result;
}

function sessionIdOf(result) {
  const id = result.structuredContent?.session_id ?? parseUnifiedExec(text(result))?.sessionId;
  assert.ok(Number.isInteger(id), `no session id in ${JSON.stringify(result).slice(0, 400)}`);
  return id;
}

test('tools/list: every tool, every input and output schema compiles with ajv', async () => {
  await withClient(async ({ tools }) => {
    assert.deepEqual(tools.map((t) => t.name).sort(), ['close_session', 'exec_command', 'list_sessions', 'read_screen', 'write_stdin']);
    const ajv = new Ajv({ strict: true, allErrors: true });
    for (const tool of tools) {
      assert.equal(tool.inputSchema.type, 'object', tool.name);
      assert.doesNotThrow(() => ajv.compile(tool.inputSchema), `${tool.name}: inputSchema`);
      if (tool.outputSchema) assert.doesNotThrow(() => ajv.compile(tool.outputSchema), `${tool.name}: outputSchema`);
      assert.ok(tool.description && tool.description.length > 20, `${tool.name}: no description`);
    }
  });
});

test('exec_command: a one-shot command, its result valid against the output schema', async () => {
  await withClient(async ({ client, tools }) => {
    // callTool has checked structuredContent against the outputSchema (and fails when a tool that declares one
    // returns none).
    const result = await call(client, 'exec_command', { cmd: 'echo hi', login: false });
    assert.match(text(result), /Process exited with code 0\n/);
    assert.match(text(result), /\nOutput:\nhi\n$/);
    const schema = tools.find((t) => t.name === 'exec_command').outputSchema;
    if (schema) assert.ok(result.structuredContent, 'an outputSchema but no structuredContent');
  });
});

test('every tool on one Python session: exec_command, write_stdin, list_sessions, read_screen, close_session', async () => {
  await withClient(async ({ client }) => {
    const started = await call(client, 'exec_command', { cmd: 'python3 -i', tty: true, yield_time_ms: 10000, login: false });
    const id = sessionIdOf(started);
    const evaluated = await call(client, 'write_stdin', { session_id: id, chars: '6*7\n', yield_time_ms: 10000 });
    assert.match(text(evaluated), /(^|\n)42\r?\n/);

    const listed = await call(client, 'list_sessions', {});
    assert.match(text(listed), /python3 -i/);
    const screen = await call(client, 'read_screen', { session_id: id });
    assert.match(text(screen), />>> 6\*7\s*\n42\s*\n>>>/);

    const closed = await call(client, 'close_session', { session_id: id });
    assert.ok(text(closed).length > 0);
    const after = await call(client, 'list_sessions', {});
    assert.doesNotMatch(text(after), /python3 -i/);
  });
});

test('every text result parses with the Codex CLI unified-exec parser', async () => {
  await withClient(async ({ client }) => {
    const results = [
      await call(client, 'exec_command', { cmd: 'echo one; echo two >&2', login: false }),
      await call(client, 'exec_command', { cmd: 'seq 1 100000', max_output_tokens: 50, login: false }),
      await call(client, 'exec_command', { cmd: 'read line; echo got $line', tty: true, yield_time_ms: 1000, login: false }),
    ];
    const id = sessionIdOf(results[2]);
    results.push(await call(client, 'write_stdin', { session_id: id, chars: 'x\n', yield_time_ms: 10000 }));
    const unparsed = results.map(text).filter((t) => !parseUnifiedExec(t));
    assert.deepEqual(unparsed, []);
  });
});

test('bad tool arguments come back as a tool result with isError, which a model can read', async () => {
  await withClient(async ({ client }) => {
    let result;
    try {
      result = await client.callTool({ name: 'exec_command', arguments: {} });
    } catch (e) {
      assert.fail(`a protocol error instead of a tool result: ${e}`);
    }
    assert.equal(result.isError, true);
    assert.match(text(result), /cmd/);
  });
});

test('arguments a Codex-trained model adds (prefix_rule, ...) are accepted', async () => {
  await withClient(async ({ client }) => {
    // prefix_rule belongs to the Codex exec_command schema: the declared inputSchema must accept it too.
    assertValidInput(client, 'exec_command', { cmd: 'echo accepted', prefix_rule: ['echo'] });
    let result;
    try {
      result = await client.callTool({
        name: 'exec_command',
        arguments: { cmd: 'echo accepted', login: false, prefix_rule: ['echo'], some_future_argument: true },
      });
    } catch (e) {
      assert.fail(`refused: ${e}`);
    }
    assert.ok(!result.isError, text(result));
    assert.match(text(result), /accepted/);
  });
});

/**
 * Starts a session that is busy (not waiting for input, so an empty poll waits its whole window) and still answers
 * every line at once: its terminal echoes what is typed.
 */
async function startBusySession(client) {
  return sessionIdOf(await call(client, 'exec_command', { cmd: 'sleep 600', tty: true, yield_time_ms: 500, login: false }));
}

test('a cancelled poll releases its session: the next write_stdin is served at once', async () => {
  await withClient(async ({ client }) => {
    const id = await startBusySession(client);
    const abort = new AbortController();
    const poll = client.callTool({ name: 'write_stdin', arguments: { session_id: id, chars: '', yield_time_ms: 20000 } }, undefined, {
      signal: abort.signal,
    });
    setTimeout(() => abort.abort('the person pressed Esc'), 1000);
    await assert.rejects(poll);

    const start = performance.now();
    const answered = await call(client, 'write_stdin', { session_id: id, chars: 'ping\n', yield_time_ms: 500 });
    const elapsed = since(start);
    assert.match(text(answered), /ping/);
    assert.ok(elapsed < PROMPT_MS, `write_stdin after a cancelled poll took ${elapsed} ms`);

    const listed = await call(client, 'list_sessions', {});
    assert.match(text(listed), /sleep 600/, 'the session did not survive the cancelled call');
    await call(client, 'close_session', { session_id: id });
  });
});

test('a timed-out call behaves as a cancelled one', async () => {
  await withClient(async ({ client }) => {
    const id = await startBusySession(client);
    await assert.rejects(
      client.callTool({ name: 'write_stdin', arguments: { session_id: id, chars: '', yield_time_ms: 20000 } }, undefined, { timeout: 1500 }),
      (e) => e instanceof McpError && e.code === ErrorCode.RequestTimeout,
    );
    const start = performance.now();
    const answered = await call(client, 'write_stdin', { session_id: id, chars: 'pong\n', yield_time_ms: 500 });
    const elapsed = since(start);
    assert.match(text(answered), /pong/);
    assert.ok(elapsed < PROMPT_MS, `write_stdin after a timed-out poll took ${elapsed} ms`);
    await call(client, 'close_session', { session_id: id });
  });
});

test('a poll longer than the client timeout succeeds on progress notifications', async () => {
  await withClient(async ({ client }) => {
    const started = await call(client, 'exec_command', { cmd: 'sleep 14; echo finished', yield_time_ms: 500, login: false });
    const id = sessionIdOf(started);
    const progress = [];
    const result = await call(
      client,
      'write_stdin',
      { session_id: id, chars: '', yield_time_ms: 30000 },
      // 8 s without a word fails the call; the poll lasts about 14 s.
      { timeout: 8000, resetTimeoutOnProgress: true, onprogress: (p) => progress.push(p) },
    );
    assert.ok(progress.length >= 1, 'no progress notification during a 14 s poll');
    assert.match(text(result), /finished/);
  });
});

test('a client whose request timeout uexec is told gets every answer in time, with the session id', async () => {
  // The SDK's per-request timeout, 4 s here, told to uexec as the README says (--client-timeout-secs): a 20 s poll
  // and a 10 s exec window are cut to 2.8 s, so no call fails with -32001 and the command runs on.
  await withClient(async ({ client }) => {
    const options = { timeout: 4000 };
    const start = performance.now();
    const started = await call(client, 'exec_command', { cmd: 'sleep 6; echo finished', login: false }, options);
    const id = sessionIdOf(started);
    assert.ok(since(start) < 4000, `exec_command answered after ${since(start)} ms`);
    assert.match(text(started), /\[uexec\] Waited 2\.8 s, not 10 s: the server was told the client waits 4 s/);
    let seen = '';
    const deadline = performance.now() + 20_000;
    while (!seen.includes('finished')) {
      assert.ok(performance.now() < deadline, `the command never finished: ${seen}`);
      const polled = await call(client, 'write_stdin', { session_id: id, chars: '', yield_time_ms: 20000 }, options);
      assert.doesNotMatch(text(polled), /\[uexec\] Waited/, 'the note is said once');
      seen += text(polled);
    }
  }, ['--client-timeout-secs', '4']);
});
