"""Metrics that name operators (issue 24, item 7): user-code errors per operator name and uid, the operators'
identities, state-store figures under the operator's name, and restarts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.plan.user_errors import UserErrorReport
from ethereal_kafka.runtime.metrics import JobMetrics

PLAN = {
    "nodes": [
        {
            "id": "source:events",
            "query": None,
            "kind": "source",
            "label": "events",
            "name": None,
            "uid": None,
        },
        {
            "id": "totals/1",
            "query": "totals",
            "kind": "map",
            "name": "parse",
            "uid": "parse-1",
            "stateful": False,
        },
        {
            "id": "totals/3",
            "query": "totals",
            "kind": "process",
            "name": "detect",
            "uid": "det-1",
            "stateful": True,
        },
    ]
}


def test_operator_figures_carry_names_and_uids() -> None:
    src = KafkaSourceConfig.from_properties(
        {"name": "events", "bootstrap.servers": "127.0.0.1:9", "topics": "t"}
    )
    metrics = JobMetrics("app", {"events": src})
    metrics.add_query("totals", ["out"], sources=["events"])
    metrics.operators.describe(PLAN)
    metrics.add_reports([UserErrorReport("totals", "parse", "parse-1", "dlq", 3)])
    metrics.add_reports([UserErrorReport("totals", "parse", "parse-1", "dlq", 2)])
    metrics.operators.count_restart("fixed-delay")
    metrics.observe_progress(
        {
            "name": "app-totals",
            "batchId": 1,
            "stateOperators": [
                {"operatorName": "transformWithStateExec", "numRowsTotal": 7, "memoryUsedBytes": 9}
            ],
        }
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    text = generate_latest(registry).decode()
    assert (
        'ethereal_kafka_user_error_records_total{action="dlq",app_id="app",operator="parse",query="totals",'
        'uid="parse-1"} 5.0'
    ) in text
    assert (
        'ethereal_kafka_operator_info{app_id="app",kind="process",operator="detect",query="totals",uid="det-1"} 1.0'
        in text
    )
    assert 'ethereal_kafka_state_rows{app_id="app",operator="detect",query="totals"} 7.0' in text
    assert 'ethereal_kafka_restarts_total{app_id="app",strategy="fixed-delay"} 1.0' in text
    summary = metrics.summary()
    assert (summary.user_errors, summary.restarts) == ({"dlq": 5}, 1)
