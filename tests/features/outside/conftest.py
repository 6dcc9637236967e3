"""Pydantic AI 2 needs Python 3.11: on 3.10 the ``pydantic-ai`` extra installs nothing, so its
tests are not collected there (everywhere else a missing Pydantic AI fails them)."""

import sys

collect_ignore = ["test_pydantic_agent.py"] if sys.version_info < (3, 11) else []
