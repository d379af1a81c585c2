// The official AG-UI client (@ag-ui/client, HttpAgent) holding conversations with a
// real `phaseflow serve`, as a front end would; driven by tests/serve/test_agui_client.py.
//
//   node agui_client.mjs BASE_URL WORKFLOW HOLDS_DIR CLIENT_PACKAGE_DIR
//
// Thread "a": three turns (text; text and a tool call writing state; a failing tool,
// then a payment that stops for approval), resumed with approve. Thread "b": the same
// turns, a second run sent while the third turn runs (refused: the session is busy),
// resumed with reject, then one more turn, and one whose model fails (RUN_ERROR). Prints one JSON document: per agent, every
// event it applied, what each run returned or threw, its messages and state, and what
// the client wrote to the console (warnings, errors).
import { randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [base, workflow, holds, clientDir] = process.argv.slice(2);
const pkg = JSON.parse(readFileSync(join(clientDir, "package.json"), "utf8"));
const { HttpAgent } = await import(pathToFileURL(join(clientDir, pkg.exports["."].import)).href);

const consoleLines = [];
for (const level of ["warn", "error"]) {
  console[level] = (...args) => consoleLines.push(`${level}: ${args.map(String).join(" ")}`);
}

const MESSAGES = JSON.parse(process.env.CHAT_MESSAGES);
const url = `${base}/v1/ag-ui/${workflow}`;
const report = {};

function recorded(name, threadId) {
  const agent = new HttpAgent({ url, threadId });
  const entry = { threadId, events: [], runs: [] };
  report[name] = entry;
  agent.subscribe({ onEvent: ({ event }) => { entry.events.push(event); } });
  return { agent, entry };
}

async function run(agent, entry, params = {}, subscriber = {}) {
  const outcome = { pending: [], error: null, runErrors: [] };
  try {
    const result = await agent.runAgent(params, {
      ...subscriber,
      onRunErrorEvent: ({ event }) => { outcome.runErrors.push(event); },
      onRunFailed: ({ error }) => { outcome.error = String(error); },
    });
    outcome.result = result.result ?? null;
    outcome.newMessages = result.newMessages.length;
  } catch (error) {
    outcome.error = String(error && error.stack || error);
  }
  outcome.pending = agent.pendingInterrupts.map((i) => i.id);
  entry.runs.push(outcome);
  return outcome;
}

function say(agent, text) {
  agent.addMessage({ id: randomUUID(), role: "user", content: text });
}

function finish(name, agent) {
  report[name].messages = agent.messages;
  report[name].state = agent.state;
}

// thread a: to the approval, approved
const a = recorded("a", `a-${randomUUID()}`);
for (const text of MESSAGES.slice(0, 3)) {
  say(a.agent, text);
  await run(a.agent, a.entry);
}
await run(a.agent, a.entry, { resume: a.agent.pendingInterrupts.map((i) => ({
  interruptId: i.id, status: "resolved", payload: { decision: "approve" } })) });
finish("a", a.agent);

// thread b: a second run while the third turn holds, then rejected, then a last turn
const b = recorded("b", `b-${randomUUID()}`);
for (const text of MESSAGES.slice(0, 2)) {
  say(b.agent, text);
  await run(b.agent, b.entry);
}
mkdirSync(holds, { recursive: true });
const hold = join(holds, b.entry.threadId);
writeFileSync(hold, "held");
const busy = recorded("busy", b.entry.threadId);
let refused = null;
say(b.agent, MESSAGES[2]);
await run(b.agent, b.entry, {}, {
  onToolCallStartEvent: ({ event }) => {
    if (event.toolCallName !== "hold" || refused) return;
    say(busy.agent, "Are you still there?");
    refused = run(busy.agent, busy.entry).finally(() => rmSync(hold, { force: true }));
  },
});
await refused;
await run(b.agent, b.entry, { resume: b.agent.pendingInterrupts.map((i) => ({
  interruptId: i.id, status: "resolved",
  payload: { decision: "reject", reason: "not today" } })) });
say(b.agent, MESSAGES[3]);
await run(b.agent, b.entry);
say(b.agent, MESSAGES[4]);  // the model fails: the run ends with RUN_ERROR
await run(b.agent, b.entry);
finish("b", b.agent);
finish("busy", busy.agent);

report.console = consoleLines;
process.stdout.write(JSON.stringify(report));
