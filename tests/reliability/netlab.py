"""Real network faults on this machine: processes in network namespaces, partitioned by
nftables, slowed by toxiproxy (deploy/local/netlab.sh installs both).

The fault a SIGKILL cannot show is a process that believes it is alive but cannot reach
the broker or the database: its sockets stay open, its packets go nowhere, its session
times out while it waits. So a *node* here is a network namespace of its own, joined to
the host by a veth pair on a bridge the lab makes (``chlab0``, 10.231.0.0/24), and a
partition is an nftables rule in that namespace that drops packets silently, as a
switch that lost a link would (no reset, no refusal).

Nothing a process is given changes when it runs in a node: it still talks to
``127.0.0.1:<port>``. The node's own loopback traffic to any port but its own is
rewritten to the host's address on the bridge (DNAT, then masquerade), and the host
rewrites what arrives there back to its loopback; the host reaches a node's own ports
(health, API) the same way in reverse. So Kafka's advertised ``127.0.0.1`` listeners,
the database URL, the sandbox's and the key service's URLs all work unchanged, and each
crosses the veth pair, where a rule can drop it.

Latency, stalls and resets come from toxiproxy (this kernel has no netem qdisc): a proxy
in front of the database, which every service of a lab deployment reaches it through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from chorus.tools.devstack import free_port
from tests.reliability.infra import run_script
from tests.support.netns import exec_in

log = logging.getLogger("reliability.netlab")

BRIDGE = "chlab0"
SUBNET = "10.231.0"
HOST = f"{SUBNET}.1"
"""The host's address on the bridge: what every node reaches the host's loopback through."""
TABLE = "chorus_lab"
FAULTS = "chorus_lab_fault"
"""The table a node's faults live in, apart from its routing: healing deletes it whole."""


class NetLabError(RuntimeError):
    """An ip or nft command failed; the message carries its output."""


