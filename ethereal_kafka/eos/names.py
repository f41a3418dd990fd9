"""The names the exactly-once protocol gives its ids, topics and groups; each is derived from names that stay fixed
for the job's life (the app id, a query's name, an input topic-partition, a sink task's number), never from list
positions that shift when a topic gains partitions.

| what | name |
|---|---|
| progress topic (markers of shuffling queries, the owner claim on partition 0) | `{app}.ethereal-progress` |
| a shuffling query's progress group (one marker per sink task) | `{app}.ethereal-progress.{query}` |
| the owner claim's group | `{app}.ethereal-owner` |
| the owner claim's transactional id (one live claimant) | `{app}.ethereal-owner` |
| takeover requests' group | `{app}.ethereal-takeover` |
| a sink task's transactional id | `{app}/{query}/{task}` (task: `{topic}-{partition}` or the sink task number) |
| a shuffling query's phase-two transactional id, per source | `{app}/{query}/phase2-{source}` |

A transactional id joins its parts with `/`, and `%` and `/` inside a part are escaped (`%25`, `%2F`), so two
different (app, query, task) triples never give the same id: app `orders-enricher` with sink `out` and app `orders`
with sink `enricher-out` once both gave `orders-enricher-out-0` (ids joined with `-`), and one app's task fenced the
other's.
"""

from __future__ import annotations


def progress_topic(app_id: str) -> str:
    """The internal topic whose partitions carry shuffling jobs' epoch markers and the instance claim."""
    return f"{app_id}.ethereal-progress"


def progress_group(app_id: str, query: str) -> str:
    """The group whose offsets on the progress topic are a shuffling query's markers (one per sink task)."""
    return f"{progress_topic(app_id)}.{query}"


def owner_group(app_id: str) -> str:
    """The group whose offset on progress partition 0 names the instance that owns the app."""
    return f"{app_id}.ethereal-owner"


def owner_claim_id(app_id: str) -> str:
    """The transactional id the owner claim is written with: each claimant's `init_transactions` fences the one
    before, so a stalled older owner cannot write the claim back (`eos.ownership.ClaimWriter`)."""
    return owner_group(app_id)


def takeover_group(app_id: str) -> str:
    """The group whose offset on progress partition 0 carries the newest takeover request (`run --takeover`)."""
    return f"{app_id}.ethereal-takeover"


def transactional_id(app_id: str, query: str, task_name: str) -> str:
    """`{app.id}/{query}/{task}`, each part escaped (see the module docstring): stable across restarts, one live
    writer per id, and different for every different triple."""
    return "/".join(_escape(part) for part in (app_id, query, task_name))


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def phase_two_id(app_id: str, query: str, source: str) -> str:
    """The transactional id of a shuffling query's phase-two commits of `source`'s offsets."""
    return transactional_id(app_id, query, f"phase2-{source}")
