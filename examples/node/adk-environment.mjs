// Google ADK for JavaScript (@google/adk 2.x) on agentplane: a
// BaseEnvironment whose commands run through agentsh, files through agentfs
// and background jobs through agentjob, plus the FunctionTools that give an
// LlmAgent that environment.
//
//   import { LlmAgent, InMemoryRunner } from '@google/adk';
//   const env = new AgentplaneAdkEnvironment({ workingDir: '/tmp/project' });
//   await env.initialize();
//   const agent = new LlmAgent({ name: 'coder', model: 'gemini-2.5-flash',
//     instruction: 'You fix failing tests.', tools: environmentTools(env) });
//   for await (const event of new InMemoryRunner({ agent }).runEphemeral({ userId: 'u', newMessage })) { … }
//   await env.close();   // stops the background jobs this environment started
//
// What agentsh adds over ADK's LocalEnvironment: a timeout kills the whole
// process tree and reports exit code 124 with the output so far (not -9
// with processes left behind), nothing a command started outlives the
// call, output is bounded and cleaned for a model, and stdin is empty so
// nothing waits for input. readFile gives the file's bytes exactly (a UTF-8
// byte-order mark included) and writeFile is atomic.
//
// The programs are looked up in $AGENTPLANE_BIN if set, else on PATH.

import { BaseEnvironment, FunctionTool } from '@google/adk';
import { Type } from '@google/genai';

import { AgentplaneEnvironment, AgentplaneError } from './environment.mjs';

export { AgentplaneError };

export class AgentplaneAdkEnvironment extends BaseEnvironment {
  #env;

  /**
   * @param {object} [options]
   * @param {string} [options.workingDir] where commands run and relative paths resolve
   * @param {string} [options.stateDir] the agentplane environment (jobs); default: a private one
   */
  constructor(options = {}) {
    super();
    this.#env = new AgentplaneEnvironment(options);
  }

  get workingDir() { return this.#env.workingDir; }

  async initialize() {
    await this.#env.initialize();
    this.initialized = true;
  }

  async close() {
    await this.#env.close();
    this.initialized = false;
  }

  /**
   * Run a shell command. A non-zero exit is a result, not an exception; a
   * timeout is { exitCode: 124, timedOut: true } with the output so far, and
   * every process the command started is gone either way.
   */
  async execute(command, timeoutSeconds) {
    this.assertInitialized();
    return this.#env.execute(command, timeoutSeconds);
  }

  async readFile(filePath) {
    this.assertInitialized();
    return this.#env.readFile(filePath);
  }

  async writeFile(filePath, content) {
    this.assertInitialized();
    return this.#env.writeFile(filePath, content);
  }

  /** Start a long-running command as a job; see AgentplaneEnvironment. */
  async startBackground(command, options) {
    this.assertInitialized();
    return this.#env.startBackground(command, options);
  }
}

/**
 * The environment as tools for an LlmAgent: execute_command, read_file and
 * write_file. Failures a model can act on (a missing file, a command that
 * could not start) come back as { error, code } rather than exceptions.
 */
export function environmentTools(env) {
  const failure = (e) => {
    if (e instanceof AgentplaneError) return { error: e.message, code: e.code };
    throw e;
  };
  return [
    new FunctionTool({
      name: 'execute_command',
      description: 'Run a shell command in the working directory and return exit_code, stdout, stderr and ' +
        'timed_out. A command that fails or times out is reported, not raised; every process it started is ' +
        'stopped before the result returns.',
      parameters: {
        type: Type.OBJECT,
        properties: {
          command: { type: Type.STRING, description: 'a shell command line' },
          timeout_seconds: { type: Type.NUMBER, description: 'stop the command after this many seconds' },
        },
        required: ['command'],
      },
      execute: async ({ command, timeout_seconds: timeout }) => {
        try {
          const r = await env.execute(command, timeout);
          return { exit_code: r.exitCode, stdout: r.stdout, stderr: r.stderr, timed_out: r.timedOut };
        } catch (e) {
          return failure(e);
        }
      },
    }),
    new FunctionTool({
      name: 'read_file',
      description: 'Read a text file, relative to the working directory.',
      parameters: {
        type: Type.OBJECT,
        properties: { path: { type: Type.STRING, description: 'the file to read' } },
        required: ['path'],
      },
      execute: async ({ path }) => {
        try {
          return { content: new TextDecoder('utf-8', { ignoreBOM: true }).decode(await env.readFile(path)) };
        } catch (e) {
          return failure(e);
        }
      },
    }),
    new FunctionTool({
      name: 'write_file',
      description: 'Write a text file atomically, creating parent directories.',
      parameters: {
        type: Type.OBJECT,
        properties: {
          path: { type: Type.STRING, description: 'the file to write' },
          content: { type: Type.STRING, description: 'the whole new content' },
        },
        required: ['path', 'content'],
      },
      execute: async ({ path, content }) => {
        try {
          await env.writeFile(path, content);
          return { written: path };
        } catch (e) {
          return failure(e);
        }
      },
    }),
  ];
}
