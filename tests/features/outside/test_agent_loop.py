"""The durable tool-calling loop (chorus.llm.AgentLoop): each model turn and tool call kept
as it completes, so a crash at any point resumes without asking the model again or making a
finished call twice; a side effect repeated mid-call lands once through its idempotency key;
tokens and cost per turn; limits that stop the loop with the spend."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from chorus.base.errors import SemanticError, TransientError
from chorus.base.metrics import Metrics
from chorus.contracts.approvals import ApprovalContext, ApprovalFacts, ApprovalRequested, EscalationStep
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import SpendRecorded
from chorus.llm import (
    AgentLoop,
    AskTool,
    FallbackModel,
    LoopLimitError,
    LoopLimitFailed,
    LoopLimits,
    ModelTurn,
    OfflineModel,
    Prices,
    Tool,
    ToolCall,
    ToolContext,
    ToolResult,
    Transcript,
)
from chorus.outside.breaker import BreakerOpenError
from chorus.outside.llm import usage
from chorus.outside.llm.client import OpenAICompatibleLLM
from chorus.outside.llm.loop import Turn

SYSTEM = {"role": "system", "content": "task: refund\nDecide the refund with the tools."}
USER = {"role": "user", "content": "Customer cust-7 asks for a refund of order 77."}


class Crash(BaseException):
    """The process dies here (a BaseException: nothing in the loop may catch it)."""


class Lookup(BaseModel):
    order_id: str


class Refund(BaseModel):
    order_id: str
    cents: int


class Shop:
    """The outside world the tools change: refunds land once per idempotency key."""

    def __init__(self) -> None:
        self.lookups = 0
        self.refund_calls = 0
        self.refunds: dict[str, int] = {}
        self.crash_in_refund = False

    async def lookup(self, args: Lookup, call: ToolContext) -> dict[str, Any]:
        self.lookups += 1
        return {"order_id": args.order_id, "paid_cents": 1250}

    async def refund(self, args: Refund, call: ToolContext) -> dict[str, Any]:
        self.refund_calls += 1
        self.refunds.setdefault(call.idempotency_key, args.cents)
        if self.crash_in_refund:  # done outside, then the process dies before it is kept
            self.crash_in_refund = False
            raise Crash
        return {"refunded_cents": args.cents}

    def tools(self) -> list[Tool]:
        return [
            Tool("lookup_order", "What an order was paid", Lookup, self.lookup),
            Tool("refund", "Refund an order (changes the shop)", Refund, self.refund),
        ]


def refund_skill(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Look the order up, refund what was paid, then say so: what the next turn is follows
    from the tool results so far (as a model's would)."""
    results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    if not results:
        return {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "77"}}]}
    if len(results) == 1:
        paid = results[0]["paid_cents"]
        return {"tool_calls": [{"name": "refund", "arguments": {"order_id": "77", "cents": paid}}]}
    return {"content": f"refunded {results[1]['refunded_cents']} cents"}


class Ctx:
    """The handler context as the loop sees it; the checkpoint is what the runtime keeps, and
    the process dies after the ``crash_after``-th checkpoint commits."""

    def __init__(self, kept: Transcript | None = None, crash_after: int | None = None) -> None:
        self.kept = kept
        self.commits = 0
        self.crash_after = crash_after

    async def checkpoint(self, state: BaseModel, *, emit: Sequence[EventModel] = ()) -> None:
        assert isinstance(state, Transcript)
        self.kept = Transcript.model_validate(state.model_dump(mode="json"))  # as stored
        self.commits += 1
        if self.crash_after is not None and self.commits == self.crash_after:
            raise Crash

    def idempotency_key(self, *parts: str) -> str:
        return ":".join(["wf-1:step-1", "support_agent", *parts])


def loop(model: OfflineModel, shop: Shop, **limits: Any) -> AgentLoop:
    return AgentLoop(
        model, shop.tools(), prices=Prices({model.name: (2.0, 8.0)}), limits=LoopLimits(**limits)
    )


