"""The operator API, JSON over HTTP beside ``/health`` and ``/metrics``.

GET  /v1/dead-letters                 list, newest first; filters: service, category,
                                      event_type, status, since, until (ISO 8601 with
                                      offset, on dead_lettered_at), limit (1..1000)
GET  /v1/dead-letters/groups          counts by service, category and status (same filters)
GET  /v1/dead-letters/{id}            one letter: original bytes (base64, and decoded
                                      when JSON), error, every failure, its operations
POST /v1/dead-letters/{id}/redrive    {"actor", "reason"?}  publish the original again
POST /v1/dead-letters/{id}/discard    {"actor", "reason"}   give up; release the workflow
POST /v1/dead-letters/redrive         {"actor", "reason"?, "filter": {...}}  bulk redrive
GET  /v1/operations                   audit trail; filters: letter_id, op, actor, limit

Errors are RFC 9457 problem+json: 400 names the bad ``parameter``, 404 an unknown
id, 409 a letter that was already redriven or discarded (nothing is published).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from chorus import strictjson
from chorus.service import RuntimeHandle
from deadletter_service import operations
from deadletter_service.adapters import repository as repo
from deadletter_service.adapters.repository import Group, Letter, OperationRow
from deadletter_service.domain import (
    LIST_PARAMETERS,
    MAX_LIMIT,
    OPEN,
    FilterError,
    LetterFilter,
    parse_filter,
    parse_json,
    parse_limit,
    text_or_none,
)

PROBLEM = "application/problem+json"
ACTOR_MAX = 200
REASON_MAX = 2000  # chorus_contracts.base.Comment
OPERATION_PARAMETERS = frozenset({"letter_id", "op", "actor", "limit"})
_GROUP_PARAMETERS = LIST_PARAMETERS - {"limit"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ProblemError(Exception):
    """Answered as problem+json with ``status``."""

    def __init__(self, status: int, slug: str, title: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.slug, self.title, self.detail, self.extra = (
            status, slug, title, detail, extra,
        )  # fmt: skip

    def response(self, instance: str) -> web.Response:
        body = {
            "type": f"urn:chorus:problem:{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
            **self.extra,
        }
        return web.json_response(body, status=self.status, content_type=PROBLEM)


def bad_parameter(parameter: str, message: str) -> ProblemError:
    return ProblemError(
        400, "invalid-parameter", f"Invalid parameter: {parameter}", message, parameter=parameter
    )


def routes(rt: RuntimeHandle) -> list[web.RouteDef]:
    api = Api(rt)
    # Literal paths first: "groups" and "redrive" would otherwise match {id}.
    return [
        web.get("/v1/dead-letters", api.problems(api.list_letters)),
        web.get("/v1/dead-letters/groups", api.problems(api.groups)),
        web.post("/v1/dead-letters/redrive", api.problems(api.redrive_matching)),
        web.get("/v1/dead-letters/{id}", api.problems(api.show)),
        web.post("/v1/dead-letters/{id}/redrive", api.problems(api.redrive)),
        web.post("/v1/dead-letters/{id}/discard", api.problems(api.discard)),
        web.get("/v1/operations", api.problems(api.list_operations)),
    ]


class Api:
    def __init__(self, rt: RuntimeHandle) -> None:
        self.rt = rt
        self.max_bulk: int = rt.settings.bulk_redrive_max

    @staticmethod
    def problems(handler: Handler) -> Handler:
        async def answer(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except ProblemError as exc:
                return exc.response(request.path_qs)
            except FilterError as exc:
                return bad_parameter(exc.parameter, exc.message).response(request.path_qs)
            except operations.LetterNotFoundError as exc:
                return _not_found(exc.letter_id).response(request.path_qs)
            except operations.LetterNotOpenError as exc:
                return ProblemError(
                    409,
                    "letter-not-open",
                    f"Dead letter is already {exc.letter.status}",
                    str(exc),
                    letter_id=str(exc.letter.id),
                    letter_status=exc.letter.status,
                    resolved_by=exc.letter.resolved_by,
                    resolved_at=_iso(exc.letter.resolved_at),
                    operation=operation_json(exc.operation),
                ).response(request.path_qs)

        return answer

    # -- reads ----------------------------------------------------------------------------

    async def list_letters(self, request: web.Request) -> web.Response:
        f = parse_filter(request.query)
        async with self.rt.pool.acquire() as conn:
            letters = await repo.list_letters(conn, f)
        return web.json_response(
            {"items": [letter_summary(x) for x in letters], "count": len(letters), "limit": f.limit}
        )

    async def groups(self, request: web.Request) -> web.Response:
        f = parse_filter(request.query, allowed=_GROUP_PARAMETERS)
        async with self.rt.pool.acquire() as conn:
            rows = await repo.groups(conn, f)
        return web.json_response({"groups": [group_json(g) for g in rows]})

    async def show(self, request: web.Request) -> web.Response:
        letter_id = _letter_id(request)
        async with self.rt.pool.acquire() as conn:
            letter = await repo.get_letter(conn, letter_id)
            if letter is None:
                raise _not_found(request.match_info["id"])
            ops = await repo.list_operations(conn, letter_id=letter_id, limit=MAX_LIMIT)
        return web.json_response(letter_detail(letter, ops))

    async def list_operations(self, request: web.Request) -> web.Response:
        query = request.query
        unknown = sorted(set(query) - OPERATION_PARAMETERS)
        if unknown:
            raise bad_parameter(
                unknown[0], f"unknown parameter; expected one of {sorted(OPERATION_PARAMETERS)}"
            )
        letter_id: uuid.UUID | None = None
        if query.get("letter_id"):
            try:
                letter_id = uuid.UUID(query["letter_id"])
            except ValueError:
                raise bad_parameter("letter_id", "is not a UUID") from None
        op = query.get("op") or None
        if op is not None and op not in ("redrive", "discard"):
            raise bad_parameter("op", f"{op!r} is not one of ['discard', 'redrive']")
        limit = parse_limit(query.get("limit"), MAX_LIMIT)
        async with self.rt.pool.acquire() as conn:
            rows = await repo.list_operations(
                conn, letter_id=letter_id, op=op, actor=query.get("actor") or None, limit=limit
            )
        return web.json_response({"items": [operation_json(o) for o in rows], "count": len(rows)})

    # -- operations -------------------------------------------------------------------------

    async def redrive(self, request: web.Request) -> web.Response:
        return await self._operate(request, operations.redrive, reason_required=False)

    async def discard(self, request: web.Request) -> web.Response:
        return await self._operate(request, operations.discard, reason_required=True)

    async def _operate(self, request: web.Request, operation: Any, *, reason_required: bool) -> web.Response:
        """One operation on one letter, by the body's actor, with its reason."""
        letter_id = _letter_id(request)
        body = await _body(request)
        reason = _reason(body, required=reason_required)
        done = await operation(self.rt, letter_id, actor=_actor(body), reason=reason)
        return web.json_response(done_json(done))

    async def redrive_matching(self, request: web.Request) -> web.Response:
        body = await _body(request)
        actor, reason = _actor(body), _reason(body, required=False)
        raw_filter = body.get("filter")
        if not isinstance(raw_filter, dict):
            raise bad_parameter("filter", "must be an object of list filters")
        f = _bulk_filter(raw_filter, self.max_bulk)
        done = await operations.redrive_matching(self.rt, f, actor=actor, reason=reason)
        return web.json_response({"items": [done_json(d) for d in done], "count": len(done)})


