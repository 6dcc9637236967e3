"""A durable tool-calling loop for a handler: a model that may call tools, turn after turn,
until it answers.

Each model turn and each tool call is kept in the handler's checkpoint the moment it
completes (``ctx.checkpoint``, through the ``keep`` function the handler gives: its state
with the transcript in it). A crash anywhere in the loop (SIGKILL, a deploy) re-runs the
handler on its last checkpoint, and the loop goes on from there: a model turn that was kept
is not asked for again, a tool call whose result was kept is not made again. What can repeat
is only the call that was under way when the process died, so a tool with side effects gets
an idempotency key that is the same on every try of that call (the workflow's, the step's,
the turn's and the call's), as payments do.

Every turn records what it cost: its model, input and output tokens, and (from the price
table the service is configured with) money, in micro-dollars so that sums are exact. The
loop stops before a turn that ``limits`` refuse (turns, tokens, cost), saying the spend so far:
a semantic failure (``LoopLimitError``: a person decides, as for any answer the model could
not get right) or, as the limits say, a persistent one (``LoopLimitFailed``).

Deliberately small: the loop is the handler's, not the runtime's (a step may hold one next
to its other work), and a tool is a plain async function of a validated model. The messages
are OpenAI's chat format (``tool_calls``, ``tool`` messages), which every OpenAI-compatible
server and the offline model speak.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from chorus.base.clock import Clock
from chorus.base.errors import PersistentError, SemanticError
from chorus.base.faults import fault_point
from chorus.base.tracing import work_span
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import (
    AgentOutputStreamed,
    AgentTurnRecorded,
    SpendRecorded,
    ToolCallSaid,
    TurnSaid,
)
from chorus.outside.breaker import BreakerOpenError
from chorus.outside.llm import usage as usage_metrics
from chorus.outside.ratelimit import RateLimitedError


class ToolCall(BaseModel):
    """A call the model asked for: its id (the model's), the tool, and its arguments."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Usage(BaseModel):
    """What a model turn (or a whole transcript) read, wrote and cost."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micro_usd: int = 0
    """Money, in millionths of a dollar (exact sums; 1_000_000 is one dollar)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_micro_usd=self.cost_micro_usd + other.cost_micro_usd,
        )

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ModelTurn(BaseModel):
    """One answer of the model: text, or tool calls (or both), and what it cost."""

    model_config = ConfigDict(frozen=True)

    model: str
    """The model asked, by the name it is configured and priced under (a fallback's, when the
    first could not answer)."""
    response_model: str | None = None
    """The name the server answered with (OpenAI's is dated: gpt-4o-mini-2024-07-18)."""
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Usage()
    passed_over: list[str] = Field(default_factory=list)
    """Models of the chain asked first that could not answer, each with why."""


class ToolResult(BaseModel):
    """What a tool call returned (JSON), or why it could not be made (its arguments refused,
    no such tool): the model is told either way and may try again."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str
    output: Any = None
    error: str | None = None


class Turn(BaseModel):
    model_config = ConfigDict(frozen=True)

    answer: ModelTurn
    results: list[ToolResult] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list)
    """Why the handler refused this turn's answer (its validation errors): told to the model,
    which is asked again."""

    @property
    def pending(self) -> list[ToolCall]:
        """The calls of this turn whose result is not kept yet, in the model's order."""
        return self.answer.tool_calls[len(self.results) :]