def counted(series: str, model: str, workflow_type: str = "", **labels: str) -> float:
    """``series`` (chorus_llm_cost_usd_total, chorus_llm_tokens_total) for ``model`` and
    ``workflow_type``, as a service's /metrics shows it."""
    metrics = Metrics("test")
    metrics.registry.register(usage.TokenUsageCollector())
    wanted = {"gen_ai_request_model": model, "workflow_type": workflow_type, **labels}
    return sum(
        s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if s.name == series and wanted.items() <= s.labels.items()
    )


def dollars_counted(model: str, workflow_type: str = "") -> float:
    return counted("chorus_llm_cost_usd_total", model, workflow_type)


async def test_the_model_calls_both_tools_then_answers_and_each_turn_is_kept_and_priced() -> None:
    model, shop, ctx = OfflineModel({}, {"refund": refund_skill}), Shop(), Ctx()
    before = dollars_counted(model.name)
    done = await loop(model, shop).run(ctx, [SYSTEM, USER], None, keep=lambda t: t)
    assert done.answer == "refunded 1250 cents"
    assert [[c.name for c in t.answer.tool_calls] for t in done.turns] == [["lookup_order"], ["refund"], []]
    assert ctx.commits == 5  # three model turns, two tool calls
    assert (model.calls, shop.lookups, shop.refund_calls) == (3, 1, 1)
    first = done.turns[0].answer.usage
    assert first.input_tokens > 0 and first.cost_micro_usd == round(
        first.input_tokens * 2.0 + first.output_tokens * 8.0
    )
    assert dollars_counted(model.name) - before == pytest.approx(done.usage.cost_micro_usd / 1e6)


@pytest.mark.parametrize("crash_after", [1, 2, 3, 4, 5])
async def test_a_crash_after_any_kept_turn_or_call_resumes_without_repeating_it(crash_after: int) -> None:
    model, shop = OfflineModel({}, {"refund": refund_skill}), Shop()
    ctx = Ctx(crash_after=crash_after)
    with pytest.raises(Crash):
        await loop(model, shop).run(ctx, [SYSTEM, USER], None, keep=lambda t: t)
    again = Ctx(kept=ctx.kept)  # the step runs again on what was kept
    done = await loop(model, shop).run(again, [SYSTEM, USER], again.kept, keep=lambda t: t)
    assert done.answer == "refunded 1250 cents"
    assert (model.calls, shop.lookups, shop.refund_calls) == (3, 1, 1)
    assert ctx.commits + again.commits == 5


async def test_a_crash_mid_tool_call_repeats_that_call_with_its_key_and_the_refund_lands_once() -> None:
    model, shop = OfflineModel({}, {"refund": refund_skill}), Shop()
    shop.crash_in_refund = True
    ctx = Ctx()
    with pytest.raises(Crash):
        await loop(model, shop).run(ctx, [SYSTEM, USER], None, keep=lambda t: t)
    done = await loop(model, shop).run(Ctx(kept=ctx.kept), [SYSTEM, USER], ctx.kept, keep=lambda t: t)
    assert done.answer == "refunded 1250 cents"
    assert shop.refund_calls == 2  # the call under way when it died is made again...
    assert list(shop.refunds.values()) == [1250]  # ...with the same key: one refund
    assert model.calls == 3


async def test_limits_stop_the_loop_before_the_next_turn_with_the_spend_so_far() -> None:
    shop = Shop()
    with pytest.raises(LoopLimitError) as turns:
        await loop(OfflineModel({}, {"refund": refund_skill}), shop, max_turns=2).run(
            Ctx(), [SYSTEM, USER], None, keep=lambda t: t
        )
    assert "2 model turns" in str(turns.value) and turns.value.usage.tokens > 0
    assert shop.refund_calls == 1  # the second turn's call was made; no third turn asked
    with pytest.raises(LoopLimitError) as cost:
        await loop(OfflineModel({}, {"refund": refund_skill}), Shop(), max_cost_micro_usd=1).run(
            Ctx(), [SYSTEM, USER], None, keep=lambda t: t
        )
    assert "$0.000001 is spent" in str(cost.value) and cost.value.usage.cost_micro_usd > 1
    assert cost.value.category == "semantic"  # escalated: a person decides, the spend in the message
    with pytest.raises(LoopLimitFailed) as failed:
        await loop(OfflineModel({}, {"refund": refund_skill}), Shop(), max_tokens=1, on_limit="fail").run(
            Ctx(), [SYSTEM, USER], None, keep=lambda t: t
        )
    assert failed.value.category == "persistent" and "1 tokens is spent" in str(failed.value)


