"""The dead-letter service's operator API: letters (what failed, where, how often, the
original record), the redrives and discards of operators, and their audit trail."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from chorus.contracts.api.base import ApiModel, IsoDateTime
from chorus.contracts.base import Comment
from chorus.contracts.platform import Failure

# -- requests ---------------------------------------------------------------------------------


class RedriveBody(ApiModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: Comment = ""


class DiscardBody(ApiModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: Comment = Field(min_length=1, description="why the work is given up (required)")


class BulkRedriveBody(ApiModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: Comment = ""
    filter: dict[str, Any] = Field(
        description="list filters (service, category, event_type, since, until, limit); "
        "at least one of the first five"
    )


# -- answers ----------------------------------------------------------------------------------


class LetterError(ApiModel):
    category: str
    error_class: str
    message: str


class LetterErrorDetail(LetterError):
    traceback: str
    pointer: str | None


class OriginalPosition(ApiModel):
    """Where the original record was."""

    topic: str
    partition: int
    offset: int


class OriginalHeader(ApiModel):
    key: str | None
    value_b64: str | None
    value: str | None
    """The value as text, when it is UTF-8."""


class OriginalRecord(OriginalPosition):
    """The original record, byte for byte (base64), and as text or JSON where it is."""

    key_b64: str | None
    key: str | None
    headers: list[OriginalHeader]
    timestamp_ms: int | None
    value_b64: str | None
    value_is_json: bool
    value_json: Any


class LetterSummary(ApiModel):
    """A dead letter as lists show it."""

    id: str
    status: str
    """open, redriven or discarded."""
    service: str
    service_version: str
    consumer_group: str
    original_event_type: str | None
    original_event_id: str | None
    original_workflow_id: str | None
    error: LetterError
    original: OriginalPosition
    attempts: int
    dead_lettered_at: IsoDateTime | None
    received_at: IsoDateTime | None
    resolved_at: IsoDateTime | None
    resolved_by: str | None


class Operation(ApiModel):
    """A redrive or discard an operator did (or tried: ``result``)."""

    id: int
    op: str
    letter_id: str
    actor: str
    reason: str
    at: IsoDateTime | None
    result: str
    detail: dict[str, Any]


class LetterDetail(LetterSummary):
    """``GET /v1/dead-letters/{id}``: the letter with its original record, every failure
    (as the dead letter recorded them), its envelope and what operators did to it."""

    error: LetterErrorDetail
    original: OriginalRecord
    failures: list[Failure]
    envelope: dict[str, Any] | None
    operations: list[Operation]


class LetterList(ApiModel):
    """``GET /v1/dead-letters``: letters, newest first."""

    items: list[LetterSummary]
    count: int
    limit: int


class Group(ApiModel):
    service: str
    category: str
    status: str
    count: int
    oldest: IsoDateTime | None
    newest: IsoDateTime | None


class GroupList(ApiModel):
    """``GET /v1/dead-letters/groups``: counts by service, category and status."""

    groups: list[Group]


class Done(ApiModel):
    """A letter resolved by one operation, as it is after the commit."""

    letter: LetterSummary
    operation: Operation


class DoneList(ApiModel):
    """``POST /v1/dead-letters/redrive``: every letter the filter matched, redriven."""

    items: list[Done]
    count: int


class OperationList(ApiModel):
    """``GET /v1/operations``: the audit trail, newest first."""

    items: list[Operation]
    count: int
