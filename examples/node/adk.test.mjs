// Google ADK for JavaScript (@google/adk, pinned in package.json) driving
// agentplane end to end, offline: a full LlmAgent + InMemoryRunner loop
// whose model is scripted (a BaseLlm that answers each turn with the next
// planned function call, reading the previous function response), with
//   1. AgentplaneAdkEnvironment (adk-environment.mjs), a BaseEnvironment,
//      as the agent's tools;
//   2. ADK's MCPToolset on `agentsh mcp --all`, which opens one MCP
//      connection (one server process over stdio) per tool call: sessions
//      must outlive each connection.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BaseLlm, InMemoryRunner, LlmAgent, MCPToolset } from '@google/adk';

import { AgentplaneAdkEnvironment, environmentTools } from './adk-environment.mjs';
import { program } from './environment.mjs';
import { geminiProblems } from './gemini-rules.mjs';

/**
 * A model that plays a script: each step is a function of the last
 * function response (or undefined) returning the next call {name, args},
 * or {text} to end the turn. It records every response and the function
 * declarations ADK offered it.
 */
class ScriptedLlm extends BaseLlm {
  constructor(steps) {
    super({ model: 'scripted' });
    this.steps = steps;
    this.responses = [];
    this.declarations = [];
  }

  async *generateContentAsync(llmRequest) {
    this.declarations = (llmRequest.config?.tools ?? []).flatMap((t) => t.functionDeclarations ?? []);
    const last = llmRequest.contents.at(-1);
    const fr = last?.parts?.find((p) => p.functionResponse)?.functionResponse;
    if (fr) this.responses.push(fr);
    const step = this.steps[this.responses.length];
    const next = step ? step(fr?.response) : { text: 'out of script' };
    if (next.text !== undefined) {
      yield { content: { role: 'model', parts: [{ text: next.text }] }, turnComplete: true };
      return;
    }
    yield {
      content: { role: 'model', parts: [{ functionCall: { id: `call-${this.responses.length}`, name: next.name, args: next.args } }] },
      turnComplete: true,
    };
  }

  async connect() { throw new Error('the scripted model has no live mode'); }
}

async function runAgent(model, tools, prompt = 'go') {
  const agent = new LlmAgent({ name: 'agentplane_test', model, instruction: 'Use the tools.', tools });
  const runner = new InMemoryRunner({ agent, appName: 'agentplane' });
  let final;
  for await (const event of runner.runEphemeral({ userId: 'u', newMessage: { role: 'user', parts: [{ text: prompt }] } })) {
    const text = event.content?.parts?.find((p) => p.text)?.text;
    if (text) final = text;
  }
  return final;
}

/** Live processes whose command line contains marker (zombies excluded). */
function processesMatching(marker) {
  const out = [];
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker)) out.push(pid);
    } catch { /* gone meanwhile */ }
  }
  return out;
}

describe('ADK LlmAgent with AgentplaneAdkEnvironment', () => {
  let dir;
  let env;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'adk-env-'));
    env = new AgentplaneAdkEnvironment({ workingDir: path.join(dir, 'work') });
    await env.initialize();
  });
  after(async () => {
    await env.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('a scripted agent runs commands, hits a timeout and round-trips a BOM', async () => {
    const marker = `sleep ${6000 + (process.pid % 1000)}`;
    const model = new ScriptedLlm([
      () => ({ name: 'execute_command', args: { command: 'echo hi; echo oops >&2; exit 3', timeout_seconds: 30 } }),
      (r) => {
        assert.deepEqual(r, { exit_code: 3, stdout: 'hi\n', stderr: 'oops\n', timed_out: false });
        return { name: 'execute_command', args: { command: `echo before; (${marker} &); ${marker}`, timeout_seconds: 1 } };
      },
      (r) => {
        // The whole tree is stopped, the output so far kept: not -9 with
        // processes left running.
        assert.equal(r.timed_out, true);
        assert.equal(r.exit_code, 124);
        assert.equal(r.stdout, 'before\n');
        assert.deepEqual(processesMatching(marker), []);
        return { name: 'write_file', args: { path: 'bom.txt', content: '\uFEFFhello\n' } };
      },
      () => ({ name: 'read_file', args: { path: 'bom.txt' } }),
      (r) => {
        assert.equal(r.content, '\uFEFFhello\n');
        return { name: 'read_file', args: { path: 'missing.txt' } };
      },
      (r) => {
        assert.equal(r.code, 'file_not_found');
        return { text: 'done' };
      },
    ]);
    assert.equal(await runAgent(model, environmentTools(env)), 'done');
    assert.equal(model.responses.length, 5);
    assert.deepEqual([...await readFile(path.join(env.workingDir, 'bom.txt'))].slice(0, 3), [0xef, 0xbb, 0xbf]);
    for (const d of model.declarations) assert.deepEqual(geminiProblems(d.name, d.parameters), []);
  });

  test('the BaseEnvironment contract: initialized flag, readFile bytes', async () => {
    assert.equal(env.isInitialized, true);
    await writeFile(path.join(env.workingDir, 'raw.bin'), Buffer.from([0, 1, 2, 255]));
    assert.deepEqual([...await env.readFile('raw.bin')], [0, 1, 2, 255]);
    const r = await env.execute('pwd');
    assert.equal(r.stdout.trim(), env.workingDir);
  });
});

