"""Versioned rollouts with real processes: two releases of the invoice agent side by side.

Each release runs as its own process and consumer group; the gateway pins every new
workflow to a release of the invoice agent (the rollout service's policy), and each release
handles only the workflows pinned to it. The audit log shows which release took each step;
the inboxes show the other release recorded it as not its own.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from chorus import __version__
from chorus.releases.rollouts import MAIN_RELEASE
from chorus.tools.devstack import SERVICES as DEV_SERVICES
from chorus.tools.devstack import DevStack, release_proc
from chorus.web.apikeys import DEMO_KEYS
from chorus.web.http import api_client
from tests.support.database import connected
from tests.support.processes import chorus
from tests.support.prometheus import labels_of, prometheus
from tests.support.stacks import own_stack
from tests.support.submissions import accepted, honouring_retry_after, procurement
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

SUBMITTER = {"Authorization": "Bearer demo-submitter-key"}
OPERATOR = {"Authorization": "Bearer demo-operator-key"}
OPERATOR_NAME = DEMO_KEYS["demo-operator-key"].principal
KEYS_BY_TIER = {k.tier: {"Authorization": f"Bearer {key}"} for key, k in DEMO_KEYS.items() if k.tier}
STABLE, CANARY, FLAKY = MAIN_RELEASE, "0.2.0", "0.3.0"
"""The release in the service's own group (it runs the service's version, Chorus's), and two
named ones."""
VERSION_OF = {STABLE: __version__, CANARY: CANARY, FLAKY: FLAKY}
"""What the audit log names as the producer version of each release's steps."""
RESEARCH = {"report_agent", "source_fetcher", "notifier"}
SERVICES = (*(s for s in DEV_SERVICES if s not in RESEARCH), "outcome_analytics")
"""The procurement workflow's services, the rollout service and outcome analytics."""
TERMINAL = {"completed", "rejected", "failed", "compensated", "timed_out", "cancelled"}
PO: dict[str, Any] = {
    "po_number": "PO-ROLL",
    "vendor_id": "vendor-acme",
    "currency": "EUR",
    "total_cents": 1_000_000_000,
    "cost_center": "cc-rollout",
}


