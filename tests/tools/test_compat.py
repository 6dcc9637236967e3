"""The compatibility gate, run as a user runs it: `chorus schemas check` in a git repository.

Each test builds a small registry in a temporary repository, commits it, edits the
working tree and reads what the command prints and its exit code.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from chorus.tools.cli.main import app
from chorus.tools.compat import BACKWARD, BOTH, FORWARD, SAFE, Direction, diff_schemas

ROOT = Path(__file__).resolve().parents[2]
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Chorus Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Chorus Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    # The developer's own git config (signing, hooks) must not leak into the test repo.
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

ORDER_PLACED_V1: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://chorus.dev/schemas/events/order.placed.v1.schema.json",
    "$defs": {
        "Line": {
            "properties": {
                "sku": {"maxLength": 64, "minLength": 1, "type": "string"},
                "amount_cents": {"minimum": 0, "type": "integer"},
            },
            "required": ["sku", "amount_cents"],
            "title": "Line",
            "type": "object",
        }
    },
    "properties": {
        "order_id": {"maxLength": 200, "minLength": 1, "type": "string"},
        "total_cents": {"minimum": 0, "type": "integer"},
        "currency": {"enum": ["EUR", "USD"], "type": "string"},
        "lines": {"items": {"$ref": "#/$defs/Line"}, "type": "array"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
    },
    "required": ["order_id", "total_cents", "currency", "lines"],
    "title": "order_placed_v1",
    "type": "object",
    "x-event-type": "order.placed",
    "x-version": 1,
}


class Repo:
    """A temporary git repository holding a registry under ``schemas/``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.schemas = root / "schemas"

    def git(self, *args: str) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=self.root, env=GIT_ENV, capture_output=True, text=True, check=True
        )
        return proc.stdout

    def commit(self, message: str = "registry") -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)

    def topic(self, compatibility: str = "full", versions: list[int] | None = None) -> None:
        spec = {
            "topic": "shop.orders",
            "description": "Orders customers placed.",
            "owner": "checkout",
            "producers": ["checkout"],
            "consumers": ["billing", "shipping"],
            "partitions": 3,
            "retention_ms": 604800000,
            "events": [
                {
                    "type": "order.placed",
                    "versions": versions or [1],
                    "compatibility": compatibility,
                }
            ],
        }
        (self.schemas / "topics" / "shop.orders.yaml").write_text(yaml.safe_dump(spec))

    def schema(self, body: dict[str, Any], version: int = 1) -> None:
        path = self.schemas / "events" / f"order.placed.v{version}.schema.json"
        path.write_text(json.dumps(body, indent=2) + "\n")

    def edit_schema(self, change: Callable[[dict[str, Any]], None], version: int = 1) -> None:
        path = self.schemas / "events" / f"order.placed.v{version}.schema.json"
        body = json.loads(path.read_text())
        change(body)
        path.write_text(json.dumps(body, indent=2) + "\n")


def make_repo(tmp_path: Path, compatibility: str = "full") -> Repo:
    repo = Repo(tmp_path / "repo")
    for folder in ("topics", "events"):
        (repo.schemas / folder).mkdir(parents=True)
    (repo.schemas / "envelope.v1.schema.json").write_text(
        (ROOT / "schemas" / "envelope.v1.schema.json").read_text()
    )
    repo.topic(compatibility)
    repo.schema(ORDER_PLACED_V1)
    repo.git("init", "-q", "-b", "main")
    repo.commit("first")
    return repo


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


def check(repo: Repo, against: str = "HEAD") -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["schemas", "check", "--against", against, "--schemas-dir", str(repo.schemas)]
    )
    return result.exit_code, result.output


def test_deleting_a_required_field_fails_naming_the_field_and_its_consumers(repo: Repo) -> None:
    def drop_total(body: dict[str, Any]) -> None:
        del body["properties"]["total_cents"]
        body["required"].remove("total_cents")

    repo.edit_schema(drop_total)
    status_before = repo.git("status", "--porcelain")

    code, out = check(repo)

    assert code == 1, out
    line = next(line for line in out.splitlines() if "/payload/total_cents" in line)
    assert line.startswith("BREAKING")
    assert "order.placed v1" in line
    assert "required field removed" in line
    assert "old consumers cannot read new data" in line
    assert "billing, shipping" in line
    assert "1 breaking change(s)" in out
    # The gate only reads git: the index and the work tree are as they were.
    assert repo.git("status", "--porcelain") == status_before


