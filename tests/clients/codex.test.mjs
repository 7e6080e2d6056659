// The Codex CLI (`codex exec`, from the npm package @openai/codex) drives `uexec mcp` as an MCP server, with a scripted
// model (lib/scripted_model.mjs) dictating the tool calls and recording what the Codex CLI sends back, which is what
// a model reads. The Codex CLI runs with its own `approval_policy = "never"` and the uexec server configured with
// `default_tools_approval_mode = "approve"` (README.md, "Use it from the Codex CLI"), not with
// --dangerously-bypass-approvals-and-sandbox. Each uexec call is paired with the same call to the Codex CLI's own
// exec_command where a reference helps: by default nothing uexec hands the model may cost more tokens than what the
// Codex CLI's own tool hands it for the same command, plus the one line the Codex CLI wraps every MCP result in.
// Two more runs use a model of the Codex CLI's own catalogue (gpt-5.5), as its users do: by default its first
// request lists no uexec tool (they wait behind tool_search); with `omit_tools_from = ["deferred"]` (README.md) they
// are up front, and the tokens and the truncation the model reads are measured there too.
//
// Run: UEXEC_BIN=target/debug/uexec node tests/clients/codex.test.mjs (crates/uexec/tests/real_clients.rs does).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { codexExec, PLAIN, sessionIdOf, UEXEC } from './lib/codex.mjs';
import { parseUnifiedExec, tokens } from './lib/harness.mjs';
import { modelText, serverText } from './lib/scripted_model.mjs';

// The line the Codex CLI puts before every MCP tool result it hands the model.
const CODEX_MCP_WRAPPER = 'Wall time: 0.0000 seconds\nOutput:\n';

const PATCH = [
  "apply_patch <<'EOF'",
  '*** Begin Patch',
  '*** Add File: added.txt',
  '+added by apply_patch',
  '*** Update File: existing.txt',
  '@@',
  '-old line',
  '+new line',
  '*** End Patch',
  'EOF',
  '',
].join('\n');

// A patch that writes outside the workspace (and outside every writable root): never applied.
const PATCH_OUTSIDE = ["apply_patch <<'EOF'", '*** Begin Patch', '*** Add File: ../outside.txt', '+escaped', '*** End Patch', 'EOF', ''].join('\n');

const script = [
  { id: 'native-echo', name: 'exec_command', args: { cmd: 'echo hi', ...PLAIN } },
  { id: 'uexec-echo', ...UEXEC, name: 'exec_command', args: { cmd: 'echo hi', ...PLAIN } },
  { id: 'native-seq200', name: 'exec_command', args: { cmd: 'seq 1 200', ...PLAIN } },
  { id: 'uexec-seq200', ...UEXEC, name: 'exec_command', args: { cmd: 'seq 1 200', ...PLAIN } },
  { id: 'py-start', ...UEXEC, name: 'exec_command', args: { cmd: 'python3 -i', tty: true, yield_time_ms: 10000, login: false } },
  {
    id: 'py-eval',
    ...UEXEC,
    name: 'write_stdin',
    args: (outputs) => ({ session_id: sessionIdOf(outputs.get('py-start')), chars: '1+1\n', yield_time_ms: 10000 }),
  },
  {
    id: 'py-close',
    ...UEXEC,
    name: 'close_session',
    args: (outputs) => ({ session_id: sessionIdOf(outputs.get('py-start')) }),
  },
  { id: 'native-trunc', name: 'exec_command', args: { cmd: 'seq 1 100000', max_output_tokens: 100, ...PLAIN } },
  { id: 'uexec-trunc', ...UEXEC, name: 'exec_command', args: { cmd: 'seq 1 100000', max_output_tokens: 100, ...PLAIN } },
  { id: 'patch', ...UEXEC, name: 'exec_command', args: { cmd: PATCH, ...PLAIN } },
  { id: 'patch-outside', ...UEXEC, name: 'exec_command', args: { cmd: PATCH_OUTSIDE, ...PLAIN } },
  {
    id: 'escalate',
    ...UEXEC,
    name: 'exec_command',
    args: {
      cmd: 'echo escalated > escalated.txt',
      ...PLAIN,
      sandbox_permissions: 'require_escalated',
      justification: 'The test asks to run outside the sandbox and expects a refusal.',
    },
  },
];

