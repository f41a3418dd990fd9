/* Checkpoint timeline: every epoch attempt of every query; aborted-and-redone, skipped, failed and interrupted (ended by
   a stop, not a failure) ones stand out. */
"use strict";

(function () {
  const OUTCOMES = [
    ["committed", "#2f8f5b"],
    ["aborted-and-redone", "#d9822b"],
    ["skipped-on-replay", "#8a93a6"],
    ["failed", "#c23b3b"],
    ["interrupted", "#6b5fb5"],
  ];
  const MAX_ROWS = 500;
  let chart = null;
  let selected = null;

  function visible(state) {
    const query = document.getElementById("cp-query").value;
    const problems = document.getElementById("cp-problems").checked;
    return state.epochs.filter((e) => (query === "(all)" || e.query === query) &&
      (!problems || e.outcome_detail !== "committed"));
  }

  let runs = [];

  function drawChart(epochs, all) {
    const sorted = epochs.slice().sort((a, b) => a.started_ms - b.started_ms);
    runs = EK.runs(all);
    const data = EK.columns(sorted, (e) => e.started_ms / 1000, OUTCOMES.map(([name]) => (e) =>
      ((e.outcome_detail === name || (name === "failed" && e.outcome_detail === "aborted")) ? e.duration_ms : null)),
    (e) => e.run_started_ms ?? null);
    const box = document.getElementById("cp-chart");
    const width = Math.max(300, box.clientWidth - 10);
    if (!chart || chart.width !== width) {
      if (chart) chart.destroy();
      chart = new uPlot({
        width, height: 200,
        scales: { x: { time: true } },
        axes: [{}, { label: "epoch ms", size: 60 }],
        series: [{ label: "started" }].concat(OUTCOMES.map(([name, color]) => ({
          label: name, stroke: color, fill: color, paths: () => null,
          points: { show: true, size: 8, fill: color, stroke: color },
        }))),
        legend: { live: false },
        plugins: [EK.runMarkers(() => runs)],
      }, data, box);
      EK.charts["cp-chart"] = { plot: chart };
    } else {
      chart.setData(data);
    }
  }

  function outcomeBadge(e) {
    return EK.el("span", { class: `badge b-${e.outcome_detail}`, text: e.outcome_detail });
  }

  function drawTable(epochs) {
    const body = document.querySelector("#epochs tbody");
    const rows = epochs.slice(-MAX_ROWS).reverse().map((e) => {
      const tasks = e.skipped_tasks ? `${e.tasks} (${e.skipped_tasks} skipped)` : String(e.tasks);
      const row = EK.el("tr", {
        class: `o-${e.outcome_detail}` + (selected === e.seq ? " selected" : ""),
        "data-seq": e.seq, "data-epoch": e.epoch, "data-query": e.query, "data-outcome": e.outcome_detail,
        onclick: () => { selected = e.seq; EK.render(); },
      },
      EK.el("td", { text: e.query }),
      EK.el("td", { class: "num", text: e.epoch }),
      EK.el("td", { text: EK.fmt.clock(e.started_ms), title: `${EK.fmt.time(e.started_ms)} UTC` }),
      EK.el("td", { class: "num", text: EK.fmt.int(e.duration_ms) }),
      EK.el("td", { class: "num", text: EK.fmt.int(e.records_read != null ? e.records_read : e.records_in) }),
      EK.el("td", { class: "num", text: EK.fmt.int(e.records_out) }),
      EK.el("td", { class: "num", text: EK.fmt.ms(e.commit_ms) }),
      EK.el("td", { text: e.watermark_ms ? EK.fmt.clock(e.watermark_ms) : "-", title: e.watermark_ms ? `${EK.fmt.time(e.watermark_ms)} UTC` : null }),
      EK.el("td", {}, outcomeBadge(e), e.txn_aborts ? ` ${e.txn_aborts} aborted` : null),
      EK.el("td", { text: tasks }));
      return row;
    });
    body.replaceChildren(...rows);
  }

  function offsetsTable(rows, head) {
    return EK.el("table", { class: "grid" },
      EK.el("thead", {}, EK.el("tr", {}, ...head.map((h) => EK.el("th", { text: h })))),
      EK.el("tbody", {}, ...rows.map((r) => EK.el("tr", {}, ...r.map((c, i) => EK.el("td", { class: i > 1 ? "num" : null, text: c }))))));
  }

  function detail(e) {
    const box = document.getElementById("epoch-detail");
    if (!e) { box.replaceChildren(EK.el("p", { class: "muted", text: "Click an epoch to see its offsets and marker." })); return; }
    const parts = [];
    for (const [topic, ends] of Object.entries(e.end_offsets)) {
      for (const [partition, end] of Object.entries(ends)) {
        const start = (e.start_offsets[topic] || {})[partition];
        parts.push([topic, partition, start ?? "?", end, start === undefined ? "?" : end - start]);
      }
    }
    const markers = [];
    for (const [group, topics] of Object.entries(e.marker_offsets || {})) {
      for (const [topic, offsets] of Object.entries(topics)) {
        for (const [partition, offset] of Object.entries(offsets)) markers.push([group, topic, partition, offset]);
      }
    }
    const lags = [];
    for (const [topic, offsets] of Object.entries(e.lag || {})) {
      for (const [partition, lag] of Object.entries(offsets)) lags.push([topic, partition, lag]);
    }
    box.replaceChildren(...[
      EK.el("h3", { "data-testid": "detail-title" }, `${e.query} epoch ${e.epoch} `, outcomeBadge(e)),
      EK.el("p", {}, `started ${EK.fmt.time(e.started_ms)} UTC, ${EK.fmt.int(e.duration_ms)} ms; mode ${e.mode}; ` +
        `checkpoint ${e.checkpoint_id.slice(0, 8)}; ${e.tasks} sink tasks (${e.skipped_tasks} skipped); ` +
        `transaction commit ${EK.fmt.ms(e.commit_ms)} ms; aborted and redone transactions: ${e.txn_aborts || 0}; ` +
        `watermark ${e.watermark_ms ? EK.fmt.time(e.watermark_ms) : "none"}` +
        (e.p50 !== null ? `; latency p50 ${EK.fmt.secs(e.p50)}, p95 ${EK.fmt.secs(e.p95)}, p99 ${EK.fmt.secs(e.p99)}` : "")),
      e.error ? EK.errorBlock(e.error_summary, e.error) : null,
      EK.el("div", {}, EK.el("b", { text: "marker " }), EK.el("code", { "data-testid": "marker", text: e.marker || "(none: not committed)" })),
      markers.length ? offsetsTable(markers, ["group", "topic", "partition", "offset"]) : null,
      EK.el("b", { text: "offsets per partition" }),
      EK.el("div", { "data-testid": "detail-offsets" }, offsetsTable(parts, ["topic", "partition", "start", "end", "records"])),
      lags.length ? EK.el("b", { text: "lag when committed" }) : null,
      lags.length ? offsetsTable(lags, ["topic", "partition", "lag"]) : null,
    ].filter(Boolean));
  }

  EK.pages.checkpoints = {
    render(state) {
      const select = document.getElementById("cp-query");
      EK.fillQuerySelect(select, true);
      if (!select.dataset.bound) {
        select.dataset.bound = "1";
        select.addEventListener("change", EK.render);
        document.getElementById("cp-problems").addEventListener("change", EK.render);
      }
      const epochs = visible(state);
      const counts = {};
      for (const e of state.epochs) counts[e.outcome_detail] = (counts[e.outcome_detail] || 0) + 1;
      document.getElementById("cp-summary").textContent = `${state.epochs.length} epoch attempts: ` +
        Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ");
      drawChart(epochs, state.epochs);
      drawTable(epochs);
      detail(state.epochs.find((e) => e.seq === selected));
    },
  };
})();