class Transcript(BaseModel):
    """The loop so far, as the handler's checkpoint keeps it."""

    model_config = ConfigDict(frozen=True)

    turns: list[Turn] = Field(default_factory=list)
    answer: str | None = None
    """The model's final text, once it answered without calling a tool."""
    waiting: str | None = None
    """The key of the call the loop is parked on (an :class:`AskTool`'s): someone else
    answers it (another service, a person), and ``AgentLoop.answered`` gives it the answer."""

    @property
    def usage(self) -> Usage:
        total = Usage()
        for turn in self.turns:
            total += turn.answer.usage
        return total

    def recorded(self, service: str, step: str, prompt: Sequence[Mapping[str, Any]] = ()) -> list[EventModel]:
        """The loop as the workflow's audit trail keeps it: one ``agent.turn_recorded`` per
        turn (what the model saw and said, sealed as personal data; ``prompt``: the messages
        the loop began from), then what it spent. Emit them with the step's other events,
        once, with the step that ends the loop (a loop parked on an AskTool spans steps: the
        step that parks it does not record it, or its turns would count twice)."""
        turns: list[EventModel] = [
            _turn_recorded(service, step, i, turn, prompt if i == 1 else ())
            for i, turn in enumerate(self.turns, start=1)
        ]
        return [*turns, self.spent(service, step)]

    def spent(self, service: str, step: str) -> SpendRecorded:
        """What the loop used, as the event stating it for the workflow: emit it with the
        step's other events (in their transaction, so a redelivery does not count it twice).
        Every turn kept counts, a refused answer's too."""
        usage = self.usage
        return SpendRecorded(
            service=service,
            step=step,
            models=list(dict.fromkeys(t.answer.model for t in self.turns))[:20],
            model_turns=len(self.turns),
            tool_calls=sum(len(t.results) for t in self.turns),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost_micro_usd=usage.cost_micro_usd,
        )

    def messages(self) -> list[dict[str, Any]]:
        """The turns as chat messages (the assistant's calls, then each call's result)."""
        found: list[dict[str, Any]] = []
        for turn in self.turns:
            found.append(assistant_message(turn.answer))
            found += [
                {
                    "role": "tool",
                    "tool_call_id": r.call_id,
                    # Keys sorted: the checkpoint (jsonb) does not keep their order, and a turn
                    # asked after a resume reads the same bytes (a server's prompt cache too).
                    "content": json.dumps(
                        {"error": r.error} if r.error is not None else r.output, sort_keys=True
                    ),
                }
                for r in turn.results
            ]
            if turn.refused:
                said = "\n".join(f"- {e}" for e in turn.refused)
                found.append({"role": "user", "content": f"Your answer was invalid:\n{said}"})
        return found


def _cut(text: str, limit: int) -> str:
    """``text`` within a field's length (what is cut says so)."""
    return text if len(text) <= limit else text[: limit - 20] + " …(cut)"


SAID_CHARS = (6000, 6000, 16000)
"""What one turn's record keeps of the prompt, the answer and all its tool calls' arguments
and results together: sealed (a third more as base64) it stays well within an event's
64 KB, however much the model was shown. The checkpoint keeps all of it."""


def _turn_recorded(
    service: str, step: str, number: int, turn: Turn, prompt: Sequence[Mapping[str, Any]]
) -> AgentTurnRecorded:
    answer = turn.answer
    prompt_chars, answer_chars, calls_chars = SAID_CHARS
    each = max(200, min(4000, calls_chars // (2 * max(1, len(answer.tool_calls[:50])))))
    calls = []
    for position, c in enumerate(answer.tool_calls[:50]):
        # By position, as the loop keeps them (the model's ids may repeat, or be empty).
        result = turn.results[position] if position < len(turn.results) else None
        calls.append(
            ToolCallSaid(
                id=_cut(c.id, 200),
                name=c.name[:200],
                arguments=_cut(json.dumps(c.arguments, sort_keys=True), each),
                result=_cut(json.dumps(result.output, sort_keys=True), each) if result else "",
                error=_cut(result.error, each) if result and result.error is not None else None,
            )
        )
    said = TurnSaid(
        prompt=_cut(json.dumps(list(prompt), sort_keys=True), prompt_chars) if prompt else None,
        answer=_cut(answer.content, answer_chars) if answer.content else None,
        tool_calls=calls,
        refused=[_cut(r, 500) for r in turn.refused[:20]],
    )
    return AgentTurnRecorded(
        service=service,
        step=step,
        turn=number,
        model=answer.model[:200],
        response_model=answer.response_model[:200] if answer.response_model else None,
        passed_over=[_cut(p, 500) for p in answer.passed_over[:20]],
        tools_called=[c.name[:200] for c in answer.tool_calls[:50]],
        input_tokens=answer.usage.input_tokens,
        output_tokens=answer.usage.output_tokens,
        cost_micro_usd=answer.usage.cost_micro_usd,
        said=said,
    )


def assistant_message(turn: ModelTurn) -> dict[str, Any]:
    # "" rather than null beside tool calls: OpenAI takes either, llama.cpp's server only "".
    message: dict[str, Any] = {"role": "assistant", "content": turn.content or ""}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, sort_keys=True)},
            }
            for c in turn.tool_calls
        ]
    return message


