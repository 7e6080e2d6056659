// Runs the Codex CLI (`codex exec`, from the npm package @openai/codex) against a scripted model
// (lib/scripted_model.mjs), with uexec configured as its MCP server `uexec` the way README.md documents: shared by
// codex.test.mjs (behaviour and tokens) and compare.mjs (turnaround against the Codex CLI's own unified exec).

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { CLIENTS_DIR, parseUnifiedExec, scratchDir, uexecBin } from './harness.mjs';
import { serverText, startScriptedModel } from './scripted_model.mjs';

export const CODEX = path.join(CLIENTS_DIR, 'node_modules', '@openai', 'codex', 'bin', 'codex.js');
/** Where a scripted step names one of uexec's tools (the Codex CLI's namespace for the MCP server `uexec`). */
export const UEXEC = { namespace: 'mcp__uexec' };

// Commands run without a login shell: no profile script adds lines to one side of a comparison, and none makes a
// shell slow to start on a busy machine (a pyenv rehash waiting on its lock took 50 s here).
export const PLAIN = { login: false };

/** The session id a model reads from a tool output, whatever its form (Codex text or JSON). */
export function sessionIdOf(output) {
  const text = serverText(output);
  const parsed = parseUnifiedExec(text);
  if (parsed?.sessionId != null) return parsed.sessionId;
  const json = /"session_id"\s*:\s*(\d+)/.exec(text) ?? /session ID (\d+)/.exec(text);
  if (!json) throw new Error(`no session id in ${JSON.stringify(text).slice(0, 400)}`);
  return Number(json[1]);
}

function runCodex(args, env, timeoutMs) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CODEX, ...args], { cwd: env.WORKSPACE, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

function toml(value) {
  return JSON.stringify(value);
}

/**
 * Runs `codex exec` once against a scripted model playing `steps`, with uexec configured as the MCP server `uexec`;
 * `approve` adds the server setting README.md documents, `serverLines` more lines of that server's table. The Codex
 * CLI's own exec_command and write_stdin (its unified exec) are the ones it offers an unknown model slug by default,
 * under its `workspace-write` sandbox. Returns the run, the model and the workspace.
 */
export async function codexExec(name, steps, { approve, model = 'scripted-model', serverLines = [], timeoutMs = 240_000 }) {
  const scratch = scratchDir(name);
  const dir = path.join(scratch, 'workspace');
  const codexHome = path.join(scratch, 'codex-home');
  // The Codex CLI refuses to set up its own sandbox helper when CODEX_HOME lies under the temp directory: give it a
  // private one beside it.
  const tmp = path.join(scratch, 'tmp');
  for (const d of [dir, codexHome, tmp]) fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(path.join(dir, 'existing.txt'), 'old line\n');

  const scripted = await startScriptedModel(steps);
  fs.writeFileSync(
    path.join(codexHome, 'config.toml'),
    [
      `model = ${toml(model)}`,
      'model_provider = "scripted"',
      // Non-interactive: the Codex CLI has nobody to ask. uexec's own approval policy and sandbox gate its commands.
      'approval_policy = "never"',
      // The Codex CLI's sandbox for its own tools (the reference calls); not full access, which would skip its MCP
      // approval check altogether.
      'sandbox_mode = "workspace-write"',
      '',
      '[model_providers.scripted]',
      'name = "scripted model"',
      `base_url = ${toml(scripted.baseUrl)}`,
      'wire_api = "responses"',
      'request_max_retries = 0',
      'stream_max_retries = 0',
      '',
      '[mcp_servers.uexec]',
      `command = ${toml(uexecBin())}`,
      `args = ${toml(['mcp', '--cd', dir, '--client-timeout-secs', '330'])}`,
      ...(approve ? ['default_tools_approval_mode = "approve"'] : []),
      ...serverLines,
      'startup_timeout_sec = 60',
      'tool_timeout_sec = 330',
      '',
    ].join('\n'),
  );
  const env = { ...process.env, CODEX_HOME: codexHome, TMPDIR: tmp, WORKSPACE: dir };
  delete env.OPENAI_API_KEY;
  delete env.CODEX_API_KEY;
  // --strict-config: every setting used here, the documented ones included, must be one the Codex CLI knows.
  const result = await runCodex(
    ['exec', '--strict-config', '--skip-git-repo-check', '--ephemeral', '--json', '--color', 'never', 'Run the scripted commands.'],
    env,
    timeoutMs,
  );
  if (result.code !== 0 || process.env.UEXEC_CLIENTS_VERBOSE) {
    console.log(`codex exec exited with ${result.code} (${result.signal ?? 'no signal'})\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`);
  }
  await scripted.close();
  return { run: result, model: scripted, workspace: dir };
}
