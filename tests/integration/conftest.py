"""Integration tests seal personal data as production does: one key service for the
session (its own process, on a free port), which every service a test starts reaches
through CHORUS_KEY_STORES. Dev stacks started by a test run their own."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.processes import ServiceProcess


@pytest.fixture(scope="session", autouse=True)
async def key_service(kafka_bootstrap: str, database_url: str) -> AsyncIterator[str]:
    log_dir = Path(tempfile.mkdtemp(prefix="chorus-key-service-"))
    proc = ServiceProcess(
        "key_service",
        {"CHORUS_KAFKA_BOOTSTRAP": kafka_bootstrap, "CHORUS_DATABASE_URL": database_url},
        log_dir,
    )
    proc.start()
    await proc.wait_healthy()
    previous = os.environ.get("CHORUS_KEY_STORES")
    os.environ["CHORUS_KEY_STORES"] = json.dumps({"local": proc.url})
    try:
        yield proc.url
    finally:
        if previous is None:
            os.environ.pop("CHORUS_KEY_STORES", None)
        else:
            os.environ["CHORUS_KEY_STORES"] = previous
        await proc.terminate()
