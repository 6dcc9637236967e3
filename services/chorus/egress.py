"""Where a submitter's URL may lead: never into the deployment's own network.

A callback URL, a report's delivery target or its sources come from whoever submitted
the workflow. Followed blindly, they reach what only the services can reach (SSRF): the
database's host, the cloud's metadata endpoint (169.254.169.254), an admin port on
localhost. Before such a call, the host is resolved and every address it resolves to must
be public: loopback, private, link-local (metadata), shared, multicast, reserved and
unspecified ranges are refused, IPv4-mapped IPv6 included.

``CHORUS_EGRESS_ALLOW`` names the exceptions, comma-separated: ``host:port`` (one service,
e.g. the demo's sandbox, ``127.0.0.1:9400``) or a network (``10.20.0.0/16``). The dev
stack allows exactly its sandbox. Limit: the address is checked when resolved; a DNS
answer that changes between this check and the connection (rebinding) is not caught.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

from chorus.errors import PersistentError

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
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        checked = mapped or address
        for kind in ("unspecified", "loopback", "link_local", "private", "multicast", "reserved"):
            if getattr(checked, f"is_{kind}"):
                return f"{host} resolves to {address}, a {kind.replace('_', '-')} address"
        if not checked.is_global:  # e.g. 100.64.0.0/10, shared address space
            return f"{host} resolves to {address}, not a public address"
        return None


@cache
def _policy(text: str) -> EgressPolicy:
    return EgressPolicy.parse(text)


def egress_policy() -> EgressPolicy:
    """This process's policy, from CHORUS_EGRESS_ALLOW (parsed once per value)."""
    return _policy(os.environ.get("CHORUS_EGRESS_ALLOW", ""))


async def check_egress(url: str, policy: EgressPolicy | None = None) -> None:
    """Raise EgressRefusedError unless every address ``url``'s host resolves to may be called."""
    policy = policy or egress_policy()
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise EgressRefusedError(f"{url!r} is not an http(s) URL with a host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = {literal}
    else:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror:
            # Nothing to connect to: the call itself fails (and is retried) as it would
            # anyway; what it may reach is checked again on that call.
            return
        addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    for address in sorted(addresses, key=str):
        reason = policy.refusal(host, port, address)
        if reason is not None:
            raise EgressRefusedError(f"refused to call {host}:{port}: {reason} (CHORUS_EGRESS_ALLOW)")
