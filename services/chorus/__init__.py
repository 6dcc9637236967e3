"""Chorus shared runtime: envelope, registry, consume loop, inbox/outbox, errors, clock."""

from __future__ import annotations

__version__ = "0.1.0"
