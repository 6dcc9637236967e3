"""The research report workflow: gather three sources (checkpointed), draft, validate, approve, deliver."""

from __future__ import annotations

from pydantic import Field

from chorus_contracts.base import EventModel, Model, Name, event


class SourceRef(Model):
    name: Name
    url: str = Field(min_length=1)


@event("report.requested", 1)
class ReportRequested(EventModel):
    topic: str = Field(min_length=3, max_length=500)
    sources: list[SourceRef] = Field(min_length=1, max_length=10)
    required_sections: list[Name] = ["Summary", "Findings", "Sources"]
    min_words: int = Field(default=80, ge=1)
    delivery_url: str | None = Field(default=None, description="where the approved report is POSTed")


class ReportSection(Model):
    heading: Name
    body: str


class GatheredSource(Model):
    name: Name
    excerpt: str


@event("report.drafted", 1)
class ReportDrafted(EventModel):
    """A draft that passed validation (sections, length, citations)."""

    title: Name
    sections: list[ReportSection] = Field(min_length=1)
    citations: list[Name]
    word_count: int = Field(ge=0)
    sources_used: list[GatheredSource]
    revision: int = Field(default=1, ge=1)


@event("report.delivered", 1)
class ReportDelivered(EventModel):
    delivered_to: str
    status_code: int
    word_count: int
