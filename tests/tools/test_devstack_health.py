"""The dev stack (and the reliability suite's deployment on it) waits for each process's
health answer before it counts the process as started: a replica or a release of a service
answers as that service, and a process that took another's port does not count."""

from __future__ import annotations

import httpx
import pytest

from chorus.tools.devstack import _answers_as


def health(service: str, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json={"service": service, "status": "ok"})


@pytest.mark.parametrize(
    "proc", ["payment_agent", "payment_agent#2", "payment_agent@0.2.0", "payment_agent@0.2.0#3"]
)
def test_a_service_its_replicas_and_its_releases_are_healthy_when_the_service_answers(proc: str) -> None:
    assert _answers_as(health("payment_agent"), proc)


def test_another_service_on_the_port_or_an_error_is_not_healthy() -> None:
    assert not _answers_as(health("timer_service"), "payment_agent#2")
    assert not _answers_as(health("payment_agent", status=503), "payment_agent#2")