class Rollouts:
    def __init__(self, stack: DevStack, http: httpx.AsyncClient, database_url: str, prometheus: str) -> None:
        self.stack, self.http, self.database_url = stack, http, database_url
        self.prometheus = prometheus
        """A deployment's Prometheus: every process scraped with its service and release."""
        self.url = (stack.procs["rollout_service"].health_url or "").removesuffix("/health")
        self.analytics_url = (stack.procs["outcome_analytics"].health_url or "").removesuffix("/health")

    async def change(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post(
            f"{self.url}/v1/rollouts/invoice_agent/{action}", json=body, headers=OPERATOR
        )
        assert response.status_code == 200, response.text
        policy: dict[str, Any] = response.json()["policy"]
        return policy

    async def status(self) -> dict[str, Any]:
        response = await self.http.get(f"{self.url}/v1/rollouts/invoice_agent", headers=OPERATOR)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def followed(self, revision: int) -> None:
        """Until every process that decides (the gateway, each invoice agent) follows ``revision``."""

        async def everyone() -> bool:
            for name in (
                "gateway",
                "invoice_agent",
                *(release_proc("invoice_agent", r) for r in (CANARY, FLAKY)),
            ):
                health = (await self.http.get(self.stack.procs[name].health_url or "")).json()
                if health["rollouts"].get("invoice_agent") != revision:
                    return False
            return True

        await wait_until(everyone, timeout_s=30, what=f"every process following revision {revision}")

    async def submit(self, n: int) -> list[str]:
        async def one(i: int) -> str:
            url = f"{self.stack.api_url}/v1/workflows/procurement"
            return await accepted(self.http, url, small_invoice(uuid.uuid4().hex[:10]), SUBMITTER)

        ids: list[str] = []
        for start in range(0, n, 20):  # 20 at a time: a steady arrival, not one burst
            ids.extend(await asyncio.gather(*(one(i) for i in range(start, min(n, start + 20)))))
        return ids

    async def workflow(self, workflow_id: str) -> dict[str, Any]:
        url = f"{self.stack.api_url}/v1/workflows/{workflow_id}"
        # A poller on a loaded machine may be told 503 (the read model slow): it retries.
        response = await honouring_retry_after(lambda: self.http.get(url, headers=SUBMITTER))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def all_end(self, ids: list[str], timeout_s: float = 300.0) -> dict[str, dict[str, Any]]:
        """Until every workflow ended; a manager approves each payment on the way (every
        procurement needs a person's approval)."""
        ended: dict[str, dict[str, Any]] = {}
        approved: set[str] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            waiting = [w for w in ids if w not in ended]
            if not waiting:
                return ended
            batch = waiting[:20]
            for workflow_id, body in zip(
                batch, await asyncio.gather(*map(self.workflow, batch)), strict=True
            ):
                pending = body.get("pending_approval") or {}
                if body["status"] in TERMINAL:
                    ended[workflow_id] = body
                elif pending.get("tier") == "manager" and pending["approval_id"] not in approved:
                    await self.decide(pending, "approve", "budget is fine")
                    approved.add(pending["approval_id"])
            await asyncio.sleep(0.5)
        stuck = await self.workflow(next(w for w in ids if w not in ended))
        raise AssertionError(
            f"{len(ids) - len(ended)} of {len(ids)} workflows did not end in {timeout_s}s; "
            f"one of them: {json.dumps(stuck)[:2000]}"
        )

    async def decide(self, pending: dict[str, Any], decision: str, comment: str) -> None:
        # The gateway reads the approval from the read model first: on a loaded machine it
        # may say 503 with Retry-After, and a decision asked again is the same decision.
        response = await honouring_retry_after(
            lambda: self.http.post(
                f"{self.stack.api_url}/v1/approvals/{pending['approval_id']}",
                json={"decision": decision, "comment": comment},
                headers=KEYS_BY_TIER[pending["tier"]],
            )
        )
        assert response.status_code == 202, response.text

    async def waiting_for_review(self, ids: set[str]) -> list[str]:
        """Those of ``ids`` waiting for a reviewer to answer a failed reading."""
        bodies = await asyncio.gather(*map(self.workflow, sorted(ids)))
        return [
            b["workflow_id"]
            for b in bodies
            if ((b.get("pending_approval") or {}).get("approval_id") or "").startswith("review-")
        ]

    async def pins(self, conn: asyncpg.Connection, ids: list[str]) -> dict[str, str]:
        rows = await conn.fetch(
            """SELECT workflow_id, release FROM rollout_service.assignments
               WHERE service = 'invoice_agent' AND workflow_id = ANY($1::text[])""",
            ids,
        )
        return {r["workflow_id"]: r["release"] for r in rows}


def small_invoice(run: str) -> dict[str, Any]:
    """A small invoice: a manager approves it (each procurement needs a person), no director."""
    return procurement(run, po=PO["po_number"], total="12.40", line="4 x GPU hours @ 3.10 EUR")


@pytest.fixture(scope="module")
async def rollouts(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[Rollouts]:
    tmp = tmp_path_factory.mktemp("rollouts")
    service_env = {
        "budget_agent": {
            "CHORUS_PURCHASE_ORDERS": json.dumps([PO]),
            "CHORUS_BUDGETS": json.dumps({"cc-rollout": 1_000_000_000}),
        },
        # A canary's failure share is exported from the round that rolls it back until the
        # next round: three seconds are three of Prometheus's one-second scrapes and rule
        # evaluations, so the worse-than-stable alert is seen to fire (at one, CI missed it).
        "rollout_service": {"CHORUS_JUDGE_INTERVAL_S": "3"},
        # Two hundred submissions, then polling each: above a submitter's usual rate.
        "gateway": {"CHORUS_API_RATE_PER_S": "1000", "CHORUS_API_BURST": "1000"},
        # The release in the service's own group plays the one before invoice.validated
        # v3: it still publishes v2, which every consumer reads beside v3 (upcast).
        "invoice_agent": {"CHORUS_VALIDATED_VERSION": "2"},
        # (Each release inherits the service's settings; the new ones publish v3.)
        release_proc("invoice_agent", CANARY): {"CHORUS_VALIDATED_VERSION": "3"},
        # The release under trial in the rollback test talks to a new model that cannot
        # read three documents in ten.
        release_proc("invoice_agent", FLAKY): {
            "CHORUS_LLM_MODEL": "flaky-30",
            "CHORUS_VALIDATED_VERSION": "3",
        },
    }
    async with (
        own_stack(
            tmp,
            kafka_bootstrap,
            database_url,
            name="rollouts",
            services=SERVICES,
            env={"CHORUS_RELEASE_REPORT_S": "1"},
            service_env=service_env,
            releases={"invoice_agent": (CANARY, FLAKY)},
        ) as own,
        # Idle connections go before the server's keep-alive closes them (api_client): this
        # client polls for minutes, and a request on a connection being closed is a ReadError.
        # It polls 50 workflows at once through the gateway to the audit projector: on a
        # loaded machine (another test's stack starting beside this one) an answer took over
        # 10 s. The polls' own deadline bounds the test; one slow answer is not a failure.
        api_client(timeout=60.0) as http,
    ):
        with prometheus(tmp / "prometheus", own.stack.scrape_targets(), waits=False) as url:
            yield Rollouts(own.stack, http, own.database_url, url)


@pytest.fixture
async def services_pg(rollouts: Rollouts) -> AsyncIterator[asyncpg.Connection]:
    async with connected(rollouts.database_url) as conn:
        yield conn


async def test_a_canary_takes_its_share_and_after_promotion_everything_each_workflow_on_one_release(
    rollouts: Rollouts, services_pg: asyncpg.Connection
) -> None:
    policy = await rollouts.change(
        "start", {"stable": STABLE, "canary": CANARY, "percent": 20, "reason": "a new extraction prompt"}
    )
    assert (policy["status"], policy["revision"]) == ("canary", 1)
    await rollouts.followed(1)
    before = await rollouts.submit(100)

    # Promoted from the command line while the first hundred are still running.
    env = {"CHORUS_ROLLOUT_URL": rollouts.url}
    code, out, err = await chorus("rollout", "promote", "invoice_agent", "--reason", "looks good", env=env)
    assert code == 0, err
    assert f"promoted: new workflows go to {CANARY}" in out
    await rollouts.followed(2)
    after = await rollouts.submit(100)

    ended = await rollouts.all_end(before + after)
    assert {body["status"] for body in ended.values()} == {"completed"}  # nothing lost

    pins = await rollouts.pins(services_pg, before + after)
    assert set(pins) == set(before + after)
    on_canary = [w for w in before if pins[w] == CANARY]
    assert 5 <= len(on_canary) <= 40, f"{len(on_canary)} of 100 on a 20% canary"
    assert {pins[w] for w in after} == {CANARY}  # promoted: every new one

    # The audit log: each step of the invoice agent was taken by the release the workflow
    # was pinned to, and by it alone. The new release publishes invoice.validated v3, the
    # old one v2, side by side; the budget agent read both (every workflow completed).
    for workflow_id, body in ended.items():
        versions = {e["producer_version"] for e in body["timeline"] if e["producer"] == "invoice_agent"}
        assert versions == {VERSION_OF[pins[workflow_id]]}, (workflow_id, versions)
        [validated] = [e for e in body["timeline"] if e["event_type"] == "invoice.validated"]
        assert validated["schema_version"] == (2 if pins[workflow_id] == STABLE else 3)
        if validated["schema_version"] == 3:
            assert validated["payload"]["reading"] == {"model": "gpt-4o-mini", "attempts": 1}
    inbox = await services_pg.fetch(
        """SELECT workflow_id, event_id, array_agg(consumer_group || ':' || outcome) AS rows
           FROM invoice_agent.inbox WHERE workflow_id = ANY($1::text[]) GROUP BY workflow_id, event_id""",
        before + after,
    )
    assert inbox
    for row in inbox:
        mine = (
            "invoice_agent"
            if pins[row["workflow_id"]] == STABLE
            else f"invoice_agent.{pins[row['workflow_id']]}"
        )
        outcomes = dict(item.split(":") for item in row["rows"])
        # Taken by the owner: handled, or (an event on another topic trailing the workflow's
        # end: an approval.decided read after workflow.ended) recorded as arrived after the end.
        assert outcomes.pop(mine) in {"done", "dropped"}, row
        assert set(outcomes.values()) == {"not_mine"}, row  # both other releases let it pass
    # No duplicate effects: one reading of each invoice, one payment each.
    stats = await rollouts.stack.sandbox_stats()
    assert stats["llm_calls"]["extract_invoice"] == 200  # type: ignore[index]
    paid = [p["invoice_id"] for p in stats["payments"]["by_key"].values()]  # type: ignore[index]
    assert len(paid) == len(set(paid)) == 200

    status = await rollouts.status()
    releases = {r["release"]: r for r in status["releases"]}
    assert releases[CANARY]["role"] == "stable"
    assert releases[STABLE]["role"] == "idle"  # drained: safe to stop
    assert releases[STABLE]["workflows"] == 100 - len(on_canary)
    assert releases[CANARY]["workflows"] == 100 + len(on_canary)
    for release in (STABLE, CANARY):
        assert releases[release]["in_flight"] == 0
        assert releases[release]["completion_rate"] == 1.0
        assert releases[release]["running"] and releases[release]["p50_ms"] is not None
    assert [(c["action"], c["actor"]) for c in status["history"]] == [
        ("promote", OPERATOR_NAME),
        ("start", OPERATOR_NAME),
    ]

    # Outcome analytics by release, from the command line: each release's workflows, ended.
    analytics = {"CHORUS_ANALYTICS_URL": rollouts.analytics_url}
    wanted = {STABLE: 100 - len(on_canary), CANARY: 100 + len(on_canary)}

    async def by_release() -> dict[str, Any]:
        code, out, err = await chorus(
            "rollout", "outcomes", "invoice_agent", "--output", "json", env=analytics
        )
        assert code == 0, err
        return {r["release"]: r for r in json.loads(out)["releases"] if r["workflow_type"] == "procurement"}

    def counted(rows: dict[str, Any]) -> bool:
        return {release: r["ended"]["completed"] for release, r in rows.items()} == wanted

    try:
        rows = await wait_until(
            by_release, until=counted, timeout_s=60, interval_s=1.0, what="analytics by release"
        )
    except AssertionError as exc:
        # What the view had read and folded says whether it lagged or lost a record.
        analytics_proc = rollouts.stack.procs["outcome_analytics"]
        health = (await rollouts.http.get(analytics_proc.health_url or "")).text
        raise AssertionError(f"{exc}\nhealth: {health}\n{analytics_proc.tail(60)}") from None
    assert {r: (rows[r]["started"], rows[r]["completion_rate"]) for r in rows} == {
        STABLE: (wanted[STABLE], 1.0),
        CANARY: (wanted[CANARY], 1.0),
    }


async def test_a_canary_failing_a_third_of_its_workflows_is_rolled_back_by_the_rule(
    rollouts: Rollouts, services_pg: asyncpg.Connection
) -> None:
    """The stable release is now 0.2.0 (promoted above); 0.3.0 reads with a model that fails
    on 30% of documents. The policy for its in-flight workflows: they stay pinned to it and
    finish there (a reading it failed waits for a reviewer, as any semantic failure does),
    unless an operator removing the canary moves them: then their next step is stable's."""
    rule = {"failure_margin": 0.1, "min_workflows": 12}
    policy = await rollouts.change("start", {"canary": FLAKY, "percent": 50, "auto_rollback": rule})
    assert (policy["stable"], policy["canary"]) == (CANARY, FLAKY)
    await rollouts.followed(policy["revision"])
    ids = await rollouts.submit(80)

    async def rolled_back() -> bool:
        return bool((await rollouts.status())["policy"]["status"] == "rolled_back")

    try:
        await wait_until(rolled_back, timeout_s=180, interval_s=1.0, what="the rule rolling the canary back")
    except AssertionError as exc:
        releases = (await rollouts.status())["releases"]
        raise AssertionError(f"{exc}; releases: {json.dumps(releases)}") from None
    status = await rollouts.status()
    last = status["history"][0]
    assert (last["action"], last["actor"]) == ("auto_rollback", "rollout_service")
    assert f"canary {FLAKY}" in last["reason"] and "failed" in last["reason"], last["reason"]
    # The operators' alerts, in a Prometheus scraping every process as a deployment does
    # (the rules as shipped): both name the canary's service and release, not the rollout
    # service that exports the numbers.
    fired = await labels_of(
        rollouts.prometheus, 'ALERTS{alertname="ChorusCanaryRolledBack"}', what="the rolled-back alert"
    )
    assert [(a["service_name"], a["service_release"]) for a in fired] == [("invoice_agent", FLAKY)], fired
    worse = await labels_of(
        rollouts.prometheus,
        'max_over_time(ALERTS{alertname="ChorusCanaryWorseThanStable", alertstate="firing"}[1h])',
        what="the canary-worse-than-stable alert, while the canary ran",
    )
    assert [a["service_name"] for a in worse] == ["invoice_agent"], worse

    # The canary is to go before its workflows end: the operator moves some of those waiting
    # for a reviewer to stable, from the command line; the canary hands each over.
    # The rollout service learns where each went from workflow.started, on its own time.
    pins = await wait_until(
        lambda: rollouts.pins(services_pg, ids),
        until=lambda found: set(found) == set(ids),
        what="the release of each workflow",
    )
    on_canary = {w for w in ids if pins[w] == FLAKY}
    waiting = await wait_until(
        lambda: rollouts.waiting_for_review(on_canary), timeout_s=60, what="canary workflows awaiting review"
    )
    moved = waiting[:3]
    env = {"CHORUS_ROLLOUT_URL": rollouts.url}
    for workflow_id in moved:
        code, out, err = await chorus(
            "rollout",
            "repin",
            "invoice_agent",
            workflow_id,
            "--to",
            CANARY,
            "--reason",
            "removing 0.3.0",
            env=env,
        )
        assert code == 0, (out, err)
        assert f"{workflow_id} {FLAKY} -> {CANARY}: repinned" in out

    # Every workflow ends: a manager answers the canary's reviews and every payment approval.
    ended = await rollouts.all_end(ids)
    assert {b["status"] for b in ended.values()} == {"completed"}
    reviewed = {
        w for w, b in ended.items() if any(e["event_type"] == "review.requested" for e in b["timeline"])
    }
    assert reviewed and reviewed < on_canary  # only the canary failed, and not always
    for workflow_id, body in ended.items():
        steps = [e["producer_version"] for e in body["timeline"] if e["producer"] == "invoice_agent"]
        if workflow_id in moved:
            # Read (and failed) by the canary; the reviewer's answer taken by stable, once.
            assert steps[0] == VERSION_OF[FLAKY] and steps[-1] == VERSION_OF[CANARY], (workflow_id, steps)
            assert len([e for e in body["timeline"] if e["event_type"] == "invoice.validated"]) == 1
        else:
            assert set(steps) == {VERSION_OF[pins[workflow_id]]}, (
                workflow_id,
                steps,
            )  # after the rollback too
    assert set((await rollouts.pins(services_pg, moved)).values()) == {CANARY}
    moves = {m["workflow_id"]: m for m in (await rollouts.status())["repins"]}
    for workflow_id in moved:  # the audit of moves: who, why, and the canary's answer
        m = moves[workflow_id]
        assert (m["requested_by"], m["reason"], m["outcome"], m["answered_by"]) == (
            OPERATOR_NAME,
            "removing 0.3.0",
            "repinned",
            FLAKY,
        )

    # New workflows go to stable again, and complete there.
    await rollouts.followed(status["policy"]["revision"])
    later = await rollouts.submit(10)
    assert {b["status"] for b in (await rollouts.all_end(later)).values()} == {"completed"}
    # The rollout service learns where each went from workflow.started, on its own time.
    pins = await wait_until(
        lambda: rollouts.pins(services_pg, later),
        until=lambda found: set(found) == set(later),
        timeout_s=60,
        what="the rollout service's record of where the new workflows went",
    )
    assert set(pins.values()) == {CANARY}


async def test_a_bulk_repin_by_query_moves_each_waiting_canary_workflow_once_and_records_refusals(
    rollouts: Rollouts, services_pg: asyncpg.Connection
) -> None:
    """The canary (0.3.0) takes every new workflow again; three, found by their amount (unique
    to this run), wait for a person. A bulk repin to a release the rollout does not have is
    refused by the rollout service for each, among the moves with why; the bulk repin to
    stable (the CLI's) moves each once, as the operator and naming the bulk action; all
    three, read by the canary, complete pinned to stable."""
    policy = await rollouts.change("start", {"canary": FLAKY, "percent": 100})
    await rollouts.followed(policy["revision"])
    stable = policy["stable"]  # 0.2.0 after the tests above
    run = uuid.uuid4().hex[:8]
    total = f"{10 + int(run[:4], 16) % 9000 / 100:.2f}"  # this run's own amount
    url = f"{rollouts.stack.api_url}/v1/workflows/procurement"
    bodies = [
        procurement(f"{run}{i}", po=PO["po_number"], total=total, line=f"1 x GPU hours @ {total} EUR")
        for i in range(3)
    ]
    ids = [await accepted(rollouts.http, url, body, SUBMITTER) for body in bodies]
    query = f"amount = {round(float(total) * 100)} AND status = 'waiting'"

    async def found() -> set[str]:
        listed = await rollouts.http.get(
            f"{rollouts.stack.api_url}/v1/workflows", params={"query": query}, headers=OPERATOR
        )
        return {w["workflow_id"] for w in listed.json()["workflows"]}

    await wait_until(found, until=lambda f: f == set(ids), timeout_s=120, what="three waiting workflows")
    assert set((await rollouts.pins(services_pg, ids)).values()) == {FLAKY}

    async def bulk(body: dict[str, Any]) -> str:
        created = await rollouts.http.post(
            f"{rollouts.stack.api_url}/v1/bulk-actions",
            json={"action": "repin", "service": "invoice_agent", "query": query, **body},
            headers=OPERATOR,
        )
        assert created.status_code == 202, created.text
        return str(created.json()["bulk_id"])

    async def moves(bulk_id: str) -> dict[str, dict[str, Any]]:
        listed = (await rollouts.status())["repins"]
        return {m["workflow_id"]: m for m in listed if bulk_id in m["reason"]}

    nowhere = await bulk({"to_release": "9.9.9", "reason": "a typo"})
    refused = await wait_until(
        lambda: moves(nowhere), until=lambda m: set(m) == set(ids), timeout_s=60, what="the refusals"
    )
    assert {(m["outcome"], m["requested_by"]) for m in refused.values()} == {("refused", OPERATOR_NAME)}
    assert all("'9.9.9' is not a release" in m["refusal"] for m in refused.values()), refused

    code, out, err = await chorus(
        "workflows",
        "bulk-repin",
        "--query",
        query,
        "--service",
        "invoice_agent",
        "--to",
        stable,
        "--reason",
        "retiring 0.3.0",
        "--output",
        "json",
        env={"CHORUS_GATEWAY_URL": rollouts.stack.api_url},
    )
    assert code == 0, (out, err)
    moved_by = json.loads(out)["bulk_id"]
    moved = await wait_until(
        lambda: moves(moved_by),
        until=lambda m: set(m) == set(ids) and all(v["outcome"] != "pending" for v in m.values()),
        timeout_s=60,
        what="the moves answered",
    )
    assert {(m["outcome"], m["from_release"], m["to_release"]) for m in moved.values()} == {
        ("repinned", FLAKY, stable)
    }, moved
    assert all(m["reason"] == f"retiring 0.3.0 (bulk action {moved_by})" for m in moved.values())
    assert set((await rollouts.pins(services_pg, ids)).values()) == {stable}
    ended = await rollouts.all_end(ids)
    assert {b["status"] for b in ended.values()} == {"completed"}
    for workflow_id, body in ended.items():
        read = [e["producer_version"] for e in body["timeline"] if e["producer"] == "invoice_agent"]
        assert read[0] == VERSION_OF[FLAKY], (workflow_id, read)  # read before the move
    # Each moved once: the refused action moved nothing, the second one each workflow once.
    asked = await services_pg.fetchval(
        "SELECT count(*) FROM rollout_service.repins WHERE workflow_id = ANY($1) AND outcome = 'repinned'",
        ids,
    )
    assert asked == 3
