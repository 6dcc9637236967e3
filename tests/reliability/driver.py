"""The outside world of a deployment: submitters and reviewers, over the gateway's HTTP API.

The driver submits the three reference workflows (an Idempotency-Key on every submission,
so a retry after a killed gateway never starts a second workflow), approves pending
approvals the way reviewers would (one operator listing of every tier, then a decision
with the tier's own key), and watches each workflow until it settles: terminal, or
waiting at the gate a scenario deliberately leaves it at.

Everything it does tolerates the gateway being down: calls are retried, polls skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from tests.support.submissions import procurement

log = logging.getLogger("reliability.driver")

TERMINAL = frozenset({"completed", "rejected", "failed", "compensated", "timed_out", "cancelled"})
SUBMITTER = "demo-submitter-key"
OPERATOR = "demo-operator-key"
REVIEWER_KEYS = {
    "manager": "demo-manager-key",
    "director": "demo-director-key",
    "editor": "demo-editor-key",
}
APPROVE_ALL = frozenset(REVIEWER_KEYS)
SUBMIT_TIMEOUT_S = 180.0

Kind = Literal["procurement", "research_report", "support_ticket"]
KINDS: tuple[Kind, ...] = ("procurement", "research_report", "support_ticket")


@dataclass
class Tracked:
    """One submitted workflow and what the scenario expects of it."""

    workflow_id: str
    kind: Kind
    token: str
    """Unique per workflow: the invoice id (procurement), the report topic, the customer
    (support ticket)."""
    scenario: str
    expect_outcome: str | None
    """The terminal status it must end with; None when it must wait at ``expect_gate``."""
    expect_gate: str | None
    approve_tiers: frozenset[str]
    submitted_at: float
    settled_at: float | None = None
    """Monotonic time the driver first saw it terminal (or at its gate)."""
    status: str | None = None
    last: dict[str, Any] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL

    @property
    def at_gate(self) -> bool:
        pending = self.last.get("pending_approval") or {}
        return self.status == "waiting" and pending.get("tier") == self.expect_gate

    @property
    def settled(self) -> bool:
        return self.ended if self.expect_gate is None else (self.at_gate or self.ended)


def invoice_id(token: str) -> str:
    return f"INV-{token}"


def report_topic(token: str) -> str:
    return f"reliability report {token}"


def procurement_body(token: str, sandbox: str) -> dict[str, Any]:
    return {**procurement(token, number=invoice_id(token)), "callback_url": f"{sandbox}/hooks/procurement"}


def report_body(token: str, sandbox: str) -> dict[str, Any]:
    # beta answers 503 to every other request per topic (the sandbox runs with --flaky-source beta),
    # so reports also take the durable-retry path through the timer service.
    return {
        "input": {
            "topic": report_topic(token),
            "sources": [{"name": n, "url": f"{sandbox}/sources/{n}"} for n in ("alpha", "beta", "gamma")],
            "delivery_url": f"{sandbox}/deliveries",
        },
        "callback_url": f"{sandbox}/hooks/report",
    }


def customer_id(token: str) -> str:
    return f"cust-{token}"


SUPPORT_REFUND_CENTS = 24_000
"""Above the triage agent's threshold: every ticket waits for a manager's approval."""


def support_body(token: str, sandbox: str) -> dict[str, Any]:
    return {
        "input": {
            "customer_id": customer_id(token),
            "subject": f"Refund for order {token}",
            "body": "I was charged twice; please refund the second charge.",
            "refund_cents": SUPPORT_REFUND_CENTS,
        },
        "callback_url": f"{sandbox}/hooks/support",
    }


BODIES = {"procurement": procurement_body, "research_report": report_body, "support_ticket": support_body}


class Driver:
    def __init__(self, api_url: str, sandbox_url: str, *, poll_s: float = 0.7) -> None:
        self.api_url = api_url
        self.sandbox_url = sandbox_url
        self.poll_s = poll_s
        self.http = httpx.AsyncClient(base_url=api_url, timeout=10.0)
        self.workflows: list[Tracked] = []
        self._decided: set[tuple[str, int]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.submit_retries = 0
        self.replayed_submissions = 0

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._approve_forever(), name="driver-approver"),
            asyncio.create_task(self._poll_forever(), name="driver-poller"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.http.aclose()

    # -- submitting ---------------------------------------------------------------------------

    async def submit(
        self,
        kind: Kind,
        scenario: str,
        *,
        expect_outcome: str | None = "completed",
        expect_gate: str | None = None,
        approve_tiers: Iterable[str] = APPROVE_ALL,
        total: str | None = None,
        line: str | None = None,
    ) -> Tracked:
        """POST a workflow, retrying through gateway outages with the same Idempotency-Key;
        a procurement of ``total`` EUR whose document has ``line``, when given."""
        token = uuid.uuid4().hex[:12]
        body = BODIES[kind](token, self.sandbox_url)
        if kind == "procurement" and total is not None and line is not None:
            document = procurement(token, number=invoice_id(token), total=total, line=line)
            body = {**body, "input": document["input"]}
        if kind == "support_ticket":  # a customer of its own, so its replies are its alone
            await self._add_customer(token)
        headers = {"Authorization": f"Bearer {SUBMITTER}", "Idempotency-Key": f"reliability-{token}"}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SUBMIT_TIMEOUT_S
        last_error = ""
        while loop.time() < deadline:
            try:
                response = await self.http.post(f"/v1/workflows/{kind}", json=body, headers=headers)
            except httpx.HTTPError as exc:
                last_error = repr(exc)
            else:
                if response.status_code == 202:
                    if response.headers.get("idempotent-replayed") == "true":
                        self.replayed_submissions += 1
                    tracked = Tracked(
                        workflow_id=response.json()["workflow_id"],
                        kind=kind,
                        token=token,
                        scenario=scenario,
                        expect_outcome=expect_outcome,
                        expect_gate=expect_gate,
                        approve_tiers=frozenset(approve_tiers),
                        submitted_at=time.monotonic(),
                    )
                    self.workflows.append(tracked)
                    return tracked
                if response.status_code < 500 and response.status_code != 429:
                    raise AssertionError(f"gateway refused a {kind} submission: {response.text[:500]}")
                last_error = f"{response.status_code} {response.text[:200]}"
            self.submit_retries += 1
            await asyncio.sleep(0.5)
        raise AssertionError(f"no gateway accepted a {kind} submission for {SUBMIT_TIMEOUT_S}s: {last_error}")

    async def _add_customer(self, token: str) -> None:
        customer = {"customer_id": customer_id(token), "name": f"Customer {token}", "plan": "pro"}
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.post(f"{self.sandbox_url}/crm/customers", json=customer)
            response.raise_for_status()

    async def submit_many(self, count: int, scenario: str, **expect: Any) -> list[Tracked]:
        """``count`` workflows, taking the types in turn (procurement first)."""
        kinds = itertools.islice(itertools.cycle(KINDS), count)
        return list(await asyncio.gather(*(self.submit(kind, scenario, **expect) for kind in kinds)))

    @contextlib.asynccontextmanager
    async def trickle(self, scenario: str, every_s: float, limit: int) -> AsyncIterator[list[Tracked]]:
        """Background load for a fault phase: one workflow every ``every_s`` (the types in
        turn) until the block ends or ``limit`` were submitted, so that a fault armed at
        some step always finds traffic reaching that step."""
        submitted: list[Tracked] = []

        async def feed() -> None:
            for kind in itertools.islice(itertools.cycle(KINDS), limit):
                submitted.append(await self.submit(kind, scenario))
                await asyncio.sleep(every_s)

        task = asyncio.create_task(feed(), name=f"trickle-{scenario}")
        try:
            yield submitted
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def of(self, scenario: str) -> list[Tracked]:
        return [w for w in self.workflows if w.scenario == scenario]

    # -- bulk actions -----------------------------------------------------------------------------

    async def bulk(self, body: dict[str, Any], *, key: str) -> str:
        """An operator's bulk action (POST /v1/bulk-actions), retried with the same key through
        gateway outages; its id."""
        headers = {"Authorization": f"Bearer {OPERATOR}", "Idempotency-Key": key}
        for _ in range(60):
            try:
                response = await self.http.post(
                    "/v1/bulk-actions", json={**body, "rate_per_s": 2}, headers=headers
                )
            except httpx.HTTPError:
                await asyncio.sleep(1.0)
                continue
            if response.status_code == 202:
                return str(response.json()["bulk_id"])
            if response.status_code < 500:
                raise AssertionError(f"gateway refused a bulk action: {response.text[:500]}")
            await asyncio.sleep(1.0)
        raise AssertionError("the gateway never took the bulk action")

    async def bulk_finished(self, bulk_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The bulk action once it finished (None when it did not within ``timeout_s``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            try:
                response = await self.http.get(
                    f"/v1/bulk-actions/{bulk_id}", headers={"Authorization": f"Bearer {OPERATOR}"}
                )
                body: dict[str, Any] = response.json() if response.status_code == 200 else {}
            except (httpx.HTTPError, ValueError):
                body = {}
            if body.get("finished_at"):
                return body
            await asyncio.sleep(1.0)
        return None

    async def bulk_done(self, bulk_ids: list[str], *, at_least: int, timeout_s: float) -> int:
        """How many items of the actions are done, once at least ``at_least`` are (or at the
        timeout)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        done = 0
        while loop.time() < deadline:
            done = 0
            for bulk_id in bulk_ids:
                try:
                    response = await self.http.get(
                        f"/v1/bulk-actions/{bulk_id}", headers={"Authorization": f"Bearer {OPERATOR}"}
                    )
                    done += int(response.json().get("done", 0)) if response.status_code == 200 else 0
                except (httpx.HTTPError, ValueError):
                    pass
            if done >= at_least:
                return done
            await asyncio.sleep(0.2)
        return done

    # -- resets ---------------------------------------------------------------------------------

    async def reset_to(self, workflow_id: str, event_type: str, *, key: str, reason: str) -> str:
        """An operator's reset of the workflow to its live ``event_type`` event, retried
        with the same key through gateway outages (a retry answers with the first); its id."""
        headers = {"Authorization": f"Bearer {OPERATOR}"}
        last = ""
        for _ in range(60):
            try:
                status = await self.http.get(f"/v1/workflows/{workflow_id}", headers=headers)
                point = next(
                    e["event_id"]
                    for e in status.json()["timeline"]
                    if e["event_type"] == event_type and e["undone_by"] is None
                )
                response = await self.http.post(
                    f"/v1/workflows/{workflow_id}/reset",
                    json={"event_id": point, "reason": reason},
                    headers={**headers, "Idempotency-Key": key},
                )
            except (httpx.HTTPError, StopIteration, ValueError, KeyError) as exc:
                last = repr(exc)
                await asyncio.sleep(1.0)
                continue
            if response.status_code in (200, 202):
                return str(response.json()["reset_id"])
            if response.status_code < 500:
                raise AssertionError(f"gateway refused a reset of {workflow_id}: {response.text[:500]}")
            last = f"{response.status_code} {response.text[:200]}"
            await asyncio.sleep(1.0)
        raise AssertionError(f"the gateway never took the reset of {workflow_id}: {last}")

    async def reset_applied(self, workflow_id: str, reset_id: str, service: str, timeout_s: float) -> bool:
        """True once ``service`` said what ``reset_id`` did and the workflow waits on its manager
        again, with one live reservation (the step handled again)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        headers = {"Authorization": f"Bearer {OPERATOR}"}
        while loop.time() < deadline:
            try:
                status = (await self.http.get(f"/v1/workflows/{workflow_id}", headers=headers)).json()
            except (httpx.HTTPError, ValueError):
                status = {}
            timeline = status.get("timeline") or []
            answered = any(
                e["event_type"] == "workflow.reset_applied"
                and e["payload"].get("reset_id") == reset_id
                and e["payload"].get("service") == service
                for e in timeline
            )
            held = [e for e in timeline if e["event_type"] == "budget.reserved" and e["undone_by"] is None]
            waiting = (status.get("pending_approval") or {}).get("tier") == "manager"
            if answered and len(held) == 1 and waiting:
                return True
            await asyncio.sleep(0.5)
        return False

    async def wait_waiting_for(self, workflows: list[Tracked], what: str, timeout_s: float) -> bool:
        """True once every workflow waits for ``what`` (its status's waiting_for)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pending = {w.workflow_id for w in workflows}
        while pending and loop.time() < deadline:
            for workflow_id in list(pending):
                try:
                    response = await self.http.get(
                        f"/v1/workflows/{workflow_id}", headers={"Authorization": f"Bearer {SUBMITTER}"}
                    )
                except httpx.HTTPError:
                    continue
                if response.status_code == 200 and response.json().get("waiting_for") == what:
                    pending.discard(workflow_id)
            await asyncio.sleep(0.5)
        return not pending

    # -- waiting --------------------------------------------------------------------------------

    async def wait_settled(self, workflows: list[Tracked], timeout_s: float) -> bool:
        """True once every workflow is terminal (or at its expected gate)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if all(w.settled for w in workflows):
                return True
            await asyncio.sleep(0.3)
        return all(w.settled for w in workflows)

    async def wait_gate(self, workflows: list[Tracked], tier: str, timeout_s: float) -> bool:
        """True once every workflow waits on ``tier`` (a scenario's deliberate pause)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s

        def waiting(w: Tracked) -> bool:
            pending = w.last.get("pending_approval") or {}
            return w.status == "waiting" and pending.get("tier") == tier

        while loop.time() < deadline:
            if all(waiting(w) for w in workflows):
                return True
            await asyncio.sleep(0.3)
        return False

    # -- background loops ------------------------------------------------------------------------

    async def _approve_forever(self) -> None:
        while True:
            try:
                await self._approve_round()
            except httpx.HTTPError:
                pass  # the gateway is down (a scenario killed it); next round
            except Exception:
                log.exception("approver round failed")
            await asyncio.sleep(0.4)

    async def _approve_round(self) -> None:
        by_id = {w.workflow_id: w for w in self.workflows if not w.ended}
        if not by_id:
            return
        response = await self.http.get(
            "/v1/approvals", params={"assignee": "all"}, headers={"Authorization": f"Bearer {OPERATOR}"}
        )
        if response.status_code != 200:
            return
        for item in response.json().get("approvals", []):
            tracked = by_id.get(item.get("workflow_id", ""))
            tier = item.get("tier") or ""
            key = (str(item.get("approval_id")), int(item.get("level") or 0))
            if tracked is None or tier not in tracked.approve_tiers or key in self._decided:
                continue
            decided = await self.http.post(
                f"/v1/approvals/{key[0]}",
                json={"decision": "approve", "comment": "reliability suite"},
                headers={"Authorization": f"Bearer {REVIEWER_KEYS[tier]}"},
            )
            # 202 decided now; 409 decided before (a retry after a lost answer). 403 means
            # it escalated meanwhile: the next round sees the new tier.
            if decided.status_code in (202, 409):
                self._decided.add(key)
                tracked.decisions.append(f"{tier}:{decided.status_code}")

    async def _poll_forever(self) -> None:
        while True:
            pending = [w for w in self.workflows if not w.settled]
            if pending:
                await asyncio.gather(*(self._poll(w) for w in pending))
            await asyncio.sleep(self.poll_s)

    async def _poll(self, tracked: Tracked) -> None:
        try:
            response = await self.http.get(
                f"/v1/workflows/{tracked.workflow_id}", headers={"Authorization": f"Bearer {SUBMITTER}"}
            )
        except httpx.HTTPError:
            return
        if response.status_code != 200:
            return
        body: dict[str, Any] = response.json()
        body.pop("timeline", None)  # large, and the reconciler reads the projection itself
        tracked.last = body
        tracked.status = str(body.get("status"))
        if tracked.settled and tracked.settled_at is None:
            tracked.settled_at = time.monotonic()

    async def sandbox_stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.get(f"{self.sandbox_url}/stats")
            response.raise_for_status()
            stats: dict[str, Any] = response.json()
            # The support project's helpdesk (its sandbox module): the replies sent, by key.
            replies = await client.get(f"{self.sandbox_url}/helpdesk/replies")
            replies.raise_for_status()
            stats["helpdesk"] = replies.json()
            # And its CRM's notes, which the triage agent's loop writes (one per ticket, by key).
            notes = await client.get(f"{self.sandbox_url}/crm/notes")
            notes.raise_for_status()
            stats["crm_notes"] = notes.json()
            return stats
