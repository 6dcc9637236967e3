"""A sandbox plugin for the Pydantic AI agent of tests/support/stockservice.py: the stand-in
model's turns for its task (look the item up, reserve it, say so) and the stock room its two
tools call, which counts every request (a reservation once per Idempotency-Key)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TASK = "stock_task"
ASKED = re.compile(r"Reserve (\d+) of (\w+)")


def stock_turn(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Turn 1 looks the item up, turn 2 reserves it, turn 3 answers."""
    user = next(str(m.get("content")) for m in messages if m.get("role") == "user")
    found = ASKED.search(user)
    if found is None:
        return {"content": "I cannot tell what to reserve."}
    quantity, item = int(found.group(1)), found.group(2)
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if turn == 0:
        return {"tool_calls": [{"name": "look_up", "arguments": {"item": item}}]}
    if turn == 1:
        return {"tool_calls": [{"name": "reserve", "arguments": {"item": item, "quantity": quantity}}]}
    return {"content": f"reserved {quantity} {item}"}


TOOL_SKILLS = {TASK: stock_turn}


@dataclass
class StockRoom:
    lookups: Counter[str] = field(default_factory=Counter)
    reservations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """By Idempotency-Key: a key reserves once."""
    reserve_requests: Counter[str] = field(default_factory=Counter)


ROOM = web.AppKey("stock_room", StockRoom)


def setup(app: web.Application) -> None:
    room = app[ROOM] = StockRoom()

    async def look_up(request: web.Request) -> web.Response:
        item = request.match_info["item"]
        room.lookups[item] += 1
        return web.json_response({"item": item, "on_shelf": 5})

    async def reserve(request: web.Request) -> web.Response:
        key = request.headers.get("Idempotency-Key")
        if not key:
            return web.json_response({"error": "Idempotency-Key header required"}, status=400)
        room.reserve_requests[key] += 1
        body = await request.json()
        made = room.reservations.setdefault(key, {"reservation": f"res-{len(room.reservations) + 1}", **body})
        return web.json_response(made)

    async def seen(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "lookups": dict(room.lookups),
                "reservations": room.reservations,
                "reserve_requests": dict(room.reserve_requests),
            }
        )

    app.router.add_get("/stock/shelf/{item}", look_up)
    app.router.add_post("/stock/reservations", reserve)
    app.router.add_get("/stock/seen", seen)
