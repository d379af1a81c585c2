// A chat page built on the official AG-UI client (@ag-ui/client's HttpAgent) talking to
// `phaseflow serve`'s AG-UI endpoint on the page's own origin. What it shows is the
// client's own view of the conversation: `agent.messages` and `agent.state`, updated
// as the events stream in; an approval the run stopped for is answered by the next
// run's `resume`.
import { HttpAgent } from "@ag-ui/client";

// a random id (crypto.randomUUID exists in secure contexts only: not on plain http
// beyond loopback)
const newId = () => crypto.randomUUID?.() ?? Array.from(
  crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");

const params = new URLSearchParams(location.search);
const workflow = params.get("workflow") || "refund-desk";
const threadId = params.get("thread") || newId();
const agent = new HttpAgent({ url: `/v1/ag-ui/${encodeURIComponent(workflow)}`, threadId });

const $ = (id) => document.getElementById(id);
$("thread").textContent = `${workflow} · thread ${threadId}`;

function render() {
  const log = $("log");
  log.replaceChildren(...agent.messages.map((message) => {
    const item = document.createElement("li");
    item.dataset.role = message.role;
    if (message.role === "tool") {
      item.dataset.callId = message.toolCallId;
      item.textContent = `→ ${message.content}`;
      return item;
    }
    item.append(typeof message.content === "string" ? message.content : "");
    for (const call of message.toolCalls || []) {
      const line = document.createElement("span");
      line.className = "call";
      line.dataset.callId = call.id;
      line.textContent = `${call.function.name}(${call.function.arguments})`;
      item.append(line);
    }
    return item;
  }));
  $("state").textContent = JSON.stringify(agent.state, null, 2);
  const [pending] = agent.pendingInterrupts;
  $("approval").hidden = !pending || agent.isRunning;
  if (pending) $("approval-text").textContent = pending.message || `${pending.id} needs approval`;
  $("send").disabled = agent.isRunning;
}

agent.subscribe({ onMessagesChanged: render, onStateChanged: render });

async function run(parameters = {}) {
  $("status").textContent = "";
  const problems = [];
  try {
    await agent.runAgent(parameters, {
      onRunErrorEvent: ({ event }) => { problems.push(`${event.code}: ${event.message}`); },
    });
  } catch (error) {
    problems.push(String(error));
  }
  $("status").textContent = problems.join("; ");
  render();
}

$("say").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("text").value.trim();
  if (!text || agent.isRunning) return;
  $("text").value = "";
  agent.addMessage({ id: newId(), role: "user", content: text });
  await run();
});

function decide(decision) {
  const resume = agent.pendingInterrupts.map((interrupt) => ({
    interruptId: interrupt.id, status: "resolved",
    payload: decision === "approve" ? { decision } : { decision, reason: "rejected in the chat" },
  }));
  return run({ resume });
}
$("approve").addEventListener("click", () => decide("approve"));
$("reject").addEventListener("click", () => decide("reject"));
render();
document.body.dataset.ready = "true";
