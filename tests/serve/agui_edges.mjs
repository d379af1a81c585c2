// The official AG-UI client (@ag-ui/client, HttpAgent) meeting a turn's edges on a real
// `phaseflow serve` running the edge desk (tests/support/edge_project.py); driven by
// tests/serve/test_agui_client.py.
//
//   node agui_edges.mjs BASE_URL WORKFLOW HOLDS_DIR CLIENT_PACKAGE_DIR
//
// Run 1: the model calls `slow` (a sync tool); once its thread has started, the session
// is cancelled over HTTP; the run reports `phaseflow.turn_cancelling` (and a
// `cancelling` step) while the thread still runs, the thread is let go, and the run
// ends cancelled. Run 2: the reply is cut at the output limit and continued
// (`phaseflow.reply_continued`): one assistant message with the stitched text. Prints
// one JSON document: every event applied, each run's outcome, the messages, and what
// the client wrote to the console.
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

const [base, workflow, holds, clientDir] = process.argv.slice(2);
const pkg = JSON.parse(readFileSync(join(clientDir, "package.json"), "utf8"));
const { HttpAgent } = await import(pathToFileURL(join(clientDir, pkg.exports["."].import)).href);

const consoleLines = [];
for (const level of ["warn", "error"]) {
  console[level] = (...args) => consoleLines.push(`${level}: ${args.map(String).join(" ")}`);
}

const threadId = `e-${randomUUID()}`;
const agent = new HttpAgent({ url: `${base}/v1/ag-ui/${workflow}`, threadId });
const report = { threadId, events: [], runs: [], cancel: null, heldWhenCancelling: null };
agent.subscribe({ onEvent: ({ event }) => { report.events.push(event); } });

async function run(subscriber = {}) {
  const outcome = { error: null, runErrors: [], finished: null };
  try {
    const result = await agent.runAgent({}, {
      ...subscriber,
      onRunFinishedEvent: ({ outcome: kind }) => { outcome.finished = kind; },
      onRunErrorEvent: ({ event }) => { outcome.runErrors.push(event); },
      onRunFailed: ({ error }) => { outcome.error = String(error); },
    });
    outcome.result = result.result ?? null;
  } catch (error) {
    outcome.error = String(error && error.stack || error);
  }
  report.runs.push(outcome);
}

mkdirSync(holds, { recursive: true });
const hold = join(holds, threadId);
writeFileSync(hold, "held");
let cancelled = null;
agent.addMessage({ id: randomUUID(), role: "user", content: "Do the slow thing" });
await run({
  onToolCallStartEvent: ({ event }) => {
    if (event.toolCallName !== "slow" || cancelled) return;
    cancelled = (async () => {  // once the tool's thread runs: cancel the session
      for (let i = 0; i < 500 && !existsSync(`${hold}.started`); i++) await sleep(20);
      const answer = await fetch(`${base}/v1/sessions/${threadId}/cancel`, { method: "POST" });
      report.cancel = { status: answer.status, body: await answer.json() };
    })();
  },
  onCustomEvent: ({ event }) => {
    if (event.name !== "phaseflow.turn_cancelling") return;
    report.heldWhenCancelling = existsSync(hold);
    rmSync(hold, { force: true });  // the thread may end now
  },
});
await cancelled;
agent.addMessage({ id: randomUUID(), role: "user", content: "Tell me a story" });
await run();
report.messages = agent.messages;
report.console = consoleLines;
process.stdout.write(JSON.stringify(report));
