// The operator's web page of `uexec mcp --listen` (`/operator`) in a real headless browser: Debian's chromium driven
// by playwright-core. A model (the TypeScript SDK client) starts two PTY sessions; the page, opened with the bearer
// token in its address's fragment, shows both with their state, renders each screen as a terminal (a screenshot of
// the one whose program printed a row of full blocks holds that row's colour, its twin's does not), kills one, and
// the model's next write_stdin reads that it ended. Without the token the API answers 401 and the page asks for it.
//
// Run: UEXEC_BIN=target/debug/uexec node tests/clients/operator.test.mjs (crates/uexec/tests/operator_web.rs does).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import zlib from 'node:zlib';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { chromium } from 'playwright-core';

import { parseUnifiedExec, scratchDir, uexecBin } from './lib/harness.mjs';

const CHROMIUM = process.env.UEXEC_CHROMIUM || '/usr/bin/chromium';
const DEADLINE_MS = 30_000;

/** Starts `uexec mcp --listen 127.0.0.1:0` with a token; resolves to its URL, its token and a stop function. */
async function startHttpServer(scratch, workspace) {
  const token = randomBytes(24).toString('hex');
  const tokenFile = path.join(scratch, 'token');
  fs.writeFileSync(tokenFile, `${token}\n`);
  const server = spawn(uexecBin(), ['mcp', '--cd', workspace, '--listen', '127.0.0.1:0', '--auth-token-file', tokenFile], {
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
    await exited;
  };
  return { url, base: url.replace(/\/mcp$/, ''), token, stop, pid: server.pid };
}

/** The pixels of a PNG (8-bit RGB or RGBA, not interlaced) as `{ width, height, channels, data }`. */
function decodePng(buffer) {
  let offset = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat = [];
  while (offset < buffer.length) {
    const length = buffer.readUInt32BE(offset);
    const type = buffer.toString('ascii', offset + 4, offset + 8);
    const body = buffer.subarray(offset + 8, offset + 8 + length);
    if (type === 'IHDR') {
      width = body.readUInt32BE(0);
      height = body.readUInt32BE(4);
      assert.equal(body[8], 8, 'bit depth 8');
      channels = { 2: 3, 6: 4 }[body[9]];
      assert.ok(channels, `colour type ${body[9]}`);
      assert.equal(body[12], 0, 'not interlaced');
    } else if (type === 'IDAT') {
      idat.push(body);
    }
    offset += 12 + length;
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const data = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const left = x >= channels ? data[y * stride + x - channels] : 0;
      const up = y > 0 ? data[(y - 1) * stride + x] : 0;
      const upLeft = x >= channels && y > 0 ? data[(y - 1) * stride + x - channels] : 0;
      let value = line[x];
      if (filter === 1) value += left;
      else if (filter === 2) value += up;
      else if (filter === 3) value += (left + up) >> 1;
      else if (filter === 4) {
        const p = left + up - upLeft;
        const pa = Math.abs(p - left);
        const pb = Math.abs(p - up);
        const pc = Math.abs(p - upLeft);
        value += pa <= pb && pa <= pc ? left : pb <= pc ? up : upLeft;
      }
      data[y * stride + x] = value & 0xff;
    }
  }
  return { width, height, channels, data };
}

/** How many pixels of a PNG are the terminal's text colour (bright green on black). */
function greenPixels(png) {
  const { width, height, channels, data } = decodePng(png);
  let count = 0;
  for (let i = 0; i < width * height; i++) {
    const [r, g, b] = [data[i * channels], data[i * channels + 1], data[i * channels + 2]];
    if (g > 180 && r < 120 && b < 160) count++;
  }
  return count;
}