async def sh(*argv: str, stdin: str | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate(stdin.encode() if stdin is not None else None)
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise NetLabError(f"{' '.join(argv)} failed (exit {proc.returncode}): {text.strip()}")
    return text


async def nft(ruleset: str, netns: str | None = None) -> None:
    prefix = ("ip", "netns", "exec", netns) if netns else ()
    await sh(*prefix, "nft", "-f", "-", stdin=ruleset)


def port_set(ports: Iterable[int]) -> str:
    return "{ " + ", ".join(str(p) for p in sorted(set(ports))) + " }"


@dataclass
class Node:
    """One network namespace on the lab's bridge: a process run through :meth:`wrap`
    lives in it. Faults are rules in its own ``chorus_lab_fault`` table."""

    lab: NetLab
    name: str
    index: int
    own_ports: frozenset[int]
    faults: list[str] = field(default_factory=list)
    """What is broken now, in words (the fault log's detail)."""

    @property
    def netns(self) -> str:
        return f"chl-{self.name}"[:15]

    @property
    def address(self) -> str:
        return f"{SUBNET}.{10 + self.index}"

    @property
    def veth(self) -> str:
        return f"chlv{self.index}"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in this node (``ip netns exec`` execs it: the pid is the process's)."""
        return [*exec_in(self.netns), *argv]

    async def create(self) -> None:
        ns, veth = self.netns, self.veth
        await sh("ip", "netns", "add", ns)
        await sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        await sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        await sh("ip", "-n", ns, "addr", "add", f"{self.address}/24", "dev", "eth0")
        await sh("ip", "-n", ns, "link", "set", "eth0", "up")
        await sh("ip", "-n", ns, "link", "set", "lo", "up")
        await sh("ip", "-n", ns, "route", "add", "default", "via", HOST)
        # Loopback addresses may cross eth0 (they are rewritten on the way): without this
        # the kernel drops them as martians.
        for conf in ("all", "eth0"):
            await sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.conf.{conf}.route_localnet=1")
        own = port_set(self.own_ports) if self.own_ports else None
        local = f"tcp dport != {own} " if own else ""
        inbound = f'iifname "eth0" tcp dport {own} dnat to 127.0.0.1\n' if own else ""
        await nft(
            f"""
            table ip {TABLE} {{
              chain out {{
                type nat hook output priority -100;
                ip daddr 127.0.0.1 {local}dnat to {HOST}
              }}
              chain pre {{
                type nat hook prerouting priority -100;
                {inbound}
              }}
              chain post {{
                type nat hook postrouting priority 100;
                oifname "eth0" masquerade
              }}
            }}
            """,
            ns,
        )
        if own:
            await self.lab.expose(self)

    async def partition(self, ports: Iterable[int], why: str) -> None:
        """Drop, both ways, every packet between this node and these host ports (the broker's,
        the database's): its connections stay open and go silent, new ones never connect."""
        rule = f"meta l4proto tcp ct reply ip saddr {HOST} ct reply proto-src {port_set(ports)} drop"
        await self._fault(rule, rule, f"partitioned from {why}")

    async def cut_outbound(self, why: str) -> None:
        """An asymmetric partition: every connection this node opens goes silent (its
        packets dropped), while connections others open to it keep working."""
        # Matched on the connection's tuples: the filter hook sees a packet before the NAT
        # reroute gives it its way out (eth0), so an oifname match would never hold.
        await self._fault(f"ct direction original ct reply ip saddr {HOST} drop", None, f"cannot reach {why}")

    async def lose(self, percent: int) -> None:
        """Drop ``percent`` % of the packets it sends and receives, at random (TCP retransmits)."""
        drop = f"numgen random mod 100 < {percent} drop"
        out, into = f"ct reply ip saddr {HOST} {drop}", f'iifname "eth0" {drop}'
        await self._fault(out, into, f"{percent}% packet loss")

    async def _fault(self, out: str, into: str | None, what: str) -> None:
        """Rules added to the node's fault table: ``out`` on what it sends, ``into`` on
        what it receives."""
        exists = bool(self.faults)
        chains = (
            ""
            if exists
            else """
              chain out { type filter hook output priority 0; }
              chain in { type filter hook input priority 0; }
            """
        )
        rules = [("out", out), *([("in", into)] if into else [])]
        body = "\n".join(f"add rule inet {FAULTS} {chain} {rule}" for chain, rule in rules)
        await nft(f"table inet {FAULTS} {{ {chains} }}\n{body}\n", self.netns)
        self.faults.append(what)

    async def heal(self) -> None:
        if not self.faults:
            return
        await sh("ip", "netns", "exec", self.netns, "nft", "delete", "table", "inet", FAULTS)
        self.faults.clear()


@dataclass
class Toxiproxy:
    """A toxiproxy server on the host's loopback and a client of its HTTP API."""

    api_port: int
    process: asyncio.subprocess.Process | None = None
    proxies: dict[str, int] = field(default_factory=dict)
    """name -> the port it listens on (127.0.0.1)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    async def start(self, log_path: Path) -> None:
        binary = (await run_script("netlab.sh", "toxiproxy-path", {})).strip()
        with log_path.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                binary, "-host", "127.0.0.1", "-port", str(self.api_port), stdout=out, stderr=out
            )
        for _ in range(100):
            with contextlib.suppress(httpx.HTTPError):
                async with httpx.AsyncClient(timeout=1.0) as client:
                    if (await client.get(f"{self.url}/version")).status_code == 200:
                        return
            await asyncio.sleep(0.1)
        raise NetLabError(f"toxiproxy did not answer on {self.url}")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            await asyncio.wait_for(self.process.wait(), 10)

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        async with httpx.AsyncClient(timeout=5.0) as client:
            response = await client.request(method, f"{self.url}{path}", json=body)
        if response.status_code >= 300:
            raise NetLabError(f"toxiproxy {method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    async def proxy(self, name: str, upstream: str) -> int:
        """A proxy to ``upstream`` (host:port); returns the loopback port it listens on."""
        port = free_port()
        await self.relay(name, port, upstream)
        self.proxies[name] = port
        return port

    async def relay(self, name: str, port: int, upstream: str) -> None:
        """Listen on 127.0.0.1:``port``, pass everything to ``upstream``."""
        await self._call(
            "POST",
            "/proxies",
            {"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream, "enabled": True},
        )

    async def latency(self, proxy: str, ms: int, jitter_ms: int = 0, *, direction: str = "both") -> None:
        """Delay what flows ``direction`` ("upstream", "downstream" or "both") by ``ms``:
        each direction it applies to adds ``ms`` to a round trip."""
        for stream in ("upstream", "downstream") if direction == "both" else (direction,):
            await self._call(
                "POST",
                f"/proxies/{proxy}/toxics",
                {
                    "name": f"latency_{stream}",
                    "type": "latency",
                    "stream": stream,
                    "attributes": {"latency": ms, "jitter": jitter_ms},
                },
            )

    async def clear(self, proxy: str) -> None:
        for toxic in await self._call("GET", f"/proxies/{proxy}/toxics"):
            await self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic['name']}")


@dataclass
class NetLab:
    """The lab: its bridge, its nodes and its toxiproxy. One per run (names are fixed, and
    :meth:`start` first removes whatever a crashed run left)."""

    workdir: Path
    nodes: dict[str, Node] = field(default_factory=dict)
    toxiproxy: Toxiproxy | None = None

    async def start(self) -> None:
        await run_script("netlab.sh", "ensure", {}, timeout_s=600)
        await run_script("netlab.sh", "reset", {})
        await sh("ip", "link", "add", BRIDGE, "type", "bridge")
        await sh("ip", "addr", "add", f"{HOST}/24", "dev", BRIDGE)
        await sh("ip", "link", "set", BRIDGE, "up")
        # What arrives from a node for the host's bridge address goes to its loopback,
        # where the broker, the database and the sandbox listen.
        await sh("sysctl", "-qw", f"net.ipv4.conf.{BRIDGE}.route_localnet=1")
        await nft(
            f"""
            table ip {TABLE} {{
              chain pre {{
                type nat hook prerouting priority -100;
                iifname "{BRIDGE}" ip daddr {HOST} dnat to 127.0.0.1
              }}
              chain out {{ type nat hook output priority -100; }}
              chain post {{
                type nat hook postrouting priority 100;
                oifname "{BRIDGE}" ip saddr 127.0.0.0/8 snat to {HOST}
              }}
            }}
            """
        )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.toxiproxy = Toxiproxy(free_port())
        await self.toxiproxy.start(self.workdir / "toxiproxy.log")

    async def stop(self) -> None:
        if self.toxiproxy is not None:
            await self.toxiproxy.stop()
        await run_script("netlab.sh", "reset", {})
        self.nodes.clear()

    async def node(self, name: str, own_ports: Iterable[int] = ()) -> Node:
        """A new namespace for ``name``; ``own_ports`` are those its process listens on
        (reached from the host at 127.0.0.1 as before)."""
        node = Node(self, name, len(self.nodes) + 1, frozenset(own_ports))
        await node.create()
        self.nodes[name] = node
        return node

    async def expose(self, node: Node) -> None:
        """The node's own ports, reached at 127.0.0.1 as before: the host's connections are
        rewritten to the node, and other nodes' (which arrive at the host's loopback) are
        relayed by toxiproxy. Not routed: Docker's FORWARD policy (drop, and bridged
        traffic passes through it) would stop a packet from one namespace to another."""
        assert self.toxiproxy is not None
        await nft(
            f"add rule ip {TABLE} out ip daddr 127.0.0.1 tcp dport {port_set(node.own_ports)} "
            f"dnat to {node.address}\n"
        )
        for port in sorted(node.own_ports):
            await self.toxiproxy.relay(f"{node.name}-{port}", port, f"{node.address}:{port}")
