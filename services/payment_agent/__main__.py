"""``python -m payment_agent``: run one replica."""

from __future__ import annotations

from chorus.runtime.runner import main
from chorus.settings import load_settings
from payment_agent.config import Settings
from payment_agent.service import SPEC

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