test('the operator page shows live sessions as terminals and kills one', { timeout: 120_000 }, async () => {
  const scratch = scratchDir('operator');
  const workspace = path.join(scratch, 'workspace');
  fs.mkdirSync(workspace);
  const server = await startHttpServer(scratch, workspace);
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${server.token}` } },
  });
  const client = new Client({ name: 'uexec-operator-test', version: '0.0.0' });
  let browser;
  try {
    await client.connect(transport);
    const exec = async (cmd) => {
      const result = await client.callTool({ name: 'exec_command', arguments: { cmd, tty: true, login: false, yield_time_ms: 1000 } });
      return parseUnifiedExec(result.content[0].text);
    };
    const blocks = await exec(`printf 'UEXEC-WEB-MARKER\\n'; for i in $(seq 40); do printf '\\342\\226\\210'; done; printf '\\n'; sleep 60`);
    const twin = await exec('sleep 61');
    assert.ok(blocks.sessionId && twin.sessionId, `both run: ${JSON.stringify([blocks, twin])}`);

    // The API needs the token; the page itself holds no data.
    const denied = await fetch(`${server.base}/operator/api/sessions`);
    assert.equal(denied.status, 401);
    const shell = await fetch(`${server.base}/operator`);
    assert.equal(shell.status, 200);
    const html = await shell.text();
    assert.ok(!html.includes('UEXEC-WEB-MARKER') && !html.includes(server.token), 'the page carries no data');
    const listed = await (await fetch(`${server.base}/operator/api/sessions`, { headers: { Authorization: `Bearer ${server.token}` } })).json();
    assert.deepEqual(listed.sessions.map((s) => s.session_id).sort(), [blocks.sessionId, twin.sessionId].sort());
    // `uexec sessions` at the machine lists the same, under this server and its client.
    const servers = JSON.parse(execFileSync(uexecBin(), ['sessions', '--json'], { encoding: 'utf8' }));
    const mine = servers.find((s) => s.server.pid === server.pid);
    assert.ok(mine, `uexec sessions lists the HTTP server ${server.pid}: ${JSON.stringify(servers)}`);
    assert.equal(mine.server.kind, 'http');
    assert.deepEqual(mine.sessions.map((s) => [s.client, s.session_id]).sort(), listed.sessions.map((s) => [s.client, s.session_id]).sort());

    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
    const page = await browser.newPage({ viewport: { width: 1800, height: 1000 } });
    await page.goto(`${server.base}/operator#token=${server.token}`);
    const term = (id) => `section.session[data-session="${id}"] pre.term`;
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.includes('UEXEC-WEB-MARKER'), term(blocks.sessionId), { timeout: DEADLINE_MS });
    await page.waitForSelector(term(twin.sessionId), { timeout: DEADLINE_MS });
    assert.ok(!page.url().includes(server.token), `the token left the address bar: ${page.url()}`);
    const meta = await page.textContent(`section.session[data-session="${blocks.sessionId}"] .meta`);
    assert.match(meta, /running/);
    assert.match(meta, /UEXEC-WEB-MARKER/, 'the command line is shown');

    // The screenshot: the terminal of the session that printed a row of full blocks shows them, its twin's is black.
    const shown = greenPixels(await page.locator(term(blocks.sessionId)).screenshot());
    const blank = greenPixels(await page.locator(term(twin.sessionId)).screenshot());
    assert.ok(shown > 2000, `the program's output is on the rendered screen (${shown} text-coloured pixels)`);
    assert.ok(blank < 50, `the twin's screen is blank (${blank} text-coloured pixels)`);

    // Kill the twin from the page; the model reads that it ended.
    page.on('dialog', (dialog) => dialog.accept());
    await page.click(`section.session[data-session="${twin.sessionId}"] button`);
    await page.waitForFunction((id) => document.getElementById('status').textContent.includes(`killed session ${id}`), twin.sessionId, { timeout: DEADLINE_MS });
    const after = await client.callTool({ name: 'write_stdin', arguments: { session_id: twin.sessionId, chars: '', yield_time_ms: 5000 } });
    assert.notEqual(parseUnifiedExec(after.content[0].text).exitCode, null, `the model reads the exit: ${after.content[0].text}`);
    await page.waitForFunction((id) => !document.querySelector(`section.session[data-session="${id}"]`), twin.sessionId, { timeout: DEADLINE_MS });

    // Without the token the page asks for it and shows nothing.
    const stranger = await browser.newPage();
    await stranger.goto(`${server.base}/operator`);
    await stranger.waitForSelector('#login', { state: 'visible', timeout: DEADLINE_MS });
    assert.equal(await stranger.locator('section.session').count(), 0);
  } finally {
    if (browser) await browser.close();
    await transport.terminateSession().catch(() => {});
    await client.close();
    await server.stop();
  }
});
