"""POST /v1/bulk-actions (an operator's action on every running workflow a query finds; a
dry run counts them) and GET /v1/bulk-actions/{id} (how far it got, item by item).

The workflows are found when the action is asked for and fixed then: a workflow that starts
later is not acted on, one that ends meanwhile is skipped. The gateway's bulk worker
(chorus.platform.gateway.bulk) acts on them at the rate asked, each once.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

from fastapi import Path
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from chorus.contracts.api.gateway import (
    BULK_TARGETS,
    BulkAction,
    BulkActionBody,
    BulkActions,
    BulkItem,
    signal_input,
)
from chorus.contracts.lifecycle import NOT_A_STEP, SIGNAL_FIELDS
from chorus.contracts.registry import personal_pointers
from chorus.contracts.search import SearchQueryError, attribute_types, parse
from chorus.platform.gateway.adapters import bulk
from chorus.platform.gateway.routes.deps import Api, GatewayApi, IdempotencyKey, Operator, invalid_input
from chorus.web.apikeys import ApiKey
from chorus.web.webapi import Problem, api_router, problems

router = api_router()

MAX_BULK = 10_000
"""The most workflows one bulk action acts on: a query that finds more is refused (narrow it)."""
RUNNING = ("running", "waiting", "attention")
"""What a bulk action acts on: workflows that have not ended."""
ACTED_ON = {"reset": ("waiting",), "redrive": ("attention",)}
"""Narrower for these: a reset takes back only a workflow that waits, a redrive only one whose
latest news is a dead letter (a dry run counts what it would act on)."""
SHOWN = 100
ASKED = ("action", "signal", "input", "reset_to", "service", "to_release", "query", "reason", "rate_per_s")
"""What makes two requests the same bulk action (a retry with its Idempotency-Key)."""
BulkId = Annotated[str, Path(max_length=80, pattern=r"^bulk-[0-9a-f]{32}$")]


@router.post(
    "/v1/bulk-actions",
    status_code=202,
    responses={200: {"description": "a dry run: what it would act on"}, **problems(400, 409)},
)
async def create(
    body: BulkActionBody, who: Operator, api: Api, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Cancel, send a signal to, reset, redrive or repin every running workflow ``query``
    finds (202 with the action), or count them (``dry_run``: 200, nothing done). Each
    workflow's audit trail names the operator and the reason; a retry with the same
    Idempotency-Key answers with the first action."""
    try:
        parse(body.query, attribute_types(api.rt.registry))
    except SearchQueryError as exc:
        raise Problem(400, "Invalid query", str(exc)) from None
    _check_targets(api, body)
    if body.action == "signal":
        _check_signal(api, body)
    # A retried request (same operator, same key) is the same action, never a second one:
    # answered from what was stored, without searching again.
    key = f"{who.principal}:{idempotency_key}" if idempotency_key else uuid.uuid4().hex
    bulk_id = f"bulk-{uuid.uuid5(uuid.NAMESPACE_URL, f'chorus:bulk:{key}').hex}"
    status_url = f"{api.base_url}/v1/bulk-actions/{bulk_id}"
    if idempotency_key and not body.dry_run:
        async with api.rt.pool.acquire() as conn:
            earlier = await bulk.find(conn, bulk_id, SHOWN)
        if earlier is not None:
            return _replayed(earlier, body, bulk_id, idempotency_key, status_url)
    found = await _running(api, body.query, who, ACTED_ON.get(body.action, RUNNING))
    now = api.rt.clock.now()
    if body.dry_run:
        items = [BulkItem(workflow_id=f.workflow_id, status="pending", detail=None, at=None) for f in found]
        answer = BulkAction(
            bulk_id=None,
            action=body.action,
            signal=body.signal,
            reset_to=body.reset_to,
            service=body.service,
            to_release=body.to_release,
            query=body.query,
            reason=body.reason,
            requested_by=who.principal,
            requested_at=now,
            rate_per_s=body.rate_per_s,
            matched=len(found),
            pending=len(found),
            done=0,
            skipped=0,
            finished_at=None,
            items=items[:SHOWN],
        )
        return JSONResponse(answer.model_dump(mode="json"), status_code=200)
    asked = bulk.Asked(
        bulk_id,
        body.action,
        body.query,
        body.reason,
        who.principal,
        now,
        body.rate_per_s,
        body.signal,
        body.input,
        body.reset_to,
        body.service,
        body.to_release,
    )
    async with api.rt.pool.acquire() as conn:
        created = await bulk.create(conn, asked, found)
        shown = await bulk.find(conn, bulk_id, SHOWN)
    assert shown is not None
    if not created:  # a concurrent retry stored it first
        return _replayed(shown, body, bulk_id, idempotency_key, status_url)
    headers = {"Location": status_url}
    return JSONResponse(_answer(shown, status_url).model_dump(mode="json"), status_code=202, headers=headers)


def _replayed(
    shown: dict[str, Any], body: BulkActionBody, bulk_id: str, key: str | None, status_url: str
) -> JSONResponse:
    """The action stored under this Idempotency-Key; 409 when the key named another one."""
    stored = {**shown, "input": json.loads(shown["input"]) if shown["input"] else None}
    if any(stored[field] != getattr(body, field) for field in ASKED):
        raise Problem(409, "Idempotency-Key reused", f"{key!r} named another bulk action ({bulk_id})")
    headers = {"Location": status_url, "Idempotent-Replayed": "true"}
    return JSONResponse(_answer(shown, status_url).model_dump(mode="json"), status_code=202, headers=headers)


