/* Latency: whole-run end-to-end percentiles (the metrics' histogram), and per epoch over time: latency
   percentiles, epoch duration and commit time, lag per partition. */
"use strict";

(function () {
  const charts = {};
  const COLORS = ["#2d6cdf", "#d9822b", "#c23b3b", "#2f8f5b", "#7b4fc9", "#1b9aaa", "#b5651d", "#6b7385"];

  /* (Re)build a chart when its series change, else only replace its data. */
  let runs = [];

  function plot(id, seriesNames, data, axisLabel, valueFmt) {
    const box = document.getElementById(id);
    const width = Math.max(300, box.clientWidth - 10);
    const key = `${seriesNames.join("|")}@${width}`;
    let chart = charts[id];
    if (!chart || chart.key !== key) {
      if (chart) chart.plot.destroy();
      box.replaceChildren();
      const plotted = new uPlot({
        width, height: 190,
        scales: { x: { time: true } },
        axes: [{}, { label: axisLabel, size: 64, values: (u, ticks) => ticks.map(valueFmt) }],
        series: [{ label: "time" }].concat(seriesNames.map((name, i) => ({
          label: name, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false,
          points: { show: data[0].length < 60, size: 4 },
        }))),
        plugins: [EK.runMarkers(() => runs)],
      }, data, box);
      chart = charts[id] = EK.charts[id] = { plot: plotted, key };
    } else {
      chart.plot.setData(data);
    }
    chart.breaks = data.breaks || [];
  }

  function percentileTable(state) {
    const latency = state.latency || { queries: {} };
    document.getElementById("lat-source").textContent =
      `whole-run figures: ${latency.source || ""}` + (latency.since_ms ? ` since ${EK.fmt.time(latency.since_ms)} UTC` : "");
    const body = document.querySelector("#percentiles tbody");
    const rows = EK.queries().map((query) => {
      const p = latency.queries[query];
      const cell = (name) => EK.el("td", {
        class: `num ${name}`, "data-value": p && p[name] !== null && p[name] !== undefined ? p[name] : "",
        "data-low": p && p.low !== null && p.low !== undefined ? p.low : "",
        "data-high": p && p.high !== null && p.high !== undefined ? p.high : "",
        text: p ? EK.fmt.secs(p[name]) : "-",
        title: p && p.low !== null && p.low !== undefined
          ? `observed ${EK.fmt.secs(p.low)} to ${EK.fmt.secs(p.high)}` : null,
      });
      return EK.el("tr", { "data-query": query },
        EK.el("td", { text: query }),
        EK.el("td", { class: "num count", text: p ? EK.fmt.int(p.count) : "0" }),
        cell("p50"), cell("p95"), cell("p99"),
        EK.el("td", { class: "num", text: p && p.count ? EK.fmt.secs(p.sum / p.count) : "-" }));
    });
    body.replaceChildren(...rows);
  }

  EK.pages.latency = {
    render(state) {
      const select = document.getElementById("lat-query");
      EK.fillQuerySelect(select, false);
      if (!select.dataset.bound) { select.dataset.bound = "1"; select.addEventListener("change", EK.render); }
      percentileTable(state);
      const query = select.value;
      const epochs = state.epochs
        .filter((e) => e.query === query && e.outcome === "committed")
        .sort((a, b) => (a.started_ms + a.duration_ms) - (b.started_ms + b.duration_ms));
      runs = EK.runs(state.epochs.filter((e) => e.query === query));
      const at = (e) => (e.started_ms + e.duration_ms) / 1000;
      const run = (e) => e.run_started_ms ?? null;
      plot("lat-chart", ["p50", "p95", "p99", "mean (exact)"], EK.columns(epochs.filter((e) => e.p50 !== null), at,
        [(e) => e.p50, (e) => e.p95, (e) => e.p99, (e) => e.latency_mean], run), "seconds", (v) => EK.fmt.secs(v));
      plot("dur-chart", ["epoch duration ms", "transaction commit ms"], EK.columns(epochs, at,
        [(e) => e.duration_ms, (e) => e.commit_ms], run), "ms", (v) => EK.fmt.int(Math.round(v)));
      const partitions = new Set();
      for (const e of epochs) {
        for (const [topic, parts] of Object.entries(e.lag || {})) for (const p of Object.keys(parts)) partitions.add(`${topic}/${p}`);
      }
      const names = Array.from(partitions).sort();
      const lagOf = (name) => (e) => {
        const cut = name.lastIndexOf("/");
        const parts = (e.lag || {})[name.slice(0, cut)];
        return parts ? (parts[name.slice(cut + 1)] ?? null) : null;
      };
      plot("lag-chart", names.length ? names : ["lag"], EK.columns(epochs, at,
        (names.length ? names : ["lag"]).map(lagOf), run), "records", (v) => EK.fmt.int(Math.round(v)));
    },
  };
})();
