// Exits 0 when node_modules holds the conformance suite and the Node pinned in package.json at their pinned
// versions, else 1 with what is missing and how to install it. Used by .ci/run (install only when needed) and by
// crates/uexec/tests/conformance.rs. Runs under any node (Debian's too): it only reads files.

import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { missingPins } from '../clients/lib/pinned.mjs';

const problems = missingPins(path.dirname(fileURLToPath(import.meta.url)));
if (problems.length > 0) {
  console.error(
    `tests/conformance/node_modules lacks ${problems.join(', ')}: install the MCP conformance suite with ` +
      '`npm ci --prefix tests/conformance --no-audit --no-fund` (.ci/run does it)',
  );
  process.exit(1);
}