@dataclass(frozen=True)
class ToolContext:
    """What a tool gets besides its arguments."""

    idempotency_key: str
    """The same on every try of this call (workflow, step, turn, call): give it to whatever
    the tool changes outside, so that a call repeated after a crash changes it once."""


@dataclass(frozen=True)
class AskTool:
    """A tool someone else answers: another service (an event it handles, answered by an
    event the handler gets) or a person (an approval). Calling it parks the loop, as an
    approval parks a workflow: no process waits. ``run`` returns the transcript ``waiting``
    on the call; the handler emits ``AgentLoop.asked`` (what ``ask`` makes of the call's
    arguments and its key, which the answer must carry back) and ends its step. The answer's
    handler gives it to the loop (``AgentLoop.answered``) and runs the loop on."""

    name: str
    description: str
    arguments: type[BaseModel]
    ask: Callable[[Any, ToolContext], EventModel]

    def __post_init__(self) -> None:
        if not TOOL_NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r}: letters, digits, _ and - only, at most 64")

    def schema(self) -> dict[str, Any]:
        return _function_schema(self.name, self.description, self.arguments)


def _function_schema(name: str, description: str, arguments: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": arguments.model_json_schema()},
    }


TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What OpenAI's API takes as a function's name."""


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its name, what it is for, its arguments (a pydantic model,
    whose JSON schema the model is shown and which validates what the model sends), and the
    async function that does it (its result: anything pydantic can put in JSON)."""

    name: str
    description: str
    arguments: type[BaseModel]
    run: Callable[[Any, ToolContext], Awaitable[Any]]

    def __post_init__(self) -> None:
        if not TOOL_NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r}: letters, digits, _ and - only, at most 64")

    def schema(self) -> dict[str, Any]:
        return _function_schema(self.name, self.description, self.arguments)


class ToolModel(Protocol):
    """A model that may call tools (chorus.outside.llm.client's two kinds, a fallback chain)."""

    @property
    def name(self) -> str: ...

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        timeout_s: float,
        on_text: TextSink | None = None,
    ) -> ModelTurn:
        """``on_text``: the answer's text so far, as the model writes it (a model that
        streams calls it as its text grows; one that does not, once, with all of it)."""
        ...


TextSink = Callable[[str], Awaitable[None]]
"""What is told a turn's text so far, as the model writes it (AgentLoop's streaming)."""


@dataclass(frozen=True)
class FallbackModel:
    """A chain of models for a step: the first that can answer does. A model whose breaker
    is open or that is rate-limited (a 429, or no room in the shared limiter) is passed over
    for the next, and the turn says so; any other failure is the step's (a transient one is
    retried from the first model again)."""

    chain: Sequence[ToolModel]

    @property
    def name(self) -> str:
        return " > ".join(m.name for m in self.chain)

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        timeout_s: float,
        on_text: TextSink | None = None,
    ) -> ModelTurn:
        passed: list[str] = []
        for i, model in enumerate(self.chain):
            try:
                turn = await model.chat(messages, tools, timeout_s=timeout_s, on_text=on_text)
            except (BreakerOpenError, RateLimitedError) as exc:
                if i == len(self.chain) - 1:
                    raise
                passed.append(f"{model.name}: {exc}")
                continue
            return turn.model_copy(update={"passed_over": passed})
        raise PersistentError("a fallback chain of no model")


