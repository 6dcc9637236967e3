"""`make demo`: the main job, end to end, on this machine.

Starts every service as its own process (Kafka and PostgreSQL are already up),
submits a procurement, a research report and two support tickets over HTTP, waits at
the approval gates (the procurement's manager window is shortened so that it visibly
escalates to the director), approves as the reviewers would, redrives the ticket of a
customer the CRM did not know once the customer is added, and prints each workflow's
timeline, the payment provider's request count and one summary line.

With ``--compose`` it drives docker-compose.yml's stack instead, already up, on the ports
that file publishes (README.md, Docker).

The support tickets are the third reference workflow, a project of its own
(examples/support, written by following docs/tutorial.md) that runs beside the platform.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from chorus.tools.devstack import REFERENCE_PROJECT, ROOT, DevStack

SUBMITTER = "demo-submitter-key"
MANAGER = "demo-manager-key"
DIRECTOR = "demo-director-key"
EDITOR = "demo-editor-key"
OPERATOR = "demo-operator-key"
MANAGER_WINDOW_S = 4
DEMO_RULE = "make demo,"
"""How the approval-policy rule each demo adds begins (the next demo replaces it)."""
REPLY_WITHIN_S = 3
"""The support ticket's reply-due timer: it fires while the refund waits for the manager."""
TERMINAL = {"completed", "rejected", "failed", "compensated", "timed_out", "cancelled", "erased"}

console = Console(highlight=False, width=110)


def demo_cost_center(run: str) -> str:
    # A cost center (and budget) per run: the budgets live in the shared database and a
    # paid invoice spends them, so one shared cost center would run dry after ~40 demos
    # and the budget agent would reject every later one.
    return f"cc-demo-{run}"


def demo_purchase_order(run: str) -> dict[str, Any]:
    # On record with the budget agent (CHORUS_PURCHASE_ORDERS), billing this run's cost center.
    return {
        "po_number": f"PO-{run}",
        "vendor_id": "vendor-acme",
        "currency": "EUR",
        "total_cents": 150000,
        "cost_center": demo_cost_center(run),
    }


def invoice_input(run: str, po_number: str) -> dict[str, Any]:
    return {
        "invoice_id": f"INV-{run}",
        "vendor_id": "vendor-acme",
        "po_number": po_number,
        "currency": "EUR",
        "total_cents": 124000,
        "document_text": (
            f"INVOICE INV-{run}\nVendor: vendor-acme\nPO: {po_number}\n"
            "40 x GPU hours @ 31.00 EUR\nTotal: 1240.00 EUR"
        ),
        "requester_ref": "subject:requester-0042",
    }


SOURCES_WITHIN_S = 5.0
"""The report's sources stage deadline; the straggling source answers long after it."""


def report_input(sandbox: str) -> dict[str, Any]:
    # beta fails its first call (retried with backoff); delta straggles past the stage's deadline.
    queries = {"alpha": "", "beta": "", "gamma": "", "delta": f"?delay={SOURCES_WITHIN_S * 3:g}"}
    return {
        "topic": "Durable execution for long-running AI agents",
        "sources": [{"name": n, "url": f"{sandbox}/sources/{n}{q}"} for n, q in queries.items()],
        "required_sections": ["Summary", "Findings", "Sources"],
        "min_words": 80,
        "delivery_url": f"{sandbox}/deliveries",
        "sources_within_s": SOURCES_WITHIN_S,
    }


def ticket_input(run: str, customer_id: str, refund_cents: int) -> dict[str, Any]:
    return {
        "customer_id": customer_id,
        "subject": f"Refund for order {run}",
        "body": "I was charged twice for my subscription; please refund the second charge.",
        "refund_cents": refund_cents,
    }


@dataclass(frozen=True)
class Target:
    """The stack the demo drives: where it answers from this machine, the sandbox as its
    services reach it (the URLs a submission names), and the purchase order it invoices."""

    api_url: str
    console_url: str
    deadletters_url: str
    sandbox_url: str
    sandbox_for_services: str
    cost_center: str
    po_number: str
    how_to_run: str
    """How a person starts this stack (the demo's closing hints)."""
    samples: str
    """The sample requests whose URLs lead to this stack's sandbox."""


