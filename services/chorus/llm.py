"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.outside.llm``,
whose ``__all__`` names it (once)."""

from chorus.outside.llm import *  # noqa: F403
