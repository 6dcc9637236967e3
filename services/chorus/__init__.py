"""Chorus shared runtime: envelope, registry, consume loop, inbox/outbox, errors, clock."""

from __future__ import annotations

from importlib.metadata import version

__version__ = version("chorus")
"""Semantic versioning of the public surface (chorus.public)."""
