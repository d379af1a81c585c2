// phaseflow web view: a workflow's phase graph drawn as SVG from its JSON form
// (GET /v1/workflows/{name}/graph?format=json). Phases are laid out top-down in rows by
// their distance from the initial phase; an edge to an earlier or the same row bends
// round the side. Each phase is a <g data-phase="NAME">; mark() flags the visited ones
// and gives the current one aria-current="step".
"use strict";

const PFGraph = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 150, H = 40, GAP_X = 30, GAP_Y = 56, PAD = 24;

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

  function short(text, n) {
    return text.length > n ? text.slice(0, n - 1) + "…" : text;
  }

  function draw(container, graph, options) {
    const opts = options || {};
    const {rows} = layers(graph);
    const widest = Math.max(1, ...rows.map((r) => r.length));
    const SIDE = 60; // room either side for the edges that go back up
    const width = SIDE * 2 + widest * W + (widest - 1) * GAP_X;
    const height = PAD * 2 + rows.length * H + (rows.length - 1) * GAP_Y;
    const pos = new Map();
    rows.forEach((row, r) => {
      const rowWidth = row.length * W + (row.length - 1) * GAP_X;
      const left = (width - rowWidth) / 2;
      row.forEach((p, i) => pos.set(p.name, {x: left + i * (W + GAP_X), y: PAD + r * (H + GAP_Y), row: r, col: i}));
    });
    const root = svg("svg", {viewBox: `0 0 ${width} ${height}`, class: "phase-graph",
                             role: "group", "aria-label": "Phase graph"});
    root.append(svg("defs", {}, svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"},
      svg("path", {d: "M0,0 L10,5 L0,10 z", class: "arrowhead"}))));
    const edges = svg("g", {class: "edges"});
    let bend = 0;
    for (const e of graph.edges) {
      const a = pos.get(e.from), b = pos.get(e.to);
      if (!a || !b) continue;
      const mid = a.y + H / 2;
      let d;
      if (b.row > a.row) {
        d = `M${a.x + W / 2},${a.y + H} L${b.x + W / 2},${b.y}`;
      } else if (e.from === e.to) {
        d = `M${a.x + W},${a.y + 10} C${a.x + W + 30},${a.y - 10} ${a.x + W + 30},${a.y + H + 10} ${a.x + W},${a.y + H - 10}`;
      } else if (b.row === a.row) {
        const right = b.col > a.col;
        const shift = right ? -6 : 6;
        if (Math.abs(b.col - a.col) === 1) {
          d = right ? `M${a.x + W},${mid + shift} L${b.x},${mid + shift}`
                    : `M${a.x},${mid + shift} L${b.x + W},${mid + shift}`;
        } else {
          const dip = right ? a.y + H + 28 : a.y - 28;
          const y0 = right ? a.y + H : a.y;
          d = `M${a.x + W / 2},${y0} C${a.x + W / 2},${dip} ${b.x + W / 2},${dip} ${b.x + W / 2},${y0}`;
        }
      } else {
        // back up to an earlier row: round the nearer side of the drawing
        bend += 1;
        const leftSide = a.x + W / 2 < width / 2;
        const out = 12 + (bend % 4) * 10;
        if (leftSide) {
          const x = Math.min(a.x, b.x) - out;
          d = `M${a.x},${mid} C${x},${mid} ${x},${b.y + H / 2} ${b.x},${b.y + H / 2}`;
        } else {
          const x = Math.max(a.x, b.x) + W + out;
          d = `M${a.x + W},${mid} C${x},${mid} ${x},${b.y + H / 2} ${b.x + W},${b.y + H / 2}`;
        }
      }
      const label = `${e.from} → ${e.to}: ${e.condition}` + (e.description ? ` (${e.description})` : "");
      edges.append(svg("path", {d, class: "edge" + (e.trigger === "model" ? " model" : ""),
        "marker-end": "url(#arrow)", "data-from": e.from, "data-to": e.to}, svg("title", {}, label)));
    }
    root.append(edges);
    const nodes = new Map();
    for (const p of graph.phases) {
      const at = pos.get(p.name);
      const g = svg("g", {class: "phase" + (p.terminal ? " terminal" : "") + (p.initial ? " initial" : ""),
        "data-phase": p.name, transform: `translate(${at.x},${at.y})`});
      g.append(svg("title", {}, p.name + (p.goal ? ": " + p.goal : "") + (p.terminal ? " (final)" : "")));
      g.append(svg("rect", {width: W, height: H, rx: 8, class: "box"}));
      if (p.terminal) g.append(svg("rect", {x: 4, y: 4, width: W - 8, height: H - 8, rx: 6, class: "inner"}));
      g.append(svg("text", {x: W / 2, y: H / 2 + 5, "text-anchor": "middle"}, short(p.name, 18)));
      if (opts.onSelect) {
        g.setAttribute("tabindex", "0");
        g.setAttribute("role", "button");
        g.setAttribute("aria-label", "Phase " + p.name);
        g.addEventListener("click", () => opts.onSelect(p.name));
        g.addEventListener("keydown", (ev) => {
          if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); opts.onSelect(p.name); }
        });
      }
      nodes.set(p.name, g);
      root.append(g);
    }
    container.replaceChildren(root);

    // Flag the visited phases and the current one (aria-current="step").
    function mark(visited, current) {
      for (const [name, g] of nodes) {
        g.classList.toggle("visited", visited.has(name));
        g.classList.toggle("current", name === current);
        if (name === current) g.setAttribute("aria-current", "step");
        else g.removeAttribute("aria-current");
      }
    }
    return {mark, nodes};
  }

  return {draw};
})();
