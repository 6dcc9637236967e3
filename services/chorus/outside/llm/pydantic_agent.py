"""A Pydantic AI agent as a Chorus handler's work: its model requests and tool calls kept in
the step's checkpoint as they complete, so a crash (SIGKILL, a deploy) resumes the run where
it was, asking no model again for a turn it has and making no tool call again whose result
it has.

Pydantic AI's own extension point for durable engines is a capability
(``pydantic_ai.durable_exec.BaseDurabilityCapability``: Temporal's, DBOS's and Prefect's are
built on it) with a backend that runs each operation as one durable unit. Chorus's unit is an
entry of an :class:`AgentJournal` that the handler keeps in its state: ``ChorusDurability``
on the agent, :func:`run_agent` in the handler::

    agent = Agent(model, name="stock", tools=[look_up, reserve], capabilities=[ChorusDurability()])

    async def on_order(event, state, ctx):
        run = await run_agent(agent, ctx, state.journal if state else None,
                              lambda journal: Progress(journal=journal), user_prompt=...)
        return Outcome(state=Progress(journal=run.journal), emit=[..., *run.recorded(...)])

The journal replays by position, as Metaflow's and DBOS's do: the run's n-th model request or
tool call is answered from the n-th entry while its inputs are the same (a digest of them);
the first that differs, and everything after it, runs for real. A tool with side effects
reads :func:`idempotency_key` (the workflow's, the step's, the agent's and the call's
position: the same on every try of that call) and gives it to what it changes, because the
one call a crash can repeat is the one under way when the process died.

What each model request read, wrote and cost (the service's price table) is in its entry;
limits (turns, tokens, cost) are checked before each live request, as the agent loop's are
(chorus.outside.llm.loop: LoopLimits, LoopLimitError), and :meth:`AgentJournal.transcript`
gives the run in the loop's form, for the audit trail's turn and spend events.

Needs Pydantic AI 2 (``pip install 'chorus-workflows[pydantic-ai]'``, Python 3.11 or later);
:func:`guarded_model` makes its model: OpenAI's client to the configured OpenAI-compatible
server, behind the service's shared ``llm`` rate limiter and circuit breaker.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic_ai import Agent, RunContext
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationId,
    JournalCallableOperationBackend,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
)
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.toolsets.abstract import ToolsetTool

from chorus.base.errors import PersistentError, TransientError
from chorus.base.faults import fault_point
from chorus.contracts.base import EventModel
from chorus.outside.dependencies import Dependency, Guarding, dependencies
from chorus.outside.llm import usage as usage_metrics
from chorus.outside.llm.loop import (
    Checkpointing,
    LoopLimits,
    ModelTurn,
    Prices,
    ToolCall,
    ToolResult,
    Transcript,
    Turn,
    Usage,
    check_limits,
)

MODEL_REQUEST, TOOL_CALL = "model_request", "tool_call"


class JournalEntry(BaseModel):
    """One model request or tool call of the run, as it completed."""

    model_config = ConfigDict(frozen=True)

    kind: str
    """``model_request`` or ``tool_call``."""
    name: str
    """Pydantic AI's name for the operation (the agent's, the model's or the toolset's)."""
    inputs: str
    """A digest of what it was asked (messages, arguments), without what changes between
    tries (timestamps, run ids): a resumed run replays an entry only while they are equal."""
    payload: Any = None
    """Its result, as Pydantic AI encodes it for a journal (JSON)."""
    usage: Usage | None = None
    """What a model request read, wrote and cost."""
    call_id: str | None = None
    """A tool call's id (the model's): which of the turn's calls it answered."""


class AgentJournal(BaseModel):
    """What a Pydantic AI agent's run has done so far, as the handler's checkpoint keeps it."""

    model_config = ConfigDict(frozen=True)

    entries: list[JournalEntry] = Field(default_factory=list)

    @property
    def usage(self) -> Usage:
        total = Usage()
        for entry in self.entries:
            total += entry.usage or Usage()
        return total

    @property
    def model_requests(self) -> int:
        return sum(1 for e in self.entries if e.kind == MODEL_REQUEST)

    def transcript(self) -> Transcript:
        """The run as the agent loop's transcript (a turn per model request, with the results
        of the tools it called): what ``Transcript.recorded`` and ``spent`` state."""
        turns: list[Turn] = []
        for entry in self.entries:
            if entry.kind == MODEL_REQUEST:
                turns.append(Turn(answer=_model_turn(entry)))
            elif turns:
                last = turns[-1]
                turns[-1] = last.model_copy(update={"results": [*last.results, _tool_result(entry, last)]})
        answer = turns[-1].answer.content if turns and not turns[-1].answer.tool_calls else None
        return Transcript(turns=turns, answer=answer)