@dataclass(frozen=True)
class Prices:
    """Dollars per million tokens, by model: what a turn costs (a model not listed: nothing,
    and its tokens are still counted)."""

    per_million: Mapping[str, tuple[float, float]]
    """model -> (input, output) in dollars per million tokens."""

    def priced(self, model: str, usage: Usage) -> Usage:
        """``usage`` with its cost in micro-dollars (a million tokens at ``p`` dollars each
        million is ``p`` dollars)."""
        price_in, price_out = self.per_million.get(model, (0.0, 0.0))
        cost = round(usage.input_tokens * price_in + usage.output_tokens * price_out)
        return usage.model_copy(update={"cost_micro_usd": cost})


class LoopLimits(BaseModel):
    """When the loop stops before asking the model again (None: no limit), and what then: a
    setting (JSON in CHORUS_AGENT_LIMITS, chorus.outside.llm.client.LLMSettings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turns: int = Field(default=10, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost_micro_usd: int | None = Field(default=None, ge=1)
    on_limit: Literal["escalate", "fail"] = "escalate"
    """escalate: a semantic failure, which the runtime hands to a person once its retries
    (which ask the model nothing more: the limit holds) are spent; fail: a persistent one,
    dead-lettered at once."""


def _spent(why: str, usage: Usage) -> str:
    return f"the agent loop stopped: {why} (spent {usage.tokens} tokens, ${usage.cost_micro_usd / 1e6:.6f})"


class LoopLimitError(SemanticError):
    """The loop reached one of its limits before the model answered (``on_limit`` escalate):
    ``usage`` is the spend so far, ``why`` the limit; the message, which a reviewer reads,
    says both."""

    def __init__(self, why: str, usage: Usage) -> None:
        super().__init__(_spent(why, usage))
        self.why, self.usage = why, usage


class LoopLimitFailed(PersistentError):
    """The same, with ``on_limit`` fail: the step is dead-lettered."""

    def __init__(self, why: str, usage: Usage) -> None:
        super().__init__(_spent(why, usage))
        self.why, self.usage = why, usage


class Checkpointing(Protocol):
    """What the loop needs of the handler's context (chorus.kernel.service.Context)."""

    async def checkpoint(self, state: BaseModel, *, emit: Sequence[EventModel] = ()) -> None: ...

    def idempotency_key(self, *parts: str) -> str: ...


class _Handler(Checkpointing, Protocol):
    """A handler's context, as a loop that streams uses it."""

    service: str
    clock: Clock


STREAMED_CHARS = 6000
"""What an agent.output_streamed keeps of the text so far: its end."""


