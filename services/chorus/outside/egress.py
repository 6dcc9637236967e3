"""Where a submitter's URL may lead: never into the deployment's own network.

A callback URL, a report's delivery target or its sources come from whoever submitted
the workflow. Followed blindly, they reach what only the services can reach (SSRF): the
database's host, the cloud's metadata endpoint (169.254.169.254), an admin port on
localhost. Before such a call, the host is resolved and every address it resolves to must
be public: loopback, private, link-local (metadata), shared, multicast, reserved and
unspecified ranges are refused, IPv4-mapped IPv6 included.

``CHORUS_EGRESS_ALLOW`` names the exceptions, comma-separated: ``host:port`` (one service,
e.g. the demo's sandbox, ``127.0.0.1:9400``) or a network (``10.20.0.0/16``). The dev
stack allows exactly its sandbox. A call connects to the address that was checked (``pin``),
so a DNS answer that changes between the check and the connection (rebinding) cannot
redirect it; the gateway's check at submission only refuses early.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import httpx

from chorus.base.errors import PersistentError, TransientError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefusedError(PersistentError):
    """The URL leads somewhere a submitter may not send Chorus: not retried, and the
    input's fault (it never counts towards a service's dead-letter guard)."""

    caused_by_input = True


@dataclass(frozen=True)
class EgressPolicy:
    endpoints: frozenset[tuple[str, int]] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, text: str) -> EgressPolicy:
        endpoints: set[tuple[str, int]] = set()
        networks: list[IPNetwork] = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            if "/" in item:
                networks.append(ipaddress.ip_network(item, strict=False))
                continue
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"CHORUS_EGRESS_ALLOW: {item!r} is neither host:port nor a network")
            endpoints.add((host.strip("[]").lower(), int(port)))
        return cls(frozenset(endpoints), tuple(networks))

    def refusal(self, host: str, port: int, address: IPAddress) -> str | None:
        """Why ``address`` (of ``host``:``port``) may not be called, or None."""
        if (host, port) in self.endpoints or (str(address), port) in self.endpoints:
            return None
        if any(address in network for network in self.networks):
            return None
        checked: IPAddress = address
        if isinstance(address, ipaddress.IPv6Address):
            # An IPv4 address inside an IPv6 one (mapped, 6to4, Teredo) is judged as itself.
            teredo = address.teredo[1] if address.teredo else None
            checked = address.ipv4_mapped or address.sixtofour or teredo or address
        # The address itself is not said: a submitter must not map the inner network with it.
        for kind in ("unspecified", "loopback", "link_local", "private", "multicast", "reserved"):
            if getattr(checked, f"is_{kind}"):
                return f"{host} resolves to a {kind.replace('_', '-')} address"
        if not checked.is_global:  # e.g. 100.64.0.0/10, shared address space
            return f"{host} resolves to an address that is not public"
        return None


@cache
def _policy(text: str) -> EgressPolicy:
    return EgressPolicy.parse(text)


def egress_policy() -> EgressPolicy:
    """This process's policy, from CHORUS_EGRESS_ALLOW (parsed once per value)."""
    return _policy(os.environ.get("CHORUS_EGRESS_ALLOW", ""))


@dataclass(frozen=True)
class Pinned:
    """A call to a submitter's URL, pinned to the address that was checked: the connection
    goes there (not to whatever a second DNS answer would say) while the Host header and
    TLS (SNI and certificate) still name the host."""

    url: str
    host_header: str
    sni_hostname: str | None


def _target(url: str) -> tuple[str, int, IPAddress | None]:
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError as exc:  # a port out of range, a malformed IPv6 literal
        raise EgressRefusedError(f"{url!r} is not a URL Chorus can call: {exc}") from exc
    if parts.scheme not in ("http", "https") or not host:
        raise EgressRefusedError(f"{url!r} is not an http(s) URL with a host")
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    return host, port or (443 if parts.scheme == "https" else 80), literal


async def _addresses(host: str, port: int) -> set[IPAddress]:
    """The addresses ``host`` resolves to; socket.gaierror when it resolves to none."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError as exc:  # no DNS name at all (IDNA cannot encode it: an empty or over-long label)
        raise EgressRefusedError(f"{host!r} is not a host name: {exc}") from exc
    return {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}


def _judge(policy: EgressPolicy, host: str, port: int, addresses: set[IPAddress]) -> None:
    for address in sorted(addresses, key=str):
        reason = policy.refusal(host, port, address)
        if reason is not None:
            raise EgressRefusedError(f"refused to call {host}:{port}: {reason}")


async def check_egress(url: str, policy: EgressPolicy | None = None) -> None:
    """Raise EgressRefusedError when ``url``'s host resolves to an address it may not reach.
    A name that does not resolve passes here (a submission's URL may resolve later): the
    call itself is pinned and checked (``pin``)."""
    with contextlib.suppress(TransientError):  # pin's one transient answer: no resolution
        await pin(url, policy)


async def pin(url: str, policy: EgressPolicy | None = None) -> Pinned:
    """The call to ``url`` pinned to an address every answer of its name allows; a name
    that does not resolve (now) is a transient failure, blamed on the input."""
    host, port, literal = _target(url)
    try:
        addresses = {literal} if literal is not None else await _addresses(host, port)
    except socket.gaierror as exc:
        raise TransientError(f"{host} does not resolve: {exc.strerror}", caused_by_input=True) from exc
    _judge(policy or egress_policy(), host, port, addresses)
    original = httpx.URL(url)
    address = sorted(addresses, key=str)[0]
    return Pinned(
        url=str(original.copy_with(host=str(address))),
        host_header=host if original.port is None else f"{host}:{original.port}",
        sni_hostname=host if original.scheme == "https" and literal is None else None,
    )
