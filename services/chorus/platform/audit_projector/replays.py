"""Replays as jobs of the running projector: ``POST /v1/replays`` starts one, ``GET
/v1/replays/{id}`` follows it (what ``chorus replay`` shows).

A replay runs where the projection lives, with the projector's own registry, Kafka and
size limit, so an operator's terminal needs only the API. Jobs are kept in memory: a
replay is a rebuild, so one cut short by a restart is simply started again (its
schema stays behind until dropped).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from aiokafka.errors import KafkaError

from chorus.contracts.api.audit_projector import ReplayComparison, ReplayProgress, ReplayResult
from chorus.contracts.api.audit_projector import ReplayJob as ReplayJobAnswer
from chorus.kernel.service import RuntimeHandle
from chorus.platform.audit_projector.replay import (
    MissingProjectionError,
    MissingTopicError,
    ReplayTarget,
    compare,
    rebuild,
    wait_for_live,
)

log = logging.getLogger("chorus.platform.audit_projector.replays")

JobState = Literal["running", "succeeded", "failed"]
MAX_JOBS = 100
"""Finished jobs kept for GET (the oldest go first)."""


@dataclass
class ReplayJob:
    replay_id: str
    schema: str
    since: datetime | None
    verify: bool
    drop: bool
    live_timeout_s: float
    state: JobState = "running"
    done: int = 0
    total: int | None = None
    result: ReplayResult | None = None
    comparison: ReplayComparison | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def progress(self) -> ReplayProgress:
        return ReplayProgress(done=self.done, total=self.total)

    def published(self) -> ReplayJobAnswer:
        """As the replay API answers with it: the job's attributes, by name (``schema`` is the
        answer's alias of ``schema_name``)."""
        return ReplayJobAnswer.model_validate(self, from_attributes=True)

    def as_json(self) -> dict[str, Any]:
        return self.published().model_dump(mode="json", by_alias=True)


class ReplayJobs:
    def __init__(self, rt: RuntimeHandle) -> None:
        self.rt = rt
        self.jobs: dict[str, ReplayJob] = {}

    def running(self) -> ReplayJob | None:
        """The replay in progress, if any: one at a time, beside the live projection."""
        return next((j for j in self.jobs.values() if j.state == "running"), None)

    def start(self, *, since: datetime | None, verify: bool, drop: bool, live_timeout_s: float) -> ReplayJob:
        target = ReplayTarget.new(self.rt.service)
        job = ReplayJob(target.replay_id, target.schema, since, verify, drop, live_timeout_s)
        job.task = asyncio.create_task(self._run(job, target), name=f"replay:{target.replay_id}")
        self.jobs[job.replay_id] = job
        finished = [j for j in self.jobs.values() if j.state != "running"]
        for old in finished[: max(0, len(self.jobs) - MAX_JOBS)]:
            del self.jobs[old.replay_id]
        return job

    async def _run(self, job: ReplayJob, target: ReplayTarget) -> None:
        rt, settings = self.rt, self.rt.settings

        def advance(done: int, total: int) -> None:
            job.done, job.total = done, total

        try:
            result = await rebuild(
                registry=rt.registry,
                bootstrap=settings.kafka_bootstrap,
                pool=rt.pool,
                live_schema=rt.service,
                since=job.since,
                target=target,
                progress=advance,
                max_event_bytes=settings.max_event_bytes,
                verifier=rt.verifier,
            )
            job.result = ReplayResult(
                records=result.records,
                applied=result.applied,
                undecodable=result.undecodable,
                seconds=round(result.seconds, 3),
                topics=result.topics,
                group=result.target.group,
            )
            if job.verify:
                group = settings.group_id or rt.service  # the live projector's consumer group
                lag = await wait_for_live(
                    settings.kafka_bootstrap, group, result.end_offsets, job.live_timeout_s
                )
                async with rt.pool.acquire() as conn:
                    c = await compare(conn, live=rt.service, replay=job.schema, since=job.since)
                job.comparison = ReplayComparison(
                    equal=c.equal,
                    workflows=c.workflows,
                    live_checksum=c.live_checksum,
                    replay_checksum=c.replay_checksum,
                    differing=c.differing[:100],
                    differing_count=len(c.differing),
                    live_lag=lag,
                )
            if job.drop:
                async with rt.pool.acquire() as conn:
                    await conn.execute(f"DROP SCHEMA IF EXISTS {job.schema} CASCADE")
            job.state = "succeeded"
        except (MissingTopicError, MissingProjectionError, KafkaError, OSError) as exc:
            job.state, job.error = "failed", str(exc) or type(exc).__name__
        except Exception as exc:  # a bug: say so in the job, log the traceback
            log.exception("replay %s failed", job.replay_id)
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
