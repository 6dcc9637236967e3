"""What the suites run: deployments, scenarios, and running one scenario to a result.

A scenario submits workflows, injects its faults while traffic flows, and hands over
to the reconciler. Scenarios of one deployment run one after another on it (starting
a deployment costs tens of seconds on this machine); each scenario's workflow checks
cover its own workflows, the store-wide checks everything the deployment has seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from chorus.releases.rollouts import MAIN_RELEASE
from tests.reliability import injectors
from tests.reliability.deployment import SERVICES, Deployment, DeploymentConfig, FaultLog
from tests.reliability.driver import Tracked
from tests.reliability.infra import KafkaCluster, PostgresServer
from tests.reliability.reconciler import reconcile
from tests.reliability.report import ScenarioResult

log = logging.getLogger("reliability.scenarios")

HOUR = 3600.0

# Which named fault points each service passes (chorus/faults.py):
# - after_inbox_insert / after_db_commit: every service that consumes (all of them);
# - after_publish: services whose relay publishes in these workflows (the audit
#   projector emits nothing; the dead-letter service only on an operator's discard);
# - mid_external_call: services that call out: the gateway (completion webhooks), the
#   invoice agent (its LLM, the sandbox's), the payment agent (the provider), the
#   report agent (its LLM, the delivery), the source fetcher (the sources), the support
#   project's triage agent (the CRM, its LLM, the helpdesk).
POINTS: dict[str, list[tuple[str, int]]] = {
    "gateway": [
        ("after_inbox_insert", 3),
        ("after_db_commit", 2),
        ("after_publish", 2),
        ("mid_external_call", 1),
    ],
    "timer_service": [("after_inbox_insert", 3), ("after_db_commit", 2), ("after_publish", 1)],
    "deadletter_service": [("after_inbox_insert", 2), ("after_db_commit", 2)],
    "audit_projector": [("after_inbox_insert", 5), ("after_db_commit", 4)],
    "approval_gate": [("after_inbox_insert", 2), ("after_db_commit", 2), ("after_publish", 1)],
    "invoice_agent": [
        ("after_inbox_insert", 2),
        ("after_db_commit", 1),
        ("after_publish", 1),
        ("mid_external_call", 2),
    ],
    "budget_agent": [("after_inbox_insert", 2), ("after_db_commit", 1), ("after_publish", 1)],
    "payment_agent": [
        ("after_inbox_insert", 1),
        ("after_db_commit", 1),
        ("after_publish", 1),
        ("mid_external_call", 1),
    ],
    "report_agent": [
        ("after_inbox_insert", 2),
        ("after_db_commit", 2),
        ("after_publish", 1),
        ("mid_external_call", 2),
    ],
    "triage_agent": [
        ("after_inbox_insert", 2),
        ("after_db_commit", 1),
        ("after_publish", 1),
        ("mid_external_call", 3),
    ],
    "notifier": [("after_inbox_insert", 1), ("after_db_commit", 1)],
    "rollout_service": [("after_inbox_insert", 1), ("after_db_commit", 1)],
    "source_fetcher": [
        ("after_inbox_insert", 3),
        ("after_db_commit", 2),
        ("after_publish", 2),
        ("mid_external_call", 3),
    ],
}


@dataclass
class Ctx:
    dep: Deployment
    scenario: str
    faults: FaultLog
    rng: random.Random

    async def submit(self, count: int, **expect: Any) -> list[Tracked]:
        return await self.dep.driver.submit_many(count, self.scenario, **expect)

    def trickle(self, every_s: float, limit: int) -> contextlib.AbstractAsyncContextManager[list[Tracked]]:
        return self.dep.driver.trickle(self.scenario, every_s, limit)

    def workflows(self) -> list[Tracked]:
        return self.dep.driver.of(self.scenario)

    def topic(self, event_type: str) -> str:
        return self.dep.physical(event_type)


Body = Callable[[Ctx], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    deployment: str
    body: Body
    deadline_s: float = 180.0
    """Recovery deadline: how long after its faults every workflow has to settle."""
    control: Control | None = None
    """Its negative control, run after the deployment's scenarios."""


@dataclass(frozen=True)
class Control:
    """A negative control: the scenario's fault again, with the guarantee it checks broken on
    purpose. The scenario's own checks must fail it, in the way ``failed`` names; a control
    that passes means the scenario could not see what it claims to check."""

    breaks: str
    body: Body
    failed: Callable[[ScenarioResult], bool]
    deadline_s: float = 120.0


# -- deployments ---------------------------------------------------------------------------------


def deployments(shared_kafka: KafkaCluster | None = None) -> dict[str, DeploymentConfig]:
    local = shared_kafka or KafkaCluster.shared()
    return {
        "main": DeploymentConfig("main", local, PostgresServer.shared()),
        "kafka-single": DeploymentConfig(
            "kafka-single", KafkaCluster("reliability1", nodes=1, port_base=19092), PostgresServer.shared()
        ),
        "kafka-cluster": DeploymentConfig(
            "kafka-cluster", KafkaCluster("reliability3", nodes=3, port_base=19192), PostgresServer.shared()
        ),
        "postgres": DeploymentConfig("postgres", local, PostgresServer.private()),
        # The payment agent in a network namespace of its own; every service reaches the
        # database through toxiproxy.
        "netlab": DeploymentConfig(
            "netlab", local, PostgresServer.shared(), isolated=("payment_agent",), database_proxy=True
        ),
        # Three brokers, each in a network namespace of its own.
        "kafka-netlab": DeploymentConfig(
            "kafka-netlab",
            KafkaCluster("reliability3", nodes=3, port_base=19192, isolated=True),
            PostgresServer.shared(),
        ),
        # Every service with its production default size limits.
        "defaults": DeploymentConfig("defaults", local, PostgresServer.shared(), max_event_bytes=None),
    }


