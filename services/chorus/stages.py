"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.outside.stages``."""

from chorus.outside.stages import (
    Opened,
    Stage,
    StagePolicy,
    StageStatus,
    open_stage,
    stop_deadline,
)

__all__ = ["Opened", "Stage", "StagePolicy", "StageStatus", "open_stage", "stop_deadline"]
