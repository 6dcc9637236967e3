"""The invariants, checked over everything that happened once a scenario's faults are over.

Per scenario (its workflows):
- every workflow settles before the recovery deadline: terminal with the outcome the
  scenario expects, or waiting at the gate it deliberately leaves it at. One that does
  not is *stuck* when the system still holds work for it (an unsent outbox row, a
  parked or retrying event, a pending timer, a dead letter, a pending approval) and
  *lost* when nothing anywhere would ever move it again;
- each external side effect happened exactly once per idempotency key, counted by the
  fake external servers (payments per invoice, report deliveries, completion webhooks).

Per deployment (cumulative: the stores are the deployment's):
- every event on a projected topic is in the audit log, and the audit log holds no
  event that is not on a topic;
- the dead-letter store holds exactly the poison records, once per consuming service,
  with their original bytes, and nothing else;
- a replay of the audit projection from the topics equals the live projection;
- the budget ledger's reserved total equals the sum of its held reservations;
- no process exited that a scenario did not stop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from aiokafka import TopicPartition

from chorus.base.errors import DecodeError
from chorus.kernel.codec import DEFAULT_MAX_BYTES, decode
from chorus.kernel.kafka import make_admin
from chorus.platform.audit_projector.adapters.projection import SCHEMA as AUDIT_SCHEMA
from chorus.platform.audit_projector.replay import compare, rebuild, replay_topics, wait_for_live
from chorus.reference.payment_agent.domain import payment_key
from tests.reliability.deployment import SERVICES, Deployment, FaultLog, subscriptions
from tests.reliability.driver import TERMINAL, Tracked, customer_id, invoice_id, report_topic
from tests.reliability.observe import group_lag, read_all
from tests.support.kafka import local_verifier

log = logging.getLogger("reliability.reconciler")

QUIESCENCE_TIMEOUT_S = 90.0


@dataclass
class Reconciliation:
    workflows: int = 0
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    """Settled, but not as expected (another outcome, or it left its gate)."""
    duplicate_effects: int = 0
    effect_problems: list[str] = field(default_factory=list)
    max_recovery_s: float | None = None
    checks: dict[str, str] = field(default_factory=dict)
    """Check name -> "ok" or what is wrong (short)."""
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What happened without being wrong (retried calls with the same key, ...)."""

    def check(self, name: str, problems: list[str]) -> None:
        self.checks[name] = "ok" if not problems else f"{len(problems)} problem(s)"
        self.violations.extend(f"{name}: {p}" for p in problems)


# -- waiting for the system to be still -------------------------------------------------------------


async def outbox_backlog(pool: asyncpg.Pool) -> dict[str, int]:
    async with pool.acquire() as conn:
        return {
            s: int(await conn.fetchval(f"SELECT count(*) FROM {s}.outbox WHERE dispatched_at IS NULL"))
            for s in SERVICES
        }