def _model_turn(entry: JournalEntry) -> ModelTurn:
    response = entry.payload if isinstance(entry.payload, dict) else {}
    text = [p.get("content") for p in response.get("parts", []) if p.get("part_kind") == "text"]
    calls = [
        ToolCall(
            id=str(p.get("tool_call_id") or ""), name=str(p.get("tool_name")), arguments=_args(p.get("args"))
        )
        for p in response.get("parts", [])
        if p.get("part_kind") == "tool-call"
    ]
    model = str(response.get("model_name") or "")
    return ModelTurn(
        model=model,
        response_model=model or None,
        content="".join(t for t in text if isinstance(t, str)) or None,
        tool_calls=calls,
        usage=entry.usage or Usage(),
    )


def _tool_result(entry: JournalEntry, turn: Turn) -> ToolResult:
    # By the model's id where the entry has it: some calls of a turn have no entry (an
    # output tool, arguments refused), so positions would pair the wrong ones.
    answered = {r.call_id for r in turn.results}
    pending = [c for c in turn.answer.tool_calls if c.id not in answered]
    call = next(
        (c for c in pending if entry.call_id and c.id == entry.call_id), pending[0] if pending else None
    )
    # Pydantic AI's record of a call: {"kind": "tool_return", "result": ...}, or how it ended
    # otherwise (a retry asked of the model, a call deferred), which the model is told.
    said = entry.payload if isinstance(entry.payload, dict) else {}
    returned = said.get("kind") == "tool_return"
    return ToolResult(
        call_id=call.id if call else "",
        name=call.name if call else entry.name,
        output=said.get("result") if returned else None,
        error=None if returned else json.dumps(entry.payload, sort_keys=True, default=str)[:2000],
    )


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw or "{}")
        except ValueError:
            return {"unparsed": raw}
    return raw if isinstance(raw, dict) else {}


_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id", "provider_response_id"})


def _without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


_ANY: TypeAdapter[Any] = TypeAdapter(Any)


def _digest(cache_key: tuple[object, ...]) -> str:
    """What an operation was asked (messages, settings, a tool's name and arguments), as a
    digest. The run's context (its deps, its usage so far) and tool objects count by their
    type only: what they hold may differ from one process to the next, and the question
    asked does not."""
    parts: list[Any] = []
    for part in cache_key:
        if isinstance(part, RunContext | ToolsetTool):
            parts.append(type(part).__name__)
            continue
        try:
            encoded = _ANY.dump_json(part, fallback=lambda o: type(o).__name__)
            parts.append(_without_volatile(json.loads(encoded)))
        except ValueError:  # a structure that refers to itself
            parts.append(type(part).__name__)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


_key: ContextVar[str | None] = ContextVar("chorus_tool_idempotency_key", default=None)


def idempotency_key() -> str:
    """The key of the tool call under way: the same on every try of it (a crash mid-call runs
    it again with this key), different for every other call of the run."""
    key = _key.get()
    if key is None:
        raise RuntimeError("idempotency_key() is for a tool an agent calls in run_agent")
    return key


