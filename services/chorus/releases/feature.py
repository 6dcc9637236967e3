"""Versioned rollouts plugged into a service: its identity as a release, the pin step, the
answer to a move, the policy follower and the release reports."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field, field_validator

from chorus.base.loops import forever
from chorus.base.settings import ChorusSettings
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import RELEASE_PATTERN, ProducerRef
from chorus.contracts.rollouts import RepinRequested, RolloutChanged
from chorus.kernel.chain import Done, Finish, Item, Via
from chorus.kernel.ports import Verifying
from chorus.kernel.recordpath import Identity, Plugs
from chorus.kernel.runner import Parts, start_kafka
from chorus.kernel.service import ServiceSpec
from chorus.kernel.steps.route import ControlHandler
from chorus.releases.pinning import Pin, Pinning
from chorus.releases.repin import Repins
from chorus.releases.report import ReleaseWindow, report_envelope
from chorus.releases.rollouts import MAIN_RELEASE, RolloutFollower, RolloutView, release_group
from chorus.releases.store import PinStore


class ReleaseSettings(ChorusSettings):
    release: str = Field(default="", pattern=f"^$|{RELEASE_PATTERN[1:]}")
    """CHORUS_RELEASE: run as this release beside others of the service (versioned rollouts):
    its own consumer group, only the workflows pinned to it, this label as the producer
    version. Empty: the service's version, in the service's group, owning whatever no
    rollout pins elsewhere."""
    release_report_s: float = Field(default=30.0, gt=0)
    """How often each replica reports its steps and their latency (release.reported)."""

    @field_validator("release")
    @classmethod
    def _not_main(cls, value: str) -> str:
        if value == MAIN_RELEASE:
            raise ValueError(
                f"{MAIN_RELEASE!r} names the release without CHORUS_RELEASE; choose another label"
            )
        return value


def release_identity(spec: ServiceSpec[Any, Any], release: str, group_id: str) -> Identity:
    """A release's consumer group (``<group>.<release>``; the service's own for the main
    release), its label as the producer version, and what its pins call it."""
    base = group_id or spec.name
    return Identity(
        group=release_group(base, release or MAIN_RELEASE),
        producer=ProducerRef(service=spec.name, version=release or spec.version),
        release=release or MAIN_RELEASE,
    )


@dataclass
class Releases:
    """Every release reads every event and handles its own workflows' (chorus.releases)."""

    CONTROLS: ClassVar[Mapping[type[EventModel], type[ControlHandler]]] = {RepinRequested: Repins}

    settings: ReleaseSettings
    base_group: str
    verifier: Verifying
    view: RolloutView = field(default_factory=RolloutView)
    window: ReleaseWindow | None = None

    async def plug(self, parts: Parts) -> Plugs:
        spec, identity = parts.spec, parts.identity
        assert identity.release is not None
        follower = await self._follow(parts)
        self.window = ReleaseWindow(parts.clock.now())
        pins = PinStore(spec.name)
        named = bool(self.settings.release)
        pinning = Pinning(spec.name, identity.release, named=named, view=self.view)
        pin = Pin(
            pinning, pins, parts.pool, identity.group, spec.state_version, parts.clock, parts.metrics,
            window=lambda: self._window,
        )  # fmt: skip
        repins = Repins(
            via=parts.answering(),
            pins=pins,
            base_group=self.base_group,
            identity=identity.release,
            view=self.view,
            state_version=spec.state_version,
            handled_types=tuple(spec.consumes()),
        )
        return Plugs(
            pin=[pin],
            controls={RepinRequested: repins},
            observers=[Reported(self)],
            workers={"rollouts": follower.run, "release-report": lambda: self._report(parts)},
            health=[self.health],
        )

    @property
    def _window(self) -> ReleaseWindow:
        assert self.window is not None
        return self.window

    async def _follow(self, parts: Parts) -> RolloutFollower:
        """The rollout policies, read to the end before any record is handled (a decision
        on an old policy would pin a new workflow where it no longer belongs)."""
        s = parts.settings
        follower = RolloutFollower(
            self.view, parts.registry, self.verifier, bootstrap=s.kafka_bootstrap, client_id=parts.client_id
        )
        parts.stack.push_async_callback(follower.stop)
        topic = parts.registry.topic_for(RolloutChanged.event_type).topic
        await start_kafka(follower.start(), s.kafka_bootstrap, [topic])
        return follower

    async def _report(self, parts: Parts) -> None:
        """Publish this replica's window of steps every ``release_report_s``: when it did
        anything, and always while its service has a rollout or it runs as a named release
        (so the rollout service sees it running)."""
        identity, clock, outbox = parts.identity, parts.clock, parts.outbox
        instance = parts.settings.instance or socket.gethostname()
        assert identity.release is not None

        async def report() -> None:
            now = clock.now()
            window, self.window = self._window, ReleaseWindow(now)
            watched = self.settings.release or self.view.policy(parts.spec.name) is not None
            if window.idle and not watched:
                return
            body = window.report(parts.spec.name, identity.release or "", identity.group, instance, now)
            async with parts.pool.acquire() as conn, outbox.transaction(conn) as tx:
                await tx.publish(report_envelope(body, identity.producer, now))

        await forever("release-report", report, every_s=self.settings.release_report_s, sleep=clock.sleep)

    def health(self) -> Mapping[str, Any]:
        return {
            "release": self.settings.release or MAIN_RELEASE,
            "rollouts": {p.service: p.revision for p in self.view.policies()},
        }


@dataclass
class Reported:
    """Counts this replica's committed deliveries and their latency for its next report."""

    releases: Releases

    def passed(self, step: str, item: Item) -> None:
        pass

    def done(self, item: Item, done: Done) -> None:
        if done.finish is Finish.COMMITTED and item.via is Via.DELIVERY and self.releases.window:
            self.releases.window.step(time.perf_counter() - item.started)
