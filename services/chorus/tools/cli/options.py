"""What several ``chorus`` commands share, declared once: options (so they read the
same everywhere: name, environment variable, help), the quiet Kafka client, and the
plumbing of a command that asks a service's HTTP API (:func:`api_command`)."""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import httpx
import typer
from pydantic import BaseModel, ValidationError
from rich.table import Table

from chorus.base.compat import StrEnum
from chorus.contracts.api.base import ProblemDetails
from chorus.contracts.registry import Registry, default_schemas_dir, load_registry
from chorus.web.typedclient import UnexpectedAnswerError, answer, answer_as

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
TopicsOverlay = Annotated[
    Path | None,
    typer.Option(
        "--overlay",
        envvar="CHORUS_TOPICS_OVERLAY",
        show_envvar=True,
        exists=True,
        dir_okay=False,
        help="A deployment's overlay: its topics: (partitions, retention_ms per registry topic,"
        " at least the registry's) win over the registry's. The chart reads the same file as values.",
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
    """The answer as the model its API publishes (``chorus.contracts.api``); one that is not
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


@dataclass(frozen=True)
class HttpApi:
    """A service's HTTP API as ``chorus`` commands reach it: how messages name it, and its
    ``--url`` option (the variable that sets it, its default, its help)."""

    what: str
    envvar: str
    default_url: str
    help: str

    def url_option(self) -> Any:
        return Annotated[str, typer.Option("--url", envvar=self.envvar, show_envvar=True, help=self.help)]


GATEWAY = HttpApi("the gateway", "CHORUS_GATEWAY_URL", GATEWAY_URL, "The gateway's API.")


@dataclass(frozen=True)
class ApiClient:
    """A connected client of one API; refusals and answers its API does not publish exit
    as :func:`api_answer` says."""

    command: str
    client: httpx.Client

    def answer(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        return api_answer(self.command, self.client, model, method, path, **kwargs)

    def answer_as(self, shape: Any, method: str, path: str, **kwargs: Any) -> Any:
        return api_answer_as(self.command, self.client, shape, method, path, **kwargs)


@dataclass(frozen=True)
class ApiCall:
    """What a command of an HTTP API was given besides its own arguments: where the API is,
    the key to present, and whether answers are printed as JSON (for scripts)."""

    command: str
    api: HttpApi
    url: str
    api_key: str
    as_json: bool

    @contextmanager
    def client(self) -> Iterator[ApiClient]:
        """A client for several requests (exit 69 when the API cannot be reached)."""
        with api_client(self.command, self.url, self.api_key, self.api.what) as client:
            yield ApiClient(self.command, client)

    def answer(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        """One request, its answer as ``model``."""
        with self.client() as client:
            return client.answer(model, method, path, **kwargs)

    def answer_as(self, shape: Any, method: str, path: str, **kwargs: Any) -> Any:
        """One request, its answer as one of the models in ``shape`` (a union)."""
        with self.client() as client:
            return client.answer_as(shape, method, path, **kwargs)

    def printed(self, answer: Any) -> bool:
        """Print ``answer`` as JSON if that is what was asked for; True when it was (the
        command has nothing more to say)."""
        if self.as_json:
            echo_json(answer)
        return self.as_json


C = TypeVar("C", bound=Callable[..., None])


def api_command(app: typer.Typer, name: str, api: HttpApi, *, json_flag: bool = True) -> Callable[[C], C]:
    """Register a function as ``chorus <app> <name>``, a command of ``api``: its own parameters,
    then the options every such command takes (``--output``, ``--json`` unless ``json_flag``
    is False, ``--url``, ``--api-key``), which reach it as one parameter ``call: ApiCall``."""

    def register(func: C) -> C:
        own = inspect.signature(func, eval_str=True)
        options = [
            _keyword("output", OutputOption, Format.TABLE),
            *([_keyword("as_json", JsonFlag, False)] if json_flag else []),
            _keyword("url", api.url_option(), api.default_url),
            _keyword("api_key", ApiKeyOption, ""),
        ]
        parameters = [p for p in own.parameters.values() if p.name != "call"]

        @functools.wraps(func)
        def command(
            *args: Any, output: Format, url: str, api_key: str, as_json: bool = False, **kwargs: Any
        ) -> None:
            wanted = as_json or output is Format.JSON
            func(*args, call=ApiCall(str(app.info.name), api, url, api_key, wanted), **kwargs)

        signature = own.replace(parameters=[*parameters, *options])
        command.__signature__ = signature  # type: ignore[attr-defined]  # what typer reads
        command.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        app.command(name)(command)
        return func

    return register


def _keyword(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


T = TypeVar("T")


def read_registry(command: str, read: Callable[[Path], T], schemas_dir: Path | None) -> T:
    """``read`` of the registry in ``schemas_dir`` (else the project's: CHORUS_SCHEMAS_DIR, or
    schemas/ where you stand); one that cannot be read exits 2 (bad usage) saying why."""
    try:
        return read(schemas_dir or default_schemas_dir())
    except (FileNotFoundError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        fail(command, str(exc), 2)


def registry_of(command: str, schemas_dir: Path | None) -> Registry:
    """The registry (see :func:`read_registry`)."""
    return read_registry(command, load_registry, schemas_dir)


def table_of(*columns: str, wrap: Collection[str] = ()) -> Table:
    """A table for people with these columns, each on one line but those in ``wrap``."""
    shown = Table(show_lines=False)
    for column in columns:
        shown.add_column(column, no_wrap=column not in wrap)
    return shown


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
