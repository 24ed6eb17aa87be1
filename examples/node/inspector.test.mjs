// The MCP Inspector's CLI mode (@modelcontextprotocol/inspector --cli,
// pinned in package.json) against `agentsh mcp --all`: it lists the tools
// with their annotations, calls them with its own argument syntax, and a
// server that cannot start fails the inspector instead of hanging it.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';

import { program } from './environment.mjs';

const inspector = path.join(path.dirname(fileURLToPath(import.meta.url)), 'node_modules', '.bin', 'mcp-inspector');

function run(args) {
  return new Promise((resolve) => {
    execFile(inspector, ['--cli', ...args], { timeout: 120000, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr });
    });
  });
}

describe('MCP Inspector CLI on agentsh mcp --all', () => {
  let dir;
  let server;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'inspector-'));
    server = [program('agentsh'), 'mcp', '--all', '--state-dir', path.join(dir, 'state')];
  });
  after(async () => { await rm(dir, { recursive: true, force: true }); });

  test('tools/list: every tool with its four annotations', async () => {
    const r = await run([...server, '--method', 'tools/list']);
    assert.equal(r.code, 0, r.stderr);
    const { tools } = JSON.parse(r.stdout);
    assert.ok(tools.length >= 20, `${tools.length} tools`);
    for (const t of tools) {
      for (const k of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint']) {
        assert.equal(typeof t.annotations?.[k], 'boolean', `${t.name}.${k}`);
      }
      assert.equal(t.inputSchema.additionalProperties, false, t.name);
      assert.doesNotMatch(t.description, /(^|\s)--[a-z]/, `${t.name} speaks of CLI flags`);
    }
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    assert.equal(byName.agentfs_read.annotations.readOnlyHint, true);
    assert.equal(byName.agentsh_run.annotations.destructiveHint, true);
    assert.equal(byName.agentjob_stop.annotations.idempotentHint, true);
  });

  test('tools/call: a failing command is a result, arrays pass as JSON', async () => {
    let r = await run([...server, '--method', 'tools/call', '--tool-name', 'agentsh_run', '--tool-arg', 'command=echo hi; exit 3']);
    assert.equal(r.code, 0, r.stderr);
    let res = JSON.parse(r.stdout);
    assert.equal(res.isError ?? false, false);
    assert.equal(res.structuredContent.exit_code, 3);
    assert.equal(res.structuredContent.stdout, 'hi\n');

    r = await run([...server, '--method', 'tools/call', '--tool-name', 'agentsh_run',
      '--tool-arg', 'command=["printenv","X"]', '--tool-arg', 'env=["X=from an array"]']);
    res = JSON.parse(r.stdout);
    assert.equal(res.structuredContent.stdout, 'from an array\n', r.stdout);
  });

  test('tools/call: what the tool could not do is isError with a code', async () => {
    const r = await run([...server, '--method', 'tools/call', '--tool-name', 'agentsh_run', '--tool-arg', 'command=true', '--tool-arg', 'sandbox=none']);
    const res = JSON.parse(r.stdout);
    assert.equal(res.isError, true);
    assert.equal(res.structuredContent.error.code, 'invalid_request');
  });

  test('a server that cannot start fails the inspector', async () => {
    const r = await run([program('agentsh'), 'mcp', '--sandbox', 'bogus', '--method', 'tools/list']);
    assert.notEqual(r.code, 0);
  });
});
