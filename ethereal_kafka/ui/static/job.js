/* Job page: the run's facts, auto-scaling decisions, and the configuration in force (secrets masked). */
"use strict";

(function () {
  function facts(o) {
    const running = o.mode === "live";
    const uptime = running ? EK.fmt.duration(o.now_ms - o.started_ms) : "stopped";
    const rows = [
      ["app.id", o.app_id],
      ["state", running ? "running (live)" : "not running here: pages from the checkpoint history"],
      ["started", o.started_ms ? `${EK.fmt.time(o.started_ms)} UTC` : "-"],
      ["uptime", uptime],
      ["Spark master", o.spark_master || "-"],
      ["Spark UI", o.spark_ui ? EK.el("a", { href: o.spark_ui, target: "_blank", text: o.spark_ui }) : "off (spark.ui.enabled=true in the job file turns it on)"],
      ["log folder", o.log_dir || "-"],
      ["job file", o.job_file || "-"],
      ["checkpoint", o.checkpoint_location || "-"],
      ["delivery guarantee", o.delivery_guarantee || "-"],
      ["driver", o.host ? `${o.host}, pid ${o.pid}` : "-"],
    ];
    document.querySelector("#facts tbody").replaceChildren(...rows.map(([k, v]) =>
      EK.el("tr", { "data-fact": k }, EK.el("td", { text: k }), EK.el("td", {}, v))));
  }

  function decisions(d) {
    const box = document.getElementById("decisions");
    if (!d || !d.decisions.length) {
      box.replaceChildren(EK.el("div", { class: "empty",
        text: "No auto-scaling decisions recorded (auto-scaling is off, or has not decided anything yet)." }));
      return;
    }
    const head = ["time (UTC)", "action", "executors before", "executors after", "reason"];
    box.replaceChildren(EK.el("table", { class: "grid" },
      EK.el("thead", {}, EK.el("tr", {}, ...head.map((h) => EK.el("th", { text: h })))),
      EK.el("tbody", {}, ...d.decisions.slice().reverse().map((x) => EK.el("tr", {},
        EK.el("td", { text: EK.fmt.time(x.time_ms) }), EK.el("td", { text: x.action }),
        EK.el("td", { class: "num", text: x.executors_before }), EK.el("td", { class: "num", text: x.executors_after }),
        EK.el("td", { text: x.reason }))))));
  }

  /* The configuration in force: the sources as the runner changed them (a changed key shows what the job file
     said), the adaptive sizer's budgets (live), secrets masked. */
  function config(c) {
    const box = document.getElementById("config");
    if (!c) { box.replaceChildren(EK.el("div", { class: "empty", text: "not recorded" })); return; }
    const written = (c.as_written || {}).sources || {};
    const blocks = [["job", c.job, {}, null]];
    for (const kind of ["sources", "sinks", "tables"]) {
      for (const [name, values] of Object.entries(c[kind] || {})) {
        blocks.push([`${kind.slice(0, -1)} ${name}`, values, kind === "sources" ? (written[name] || {}) : {},
          kind === "sources" ? name : null]);
      }
    }
    const text = (v) => Array.isArray(v) ? v.join(",") : (v === null || v === undefined ? "" : String(v));
    box.replaceChildren(...blocks.map(([title, values, changed, source]) => EK.el("div", { class: "config-block" },
      EK.el("b", { text: title }),
      EK.el("table", { class: "grid", "data-config": title }, EK.el("tbody", {},
        source ? EK.el("tr", { class: "budget", "data-key": "epoch budget", hidden: "" },
          EK.el("td", { text: "epoch budget (now)" }), EK.el("td", { class: "budget-value", "data-source": source }),
          EK.el("td", { class: "muted", text: "the adaptive sizer's records for the next epoch" })) : null,
        ...Object.entries(values || {}).map(([k, v]) => {
          const was = Object.prototype.hasOwnProperty.call(changed, k);
          return EK.el("tr", { "data-key": k, class: was ? "changed" : null },
            EK.el("td", { text: k }), EK.el("td", { text: text(v) }),
            EK.el("td", { class: "muted", text: was ? `set by the runner (job file: ${changed[k] === null ? "unset" : text(changed[k])})` : "" }));
        }))))));
  }

  /* Live budgets per source (`epoch.sizing=adaptive`): the figure each query's sizer posted last. */
  function budgets(live) {
    for (const cell of document.querySelectorAll("#config td.budget-value")) {
      const source = cell.dataset.source;
      const parts = [];
      for (const [query, f] of Object.entries((live && live.queries) || {})) {
        const n = (f.epoch_budgets || {})[source];
        if (n !== undefined) parts.push(`${EK.fmt.int(n)} (${query})`);
      }
      cell.textContent = parts.join(", ");
      cell.parentElement.hidden = !parts.length;
    }
  }

  EK.pages.job = {
    render(state) {
      const o = state.overview;
      facts(o);
      const live = state.live && state.live.decisions ? { decisions: state.live.decisions } : state.decisions;
      decisions(live);
      const key = JSON.stringify(o.config || null);
      const box = document.getElementById("config");
      if (box.dataset.key !== key) { box.dataset.key = key; config(o.config); }
      budgets(state.live);
    },
  };
})();