COMPOSE = Target(
    api_url="http://127.0.0.1:8080",
    console_url="http://127.0.0.1:8120",
    deadletters_url="http://127.0.0.1:8102",
    sandbox_url="http://127.0.0.1:9400",
    # docker-compose.yml's sandbox on the services' network (CHORUS_EGRESS_ALLOW lets them call it).
    sandbox_for_services="http://sandbox:9400",
    # The budget agent's default purchase order and its cost center: a compose stack's budget
    # agent has no per-run ones, as `make demo`'s has.
    cost_center="cc-research",
    po_number="PO-7781",
    how_to_run="`docker compose up`, README.md's Docker",
    samples="deploy/docker/samples",
)
"""docker-compose.yml's stack, on the ports it publishes (`--compose`)."""


class Client:
    def __init__(self, api: str) -> None:
        self.api = api
        self.http = httpx.AsyncClient(base_url=api, timeout=10.0)

    async def post(self, path: str, key: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        return await self.http.post(path, json=body, headers={"Authorization": f"Bearer {key}", **headers})

    async def put(self, path: str, key: str, body: dict[str, Any]) -> httpx.Response:
        return await self.http.put(path, json=body, headers={"Authorization": f"Bearer {key}"})

    async def get(self, path: str, key: str) -> dict[str, Any]:
        response = await self.http.get(path, headers={"Authorization": f"Bearer {key}"})
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    async def wait_for(
        self, workflow_id: str, predicate: Any, what: str, timeout_s: float = 90.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = await self.get(f"/v1/workflows/{workflow_id}", SUBMITTER)
            if predicate(last):
                return last
            await asyncio.sleep(0.3)
        raise RuntimeError(
            f"{workflow_id}: timed out waiting for {what}; last status: {json.dumps(last)[:500]}"
        )


async def give_the_manager_seconds(client: Client, run: str, cost_center: str) -> None:
    """The manager gets a few seconds instead of 8 hours, so the demo escalates: an operator
    adds a rule for this run's cost center to the approval policy (the gate routes by its
    policy, never by the chain a request names). Earlier demos' rules are replaced, so the
    policy does not grow with every run; their cost centers see no new invoices."""
    current = await client.get("/v1/approval-policy", OPERATOR)
    kept = [r for r in current["rules"] if not str(r["name"]).startswith(DEMO_RULE)]
    rule = {
        "name": f"{DEMO_RULE} {run}: the manager has {MANAGER_WINDOW_S} s",
        "workflow_type": "procurement",
        "business_unit": cost_center,
        "chain": [{"tier": "manager", "window_s": MANAGER_WINDOW_S}, {"tier": "director", "window_s": 3600}],
    }
    changed = await client.put(
        "/v1/approval-policy", OPERATOR, {"rules": [rule, *kept], "reason": f"make demo, run {run}"}
    )
    changed.raise_for_status()


def waiting_on(tier: str) -> Any:
    return lambda s: s.get("status") == "waiting" and (s.get("pending_approval") or {}).get("tier") == tier


def timeline_table(title: str, status: dict[str, Any]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("at", "event", "by", "detail"):
        table.add_column(column)
    for item in status.get("timeline", []):
        table.add_row(
            str(item.get("occurred_at", ""))[11:23],
            str(item.get("event_type", "")),
            str(item.get("actor") or item.get("producer") or ""),
            str(item.get("decision") or item.get("external_call") or _detail(item))[:60],
        )
    return table


def _detail(item: dict[str, Any]) -> str:
    """What the research stage's events say: which source, when its fetch began, what is missing."""
    payload = item.get("payload") or {}
    if item.get("event_type") == "source.fetched":
        return f"{payload.get('task')} (fetch began {str(payload.get('started_at', ''))[11:23]})"
    if str(item.get("event_type", "")).startswith("source."):
        return str(payload.get("task", ""))
    if item.get("event_type") == "ticket.answered":
        late = ", late" if payload.get("overdue") else ""
        return f"{payload.get('category')}, refund {payload.get('refund_cents', 0) / 100:.2f}{late}"
    if payload.get("sources_missing"):
        return f"sources missing: {', '.join(payload['sources_missing'])}"
    return ""


async def run_demo(workdir: Path) -> int:
    run = uuid.uuid4().hex[:8]
    # Every process on its documented port, so the console, the CLI and a browser find them
    # while the demo runs.
    stack = DevStack.documented(
        workdir,
        sandbox_args=["--flaky-source", "beta"],
        project=REFERENCE_PROJECT,  # the support workflow's services beside the platform's
        service_env={
            "triage_agent": {"CHORUS_REPLY_WITHIN_S": str(REPLY_WITHIN_S)},
            "budget_agent": {
                "CHORUS_BUDGETS": json.dumps({demo_cost_center(run): 1_000_000}),
                "CHORUS_PURCHASE_ORDERS": json.dumps([demo_purchase_order(run)]),
            },
        },
    )
    console.print(f"[bold]Starting {len(stack.procs)} processes[/] (logs in {workdir})")
    started = time.monotonic()
    dlq = stack.procs["deadletter_service"].health_url.removesuffix("/health")  # type: ignore[union-attr]
    target = Target(
        stack.api_url,
        stack.console_url,
        dlq,
        stack.sandbox_url,
        stack.sandbox_url,
        demo_cost_center(run),
        demo_purchase_order(run)["po_number"],
        "`make up`, then `make services` in another terminal",
        "deploy/local/samples",
    )

    def which_stopped() -> None:
        for name, proc in stack.procs.items():
            if not proc.running:
                console.print(f"[yellow]{name} is not running; last log lines:[/]\n{proc.tail(15)}")

    try:
        await stack.start()
        console.print(
            f"all healthy in {time.monotonic() - started:.1f}s; gateway API at {stack.api_url}, "
            f"console at {stack.console_url}\n"
        )
        return await walk(target, run, started, which_stopped)
    finally:
        await stack.stop()


async def walk(target: Target, run: str, started: float, on_failure: Callable[[], None]) -> int:
    """The demo's workflows on a running stack: submitted, decided, awaited and shown."""
    try:
        client = Client(target.api_url)
        await give_the_manager_seconds(client, run, target.cost_center)

        # 1. Submit both workflows; the procurement twice with one Idempotency-Key.
        procurement_request = {
            "input": invoice_input(run, target.po_number),
            "callback_url": f"{target.sandbox_for_services}/hooks/procurement",
        }
        first = await client.post(
            "/v1/workflows/procurement",
            SUBMITTER,
            procurement_request,
            **{"Idempotency-Key": f"demo-{run}"},
        )
        again = await client.post(
            "/v1/workflows/procurement",
            SUBMITTER,
            procurement_request,
            **{"Idempotency-Key": f"demo-{run}"},
        )
        procurement = first.json()["workflow_id"]
        assert again.json()["workflow_id"] == procurement, "idempotent resubmission started a second workflow"
        console.print(
            f"POST /v1/workflows/procurement -> {first.status_code} {procurement} "
            "(retry with the same Idempotency-Key -> same id)"
        )
        report_resp = await client.post(
            "/v1/workflows/research_report",
            SUBMITTER,
            {
                "input": report_input(target.sandbox_for_services),
                "callback_url": f"{target.sandbox_for_services}/hooks/report",
            },
        )
        report = report_resp.json()["workflow_id"]
        console.print(f"POST /v1/workflows/research_report -> {report_resp.status_code} {report}")
        ticket_resp = await client.post(
            "/v1/workflows/support_ticket", SUBMITTER, {"input": ticket_input(run, "cust-1001", 25000)}
        )
        ticket = ticket_resp.json()["workflow_id"]
        console.print(f"POST /v1/workflows/support_ticket -> {ticket_resp.status_code} {ticket}")
        stranger_resp = await client.post(
            "/v1/workflows/support_ticket", SUBMITTER, {"input": ticket_input(run, f"cust-{run}", 1500)}
        )
        stranger = stranger_resp.json()["workflow_id"]
        console.print(
            f"POST /v1/workflows/support_ticket -> {stranger_resp.status_code} {stranger} "
            "(a customer the CRM does not know yet)\n"
        )

        # 2. Procurement: the manager does not answer; it escalates to the director.
        status = await client.wait_for(procurement, waiting_on("manager"), "the manager's approval")
        console.print(
            f"procurement waits for: {status.get('waiting_for')} until {status.get('waiting_until')}"
        )
        status = await client.wait_for(
            procurement, waiting_on("director"), "escalation to the director", timeout_s=60
        )
        approval = status["pending_approval"]["approval_id"]
        console.print(
            f"no answer within {MANAGER_WINDOW_S}s: escalated, now waits for: {status.get('waiting_for')}"
        )
        wrong = await client.post(f"/v1/approvals/{approval}", MANAGER, {"decision": "approve"})
        console.print(
            f"the manager tries to approve now -> {wrong.status_code} ({wrong.json().get('detail')})"
        )
        decided = await client.post(
            f"/v1/approvals/{approval}", DIRECTOR, {"decision": "approve", "comment": "within plan"}
        )
        console.print(f"the director approves -> {decided.status_code}")

        # 3. Report: four sources fetched at once (beta fails its first call, delta straggles);
        # at the stage's deadline the draft is built from the three that arrived.
        status = await client.wait_for(report, waiting_on("editor"), "the editor's approval", timeout_s=120)
        approval = status["pending_approval"]["approval_id"]
        console.print(
            f"report: sources stage closed at its {SOURCES_WITHIN_S:g}s deadline; "
            f"{status['pending_approval']['context']['summary']}"
        )
        decided = await client.post(f"/v1/approvals/{approval}", EDITOR, {"decision": "approve"})
        console.print(f"the editor approves -> {decided.status_code}\n")

        # 4. Support: the refund is above the threshold, so the manager decides; meanwhile
        # the reply-due timer fires. The unknown customer's ticket is a dead letter until the
        # customer is in the CRM and an operator redrives it.
        await support(client, target, ticket, stranger, run)

        final_p = await client.wait_for(
            procurement, lambda s: s.get("status") in TERMINAL, "procurement to end"
        )
        final_r = await client.wait_for(report, lambda s: s.get("status") in TERMINAL, "report to end")
        final_t = await client.wait_for(ticket, lambda s: s.get("status") in TERMINAL, "the ticket to end")
        final_s = await client.wait_for(
            stranger, lambda s: s.get("status") in TERMINAL, "the redriven ticket to end"
        )
        stats = await sandbox_stats(target.sandbox_url)
        payments = stats["payments"]["unique"]
        console.print(timeline_table(f"procurement {procurement}", final_p))
        console.print(timeline_table(f"research report {report}", final_r))
        console.print(timeline_table(f"support ticket {ticket}", final_t))
        console.print(
            f"payment provider: {stats['requests'].get('payments', 0)} request(s), {payments} payment(s); "
            f"sources called: {stats['source_calls']}; webhooks received: {len(stats['webhooks'])}"
        )
        replies = (await client.http.get(f"{target.sandbox_url}/helpdesk/replies")).json()
        console.print(
            f"helpdesk: {len(replies)} reply(ies) sent; the redriven ticket ended {final_s['status']}"
        )
        mails = stats["mail"]
        console.print(f"reviewers notified: {len(mails)} e-mail(s), {len(stats['slack'])} channel message(s)")
        print_manual_steps(target)
        console.print(f"finished in {time.monotonic() - started:.1f}s")
        console.print(
            f"[bold]Console:[/] {target.console_url}; sign in as a "
            f"reviewer with the key [bold]{MANAGER}[/] (manager), "
            "or demo-operator-key (operator)"
        )
        print(
            f"demo: procurement={final_p['status']} report={final_r['status']} "
            f"support={final_t['status']} payments={payments}"
        )
        finals = (final_p, final_r, final_t, final_s)
        return 0 if all(f["status"] == "completed" for f in finals) else 1
    except Exception as exc:
        console.print(f"[red]demo failed:[/] {exc}")
        on_failure()
        print("demo: procurement=error report=error support=error payments=0")
        return 1


async def sandbox_stats(sandbox_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=5.0) as client:
        stats: dict[str, Any] = (await client.get(f"{sandbox_url}/stats")).json()
        return stats


async def support(client: Client, target: Target, ticket: str, stranger: str, run: str) -> None:
    status = await client.wait_for(ticket, waiting_on("manager"), "the manager's approval of the refund")
    pending = status["pending_approval"]
    console.print(f"support ticket waits for: {status.get('waiting_for')} ({pending['context']['summary']})")
    # The triage agent's loop: the model called the CRM's tools before it answered.
    console.print(
        f"the agent's steps, as the manager sees them: {'; '.join(pending['context']['steps_taken'])}"
    )
    await client.wait_for(
        ticket,
        lambda s: any(i.get("event_type") == "ticket.reply_due" for i in s.get("timeline", [])),
        "the reply-due timer",
        timeout_s=60,
    )
    console.print(
        f"no reply within {REPLY_WITHIN_S}s: ticket.reply_due fired (the reply will say it is late)"
    )
    decided = await client.post(f"/v1/approvals/{pending['approval_id']}", MANAGER, {"decision": "approve"})
    console.print(f"the manager approves the refund -> {decided.status_code}")

    dlq = target.deadletters_url
    letter = await dead_letter_of(client, dlq, stranger)
    console.print(f"ticket {stranger}: dead letter {letter['id']} ({letter['error']['error_class']})")
    customer = {"customer_id": f"cust-{run}", "name": "Alan Turing", "plan": "pro"}
    await client.http.post(f"{target.sandbox_url}/crm/customers", json=customer)
    redriven = await client.http.post(
        f"{dlq}/v1/dead-letters/{letter['id']}/redrive",
        json={"reason": "customer added to the CRM"},
        headers={"Authorization": f"Bearer {OPERATOR}"},
    )
    console.print(f"customer added to the CRM; the operator redrives it -> {redriven.status_code}\n")


async def dead_letter_of(
    client: Client, dlq: str, workflow_id: str, timeout_s: float = 60.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = await client.http.get(
            f"{dlq}/v1/dead-letters",
            params={"service": "triage_agent", "status": "open"},
            headers={"Authorization": f"Bearer {OPERATOR}"},
        )
        response.raise_for_status()
        for item in response.json()["items"]:
            if item.get("original_workflow_id") == workflow_id:
                return dict(item)
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{workflow_id}: no dead letter within {timeout_s}s")


def print_manual_steps(target: Target) -> None:
    api = target.api_url
    console.print(
        f"\n[bold]Do the same by hand[/] ({target.how_to_run}):\n"
        f"  curl -s -X POST {api}/v1/workflows/procurement -H 'Authorization: Bearer {SUBMITTER}' \\\n"
        "       -H 'Idempotency-Key: my-first-invoice' -H 'Content-Type: application/json' \\\n"
        f"       -d @{target.samples}/procurement-request.json\n"
        f"  curl -s {api}/v1/workflows/<workflow_id> -H 'Authorization: Bearer {SUBMITTER}'\n"
        f"  curl -s '{api}/v1/approvals?assignee=me' -H 'Authorization: Bearer {MANAGER}'\n"
        f"  curl -s -X POST {api}/v1/approvals/<approval_id> -H 'Authorization: Bearer {MANAGER}' \\\n"
        '       -H \'Content-Type: application/json\' -d \'{"decision": "approve", "comment": "ok"}\'\n'
        "  CHORUS_API_KEY=demo-operator-key .venv/bin/chorus timeline <workflow_id>\n"
    )


async def run_on_compose(target: Target = COMPOSE) -> int:
    """The same walk on docker-compose.yml's stack, already up (`docker compose up`): the
    gateway API, the dead letters and the sandbox on the ports it publishes."""
    console.print(f"[bold]On the compose stack[/]: gateway API at {target.api_url}\n")
    return await walk(
        target,
        uuid.uuid4().hex[:8],
        time.monotonic(),
        lambda: console.print("[yellow]see `docker compose ps` and `docker compose logs SERVICE`[/]"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--compose",
        action="store_true",
        help="drive docker-compose.yml's stack, already up, instead of starting every service here",
    )
    if parser.parse_args().compose:
        sys.exit(asyncio.run(run_on_compose()))
    workdir = ROOT / ".local" / "demo" / time.strftime("%Y%m%d-%H%M%S")
    sys.exit(asyncio.run(run_demo(workdir)))


if __name__ == "__main__":
    main()
