"""One LLM interface, two implementations.

- :class:`OpenAICompatibleLLM`: chat completions over HTTP (httpx) against any
  OpenAI-compatible server (base URL, model and key from settings), behind the
  shared rate limiter and circuit breaker (``llm``), with the task timeout and errors
  mapped onto the taxonomy: 429/5xx/timeouts transient, 401 persistent, output that
  fails its schema semantic.
- :class:`OfflineModel`: a deterministic model built from skills, named
  ``chorus-offline-deterministic``: what the sandbox serves over HTTP, and what unit
  tests give handlers. Services never build one themselves.

Prompts name their task on the system message's first line (``task: <name>``),
which is how the offline model (and the sandbox's HTTP model) pick a skill.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chorus.base.errors import PersistentError, SemanticError, TransientError
from chorus.base.tracing import Attributes
from chorus.outside.breaker import BreakerPolicy
from chorus.outside.dependencies import Dependency, Guarding, Guards, dependencies
from chorus.outside.external import Convention, ExternalRejection, call_json
from chorus.outside.llm import usage
from chorus.outside.llm.loop import (
    FallbackModel,
    LoopLimits,
    ModelTurn,
    TextSink,
    ToolCall,
    ToolModel,
    Usage,
    pointed,
)

OFFLINE_MODEL_NAME = "chorus-offline-deterministic"
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str

    def as_json(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


Skill = Callable[[list[ChatMessage]], str]


class LLM(Protocol):
    name: str

    async def complete(self, messages: list[ChatMessage], *, timeout_s: float = 120.0) -> str:
        """The assistant's reply text. Raises TransientError / PersistentError."""
        ...


def task_of(messages: list[ChatMessage]) -> str:
    first = messages[0].content.splitlines()[0] if messages and messages[0].content else ""
    if not first.startswith("task:"):
        raise PersistentError("prompt does not name its task on the first system line")
    return first.removeprefix("task:").strip()


ToolSkill = Callable[[Sequence[Mapping[str, Any]]], Mapping[str, Any]]
"""A task's deterministic turn in a tool-calling loop: from the messages so far, the reply
(``{"content": ...}`` to answer, ``{"tool_calls": [{"name", "arguments"}]}`` to call)."""


class OfflineModel:
    """Deterministic answers from the owning service's skills; no network, no randomness."""

    name = OFFLINE_MODEL_NAME

    def __init__(
        self, skills: Mapping[str, Skill], tool_skills: Mapping[str, ToolSkill] | None = None
    ) -> None:
        self.skills = dict(skills)
        self.tool_skills = dict(tool_skills or {})
        self.calls = 0

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        timeout_s: float = 120.0,
        on_text: TextSink | None = None,
    ) -> ModelTurn:
        """A turn of a tool-calling loop (chorus.outside.llm.loop): the task's tool skill's
        reply; its calls numbered by turn, its tokens counted as four characters each (its
        text told ``on_text`` at once: it does not stream)."""
        self.calls += 1
        task = task_of([ChatMessage(str(m["role"]), str(m.get("content") or "")) for m in messages[:1]])
        skill = self.tool_skills.get(task)
        if skill is None:
            raise PersistentError(f"the offline model has no tool skill for task {task!r}")
        reply = skill(messages)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        calls = [
            ToolCall(id=f"call-{turn}-{i}", name=c["name"], arguments=dict(c.get("arguments") or {}))
            for i, c in enumerate(reply.get("tool_calls") or [])
        ]
        if on_text is not None and reply.get("content"):
            await on_text(str(reply["content"]))
        return ModelTurn(
            model=self.name,
            content=reply.get("content"),
            tool_calls=calls,
            usage=Usage(
                input_tokens=len(json.dumps([*messages, *tools], sort_keys=True)) // 4,
                output_tokens=len(json.dumps(reply, sort_keys=True)) // 4,
            ),
        )

    async def complete(self, messages: list[ChatMessage], *, timeout_s: float = 120.0) -> str:
        self.calls += 1
        task = task_of(messages)
        skill = self.skills.get(task)
        if skill is None:
            raise PersistentError(f"the offline model has no skill for task {task!r}")
        return skill(messages)


