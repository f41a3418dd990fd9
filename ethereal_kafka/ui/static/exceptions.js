/* Exceptions: every failed epoch attempt from the checkpoint history, newest first: when, which query and epoch,
   its one-line error, and the whole error text (Python and JVM tracebacks) folded below, readable as written. */
"use strict";

(function () {
  const MAX = 200;

  function failed(state) {
    return state.epochs.filter((e) => e.outcome === "failed" || e.outcome === "aborted");
  }

  EK.pages.exceptions = {
    render(state) {
      const box = document.getElementById("exceptions");
      const all = failed(state);
      const key = all.map((e) => e.seq).join(",");
      if (box.dataset.key === key) return;
      box.dataset.key = key;
      document.getElementById("exc-summary").textContent = all.length
        ? `${all.length} failed epoch attempt${all.length === 1 ? "" : "s"}` + (all.length > MAX ? ` (newest ${MAX} shown)` : "")
        : "";
      if (!all.length) {
        box.replaceChildren(EK.el("div", { class: "empty", text: "No epoch failed." }));
        return;
      }
      box.replaceChildren(...all.slice(-MAX).reverse().map((e) => EK.el("div", {
        class: "exception", "data-seq": e.seq, "data-query": e.query, "data-epoch": e.epoch,
      },
      EK.el("div", { class: "when" },
        EK.el("b", { text: `${e.query} epoch ${e.epoch}` }),
        ` · ${EK.fmt.time(e.started_ms)} UTC · after ${EK.fmt.int(e.duration_ms)} ms · ${e.outcome}` +
          (e.run_started_ms ? ` · run started ${EK.fmt.time(e.run_started_ms)} UTC` : "")),
      EK.errorBlock(e.error_summary, e.error))));
    },
  };

  /* The nav link counts them, whatever page is shown. */
  EK.exceptionCount = function (state) {
    const link = document.querySelector("nav a[data-page=exceptions]");
    const n = failed(state).length;
    let badge = link.querySelector(".count");
    if (!n) { if (badge) badge.remove(); return; }
    if (!badge) { badge = EK.el("span", { class: "count" }); link.append(badge); }
    badge.textContent = String(n);
  };
})();
