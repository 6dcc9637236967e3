"""``python -m chorus.platform.approval_gate``: run one replica."""

from __future__ import annotations

from chorus.platform.approval_gate.config import Settings
from chorus.platform.approval_gate.service import SPEC
from chorus.runtime.runner import main
from chorus.runtime.settings import load_settings

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
