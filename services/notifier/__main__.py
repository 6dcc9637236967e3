"""``python -m notifier``: run one replica."""

from __future__ import annotations

from chorus.runtime.runner import main
from chorus.runtime.settings import load_settings
from notifier.config import Settings
from notifier.service import SPEC

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
