"""What outcome analytics reads and writes, for contracts-tests (it is not a runtime service)."""

from __future__ import annotations

from chorus.contracts.edges import ServiceEdges
from chorus.platform.outcome_analytics.config import SERVICE
from chorus.platform.outcome_analytics.domain import ACCEPT

EDGES = ServiceEdges(
    name=SERVICE,
    consumes=frozenset(ACCEPT),
    # Nothing: the view is served over HTTP. Records it cannot read go to the dead-letter
    # topic through the same failure path every service has, which the registry lists
    # under the pseudo-producer chorus-runtime (as it does for runtime services).
    produces=frozenset(),
)
