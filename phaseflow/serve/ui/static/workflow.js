// phaseflow web view: a workflow's graph and, per phase, what the model is told there
// for a state the operator types (GET /v1/workflows/{name}/describe, as
// `phaseflow describe` prints it).
"use strict";

(() => {
  const {api, el, showError} = PF;
  const name = PF.pathPart(/^\/ui\/workflows\//);
  const base = "/v1/workflows/" + encodeURIComponent(name);
  const phaseSelect = document.getElementById("describe-phase");
  const stateInput = document.getElementById("describe-state");
  let graph = null;
  let inside = []; // a phase chosen inside a called workflow: the phases below the top one

  document.getElementById("workflow-name").textContent = name;
  document.title = "Workflow " + name + " · phaseflow";

  async function describe() {
    let state;
    try {
      state = JSON.parse(stateInput.value || "{}");
    } catch (e) {
      showError("The state is not JSON: " + e.message);
      return;
    }
    if (state === null || typeof state !== "object" || Array.isArray(state)) {
      showError("The state must be a JSON object, such as {\"amount\": 120}.");
      return;
    }
    const chosen = [phaseSelect.value].concat(inside);
    const q = new URLSearchParams(inside.length ? {path: chosen.join("/"), state: JSON.stringify(state)}
                                                : {phase: phaseSelect.value, state: JSON.stringify(state)});
    try {
      const d = await api(base + "/describe?" + q);
      showError("");
      document.getElementById("describe-instructions").textContent = d.instructions || "(no instructions)";
      document.getElementById("describe-navigation").textContent = d.navigation;
      document.getElementById("describe-notes").textContent = d.notes.join("; ");
      document.getElementById("describe-path").textContent = chosen.join(" › ");
      if (graph) graph.mark(new Set(), chosen[0], chosen.slice(1));
    } catch (err) {
      showError(err.message);
    }
  }

  function select(path) {
    phaseSelect.value = path[0];
    inside = path.slice(1);
    describe();
  }

  document.getElementById("describe-form").addEventListener("submit", (e) => {
    e.preventDefault();
    describe();
  });
  phaseSelect.addEventListener("change", () => { inside = []; describe(); });

  async function start() {
    try {
      const data = await api("/v1/workflows");
      const info = data.workflows.find((w) => w.name === name);
      if (!info) {
        showError("This server does not serve a workflow " + name + ".");
        return;
      }
      document.getElementById("workflow-description").textContent = info.description;
      const g = await api(base + "/graph?format=json");
      graph = PFGraph.draw(document.getElementById("graph"), g.graph, {onSelect: select});
      const list = document.getElementById("phases");
      for (const p of g.graph.phases) {
        phaseSelect.append(el("option", {value: p.name, text: p.name}));
        list.append(el("li", {}, el("strong", {text: p.name}), p.terminal ? " (final)" : "",
          p.goal ? el("span", {class: "muted", text: " — " + p.goal}) : null));
      }
      phaseSelect.value = g.graph.initial;
      describe();
    } catch (err) {
      showError("Cannot load the workflow: " + err.message);
    }
  }

  start();
})();
