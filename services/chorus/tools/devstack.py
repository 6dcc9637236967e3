"""Every Chorus service as its own OS process on this machine (demo, end-to-end and reliability tests).

Kafka and PostgreSQL come from deploy/local; this starts the sandbox (stand-ins
for the outside world) and one process per service, each with its own log file,
HTTP port and environment, and can kill, pause or restart any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from chorus.base.settings import LOCAL_DATABASE_URL
from chorus.contracts.envelope import RELEASE_PATTERN
from chorus.contracts.registry import read_project
from chorus.releases.rollouts import MAIN_RELEASE
from chorus.testing.stack import key_service_tls
from chorus.tools.access import local_password
from chorus.tools.dbroles import provision_database, role_url
from chorus.tools.declarations import service_module
from chorus.tools.httpedges import Edge, load_http_edges

ROOT = Path(__file__).resolve().parents[3]

# Start order: platform first, so nothing the agents emit waits for its consumer.
SERVICES = (
    "key_service",
    "timer_service",
    "deadletter_service",
    "audit_projector",
    "approval_gate",
    "invoice_agent",
    "budget_agent",
    "payment_agent",
    "report_agent",
    "source_fetcher",
    "notifier",
    "rollout_service",
    "gateway",
)


# The ports README.md documents (each service's config default): `make services` uses
# them, so `chorus dlq` (8102) and `chorus status` find every service; tests use free ones.
DOCUMENTED_PORTS = {
    "timer_service": 8101,
    "deadletter_service": 8102,
    "audit_projector": 8103,
    "outcome_analytics": 8104,
    "gateway": 8110,
    "invoice_agent": 8111,
    "budget_agent": 8112,
    "approval_gate": 8113,
    "payment_agent": 8114,
    "report_agent": 8115,
    "source_fetcher": 8116,
    "key_service": 8117,
    "notifier": 8118,
    "console": 8120,
    "rollout_service": 8121,
}
MODEL_USERS = ("invoice_agent", "report_agent")
WITHOUT_DATABASE = ("outcome_analytics", "console")
"""Services with no PostgreSQL of their own (the faust view lives in memory; the console
keeps nothing)."""
WITHOUT_KAFKA = ("console",)
"""Processes with no Kafka login: the console is a client of the HTTP APIs only."""
API_PORT = 8080
KEY_API_PORT = 8127
"""The key service's data-key API (TLS only; its /health and /metrics are on 8117)."""
SANDBOX_PORT = 9400
SMTP_PORT = 9425
"""The sandbox's mail server stand-in (the notifier's e-mail lands there: GET /mail)."""
CONSOLE_PORT = DOCUMENTED_PORTS["console"]
REVIEW_TIERS = ("manager", "director", "editor")
"""The demo's reviewer tiers: each has a Slack-compatible channel in the sandbox."""


REFERENCE_PROJECT = ROOT / "examples" / "support"
"""The third reference workflow, written as a project of its own (docs/tutorial.md): the
dev stack of `make services` and `make demo` runs its services beside the platform's."""

SCRAPE_TARGETS = ROOT / ".local" / "observe" / "targets.json"
"""Where `make services` lists its processes for `make observe`'s Prometheus."""


def project_services(project: Path) -> list[str]:
    """A project's services: the packages under its ``services/`` that declare one
    (``service.py``, as ``chorus new service`` makes them)."""
    return sorted(path.parent.name for path in (project / "services").glob("*/service.py"))


def project_port(project: Path, service: str) -> int:
    """The HTTP port a project's service documents (its config's default)."""
    if str(project / "services") not in sys.path:
        sys.path.append(str(project / "services"))
    settings = importlib.import_module(f"{service}.config").Settings
    port: int = settings.model_fields["http_port"].default
    return port


def release_proc(service: str, release: str) -> str:
    """The dev stack's name of the process of another release of a service."""
    return f"{service}@{release}"


PICKED_PORTS = range(20000, 32768)
"""Where a stack picks its servers' ports: below Linux's ephemeral range (32768-60999 by
default), from which every outgoing connection takes its local port. A port the kernel hands
out for a bind to 0 comes from that range, and a connection made before the server binds it
may take it (a test's notifier failed to start so: "Address already in use")."""


