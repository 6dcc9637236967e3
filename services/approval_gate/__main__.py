"""``python -m approval_gate``: run one replica."""

from __future__ import annotations

from approval_gate.config import Settings
from approval_gate.service import SPEC
from chorus.runtime.runner import main
from chorus.runtime.settings import load_settings

if __name__ == "__main__":
    main(SPEC, load_settings(Settings))
