// phaseflow web view: a workflow's phase graph drawn as SVG from its JSON form
// (GET /v1/workflows/{name}/graph?format=json). Phases are laid out top-down in rows by
// their distance from the initial phase; an edge to an earlier or the same row bends
// round the side; a guarded edge carries its description (or its guard), shortened, at
// its middle. The drawing keeps its own size (never scaled up; scaled down only to fit
// its column), so twelve phases in a line fit a 1400x900 window. Each phase is a
// <g data-phase="NAME">; mark() flags the visited ones, gives the current one
// aria-current="step" and scrolls the graph's box (not the page) to show it. A composed
// workflow's called workflows are drawn as boxes (<figure class="call-cluster">) after
// it, each holding the callee's graph; a hand-off is a node "⇢ NAME"; mark() takes the
// path below the current phase and marks the innermost phase inside the clusters.
"use strict";

const PFGraph = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 132, H = 26, GAP_X = 48, PAD = 6;
  const TALL = 560; // the most a drawing's rows take: the gaps shrink to fit, down to 22
  const LABEL = 26; // characters of an edge's label (the whole text is its tooltip)
  const CHAR = 6.2, LINE = 13; // an 11 px label's character width and line height

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }

  // Rows: breadth-first distance from the initial phase; unreachable phases last.
  function layers(graph) {
    const depth = new Map([[graph.initial, 0]]);
    const queue = [graph.initial];
    while (queue.length) {
      const at = queue.shift();
      for (const e of graph.edges) {
        if (e.from === at && !depth.has(e.to)) {
          depth.set(e.to, depth.get(at) + 1);
          queue.push(e.to);
        }
      }
    }
    let deepest = Math.max(0, ...depth.values());
    const rows = [];
    for (const p of graph.phases) {
      if (!depth.has(p.name)) depth.set(p.name, deepest + 1);
      const d = depth.get(p.name);
      (rows[d] = rows[d] || []).push(p);
    }
    return {rows: rows.filter(Boolean), depth};
  }

  // What a guarded edge says on the drawing: its description, else its guard. An edge
  // without a guard ("always", or the model's bare choice, dashed) says nothing more than
  // its arrow (its tooltip still has its description).
  function edgeLabel(e) {
    const guard = String(e.condition || "").replace(/^model:\s*/, "");
    if (!guard || guard === "always" || guard === "model") return "";
    return e.description || guard;
  }

  function overlaps(a, b) {
    return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
  }

  function short(text, n) {
    return text.length > n ? text.slice(0, n - 1) + "…" : text;
  }

  // A composed workflow's JSON: a hand-off becomes a node of its own ("⇢ billing-desk",
  // data-handoff), reached by a dashed edge from the phase that offers it.
  function withHandoffs(graph) {
    const handoffs = graph.handoffs || [];
    if (!handoffs.length) return graph;
    const phases = graph.phases.slice(), edges = graph.edges.slice();
    for (const h of handoffs) {
      const target = h.workflow || h.to;
      const name = "⇢ " + target;
      if (!phases.some((p) => p.name === name)) phases.push({name, goal: "hand-off to " + target, handoff: target});
      edges.push({from: h.from, to: name, condition: "hand-off", trigger: h.trigger, description: h.description});
    }
    return {...graph, phases, edges};
  }

  function draw(container, whole, options) {
    const opts = options || {};
    const graph = withHandoffs(whole);
    const {rows} = layers(graph);
    const widest = Math.max(1, ...rows.map((r) => r.length));
    const SIDE = 96; // room either side: the edges that go back up, and labels
    const width = SIDE * 2 + widest * W + (widest - 1) * GAP_X;
    // the gap between rows: room for labels when there are few rows, less for many
    const GAP_Y = rows.length < 2 ? 0
      : Math.max(22, Math.min(64, Math.floor((TALL - rows.length * H) / (rows.length - 1))));
    const height = PAD * 2 + rows.length * H + (rows.length - 1) * GAP_Y;
    const pos = new Map();
    rows.forEach((row, r) => {
      const rowWidth = row.length * W + (row.length - 1) * GAP_X;
      const left = (width - rowWidth) / 2;
      row.forEach((p, i) => pos.set(p.name, {x: left + i * (W + GAP_X), y: PAD + r * (H + GAP_Y), row: r, col: i}));
    });
    const root = svg("svg", {viewBox: `0 0 ${width} ${height}`, width, height,
                             class: "phase-graph", role: "group", "aria-label": "Phase graph"});
    root.append(svg("defs", {}, svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"},
      svg("path", {d: "M0,0 L10,5 L0,10 z", class: "arrowhead"}))));
    const edges = svg("g", {class: "edges"});
    const labels = svg("g", {class: "edge-labels"});
    const placed = []; // the boxes and labels so far: a label that would cover one moves down
    for (const at of pos.values()) placed.push({x: at.x - 2, y: at.y - 2, w: W + 4, h: H + 4});
    let bend = 0;
    for (const e of graph.edges) {
      const a = pos.get(e.from), b = pos.get(e.to);
      if (!a || !b) continue;
      const mid = a.y + H / 2;
      let d;
      let at; // the middle of the edge, where its label goes
      if (b.row > a.row) {
        d = `M${a.x + W / 2},${a.y + H} L${b.x + W / 2},${b.y}`;
        // beside a straight drop, centred on a slanted edge
        at = {x: (a.x + b.x + W) / 2, y: (a.y + H + b.y) / 2, centred: a.x !== b.x};
      } else if (e.from === e.to) {
        d = `M${a.x + W},${a.y + 6} C${a.x + W + 26},${a.y - 8} ${a.x + W + 26},${a.y + H + 8} ${a.x + W},${a.y + H - 6}`;
        at = {x: a.x + W + 22, y: mid};
      } else if (b.row === a.row) {
        const right = b.col > a.col;
        const shift = right ? -6 : 6;
        if (Math.abs(b.col - a.col) === 1) {
          d = right ? `M${a.x + W},${mid + shift} L${b.x},${mid + shift}`
                    : `M${a.x},${mid + shift} L${b.x + W},${mid + shift}`;
          at = {x: (a.x + b.x + W) / 2, y: mid + shift * 2};
        } else {
          const dip = right ? a.y + H + 28 : a.y - 28;
          const y0 = right ? a.y + H : a.y;
          d = `M${a.x + W / 2},${y0} C${a.x + W / 2},${dip} ${b.x + W / 2},${dip} ${b.x + W / 2},${y0}`;
          at = {x: (a.x + b.x + W) / 2, y: (y0 + 3 * dip) / 4};
        }
      } else {
        // back up to an earlier row: round the nearer side of the drawing
        bend += 1;
        const leftSide = a.x + W / 2 < width / 2;
        const out = 12 + (bend % 4) * 10;
        if (leftSide) {
          const x = Math.min(a.x, b.x) - out;
          d = `M${a.x},${mid} C${x},${mid} ${x},${b.y + H / 2} ${b.x},${b.y + H / 2}`;
          at = {x: (a.x + b.x + 6 * x) / 8, y: (mid + b.y + H / 2) / 2};
        } else {
          const x = Math.max(a.x, b.x) + W + out;
          d = `M${a.x + W},${mid} C${x},${mid} ${x},${b.y + H / 2} ${b.x + W},${b.y + H / 2}`;
          at = {x: (a.x + b.x + 2 * W + 6 * x) / 8, y: (mid + b.y + H / 2) / 2};
        }
      }
      const label = `${e.from} → ${e.to}: ${e.condition}` + (e.description ? ` (${e.description})` : "");
      edges.append(svg("path", {d, class: "edge" + (e.trigger === "model" ? " model" : ""),
        "marker-end": "url(#arrow)", "data-from": e.from, "data-to": e.to}, svg("title", {}, label)));
      const words = edgeLabel(e);
      if (words) labels.append(place(words, at, label));
    }
    root.append(edges);

    // A label beside the middle of its edge, moved down while it would cover another.
    function place(words, at, whole) {
      const text = short(words, LABEL);
      const w = text.length * CHAR;
      const box = {x: at.centred ? at.x - w / 2 : at.x + 5, y: at.y - LINE / 2, w, h: LINE};
      const start = box.y;
      for (let tries = 1; tries < 8 && placed.some((o) => overlaps(o, box)); tries++) {
        box.y = start + (tries % 2 ? 1 : -1) * Math.ceil(tries / 2) * LINE; // below, above, ...
      }
      placed.push(box);
      return svg("text", {x: box.x, y: box.y + LINE - 3, class: "edge-label"}, text, svg("title", {}, whole));
    }
    const nodes = new Map();
    root.append(labels);
    for (const p of graph.phases) {
      const at = pos.get(p.name);
      const g = svg("g", {class: "phase" + (p.terminal ? " terminal" : "") + (p.initial ? " initial" : "")
        + (p.call ? " calls" : "") + (p.handoff ? " handoff" : ""),
        "data-phase": p.name, transform: `translate(${at.x},${at.y})`});
      if (p.call) g.setAttribute("data-calls", p.call.workflow);
      if (p.handoff) g.setAttribute("data-handoff", p.handoff);
      g.append(svg("title", {}, p.name + (p.goal ? ": " + p.goal : "") + (p.terminal ? " (final)" : "")
        + (p.call ? " (calls " + p.call.workflow + ")" : "")));
      g.append(svg("rect", {width: W, height: H, rx: p.handoff ? 2 : 8, class: "box"}));
      if (p.terminal) g.append(svg("rect", {x: 3, y: 3, width: W - 6, height: H - 6, rx: 5, class: "inner"}));
      g.append(svg("text", {x: W / 2, y: H / 2 + 4.5, "text-anchor": "middle"}, short((p.call ? "⤵ " : "") + p.name, 19)));
      if (opts.onSelect && !p.handoff) {
        g.setAttribute("tabindex", "0");
        g.setAttribute("role", "button");
        g.setAttribute("aria-label", "Phase " + p.name);
        const chosen = (opts.prefix || []).concat([p.name]);
        g.addEventListener("click", () => opts.onSelect(chosen));
        g.addEventListener("keydown", (ev) => {
          if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); opts.onSelect(chosen); }
        });
      }
      nodes.set(p.name, g);
      root.append(g);
    }
    container.replaceChildren(root);
    // Each called workflow: a box (a cluster) after the drawing, named for the phase that
    // calls it, with its own graph inside (and so on down).
    const clusters = new Map();
    for (const p of graph.phases) {
      if (!p.call) continue;
      const box = document.createElement("figure");
      box.className = "call-cluster";
      box.dataset.caller = p.name;
      box.dataset.workflow = p.call.workflow;
      const caption = document.createElement("figcaption");
      caption.textContent = p.name + " calls " + p.call.workflow;
      box.append(caption);
      const inside = document.createElement("div");
      box.append(inside);
      container.append(box);
      if (p.call.graph) {
        clusters.set(p.name, draw(inside, p.call.graph,
          {...opts, nested: true, prefix: (opts.prefix || []).concat([p.name])}));
      } else {
        inside.textContent = "(deeper than the drawing goes)";
      }
    }
    // Trim the drawing to what was drawn (the room left either side for back edges and
    // labels is often unused), so a narrow column shrinks it less.
    const drawn = root.getBBox();
    if (drawn.width > 0 && drawn.height > 0) {
      const m = 4, w = Math.ceil(drawn.width + 2 * m), h = Math.ceil(drawn.height + 2 * m);
      root.setAttribute("viewBox", `${drawn.x - m} ${drawn.y - m} ${w} ${h}`);
      root.setAttribute("width", w);
      root.setAttribute("height", h);
    }
    // The graph's box ends where the first screen does: a taller graph scrolls inside
    // it (and mark() keeps the current phase in view), the page does not.
    function fit() {
      const top = container.getBoundingClientRect().top + window.scrollY;
      container.style.maxHeight = Math.max(240, window.innerHeight - top - 16) + "px";
    }
    if (!opts.nested) {
      fit();
      window.addEventListener("resize", fit);
    }

    // Flag the visited phases and the current one (aria-current="step"); when the
    // graph's box scrolls (a graph taller than the window), bring the current one into it.
    // ``inner`` (the phases below ``current`` in a path: the phase the called workflow
    // is in, and so on) is marked in the cluster of ``current``'s call; the cluster holding
    // the innermost phase is flagged "on-path".
    function mark(visited, current, inner) {
      const below = inner || [];
      for (const [name, g] of nodes) {
        g.classList.toggle("visited", visited.has(name));
        g.classList.toggle("current", name === current);
        g.classList.toggle("on-path", name === current && below.length > 0);
        if (name === current) g.setAttribute("aria-current", below.length ? "location" : "step");
        else g.removeAttribute("aria-current");
      }
      for (const [caller, cluster] of clusters) {
        const on = caller === current && below.length > 0;
        cluster.mark(new Set(), on ? below[0] : null, on ? below.slice(1) : []);
        const box = container.querySelector(`:scope > figure[data-caller="${CSS.escape(caller)}"]`);
        if (box) box.classList.toggle("on-path", on);
      }
      if (opts.nested) return;
      const deepest = container.querySelector('[aria-current="step"]');
      const g = deepest || nodes.get(current);
      if (!g || container.scrollHeight <= container.clientHeight) return;
      const box = g.getBoundingClientRect(), frame = container.getBoundingClientRect();
      if (box.top < frame.top || box.bottom > frame.bottom) {
        container.scrollTop += box.top - frame.top - (frame.height - box.height) / 2;
      }
    }
    return {mark, nodes};
  }

  return {draw};
})();
