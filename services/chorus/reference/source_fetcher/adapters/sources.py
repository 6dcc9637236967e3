"""The report's sources: GET <source url> -> {"excerpt": ...}, failures mapped onto the taxonomy."""

from __future__ import annotations

import httpx

from chorus.contracts.research import GatheredSource, SourceRef
from chorus.dependencies import Dependency, Guards
from chorus.external import call_json


class Sources:
    """GET <source url> -> {"excerpt": ...}; failures map onto the taxonomy. Each host is a
    dependency of its own (``sources:<host>``): one source that is down opens its breaker,
    not the others'."""

    def __init__(
        self, client: httpx.AsyncClient, timeout_s: float, guards: Guards, dependency: Dependency
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.guards = guards
        self.dependency = dependency

    async def fetch(self, source: SourceRef, topic: str) -> GatheredSource:
        # The topic is user text: a query parameter (percent-encoded), never a header. It is
        # added to the source URL's own query (httpx's params= would replace that query).
        url = httpx.URL(source.url).copy_merge_params({"topic": topic})
        guard = await self.guards.guard(self.dependency.keyed(url.host))
        async with guard.call():
            response = await call_json(
                self.client,
                "GET",
                str(url),
                what=f"source {source.name}",
                timeout_s=self.timeout_s,
                submitter_url=True,
            )
        return GatheredSource(name=source.name, excerpt=str(response.json()["excerpt"])[:2000])