class TypedCtx(Ctx):
    """A context for an event of a workflow of ``workflow_type`` (its envelope's)."""

    def __init__(self, workflow_type: str) -> None:
        super().__init__()
        self.envelope = SimpleNamespace(workflow_type=workflow_type)


async def test_a_workflow_types_own_limits_apply_to_its_loops_and_its_spend_is_counted_for_it() -> None:
    model = OfflineModel({}, {"refund": refund_skill})
    typed = AgentLoop(
        model,
        Shop().tools(),
        prices=Prices({model.name: (2.0, 8.0)}),
        limits=LoopLimits(max_turns=10),
        limits_by_type={"vip_refund": LoopLimits(max_turns=1, on_limit="fail")},
    )
    before = (dollars_counted(model.name, "refund"), dollars_counted(model.name, "vip_refund"))
    tokens_before = counted("chorus_llm_tokens_total", model.name, "refund", gen_ai_token_type="input")
    done = await typed.run(TypedCtx("refund"), [SYSTEM, USER], None, keep=lambda t: t)
    assert done.answer == "refunded 1250 cents"  # the default limits: room for three turns
    with pytest.raises(LoopLimitFailed, match="1 model turns"):
        await typed.run(TypedCtx("vip_refund"), [SYSTEM, USER], None, keep=lambda t: t)
    assert dollars_counted(model.name, "refund") - before[0] == pytest.approx(done.usage.cost_micro_usd / 1e6)
    assert dollars_counted(model.name, "vip_refund") - before[1] > 0  # its one turn, for its type
    input_tokens = counted("chorus_llm_tokens_total", model.name, "refund", gen_ai_token_type="input")
    assert input_tokens - tokens_before == done.usage.input_tokens


class AskManager(BaseModel):
    order_id: str
    cents: int


def ask_manager(args: AskManager, call: ToolContext) -> ApprovalRequested:
    """The approval gate as a tool: a person decides; the call's key is the approval's id."""
    return ApprovalRequested(
        approval_id=call.idempotency_key,
        requested_by="support_agent",
        chain=[EscalationStep(tier="manager", window_s=3600)],
        context=ApprovalContext(summary=f"refund {args.cents} cents of order {args.order_id}?"),
        facts=ApprovalFacts(amount_cents=args.cents),
    )


