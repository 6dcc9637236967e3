"""``python -m chorus.platform.audit_projector``: run one replica."""

from __future__ import annotations

from pathlib import Path

from chorus.contracts.registry import load_registry
from chorus.platform.audit_projector.config import Settings
from chorus.platform.audit_projector.service import make_spec
from chorus.runtime.runner import main
from chorus.runtime.settings import load_settings

if __name__ == "__main__":
    settings = load_settings(Settings)
    # A project's registry (CHORUS_SCHEMAS_DIR): its events are recorded too.
    registry = load_registry(Path(settings.schemas_dir) if settings.schemas_dir else None)
    main(make_spec(settings.service_name, registry), settings)
