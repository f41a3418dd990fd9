"""The protocol's ids: one triple, one id (`eos.names`)."""

from __future__ import annotations

import itertools

from ethereal_kafka.eos.names import phase_two_id, transactional_id


def test_different_app_query_task_triples_never_share_a_transactional_id() -> None:
    """Joined with `-`, app `orders-enricher` + sink `out` and app `orders` + sink `enricher-out` both gave
    `orders-enricher-out-0`: one app's task fenced the other's."""
    assert transactional_id("orders-enricher", "out", "0") != transactional_id("orders", "enricher-out", "0")
    parts = ["a", "a-b", "b", "a/b", "a%2Fb", "%", "-", "/", "phase2-x", ""]
    triples = list(itertools.product(parts, repeat=3))
    ids = {transactional_id(*t) for t in triples}
    assert len(ids) == len(triples), "the join is injective"
    assert phase_two_id("app", "q", "src") == transactional_id("app", "q", "phase2-src")