let model;
let run;
let workspace;
const figures = {};

let unconfigured;

// A model in the Codex CLI's own catalogue, as users run it (an unknown slug such as "scripted-model" gets no tool
// search, so it sees MCP tools up front where a catalogue model does not).
const CATALOGUE_MODEL = 'gpt-5.5';
const catalogueScript = [
  { id: 'cat-native-echo', name: 'exec_command', args: { cmd: 'echo hi', ...PLAIN } },
  { id: 'cat-uexec-echo', ...UEXEC, name: 'exec_command', args: { cmd: 'echo hi', ...PLAIN } },
  { id: 'cat-native-trunc', name: 'exec_command', args: { cmd: 'seq 1 100000', max_output_tokens: 100, ...PLAIN } },
  { id: 'cat-uexec-trunc', ...UEXEC, name: 'exec_command', args: { cmd: 'seq 1 100000', max_output_tokens: 100, ...PLAIN } },
  // uexec's default budget (10,000 tokens), which the Codex CLI's own limit for a catalogue model's tool output
  // may cut a second time.
  { id: 'cat-native-big', name: 'exec_command', args: { cmd: 'seq 1 100000', ...PLAIN } },
  { id: 'cat-uexec-big', ...UEXEC, name: 'exec_command', args: { cmd: 'seq 1 100000', ...PLAIN } },
];
let catalogue;
let catalogueDefault;

before(async () => {
  ({ run, model, workspace } = await codexExec('codex', script, { approve: true }));
  // The same server without the setting: what the Codex CLI does on its own with uexec's tool annotations.
  unconfigured = await codexExec(
    'codex-unconfigured',
    [
      { id: 'list', ...UEXEC, name: 'list_sessions', args: {} },
      { id: 'echo', ...UEXEC, name: 'exec_command', args: { cmd: 'echo hi > ran.txt', ...PLAIN } },
    ],
    { approve: false },
  );
  // A catalogue model with the setting README.md documents (uexec's tools up front), and without it.
  catalogue = await codexExec('codex-catalogue', catalogueScript, {
    approve: true,
    model: CATALOGUE_MODEL,
    serverLines: ['omit_tools_from = ["deferred"]'],
  });
  catalogueDefault = await codexExec('codex-catalogue-default', [], { approve: true, model: CATALOGUE_MODEL });
});

after(() => {
  if (Object.keys(figures).length > 0) {
    console.log(`tokens a model reads through the Codex CLI: ${JSON.stringify(figures)}`);
    if (process.env.UEXEC_CLIENTS_TMP) {
      fs.writeFileSync(path.join(process.env.UEXEC_CLIENTS_TMP, 'codex-tokens.json'), `${JSON.stringify(figures, null, 2)}\n`);
    }
  }
});

/** The tool output of one call id as the model reads it, failing clearly when the Codex CLI sent none. */
function output(id) {
  assert.ok(model.outputs.has(id), `the Codex CLI sent no output for ${id}; scripted-model errors: ${model.errors.join('; ')}`);
  return model.outputs.get(id);
}

/** Shortens a text for an assertion message. */
function excerpt(text, n = 300) {
  const s = JSON.stringify(text);
  return s.length > n ? `${s.slice(0, n)}...` : s;
}

/** The uexec part of an output, parsed as the Codex CLI parses unified-exec output; fails when it does not parse. */
function parsed(id) {
  const text = serverText(output(id));
  const result = parseUnifiedExec(text);
  assert.ok(result, `${id}: the Codex CLI's unified-exec parser cannot read what uexec sent: ${excerpt(text)}`);
  return result;
}

/**
 * The fields of a uexec result whatever form the model gets it in (the Codex text, or the structuredContent JSON the
 * Codex CLI prefers when a result has one), for the checks of behaviour; the form itself is checked apart.
 */