def _bulk_filter(raw: Mapping[str, object], max_bulk: int) -> LetterFilter:
    try:
        f = parse_filter(raw, max_limit=max_bulk)
    except FilterError as exc:
        raise bad_parameter(f"filter.{exc.parameter}", exc.message) from None
    if f.status not in (None, OPEN):
        raise bad_parameter("filter.status", "only open letters can be redriven")
    if not f.narrows:
        # Redriving every open letter at once is never what an operator means by
        # an empty filter; name a service, category, event type or time range.
        raise bad_parameter("filter", "name at least one of service, category, event_type, since, until")
    return f


def _letter_id(request: web.Request) -> uuid.UUID:
    raw = request.match_info["id"]
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise _not_found(raw) from None


def _not_found(letter_id: str) -> ProblemError:
    return ProblemError(
        404, "letter-not-found", "No such dead letter", f"no dead letter with id {letter_id}",
        letter_id=letter_id,
    )  # fmt: skip


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        raw = await request.read()  # at most the application's client_max_size (1 MiB)
    except web.HTTPRequestEntityTooLarge:
        raise ProblemError(
            413, "body-too-large", "Content too large", "the body may be at most 1 MiB"
        ) from None
    try:
        body = strictjson.loads(raw, exact_integers=False)
    except strictjson.StrictJSONError as exc:
        raise bad_parameter(exc.pointer or "body", str(exc)) from None
    if not isinstance(body, dict):
        raise bad_parameter("body", "must be a JSON object")
    return body


