"""Loading a process's settings: one clear refusal, before anything connects."""

from __future__ import annotations

import sys
from typing import TypeVar

from pydantic import ValidationError

from chorus.base.settings import EX_CONFIG, ChorusSettings
from chorus.kernel.kafka import kafka_auth
from chorus.outside.egress import egress_policy

S = TypeVar("S", bound=ChorusSettings)


def load_settings(cls: type[S], *, kafka: bool = True) -> S:
    """A process's settings from its environment, with its Kafka login checked too (unless
    it has none: ``kafka=False``): a one-line refusal on stderr and exit 78 when they are
    incomplete or unsafe, before anything connects."""
    try:
        settings = cls()
        if kafka:
            kafka_auth()
        egress_policy()  # a malformed CHORUS_EGRESS_ALLOW stops the start, not the first call
    except ValidationError as exc:
        problems = "; ".join(
            f"{_where(e['loc'])}{e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        )
        print(f"refusing to start: {problems}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None
    except ValueError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None
    return settings


def _where(loc: tuple[int | str, ...]) -> str:
    """The setting an error is about (a field of the settings; none for a whole-model check)."""
    return f"{'.'.join(str(p) for p in loc)}: " if loc else ""
