// An execution environment (initialize, execute, readFile, writeFile, close,
// workingDir) on agentplane's programs.
//
//   const env = new AgentplaneEnvironment({ workingDir: '/tmp/project' });
//   await env.initialize();
//   const { exitCode, stdout, stderr, timedOut } = await env.execute('make test', 60);
//   await env.writeFile('notes.txt', 'hello\n');
//   const bytes = await env.readFile('notes.txt');
//   const server = await env.startBackground('npm run dev', { readyLog: 'listening' });
//   await env.close();   // stops the background jobs this environment started
//
// agentsh runs each command (and kills everything it started before it
// returns), agentfs reads and writes files atomically, and agentjob runs
// background jobs in the environment's own state directory, so close() can
// stop them all. The programs are looked up in $AGENTPLANE_BIN if set, else
// on PATH. Requests go as JSON on stdin (--request -): nothing is quoted.

import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile as fsWriteFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** Path of an agentplane program: $AGENTPLANE_BIN/name, else the name (PATH). */
export function program(name) {
  const dir = process.env.AGENTPLANE_BIN;
  return dir ? path.join(dir, name) : name;
}

/** An agentplane result that reports a failure, as a throwable Error. */
export class AgentplaneError extends Error {
  constructor(result) {
    super(result.error?.message ?? 'the call failed');
    this.code = result.error?.code;
    this.result = result;
  }
}

/**
 * Run one program with a JSON request on stdin; resolve to
 * { code, result }: its exit status and the JSON object it printed.
 */
export function call(name, args, request, env = process.env) {
  return new Promise((resolve, reject) => {
    const child = spawn(program(name), [...args, '--request', '-'], { env });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
    child.on('error', reject); // the program is not installed
    child.on('close', (code) => {
      const last = stdout.trim().split('\n').pop();
      try {
        resolve({ code, result: JSON.parse(last) });
      } catch {
        reject(new Error(`${name}: no JSON result (exit ${code}): ${stderr.trim()}`));
      }
    });
    child.stdin.end(JSON.stringify(request));
  });
}

export class AgentplaneEnvironment {
  #workingDir;
  #stateDir;
  #ownStateDir = false;
  #initialized = false;

  /**
   * @param {object} [options]
   * @param {string} [options.workingDir] where commands run and relative paths resolve
   * @param {string} [options.stateDir] the agentplane environment (jobs); default: a private one
   */
  constructor({ workingDir = process.cwd(), stateDir } = {}) {
    this.#workingDir = path.resolve(workingDir);
    this.#stateDir = stateDir;
  }

  get isInitialized() { return this.#initialized; }

  get workingDir() { return this.#workingDir; }

  async initialize() {
    if (this.#initialized) return;
    await mkdir(this.#workingDir, { recursive: true });
    if (!this.#stateDir) {
      this.#stateDir = await mkdtemp(path.join(tmpdir(), 'agentplane-env-'));
      this.#ownStateDir = true;
    }
    this.#initialized = true;
  }

  /** Stop every background job of this environment; idempotent. */
  async close() {
    if (!this.#initialized) return;
    const { result } = await this.#call('agentjob', ['list'], {});
    for (const job of result.jobs ?? []) {
      await this.#call('agentjob', ['stop'], { job: job.handle });
    }
    if (this.#ownStateDir) {
      await rm(this.#stateDir, { recursive: true, force: true });
      this.#stateDir = undefined;
      this.#ownStateDir = false;
    }
    this.#initialized = false;
  }

  /**
   * Run a shell command in the working directory. A non-zero exit is a
   * result, not an exception; a timeout is { exitCode: 124, timedOut: true }
   * with the output captured until then.
   */
  async execute(command, timeoutSeconds) {
    this.#assertInitialized();
    const { code, result } = await this.#call('agentsh', [], {
      command, cwd: this.#workingDir, timeout: timeoutSeconds ?? 0,
    });
    if (result.status === 'error') throw new AgentplaneError(result);
    return {
      exitCode: result.exit_code ?? code,
      stdout: result.stdout,
      stderr: result.stderr,
      timedOut: result.timed_out,
    };
  }

  /**
   * The file's bytes, exactly as on disk (a UTF-8 byte-order mark
   * included); a missing file rejects with code 'file_not_found'.
   */
  async readFile(filePath) {
    this.#assertInitialized();
    const file = this.#resolve(filePath);
    const { result } = await this.#call('agentfs', ['read'], { path: file });
    if (!result.success) throw new AgentplaneError(result);
    if (!result.binary) {
      // agentfs gives the text without its byte-order mark and says so.
      return new TextEncoder().encode((result.bom ? '\uFEFF' : '') + result.content);
    }
    // agentfs reads text; raw bytes come through agentsh as base64.
    const raw = await this.#call('agentsh', [], {
      command: ['cat', '--', file], binary: 'base64', max_output: result.size + 1,
    });
    if (!raw.result.success) throw new AgentplaneError(raw.result);
    return new Uint8Array(Buffer.from(raw.result.stdout, 'base64'));
  }

  /**
   * Write atomically, creating parent directories. Bytes are written as
   * given: a leading byte-order mark stays (TextDecoder would drop it).
   */
  async writeFile(filePath, content) {
    this.#assertInitialized();
    const request = { path: this.#resolve(filePath), output: 'none' };
    let scratch;
    if (typeof content === 'string') {
      request.content = content;
    } else {
      try {
        request.content = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(content);
      } catch {
        // Not text: hand agentfs the bytes in a file, it still writes atomically.
        scratch = await mkdtemp(path.join(tmpdir(), 'agentplane-write-'));
        request.content_file = path.join(scratch, 'content');
        await fsWriteFile(request.content_file, content);
      }
    }
    try {
      const { result } = await this.#call('agentfs', ['write'], request);
      if (!result.success) throw new AgentplaneError(result);
    } finally {
      if (scratch) await rm(scratch, { recursive: true, force: true });
    }
  }

  /**
   * Start a long-running command as a detached job; with readyLog, resolve
   * once a line of its output matches. Resolves to the job's handle.
   */
  async startBackground(command, { readyLog, name } = {}) {
    this.#assertInitialized();
    const request = { command, cwd: this.#workingDir };
    if (name) request.name = name;
    if (readyLog) Object.assign(request, { ready_log: readyLog, wait_ready: true });
    const { result } = await this.#call('agentjob', ['start'], request);
    if (!result.success || result.status === 'failed') throw new AgentplaneError(result);
    return result.handle;
  }

  /** A background job's status (the agentjob status object). */
  async jobStatus(handle) {
    this.#assertInitialized();
    const { result } = await this.#call('agentjob', ['status'], { jobs: [handle] });
    if (!result.success) throw new AgentplaneError(result);
    return result;
  }

  #call(name, args, request) {
    return call(name, args, request, { ...process.env, AGENTPLANE_STATE_DIR: this.#stateDir });
  }

  #resolve(filePath) { return path.resolve(this.#workingDir, filePath); }

  #assertInitialized() {
    if (!this.#initialized) throw new Error('the environment is not initialized: call initialize() first');
  }
}
