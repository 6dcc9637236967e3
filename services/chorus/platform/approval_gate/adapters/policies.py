"""The approval policy table (schema approval_gate): every version kept, the latest applies.

A change is a new version row with who made it, when and why: the table is its own
audit trail, and an approval records the version that routed it (approval.routed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from chorus.base import migrations
from chorus.contracts.api.approval_gate import ApprovalPolicyVersion
from chorus.contracts.approvals import ApprovalPolicy
from chorus.platform.approval_gate.domain import DEFAULT_POLICY

SCHEMA = "approval_gate"
DEFAULTS_ACTOR = "chorus:defaults"

MIGRATIONS = [
    migrations.Migration(
        1,
        "policy_versions",
        (
            f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
            f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.policy_versions (
                version int PRIMARY KEY,
                policy jsonb NOT NULL,
                changed_by text NOT NULL,
                reason text NOT NULL,
                changed_at timestamptz NOT NULL)""",
        ),
    ),
]


async def migrate(conn: asyncpg.Connection) -> None:
    await migrations.migrate(conn, schema=SCHEMA, component="policies", migrations=MIGRATIONS)
    # Version 1 is the built-in default, written once; later versions are people's.
    await conn.execute(
        f"""INSERT INTO {SCHEMA}.policy_versions VALUES (1, $1::jsonb, $2, $3, now())
            ON CONFLICT (version) DO NOTHING""",
        DEFAULT_POLICY.model_dump_json(),
        DEFAULTS_ACTOR,
        "the built-in default",
    )


@dataclass(frozen=True)
class PolicyVersion:
    version: int
    policy: ApprovalPolicy
    changed_by: str
    reason: str
    changed_at: datetime

    def published(self) -> ApprovalPolicyVersion:
        """As the policy API answers with it."""
        return ApprovalPolicyVersion(
            version=self.version,
            rules=self.policy.rules,
            changed_by=self.changed_by,
            reason=self.reason,
            changed_at=self.changed_at,
        )


def _version(row: asyncpg.Record) -> PolicyVersion:
    return PolicyVersion(
        row["version"],
        ApprovalPolicy.model_validate(json.loads(row["policy"])),
        row["changed_by"],
        row["reason"],
        row["changed_at"],
    )


class PolicyStore:
    """Reads and writes the versions; handlers read the current one for every new approval,
    so a change applies to the next approval without a restart."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def current(self) -> PolicyVersion:
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                f"""SELECT version, policy::text AS policy, changed_by, reason, changed_at
                    FROM {SCHEMA}.policy_versions ORDER BY version DESC LIMIT 1"""
            )
        assert row is not None  # version 1 is written by the migration
        return _version(row)

    async def history(self, limit: int = 100) -> list[PolicyVersion]:
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                f"""SELECT version, policy::text AS policy, changed_by, reason, changed_at
                    FROM {SCHEMA}.policy_versions ORDER BY version DESC LIMIT $1""",
                limit,
            )
        return [_version(r) for r in rows]

    async def change(self, policy: ApprovalPolicy, *, by: str, reason: str, now: datetime) -> PolicyVersion:
        """A new version (the next number: two changes at once cannot take the same one)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(f"LOCK TABLE {SCHEMA}.policy_versions IN SHARE ROW EXCLUSIVE MODE")
            row = await conn.fetchrow(
                f"""INSERT INTO {SCHEMA}.policy_versions
                    SELECT coalesce(max(version), 0) + 1, $1::jsonb, $2, $3, $4 FROM {SCHEMA}.policy_versions
                    RETURNING version, policy::text AS policy, changed_by, reason, changed_at""",
                policy.model_dump_json(),
                by,
                reason,
                now,
            )
        assert row is not None
        return _version(row)
