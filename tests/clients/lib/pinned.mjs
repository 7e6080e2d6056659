// The dependencies of the package at `dir` whose installed version is not the one its package.json pins, each
// as `name@wanted (found X | not installed)`. Reads files only, so it runs under any node (Debian's too), before
// anything is installed: the check scripts of tests/clients and tests/conformance use it.

import fs from 'node:fs';
import path from 'node:path';

export function missingPins(dir) {
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
  return problems;
}