# -- scenario bodies -------------------------------------------------------------------------------


def sigkill(points: list[tuple[str, str, int]], *, initial: int = 4) -> Body:
    """SIGKILL each (service, point, nth) in turn, services in parallel when several are
    listed for the same round, under a steady trickle of new workflows."""

    # Round k arms every service's k-th point at once.
    rounds: list[list[tuple[str, str, int]]] = []
    for service, point, nth in points:
        k = sum(1 for r in rounds if any(s == service for s, _, _ in r))
        if k == len(rounds):
            rounds.append([])
        rounds[k].append((service, point, nth))

    async def body(ctx: Ctx) -> None:
        await ctx.submit(initial)
        # Traffic for as long as the rounds take (the cap only bounds a run gone wrong).
        async with ctx.trickle(every_s=2.5, limit=60):
            for armed in rounds:
                await asyncio.gather(
                    *(
                        injectors.sigkill_at(ctx.dep, ctx.faults, s, p, n, feed=_feeder(ctx, s))
                        for s, p, n in armed
                    )
                )

    return body


def _feeder(ctx: Ctx, service: str) -> Callable[[], Awaitable[None]] | None:
    """The dead-letter service passes its points only when dead letters arrive: feed it
    a poison record every few seconds while it is armed."""
    if service != "deadletter_service":
        return None
    last = [0.0]

    async def feed() -> None:
        if time.monotonic() - last[0] < 3.0:
            return
        last[0] = time.monotonic()
        keys = [w.workflow_id for w in ctx.workflows()]
        await injectors.publish_poison(
            ctx.dep,
            ctx.faults,
            ctx.rng,
            topics=[ctx.topic("invoice.received")],
            keys=keys,
            kinds=["not-json"],
        )

    return feed


CANARY = "0.2.0"


async def rollout_under_sigkills(ctx: Ctx) -> None:
    """A second release of the invoice agent takes half of the new workflows; both releases
    are SIGKILLed at their fault points while workflows flow, the canary is promoted, and
    killed again while it takes every new workflow and the old one drains. Besides the
    reconciler's checks: every event of the invoice agent was handled by exactly one
    release (its inboxes), the one its workflow is pinned to."""
    dep = ctx.dep
    canary = await dep.add_release("invoice_agent", CANARY)
    stable = MAIN_RELEASE  # the release in the service's own group
    await _rollout(dep, "start", {"stable": stable, "canary": CANARY, "percent": 50})
    await sigkill(
        [
            ("invoice_agent", "after_inbox_insert", 2),
            (canary, "after_db_commit", 1),
            (canary, "mid_external_call", 2),
            ("invoice_agent", "after_db_commit", 1),
        ],
        initial=6,
    )(ctx)
    await _rollout(dep, "promote", {"reason": "the reliability run promotes mid-flight"})
    # Promoted, the old release takes no new workflow (it drains): the new one is killed.
    await sigkill([(canary, "after_inbox_insert", 3), (canary, "mid_external_call", 1)], initial=4)(ctx)
    await _one_release_each(ctx, stable)


async def _rollout(dep: Deployment, action: str, body: dict[str, Any]) -> None:
    url = (dep.proc("rollout_service").health_url or "").removesuffix("/health")
    async with httpx.AsyncClient(timeout=10.0) as client:
        answer = await client.post(
            f"{url}/v1/rollouts/invoice_agent/{action}",
            json=body,
            headers={"Authorization": "Bearer demo-operator-key"},
        )
    answer.raise_for_status()
    revision = answer.json()["policy"]["revision"]
    # The gateway pins by the policy it follows: wait until it follows this one.
    gateway = dep.proc("gateway").health_url or ""
    async with httpx.AsyncClient(timeout=3.0) as client:
        for _ in range(100):
            if (await client.get(gateway)).json()["rollouts"].get("invoice_agent") == revision:
                return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"the gateway did not follow rollout revision {revision}")


async def _one_release_each(ctx: Ctx, stable: str) -> None:
    """Problems (which fail the scenario) for any event of the invoice agent that both
    releases handled, or that the release its workflow is pinned to did not."""
    ids = [w.workflow_id for w in ctx.workflows()]
    async with ctx.dep.pool.acquire() as conn:
        rows = await conn.fetch(
            """SELECT i.event_id, i.workflow_id, s.release,
                      array_agg(i.consumer_group) FILTER (WHERE i.outcome = 'done') AS done
               FROM invoice_agent.inbox i JOIN invoice_agent.state s USING (workflow_id)
               WHERE i.workflow_id = ANY($1::text[])
               GROUP BY i.event_id, i.workflow_id, s.release""",
            ids,
        )
    group = ctx.dep.group("invoice_agent")
    for row in rows:
        owner = group if row["release"] == stable else f"{group}.{row['release']}"
        if (row["done"] or []) not in ([], [owner]):
            ctx.faults.problems.append(
                f"invoice_agent event {row['event_id']} of {row['workflow_id']} (pinned to "
                f"{row['release']}) handled by {row['done']}"
            )
    releases = {r["release"] for r in rows}
    if releases != {stable, CANARY}:
        ctx.faults.problems.append(f"workflows ran on releases {sorted(releases)}, not on both")