def test_adding_an_optional_field_passes(repo: Repo) -> None:
    def add_gift_wrap(body: dict[str, Any]) -> None:
        body["properties"]["gift_wrap"] = {"default": False, "type": "boolean"}

    repo.edit_schema(add_gift_wrap)

    code, out = check(repo)

    assert code == 0, out
    assert "ok        order.placed v1 /payload/gift_wrap: optional field added" in out
    assert "BREAKING" not in out
    assert "compatible with HEAD" in out


def test_marking_personal_data_is_its_introduction_then_a_change_of_a_mark_breaks(repo: Repo) -> None:
    """The first marks a registry gets are their introduction; from then on, marking or
    unmarking a field breaks both ways (whatever encrypts or erases by it must change)."""

    def mark(field: str, marked: bool) -> Callable[[dict[str, Any]], None]:
        def change(body: dict[str, Any]) -> None:
            if marked:
                body["properties"][field]["x-personal"] = True
            else:
                body["properties"][field].pop("x-personal")

        return change

    repo.edit_schema(mark("total_cents", True))
    code, out = check(repo)
    assert code == 0, out
    assert "personal-data marks introduced" in out

    repo.commit("marks")
    repo.edit_schema(mark("order_id", True))
    code, out = check(repo)
    assert code == 1, out
    line = next(line for line in out.splitlines() if "/payload/order_id" in line)
    assert line.startswith("BREAKING") and "now marked personal data" in line

    repo.edit_schema(mark("order_id", False))
    repo.edit_schema(mark("total_cents", False))
    code, out = check(repo)
    assert code == 1 and "/payload/total_cents: no longer marked personal data" in out, out


def test_retyping_a_nested_field_fails_with_its_pointer(repo: Repo) -> None:
    def retype_amount(body: dict[str, Any]) -> None:
        body["$defs"]["Line"]["properties"]["amount_cents"] = {"type": "string"}

    repo.edit_schema(retype_amount)

    code, out = check(repo)

    assert code == 1, out
    assert "order.placed v1 /payload/lines/items/amount_cents: type changed from integer to string" in out
    assert "billing, shipping" in out


@pytest.mark.parametrize(
    ("compatibility", "order"),
    [
        ("backward", "roll out consumers first"),
        ("forward", "roll out producers first"),
        ("full", "roll out in any order"),
    ],
)
def test_a_new_version_may_break_and_prints_its_rollout_order(
    tmp_path: Path, compatibility: str, order: str
) -> None:
    repo = make_repo(tmp_path, compatibility)
    v2 = copy.deepcopy(ORDER_PLACED_V1)
    del v2["properties"]["total_cents"]
    v2["required"].remove("total_cents")
    v2["properties"]["total"] = {"type": "string"}
    v2["required"].append("total")
    repo.schema(v2, version=2)
    repo.topic(compatibility, versions=[1, 2])

    code, out = check(repo)

    assert code == 0, out
    line = next(line for line in out.splitlines() if "order.placed v2" in line)
    assert line.startswith("NEW")
    assert "breaking change(s) from v1, allowed in a new version" in line
    assert f"compatibility {compatibility}" in line
    assert line.endswith(order) or order in line
    assert "BREAKING" not in out


def test_the_mode_decides_what_breaks(tmp_path: Path) -> None:
    def add_currency(body: dict[str, Any]) -> None:
        body["properties"]["currency"]["enum"].append("GBP")

    lenient = make_repo(tmp_path / "backward", "backward")
    lenient.edit_schema(add_currency)
    strict = make_repo(tmp_path / "full", "full")
    strict.edit_schema(add_currency)

    # New consumers read old data fine; consumers still on v1 code meet "GBP".
    lenient_code, lenient_out = check(lenient)
    strict_code, strict_out = check(strict)

    assert lenient_code == 0, lenient_out
    assert 'ok        order.placed v1 /payload/currency: enum widened: "GBP" added' in lenient_out
    assert strict_code == 1, strict_out
    assert 'BREAKING  order.placed v1 /payload/currency: enum widened: "GBP" added' in strict_out


