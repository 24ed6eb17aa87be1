// LangChain's MCP adapters (@langchain/mcp-adapters, pinned in package.json)
// on `agentsh mcp --all`: the tools load with the schemas LangChain turns
// into its own validation, a command that fails or times out comes back as
// a result (LangChain throws on isError and would lose it), a call the tool
// could not do throws with its code, and arguments a strict host validates
// (edits, nulls for left-out keys) pass.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { MultiServerMCPClient } from '@langchain/mcp-adapters';

import { program } from './environment.mjs';

describe('LangChain MCP adapters on agentsh mcp --all', () => {
  let dir;
  let work;
  let client;
  let tools;

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'lc-mcp-'));
    work = path.join(dir, 'work');
    await mkdir(work);
    client = new MultiServerMCPClient({
      throwOnLoadError: true,
      prefixToolNameWithServerName: false,
      mcpServers: {
        agentplane: {
          transport: 'stdio', command: program('agentsh'),
          args: ['mcp', '--all', '--state-dir', path.join(dir, 'state')], cwd: work,
          env: { ...process.env }, restart: { enabled: false },
        },
      },
    });
    tools = Object.fromEntries((await client.getTools()).map((t) => [t.name, t]));
  });

  after(async () => {
    await client?.close();
    await rm(dir, { recursive: true, force: true });
  });

  /** Call a tool as an agent loop does (a tool call), returning the
   *  structured result the server sent. */
  async function call(name, args) {
    const msg = await tools[name].invoke({ type: 'tool_call', id: `id-${name}`, name, args });
    const sc = msg.artifact?.find((a) => a.type === 'mcp_structured_content');
    assert.ok(sc, `${name}: no structured content in ${JSON.stringify(msg)}`);
    return sc.data;
  }

  test('every tool loads, with no advertised aliases', () => {
    for (const name of ['agentsh_run', 'agentsh_session_start', 'agentjob_start', 'agentjob_wait', 'agentfs_edit', 'agentfs_read']) {
      assert.ok(tools[name], `${name} missing`);
    }
    // old_string/new_string are the fields of an edit, not arguments of
    // agentfs_edit (LangChain's validation rejected them as aliases).
    const props = tools.agentfs_edit.schema.properties;
    assert.ok(props.old && props.new && props.edits);
    assert.equal(props.old_string, undefined);
    assert.equal(props.new_string, undefined);
    assert.equal(tools.agentfs_edit.schema.additionalProperties, false);
  });

  test('a command that exits non-zero is a result, not an exception', async () => {
    const r = await call('agentsh_run', { command: 'echo out; exit 3' });
    assert.equal(r.success, false);
    assert.equal(r.exit_code, 3);
    assert.equal(r.stdout, 'out\n');
  });

  test('a timeout is a result with the output so far', async () => {
    const r = await call('agentsh_run', { command: 'echo before; sleep 30', timeout: 1 });
    assert.equal(r.status, 'timeout');
    assert.equal(r.exit_code, 124);
    assert.equal(r.stdout, 'before\n');
  });

  test('a wait that times out is a result', async () => {
    const job = await call('agentjob_start', { command: 'sleep 30' });
    assert.equal(job.success, true, JSON.stringify(job));
    try {
      const r = await call('agentjob_wait', { jobs: [job.handle], timeout: 1 });
      assert.equal(r.success, false);
      assert.equal(r.timed_out, true);
    } finally {
      await call('agentjob_stop', { job: job.handle });
    }
  });

  test('what the tool could not do throws, with the stable code', async () => {
    await assert.rejects(tools.agentfs_read.invoke({ path: path.join(work, 'nowhere.txt') }), /file_not_found/);
    await assert.rejects(tools.agentsh_session_status.invoke({ session: 'ses_forged' }), /invalid_handle/);
    // The operator's settings are not in the schema: LangChain's own
    // validation refuses them before the server would.
    await assert.rejects(tools.agentsh_run.invoke({ command: 'true', sandbox: 'none' }), /did not match expected schema/);
  });

  test('edits, null arguments and env as K=V pass validation and run', async () => {
    await writeFile(path.join(work, 'f.txt'), 'one\ntwo\n');
    let r = await call('agentfs_edit', {
      path: path.join(work, 'f.txt'),
      edits: [{ old_string: 'one', new_string: '1' }, { old_string: 'two', new_string: '2', expected_count: 1 }],
    });
    assert.equal(r.success, true, JSON.stringify(r));
    assert.equal(await readFile(path.join(work, 'f.txt'), 'utf8'), '1\n2\n');
    r = await call('agentsh_run', { command: 'echo $GREETING', env: ['GREETING=hi'], cwd: work });
    assert.equal(r.stdout, 'hi\n');
    // A dry run shows the change and leaves the file.
    r = await call('agentfs_write', { path: path.join(work, 'f.txt'), content: 'x\n', dry_run: true });
    assert.equal(r.new_file, 'x\n');
    assert.equal(await readFile(path.join(work, 'f.txt'), 'utf8'), '1\n2\n');
  });
});
