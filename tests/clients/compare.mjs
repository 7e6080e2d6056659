// Turnaround and tokens through the Codex CLI: uexec's tools (over MCP) against the Codex CLI's own unified exec
// (its built-in exec_command and write_stdin), for the scenarios of codex.test.mjs plus a command that takes 2 s and
// a program that waits for input. One `codex exec` run, one scripted model (lib/scripted_model.mjs): for every round
// and every scenario the same calls go once through uexec and once through the Codex CLI's own tool, one right after
// the other, the side that goes first alternating from round to round. The turnaround of a call is what the model
// sees: from the scripted model's answer holding the function call to the request holding its output. The tokens
// are what the model reads of that output (lib/harness.mjs `tokens`, as codex.test.mjs counts them).
//
// A measurement, not a test: it prints a table (and a warning for any output that does not look like the command
// ran) and asserts nothing about time. BENCHMARKS.md has the figures and how to read them.
//
// Run: UEXEC_BIN=target/release/uexec node tests/clients/compare.mjs [--rounds N] [--model SLUG] [--json FILE]
//   --rounds N    rounds of every scenario both ways (default 5)
//   --model SLUG  the model name the Codex CLI is given (default scripted-model, an unknown slug, as in
//                 codex.test.mjs); a slug of the Codex CLI's catalogue (gpt-5.5) also gets
//                 `omit_tools_from = ["deferred"]`, so that uexec's tools are up front (README.md)
//   --json FILE   also write every measured call as JSON

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { CODEX, codexExec, PLAIN, sessionIdOf, UEXEC } from './lib/codex.mjs';
import { tokens, uexecBin } from './lib/harness.mjs';
import { modelText } from './lib/scripted_model.mjs';

const CATALOGUE = new Set(['gpt-5.5']);

// Each scenario is a list of calls made the same way on both sides. `args` is an object or a function of the
// outputs so far and of `idOf(i)`, the call id of the scenario's call i on the same side and round. A call with
// `row` is measured under that name; one without (the REPL's exit) only tidies up. `expect` is matched against the
// text the model reads, for the warning that a call did not do what the scenario needs.
const READ = "read -p 'name? ' x; echo hi $x";
const SCENARIOS = [
  { calls: [{ row: 'echo hi', name: 'exec_command', args: { cmd: 'echo hi', ...PLAIN }, expect: /(^|\n)hi\r?\n/ }] },
  { calls: [{ row: 'seq 1 200', name: 'exec_command', args: { cmd: 'seq 1 200', ...PLAIN }, expect: /\n200\r?\n/ }] },
  {
    calls: [
      {
        row: 'python3 -i: start',
        name: 'exec_command',
        args: { cmd: 'python3 -i', tty: true, yield_time_ms: 10000, ...PLAIN },
        expect: /session ID \d+|"session_id"\s*:\s*\d+/,
      },
      {
        row: 'python3 -i: write_stdin 1+1',
        name: 'write_stdin',
        args: (outputs, idOf) => ({ session_id: sessionIdOf(outputs.get(idOf(0))), chars: '1+1\n', yield_time_ms: 10000 }),
        expect: /(^|\n)2\r?\n/,
      },
      {
        name: 'write_stdin',
        args: (outputs, idOf) => ({ session_id: sessionIdOf(outputs.get(idOf(0))), chars: 'exit()\n' }),
      },
    ],
  },
  {
    calls: [
      {
        row: 'seq 1 100000, max_output_tokens 100',
        name: 'exec_command',
        args: { cmd: 'seq 1 100000', max_output_tokens: 100, ...PLAIN },
        expect: /truncated/,
      },
    ],
  },
  {
    calls: [{ row: 'sleep 2; echo done', name: 'exec_command', args: { cmd: 'sleep 2; echo done', ...PLAIN }, expect: /(^|\n)done\r?\n/ }],
  },
  {
    calls: [
      {
        row: `${READ}: start`,
        name: 'exec_command',
        args: { cmd: READ, tty: true, shell: '/bin/bash', ...PLAIN },
        expect: /name\? /,
      },
      {
        row: `${READ}: write_stdin answer`,
        name: 'write_stdin',
        args: (outputs, idOf) => ({ session_id: sessionIdOf(outputs.get(idOf(0))), chars: 'you\n' }),
        expect: /hi you/,
      },
    ],
  },
];

const SIDES = { uexec: UEXEC, codex: {} };

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** A ratio to two significant digits (0.0031x, 0.16x, 1.2x). */
function ratio(r) {
  return `${Number(r.toPrecision(2))}x`;
}

function seconds(ms) {
  return (ms / 1000).toFixed(2);
}

