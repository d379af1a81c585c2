// phaseflow web view: the sessions, newest first, filtered by workflow and status; the
// list is read again every two seconds (the API has no stream of the list itself).
"use strict";

(() => {
  const {api, el, when} = PF;
  const body = document.querySelector("#sessions tbody");
  const stateLine = document.getElementById("list-state");
  const more = document.getElementById("more");
  const workflowSelect = document.getElementById("filter-workflow");
  const statusSelect = document.getElementById("filter-status");
  const params = new URLSearchParams(location.search);
  let shown = 50;
  let timer = null;

  statusSelect.value = params.get("status") || "";

  function query(limit) {
    const q = new URLSearchParams({limit: String(limit)});
    if (workflowSelect.value) q.set("workflow", workflowSelect.value);
    if (statusSelect.value) q.set("status", statusSelect.value);
    return q;
  }

  function row(s) {
    const href = "/ui/sessions/" + encodeURIComponent(s.id);
    return el("tr", {dataset: {session: s.id, status: s.status}},
      el("td", {}, el("a", {href, text: s.id})),
      el("td", {text: s.workflow}),
      el("td", {}, el("span", {class: "badge " + s.status, text: s.status})),
      el("td", {text: s.phase}),
      el("td", {text: String(s.turn)}),
      el("td", {text: when(s.updated_at)}));
  }

  async function load() {
    clearTimeout(timer);
    try {
      // pages of at most 100: follow the cursor until `shown` rows are read
      const rows = [];
      let cursor = null;
      let next = null;
      do {
        const q = query(Math.min(100, shown - rows.length));
        if (cursor) q.set("cursor", cursor);
        const page = await api("/v1/sessions?" + q);
        rows.push(...page.sessions);
        next = page.next_cursor;
        cursor = next;
      } while (next && rows.length < shown);
      body.replaceChildren(...rows.map(row));
      more.hidden = !next;
      stateLine.textContent = rows.length ? `${rows.length} session${rows.length === 1 ? "" : "s"}, newest first; updated live` : "No session matches.";
    } catch (err) {
      stateLine.textContent = "Cannot read the sessions: " + err.message;
    }
    timer = setTimeout(load, 2000);
  }

  function filtersChanged() {
    const q = new URLSearchParams();
    if (workflowSelect.value) q.set("workflow", workflowSelect.value);
    if (statusSelect.value) q.set("status", statusSelect.value);
    history.replaceState(null, "", "/ui/" + (q.toString() ? "?" + q : ""));
    shown = 50;
    load();
  }

  workflowSelect.addEventListener("change", filtersChanged);
  statusSelect.addEventListener("change", filtersChanged);
  document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
  more.addEventListener("click", () => { shown += 50; load(); });

  async function start() {
    try {
      const data = await api("/v1/workflows");
      const list = document.getElementById("workflows");
      for (const w of data.workflows) {
        workflowSelect.append(el("option", {value: w.name, text: w.name}));
        list.append(el("li", {}, el("a", {href: "/ui/workflows/" + encodeURIComponent(w.name), text: w.name}),
          w.description ? el("span", {class: "muted", text: " — " + w.description}) : null));
      }
      workflowSelect.value = params.get("workflow") || "";
    } catch (err) {
      stateLine.textContent = "Cannot read the workflows: " + err.message;
    }
    load();
  }

  start();
})();