class OpenAICompatibleLLM:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        guard: Guarding | None = None,
    ) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.name = model
        self.api_key = api_key
        self.guard = guard

    async def complete(self, messages: list[ChatMessage], *, timeout_s: float = 120.0) -> str:
        request = {
            "model": self.name,
            "messages": [m.as_json() for m in messages],
            "temperature": 0,
            "response_format": {"type": "json_object"},
        }
        response = await self._post(request, timeout_s)
        try:
            body = response.json()
            content: str = body["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise SemanticError("LLM answered without choices[0].message.content", [str(exc)]) from exc
        return content

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        timeout_s: float = 120.0,
        on_text: TextSink | None = None,
    ) -> ModelTurn:
        """A turn of a tool-calling loop (chorus.outside.llm.loop): the model's text or tool
        calls, with its usage. Arguments that are not a JSON object are the model's mistake
        (SemanticError: the step asks again). With ``on_text``, the answer is streamed
        (server-sent events, as OpenAI's API streams) and its text told as it grows."""
        request: dict[str, Any] = {"model": self.name, "messages": list(messages), "temperature": 0}
        if tools:
            # "auto" is OpenAI's default; said, as llama.cpp's server offers no tool without it.
            request["tools"], request["tool_choice"] = list(tools), "auto"
        streamed = _StreamedChat(on_text) if on_text is not None else None
        if streamed is not None:
            request["stream"] = True
            request["stream_options"] = {"include_usage": True}
        response = await self._post(request, timeout_s, streamed)
        whole = streamed.body() if streamed is not None else None
        if streamed is not None and streamed.error is not None:
            raise TransientError(f"LLM {self.name} broke off its answer: {str(streamed.error)[:500]}")
        try:
            # A server that would not stream answered whole: read as such.
            body: Any = (
                whole if whole is not None and streamed is not None and streamed.chunks else response.json()
            )
            choice = body["choices"][0]
            message = choice["message"]
            calls = [
                ToolCall(
                    id=str(c["id"]), name=str(c["function"]["name"]), arguments=_arguments(c["function"])
                )
                for c in message.get("tool_calls") or []
            ]
            content = message.get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise SemanticError(
                "LLM answered without a message or with malformed tool calls", [str(exc)]
            ) from exc
        if not calls and not (isinstance(content, str) and content.strip()):
            why = message.get("refusal") or f"finish_reason {choice.get('finish_reason')!r}"
            raise SemanticError(f"LLM answered nothing ({why})", [f"/: no answer and no tool call ({why})"])
        said = body.get("usage")
        spent: dict[str, Any] = said if isinstance(said, dict) else {}
        return ModelTurn(
            model=self.name,
            response_model=str(body["model"]) if isinstance(body.get("model"), str) else None,
            content=content if isinstance(content, str) else None,
            tool_calls=calls,
            usage=Usage(
                input_tokens=_count(spent.get("prompt_tokens")),
                output_tokens=_count(spent.get("completion_tokens")),
            ),
        )

    async def _post(
        self, request: dict[str, Any], timeout_s: float, streamed: _StreamedChat | None = None
    ) -> httpx.Response:
        """One chat completion request, behind the ``llm`` guard, as a GenAI client span."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        answered = (
            self._answered if streamed is None else lambda _: usage.answered(self.name, streamed.body())
        )
        try:
            async with self.guard.call() if self.guard is not None else contextlib.nullcontext():
                return await call_json(
                    self.client,
                    "POST",
                    f"{self.base_url}/chat/completions",
                    what="LLM",
                    json=request,
                    headers=headers,
                    timeout_s=timeout_s,
                    convention=Convention(f"chat {self.name}", usage.chat_attributes(self.name), answered),
                    on_chunk=streamed.feed if streamed is not None else None,
                )
        except ExternalRejection as exc:
            raise PersistentError(f"LLM request refused ({exc.status}): {exc.body}") from exc

    def _answered(self, response: httpx.Response) -> Attributes:
        try:
            body = response.json()
        except ValueError:
            return {}  # complete() says what is wrong with it
        return usage.answered(self.name, body)


class _StreamedChat:
    """A chat completion streamed as server-sent events (``data: {chunk}`` lines, then
    ``data: [DONE]``), put together as it arrives: the text told ``on_text`` as it grows,
    the tool calls' pieces joined by their index, the usage of the last chunk."""

    def __init__(self, on_text: TextSink) -> None:
        self.on_text = on_text
        self.pending = b""
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.finish: str | None = None
        self.chunks = 0
        """Chunks read: none means the server did not stream (it answered whole)."""
        self.error: Any = None
        """An error the server sent in the stream."""

    async def feed(self, chunk: bytes) -> None:
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        if self._read(lines):
            await self.on_text("".join(self.text))

    def _read(self, lines: Sequence[bytes]) -> bool:
        """Add what ``lines`` say; True when the text grew."""
        grew = False
        for line in lines:
            data = line.strip()
            if not data.startswith(b"data:") or data == b"data: [DONE]":
                continue
            try:
                event = json.loads(data[5:])
            except ValueError:
                continue  # not a chunk: what did come says what the answer was
            grew = self._add(event) or grew
        return grew

    def _add(self, event: Any) -> bool:
        if not isinstance(event, dict):
            return False
        self.chunks += 1
        if "error" in event:
            self.error = event["error"]
            return False
        self.model = event.get("model") if isinstance(event.get("model"), str) else self.model
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        grew = False
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                self.text.append(delta["content"])
                grew = True
            for piece in delta.get("tool_calls") or []:
                index = piece.get("index") if isinstance(piece.get("index"), int) else len(self.calls)
                call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                function = piece.get("function") or {}
                call["id"] = piece.get("id") or call["id"]
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
            self.finish = choice.get("finish_reason") or self.finish
        return grew

    def body(self) -> dict[str, Any]:
        """The answer as a non-streamed completion's body (a last line without its newline
        read too)."""
        if self.pending:
            self._read([self.pending])
            self.pending = b""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for _, c in sorted(self.calls.items())
            ]
        body: dict[str, Any] = {"choices": [{"index": 0, "message": message, "finish_reason": self.finish}]}
        if self.model is not None:
            body["model"] = self.model
        if self.usage is not None:
            body["usage"] = self.usage
        return body


