"""``python -m source_fetcher``: run one replica."""

from __future__ import annotations

from chorus.runtime.runner import main
from chorus.settings import load_settings
from source_fetcher.config import Settings
from source_fetcher.service import SPEC

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
