// A scripted model for Claude Code: a local HTTP server speaking the Anthropic Messages API (POST /v1/messages,
// streamed as SSE or not). Requests of the main agent loop (those offering the Bash tool) are answered with the next
// tool call of the script, chosen by how many tool results the conversation already holds; every other request
// (titles, summaries, ...) and the end of the script get a plain "done". Every tool result Claude Code sends back,
// that is what the model reads, is recorded by tool_use id.

import http from 'node:http';

function sse(events) {
  return events.map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`).join('');
}

/** Starts the scripted model; `script` is a list of `{ id, name, input }` where `input` may be a function of the results. */
export async function startScriptedMessages(script) {
  const results = new Map();
  const errors = [];
  let count = 0;

  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      if (req.method !== 'POST' || !req.url.startsWith('/v1/messages') || req.url.startsWith('/v1/messages/count_tokens')) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: 'not scripted' } }));
        return;
      }
      let body = {};
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch (e) {
        errors.push(String(e));
      }
      count += 1;
      const blocks = (body.messages ?? []).flatMap((m) => (Array.isArray(m.content) ? m.content : []));
      const toolResults = blocks.filter((b) => b.type === 'tool_result');
      for (const b of toolResults) results.set(b.tool_use_id, b.content);
      const mainLoop = (body.tools ?? []).some((t) => t.name === 'Bash');
      const step = mainLoop ? script[toolResults.length] : undefined;
      let content = [{ type: 'text', text: 'done' }];
      if (step) {
        try {
          const input = typeof step.input === 'function' ? step.input(results) : step.input;
          content = [{ type: 'tool_use', id: step.id, name: step.name, input }];
        } catch (e) {
          errors.push(`step ${step.id}: ${e}`);
        }
      }
      const stopReason = content[0].type === 'tool_use' ? 'tool_use' : 'end_turn';
      const usage = { input_tokens: 1, output_tokens: 1 };
      const message = { id: `msg_${count}`, type: 'message', role: 'assistant', model: body.model };
      if (!body.stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ...message, content, stop_reason: stopReason, stop_sequence: null, usage }));
        return;
      }
      const events = [{ type: 'message_start', message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage } }];
      content.forEach((block, index) => {
        if (block.type === 'text') {
          events.push({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
          events.push({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: block.text } });
        } else {
          events.push({ type: 'content_block_start', index, content_block: { ...block, input: {} } });
          events.push({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } });
        }
        events.push({ type: 'content_block_stop', index });
      });
      events.push({ type: 'message_delta', delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: 1 } });
      events.push({ type: 'message_stop' });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(sse(events));
    });
  });

  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseUrl: `http://127.0.0.1:${server.address().port}`,
    results,
    errors,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** The text a model reads from one tool result: a string, or the text of its content blocks. */
export function resultText(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((b) => (typeof b.text === 'string' ? b.text : JSON.stringify(b))).join('\n');
  return JSON.stringify(content);
}
