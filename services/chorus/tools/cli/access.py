"""``chorus access``: who may read and write what on Kafka, from the registry.

Exit codes: 0 ok; 1 Kafka refused a change; 2 usage, registry or login-settings errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import asyncpg
import typer
from pydantic import SecretStr, ValidationError

from chorus.base.logs import redact
from chorus.base.settings import LOCAL_DATABASE_URL, LOCAL_KAFKA
from chorus.kernel.kafka import KafkaAuth, kafka_auth
from chorus.privacy.signing import make_keys
from chorus.tools.access import (
    Access,
    client_env,
    client_properties,
    describe,
    grants,
    local_password,
    local_passwords,
    principals,
)
from chorus.tools.cli.options import Bootstrap, SchemasDir, fail, registry_of
from chorus.tools.dbroles import provision_database
from chorus.web.tls import LOCAL_NAMES, make_local_tls

app = typer.Typer(
    name="access",
    help="Kafka principals and ACLs derived from the registry: show, apply, client settings.",
    no_args_is_help=True,
)

UsersDir = Annotated[
    Path | None,
    typer.Option(
        "--users-dir",
        help="A local stack's password files (<principal>.password, made when missing): "
        "create or reset every principal's SCRAM user with them.",
        envvar="CHORUS_KAFKA_USERS_DIR",
    ),
]


@app.command("show")
def show_command(
    principal: Annotated[
        str | None, typer.Option("--principal", help="Only this principal's grants.")
    ] = None,
    schemas_dir: SchemasDir = None,
) -> None:
    """Print every ACL the registry implies (principal, operation, resource). Changes nothing."""
    registry = registry_of("access", schemas_dir)
    rows = [g for g in grants(registry) if principal in (None, g.principal)]
    if principal is not None and not rows:
        fail("access", f"the registry names no principal {principal!r}", 2)
    for grant in rows:
        typer.echo(str(grant))


@app.command("apply")
def apply_command(
    users_dir: UsersDir = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the changes; change nothing.")] = False,
    schemas_dir: SchemasDir = None,
    bootstrap: Bootstrap = LOCAL_KAFKA,
) -> None:
    """Grant exactly the registry's ACLs: add the missing ones, revoke those of the registry's
    principals on its topics that no longer follow from it. Other principals' ACLs and ACLs
    on other topics (another application's, another registry's) are left alone.
    Runs as an admin principal (CHORUS_KAFKA_*). Idempotent."""
    registry = registry_of("access", schemas_dir)
    with _errors(bootstrap):
        access = Access(bootstrap, kafka_auth())
        if users_dir is not None and not dry_run:
            access.upsert_users(local_passwords(users_dir, principals(registry)))
            typer.echo(f"users: {len(principals(registry))} SCRAM credential(s) set from {users_dir}")
        plan = access.plan(registry)
        changes = [f"+ {g}" for g in plan.add] + [f"- {describe(b)}" for b in plan.revoke]
        # A first run grants hundreds: list them only when asked (--dry-run) or when few.
        for line in changes if dry_run or len(changes) <= 40 else []:
            typer.echo(line)
        if not dry_run:
            access.apply(plan)
    verb = "would change" if dry_run else "changed"
    typer.echo(
        f"acls: {len(plan.add)} added, {len(plan.revoke)} revoked ({verb}); "
        f"{len(grants(registry))} in the registry; {plan.foreign} of other principals or topics left alone"
    )


@app.command("database")
def database_command(
    users_dir: Annotated[
        Path,
        typer.Option(
            "--users-dir",
            envvar="CHORUS_KAFKA_USERS_DIR",
            help="<service>.password files: each service's role gets its password.",
        ),
    ],
    database_url: Annotated[
        str,
        typer.Option(
            "--database-url",
            envvar="CHORUS_DATABASE_URL",
            help="The database, as an admin allowed to create roles (the local superuser).",
        ),
    ] = LOCAL_DATABASE_URL,
    schemas_dir: SchemasDir = None,
) -> None:
    """Give every service of the registry that keeps data its own PostgreSQL login role,
    owning its schema and nothing else, with the grants on the shared schema chorus it
    needs (see chorus.tools/dbroles.py). Idempotent; the dev stack does this at start."""
    registry = registry_of("access", schemas_dir)
    runtime = sorted(n for n, s in registry.principals.services.items() if s.kind == "runtime")
    passwords = local_passwords(users_dir, runtime)
    try:
        done = asyncio.run(provision_database(database_url, passwords))
    except (OSError, asyncpg.PostgresError) as exc:
        fail("access", redact(str(exc)), 1)
    handed = sum(done.handed_over.values())
    typer.echo(
        f"database roles: {len(runtime)} service(s); created: {', '.join(done.created) or 'none'}; "
        f"{handed} object(s) handed over to their service"
    )


@app.command("signing-keys")
def signing_keys_command(
    signing_dir: Annotated[
        Path,
        typer.Option(
            "--signing-dir", envvar="CHORUS_SIGNING_DIR", help="Where the keys live (made if missing)."
        ),
    ],
    schemas_dir: SchemasDir = None,
) -> None:
    """Make an Ed25519 key pair (<service>.key, mode 600, and <service>.pub) for every
    service the registry names as the signer of a decision event, unless it has one.
    For a local stack or a first deployment; services read them from CHORUS_SIGNING_DIR."""
    signers = registry_of("access", schemas_dir).signers()
    made = make_keys(signing_dir, signers)
    typer.echo(f"signing keys: {len(signers)} signer(s) in {signing_dir}; made: {', '.join(made) or 'none'}")


@app.command("key-service-tls")
def key_service_tls_command(
    directory: Annotated[Path, typer.Option("--dir", help="Where the certificates live (made if missing).")],
    host: Annotated[
        list[str] | None,
        typer.Option(
            "--host", help="A name callers reach the key service by (repeatable; default: this machine)."
        ),
    ] = None,
) -> None:
    """Make a local certificate authority (ca.pem) and the key service's certificate from it
    (key_service.pem, key_service.key, mode 600), unless they are there: its data-key API
    is served over TLS only. For a local stack; a deployment brings its own (the Helm chart
    makes them, compose's secrets service makes them)."""
    made = make_local_tls(directory, "key_service", tuple(host) if host else LOCAL_NAMES)
    typer.echo(f"key service TLS: {made.cert_file} (authority {made.ca_file})")


@app.command("client-config")
def client_config_command(
    principal: Annotated[str, typer.Argument(help="The principal to log in as, e.g. chorus-auditor.")],
    users_dir: UsersDir = None,
    env_format: Annotated[
        bool, typer.Option("--env", help="CHORUS_KAFKA_* lines (for the chorus CLI) instead of librdkafka's.")
    ] = False,
    bootstrap: Bootstrap = LOCAL_KAFKA,
) -> None:
    """Print a librdkafka properties file (for `kcat -F`), or with --env CHORUS_KAFKA_* lines,
    that log in as PRINCIPAL, with its password from --users-dir and TLS settings from this
    environment's CHORUS_KAFKA_*."""
    password = local_password(users_dir, principal) if users_dir is not None else None
    if password is None:
        fail("access", f"no password file for {principal!r} (give --users-dir)", 2)
    with _errors(bootstrap):
        # This environment's protocol and CA (a local stack's CA sits beside its users
        # folder); the principal's own name and password.
        auth = KafkaAuth(sasl_username=principal, sasl_password=SecretStr(password))
        local_ca = users_dir.parent / "ca.pem" if users_dir is not None else None
        if local_ca is not None and local_ca.is_file() and not auth.ssl_cafile:
            auth = KafkaAuth(
                sasl_username=principal, sasl_password=SecretStr(password), ssl_cafile=str(local_ca)
            )
    typer.echo((client_env if env_format else client_properties)(bootstrap, auth), nl=False)


@contextmanager
def _errors(bootstrap: str) -> Iterator[None]:
    try:
        yield
    except ValidationError as exc:  # pydantic wraps KafkaAuthError in one
        fail("access", str(exc), 2)
    except RuntimeError as exc:
        fail("access", f"{exc} (on {bootstrap})", 1)
