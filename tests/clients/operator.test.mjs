// The operator's web page of `uexec mcp --listen` (`/operator`) in a real headless browser: Debian's chromium driven
// by playwright-core. A model (the TypeScript SDK client) starts two PTY sessions; the page, opened with the bearer
// token in its address's fragment, shows both with their state, renders each screen as a terminal (a screenshot of
// the one whose program printed a row of full blocks holds that row's colour, its twin's does not), kills one, and
// the model's next write_stdin reads that it ended. Without the token the API answers 401 and the page asks for it.
// Pipe sessions: a long-running one shows its newest output and scrolls back to its first; an exited one keeps
// its last output, says exited with its code, offers no kill, and keeps it once the server lets it go. Questions:
// one waiting for a person shows every fact and is answered from the page (the client's form, still open,
// decides nothing; the terminal's `uexec answer` finds it answered); its denied twin is denied from the page; the
// history shows both and a refusal of a command rule.
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
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { chromium } from 'playwright-core';

import { parseUnifiedExec, scratchDir, uexecBin } from './lib/harness.mjs';

const CHROMIUM = process.env.UEXEC_CHROMIUM || '/usr/bin/chromium';
const DEADLINE_MS = 30_000;

/** Starts `uexec mcp --listen 127.0.0.1:0` with a token; resolves to its URL, its token and a stop function. */
async function startHttpServer(scratch, workspace, extra = []) {
  const token = randomBytes(24).toString('hex');
  const tokenFile = path.join(scratch, 'token');
  fs.writeFileSync(tokenFile, `${token}\n`);
  const server = spawn(uexecBin(), ['mcp', '--cd', workspace, '--listen', '127.0.0.1:0', '--auth-token-file', tokenFile, ...extra], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let operatorLine = '';
  const exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve({ code, signal })));
  const lines = readline.createInterface({ input: server.stderr });
  const url = await new Promise((resolve, reject) => {
    lines.on('line', (line) => {
      const m = /listening on (http:\/\/\S+)/.exec(line);
      if (m) resolve(m[1]);
      else if (line.includes('operator page')) operatorLine = line;
      else process.stderr.write(`${line}\n`);
    });
    server.once('exit', (code) => reject(new Error(`uexec mcp --listen exited (${code}) before listening`)));
  });
  const stop = async () => {
    server.kill('SIGTERM');
    await exited;
  };
  // The page's address is announced right after the MCP one.
  const deadline = Date.now() + DEADLINE_MS;
  while (!operatorLine && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return { url, base: url.replace(/\/mcp$/, ''), token, tokenFile, stop, pid: server.pid, operatorLine };
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
    // Once the server lets it go, the page keeps its last screen, marked as ended, with no kill button.
    await page.waitForSelector(`section.session[data-session="${twin.sessionId}"][data-state="gone"]`, { timeout: DEADLINE_MS });
    assert.ok(!(await page.isVisible(`section.session[data-session="${twin.sessionId}"] button.kill`)), 'no kill for an ended session');
    await page.click(`section.session[data-session="${twin.sessionId}"] button.dismiss`);
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

/** An MCP client of `server`; `elicitation`: it declares the capability, and holds every form it is shown open. */
async function connect(server, elicitation) {
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${server.token}` } },
  });
  const client = new Client({ name: 'uexec-operator-test', version: '0.0.0' }, { capabilities: elicitation ? { elicitation: {} } : {} });
  const forms = [];
  if (elicitation) {
    client.setRequestHandler(ElicitRequestSchema, (request) => new Promise((resolve) => forms.push({ request, resolve })));
  }
  await client.connect(transport);
  const close = async () => {
    await transport.terminateSession().catch(() => {});
    // Calls still waiting end with "connection closed": nothing to check there.
    await client.close().catch(() => {});
  };
  return { client, forms, close };
}

async function until(what, check) {
  const deadline = Date.now() + DEADLINE_MS;
  for (;;) {
    const value = await check();
    if (value) return value;
    assert.ok(Date.now() < deadline, `never: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('pipe sessions show their newest output, scroll back, and keep their last output after exit', { timeout: 120_000 }, async () => {
  const scratch = scratchDir('operator-pipes');
  const workspace = path.join(scratch, 'workspace');
  fs.mkdirSync(workspace);
  const server = await startHttpServer(scratch, workspace);
  const { client, close } = await connect(server, false);
  let browser;
  try {
    const exec = async (cmd) => {
      const result = await client.callTool({ name: 'exec_command', arguments: { cmd, login: false, yield_time_ms: 300 } });
      return parseUnifiedExec(result.content[0].text);
    };
    const live = await exec("for i in $(seq 1 300); do echo \"log line $i\"; done; echo UEXEC-PIPE-NEWEST; sleep 60");
    const ended = await exec("echo UEXEC-PIPE-FIRST; until [ -e go ]; do sleep 0.05; done; for i in $(seq 1 40); do echo \"end line $i\"; done; echo UEXEC-PIPE-LAST; exit 3");
    assert.ok(live.sessionId && ended.sessionId, `both run: ${JSON.stringify([live, ended])}`);

    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
    const page = await browser.newPage({ viewport: { width: 1800, height: 1000 } });
    await page.goto(`${server.base}/operator#token=${server.token}`);
    const box = (id) => `section.session[data-session="${id}"] pre.term`;
    // The long-running one: its newest output is in view, its first lines a scroll away.
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.includes('UEXEC-PIPE-NEWEST'), box(live.sessionId), { timeout: DEADLINE_MS });
    const view = await page.$eval(box(live.sessionId), (el) => ({
      text: el.textContent, top: el.scrollTop, height: el.clientHeight, full: el.scrollHeight,
    }));
    assert.ok(view.full > view.height, `the box scrolls: ${JSON.stringify({ ...view, text: undefined })}`);
    assert.ok(view.top + view.height >= view.full - 8, `the newest output is in view: ${JSON.stringify({ ...view, text: undefined })}`);
    assert.ok(view.text.includes('log line 1\n') && view.text.includes('log line 300\n'), 'all of it is there to scroll back to');
    await page.$eval(box(live.sessionId), (el) => { el.scrollTop = 0; });
    const firstInView = await page.$eval(box(live.sessionId), (el) => {
      const range = document.createRange();
      const node = el.firstChild;
      const at = node.textContent.indexOf('log line 1\n');
      range.setStart(node, at);
      range.setEnd(node, at + 10);
      const line = range.getBoundingClientRect();
      const frame = el.getBoundingClientRect();
      return line.top >= frame.top && line.bottom <= frame.bottom;
    });
    assert.ok(firstInView, 'scrolled back, the first line is in view');
    const meta = await page.textContent(`section.session[data-session="${live.sessionId}"] .meta`);
    assert.match(meta, /pipes/);
    assert.match(meta, /running/);

    // The other exits with code 3: its last output stays, it says so, and it offers no kill.
    fs.writeFileSync(path.join(workspace, 'go'), '');
    const exitedCard = `section.session[data-session="${ended.sessionId}"]`;
    await page.waitForSelector(`${exitedCard}[data-state="exited"]`, { timeout: DEADLINE_MS });
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.includes('UEXEC-PIPE-LAST'), box(ended.sessionId), { timeout: DEADLINE_MS });
    assert.match(await page.textContent(`${exitedCard} .meta`), /exited \(exit code 3\)/);
    assert.ok(!(await page.isVisible(`${exitedCard} button.kill`)), 'no kill for an exited session');
    assert.ok(await page.isVisible(`section.session[data-session="${live.sessionId}"] button.kill`), 'its running twin has one');
    await page.waitForFunction(() => /1 live session, 1 exited/.test(document.getElementById('status').textContent), null, { timeout: DEADLINE_MS });

    // The model reads the exit; the server lets the session go, and the page keeps what it showed last.
    const after = await client.callTool({ name: 'write_stdin', arguments: { session_id: ended.sessionId, chars: '', yield_time_ms: 1000 } });
    assert.equal(parseUnifiedExec(after.content[0].text).exitCode, 3, after.content[0].text);
    await page.waitForSelector(`${exitedCard}[data-state="gone"]`, { timeout: DEADLINE_MS });
    assert.ok((await page.textContent(box(ended.sessionId))).includes('UEXEC-PIPE-LAST'), 'the last output is kept');
    assert.match(await page.textContent(`${exitedCard} .meta`), /ended/);
  } finally {
    if (browser) await browser.close();
    await close();
    await server.stop();
  }
});

