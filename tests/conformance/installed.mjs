// Exits 0 when node_modules holds the conformance suite and the Node pinned in package.json at their pinned
// versions, else 1 with what is missing and how to install it. Used by .ci/run (install only when needed) and by
// crates/uexec/tests/conformance.rs. Runs under any node (Debian's too): it only reads files.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = path.dirname(fileURLToPath(import.meta.url));
const { dependencies } = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
const problems = [];
for (const [name, wanted] of Object.entries(dependencies)) {
  const manifest = path.join(dir, 'node_modules', name, 'package.json');
  let found = null;
  try {
    found = JSON.parse(fs.readFileSync(manifest, 'utf8')).version;
  } catch {
    // Not installed.
  }
  if (found !== wanted) problems.push(`${name}@${wanted} (${found ? `found ${found}` : 'not installed'})`);
}
if (problems.length > 0) {
  console.error(
    `tests/conformance/node_modules lacks ${problems.join(', ')}: install the MCP conformance suite with ` +
      '`npm ci --prefix tests/conformance --no-audit --no-fund` (.ci/run does it)',
  );
  process.exit(1);
}
