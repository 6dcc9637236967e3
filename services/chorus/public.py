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
