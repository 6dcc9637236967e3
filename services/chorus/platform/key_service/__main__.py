"""``python -m chorus.platform.key_service``: run one replica."""

from __future__ import annotations

from chorus.platform.key_service.config import Settings
from chorus.platform.key_service.service import SPEC
from chorus.runtime.runner import main
from chorus.runtime.settings import load_settings

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
