"""``python -m audit_projector``: run one replica."""

from __future__ import annotations

from audit_projector.config import Settings
from audit_projector.service import make_spec
from chorus.runtime.runner import main
from chorus.settings import load_settings

if __name__ == "__main__":
    settings = load_settings(Settings)
    main(make_spec(settings.service_name), settings)
