"""The projection's read API, JSON over HTTP beside ``/health`` and ``/metrics``.

Other services learn a workflow's status, timeline and approvals here, never from the
projector's tables (the gateway answers its users from this API).

GET /v1/workflows/{workflow_id}            status, stage, what it waits for
GET /v1/workflows/{workflow_id}/timeline   its events in the order they happened
GET /v1/approvals?tier=<tier>              open approvals, soonest deadline first
GET /v1/approvals/{approval_id}            one approval gate, decided or not
POST /v1/erasures                          erase a data subject: {"subject_ref", "actor"};
                                           202 with the erasure; every service confirms later
GET /v1/erasures/{erasure_id}              the erasure, which services confirmed it
                                           (``confirmations``) and which not yet (``pending``)
POST /v1/replays                           rebuild the projection from the topics into a fresh
                                           schema: {"since", "verify", "drop", "live_timeout_s"};
                                           202 with the job
GET /v1/replays/{replay_id}                the job: state, progress, result, comparison

Errors are RFC 9457 problem+json: 404 an unknown id, 400 a parameter over its bound,
415 a body that is not JSON, 413 one over 64 KiB, 422 a body naming the failing field.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from aiohttp import web
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, Strict, StrictBool, ValidationError

from audit_projector.adapters import queries
from audit_projector.adapters.maintenance import Announcer, erase_subject, erasure
from audit_projector.config import Settings
from audit_projector.replays import ReplayJobs
from chorus import strictjson
from chorus.service import RuntimeHandle
from chorus.webapi import PROBLEM

MAX_ID = 200
MAX_BODY = 65_536


class ErasureRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    # Envelopes bound no subject reference; the body's 64 KiB cap bounds this one.
    subject_ref: str = Field(min_length=1)
    actor: str = Field(min_length=1, max_length=200)


class ReplayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    since: AwareDatetime | None = Field(
        default=None, description="from the first record at or after this time; else from the start"
    )
    verify: StrictBool = False
    drop: StrictBool = False
    live_timeout_s: Annotated[float, Strict()] = Field(default=30.0, ge=0, le=3600)


Body = TypeVar("Body", bound=BaseModel)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def routes(rt: RuntimeHandle) -> list[web.RouteDef]:
    api = ReadApi(rt)
    return [
        web.get("/v1/workflows/{workflow_id}", api.workflow),
        web.get("/v1/workflows/{workflow_id}/timeline", api.timeline),
        web.get("/v1/approvals", api.approvals),
        web.get("/v1/approvals/{approval_id}", api.approval),
        web.post("/v1/erasures", api.erase),
        web.get("/v1/erasures/{erasure_id}", api.erasure),
        web.post("/v1/replays", api.replay),
        web.get("/v1/replays/{replay_id}", api.replay_job),
    ]


def _problem(status: int, title: str, detail: str, instance: str, **extra: Any) -> web.Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "instance": instance}
    return web.json_response({**body, **extra}, status=status, content_type=PROBLEM)


async def _body(request: web.Request, model: type[Body]) -> Body | web.Response:
    """The request's JSON body as ``model``, or the problem that names what is wrong."""
    if request.content_type != "application/json":
        return _problem(415, "Unsupported media type", "send application/json", request.path)
    if (request.content_length or 0) > MAX_BODY:
        return _problem(413, "Body too large", f"at most {MAX_BODY} bytes", request.path)
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        return _problem(413, "Body too large", f"at most {MAX_BODY} bytes", request.path)
    try:
        return model.model_validate(strictjson.loads(raw))
    except strictjson.StrictJSONError as exc:
        return _problem(422, "Invalid body", str(exc), request.path)
    except ValidationError as exc:
        errors = [
            {"pointer": "/" + "/".join(strictjson.escape(str(p)) for p in e["loc"]), "message": e["msg"]}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{e['pointer']}: {e['message']}" for e in errors)
        return _problem(422, "Invalid body", detail, request.path, errors=errors)


def _id(request: web.Request, name: str) -> str | web.Response:
    value = request.match_info[name]
    if len(value) > MAX_ID:
        return _problem(400, "Invalid parameter", f"{name}: at most {MAX_ID} characters", request.path)
    return value


def _json(items: list[Any]) -> list[dict[str, Any]]:
    return [item.model_dump(mode="json") for item in items]


class ReadApi:
    def __init__(self, rt: RuntimeHandle) -> None:
        self.rt = rt
        self.schema = rt.service
        # A runner started with plain ServiceSettings (an embedding) gets the defaults.
        settings = rt.settings if isinstance(rt.settings, Settings) else Settings()
        self.data_holders = sorted(settings.data_holders or [rt.service])
        self.replays = ReplayJobs(rt)

    async def _one(
        self, request: web.Request, name: str, read: Callable[..., Awaitable[Any]]
    ) -> web.Response:
        key = _id(request, name)
        if isinstance(key, web.Response):
            return key
        async with self.rt.pool.acquire() as conn:
            found = await read(conn, key, schema=self.schema)
        if found is None:
            return _problem(404, "Not found", f"no {name.removesuffix('_id')} {key!r}", request.path)
        return web.json_response(found.model_dump(mode="json"))

    async def workflow(self, request: web.Request) -> web.Response:
        return await self._one(request, "workflow_id", queries.status_view)

    async def approval(self, request: web.Request) -> web.Response:
        return await self._one(request, "approval_id", queries.approval_view)

    async def timeline(self, request: web.Request) -> web.Response:
        key = _id(request, "workflow_id")
        if isinstance(key, web.Response):
            return key
        async with self.rt.pool.acquire() as conn:
            entries = await queries.timeline_entries(conn, key, schema=self.schema)
        return web.json_response({"workflow_id": key, "timeline": _json(entries)})

    async def approvals(self, request: web.Request) -> web.Response:
        tier = request.query.get("tier")
        if tier is not None and len(tier) > MAX_ID:
            return _problem(400, "Invalid parameter", f"tier: at most {MAX_ID} characters", request.path)
        async with self.rt.pool.acquire() as conn:
            items = await queries.approval_tasks(conn, tier, schema=self.schema)
        return web.json_response({"tier": tier, "approvals": _json(items)})

    async def erase(self, request: web.Request) -> web.Response:
        body = await _body(request, ErasureRequest)
        if isinstance(body, web.Response):
            return body
        announce = Announcer(self.rt.outbox, self.rt.producer)
        async with self.rt.pool.acquire() as conn:
            async with self.rt.outbox.transaction(conn) as tx:
                report = await erase_subject(
                    tx,
                    body.subject_ref,
                    actor=body.actor,
                    now=self.rt.clock.now(),
                    announce=announce,
                    ledger=self.schema,
                )
            found = await erasure(conn, report.erasure_id, ledger=self.schema)
        assert found is not None  # committed just now
        location = f"/v1/erasures/{report.erasure_id}"
        return web.json_response(
            {**found, "workflows": report.workflows, **self._pending(found)},
            status=202,
            headers={"Location": location},
        )

    async def erasure(self, request: web.Request) -> web.Response:
        key = _id(request, "erasure_id")
        if isinstance(key, web.Response):
            return key
        try:
            erasure_id = uuid.UUID(key)
        except ValueError:
            return _problem(404, "Not found", f"no erasure {key!r} (erasure ids are UUIDs)", request.path)
        async with self.rt.pool.acquire() as conn:
            found = await erasure(conn, erasure_id, ledger=self.schema)
        if found is None:
            return _problem(404, "Not found", f"no erasure {key!r}", request.path)
        return web.json_response({**found, **self._pending(found)})

    def _pending(self, found: dict[str, Any]) -> dict[str, Any]:
        """Which data holders have not confirmed yet (``complete`` when none)."""
        confirmed = found["confirmations"]
        pending = [s for s in self.data_holders if confirmed.get(s, {}).get("parts", 0) < found["parts"]]
        return {"pending": pending, "complete": not pending}

    async def replay(self, request: web.Request) -> web.Response:
        body = await _body(request, ReplayRequest)
        if isinstance(body, web.Response):
            return body
        busy = self.replays.running()
        if busy is not None:
            detail = f"replay {busy.replay_id} is still running; follow it at /v1/replays/{busy.replay_id}"
            return _problem(409, "A replay is running", detail, request.path, replay_id=busy.replay_id)
        job = self.replays.start(
            since=body.since, verify=body.verify, drop=body.drop, live_timeout_s=body.live_timeout_s
        )
        return web.json_response(
            job.as_json(), status=202, headers={"Location": f"/v1/replays/{job.replay_id}"}
        )

    async def replay_job(self, request: web.Request) -> web.Response:
        key = _id(request, "replay_id")
        if isinstance(key, web.Response):
            return key
        job = self.replays.jobs.get(key)
        if job is None:
            detail = f"no replay {key!r} (jobs live in the projector process; was it restarted?)"
            return _problem(404, "Not found", detail, request.path)
        return web.json_response(job.as_json())
