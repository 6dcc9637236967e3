"""A small service built on the runtime, exercising every path a real one can take.

Runs in-process (``spec``) or as its own OS process (``python -m tests.support.testservice``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
from pydantic import BaseModel

from chorus.base.errors import PersistentError, SemanticError, TransientError
from chorus.kernel.codec import Event
from chorus.kernel.service import WORKFLOW_END, Context, On, Outcome, ScheduleTimer, ServiceSpec
from chorus.outside.external import call_json
from chorus.runtime.runner import ServiceSettings, main
from tests.support.events import TaskDone, TaskSubmitted


class Progress(BaseModel):
    handled: int = 0
    tasks: list[str] = []
    steps_done: list[int] = []
    step_calls: list[int] = []


async def on_task_submitted(
    event: Event[TaskSubmitted], state: Progress | None, ctx: Context[Any], *, fixed: bool = False
) -> Outcome[Progress]:
    task = event.payload
    if ctx.attempt <= task.transient_failures:
        raise TransientError(f"simulated outage on attempt {ctx.attempt}")
    if task.mode == "persistent" and not fixed:
        raise PersistentError("simulated business rule violation")
    if task.mode == "unexpected":
        raise ZeroDivisionError("simulated bug")
    if task.mode == "semantic":
        raise SemanticError("output lacks a summary", [f"/summary: missing (try {len(ctx.feedback) + 1})"])
    if task.mode == "slow":
        await ctx.clock.sleep(task.sleep_s)  # stands for a long LLM call (a test may move the clock)
    if task.mode == "call":
        async with httpx.AsyncClient() as client:
            await call_json(client, "GET", task.url, what="callback", timeout_s=2.0, submitter_url=True)
    progress = state or Progress()
    if task.mode == "nul_state":
        # What an LLM may answer: text PostgreSQL cannot store, produced by the handler.
        progress = progress.model_copy(update={"tasks": [*progress.tasks, "answer:\x00"]})
    if task.mode == "huge_emit":
        return Outcome(
            state=progress, emit=[TaskDone(task="x" * 2_000_000, attempt=ctx.attempt, handled_count=0)]
        )
    effects = [Note(ctx.service, task.note)] if task.mode == "note" else []
    timers = []
    if task.mode == "remind":
        due = ctx.clock.now() + timedelta(hours=1)
        timers = [ScheduleTimer("remind", due, TaskSubmitted(task="reminded"), purpose="reminder")]
    if task.mode == "steps":
        # Three expensive steps with a checkpoint after each; the first attempt
        # fails after step 2, so the retry must start at step 3.
        for step in (1, 2, 3):
            if step in progress.steps_done:
                continue
            progress = progress.model_copy(
                update={
                    "steps_done": [*progress.steps_done, step],
                    "step_calls": [*progress.step_calls, step],
                }
            )
            await ctx.checkpoint(progress)
            if step == 2 and ctx.attempt == 1:
                raise TransientError("connection reset after step 2")
    if task.mode == "progress":
        # A long step saying how far it got, with each checkpoint, before its outcome.
        for step in (1, 2):
            progress = progress.model_copy(update={"steps_done": [*progress.steps_done, step]})
            said = TaskDone(task=f"{task.task}: step {step} of 2", attempt=ctx.attempt, handled_count=0)
            await ctx.checkpoint(progress, emit=[said])
    progress = progress.model_copy(
        update={"handled": progress.handled + 1, "tasks": [*progress.tasks, task.task]}
    )
    return Outcome(
        state=progress,
        emit=[TaskDone(task=task.task, attempt=ctx.attempt, handled_count=progress.handled)],
        effects=effects,
        timers=timers,
    )


@dataclass(frozen=True)
class Note:
    """An effect: a row in the service's own ``notes`` table, whose column is narrow."""

    service: str
    text: str

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(f"INSERT INTO {self.service}.notes (note) VALUES ($1)", self.text)


def notes_migration(service: str) -> Callable[[asyncpg.Connection], Awaitable[None]]:
    async def migrate(conn: asyncpg.Connection) -> None:
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {service}.notes (note varchar(64) NOT NULL)")

    return migrate


def make_spec(
    name: str = "test_service",
    *,
    backoff_base_s: float = 0.2,
    fixed: bool = False,
    task_timeout_s: float = 600,
    workflow_end: bool = False,
) -> ServiceSpec[Progress, None]:
    """``fixed``: the deploy after the bug fix; mode "persistent" then succeeds.
    ``workflow_end``: it consumes workflow.ended and stops with the workflow."""
    return ServiceSpec(
        name=name,
        version="0.1.0",
        handlers=[
            On(
                TaskSubmitted,
                functools.partial(on_task_submitted, fixed=True) if fixed else on_task_submitted,
                timeout_s=task_timeout_s,
                max_attempts=4,
                backoff_base_s=backoff_base_s,
                backoff_cap_s=5.0,
            ),
            *([WORKFLOW_END] if workflow_end else []),
        ],
        produces=frozenset({"test.task_done", "test.task_submitted"}),
        state=Progress,
        migrations=[notes_migration(name)],
    )


if __name__ == "__main__":
    import os

    main(
        make_spec(
            os.environ.get("TEST_SERVICE_NAME", "test_service"),
            fixed=os.environ.get("TEST_SERVICE_FIXED") == "1",
        ),
        ServiceSettings(),
    )
