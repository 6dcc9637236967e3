"""The outside world of support, for development and tests: the sandbox loads this module
(project.yaml, dev.sandbox). SKILLS answer the model's prompts deterministically;
setup() adds the CRM and the helpdesk to the sandbox's routes."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web
from chorus.llm import ChatMessage

CUSTOMERS = web.AppKey("support_customers", dict)
REPLIES = web.AppKey("support_replies", dict)


def triage_ticket(messages: list[ChatMessage]) -> str:
    """The stand-in model's triage. A subject with MISFILED in it is misfiled on the first
    try (technical), and filed right once the model is told why: a semantic retry."""
    user = messages[-1].content
    name = re.search(r"^customer: (.+?) \(", user, re.MULTILINE)
    asked = re.search(r"^refund asked: (\d+)", user, re.MULTILINE)
    text = user.lower()
    corrected = "previous triage was invalid" in text
    if "refund" in text or "invoice" in text or "charged" in text:
        category = "technical" if "misfiled" in text and not corrected else "billing"
    elif "error" in text or "crash" in text:
        category = "technical"
    else:
        category = "other"
    who = name.group(1) if name else "customer"
    refund = int(asked.group(1)) if asked else 0
    reply = f"Dear {who}, thank you for writing."
    if refund:
        reply += f" We refund {refund / 100:.2f} to your account."
    return json.dumps({"category": category, "reply": reply, "refund_cents": refund})


SKILLS = {"triage_ticket": triage_ticket}


async def get_customer(request: web.Request) -> web.Response:
    customer = request.app[CUSTOMERS].get(request.match_info["customer_id"])
    if customer is None:
        return web.json_response({"error": "no such customer"}, status=404)
    return web.json_response(customer)


async def add_customer(request: web.Request) -> web.Response:
    customer: dict[str, Any] = await request.json()
    request.app[CUSTOMERS][customer["customer_id"]] = customer
    return web.json_response(customer, status=201)


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
    app[REPLIES] = {}
    app.router.add_get("/crm/customers/{customer_id}", get_customer)
    app.router.add_post("/crm/customers", add_customer)
    app.router.add_post("/helpdesk/replies", send_reply)
    app.router.add_get("/helpdesk/replies", list_replies)
