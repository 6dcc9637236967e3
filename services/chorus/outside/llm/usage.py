"""What language models were asked to read and write, in OpenTelemetry's GenAI terms: the
``gen_ai.usage.*`` attributes of a chat's span, and the ``gen_ai.client.token.usage``
histogram (``gen_ai_client_token_usage`` in Prometheus form) by operation, provider, model
and token type. One histogram per process, which every service's /metrics shows (the
``outside`` feature registers the collector, as it does the breakers')."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.registry import Collector

from chorus.base.tracing import Attributes

TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
"""The buckets the GenAI conventions advise for gen_ai.client.token.usage."""
PROVIDER = "openai"
"""gen_ai.provider.name of an OpenAI-compatible server (its API is OpenAI's)."""

_TOKENS = Histogram(
    "gen_ai_client_token_usage",
    "Tokens a language model read (input) and wrote (output), per call",
    ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_token_type"],
    buckets=TOKEN_BUCKETS,
    registry=None,  # every service's own registry shows it, through the collector below
)


_COST = Counter(
    "chorus_llm_cost_usd",
    "What agents' model turns cost, in dollars by the price table, by workflow type and model",
    ["workflow_type", "gen_ai_request_model"],
    registry=None,
)
_SPENT = Counter(
    "chorus_llm_tokens",
    "Tokens agents' model turns read (input) and wrote (output), by workflow type and model",
    ["workflow_type", "gen_ai_request_model", "gen_ai_token_type"],
    registry=None,
)


def count_spend(
    workflow_type: str, model: str, input_tokens: int, output_tokens: int, micro_usd: int
) -> None:
    """A model turn of an agent (chorus.outside.llm.loop, chorus.outside.llm.pydantic_agent),
    counted for its workflow's type: what a type of workflow costs, as it runs."""
    for token_type, count in (("input", input_tokens), ("output", output_tokens)):
        if count > 0:
            _SPENT.labels(workflow_type, model, token_type).inc(count)
    if micro_usd > 0:
        _COST.labels(workflow_type, model).inc(micro_usd / 1_000_000)


def workflow_type_of(ctx: object) -> str:
    """The workflow type of the event a handler's context is for (its envelope's); "" for a
    context without one (a test's)."""
    envelope = getattr(ctx, "envelope", None)
    return str(getattr(envelope, "workflow_type", "") or "")


class TokenUsageCollector(Collector):
    def collect(self) -> Iterator[Any]:
        yield from _TOKENS.collect()
        yield from _COST.collect()
        yield from _SPENT.collect()


def chat_attributes(model: str) -> dict[str, str | int | float | bool]:
    """A chat call's attributes, known before it is made."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": model,
        "gen_ai.request.temperature": 0.0,
    }


def answered(model: str, body: Any) -> Attributes:
    """What an OpenAI-compatible answer says of the call (its ``usage``, the model that
    answered, its id), as span attributes; the tokens are counted in the histogram too. An
    answer without them (some servers leave ``usage`` out) adds nothing."""
    if not isinstance(body, dict):
        return {}
    found: dict[str, str | int | float | bool] = {}
    usage = body.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    for key, token_type in (("prompt_tokens", "input"), ("completion_tokens", "output")):
        count = usage.get(key)
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            found[f"gen_ai.usage.{token_type}_tokens"] = count
            _TOKENS.labels("chat", PROVIDER, model, token_type).observe(count)
    for key, attribute in (("model", "gen_ai.response.model"), ("id", "gen_ai.response.id")):
        if isinstance(body.get(key), str):
            found[attribute] = body[key][:200]
    return found
