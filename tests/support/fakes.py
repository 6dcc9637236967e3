"""Dependencies for running a service's handlers without its outside world.

Services ship none of these: the deterministic language model is the sandbox's (the
agents reach it over HTTP at run time), the rest are built here from the services' own
defaults. Contract tests and handler unit tests take them from ``handler_deps``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from chorus.llm import OfflineModel
from sandbox.model import SKILLS

UNREACHABLE = "http://127.0.0.1:9"  # nothing listens there: every call is a transient failure


class FixedBudgets:
    """The budget agent's ledger, in memory."""

    def __init__(self, budgets: dict[str, int]) -> None:
        self.budgets = dict(budgets)

    async def available(self, cost_center: str) -> int | None:
        return self.budgets.get(cost_center)


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
        from invoice_agent.bootstrap import Deps as InvoiceDeps

        return InvoiceDeps(llm=model())
    if service == "report_agent":
        from report_agent.adapters.delivery import Delivery
        from report_agent.adapters.sources import Sources
        from report_agent.bootstrap import Deps as ReportDeps
        from report_agent.config import Settings as ReportSettings

        report = ReportSettings()
        return ReportDeps(
            llm=model(),
            sources=Sources(client, 0.5),
            delivery=Delivery(client, 0.5),
            chain=list(report.approval_chain),
            fallback=report.approval_fallback,
        )
    if service == "budget_agent":
        from budget_agent.bootstrap import Deps as BudgetDeps
        from budget_agent.config import Settings as BudgetSettings

        budget = BudgetSettings()
        return BudgetDeps(FixedBudgets(budget.budgets), list(budget.approval_chain), budget.approval_fallback)
    if service == "payment_agent":
        from payment_agent.adapters.payments import PaymentClient
        from payment_agent.bootstrap import Deps as PaymentDeps

        return PaymentDeps(PaymentClient(client, UNREACHABLE, "none", 0.5))
    if service == "approval_gate":
        from approval_gate.bootstrap import Deps as GateDeps
        from approval_gate.config import Settings as GateSettings

        gate = GateSettings()
        return GateDeps(list(gate.review_chain), gate.review_fallback)
    if service == "gateway":
        from gateway.adapters.webhooks import WebhookSender

        return WebhookSender(client, "contract-secret", 0.5)
    if service == "audit_projector":
        from audit_projector.handlers import ProjectorDeps

        return ProjectorDeps(schema=service, ledger=service)
    return None
