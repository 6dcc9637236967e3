"""``python -m chorus.platform.outcome_analytics``: one replica of the view, rebuilt from the
topics' start."""

from __future__ import annotations

from chorus.platform.outcome_analytics.app import run
from chorus.platform.outcome_analytics.config import Settings
from chorus.runtime.settings import load_settings

if __name__ == "__main__":
    run(load_settings(Settings))