def _actor(body: Mapping[str, Any]) -> str:
    actor = body.get("actor")
    if not isinstance(actor, str) or not actor.strip():
        raise bad_parameter("actor", "say who does this (a non-empty string)")
    if len(actor) > ACTOR_MAX:
        raise bad_parameter("actor", f"at most {ACTOR_MAX} characters")
    return actor.strip()


def _reason(body: Mapping[str, Any], *, required: bool) -> str:
    reason = body.get("reason", "")
    if not isinstance(reason, str):
        raise bad_parameter("reason", "must be a string")
    if required and not reason.strip():
        raise bad_parameter("reason", "say why (a non-empty string)")
    if len(reason) > REASON_MAX:
        raise bad_parameter("reason", f"at most {REASON_MAX} characters")
    return reason.strip()


# -- JSON shapes ------------------------------------------------------------------------------


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode() if data is not None else None


def letter_summary(letter: Letter) -> dict[str, Any]:
    return {
        "id": str(letter.id),
        "status": letter.status,
        "service": letter.service,
        "service_version": letter.service_version,
        "consumer_group": letter.consumer_group,
        "original_event_type": letter.original_event_type,
        "original_event_id": letter.original_event_id,
        "original_workflow_id": letter.original_workflow_id,
        "error": {
            "category": letter.error_category,
            "error_class": letter.error_class,
            "message": letter.error_message,
        },
        "original": {
            "topic": letter.original_topic,
            "partition": letter.original_partition,
            "offset": letter.original_offset,
        },
        "attempts": letter.attempts,
        "dead_lettered_at": _iso(letter.dead_lettered_at),
        "received_at": _iso(letter.received_at),
        "resolved_at": _iso(letter.resolved_at),
        "resolved_by": letter.resolved_by,
    }


def letter_detail(letter: Letter, ops: list[OperationRow]) -> dict[str, Any]:
    body = letter_summary(letter)
    value_json, is_json = parse_json(letter.original_value)
    body["error"] = {
        **body["error"],
        "traceback": letter.error_traceback,
        "pointer": letter.error_pointer,
    }
    body["original"] = {
        **body["original"],
        "key_b64": _b64(letter.original_key),
        "key": text_or_none(letter.original_key),
        "headers": [
            {
                "key": h["key"],
                "value_b64": h["value_b64"],
                "value": text_or_none(base64.b64decode(h["value_b64"]))
                if h["value_b64"] is not None
                else None,
            }
            for h in letter.original_headers
        ],
        "timestamp_ms": letter.original_timestamp_ms,
        "value_b64": _b64(letter.original_value),
        "value_is_json": is_json,
        "value_json": value_json,
    }
    body["failures"] = letter.failures
    body["envelope"] = letter.envelope
    body["operations"] = [operation_json(o) for o in ops]
    return body


def operation_json(op: OperationRow) -> dict[str, Any]:
    return {
        "id": op.id,
        "op": op.op,
        "letter_id": str(op.letter_id),
        "actor": op.actor,
        "reason": op.reason,
        "at": _iso(op.at),
        "result": op.result,
        "detail": op.detail,
    }


def group_json(g: Group) -> dict[str, Any]:
    return {
        "service": g.service,
        "category": g.category,
        "status": g.status,
        "count": g.count,
        "oldest": _iso(g.oldest),
        "newest": _iso(g.newest),
    }


def done_json(done: operations.Done) -> dict[str, Any]:
    return {"letter": letter_summary(done.letter), "operation": operation_json(done.operation)}
