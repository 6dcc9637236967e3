"""``python -m key_service``: run one replica."""

from __future__ import annotations

from chorus.runtime.runner import main
from chorus.runtime.settings import load_settings
from key_service.config import Settings
from key_service.service import SPEC

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
