"""Handlers of the source fetcher."""

from __future__ import annotations

from chorus.codec import Event
from chorus.contracts.research import SourceFetched, SourceFetchFailed, SourceFetchRequested
from chorus.external import ExternalRejection
from chorus.reference.source_fetcher.bootstrap import Deps
from chorus.reference.source_fetcher.domain import too_late
from chorus.service import Context, Outcome


async def on_source_fetch_requested(
    event: Event[SourceFetchRequested], state: None, ctx: Context[Deps]
) -> Outcome[None]:
    """Fetch one source. A source that is down is retried with durable backoff until the
    stage's deadline; one that refuses (a 4xx) is reported failed at once, so the stage
    need not wait for its deadline to know."""
    asked = event.payload
    late = too_late(ctx.clock.now(), asked.answer_by)
    if late is not None:  # a retry that fired after the stage closed
        return Outcome(emit=[SourceFetchFailed(stage_id=asked.stage_id, task=asked.task, reason=late)])
    started = ctx.clock.now()
    try:
        gathered = await ctx.deps.sources.fetch(asked.source, asked.topic)
    except ExternalRejection as exc:
        failed = SourceFetchFailed(stage_id=asked.stage_id, task=asked.task, reason=str(exc)[:4000])
        return Outcome(emit=[failed])
    fetched = SourceFetched(stage_id=asked.stage_id, task=asked.task, source=gathered, started_at=started)
    return Outcome(emit=[fetched])
