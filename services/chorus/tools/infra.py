"""A local Kafka and PostgreSQL for a project of one's own, started the way `make up` starts
them for this repository, from what the package ships: no checkout of Chorus needed.

The scripts are deploy/local's (the package has them as ``chorus/tools/localstack``): Kafka 4
from Maven Central's jars on Java 17, secured like production (SASL/SCRAM over TLS, an
authorizer that denies what no ACL allows), and PostgreSQL from the system's binaries or
Debian's package. Everything they keep, the credentials included, is in the project's
``.chorus/`` (their ``CHORUS_LOCAL``). Then, as the admins, the project's registry (the
union with the platform's) is provisioned: topics, a SCRAM user and the ACLs per principal,
signing keys, the key service's certificate, a database role per service.

``.chorus/infra.env`` records the ports and says how to reach both (the settings `make up`'s
``LOCAL_ENV`` gives). Every ``chorus`` command run inside the project and its generated tests'
``conftest.py`` take them as defaults (``use_project_infra``), so a reader's shell needs
nothing exported, as ``docker compose`` reads a project's ``.env``; a variable set in the
environment always wins. ``chorus dev infra env`` prints them for other programs
(``eval "$(chorus dev infra env)"``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from chorus.base.settings import DEMO_DATABASE_PASSWORD

ENV_FILE = "infra.env"
KAFKA_PORT = 9092
POSTGRES_PORT = 54329
"""The ports `make up` uses, which every setting's default points at."""
PORT_KEYS = ("CHORUS_INFRA_KAFKA_PORT", "CHORUS_INFRA_POSTGRES_PORT")


def scripts() -> Path:
    """deploy/local inside the installed package (in a checkout, the folder itself)."""
    folder = Path(str(files("chorus.tools") / "localstack" / "deploy" / "local"))
    if not (folder / "kafka.sh").is_file():
        raise FileNotFoundError(f"{folder}: no kafka.sh (this install of Chorus lacks its package data)")
    return folder


def read_env_file(path: Path) -> dict[str, str]:
    """NAME=value lines of an env file (comments and blank lines skipped)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            found[name.strip()] = value.strip()
    return found


def project_infra_env(root: Path) -> dict[str, str]:
    """The settings ``chorus dev infra up`` recorded for the project at ``root`` ({} if none)."""
    path = root / ".chorus" / ENV_FILE
    return read_env_file(path) if path.is_file() else {}


def use_project_infra(start: Path, environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Default ``environ`` to the recorded settings of the project ``start`` is in (the
    nearest folder up with ``schemas/project.yaml``); what it set, by name. Nothing is
    parsed but the env file: a broken registry is for the command at hand to report."""
    root = next((f for f in (start, *start.parents) if (f / "schemas" / "project.yaml").is_file()), None)
    if root is None:
        return {}
    added = {name: value for name, value in project_infra_env(root).items() if name not in environ}
    environ.update(added)
    return added


