"""Signals and updates (workflows.yaml's ``signals``): what the registry accepts as a
signal a person may send a running workflow, and the words it refuses the rest with."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from chorus.contracts.api.gateway import SignalBody, signal_input
from chorus.contracts.procurement import InvoiceLineAdded
from chorus.contracts.registry import default_registry, load_registry

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


def test_a_procurement_takes_its_submitters_missing_line_as_a_signal_or_an_update() -> None:
    registry = default_registry()
    [(name, declared)] = registry.signals("procurement").items()
    assert (name, declared.event, declared.roles, declared.answer) == (
        "add_line",
        "invoice.line_added",
        ["submitter", "operator"],
        "invoice.line_checked",
    )
    assert registry.signals("research_report") == {} and registry.signals("no_such_type") == {}


def test_a_signals_input_is_its_events_fields_but_those_the_gateway_fills_in() -> None:
    body: Any = SignalBody[signal_input(InvoiceLineAdded)]  # type: ignore[misc]
    schema = body.model_json_schema()
    line_input = schema["$defs"]["InvoiceLineAddedInput"]
    assert set(line_input["properties"]) == {"line"}
    assert line_input["additionalProperties"] is False  # a signal_id or sent_by sent along is refused


@pytest.mark.parametrize(
    ("declared", "refused"),
    [
        ({"event": "no.such_event", "roles": ["submitter"]}, "no event type no.such_event"),
        # Stated by the invoice agent: the gateway could not state it, nor vouch for who sent it.
        ({"event": "invoice.validated", "roles": ["submitter"]}, "signed by the gateway alone"),
        # The gateway's own, but no signal's fields: who sent it and why would be lost.
        ({"event": "workflow.cancel_requested", "roles": ["operator"]}, "must derive from .*Signal"),
        ({"event": "invoice.line_added", "roles": ["auditor"]}, "roles"),
        ({"event": "invoice.line_added", "roles": []}, "roles"),
        # An answer the gateway states would be its own word, not the handler's.
        ({"event": "invoice.line_added", "roles": ["submitter"], "answer": "invoice.line_added"}, "answer"),
        (
            {"event": "invoice.line_added", "roles": ["submitter"], "answer": "invoice.rejected"},
            "must derive from .*SignalAnswer",
        ),
        ({"event": "invoice.line_added", "roles": ["submitter"], "timeout_s": 600}, "timeout_s"),
    ],
)
def test_a_signal_the_gateway_could_not_vouch_for_or_nobody_could_answer_is_refused(
    tmp_path: Path, declared: dict[str, Any], refused: str
) -> None:
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy)
    workflows = yaml.safe_load((copy / "workflows.yaml").read_text())
    workflows["procurement"]["signals"]["odd"] = declared
    (copy / "workflows.yaml").write_text(yaml.safe_dump(workflows))
    with pytest.raises(ValueError, match=refused):
        load_registry(copy)


def test_one_signal_name_is_one_event_across_workflow_types(tmp_path: Path) -> None:
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy)
    workflows = yaml.safe_load((copy / "workflows.yaml").read_text())
    workflows["research_report"]["signals"] = {
        "add_line": {"event": "report.requested", "roles": ["operator"]}
    }
    (copy / "workflows.yaml").write_text(yaml.safe_dump(workflows))
    with pytest.raises(ValueError, match="one name, one event"):
        load_registry(copy)
