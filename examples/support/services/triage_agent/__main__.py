"""``python -m triage_agent``: run one replica."""

from __future__ import annotations

from chorus.runtime.runner import main
from chorus.settings import load_settings

from triage_agent.config import Settings
from triage_agent.service import SPEC

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