def free_ports(n: int) -> list[int]:
    """``n`` different free ports: every socket stays bound until all are chosen (one
    closed before the next bind may be handed out again, and two services would then
    share a port, the second failing to start while the first answers its health checks)."""
    sockets: list[socket.socket] = []
    pick = random.SystemRandom()
    try:
        while len(sockets) < n:
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", pick.choice(PICKED_PORTS)))
            except OSError:  # in use: pick another
                sock.close()
                continue
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    [port] = free_ports(1)
    return port


def service_password(users_dir: Path, name: str) -> str:
    """Service ``name``'s local password (`chorus access apply --users-dir` made it): its
    Kafka principal's and, on the local stack, its PostgreSQL role's."""
    password = local_password(users_dir, name)
    if password is None:
        raise RuntimeError(f"no password for {name} in {users_dir}: run `chorus access apply`")
    return password


def service_login(users_dir: Path, name: str) -> dict[str, str]:
    """The Kafka login of service ``name``: its own principal."""
    password = service_password(users_dir, name)
    return {"CHORUS_KAFKA_SASL_USERNAME": name, "CHORUS_KAFKA_SASL_PASSWORD": password}


def _answers_as(response: httpx.Response, proc: str) -> bool:
    """Healthy, and the service of process ``proc`` (not another process that took its port).
    "svc@release" is a release of svc and "svc#2" a replica of it: both answer as svc."""
    if response.status_code != 200:
        return False
    try:
        body = response.json()
    except ValueError:
        return True  # the sandbox's /stats
    service = proc.partition("@")[0].partition("#")[0]
    return not isinstance(body, dict) or body.get("service", service) == service


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    health_url: str | None
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self, extra_env: Mapping[str, str] | None = None) -> None:
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start #{self.starts} ---\n".encode())
            self.popen = subprocess.Popen(
                self.argv,
                env={**self.env, **(extra_env or {})},
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


@dataclass
class DevStack:
    """Processes of one Chorus deployment. ``env`` applies to every service."""

    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    services: tuple[str, ...] = SERVICES
    sandbox_args: list[str] = field(default_factory=list)
    service_env: dict[str, dict[str, str]] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)
    database_roles: dict[str, str] = field(default_factory=dict)
    """service -> password of its PostgreSQL role, provisioned by :meth:`start`."""
    admin_database_url: str = ""
    database_pooler: str = ""
    """host:port of a PgBouncer in transaction mode in front of the database: every service's
    pool goes through it, the outbox relay's leader lock to the database directly."""
    api_port: int = 0
    key_api_port: int = 0
    sandbox_port: int = 0
    smtp_port: int = 0
    console_port: int = 0
    documented_ports: bool = False
    """Every service on its DOCUMENTED_PORTS entry (``make services``) instead of a free port."""
    releases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """service -> more releases of it to run beside the unnamed one (versioned rollouts): a
    process ``<service>@<release>`` each, with ``CHORUS_RELEASE`` set, on a free port;
    ``service_env["<service>@<release>"]`` adds to its environment."""
    project: Path | None = None
    """A project of one's own (``schemas/project.yaml``) whose services run beside the
    platform's: found, not listed (:func:`project_services`); every process reads the
    project's registry (the union with the platform's) unless ``env`` names another."""

    @classmethod
    def documented(
        cls,
        workdir: Path,
        *,
        project: Path | None,
        releases: dict[str, tuple[str, ...]] | None = None,
        sandbox_args: list[str] | None = None,
        service_env: dict[str, dict[str, str]] | None = None,
    ) -> DevStack:
        """Every process, outcome analytics and the console included, on its documented port
        (README), so the console, the CLI and a browser find them (``make services``, the demo)."""
        return cls(
            workdir,
            services=(*SERVICES, "outcome_analytics", "console"),
            api_port=API_PORT,
            sandbox_port=SANDBOX_PORT,
            documented_ports=True,
            releases=releases or {},
            project=project,
            sandbox_args=sandbox_args or [],
            service_env=service_env or {},
        )

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        own: list[str] = []
        if self.project is not None:
            own = [name for name in project_services(self.project) if name not in self.services]
            # Before the gateway, so that a workflow it accepts finds its consumers running.
            platform = [name for name in self.services if name != "gateway"]
            self.services = (*platform, *own, *(("gateway",) if "gateway" in self.services else ()))
        spare = iter(free_ports(len(self.services) + sum(map(len, self.releases.values())) + 5))
        self.api_port = self.api_port or next(spare)
        self.key_api_port = self.key_api_port or (KEY_API_PORT if self.documented_ports else next(spare))
        self.sandbox_port = self.sandbox_port or next(spare)
        self.smtp_port = self.smtp_port or (SMTP_PORT if self.documented_ports else next(spare))
        self.console_port = self.console_port or (CONSOLE_PORT if self.documented_ports else next(spare))
        base = {**os.environ, "PYTHONUNBUFFERED": "1", "CHORUS_LOG_JSON": "true", **self.env}
        if "key_service" in self.services:
            base = {**key_service_tls(base), **base}  # make up's certificate, else one of its own
        project_env = self._project_env(base)
        users_dir = self._logins(base)
        self._add_sandbox(base)
        ports = {
            name: self._documented_port(name) if self.documented_ports else next(spare)
            for name in self.services
        }
        ports["console"] = self.console_port  # the notifier's links lead there, whether it runs or not
        edges = load_http_edges(self.project / "schemas" if self.project is not None else None)
        for name in self.services:
            env = {
                **base,
                **(service_login(Path(users_dir), name) if users_dir and name not in WITHOUT_KAFKA else {}),
                **self._database_env(name),
                "CHORUS_HTTP_PORT": str(ports[name]),
                "CHORUS_PAYMENT_API_URL": self.sandbox_url,
                **self._key_stores(),
                **self.service_env.get(name, {}),
            }
            # The APIs it calls and the pages it links to, where this stack runs them; a
            # public API (http.yaml's port: api) is served on the stack's API port.
            for variable, url in edges.env(name, lambda edge: self._address(edge, ports)).items():
                env.setdefault(variable, url)
            endpoint = edges.endpoints.get(name)
            if endpoint is not None and endpoint.port == "api":
                env["CHORUS_API_PORT"] = str(self.api_port)
            if name == "key_service":
                env["CHORUS_API_PORT"] = str(self.key_api_port)
            self._outside_world(name, env, model_user=name in MODEL_USERS or name in own)
            if name in own:
                env = {**env, **project_env, **self.service_env.get(name, {})}
            self._add(name, name, env, ports[name])
            for release in self.releases.get(name, ()):
                proc = release_proc(name, release)
                named = {"CHORUS_RELEASE": release, **self.service_env.get(proc, {})}
                self._add(proc, name, {**env, **named}, next(spare))

    def _project_env(self, base: dict[str, str]) -> dict[str, str]:
        """The project's services' own environment (``dev.env`` of its project.yaml); every
        process finds the project's code and reads its registry (unless ``env`` names one)."""
        if self.project is None:
            return {}
        declared = read_project(self.project / "schemas")
        if declared is None:
            raise ValueError(f"{self.project}: no schemas/project.yaml (not a project)")
        base["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(self.project / "services"), base.get("PYTHONPATH", "")) if p
        )
        base.setdefault("CHORUS_SCHEMAS_DIR", str(self.project / "schemas"))
        self.sandbox_args = [*self.sandbox_args, *(f"--plugin={m}" for m in declared.dev.sandbox)]
        return {k: v.replace("{sandbox}", self.sandbox_url) for k, v in declared.dev.env.items()}

    def _logins(self, base: dict[str, str]) -> str | None:
        """Takes this process's Kafka and database logins out of ``base``; each service
        gets its own. Returns where the services' passwords are."""
        # No process inherits this one's Kafka login (an admin's, in tests and `make demo`):
        # each service logs in as its own principal, which the broker's ACLs hold to the
        # registry; the sandbox (the outside world) has no Kafka login at all.
        users_dir = base.pop("CHORUS_KAFKA_USERS_DIR", None)
        base.pop("CHORUS_KAFKA_SASL_USERNAME", None)
        base.pop("CHORUS_KAFKA_SASL_PASSWORD", None)
        if users_dir is None and base.get("CHORUS_KAFKA_SECURITY_PROTOCOL", "SASL_SSL").startswith("SASL"):
            raise RuntimeError(
                "the dev stack runs each service as its own Kafka principal: set CHORUS_KAFKA_USERS_DIR "
                "(the Makefile does; `chorus access apply --users-dir` fills it)"
            )
        # Nor the database login (a superuser's, locally): each service connects as its own
        # role, owning its schema and nothing else (chorus.tools.dbroles), provisioned at start.
        self.admin_database_url = base.pop("CHORUS_DATABASE_URL", LOCAL_DATABASE_URL)
        if users_dir is not None:
            self.database_roles = {
                name: service_password(Path(users_dir), name)
                for name in self.services
                if name not in WITHOUT_DATABASE
            }
        return users_dir

    def _add_sandbox(self, base: dict[str, str]) -> None:
        """The sandbox process (the outside world); submitters' URLs may lead there and
        nowhere else on this machine, whatever the caller's process allows itself."""
        base["CHORUS_EGRESS_ALLOW"] = self.env.get(
            "CHORUS_EGRESS_ALLOW", f"127.0.0.1:{self.sandbox_port},localhost:{self.sandbox_port}"
        )
        self.procs["sandbox"] = Proc(
            "sandbox",
            [
                sys.executable,
                "-m",
                "chorus.reference.sandbox",
                "--port",
                str(self.sandbox_port),
                "--smtp-port",
                str(self.smtp_port),
                *self.sandbox_args,
            ],
            base,
            self.workdir / "sandbox.log",
            f"{self.sandbox_url}/stats",
        )

    @property
    def key_service_url(self) -> str:
        """Where this stack's key service serves data keys (TLS only)."""
        return f"https://127.0.0.1:{self.key_api_port}"

    def _key_stores(self) -> dict[str, str]:
        """Every service seals and opens personal data with this stack's key service."""
        if "key_service" not in self.services:
            return {}
        return {"CHORUS_KEY_STORES": json.dumps({"local": self.key_service_url})}

    def _address(self, edge: Edge, ports: Mapping[str, int]) -> str | None:
        """Where this stack serves ``edge``'s target: its public API on the stack's API port,
        else its own port (None when the stack does not run it)."""
        if edge.endpoint.port == "api":
            return self.api_url
        return f"http://127.0.0.1:{ports[edge.target]}" if edge.target in ports else None

    def _outside_world(self, name: str, env: dict[str, str], *, model_user: bool) -> None:
        """What stands in for the world outside Chorus (the sandbox) for service ``name``."""
        if name == "notifier":  # the sandbox's mail server and chat channels
            env.setdefault("CHORUS_SMTP_HOST", "127.0.0.1")
            env.setdefault("CHORUS_SMTP_PORT", str(self.smtp_port))
            env.setdefault("CHORUS_SMTP_STARTTLS", "false")  # the sink speaks plain SMTP, on loopback
            env.setdefault(
                "CHORUS_TIER_WEBHOOKS", json.dumps({t: f"{self.sandbox_url}/slack/{t}" for t in REVIEW_TIERS})
            )
        if model_user:  # the sandbox's deterministic model, over HTTP
            env.setdefault("CHORUS_LLM_BASE_URL", f"{self.sandbox_url}/v1")

    def _documented_port(self, name: str) -> int:
        if name in DOCUMENTED_PORTS or self.project is None:
            return DOCUMENTED_PORTS[name]
        return project_port(self.project, name)

    def add_release(self, service: str, release: str) -> str:
        """Another release of a running service's process (on a free port, not started);
        returns its process name."""
        name = release_proc(service, release)
        base = {k: v for k, v in self.procs[service].env.items() if k != "CHORUS_HTTP_PORT"}
        env = {**base, "CHORUS_RELEASE": release, **self.service_env.get(name, {})}
        self._add(name, service, env, free_port())
        return name

    def _add(self, proc: str, service: str, env: dict[str, str], port: int) -> None:
        self.procs[proc] = Proc(
            proc,
            [sys.executable, "-m", service_module(service)],
            {**env, "CHORUS_HTTP_PORT": str(port)},
            self.workdir / f"{proc}.log",
            f"http://127.0.0.1:{port}/health",
        )

    def scrape_targets(self) -> list[dict[str, Any]]:
        """Every Chorus process as Prometheus file service discovery lists it: its address,
        with ``service`` and ``release`` labels (the alert rules and dashboards use them)."""
        targets = []
        for name, proc in self.procs.items():
            if name == "sandbox" or proc.health_url is None:
                continue  # the stand-in for the outside world is not ours to watch
            service, _, release = name.partition("@")
            address = proc.health_url.removeprefix("http://").removesuffix("/health")
            targets.append(
                {"targets": [address], "labels": {"service": service, "release": release or MAIN_RELEASE}}
            )
        return targets

    def write_scrape_targets(self, path: Path) -> None:
        """Write :meth:`scrape_targets` where ``make observe``'s Prometheus reads them
        (atomically: it re-reads the file whenever it changes)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(self.scrape_targets(), indent=2) + "\n")
        partial.replace(path)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.console_port}"

    @property
    def sandbox_url(self) -> str:
        return f"http://127.0.0.1:{self.sandbox_port}"

    def _database_env(self, name: str) -> dict[str, str]:
        if name in WITHOUT_DATABASE:
            return {}
        if name not in self.database_roles:  # no local passwords (a plaintext opt-out): as given
            return {"CHORUS_DATABASE_URL": self.admin_database_url}
        url = role_url(self.admin_database_url, name, self.database_roles[name])
        if not self.database_pooler:
            return {"CHORUS_DATABASE_URL": url}
        parts = urlsplit(url)
        pooled = parts._replace(netloc=f"{parts.netloc.rsplit('@', 1)[0]}@{self.database_pooler}").geturl()
        return {
            "CHORUS_DATABASE_URL": pooled,
            "CHORUS_DATABASE_POOL_MODE": "transaction",
            "CHORUS_DATABASE_DIRECT_URL": url,
        }

    async def provision(self) -> None:
        """Each service's database role, owning its schema (before any service starts)."""
        if self.database_roles:
            await provision_database(self.admin_database_url, self.database_roles)

    async def start(self, timeout_s: float = 90.0) -> None:
        await self.provision()
        for proc in self.procs.values():
            proc.start()
        await asyncio.gather(*(self.wait_healthy(name, timeout_s) for name in self.procs))
        await self.wait_api(timeout_s)

    async def wait_healthy(self, name: str, timeout_s: float = 90.0) -> None:
        proc = self.procs[name]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while loop.time() < deadline:
                if not proc.running:
                    raise RuntimeError(f"{name} exited during start:\n{proc.tail()}")
                try:
                    if proc.health_url and _answers_as(await client.get(proc.health_url), name):
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError(f"{name} not healthy after {timeout_s}s:\n{proc.tail()}")

    async def wait_api(self, timeout_s: float = 120.0) -> None:
        """Until the gateway answers HTTP (no-op in a stack without one)."""
        if "gateway" not in self.procs:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while loop.time() < deadline:
                try:
                    await client.get(f"{self.api_url}/openapi.json")
                    return
                except httpx.HTTPError:
                    await asyncio.sleep(0.2)
        raise RuntimeError(f"gateway API not answering on {self.api_url}:\n{self.procs['gateway'].tail()}")

    def kill(self, name: str) -> None:
        """SIGKILL: no shutdown code runs, as in a crash or an OOM kill."""
        proc = self.procs[name]
        if proc.popen is not None and proc.running:
            proc.popen.send_signal(signal.SIGKILL)
            proc.popen.wait()

    def pause(self, name: str) -> None:
        """SIGSTOP: the process keeps its sockets but stops responding (a zombie)."""
        assert self.procs[name].popen is not None
        self.procs[name].popen.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]

    def resume(self, name: str) -> None:
        assert self.procs[name].popen is not None
        self.procs[name].popen.send_signal(signal.SIGCONT)  # type: ignore[union-attr]

    async def restart(self, name: str, extra_env: Mapping[str, str] | None = None) -> None:
        self.kill(name)
        self.procs[name].start(extra_env)
        await self.wait_healthy(name)

    async def wait_exit(self, name: str, timeout_s: float = 60.0) -> int:
        proc = self.procs[name]
        assert proc.popen is not None
        code = await exit_code(proc.popen, timeout_s)
        if code is None:
            raise RuntimeError(f"{name} still running after {timeout_s}s")
        return code

    async def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM everything (graceful), then SIGKILL whatever is left."""
        for proc in self.procs.values():
            if proc.popen is not None and proc.running:
                with_stop = proc.popen
                try:
                    with_stop.send_signal(signal.SIGCONT)
                    with_stop.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # Popen has no awaitable exit; poll.
        while any(p.running for p in self.procs.values()) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        for name in self.procs:
            self.kill(name)

    async def sandbox_stats(self) -> dict[str, object]:
        async with httpx.AsyncClient(timeout=5.0) as client:
            stats: dict[str, object] = (await client.get(f"{self.sandbox_url}/stats")).json()
            return stats


async def exit_code(popen: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """The process's exit code once it has exited; None while it still runs after ``timeout_s``
    (Popen has no awaitable exit: polled)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while popen.poll() is None:
        if loop.time() > deadline:
            return None
        await asyncio.sleep(0.05)
    return popen.returncode


