"""The key service's API (FastAPI; OpenAPI at /openapi.json), for other Chorus services
only (role ``service``), beside ``/health`` and ``/metrics``.

POST /v1/data-keys        {"region", "subject_hash"?, "workflow_id"}: the live data key of
                          the subject (of the workflow, when it names none), made on first
                          use; 404 for a region this store does not hold (residency); 410
                          for a workflow an erasure named (nothing is sealed for it again)
GET  /v1/data-keys/{kid}  a key by id; 410 Gone once destroyed (its subject was erased),
                          404 unknown here

Keys travel to the services that seal and open personal data, over this authenticated
API, and are cached by them for minutes (chorus.privacy.crypto). They are stored wrapped under the
region's master key; a destroyed key keeps its row, without its material, as a tombstone.
"""

from __future__ import annotations

import base64
from typing import Annotated

from fastapi import APIRouter, Depends, Path

from chorus.kernel.service import RuntimeHandle
from chorus.web.apikeys import ApiKey, role
from chorus.web.typedclient import bound, provided
from chorus.web.webapi import Problem, api_router, problems
from key_service.adapters import keys
from key_service.domain import KID_PATTERN, DataKeyAnswer, DataKeyRequest, new_data_key, new_kid, region_of

Service = Annotated[ApiKey, Depends(role("service"))]
Runtime = Annotated[RuntimeHandle, Depends(provided("rt", RuntimeHandle))]

router = api_router(tags=["data keys"], responses=problems(401, 403, 404, 410, 415, 422))


def routes(rt: RuntimeHandle) -> APIRouter:
    """The key store's API (its wrapping keys are the service's dependencies)."""
    return bound(router, rt=rt)


def held(rt: RuntimeHandle, region: str) -> None:
    if not rt.deps.wrapping.holds(region):
        raise Problem(404, "Not found", f"region {region!r} is not held by this key store")


@router.post("/v1/data-keys", summary="The live data key of a subject (or workflow)")
async def data_key(body: DataKeyRequest, who: Service, rt: Runtime) -> DataKeyAnswer:
    held(rt, body.region)
    wrapping = rt.deps.wrapping
    async with rt.pool.acquire() as conn:
        existing = await keys.existing_key(
            conn, region=body.region, subject_hash=body.subject_hash, workflow_id=body.workflow_id
        )
    if existing is not None:  # the common case: no new key to make and wrap
        found, wrapped = existing
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
    return DataKeyAnswer(kid=found, key=base64.b64encode(material).decode())


@router.get("/v1/data-keys/{kid}", summary="A data key by id (410 once destroyed)")
async def by_id(kid: Annotated[str, Path(pattern=KID_PATTERN)], who: Service, rt: Runtime) -> DataKeyAnswer:
    held(rt, region_of(kid))
    async with rt.pool.acquire() as conn:
        row = await keys.find(conn, kid)
    if row is None:
        raise Problem(404, "Not found", f"no data key {kid}")
    if row["destroyed_at"] is not None:
        raise Problem(410, "Gone", f"data key {kid} was destroyed at {row['destroyed_at'].isoformat()}")
    return DataKeyAnswer(kid=kid, key=base64.b64encode(rt.deps.wrapping.unwrap(kid, row["wrapped"])).decode())