test('a question waiting for a person is answered from the page, once', { timeout: 120_000 }, async () => {
  const scratch = scratchDir('operator-questions');
  const workspace = path.join(scratch, 'workspace');
  fs.mkdirSync(workspace);
  const config = path.join(scratch, 'config.toml');
  fs.writeFileSync(config, '[[rules]]\nprefix = ["git", "push"]\ndecision = "forbid"\n');
  const audit = path.join(scratch, 'audit.jsonl');
  const server = await startHttpServer(scratch, workspace, ['--approval-policy', 'untrusted', '--config', config, '--audit-log', audit]);
  const { client, forms, close } = await connect(server, true);
  let browser;
  try {
    const call = (cmd) => {
      const calling = client.callTool(
        { name: 'exec_command', arguments: { cmd, login: false, yield_time_ms: 2000, justification: 'deploy the \u001b[31mbuild' } },
        undefined,
        { timeout: 120_000 },
      );
      // A call still waiting when a check fails ends with the connection: that is not the failure to report.
      calling.catch(() => {});
      return calling;
    };
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
    const page = await browser.newPage({ viewport: { width: 1800, height: 1000 } });
    await page.goto(`${server.base}/operator#token=${server.token}`);

    // Approved from the page: it runs, and the client's form, still open, decides nothing.
    const approved = call('echo UEXEC-APPROVED-RAN > approved.txt; cat approved.txt');
    await until('the client is shown the form', () => forms.length === 1);
    const question = 'section.question';
    await page.waitForSelector(question, { timeout: DEADLINE_MS });
    const shown = await page.textContent(question);
    assert.match(shown, /\$ echo UEXEC-APPROVED-RAN > approved\.txt; cat approved\.txt/);
    assert.ok(shown.includes(`in ${workspace}`), `the working directory is shown: ${shown}`);
    // The reason on one line, escaped: the justification's escape sequence is shown, not acted on, and its line
    // break cannot start a line that imitates a fact of the question.
    assert.match(shown, /Reason: this command is not on the known-safe list.*\\u\{a\}The agent's justification: deploy the \\u\{1b\}\[31mbuild/, 'the reason, escaped');
    assert.match(shown, /run/);
    assert.match(shown, /asked \d+s ago/);
    assert.match(shown, /client \d+ · session \d+/);
    // The page offers exactly the answers of the client's form, with its titles.
    const formTitles = forms[0].request.params.requestedSchema.properties.decision.oneOf.map((c) => c.title);
    const buttons = await page.$$eval(`${question} button`, (bs) => bs.map((b) => b.textContent));
    assert.deepEqual(buttons, formTitles);
    const id = Number(await page.getAttribute(question, 'data-question'));
    // Without the token nobody answers it (the page's own answer below is the allowed twin).
    for (const headers of [{}, { Authorization: 'Bearer wrong' }]) {
      const stranger = await fetch(`${server.base}/operator/api/questions/${id}/deny`, { method: 'POST', headers });
      assert.equal(stranger.status, 401);
    }
    await page.click(`${question} button.answer-approve`);
    const ran = await approved;
    assert.match(ran.content[0].text, /UEXEC-APPROVED-RAN/);
    assert.equal(parseUnifiedExec(ran.content[0].text).exitCode, 0, ran.content[0].text);
    await page.waitForFunction(() => !document.querySelector('section.question'), null, { timeout: DEADLINE_MS });
    forms[0].resolve({ action: 'accept', content: { decision: 'deny' } });
    // The terminal finds it answered.
    let refused;
    try {
      execFileSync(uexecBin(), ['answer', String(server.pid), String(id), 'deny'], { encoding: 'utf8', stdio: 'pipe' });
    } catch (error) {
      refused = error;
    }
    assert.ok(refused && /answered already/.test(refused.stderr), `uexec answer finds it answered: ${refused?.stderr}`);

    // Its denied twin, denied from the page: it does not run.
    const denied = call('echo UEXEC-DENIED-RAN > denied.txt');
    await until('the second form', () => forms.length === 2);
    await page.waitForSelector(question, { timeout: DEADLINE_MS });
    await page.click(`${question} button.answer-deny`);
    const refusedRun = await denied;
    assert.match(refusedRun.content[0].text, /rejected/);
    assert.ok(!fs.existsSync(path.join(workspace, 'denied.txt')), 'a denied command ran');

    // A command rule refuses without asking; the history shows all three, per session, with who decided.
    const forbidden = await call('git push');
    assert.ok(forbidden.isError, JSON.stringify(forbidden));
    await page.waitForFunction(() => document.querySelectorAll('tr.history-entry').length >= 3, null, { timeout: DEADLINE_MS });
    const rows = await page.$$eval('tr.history-entry', (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
    const row = (needle) => rows.find((r) => r[4].includes(needle));
    assert.deepEqual([row('UEXEC-APPROVED-RAN')[2], row('UEXEC-APPROVED-RAN')[3]], ['approved', 'http'], JSON.stringify(rows));
    assert.deepEqual([row('UEXEC-DENIED-RAN')[2], row('UEXEC-DENIED-RAN')[3]], ['denied', 'http'], JSON.stringify(rows));
    assert.deepEqual([row('git push')[2], row('git push')[3]], ['refused by policy', 'policy'], JSON.stringify(rows));
    const terminal = execFileSync(uexecBin(), ['sessions', '--history'], { encoding: 'utf8' });
    assert.match(terminal, /approved\s+by http\s+echo UEXEC-APPROVED-RAN/);
    assert.match(terminal, /refused_by_policy\s+by policy\s+git push/);
    const records = fs.readFileSync(audit, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    const answered = records.filter((r) => r.event === 'question_answered').map((r) => [r.decision, r.by]);
    assert.deepEqual(answered, [['approved', 'http'], ['denied', 'http']]);
    assert.ok(records.some((r) => r.event === 'policy_refused' && r.command === 'git push'), 'the refusal is in the audit log');
  } finally {
    if (browser) await browser.close();
    for (const form of forms) form.resolve({ action: 'cancel' });
    await close();
    await server.stop();
  }
});