/** The script: a warm-up call each way, then every round of every scenario both ways. */
function buildScript(rounds) {
  const steps = [
    { id: 'warmup-uexec', ...UEXEC, name: 'exec_command', args: { cmd: 'true', ...PLAIN } },
    { id: 'warmup-codex', name: 'exec_command', args: { cmd: 'true', ...PLAIN } },
  ];
  const measured = [];
  for (let round = 0; round < rounds; round += 1) {
    SCENARIOS.forEach((scenario, s) => {
      const order = round % 2 === 0 ? ['uexec', 'codex'] : ['codex', 'uexec'];
      for (const side of order) {
        const idOf = (i) => `r${round}-s${s}-${side}-c${i}`;
        scenario.calls.forEach((call, i) => {
          const args = typeof call.args === 'function' ? (outputs) => call.args(outputs, idOf) : call.args;
          steps.push({ id: idOf(i), ...SIDES[side], name: call.name, args });
          if (call.row) measured.push({ id: idOf(i), round, side, row: call.row, expect: call.expect });
        });
      }
    });
  }
  return { steps, measured };
}

async function main() {
  const { values } = parseArgs({
    options: {
      rounds: { type: 'string', default: '5' },
      model: { type: 'string', default: 'scripted-model' },
      json: { type: 'string' },
    },
  });
  const rounds = Number(values.rounds);
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds wants a positive integer, got ${values.rounds}`);
  const bin = uexecBin();
  const codexVersion = JSON.parse(fs.readFileSync(path.join(path.dirname(path.dirname(CODEX)), 'package.json'), 'utf8')).version;
  const loadBefore = os.loadavg();
  const started = new Date();
  console.log(`${started.toISOString()}: ${rounds} rounds, Codex CLI ${codexVersion}, model ${values.model}, uexec ${bin}`);
  console.log(`load average before: ${loadBefore.map((l) => l.toFixed(2)).join(' ')} (${os.cpus().length} CPUs)`);

  const { steps, measured } = buildScript(rounds);
  const serverLines = CATALOGUE.has(values.model) ? ['omit_tools_from = ["deferred"]'] : [];
  const { run, model } = await codexExec('compare', steps, {
    approve: true,
    model: values.model,
    serverLines,
    timeoutMs: 120_000 + rounds * 180_000,
  });
  const loadAfter = os.loadavg();
  if (run.code !== 0) console.log(`WARNING: codex exec exited with ${run.code} (${run.signal ?? 'no signal'})`);
  if (model.errors.length > 0) console.log(`WARNING: scripted model errors: ${model.errors.join('; ')}`);

  const calls = [];
  for (const m of measured) {
    const output = model.outputs.get(m.id);
    if (output === undefined) {
      console.log(`WARNING: no output for ${m.id} (${m.side}, ${m.row})`);
      continue;
    }
    const text = modelText(output);
    if (m.expect && !m.expect.test(text)) {
      console.log(`WARNING: ${m.side}, ${m.row}, round ${m.round}: the output does not match ${m.expect}: ${JSON.stringify(text).slice(0, 300)}`);
    }
    calls.push({ id: m.id, round: m.round, side: m.side, row: m.row, ms: model.turnaround.get(m.id), tokens: tokens(text), text });
  }

  const rows = [...new Set(measured.map((m) => m.row))];
  const lines = [
    '| scenario (one tool call) | uexec median / min (s) | Codex built-in median / min (s) | uexec / Codex (median) | tokens uexec / Codex |',
    '|---|---|---|---|---|',
  ];
  for (const row of rows) {
    const of = (side) => calls.filter((c) => c.row === row && c.side === side && c.ms !== undefined);
    const [u, c] = [of('uexec'), of('codex')];
    if (u.length === 0 || c.length === 0) {
      lines.push(`| \`${row}\` | ${u.length} calls | ${c.length} calls | - | - |`);
      continue;
    }
    const [um, cm] = [median(u.map((x) => x.ms)), median(c.map((x) => x.ms))];
    const [umin, cmin] = [Math.min(...u.map((x) => x.ms)), Math.min(...c.map((x) => x.ms))];
    const [ut, ct] = [median(u.map((x) => x.tokens)), median(c.map((x) => x.tokens))];
    lines.push(`| \`${row}\` | ${seconds(um)} / ${seconds(umin)} | ${seconds(cm)} / ${seconds(cmin)} | ${ratio(um / cm)} | ${ut} / ${ct} |`);
  }
  console.log(`load average after: ${loadAfter.map((l) => l.toFixed(2)).join(' ')}`);
  console.log(`${calls.length} calls measured of ${measured.length}, ${rounds} rounds\n`);
  console.log(lines.join('\n'));
  if (values.json) {
    fs.writeFileSync(
      values.json,
      `${JSON.stringify({ started: started.toISOString(), rounds, model: values.model, codexVersion, loadBefore, loadAfter, calls }, null, 2)}\n`,
    );
  }
  if (calls.length < measured.length) process.exitCode = 1;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
