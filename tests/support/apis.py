"""Hostile requests for any Chorus HTTP API, derived from its OpenAPI document, and
schemathesis run against it.

Every query and path parameter an API documents gets a NUL, a value over the longest any
route takes, and (for a date-time) an instant UTC cannot hold; every API gets header lines
HTTP does not allow. What a user expects back is a 4xx problem naming what is wrong.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from chorus.privacy.feature import KEY_SERVICE_CA, key_service_trust
from chorus.web.webapi import MAX_PARAMETER_CHARS

HOSTILE_INSTANTS = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00")
"""Valid RFC 3339, but outside the years 1 to 9999 once in UTC."""


@dataclass(frozen=True)
class Probe:
    method: str
    path: str
    """With every path parameter filled in, percent-encoded."""
    query: dict[str, str]
    parameter: str
    """The parameter carrying the hostile value: the answer must name it."""
    value: str

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.parameter}={self.value[:40]!r}"


def trust() -> ssl.SSLContext:
    """What a test verifies the local stack's TLS APIs with (the key service's): the
    certificate authority the session's services trust (CHORUS_KEY_SERVICE_CA_FILE)."""
    return key_service_trust(os.environ.get(KEY_SERVICE_CA, ""))


@asynccontextmanager
async def key_api(port: int, **client_args: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a key service's data-key API on ``port`` (TLS, verified as the services
    verify it), once it answers: its server starts beside the runtime, a moment after."""
    url = f"https://127.0.0.1:{port}"
    client_args.setdefault("verify", trust())
    async with httpx.AsyncClient(base_url=url, timeout=10, **client_args) as http:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            try:
                await http.get("/openapi.json")
                break
            except httpx.TransportError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)
        yield http


def _schema(parameter: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = parameter.get("schema") or {}
    for option in schema.get("anyOf", ()):
        if option.get("type") != "null":
            return dict(option)
    return schema


def _hostile_values(schema: dict[str, Any]) -> list[str]:
    if schema.get("type") != "string":
        return []
    values = ["a\x00b", "x" * (MAX_PARAMETER_CHARS + 1)]
    if schema.get("format") == "date-time":
        values += HOSTILE_INSTANTS
    return values


def probes(document: dict[str, Any]) -> Iterator[Probe]:
    """One request per operation, string parameter and hostile value; every other path
    parameter is a plain placeholder."""
    for template, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            parameters = [p for p in operation.get("parameters", ()) if p.get("in") in ("query", "path")]
            for target in parameters:
                for value in _hostile_values(_schema(target)):
                    path = template
                    for p in parameters:
                        if p["in"] == "path":
                            filled = value if p is target else "x"
                            path = path.replace("{" + p["name"] + "}", quote(filled, safe=""))
                    query = {target["name"]: value} if target["in"] == "query" else {}
                    yield Probe(method.upper(), path, query, target["name"], value)


def names(problem: dict[str, Any], parameter: str) -> bool:
    """Whether a problem answer names ``parameter``: as its ``parameter``, or as a field
    error's pointer (``query:since``)."""
    if problem.get("parameter") == parameter:
        return True
    return any(str(e.get("pointer", "")).endswith(f":{parameter}") for e in problem.get("errors", ()))


BAD_HEADER_LINES = (b"X-API-Key: a\x00b", b"X-Note: \x01", b"Bad Name: x")


async def raw_head(url: str, header_line: bytes) -> tuple[int, dict[str, Any]]:
    """GET ``url`` with ``header_line`` as sent, on a socket of its own (an HTTP client
    would refuse to send it): the status, and the problem answered (empty if none)."""
    parts = urlsplit(url)
    tls = trust() if parts.scheme == "https" else None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port, ssl=tls)
    try:
        writer.write(
            b"GET " + (parts.path or "/").encode() + b" HTTP/1.1\r\nHost: x\r\n" + header_line + b"\r\n"
            b"Connection: close\r\n\r\n"
        )
        answer = await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    problem = json.loads(body) if b"content-type: application/problem+json" in head.lower() else {}
    return int(head.split(b" ", 2)[1]), problem


async def schemathesis(
    url: str, key: str, report: Path, *options: str, examples: int = 60, config: str | None = None
) -> str:
    """``st run`` against the OpenAPI document at ``url`` with ``key``, every check but the
    ones ``options`` exclude, ``examples`` per operation (CHORUS_SCHEMATHESIS_EXAMPLES says
    otherwise), ``config`` its schemathesis.toml: its summary, or an AssertionError with the
    report's tail."""
    config_file = report.with_suffix(".toml")
    if config is not None:
        await asyncio.to_thread(config_file.write_text, config)
    command = [
        str(Path(sys.executable).with_name("st")),
        *(["--config-file", str(config_file)] if config is not None else []),
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization:Bearer {key}",
        "--checks",
        "all",
        "--max-examples",
        os.environ.get("CHORUS_SCHEMATHESIS_EXAMPLES", str(examples)),
        "--seed",
        "1313",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        # `--checks all` includes a 10 s response-time limit. Speed is measured in `make
        # bench`, never asserted: on a loaded machine a 403 once took 38 s to arrive. The
        # limit stays only as a hang detector, at the test's own patience.
        "--max-response-time",
        "600",
        "--report",
        "junit",
        "--report-dir",
        str(report.with_suffix("")),
        "--no-color",
        *(["--tls-verify", os.environ[KEY_SERVICE_CA]] if url.startswith("https:") else []),
        *options,
    ]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=600)
    text = output.decode(errors="replace")
    await asyncio.to_thread(report.write_text, text)
    assert process.returncode == 0, f"{text[-6000:]}\n(whole report: {report})"
    return text[text.rfind("SUMMARY") :]
