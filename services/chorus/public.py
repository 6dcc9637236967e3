"""The runtime's public surface: what a service of one's own imports, under semantic
versioning (``docs/runtime-api.md`` says what each name is for). Within a major version a
public name keeps its meaning and its signature accepts what it accepted; anything not
listed here is private to Chorus and may change in any release.

The platform's event models (``chorus_contracts`` lifecycle, approvals, platform, envelope)
are public as whole modules: they are contracts, versioned by the registry as every event.
"""

from __future__ import annotations

from collections.abc import Mapping

WHOLE_MODULE = frozenset[str]()
"""Marks a module every public name of which is public (its contracts)."""

PUBLIC: Mapping[str, frozenset[str]] = {
    # Writing a service
    "chorus.service": frozenset(
        {
            "ServiceSpec",
            "On",
            "Outcome",
            "Context",
            "Emit",
            "ScheduleTimer",
            "CancelTimer",
            "RescheduleTimer",
            "Effect",
            "WORKFLOW_END",
            "RuntimeHandle",
            "OwnedData",
        }
    ),
    "chorus.codec": frozenset({"Event", "upcast"}),
    "chorus.errors": frozenset({"TransientError", "PersistentError", "SemanticError"}),
    "chorus.clock": frozenset({"Clock", "SystemClock", "ManualClock"}),
    "chorus.stages": frozenset(
        {"Stage", "StagePolicy", "StageStatus", "Opened", "open_stage", "stop_deadline"}
    ),
    # Running it
    "chorus.runtime.runner": frozenset({"ServiceSettings", "main", "running"}),
    "chorus.settings": frozenset({"ChorusSettings", "load_settings", "LOCAL_KAFKA", "LOCAL_DATABASE_URL"}),
    # Talking to the world
    "chorus.external": frozenset({"call_json", "ExternalRejection"}),
    "chorus.dependencies": frozenset({"Dependency", "Guarding", "Guards", "dependencies"}),
    "chorus.breaker": frozenset({"BreakerPolicy"}),
    "chorus.llm": frozenset(
        {
            "LLM",
            "LLMSettings",
            "ChatMessage",
            "OfflineModel",
            "llm_dependency",
            "parse_json_output",
            "reprompt",
        }
    ),
    # Its own tables
    "chorus.db": frozenset({"create_pool"}),
    "chorus.migrations": frozenset({"Migration", "baseline", "migrate"}),
    "chorus.store": frozenset({"ConflictError"}),
    # Testing it
    "chorus.testing": frozenset({"WorkflowHarness", "Step", "make_event", "Unguarded"}),
    "chorus.teststack": frozenset(
        {"isolated_registry", "isolated_schemas", "key_store", "provision", "publish", "read_events"}
    ),
    # Events
    "chorus_contracts.base": frozenset(
        {
            "EventModel",
            "Model",
            "event",
            "upcaster",
            "Name",
            "Text",
            "LongText",
            "Comment",
            "Ref",
            "KeyedRef",
            "Count",
            "Cents",
            "Currency",
            "Url",
            "UtcDateTime",
            "Uuid",
            "Personal",
            "VendorId",
            "invisible_characters",
            "is_invisible",
        }
    ),
    "chorus_contracts.envelope": WHOLE_MODULE,
    "chorus_contracts.lifecycle": WHOLE_MODULE,
    "chorus_contracts.approvals": WHOLE_MODULE,
    "chorus_contracts.platform": WHOLE_MODULE,
}


def is_public(module: str, name: str) -> bool:
    names = PUBLIC.get(module)
    return names is not None and (names is WHOLE_MODULE or name in names)


