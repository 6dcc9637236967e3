"""``python -m chorus.reference.report_agent``: run one replica."""

from __future__ import annotations

from chorus.reference.report_agent.config import Settings
from chorus.reference.report_agent.service import SPEC
from chorus.runtime.runner import main
from chorus.settings import load_settings

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