async def supervise(stack: DevStack, stop: asyncio.Event, *, max_backoff_s: float = 30.0) -> None:
    """Restart any process that exits, with exponential backoff (1 s doubling to
    ``max_backoff_s``; reset once it has run a minute), and say so on stdout."""
    loop = asyncio.get_running_loop()
    backoff = dict.fromkeys(stack.procs, 1.0)
    started = dict.fromkeys(stack.procs, loop.time())
    due: dict[str, float] = {}
    while not stop.is_set():
        now = loop.time()
        for name, proc in stack.procs.items():
            if proc.running:
                if now - started[name] > 60.0:
                    backoff[name] = 1.0
                continue
            if name not in due:
                code = proc.popen.returncode if proc.popen is not None else None
                due[name] = now + backoff[name]
                print(
                    f"{name} exited (code {code}); restarting in {backoff[name]:.0f}s (log: {proc.log_path})",
                    flush=True,
                )
                backoff[name] = min(backoff[name] * 2, max_backoff_s)
            elif now >= due[name]:
                del due[name]
                proc.start()
                started[name] = now
                print(f"{name} restarted (start #{proc.starts})", flush=True)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


def parse_releases(values: list[str]) -> dict[str, tuple[str, ...]]:
    """``SERVICE@RELEASE`` arguments as DevStack.releases (a ValueError naming a bad one)."""
    releases: dict[str, tuple[str, ...]] = {}
    for value in values:
        service, _, release = value.partition("@")
        if service not in SERVICES or not re.fullmatch(RELEASE_PATTERN, release) or release == MAIN_RELEASE:
            raise ValueError(f"{value!r}: expected SERVICE@RELEASE, a service of {', '.join(SERVICES)}")
        releases[service] = (*releases.get(service, ()), release)
    return releases