def _arguments(function: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call's arguments: OpenAI sends them as a JSON string (some servers as an object)."""
    raw = function.get("arguments") or "{}"
    parsed = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(parsed, dict):
        raise TypeError(f"tool call arguments are not a JSON object: {raw!r}")
    return parsed


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def reprompt(
    system: str,
    user: str,
    feedback: list[str],
    reviewer_comment: str = "",
    *,
    answer: str = "answer",
    reviewer: str = "A reviewer commented",
) -> list[ChatMessage]:
    """The system and user messages of an LLM step, with what was wrong last time appended.

    ``feedback`` is the handler context's validation errors of earlier tries (the runtime's
    semantic-retry loop), ``reviewer_comment`` a person's "revise" comment; the model sees
    both so the next try can correct itself rather than repeat the same mistake."""
    if feedback:
        user += f"\nYour previous {answer} was invalid:\n" + "\n".join(f"- {e}" for e in feedback)
    if reviewer_comment:
        user += f"\n{reviewer}: {reviewer_comment}"
    return [ChatMessage("system", system), ChatMessage("user", user)]


def parse_json_output(text: str, model: type[M]) -> M:
    """The model's answer as ``model``, or a SemanticError listing what is wrong, by pointer."""
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise SemanticError("output is not JSON", [f"/: not JSON ({exc})"]) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SemanticError(f"output does not match {model.__name__}", pointed(exc)) from None


class LLMEndpoint(BaseModel):
    """A model a step may fall back to: its name, and where it is served when that is not
    CHORUS_LLM_BASE_URL (with its own key)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1, max_length=200)
    base_url: str = ""
    api_key: str = Field(default="", repr=False)


class LLMSettings(BaseModel):
    """Fields a service that talks to an LLM adds to its Settings (CHORUS_LLM_*)."""

    llm_base_url: str = ""
    """An OpenAI-compatible base URL (…/v1). `make services`, the demo and the tests point it
    at the sandbox's deterministic model; there is no built-in default."""
    llm_model: str = "gpt-4o-mini"
    llm_api_key: str = ""
    llm_rate_per_s: float = 10.0
    """Shared by every replica of every service through PostgreSQL (limiter ``llm``)."""
    llm_breaker: BreakerPolicy = BreakerPolicy()
    """The ``llm`` circuit breaker, shared the same way (chorus.outside.breaker)."""
    llm_timeout_s: float = 120.0
    llm_prices: dict[str, tuple[float, float]] = {}
    """Dollars per million tokens, (input, output), by model: what an agent loop's turns cost
    (chorus.outside.llm.loop.Prices). CHORUS_LLM_PRICES='{"gpt-4o-mini": [0.15, 0.6]}'."""
    llm_fallback: list[LLMEndpoint] = []
    """The models an agent loop's turn falls back to, in order, when the one before is
    rate-limited or its breaker is open (chorus.outside.llm.client.agent_model):
    CHORUS_LLM_FALLBACK='[{"model": "gpt-4.1-nano"}]'."""
    agent_limits: LoopLimits = LoopLimits()
    """An agent loop's turns, tokens and cost per step, and what happens at the limit:
    CHORUS_AGENT_LIMITS='{"max_turns": 6, "max_cost_micro_usd": 20000, "on_limit": "escalate"}'."""
    agent_stream_every_s: float | None = Field(default=None, gt=0)
    """Stream an agent loop's answers and publish what the model has written so far at most
    this often (AgentLoop's ``stream_every_s``: the workflow's status shows it while the step
    runs): CHORUS_AGENT_STREAM_EVERY_S=1. Unset: answers come whole (a server that streams
    without usage, as some do, leaves the turn's tokens uncounted)."""
    agent_limits_by_type: dict[str, LoopLimits] = {}
    """The same for a workflow type whose loops have limits of their own (AgentLoop's
    ``limits_by_type``): CHORUS_AGENT_LIMITS_BY_TYPE='{"support": {"max_cost_micro_usd":
    50000, "on_limit": "fail"}}'."""


@asynccontextmanager
async def llm_dependency(settings: Any) -> AsyncIterator[OpenAICompatibleLLM]:
    """The LLM a service's handlers use, built from its settings (bootstrap helper): an
    HTTP client, the shared ``llm`` rate limiter and circuit breaker (chorus.outside.dependencies)."""
    async with dependencies(settings) as deps, httpx.AsyncClient() as client:
        yield await _guarded(settings, deps, client, LLMEndpoint(model=settings.llm_model), "llm")


@asynccontextmanager
async def agent_model(settings: Any) -> AsyncIterator[ToolModel]:
    """The model an agent loop asks (bootstrap helper): the configured one, or, with
    ``llm_fallback`` set, the chain of it and its fallbacks (FallbackModel), each model with
    a breaker and a rate limiter of its own (``llm:<model>``, shared by every replica), so
    one model's outage opens its breaker and the next answers."""
    async with dependencies(settings) as deps, httpx.AsyncClient() as client:
        if not settings.llm_fallback:
            yield await _guarded(settings, deps, client, LLMEndpoint(model=settings.llm_model), "llm")
            return
        chain = [LLMEndpoint(model=settings.llm_model), *settings.llm_fallback]
        yield FallbackModel([await _guarded(settings, deps, client, e, f"llm:{e.model}") for e in chain])


async def _guarded(
    settings: Any, deps: Guards, client: httpx.AsyncClient, endpoint: LLMEndpoint, name: str
) -> OpenAICompatibleLLM:
    base_url = endpoint.base_url or settings.llm_base_url
    if not str(base_url).startswith(("http://", "https://")):
        raise ValueError(
            f"no language model configured (CHORUS_LLM_BASE_URL={base_url!r}): set it to "
            "an OpenAI-compatible endpoint; make services and the demo use the sandbox's, "
            "http://127.0.0.1:9400/v1 (the built-in 'offline' model is gone)"
        )
    guarded = Dependency(
        name=name,
        rate_per_s=settings.llm_rate_per_s,
        max_wait_s=settings.llm_timeout_s,
        breaker=settings.llm_breaker,
    )
    return OpenAICompatibleLLM(
        client,
        base_url=base_url,
        model=endpoint.model,
        api_key=endpoint.api_key or settings.llm_api_key,
        guard=await deps.guard(guarded),
    )
