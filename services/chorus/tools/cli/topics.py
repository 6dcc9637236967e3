"""``chorus topics``: the registry's Kafka topics, created and reconciled.

Exit codes: 0 ok; 1 Kafka refused a change; 2 usage or registry errors;
69 (EX_UNAVAILABLE) no broker at the bootstrap address.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from chorus.base.settings import LOCAL_KAFKA
from chorus.contracts.registry import TopicSpec
from chorus.tools.cli.options import (
    Bootstrap,
    SchemasDir,
    TopicsOverlay,
    fail,
    quiet_client_logs,
    read_registry,
)
from chorus.tools.topics import (
    EX_UNAVAILABLE,
    BrokerUnavailableError,
    ProvisioningError,
    UnsatisfiableError,
    apply_topics,
    describe_topics,
    load_topic_specs,
    overlaid,
    read_overlay,
)

app = typer.Typer(
    name="topics",
    help="The registry's Kafka topics: create and reconcile them, or show how they differ.",
    no_args_is_help=True,
)


@app.command("apply")
def apply_command(
    replication_factor: Annotated[
        int | None,
        typer.Option(
            "--replication-factor",
            min=1,
            help="Replicas of created topics (default: min(3, number of brokers)).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would change; change nothing.")
    ] = False,
    schemas_dir: SchemasDir = None,
    overlay: TopicsOverlay = None,
    bootstrap: Bootstrap = LOCAL_KAFKA,
) -> None:
    """Create every topic of schemas/topics/*.yaml, lanes included, or bring it in line.

    Missing topics are created; partitions grow (never shrink); retention.ms and
    cleanup.policy are altered when they differ. Idempotent: a second run says
    nothing changed.
    """
    specs = _specs(schemas_dir, overlay)
    with _kafka_errors(bootstrap), quiet_client_logs():
        result = asyncio.run(
            apply_topics(bootstrap, specs, replication_factor=replication_factor, dry_run=dry_run)
        )
    for line in result.lines():
        typer.echo(line)


@app.command("describe")
def describe_command(
    schemas_dir: SchemasDir = None, overlay: TopicsOverlay = None, bootstrap: Bootstrap = LOCAL_KAFKA
) -> None:
    """Show each topic of the registry next to what the broker has. Changes nothing."""
    specs = _specs(schemas_dir, overlay)
    with _kafka_errors(bootstrap), quiet_client_logs():
        statuses = asyncio.run(describe_topics(bootstrap, specs))
    rows = [("topic", "partitions", "replicas", "retention.ms", "cleanup.policy", "status")]
    for status in statuses:
        have = status.actual
        differences = status.differences()
        rows.append(
            (
                status.wanted.name,
                str(have.partitions) if have else "-",
                str(have.replication_factor) if have else "-",
                have.configs.get("retention.ms", "?") if have else "-",
                have.configs.get("cleanup.policy", "?") if have else "-",
                "ok" if not differences else "; ".join(differences),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        typer.echo("  ".join([*cells, row[-1]]))
    drifting = sum(1 for s in statuses if s.differences())
    if drifting:
        typer.echo(f"{drifting} topic(s) differ from the registry: run `chorus topics apply`")
    else:
        typer.echo(f"all {len(statuses)} topic(s) on {bootstrap} match the registry")


def _specs(schemas_dir: Path | None, overlay: Path | None) -> list[TopicSpec]:
    """The registry's topics with the deployment's overlay; either one wrong exits 2."""
    specs = read_registry("topics", load_topic_specs, schemas_dir)
    try:
        return overlaid(specs, read_overlay(overlay))
    except ValueError as exc:
        fail("topics", str(exc), 2)


@contextmanager
def _kafka_errors(bootstrap: str) -> Iterator[None]:
    try:
        yield
    except BrokerUnavailableError as exc:
        fail("topics", str(exc), EX_UNAVAILABLE)
    except UnsatisfiableError as exc:
        fail("topics", str(exc), 2)
    except ProvisioningError as exc:
        fail("topics", f"{exc} (on {bootstrap})", 1)
