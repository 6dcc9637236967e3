"""A dependency's circuit breaker is shared by replicas through PostgreSQL: a failing payment
provider receives a bounded number of calls however many workflows retry against it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from aiohttp import web

from chorus.base.clock import ManualClock
from chorus.base.errors import TransientError
from chorus.base.metrics import Metrics
from chorus.outside import breaker
from chorus.outside.breaker import BreakerOpenError, BreakerPolicy, BreakerState, CircuitBreaker
from chorus.outside.dependencies import Dependencies, Dependency
from chorus.outside.external import ExternalRejection
from chorus.reference.payment_agent.adapters.payments import PaymentClient

pytestmark = pytest.mark.integration

WORKFLOWS = 40
ATTEMPTS = 6
POLICY = BreakerPolicy(failure_ratio=0.5, min_calls=5, window_s=60, open_s=30, probes=1)


class Provider:
    """A payment provider that answers 503 (down), 201 (up) or 422 (refuses), counting calls."""

    def __init__(self) -> None:
        self.answer = 503
        self.calls = 0

    async def pay(self, request: web.Request) -> web.Response:
        self.calls += 1
        if self.answer == 201:
            return web.json_response({"payment_id": f"pay-{self.calls}", "reference": "ref"}, status=201)
        return web.json_response({"error": "unavailable"}, status=self.answer)


@pytest.fixture
async def provider() -> AsyncIterator[tuple[Provider, str]]:
    fake = Provider()
    app = web.Application()
    app.router.add_post("/payments", fake.pay)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield fake, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def pay(client: PaymentClient, workflow: int) -> str:
    try:
        await client.pay(
            key=f"pay:wf-{workflow}", invoice_id="INV-1", vendor_id="v", amount_cents=1, currency="EUR"
        )
    except BreakerOpenError:
        return "fast"
    except TransientError:
        return "failed"
    except ExternalRejection:
        return "refused"
    return "paid"


async def test_a_failing_provider_gets_calls_bounded_by_the_breaker_not_by_the_waiting_workflows(
    database_url: str, unique: str, provider: tuple[Provider, str]
) -> None:
    """Forty workflows, each retrying its payment six times ten seconds apart (one minute),
    through two replicas: without a breaker the provider would get 240 calls. With it: the
    five that open it, then one probe each time it may close (every 30 s)."""
    fake, url = provider
    clock = ManualClock()
    dependency = Dependency(name=f"payments-{unique}", breaker=POLICY)
    pools = [await asyncpg.create_pool(database_url, min_size=1, max_size=2) for _ in range(2)]
    try:
        async with httpx.AsyncClient() as http:
            replicas = [
                PaymentClient(http, url, "key", 2.0, await Dependencies(pool, clock).guard(dependency))
                for pool in pools
            ]
            outcomes: list[str] = []
            for attempt in range(ATTEMPTS):
                clock.advance(10 if attempt else 0)
                for workflow in range(WORKFLOWS):
                    outcomes.append(await pay(replicas[workflow % 2], workflow))
            assert fake.calls <= POLICY.min_calls + 2, fake.calls  # not 240
            assert outcomes.count("fast") >= WORKFLOWS * ATTEMPTS - POLICY.min_calls - 2
            assert outcomes.count("paid") == 0

            # Fast failures are transient and say when to come back: when it may close.
            with pytest.raises(BreakerOpenError) as refused:
                await replicas[0].pay(key="k", invoice_id="i", vendor_id="v", amount_cents=1, currency="EUR")
            assert 0 < (refused.value.retry_after_s or 0) <= POLICY.open_s * 1.2  # with jitter
            assert {b.name: b.state for b in breaker.known()}[dependency.name] is BreakerState.OPEN
            metrics = Metrics("test")
            metrics.registry.register(breaker.BreakerCollector())  # as chorus.outside.feature plugs it
            scraped = metrics.render().decode()
            assert f'chorus_breaker_state{{dependency="{dependency.name}"}} 2.0' in scraped

            # The provider recovers: after open_s one probe goes through, succeeds, and closes
            # the breaker for every replica.
            fake.answer = 201
            clock.advance(POLICY.open_s)
            calls = fake.calls
            assert await pay(replicas[1], 1) == "paid"
            assert [await pay(replicas[w % 2], w) for w in range(6)] == ["paid"] * 6
            assert fake.calls == calls + 7
    finally:
        for pool in pools:
            await pool.close()


async def test_a_provider_that_answers_no_is_working_and_never_opens_the_breaker(
    database_url: str, unique: str, provider: tuple[Provider, str]
) -> None:
    fake, url = provider
    fake.answer = 422  # it refuses each payment: an answer, not an outage
    clock = ManualClock()
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        guard = await Dependencies(pool, clock).guard(Dependency(name=f"refusing-{unique}", breaker=POLICY))
        async with httpx.AsyncClient() as http:
            client = PaymentClient(http, url, "key", 2.0, guard)
            assert [await pay(client, w) for w in range(20)] == ["refused"] * 20
        assert fake.calls == 20
    finally:
        await pool.close()


async def test_a_probe_that_never_reports_does_not_keep_the_breaker_half_open(
    database_url: str, unique: str
) -> None:
    """The replica holding the half-open probe dies mid-call: the others are told to come back
    after open_s (not at once, burning their attempts), and then a new probe goes out."""
    clock = ManualClock()
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        probe_holder, other = (
            CircuitBreaker(pool, f"lost-{unique}", clock=clock, policy=POLICY) for _ in range(2)
        )
        await probe_holder.setup()
        for _ in range(POLICY.min_calls):
            with pytest.raises(TransientError):
                async with other.call():
                    raise TransientError("provider down")
        clock.advance(POLICY.open_s)
        lost = probe_holder.call()
        await lost.__aenter__()  # the probe goes out; its process dies before it reports
        with pytest.raises(BreakerOpenError) as refused:
            async with other.call():
                pass
        assert (refused.value.retry_after_s or 0) >= POLICY.open_s
        clock.advance(POLICY.open_s)
        async with other.call():  # a new probe: it succeeds and closes the breaker
            pass
        assert other.state is BreakerState.CLOSED
    finally:
        await pool.close()