async def poison(ctx: Ctx) -> None:
    workflows = await ctx.submit(6)
    await asyncio.sleep(2.0)  # they are mid-flight: poison lands between their events
    topics = [
        ctx.topic(t)
        for t in (
            "invoice.received",
            "approval.requested",
            "report.requested",
            "workflow.started",
            "timer.schedule",
        )
    ]
    await injectors.publish_poison(
        ctx.dep, ctx.faults, ctx.rng, topics=topics, keys=[w.workflow_id for w in workflows]
    )
    await ctx.submit(2)  # and workflows that start after it


async def duplicates(ctx: Ctx) -> None:
    workflows = await ctx.submit(5)
    # Left waiting at its first gate on purpose: duplicates must not push it past it.
    gated = await ctx.dep.driver.submit(
        "procurement", ctx.scenario, expect_outcome=None, expect_gate="manager", approve_tiers=()
    )
    await asyncio.sleep(3.0)
    ids = {w.workflow_id for w in [*workflows, gated]}
    await injectors.reinject(ctx.dep, ctx.faults, ids, ctx.rng)
    await injectors.rewind_services(ctx.dep, ctx.faults, SERVICES)
    await ctx.dep.driver.wait_settled([*workflows, gated], 150.0)
    # Once everything settled: every record of these workflows again, 2-5 times.
    await injectors.reinject(ctx.dep, ctx.faults, ids, ctx.rng)


async def timers_while_down(ctx: Ctx) -> None:
    """Approval windows elapse while the timer service is down; when it is back, the
    overdue timers fire: procurements escalate to the director (who approves), reports
    fall back to auto-reject after their editor's window."""
    procurements = [
        await ctx.dep.driver.submit("procurement", ctx.scenario, approve_tiers=("director",))
        for _ in range(2)
    ]
    reports = [
        await ctx.dep.driver.submit(
            "research_report", ctx.scenario, expect_outcome="rejected", approve_tiers=()
        )
        for _ in range(2)
    ]
    driver = ctx.dep.driver
    if not await driver.wait_gate(procurements, "manager", 120.0) or not await driver.wait_gate(
        reports, "editor", 120.0
    ):
        ctx.faults.problems.append("the workflows never reached their first approval gate")
        return
    await injectors.kill(ctx.dep, ctx.faults, "timer_service")
    fault = ctx.faults.faults[-1]
    await ctx.dep.advance_clock(8 * HOUR + 300)  # past the manager's (8h) and the editor's (4h) window
    # Submitted while it is down: its flaky source's durable retry falls due meanwhile too.
    await driver.submit("research_report", ctx.scenario)
    await asyncio.sleep(6.0)
    moved = [w.workflow_id for w in procurements if not await _still_at(ctx, w, "manager")]
    if moved:
        ctx.faults.problems.append(f"escalated while the timer service was down: {moved}")
    await ctx.dep.start_proc("timer_service")
    fault.healed_at = time.monotonic()


async def key_service_down(ctx: Ctx) -> None:
    """The key service (every seal and open of personal data asks it) is killed while
    workflows start and decide: submissions answer 503 and are retried by the driver, records
    that need a key wait like behind a database outage (never dead-lettered), and all of it
    completes once the service is back."""
    early = await ctx.submit(3)
    await injectors.kill(ctx.dep, ctx.faults, "key_service")
    fault = ctx.faults.faults[-1]
    # Cached keys keep the workflows that started going for a while; new subjects need it.
    late = [asyncio.create_task(ctx.submit(2))]
    await asyncio.sleep(12.0)
    await ctx.dep.start_proc("key_service")
    fault.healed_at = time.monotonic()
    for started in late:
        await started
    await ctx.dep.driver.wait_settled(early, 150.0)


async def _still_at(ctx: Ctx, workflow: Tracked, tier: str) -> bool:
    async with ctx.dep.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT status, pending_tier FROM audit_projector.workflow_status WHERE workflow_id = $1",
            workflow.workflow_id,
        )
    return row is not None and row["status"] == "waiting" and row["pending_tier"] == tier


SCALED = ("invoice_agent", "approval_gate", "report_agent", "timer_service")


async def rebalance(ctx: Ctx) -> None:
    await ctx.submit(4)
    async with ctx.trickle(every_s=2.0, limit=10):
        await asyncio.sleep(2.0)
        await asyncio.gather(*(injectors.scale(ctx.dep, ctx.faults, s, 3) for s in SCALED))
        await asyncio.sleep(12.0)  # work spreads over three replicas of each
        await asyncio.gather(*(injectors.scale(ctx.dep, ctx.faults, s, 1) for s in SCALED))
        await asyncio.sleep(3.0)


def zombie(service: str) -> Body:
    async def body(ctx: Ctx) -> None:
        await ctx.submit(4)
        async with ctx.trickle(every_s=1.5, limit=14):
            await injectors.zombie(ctx.dep, ctx.faults, service, paused_s=20.0)

    return body


async def broker_restart(ctx: Ctx) -> None:
    async with ctx.trickle(every_s=2.0, limit=40):
        for hard in (False, True):
            await ctx.submit(4)  # in flight when the broker goes
            await asyncio.sleep(1.5)
            await injectors.restart_single_broker(ctx.dep, ctx.faults, hard=hard, down_s=3.0)
            await asyncio.sleep(6.0)