@dataclass(frozen=True)
class AgentLoop:
    model: ToolModel
    tools: Sequence[Tool | AskTool]
    prices: Prices = Prices({})
    limits: LoopLimits = field(default_factory=LoopLimits)
    limits_by_type: Mapping[str, LoopLimits] = field(default_factory=dict)
    """Limits of a workflow type's loops, where its differ from ``limits`` (the workflow type
    of the event the handler is for): whole limits of their own, in place of ``limits``."""
    timeout_s: float = 120.0
    name: str = "agent"
    """Which loop of the step (in its tools' idempotency keys): two loops of one step differ."""
    stream_every_s: float | None = None
    """Stream each answer and publish what the model has written so far at most this often
    (``agent.output_streamed``, with a checkpoint: the workflow's status shows it while the
    step runs); None: the answer comes whole. The context must be a handler's (its service
    and clock)."""

    async def run(
        self,
        ctx: Checkpointing,
        messages: Sequence[Mapping[str, Any]],
        transcript: Transcript | None,
        keep: Callable[[Transcript], BaseModel],
        *,
        refused: Sequence[str] = (),
    ) -> Transcript:
        """Go on from ``transcript`` (the checkpoint's; None to start) until the model
        answers: the transcript with its ``answer``. ``messages`` are the system and user
        messages the loop starts from (the same on every run of the step); ``keep`` makes the
        handler's state from a transcript, for each checkpoint. ``refused``: why the handler
        refused the answer kept (``ctx.feedback``, on the runtime's semantic retry): the model
        is told and asked again."""
        by_name = {t.name: t for t in self.tools}
        schemas = [t.schema() for t in self.tools]
        workflow_type = usage_metrics.workflow_type_of(ctx)
        limits = self.limits_by_type.get(workflow_type, self.limits)
        transcript = transcript or Transcript()
        if transcript.answer is not None and refused and transcript.turns:
            told = transcript.turns[-1].model_copy(update={"refused": list(refused)})
            transcript = Transcript(turns=[*transcript.turns[:-1], told])
            await ctx.checkpoint(keep(transcript))
        while transcript.answer is None and transcript.waiting is None:
            last = transcript.turns[-1] if transcript.turns else None
            if last is not None and last.pending:
                call = last.pending[0]
                key = self._key(ctx, transcript)
                if (
                    isinstance(by_name.get(call.name), AskTool)
                    and _parsed(by_name[call.name], call) is not None
                ):
                    # Parked: the handler emits the question; the answer resumes the loop.
                    transcript = transcript.model_copy(update={"waiting": key})
                    await ctx.checkpoint(keep(transcript))
                    break
                result = await _call(by_name, call, key)
                fault_point("mid_tool_call")  # made, not kept: the one call a crash repeats
                turn = last.model_copy(update={"results": [*last.results, result]})
                transcript = transcript.model_copy(update={"turns": [*transcript.turns[:-1], turn]})
                kept = "after_tool_call"
            else:
                check_limits(limits, len(transcript.turns), transcript.usage)
                asked = [*messages, *transcript.messages()]
                sink = self._publishing(ctx, keep, transcript)
                answer = await self.model.chat(asked, schemas, timeout_s=self.timeout_s, on_text=sink)
                priced = self.prices.priced(answer.model, answer.usage)
                answer = answer.model_copy(update={"usage": priced})
                usage_metrics.count_spend(
                    workflow_type,
                    answer.model,
                    priced.input_tokens,
                    priced.output_tokens,
                    priced.cost_micro_usd,
                )
                update: dict[str, Any] = {"turns": [*transcript.turns, Turn(answer=answer)]}
                if not answer.tool_calls:
                    update["answer"] = answer.content or ""
                transcript = transcript.model_copy(update=update)
                kept = "after_model_turn"
            await ctx.checkpoint(keep(transcript))
            fault_point(kept)
        return transcript

    def _publishing(
        self, ctx: Checkpointing, keep: Callable[[Transcript], BaseModel], transcript: Transcript
    ) -> TextSink | None:
        """What publishes the next turn's text so far (with the checkpoint it already has), at
        most every ``stream_every_s`` by the handler's clock; None when the loop does not stream."""
        every = self.stream_every_s
        if every is None:
            return None
        handler = cast(_Handler, ctx)
        kept, turn = keep(transcript), len(transcript.turns) + 1
        last: list[datetime] = []

        async def publish(text: str) -> None:
            now = handler.clock.now()
            if last and (now - last[0]).total_seconds() < every:
                return
            last[:] = [now]
            said = AgentOutputStreamed(
                service=handler.service,
                step=self.name,
                turn=turn,
                model=self.model.name[:200],
                chars=len(text),
                text=text[-STREAMED_CHARS:],
            )
            await ctx.checkpoint(kept, emit=[said])

        return publish

    def _key(self, ctx: Checkpointing, transcript: Transcript) -> str:
        """The pending call's key: by position (the model's ids may repeat, or be empty), the
        same on every try."""
        last = transcript.turns[-1]
        return ctx.idempotency_key(self.name, str(len(transcript.turns)), str(len(last.results)))

    def asked(self, ctx: Checkpointing, transcript: Transcript) -> EventModel:
        """The event that asks the call ``transcript`` waits on (emit it with the step)."""
        call = transcript.turns[-1].pending[0] if transcript.waiting and transcript.turns else None
        tool = next((t for t in self.tools if call is not None and t.name == call.name), None)
        if call is None or not isinstance(tool, AskTool):
            raise ValueError("the transcript waits on no ask tool's call")
        arguments = _parsed(tool, call)
        # The key it parked on (whichever step asks again: a reminder's too), which the
        # answer must carry back.
        assert transcript.waiting is not None
        return tool.ask(arguments, ToolContext(idempotency_key=transcript.waiting))

    def answered(self, transcript: Transcript, key: str, output: Any) -> Transcript | None:
        """``transcript`` with ``output`` (anything pydantic can put in JSON) as the result of
        the call it waits on, whose key ``key`` must be; None when it waits on no such call
        (an answer to a call of another loop, or one answered already): nothing to do."""
        if transcript.waiting is None or transcript.waiting != key:
            return None
        last = transcript.turns[-1]
        call = last.pending[0]
        result = ToolResult(call_id=call.id, name=call.name, output=_AS_JSON.dump_python(output, mode="json"))
        turn = last.model_copy(update={"results": [*last.results, result]})
        return transcript.model_copy(update={"turns": [*transcript.turns[:-1], turn], "waiting": None})