function fields(id) {
  const text = serverText(output(id));
  const result = parseUnifiedExec(text);
  // uexec's own notes (`[uexec] ...`, one a line) follow what the command printed, after one line break.
  if (result) return { ...result, output: result.output.replace(/(^|\n)\[uexec\] [^]*$/, '') };
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    assert.fail(`${id}: neither unified-exec text nor JSON: ${excerpt(text)}`);
  }
  return {
    exitCode: json.exit_code ?? null,
    sessionId: json.session_id ?? null,
    output: json.output ?? '',
    text: text,
  };
}

/** Records and checks that a uexec call costs a model no more than the Codex CLI's own tool for the same command. */
function assertTokensWithinCodex(uexecId, nativeId, label) {
  const native = output(nativeId);
  assert.match(modelText(native), /Process exited with code 0/, `${nativeId}: the Codex CLI's own exec_command failed: ${excerpt(modelText(native))}`);
  const uexecTokens = tokens(modelText(output(uexecId)));
  const nativeTokens = tokens(modelText(native));
  const bound = nativeTokens + tokens(CODEX_MCP_WRAPPER);
  figures[label] = { uexec: uexecTokens, codex_native: nativeTokens, bound };
  console.log(`${label}: a model reads ${uexecTokens} tokens through uexec, ${nativeTokens} through the Codex CLI's own exec_command (bound ${bound})`);
  assert.ok(
    uexecTokens <= bound,
    `${label}: uexec costs the model ${uexecTokens} tokens, more than the Codex CLI's own ${nativeTokens} (+ its MCP wrapper line): ${excerpt(modelText(output(uexecId)))}`,
  );
}

test('codex exec completes the scripted turn with uexec as an MCP server', () => {
  assert.equal(run.code, 0, `codex exec exited with ${run.code}: ${run.stderr.slice(-2000)}`);
  assert.deepEqual(model.errors, []);
  assert.match(run.stdout, /"type":"turn.completed"/);
  for (const step of script) assert.ok(model.outputs.has(step.id), `no output for ${step.id}`);
});

test('the Codex CLI offers every uexec tool to the model under mcp__uexec', () => {
  const first = model.requests[0];
  assert.ok(first, 'the Codex CLI never called the model');
  const namespace = first.tools.find((tool) => tool.name === 'mcp__uexec');
  assert.ok(namespace, `no mcp__uexec tools in ${JSON.stringify(first.tools.map((t) => t.name))}`);
  const names = namespace.tools.map((tool) => tool.name).sort();
  assert.deepEqual(names, ['close_session', 'exec_command', 'list_sessions', 'read_screen', 'write_stdin']);
});

test('without the server setting the Codex CLI runs the read-only tools and refuses the others', () => {
  assert.equal(unconfigured.run.code, 0, unconfigured.run.stderr.slice(-2000));
  const list = modelText(unconfigured.model.outputs.get('list'));
  assert.doesNotMatch(list, /requires approval/, 'list_sessions, annotated read-only, was refused');
  const echo = modelText(unconfigured.model.outputs.get('echo'));
  assert.match(echo, /MCP tool call requires approval, but approval policy is never/, excerpt(echo));
  assert.ok(!fs.existsSync(path.join(unconfigured.workspace, 'ran.txt')), 'the refused command ran');
});

test('the Codex CLI runs uexec tools under approval_policy never with the documented server setting', () => {
  for (const step of script.filter((s) => s.namespace)) {
    assert.doesNotMatch(modelText(output(step.id)), /requires approval/, `${step.id} was refused by the Codex CLI`);
  }
});

test('one-shot command: echo hi', () => {
  const result = fields('uexec-echo');
  assert.equal(result.exitCode, 0);
  assert.equal(result.sessionId, null);
  assert.match(result.output, /(^|\n)hi\n/);
});

test('a 200-line output reaches the model whole', () => {
  const result = fields('uexec-seq200');
  assert.equal(result.exitCode, 0);
  const lines = result.output.split('\n');
  for (let n = 1; n <= 200; n += 1) assert.ok(lines.includes(String(n)), `line ${n} missing`);
});

