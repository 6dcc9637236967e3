"""Payloads from the registry's examples (schemas/examples/): valid by construction, and
kept valid by the contract tests, so a test that needs "some event of this type" never
writes one by hand."""

from __future__ import annotations

from typing import TypeVar

from chorus.contracts.base import EventModel
from chorus.contracts.registry import Registry, default_registry

M = TypeVar("M", bound=EventModel)


def example(model: type[M], registry: Registry | None = None) -> M:
    """The first example of ``model``'s event type and version (a project's: ``registry``)."""
    registry = registry or default_registry()
    body = registry.examples[(model.event_type, model.version)][0].body
    return model.model_validate(body["payload"])
