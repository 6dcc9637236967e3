"""Public surface (docs/runtime-api.md): Pydantic AI agents as Chorus handlers. It lives in
``chorus.outside.llm.pydantic_agent`` and needs the ``pydantic-ai`` extra (Python 3.11+)."""

from chorus.outside.llm.pydantic_agent import *  # noqa: F403
