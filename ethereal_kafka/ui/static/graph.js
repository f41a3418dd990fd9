/* Stream graph: the plan's operators per query (cytoscape + dagre layout), with live figures. */
"use strict";

(function () {
  const RUNS = {
    "kafka-source": { short: "Kafka source", color: "#cfe8d8", shape: "round-rectangle" },
    "kafka-sink": { short: "Kafka sink", color: "#d3e2fb", shape: "round-rectangle" },
    "spark-native": { short: "Spark-native", color: "#eef0f4", shape: "rectangle" },
    "framework": { short: "framework (transformWithState)", color: "#fbdcbc", shape: "cut-rectangle" },
    "python": { short: "Python stage (mapInArrow)", color: "#fdf1b8", shape: "rectangle" },
    "lookup": { short: "lookup (global table)", color: "#e6d9f7", shape: "barrel" },
    "dataframe": { short: "DataFrame plan", color: "#eef0f4", shape: "rectangle" },
  };
  let cy = null;
  let drawn = "";
  const sizes = {};
  const LAYOUT = { name: "dagre", rankDir: "LR", nodeSep: 24, rankSep: 70, padding: 16 };

  function legend() {
    const box = document.getElementById("graph-legend");
    if (box.childElementCount) return;
    for (const [key, value] of Object.entries(RUNS)) {
      box.append(EK.el("span", {}, EK.el("i", { style: `background:${value.color}` }), value.short));
    }
  }

  /* Live figures (or, for a stopped app, totals of the last run's epochs) per node, edge and query. */
  function figures(state) {
    const out = { node: {}, edge: {}, query: {} };
    const plan = state.plan;
    const add = (table, key, text) => { if (text) table[key] = (table[key] ? table[key] + "\n" : "") + text; };
    if (state.live) {
      const queries = state.live.queries || {};
      const sourceTotals = {};
      for (const q of plan.queries) {
        const f = queries[q.name];
        if (!f) continue;
        for (const [source, n] of Object.entries(f.records_in)) {
          const total = sourceTotals[source] || (sourceTotals[source] = { in: 0, dlq: 0, rate: 0, lag: 0 });
          total.in += n;
          total.dlq += (f.dead_lettered || {})[source] || 0;
          total.rate += EK.rate((s) => ((s.queries[q.name] || {}).records_in || {})[source] || 0) || 0;
          for (const parts of Object.values((f.lag || {})[source] || {})) total.lag += EK.sum(parts);
          const rate = EK.rate((s) => ((s.queries[q.name] || {}).records_in || {})[source] || 0);
          for (const edge of plan.edges) {
            if (edge.source === `source:${source}` && edge.target.startsWith(`${q.name}/`)) add(out.edge, edgeId(edge), EK.fmt.rate(rate));
          }
        }
        for (const [sink, n] of Object.entries(f.records_out)) {
          const rate = EK.rate((s) => ((s.queries[q.name] || {}).records_out || {})[sink] || 0);
          add(out.node, `sink:${sink}`, `out ${EK.fmt.int(n)} · ${EK.fmt.rate(rate || 0)}`);
          for (const edge of plan.edges) if (edge.target === `sink:${sink}`) add(out.edge, edgeId(edge), EK.fmt.rate(rate));
        }
        for (const late of f.late || []) {
          if (late.reason === "side-output") add(out.node, `sink:${late.origin}`, `late ${EK.fmt.int(late.records)}`);
          else add(out.query, q.name, `late (dropped by watermark) ${EK.fmt.int(late.records)}`);
        }
        const epochs = f.epochs || {};
        add(out.query, q.name, `epoch ${f.last_epoch ?? "-"} · ${EK.fmt.int(epochs.committed || 0)} committed` +
          (epochs.failed ? ` · ${epochs.failed} failed` : "") +
          (epochs.interrupted ? ` · ${epochs.interrupted} interrupted by the stop` : ""));
        for (const [nid, rows] of Object.entries(f.operators || {})) {
          const rate = EK.rate((s) => ((((s.queries[q.name] || {}).operators || {})[nid]) || {}).out || 0);
          add(out.node, nid, operatorLine(rows.in, rows.out, rows.out === null ? null : rate));
        }
        watermarks(plan, q.name, f.watermark_s ? f.watermark_s * 1000 : null, out);
      }
      for (const [source, t] of Object.entries(sourceTotals)) {
        add(out.node, `source:${source}`, `in ${EK.fmt.int(t.in)} · ${EK.fmt.rate(t.rate)}`);
        add(out.node, `source:${source}`, `lag ${EK.fmt.int(t.lag)}` + (t.dlq ? ` · dead-lettered ${EK.fmt.int(t.dlq)}` : ""));
      }
    } else {
      const since = (state.overview && state.overview.started_ms) || 0;
      const totals = {};
      // Each epoch counts once, as its last committed attempt ran (an epoch committed, then replayed because
      // Spark's commit log missed it, has two committed entries: the replay's figures are the same epoch's).
      const last = new Map();
      for (const e of state.epochs) {
        if (e.outcome !== "committed" || e.started_ms < since) continue;
        const key = `${e.query}/${e.checkpoint_id}/${e.epoch}`;
        const seen = last.get(key);
        if (!seen || seen.started_ms <= e.started_ms) last.set(key, e);
      }
      for (const e of last.values()) {
        const t = totals[e.query] || (totals[e.query] = { in: 0, out: 0, epochs: 0, last: null, operators: {}, watermark: null });
        t.in += Math.max(0, e.records_read != null ? e.records_read : e.records_in); t.out += e.records_out; t.epochs += 1; t.last = Math.max(t.last ?? e.epoch, e.epoch);
        if (e.watermark_ms) t.watermark = Math.max(t.watermark || 0, e.watermark_ms);
        for (const [nid, rows] of Object.entries(e.operators || {})) {
          const sum = t.operators[nid] || (t.operators[nid] = [0, 0]);
          for (const i of [0, 1]) sum[i] = sum[i] === null || rows[i] === null ? null : sum[i] + rows[i];
        }
      }
      for (const [query, t] of Object.entries(totals)) {
        add(out.query, query, `last run: ${EK.fmt.int(t.epochs)} epochs, in ${EK.fmt.int(t.in)}, out ${EK.fmt.int(t.out)}`);
        const q = plan.queries.find((x) => x.name === query);
        if (q && q.sinks.length === 1) add(out.node, `sink:${q.sinks[0]}`, `out ${EK.fmt.int(t.out)} (last run)`);
        for (const [nid, rows] of Object.entries(t.operators)) add(out.node, nid, operatorLine(rows[0], rows[1], null));
        watermarks(plan, query, t.watermark, out);
      }
    }
    return out;
  }

  function edgeId(edge) { return `e:${edge.source}->${edge.target}:${edge.label || ""}`; }

  /* "in N · out M · r rec/s"; a figure Spark does not count for the operator shows as n/a. */
  function operatorLine(rowsIn, rowsOut, rate) {
    const n = (v) => (v === null || v === undefined ? "n/a" : EK.fmt.int(v));
    return `in ${n(rowsIn)} · out ${n(rowsOut)}` + (rate !== null && rate !== undefined ? ` · ${EK.fmt.rate(rate)}` : "");
  }

  /* Each operator of `query` (and its sinks) with its watermark: the query's event-time watermark for what runs
     after a watermark is assigned, "no watermark" before. Spark keeps one watermark per query. */
  function watermarks(plan, query, watermarkMs, out) {
    const after = new Set();
    const next = {};
    for (const e of plan.edges) (next[e.source] = next[e.source] || []).push(e.target);
    const stack = plan.nodes.filter((n) => n.query === query && n.kind === "watermark").map((n) => n.id);
    while (stack.length) {
      const id = stack.pop();
      if (after.has(id)) continue;
      after.add(id);
      for (const t of next[id] || []) stack.push(t);
    }
    for (const node of plan.nodes) {
      if (node.query !== query) continue;
      const text = after.has(node.id)
        ? (watermarkMs ? `watermark ${EK.fmt.clock(watermarkMs)}` : "watermark: none yet")
        : "no watermark";
      out.node[node.id] = (out.node[node.id] ? out.node[node.id] + "\n" : "") + text;
    }
  }

  function nodeLabel(node, extra) {
    const runs = RUNS[node.runs] ? RUNS[node.runs].short : node.runs;
    let text = `${node.label}\n${runs}`;
    if (node.kind === "source") {
      const d = node.detail;
      text += `\n${(d.topics || []).join(", ") || d.topic_pattern || ""} · ${d.value_format}`;
    }
    if (node.kind === "sink") text += `\n${node.detail.topic || "(topic per row)"} · ${node.detail.guarantee}`;
    return extra ? `${text}\n${extra}` : text;
  }

  /* Label metrics shared by the measurement below and cytoscape's style, so a label fits its node exactly. */
  const FONT_SIZE = 12, LINE_HEIGHT = 1.3, MAX_TEXT = 300;
  const FONT_FAMILY = "Helvetica, Arial, sans-serif";
  /* Room the shape takes from its text: cut corners and barrel sides. */
  const SHAPE_PAD = { "cut-rectangle": 14, "barrel": 14 };
  let measure = null;

  function textWidth(text) {
    if (!measure) {
      measure = document.createElement("canvas").getContext("2d");
      measure.font = `${FONT_SIZE}px ${FONT_FAMILY}`;
    }
    return measure.measureText(text).width;
  }

  /* Break `line` at spaces (or anywhere, for a word wider than `max`) into lines of at most `max` pixels. */
  function wrap(line, max) {
    if (textWidth(line) <= max) return [line];
    const out = [];
    let current = "";
    for (const word of line.split(" ")) {
      const tried = current ? `${current} ${word}` : word;
      if (textWidth(tried) <= max) { current = tried; continue; }
      if (current) out.push(current);
      current = word;
      while (textWidth(current) > max) {
        let cut = current.length - 1;
        while (cut > 1 && textWidth(current.slice(0, cut)) > max) cut -= 1;
        out.push(current.slice(0, cut));
        current = current.slice(cut);
      }
    }
    if (current) out.push(current);
    return out;
  }

  /* The label wrapped to at most MAX_TEXT px a line, and the node size that holds it with padding. */
  function fit(text, shape) {
    const lines = text.split("\n").flatMap((l) => wrap(l, MAX_TEXT));
    const padX = 10 + (SHAPE_PAD[shape] || 0), padY = 7 + (SHAPE_PAD[shape] ? 4 : 0);
    const widest = Math.max(...lines.map(textWidth));
    return {
      label: lines.join("\n"),
      w: Math.max(90, Math.ceil(widest) + 2 * padX),
      h: Math.ceil(lines.length * FONT_SIZE * LINE_HEIGHT) + 2 * padY,
    };
  }

  function elements(state, figs) {
    const plan = state.plan;
    const els = [];
    for (const q of plan.queries) {
      const head = `query ${q.name}` + (q.mode ? ` · ${q.mode}` : "") + (q.stateful ? " · stateful" : "") +
        (q.chained ? " · chained" : "");
      const extra = figs.query[q.name];
      els.push({ group: "nodes", data: { id: `q:${q.name}`, label: extra ? `${head}\n${extra}` : head, isQuery: 1 } });
    }
    for (const node of plan.nodes) {
      const look = RUNS[node.runs] || RUNS["spark-native"];
      const box = fit(nodeLabel(node, figs.node[node.id]), look.shape);
      els.push({
        group: "nodes",
        data: {
          id: node.id, label: box.label, w: box.w, h: box.h, color: look.color, shape: look.shape,
          parent: node.query ? `q:${node.query}` : undefined, runs: node.runs, kind: node.kind, name: node.label,
        },
      });
    }
    for (const edge of plan.edges) {
      const id = edgeId(edge);
      const label = [edge.label, figs.edge[id]].filter(Boolean).join("\n");
      els.push({ group: "edges", data: { id, source: edge.source, target: edge.target, label, side: edge.label ? 1 : 0 } });
    }
    return els;
  }

  function draw(state) {
    const figs = figures(state);
    const els = elements(state, figs);
    const key = JSON.stringify(state.plan);
    /* A node never shrinks while the page shows it, and grows in steps of 20 px: figures that change width every
       poll (rates) do not move the graph; a label that outgrows its node lays the graph out again. */
    let grew = false;
    for (const el of els) {
      if (!el.data.w) continue;
      const seen = sizes[el.data.id] || { w: 0, h: 0 };
      const w = Math.max(seen.w, Math.ceil(el.data.w / 20) * 20), h = Math.max(seen.h, el.data.h);
      if (cy && key === drawn && (w > seen.w || h > seen.h)) grew = true;
      sizes[el.data.id] = { w, h };
      el.data.w = w; el.data.h = h;
    }
    if (cy && key === drawn) {
      cy.batch(() => {
        for (const el of els) {
          const found = cy.getElementById(el.data.id);
          if (!found.nonempty()) continue;
          found.data("label", el.data.label);
          if (el.data.w) { found.data("w", el.data.w); found.data("h", el.data.h); }
        }
      });
      if (grew) cy.layout(LAYOUT).run();
      return;
    }
    if (cy) cy.destroy();
    drawn = key;
    cy = cytoscape({
      container: document.getElementById("graph"),
      elements: els,
      wheelSensitivity: 0.3,
      style: [
        { selector: "node", style: {
          "label": "data(label)", "text-wrap": "wrap", "text-max-width": 10000, "text-valign": "center",
          "text-halign": "center", "font-size": FONT_SIZE, "font-family": FONT_FAMILY, "line-height": LINE_HEIGHT,
          "width": "data(w)", "height": "data(h)", "shape": "data(shape)",
          "background-color": "data(color)", "border-width": 1, "border-color": "#8a93a6" } },
        { selector: "node[?isQuery]", style: {
          "label": "data(label)", "text-valign": "top", "text-halign": "center", "font-weight": 600,
          "background-color": "#f6f8fc", "border-color": "#9fb3d9", "border-style": "dashed", "padding": 16,
          "shape": "round-rectangle", "text-wrap": "wrap" } },
        { selector: "edge", style: {
          "curve-style": "bezier", "target-arrow-shape": "triangle", "width": 1.5, "line-color": "#7d8799",
          "target-arrow-color": "#7d8799", "label": "data(label)", "font-size": 10, "text-wrap": "wrap",
          "text-background-color": "#fff", "text-background-opacity": 0.85, "text-background-padding": 2 } },
        { selector: "edge[?side]", style: { "line-style": "dashed", "line-color": "#d9822b", "target-arrow-color": "#d9822b" } },
      ],
      layout: LAYOUT,
    });
  }

  function table(state, figs) {
    const body = document.querySelector("#operators tbody");
    const rows = state.plan.nodes.map((node) => {
      const detail = Object.entries(node.detail || {})
        .filter(([, v]) => v !== null && v !== undefined && !(Array.isArray(v) && !v.length))
        .map(([k, v]) => `${k}=${Array.isArray(v) ? v.join(",") : v}`).join("  ");
      return EK.el("tr", { "data-node": node.id },
        EK.el("td", { text: node.query || "" }),
        EK.el("td", { class: "node-name", text: node.label }),
        EK.el("td", { text: node.kind }),
        EK.el("td", { class: "node-runs", text: RUNS[node.runs] ? RUNS[node.runs].short : node.runs }),
        EK.el("td", { class: "muted", text: detail }),
        EK.el("td", { text: (figs.node[node.id] || "").replace(/\n/g, " · ") }));
    });
    body.replaceChildren(...rows);
  }

  EK.pages.graph = {
    render(state) {
      legend();
      const plan = state.plan;
      const ops = plan.nodes.filter((n) => !["source", "sink", "table"].includes(n.kind)).length;
      document.getElementById("graph-summary").textContent =
        `${plan.queries.length} ${plan.queries.length === 1 ? "query" : "queries"}, ${ops} operators, ` +
        `${plan.edges.length} edges` + (plan.note ? ` (${plan.note})` : "");
      draw(state);
      table(state, figures(state));
    },
  };

  EK.cy = function () { return cy; };

  /* For tests and debugging: the drawn graph's nodes and edges. */
  EK.graphElements = function () {
    if (!cy) return null;
    return {
      nodes: cy.nodes().map((n) => ({ id: n.id(), name: n.data("name") || null, runs: n.data("runs") || null,
        parent: n.data("parent") || null, label: n.data("label") })),
      edges: cy.edges().map((e) => ({ source: e.data("source"), target: e.data("target"), label: e.data("label") })),
    };
  };
})();

/* For tests: the drawn nodes whose label reaches outside their shape's box ([{id, body, text}]). */
EK.labelsOutside = function () {
  const cy = EK.cy && EK.cy();
  if (!cy) return null;
  return cy.nodes().filter((n) => !n.isParent()).map((n) => ({
    id: n.id(),
    body: n.boundingBox({ includeLabels: false, includeOverlays: false }),
    text: n.boundingBox({ includeNodes: false, includeEdges: false, includeLabels: true, includeOverlays: false }),
  })).filter(({ body, text }) => text.x1 < body.x1 - 0.5 || text.x2 > body.x2 + 0.5 ||
    text.y1 < body.y1 - 0.5 || text.y2 > body.y2 + 0.5);
};