async def _run_forever(
    workdir: Path,
    releases: dict[str, tuple[str, ...]],
    project: Path | None,
    targets: Path,
    timeout_s: float,
) -> None:
    """Every service in the foreground on the documented ports until Ctrl-C (and more
    releases of some, on free ports); a service that exits is restarted with backoff. Each
    has ``timeout_s`` to answer its health check."""
    stack = DevStack.documented(workdir, project=project, releases=releases)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stack.start(timeout_s)
        stack.write_scrape_targets(targets)
        print(
            f"Chorus is running: API {stack.api_url}, console {stack.console_url} (sign in with "
            f"demo-manager-key or demo-operator-key), sandbox {stack.sandbox_url} (mail: /mail), "
            f"logs in {workdir}"
        )
        for name in stack.procs:
            if "@" in name:
                print(f"{name} runs beside (health: {stack.procs[name].health_url}); see `chorus rollout`")
        print("`chorus status` shows every service; `chorus dlq list` the dead letters.")
        print("`make observe` (another terminal) runs Prometheus on them, with the alert rules.")
        print("Ctrl-C stops every service (Kafka and PostgreSQL keep running; `make down` stops them).")
        await supervise(stack, stop)
    finally:
        await stack.stop()


if __name__ == "__main__":
    import argparse
    import time

    parser = argparse.ArgumentParser(description="Run every Chorus service until Ctrl-C.")
    parser.add_argument(
        "--release",
        action="append",
        default=[],
        metavar="SERVICE@RELEASE",
        help="also run this release of a service beside it (CHORUS_RELEASE), for a rollout",
    )
    parser.add_argument(
        "--project",
        type=Path,
        # The reference project, once this checkout has it.
        default=REFERENCE_PROJECT if (REFERENCE_PROJECT / "schemas").is_dir() else None,
        help="a project of your own whose services run beside the platform's (default: %(default)s)",
    )
    parser.add_argument(
        "--workdir", type=Path, help="where the logs go (default: .local/services/<time> of this checkout)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        help="seconds each process has to answer its health check (default: %(default)s)",
    )
    args = parser.parse_args()
    try:
        extra = parse_releases(args.release)
    except ValueError as exc:
        parser.error(str(exc))
    workdir = args.workdir or ROOT / ".local" / "services" / time.strftime("%Y%m%d-%H%M%S")
    # `make services` lists its processes where `make observe` looks; a stack given a
    # workdir of its own (`chorus dev up`, perhaps from an installed wheel) keeps them there.
    targets = SCRAPE_TARGETS if args.workdir is None else args.workdir / "targets.json"
    project = args.project.resolve() if args.project else None
    asyncio.run(_run_forever(workdir, extra, project, targets, args.timeout))
