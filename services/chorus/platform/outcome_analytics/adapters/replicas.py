"""The view across replicas: each holds the partitions the group gave it; any one answers for all.

A replica's tables hold only its partitions' workflows and workflow types, so an answer
is gathered: the replica asked reads its own part (:class:`LocalView`) and asks every other
member of the group for theirs (``GET /analytics/partitions/...``, the caller's API key
forwarded), then checks that the parts cover every partition exactly once. Members and
their URLs come from faust's assignment (each member's ``canonical_url``, spread to all
by the group leader with every assignment), so there is nothing to configure and no
member is missed: a part missing or claimed twice (a rebalance under way, a replica
restoring its tables or not answering) makes the answer a 503 with Retry-After rather
than a wrong number.

Why a gather and not faust's ``@app.table_route`` (which forwards a request to the one
replica owning a key): the common question has no key (every type, every hour) and
releases span every workflow, so most answers need every replica anyway; and
table_route needs faust's own web server beside ours.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, Protocol

import httpx

from chorus.platform.outcome_analytics.domain import (
    Bucket,
    BucketKey,
    ReleasePartial,
    TypeTotals,
    WorkflowState,
    bucket_rows,
    format_hour,
    release_partials,
    release_rows,
    type_totals,
)

PARTS_PATH = "/analytics/partitions"


class NotWhole(Exception):
    """The replicas' parts do not cover every partition once: retry after a while."""


class Tables(Protocol):
    """What the faust pipeline (app.py) lets a reader see."""

    def workflow_states(self, partitions: set[int]) -> Iterator[WorkflowState]: ...

    def hour_buckets(self, partitions: set[int]) -> Iterator[tuple[BucketKey, Bucket]]: ...

    def served(self, topic: str) -> set[int]: ...


class TopicNames(Protocol):
    @property
    def by_workflow(self) -> str: ...

    @property
    def by_type(self) -> str: ...

    @property
    def partitions(self) -> int: ...


class LocalView:
    """This replica's part of the view: the partitions it holds, whole, and nothing else."""

    def __init__(self, tables: Tables, names: TopicNames) -> None:
        self.tables = tables
        self.names = names

    def outcomes(self, *, workflow_type: str | None, hour: datetime | None) -> dict[str, Any]:
        partitions = self.tables.served(self.names.by_type)
        buckets = self.tables.hour_buckets(partitions)
        return {
            "partitions": sorted(partitions),
            "buckets": bucket_rows(buckets, workflow_type=workflow_type, hour=hour),
        }

    def releases(self, *, service: str | None) -> dict[str, Any]:
        partitions = self.tables.served(self.names.by_workflow)
        partials = release_partials(self.tables.workflow_states(partitions), service=service)
        return {
            "partitions": sorted(partitions),
            "releases": [
                {"key": list(key), "partial": partial.to_json()} for key, partial in sorted(partials.items())
            ],
        }

    def totals(self) -> dict[str, TypeTotals]:
        """Per workflow type of this replica's partitions (a type lives in one partition)."""
        return type_totals(self.tables.hour_buckets(self.tables.served(self.names.by_type)))


class Replicas:
    """Answers for the whole view from the parts of every replica of the group."""

    def __init__(self, local: LocalView, app: Any, *, timeout_s: float = 5.0) -> None:
        self.local = local
        self.app = app
        self._client = httpx.AsyncClient(timeout=timeout_s)

    async def close(self) -> None:
        await self._client.aclose()

    def members(self) -> list[str]:
        """Every replica's URL, this one's included."""
        own = str(self.app.conf.canonical_url)
        distribution: Mapping[str, Any] = self.app.assignor.changelog_distribution or {}
        return sorted({own, *distribution})

    async def outcomes(
        self, *, workflow_type: str | None, hour: datetime | None, authorization: str
    ) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("workflow_type", workflow_type), ("hour", hour)) if v is not None}
        query = {k: format_hour(v) if isinstance(v, datetime) else v for k, v in params.items()}
        parts = await self._gather(
            "outcomes",
            query,
            authorization,
            lambda: self.local.outcomes(workflow_type=workflow_type, hour=hour),
        )
        rows = [row for part in parts for row in part["buckets"]]
        return sorted(rows, key=lambda row: (row["hour"], row["workflow_type"]))

    async def releases(self, *, service: str | None, authorization: str) -> list[dict[str, Any]]:
        query = {"service": service} if service else {}
        parts = await self._gather(
            "releases", query, authorization, lambda: self.local.releases(service=service)
        )
        merged: dict[tuple[str, str, str], ReleasePartial] = {}
        for part in parts:
            for item in part["releases"]:
                service_, release, workflow_type = item["key"]
                key = (service_, release, workflow_type)
                merged.setdefault(key, ReleasePartial()).add(ReleasePartial.from_json(item["partial"]))
        return release_rows(merged)

    async def _gather(
        self, what: str, query: dict[str, str], authorization: str, local: Callable[[], dict[str, Any]]
    ) -> list[dict[str, Any]]:
        own = str(self.app.conf.canonical_url)
        topic = self.local.names.by_type if what == "outcomes" else self.local.names.by_workflow

        async def part(url: str) -> dict[str, Any]:
            if url == own:
                return local()
            try:
                response = await self._client.get(
                    f"{url}{PARTS_PATH}/{what}", params=query, headers={"Authorization": authorization}
                )
            except httpx.HTTPError as exc:
                raise NotWhole(f"replica {url} did not answer ({type(exc).__name__})") from None
            if response.status_code != 200:
                raise NotWhole(f"replica {url} answered {response.status_code}")
            body: dict[str, Any] = response.json()
            return body

        parts = await asyncio.gather(*(part(url) for url in self.members()))
        claimed = [p for body in parts for p in body["partitions"]]
        wanted = list(range(self.local.names.partitions))
        if sorted(claimed) != wanted:
            raise NotWhole(
                f"the replicas hold partitions {sorted(claimed)} of {topic}, not each of {wanted} once"
                " (a rebalance or a restore is under way)"
            )
        return list(parts)
