"""``chorus dev``: the platform and a project's services on this machine, in the background.

``up`` starts the dev stack (what ``make services`` runs: every platform service on its
documented port, the sandbox standing in for the outside world, and the project's own
services, found in its ``services/``) and returns once every process is healthy; ``down``
stops it. Kafka and PostgreSQL are not started here: they are what ``make up`` (or yours)
runs, reached through the usual ``CHORUS_*`` variables.

Exit codes: 0 done; 1 the stack did not come up (the end of its log is printed) or was not
running; 2 not in a project.
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
from chorus.tools.scaffold import find_project

app = typer.Typer(name="dev", help="The platform and your project's services, in the background.")

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
        process = subprocess.Popen(
            [sys.executable, *command],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
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
