"""The JSON the web UI's pages read, made from epoch records, run descriptions and live metrics.

Pure functions shared by the live UI (`ui.live`) and the UI of a stopped app (`ui.history`), so both serve the same
shapes:

- an epoch: every `EpochRecord` field, plus `seq` (the order the UI received it), `outcome_detail`, `p50`/`p95`/
  `p99` (seconds, from its latency histogram, as `histogram_quantile` would give, clamped into the observed
  extremes), `latency_mean` (exact: the histogram's sum over its count), `lag_total`, and for a failed epoch
  `error_summary`: the innermost `Type: message` of its error text (`runtime.failure.cause_in_text`; the whole
  text, tracebacks and all, stays in `error`);
- latency percentiles per query: `{"count", "sum", "low", "high", "p50", "p95", "p99", "bounds", "counts"}`
  (`low`/`high`: the exact smallest and largest latency, None when unknown; the percentiles are clamped into them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.runtime.failure import cause_in_text
from ethereal_kafka.runtime.histogram import Histogram

QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
#: Longest one-line error summary.
SUMMARY_CHARS = 300


def epoch_json(seq: int, record: EpochRecord) -> dict[str, Any]:
    """One epoch as the checkpoint timeline and the latency page read it."""
    out = asdict(record)
    out["seq"] = seq
    out["outcome_detail"] = record.outcome_detail
    out["lag_total"] = sum(v for parts in record.lag.values() for v in parts.values()) if record.lag else None
    hist = _histogram(record.latency)
    for name, q in QUANTILES.items():
        out[name] = hist.quantile(q) if hist is not None else None
    out["latency_mean"] = hist.sum / hist.count if hist is not None and hist.count else None
    out["error_summary"] = error_summary(record.error)
    return out


def error_summary(error: str | None) -> str | None:
    """One line for an epoch's error text: its innermost exception (`Type: message`), or its first line."""
    if not error:
        return None
    line = " ".join(
        cause_in_text(error, default=error.strip().splitlines()[0] if error.strip() else "").split()
    )
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 3] + "..."


def percentiles(hist: Histogram | None) -> dict[str, Any] | None:
    """`{"count", "sum", "low", "high", "p50", "p95", "p99", "bounds", "counts"}` of a latency histogram (None when
    empty)."""
    if hist is None or hist.count == 0:
        return None
    return {
        "count": hist.count,
        "sum": hist.sum,
        "low": hist.low,
        "high": hist.high,
        **{name: hist.quantile(q) for name, q in QUANTILES.items()},
        "bounds": list(hist.bounds),
        "counts": list(hist.buckets),
    }


def latency_from_figures(figures: Mapping[str, Any]) -> dict[str, Any]:
    """Per query, the percentiles of the live metrics' end-to-end latency histogram (summed over sources)."""
    out = {}
    for query, values in (figures.get("queries") or {}).items():
        out[query] = percentiles(_histogram(values.get("latency")))
    return out


def latency_from_epochs(records: Iterable[EpochRecord]) -> dict[str, Any]:
    """Per query, the percentiles of the sum of its committed epochs' latency histograms (on the newest epoch's
    buckets: epochs of an older run with other buckets are left out)."""
    totals: dict[str, Histogram] = {}
    for record in reversed(list(records)):
        hist = _histogram(record.latency) if record.outcome == "committed" else None
        if hist is None:
            continue
        if record.query not in totals:
            totals[record.query] = Histogram(hist.bounds)
        try:
            totals[record.query].add(hist)
        except ValueError:  # an older run with other buckets: its epochs are left out of the total
            continue
    return {query: percentiles(hist) for query, hist in sorted(totals.items())}


def _histogram(value: Mapping[str, Any] | None) -> Histogram | None:
    if not value:
        return None
    try:
        return Histogram.from_dict(value)
    except (KeyError, TypeError, ValueError):
        return None
