"""The delivery loop: claims due messages, sends each by its channel, records the attempt.

Durable retries: a failed send is a row tried again after a full-jitter backoff
(chorus.kernel.backoff), on the service's clock, until ``delivery_attempts`` are spent;
then it is given up (status ``given_up``, every attempt and its error kept). One
channel failing never holds another: every message is its own row.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from datetime import datetime, timedelta

from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.base.tracing import work_span
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.lifecycle import SubmitterNotified
from chorus.kernel.backoff import full_jitter
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.service import RuntimeHandle
from chorus.platform.notifier.adapters import deliveries
from chorus.platform.notifier.adapters.channels import DeliveryError
from chorus.platform.notifier.adapters.deliveries import Claimed
from chorus.platform.notifier.bootstrap import Deps
from chorus.platform.notifier.config import Settings
from chorus.platform.notifier.domain import (
    SERVICE,
    SUBMITTER,
    Channel,
    Notice,
    NoticeKind,
    message_text,
    subject_line,
    webhook_body,
)
from chorus.web.links import SignedLink

log = logging.getLogger("chorus.platform.notifier.delivery")


class DeliveryMetrics:
    def __init__(self, rt: RuntimeHandle) -> None:
        self.attempts = rt.metrics.counter(
            "chorus_notifications_attempts",
            "Delivery attempts by channel and result (delivered, retry, given_up)",
            ["channel", "result"],
        )
        self.pending = rt.metrics.gauge(
            "chorus_notifications_due", "Messages claimed per round (0 when idle)"
        )


def link_for(settings: Settings, notice: Notice, recipient: str, now: datetime) -> str | None:
    """The signed console link of ``notice`` for ``recipient``: it holds until the tier's
    window ends (after that the approval is another tier's), or ``link_ttl_s`` from ``now``."""
    path = notice.link_path
    if path is None:
        return None
    if notice.kind.to_submitter:
        # The workflow's own page: sign-in is all it asks (no approval to sign a link for).
        return f"{settings.console_url.rstrip('/')}{path}"
    expires = notice.waiting_until or now + timedelta(seconds=settings.link_ttl_s)
    return SignedLink(path, recipient, expires).url(
        settings.console_url, settings.link_key.get_secret_value()
    )


async def send(settings: Settings, deps: Deps, claimed: Claimed, now: datetime) -> None:
    """Send one message; DeliveryError when its channel did not take it."""
    notice = claimed.notice
    link = link_for(settings, notice, claimed.recipient, now)
    if claimed.recipient.startswith(SUBMITTER):
        principal = claimed.recipient.removeprefix(SUBMITTER)
        submitter = settings.submitters.get(principal)
        address = (
            None
            if submitter is None
            else (submitter.email if claimed.channel == Channel.EMAIL else submitter.webhook)
        )
        if address is None:
            raise DeliveryError(
                f"no {claimed.channel} configured for submitter {principal} (CHORUS_SUBMITTERS)"
            )
        if claimed.channel == Channel.EMAIL:
            await deps.channels.email(
                address, subject_line(notice), message_text(notice, link), str(claimed.delivery_id)
            )
        else:
            await deps.channels.webhook(address, webhook_body(notice, link))
    elif claimed.channel == Channel.EMAIL:
        reviewer = settings.reviewers.get(claimed.recipient)
        if reviewer is None or not reviewer.email:
            raise DeliveryError(f"no e-mail address configured for {claimed.recipient} (CHORUS_REVIEWERS)")
        await deps.channels.email(
            reviewer.email, subject_line(notice), message_text(notice, link), str(claimed.delivery_id)
        )
    else:
        tier = claimed.recipient.removeprefix("tier:")
        url = settings.tier_webhooks.get(tier)
        if url is None:
            raise DeliveryError(f"no webhook configured for tier {tier} (CHORUS_TIER_WEBHOOKS)")
        await deps.channels.webhook(url, webhook_body(notice, link))


def submitter_notified(
    claimed: Claimed, now: datetime, producer: ProducerRef, traceparent: str
) -> Envelope | None:
    """``submitter.notified`` for a message its channel took, when it was to the workflow's
    submitter (None for a reviewer's). Its id is the delivery's: the same message is never
    stated twice."""
    notice = claimed.notice
    if not notice.kind.to_submitter:
        return None
    ended = notice.kind is NoticeKind.SUBMISSION_ENDED
    event = SubmitterNotified(
        notice="ended" if ended else "waiting",
        channel=Channel(claimed.channel).value,
        outcome=notice.outcome if ended else None,  # type: ignore[arg-type]
        approval_id=None if ended else notice.approval_id,
        delivery_id=str(claimed.delivery_id),
        attempts=claimed.attempt,
        delivered_at=now,
    )
    return start_envelope(
        event,
        workflow_id=notice.workflow_id,
        workflow_type=notice.workflow_type,
        producer=producer,
        now=now,
        idempotency_key=f"submitter.notified/{claimed.delivery_id}",
        event_id=uuid.uuid5(claimed.delivery_id, "submitter.notified"),
        traceparent=traceparent,  # the delivering attempt's span
    )


async def deliver_due(rt: RuntimeHandle) -> None:
    settings: Settings = rt.settings
    metrics = DeliveryMetrics(rt)
    rng = random.Random()

    async def attempt(claimed: Claimed) -> None:
        started = time.monotonic()
        error: str | None = None
        # The attempt is a span of the workflow's trace: the calls it makes, and what it
        # states (submitter.notified), are its children.
        with work_span(SERVICE, f"deliver {claimed.channel}", claimed.notice.traceparent) as traceparent:
            try:
                await send(settings, rt.deps, claimed, rt.clock.now())
            except DeliveryError as exc:
                error = str(exc)[:1000]
            except Exception as exc:  # a message that cannot be sent fails alone, recorded, never the loop
                error = f"{type(exc).__name__}: {exc}"[:1000]
        now = rt.clock.now()
        retry_at = None
        if error is not None and claimed.attempt < settings.delivery_attempts:
            wait_s = full_jitter(
                claimed.attempt, settings.delivery_backoff_base_s, settings.delivery_backoff_cap_s, rng
            )
            retry_at = now + timedelta(seconds=wait_s)
        async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
            status = await deliveries.record_attempt(
                conn,
                claimed,
                at=now,
                error=error,
                duration_ms=(time.monotonic() - started) * 1000.0,
                retry_at=retry_at,
            )
            told = submitter_notified(claimed, now, rt.producer, traceparent) if error is None else None
            if told is not None:
                # In the attempt's transaction: stated once, when the delivery is recorded
                # (a message superseded while it was sent was still read: it is stated too).
                await tx.publish(told)
        result = "delivered" if error is None else ("retry" if retry_at else "given_up")
        metrics.attempts.labels(claimed.channel, result).inc()
        level = logging.INFO if error is None else logging.WARNING
        log.log(
            level,
            "notification %s",
            result,
            extra=fields(
                delivery_id=str(claimed.delivery_id),
                channel=claimed.channel,
                recipient=claimed.recipient,
                workflow_id=claimed.notice.workflow_id,
                approval_id=claimed.notice.approval_id,
                attempt=claimed.attempt,
                status=status,
                error=error,
                retry_at=retry_at.isoformat() if retry_at else None,
            ),
        )

    async def round_() -> float:
        now = rt.clock.now()
        async with rt.pool.acquire() as conn:
            claimed = await deliveries.claim_due(
                conn, now, settings.delivery_batch, settings.delivery_lease_s
            )
        metrics.pending.set(len(claimed))
        # Concurrently: one slow mail server does not hold the webhooks behind it.
        await asyncio.gather(*(attempt(c) for c in claimed))
        if len(claimed) == settings.delivery_batch:
            return 0.0
        async with rt.pool.acquire() as conn:
            upcoming = await deliveries.next_due(conn)
        if upcoming is None:
            return settings.delivery_idle_s
        return max(0.0, min(settings.delivery_idle_s, (upcoming - rt.clock.now()).total_seconds()))

    await forever(
        "notification delivery", round_, every_s=settings.delivery_idle_s, sleep=rt.clock.sleep, retry_s=1.0
    )
