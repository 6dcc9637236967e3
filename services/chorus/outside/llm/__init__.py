"""The LLM adapter: one interface, an OpenAI-compatible HTTP client and a deterministic offline model."""

from chorus.outside.llm.client import (
    LLM,
    ChatMessage,
    LLMSettings,
    OfflineModel,
    OpenAICompatibleLLM,
    llm_dependency,
    parse_json_output,
    reprompt,
)

__all__ = [
    "LLM",
    "ChatMessage",
    "LLMSettings",
    "OfflineModel",
    "OpenAICompatibleLLM",
    "llm_dependency",
    "parse_json_output",
    "reprompt",
]
