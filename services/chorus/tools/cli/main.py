"""Entry point of the ``chorus`` console script: one Typer app, one sub-app per noun."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chorus import __version__
from chorus.tools.cli import access as access_cli
from chorus.tools.cli import approvals as approvals_cli
from chorus.tools.cli import audit as audit_cli
from chorus.tools.cli import bulk as bulk_cli  # noqa: F401  (its commands join `workflows`)
from chorus.tools.cli import deploy as deploy_cli
from chorus.tools.cli import dev as dev_cli
from chorus.tools.cli import dlq as dlq_cli
from chorus.tools.cli import doctor as doctor_cli
from chorus.tools.cli import events as events_cli
from chorus.tools.cli import events_show as events_show_cli
from chorus.tools.cli import migrate as migrate_cli
from chorus.tools.cli import new as new_cli
from chorus.tools.cli import policy as policy_cli
from chorus.tools.cli import resets as resets_cli  # noqa: F401  (its command joins `workflows`)
from chorus.tools.cli import rollout as rollout_cli
from chorus.tools.cli import schedules as schedules_cli
from chorus.tools.cli import schemas as schemas_cli
from chorus.tools.cli import signals as signals_cli  # noqa: F401  (its commands join `workflows`)
from chorus.tools.cli import status as status_cli
from chorus.tools.cli import timers as timers_cli
from chorus.tools.cli import topics as topics_cli
from chorus.tools.cli import workflows as workflows_cli
from chorus.tools.infra import use_project_infra

app = typer.Typer(
    name="chorus",
    help="Chorus: durable agent workflows on Kafka. Produce, subscribe, replay, operate.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(schemas_cli.app, name="schemas")
app.add_typer(topics_cli.app, name="topics")
app.add_typer(timers_cli.app, name="timers")
app.add_typer(access_cli.app, name="access")
app.command("produce")(events_cli.produce)
app.command("subscribe")(events_cli.subscribe)
app.add_typer(events_show_cli.app, name="events")
app.add_typer(dlq_cli.app, name="dlq")
app.command("replay")(audit_cli.replay_command)
app.command("timeline")(audit_cli.timeline_command)
app.command("erase")(audit_cli.erase_command)
app.add_typer(audit_cli.audit_app, name="audit")
app.command("status")(status_cli.status_command)
app.command("doctor")(doctor_cli.doctor_command)
app.add_typer(workflows_cli.app, name="workflows")
app.add_typer(schedules_cli.app, name="schedules")
app.add_typer(approvals_cli.app, name="approvals")
app.add_typer(policy_cli.app, name="policy")
app.add_typer(rollout_cli.app, name="rollout")
app.command("migrate")(migrate_cli.migrate_command)
app.add_typer(new_cli.app, name="new")
app.add_typer(dev_cli.app, name="dev")
app.add_typer(deploy_cli.app, name="deploy")


def _version(show: bool) -> None:
    if show:
        typer.echo(f"chorus {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Chorus: durable agent workflows on Kafka. Produce, subscribe, replay, operate."""
    # In a project that started its own Kafka and PostgreSQL (`chorus dev infra up`), every
    # command reaches them with nothing exported; a variable set in the environment wins.
    use_project_infra(Path.cwd())


def main() -> None:
    app()


if __name__ == "__main__":
    main()
