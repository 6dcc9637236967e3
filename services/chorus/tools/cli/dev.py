"""``chorus dev``: the platform and a project's services on this machine, in the background.

``infra up`` starts a local Kafka and PostgreSQL for the project (``chorus.tools.infra``:
the scripts of ``make up``, their state and credentials in the project's ``.chorus/``) and
provisions its registry; ``infra down`` stops them, ``infra status`` says whether they run,
``infra env`` prints their settings for a shell, ``infra reset`` deletes their data.

``up`` starts the dev stack (what ``make services`` runs: every platform service on its
documented port, the sandbox standing in for the outside world, and the project's own
services, found in its ``services/``) and returns once every process is healthy; ``down``
stops it. It reaches Kafka and PostgreSQL through the usual ``CHORUS_*`` variables, which
default to those ``infra up`` recorded (a variable set in the environment wins), as for
every ``chorus`` command run in the project (``chorus.tools.infra.use_project_infra``).

Exit codes: 0 done; 1 the stack did not come up (the end of its log is printed) or was not
running, or the infrastructure did not start; 2 not in a project, or refused.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from chorus.tools.cli.options import fail
from chorus.tools.infra import Infra, infra_env, shell_exports
from chorus.tools.scaffold import find_project

app = typer.Typer(name="dev", help="The platform and your project's services, in the background.")
infra_app = typer.Typer(
    name="infra",
    help="A local Kafka and PostgreSQL for your project, its credentials in .chorus/.",
    no_args_is_help=True,
)
app.add_typer(infra_app, name="infra")

READY = "Chorus is running:"
"""The line the dev stack prints once every process is healthy."""

Here = Annotated[
    Path, typer.Option("--dir", file_okay=False, help="The project's folder (or one inside it).")
]


def _state(here: Path) -> Path:
    project = find_project(here.resolve())
    if project is None:
        fail("dev", f"{here} is not in a project (no schemas/project.yaml up from it)", 2)
    state = project.root / ".chorus"
    state.mkdir(exist_ok=True)
    return state


def _running(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid


@app.command("up")
def up_command(
    here: Here = Path("."),
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait for every process.")] = 180.0,
) -> None:
    """Start the dev stack with this project's services; return once all are healthy."""
    state = _state(here)
    pid_file, log_path = state / "dev.pid", state / "dev.log"
    if (pid := _running(pid_file)) is not None:
        fail("dev", f"running already (pid {pid}); `chorus dev down` stops it", 1)
    if importlib.util.find_spec("chorus.reference") is None:
        # The dev stack runs the reference workflows and the sandbox (the outside world a
        # project's sandbox module extends): a distribution production installs leave out.
        needs = "pip install chorus-workflows-reference"
        fail("dev", f"the dev stack runs the sandbox and the reference workflows: {needs}", 2)
    with log_path.open("wb") as log:
        command = ["-m", "chorus.tools.devstack", "--project", str(state.parent), "--workdir", str(state)]
        # Each process may take as long as the whole stack may (a loaded machine starts slowly).
        command += ["--timeout", str(timeout_s)]
        process = subprocess.Popen(
            [sys.executable, *command],
            env={**infra_env(state), **os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # it outlives this command, and Ctrl-C here
        )
    pid_file.write_text(str(process.pid))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        ready = next((line for line in text.splitlines() if line.startswith(READY)), None)
        if ready is not None:
            typer.echo(ready)
            typer.echo("`chorus dev down` stops it.")
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    else:
        os.killpg(process.pid, signal.SIGTERM)
    pid_file.unlink(missing_ok=True)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
    fail("dev", f"the stack did not come up; the end of {log_path}:\n{tail}", 1)


@app.command("down")
def down_command(here: Here = Path(".")) -> None:
    """Stop the dev stack `chorus dev up` started (each service drains first)."""
    pid_file = _state(here) / "dev.pid"
    pid = _running(pid_file)
    if pid is None:
        typer.echo("chorus dev: not running", err=True)
        pid_file.unlink(missing_ok=True)
        raise typer.Exit(1)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 90
    while _running(pid_file) is not None and time.monotonic() < deadline:
        time.sleep(0.3)
    if _running(pid_file) is not None:
        os.killpg(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    typer.echo("stopped")


def _infra(here: Path, kafka_port: int | None = None, postgres_port: int | None = None) -> Infra:
    try:
        return Infra.of(_state(here), kafka_port, postgres_port)
    except ValueError as exc:
        fail("dev", str(exc), 2)


@infra_app.command("up")
def infra_up_command(
    here: Here = Path("."),
    kafka_port: Annotated[
        int | None, typer.Option("--kafka-port", min=1024, max=65534, help="Kafka's (default 9092).")
    ] = None,
    postgres_port: Annotated[
        int | None, typer.Option("--postgres-port", min=1024, max=65535, help="PostgreSQL's (default 54329).")
    ] = None,
) -> None:
    """Start a local Kafka (from Maven Central's jars, on Java 17) and PostgreSQL (the
    system's, or Debian's package) as `make up` does, and provision the project's registry:
    topics, a login and the ACLs per principal, signing keys, database roles."""
    infra = _infra(here, kafka_port, postgres_port)
    try:
        infra.up(infra.state.parent / "schemas", echo=typer.echo)
    except (RuntimeError, FileNotFoundError, OSError) as exc:
        fail("dev", f"{exc}; the lines above say why", 1)
    typer.echo(
        f"Kafka on 127.0.0.1:{infra.kafka_port} and PostgreSQL on 127.0.0.1:{infra.postgres_port} "
        f"for {infra.state.parent.name}; its settings: {infra.state / 'infra.env'}"
    )
    typer.echo(
        "every chorus command in the project and its generated tests use them; "
        '`eval "$(chorus dev infra env)"` gives them to other programs'
    )


@infra_app.command("down")
def infra_down_command(here: Here = Path(".")) -> None:
    """Stop the project's Kafka and PostgreSQL (their data stays)."""
    infra = _infra(here)
    try:
        infra.down(echo=typer.echo)
    except (RuntimeError, FileNotFoundError) as exc:
        fail("dev", str(exc), 1)


@infra_app.command("status")
def infra_status_command(here: Here = Path(".")) -> None:
    """Whether the project's Kafka and PostgreSQL run (exit 3 when one does not)."""
    running, lines = _infra(here).status()
    for line in lines:
        typer.echo(line)
    if not running:
        raise typer.Exit(3)


@infra_app.command("env")
def infra_env_command(here: Here = Path(".")) -> None:
    """Print the settings that reach them, as the admins: `eval "$(chorus dev infra env)"`."""
    state = _state(here)
    values = infra_env(state)
    if not values:
        fail("dev", f"no {state / 'infra.env'}: `chorus dev infra up` first", 1)
    typer.echo(shell_exports(values), nl=False)


@infra_app.command("reset")
def infra_reset_command(here: Here = Path(".")) -> None:
    """Stop both and delete their data and credentials (the Kafka jars stay)."""
    try:
        _infra(here).reset(echo=typer.echo)
    except (RuntimeError, FileNotFoundError) as exc:
        fail("dev", str(exc), 1)
