"""``chorus events show | list | docs``: where an event comes from, where it goes, where it is tested.

Read from the registry (``--schemas-dir`` / ``CHORUS_SCHEMAS_DIR``, a project's registry
with the platform's under it), the services' declarations and a scan of the tests
(``chorus.tools.events_catalog``); talks to no broker and no service.

Exit codes: 0 ok; 1 docs/events.md is stale (``docs --check``); 2 usage or a registry that
does not load; 65 EX_DATAERR an unknown event type.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chorus.contracts.registry import Registry, default_schemas_dir
from chorus.tools import eventsdoc
from chorus.tools.cli.events import EX_DATAERR, unknown_name_message
from chorus.tools.cli.options import (
    Format,
    JsonFlag,
    OutputOption,
    SchemasDir,
    complete_event_types,
    echo_json,
    fail,
    registry_of,
    wants_json,
)
from chorus.tools.cli.schemas import CheckOnly, write_document
from chorus.tools.eventroutes import consumer_phrase, producer_phrase, readers_phrase
from chorus.tools.events_catalog import Catalog, EventInfo, topic_lines

app = typer.Typer(
    name="events",
    help="The registry's event types: who produces, signs, consumes and tests each one.",
    no_args_is_help=True,
)
console = Console(highlight=False, soft_wrap=True)
LABEL_WIDTH = 15


@app.command("show")
def show_command(
    event_type: Annotated[
        str,
        typer.Argument(
            help="An event type of the registry, e.g. invoice.validated.", autocompletion=complete_event_types
        ),
    ],
    schemas_dir: SchemasDir = None,
    output: OutputOption = Format.TABLE,
    as_json: JsonFlag = False,
) -> None:
    """Topic, versions with their schema and example files, producers (a timer's target:
    who schedules it, who publishes it), signer, consumers and the tests that name it."""
    registry = registry_of("events show", schemas_dir)
    if not registry.knows(event_type):
        message = unknown_name_message("event type", event_type, registry.event_types())
        if registry.project is None:
            message += "\n(an event of a project? name its registry: --schemas-dir <project>/schemas)"
        fail("events show", message, EX_DATAERR)
    info = Catalog(registry).describe(event_type)
    if wants_json(output, as_json):
        echo_json(asdict(info))
    else:
        print_event(info)


@app.command("list")
def list_command(
    schemas_dir: SchemasDir = None, output: OutputOption = Format.TABLE, as_json: JsonFlag = False
) -> None:
    """Every event type of the registry: its topic, versions and signer."""
    registry = registry_of("events list", schemas_dir)
    types = registry.event_types()
    if wants_json(output, as_json):
        echo_json([_brief(registry, event_type) for event_type in types])
        return
    table = Table("event type", "topic", "versions", "signed by", box=None)
    for event_type in types:
        brief = _brief(registry, event_type)
        versions = ", ".join(f"v{v}" for v in registry.versions(event_type))
        table.add_row(event_type, brief["topic"], versions, ", ".join(brief["signed_by"]))
    console.print(table)


@app.command("docs")
def docs_command(schemas_dir: SchemasDir = None, check_only: CheckOnly = False) -> None:
    """Write docs/events.md (beside the registry's folder): every event type, one section each;
    and the README's table of who states each type, where it has one."""
    root = schemas_dir or default_schemas_dir()
    write_document("events docs", root, root.parent / eventsdoc.DOCUMENT, eventsdoc.render, check_only)
    readme = root.parent / eventsdoc.README
    if readme.exists():
        text = readme.read_text()
        write_document(
            "events docs",
            root,
            readme,
            lambda registry: eventsdoc.with_authority_table(text, registry),
            check_only,
        )


def print_event(info: EventInfo) -> None:
    """The text form: one labelled block per question, paths as they are in the tree."""
    versions = ", ".join(f"v{v.version}" for v in info.versions)
    console.print(f"[bold]{escape(info.event_type)}[/]  {versions}  (compatibility {info.compatibility})")
    if info.summary:
        console.print(escape(info.summary))
    console.print()
    _block("topic", topic_lines(info.topic))
    files = []
    for v in info.versions:
        model = f"  ({v.model})" if v.model else ""
        files.append(f"v{v.version}  {v.schema}{model}")
        files += [f"    example {e}" for e in v.examples] or ["    no example"]
    _block("versions", files)
    _block("producers", [producer_phrase(p) for p in info.producers])
    _block("signed by", [", ".join(info.signed_by) or "not signed"])
    _block("handled by", [consumer_phrase(c) for c in info.consumers])
    _block("topic read by", [readers_phrase(info.topic.readers)])
    _block("tests", info.tests)
    if info.notes:
        _block("notes", info.notes)


def _block(label: str, lines: list[str]) -> None:
    lines = lines or ["none"]
    console.print(f"[bold]{label:<{LABEL_WIDTH}}[/]{escape(lines[0])}")
    for line in lines[1:]:
        console.print(" " * LABEL_WIDTH + escape(line))


def _brief(registry: Registry, event_type: str) -> dict[str, Any]:
    return {
        "event_type": event_type,
        "topic": registry.topic_for(event_type).topic,
        "versions": registry.versions(event_type),
        "signed_by": sorted(registry.signers_of(event_type)),
    }
