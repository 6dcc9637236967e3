"""docs/tutorial.md, run as a reader would: from an empty folder named support, every
command with the output the page shows, every file it writes; then what it built is
examples/support, file for file (the third reference workflow is what the tutorial writes).

The page's commands use the real topic names and documented ports (`chorus dev up`), as a
reader's do. The test gives them a database of their own, so that state from earlier runs
(an approval decided, a dead letter redriven) does not answer for this one, and deletes
support.tickets first, so that the page's `--from-beginning` reads find this run's events
only (its `chorus topics apply` makes it again)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from chorus.contracts.registry import load_registry
from chorus.kernel.kafka import make_admin
from tests.support.database import own_database
from tests.support.helm import INVARIANTS, ensure_helm, of_kind, parse, service_of, template, validate
from tests.support.tutorial import run_markdown

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
EXAMPLE = ROOT / "examples" / "support"
TOPIC = "support.tickets"
NOT_BUILT = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".chorus", "deploy"}
"""What running a project leaves beside what it is (caches, the dev stack's logs), and what
`chorus deploy helm` generates from it (rendered and validated instead)."""


def tutorial_env(database_url: str) -> dict[str, str]:
    """A reader's shell after the page's "Before you start": the local stack's admin login
    and secrets, the checkout's tools on PATH; nothing of this test process besides."""
    passed = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("CHORUS_KAFKA_") or k in ("CHORUS_SIGNING_DIR", "HOME", "LANG")
    }
    return {
        **passed,
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "CHORUS_ENV": "demo",
        "CHORUS_DATABASE_URL": database_url,
        "PYTHONUNBUFFERED": "1",  # stdout and stderr in the order they were written
        "COLUMNS": "120",  # a terminal's width: the tables as a reader sees them
    }


def built_files(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not NOT_BUILT & set(path.relative_to(folder).parts)
    }


async def delete_topic(bootstrap: str, topic: str) -> None:
    admin = make_admin(bootstrap, client_id="chorus-tests-tutorial")
    await admin.start()
    try:
        if topic in await admin.list_topics():
            await admin.delete_topics([topic])
        for _ in range(100):  # deletion completes in the background
            if topic not in await admin.list_topics():
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"{topic} was not deleted")
    finally:
        await admin.close()


@pytest.fixture
async def reader_database(database_url: str) -> AsyncIterator[str]:
    async with own_database(database_url, f"chorus_tutorial_{uuid.uuid4().hex[:8]}") as url:
        yield url


async def test_the_tutorial_runs_as_written_and_builds_examples_support(
    tmp_path: Path, kafka_bootstrap: str, reader_database: str
) -> None:
    await delete_topic(kafka_bootstrap, TOPIC)
    folder = tmp_path / "support"
    folder.mkdir()
    env = tutorial_env(reader_database)
    try:
        await asyncio.to_thread(run_markdown, TUTORIAL, folder, env)
    finally:
        if (folder / ".chorus" / "dev.pid").exists():  # the page failed before `chorus dev down`
            down = ["chorus", "dev", "down"]
            await asyncio.to_thread(subprocess.run, down, cwd=folder, env=env, check=False, timeout=120)
    built, example = built_files(folder), built_files(EXAMPLE)
    assert sorted(built) == sorted(example)
    assert [name for name in built if built[name] != example[name]] == []
    # The page's deployment: the chart it wrote renders, every object valid for its API, and
    # keeps the chart's promises for the reader's service as for the platform's.
    text = template(ensure_helm(), [], chart=folder / "deploy" / "helm" / "chorus")
    assert validate(text, tmp_path)["errors"] == []
    docs = parse(text)
    assert "triage_agent" in {service_of(d) for d in of_kind(docs, "Deployment")}
    registry = load_registry(folder / "schemas")
    for name, check in INVARIANTS.items():
        assert check(docs, text, registry) == [], name
