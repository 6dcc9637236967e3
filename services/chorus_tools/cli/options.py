"""What several ``chorus`` commands share, declared once: options (so they read the
same everywhere: name, environment variable, help) and the quiet Kafka client."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import httpx
import typer
from pydantic import BaseModel, ValidationError

from chorus.web.typedclient import UnexpectedAnswerError, answer, answer_as
from chorus_contracts.api.base import ProblemDetails
from chorus_contracts.registry import load_registry

M = TypeVar("M", bound=BaseModel)

Bootstrap = Annotated[
    str,
    typer.Option(
        "--bootstrap",
        envvar="CHORUS_KAFKA_BOOTSTRAP",
        show_envvar=True,
        help="Kafka bootstrap servers.",
    ),
]
SchemasDir = Annotated[
    Path | None,
    typer.Option(
        "--schemas-dir",
        envvar="CHORUS_SCHEMAS_DIR",
        show_envvar=True,
        file_okay=False,
        help="Registry directory (default: schemas/ of the project you stand in).",
    ),
]
AuditUrl = Annotated[
    str,
    typer.Option(
        "--api",
        envvar="CHORUS_AUDIT_URL",
        show_envvar=True,
        help="The audit projector's HTTP API.",
    ),
]
AUDIT_URL = "http://127.0.0.1:8103"
ApiKeyOption = Annotated[
    str,
    typer.Option(
        "--api-key",
        envvar="CHORUS_API_KEY",
        show_envvar=True,
        show_default=False,
        help="Your API key: an operator's to change things, an auditor's to read. Prefer the "
        "environment variable (a command line is visible to other users of the machine).",
    ),
]


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"


OutputOption = Annotated[
    Format,
    typer.Option(
        "--output", case_sensitive=False, help="table (for people) or json (the API's answer, for scripts)."
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Same as --output json.")]
GatewayUrl = Annotated[
    str,
    typer.Option("--url", envvar="CHORUS_GATEWAY_URL", show_envvar=True, help="The gateway's API."),
]
GATEWAY_URL = "http://127.0.0.1:8080"
EX_NOPERM = 77
"""sysexits' EX_NOPERM: the API refused the key (401) or its role (403)."""
EX_UNAVAILABLE = 69
"""sysexits' EX_UNAVAILABLE: a service the command needs is unavailable (unreachable, or
answering what its API does not publish)."""


def api_headers(api_key: str) -> dict[str, str]:
    """The headers presenting ``api_key``; a usage error (exit 2) without one."""
    if not api_key:
        raise typer.BadParameter("no API key: set CHORUS_API_KEY or pass --api-key", param_hint="--api-key")
    return {"Authorization": f"Bearer {api_key}"}


@contextmanager
def quiet_client_logs() -> Iterator[None]:
    """aiokafka logs each failed connection at ERROR; a command names the address once."""
    logger = logging.getLogger("aiokafka")
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)


def fail(command: str, message: str, code: int) -> NoReturn:
    """Print ``chorus COMMAND: message`` on stderr and exit with ``code``."""
    typer.echo(f"chorus {command}: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def api_client(command: str, url: str, api_key: str, what: str) -> Iterator[httpx.Client]:
    """A client of a service's HTTP API presenting ``api_key``; exit 69 when ``what`` (the
    service, for the message) cannot be reached."""
    headers = api_headers(api_key)
    try:
        with httpx.Client(base_url=url.rstrip("/"), timeout=30.0, headers=headers) as client:
            yield client
    except httpx.TransportError as exc:
        fail(command, f"cannot reach {what} at {url}: {exc}", EX_UNAVAILABLE)


def _answered(command: str, client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """The successful answer; a problem+json answer is printed (title: detail) and exits 2
    (bad input), 77 (key or role refused) or 1 (refused: unknown, already done, conflict)."""
    response = client.request(method, path, **kwargs)
    if response.is_success:
        return response
    try:
        problem = ProblemDetails.model_validate_json(response.content)
        message = f"{problem.title}: {problem.detail}"
    except ValidationError:
        message = f"HTTP {response.status_code}: {response.text[:500]}"
    status = response.status_code
    fail(command, message, 2 if status in (400, 422) else EX_NOPERM if status in (401, 403) else 1)


def api_call(command: str, client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    """The JSON answer (see :func:`_answered` for refusals)."""
    return _answered(command, client, method, path, **kwargs).json()


def api_answer(
    command: str, client: httpx.Client, model: type[M], method: str, path: str, **kwargs: Any
) -> M:
    """The answer as the model its API publishes (``chorus_contracts.api``); one that is not
    is the service being unusable: exit 69 naming the field (refusals: :func:`_answered`)."""
    try:
        return answer(model, _answered(command, client, method, path, **kwargs))
    except UnexpectedAnswerError as exc:
        fail(command, str(exc), EX_UNAVAILABLE)


def api_answer_as(
    command: str, client: httpx.Client, shape: Any, method: str, path: str, **kwargs: Any
) -> Any:
    """:func:`api_answer` for an answer of several forms (a union of models)."""
    try:
        return answer_as(shape, _answered(command, client, method, path, **kwargs))
    except UnexpectedAnswerError as exc:
        fail(command, str(exc), EX_UNAVAILABLE)


def wants_json(output: Format, as_json: bool) -> bool:
    return as_json or output is Format.JSON


def echo_json(body: Any) -> None:
    """``body`` (JSON, or an API's model as it travels) for scripts."""
    if isinstance(body, BaseModel):
        body = body.model_dump(mode="json", by_alias=True)
    typer.echo(json.dumps(body, indent=2, ensure_ascii=False))


def complete_event_types(incomplete: str) -> list[str]:
    """Shell completion: the registry's event types (of CHORUS_SCHEMAS_DIR or the project)."""
    try:
        registry = load_registry()
    except (OSError, ValueError):
        return []  # no registry where the shell stands: nothing to offer, never an error
    return [t for t in registry.event_types() if t.startswith(incomplete)]


def complete_topics(incomplete: str) -> list[str]:
    """Shell completion: topics (logical and each lane) and event types, as subscribe takes."""
    try:
        registry = load_registry()
    except (OSError, ValueError):
        return []
    names = {n for spec in registry.topics.values() for n in (spec.topic, *spec.physical_topics())}
    names |= set(registry.event_types())
    return sorted(n for n in names if n.startswith(incomplete))
