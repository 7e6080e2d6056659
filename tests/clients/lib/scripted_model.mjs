// A scripted model for the Codex CLI: a local HTTP server speaking the OpenAI Responses API with SSE (POST
// /v1/responses), as the Codex CLI's own tests mock it (core/tests/common/responses.rs: `ev_response_created`,
// `ev_function_call`, `ev_assistant_message`, `ev_completed`). Each request is answered with the next function
// call of the script, chosen by how many tool outputs the conversation already holds, so a retried request gets
// the same answer; once the script is done the model says "done" and the turn ends. Every tool output the Codex
// CLI sends back, that is what the model reads, is recorded by call id, with the turnaround of the call: the time
// from the scripted model's answer holding the function call (the response written) to the arrival of the
// request holding its output.

import http from 'node:http';
import zlib from 'node:zlib';

function sseEvent(event) {
  return `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;
}

function decodeBody(buffer, encoding) {
  switch ((encoding || 'identity').toLowerCase()) {
    case 'identity':
      return buffer;
    case 'gzip':
      return zlib.gunzipSync(buffer);
    case 'deflate':
      return zlib.inflateSync(buffer);
    default:
      throw new Error(`request body with content-encoding ${encoding}: the scripted model cannot read it`);
  }
}

/**
 * Starts the scripted model. `script` is a list of steps `{ id, namespace, name, args }` where `args` is an object or
 * a function of the outputs recorded so far (a Map from call id to output) returning one.
 */
export async function startScriptedModel(script) {
  const outputs = new Map();
  const requests = [];
  const unexpected = [];
  const errors = [];
  // Call id -> performance.now() when the answer holding that function call was written / when the request
  // holding its output arrived (its headers; the body is read after).
  const calledAt = new Map();
  const turnaround = new Map();
  let responseCount = 0;

  const server = http.createServer((req, res) => {
    const arrived = performance.now();
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      if (req.method !== 'POST' || !req.url.endsWith('/responses')) {
        unexpected.push(`${req.method} ${req.url}`);
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'not served by the scripted model' } }));
        return;
      }
      let body;
      try {
        body = JSON.parse(decodeBody(Buffer.concat(chunks), req.headers['content-encoding']).toString('utf8'));
      } catch (e) {
        errors.push(String(e));
        res.writeHead(400);
        res.end();
        return;
      }
      requests.push(body);
      const input = Array.isArray(body.input) ? body.input : [];
      const toolOutputs = input.filter((item) => item.type === 'function_call_output');
      for (const item of toolOutputs) {
        if (!outputs.has(item.call_id) && calledAt.has(item.call_id)) {
          turnaround.set(item.call_id, arrived - calledAt.get(item.call_id));
        }
        outputs.set(item.call_id, item.output);
      }

      responseCount += 1;
      const id = `resp-${responseCount}`;
      const events = [{ type: 'response.created', response: { id } }];
      const step = script[toolOutputs.length];
      if (step) {
        let args;
        try {
          args = typeof step.args === 'function' ? step.args(outputs) : step.args;
        } catch (e) {
          errors.push(`step ${step.id}: ${e}`);
          args = null;
        }
        if (args) {
          const item = { type: 'function_call', call_id: step.id, name: step.name, arguments: JSON.stringify(args) };
          if (step.namespace) item.namespace = step.namespace;
          events.push({ type: 'response.output_item.done', item });
        }
      }
      if (events.length === 1) {
        events.push({
          type: 'response.output_item.done',
          item: { type: 'message', role: 'assistant', id: `msg-${responseCount}`, content: [{ type: 'output_text', text: 'done' }] },
        });
      }
      events.push({
        type: 'response.completed',
        response: {
          id,
          usage: { input_tokens: 0, input_tokens_details: null, output_tokens: 0, output_tokens_details: null, total_tokens: 0 },
        },
      });
      const called = events.find((event) => event.item?.type === 'function_call')?.item.call_id;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (called && !outputs.has(called)) calledAt.set(called, performance.now());
      res.end(events.map(sseEvent).join(''));
    });
  });

  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    outputs,
    /** Call id -> milliseconds from the function call written to its output arriving. */
    turnaround,
    requests,
    unexpected,
    errors,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/**
 * The text a model reads from one tool output as the Codex CLI sends it back: either a string, or a list of
 * `input_text` items (an MCP result: the Codex CLI's own "Wall time: ... Output:" line, then each content block).
 */
export function modelText(output) {
  if (typeof output === 'string') return output;
  if (Array.isArray(output)) {
    return output.map((item) => (typeof item.text === 'string' ? item.text : JSON.stringify(item))).join('\n');
  }
  return JSON.stringify(output);
}

/**
 * What uexec itself said in an MCP tool output, without the Codex CLI's wrapper line ("Wall time: X seconds\nOutput:").
 */
export function serverText(output) {
  if (Array.isArray(output)) {
    const texts = output.map((item) => (typeof item.text === 'string' ? item.text : JSON.stringify(item)));
    if (texts.length > 1 && /^Wall time: [\d.]+ seconds\nOutput:$/.test(texts[0])) return texts.slice(1).join('\n');
    return texts.join('\n');
  }
  const text = modelText(output);
  const m = /^Wall time: [\d.]+ seconds\nOutput:\n([\s\S]*)$/.exec(text);
  return m ? m[1] : text;
}