describe('ADK MCPToolset on agentsh mcp --all (one connection per call)', () => {
  let dir;
  before(async () => { dir = await mkdtemp(path.join(tmpdir(), 'adk-mcp-')); });
  after(async () => {
    // Stop whatever sessions the script left (none, when it passes).
    const { execFileSync } = await import('node:child_process');
    const list = JSON.parse(execFileSync(program('agentsh'), ['session', 'list', '--state-dir', path.join(dir, 'state')], { encoding: 'utf8' }));
    for (const s of list.sessions ?? []) execFileSync(program('agentsh'), ['session', 'stop', '--state-dir', path.join(dir, 'state'), s.session]);
    await rm(dir, { recursive: true, force: true });
  });

  test('sessions, failures as results, edits and declarations Gemini accepts', async () => {
    const work = path.join(dir, 'work');
    await import('node:fs/promises').then((fs) => fs.mkdir(work, { recursive: true }));
    await writeFile(path.join(work, 'app.py'), 'def f():\n\tif x:\n\t\treturn 1\n');
    const toolset = new MCPToolset({
      type: 'StdioConnectionParams',
      serverParams: { command: program('agentsh'), args: ['mcp', '--all', '--state-dir', path.join(dir, 'state')], cwd: work, env: { ...process.env } },
      timeout: 60000,
    });
    const sc = (r) => r.structuredContent;
    let session;
    const model = new ScriptedLlm([
      () => ({ name: 'agentsh_session_start', args: { cwd: work } }),
      (r) => {
        assert.equal(r.isError ?? false, false, JSON.stringify(r));
        session = sc(r).session;
        assert.match(session, /^ses_/);
        return { name: 'agentsh_run', args: { session, command: 'export KEPT=yes; cd /' } };
      },
      (r) => {
        assert.equal(sc(r).success, true, JSON.stringify(r));
        // A new connection (a new server process) reaches the same shell.
        return { name: 'agentsh_run', args: { session, command: 'echo $KEPT; pwd' } };
      },
      (r) => {
        assert.equal(sc(r).stdout, 'yes\n/\n', JSON.stringify(r));
        return { name: 'agentsh_run', args: { command: 'echo failing; exit 3' } };
      },
      (r) => {
        // A command that ran and failed is a normal result.
        assert.equal(r.isError ?? false, false);
        assert.equal(sc(r).success, false);
        assert.equal(sc(r).exit_code, 3);
        return { name: 'agentsh_run', args: { command: 'sleep 30', timeout: 1 } };
      },
      (r) => {
        assert.equal(r.isError ?? false, false);
        assert.equal(sc(r).status, 'timeout');
        return { name: 'agentfs_edit', args: { path: 'app.py', old: '    if x:\n        return 1', new: '    if x:\n        y = 2\n        return y', fuzzy: true } };
      },
      (r) => {
        assert.equal(sc(r).success, true, JSON.stringify(r));
        // Tabs stay tabs.
        assert.equal(sc(r).new_file, 'def f():\n\tif x:\n\t\ty = 2\n\t\treturn y\n');
        return { name: 'agentfs_edit', args: { path: 'app.py', edits: [{ old_string: 'y = 2', new_string: 'y = 3' }] } };
      },
      (r) => {
        assert.equal(sc(r).success, true, JSON.stringify(r));
        return { name: 'agentfs_read', args: { path: 'nowhere.txt' } };
      },
      (r) => {
        // The tool could not do what was asked: a tool error, with its code.
        assert.equal(r.isError, true);
        assert.equal(sc(r).error.code, 'file_not_found');
        return { name: 'agentsh_session_stop', args: { session } };
      },
      (r) => {
        assert.equal(sc(r).success, true, JSON.stringify(r));
        return { text: 'done' };
      },
    ]);
    try {
      assert.equal(await runAgent(model, [toolset]), 'done');
    } finally {
      await toolset.close();
    }
    assert.equal(model.responses.length, 9);
    // ADK converted every MCP input schema into a Gemini declaration.
    assert.ok(model.declarations.length >= 20, `${model.declarations.length} declarations`);
    for (const d of model.declarations) assert.deepEqual(geminiProblems(d.name, d.parameters), []);
    assert.equal(readFileSync(path.join(work, 'app.py'), 'utf8'), 'def f():\n\tif x:\n\t\ty = 3\n\t\treturn y\n');
  });
});