async def broker_kill(ctx: Ctx) -> None:
    async with ctx.trickle(every_s=2.0, limit=40):
        for _ in range(2):
            await ctx.submit(4)
            await asyncio.sleep(1.5)
            await injectors.kill_broker_node(ctx.dep, ctx.faults, down_s=10.0)
            await asyncio.sleep(6.0)


async def postgres_restart(ctx: Ctx) -> None:
    async with ctx.trickle(every_s=2.0, limit=40):
        for _ in range(3):
            await ctx.submit(3)
            await asyncio.sleep(1.5)
            await injectors.restart_postgres(ctx.dep, ctx.faults)
            await asyncio.sleep(4.0)
        await ctx.submit(4)
        await asyncio.sleep(1.5)
        await injectors.postgres_outage(ctx.dep, ctx.faults, down_s=5.0)
        await asyncio.sleep(6.0)


async def rewind_over_poison(ctx: Ctx) -> None:
    """Two batches of 20 poison records in the timer service's topic, each followed by
    ordinary traffic (so a fresh consumer never sees 25 dead letters in a row), then its
    group is rewound: a replay of records it already dead-lettered must not stop it."""
    workflows = await ctx.submit(2)
    topic = ctx.topic("timer.schedule")
    for _ in range(2):
        await injectors.publish_poison(
            ctx.dep,
            ctx.faults,
            ctx.rng,
            topics=[topic],
            keys=[w.workflow_id for w in workflows],
            kinds=["not-json"] * 20,
        )
        workflows += await ctx.submit(2)
        await asyncio.sleep(3.0)
    await ctx.dep.driver.wait_settled(workflows, 120.0)
    await injectors.rewind_services(ctx.dep, ctx.faults, ["timer_service"])
    # New traffic only once the replay is over: its successes would reset the guard's count
    # and hide what the replay alone does.
    if not await injectors.wait_caught_up(ctx.dep, "timer_service", timeout_s=60.0):
        await ctx.dep.heal()  # it stopped (recorded as an unexpected exit); carry on
    await ctx.submit(2)


async def poison_at_broker_limit(ctx: Ctx) -> None:
    """A record just under the broker's 1 MB limit that is not JSON: every consumer of
    the topic must dead-letter it, although its dead letter (base64 plus a traceback) is
    larger than the broker accepts."""
    workflows = await ctx.submit(4)
    await asyncio.sleep(2.0)
    await injectors.publish_poison(
        ctx.dep,
        ctx.faults,
        ctx.rng,
        topics=[ctx.topic("invoice.received")],
        keys=[w.workflow_id for w in workflows],
        kinds=["near-limit"],
    )
    await ctx.submit(2)


# -- network faults --------------------------------------------------------------------------------


async def _sandbox(ctx: Ctx, method: str, path: str) -> None:
    async with httpx.AsyncClient(timeout=10.0) as client:
        (await client.request(method, f"{ctx.dep.driver.sandbox_url}{path}")).raise_for_status()


def _procurements(ctx: Ctx, every_s: float = 3.0) -> Callable[[], Awaitable[None]]:
    """A feed for a fault armed in the payment agent: a procurement every few seconds
    (the only workflow that pays)."""
    last = [0.0]

    async def feed() -> None:
        if time.monotonic() - last[0] >= every_s:
            last[0] = time.monotonic()
            await ctx.dep.driver.submit("procurement", ctx.scenario)

    return feed


async def _count(ctx: Ctx, sql: str) -> int:
    async with ctx.dep.pool.acquire() as conn:
        return int(await conn.fetchval(sql))


def partition_database_mid_payment(*, keys_ignored: bool = False) -> Body:
    """The payment agent frozen with a payment made and its result not kept (mid external
    call), cut off from PostgreSQL, let go on into the partition for 75 s (past its 60 s
    command timeout), healed. It must commit nothing while cut off, pay each invoice once
    (the step done again after the partition repeats the call under the same key), and
    settle every workflow. ``keys_ignored``: the negative control's provider, which charges
    again for a repeated key."""

    async def body(ctx: Ctx) -> None:
        if keys_ignored:
            await _sandbox(ctx, "PUT", "/payments/keys-ignored")
        inbox = "SELECT count(*) FROM payment_agent.inbox"

        @contextlib.asynccontextmanager
        async def nothing_committed() -> AsyncIterator[None]:
            before = await _count(ctx, inbox)
            yield
            during = await _count(ctx, inbox) - before
            _bit(ctx, during == 0, f"the payment agent committed {during} record(s) while cut off")

        try:
            await ctx.submit(3)
            async with ctx.trickle(every_s=3.0, limit=16):
                await injectors.partition_at(
                    ctx.dep,
                    ctx.faults,
                    "payment_agent",
                    "mid_external_call",
                    "database",
                    hold_s=75.0,
                    around=nothing_committed,
                    feed=_procurements(ctx),
                )
            if keys_ignored:
                # The step is done again only once its connections find the healed network
                # (TCP's retransmission backoff): the provider ignores keys until then.
                await ctx.dep.driver.wait_settled(ctx.workflows(), 180.0)
        finally:
            if keys_ignored:
                await _sandbox(ctx, "DELETE", "/payments/keys-ignored")

    return body


