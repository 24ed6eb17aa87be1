// The tool schemas the programs print load unchanged in each provider's
// strictest mode, checked with the providers' own SDKs (pinned in
// package.json): OpenAI's strict function calling through
// @openai/agents-core's strict-schema preparation, Gemini's function
// declarations through @google/genai's request path (its schema transformer
// and Type enum, against a local HTTP server: no network), and JSON Schema
// 2020-12 (Anthropic's input_schema, MCP's inputSchema) through ajv in
// strict mode. pkg/cli/schematest checks the same rules node by node in Go.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import http from 'node:http';
import { describe, test } from 'node:test';

import { mcpToFunctionTool, tool } from '@openai/agents-core';
import { GoogleGenAI } from '@google/genai';
import Ajv2020 from 'ajv/dist/2020.js';

import { program } from './environment.mjs';
import { geminiProblems } from './gemini-rules.mjs';

const programs = ['agentsh', 'agentjob', 'agentfs'];

function schema(name, format) {
  const out = execFileSync(program(name), ['schema', '--format', format], { encoding: 'utf8' });
  const r = JSON.parse(out);
  assert.equal(r.success, true);
  assert.ok(r.tools.length > 0);
  return r.tools;
}

describe('OpenAI strict mode (@openai/agents-core)', () => {
  for (const name of programs) {
    test(`${name} schema --format openai is already strict`, () => {
      for (const t of schema(name, 'openai')) {
        assert.equal(t.type, 'function');
        assert.equal(t.function.strict, true, t.function.name);
        // tool() with strict: true validates the schema against OpenAI's
        // strict rules and normalises it; a strict schema is a fixed point.
        const ft = tool({
          name: t.function.name, description: t.function.description,
          parameters: t.function.parameters, strict: true, execute: async () => '',
        });
        assert.equal(ft.strict, true, t.function.name);
        assert.deepEqual(ft.parameters, t.function.parameters, `${t.function.name}: strict preparation changed the schema`);
      }
    });

    test(`${name} schema --format mcp converts to strict without falling back`, () => {
      const server = { name: 'agentplane', callTool: async () => [] };
      for (const t of schema(name, 'mcp')) {
        const ft = mcpToFunctionTool(t, server, true);
        assert.equal(ft.strict, true, `${t.name}: agents-core fell back to non-strict`);
        const req = new Set(ft.parameters.required);
        for (const k of Object.keys(ft.parameters.properties)) assert.ok(req.has(k), `${t.name}.${k} not required`);
      }
    });
  }

  test('the check can fail: the shapes OpenAI rejected before fall back', () => {
    const server = { name: 'agentplane', callTool: async () => [] };
    for (const prop of [
      { type: 'object', additionalProperties: { type: 'string' } }, // the open env map
      { anyOf: [{ type: 'array', items: { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: false } }, { type: 'string' }] },
    ]) {
      const inputSchema = { type: 'object', properties: { p: prop }, additionalProperties: false };
      assert.equal(mcpToFunctionTool({ name: 'x', inputSchema }, server, true).strict, false, JSON.stringify(prop));
    }
  });
});

// Gemini: our declarations go through the SDK's own request path
// (generateContent transforms each function declaration's parameters with
// its JSON-to-Gemini schema converter) to a local server that records what
// would be sent to the API.
async function geminiRequest(functionDeclarations) {
  let body;
  const srv = http.createServer((req, res) => {
    let data = '';
    req.on('data', (d) => { data += d; });
    req.on('end', () => {
      body = JSON.parse(data);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ candidates: [{ content: { role: 'model', parts: [{ text: 'ok' }] } }] }));
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  try {
    const ai = new GoogleGenAI({ apiKey: 'offline', httpOptions: { baseUrl: `http://127.0.0.1:${srv.address().port}` } });
    await ai.models.generateContent({
      model: 'gemini-2.5-flash', contents: 'hi', config: { tools: [{ functionDeclarations }] },
    });
  } finally {
    srv.close();
  }
  return body.tools[0].functionDeclarations;
}

describe('Gemini function declarations (@google/genai)', () => {
  for (const name of programs) {
    test(`${name} schema --format gemini, as the SDK sends it`, async () => {
      const decls = schema(name, 'gemini');
      const sent = await geminiRequest(decls);
      assert.equal(sent.length, decls.length);
      for (const d of sent) {
        assert.deepEqual(geminiProblems(d.name, d.parameters), []);
      }
      // The SDK's converter leaves our declarations as they are: they are
      // already in Gemini's form.
      assert.deepEqual(sent.map((d) => d.parameters), decls.map((d) => d.parameters));
    });

    test(`${name} schema --format mcp and openai, converted by the SDK`, async () => {
      for (const format of ['mcp', 'openai']) {
        const decls = schema(name, format).map((t) => (format === 'mcp'
          ? { name: t.name, description: t.description, parameters: t.inputSchema }
          : { name: t.function.name, description: t.function.description, parameters: t.function.parameters }));
        for (const d of await geminiRequest(decls)) {
          assert.deepEqual(geminiProblems(`${format} ${d.name}`, d.parameters), []);
        }
      }
    });
  }

  test('the check can fail: a bare ARRAY beside anyOf', () => {
    assert.notDeepEqual(geminiProblems('x', { type: 'OBJECT', properties: { c: { anyOf: [{ type: 'STRING' }, { type: 'ARRAY' }] } } }), []);
  });
});

describe('JSON Schema 2020-12 (Anthropic input_schema, MCP inputSchema)', () => {
  for (const name of programs) {
    test(`${name} schemas compile in ajv's strict mode`, () => {
      const ajv = new Ajv2020({ strict: true, allErrors: true });
      for (const [format, get] of [['anthropic', (t) => t.input_schema], ['mcp', (t) => t.inputSchema], ['jsonschema', (t) => t]]) {
        for (const t of schema(name, format)) {
          const s = { ...get(t) };
          delete s.title; // jsonschema format carries title and $schema
          assert.equal(s.type, 'object', `${format} ${t.name}: Anthropic wants an object schema`);
          ajv.compile(s);
        }
      }
    });
  }
});
