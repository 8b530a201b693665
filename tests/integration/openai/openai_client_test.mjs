// The official OpenAI Node client (the version pinned in package-lock.json) against a real
// `bmas engine`. Usage: node openai_client_test.mjs [BMAS_BINARY]
// Starts the engine on a free port with the instant profile, runs every check, stops the
// engine, and exits non-zero when any check failed.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import OpenAI, { BadRequestError, NotFoundError } from 'openai';

const MODEL = 'meta-llama/Llama-3.1-8B-Instruct';
const binary = process.argv[2] || process.env.BMAS_BINARY;

// A prompt of exactly n tokens for the engine's tokenizer: " t0 t1 ..." is one token a word.
function promptOfTokens(n) {
  let p = '';
  for (let i = 0; i < n; i++) p += ` t${i % 1000}`;
  return p;
}

// Generated text is made of tokens " word" or ".".
function countTokens(text) {
  return (text.match(/ [^ .]*|\./g) || []).length;
}

function startEngine() {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ['engine', '--port', '0', '--profile', 'instant'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`bmas engine did not report a listening address in 10 s; stderr:\n${err}`));
    }, 10000);
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^bmas engine: listening on (http:\/\/127\.0\.0\.1:\d+)\n/m);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], stderr: () => err });
      }
    });
    proc.on('error', (e) => { clearTimeout(timer); reject(e); });
    proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`bmas engine exited (${code ?? signal}) before it was ready; stderr:\n${err}`));
    });
  });
}

function stopEngine(proc) {
  return new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      resolve({ code: proc.exitCode, signal: proc.signalCode });
      return;
    }
    const kill = setTimeout(() => proc.kill('SIGKILL'), 10000);
    proc.removeAllListeners('exit');
    proc.on('exit', (code, signal) => { clearTimeout(kill); resolve({ code, signal }); });
    proc.kill('SIGTERM');
  });
}

async function main() {
  if (!binary) throw new Error('give the bmas binary as the first argument or in BMAS_BINARY');
  if (!existsSync(binary)) throw new Error(`no bmas binary at ${binary}`);
  const engine = await startEngine();
  const client = new OpenAI({
    baseURL: `${engine.url}/v1`,
    apiKey: 'unused',
    maxRetries: 0,
    timeout: 20000,
  });

  const checks = [];
  const check = (name, fn) => checks.push([name, fn]);

  check('models.list() lists the served model', async () => {
    const ids = [];
    for await (const model of client.models.list()) {
      ids.push(model.id);
      if (model.id === MODEL) assert.equal(model.owned_by, 'bmas-simulated');
    }
    assert.deepEqual(ids, [MODEL]);
  });

  check('completions.create() returns max_tokens tokens with exact usage', async () => {
    const res = await client.completions.create({
      model: MODEL, prompt: promptOfTokens(12), max_tokens: 7,
    });
    assert.equal(res.object, 'text_completion');
    assert.equal(res.model, MODEL);
    assert.equal(res.choices.length, 1);
    assert.equal(res.choices[0].finish_reason, 'length');
    assert.equal(countTokens(res.choices[0].text), 7, res.choices[0].text);
    assert.equal(res.usage.prompt_tokens, 12);
    assert.equal(res.usage.completion_tokens, 7);
    assert.equal(res.usage.total_tokens, 19);
  });

  check('chat.completions.create() returns an assistant message with exact usage', async () => {
    const res = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hello' }],
      max_tokens: 5,
    });
    assert.equal(res.object, 'chat.completion');
    assert.equal(res.choices[0].message.role, 'assistant');
    assert.equal(countTokens(res.choices[0].message.content), 5, res.choices[0].message.content);
    assert.equal(res.choices[0].finish_reason, 'length');
    assert.ok(res.usage.prompt_tokens > 0);
    assert.equal(res.usage.completion_tokens, 5);
    assert.equal(res.usage.total_tokens, res.usage.prompt_tokens + 5);
  });

  check('chat streaming with include_usage: content chunks, then a usage chunk', async () => {
    const request = {
      model: MODEL,
      messages: [{ role: 'user', content: 'stream, please' }],
      max_tokens: 6,
    };
    const whole = await client.chat.completions.create(request);
    const stream = await client.chat.completions.create({
      ...request, stream: true, stream_options: { include_usage: true },
    });
    let content = '';
    let contentChunks = 0;
    let role = null;
    let finish = null;
    let usage = null;
    let chunksAfterUsage = 0;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (usage) chunksAfterUsage++;
      if (chunk.choices.length === 0) {
        usage = chunk.usage;
        continue;
      }
      const { delta } = chunk.choices[0];
      if (delta.role) role = role ?? delta.role;
      if (delta.content) {
        content += delta.content;
        contentChunks++;
      }
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
    assert.equal(role, 'assistant');
    assert.equal(contentChunks, 6);
    assert.equal(content, whole.choices[0].message.content);
    assert.equal(finish, 'length');
    assert.ok(usage, 'no usage chunk');
    assert.equal(usage.completion_tokens, 6);
    assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
    assert.equal(chunksAfterUsage, 0);
  });

  check('completions streaming assembles the same text', async () => {
    const request = { model: MODEL, prompt: promptOfTokens(5), max_tokens: 8 };
    const whole = await client.completions.create(request);
    const stream = await client.completions.create({ ...request, stream: true });
    let text = '';
    let chunks = 0;
    let finish = null;
    for await (const chunk of stream) {
      assert.equal(chunk.choices.length, 1);
      text += chunk.choices[0].text;
      chunks++;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      assert.ok(!chunk.usage, 'usage without include_usage');
    }
    assert.equal(chunks, 8);
    assert.equal(text, whole.choices[0].text);
    assert.equal(finish, 'length');
  });

  check('an unknown model raises NotFoundError (404)', async () => {
    await assert.rejects(
      client.completions.create({ model: 'no/such-model', prompt: 'hi', max_tokens: 2 }),
      (e) => e instanceof NotFoundError && e.status === 404,
    );
    await assert.rejects(
      client.chat.completions.create({
        model: 'no/such-model', messages: [{ role: 'user', content: 'hi' }],
      }),
      (e) => e instanceof NotFoundError && e.status === 404,
    );
  });

  check('an invalid field raises BadRequestError (400) naming it', async () => {
    await assert.rejects(
      client.completions.create({ model: MODEL, prompt: 'hi', max_tokens: 0 }),
      (e) => e instanceof BadRequestError && e.status === 400 && e.param === 'max_tokens',
    );
  });

  let failed = 0;
  try {
    for (const [name, fn] of checks) {
      try {
        await fn();
        console.log(`ok - ${name}`);
      } catch (e) {
        failed++;
        console.log(`not ok - ${name}\n  ${String(e.stack || e).replace(/\n/g, '\n  ')}`);
      }
    }
  } finally {
    const { code, signal } = await stopEngine(engine.proc);
    if (code !== 0) {
      failed++;
      console.log(`not ok - bmas engine stops with status 0 on SIGTERM: got ${code ?? signal}`);
      console.log(engine.stderr());
    } else {
      console.log('ok - bmas engine stops with status 0 on SIGTERM');
    }
  }
  console.log(`${checks.length + 1 - failed}/${checks.length + 1} checks passed`);
  return failed === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`openai_node_client: ${e.stack || e}`);
    process.exit(1);
  },
);
