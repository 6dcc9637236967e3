"""``python -m timer_service``: run one replica."""

from __future__ import annotations

from chorus.runtime.runner import main
from chorus.runtime.settings import load_settings
from timer_service.config import Settings
from timer_service.service import SPEC

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
