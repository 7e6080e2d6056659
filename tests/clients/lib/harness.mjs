// Shared helpers of the real-client tests: where the uexec binary and the scratch space are, the token estimate a
// model is charged, and the Codex CLI's own parser of unified-exec output.
//
// crates/uexec/tests/real_clients.rs runs each `*.test.mjs` file with UEXEC_BIN (the binary of this build) and
// UEXEC_CLIENTS_TMP (a scratch directory under target/) set.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const CLIENTS_DIR = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

/**
 * The uexec binary under test (UEXEC_BIN), as an absolute path (a client starts it from another directory); fails
 * loudly when it is not set.
 */
export function uexecBin() {
  const bin = process.env.UEXEC_BIN;
  if (!bin || !fs.existsSync(bin)) {
    throw new Error(`UEXEC_BIN must name the uexec binary to test (got ${JSON.stringify(bin)})`);
  }
  return path.resolve(bin);
}

const scratchDirs = [];

/**
 * A fresh directory for one test, under UEXEC_CLIENTS_TMP (target/...) or the system temp directory, removed when the
 * process exits unless UEXEC_CLIENTS_KEEP is set.
 */
export function scratchDir(name) {
  const base = process.env.UEXEC_CLIENTS_TMP || fs.realpathSync(process.env.TMPDIR || '/tmp');
  fs.mkdirSync(base, { recursive: true });
  if (scratchDirs.length === 0 && !process.env.UEXEC_CLIENTS_KEEP) {
    process.on('exit', () => {
      for (const dir of scratchDirs) fs.rmSync(dir, { recursive: true, force: true });
    });
  }
  const dir = fs.mkdtempSync(path.join(base, `${name}-`));
  scratchDirs.push(dir);
  return dir;
}

/** What a model is charged for a text: ceil(UTF-8 bytes / 4), the estimate of uexec-domain and of the Codex CLI. */
export function tokens(text) {
  return Math.ceil(Buffer.byteLength(text, 'utf8') / 4);
}

// The Codex CLI's parser of unified-exec output (`parse_unified_exec_output` in its test suite): the shape every
// exec_command/write_stdin text must keep so that a Codex-trained model reads every field where it expects it.
const UNIFIED_EXEC_OUTPUT = new RegExp(
  '^(?:Warning: truncated output \\(original token count: \\d+\\)\\n)?' +
    '(?:Total output lines: \\d+\\n\\n)?' +
    '(?:Chunk ID: (?<chunk_id>[^\\n]+)\\n)?' +
    'Wall time: (?<wall_time>-?\\d+(?:\\.\\d+)?) seconds\\n' +
    '(?:Process exited with code (?<exit_code>-?\\d+)\\n)?' +
    '(?:Process running with session ID (?<session_id>-?\\d+)\\n)?' +
    '(?:Original token count: (?<original_token_count>\\d+)\\n)?' +
    'Output:\\n?(?<output>[\\s\\S]*)$',
);

/**
 * Parses a unified-exec text as the Codex CLI does; returns null when it does not parse (the Codex CLI's tests then
 * fail with "missing Output section").
 */
export function parseUnifiedExec(raw) {
  const cleaned = raw.replace(/^\r+|\r+$/g, '');
  const m = UNIFIED_EXEC_OUTPUT.exec(cleaned);
  if (!m) return null;
  const g = m.groups;
  return {
    chunkId: g.chunk_id ?? null,
    wallTimeSeconds: Number(g.wall_time),
    exitCode: g.exit_code === undefined ? null : Number(g.exit_code),
    sessionId: g.session_id === undefined ? null : Number(g.session_id),
    originalTokenCount: g.original_token_count === undefined ? null : Number(g.original_token_count),
    output: g.output,
  };
}

/** Milliseconds since `start` (a `performance.now()` value), rounded. */
export function since(start) {
  return Math.round(performance.now() - start);
}
