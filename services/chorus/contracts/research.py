"""The research report workflow: fetch its sources in parallel (a stage with a deadline),
draft from what arrived, validate, approve, deliver."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from chorus.contracts.base import Count, EventModel, LongText, Model, Name, Text, Url, UtcDateTime, event


class SourceRef(Model):
    name: Name
    url: Url


@event("report.requested", 1)
class ReportRequested(EventModel):
    topic: str = Field(min_length=3, max_length=500)
    sources: list[SourceRef] = Field(min_length=1, max_length=10)
    required_sections: list[Name] = Field(default=["Summary", "Findings", "Sources"], max_length=20)
    min_words: int = Field(default=80, ge=1, le=20000)
    delivery_url: Url | None = Field(default=None, description="where the approved report is POSTed")
    sources_within_s: float = Field(
        default=120.0,
        gt=0,
        le=86400,
        description="the sources stage's deadline, in seconds: what has not arrived by then is missing",
    )
    sources_policy: Literal["degrade", "fail"] = Field(
        default="degrade",
        description="degrade: draft from the sources that arrived, naming the missing ones; "
        "fail: the workflow fails unless every source arrived",
    )


class ReportSection(Model):
    heading: Name
    body: LongText


class GatheredSource(Model):
    name: Name
    excerpt: LongText


@event("report.drafted", 1)
class ReportDrafted(EventModel):
    """A draft that passed validation (sections, length, citations)."""

    title: Name
    sections: list[ReportSection] = Field(min_length=1, max_length=50)
    citations: list[Name] = Field(max_length=100)
    word_count: Count
    sources_used: list[GatheredSource] = Field(max_length=10)
    revision: int = Field(default=1, ge=1, le=1000)
    sources_missing: list[Name] = Field(
        default=[], max_length=10, description="sources that had not arrived by the stage's deadline"
    )


@event("report.delivered", 1)
class ReportDelivered(EventModel):
    delivered_to: Text
    status_code: int = Field(ge=0, le=999)
    word_count: Count


@event("source.fetch_requested", 1)
class SourceFetchRequested(EventModel):
    """Fetch one source: one sub-task of a report's sources stage (fetched in parallel)."""

    stage_id: Name
    task: Name
    source: SourceRef
    topic: str = Field(min_length=3, max_length=500)
    answer_by: UtcDateTime = Field(description="the stage's deadline: nobody waits for an answer after it")


@event("source.fetched", 1)
class SourceFetched(EventModel):
    stage_id: Name
    task: Name
    source: GatheredSource
    started_at: UtcDateTime = Field(description="when the fetch began (the event's time is when it ended)")


@event("source.fetch_failed", 1)
class SourceFetchFailed(EventModel):
    """The source refused for good (or answered after the stage's deadline): not retried."""

    stage_id: Name
    task: Name
    reason: Text
