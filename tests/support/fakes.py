"""Dependencies for running a service's handlers without its outside world.

Services ship none of these: the deterministic language model is the sandbox's (the
agents reach it over HTTP at run time), the rest are built here from the services' own
defaults. Contract tests and handler unit tests take them from ``handler_deps``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

import httpx

from chorus.base.errors import TransientError
from chorus.contracts.approvals import ApprovalPolicy
from chorus.contracts.registry import default_registry
from chorus.contracts.research import GatheredSource, SourceRef
from chorus.outside.dependencies import Dependency
from chorus.outside.external import ExternalRejection
from chorus.outside.llm import OfflineModel
from chorus.platform.approval_gate.adapters.policies import DEFAULTS_ACTOR, PolicyStore, PolicyVersion
from chorus.platform.approval_gate.domain import DEFAULT_POLICY
from chorus.reference.budget_agent.domain import PurchaseOrder
from chorus.reference.payment_agent.adapters.payments import PaymentClient, PaymentReceipt
from chorus.reference.report_agent.adapters.delivery import Delivery
from chorus.reference.sandbox.model import SKILLS
from chorus.reference.source_fetcher.adapters.sources import Sources
from chorus.testing import Unguarded

UNREACHABLE = "http://127.0.0.1:9"  # nothing listens there: every call is a transient failure


class RecordingPayments(PaymentClient):
    """The payment provider, in memory: pays each idempotency key once, or refuses vendors
    it was told to refuse, or fails ``outage`` times first (TransientError)."""

    def __init__(self, *, refuse: frozenset[str] = frozenset(), outage: int = 0) -> None:
        self.refuse = refuse
        self.outage = outage
        self.calls: list[dict[str, Any]] = []
        self.paid: dict[str, PaymentReceipt] = {}

    async def pay(
        self, *, key: str, invoice_id: str, vendor_id: str, amount_cents: int, currency: str
    ) -> PaymentReceipt:
        self.calls.append(
            {"key": key, "invoice_id": invoice_id, "vendor_id": vendor_id, "amount_cents": amount_cents}
        )
        if self.outage > 0:
            self.outage -= 1
            raise TransientError("provider down")
        if vendor_id in self.refuse:
            raise ExternalRejection("refused", 422, {"error": "vendor closed"})
        receipt = self.paid.setdefault(key, PaymentReceipt(f"pay-{len(self.paid) + 1}", f"REF-{key[-6:]}"))
        return receipt


class FakeSources(Sources):
    """Sources that answer an excerpt per name, counting calls; ``failing`` names answer 404."""

    def __init__(self, excerpts: dict[str, str], failing: frozenset[str] = frozenset()) -> None:
        self.excerpts = excerpts
        self.failing = failing
        self.down: frozenset[str] = frozenset()
        """Names that answer 503 (TransientError)."""
        self.calls: list[str] = []

    async def fetch(self, source: SourceRef, topic: str) -> GatheredSource:
        self.calls.append(source.name)
        if source.name in self.down:
            raise TransientError(f"source {source.name}: 503")
        if source.name in self.failing:
            raise ExternalRejection(f"source {source.name}: 404", 404, {})
        return GatheredSource(name=source.name, excerpt=self.excerpts[source.name])


class FakeDelivery(Delivery):
    def __init__(self) -> None:
        self.delivered: list[tuple[str, dict[str, Any], str]] = []

    async def deliver(self, url: str, report: dict[str, Any], key: str) -> int:
        self.delivered.append((url, report, key))
        return 201


class InMemoryPolicies(PolicyStore):
    """The approval gate's policy versions, in memory (version 1: the built-in default)."""

    def __init__(self, policy: ApprovalPolicy = DEFAULT_POLICY) -> None:
        at = datetime(2026, 1, 1, tzinfo=timezone.utc)
        self.versions = [PolicyVersion(1, policy, DEFAULTS_ACTOR, "the built-in default", at)]

    async def current(self) -> PolicyVersion:
        return self.versions[-1]

    async def history(self, limit: int = 100) -> list[PolicyVersion]:
        return list(reversed(self.versions))[:limit]

    async def change(self, policy: ApprovalPolicy, *, by: str, reason: str, now: datetime) -> PolicyVersion:
        self.versions.append(PolicyVersion(len(self.versions) + 1, policy, by, reason, now))
        return self.versions[-1]