@dataclass(frozen=True)
class Infra:
    """The local Kafka and PostgreSQL of the project whose state folder is ``state``."""

    state: Path
    kafka_port: int = KAFKA_PORT
    postgres_port: int = POSTGRES_PORT

    @classmethod
    def of(cls, state: Path, kafka_port: int | None = None, postgres_port: int | None = None) -> Infra:
        """The project's infrastructure: on the ports of its first start (they cannot change
        under data made with them), else the ones given, else the defaults."""
        saved = project_infra_env(state.parent)
        ports = [int(saved[k]) for k in PORT_KEYS if k in saved]
        if len(ports) == 2:
            asked = (kafka_port or ports[0], postgres_port or ports[1])
            if asked != tuple(ports):
                raise ValueError(
                    f"{state} runs Kafka on {ports[0]} and PostgreSQL on {ports[1]}: "
                    "`chorus dev infra reset` first to change them"
                )
            return cls(state, *ports)
        return cls(state, kafka_port or KAFKA_PORT, postgres_port or POSTGRES_PORT)

    @property
    def admin_database_url(self) -> str:
        """The local cluster's superuser (postgres.sh makes it with the demo password)."""
        return f"postgresql://chorus:{DEMO_DATABASE_PASSWORD}@127.0.0.1:{self.postgres_port}/chorus"

    def _script_env(self) -> dict[str, str]:
        return {
            **os.environ,
            "CHORUS_LOCAL": str(self.state),
            "KAFKA_PORT_BASE": str(self.kafka_port),
            "CHORUS_PG_PORT": str(self.postgres_port),
            "CHORUS_DATABASE_URL": self.admin_database_url,
        }

    def settings(self) -> dict[str, str]:
        """What a process needs to reach both, as the admins (``make up``'s LOCAL_ENV): the
        dev stack hands each service its own login from the users' folder."""
        secrets = self.state / "kafka" / "secrets"
        tls = self.state / "tls"
        return {
            PORT_KEYS[0]: str(self.kafka_port),
            PORT_KEYS[1]: str(self.postgres_port),
            "CHORUS_KAFKA_BOOTSTRAP": f"127.0.0.1:{self.kafka_port}",
            **read_env_file(self.state / "kafka" / "admin.env"),
            "CHORUS_KAFKA_USERS_DIR": str(secrets / "users"),
            "CHORUS_SIGNING_DIR": str(secrets / "signing"),
            "CHORUS_DATABASE_URL": self.admin_database_url,
            # The local stack runs with the demo's published secrets, which only demo accepts.
            "CHORUS_ENV": "demo",
            "CHORUS_KEY_SERVICE_TLS_CERT_FILE": str(tls / "key_service.pem"),
            "CHORUS_KEY_SERVICE_TLS_KEY_FILE": str(tls / "key_service.key"),
            "CHORUS_KEY_SERVICE_CA_FILE": str(tls / "ca.pem"),
        }

    def script(self, name: str, *args: str, echo: Callable[[str], None]) -> None:
        """Run deploy/local's ``name`` (kafka.sh, postgres.sh); its log lines go to ``echo``."""
        _run(["bash", str(scripts() / name), *args], self._script_env(), echo, f"{name} {' '.join(args)}")

    def _chorus(self, *args: str, schemas: Path | None, echo: Callable[[str], None]) -> None:
        """A ``chorus`` command as the admins (``schemas``: the registry it provisions)."""
        command = [sys.executable, "-m", "chorus.tools.cli.main", *args]
        if schemas is not None:
            command += ["--schemas-dir", str(schemas)]
        _run(command, {**os.environ, **self.settings()}, echo, f"chorus {' '.join(args)}")

    def up(self, schemas: Path, echo: Callable[[str], None]) -> None:
        """Start both (a no-op for what runs already) and provision ``schemas``'s registry."""
        self.state.mkdir(exist_ok=True)
        self.script("kafka.sh", "start", echo=echo)
        if not (self.state / "kafka" / "admin.env").is_file():
            # kafka.sh takes a port that answers for a Kafka it did not start: not ours.
            raise RuntimeError(
                f"127.0.0.1:{self.kafka_port} is taken by something this project did not start "
                "(another stack's Kafka?): choose another --kafka-port"
            )
        self._chorus("topics", "apply", schemas=schemas, echo=echo)
        self._chorus("access", "apply", schemas=schemas, echo=echo)
        self._chorus("access", "signing-keys", schemas=schemas, echo=echo)
        self._chorus("access", "key-service-tls", "--dir", str(self.state / "tls"), schemas=None, echo=echo)
        self.script("postgres.sh", "start", echo=echo)
        self._chorus("access", "database", schemas=schemas, echo=echo)
        self.write_env()

    def write_env(self) -> None:
        lines = [f"{name}={value}" for name, value in self.settings().items()]
        header = "# The project's local Kafka and PostgreSQL (chorus dev infra up). Do not edit.\n"
        path = self.state / ENV_FILE
        path.touch(mode=0o600)  # it holds the admins' passwords
        path.write_text(header + "\n".join(lines) + "\n")

    def down(self, echo: Callable[[str], None]) -> None:
        self.script("kafka.sh", "stop", echo=echo)
        self.script("postgres.sh", "stop", echo=echo)

    def reset(self, echo: Callable[[str], None]) -> None:
        """Stop both and delete their data (the jars stay); the ports may change after."""
        self.script("kafka.sh", "reset", echo=echo)
        self.script("postgres.sh", "reset", echo=echo)
        (self.state / ENV_FILE).unlink(missing_ok=True)

    def status(self) -> tuple[bool, list[str]]:
        """Whether both run, and what the scripts say."""
        lines: list[str] = []
        running = True
        for name in ("kafka.sh", "postgres.sh"):
            done = subprocess.run(
                ["bash", str(scripts() / name), "status"],
                env=self._script_env(),
                capture_output=True,
                text=True,
                check=False,
            )
            lines += (done.stdout + done.stderr).splitlines()
            running = running and done.returncode == 0
        return running, lines


def _run(command: list[str], env: Mapping[str, str], echo: Callable[[str], None], what: str) -> None:
    """Run ``command`` (``what``, to people); every line it writes goes to ``echo``; a
    failure raises, naming it."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=1800)
    for line in (done.stdout + done.stderr).splitlines():
        echo(line)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode})")


def shell_exports(values: Mapping[str, str]) -> str:
    """``export NAME=value`` lines a POSIX shell evaluates."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in values.items())


def infra_env(state: Path) -> dict[str, str]:
    """The settings of the infrastructure of the project whose state folder is ``state``."""
    return project_infra_env(state.parent)