def partition_kafka_after_commit(*, drop_outbox: bool = False) -> Body:
    """The payment agent frozen after its commit (outcome and outbox rows in PostgreSQL, Kafka
    offset not committed, nothing published), cut off from the broker, let go on for 40 s (its
    session times out; its producer cannot publish), healed. What it committed must be
    published once it can reach the broker, and the record it never acknowledged, read again,
    must not be handled twice. ``drop_outbox``: the negative control deletes the unsent rows
    while it is cut off (a relay that forgets what was committed)."""

    async def body(ctx: Ctx) -> None:
        unsent = "SELECT count(*) FROM payment_agent.outbox WHERE dispatched_at IS NULL"

        @contextlib.asynccontextmanager
        async def publishing_stalled() -> AsyncIterator[None]:
            yield
            held = await _count(ctx, unsent)
            if drop_outbox:
                async with ctx.dep.pool.acquire() as conn:
                    await conn.execute("DELETE FROM payment_agent.outbox WHERE dispatched_at IS NULL")
            _bit(ctx, held > 0, f"{held} committed row(s) waited in the outbox for the broker")

        await ctx.submit(3)
        async with ctx.trickle(every_s=3.0, limit=14):
            await injectors.partition_at(
                ctx.dep,
                ctx.faults,
                "payment_agent",
                "after_db_commit",
                "kafka",
                hold_s=40.0,
                around=publishing_stalled,
                feed=_procurements(ctx),
            )

    return body


def database_latency(*, applied: bool = True) -> Body:
    """200 ms more on every answer PostgreSQL sends any service, for a minute, under steady
    traffic. Slower is all it may be: nothing lost, failed, dead-lettered or repeated. The
    latency must be seen on the services' path (else the scenario tested nothing): the
    negative control runs it without the toxic."""

    async def body(ctx: Ctx) -> None:
        await ctx.submit(3)
        async with ctx.trickle(every_s=2.0, limit=40):
            await asyncio.sleep(4.0)
            measured = await injectors.database_latency(
                ctx.dep, ctx.faults, ms=200, for_s=60.0, applied=applied
            )
        _bit(ctx, measured >= 200, f"a query on the services' path took {measured:.0f} ms during the fault")

    return body


def broker_cut_outbound(*, applied: bool = True) -> Body:
    """Three brokers, each in a namespace of its own; the one leading most partitions loses
    every connection it opens (to the controller quorum, to the leaders it follows) for 45 s,
    while clients and the other brokers still reach it: it is fenced and its leaderships
    move, while it may still believe itself a leader. Acknowledged writes (acks=all,
    min.insync.replicas 2) must all be there, and every workflow settle. The cut must be seen
    to bite (its leaderships moved): the negative control runs it without the cut."""

    async def body(ctx: Ctx) -> None:
        await ctx.submit(4)
        async with ctx.trickle(every_s=2.0, limit=40):
            await asyncio.sleep(3.0)
            node, before, during = await injectors.cut_broker_outbound(
                ctx.dep, ctx.faults, hold_s=45.0, applied=applied
            )
            await asyncio.sleep(8.0)
        led = f"broker {node} led {before} partitions before the cut, {during} at its end"
        _bit(ctx, during < before, led)

    return body


def _bit(ctx: Ctx, seen: bool, what: str) -> None:
    """Whether the fault was there, as measured: a note, or the problem a negative control
    that leaves it out must show."""
    if seen:
        ctx.faults.notes.append(what)
    else:
        ctx.faults.problems.append(f"{what}: the fault was not there")


def _harmed(result: ScenarioResult) -> bool:
    """The control's own workflows were harmed (not just a store-wide check)."""
    return result.lost + result.duplicate_effects + result.stuck > 0


def _fault_unseen(result: ScenarioResult) -> bool:
    return any("the fault was not there" in v for v in result.violations)


NETWORK: list[Scenario] = [
    Scenario(
        "partition-database-mid-payment",
        "the payment agent frozen with a payment made and not yet kept, cut off from PostgreSQL "
        "(nftables in its network namespace) for 75 s while it runs, then healed",
        "netlab",
        partition_database_mid_payment(),
        deadline_s=240.0,
        control=Control(
            "the payment provider ignores the Idempotency-Key, so the step done again pays again",
            partition_database_mid_payment(keys_ignored=True),
            _harmed,
            deadline_s=240.0,
        ),
    ),
    Scenario(
        "partition-kafka-after-commit",
        "the payment agent frozen after its commit and before its publish, cut off from the "
        "broker for 40 s while it runs (its session times out), then healed",
        "netlab",
        partition_kafka_after_commit(),
        deadline_s=240.0,
        control=Control(
            "the committed outbox rows are deleted while it is cut off (a relay that forgets)",
            partition_kafka_after_commit(drop_outbox=True),
            _harmed,
        ),
    ),
    Scenario(
        "database-latency",
        "200 ms added to every answer of PostgreSQL to every service (toxiproxy) for a minute",
        "netlab",
        database_latency(),
        deadline_s=240.0,
        control=Control("the latency is never applied", database_latency(applied=False), _fault_unseen),
    ),
    Scenario(
        "partition-broker-asymmetric",
        "3 brokers in network namespaces (RF 3, min.insync.replicas 2): the busiest one cannot "
        "open or use connections of its own for 45 s while clients and the others still reach it",
        "kafka-netlab",
        broker_cut_outbound(),
        deadline_s=240.0,
        control=Control("the cut is never applied", broker_cut_outbound(applied=False), _fault_unseen),
    ),
]


# -- the suites ---------------------------------------------------------------------------------------