async def wait_quiescent(dep: Deployment, timeout_s: float = QUIESCENCE_TIMEOUT_S) -> list[str]:
    """Wait until every group has consumed everything and every outbox is empty (twice in a
    row, a second apart); returns what was still moving when ``timeout_s`` passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    still: list[str] = []
    calm = 0
    while loop.time() < deadline:
        try:
            lag = await group_lag(dep)
            backlog = await outbox_backlog(dep.pool)
        except Exception as exc:  # a broker or database a scenario just brought back
            still = [f"cannot read offsets/outbox yet: {exc!r}"]
            calm = 0
            await asyncio.sleep(1.0)
            continue
        still = [f"group {g} lags {n}" for g, n in lag.items() if n] + [
            f"{s} outbox holds {n} unsent" for s, n in backlog.items() if n
        ]
        calm = calm + 1 if not still else 0
        if calm >= 2:
            return []
        await asyncio.sleep(1.0)
    return still


# -- workflows ----------------------------------------------------------------------------------------


async def projection_rows(pool: asyncpg.Pool, ids: list[str]) -> dict[str, dict[str, Any]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            f"""SELECT workflow_id, status, stage, waiting_for, outcome, outcome_reason, pending_tier,
                       last_event_at, events
                FROM {AUDIT_SCHEMA}.workflow_status WHERE workflow_id = ANY($1::text[])""",
            ids,
        )
    return {r["workflow_id"]: dict(r) for r in rows}


async def pending_work(pool: asyncpg.Pool, workflow_id: str) -> list[str]:
    """What the system still holds for a workflow (empty: nothing would ever move it)."""
    found: list[str] = []
    async with pool.acquire() as conn:
        for s in SERVICES:
            row = await conn.fetchrow(
                f"""SELECT
                      (SELECT count(*) FROM {s}.outbox
                         WHERE workflow_id = $1 AND dispatched_at IS NULL) AS unsent,
                      (SELECT count(*) FROM {s}.parked WHERE workflow_id = $1) AS parked,
                      (SELECT count(*) FROM {s}.state
                         WHERE workflow_id = $1 AND parked_on IS NOT NULL) AS blocked,
                      (SELECT count(*) FROM {s}.inbox WHERE workflow_id = $1
                         AND outcome IN ('retrying', 'dead_lettered')) AS retrying""",
                workflow_id,
            )
            assert row is not None
            found.extend(f"{s}.{what}={n}" for what, n in row.items() if n)
        timers = await conn.fetch(
            """SELECT timer_id, purpose, due_at FROM timer_service.timers
               WHERE workflow_id = $1 AND status = 'pending' AND purpose <> 'deadline'""",
            workflow_id,
        )
        found.extend(f"timer {t['timer_id']} ({t['purpose']}) due {t['due_at']:%H:%M:%S}" for t in timers)
        letters = await conn.fetchval(
            "SELECT count(*) FROM deadletter_service.letters WHERE original_workflow_id = $1", workflow_id
        )
        if letters:
            found.append(f"{letters} dead letter(s)")
    return found


async def unconsumed(dep: Deployment, workflow_ids: set[str]) -> dict[str, list[str]]:
    """Records keyed by these workflows that a service's group has not consumed yet (a
    consumer that is down or wedged): work the system still holds, in Kafka."""
    lagging = {s for s, n in (await group_lag(dep)).items() if n}
    if not lagging:
        return {}
    subs = subscriptions(dep.registry)
    records = await read_all(dep.bootstrap, sorted({t for s in lagging for t in subs[s]}))
    admin = make_admin(dep.bootstrap)
    await admin.start()
    found: dict[str, list[str]] = {}
    try:
        for service in sorted(lagging):
            committed = await admin.list_consumer_group_offsets(dep.group(service))
            for r in records:
                key = (r.key or b"").decode(errors="replace")
                if key not in workflow_ids or r.topic not in subs[service]:
                    continue
                meta = committed.get(TopicPartition(r.topic, r.partition))
                if meta is None or r.offset >= meta.offset:
                    found.setdefault(key, []).append(f"{service} has not consumed {r.topic}:{r.offset}")
    finally:
        await admin.close()
    return found


def _where(w: Tracked, row: dict[str, Any] | None) -> str:
    if row is None:
        return f"{w.kind} {w.workflow_id}: not in the projection"
    return (
        f"{w.kind} {w.workflow_id}: {row['status']}, stage {row['stage']}, waiting for {row['waiting_for']}"
    )


async def classify_unsettled(dep: Deployment, unsettled: list[Tracked], result: Reconciliation) -> None:
    """At the recovery deadline, before anything is restarted: stuck when the system
    still holds work for the workflow, lost when nothing anywhere would move it."""
    if not unsettled:
        return
    rows = await projection_rows(dep.pool, [w.workflow_id for w in unsettled])
    in_kafka = await unconsumed(dep, {w.workflow_id for w in unsettled})
    for w in unsettled:
        where = _where(w, rows.get(w.workflow_id))
        held = [*in_kafka.get(w.workflow_id, [])[:3], *await pending_work(dep.pool, w.workflow_id)]
        if held:
            result.stuck.append(f"{where}; holds {', '.join(held)}")
        else:
            result.lost.append(f"{where}; nothing pending anywhere")


async def judge_outcomes(dep: Deployment, settled: list[Tracked], result: Reconciliation) -> None:
    """Settled workflows, once everything is still: the outcome the scenario expects, or
    still at the gate it was left at (duplicates must not have pushed it on)."""
    rows = await projection_rows(dep.pool, [w.workflow_id for w in settled])
    for w in settled:
        row = rows.get(w.workflow_id)
        where = _where(w, row)
        if row is None:
            result.wrong.append(f"{where} (the driver saw it settle)")
        elif w.expect_gate is not None:
            if not (row["status"] == "waiting" and row["pending_tier"] == w.expect_gate):
                result.wrong.append(f"{where}: left the {w.expect_gate} gate it was meant to wait at")
        elif row["status"] != w.expect_outcome:
            result.wrong.append(f"{where}: expected {w.expect_outcome} ({row['outcome_reason']})")


# -- external side effects ------------------------------------------------------------------------------


def judge_effects(
    stats: dict[str, Any], workflows: list[Tracked], statuses: dict[str, str]
) -> Reconciliation:
    """Exactly once per idempotency key: one payment per completed invoice (under the key
    the payment agent derives), one report delivery key per completed report, one helpdesk
    reply key per completed ticket (and at most one CRM note, which its agent loop writes),
    one completion webhook (delivery id) per ended workflow; none for the others."""
    out = Reconciliation()
    by_key: dict[str, dict[str, Any]] = stats["payments"]["by_key"]
    requests: dict[str, int] = stats["payment_requests"]
    retried = payments = delivered = replied = hooked = 0
    for w in workflows:
        status = statuses.get(w.workflow_id, "")
        ended = status in TERMINAL
        if w.kind == "procurement":
            invoice = invoice_id(w.token)
            keys = sorted(k for k, p in by_key.items() if p.get("invoice_id") == invoice)
            expected = 1 if status == "completed" else 0
            if len(keys) > expected:
                out.duplicate_effects += len(keys) - expected
                out.effect_problems.append(f"{w.workflow_id}: {len(keys)} payments for {invoice} ({status})")
            elif len(keys) < expected:
                out.effect_problems.append(f"{w.workflow_id}: completed without a payment for {invoice}")
            wanted = payment_key(w.workflow_id, invoice)
            if keys and keys != [wanted]:
                out.effect_problems.append(f"{w.workflow_id}: paid under {keys}, expected [{wanted}]")
            retried += sum(max(0, requests.get(k, 0) - 1) for k in keys)
            payments += len(keys)
        elif w.kind == "support_ticket":
            replies, repeats = _ticket_effects(out, w, status, stats)
            replied += replies
            retried += repeats
        else:
            title = f"Report: {report_topic(w.token)}"[:200]
            deliveries = [d for d in stats["deliveries"] if d["body"].get("title") == title]
            keys_seen = {d.get("idempotency_key") for d in deliveries}
            if None in keys_seen:
                out.effect_problems.append(f"{w.workflow_id}: a report delivery without an Idempotency-Key")
            _once(out, w, status, len(keys_seen), "delivery keys for one report", "a delivery")
            retried += len(deliveries) - len(keys_seen)
            delivered += len(keys_seen)
        hooks = [h for h in stats["webhooks"] if h["body"].get("workflow_id") == w.workflow_id]
        deliveries_ids = {h.get("delivery") for h in hooks}
        expected_hooks = 1 if ended else 0
        if len(deliveries_ids) > expected_hooks:
            out.duplicate_effects += len(deliveries_ids) - expected_hooks
            out.effect_problems.append(f"{w.workflow_id}: {len(deliveries_ids)} distinct completion webhooks")
        elif len(deliveries_ids) < expected_hooks:
            out.effect_problems.append(f"{w.workflow_id}: ended ({status}) without a completion webhook")
        if not all(h.get("signature_valid") for h in hooks):
            out.effect_problems.append(f"{w.workflow_id}: a completion webhook with a bad signature")
        retried += len(hooks) - len(deliveries_ids)
        hooked += len(deliveries_ids)
    out.notes.append(
        f"effects: {payments} payment(s), {delivered} report delivery key(s), {replied} ticket "
        f"reply key(s), {hooked} webhook delivery id(s) for {len(workflows)} workflows"
    )
    if retried:
        out.notes.append(
            f"{retried} external call(s) repeated with the same idempotency key (at-least-once "
            "delivery; the key makes the receiver apply it once)"
        )
    return out


def _ticket_effects(out: Reconciliation, w: Tracked, status: str, stats: dict[str, Any]) -> tuple[int, int]:
    """A ticket's reply (one for a completed ticket) and its agent loop's note on the
    customer's record (one, whatever the ticket's end): how many replies, how many repeats."""
    replies = [r for r in stats.get("helpdesk", []) if r["customer_id"] == customer_id(w.token)]
    _once(out, w, status, len(replies), "reply keys for one ticket", "a reply to the customer")
    notes = [n for n in stats.get("crm_notes", []) if n["customer_id"] == customer_id(w.token)]
    if len(notes) > 1:
        out.duplicate_effects += len(notes) - 1
        out.effect_problems.append(f"{w.workflow_id}: {len(notes)} CRM notes for one ticket")
    repeats = sum(max(0, e.get("requests", 1) - 1) for e in [*replies, *notes])
    return len(replies), repeats


def _once(out: Reconciliation, w: Tracked, status: str, seen: int, what: str, missing: str) -> None:
    """One effect (distinct key) for a completed workflow, none for another."""
    expected = 1 if status == "completed" else 0
    if seen > expected:
        out.duplicate_effects += seen - expected
        out.effect_problems.append(f"{w.workflow_id}: {seen} {what} ({status})")
    elif seen < expected:
        out.effect_problems.append(f"{w.workflow_id}: completed without {missing}")


# -- deployment-wide checks ----------------------------------------------------------------------------


async def audit_log_complete(dep: Deployment, notes: list[str]) -> list[str]:
    """Every decodable event on a projected topic has its row; no row without an event."""
    poison = {(p.topic, p.partition, p.offset) for p in dep.poison}
    records = await read_all(dep.bootstrap, replay_topics(dep.registry))
    on_topics: set[str] = set()
    problems: list[str] = []
    for r in records:
        try:
            event = decode(r.value, dep.registry, max_bytes=1 << 30)
        except DecodeError as exc:
            if (r.topic, r.partition, r.offset) not in poison:
                where = f"{r.topic}:{r.partition}:{r.offset}"
                problems.append(f"undecodable record that is no poison of ours at {where}: {exc}")
            continue
        on_topics.add(str(event.envelope.event_id))
    async with dep.pool.acquire() as conn:
        rows = await conn.fetch(
            f"SELECT event_id::text AS id FROM {AUDIT_SCHEMA}.audit_log WHERE origin = 'topic'"
        )
    in_log = {r["id"] for r in rows}
    missing = sorted(on_topics - in_log)
    phantom = sorted(in_log - on_topics)
    if missing:
        problems.append(f"{len(missing)} event(s) on the topics are not in the audit log, e.g. {missing[:3]}")
    if phantom:
        problems.append(f"{len(phantom)} audit row(s) of events on no topic, e.g. {phantom[:3]}")
    notes.append(f"audit log: {len(on_topics)} distinct events in {len(records)} records checked")
    return problems


async def dead_letters_exact(dep: Deployment, notes: list[str]) -> list[str]:
    """One letter per (consuming service, poison record), with the record's bytes; no other letter."""
    subs = subscriptions(dep.registry)
    expected = {
        (service, p.topic, p.partition, p.offset): p
        for p in dep.poison
        for service in SERVICES
        if p.topic in subs[service]
    }
    async with dep.pool.acquire() as conn:
        rows = await conn.fetch(
            """SELECT service, original_topic, original_partition, original_offset, original_value,
                      error_class, error_message, original_workflow_id
               FROM deadletter_service.letters"""
        )
    seen: Counter[tuple[str, str, int, int]] = Counter()
    problems: list[str] = []
    for r in rows:
        key = (r["service"], r["original_topic"], r["original_partition"], r["original_offset"])
        seen[key] += 1
        poison = expected.get(key)
        if poison is None:
            problems.append(
                f"unexpected dead letter from {r['service']} of {key[1]}:{key[2]}:{key[3]} "
                f"(workflow {r['original_workflow_id']}): {r['error_class']}: {r['error_message'][:160]}"
            )
        elif bytes(r["original_value"]) != poison.value:
            problems.append(
                f"{r['service']}'s letter of {poison.kind} poison at {key[1]}:{key[2]}:{key[3]} "
                "does not hold its original bytes"
            )
    for key, poison in expected.items():
        if seen[key] == 0:
            problems.append(
                f"{key[0]} has no dead letter of the {poison.kind} poison at {key[1]}:{key[2]}:{key[3]}"
            )
        elif seen[key] > 1:
            problems.append(
                f"{key[0]} dead-lettered the poison at {key[1]}:{key[2]}:{key[3]} {seen[key]} times"
            )
    notes.append(
        f"dead letters: {len(rows)} stored; {len(expected)} expected from {len(dep.poison)} poison records"
    )
    return problems


