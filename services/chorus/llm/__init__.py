"""The LLM adapter: one interface, an OpenAI-compatible HTTP client and a deterministic offline model."""

from chorus.llm.client import (
    LLMSettings,
    llm_dependency,
    LLM,
    ChatMessage,
    OfflineModel,
    OpenAICompatibleLLM,
    llm_from_settings,
    parse_json_output,
)

__all__ = [
    "LLM",
    "LLMSettings",
    "ChatMessage",
    "OfflineModel",
    "OpenAICompatibleLLM",
    "llm_dependency",
    "llm_from_settings",
    "parse_json_output",
]
