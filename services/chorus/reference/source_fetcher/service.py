"""The source fetcher's declaration."""

from __future__ import annotations

from chorus import __version__
from chorus.contracts.research import SourceFetchRequested
from chorus.reference.source_fetcher.bootstrap import Deps, bootstrap
from chorus.reference.source_fetcher.domain import SERVICE
from chorus.reference.source_fetcher.handlers import on_source_fetch_requested
from chorus.service import On, ServiceSpec

SPEC: ServiceSpec[None, Deps] = ServiceSpec(
    name=SERVICE,
    version=__version__,
    handlers=[
        # A source that is down is retried with backoff; the stage's deadline bounds the wait
        # (a retry after it reports the source failed instead of fetching).
        On(
            SourceFetchRequested,
            on_source_fetch_requested,
            timeout_s=60,
            max_attempts=8,
            backoff_base_s=0.5,
            backoff_cap_s=30,
        ),
    ],
    produces=frozenset({"source.fetched", "source.fetch_failed"}),
    # No workflow state: one workflow's fetches are independent, so they run at once.
    per_workflow_order=False,
    bootstrap=bootstrap,
)
