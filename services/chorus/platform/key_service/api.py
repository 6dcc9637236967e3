"""The key service's API (FastAPI; OpenAPI at /openapi.json), for other Chorus services
only (role ``service``), beside ``/health`` and ``/metrics``.

Each service presents its own credential (CHORUS_KEY_SERVICE_CLIENTS names whose it is);
a service the registry gives no personal field to read or write gets 403 and no key.

POST /v1/data-keys        {"region", "subject_hash"?, "workflow_id"}: the live data key of
                          the subject (of the workflow, when it names none), made on first
                          use; 404 for a region this store does not hold (residency); 410
                          for a workflow an erasure named (nothing is sealed for it again)
GET  /v1/data-keys/{kid}  a key by id; 410 Gone once destroyed (its subject was erased),
                          404 unknown here

Keys travel to the services that seal and open personal data, over this authenticated
API, and are cached by them for minutes (chorus.privacy.crypto). They are stored wrapped under the
region's master key; a destroyed key keeps its row, without its material, as a tombstone.

Every key handed out is on the record: a log line naming the caller's principal, the key
id and whose key it is (subject hash, workflow), and ``chorus_data_keys_handed_out_total``
by principal and how it was asked for (``live``: the subject's current key, ``by_id``).
"""

from __future__ import annotations

import base64
import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from prometheus_client import Counter

from chorus.base.logs import fields
from chorus.base.settings import demo_key_service_credential
from chorus.kernel.service import RuntimeHandle
from chorus.platform.key_service.adapters import keys
from chorus.platform.key_service.domain import (
    KID_PATTERN,
    DataKeyAnswer,
    DataKeyRequest,
    new_data_key,
    new_kid,
    region_of,
)
from chorus.web.apikeys import ApiKey, known_key, presented_key, role
from chorus.web.typedclient import bound, provided
from chorus.web.webapi import Problem, api_router, problems

Runtime = Annotated[RuntimeHandle, Depends(provided("rt", RuntimeHandle))]
Handouts = Annotated[Counter, Depends(provided("handouts", Counter))]
Clients = Annotated[dict[str, ApiKey], Depends(provided("clients", dict))]


async def client(presented: Annotated[str, Depends(presented_key)], clients: Clients) -> ApiKey:
    """The service presenting a key-service credential; the services' API keys
    (CHORUS_API_KEYS) are not accepted here."""
    return known_key(clients, presented)


async def entitled(who: Annotated[ApiKey, Depends(role("service", who=client))], rt: Runtime) -> ApiKey:
    """The caller, if the registry gives it personal fields to read or write; 403 otherwise."""
    if not rt.registry.handles_personal(who.principal):
        raise Problem(
            403,
            "Forbidden",
            f"{who.principal} reads and writes no personal field (schemas/topics): it gets no data keys",
        )
    return who


Service = Annotated[ApiKey, Depends(entitled)]

log = logging.getLogger("chorus.platform.key_service.api")

router = api_router(tags=["data keys"], responses=problems(401, 403, 404, 410, 415, 422))


def clients(configured: dict[str, str], services: list[str]) -> dict[str, ApiKey]:
    """Credential -> its service, as configured (the demo's for ``services`` when empty)."""
    named = configured or {demo_key_service_credential(s): s for s in services}
    return {credential: ApiKey(principal=service, role="service") for credential, service in named.items()}


def routes(rt: RuntimeHandle) -> APIRouter:
    """The key store's API (its wrapping keys are the service's dependencies)."""
    handouts = rt.metrics.counter(
        "chorus_data_keys_handed_out", "Data keys handed to a caller, by its principal", ["principal", "how"]
    )
    callers = clients(rt.settings.key_service_clients, sorted(rt.registry.principals.services))
    return bound(router, rt=rt, handouts=handouts, clients=callers)


def handed_out(
    handouts: Counter, who: ApiKey, how: str, kid: str, *, subject_hash: str | None, workflow_id: str | None
) -> None:
    """On the record: who got which key, whose it is."""
    handouts.labels(who.principal, how).inc()
    where = fields(
        principal=who.principal, how=how, kid=kid, subject_hash=subject_hash, workflow_id=workflow_id
    )
    log.info("data key handed out", extra=where)


def held(rt: RuntimeHandle, region: str) -> None:
    if not rt.deps.wrapping.holds(region):
        raise Problem(404, "Not found", f"region {region!r} is not held by this key store")


@router.post("/v1/data-keys", summary="The live data key of a subject (or workflow)")
async def data_key(body: DataKeyRequest, who: Service, rt: Runtime, handouts: Handouts) -> DataKeyAnswer:
    held(rt, body.region)
    wrapping = rt.deps.wrapping
    async with rt.pool.acquire() as conn:
        existing = await keys.existing_key(
            conn, region=body.region, subject_hash=body.subject_hash, workflow_id=body.workflow_id
        )
    whose = {"subject_hash": body.subject_hash, "workflow_id": body.workflow_id}
    if existing is not None:  # the common case: no new key to make and wrap
        found, wrapped = existing
        handed_out(handouts, who, "live", found, **whose)
        return DataKeyAnswer(kid=found, key=base64.b64encode(wrapping.unwrap(found, wrapped)).decode())
    kid = new_kid(body.region)
    key = new_data_key()
    async with rt.pool.acquire() as conn:
        try:
            found, wrapped = await keys.live_key(
                conn,
                kid=kid,
                region=body.region,
                subject_hash=body.subject_hash,
                workflow_id=body.workflow_id,
                wrapped=wrapping.wrap(kid, key),
                now=rt.clock.now(),
            )
        except keys.WorkflowErasedError as exc:
            raise Problem(410, "Gone", str(exc)) from None
    material = key if found == kid else wrapping.unwrap(found, wrapped)
    handed_out(handouts, who, "live", found, **whose)
    return DataKeyAnswer(kid=found, key=base64.b64encode(material).decode())


@router.get("/v1/data-keys/{kid}", summary="A data key by id (410 once destroyed)")
async def by_id(
    kid: Annotated[str, Path(pattern=KID_PATTERN)], who: Service, rt: Runtime, handouts: Handouts
) -> DataKeyAnswer:
    held(rt, region_of(kid))
    async with rt.pool.acquire() as conn:
        row = await keys.find(conn, kid)
    if row is None:
        raise Problem(404, "Not found", f"no data key {kid}")
    if row["destroyed_at"] is not None:
        raise Problem(410, "Gone", f"data key {kid} was destroyed at {row['destroyed_at'].isoformat()}")
    handed_out(handouts, who, "by_id", kid, subject_hash=row["subject_hash"], workflow_id=row["workflow_id"])
    return DataKeyAnswer(kid=kid, key=base64.b64encode(rt.deps.wrapping.unwrap(kid, row["wrapped"])).decode())
