"""``python -m gateway``: run one replica (API on CHORUS_API_PORT, default 8080)."""

from __future__ import annotations

from chorus.runtime.runner import main
from chorus.runtime.settings import load_settings
from gateway.config import Settings
from gateway.service import SPEC

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
