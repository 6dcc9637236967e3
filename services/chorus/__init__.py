"""Chorus: choreographed, event-driven microservices on Apache Kafka for durable AI-agent workflows.

The one import namespace of the ``chorus-workflows`` distribution: the shared runtime here
(envelope, registry, consume loop, inbox/outbox, errors, clock), the event contracts in
``chorus.contracts``, the tooling in ``chorus.tools`` and the platform's services in
``chorus.platform``. The reference workflows' agents and the sandbox (``chorus.reference``)
are the ``chorus-workflows-reference`` distribution.
"""

from __future__ import annotations

__version__ = "1.1.0"
"""The one version of the distribution, the image, the chart and every service; semantic
versioning of the public surface (chorus.public). pyproject.toml reads it from here."""

DISTRIBUTION = "chorus-workflows"
"""The name Chorus is installed under (``pip install chorus-workflows``)."""


def _answer_renamed_paths() -> None:
    """1.0's ``chorus_contracts`` keeps importing, deprecated (chorus.renamed)."""
    from chorus import renamed

    renamed.install()


_answer_renamed_paths()