async def replay_equals_live(dep: Deployment, notes: list[str], attempts: int = 2) -> list[str]:
    """Rebuild the audit projection from the topics into a fresh schema and compare it
    row for row (md5 per workflow) with the live one."""
    problems: list[str] = []
    for _ in range(attempts):
        result = await rebuild(
            registry=dep.registry,
            bootstrap=dep.bootstrap,
            pool=dep.pool,
            live_schema=AUDIT_SCHEMA,
            max_event_bytes=dep.config.max_event_bytes or DEFAULT_MAX_BYTES,
            verifier=local_verifier(dep.registry),
        )
        try:
            lag = await wait_for_live(
                dep.bootstrap, dep.group(AUDIT_SCHEMA), result.end_offsets, timeout_s=60.0
            )
            async with dep.pool.acquire() as conn:
                comparison = await compare(conn, live=AUDIT_SCHEMA, replay=result.target.schema)
        finally:
            async with dep.pool.acquire() as conn:
                await conn.execute(f"DROP SCHEMA IF EXISTS {result.target.schema} CASCADE")
        if comparison.equal and lag == 0:
            notes.append(
                f"replay: {result.records} records ({result.undecodable} undecodable) rebuilt "
                f"{comparison.workflows} workflows, checksum {comparison.live_checksum[:12]} on both sides"
            )
            return []
        problems = [
            f"replay of {result.records} records differs from the live projection in "
            f"{len(comparison.differing)} of {comparison.workflows} workflows "
            f"(live lag {lag}), e.g. {comparison.differing[:3]}"
        ]
        await asyncio.sleep(2.0)  # something was still moving: once more on a quieter log
    return problems


