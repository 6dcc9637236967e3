"""Versioned rollouts: which release of a service takes which workflows.

A service may run as several releases at once (``CHORUS_RELEASE``), each in a consumer
group of its own; each reads every event and handles those of the workflows pinned to it.
The policy of a service is the latest ``rollout.changed`` on the compacted topic
``chorus.rollouts``; :class:`RolloutView` is that topic as a table, kept current by
:class:`RolloutFollower` in every process.

Pinning happens once, when a workflow starts: :meth:`RolloutView.pins` gives, for every
service with a policy, the release it goes to (the canary for a stable hash of service and
workflow id below the canary's percent, otherwise stable). The pins travel in the envelope
of every event the workflow causes, so a policy change (a shift, a promote, a rollback)
never moves a workflow that started before it: it finishes where it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Mapping

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from chorus.base.errors import DecodeError, UnauthorizedError
from chorus.base.logs import fields
from chorus.contracts.registry import Registry
from chorus.contracts.rollouts import RolloutChanged
from chorus.kernel.codec import decode
from chorus.kernel.kafka import make_consumer, stop_client
from chorus.kernel.ports import Verifying

log = logging.getLogger("chorus.rollouts")

ROLLOUT_WORKFLOW_TYPE = "rollout"
MAIN_RELEASE = "main"
"""How pins and policies name the release in the service's own consumer group (the
deployment without CHORUS_RELEASE), whatever version it runs: a rolling upgrade of it is
the same release, so its workflows stay its own."""


def release_group(group: str, release: str) -> str:
    """The consumer group a release of a service reads in (``group``: the service's own)."""
    return group if release == MAIN_RELEASE else f"{group}.{release}"


def rollout_workflow_id(service: str) -> str:
    """The workflow id (so the record key) of a service's policy records: compaction keeps
    the latest per service."""
    return f"rollout:{service}"


def canary_point(service: str, workflow_id: str) -> float:
    """Where a workflow falls in [0, 100) for a service: stable across processes and restarts,
    independent between services (a workflow on one service's canary is not on every one)."""
    digest = hashlib.sha256(f"{service}\0{workflow_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 100


def pin_for(policy: RolloutChanged, workflow_type: str, workflow_id: str) -> str:
    """The release a new workflow of this type goes to under ``policy``."""
    on_trial = policy.status == "canary" and policy.canary is not None
    eligible = not policy.workflow_types or workflow_type in policy.workflow_types
    if on_trial and eligible and canary_point(policy.service, workflow_id) < policy.percent:
        assert policy.canary is not None
        return policy.canary
    return policy.stable


class RolloutView:
    """The policies as the process knows them: the latest revision per service."""

    def __init__(self, policies: Mapping[str, RolloutChanged] | None = None) -> None:
        self._policies: dict[str, RolloutChanged] = dict(policies or {})
        self.ready = asyncio.Event()
        """Set once the topic was read to its end at start: decisions before that could
        follow a policy that has long changed."""

    def apply(self, changed: RolloutChanged) -> None:
        current = self._policies.get(changed.service)
        if current is None or changed.revision >= current.revision:
            self._policies[changed.service] = changed

    def policy(self, service: str) -> RolloutChanged | None:
        return self._policies.get(service)

    def policies(self) -> list[RolloutChanged]:
        return sorted(self._policies.values(), key=lambda p: p.service)

    def pins(self, workflow_type: str, workflow_id: str) -> dict[str, str]:
        """Every service with a policy -> the release this new workflow is pinned to."""
        return {s: pin_for(p, workflow_type, workflow_id) for s, p in sorted(self._policies.items())}


class RolloutFollower:
    """Reads ``chorus.rollouts`` from its beginning into a view, then follows it.

    No consumer group (every process reads all of it, and nothing is committed). A record
    that is not a valid, signed ``rollout.changed`` is skipped with an error in the log:
    only the rollout service's word routes work (its dead letters are its own to write).
    """

    def __init__(
        self,
        view: RolloutView,
        registry: Registry,
        verifier: Verifying,
        *,
        bootstrap: str,
        client_id: str,
    ) -> None:
        self.view = view
        self.registry = registry
        self.verifier = verifier
        self.consumer = make_consumer(bootstrap, group_id=None, client_id=f"{client_id}-rollouts")

    async def start(self) -> None:
        """Read the topic to its end (the view is then ``ready``)."""
        await self.consumer.start()
        spec = self.registry.topic_for(RolloutChanged.event_type)
        tps = [TopicPartition(spec.topic, p) for p in range(spec.partitions)]
        self.consumer.assign(tps)
        await self.consumer.seek_to_beginning(*tps)
        ends = await self.consumer.end_offsets(tps) if tps else {}
        while [tp for tp, end in ends.items() if await self.consumer.position(tp) < end]:
            await self._poll(timeout_ms=500)
        self.view.ready.set()

    async def run(self) -> None:
        while True:
            try:
                await self._poll(timeout_ms=1000)
            except KafkaError as exc:  # the broker went away: the client reconnects
                log.warning("reading rollout policies failed; retrying", extra=fields(error=repr(exc)))
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await stop_client(self.consumer)

    async def _poll(self, *, timeout_ms: int) -> None:
        batches = await self.consumer.getmany(timeout_ms=timeout_ms)
        for records in batches.values():
            for rec in records:
                self._apply(rec.value, list(rec.headers or ()))

    def _apply(self, value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        if value is None:
            return  # a tombstone: nothing to follow
        try:
            event = decode(value, self.registry, accept={RolloutChanged.event_type: RolloutChanged.version})
            self.verifier.check(event.envelope, value, headers)
        except (DecodeError, UnauthorizedError) as exc:
            log.error("not the rollout service's policy; skipped", extra=fields(error=str(exc)))
            return
        assert isinstance(event.payload, RolloutChanged)
        self.view.apply(event.payload)
