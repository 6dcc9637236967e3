"""``chorus new``: a service or an event of your own project, ready to run and tested.

Exit codes: 0 made; 2 refused (a name taken, an invalid name: nothing was changed).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from chorus.tools.cli.options import fail
from chorus.tools.scaffold import Field, Project, ScaffoldError, add_event, add_service, finish, init_project

app = typer.Typer(
    name="new",
    help="Start a service or an event of your own project (made in this folder if there is none).",
    no_args_is_help=True,
)

ProjectOption = Annotated[
    str | None,
    typer.Option("--project", help="The project's name when one is made (default: the folder's)."),
]
Here = Annotated[
    Path,
    typer.Option("--dir", file_okay=False, help="The project's folder (or one inside it)."),
]


@app.command("service")
def service_command(
    name: Annotated[str, typer.Argument(help="The service's name: lowercase, digits and _.")],
    input_type: Annotated[
        str | None, typer.Option("--input", help="The event it handles (new; default NAME.requested).")
    ] = None,
    output_type: Annotated[
        str | None, typer.Option("--output", help="The event it emits (new; default NAME.completed).")
    ] = None,
    topic: Annotated[
        str | None, typer.Option("--topic", help="Their topic (default <project>.NAME).")
    ] = None,
    project: ProjectOption = None,
    here: Here = Path(),
) -> None:
    """A service answering one new event with another: its skeleton (config, domain,
    handlers, adapters, bootstrap, spec, README), a handler test and a test on real Kafka
    and PostgreSQL, its events, topic and principal in the project's registry."""
    with _refusals():
        made, written = init_project(here.resolve(), project)
        written += add_service(made, name, input_type=input_type, output_type=output_type, topic=topic)
        _report(made, written)
    typer.echo(f"next: pytest tests/test_{name}_handlers.py, then edit services/{name}/handlers.py")


@app.command("event")
def event_command(
    event_type: Annotated[str, typer.Argument(metavar="TYPE", help="e.g. ticket.classified")],
    field: Annotated[
        list[str] | None,
        typer.Option("--field", help="NAME:KIND, KIND one of text, name, count, flag (repeat it)."),
    ] = None,
    topic: Annotated[str | None, typer.Option("--topic", help="Default: <project>.<first part>.")] = None,
    producer: Annotated[str | None, typer.Option("--producer", help="The service that emits it.")] = None,
    consumer: Annotated[str | None, typer.Option("--consumer", help="A service that handles it.")] = None,
    project: ProjectOption = None,
    here: Here = Path(),
) -> None:
    """Event TYPE v1: its model in the project's events module, its topic, JSON Schema and an
    example envelope."""
    with _refusals():
        made, written = init_project(here.resolve(), project)
        fields = [Field.parse(spec) for spec in field or ["text:text"]]
        written += add_event(made, event_type, fields, topic=topic, producer=producer, consumer=consumer)
        _report(made, written)


@contextmanager
def _refusals() -> Iterator[None]:
    try:
        yield
    except ScaffoldError as exc:
        fail("new", str(exc), 2)


def _report(project: Project, written: list[Path]) -> None:
    generated = finish(project)
    for path in dict.fromkeys(written):  # a file changed twice is reported once
        typer.echo(f"wrote {path.relative_to(project.root)}")
    for rel in generated:
        typer.echo(f"wrote schemas/{rel}")
