"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.outside.llm``."""

from chorus.outside.llm import (
    LLM,
    ChatMessage,
    LLMSettings,
    OfflineModel,
    llm_dependency,
    parse_json_output,
    reprompt,
)

__all__ = [
    "LLM",
    "ChatMessage",
    "LLMSettings",
    "OfflineModel",
    "llm_dependency",
    "parse_json_output",
    "reprompt",
]
