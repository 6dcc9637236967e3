"""The janitor: a background loop that retires workflows past their maximum lifetime
(their projection rows here; every service removes its own on ``workflows.retired``).

Runs beside the consumer in every replica, on the injected clock (tests move time by
weeks in milliseconds). Passes on several replicas are safe: their batches serialise
on the maintenance lock and each picks what is still there.
"""

from __future__ import annotations

import logging

from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.kernel.service import RuntimeHandle
from chorus.platform.audit_projector.adapters.maintenance import Announcer, RetentionPolicy, janitor_pass
from chorus.platform.audit_projector.config import Settings

log = logging.getLogger("chorus.platform.audit_projector.janitor")


def policy_from(settings: Settings) -> RetentionPolicy:
    return RetentionPolicy(
        lifetimes_days=dict(settings.retention_days),
        default_days=settings.default_retention_days,
        mode=settings.janitor_mode,
        batch_size=settings.janitor_batch_size,
    )


async def expire_workflows(rt: RuntimeHandle) -> None:
    """One pass at start, then one every ``janitor_interval_s`` of the clock's time."""
    removed = rt.metrics.counter(
        "chorus_janitor_workflows_removed",
        "Workflows the janitor archived or purged after their maximum lifetime",
    )
    # A runner started with plain ServiceSettings (an embedding) gets the defaults.
    settings = rt.settings if isinstance(rt.settings, Settings) else Settings()
    policy = policy_from(settings)

    async def janitor_round() -> None:  # a failed pass leaves its rest to the next one
        report = await janitor_pass(
            rt.pool,
            clock=rt.clock,
            policy=policy,
            announce=Announcer(rt.outbox, rt.producer),
            schema=rt.service,
        )
        removed.inc(len(report.workflows))
        if report.workflows:
            log.info(
                "janitor removed %d expired workflow(s) (%s)",
                len(report.workflows),
                policy.mode,
                extra=fields(run_id=str(report.run_id), rows=dict(report.rows)),
            )

    await forever("janitor", janitor_round, every_s=settings.janitor_interval_s, sleep=rt.clock.sleep)
