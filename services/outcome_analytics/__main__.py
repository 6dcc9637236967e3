"""``python -m outcome_analytics``: one replica of the view, rebuilt from its topics' start."""

from __future__ import annotations

from chorus.runtime.settings import load_settings
from outcome_analytics.app import run
from outcome_analytics.config import Settings

if __name__ == "__main__":
    run(load_settings(Settings))
