// The official OpenAI Node client (the version pinned in package-lock.json) against a real
// `bmas gateway` in front of a real `bmas engine`. Usage: node openai_gateway_test.mjs [BMAS_BINARY]
// Starts an engine (instant profile) and a gateway on free ports with a fresh state dir, makes
// users and keys with the bmas CLI, runs every check, stops both, and exits non-zero when any
// check failed.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { AuthenticationError, NotFoundError, RateLimitError } from 'openai';

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

// Starts `bmas COMMAND --port 0 ARGS...` and resolves once it prints its listening address.
function startServer(command, args, env) {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, [command, '--port', '0', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env,
    });
    let out = '';
    let err = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`bmas ${command} did not report a listening address in 10 s; stderr:\n${err}`));
    }, 10000);
    proc.stderr.on('data', (d) => { err += d; });
    const line = new RegExp(`^bmas ${command}: listening on (http://127\\.0\\.0\\.1:\\d+)\\n`, 'm');
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(line);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], stderr: () => err });
      }
    });
    proc.on('error', (e) => { clearTimeout(timer); reject(e); });
    proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`bmas ${command} exited (${code ?? signal}) before it was ready; stderr:\n${err}`));
    });
  });
}

function stopServer(proc) {
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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The value of an engine's series `name` for MODEL in its /metrics, or -1 when absent.
async function engineMetric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name}{`) && line.includes(`model_name="${MODEL}"`)) {
      return Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return -1;
}

// Resolves once the gateway lists MODEL (its backend passed a health check), or throws.
async function waitForModel(url, key) {
  const until = Date.now() + 10000;
  let last = '';
  while (Date.now() < until) {
    try {
      const res = await fetch(`${url}/v1/models`, { headers: { Authorization: `Bearer ${key}` } });
      last = await res.text();
      if (res.ok && JSON.parse(last).data.some((m) => m.id === MODEL)) return;
    } catch (e) {
      last = String(e);
    }
    await sleep(20);
  }
  throw new Error(`the gateway did not list ${MODEL} within 10 s: ${last}`);
}

async function main() {
  if (!binary) throw new Error('give the bmas binary as the first argument or in BMAS_BINARY');
  if (!existsSync(binary)) throw new Error(`no bmas binary at ${binary}`);
  const stateDir = mkdtempSync(join(tmpdir(), 'bmas-node-gateway-'));
  const env = { ...process.env, BMAS_STATE_DIR: join(stateDir, 'state') };
  const bmas = (...args) => execFileSync(binary, args, { env, encoding: 'utf8' });

  const servers = [];
  let failed = 0;
  let total = 0;
  try {
    // The store is made before the gateway opens it; users exist before it reads them.
    bmas('user', 'add', 'alice');
    const key = bmas('key', 'create', 'alice').trim();
    bmas('user', 'add', 'limited', '--rpm', '1');
    const limitedKey = bmas('key', 'create', 'limited').trim();
    assert.match(key, /^sk-bmas-/);

    const engine = await startServer('engine', ['--profile', 'instant'], process.env);
    servers.push(['engine', engine]);
    const gateway = await startServer('gateway', ['--backend', engine.url], env);
    servers.push(['gateway', gateway]);
    await waitForModel(gateway.url, key);

    const clientWith = (apiKey) => new OpenAI({
      baseURL: `${gateway.url}/v1`, apiKey, maxRetries: 0, timeout: 20000,
    });
    const client = clientWith(key);

    const checks = [];
    const check = (name, fn) => checks.push([name, fn]);

    check('models.list() through the gateway lists the backend\'s model', async () => {
      const ids = [];
      for await (const model of client.models.list()) ids.push(model.id);
      assert.deepEqual(ids, [MODEL]);
    });

    check('completions.create() through the gateway has exact usage', async () => {
      const res = await client.completions.create({
        model: MODEL, prompt: promptOfTokens(12), max_tokens: 7,
      });
      assert.equal(res.object, 'text_completion');
      assert.equal(res.model, MODEL);
      assert.equal(res.choices[0].finish_reason, 'length');
      assert.equal(countTokens(res.choices[0].text), 7, res.choices[0].text);
      assert.equal(res.usage.prompt_tokens, 12);
      assert.equal(res.usage.completion_tokens, 7);
      assert.equal(res.usage.total_tokens, 19);
    });

    check('chat streaming through the gateway: usage chunk only with include_usage', async () => {
      const request = {
        model: MODEL,
        messages: [{ role: 'user', content: 'stream, please' }],
        max_tokens: 6,
      };
      const whole = await client.chat.completions.create(request);
      for (const includeUsage of [false, true]) {
        const stream = await client.chat.completions.create({
          ...request,
          stream: true,
          ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
        });
        let content = '';
        let contentChunks = 0;
        let finish = null;
        let usage = null;
        for await (const chunk of stream) {
          assert.equal(chunk.object, 'chat.completion.chunk');
          if (chunk.usage) usage = chunk.usage;
          if (chunk.choices.length === 0) continue;
          const { delta } = chunk.choices[0];
          if (delta.content) {
            content += delta.content;
            contentChunks++;
          }
          if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
        }
        assert.equal(contentChunks, 6);
        assert.equal(content, whole.choices[0].message.content);
        assert.equal(finish, 'length');
        if (includeUsage) {
          assert.ok(usage, 'no usage chunk though include_usage was set');
          assert.equal(usage.completion_tokens, 6);
          assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
        } else {
          assert.equal(usage, null, 'a usage chunk the client did not ask for');
        }
      }
    });

    check('completions streaming through the gateway assembles the same text', async () => {
      const request = { model: MODEL, prompt: promptOfTokens(5), max_tokens: 8 };
      const whole = await client.completions.create(request);
      const stream = await client.completions.create({ ...request, stream: true });
      let text = '';
      let chunks = 0;
      for await (const chunk of stream) {
        text += chunk.choices[0].text;
        chunks++;
      }
      assert.equal(chunks, 8);
      assert.equal(text, whole.choices[0].text);
    });

    check('responses.create() through the gateway, whole and streamed, with usage', async () => {
      // No max_output_tokens: the answer runs to the engine's default length, its natural end.
      const request = { model: MODEL, instructions: 'Answer briefly.', input: 'Why cache prompts?' };
      const whole = await client.responses.create(request);
      assert.match(whole.id, /^resp_/);
      assert.equal(whole.object, 'response');
      assert.equal(whole.status, 'completed');
      assert.equal(whole.model, MODEL);
      assert.equal(whole.output[0].type, 'message');
      assert.equal(whole.output[0].role, 'assistant');
      assert.equal(whole.output[0].content[0].text, whole.output_text);
      assert.ok(whole.usage.output_tokens > 0);
      assert.equal(countTokens(whole.output_text), whole.usage.output_tokens, whole.output_text);
      assert.ok(whole.usage.input_tokens > 0);
      assert.equal(whole.usage.total_tokens, whole.usage.input_tokens + whole.usage.output_tokens);
      // The same conversation as a message list: the same prompt, so the same answer.
      const asMessages = await client.responses.create({
        ...request,
        input: [{ role: 'user', content: [{ type: 'input_text', text: request.input }] }],
      });
      assert.equal(asMessages.output_text, whole.output_text);
      assert.equal(asMessages.usage.input_tokens, whole.usage.input_tokens);

      const stream = await client.responses.create({ ...request, stream: true });
      const types = [];
      let text = '';
      let completed = null;
      let sequence = 0;
      for await (const event of stream) {
        assert.equal(event.sequence_number, sequence++);
        types.push(event.type);
        if (event.type === 'response.output_text.delta') text += event.delta;
        if (event.type === 'response.completed') completed = event.response;
      }
      assert.equal(types[0], 'response.created');
      assert.equal(types.filter((t) => t === 'response.output_text.delta').length,
        whole.usage.output_tokens);
      assert.equal(types.at(-1), 'response.completed');
      assert.equal(text, whole.output_text);
      assert.ok(completed, 'no response.completed event');
      assert.equal(completed.status, 'completed');
      assert.equal(completed.output[0].content[0].text, text);
      // The same counts (cached_tokens differ: the stream's prompt hits the prefix cache).
      for (const n of ['input_tokens', 'output_tokens', 'total_tokens']) {
        assert.equal(completed.usage[n], whole.usage[n], n);
      }
    });

    check('responses.create() cut at max_output_tokens is incomplete', async () => {
      const res = await client.responses.create({ model: MODEL, input: 'hi', max_output_tokens: 5 });
      assert.equal(res.status, 'incomplete');
      assert.equal(res.incomplete_details.reason, 'max_output_tokens');
      assert.equal(res.usage.output_tokens, 5);
      assert.equal(countTokens(res.output_text), 5, res.output_text);
    });

    check('a wrong key raises AuthenticationError (401)', async () => {
      const wrong = clientWith('sk-bmas-000000000000-000000000000000000000000000000000000000000000000');
      await assert.rejects(
        wrong.completions.create({ model: MODEL, prompt: 'hi', max_tokens: 2 }),
        (e) => e instanceof AuthenticationError && e.status === 401,
      );
    });

    check('an unknown model raises NotFoundError (404)', async () => {
      await assert.rejects(
        client.completions.create({ model: 'no/such-model', prompt: 'hi', max_tokens: 2 }),
        (e) => e instanceof NotFoundError && e.status === 404 && e.param === 'model',
      );
    });

    check('a second request within a minute at --rpm 1 raises RateLimitError (429)', async () => {
      const limited = clientWith(limitedKey);
      const request = { model: MODEL, prompt: 'limited', max_tokens: 2 };
      const first = await limited.completions.create(request);
      assert.equal(first.usage.completion_tokens, 2);
      await assert.rejects(limited.completions.create(request), (e) => {
        assert.ok(e instanceof RateLimitError, `not a RateLimitError: ${e}`);
        assert.equal(e.status, 429);
        assert.match(e.message, /rpm/);
        assert.ok(Number(e.headers['retry-after']) > 0, `Retry-After: ${e.headers['retry-after']}`);
        return true;
      });
    });

    // Two replicas behind their own gateway; the check stops (SIGTERM, as Slurm preempts) the
    // one serving the stream after a few chunks, and the gateway resumes it on the other.
    const replica = ['--profile', 'llama-3.1-8b-h100', '--shutdown-timeout', '0'];
    async function streamCutMidway(create, textOf) {
      const replicas = [];
      let replicaGateway = null;
      try {
        for (let i = 0; i < 2; i++) replicas.push(await startServer('engine', replica, process.env));
        replicaGateway = await startServer(
          'gateway', replicas.flatMap((e) => ['--backend', e.url]), env);
        await waitForModel(replicaGateway.url, key);
        const resumed = new OpenAI({
          baseURL: `${replicaGateway.url}/v1`, apiKey: key, maxRetries: 0, timeout: 20000,
        });
        const stream = await create(resumed);
        const got = { texts: 0, ids: new Set(), usage: null, finish: null, stopped: null };
        for await (const chunk of stream) {
          got.ids.add(chunk.id);
          if (chunk.usage) got.usage = chunk.usage;
          if (chunk.choices.length === 0) continue;
          if (textOf(chunk.choices[0])) got.texts++;
          if (chunk.choices[0].finish_reason) got.finish = chunk.choices[0].finish_reason;
          if (got.texts === 4 && got.stopped === null) {
            const running = [];
            for (const e of replicas) running.push(await engineMetric(e.url, 'vllm:num_requests_running'));
            const serving = running.indexOf(1);
            assert.ok(serving >= 0 && running.lastIndexOf(1) === serving,
              `not one replica runs the stream: ${running}`);
            got.stopped = await stopServer(replicas[serving].proc);
          }
        }
        assert.ok(got.stopped, 'the stream ended before its replica was stopped');
        return got;
      } finally {
        if (replicaGateway) await stopServer(replicaGateway.proc);
        for (const e of replicas) await stopServer(e.proc);
      }
    }

    check('a chat stream whose replica is stopped midway reaches the client as one stream',
      async () => {
        const got = await streamCutMidway(
          (c) => c.chat.completions.create({
            model: MODEL,
            messages: [{ role: 'user', content: 'tell me a long story' }],
            max_tokens: 60,
            stream: true,
            stream_options: { include_usage: true },
          }),
          (choice) => choice.delta.content,
        );
        assert.equal(got.texts, 60, 'every token asked for');
        assert.equal(got.finish, 'length');
        assert.equal(got.ids.size, 1, `ids: ${[...got.ids]}`);
        assert.ok(got.usage, 'no usage chunk though include_usage was set');
        assert.equal(got.usage.completion_tokens, got.texts);
        assert.equal(got.usage.total_tokens, got.usage.prompt_tokens + got.usage.completion_tokens);
      });

    check('a completion stream whose replica is stopped midway reaches the client as one stream',
      async () => {
        const got = await streamCutMidway(
          (c) => c.completions.create({
            model: MODEL,
            prompt: promptOfTokens(8),
            max_tokens: 60,
            stream: true,
            stream_options: { include_usage: true },
          }),
          (choice) => choice.text,
        );
        assert.equal(got.texts, 60, 'every token asked for');
        assert.equal(got.finish, 'length');
        assert.equal(got.ids.size, 1, `ids: ${[...got.ids]}`);
        assert.ok(got.usage, 'no usage chunk though include_usage was set');
        // The prompt the client sent (8 tokens), as the gateway reckons it from the resumed
        // prompt less the text so far; that re-tokenisation may differ by a token or two (as
        // in gateway_test.cc's ResumeTest).
        assert.ok(Math.abs(got.usage.prompt_tokens - 8) <= 2, `prompt_tokens ${got.usage.prompt_tokens}`);
        assert.equal(got.usage.completion_tokens, got.texts);
      });

    total = checks.length;
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
    for (const [name, server] of servers.reverse()) {
      total++;
      const { code, signal } = await stopServer(server.proc);
      if (code !== 0) {
        failed++;
        console.log(`not ok - bmas ${name} stops with status 0 on SIGTERM: got ${code ?? signal}`);
        console.log(server.stderr());
      } else {
        console.log(`ok - bmas ${name} stops with status 0 on SIGTERM`);
      }
    }
    rmSync(stateDir, { recursive: true, force: true });
  }
  console.log(`${total - failed}/${total} checks passed`);
  return failed === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`openai_node_gateway: ${e.stack || e}`);
    process.exit(1);
  },
);
