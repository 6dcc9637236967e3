"""What every API model shares: frozen models, date-times as the server writes them, and
the problem+json body of an error."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, PlainSerializer


class ApiModel(BaseModel):
    """A request or answer of a Chorus API: frozen; unknown fields of an answer ignored."""

    model_config = ConfigDict(frozen=True)


IsoDateTime = Annotated[datetime, PlainSerializer(datetime.isoformat, return_type=str, when_used="json")]
"""A date-time an API writes with ``datetime.isoformat()`` (``+00:00``, not pydantic's ``Z``):
the answers of the services that build their JSON from database rows keep that form."""


class FieldError(ApiModel):
    pointer: str
    message: str


class ProblemDetails(ApiModel):
    """Every error of a Chorus API (RFC 9457 ``application/problem+json``): what is wrong,
    and for invalid input which field (``errors``, JSON pointers)."""

    type: str = "about:blank"
    title: str
    status: int | None = None
    detail: str
    instance: str | None = None
    errors: list[FieldError] = []
