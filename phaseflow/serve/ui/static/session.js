// phaseflow web view: one session. Built from its events (the stream replays the stored
// log, then follows live), with the session resource for its status and pending approval.
"use strict";

(() => {
  const {api, el, json, when, showError, follow} = PF;
  const sid = PF.pathPart(/^\/ui\/sessions\//);
  const path = "/v1/sessions/" + encodeURIComponent(sid);
  const conversation = document.getElementById("conversation");
  const timeline = document.getElementById("timeline");
  const visited = new Set();
  const DECISION_BUTTONS = ["approve", "approve-turn", "approve-session", "reject"];
  let session = null;
  let graph = null;
  let current = null;
  let where = []; // the session's path: [workflow, phase, called workflow, its phase, ...]
  let drawn = null; // the workflow whose graph is drawn
  const tried = new Set(); // the workflows whose graphs were asked for
  let typing = null;
  // turns whose turn_finished was shown: a text delta of theirs that arrives late (a
  // live delta queued while the stored events were read) is not shown again
  const finishedTurns = new Set();
  // turns whose reply was cut at the output limit and continued: turn -> continuations
  const continued = new Map();
  const startedAt = new Map(); // turn -> when it started (its end says how long it took)
  let refreshing = null;
  let ended = false; // the session has finished: its stream has nothing more to bring

  document.getElementById("session-id").textContent = sid;
  document.title = "Session " + sid + " · phaseflow";

  // A time of day to the millisecond: turns a few milliseconds apart read apart.
  function clock(seconds) {
    if (!seconds) return "";
    return new Date(seconds * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit",
      second: "2-digit", fractionalSecondDigits: 3, hour12: false});
  }

  function took(seconds) {
    return seconds < 1 ? Math.round(seconds * 1000) + " ms"
      : seconds < 120 ? seconds.toFixed(1) + " s" : Math.round(seconds / 60) + " min";
  }

  // What a pending call's reason adds to its name: "needs approval" for the default
  // reason ("NAME needs approval"), else the reason, without the name said twice.
  function askedFor(name, reason) {
    const text = String(reason || "").trim();
    if (!text || text === name + " needs approval") return "needs approval";
    return text.startsWith(name + " ") ? text.slice(name.length + 1) : "needs approval: " + text;
  }

  function badge(status) {
    return el("span", {class: "badge " + String(status).replace(/[^a-z_]/g, ""), text: status});
  }

  function item(kind, turn, ...children) {
    const li = el("li", {class: "entry " + kind, dataset: {turn: String(turn)}}, ...children);
    conversation.append(li);
    return li;
  }

  function turnBlock(turn) {
    let block = timeline.querySelector(`li[data-turn="${turn}"]`);
    if (!block) {
      block = el("li", {dataset: {turn: String(turn)}}, el("h3", {text: "Turn " + turn}),
                 el("ul", {class: "steps"}));
      timeline.append(block);
    }
    return block.querySelector("ul");
  }

  function step(turn, kind, ...children) {
    turnBlock(turn).append(el("li", {class: "step " + kind}, ...children));
  }

  function stateChange(e) {
    const rows = el("table", {class: "changes"},
      el("thead", {}, el("tr", {}, el("th", {scope: "col", text: "key"}),
        el("th", {scope: "col", text: "before"}), el("th", {scope: "col", text: "after"}))));
    const body = el("tbody");
    for (const key of e.keys || []) {
      const old = e.old ? e.old[key] : undefined, now = e.new ? e.new[key] : undefined;
      body.append(el("tr", {}, el("th", {scope: "row", text: key}),
        el("td", {}, el("code", {text: old === undefined || old === null ? "—" : JSON.stringify(old)})),
        el("td", {}, el("code", {text: now === undefined || now === null ? "—" : JSON.stringify(now)}))));
    }
    rows.append(body);
    step(e.turn, "state", el("p", {}, "state written by ", el("strong", {text: e.source || "?"})), rows);
  }

  // The graph drawn is the one the path starts in: the phases of the path below it are
  // marked inside the called workflows' boxes.
  function markGraph() {
    if (!graph) return;
    if (where.length >= 2 && where[0] === drawn) {
      const phases = where.filter((_, i) => i % 2 === 1);
      graph.mark(visited, phases[0], phases.slice(1));
    } else if (where.length >= 2) {
      graph.mark(visited, "⇢ " + where[0], []); // handed off to a workflow drawn as a node
    } else {
      graph.mark(visited, current);
    }
  }

  async function drawGraph(name) {
    const g = await api("/v1/workflows/" + encodeURIComponent(name) + "/graph?format=json");
    drawn = g.graph.workflow || name;
    visited.add(g.graph.initial);
    graph = PFGraph.draw(document.getElementById("graph"), g.graph);
    markGraph();
  }

  function setPhase(name) {
    if (!name) return;
    current = name;
    visited.add(name);
    document.getElementById("session-phase").textContent = name;
    markGraph();
  }

  function onEvent(e) {
    const turn = e.turn || 0;
    switch (e.type) {
      case "turn_started":
        // a timer's turn: no user wrote its input (the session's note)
        if (e.note === "timer") item("user timer", turn, el("p", {class: "who", text: "Timer · turn " + turn}), el("p", {class: "text", text: e.message}));
        else item("user", turn, el("p", {class: "who", text: "User · turn " + turn}), el("p", {class: "text", text: e.message}));
        startedAt.set(turn, e.at);
        turnBlock(turn).append(el("li", {class: "step started"}, "turn started ",
          el("time", {datetime: new Date(e.at * 1000).toISOString(), title: when(e.at), text: clock(e.at)})));
        break;
      case "text_delta":
        if (finishedTurns.has(turn)) break;
        if (!typing) typing = item("assistant typing", turn, el("p", {class: "who", text: "Assistant (typing)"}), el("p", {class: "text"}));
        typing.querySelector(".text").append(e.text);
        break;
      case "tool_call":
        item("tool-call", turn, el("p", {class: "who"}, "Tool call ", el("span", {class: "tool", text: e.name}), " ", el("code", {class: "muted", text: e.call_id})),
             el("pre", {text: json(e.arguments)}));
        break;
      case "tool_result":
        item("tool-result " + (e.status === "ok" ? "" : "bad"), turn,
             el("p", {class: "who"}, "Result of ", el("span", {class: "tool", text: e.name}), " ", badge(e.status)),
             el("pre", {text: e.content}));
        step(turn, "tool", el("span", {class: "tool", text: e.name}), " ", badge(e.status));
        break;
      case "approval_requested":
        item("approval-asked", turn, el("p", {class: "who"}, el("span", {class: "tool", text: e.name}), " " + askedFor(e.name, e.reason)),
             el("pre", {text: json(e.arguments)}));
        step(turn, "approval", "approval requested: ", el("span", {class: "tool", text: e.name}));
        break;
      case "approval_resolved":
        item("approval-done", turn, el("p", {class: "who"}, "Operator decision on ", el("span", {class: "tool", text: e.name}), ": ", badge(e.decision)),
             e.reason ? el("p", {class: "muted", text: e.reason}) : null);
        step(turn, "approval", "approval ", badge(e.decision), " for ", el("span", {class: "tool", text: e.name}));
        break;
      case "state_changed":
        stateChange(e);
        break;
      case "trust_changed":
        step(turn, "trust", "trust ", badge(e.change), " for ", el("span", {class: "tool", text: e.tool}));
        break;
      case "phase_changed":
        step(turn, "phase", "phase ", el("strong", {text: e.from_phase}), " → ", el("strong", {text: e.to_phase}),
             e.trigger ? el("span", {class: "muted", text: " (" + e.trigger + ")"}) : null);
        visited.add(e.from_phase);
        setPhase(e.to_phase);
        break;
      case "retrying":
        item("note", turn, el("p", {class: "muted", text: `retrying (attempt ${e.attempt}): ${e.message}`}));
        break;
      case "error":
        item("error", turn, el("p", {}, badge("error"), " ", el("code", {text: e.code}), " ", e.message));
        step(turn, "error", badge("error"), " ", e.code);
        break;
      case "reply_continued":
        // the reply was cut at the model's output limit; the model goes on, and the
        // parts are one reply (its message is marked "continued" when it is shown)
        continued.set(turn, e.continuation);
        if (typing) typing.querySelector(".who").replaceChildren("Assistant (typing) ", badge("continued"));
        step(turn, "continued", "reply cut at the output limit: continuation " + e.continuation + " of " + e.of,
             e.calls ? el("span", {class: "muted", text: " (" + e.calls + " call" + (e.calls === 1 ? "" : "s") + " not run)"}) : null);
        break;
      case "turn_cancelling":
        item("note cancelling", turn, el("p", {}, badge("cancelling"), " cancelled; waiting for ",
             ...(e.tools || []).flatMap((name, i) => [i ? ", " : "", el("span", {class: "tool", text: name})]),
             " to stop"));
        step(turn, "cancelling", badge("cancelling"), " waiting for ", (e.tools || []).join(", "));
        break;
      case "turn_finished":
        finishedTurns.add(turn);
        if (typing) { typing.remove(); typing = null; }
        if (e.reply) {
          const parts = continued.get(turn);
          const who = el("p", {class: "who", text: "Assistant · turn " + turn});
          if (parts) who.append(" ", el("span", {class: "badge continued", title: "cut at the output limit and continued " + parts + (parts === 1 ? " time" : " times"), text: "continued"}));
          item("assistant" + (parts ? " continued" : ""), turn, who, el("p", {class: "text", text: e.reply}));
        }
        item("finished", turn, el("p", {class: "muted"}, "turn " + turn + " ended: ", badge(e.status)));
        step(turn, "finished", "turn ended: ", badge(e.status),
             startedAt.has(turn) && e.at ? " after " + took(Math.max(0, e.at - startedAt.get(turn))) : "");
        break;
      default:
        return;
    }
    if (e.type !== "text_delta") refresh();
  }

  function showSession(s) {
    session = s;
    const status = document.getElementById("session-status");
    status.replaceChildren(badge(s.status));
    status.dataset.status = s.status;
    document.getElementById("session-turn").textContent = String(s.turn);
    const link = document.getElementById("workflow-link");
    link.textContent = s.workflow;
    link.href = "/ui/workflows/" + encodeURIComponent(s.workflow);
    where = s.path || [];
    document.getElementById("session-path").textContent = where.join(" › ");
    setPhase(s.phase);
    // handed off to a workflow this server also serves: draw that one
    if (graph && where.length >= 2 && where[0] !== drawn && !tried.has(where[0])) {
      tried.add(where[0]);
      drawGraph(where[0]).catch(() => {}); // not served here: its hand-off node is marked
    }
    if (s.status === "finished" && !ended) {
      ended = true; // "live" would promise more: a finished session takes no turn again
      document.getElementById("stream-state").textContent = "no: the session has finished";
    }
    const box = document.getElementById("approval");
    const pending = s.pending_approval;
    if (pending) {
      box.dataset.callId = pending.call_id;
      document.getElementById("approval-name").textContent = pending.name;
      document.getElementById("approval-reason").textContent = askedFor(pending.name, pending.reason);
      document.getElementById("approval-arguments").textContent = json(pending.arguments);
      for (const id of DECISION_BUTTONS) document.getElementById(id).disabled = false;
      box.hidden = false;
    } else {
      box.hidden = true;
    }
  }

  // The session resource again (status, phase, pending approval), at most one at a time.
  function refresh() {
    if (refreshing) { refreshing.again = true; return; }
    refreshing = {again: false};
    Promise.all([api(path).then(showSession), api(path + "/trust").then(showTrust)]).catch((err) => showError(err.message)).finally(() => {
      const again = refreshing.again;
      refreshing = null;
      if (again) refresh();
    });
  }

  async function decide(decision) {
    const box = document.getElementById("approval");
    const callId = box.dataset.callId;
    for (const id of DECISION_BUTTONS) document.getElementById(id).disabled = true;
    const note = document.getElementById("approval-note");
    try {
      await api(path + "/approvals/" + encodeURIComponent(callId), {
        method: "POST", headers: {"Prefer": "respond-async"},
        body: note.value ? {decision, reason: note.value} : {decision}});
      note.value = "";
      box.hidden = true;
      showError("");
    } catch (err) {
      showError("The decision was not taken: " + err.message);
      refresh();
    }
  }

  document.getElementById("approve").addEventListener("click", () => decide("approve"));
  document.getElementById("approve-turn").addEventListener("click", () => decide("approve_turn"));
  document.getElementById("approve-session").addEventListener("click", () => decide("approve_session"));
  document.getElementById("reject").addEventListener("click", () => decide("reject"));

  // What the session trusts (GET .../trust), each with a button that takes it back.
  const COVERS = {any_arguments: "any arguments", same_arguments: "the same arguments",
                  same_command: "the same command"};
  function showTrust(listing) {
    const list = document.getElementById("trust-list");
    const entries = (listing && listing.trust) || [];
    document.getElementById("trust-none").hidden = entries.length > 0;
    list.replaceChildren(...entries.map((t) => {
      const revoke = el("button", {type: "button", class: "danger revoke", text: "Revoke",
                                   dataset: {tool: t.tool}});
      revoke.addEventListener("click", () => revokeTrust(t.tool, revoke));
      return el("li", {dataset: {tool: t.tool, covers: t.covers, scope: t.scope}},
                el("span", {class: "tool", text: t.tool}), " ",
                el("span", {class: "muted", text: (COVERS[t.covers] || t.covers) + ", for the " + t.scope}),
                t.detail ? el("code", {class: "muted", title: t.detail, text: " " + t.detail.slice(0, 12)}) : null,
                " ", revoke);
    }));
  }

  async function revokeTrust(tool, button) {
    button.disabled = true;
    try {
      showTrust(await api(path + "/trust/" + encodeURIComponent(tool), {method: "DELETE"}));
      showError("");
    } catch (err) {
      showError("The trust was not revoked: " + err.message);
      button.disabled = false;
    }
  }

  async function start() {
    try {
      const s = await api(path);
      showSession(s);
      showTrust(await api(path + "/trust"));
      tried.add(s.workflow);
      if (where.length >= 2 && where[0] !== s.workflow) {
        tried.add(where[0]);
        await drawGraph(where[0]).catch(() => drawGraph(s.workflow));
      } else {
        await drawGraph(s.workflow);
      }
    } catch (err) {
      showError(err.status === 404 ? "No session " + sid + " on this server." : "Cannot load the session: " + err.message);
      if (!session) return;
    }
    const state = document.getElementById("stream-state");
    follow(sid, onEvent, (what) => { if (!ended) state.textContent = what; });
  }

  start();
})();