SHORT: list[Scenario] = [
    Scenario(
        "sigkill-critical",
        "one SIGKILL injection point in each critical service, the five armed at once: "
        "payment agent mid payment, approval gate after its commit, report agent after its "
        "inbox insert, gateway after its relay published, the support project's triage agent "
        "mid external call (CRM, model or helpdesk)",
        "main",
        sigkill(
            [
                ("payment_agent", "mid_external_call", 1),
                ("approval_gate", "after_db_commit", 2),
                ("report_agent", "after_inbox_insert", 2),
                ("gateway", "after_publish", 2),
                ("triage_agent", "mid_external_call", 3),
            ]
        ),
    ),
    Scenario(
        "poison",
        "non-JSON, oversize, schema-invalid and unknown-version records in five live topics",
        "main",
        poison,
    ),
    Scenario(
        "duplicates",
        "every record of the workflows re-injected 2-5 times (mid-flight and after), and every "
        "consumer group rewound to the beginning",
        "main",
        duplicates,
    ),
    Scenario(
        "timers-while-down",
        "the timer service is down while approval windows (8h, 4h of simulated time) elapse",
        "main",
        timers_while_down,
    ),
]


async def bulk_actions_under_sigkill(ctx: Ctx) -> None:
    """Procurements of amounts of this run's own: eight wait for their manager and one bulk
    action cancels them; eight lack a line and another sends it to each (then they are
    approved and paid); eight more wait for their manager and a third resets each to
    invoice.validated (its reservation given back and taken again; then approved and paid).
    The gateway, whose worker does all three, is SIGKILLed halfway and restarted: each is
    cancelled once, gets its line once, or is reset once and paid once."""
    driver = ctx.dep.driver
    cents = 50_000 + ctx.rng.randrange(1, 40_000)
    price = f"{cents / 100:.2f}"
    line = f"1 x GPU hours @ {price} EUR"
    to_cancel = [
        await driver.submit(
            "procurement", ctx.scenario, expect_outcome="cancelled", approve_tiers=(), total=price, line=line
        )
        for _ in range(8)
    ]
    # 31.00 EUR more than their one line: the reading misses a line, the agent waits for it.
    short_total = f"{(cents + 3100) / 100:.2f}"
    to_fix = [
        await driver.submit("procurement", ctx.scenario, total=short_total, line=line) for _ in range(8)
    ]
    reset_cents = cents + 6200
    reset_price = f"{reset_cents / 100:.2f}"
    to_reset = [
        await driver.submit(
            "procurement",
            ctx.scenario,
            approve_tiers=(),  # approved once reset
            total=reset_price,
            line=f"1 x GPU hours @ {reset_price} EUR",
        )
        for _ in range(8)
    ]
    if not await driver.wait_gate(
        [*to_cancel, *to_reset], "manager", 120.0
    ) or not await driver.wait_waiting_for(to_fix, "signal add_line", 120.0):
        ctx.faults.problems.append("the workflows never reached their manager or their wait for a line")
        return
    added = {"line": {"description": "GPU hours", "quantity": 1, "unit_price_cents": 3100}}
    actions = [
        await driver.bulk(
            {"action": "cancel", "query": f"amount = {cents} AND status = 'waiting'", "reason": "withdrawn"},
            key=f"{ctx.scenario}-cancel",
        ),
        await driver.bulk(
            {
                "action": "signal",
                "signal": "add_line",
                "input": added,
                "query": f"amount = {cents + 3100} AND stage = 'invoice.correction_requested'",
                "reason": "the scanner dropped it",
            },
            key=f"{ctx.scenario}-line",
        ),
        await driver.bulk(
            {
                "action": "reset",
                "reset_to": "invoice.validated",
                "query": f"amount = {reset_cents} AND status = 'waiting'",
                "reason": "the ledger was corrected",
            },
            key=f"{ctx.scenario}-reset",
        ),
    ]
    # Killed once a few are done (2 a second each): most still pending, in every action.
    done = await driver.bulk_done(actions, at_least=4, timeout_s=30.0)
    await injectors.kill(ctx.dep, ctx.faults, "gateway")
    fault = ctx.faults.faults[-1]
    fault.detail += f" after {done} of 24 items were done"
    if not 4 <= done < 24:
        ctx.faults.problems.append(
            f"the gateway was not killed halfway through its bulk actions ({done} of 24 done)"
        )
    await asyncio.sleep(1.0)
    await ctx.dep.start_proc("gateway")
    fault.healed_at = time.monotonic()
    finals = []
    for bulk_id in actions:
        final = await driver.bulk_finished(bulk_id, 120.0)
        finals.append(final)
        if final is None or (final["done"], final["skipped"]) != (8, 0):
            ctx.faults.problems.append(f"bulk action {bulk_id} ended {final}")
    resets = {i["workflow_id"]: i["detail"] for i in (finals[-1] or {}).get("items", [])}
    for w in to_reset:
        reset_id = resets.get(w.workflow_id)
        if reset_id is None or not await driver.reset_applied(w.workflow_id, reset_id, "budget_agent", 120.0):
            ctx.faults.problems.append(f"{w.workflow_id}: the bulk reset ({reset_id}) never finished")
        w.approve_tiers = frozenset({"manager"})  # now the driver approves it


