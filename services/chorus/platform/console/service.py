"""What the console reads and writes, for contracts-tests: no topic. It is a client of the
public HTTP APIs only (gateway, dead-letter service, outcome analytics, notifier)."""

from __future__ import annotations

from chorus.contracts.edges import ServiceEdges
from chorus.platform.console.domain import SERVICE

EDGES = ServiceEdges(name=SERVICE, consumes=frozenset(), produces=frozenset(), kafka=False)
