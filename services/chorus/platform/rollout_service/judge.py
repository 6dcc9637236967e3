"""The automatic-rollback rule: every ``judge_interval_s``, each running canary with a rule
is compared with its stable release; one that did worse by more than the rule's margin
over enough workflows is rolled back, saying why (the change's reason in the event and
history, a log line, ``chorus_rollout_auto_rollbacks_total``). Every running canary, with
a rule or not, is measured each round: ``chorus_rollout_failure_share{service, release,
role}`` (the share of each release's workflows with a failure) feeds the dashboards and the
alert that a canary does worse than stable.

Every replica judges; the policy row's lock and the status check make the rollback happen
once (a second replica finds the rollout no longer running a canary).
"""

from __future__ import annotations

import logging

from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.kernel.service import RuntimeHandle
from chorus.platform.rollout_service.adapters import repository as repo
from chorus.platform.rollout_service.changes import make_change
from chorus.platform.rollout_service.domain import Change, ChangeRefused, judge

log = logging.getLogger("chorus.platform.rollout_service.judge")
RULE = "rollout_service"
"""The actor of a change the rule makes."""


# The service and release a metric is about are service_name and service_release: a scrape
# attaches the rollout service's own as the target's service and release, which would
# overwrite labels of those names (Prometheus keeps the target's unless honor_labels).
async def judge_canaries(rt: RuntimeHandle) -> None:
    rollbacks = rt.metrics.counter(
        "chorus_rollout_auto_rollbacks",
        "Canaries the automatic-rollback rule rolled back",
        ["service_name", "service_release"],
    )
    shares = rt.metrics.gauge(
        "chorus_rollout_failure_share",
        "Share of the workflows pinned to each release of a running canary, since it started, "
        "with a persistent, semantic or unexpected failure",
        ["service_name", "service_release", "role"],
    )

    async def round_() -> None:
        async with rt.pool.acquire() as conn:
            running = [p for p in await repo.policies(conn) if p.status == "canary" and p.canary]
            verdicts = []
            shares.clear()  # only canaries that run now
            for policy in running:
                assert policy.canary is not None
                since = await repo.rollout_started(conn, policy.service)
                if since is None:
                    continue
                found = await repo.outcomes(conn, policy, since)
                stable, canary = found[policy.stable], found[policy.canary]
                shares.labels(policy.service, policy.stable, "stable").set(stable.failure_rate())
                shares.labels(policy.service, policy.canary, "canary").set(canary.failure_rate())
                if policy.auto_rollback:
                    # The rollback counter's series exists at 0 before its first rollback: to
                    # Prometheus a series that appears at 1 has not increased, and the
                    # rolled-back alert would stay silent.
                    rollbacks.labels(policy.service, policy.canary)
                    verdicts.append((policy, judge(policy, stable, canary)))
        for policy, why in verdicts:
            if why is None:
                continue
            try:
                await make_change(rt, policy.service, Change("auto_rollback", RULE, reason=why))
            except ChangeRefused:
                continue  # changed meanwhile (an operator, another replica): judged again next round
            rollbacks.labels(policy.service, policy.canary).inc()
            log.error("canary rolled back by the rule", extra=fields(rollout_of=policy.service, why=why))

    await forever("judge-canaries", round_, every_s=rt.settings.judge_interval_s, sleep=rt.clock.sleep)