class FixedBudgets:
    """The budget agent's ledger, in memory: budgets, purchase orders on record, and the
    invoices other workflows hold (``holders``: invoice key -> workflow id)."""

    def __init__(
        self,
        budgets: dict[str, int],
        purchase_orders: Sequence[PurchaseOrder] = (),
        holders: dict[tuple[str, str], str] | None = None,
    ) -> None:
        self.budgets = dict(budgets)
        self.purchase_orders = {po.po_number: po for po in purchase_orders}
        self.holders = dict(holders or {})

    async def available(self, cost_center: str) -> int | None:
        return self.budgets.get(cost_center)

    async def purchase_order(self, po_number: str) -> PurchaseOrder | None:
        return self.purchase_orders.get(po_number)

    async def invoice_holder(self, invoice: tuple[str, str]) -> str | None:
        return self.holders.get(invoice)


def model() -> OfflineModel:
    """The sandbox's deterministic model, in-process."""
    return OfflineModel(SKILLS)


@asynccontextmanager
async def handler_deps(service: str) -> AsyncIterator[Any]:
    """The dependencies ``service``'s handlers get, with no network and no database."""
    async with httpx.AsyncClient() as client:
        yield _deps(service, client)


def _deps(service: str, client: httpx.AsyncClient) -> Any:
    if service == "invoice_agent":
        from chorus.reference.invoice_agent.bootstrap import Deps as InvoiceDeps

        return InvoiceDeps(llm=model())
    if service == "report_agent":
        from chorus.reference.report_agent.bootstrap import Deps as ReportDeps
        from chorus.reference.report_agent.config import Settings as ReportSettings

        report = ReportSettings()
        return ReportDeps(
            llm=model(),
            delivery=Delivery(client, 0.5),
            chain=list(report.approval_chain),
            fallback=report.approval_fallback,
        )
    if service == "source_fetcher":
        from chorus.reference.source_fetcher.bootstrap import Deps as FetcherDeps

        return FetcherDeps(sources=Sources(client, 0.5, Unguarded(), Dependency(name="sources")))
    if service == "budget_agent":
        from chorus.reference.budget_agent.bootstrap import Deps as BudgetDeps
        from chorus.reference.budget_agent.config import Settings as BudgetSettings

        budget = BudgetSettings()
        return BudgetDeps(
            FixedBudgets(budget.budgets, budget.purchase_orders),
            list(budget.approval_chain),
            budget.approval_fallback,
        )
    if service == "payment_agent":
        from chorus.reference.payment_agent.bootstrap import Deps as PaymentDeps

        return PaymentDeps(PaymentClient(client, UNREACHABLE, "none", 0.5, Unguarded()))
    if service == "approval_gate":
        from chorus.platform.approval_gate.bootstrap import Deps as GateDeps
        from chorus.platform.approval_gate.bootstrap import approval_chains
        from chorus.platform.approval_gate.config import Settings as GateSettings

        gate = GateSettings()
        chains = approval_chains(default_registry())
        return GateDeps(list(gate.review_chain), gate.review_fallback, InMemoryPolicies(), chains)
    if service == "gateway":
        from chorus.platform.gateway.adapters.webhooks import WebhookSender

        return WebhookSender(
            client, "contract-secret", 0.5, guards=Unguarded(), receivers=Dependency(name="webhooks")
        )
    if service == "notifier":
        from chorus.platform.notifier.adapters.channels import Channels
        from chorus.platform.notifier.bootstrap import Deps as NotifierDeps
        from chorus.platform.notifier.config import Settings as NotifierSettings

        notifier = NotifierSettings()
        return NotifierDeps(
            Channels(notifier, client),
            {p: r.tier for p, r in notifier.reviewers.items()},
            {"manager": f"{UNREACHABLE}/hook"},
        )
    if service == "audit_projector":
        from chorus.platform.audit_projector.handlers import ProjectorDeps

        return ProjectorDeps(schema=service, ledger=service)
    return None