@router.get("/v1/bulk-actions")
async def listed(who: Operator, api: Api) -> BulkActions:
    """The latest 50 bulk actions with how far each got (their items: GET .../{id})."""
    async with api.rt.pool.acquire() as conn:
        found = await bulk.recent(conn, 50)
    base = f"{api.base_url}/v1/bulk-actions"
    return BulkActions(bulk_actions=[_answer(shown, f"{base}/{shown['bulk_id']}") for shown in found])


@router.get("/v1/bulk-actions/{bulk_id}", responses=problems(404))
async def status(bulk_id: BulkId, who: Operator, api: Api) -> BulkAction:
    """How far the action got: counts, and its first workflows with what became of each."""
    async with api.rt.pool.acquire() as conn:
        shown = await bulk.find(conn, bulk_id, SHOWN)
    if shown is None:
        raise Problem(404, "Not found", f"no bulk action {bulk_id!r}")
    return _answer(shown, f"{api.base_url}/v1/bulk-actions/{bulk_id}")


def _check_targets(api: GatewayApi, body: BulkActionBody) -> None:
    """The action names what it needs (a reset its event type, a repin its service and
    release) and nothing another action would (422 naming the field otherwise)."""
    named = BULK_TARGETS[body.action]
    for field in sorted({f for fields in BULK_TARGETS.values() for f in fields}):
        given = getattr(body, field) is not None
        if given and field not in named:
            raise _invalid(field, f"a {body.action} takes no {field}")
        if not given and field in named and body.action != "signal":  # a signal's: _check_signal
            raise _invalid(field, f"required by a {body.action}")
    registry = api.rt.registry
    if body.reset_to is not None and (
        body.reset_to in NOT_A_STEP
        or not registry.knows(body.reset_to)
        # The platform's own topics carry its records and requests, never a workflow's step.
        or registry.topic_for(body.reset_to).topic.startswith("chorus.")
    ):
        raise _invalid("reset_to", f"{body.reset_to!r} is no step's event type a workflow goes back to")
    if body.service is not None and body.service not in registry.principals.services:
        raise _invalid("service", f"no service {body.service!r} in the registry")


def _invalid(field: str, message: str) -> Problem:
    return Problem(422, "Invalid bulk action", message, errors=[{"pointer": f"/{field}", "message": message}])


def _check_signal(api: GatewayApi, body: BulkActionBody) -> None:
    """A signal some workflow type declares for operators, with an input it takes (422
    naming the field otherwise); each workflow found is checked again when its turn comes
    (a type that takes no such signal is skipped, saying so)."""
    registry = api.rt.registry
    declared = [s for wf in registry.workflows.values() for n, s in wf.signals.items() if n == body.signal]
    if body.signal is None or body.input is None:
        raise Problem(
            422,
            "Invalid bulk action",
            "a signal action names its signal and input",
            errors=[{"pointer": "/signal" if body.signal is None else "/input", "message": "required"}],
        )
    if not declared:
        known = sorted(registry.signal_names())
        raise Problem(
            422,
            "Invalid bulk action",
            f"no workflow type takes a signal {body.signal!r}; signals: {known}",
            errors=[{"pointer": "/signal", "message": "no such signal"}],
        )
    if not any("operator" in s.roles for s in declared):
        raise Problem(403, "Forbidden", f"an operator may not send {body.signal}")
    version = registry.latest_version(declared[0].event)
    # The input is kept with the action (each item sends it): none of it may be personal.
    personal = set(personal_pointers(registry.schemas[(declared[0].event, version)])) - {
        f"/{field}" for field in SIGNAL_FIELDS
    }
    if personal:
        detail = (
            f"{body.signal}'s input holds personal data ({', '.join(sorted(personal))}): send it one by one"
        )
        raise Problem(422, "Invalid bulk action", detail, errors=[{"pointer": "/signal", "message": detail}])
    model = registry.model(declared[0].event, version)
    try:
        signal_input(model).model_validate_json(json.dumps(body.input))
    except ValidationError as exc:
        raise invalid_input(exc) from None


async def _running(api: GatewayApi, query: str, who: ApiKey, statuses: tuple[str, ...]) -> list[bulk.Found]:
    """Every workflow of ``statuses`` ``query`` finds now (the read model's pages, followed)."""
    found: list[bulk.Found] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"query": query, "status": list(statuses), "limit": "1000"}
        if cursor:
            params["cursor"] = cursor
        page = await api.reads.workflows(params, for_whom=who.principal)
        found += [bulk.Found(w.workflow_id, w.workflow_type) for w in page.workflows]
        if len(found) > MAX_BULK:
            raise Problem(
                400,
                "Too many workflows",
                f"the query finds more than {MAX_BULK} running workflows: narrow it",
            )
        cursor = page.next_cursor
        if not cursor:
            return found


def _answer(shown: dict[str, Any], status_url: str) -> BulkAction:
    # Not finished while an item is to do (a gateway from before queued items, running beside
    # this one in a rolling upgrade, marks an action of them finished at once).
    finished_at = shown["finished_at"] if not shown["pending"] else None
    return BulkAction(
        **{k: v for k, v in shown.items() if k not in ("items", "input", "finished_at")},
        finished_at=finished_at,
        items=[BulkItem(**item) for item in shown["items"]],
        status_url=status_url,
    )