async def resets_under_sigkill(ctx: Ctx) -> None:
    """Eight procurements wait for their manager; an operator resets each to
    invoice.validated. The budget agent, which gives each reservation back and reserves
    again, is SIGKILLed in the step that handles the event again (the third), and restarted:
    the request, read again, finishes it. Then each is approved and paid once, and the
    ledger holds one reservation each."""
    driver = ctx.dep.driver
    tracked = [await driver.submit("procurement", ctx.scenario, approve_tiers=()) for _ in range(8)]
    if not await driver.wait_gate(tracked, "manager", 120.0):
        ctx.faults.problems.append("the workflows never reached their manager")
        return
    kill = asyncio.create_task(
        injectors.sigkill_at(ctx.dep, ctx.faults, "budget_agent", "after_inbox_insert", 3, timeout_s=90.0)
    )
    await asyncio.sleep(2.0)  # the budget agent restarts armed; the resets wait for it on their topic
    resets = {
        w.workflow_id: await driver.reset_to(
            w.workflow_id,
            "invoice.validated",
            key=f"{ctx.scenario}-{w.token}",
            reason="the ledger was corrected",
        )
        for w in tracked
    }
    await kill
    for w in tracked:
        if not await driver.reset_applied(w.workflow_id, resets[w.workflow_id], "budget_agent", 120.0):
            ctx.faults.problems.append(f"{w.workflow_id}: reset {resets[w.workflow_id]} never finished")
        w.approve_tiers = frozenset({"manager"})  # now the driver approves it


LOOP_POINTS = [("after_model_turn", 2), ("mid_tool_call", 3), ("after_tool_call", 2)]
"""Where the triage agent's loop is SIGKILLed: after a model turn was kept, while a tool call
is made but not kept (the one call a crash may repeat), after a tool call was kept."""


async def agent_loop_under_sigkill(ctx: Ctx) -> None:
    """Support tickets one at a time (each loop runs alone, so what repeats is the killed
    loop's), the triage agent SIGKILLed at each point of its tool-calling loop. The sandbox
    counts what was asked: no model turn asked twice, and of the tool calls only the one in
    flight at the mid-call kill (its key the same: one note per ticket)."""
    driver = ctx.dep.driver
    before = await driver.sandbox_stats()

    async def one_ticket_at_a_time() -> None:
        tickets = ctx.workflows()
        if tickets and not (tickets[-1].ended or tickets[-1].last.get("pending_approval")):
            return  # the last ticket's loop is not over yet
        await driver.submit("support_ticket", ctx.scenario)

    for point, nth in LOOP_POINTS:
        await injectors.sigkill_at(ctx.dep, ctx.faults, "triage_agent", point, nth, feed=one_ticket_at_a_time)
    tickets = ctx.workflows()
    if not await driver.wait_settled(tickets, 120.0):
        return  # the reconciler says which is stuck
    after = await driver.sandbox_stats()
    asked = {k: n for k, n in after["llm_repeated"].items() if k.startswith("triage_ticket")}
    for conversation, n in asked.items():
        if n > before["llm_repeated"].get(conversation, 1):
            ctx.faults.problems.append(f"a model turn asked {n} times once kept: {conversation}")
    customers = {f"/crm/customers/cust-{w.token}" for w in tickets}
    calls = Counter(
        t["path"]
        for t in after["traces"][len(before["traces"]) :]
        if t["path"].rsplit("/", 1)[0] in customers or t["path"] in customers
    )
    repeated = {path: n for path, n in calls.items() if n > 1}
    if list(repeated.values()) != [2]:
        ctx.faults.problems.append(f"not just the call killed mid-call made again: {repeated}")
    ctx.faults.notes.append(
        f"{len(tickets)} tickets, {sum(calls.values())} tool calls, repeated: {repeated or 'none'}"
    )


def full() -> list[Scenario]:
    scenarios = [
        Scenario(
            f"sigkill-{service}",
            f"SIGKILL of {service} at " + ", ".join(f"{p} (#{n})" for p, n in points),
            "main",
            sigkill([(service, p, n) for p, n in points]),
        )
        for service, points in POINTS.items()
    ]
    scenarios += [s for s in SHORT if not s.name.startswith("sigkill")]
    scenarios += [
        Scenario(
            "key-service-down",
            "the key service SIGKILLed for 12 s while workflows start and run (sealing waits)",
            "main",
            key_service_down,
        ),
        Scenario(
            "rebalance",
            f"{', '.join(SCALED)} scaled 1 -> 3 -> 1 replicas mid-workflow",
            "main",
            rebalance,
        ),
        Scenario(
            "sigkill-fan-in-mid-stage",
            "the report agent (the sources stage's fan-in) SIGKILLed while its sources arrive: "
            "after recording one (inbox insert #3, commit #3), and a source fetcher mid-fetch",
            "main",
            sigkill(
                [
                    ("report_agent", "after_inbox_insert", 3),
                    ("source_fetcher", "mid_external_call", 2),
                    ("report_agent", "after_db_commit", 3),
                ]
            ),
        ),
        Scenario(
            "zombie-payment_agent",
            "a payment agent replica paused (SIGSTOP) until its partitions move, then resumed",
            "main",
            zombie("payment_agent"),
        ),
        Scenario(
            "zombie-report_agent",
            "a report agent replica paused (SIGSTOP) until its partitions move, then resumed",
            "main",
            zombie("report_agent"),
        ),
        Scenario(
            "rewind-over-poison",
            "40 poison records in the timer service's topic, dead-lettered, then its consumer "
            "group rewound to the beginning",
            "main",
            rewind_over_poison,
        ),
        Scenario(
            "kafka-broker-restart",
            "the only broker restarted under load: a controlled shutdown, then a SIGKILL",
            "kafka-single",
            broker_restart,
        ),
        Scenario(
            "kafka-broker-kill",
            "3 brokers (RF 3, min.insync.replicas 2, acks=all): the busiest broker killed and "
            "brought back, twice",
            "kafka-cluster",
            broker_kill,
        ),
        Scenario(
            "postgres-restart",
            "PostgreSQL restarted under load (pg_ctl restart -m fast) three times, then down for 5s",
            "postgres",
            postgres_restart,
        ),
        Scenario(
            "rollout-sigkill-both-releases",
            "the invoice agent's canary (a second release, half of the new workflows) and its "
            "stable release SIGKILLed at their fault points; the canary promoted mid-flight",
            "main",
            rollout_under_sigkills,
        ),
        Scenario(
            "bulk-actions-sigkill-gateway",
            "a bulk cancel of 8 procurements, a bulk signal (a missing line) to 8 more and a bulk "
            "reset of 8 more to invoice.validated, the gateway that acts on all three SIGKILLed halfway",
            "main",
            bulk_actions_under_sigkill,
        ),
        Scenario(
            "resets-sigkill-budget-agent",
            "8 waiting procurements reset to invoice.validated; the budget agent (which gives "
            "back each reservation and reserves again) SIGKILLed while it handles the 3rd again",
            "main",
            resets_under_sigkill,
        ),
        Scenario(
            "sigkill-agent-loop",
            "support tickets one at a time, the triage agent SIGKILLed in its tool-calling loop: "
            + ", ".join(f"{p} (#{n})" for p, n in LOOP_POINTS),
            "main",
            agent_loop_under_sigkill,
        ),
        Scenario(
            "poison-at-broker-limit",
            "production size limits; a 900 KB non-JSON record (under the broker's 1 MB limit)",
            "defaults",
            poison_at_broker_limit,
        ),
    ]
    return scenarios + NETWORK


