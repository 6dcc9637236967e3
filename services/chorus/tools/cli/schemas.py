"""``chorus schemas``: the compatibility gate and the files generated from the registry.

Exit codes: 0 ok; 1 a breaking change (``check``) or a stale generated file
(``--check``); 2 usage, git or registry-file errors.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from chorus.contracts.registry import Registry, default_schemas_dir, load_registry, write_generated
from chorus.tools import asyncapi, diagrams
from chorus.tools.cli.options import SchemasDir, fail
from chorus.tools.compat import GitError, RegistryReadError, check
from chorus.tools.scaffold import write_examples

app = typer.Typer(
    name="schemas",
    help="The event registry: compatibility gate, generated JSON Schemas, AsyncAPI document.",
    no_args_is_help=True,
)

CheckOnly = Annotated[
    bool,
    typer.Option("--check", help="Change nothing; exit 1 when the committed file is stale."),
]


@app.command("check")
def check_command(
    against: Annotated[
        str,
        typer.Option("--against", help="Git ref holding the registry to compare with."),
    ] = "HEAD",
    schemas_dir: SchemasDir = None,
) -> None:
    """Fail on breaking changes to existing event versions since a git ref.

    Compares schemas/ in the working tree (uncommitted changes included) with
    schemas/ at REF under each event's compatibility mode; prints one line per
    change and the rollout order of every new version. Reads git only.
    """
    root = schemas_dir or default_schemas_dir()
    try:
        outcome = check(root, against)
    except (GitError, RegistryReadError) as exc:
        fail("schemas check", str(exc), 2)
    # One stream, so that the summary stays after the lines it sums up.
    for line in outcome.lines:
        typer.echo(line)
    raise typer.Exit(outcome.exit_code)


@app.command("generate")
def generate_command(schemas_dir: SchemasDir = None) -> None:
    """Write schemas/events/*.schema.json and the envelope schema from the event models
    (in a project: also an example of each new event version, and of one whose fields changed).

    Deletes generated files whose model no longer exists. Idempotent.
    """
    root = schemas_dir or default_schemas_dir()
    changed = write_generated(root) + write_examples(root)
    for rel in changed:
        typer.echo(f"wrote {rel}")
    typer.echo(f"{len(changed)} schema file(s) changed" if changed else "schemas up to date")


@app.command("asyncapi")
def asyncapi_command(schemas_dir: SchemasDir = None, check_only: CheckOnly = False) -> None:
    """Write schemas/asyncapi.yaml (AsyncAPI 3.0) from the registry."""
    root = schemas_dir or default_schemas_dir()
    write_document("schemas asyncapi", root, root / asyncapi.DOCUMENT_FILE, asyncapi.render, check_only)


@app.command("diagrams")
def diagrams_command(schemas_dir: SchemasDir = None, check_only: CheckOnly = False) -> None:
    """Write docs/architecture.md (Mermaid event-flow pictures) from the registry."""
    root = schemas_dir or default_schemas_dir()
    write_document("schemas diagrams", root, root.parent / diagrams.DOCUMENT, diagrams.render, check_only)


def write_document(
    command: str, root: Path, target: Path, render: Callable[[Registry], str], check_only: bool
) -> None:
    """Write ``target`` from the registry at ``root`` (exit 1 with --check when it is stale);
    ``command`` (``schemas asyncapi``) names the command in its messages."""
    try:
        text = render(load_registry(root))
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"chorus {command}: {exc}", err=True)
        raise typer.Exit(2) from None
    current = target.read_text() if target.exists() else None
    if current == text:
        typer.echo(f"{target} is up to date")
        return
    if check_only:
        typer.echo(f"{target} is stale: run make docs", err=True)
        raise typer.Exit(1)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    typer.echo(f"wrote {target}")