@dataclass
class _Run:
    """One run_agent: the journal it resumes from, and the entries of this run so far."""

    ctx: Checkpointing
    prior: Sequence[JournalEntry]
    keep: Callable[[AgentJournal], BaseModel]
    agent: str
    limits: LoopLimits
    prices: Prices

    def __post_init__(self) -> None:
        self.entries: list[JournalEntry] = []
        self.diverged = False

    @property
    def journal(self) -> AgentJournal:
        return AgentJournal(entries=list(self.entries))

    def replayed(self, kind: str, name: str, inputs: str) -> JournalEntry | None:
        position = len(self.entries)
        if not self.diverged and position < len(self.prior):
            prior = self.prior[position]
            if (prior.kind, prior.name, prior.inputs) == (kind, name, inputs):
                return prior
        self.diverged = True
        return None

    async def execute(
        self, kind: str, name: str, body: Callable[[], Awaitable[object]], inputs: str, call_id: str | None
    ) -> object:
        prior = self.replayed(kind, name, inputs)
        if prior is not None:
            self.entries.append(prior)
            return prior.payload
        if kind == MODEL_REQUEST:
            journal = self.journal
            check_limits(self.limits, journal.model_requests, journal.usage)
            payload = await body()
            entry = JournalEntry(
                kind=kind, name=name, inputs=inputs, payload=payload, usage=self._priced(payload)
            )
        else:
            # Its place in the run and what it asks: the same call tried again has the same key,
            # and another call at that place (a run that went otherwise) has its own.
            key = self.ctx.idempotency_key(self.agent, str(len(self.entries)), inputs[:16])
            token = _key.set(key)
            try:
                payload = await body()
            finally:
                _key.reset(token)
            fault_point("mid_tool_call")  # made, not kept: the one call a crash repeats
            entry = JournalEntry(kind=kind, name=name, inputs=inputs, payload=payload, call_id=call_id)
        self.entries.append(entry)
        await self.ctx.checkpoint(self.keep(self.journal))
        fault_point("after_model_turn" if kind == MODEL_REQUEST else "after_tool_call")
        return payload

    def _priced(self, payload: Any) -> Usage:
        answered = payload if isinstance(payload, dict) else {}
        spent = answered.get("usage") or {}
        model = str(answered.get("model_name") or "")
        usage = self.prices.priced(
            model,
            Usage(
                input_tokens=int(spent.get("input_tokens") or 0),
                output_tokens=int(spent.get("output_tokens") or 0),
            ),
        )
        usage_metrics.count_spend(
            usage_metrics.workflow_type_of(self.ctx),
            model,
            usage.input_tokens,
            usage.output_tokens,
            usage.cost_micro_usd,
        )
        return usage


_run: ContextVar[_Run | None] = ContextVar("chorus_agent_run", default=None)


class _Backend(JournalCallableOperationBackend[None]):
    """Model requests and tool calls through the run's journal; what else Pydantic AI runs as
    an operation (discovering tools, validating arguments) runs as it is, on every try."""

    def __init__(self, agent_name: str, default_model_id: str | None) -> None:
        nothing = RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None)
        super().__init__(agent_name=agent_name, default_model_id=default_model_id, config=nothing)

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        run = _run.get()
        kind = (
            MODEL_REQUEST
            if isinstance(operation_id, ModelRequestId)
            else TOOL_CALL
            if isinstance(operation_id, ToolsetCallToolId)
            else None
        )
        if run is None or kind is None:
            return await body()
        context = next((part for part in cache_key if isinstance(part, RunContext)), None)
        call_id = context.tool_call_id if context is not None and kind == TOOL_CALL else None
        return await run.execute(kind, name, body, _digest(cache_key), call_id)


class ChorusDurability(BaseDurabilityCapability[Any]):
    """Put on a Pydantic AI agent (``capabilities=[ChorusDurability()]``) that a handler runs
    with :func:`run_agent`; elsewhere it changes nothing."""

    engine_spec = DurabilityEngineSpec(
        engine_name="Chorus",
        durable_unit_noun="journal entry",
        durable_unit_plural="journal entries",
        durable_container_noun="step",
        codec=JSON_CODEC,
        serialization_failure=lambda exc: PersistentError(f"an agent's result cannot be kept: {exc}"),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        # Calls one at a time: a call's position is its key, and the order the journal replays.
        sequential_tools_in_durable_context=True,
        journal_discovery=False,
    )

    @property
    def in_durable_context(self) -> bool:
        return _run.get() is not None

    def get_durable_operation_backend(self) -> _Backend:
        return _Backend(self.name, self.default_model_id)


@dataclass(frozen=True)
class AgentRun:
    """What :func:`run_agent` returns: the agent's result, and the journal (the handler's
    next state keeps it)."""

    result: AgentRunResult[Any]
    journal: AgentJournal

    @property
    def output(self) -> Any:
        return self.result.output

    def recorded(self, service: str, step: str, prompt: Sequence[dict[str, Any]] = ()) -> list[EventModel]:
        """The run's turns and spend as the audit trail keeps them (Transcript.recorded)."""
        return self.journal.transcript().recorded(service, step, prompt)


