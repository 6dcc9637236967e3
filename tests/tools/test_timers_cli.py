"""`chorus timers sign-pending` on a real PostgreSQL: the timers pending when their event type
became signed fire, once an operator vouched for them with their scheduler's key; a timer
whose event names a service that does not state it is never signed."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from chorus.contracts.approvals import ApprovalWindowElapsed
from chorus.contracts.envelope import Envelope
from chorus.contracts.registry import default_registry
from chorus.platform.timer_service.adapters.repository import ScheduleTimerRow
from chorus.tools.cli.migrate import migrate_service, service_spec
from tests.support.database import connected, own_database
from tests.support.kafka import envelope, local_verifier, stated_by
from tests.support.processes import chorus

pytestmark = pytest.mark.integration


async def test_pending_timers_of_a_newly_signed_type_are_listed_then_signed_by_their_scheduler(
    database_url: str,
) -> None:
    window = envelope(ApprovalWindowElapsed(approval_id="appr-1", level=0), workflow_id="wf-1")
    unsigned_type = {**window.model_dump(mode="json"), "event_type": "retry.due"}
    forged = stated_by(window, "source_fetcher")
    now = datetime.now(timezone.utc)
    stored = {
        "approval_gate:wf-1:window-0": window.model_dump(mode="json"),
        "retry:x:1": unsigned_type,
        "source_fetcher:wf-1:window-0": forged.model_dump(mode="json"),
        # The gate's event in a timer the source fetcher scheduled: not the gate's to vouch for.
        "source_fetcher:wf-1:planted": window.model_dump(mode="json"),
    }
    async with own_database(database_url, f"chorus_timers_{uuid.uuid4().hex[:8]}") as url:
        await migrate_service(service_spec("timer_service"), url)
        async with connected(url) as conn:
            for timer_id, value in stored.items():
                # As the timer service stored them before the type was signed: no signature.
                await ScheduleTimerRow(
                    timer_id,
                    now + timedelta(hours=8),
                    "approvals.events",
                    "wf-1",
                    value,
                    "escalation",
                    "wf-1",
                    timer_id.split(":")[0],
                    now,
                ).apply(conn)

            async def signatures() -> dict[str, str | None]:
                rows = await conn.fetch("SELECT timer_id, signature FROM timer_service.timers")
                return {r["timer_id"]: r["signature"] for r in rows}

            env = {"CHORUS_DATABASE_URL_TIMER_SERVICE": url}
            code, out, err = await chorus("timers", "sign-pending", env=env)
            assert code == 0, err
            assert "to sign: 1 approval.window_elapsed of approval_gate" in out
            assert "refused: 1 approval.window_elapsed naming source_fetcher" in out
            assert "refused: 1 approval.window_elapsed naming approval_gate" in out
            assert set((await signatures()).values()) == {None}  # listed, nothing written

            code, out, err = await chorus("timers", "sign-pending", "--yes", env=env)
            assert code == 0, err
            assert "signed 1 timer(s)" in out
            signed = await signatures()
            assert signed["retry:x:1"] is None and signed["source_fetcher:wf-1:window-0"] is None
            assert signed["source_fetcher:wf-1:planted"] is None
            signature = signed["approval_gate:wf-1:window-0"]
            assert signature is not None
            # What the firing loop publishes (the stored text, verbatim) now passes the check
            # every consumer makes: the gate's signature.
            text = await conn.fetchval(
                "SELECT envelope FROM timer_service.timers WHERE timer_id = 'approval_gate:wf-1:window-0'"
            )
            published = json.dumps(json.loads(text)).encode()
            local_verifier(default_registry()).check(
                Envelope.model_validate_json(published), published, [("chorus-signature", signature.encode())]
            )

            code, out, _ = await chorus("timers", "sign-pending", "--yes", env=env)
            assert code == 0 and "no pending timer to sign" in out