test('a Python REPL driven through write_stdin', () => {
  const start = fields('py-start');
  assert.equal(start.exitCode, null, 'python3 -i exited at once');
  assert.ok(start.sessionId != null, 'no session id for the running REPL');
  assert.match(start.output, />>> ?$/);
  const evaluated = fields('py-eval');
  assert.match(evaluated.output, /(^|\n)2\r?\n/, `1+1 did not print 2: ${excerpt(evaluated.output)}`);
  const closed = serverText(output('py-close'));
  assert.doesNotMatch(closed, /failed|unknown/i, excerpt(closed));
});

test('a truncated large output: seq 1 100000 with max_output_tokens 100', () => {
  const result = fields('uexec-trunc');
  assert.equal(result.exitCode, 0);
  assert.match(result.output, /(^|\n)1\n2\n3\n/);
  assert.match(result.output, /\n100000\n$/);
  assert.match(result.output, /tokens truncated/);
  const text = serverText(output('uexec-trunc'));
  const uexecLines = /Total output lines: (\d+)/.exec(text);
  assert.ok(uexecLines, 'no "Total output lines"');
  assert.equal(uexecLines[1], '100000', 'the total is not the number of lines the command printed');
});

test('apply_patch through exec_command edits the workspace and answers as the Codex CLI does', () => {
  const text = serverText(output('patch'));
  assert.match(text, /Success\. Updated the following files:\n/, excerpt(text));
  assert.match(text, /(Process exited with code|Exit code:) 0\n/);
  assert.match(text, /\nA added\.txt\n/);
  assert.match(text, /\nM existing\.txt\n/);
  assert.equal(fs.readFileSync(path.join(workspace, 'added.txt'), 'utf8'), 'added by apply_patch\n');
  assert.equal(fs.readFileSync(path.join(workspace, 'existing.txt'), 'utf8'), 'new line\n');
});

test('apply_patch outside the writable roots is refused and writes nothing', () => {
  const text = serverText(output('patch-outside'));
  assert.doesNotMatch(text, /Success\./, excerpt(text));
  assert.doesNotMatch(text, /(Process exited with code|Exit code:) 0\n/, excerpt(text));
  assert.ok(!fs.existsSync(path.join(workspace, '..', 'outside.txt')), 'the patch wrote outside the workspace');
});

test('a denied escalation never runs and the model reads why', () => {
  const text = modelText(output('escalate'));
  assert.match(text, /reject|denied|declined|refused/i, excerpt(text));
  assert.ok(!fs.existsSync(path.join(workspace, 'escalated.txt')), 'the denied command ran');
});

test('every exec_command and write_stdin result parses with the Codex CLI\'s unified-exec parser', () => {
  const unparsed = [];
  for (const id of ['uexec-echo', 'uexec-seq200', 'py-start', 'py-eval', 'uexec-trunc']) {
    if (!parseUnifiedExec(serverText(output(id)))) unparsed.push(`${id}: ${excerpt(serverText(output(id)), 160)}`);
  }
  assert.deepEqual(unparsed, [], `not readable by the Codex CLI's parser:\n${unparsed.join('\n')}`);
  assert.match(parsed('uexec-echo').output, /(^|\n)hi\n/);
});

test('tokens a model reads: no more than through the Codex CLI\'s own exec_command', () => {
  const failures = [];
  for (const [uexecId, nativeId, label] of [
    ['uexec-echo', 'native-echo', 'echo hi'],
    ['uexec-seq200', 'native-seq200', 'seq 1 200'],
    ['uexec-trunc', 'native-trunc', 'seq 1 100000, max_output_tokens 100'],
  ]) {
    try {
      assertTokensWithinCodex(uexecId, nativeId, label);
    } catch (e) {
      failures.push(e.message);
    }
  }
  assert.deepEqual(failures, []);
});