def test_removing_a_version_that_consumers_claim_fails(repo: Repo) -> None:
    (repo.schemas / "events" / "order.placed.v1.schema.json").unlink()

    code, out = check(repo)

    assert code == 1, out
    assert "order.placed v1 /: version removed while its topic still has consumers" in out


def test_last_commit_is_checked_too(repo: Repo) -> None:
    def tighten_sku(body: dict[str, Any]) -> None:
        body["$defs"]["Line"]["properties"]["sku"]["maxLength"] = 32

    repo.edit_schema(tighten_sku)
    repo.commit("tighten sku")

    head_code, head_out = check(repo, "HEAD")
    parent_code, parent_out = check(repo, "HEAD~1")

    assert head_code == 0, head_out
    assert "registry unchanged since HEAD" in head_out
    assert parent_code == 1, parent_out
    assert "/payload/lines/items/sku: maxLength lowered from 64 to 32 (tightened)" in parent_out


def test_an_accepted_tightening_passes_against_its_commit_and_never_covers_a_later_change(repo: Repo) -> None:
    def bound_currency(body: dict[str, Any]) -> None:
        body["properties"]["currency"]["maxLength"] = 3

    def loosen_total(body: dict[str, Any]) -> None:
        body["properties"]["total_cents"]["type"] = ["integer", "null"]

    before = repo.git("rev-parse", "HEAD").strip()
    (repo.schemas / "accepted-breaks.yaml").write_text(
        yaml.safe_dump([{"until": before, "reason": "bounds for every string (issue 13)"}])
    )
    repo.edit_schema(bound_currency)

    code, out = check(repo)
    assert code == 0, out
    assert "ACCEPTED  order.placed v1 /payload/currency: maxLength 3 added (tightened)" in out
    assert "tightenings accepted up to" in out and "bounds for every string" in out

    repo.edit_schema(loosen_total)  # a loosening is never accepted, even in that change
    code, out = check(repo)
    assert code == 1, out
    assert "BREAKING  order.placed v1 /payload/total_cents" in out

    repo.edit_schema(lambda body: body["properties"]["total_cents"].update({"type": "integer"}))
    repo.commit("bounded")  # the change the entry was written for
    repo.edit_schema(lambda body: body["properties"]["order_id"].update({"maxLength": 40}))
    for base in ("HEAD", before):  # a later tightening is not covered, whatever the base
        code, out = check(repo, base)
        assert code == 1, out
        assert "BREAKING  order.placed v1 /payload/order_id: maxLength lowered from 200 to 40" in out
    assert "ACCEPTED  order.placed v1 /payload/currency" in out  # against `before`, it still is


def test_a_ref_that_does_not_exist_is_a_note_not_a_failure(repo: Repo) -> None:
    code, out = check(repo, "HEAD~1")

    assert code == 0, out
    assert "note: HEAD~1 does not exist" in out


def test_outside_a_git_repository_it_is_a_usage_error(tmp_path: Path) -> None:
    schemas = tmp_path / "plain" / "schemas"
    (schemas / "topics").mkdir(parents=True)

    result = CliRunner().invoke(app, ["schemas", "check", "--against", "HEAD", "--schemas-dir", str(schemas)])

    assert result.exit_code == 2
    assert "not a git repository" in result.output


