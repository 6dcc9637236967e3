"""The sandbox's language model: deterministic skills that answer the agents' prompts.

Served over the OpenAI-compatible endpoint (POST /v1/chat/completions) to the agents,
which call it as they would call a real model: the demo, `make services` and the tests
run without network, and the agents ship no stand-in of their own.

The prompt markers below are the agents' prompt format as a model sees it (the first
system line names the task); tests/services/sandbox/test_model.py runs these skills on the
agents' real prompts, so the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import hashlib
import json
import re

from chorus.outside.llm import ChatMessage

EXTRACT_INVOICE = "extract_invoice"
DRAFT_REPORT = "draft_report"
DOCUMENT_START = "<<<INVOICE"
DOCUMENT_END = "INVOICE>>>"
SOURCES_START = "<<<SOURCES"
SOURCES_END = "SOURCES>>>"


def _cents(text: str) -> int:
    whole, _, frac = text.replace(",", "").partition(".")
    return int(whole) * 100 + int((frac + "00")[:2])


def extract_invoice(messages: list[ChatMessage]) -> str:
    """The deterministic offline model's reading of an invoice (regular expressions).

    A document containing UNREADABLE yields an answer without a total, however
    often it is asked: that is how tests and the demo reach human review.
    """
    user = messages[-1].content
    document = user.split(DOCUMENT_START, 1)[-1].split(DOCUMENT_END, 1)[0]

    def field(label: str) -> str:
        match = re.search(rf"^{label}:\s*(\S+)", document, re.MULTILINE | re.IGNORECASE)
        return match.group(1) if match else ""

    number = re.search(r"INVOICE\s+(\S+)", document)
    total = re.search(r"^Total:\s*([\d.,]+)\s*([A-Z]{3})?", document, re.MULTILINE)
    lines = [
        {
            "description": m.group(2).strip(),
            "quantity": int(m.group(1)),
            "unit_price_cents": _cents(m.group(3)),
        }
        for m in re.finditer(r"^(\d+)\s*x\s*(.+?)\s*@\s*([\d.,]+)", document, re.MULTILINE)
    ]
    answer: dict[str, object] = {
        "invoice_number": number.group(1) if number else "",
        "vendor_id": field("Vendor"),
        "po_number": field("PO"),
        "currency": (total.group(2) if total and total.group(2) else field("Currency")) or "",
        "lines": lines,
    }
    if total and "UNREADABLE" not in document:
        answer["total_cents"] = _cents(total.group(1))
    return json.dumps(answer)


def draft_report(messages: list[ChatMessage]) -> str:
    """The deterministic offline model's draft, built from the gathered excerpts.

    A topic containing UNCITED yields drafts without citations (a semantic failure
    that re-prompting cannot fix): the path to human review.
    """
    system, user = messages[0].content, messages[-1].content
    topic = user.splitlines()[0].removeprefix("topic: ").strip()
    sources = json.loads(user.split(SOURCES_START, 1)[1].split(SOURCES_END, 1)[0])
    required = re.search(r"Required sections: (.+?)\. At least", system)
    headings = [h.strip() for h in required.group(1).split(",")] if required else ["Summary"]
    cite = "UNCITED" not in topic
    refs = " ".join(f"[{s['name']}]" for s in sources) if cite else ""
    asked = re.search(r"The editor asks: (.+)", user)
    sections = []
    for heading in headings:
        if heading.lower() == "sources":
            body = "; ".join(f"{s['name']}: {s['excerpt']}" for s in sources)
        else:
            body = f"On {topic}: " + " ".join(
                f"{s['excerpt']}{' [' + s['name'] + ']' if cite else ''}." for s in sources
            )
            body += f" This section covers {heading.lower()} for the question at hand {refs}."
            if asked:
                body += f" Revised as asked: {asked.group(1)}."
        sections.append({"heading": heading, "body": body})
    return json.dumps(
        {
            "title": f"Report: {topic}"[:200],
            "sections": sections,
            "citations": [s["name"] for s in sources] if cite else [],
        }
    )


SKILLS = {EXTRACT_INVOICE: extract_invoice, DRAFT_REPORT: draft_report}

FLAKY_MODEL = re.compile(r"^flaky-(\d{1,3})$")
"""A model named ``flaky-<N>`` (a canary's new model, in the rollout tests) answers N% of
documents with prose instead of JSON: the same documents every time, so re-prompts fail too."""
NOT_JSON = "I am sorry, I cannot read this document."


def flaky_answer(model: str, messages: list[ChatMessage]) -> str | None:
    """The flaky model's failure for this conversation, if it is one it fails on."""
    found = FLAKY_MODEL.match(model)
    if found is None:
        return None
    # The document itself, whatever feedback a re-prompt adds around it.
    text = "\n".join(m.content for m in messages if m.role == "user")
    start, end = text.find(DOCUMENT_START), text.find(DOCUMENT_END)
    document = text[start:end] if 0 <= start < end else text
    point = int.from_bytes(hashlib.sha256(document.encode()).digest()[:4], "big") % 100
    return NOT_JSON if point < int(found.group(1)) else None
