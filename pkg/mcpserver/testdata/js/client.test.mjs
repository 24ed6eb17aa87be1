// The MCP JavaScript SDK's client against agentsh mcp --all over stdio.
// Usage: node client.test.mjs BIN_DIR WORK_DIR STATE_DIR
// (PYTHON names the real python3 interpreter for the dev server job.)
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [binDir, work, stateDir] = process.argv.slice(2);
const python = process.env.PYTHON || "python3";

const rules = path.join(work, "rules.star");
fs.writeFileSync(rules, 'prefix_rule(pattern=["rm"], decision="forbidden", justification="never delete")\n');
fs.writeFileSync(path.join(work, "keep"), "");

const transport = new StdioClientTransport({
  command: path.join(binDir, "agentsh"),
  args: ["mcp", "--all", "--verbose", "--state-dir", stateDir, "--policy", rules],
  cwd: work,
  env: { ...process.env },
  stderr: "pipe",
});
// The server logs each call's summary with --verbose; the cancel test
// waits for the cancelled call's line instead of sleeping.
let serverLog = "";
const logWaiters = [];
transport.stderr.on("data", (b) => {
  serverLog += b.toString();
  for (const w of logWaiters.splice(0)) w();
});
async function logContains(text) {
  while (!serverLog.includes(text)) {
    await new Promise((resolve) => logWaiters.push(resolve));
  }
}

const client = new Client({ name: "agentplane-js-test", version: "0" });
const jobEvents = [];
const eventWaiters = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  if (n.params.logger === "agentjob") {
    jobEvents.push(n.params.data);
    for (const w of eventWaiters.splice(0)) w();
  }
});
async function jobEvent(handle, event) {
  for (;;) {
    const e = jobEvents.find((d) => d.handle === handle && d.event === event);
    if (e) return e;
    await new Promise((resolve) => eventWaiters.push(resolve));
  }
}

const results = [];
async function test(name, fn) {
  try {
    await fn();
    results.push(["ok", name]);
    console.log(`ok - ${name}`);
  } catch (err) {
    results.push(["not ok", name]);
    console.log(`not ok - ${name}\n${err.stack}`);
  }
}

await client.connect(transport);

await test("list tools", async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ["agentsh_run", "agentsh_session_start", "agentjob_start", "agentjob_wait", "agentfs_edit"]) {
    assert.ok(names.includes(want), `missing ${want}`);
  }
  const run = tools.find((t) => t.name === "agentsh_run");
  assert.ok("command" in run.inputSchema.properties);
  assert.ok(!("sandbox" in run.inputSchema.properties), "sandbox is the server's");
});

await test("run a command, with progress", async () => {
  // The SDK dispatches a notification in a microtask but retires the
  // call's progress handler as soon as its response is read, so a progress
  // notification that arrives in the same read as the response is dropped
  // (typescript-sdk#2580). The command therefore waits, on a FIFO, until the
  // client has handled its first progress: the response cannot race it.
  const gate = path.join(work, "progress-gate");
  fs.rmSync(gate, { force: true });
  const mkfifo = spawnSync("mkfifo", [gate]);
  assert.equal(mkfifo.status, 0, String(mkfifo.stderr));
  const progress = [];
  const res = await client.callTool(
    { name: "agentsh_run", arguments: { command: `echo hello; read _ < ${gate}` } },
    undefined,
    {
      onprogress: (p) => {
        progress.push(p);
        if (progress.length === 1) fs.writeFile(gate, "go\n", () => {});
      },
    },
  );
  assert.equal(res.isError ?? false, false);
  assert.equal(res.structuredContent.stdout, "hello\n");
  assert.equal(res.structuredContent.exit_code, 0);
  assert.match(res.content[0].text, /^agentsh_run: ok status=completed/);
  assert.ok(progress.length >= 1 && progress[0].progress === 6, JSON.stringify(progress));
});

await test("hit a timeout", async () => {
  const res = await client.callTool({
    name: "agentsh_run",
    arguments: { command: "echo before; sleep 60", timeout: "1s", kill_after: "1s" },
  });
  // A command that ran and timed out is a normal result (CONTRACT §7).
  assert.equal(res.isError ?? false, false);
  assert.equal(res.structuredContent.success, false);
  assert.equal(res.structuredContent.status, "timeout");
  assert.equal(res.structuredContent.exit_code, 124);
  assert.equal(res.structuredContent.stdout, "before\n");
});

await test("cancel a running command", async () => {
  const ac = new AbortController();
  const pidFile = path.join(work, "pids");
  const call = client.callTool(
    {
      name: "agentsh_run",
      arguments: {
        command: `echo $$ > ${pidFile}; sleep 300 & echo $! >> ${pidFile}; echo started; wait`,
        timeout: 0,
      },
    },
    undefined,
    { signal: ac.signal, onprogress: () => ac.abort() },
  );
  await assert.rejects(call);
  await logContains("agentsh_run: failed status=cancelled");
  const pids = fs.readFileSync(pidFile, "utf8").trim().split(/\s+/);
  assert.equal(pids.length, 2);
  for (const pid of pids) {
    assert.ok(!fs.existsSync(`/proc/${pid}`), `process ${pid} survived`);
  }
});

await test("edit a file and read the before and after", async () => {
  const file = path.join(work, "notes.txt");
  let res = await client.callTool({ name: "agentfs_write", arguments: { path: file, content: "one\ntwo\n" } });
  assert.equal(res.structuredContent.created, true);
  res = await client.callTool({ name: "agentfs_edit", arguments: { path: file, old: "two", new: "2" } });
  assert.equal(res.isError ?? false, false);
  assert.equal(res.structuredContent.original_file, "one\ntwo\n");
  assert.equal(res.structuredContent.new_file, "one\n2\n");
  assert.match(res.structuredContent.diff, /\+2/);
});

await test("start a dev server job and receive its ready notification", async () => {
  await client.setLoggingLevel("info");
  const port = await new Promise((resolve) => {
    const srv = net.createServer().listen(0, "127.0.0.1", () => {
      const p = srv.address().port;
      srv.close(() => resolve(p));
    });
  });
  const res = await client.callTool({
    name: "agentjob_start",
    arguments: {
      argv: [python, "-m", "http.server", String(port), "--bind", "127.0.0.1"],
      cwd: work,
      name: "web",
      ready_http: `http://127.0.0.1:${port}/`,
    },
  });
  assert.equal(res.isError ?? false, false, JSON.stringify(res.structuredContent));
  const handle = res.structuredContent.handle;
  try {
    const ready = await jobEvent(handle, "ready");
    assert.equal(ready.type, "job_ready");
    assert.equal(ready.name, "web");
  } finally {
    await client.callTool({ name: "agentjob_stop", arguments: { job: handle } });
  }
});

await test("a policy refusal is a tool error", async () => {
  const res = await client.callTool({ name: "agentsh_run", arguments: { command: "rm keep" } });
  assert.equal(res.isError, true);
  assert.equal(res.structuredContent.error.code, "policy_denied");
  assert.ok(fs.existsSync(path.join(work, "keep")));
});

await client.close();
const failed = results.filter(([r]) => r !== "ok");
console.log(`${results.length - failed.length}/${results.length} passed`);
process.exit(failed.length ? 1 : 0);