# The rules, one change at a time (pure; no git).
Mutation = Callable[[dict[str, Any]], object]  # edits the schema in place
RULES: list[tuple[str, Mutation, str, frozenset[Direction]]] = [
    (
        "new required field",
        lambda b: (b["properties"].update(shop={"type": "string"}), b["required"].append("shop")),
        "/payload/shop",
        BACKWARD,
    ),
    ("field made required", lambda b: b["required"].append("note"), "/payload/note", BACKWARD),
    (
        "field made optional",
        lambda b: b["required"].remove("currency"),
        "/payload/currency",
        FORWARD,
    ),
    (
        "narrowed enum",
        lambda b: b["properties"]["currency"]["enum"].remove("USD"),
        "/payload/currency",
        BACKWARD,
    ),
    (
        "pattern added",
        lambda b: b["properties"]["order_id"].update(pattern="^o-"),
        "/payload/order_id",
        BACKWARD,
    ),
    (
        "maximum added",
        lambda b: b["properties"]["total_cents"].update(maximum=10**9),
        "/payload/total_cents",
        BACKWARD,
    ),
    (
        "minLength lowered",
        lambda b: b["properties"]["order_id"].update(minLength=0),
        "/payload/order_id",
        FORWARD,
    ),
    (
        "no longer nullable",
        lambda b: b["properties"].update(note={"type": "string"}),
        "/payload/note",
        BACKWARD,
    ),
    (
        "integer widened to number",
        lambda b: b["properties"]["total_cents"].update(type="number"),
        "/payload/total_cents",
        FORWARD,
    ),
    (
        "object closed",
        lambda b: b.update(additionalProperties=False),
        "/payload",
        BACKWARD,
    ),
    (
        "optional field removed",
        lambda b: b["properties"].pop("note"),
        "/payload/note",
        SAFE,
    ),
    (
        "description edited",
        lambda b: b["properties"]["order_id"].update(description="the order"),
        "",
        SAFE,
    ),
    (
        "nested model renamed",  # a class rename renames its $defs entry, not the wire format
        lambda b: (
            b["$defs"].update(LineItem=b["$defs"].pop("Line")),
            b["properties"]["lines"]["items"].update({"$ref": "#/$defs/LineItem"}),
        ),
        "",
        SAFE,
    ),
    (
        "nested item retyped",
        lambda b: b["$defs"]["Line"]["properties"]["sku"].update(type="integer"),
        "/payload/lines/items/sku",
        BOTH,
    ),
]


@pytest.mark.parametrize(
    ("change", "pointer", "breaks"),
    [(fn, pointer, breaks) for _, fn, pointer, breaks in RULES],
    ids=[name for name, *_ in RULES],
)
def test_each_change_breaks_the_direction_it_should(
    change: Mutation, pointer: str, breaks: frozenset[Direction]
) -> None:
    new = copy.deepcopy(ORDER_PLACED_V1)
    change(new)

    found = diff_schemas(ORDER_PLACED_V1, new, "/payload")

    if not pointer:
        assert all(not c.breaks for c in found), found
        return
    at_pointer = [c for c in found if c.pointer == pointer]
    assert at_pointer, found
    assert frozenset().union(*(c.breaks for c in at_pointer)) == breaks, at_pointer


STATE_V1: dict[str, Any] = {
    "type": "object",
    "properties": {"invoice_id": {"type": "string"}, "readings": {"type": "integer", "default": 0}},
    "required": ["invoice_id"],
}


def _state(repo: Repo, body: dict[str, Any], version: int = 1) -> None:
    (repo.schemas / "state").mkdir(exist_ok=True)
    (repo.schemas / "state" / f"invoice_agent.v{version}.schema.json").write_text(json.dumps(body))


def test_a_checkpoint_schema_changed_in_place_fails_even_by_an_optional_field(repo: Repo) -> None:
    """An older release that read this state version would drop the new field when it writes
    the checkpoint back: a state change is a new state version, never an edit."""
    _state(repo, STATE_V1)
    repo.commit("state v1")
    grown = json.loads(json.dumps(STATE_V1))
    grown["properties"]["validated"] = {"type": "boolean", "default": False}
    _state(repo, grown)

    code, out = check(repo)

    assert code == 1, out
    line = next(line for line in out.splitlines() if "state of invoice_agent v1" in line)
    assert line.startswith("BREAKING") and "/state/validated" in line
    assert "raise the service's state_version, add a migration" in out


def test_a_new_state_version_beside_the_old_passes(repo: Repo) -> None:
    _state(repo, STATE_V1)
    repo.commit("state v1")
    _state(repo, {**STATE_V1, "required": ["invoice_id", "readings"]}, version=2)

    code, out = check(repo)

    assert code == 0, out
    assert "new       state of invoice_agent v2" in out
