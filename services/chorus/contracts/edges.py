"""What a service declares it reads and writes: the edges contract tests hold to the registry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceEdges:
    """What a service reads and writes, checked against the registry by contracts-tests.

    Runtime services derive theirs from the ServiceSpec; a service not built on
    the runtime (the faust analytics app) declares one in its service.py as EDGES.
    ``runtime`` services also read chorus.control and may emit the runtime's own
    events (timers, retries, dead letters, reviews).
    """

    name: str
    consumes: frozenset[str]
    produces: frozenset[str]
    runtime: bool = False
    kafka: bool = True
    """False for a process that never connects to Kafka (the console: HTTP APIs only); it
    is no Kafka principal."""