async def run_agent(
    agent: Agent[Any, Any],
    ctx: Checkpointing,
    journal: AgentJournal | None,
    keep: Callable[[AgentJournal], BaseModel],
    *,
    limits: LoopLimits | None = None,
    limits_by_type: Mapping[str, LoopLimits] | None = None,
    prices: Prices | None = None,
    **run: Any,
) -> AgentRun:
    """Run ``agent`` (``run``: what ``agent.run`` takes: the prompt, deps, …) from ``journal``
    (the checkpoint's; None to start): every model request and tool call is kept through
    ``keep`` (the handler's state from a journal) with ``ctx.checkpoint`` as it completes.
    ``limits``, ``limits_by_type`` and ``prices`` as the agent loop's (AgentLoop)."""
    if ChorusDurability.from_agent(agent) is None:
        raise ValueError(
            f"agent {agent.name!r} has no ChorusDurability capability: nothing it does would be kept"
        )
    state = _Run(
        ctx,
        (journal or AgentJournal()).entries,
        keep,
        agent.name or "agent",
        (limits_by_type or {}).get(usage_metrics.workflow_type_of(ctx), limits or LoopLimits()),
        prices or Prices({}),
    )
    token = _run.set(state)
    try:
        result = await agent.run(**run)
    finally:
        _run.reset(token)
    return AgentRun(result=result, journal=state.journal)


class GuardedModel(WrapperModel):
    """A Pydantic AI model behind a Chorus dependency's guard (its shared rate limiter and
    circuit breaker), its failures in Chorus's terms: a 429, a 5xx or no answer is transient
    (the breaker counts it; the step is retried), another refusal persistent."""

    def __init__(self, wrapped: Any, guard: Guarding) -> None:
        super().__init__(wrapped)
        self.guard = guard

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        async with self.guard.call(), self._in_chorus_terms():
            return await super().request(messages, model_settings, model_request_parameters)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        async with (
            self.guard.call(),
            self._in_chorus_terms(),
            super().request_stream(messages, model_settings, model_request_parameters, run_context) as stream,
        ):
            yield stream

    @asynccontextmanager
    async def _in_chorus_terms(self) -> AsyncIterator[None]:
        try:
            yield
        except ModelHTTPError as exc:
            if exc.status_code == 429 or exc.status_code >= 500:
                raise TransientError(f"LLM {self.model_name}: {exc.status_code}") from exc
            raise PersistentError(f"LLM request refused ({exc.status_code}): {exc.body}") from exc
        except ModelAPIError as exc:
            raise TransientError(f"LLM {self.model_name}: {exc.message}") from exc


@asynccontextmanager
async def guarded_model(settings: Any) -> AsyncIterator[GuardedModel]:
    """The model a service's Pydantic AI agents use (bootstrap helper): ``llm_model`` at
    ``llm_base_url`` with ``llm_api_key`` (chorus.outside.llm.client.LLMSettings), through
    OpenAI's client, behind the shared ``llm`` guard; retries are the step's, not the client's."""
    from openai import AsyncOpenAI

    base_url = str(settings.llm_base_url)
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"no language model configured (CHORUS_LLM_BASE_URL={base_url!r})")
    client = AsyncOpenAI(
        base_url=base_url,
        api_key=settings.llm_api_key or "none",
        max_retries=0,
        timeout=settings.llm_timeout_s,
    )
    async with dependencies(settings) as deps, client:
        guard = await deps.guard(
            Dependency(
                name="llm",
                rate_per_s=settings.llm_rate_per_s,
                max_wait_s=settings.llm_timeout_s,
                breaker=settings.llm_breaker,
            )
        )
        model = OpenAIChatModel(settings.llm_model, provider=OpenAIProvider(openai_client=client))
        yield GuardedModel(model, guard)


__all__ = [
    "AgentJournal",
    "AgentRun",
    "ChorusDurability",
    "GuardedModel",
    "JournalEntry",
    "guarded_model",
    "idempotency_key",
    "run_agent",
]