test('a catalogue model sees uexec\'s tools up front only with omit_tools_from = ["deferred"]', () => {
  for (const [label, { run: r, model: m }] of [['documented', catalogue], ['default', catalogueDefault]]) {
    assert.equal(r.code, 0, `${label}: codex exec exited with ${r.code}: ${r.stderr.slice(-2000)}`);
    assert.ok(m.requests[0], `${label}: the Codex CLI never called the model`);
  }
  const names = (request) => request.tools.map((tool) => tool.name ?? tool.type);
  const documented = catalogue.model.requests[0].tools.find((tool) => tool.name === 'mcp__uexec');
  assert.ok(documented, `documented: no mcp__uexec in ${JSON.stringify(names(catalogue.model.requests[0]))}`);
  assert.deepEqual(
    documented.tools.map((tool) => tool.name).sort(),
    ['close_session', 'exec_command', 'list_sessions', 'read_screen', 'write_stdin'],
  );
  // By default the first request lists no uexec tool: they wait behind the Codex CLI's tool search.
  const first = catalogueDefault.model.requests[0];
  assert.ok(!first.tools.some((tool) => tool.name === 'mcp__uexec'), `default: ${JSON.stringify(names(first))}`);
  assert.ok(JSON.stringify(first.tools).includes('tool_search'), `default: no tool_search in ${JSON.stringify(names(first))}`);
});

test('a catalogue model reads uexec\'s results as the Codex CLI hands them, tokens measured', () => {
  const out = (id) => {
    assert.ok(catalogue.model.outputs.has(id), `no output for ${id}; errors: ${catalogue.model.errors.join('; ')}`);
    return catalogue.model.outputs.get(id);
  };
  const echo = parseUnifiedExec(serverText(out('cat-uexec-echo')));
  assert.ok(echo, excerpt(serverText(out('cat-uexec-echo'))));
  assert.equal(echo.exitCode, 0);
  assert.match(echo.output, /(^|\n)hi\n/);
  const trunc = serverText(out('cat-uexec-trunc'));
  assert.match(trunc, /(^|\n)1\n2\n3\n/, excerpt(trunc));
  assert.match(trunc, /100000\n?$/, excerpt(trunc));
  const measured = {};
  for (const [uexecId, nativeId, label] of [
    ['cat-uexec-echo', 'cat-native-echo', 'echo hi'],
    ['cat-uexec-trunc', 'cat-native-trunc', 'seq 1 100000, max_output_tokens 100'],
    ['cat-uexec-big', 'cat-native-big', 'seq 1 100000'],
  ]) {
    const [uexecTokens, nativeTokens] = [tokens(modelText(out(uexecId))), tokens(modelText(out(nativeId)))];
    measured[label] = { uexec: uexecTokens, codex_native: nativeTokens };
    assert.match(modelText(out(nativeId)), /Process exited with code 0/, `${nativeId}: ${excerpt(modelText(out(nativeId)))}`);
    const bound = nativeTokens + tokens(CODEX_MCP_WRAPPER);
    assert.ok(uexecTokens <= bound, `${CATALOGUE_MODEL}, ${label}: uexec ${uexecTokens} tokens, the Codex CLI's own ${nativeTokens}`);
  }
  figures[`${CATALOGUE_MODEL} (omit_tools_from deferred)`] = measured;
  console.log(`${CATALOGUE_MODEL}: tokens a model reads ${JSON.stringify(measured)}`);
  console.log(`${CATALOGUE_MODEL}: the truncated uexec result as the model reads it: ${JSON.stringify(modelText(out('cat-uexec-trunc')))}`);
  const big = modelText(out('cat-uexec-big'));
  // uexec's cut is the only one the model sees: one marker, counting what uexec left out of its 10,000 tokens.
  const markers = [...big.matchAll(/…(\d+) tokens truncated…/g)];
  assert.equal(markers.length, 1, `${markers.length} truncation markers in ${excerpt(big)}`);
  assert.equal(Number(markers[0][1]), parseUnifiedExec(serverText(out('cat-uexec-big'))).originalTokenCount - 10_000);
  assert.match(big, /\n100000\n$/);
  console.log(`${CATALOGUE_MODEL}: uexec's 10,000-token result as the model reads it: ${big.length} bytes, head ${JSON.stringify(big.slice(0, 300))}, around the cut ${JSON.stringify(big.slice(big.indexOf('truncated') - 200, big.indexOf('truncated') + 200))}`);
});
