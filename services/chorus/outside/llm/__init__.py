"""The LLM adapter: one interface, an OpenAI-compatible HTTP client and a deterministic offline model.

``__all__`` is the public surface, re-exported as ``chorus.llm`` (docs/runtime-api.md)."""

from chorus.outside.llm.client import (
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