# -- running ---------------------------------------------------------------------------------------------


async def run_scenario(dep: Deployment, scenario: Scenario, seed: int = 0) -> ScenarioResult:
    """Run the scenario's body, then the reconciler; never raises for what went wrong in
    Chorus (that is the result), only for a broken harness."""
    faults = FaultLog()
    ctx = Ctx(dep, scenario.name, faults, random.Random(f"{seed}:{scenario.name}"))
    started = time.monotonic()
    crashes_before = len(dep.startup_crashes)
    exits_before = len(dep.unexpected_exits)
    retries_before = dep.driver.submit_retries
    replays_before = dep.driver.replayed_submissions
    errors: list[str] = []
    log.info("scenario %s: %s", scenario.name, scenario.description)
    try:
        await scenario.body(ctx)
    except Exception as exc:
        log.exception("scenario %s raised", scenario.name)
        errors.append(f"the scenario itself failed: {exc!r}\n{traceback.format_exc(limit=6)}")
    recon = await reconcile(
        dep, scenario.name, faults, deadline_s=scenario.deadline_s, exits_before=exits_before
    )
    result = ScenarioResult(
        name=scenario.name,
        description=scenario.description,
        deployment=dep.config.name,
        workflows=recon.workflows,
        faults=faults.total,
        faults_by_kind=faults.by_kind(),
        lost=len(recon.lost),
        duplicate_effects=recon.duplicate_effects,
        stuck=len(recon.stuck),
        wrong=len(recon.wrong),
        max_recovery_s=recon.max_recovery_s,
        checks=recon.checks,
        violations=[*errors, *recon.violations],
        notes=[*faults.notes, *recon.notes],
        fault_log=[asdict(f) for f in faults.faults],
        startup_crashes=dep.startup_crashes[crashes_before:],
        duration_s=time.monotonic() - started,
    )
    if faults.total == 0:
        result.violations.append("no fault was injected")
    retries = dep.driver.submit_retries - retries_before
    if retries:
        replays = dep.driver.replayed_submissions - replays_before
        result.notes.append(
            f"{retries} submission attempt(s) failed during gateway outages and were retried with "
            f"the same Idempotency-Key; {replays} retry(ies) answered as a replay of a submission "
            "the gateway had already accepted"
        )
    log.info(
        "scenario %s: %s (%d workflows, %d faults, %.0fs)",
        scenario.name,
        "pass" if result.ok else "FAIL",
        result.workflows,
        result.faults,
        result.duration_s,
    )
    return result


async def run_control(dep: Deployment, scenario: Scenario, result: ScenarioResult, seed: int = 0) -> None:
    """Run ``scenario``'s negative control on the deployment and record in ``result``
    whether it failed as it must (a control that passes is a violation of the scenario)."""
    control = scenario.control
    assert control is not None
    broken = Scenario(
        f"{scenario.name}/control", control.breaks, scenario.deployment, control.body, control.deadline_s
    )
    outcome = await run_scenario(dep, broken, seed)
    seen = f"lost={outcome.lost} duplicate_effects={outcome.duplicate_effects} stuck={outcome.stuck}"
    if control.failed(outcome):
        result.checks["negative control"] = "ok"
        first = "; ".join(v.splitlines()[0] for v in outcome.violations[:3])
        result.notes.append(f"negative control ({control.breaks}): failed as it must ({seen}): {first}")
    else:
        result.checks["negative control"] = "passed: the checks are blind to it"
        result.violations.append(
            f"negative control ({control.breaks}) passed ({seen}): the scenario cannot see what it checks"
        )
