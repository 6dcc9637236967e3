"""The runtime's public surface: what a service of one's own imports, under semantic
versioning (``docs/runtime-api.md`` says what each name is for). Within a major version a
public name keeps its meaning and its signature accepts what it accepted; anything not
listed here is private to Chorus and may change in any release.

The platform's event models (``chorus.contracts`` lifecycle, approvals, platform, envelope)
are public as whole modules: they are contracts, versioned by the registry as every event.
"""

from __future__ import annotations

from collections.abc import Mapping

# Every public name is importable from here too (``from chorus.public import ServiceSpec``):
# each public module's ``__all__`` is its list; ``X as X`` marks a name re-exported.
from chorus import __version__ as __version__
from chorus.breaker import *  # noqa: F403
from chorus.clock import *  # noqa: F403
from chorus.codec import *  # noqa: F403
from chorus.contracts.base import (
    Cents as Cents,
)
from chorus.contracts.base import (
    Comment as Comment,
)
from chorus.contracts.base import (
    Count as Count,
)
from chorus.contracts.base import (
    Currency as Currency,
)
from chorus.contracts.base import (
    EventModel as EventModel,
)
from chorus.contracts.base import (
    KeyedRef as KeyedRef,
)
from chorus.contracts.base import (
    LongText as LongText,
)
from chorus.contracts.base import (
    Model as Model,
)
from chorus.contracts.base import (
    Name as Name,
)
from chorus.contracts.base import (
    Personal as Personal,
)
from chorus.contracts.base import (
    Ref as Ref,
)
from chorus.contracts.base import (
    Text as Text,
)
from chorus.contracts.base import (
    Url as Url,
)
from chorus.contracts.base import (
    UtcDateTime as UtcDateTime,
)
from chorus.contracts.base import (
    Uuid as Uuid,
)
from chorus.contracts.base import (
    VendorId as VendorId,
)
from chorus.contracts.base import (
    event as event,
)
from chorus.contracts.base import (
    invisible_characters as invisible_characters,
)
from chorus.contracts.base import (
    is_invisible as is_invisible,
)
from chorus.contracts.base import (
    upcaster as upcaster,
)
from chorus.db import *  # noqa: F403
from chorus.dependencies import *  # noqa: F403
from chorus.errors import *  # noqa: F403
from chorus.external import *  # noqa: F403
from chorus.llm import *  # noqa: F403
from chorus.migrations import *  # noqa: F403
from chorus.runtime.runner import ServiceSettings as ServiceSettings
from chorus.runtime.runner import main as main
from chorus.runtime.runner import running as running
from chorus.service import *  # noqa: F403
from chorus.settings import *  # noqa: F403
from chorus.stages import *  # noqa: F403
from chorus.store import *  # noqa: F403
from chorus.testing import *  # noqa: F403
from chorus.teststack import *  # noqa: F403
from chorus.tracing import *  # noqa: F403

WHOLE_MODULE = frozenset[str]()
"""Marks a module every public name of which is public (its contracts)."""

PUBLIC: Mapping[str, frozenset[str]] = {
    # Which Chorus (a service states it as its version, as Chorus's own services do)
    "chorus": frozenset({"__version__"}),
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
            "Reset",
        }
    ),
    "chorus.codec": frozenset({"Event", "upcast"}),
    "chorus.errors": frozenset({"TransientError", "PersistentError", "SemanticError", "RateLimitedError"}),
    "chorus.clock": frozenset({"Clock", "SystemClock", "ManualClock"}),
    "chorus.tracing": frozenset({"link"}),
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
            "agent_model",
            "LLMEndpoint",
            "parse_json_output",
            "reprompt",
            "AgentLoop",
            "AskTool",
            "FallbackModel",
            "LoopLimitError",
            "LoopLimitFailed",
            "LoopLimits",
            "ModelTurn",
            "Prices",
            "Tool",
            "ToolCall",
            "ToolContext",
            "ToolResult",
            "Transcript",
            "Usage",
        }
    ),
    # Its own tables
    "chorus.db": frozenset({"create_pool"}),
    "chorus.migrations": frozenset({"Migration", "baseline", "migrate"}),
    "chorus.store": frozenset({"ConflictError"}),
    # Testing it
    "chorus.testing": frozenset({"WorkflowHarness", "Step", "make_event", "Unguarded"}),
    "chorus.teststack": frozenset(
        {
            "isolated_registry",
            "isolated_schemas",
            "key_store",
            "provision",
            "publish",
            "read_events",
            "use_project_infra",
        }
    ),
    # Events
    "chorus.contracts.base": frozenset(
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
    "chorus.contracts.envelope": WHOLE_MODULE,
    "chorus.contracts.lifecycle": WHOLE_MODULE,
    "chorus.contracts.approvals": WHOLE_MODULE,
    "chorus.contracts.platform": WHOLE_MODULE,
}


def is_public(module: str, name: str) -> bool:
    names = PUBLIC.get(module)
    return names is not None and (names is WHOLE_MODULE or name in names)