async def budget_consistent(dep: Deployment) -> list[str]:
    async with dep.pool.acquire() as conn:
        rows = await conn.fetch(
            """SELECT b.cost_center, b.reserved_cents,
                      coalesce(sum(r.amount_cents) FILTER (WHERE r.status = 'reserved'), 0) AS held
               FROM budget_agent.budgets b
               LEFT JOIN budget_agent.reservations r USING (cost_center)
               GROUP BY b.cost_center, b.reserved_cents"""
        )
    return [
        f"{r['cost_center']}: reserved_cents {r['reserved_cents']} but reservations hold {r['held']}"
        for r in rows
        if r["reserved_cents"] != r["held"]
    ]


# -- everything, in order ------------------------------------------------------------------------------


async def reconcile(
    dep: Deployment, scenario: str, faults: FaultLog, *, deadline_s: float, exits_before: int = 0
) -> Reconciliation:
    """Wait up to ``deadline_s`` for the scenario's workflows, then check everything;
    ``exits_before``: how many unexpected exits the deployment had when it began."""
    workflows = dep.driver.of(scenario)
    settled = await dep.driver.wait_settled(workflows, deadline_s)
    out = Reconciliation(workflows=len(workflows))
    healed = faults.healed_at
    ends = [w.settled_at for w in workflows if w.settled_at is not None]
    if healed is not None and ends:
        out.max_recovery_s = max(0.0, max(ends) - healed) if settled else None
    await classify_unsettled(dep, [w for w in workflows if not w.settled], out)
    await dep.heal()
    out.check(
        "processes",
        [f"{x} exited without the scenario stopping it" for x in dep.unexpected_exits[exits_before:]],
    )
    out.check("faults injected", list(faults.problems))
    still = await wait_quiescent(dep)
    out.check("quiescent", still)
    await judge_outcomes(dep, [w for w in workflows if w.settled], out)
    statuses = {
        w: r["status"]
        for w, r in (await projection_rows(dep.pool, [x.workflow_id for x in workflows])).items()
    }
    effects = judge_effects(await dep.driver.sandbox_stats(), workflows, statuses)
    out.duplicate_effects = effects.duplicate_effects
    out.effect_problems = effects.effect_problems
    out.notes.extend(effects.notes)
    out.check("effects exactly once", effects.effect_problems)
    out.check(
        "workflows", [*(f"lost: {x}" for x in out.lost), *(f"stuck: {x}" for x in out.stuck), *out.wrong]
    )
    started = time.monotonic()
    out.check("audit log complete", await audit_log_complete(dep, out.notes))
    out.check("dead letters exact", await dead_letters_exact(dep, out.notes))
    out.check("replay equals live", await replay_equals_live(dep, out.notes))
    out.check("budget ledger", await budget_consistent(dep))
    out.notes.append(f"deployment-wide checks took {time.monotonic() - started:.1f}s")
    return out
