"""``chorus events show``: one command answers where an event lives, who produces it (a
timer's target: who schedules it, who publishes it), who signs and consumes it, and which
tests name it; ``docs/events.md`` says the same for every type and is never stale."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from chorus.contracts.registry import load_registry
from chorus.tools import eventsdoc
from chorus.tools.cli.main import app
from chorus.tools.codescan import scan_package

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "examples" / "support" / "schemas"


def chorus(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def shown(*args: str) -> str:
    result = chorus("events", "show", *args)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def validated() -> str:
    return shown("invoice.validated", "--schemas-dir", str(ROOT / "schemas"))


@pytest.mark.checkout
def test_a_plain_event_shows_its_topic_files_producer_consumers_and_tests(validated: str) -> None:
    assert "procurement.events (priority lanes: procurement.events.high, procurement.events," in validated
    assert "6 partitions, retention 30 days" in validated
    for version in (1, 2, 3):
        assert f"schemas/events/invoice.validated.v{version}.schema.json" in validated
        assert f"schemas/examples/invoice.validated/{version}/" in validated
    assert "invoice_agent: emits it" in validated
    assert "budget_agent reads v3: chorus.reference.budget_agent.handlers.on_invoice_validated" in validated
    assert "tests/services/budget_agent/test_handlers.py" in validated
    assert any(line.split() == ["signed", "by", "invoice_agent"] for line in validated.splitlines())


@pytest.mark.checkout
def test_every_path_it_shows_is_a_file_of_the_checkout(validated: str) -> None:
    paths = [w for line in validated.splitlines() for w in line.split() if w.endswith((".py", ".json"))]
    assert len(paths) > 10
    assert [p for p in paths if not (ROOT / p.strip("()")).is_file()] == []


def test_a_timer_target_is_scheduled_by_its_service_and_published_by_the_timer_service() -> None:
    window = shown("approval.window_elapsed")
    assert "scheduled by approval_gate, published by timer_service when the timer falls due" in window
    assert "approval_gate: emits it" not in window
    retry = shown("retry.due")
    assert "scheduled by every runtime service (chorus-runtime), published by timer_service" in retry
    assert "deadletter_service: publishes it again when an operator redrives" in retry


def test_a_signed_event_names_its_signer() -> None:
    decided = shown("approval.decided")
    assert any(line.split() == ["signed", "by", "approval_gate"] for line in decided.splitlines())
    assert "approval_gate: emits it" in decided


@pytest.mark.checkout
def test_a_project_event_with_the_project_registry() -> None:
    due = shown("ticket.reply_due", "--schemas-dir", str(SUPPORT))
    assert "examples/support/schemas/events/ticket.reply_due.v1.schema.json" in due
    assert "scheduled by triage_agent, published by timer_service" in due
    assert "triage_agent reads v1: triage_agent.handlers.on_ticket_reply_due" in due
    assert "examples/support/tests/test_triage_agent_handlers.py" in due
    received = shown("ticket.received", "--schemas-dir", str(SUPPORT))
    assert "gateway: publishes it to start a workflow of type support_ticket" in received


def test_an_unknown_type_exits_65_with_close_matches() -> None:
    typo = chorus("events", "show", "invoice.validatd")
    assert typo.exit_code == 65
    assert "unknown event type 'invoice.validatd'; did you mean invoice.validated" in typo.output
    assert "Traceback" not in typo.output
    elsewhere = chorus("events", "show", "ticket.reply_due")  # a project's, without its registry
    assert elsewhere.exit_code == 65
    assert "--schemas-dir" in elsewhere.output


@pytest.mark.checkout
def test_json_output_parses_and_has_every_field() -> None:
    body: dict[str, Any] = json.loads(shown("approval.window_elapsed", "--output", "json"))
    assert body["event_type"] == "approval.window_elapsed"
    assert body["topic"]["name"] == "approvals.events" and body["topic"]["partitions"] == 6
    assert body["versions"][0]["schema"] == "schemas/events/approval.window_elapsed.v1.schema.json"
    assert body["versions"][0]["examples"]
    scheduled = {
        "service": "approval_gate",
        "route": "schedules",
        "published_by": "timer_service",
        "workflows": [],
    }
    assert scheduled in body["producers"]
    assert body["signed_by"] == ["approval_gate"]  # fired by the timer service, stated by the gate
    assert {c["service"]: c["reads_version"] for c in body["consumers"]}["approval_gate"] == 1
    assert "tests/services/approval_gate/test_handlers.py" in body["tests"]
    assert json.loads(shown("approval.decided", "--json"))["signed_by"] == ["approval_gate"]
    ended = json.loads(shown("workflow.ended", "--json"))["signed_by"]
    assert {"gateway", "payment_agent", "audit_projector"} <= set(ended)  # several state it


def test_list_names_every_type_of_the_union_registry() -> None:
    listed = json.loads(chorus("events", "list", "--json", "--schemas-dir", str(SUPPORT)).output)
    types = [row["event_type"] for row in listed]
    assert "ticket.received" in types and "invoice.validated" in types
    assert types == sorted(types)


@pytest.mark.checkout
def test_docs_events_md_is_what_the_registry_and_code_say() -> None:
    committed = ROOT / eventsdoc.DOCUMENT
    assert committed.exists(), "docs/events.md is missing: run make docs"
    assert committed.read_text() == eventsdoc.render(load_registry(ROOT / "schemas")), (
        "docs/events.md is stale: run make docs"
    )


def test_the_readmes_authority_table_is_what_the_registry_says() -> None:
    readme = (ROOT / eventsdoc.README).read_text()
    registry = load_registry(ROOT / "schemas")
    assert readme == eventsdoc.with_authority_table(readme, registry), (
        "README.md's table is stale: run make docs"
    )
    rows = {
        line.split(" | ")[0].strip("| `"): line
        for line in eventsdoc.authority_table(registry).splitlines()[2:]
    }
    assert set(rows) == set(registry.event_types())
    assert rows["invoice.validated"].endswith("| invoice_agent | yes |")
    assert rows["timer.schedule"].endswith(
        "| every runtime service, each its own (`timer_id` begins with its name) | yes |"
    )
    assert rows["retry.due"].endswith(
        "| every runtime service, each its own (`service` begins with its name) | yes |"
    )


def test_the_scan_finds_timers_through_variables_and_helpers(tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(
        "def on_a(event, state, ctx):\n"
        "    due = Reminded(after=3)\n"
        "    return Outcome(emit=[Emitted()], timers=[ScheduleTimer('t', at, due)])\n"
        "def on_b(event, state, ctx):\n"
        "    return Outcome(timers=[open_stage('s', tasks)])\n"
    )
    scan = scan_package(tmp_path)
    assert scan.schedules({}) == {"Reminded"}  # not Emitted: emitted at once, by the service
    assert scan.schedules({"open_stage": {"StageDeadlineReached"}}) == {"Reminded", "StageDeadlineReached"}


def test_a_service_whose_code_is_not_here_keeps_the_registry_word(tmp_path: Path) -> None:
    copy = tmp_path / "schemas"
    shutil.copytree(SUPPORT, copy)
    project = yaml.safe_load((copy / "project.yaml").read_text())
    project["contracts_path"] = str(SUPPORT.parent / "services")
    (copy / "project.yaml").write_text(yaml.safe_dump(project))
    topic = yaml.safe_load((copy / "topics" / "support.tickets.yaml").read_text())
    topic["producers"].append("ghost_agent")
    (copy / "topics" / "support.tickets.yaml").write_text(yaml.safe_dump(topic, sort_keys=False))

    answered = shown("ticket.answered", "--schemas-dir", str(copy))

    assert "triage_agent: emits it" in answered
    assert "ghost_agent: listed on the topic by the registry (its code was not read)" in answered
    assert "ghost_agent.service could not be read: ModuleNotFoundError" in answered
