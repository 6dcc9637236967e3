"""The outside world of support, for development and tests: the sandbox loads this module
(project.yaml, dev.sandbox). TOOL_SKILLS are the stand-in model's turns, deterministic, in
the triage agent's tool-calling loop; setup() adds the CRM (customers, their orders, notes)
and the helpdesk to the sandbox's routes."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

CUSTOMERS = web.AppKey("support_customers", dict)
ORDERS = web.AppKey("support_orders", dict)
NOTES = web.AppKey("support_notes", dict)
REPLIES = web.AppKey("support_replies", dict)
FIRST_ORDER_CENTS = 50000
"""What a customer added without orders has paid for (one order): enough for the refunds
the demo and the tests ask."""


def triage_turn(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The stand-in model's turn in the triage: first it looks the customer and their orders
    up, then it notes the ticket on their record, then it answers. A subject with MISFILED in
    it is misfiled (technical) until the model is told why: a semantic retry; one with ENDLESS
    has the model look the orders up again and again, never answering (until its limits); one
    with SLOW has it write its answer slowly, a second per piece, when it is streamed."""
    user = str(messages[1]["content"])
    customer_id = re.search(r"^customer id: (\S+)", user, re.MULTILINE)
    asked = re.search(r"^refund asked: (\d+)", user, re.MULTILINE)
    who = customer_id.group(1) if customer_id else ""
    results = tool_results(messages)
    if "lookup_customer" not in results:
        return {
            "tool_calls": [
                {"name": "lookup_customer", "arguments": {"customer_id": who}},
                {"name": "order_history", "arguments": {"customer_id": who}},
            ]
        }
    text = user.lower()
    if "endless" in text:
        return {"tool_calls": [{"name": "order_history", "arguments": {"customer_id": who}}]}
    told = any("answer was invalid" in str(m.get("content")) for m in messages[2:] if m["role"] == "user")
    if "refund" in text or "invoice" in text or "charged" in text:
        category = "technical" if "misfiled" in text and not told else "billing"
    elif "error" in text or "crash" in text:
        category = "technical"
    else:
        category = "other"
    if "add_crm_note" not in results:
        note = f"{category} ticket: {user.splitlines()[2].removeprefix('subject: ')}"
        return {"tool_calls": [{"name": "add_crm_note", "arguments": {"customer_id": who, "note": note}}]}
    orders = results["order_history"].get("orders", [])
    paid = sum(o["total_cents"] - o.get("refunded_cents", 0) for o in orders)
    refund = min(int(asked.group(1)) if asked else 0, paid)
    reply = f"Dear {results['lookup_customer'].get('name', 'customer')}, thank you for writing."
    if refund:
        reply += f" We refund {refund / 100:.2f} to your account."
    answer = {"content": json.dumps({"category": category, "reply": reply, "refund_cents": refund})}
    return {**answer, "stream_pause_s": 1.0} if "slow" in text else answer


def tool_results(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What each tool answered so far (its last answer), by tool name."""
    names = {
        call["id"]: call["function"]["name"]
        for m in messages
        if m["role"] == "assistant"
        for call in m.get("tool_calls") or []
    }
    return {names[m["tool_call_id"]]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


TOOL_SKILLS = {"triage_ticket": triage_turn}


async def get_customer(request: web.Request) -> web.Response:
    customer = request.app[CUSTOMERS].get(request.match_info["customer_id"])
    if customer is None:
        return web.json_response({"error": "no such customer"}, status=404)
    return web.json_response(customer)


async def add_customer(request: web.Request) -> web.Response:
    customer: dict[str, Any] = await request.json()
    orders = customer.pop(
        "orders", [{"order_id": f"ord-{customer['customer_id']}", "total_cents": FIRST_ORDER_CENTS}]
    )
    request.app[CUSTOMERS][customer["customer_id"]] = customer
    request.app[ORDERS][customer["customer_id"]] = orders
    return web.json_response(customer, status=201)


async def get_orders(request: web.Request) -> web.Response:
    customer_id = request.match_info["customer_id"]
    if customer_id not in request.app[CUSTOMERS]:
        return web.json_response({"error": "no such customer"}, status=404)
    return web.json_response(request.app[ORDERS].get(customer_id, []))


async def add_note(request: web.Request) -> web.Response:
    notes = request.app[NOTES]
    key = request.headers.get("Idempotency-Key", "")
    if key not in notes:  # a repeated key is the same note: written once
        customer_id = request.match_info["customer_id"]
        notes[key] = {"note_id": f"note-{len(notes) + 1}", "customer_id": customer_id, "requests": 0}
        notes[key]["note"] = (await request.json())["note"]
    notes[key]["requests"] += 1
    return web.json_response(notes[key], status=201)


async def list_notes(request: web.Request) -> web.Response:
    return web.json_response(list(request.app[NOTES].values()))


async def send_reply(request: web.Request) -> web.Response:
    replies = request.app[REPLIES]
    key = request.headers.get("Idempotency-Key", "")
    if key not in replies:  # a repeated key is the same reply: sent once
        sent = await request.json()
        replies[key] = {"reply_id": f"reply-{len(replies) + 1}", "key": key, "requests": 0, **sent}
    replies[key]["requests"] += 1  # how often it was asked (a retried step asks again)
    return web.json_response(replies[key], status=201)


async def list_replies(request: web.Request) -> web.Response:
    return web.json_response(list(request.app[REPLIES].values()))


def setup(app: web.Application) -> None:
    app[CUSTOMERS] = {
        "cust-1001": {"customer_id": "cust-1001", "name": "Ada Lovelace", "plan": "pro"},
        "cust-1002": {"customer_id": "cust-1002", "name": "Grace Hopper", "plan": "team"},
    }
    app[ORDERS] = {
        "cust-1001": [{"order_id": "ord-77", "total_cents": 32000}],
        "cust-1002": [
            {"order_id": "ord-78", "total_cents": 30000},
            {"order_id": "ord-79", "total_cents": 4900, "refunded_cents": 4900},
        ],
    }
    app[NOTES] = {}
    app[REPLIES] = {}
    app.router.add_get("/crm/customers/{customer_id}", get_customer)
    app.router.add_post("/crm/customers", add_customer)
    app.router.add_get("/crm/customers/{customer_id}/orders", get_orders)
    app.router.add_post("/crm/customers/{customer_id}/notes", add_note)
    app.router.add_get("/crm/notes", list_notes)
    app.router.add_post("/helpdesk/replies", send_reply)
    app.router.add_get("/helpdesk/replies", list_replies)
