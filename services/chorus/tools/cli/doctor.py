"""``chorus doctor``: whether this deployment's Kafka, PostgreSQL and key services are what
Chorus needs (chorus.tools.doctor), in one table.

It reads what a service reads: ``CHORUS_KAFKA_*`` (an admin login: it describes ACLs and
topic configs), ``CHORUS_DATABASE_URL`` (a role that may read ``pg_roles``),
``CHORUS_KEY_STORES`` and ``CHORUS_KEY_SERVICE_CA_FILE``, and the registry (the project's,
with ``--schemas-dir``). Exit codes: 0 nothing is wrong (warnings aside); 1 a check found a
problem; 2 usage or settings errors.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from chorus.base.clock import SystemClock
from chorus.base.settings import LOCAL_DATABASE_URL, LOCAL_KAFKA
from chorus.kernel.kafka import kafka_auth
from chorus.privacy.feature import KEY_SERVICE_CA, LOCAL_KEY_SERVICE, LOCAL_REGION
from chorus.tools.cli.options import (
    Bootstrap,
    Format,
    JsonFlag,
    OutputOption,
    SchemasDir,
    TopicsOverlay,
    echo_json,
    fail,
    quiet_client_logs,
    registry_of,
    table_of,
    wants_json,
)
from chorus.tools.doctor import Status, Target, as_json, diagnose, failed
from chorus.tools.topics import overlaid, read_overlay

STYLE = {Status.OK: "green", Status.WARNING: "yellow", Status.PROBLEM: "red"}


def doctor_command(
    schemas_dir: SchemasDir = None,
    bootstrap: Bootstrap = LOCAL_KAFKA,
    database_url: Annotated[
        str,
        typer.Option(
            "--database-url",
            envvar="CHORUS_DATABASE_URL",
            help="PostgreSQL, as a role that may read pg_roles.",
        ),
    ] = LOCAL_DATABASE_URL,
    overlay: TopicsOverlay = None,
    output: OutputOption = Format.TABLE,
    as_json_flag: JsonFlag = False,
) -> None:
    """Check the broker (version, transactions, TLS), ACLs and topics against the registry,
    PostgreSQL (version, roles, clock) and the key services. Changes nothing."""
    registry = registry_of("doctor", schemas_dir)
    try:
        topics_overlay = read_overlay(overlay)
        overlaid(list(registry.topics.values()), topics_overlay)
        auth = kafka_auth()
        stores = json.loads(
            os.environ.get("CHORUS_KEY_STORES") or json.dumps({LOCAL_REGION: LOCAL_KEY_SERVICE})
        )
        if not isinstance(stores, dict):
            raise ValueError("CHORUS_KEY_STORES: a JSON object of region -> URL")
    except (ValidationError, ValueError) as exc:
        fail("doctor", str(exc).splitlines()[0] if isinstance(exc, ValueError) else str(exc), 2)
    target = Target(
        registry=registry,
        bootstrap=bootstrap,
        auth=auth,
        database_url=database_url,
        key_stores={str(k): str(v) for k, v in stores.items()},
        key_service_ca_file=os.environ.get(KEY_SERVICE_CA, ""),
        clock=SystemClock(),
        topics_overlay=topics_overlay,
    )
    with quiet_client_logs():
        checks = asyncio.run(diagnose(target))
    if wants_json(output, as_json_flag):
        echo_json(as_json(checks))
    else:
        table = table_of("check", "status", "detail", wrap={"detail"})
        for check in checks:
            table.add_row(check.name, f"[{STYLE[check.status]}]{check.status.value}[/]", check.detail)
        Console(soft_wrap=False).print(table)
    if failed(checks):
        raise typer.Exit(1)
