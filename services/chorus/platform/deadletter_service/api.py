"""The operator API (FastAPI; OpenAPI at /openapi.json), beside ``/health`` and ``/metrics``.

GET  /v1/dead-letters                 list, newest first; filters: service, category,
                                      event_type, status, since, until (ISO 8601 with
                                      offset, on dead_lettered_at), limit (1..1000)
GET  /v1/dead-letters/groups          counts by service, category and status (same filters)
GET  /v1/dead-letters/{id}            one letter: original bytes (base64, and decoded
                                      when JSON), error, every failure, its operations
POST /v1/dead-letters/{id}/redrive    {"reason"?}  publish the original again
POST /v1/dead-letters/{id}/discard    {"reason"}   give up; release the workflow
POST /v1/dead-letters/redrive         {"reason"?, "filter": {...}}  bulk redrive
GET  /v1/operations                   audit trail; filters: letter_id, op, actor, limit

Every route takes an API key (:mod:`chorus.web.apikeys`). Reads are for operators and
auditors (a letter holds the original payload and a traceback); redrive and discard
for operators only, and the operation's actor is the key's principal. Bodies are
JSON only (a form or text/plain POST is a 415).

Errors are RFC 9457 problem+json: 400 names the bad query ``parameter``, 422 the
failing body field, 404 an unknown id, 409 a letter that was already redriven or
discarded, or whose original topic its service does not read (nothing is published; a
bulk redrive leaves such letters open and records the refusal).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Mapping
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request

from chorus.contracts.api.deadletter_service import (
    BulkRedriveBody,
    DiscardBody,
    DoneList,
    GroupList,
    LetterList,
    OperationList,
    RedriveBody,
)
from chorus.kernel.service import RuntimeHandle
from chorus.platform.deadletter_service import operations
from chorus.platform.deadletter_service.adapters import repository as repo
from chorus.platform.deadletter_service.answers import (
    done_answer,
    group_answer,
    letter_detail,
    letter_summary,
    operation_answer,
)
from chorus.platform.deadletter_service.domain import (
    CATEGORIES,
    LIST_PARAMETERS,
    MAX_FILTER_CHARS,
    MAX_LIMIT,
    OPEN,
    STATUSES,
    FilterError,
    LetterFilter,
    parse_filter,
    parse_limit,
    text_filter,
)
from chorus.web.apikeys import ApiKey, role
from chorus.web.typedclient import bound, provided
from chorus.web.webapi import Problem, api_router, invalid_parameter, problems

OPERATION_PARAMETERS = frozenset({"letter_id", "op", "actor", "limit"})
_GROUP_PARAMETERS = LIST_PARAMETERS - {"limit"}
T = TypeVar("T")

Reader = Annotated[ApiKey, Depends(role("operator", "auditor"))]
Operator = Annotated[ApiKey, Depends(role("operator"))]
Runtime = Annotated[RuntimeHandle, Depends(provided("rt", RuntimeHandle))]

router = api_router(tags=["dead letters"], responses=problems(400, 401, 403, 404, 409, 415, 422))


def routes(rt: RuntimeHandle) -> APIRouter:
    """The operator API over the letters of the service ``rt`` runs."""
    return bound(router, rt=rt)


def bad_field(pointer: str, message: str) -> Problem:
    return Problem(
        422, "Invalid request", f"{pointer}: {message}", errors=[{"pointer": pointer, "message": message}]
    )


_SCHEMAS: dict[str, dict[str, Any]] = {
    "service": {"type": "string", "maxLength": MAX_FILTER_CHARS},
    "category": {"type": "string", "enum": list(CATEGORIES)},
    "event_type": {"type": "string", "maxLength": MAX_FILTER_CHARS},
    "status": {"type": "string", "enum": list(STATUSES)},
    "since": {"type": "string", "format": "date-time", "description": "on dead_lettered_at, inclusive"},
    "until": {"type": "string", "format": "date-time", "description": "on dead_lettered_at, exclusive"},
    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
    "letter_id": {"type": "string", "format": "uuid"},
    "op": {"type": "string", "enum": ["redrive", "discard"]},
    "actor": {"type": "string", "maxLength": MAX_FILTER_CHARS},
}


def documented(names: frozenset[str]) -> dict[str, Any]:
    """The OpenAPI parameters of a route that reads its query itself (it refuses names it
    does not know, which declared parameters would not): clients and schemathesis see them.
    An empty value is no filter, as the console sends it."""
    return {
        "parameters": [
            {
                "name": name,
                "in": "query",
                "required": False,
                "schema": {"anyOf": [_SCHEMAS[name], {"type": "string", "maxLength": 0}]},
            }
            for name in sorted(names)
        ]
    }


def query_filter(request: Request, allowed: frozenset[str] = LIST_PARAMETERS) -> LetterFilter:
    try:
        return parse_filter(request.query_params, allowed=allowed)
    except FilterError as exc:
        raise invalid_parameter(exc.parameter, exc.message) from None


# Literal paths first: "groups" and "redrive" would otherwise match {id}.
@router.get(
    "/v1/dead-letters", summary="List dead letters, newest first", openapi_extra=documented(LIST_PARAMETERS)
)
async def list_letters(request: Request, who: Reader, rt: Runtime) -> dict[str, Any]:
    f = query_filter(request)
    async with rt.pool.acquire() as conn:
        letters = await repo.list_letters(conn, f)
    found = LetterList(items=[letter_summary(x) for x in letters], count=len(letters), limit=f.limit)
    return found.model_dump(mode="json")


@router.get(
    "/v1/dead-letters/groups",
    summary="Counts by service, category and status",
    openapi_extra=documented(_GROUP_PARAMETERS),
)
async def groups(request: Request, who: Reader, rt: Runtime) -> dict[str, Any]:
    f = query_filter(request, _GROUP_PARAMETERS)
    async with rt.pool.acquire() as conn:
        rows = await repo.groups(conn, f)
    return GroupList(groups=[group_answer(g) for g in rows]).model_dump(mode="json")


@router.post("/v1/dead-letters/redrive", summary="Redrive every open letter a filter matches")
async def redrive_matching(body: BulkRedriveBody, who: Operator, rt: Runtime) -> dict[str, Any]:
    f = _bulk_filter(body.filter, rt.settings.bulk_redrive_max)
    done = await _answering(
        operations.redrive_matching(rt, f, actor=who.principal, reason=body.reason.strip())
    )
    return DoneList(items=[done_answer(d) for d in done], count=len(done)).model_dump(mode="json")


@router.get("/v1/dead-letters/{letter_id}", summary="One letter with its original bytes")
async def show(letter_id: str, who: Reader, rt: Runtime) -> dict[str, Any]:
    key = _letter_id(letter_id)
    async with rt.pool.acquire() as conn:
        letter = await repo.get_letter(conn, key)
        if letter is None:
            raise _not_found(letter_id)
        ops = await repo.list_operations(conn, letter_id=key, limit=MAX_LIMIT)
    return letter_detail(letter, ops).model_dump(mode="json")


@router.post("/v1/dead-letters/{letter_id}/redrive", summary="Publish the original again")
async def redrive(
    letter_id: str, who: Operator, body: RedriveBody | None = None, *, rt: Runtime
) -> dict[str, Any]:
    reason = body.reason.strip() if body else ""
    done = await _answering(operations.redrive(rt, _letter_id(letter_id), actor=who.principal, reason=reason))
    return done_answer(done).model_dump(mode="json")


@router.post("/v1/dead-letters/{letter_id}/discard", summary="Give up; release the workflow")
async def discard(letter_id: str, body: DiscardBody, who: Operator, rt: Runtime) -> dict[str, Any]:
    if not body.reason.strip():
        raise bad_field("/reason", "say why (a non-empty string)")
    done = await _answering(
        operations.discard(rt, _letter_id(letter_id), actor=who.principal, reason=body.reason.strip())
    )
    return done_answer(done).model_dump(mode="json")


@router.get(
    "/v1/operations",
    summary="The audit trail of redrives and discards",
    openapi_extra=documented(OPERATION_PARAMETERS),
)
async def list_operations(request: Request, who: Reader, rt: Runtime) -> dict[str, Any]:
    query = request.query_params
    unknown = sorted(set(query) - OPERATION_PARAMETERS)
    if unknown:
        raise invalid_parameter(
            unknown[0], f"unknown parameter; expected one of {sorted(OPERATION_PARAMETERS)}"
        )
    letter_id: uuid.UUID | None = None
    if query.get("letter_id"):
        try:
            letter_id = uuid.UUID(query["letter_id"])
        except ValueError:
            raise invalid_parameter("letter_id", "is not a UUID") from None
    op = query.get("op") or None
    if op is not None and op not in ("redrive", "discard"):
        raise invalid_parameter("op", f"{op!r} is not one of ['discard', 'redrive']")
    try:
        limit = parse_limit(query.get("limit"), MAX_LIMIT)
        actor = text_filter("actor", query.get("actor"))
    except FilterError as exc:
        raise invalid_parameter(exc.parameter, exc.message) from None
    async with rt.pool.acquire() as conn:
        rows = await repo.list_operations(conn, letter_id=letter_id, op=op, actor=actor, limit=limit)
    return OperationList(items=[operation_answer(o) for o in rows], count=len(rows)).model_dump(mode="json")


async def _answering(operation: Awaitable[T]) -> T:
    """The operation's result; its refusals as problems (404 unknown, 409 not open or not
    back to where its service reads)."""
    try:
        return await operation
    except operations.LetterNotFoundError as exc:
        raise _not_found(exc.letter_id) from None
    except operations.RedriveRefusedError as exc:
        raise Problem(
            409,
            "Dead letter cannot go back to its topic",
            str(exc),
            letter_id=str(exc.letter.id),
            letter_status=exc.letter.status,
            operation=operation_answer(exc.operation).model_dump(mode="json"),
        ) from None
    except operations.LetterNotOpenError as exc:
        raise Problem(
            409,
            f"Dead letter is already {exc.letter.status}",
            str(exc),
            letter_id=str(exc.letter.id),
            letter_status=exc.letter.status,
            resolved_by=exc.letter.resolved_by,
            resolved_at=exc.letter.resolved_at.isoformat() if exc.letter.resolved_at is not None else None,
            operation=operation_answer(exc.operation).model_dump(mode="json"),
        ) from None


def _bulk_filter(raw: Mapping[str, object], max_bulk: int) -> LetterFilter:
    try:
        f = parse_filter(raw, max_limit=max_bulk)
    except FilterError as exc:
        raise bad_field(f"/filter/{exc.parameter}", exc.message) from None
    if f.status not in (None, OPEN):
        raise bad_field("/filter/status", "only open letters can be redriven")
    if not f.narrows:
        # Redriving every open letter at once is never what an operator means by
        # an empty filter; name a service, category, event type or time range.
        raise bad_field("/filter", "name at least one of service, category, event_type, since, until")
    return f


def _letter_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise _not_found(raw) from None


def _not_found(letter_id: str) -> Problem:
    return Problem(404, "No such dead letter", f"no dead letter with id {letter_id}", letter_id=letter_id)
