"""Rebuild the audit projection from the topics into fresh tables, and compare.

A replay runs the live projector's own handler and effect (``on_workflow_event`` ->
``ProjectEvent``) with another target schema (``audit_replay_<id>``) and its own
consumer group, so it never moves the live group's offsets or touches live tables.
It emits nothing either: records that do not decode, and records of a signed type its
registered producer did not sign, are counted and skipped (the live projector
dead-lettered them, and the dead letter itself is on a replayed topic): a forged fact
refused live is not believed on replay either.

It reads a snapshot of the log: the end offsets captured when it starts are where it
stops, however much the live topics grow meanwhile. Because the status fold does not
depend on event order (see ``chorus.platform.audit_projector.domain``), the rebuilt rows equal the live
rows once the live projector has consumed the same offsets.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
from aiokafka import TopicPartition

from chorus.base.clock import SystemClock
from chorus.base.errors import DecodeError, UnauthorizedError
from chorus.contracts.base import EventModel
from chorus.contracts.registry import Registry
from chorus.kernel.codec import DEFAULT_MAX_BYTES, decode
from chorus.kernel.kafka import make_admin, make_consumer, stop_client
from chorus.kernel.ports import Verifying
from chorus.kernel.service import Context, Effect
from chorus.platform.audit_projector.adapters.projection import (
    REPLAY_PREFIX,
    WorkflowDigest,
    checksum,
    migrate_projection,
    workflow_digests,
)
from chorus.platform.audit_projector.handlers import ProjectorDeps, on_workflow_event, projected, search_of

log = logging.getLogger("chorus.platform.audit_projector.replay")

Progress = Callable[[int, int], None]
"""(records read so far, records to read in total)."""


@dataclass(frozen=True)
class ReplayTarget:
    replay_id: str
    schema: str
    group: str

    @staticmethod
    def new(live_schema: str, replay_id: str | None = None) -> ReplayTarget:
        rid = replay_id or uuid.uuid4().hex[:12]
        return ReplayTarget(rid, f"{REPLAY_PREFIX}{rid}", f"{live_schema}-replay-{rid}")


@dataclass
class ReplayResult:
    target: ReplayTarget
    end_offsets: dict[TopicPartition, int]
    records: int = 0
    applied: int = 0
    """Records that decoded and went through the projection (copies included: the
    projection drops them by event id)."""
    undecodable: int = 0
    """Records skipped: not decodable, or not signed by a registered signer of their type."""
    seconds: float = 0.0
    topics: list[str] = field(default_factory=list)


def replay_topics(registry: Registry) -> list[str]:
    """Every physical topic (lanes included) carrying an event type the projection shows
    (not the confirmations of erasures and retirements: those are ledger, not projection)."""
    names: set[str] = set()
    for model in projected(registry):
        names.update(registry.topic_for(model.event_type).physical_topics())
    return sorted(names)


async def rebuild(
    *,
    registry: Registry,
    bootstrap: str,
    pool: asyncpg.Pool,
    live_schema: str,
    since: datetime | None = None,
    target: ReplayTarget | None = None,
    batch_size: int = 500,
    writers: int = 4,
    verifier: Verifying,
    progress: Progress | None = None,
    max_event_bytes: int = DEFAULT_MAX_BYTES,
) -> ReplayResult:
    """Project the topics (from the start, or from the first record at or after ``since``)
    up to the end offsets seen at start into a fresh schema. Blocks until done.

    Each batch is applied by ``writers`` transactions in parallel, a workflow's events
    always in the same one (so they never contend on a workflow's lock); ``pool`` needs
    that many connections. Offsets are committed to the replay's own group after a
    batch's transactions, so the group shows how far it got. Re-running with the same
    ``target`` reads from the start again and changes nothing already projected (rows
    are keyed by event id).
    """
    target = target or ReplayTarget.new(live_schema)
    started = time.perf_counter()
    projector = _Projector(
        deps=ProjectorDeps(schema=target.schema, ledger=live_schema, search=search_of(registry)),
        registry=registry,
        max_bytes=max_event_bytes,
        verifier=verifier,
    )
    topics = replay_topics(registry)
    tps = await partitions(bootstrap, topics)
    async with pool.acquire() as conn:
        # The replay applies the live ledger (erasures, retired workflows): it must exist.
        if await conn.fetchval("SELECT to_regclass($1)", f"{live_schema}.erasures") is None:
            raise MissingProjectionError(
                f"no live audit projection in schema {live_schema!r} (has the projector run?)"
            )
        await migrate_projection(conn, target.schema, ledger=False)
    consumer = make_consumer(bootstrap, group_id=target.group, client_id=target.group)
    await consumer.start()
    try:
        consumer.assign(tps)
        end: dict[TopicPartition, int] = dict(await consumer.end_offsets(tps))
        start = await _start_offsets(consumer, tps, end, since)
        result = ReplayResult(target=target, end_offsets=end, topics=topics)
        total = sum(max(0, end[tp] - start[tp]) for tp in tps)
        pending: set[TopicPartition] = set()
        for tp in tps:
            if start[tp] < end[tp]:
                consumer.seek(tp, start[tp])
                pending.add(tp)
        consumer.pause(*[tp for tp in tps if tp not in pending])
        if progress:
            progress(0, total)
        while pending:
            batches = await consumer.getmany(timeout_ms=500, max_records=batch_size)
            buckets: list[list[Effect]] = [[] for _ in range(writers)]
            commits: dict[TopicPartition, int] = {}
            for tp, records in batches.items():
                for record in records:
                    if record.offset >= end[tp]:
                        break  # written after the snapshot: not this replay's business
                    result.records += 1
                    projected = await projector.effect_for(record.value, record.topic, record.headers)
                    if projected is None:
                        result.undecodable += 1
                    else:
                        workflow_id, effect = projected
                        buckets[zlib.crc32(workflow_id.encode()) % writers].append(effect)
                        result.applied += 1
                    commits[tp] = record.offset + 1
            await asyncio.gather(*(_apply(pool, bucket) for bucket in buckets if bucket))
            if commits:
                await consumer.commit(commits)
            for tp in list(pending):
                if await consumer.position(tp) >= end[tp]:
                    consumer.pause(tp)
                    pending.discard(tp)
            if progress:
                progress(result.records, total)
        result.seconds = time.perf_counter() - started
        return result
    finally:
        await stop_client(consumer)


class MissingTopicError(RuntimeError):
    """A topic of the registry does not exist on the broker."""


class MissingProjectionError(RuntimeError):
    """The live projection (and its ledger) is not in the database."""


async def partitions(bootstrap: str, topics: list[str]) -> list[TopicPartition]:
    """Every partition of ``topics``, from the broker's metadata."""
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    missing = sorted(d["topic"] for d in described if d["error_code"] != 0)
    if missing:
        raise MissingTopicError(
            f"topic(s) {', '.join(missing)} do not exist on {bootstrap}; "
            "run `chorus topics apply` (or check --schemas-dir)"
        )
    return sorted(TopicPartition(d["topic"], p["partition"]) for d in described for p in d["partitions"])


async def _start_offsets(
    consumer: Any,
    tps: list[TopicPartition],
    end: dict[TopicPartition, int],
    since: datetime | None,
) -> dict[TopicPartition, int]:
    if since is None:
        return dict(await consumer.beginning_offsets(tps))
    found = await consumer.offsets_for_times({tp: int(since.timestamp() * 1000) for tp in tps})
    # No record at or after ``since`` in a partition: nothing to replay there.
    return {tp: found[tp].offset if found.get(tp) is not None else end[tp] for tp in tps}


@dataclass(frozen=True)
class _Projector:
    """The live projector's handler, pointed at the replay schema."""

    deps: ProjectorDeps
    registry: Registry
    max_bytes: int
    """The live projector's CHORUS_MAX_EVENT_BYTES: what it dead-letters, replay skips."""
    verifier: Verifying
    """The live projector's check of signed types: what it refuses, replay skips."""
    clock: SystemClock = field(default_factory=SystemClock)

    @functools.cached_property
    def accept(self) -> dict[str, int]:
        """What the projection shows (asked once: a replay decodes every record with it)."""
        return {model.event_type: model.version for model in projected(self.registry)}

    async def effect_for(
        self, raw: bytes | None, topic: str, headers: Sequence[tuple[str, bytes]] = ()
    ) -> tuple[str, Effect] | None:
        """The workflow id and the handler's effect for one record; None when it does
        not decode or its signature does not hold. Size limits and signature checks are the
        live projector's, so both sides drop the same."""
        try:
            limit = self.registry.size_limit(topic, self.max_bytes)
            event = decode(raw, self.registry, accept=self.accept, max_bytes=limit)
            self.verifier.check(event.envelope, raw, headers)
        except (DecodeError, UnauthorizedError):
            return None
        if event.event_type not in self.accept:
            return None
        ctx: Context[ProjectorDeps] = Context(
            service=self.deps.schema,
            deps=self.deps,
            clock=self.clock,
            envelope=event.envelope,
            attempt=1,
            feedback=[],
            log=logging.LoggerAdapter(log),
            _checkpoint=_no_checkpoint,
        )
        outcome = await on_workflow_event(event, None, ctx)
        effects = list(outcome.effects)
        assert len(effects) == 1, "the projector's handler returns exactly one effect"
        return event.envelope.workflow_id, effects[0]


async def _apply(pool: asyncpg.Pool, effects: list[Effect]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        for effect in effects:
            await effect.apply(conn)


async def _no_checkpoint(_: EventModel | Any, __: Any) -> None:
    raise RuntimeError("the audit projector keeps no checkpoint")


# -- waiting for the live projector, comparing ------------------------------------------------


async def live_lag(bootstrap: str, group: str, end: dict[TopicPartition, int]) -> int:
    """Records of the snapshot the live group has not committed yet."""
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(group, partitions=list(end))
    finally:
        await admin.close()
    lag = 0
    for tp, offset in end.items():
        meta = committed.get(tp)
        done = meta.offset if meta is not None and meta.offset >= 0 else 0
        lag += max(0, offset - done)
    return lag


async def wait_for_live(bootstrap: str, group: str, end: dict[TopicPartition, int], timeout_s: float) -> int:
    """Wait until the live group has committed the snapshot's end offsets; returns the
    lag left when ``timeout_s`` passed (0 when it caught up)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        lag = await live_lag(bootstrap, group, end)
        if lag == 0 or loop.time() >= deadline:
            return lag
        await asyncio.sleep(0.2)


@dataclass(frozen=True)
class Comparison:
    live_checksum: str
    replay_checksum: str
    workflows: int
    differing: list[str]
    """Workflow ids whose rows differ, sorted."""

    @property
    def equal(self) -> bool:
        return self.live_checksum == self.replay_checksum


async def compare(
    conn: asyncpg.Connection, *, live: str, replay: str, since: datetime | None = None
) -> Comparison:
    """Row-for-row comparison of two projections: an md5 per workflow over its status row
    and audit rows (deterministic columns; ``recorded_at``/``updated_at`` left out), then
    one md5 over those in workflow order, per side.

    With ``since`` the comparison covers workflows that started at or after it, and
    audit rows of events that occurred at or after it (a replay from a timestamp has not
    seen the rest).
    """
    live_rows = await workflow_digests(conn, live, since=since)
    replay_rows = await workflow_digests(conn, replay, since=since)
    scope = set(live_rows) | set(replay_rows)
    if since is not None:
        scope = {w for w in scope if _started(live_rows.get(w) or replay_rows[w], since)}

    def digest(rows: dict[str, WorkflowDigest], workflow_id: str) -> str | None:
        row = rows.get(workflow_id)
        return row.digest if row else None

    differing = sorted(w for w in scope if digest(live_rows, w) != digest(replay_rows, w))
    return Comparison(
        live_checksum=checksum(live_rows, scope),
        replay_checksum=checksum(replay_rows, scope),
        workflows=len(scope),
        differing=differing,
    )


def _started(row: WorkflowDigest, since: datetime) -> bool:
    return row.started_at is None or row.started_at >= since