# The same names, importable from here (``from chorus.public import ServiceSpec``).
from chorus.breaker import (  # noqa: E402 - after the list they implement
    BreakerPolicy,
)
from chorus.clock import (  # noqa: E402 - after the list they implement
    Clock,
    ManualClock,
    SystemClock,
)
from chorus.codec import (  # noqa: E402 - after the list they implement
    Event,
    upcast,
)
from chorus.db import (  # noqa: E402 - after the list they implement
    create_pool,
)
from chorus.dependencies import (  # noqa: E402 - after the list they implement
    Dependency,
    Guarding,
    Guards,
    dependencies,
)
from chorus.errors import (  # noqa: E402 - after the list they implement
    PersistentError,
    SemanticError,
    TransientError,
)
from chorus.external import (  # noqa: E402 - after the list they implement
    ExternalRejection,
    call_json,
)
from chorus.llm import (  # noqa: E402 - after the list they implement
    LLM,
    ChatMessage,
    LLMSettings,
    OfflineModel,
    llm_dependency,
    parse_json_output,
    reprompt,
)
from chorus.migrations import (  # noqa: E402 - after the list they implement
    Migration,
    baseline,
    migrate,
)
from chorus.runtime.runner import (  # noqa: E402 - after the list they implement
    ServiceSettings,
    main,
    running,
)
from chorus.service import (  # noqa: E402 - after the list they implement
    WORKFLOW_END,
    CancelTimer,
    Context,
    Effect,
    Emit,
    On,
    Outcome,
    OwnedData,
    RescheduleTimer,
    RuntimeHandle,
    ScheduleTimer,
    ServiceSpec,
)
from chorus.settings import (  # noqa: E402 - after the list they implement
    LOCAL_DATABASE_URL,
    LOCAL_KAFKA,
    ChorusSettings,
    load_settings,
)
from chorus.stages import (  # noqa: E402 - after the list they implement
    Opened,
    Stage,
    StagePolicy,
    StageStatus,
    open_stage,
    stop_deadline,
)
from chorus.store import (  # noqa: E402 - after the list they implement
    ConflictError,
)
from chorus.testing import (  # noqa: E402 - after the list they implement
    Step,
    Unguarded,
    WorkflowHarness,
    make_event,
)
from chorus.teststack import (  # noqa: E402 - after the list they implement
    isolated_registry,
    isolated_schemas,
    key_store,
    provision,
    publish,
    read_events,
)
from chorus_contracts.base import (  # noqa: E402 - after the list they implement
    Cents,
    Comment,
    Count,
    Currency,
    EventModel,
    KeyedRef,
    LongText,
    Model,
    Name,
    Personal,
    Ref,
    Text,
    Url,
    UtcDateTime,
    Uuid,
    VendorId,
    event,
    invisible_characters,
    is_invisible,
    upcaster,
)

__all__ = [
    "LLM",
    "LOCAL_DATABASE_URL",
    "LOCAL_KAFKA",
    "PUBLIC",
    "WHOLE_MODULE",
    "WORKFLOW_END",
    "BreakerPolicy",
    "CancelTimer",
    "Cents",
    "ChatMessage",
    "ChorusSettings",
    "Clock",
    "Comment",
    "ConflictError",
    "Context",
    "Count",
    "Currency",
    "Dependency",
    "Effect",
    "Emit",
    "Event",
    "EventModel",
    "ExternalRejection",
    "Guarding",
    "Guards",
    "KeyedRef",
    "LLMSettings",
    "LongText",
    "ManualClock",
    "Migration",
    "Model",
    "Name",
    "OfflineModel",
    "On",
    "Opened",
    "Outcome",
    "OwnedData",
    "PersistentError",
    "Personal",
    "Ref",
    "RescheduleTimer",
    "RuntimeHandle",
    "ScheduleTimer",
    "SemanticError",
    "ServiceSettings",
    "ServiceSpec",
    "Stage",
    "StagePolicy",
    "StageStatus",
    "Step",
    "SystemClock",
    "Text",
    "TransientError",
    "Unguarded",
    "Url",
    "UtcDateTime",
    "Uuid",
    "VendorId",
    "WorkflowHarness",
    "baseline",
    "call_json",
    "create_pool",
    "dependencies",
    "event",
    "invisible_characters",
    "is_invisible",
    "is_public",
    "isolated_registry",
    "isolated_schemas",
    "key_store",
    "llm_dependency",
    "load_settings",
    "main",
    "make_event",
    "migrate",
    "open_stage",
    "parse_json_output",
    "provision",
    "publish",
    "read_events",
    "reprompt",
    "running",
    "stop_deadline",
    "upcast",
    "upcaster",
]
