"""``python -m chorus.platform.gateway``: run one replica (API on CHORUS_API_PORT, default 8080)."""

from __future__ import annotations

from chorus.platform.gateway.config import Settings
from chorus.platform.gateway.service import SPEC
from chorus.runtime.runner import main
from chorus.runtime.settings import load_settings

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