def asking_skill(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Look the order up, ask a manager, refund if they approve, then say what happened."""
    results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    if not results:
        return {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "77"}}]}
    paid = results[0]["paid_cents"]
    if len(results) == 1:
        return {"tool_calls": [{"name": "ask_manager", "arguments": {"order_id": "77", "cents": paid}}]}
    if len(results) == 2 and results[1]["decision"] == "approve":
        return {"tool_calls": [{"name": "refund", "arguments": {"order_id": "77", "cents": paid}}]}
    return {"content": f"{results[1]['decision']}d by {results[1]['decided_by']}"}


async def test_a_tool_a_person_answers_parks_the_loop_until_their_answer_resumes_it() -> None:
    model, shop, ctx = OfflineModel({}, {"refund": asking_skill}), Shop(), Ctx()
    asking = AskTool("ask_manager", "Ask a manager to approve a refund", AskManager, ask_manager)
    agent = AgentLoop(model, [*shop.tools(), asking])
    parked = await agent.run(ctx, [SYSTEM, USER], None, keep=lambda t: t)
    assert parked.answer is None and parked.waiting == "wf-1:step-1:support_agent:agent:2:0"
    assert ctx.kept == parked  # parked in the checkpoint: no process waits for the person
    request = agent.asked(ctx, parked)
    assert isinstance(request, ApprovalRequested) and request.approval_id == parked.waiting
    assert request.facts.amount_cents == 1250
    # The step redelivered while parked asks the model nothing more.
    assert await agent.run(Ctx(kept=parked), [SYSTEM, USER], parked, keep=lambda t: t) == parked
    assert model.calls == 2
    # An answer to another call is not this loop's; the manager's is.
    assert agent.answered(parked, "wf-9:other", {"decision": "approve"}) is None
    decided = {"decision": "approve", "decided_by": "dana.manager"}
    answered = agent.answered(parked, request.approval_id, decided)
    assert answered is not None and answered.waiting is None
    assert agent.answered(answered, request.approval_id, decided) is None  # answered already
    done = await agent.run(Ctx(kept=answered), [SYSTEM, USER], answered, keep=lambda t: t)
    assert done.answer == "approved by dana.manager"
    assert (model.calls, shop.lookups, shop.refund_calls) == (4, 1, 1)
    assert [r.name for t in done.turns for r in t.results] == ["lookup_order", "ask_manager", "refund"]


async def test_arguments_the_tool_refuses_and_unknown_tools_are_told_to_the_model() -> None:
    def sloppy(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        if not results:
            return {"tool_calls": [{"name": "refund", "arguments": {"order_id": "77"}}, {"name": "teleport"}]}
        return {"content": json.dumps(results)}

    shop = Shop()
    done = await loop(OfflineModel({}, {"refund": sloppy}), shop).run(
        Ctx(), [SYSTEM, USER], None, keep=lambda t: t
    )
    told = json.loads(done.answer or "")
    assert "/cents: Field required" in told[0]["error"] and "no tool 'teleport'" in told[1]["error"]
    assert shop.refund_calls == 0


async def test_an_openai_compatible_server_is_sent_the_calls_and_results_and_priced_by_the_name_asked() -> (
    None
):
    """Two turns against a server speaking OpenAI's format: the second request carries the
    assistant's tool call and the tool's result; the turn is priced under the model's
    configured name although the server answers with a dated one (as OpenAI's does)."""
    seen: list[dict[str, Any]] = []
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": '{"order_id": "77"}'},
    }
    replies = iter(
        [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "assistant", "content": "paid 1250 cents"},
        ]
    )

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        body = {
            "model": "m-1-2026-01-01",
            "choices": [{"message": next(replies), "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 500_000},
        }
        return httpx.Response(200, json=body)

    shop = Shop()
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        model = OpenAICompatibleLLM(client, base_url="http://llm.test/v1", model="m-1")
        priced = AgentLoop(model, shop.tools(), prices=Prices({"m-1": (2.0, 8.0)}))
        done = await priced.run(Ctx(), [SYSTEM, USER], None, keep=lambda t: t)
    assert done.answer == "paid 1250 cents"
    first = done.turns[0].answer
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("c1", "lookup_order", {"order_id": "77"})
    ]
    assert (first.model, first.response_model) == ("m-1", "m-1-2026-01-01")
    assert first.usage.cost_micro_usd == 6_000_000  # $2 for a million in, $4 for half a million out
    assert done.usage.cost_micro_usd == 12_000_000
    assert seen[0]["tools"][0]["function"]["parameters"]["required"] == ["order_id"]
    assert seen[1]["messages"][2:] == [
        {
            "role": "assistant",
            "content": "",  # not null beside tool calls: some servers (llama.cpp's) refuse null
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": "77"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"order_id": "77", "paid_cents": 1250})},
    ]


async def test_a_server_answering_nothing_is_a_semantic_failure_naming_why() -> None:
    def server(request: httpx.Request) -> httpx.Response:
        message = {"role": "assistant", "content": None, "refusal": "I cannot help with that"}
        return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "stop"}]})

    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        model = OpenAICompatibleLLM(client, base_url="http://llm.test/v1", model="m-1")
        with pytest.raises(SemanticError, match="I cannot help with that"):
            await model.chat([SYSTEM, USER], [], timeout_s=5)


