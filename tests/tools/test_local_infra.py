"""What ``chorus dev infra up`` recorded for a project (``.chorus/infra.env``) is the default
of every ``chorus`` command and generated test run in it: found from any folder inside the
project, never over a variable the environment sets, and nothing outside a project."""

from __future__ import annotations

from pathlib import Path

from chorus.tools.infra import use_project_infra


def project(root: Path) -> Path:
    (root / "schemas").mkdir(parents=True)
    (root / "schemas" / "project.yaml").write_text("name: desk\n")
    (root / ".chorus").mkdir()
    (root / ".chorus" / "infra.env").write_text(
        "# written by chorus dev infra up\n"
        "CHORUS_KAFKA_BOOTSTRAP=127.0.0.1:19092\n"
        "CHORUS_DATABASE_URL=postgresql://chorus:chorus@127.0.0.1:15432/chorus\n"
    )
    (root / "services" / "desk").mkdir(parents=True)
    return root


def test_a_folder_inside_the_project_gets_its_settings(tmp_path: Path) -> None:
    root = project(tmp_path / "desk")
    environ: dict[str, str] = {"HOME": "/root"}
    added = use_project_infra(root / "services" / "desk", environ)
    assert environ == {
        "HOME": "/root",
        "CHORUS_KAFKA_BOOTSTRAP": "127.0.0.1:19092",
        "CHORUS_DATABASE_URL": "postgresql://chorus:chorus@127.0.0.1:15432/chorus",
    }
    assert set(added) == {"CHORUS_KAFKA_BOOTSTRAP", "CHORUS_DATABASE_URL"}


def test_a_variable_the_environment_sets_wins(tmp_path: Path) -> None:
    root = project(tmp_path / "desk")
    environ = {"CHORUS_KAFKA_BOOTSTRAP": "kafka.internal:9093"}
    use_project_infra(root, environ)
    assert environ["CHORUS_KAFKA_BOOTSTRAP"] == "kafka.internal:9093"
    assert environ["CHORUS_DATABASE_URL"].endswith(":15432/chorus")


def test_outside_a_project_or_before_infra_up_nothing_changes(tmp_path: Path) -> None:
    root = project(tmp_path / "desk")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environ: dict[str, str] = {}
    assert use_project_infra(elsewhere, environ) == {} and environ == {}
    (root / ".chorus" / "infra.env").unlink()
    assert use_project_infra(root, environ) == {} and environ == {}
