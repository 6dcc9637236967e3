"""What several ``chorus`` commands share, declared once: options (so they read the
same everywhere: name, environment variable, help) and the quiet Kafka client."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

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
EX_NOPERM = 77
"""sysexits' EX_NOPERM: the API refused the key (401) or its role (403)."""


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
