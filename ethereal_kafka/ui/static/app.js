/* ethereal-kafka web UI: state, polling and page switching. Pages register in EK.pages (graph.js, ...). */
"use strict";

const EK = {
  pages: {},
  state: {
    overview: null,   // /api/overview
    plan: null,       // /api/plan
    epochs: [],       // every epoch received, oldest first (/api/epochs)
    nextSeq: -1,
    live: null,       // /api/live (null for a stopped app)
    previousLive: null,
    latency: null,    // /api/latency
    decisions: null,  // /api/decisions
    polls: 0,
  },
  maxEpochs: 5000,
  current: null,
};

EK.get = async function (path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
};

EK.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
};

EK.fmt = {
  int(n) { return n === null || n === undefined || n < 0 ? "?" : Number(n).toLocaleString("en-US"); },
  ms(n) { return n === null || n === undefined ? "-" : (n >= 100 ? Math.round(n) : Number(n).toFixed(1)).toLocaleString("en-US"); },
  secs(s) {
    if (s === null || s === undefined) return "-";
    if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`;
    return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  },
  time(ms) {
    if (!ms) return "-";
    const d = new Date(ms);
    return d.toISOString().replace("T", " ").replace("Z", "").slice(0, 23);
  },
  clock(ms) { return ms ? new Date(ms).toISOString().slice(11, 23) : "-"; },
  duration(ms) {
    if (ms === null || ms === undefined) return "-";
    let s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    return [d ? `${d}d` : "", h ? `${h}h` : "", m ? `${m}m` : "", `${s}s`].filter(Boolean).join(" ");
  },
  rate(n) {
    if (n === null || n === undefined) return "";
    if (n > 0 && n < 0.05) return "<0.1 rec/s"; // a trickle is not "0.0": that means nothing came
    return `${n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1)} rec/s`;
  },
};

/* The queries the plan names, in order. */
EK.queries = function () {
  const plan = EK.state.plan;
  return plan ? plan.queries.map((q) => q.name) : [];
};

EK.fillQuerySelect = function (select, withAll) {
  const names = EK.queries();
  const wanted = (withAll ? ["(all)"] : []).concat(names);
  const have = Array.from(select.options).map((o) => o.value);
  if (have.join("\n") === wanted.join("\n")) return;
  const keep = select.value;
  select.replaceChildren(...wanted.map((n) => EK.el("option", { value: n, text: n })));
  if (wanted.includes(keep)) select.value = keep;
};

EK.show = function () {
  const name = (location.hash || "#graph").slice(1);
  const page = EK.pages[name] ? name : "graph";
  for (const section of document.querySelectorAll(".page")) section.classList.toggle("active", section.id === `page-${page}`);
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("active", link.dataset.page === page);
  EK.current = page;
  EK.render();
};

EK.render = function () {
  const page = EK.pages[EK.current];
  if (page && EK.state.plan) {
    try { page.render(EK.state); } catch (error) { console.error(error); }
  }
};

EK.poll = async function () {
  const s = EK.state;
  try {
    if (!s.overview || s.polls % 15 === 0) {
      s.overview = await EK.get("/api/overview");
      s.plan = await EK.get("/api/plan");
    }
    const batch = await EK.get(`/api/epochs?after=${s.nextSeq}`);
    if (batch.entries.length) {
      s.epochs = s.epochs.concat(batch.entries).slice(-EK.maxEpochs);
    }
    s.nextSeq = batch.next;
    if (s.overview.mode === "live") {
      s.previousLive = s.live;
      s.live = await EK.get("/api/live");
      s.live.at = Date.now();
    }
    if (EK.current === "latency" || !s.latency || s.polls % 5 === 0) s.latency = await EK.get("/api/latency");
    if (EK.current === "job" || !s.decisions) s.decisions = await EK.get("/api/decisions");
    s.polls += 1;
    EK.header();
    EK.exceptionCount(s);
    EK.render();
    document.body.dataset.polls = String(s.polls);
  } catch (error) {
    document.getElementById("updated").textContent = `update failed: ${error.message}`;
  }
};

EK.header = function () {
  const o = EK.state.overview;
  document.getElementById("app-id").textContent = o.app_id || "";
  const mode = document.getElementById("mode");
  mode.textContent = o.mode === "live" ? "live" : "stopped app (from its checkpoint history)";
  mode.className = o.mode;
  document.getElementById("updated").textContent = `updated ${new Date().toISOString().slice(11, 19)} UTC`;
  document.title = `${o.app_id} · ethereal-kafka`;
};

EK.start = function () {
  window.addEventListener("hashchange", EK.show);
  EK.show();
  const tick = async () => {
    await EK.poll();
    const live = EK.state.overview && EK.state.overview.mode === "live";
    setTimeout(tick, live ? 2000 : 5000);
  };
  tick();
};

/* Rate (per second) of a counter between the last two live snapshots; null before there are two. */
EK.rate = function (pick) {
  const now = EK.state.live, before = EK.state.previousLive;
  if (!now || !before) return null;
  const seconds = (now.at - before.at) / 1000;
  if (seconds <= 0) return null;
  return Math.max(0, (pick(now) - pick(before)) / seconds);
};

EK.sum = function (values) { return Object.values(values || {}).reduce((a, b) => a + b, 0); };

/* The app's runs seen in the epochs (`run_started_ms`: one value per start of the app), oldest first:
   [{started, first, last}] with the run's start and its first epoch's start and last epoch's end (ms). Epochs of
   an older writer, which did not keep the run, count as one run of their own (started null). */
EK.runs = function (epochs) {
  const byRun = new Map();
  for (const e of epochs) {
    const key = e.run_started_ms ?? null;
    const end = e.started_ms + (e.duration_ms || 0);
    const run = byRun.get(key);
    if (!run) byRun.set(key, { started: key, first: e.started_ms, last: end });
    else { run.first = Math.min(run.first, e.started_ms); run.last = Math.max(run.last, end); }
  }
  return Array.from(byRun.values()).sort((a, b) => a.first - b.first);
};

/* Chart columns (uPlot data: [xs, ...series]) from rows sorted by x, with an all-null point between two rows of
   different runs, so that no line is drawn across a stop and a restart. */
EK.columns = function (rows, x, series, runOf) {
  const data = [[]].concat(series.map(() => []));
  data.breaks = [];  // indices of the points inserted between runs
  let previous;
  rows.forEach((row, i) => {
    const run = runOf(row);
    if (i > 0 && run !== previous) {
      data.breaks.push(data[0].length);
      data[0].push((x(rows[i - 1]) + x(row)) / 2);
      for (let s = 1; s < data.length; s++) data[s].push(null);
    }
    previous = run;
    data[0].push(x(row));
    series.forEach((pick, s) => data[s + 1].push(pick(row)));
  });
  return data;
};

/* A uPlot plugin marking where the app stopped and started again: a hatched band from a run's last epoch to the
   next run's first, labelled (DOM elements over the plot: `.run-gap`, with `data-stopped`/`data-started`). */
EK.runMarkers = function (getRuns) {
  return {
    hooks: {
      draw: [(u) => {
        for (const old of u.over.querySelectorAll(".run-gap")) old.remove();
        const runs = getRuns();
        for (let i = 1; i < runs.length; i++) {
          const stopped = runs[i - 1].last, started = runs[i].started ?? runs[i].first;
          const left = u.valToPos(stopped / 1000, "x"), right = u.valToPos(runs[i].first / 1000, "x");
          const width = u.over.clientWidth;
          if (right < 0 || left > width) continue;
          const gap = EK.el("div", {
            class: "run-gap", "data-stopped": stopped, "data-started": started,
            title: `stopped after ${EK.fmt.time(stopped)} UTC, started again ${EK.fmt.time(started)} UTC`,
          }, EK.el("span", { text: "restart" }));
          gap.style.left = `${Math.max(0, left)}px`;
          gap.style.width = `${Math.max(3, Math.min(width, right) - Math.max(0, left))}px`;
          u.over.append(gap);
        }
      }],
    },
  };
};

/* Charts by container id ({plot, key}), for tests and debugging. */
EK.charts = {};

/* An error as people read it: its one line, and the whole text (tracebacks) folded below it. */
EK.errorBlock = function (summary, text) {
  const lines = (text || "").split("\n").length;
  return EK.el("div", { class: "error-block" },
    EK.el("div", { class: "error-line", "data-testid": "error-line", text: summary || (text || "").split("\n")[0] }),
    text && text.trim() !== (summary || "").trim() ? EK.el("details", { class: "error-text" },
      EK.el("summary", { text: `full error (${lines} line${lines === 1 ? "" : "s"})` }),
      EK.el("pre", { class: "trace", "data-testid": "trace", text })) : null);
};
