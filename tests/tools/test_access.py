"""The ACLs that follow from the registry: who may write and read which topic."""

from __future__ import annotations

from pathlib import Path

from chorus.contracts.registry import load_registry
from chorus.tools.access import Grant, Op, grants

REGISTRY = load_registry(Path(__file__).resolve().parents[2] / "schemas")
GRANTS = set(grants(REGISTRY))


def may(principal: str, op: Op, topic: str) -> bool:
    return Grant(principal, "topic", topic, op) in GRANTS


def test_a_service_writes_only_the_topics_it_produces() -> None:
    assert may("invoice_agent", Op.WRITE, "procurement.events.high")
    assert not may("invoice_agent", Op.WRITE, "approvals.events")
    assert not may("report_agent", Op.WRITE, "procurement.events")
    assert not may("payment_agent", Op.WRITE, "research.events")


def test_runtime_services_use_the_runtime_topics_and_the_stream_view_only_its_dead_letters() -> None:
    for name in ("budget_agent", "gateway", "timer_service"):
        assert may(name, Op.READ, "chorus.control") and may(name, Op.WRITE, "chorus.deadletters")
    assert may("outcome_analytics", Op.WRITE, "chorus.deadletters")
    assert not may("outcome_analytics", Op.READ, "chorus.control")
    assert not may("outcome_analytics", Op.WRITE, "chorus.timers")


def test_the_timer_writes_what_it_fires_and_nothing_else_of_the_agents() -> None:
    assert may("timer_service", Op.WRITE, "approvals.events")
    assert may("timer_service", Op.WRITE, "workflows.lifecycle")
    assert not may("timer_service", Op.WRITE, "procurement.events")


def test_the_auditor_reads_everything_and_writes_nothing_the_operator_both() -> None:
    topics = [t for spec in REGISTRY.topics.values() for t in spec.physical_topics()]
    assert all(may("chorus-auditor", Op.READ, t) and may("chorus-operator", Op.WRITE, t) for t in topics)
    assert not any(g.principal == "chorus-auditor" and g.op is Op.WRITE for g in GRANTS)


def test_each_service_joins_only_groups_named_after_it() -> None:
    groups = {g.principal: g for g in GRANTS if g.resource == "group"}
    assert groups["budget_agent"] == Grant("budget_agent", "group", "budget_agent", Op.READ, prefixed=True)
    assert groups["chorus-operator"].name == "*"


def test_only_the_stream_app_creates_and_uses_topics_named_after_it() -> None:
    """faust creates its facts topic and table changelogs, named ``outcome_analytics...``:
    that principal may create, read and write them; no runtime service may create any."""
    prefixed = [g for g in GRANTS if g.resource == "topic" and g.prefixed]
    own = {g.op for g in prefixed if g.principal == "outcome_analytics"}
    assert own == {Op.CREATE, Op.READ, Op.WRITE, Op.DESCRIBE}
    assert all(g.name == "outcome_analytics" for g in prefixed)
    assert [g for g in GRANTS if g.op is Op.CREATE] == [
        Grant("outcome_analytics", "topic", "outcome_analytics", Op.CREATE, prefixed=True)
    ]
