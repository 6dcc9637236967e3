"""The console's pages, one module per part of it, each a module-level ``APIRouter``
(what they share is in :mod:`chorus.platform.console.handlers`)."""

from __future__ import annotations

from chorus.platform.console.pages import approvals, bulk, letters, outcomes, schedules, signin, workflows

ROUTERS = (
    signin.router,
    approvals.router,
    workflows.router,
    schedules.router,
    bulk.router,
    letters.router,
    outcomes.router,
)
"""In the order their paths are matched."""
