"""Search attributes (workflows.yaml) and the query language over them: what the registry
accepts as an attribute, and what a query may say, with the words a user gets when it
cannot be run."""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from chorus.contracts.registry import default_registry, load_registry
from chorus.contracts.search import All, AnyOf, Compare, Not, SearchQueryError, attribute_types, parse

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
TYPES = attribute_types(default_registry())


def at(kind: str, event: str, field: str) -> dict[str, str]:
    return {"type": kind, "event": event, "field": field}


def test_the_reference_workflows_are_found_by_their_business_attributes() -> None:
    assert TYPES == {
        "vendor": "keyword",
        "amount": "number",
        "currency": "keyword",
        "po_number": "keyword",
        "cost_center": "keyword",
        "topic": "keyword",
    }


@pytest.mark.parametrize(
    ("declared", "refused"),
    [
        (at("keyword", "invoice.received", "/document_text"), "personal data is never"),
        (at("keyword", "invoice.received", "/total_cents"), "is integer, not a keyword"),
        (at("number", "invoice.received", "/nothing_here"), "has no field /nothing_here"),
        (at("keyword", "no.such_event", "/x"), "no event type no.such_event"),
        # The projector never reads the timers' topic: it could never project this.
        (at("keyword", "timer.schedule", "/timer_id"), "does not read"),
        (at("keyword", "workflow.started", "/submitted_by"), "personal data is never"),
    ],
)
def test_an_attribute_the_projector_could_not_read_or_that_is_personal_is_refused(
    tmp_path: Path, declared: dict[str, str], refused: str
) -> None:
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy)
    workflows = yaml.safe_load((copy / "workflows.yaml").read_text())
    workflows["procurement"]["search_attributes"]["odd"] = declared
    (copy / "workflows.yaml").write_text(yaml.safe_dump(workflows))
    with pytest.raises(ValueError, match=f"procurement's search attribute odd: .*{refused}"):
        load_registry(copy)


@pytest.mark.parametrize(
    ("name", "declared", "refused"),
    [
        ("status", at("keyword", "report.requested", "/topic"), "none of"),
        ("and", at("keyword", "report.requested", "/topic"), "none of"),
        # vendor is a keyword of procurement: a number of the same name elsewhere is refused.
        ("vendor", at("number", "report.requested", "/min_words"), "one name, one type"),
    ],
)
def test_a_name_is_one_attribute_with_one_type_and_never_a_builtin_or_a_word(
    tmp_path: Path, name: str, declared: dict[str, str], refused: str
) -> None:
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy)
    workflows = yaml.safe_load((copy / "workflows.yaml").read_text())
    workflows["research_report"]["search_attributes"][name] = declared
    (copy / "workflows.yaml").write_text(yaml.safe_dump(workflows))
    with pytest.raises(ValueError, match=refused):
        load_registry(copy)


def test_and_binds_tighter_than_or_and_values_are_typed() -> None:
    found = parse("vendor = 'O''Brien' or amount <= -2.5 AND NOT status IN ('completed', 'failed')", TYPES)
    assert found == AnyOf(
        (
            Compare("vendor", "keyword", "=", ("O'Brien",)),
            All(
                (
                    Compare("amount", "number", "<=", (Decimal("-2.5"),)),
                    Not(Compare("status", "keyword", "in", ("completed", "failed"))),
                )
            ),
        )
    )
    # A chain of ANDs is one flat conjunction.
    chained = parse("vendor = 'a' AND amount > 1 AND (currency = 'EUR' AND status = 'waiting')", TYPES)
    assert isinstance(chained, All) and len(chained.conditions) == 4


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("vendor = 'acme' AND", "the query ends too soon: expected ( or NOT or an attribute"),
        ("vendor = acme", "at column 10: expected 'text' or a number, found 'acme'"),
        ("amount > '5'", "amount is a number: compare it with a number"),
        ("vendor > 'a'", "vendor is text: it is compared with =, != or IN, not >"),
        ("vendr = 'a'", "unknown attribute 'vendr': search by amount, cost_center, currency"),
        ("vendor = 'acme", "at column 10: the text that starts here is never closed"),
        ("status = 'done'", "status 'done' is none of: attention, waiting"),
        ("(vendor = 'a'", "a ( is never closed"),
        ("vendor = 'a'; DROP TABLE workflow_status", "at column 13: ';' is not part of a query"),
        ("vendor = 'a' OR 1 = 1", "at column 17: expected ( or NOT or an attribute, found '1'"),
        ("", "the query is empty"),
        ("NOT " * 240 + "vendor = 'a'", "nested more than 8 deep"),
        (" OR ".join(["vendor = 'a'"] * 21), "more than 20 comparisons"),
        ("x" * 1001, "at most 1000"),
    ],
)
def test_a_query_that_cannot_run_says_where_and_what_was_expected(query: str, says: str) -> None:
    with pytest.raises(SearchQueryError) as refused:
        parse(query, TYPES)
    assert says in str(refused.value)
