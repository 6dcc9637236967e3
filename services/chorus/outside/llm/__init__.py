"""The LLM adapter: one interface, an OpenAI-compatible HTTP client and a deterministic offline model.

``__all__`` is the public surface, re-exported as ``chorus.llm`` (docs/runtime-api.md)."""

from chorus.outside.llm.client import (
    LLM,
    ChatMessage,
    LLMEndpoint,
    LLMSettings,
    OfflineModel,
    agent_model,
    llm_dependency,
    parse_json_output,
    reprompt,
)
from chorus.outside.llm.loop import (
    AgentLoop,
    AskTool,
    FallbackModel,
    LoopLimitError,
    LoopLimitFailed,
    LoopLimits,
    ModelTurn,
    Prices,
    Tool,
    ToolCall,
    ToolContext,
    ToolResult,
    Transcript,
    Usage,
)

__all__ = [
    "LLM",
    "AgentLoop",
    "AskTool",
    "ChatMessage",
    "FallbackModel",
    "LLMEndpoint",
    "LLMSettings",
    "LoopLimitError",
    "LoopLimitFailed",
    "LoopLimits",
    "ModelTurn",
    "OfflineModel",
    "Prices",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolResult",
    "Transcript",
    "Usage",
    "agent_model",
    "llm_dependency",
    "parse_json_output",
    "reprompt",
]
