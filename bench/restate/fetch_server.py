"""The Restate server of R5's Restate baseline: one pinned version from the npm registry.

``python bench/restate/fetch_server.py DIR`` (bench/restate/make-venv.sh runs it) puts the
binary at ``DIR/<VERSION>/restate-server`` once; it does nothing when it is there. Restate
ships its server on npm as ``@restatedev/restate-server``, whose per-platform packages
(``@restatedev/restate-server-linux-x64``, ...) carry it as ``bin/restate-server``. The
tarball must match the sha512 pinned below, which must also be the one the registry's
metadata states for the version; the binary is renamed into place only after both checks and
a ``--version`` that names VERSION, so a present binary is a verified one.

Standard library only: the driver (.venv) imports VERSION and ``binary`` from here.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import platform
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

VERSION = "1.7.12"
INTEGRITY = {  # dist.integrity of @restatedev/restate-server-<platform>@VERSION
    "linux-x64": (
        "sha512-URotJ1AIqaSCDkRMl4OrQfTLH+NYuOZb3ZsP7wxxiuAB6pncgPhTUYSvegTF5PTrAShnNyHNpju9kjf2O3QxoA=="
    ),
    "linux-arm64": (
        "sha512-aV7YxWvPhp88MjQtObGDhDCTwCBa68wwZOAMmJqDreO0auHYuSfOqabEx4I90coZsx3zShNusppbTPKprOa+dw=="
    ),
    "darwin-x64": (
        "sha512-ZRS1kk3S4pzIiup2IRRQ3eHoKJSZ43FG4rDe7UbGFWwZ/Yz0xSDa4/3/kiuwaMHXWs/CsKtJe0shx8JCR0DO1g=="
    ),
    "darwin-arm64": (
        "sha512-pHrZMaaeBJxXTgI19WG/aJvxuUDQ2nhSDEEJVseTZQiTEdJ7hboPlhvYacgXIE2iMnLMmWkN5XIlXqosHK8Byg=="
    ),
}
MEMBER = "package/bin/restate-server"
REGISTRY = "https://registry.npmjs.org"


def binary(root: Path) -> Path:
    """Where the pinned server lives under ``root`` (.local/bench-restate)."""
    return root / VERSION / "restate-server"


def platform_name() -> str:
    system = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system())
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    if system is None or arch is None:
        raise SystemExit(
            f"fetch_server: no Restate server package for {platform.system()} {platform.machine()}"
        )
    return f"{system}-{arch}"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:
        body: bytes = response.read()
        return body


def _sri_sha512(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def fetch(root: Path) -> Path:
    target = binary(root)
    if target.exists():
        return target
    name = platform_name()
    package = f"@restatedev/restate-server-{name}"
    meta = json.loads(_get(f"{REGISTRY}/{urllib.parse.quote(package, safe='@')}/{VERSION}"))
    dist = meta["dist"]
    pinned = INTEGRITY[name]
    if dist["integrity"] != pinned:
        raise SystemExit(
            f"fetch_server: the registry states {dist['integrity']} for {package}@{VERSION}, pinned {pinned}"
        )
    print(f"fetch_server: {package}@{VERSION} from {dist['tarball']}", file=sys.stderr)
    tarball = _get(dist["tarball"])
    if _sri_sha512(tarball) != pinned or hashlib.sha1(tarball).hexdigest() != dist["shasum"]:
        raise SystemExit(f"fetch_server: {dist['tarball']} does not match its sha512/shasum")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        source = archive.extractfile(MEMBER)
        if source is None:
            raise SystemExit(f"fetch_server: no {MEMBER} in {dist['tarball']}")
        partial.write_bytes(source.read())
    partial.chmod(0o755)
    said = subprocess.run([str(partial), "--version"], capture_output=True, text=True, check=True).stdout
    if VERSION not in said:
        raise SystemExit(f"fetch_server: {package}@{VERSION} says {said.strip()!r}")
    partial.rename(target)
    return target


if __name__ == "__main__":
    print(f"fetch_server: {fetch(Path(sys.argv[1]))}", file=sys.stderr)