def sse(*chunks: Mapping[str, Any], done: bool = True) -> bytes:
    """Server-sent events as OpenAI streams a chat completion (the last line's newline left off
    when not ``done``: a server that closes without it)."""
    lines = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return lines + b"data: [DONE]\n\n" if done else lines.rstrip(b"\n")


async def test_a_streamed_answer_is_put_together_whatever_way_the_server_streams_it() -> None:
    """Tool calls in pieces (one without its index), the usage in a last line without its
    newline; a server that answers whole although asked to stream; an error sent mid-stream."""
    split_call = sse(
        {"model": "m-1", "choices": [{"delta": {"content": "let me "}}]},
        {"choices": [{"delta": {"content": "look"}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "lookup_"}}]}}]},
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "function": {"name": "order", "arguments": '{"or'}}]}}
            ]
        },
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'der_id": "77"}'}}]}}]},
        {
            "choices": [
                {"delta": {"tool_calls": [{"id": "c2", "function": {"name": "refund", "arguments": "{}"}}]}}
            ]
        },
        {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 9}},
        done=False,
    )
    whole = json.dumps(
        {"choices": [{"message": {"role": "assistant", "content": "done"}}], "usage": {"prompt_tokens": 5}}
    ).encode()
    broken = sse({"choices": [{"delta": {"content": "hal"}}]}, {"error": {"message": "overloaded"}})
    answers = iter([split_call, whole, broken])

    def server(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream_options"] == {"include_usage": True}
        return httpx.Response(200, content=next(answers))

    told: list[str] = []

    async def tell(text: str) -> None:
        told.append(text)

    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        model = OpenAICompatibleLLM(client, base_url="http://llm.test/v1", model="m-1")
        turn = await model.chat([SYSTEM, USER], [], timeout_s=5, on_text=tell)
        assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
            ("c1", "lookup_order", {"order_id": "77"}),
            ("c2", "refund", {}),
        ]
        assert (turn.content, turn.response_model) == ("let me look", "m-1")
        assert (turn.usage.input_tokens, turn.usage.output_tokens) == (40, 9)
        assert told and told[-1] == "let me look"
        answered = await model.chat([SYSTEM, USER], [], timeout_s=5, on_text=tell)
        assert (answered.content, answered.usage.input_tokens) == ("done", 5)
        with pytest.raises(TransientError, match="overloaded"):
            await model.chat([SYSTEM, USER], [], timeout_s=5, on_text=tell)


