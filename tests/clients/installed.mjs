// Exits 0 when node_modules holds every client pinned in package.json at its pinned version, else 1 with what is
// missing and how to install it. Used by .ci/run (install only when needed) and by crates/uexec/tests/real_clients.rs.

import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { missingPins } from './lib/pinned.mjs';

const problems = missingPins(path.dirname(fileURLToPath(import.meta.url)));
if (problems.length > 0) {
  console.error(
    `tests/clients/node_modules lacks ${problems.join(', ')}: install the real MCP clients with ` +
      '`npm install --prefix tests/clients --no-audit --no-fund` (.ci/run does it)',
  );
  process.exit(1);
}
