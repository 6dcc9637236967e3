"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.kernel.service``."""

from chorus.kernel.service import (
    WORKFLOW_END,
    CancelTimer,
    Context,
    Effect,
    Emit,
    On,
    Outcome,
    OwnedData,
    RescheduleTimer,
    Reset,
    RuntimeHandle,
    ScheduleTimer,
    ServiceSpec,
)

__all__ = [
    "WORKFLOW_END",
    "CancelTimer",
    "Context",
    "Effect",
    "Emit",
    "On",
    "Outcome",
    "OwnedData",
    "RescheduleTimer",
    "Reset",
    "RuntimeHandle",
    "ScheduleTimer",
    "ServiceSpec",
]
