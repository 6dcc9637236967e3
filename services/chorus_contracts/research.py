"""The research report workflow: gather three sources (checkpointed), draft, validate, approve, deliver."""

from __future__ import annotations

from pydantic import Field

from chorus_contracts.base import Count, EventModel, LongText, Model, Name, Text, Url, event


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


@event("report.delivered", 1)
class ReportDelivered(EventModel):
    delivered_to: Text
    status_code: int = Field(ge=0, le=999)
    word_count: Count
