// Tests for environment.mjs against the real programs ($AGENTPLANE_BIN or
// PATH; scripts/test-examples builds them). Run: node --test examples/node/
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';

import { AgentplaneEnvironment } from './environment.mjs';

describe('AgentplaneEnvironment', () => {
  let dir;
  let env;

  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'env-test-'));
    env = new AgentplaneEnvironment({ workingDir: path.join(dir, 'work') });
    await env.initialize();
  });

  afterEach(async () => {
    await env.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('lifecycle: initialize creates the working dir, close is idempotent', async () => {
    assert.equal(env.workingDir, path.join(dir, 'work'));
    assert.ok(env.isInitialized);
    assert.ok(existsSync(env.workingDir));
    await env.initialize();
    await env.close();
    await env.close();
    assert.equal(env.isInitialized, false);
    await assert.rejects(env.execute('true'), /not initialized/);
    await env.initialize();
  });

  test('execute reports output and exit code', async () => {
    const r = await env.execute('pwd; echo oops >&2; exit 3', 30);
    assert.deepEqual(r, { exitCode: 3, stdout: `${env.workingDir}\n`, stderr: 'oops\n', timedOut: false });
    assert.deepEqual(await env.execute('true'), { exitCode: 0, stdout: '', stderr: '', timedOut: false });
  });

  test('execute times out with the output so far', async () => {
    const r = await env.execute('echo started; sleep 30', 1);
    assert.deepEqual(r, { exitCode: 124, stdout: 'started\n', stderr: '', timedOut: true });
  });

  test('execute rejects when the command cannot be started', async () => {
    await rm(env.workingDir, { recursive: true });
    await assert.rejects(env.execute('true', 5), { code: 'cwd_not_found' });
  });

  test('writeFile and readFile round-trip text and bytes', async () => {
    await env.writeFile('sub/dir/a.txt', 'héllo\n');
    assert.equal(await readFile(path.join(env.workingDir, 'sub/dir/a.txt'), 'utf8'), 'héllo\n');
    assert.deepEqual(await env.readFile('sub/dir/a.txt'), new TextEncoder().encode('héllo\n'));

    const bytes = new Uint8Array([0, 255, 1, 98, 105, 110]);
    await env.writeFile(path.join(env.workingDir, 'b.bin'), bytes);
    assert.deepEqual(await env.readFile('b.bin'), bytes);
  });

  test('a UTF-8 byte-order mark survives writeFile and readFile', async () => {
    const withBOM = new Uint8Array([0xef, 0xbb, 0xbf, 0x68, 0x69, 0x0a]); // BOM "hi\n"
    await env.writeFile('bom.txt', withBOM);
    assert.deepEqual(new Uint8Array(await readFile(path.join(env.workingDir, 'bom.txt'))), withBOM);
    assert.deepEqual(await env.readFile('bom.txt'), withBOM);
    // A string that starts with U+FEFF is written with the mark too.
    await env.writeFile('bom2.txt', '\uFEFFhi\n');
    assert.deepEqual(await env.readFile('bom2.txt'), withBOM);
    // And a file without one gains none.
    await env.writeFile('plain.txt', 'hi\n');
    assert.deepEqual(await env.readFile('plain.txt'), new TextEncoder().encode('hi\n'));
  });

  test('readFile of a missing file rejects with its code', async () => {
    await assert.rejects(env.readFile('missing.txt'), { code: 'file_not_found' });
  });

  test('close stops background jobs', async () => {
    const handle = await env.startBackground('echo ready; exec sleep 60', { readyLog: 'ready' });
    const running = await env.jobStatus(handle);
    assert.equal(running.status, 'ready');
    await env.close();
    assert.equal(existsSync(`/proc/${running.pid}`), false, 'the job outlived close()');
    await env.initialize();
  });

  test('a background job that fails before it is ready rejects', async () => {
    await assert.rejects(env.startBackground('exit 2', { readyLog: 'never' }), (e) => e.result.status === 'failed');
  });
});