async def test_an_answer_the_handler_refused_is_told_to_the_model_which_answers_again_once() -> None:
    def strict(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        told = [m for m in messages if m["role"] == "user" and "was invalid" in m["content"]]
        return {"content": "1250" if told else "twelve fifty"}

    model, ctx = OfflineModel({}, {"refund": strict}), Ctx()
    first = await loop(model, Shop()).run(ctx, [SYSTEM, USER], None, keep=lambda t: t)
    assert first.answer == "twelve fifty"
    # The handler's semantic retry: ctx.feedback holds what it refused.
    again = await loop(model, Shop()).run(
        ctx, [SYSTEM, USER], ctx.kept, keep=lambda t: t, refused=["/: not a number"]
    )
    assert again.answer == "1250" and model.calls == 2
    assert again.turns[0].refused == ["/: not a number"]
    # Run again on what was kept (a redelivery after the answer): nothing is asked.
    same = await loop(model, Shop()).run(ctx, [SYSTEM, USER], ctx.kept, keep=lambda t: t)
    assert same.answer == "1250" and model.calls == 2


async def test_calls_with_one_id_get_keys_of_their_own_and_results_are_kept_as_json() -> None:
    class At(BaseModel):
        order_id: str
        when: datetime

    keys: list[str] = []

    async def refund(args: Refund, call: ToolContext) -> At:
        keys.append(call.idempotency_key)
        return At(order_id=args.order_id, when=datetime(2026, 12, 6, tzinfo=timezone.utc))

    def twice(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        if any(m["role"] == "tool" for m in messages):
            return {"content": "done"}
        calls = [{"name": "refund", "arguments": {"order_id": o, "cents": 1}} for o in ("77", "78")]
        return {"tool_calls": calls}

    class SameIds:
        """A server that gives every call the same id (some OpenAI-compatible ones do)."""

        name = "same-ids"

        async def chat(self, *args: Any, **kwargs: Any) -> ModelTurn:
            turn = await OfflineModel({}, {"refund": twice}).chat(*args, **kwargs)
            calls = [c.model_copy(update={"id": "call"}) for c in turn.tool_calls]
            return turn.model_copy(update={"tool_calls": calls})

    same_id = SameIds()
    tools = [Tool("refund", "Refund an order", Refund, refund)]
    ctx = Ctx()
    done = await AgentLoop(same_id, tools).run(ctx, [SYSTEM, USER], None, keep=lambda t: t)
    assert len(set(keys)) == 2  # one refund each, whatever ids the model gave the calls
    assert done.turns[0].results[0].output == {"order_id": "77", "when": "2026-12-06T00:00:00Z"}


async def test_the_primary_rate_limited_or_its_breaker_open_the_fallback_answers_and_says_so() -> None:
    def busy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json={"error": "slow down"}, headers={"Retry-After": "3"})

    class Tripped:
        name = "primary-b"

        async def chat(self, *args: Any, **kwargs: Any) -> Any:
            raise BreakerOpenError("llm: breaker open")

    shop = Shop()
    fallback = OfflineModel({}, {"refund": refund_skill})
    async with httpx.AsyncClient(transport=httpx.MockTransport(busy)) as client:
        primary = OpenAICompatibleLLM(client, base_url="http://llm.test/v1", model="primary-a")
        chain = FallbackModel([primary, Tripped(), fallback])
        done = await AgentLoop(chain, shop.tools()).run(Ctx(), [SYSTEM, USER], None, keep=lambda t: t)
    assert done.answer == "refunded 1250 cents"
    first = done.turns[0].answer
    assert first.model == fallback.name
    assert [p.split(":")[0] for p in first.passed_over] == ["primary-a", "primary-b"]
    assert "answered 429" in first.passed_over[0] and "breaker open" in first.passed_over[1]

    with pytest.raises(BreakerOpenError):  # the last of the chain cannot either: the step's error
        await FallbackModel([Tripped()]).chat([SYSTEM, USER], [], timeout_s=1)


def test_a_turns_record_stays_within_an_event_however_much_the_model_was_shown() -> None:
    """The audit trail's record of a turn cuts what it keeps of the prompt, the answer and the
    tool calls (the checkpoint keeps all of it), and says where: one tool answering 200 KB
    and a 100 KB prompt still make an event far within the 64 KB a record may have."""
    huge = ToolResult(call_id="c1", name="lookup", output={"rows": "x" * 200_000})
    turn = Turn(
        answer=ModelTurn(
            model="m", tool_calls=[ToolCall(id="c1", name="lookup", arguments={"q": "y" * 50_000})]
        ),
        results=[huge],
    )
    recorded = Transcript(turns=[turn]).recorded(
        "support_agent", "triage", [{"role": "user", "content": "z" * 100_000}]
    )
    said = recorded[0].model_dump(mode="json")["said"]
    assert len(json.dumps(said)) < 32_000
    assert said["tool_calls"][0]["result"].endswith("…(cut)") and said["prompt"].endswith("…(cut)")
    spent = recorded[-1]
    assert isinstance(spent, SpendRecorded) and (spent.model_turns, spent.tool_calls) == (1, 1)