def check_limits(limits: LoopLimits, turns: int, spent: Usage) -> None:
    """Raise what ``limits`` say (LoopLimitError or LoopLimitFailed) when ``turns`` model turns
    that spent ``spent`` leave no room for another."""
    why = None
    if turns >= limits.max_turns:
        why = f"{limits.max_turns} model turns without an answer"
    elif limits.max_tokens is not None and spent.tokens >= limits.max_tokens:
        why = f"the budget of {limits.max_tokens} tokens is spent"
    elif limits.max_cost_micro_usd is not None and spent.cost_micro_usd >= limits.max_cost_micro_usd:
        why = f"the budget of ${limits.max_cost_micro_usd / 1e6:.6f} is spent"
    if why is not None:
        raise (LoopLimitError if limits.on_limit == "escalate" else LoopLimitFailed)(why, spent)


def _parsed(tool: Tool | AskTool, call: ToolCall) -> BaseModel | None:
    try:
        return tool.arguments.model_validate(call.arguments)
    except ValidationError:
        return None


async def _call(tools: Mapping[str, Tool | AskTool], call: ToolCall, key: str) -> ToolResult:
    """The call made (once its arguments validate), or why not, as the model will read it.
    What the tool raises is the step's error (transient: retried, persistent: dead-lettered)."""
    tool = tools.get(call.name)
    if tool is None:
        return ToolResult(
            call_id=call.id, name=call.name, error=f"no tool {call.name!r}; tools: {sorted(tools)}"
        )
    try:
        arguments = tool.arguments.model_validate(call.arguments)
    except ValidationError as exc:
        errors = "; ".join(pointed(exc))
        return ToolResult(call_id=call.id, name=call.name, error=f"arguments refused: {errors}")
    assert isinstance(tool, Tool)  # an ask tool's valid call parks the loop instead
    gen_ai = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
    }
    with work_span("execute_tool", call.name, None, gen_ai):  # GenAI's name: "execute_tool <tool>"
        output = await tool.run(arguments, ToolContext(idempotency_key=key))
    # As JSON now: what the checkpoint keeps is what the model reads next (a model, a date).
    return ToolResult(call_id=call.id, name=call.name, output=_AS_JSON.dump_python(output, mode="json"))


_AS_JSON: TypeAdapter[Any] = TypeAdapter(Any)


def pointed(exc: ValidationError) -> list[str]:
    """What a model's output (an answer, a tool's arguments) got wrong, by JSON pointer: what
    the model is told."""
    return ["/" + "/".join(str(p) for p in e["loc"]) + f": {e['msg']}" for e in exc.errors(include_url=False)]
