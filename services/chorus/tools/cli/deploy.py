"""``chorus deploy``: a project's services deployed like the platform's.

``helm`` writes the Helm chart with the project's services into the project (the chart Chorus
ships, its registry file generated from the project's registry); ``compose`` writes the
override of Chorus's docker-compose.yml that adds them. Both run the project's image, which
its Dockerfile (from ``chorus new``) builds. ``--check`` writes nothing and says whether
what is there is what would be written (for a project's CI).

Exit codes: 0 written (or up to date); 1 ``--check`` found a file stale; 2 not in a project,
or its registry, its settings or the compose file could not be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chorus.tools.cli.options import fail
from chorus.tools.deploy import (
    CHART_NAME,
    Project,
    chart_files,
    load_project,
    render_override,
    stale_chart_files,
    write_files,
)
from chorus.tools.scaffold import find_project

app = typer.Typer(
    name="deploy",
    help="Your project's services in the Helm chart and in Chorus's compose stack.",
    no_args_is_help=True,
)

Here = Annotated[
    Path, typer.Option("--dir", file_okay=False, help="The project's folder (or one inside it).")
]
Check = Annotated[
    bool, typer.Option("--check", help="Write nothing; exit 1 when a file is not what would be written.")
]


def _project(here: Path) -> Project:
    found = find_project(here.resolve())
    if found is None:
        fail("deploy", f"{here} is not in a project (no schemas/project.yaml up from it)", 2)
    try:
        return load_project(found.root)
    except Exception as exc:  # the project's registry or its services' settings: said, not raised
        fail("deploy", f"{type(exc).__name__}: {exc}", 2)


def _stale(what: str, stale: list[str], check: bool) -> None:
    if check and stale:
        for name in stale:
            typer.echo(f"{name} is stale: run chorus deploy {what}", err=True)
        raise typer.Exit(1)


@app.command("helm")
def helm_command(
    output: Annotated[
        Path, typer.Option("--output", file_okay=False, help="Where the chart goes (in the project).")
    ] = Path("deploy/helm"),
    here: Here = Path("."),
    check: Check = False,
) -> None:
    """The Helm chart with the project's services beside the platform's: `helm install` it
    from OUTPUT/chorus (the project's image: projectImage, default NAME:VERSION)."""
    project = _project(here)
    folder = project.root / output / CHART_NAME
    try:
        wanted = chart_files(project)
    except Exception as exc:  # a registry or a service's settings that cannot be read
        fail("deploy", f"{type(exc).__name__}: {exc}", 2)
    stale = stale_chart_files(wanted, folder)
    _stale("helm", [str(folder / name) for name in stale], check)
    write_files(wanted, folder, stale)
    typer.echo(f"{folder}: the chart of {project.facts.name} ({len(stale)} files written or removed)")


@app.command("compose")
def compose_command(
    compose_file: Annotated[
        Path,
        typer.Option(
            "--compose-file", dir_okay=False, exists=True, help="Chorus's docker-compose.yml (a checkout's)."
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", dir_okay=False, help="Default: docker-compose.NAME.yml in the project."),
    ] = None,
    here: Here = Path("."),
    check: Check = False,
) -> None:
    """The override of Chorus's docker-compose.yml that runs the project's services:
    `docker compose -f COMPOSE_FILE -f OUTPUT up`."""
    project = _project(here)
    target = output or project.root / f"docker-compose.{project.facts.name}.yml"
    try:
        text = render_override(project, compose_file)
    except Exception as exc:  # a compose file that is not Chorus's, a service's settings
        fail("deploy", f"{type(exc).__name__}: {exc}", 2)
    current = target.read_text() if target.is_file() else None
    _stale("compose", [str(target)] if current != text else [], check)
    if current != text:
        target.write_text(text)
    typer.echo(f"wrote {target}" if current != text else f"{target} is up to date")
