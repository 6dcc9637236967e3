"""The sandbox's deterministic model answers the agents' real prompts with output their
handlers accept: the prompt format and the model cannot drift apart unnoticed."""

from __future__ import annotations

from chorus.contracts.procurement import ExtractedInvoice
from chorus.contracts.research import GatheredSource, ReportRequested, SourceRef
from chorus.outside.llm import ChatMessage, parse_json_output
from chorus.reference.invoice_agent.domain import extraction_prompt
from chorus.reference.report_agent.domain import DraftOutput, ReportState, draft_prompt, validation_errors
from chorus.reference.sandbox.model import SKILLS

DOCUMENT = (
    "INVOICE INV-7\nVendor: vendor-acme\nPO: PO-7781\n"
    "40 x GPU-Stunden für München @ 31.00 EUR\nTotal: 1240.00 EUR"
)


def answer(messages: list[ChatMessage]) -> str:
    task = messages[0].content.splitlines()[0].removeprefix("task: ")
    return SKILLS[task](messages)


def test_the_invoice_prompt_is_read_into_a_valid_extraction() -> None:
    extracted = parse_json_output(answer(extraction_prompt(DOCUMENT, [])), ExtractedInvoice)
    assert (extracted.invoice_number, extracted.total_cents, extracted.currency) == ("INV-7", 124_000, "EUR")
    assert [line.description for line in extracted.lines] == ["GPU-Stunden für München"]


def test_the_report_prompt_is_answered_with_a_draft_that_passes_validation() -> None:
    request = ReportRequested(
        topic="量子計算の現状",
        sources=[SourceRef(name="alpha", url="http://127.0.0.1:9400/sources/alpha")],
        min_words=20,
    )
    state = ReportState(
        request=request, gathered=[GatheredSource(name="alpha", excerpt="Qubits sind fragil.")]
    )
    draft = parse_json_output(answer(draft_prompt(state, [])), DraftOutput)
    assert validation_errors(draft, state) == []
    assert "量子計算の現状" in draft.title
