"""``chorus doctor``: one table of what a deployment's Kafka, PostgreSQL and key services
lack, on the real stack, and a non-zero exit when something is wrong."""

from __future__ import annotations

import json
import os
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from chorus.tools.doctor import Status, broker_checks, postgres_version_check, role_check, skew_check
from tests.support.processes import run_captured
from tests.support.registry import isolated_schemas

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "examples" / "support" / "schemas"
"""What `make up` provisions: the union of the platform's registry and the support project's."""
KAFKA_4 = {0: (0, 13), 1: (4, 18), 22: (0, 5)}
"""Fetch v4+ only (Kafka 4 removed v0-v3) and InitProducerId: what Kafka 4.1 answers."""


def doctor(*args: str, **env: str) -> tuple[int, dict[str, Any], str]:
    command = [sys.executable, "-m", "chorus.tools.cli.main", "doctor", "--output", "json", *args]
    done = run_captured(command, cwd=ROOT, env={**os.environ, **env}, timeout_s=180)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {check["name"]: check["status"] for check in report["checks"]}


def details(report: dict[str, Any]) -> dict[str, str]:
    return {check["name"]: check["detail"] for check in report["checks"]}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# -- what each answer means (no infrastructure) ---------------------------------------------


def test_a_broker_older_than_kafka_4_is_a_warning_and_one_without_transactions_a_problem() -> None:
    assert [c.status for c in broker_checks("b:9092", KAFKA_4, 3)] == [Status.OK, Status.OK]
    older = broker_checks("b:9092", {0: (0, 9), 1: (0, 13), 22: (0, 4)}, 1)
    assert older[0].status is Status.WARNING and "older than Kafka 4.0" in older[0].detail
    without = broker_checks("b:9092", {0: (0, 13), 1: (4, 18)}, 1)
    assert without[1].status is Status.PROBLEM and "no transactions" in without[1].detail


def test_postgres_below_14_a_missing_role_and_a_skewed_clock_are_problems() -> None:
    assert postgres_version_check(130_011).status is Status.PROBLEM
    assert postgres_version_check(150_004).detail == "PostgreSQL 15"
    missing = role_check(["gateway", "timer_service"], {"gateway", "postgres"})
    assert missing.status is Status.PROBLEM and "no login role for timer_service" in missing.detail
    assert skew_check(-2.5).status is Status.PROBLEM and "2.500 s ahead of" in skew_check(-2.5).detail
    assert skew_check(0.02).status is Status.OK


# -- on the real stack ------------------------------------------------------------------------


@pytest.mark.integration
async def test_the_local_stack_passes_every_check(key_service: str) -> None:
    code, report, _ = doctor("--schemas-dir", str(SUPPORT))
    assert {name for name, status in statuses(report).items() if status == "problem"} == set()
    assert code == 0 and report["ok"] is True
    found = statuses(report)
    for name in ("kafka", "kafka security", "kafka transactions", "kafka acls", "topics"):
        assert name in found, name
    for name in ("postgresql", "postgresql roles", "clock"):
        assert name in found, name
    assert any(name.startswith("key service") for name in found)
    said = details(report)
    assert "Kafka 4.0 or newer" in said["kafka"]
    assert said["kafka security"].startswith("SASL_SSL")


@pytest.mark.integration
async def test_what_a_deployment_lacks_is_named_with_its_remedy_and_fails_the_run(
    tmp_path: Path, key_service: str
) -> None:
    # A registry whose topics nobody created and whose principals nobody granted anything.
    unprovisioned = isolated_schemas(tmp_path, f"dr{uuid.uuid4().hex[:8]}", root=SUPPORT)
    code, report, _ = doctor("--schemas-dir", str(unprovisioned))
    assert code == 1 and report["ok"] is False
    found, said = statuses(report), details(report)
    assert found["topics"] == "problem" and said["topics"].endswith("chorus topics apply")
    assert "missing" in said["topics"]
    assert found["kafka"] == "ok"  # the broker itself is fine

    # Nothing at the addresses: each check says what it could not reach, none crashes.
    nowhere = f"127.0.0.1:{closed_port()}"
    code, report, _ = doctor(
        "--schemas-dir",
        str(SUPPORT),
        "--bootstrap",
        nowhere,
        "--database-url",
        f"postgresql://chorus:wrong@{nowhere}/chorus",
        CHORUS_KEY_STORES=json.dumps({"eu": f"https://{nowhere}"}),
    )
    assert code == 1
    found, said = statuses(report), details(report)
    assert found["kafka"] == "problem" and said["kafka"].startswith(f"cannot reach {nowhere}")
    assert found["postgresql"] == "problem" and said["postgresql"].startswith("cannot connect")
    assert found["key service (eu)"] == "problem" and nowhere in said["key service (eu)"]

    # PLAINTEXT is refused as a configuration, whatever the broker would say.
    code, report, _ = doctor("--schemas-dir", str(SUPPORT), CHORUS_KAFKA_SECURITY_PROTOCOL="PLAINTEXT")
    assert code == 1
    assert statuses(report)["kafka security"] == "problem"
