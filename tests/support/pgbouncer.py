"""A PgBouncer of a test's own (Debian's package, `deploy/local/pgbouncer.sh ensure`) in
transaction mode, in front of the test stack's PostgreSQL: what a deployment past one
database's connection limit puts between its services and the server."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from chorus.tools.devstack import free_port
from tests.support.processes import ROOT


@dataclass(frozen=True)
class PgBouncer:
    address: str
    """host:port the services connect to."""
    log: Path
    folder: Path
    process: subprocess.Popen[bytes]

    def allow(self, users: Mapping[str, str]) -> None:
        """Let ``users`` (role -> password) log in, from now on (its auth file, reloaded)."""
        (self.folder / "userlist.txt").write_text("".join(f'"{u}" "{p}"\n' for u, p in users.items()))
        reloads = self.log.read_text(errors="replace").count("re-reading config")
        self.process.send_signal(signal.SIGHUP)
        _wait_for(self, lambda text: text.count("re-reading config") > reloads, "reload")

    def logins(self) -> set[str]:
        """The roles that logged in through it ("login attempt: db=... user=...")."""
        found = set()
        for line in self.log.read_text(errors="replace").splitlines():
            if "login attempt:" in line and " user=" in line:
                found.add(line.split(" user=", 1)[1].split()[0])
        return found


def _binary() -> str:
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else ""
    )
    assert found, f"no pgbouncer: `make test` installs it ({ROOT}/deploy/local/pgbouncer.sh ensure)"
    return found


def _wait_for(bouncer: PgBouncer, done: Callable[[str], bool], what: str) -> None:
    deadline = time.monotonic() + 15
    while not done(bouncer.log.read_text(errors="replace") if bouncer.log.exists() else ""):
        code = bouncer.process.poll()
        assert code is None, f"pgbouncer exited ({code}) before its {what}"
        assert time.monotonic() < deadline, f"no pgbouncer {what} in 15 s: {bouncer.log}"
        time.sleep(0.1)


@contextmanager
def pgbouncer(server_url: str) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode on a free port in front of the server of
    ``server_url`` (no one may log in until :meth:`PgBouncer.allow`); stopped after. As
    root it runs as ``postgres`` (PgBouncer refuses root), so its folder is that user's."""
    server = urlsplit(server_url)
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="chorus-pgbouncer-"))
    (folder / "userlist.txt").write_text("")
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={server.hostname} port={server.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {folder}/userlist.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 2000
log_connections = 1
logfile = {folder}/pgbouncer.log
pidfile = {folder}/pgbouncer.pid
"""
    )
    command = [_binary(), str(folder / "pgbouncer.ini")]
    if os.getuid() == 0:
        owner = pwd.getpwnam("postgres")
        for path in (folder, *folder.iterdir()):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bouncer = PgBouncer(f"127.0.0.1:{port}", folder / "pgbouncer.log", folder, process)
    try:
        _wait_for(bouncer, lambda text: "process up" in text, "start")
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)
