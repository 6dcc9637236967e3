"""``python -m chorus.reference.source_fetcher``: run one replica."""

from __future__ import annotations

from chorus.reference.source_fetcher.config import Settings
from chorus.reference.source_fetcher.service import SPEC
from chorus.runtime.runner import main
from chorus.settings import load_settings

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
