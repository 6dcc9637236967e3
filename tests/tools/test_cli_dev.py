"""``chorus dev``: what it refuses, and why, without starting anything. (Its happy path,
`up` then `down` around a running stack, is docs/tutorial.md's, run by test_tutorial.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.processes import run_chorus


def chorus(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_chorus(cwd, "dev", *args, timeout_s=60)


def test_outside_a_project_nothing_starts_and_it_says_why(tmp_path: Path) -> None:
    refused = chorus(tmp_path, "up")
    assert refused.returncode == 2
    assert "is not in a project (no schemas/project.yaml up from it)" in refused.stderr
    assert not (tmp_path / ".chorus").exists()


def test_down_with_nothing_running_says_so(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "project.yaml").write_text("name: desk\ncontracts: []\n")
    stopped = chorus(tmp_path / "schemas", "down")  # from a folder inside the project
    assert stopped.returncode == 1
    assert "not running" in stopped.stderr


def test_a_stale_pid_file_is_not_a_running_stack(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "project.yaml").write_text("name: desk\ncontracts: []\n")
    (tmp_path / ".chorus").mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process that ran and is gone: its pid is free
    (tmp_path / ".chorus" / "dev.pid").write_text(str(gone.pid))
    stopped = chorus(tmp_path, "down")
    assert stopped.returncode == 1 and "not running" in stopped.stderr
    assert not (tmp_path / ".chorus" / "dev.pid").exists()
