"""``chorus timers sign-pending``: an upgrade step for timers that were pending when their
event type became signed.

A scheduler signs a timer's event when it asks for the timer
(``chorus.kernel.outbox.fire_target``), and the timer service fires it with that signature,
never one of its own. A timer scheduled before its type was signed has none: fired as it
is, every consumer refuses it (``unauthorized``), so an approval window would never elapse
and a workflow's deadline never end it. Nothing proves who scheduled such a timer (that is
what was missing), so this lists them, per scheduler and type, and with ``--yes`` the
operator vouches for them: each is signed with the key of the service its event names
(``CHORUS_SIGNING_DIR``), which the registry must name as a signer of its type, and only
when that service is the one that scheduled it, in its own namespace (the timer id begins
with its name): a timer anyone else scheduled with another service's event inside is never
signed. Everything else is listed as refused: it is dead-lettered when it fires.

It reads and writes the timer service's table as the timer service
(``CHORUS_DATABASE_URL_TIMER_SERVICE``, else ``CHORUS_DATABASE_URL``), as ``chorus migrate``
does. Exit codes: 0 done (or nothing to do); 1 the database refused; 2 usage, registry or
key errors.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

import asyncpg
import typer

from chorus.base.errors import SigningConfigError
from chorus.base.logs import redact
from chorus.base.settings import LOCAL_DATABASE_URL
from chorus.contracts.registry import Registry
from chorus.privacy.signing import Signer, load_keys
from chorus.tools.cli.migrate import DatabaseUrl, database_url
from chorus.tools.cli.options import SchemasDir, fail, registry_of

app = typer.Typer(help="The timer service's pending timers, for an operator.", no_args_is_help=True)

TIMERS = "timer_service"


@dataclass
class Plan:
    """The pending unsigned timers of signed types: who may sign each, and who may not."""

    sign: dict[str, tuple[str, str]] = field(default_factory=dict)
    """timer id -> (the service its event names, the envelope as stored)."""
    refused: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(the service its event names, event type) -> timers that service may not be vouched
    for: it does not state the type, or someone else scheduled the timer."""

    def by_scheduler(self) -> Counter[tuple[str, str]]:
        return Counter((service, json.loads(text)["event_type"]) for service, text in self.sign.values())


def plan(registry: Registry, rows: list[tuple[str, str, str]]) -> Plan:
    """What to do with each (timer id, stored envelope, who scheduled it): types the registry
    does not sign fire as they are and are left out."""
    out = Plan()
    for timer_id, text, scheduled_by in rows:
        envelope = json.loads(text)
        event_type = str(envelope.get("event_type", ""))
        signers = registry.signers_of(event_type)
        if not signers:
            continue
        named = str((envelope.get("producer") or {}).get("service", ""))
        if named in signers and scheduled_by == named and timer_id.startswith(f"{named}:"):
            out.sign[timer_id] = (named, text)
        else:
            out.refused[(named, event_type)] += 1
    return out


async def pending_unsigned(url: str) -> list[tuple[str, str, str]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            f"""SELECT timer_id, envelope, scheduled_by FROM {TIMERS}.timers
                WHERE status = 'pending' AND signature IS NULL AND envelope IS NOT NULL"""
        )
    finally:
        await conn.close()
    return [(r["timer_id"], r["envelope"], r["scheduled_by"] or "") for r in rows]


async def write_signatures(url: str, signatures: Mapping[str, str]) -> int:
    """Each still pending, still unsigned timer gets its signature; how many did."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            done = 0
            for timer_id, signature in signatures.items():
                status = await conn.execute(
                    f"""UPDATE {TIMERS}.timers SET signature = $2, updated_at = now()
                        WHERE timer_id = $1 AND status = 'pending' AND signature IS NULL""",
                    timer_id,
                    signature,
                )
                done += int(status.split()[-1])
    finally:
        await conn.close()
    return done


@app.command("sign-pending")
def sign_pending(
    yes: Annotated[
        bool, typer.Option("--yes", help="Sign them (without it: list what would be signed).")
    ] = False,
    database_url_option: DatabaseUrl = LOCAL_DATABASE_URL,
    schemas_dir: SchemasDir = None,
) -> None:
    """Pending timers of a signed event type that carry no signature (scheduled before the
    type was signed): list them per scheduler, and with --yes sign each with its scheduler's
    key, the operator vouching for it."""
    registry = registry_of("timers sign-pending", schemas_dir)
    url = database_url(TIMERS, os.environ, database_url_option)
    try:
        found = plan(registry, asyncio.run(pending_unsigned(url)))
    except (OSError, asyncpg.PostgresError) as exc:
        fail("timers sign-pending", redact(str(exc)), 1)
    for (service, event_type), count in sorted(found.by_scheduler().items()):
        typer.echo(f"{'signing' if yes else 'to sign'}: {count} {event_type} of {service}")
    for (service, event_type), count in sorted(found.refused.items()):
        typer.echo(
            f"refused: {count} {event_type} naming {service or 'nobody'}, who does not state it "
            "or did not schedule it (dead-lettered when it fires)"
        )
    if not found.sign:
        typer.echo("no pending timer to sign")
        return
    if not yes:
        typer.echo(f"{len(found.sign)} timer(s) to sign: run again with --yes to vouch for them")
        return
    signers: dict[str, Signer] = {}
    signatures: dict[str, str] = {}
    try:
        for timer_id, (service, text) in found.sign.items():
            if service not in signers:
                keys = load_keys(os.environ.get("CHORUS_SIGNING_DIR", ""), service, signs={"*"}, checks={})
                assert keys.signer is not None  # signs is not empty
                signers[service] = keys.signer
            signatures[timer_id] = signers[service].header(text.encode())[1].decode()
    except SigningConfigError as exc:
        fail("timers sign-pending", str(exc), 2)
    try:
        done = asyncio.run(write_signatures(url, signatures))
    except (OSError, asyncpg.PostgresError) as exc:
        fail("timers sign-pending", redact(str(exc)), 1)
    typer.echo(f"signed {done} timer(s) (the rest fired or were cancelled meanwhile)")
