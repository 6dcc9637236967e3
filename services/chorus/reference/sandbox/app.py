"""One aiohttp app standing in for every external system Chorus talks to.

Each endpoint counts the requests it receives (GET /stats), because the tests'
strongest claims are about those counts: one payment per approved invoice,
sources not fetched again after a resume.
"""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import hashlib
import hmac
import importlib
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from aiosmtpd.controller import Controller

from chorus.outside.llm import ChatMessage
from chorus.outside.llm.client import OFFLINE_MODEL_NAME, OfflineModel, Skill, ToolSkill, task_of
from chorus.outside.llm.loop import Usage, assistant_message
from chorus.reference.sandbox.model import SKILLS, flaky_answer

CLOSED_VENDORS = {"vendor-closed"}
MAX_SOURCE_DELAY_S = 120.0


@dataclass
class SandboxConfig:
    api_key: str = "sandbox-key"
    webhook_secret: str = "demo-webhook-secret"
    flaky_sources: frozenset[str] = frozenset()
    """Sources that answer 503 to every other request for the same topic: each report's
    first call fails and its retry succeeds. Counted per topic, not globally: with one
    global count, reports retrying in step take turns at the failing calls and one of
    them can fail every time until its retries run out."""
    payment_failures_per_key: int = 0
    """The first N requests of each payment key answer 503."""
    payment_delay_s: float = 0.0
    smtp_port: int | None = None
    """Where the mail server stand-in listens (None: no mail server)."""
    plugins: tuple[str, ...] = ()
    """Modules of projects extending the sandbox (their ``project.yaml``'s ``dev.sandbox``):
    each may define ``SKILLS`` (task -> skill: the stand-in model's answers to the project's
    prompts), ``TOOL_SKILLS`` (task -> its turns in a tool-calling loop) and ``setup(app)``
    (routes standing in for the project's outside world)."""


@dataclass
class Sandbox:
    config: SandboxConfig
    skills: dict[str, Skill] = field(default_factory=lambda: dict(SKILLS))
    requests: Counter[str] = field(default_factory=Counter)
    payments: dict[str, dict[str, Any]] = field(default_factory=dict)
    payment_requests: Counter[str] = field(default_factory=Counter)
    source_calls: Counter[str] = field(default_factory=Counter)
    source_topics: Counter[str] = field(default_factory=Counter)
    source_spans: list[dict[str, Any]] = field(default_factory=list)
    """When each source call began and answered (wall clock; None while it straggles)."""
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    webhooks: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: Counter[str] = field(default_factory=Counter)
    tool_skills: dict[str, ToolSkill] = field(default_factory=dict)
    models_down: set[str] = field(default_factory=set)
    """Models that answer 503 (an outage, PUT /llm/outages/{model}): a fallback's test."""
    keys_ignored: bool = False
    """A provider that ignores Idempotency-Key (PUT /payments/keys-ignored): each request is a
    payment of its own, recorded under ``<key>#<n>``. The reliability suite's negative
    control: a step repeated after a fault then pays twice, which its checks must see."""
    llm_asked: Counter[str] = field(default_factory=Counter)
    """Model requests by task and conversation (a digest of the messages): a turn asked
    twice is the same conversation twice, which an agent loop that kept the first answer
    never sends."""
    slack: list[dict[str, Any]] = field(default_factory=list)
    mail: list[dict[str, Any]] = field(default_factory=list)
    """Messages the SMTP stand-in accepted (appended from its thread; list.append is atomic)."""
    traces: list[dict[str, Any]] = field(default_factory=list)
    """The ``traceparent`` header of every call from Chorus (path, header or None)."""

    def stats(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "payments": {"unique": len(self.payments), "by_key": self.payments},
            "payment_requests": dict(self.payment_requests),
            "source_calls": dict(self.source_calls),
            "source_calls_by_topic": dict(self.source_topics),
            "source_spans": self.source_spans,
            "deliveries": self.deliveries,
            "webhooks": self.webhooks,
            "llm_calls": dict(self.llm_calls),
            "llm_repeated": {asked: n for asked, n in self.llm_asked.items() if n > 1},
            "slack": self.slack,
            "mail": self.mail,
            "traces": self.traces,
        }

    # -- the outside world's endpoints ------------------------------------------------

    async def pay(self, request: web.Request) -> web.Response:
        self.requests["payments"] += 1
        if request.headers.get("Authorization") != f"Bearer {self.config.api_key}":
            return web.json_response({"error": "bad credentials"}, status=401)
        key = request.headers.get("Idempotency-Key")
        if not key:
            return web.json_response({"error": "Idempotency-Key header required"}, status=400)
        self.payment_requests[key] += 1
        if self.config.payment_delay_s:
            await asyncio.sleep(self.config.payment_delay_s)
        if self.payment_requests[key] <= self.config.payment_failures_per_key:
            return web.json_response({"error": "try again"}, status=503)
        body = await request.json()
        if body.get("vendor_id") in CLOSED_VENDORS:
            return web.json_response({"error": "vendor account closed"}, status=422)
        if self.keys_ignored and self.payment_requests[key] > 1:
            key = f"{key}#{self.payment_requests[key]}"
        if key in self.payments:  # the same key pays once; a retry sees the same payment
            return web.json_response(self.payments[key], status=200)
        payment = {
            "payment_id": f"pay-{uuid.uuid4().hex[:12]}",
            "reference": f"prov-{len(self.payments) + 1:06d}",
            "amount_cents": body.get("amount_cents"),
            "currency": body.get("currency"),
            "invoice_id": body.get("invoice_id"),
        }
        self.payments[key] = payment
        return web.json_response(payment, status=201)

    async def source(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.requests["sources"] += 1
        self.source_calls[name] += 1
        topic = request.query.get("topic", "")
        self.source_topics[f"{topic}/{name}"] += 1
        if name in self.config.flaky_sources and self.source_topics[f"{topic}/{name}"] % 2 == 1:
            return web.json_response({"error": "temporarily unavailable"}, status=503)
        # A source URL may ask for a straggler (?delay=seconds) or a refusal (?status=404).
        span: dict[str, Any] = {"topic": topic, "name": name, "started": time.time(), "ended": None}
        self.source_spans.append(span)
        delay = min(float(request.query.get("delay", "0") or 0), MAX_SOURCE_DELAY_S)
        if delay > 0:
            await asyncio.sleep(delay)
        span["ended"] = time.time()
        status = int(request.query.get("status", "200") or 200)
        if status >= 400:
            return web.json_response({"error": f"source {name} answers {status}"}, status=status)
        excerpt = f"{name} reports that durable execution keeps long agent runs alive across failures"
        return web.json_response({"name": name, "excerpt": excerpt})

    async def deliver(self, request: web.Request) -> web.Response:
        self.requests["deliveries"] += 1
        self.deliveries.append(
            {
                "idempotency_key": request.headers.get("Idempotency-Key"),
                "body": await request.json(),
            }
        )
        return web.json_response({"received": True}, status=200)

    async def hook(self, request: web.Request) -> web.Response:
        """A receiver of completion webhooks, verifying them as Standard Webhooks say."""
        self.requests["webhooks"] += 1
        raw = await request.read()
        msg_id = request.headers.get("webhook-id", "")
        signed = f"{msg_id}.{request.headers.get('webhook-timestamp', '')}.".encode() + raw
        secret = self.config.webhook_secret
        key = (
            base64.b64decode(secret.removeprefix("whsec_") + "==")
            if secret.startswith("whsec_")
            else secret.encode()
        )
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        offered = [sig.partition(",")[2] for sig in request.headers.get("webhook-signature", "").split()]
        valid = any(hmac.compare_digest(expected, sig) for sig in offered if sig)
        self.webhooks.append(
            {
                "name": request.match_info["name"],
                "delivery": msg_id,
                "signature_valid": valid,
                "body": json.loads(raw or b"{}"),
            }
        )
        # ?status=503 plays a receiver that is down (its deliveries are retried, then given up).
        wanted = request.query.get("status")
        if valid and wanted and wanted.isdigit():
            return web.json_response({"ok": False}, status=int(wanted))
        return web.json_response({"ok": valid}, status=200 if valid else 401)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.requests["llm"] += 1
        body = await request.json()
        asked = body.get("messages", [])
        messages = [ChatMessage(m["role"], m.get("content") or "") for m in asked]
        try:
            task = task_of(messages)
        except Exception:
            return web.json_response({"error": {"message": "no task line"}}, status=400)
        self.llm_calls[task] += 1
        if body.get("model") in self.models_down:
            return web.json_response({"error": {"message": f"{body['model']} is down"}}, status=503)
        digest = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]
        self.llm_asked[f"{task}:{digest}"] += 1
        if body.get("tools"):  # a turn of a tool-calling loop: the task's tool skill answers
            tool_skill = self.tool_skills.get(task)
            if tool_skill is None:
                return web.json_response({"error": {"message": f"no tool skill for {task}"}}, status=400)
            turn = await OfflineModel({}, {task: tool_skill}).chat(asked, body["tools"])
            finish = "tool_calls" if turn.tool_calls else "stop"
            answer = completion(assistant_message(turn), finish, turn.usage)
            if body.get("stream"):
                # A skill may ask for a slow stream (a long answer, written over seconds).
                pause = float(tool_skill(asked).get("stream_pause_s") or 0.0)
                return await streamed(request, answer, pause)
            return web.json_response(answer)
        skill = self.skills.get(task)
        if skill is None:
            return web.json_response({"error": {"message": f"unknown task {task}"}}, status=400)
        content = flaky_answer(str(body.get("model", "")), messages) or skill(messages)
        # What it read and wrote (a stand-in's tokens are words).
        read = sum(len(m.content.split()) for m in messages)
        spent = Usage(input_tokens=read, output_tokens=len(content.split()))
        return web.json_response(completion({"role": "assistant", "content": content}, "stop", spent))

    async def outage(self, request: web.Request) -> web.Response:
        model = request.match_info["model"]
        if request.method == "PUT":
            self.models_down.add(model)
        else:
            self.models_down.discard(model)
        return web.Response(status=204)

    async def ignore_keys(self, request: web.Request) -> web.Response:
        self.keys_ignored = request.method == "PUT"
        return web.Response(status=204)

    async def get_stats(self, _: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def slack_hook(self, request: web.Request) -> web.Response:
        """A Slack incoming webhook: JSON with ``text`` (or ``blocks``); answers ``ok`` as
        Slack does, 400 ``no_text`` without either."""
        self.requests["slack"] += 1
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        if not isinstance(body, dict) or not (body.get("text") or body.get("blocks")):
            return web.Response(status=400, text="no_text")
        self.slack.append({"channel": request.match_info["channel"], "body": body})
        return web.Response(text="ok")

    async def get_mail(self, _: web.Request) -> web.Response:
        return web.json_response({"mail": self.mail})


SANDBOX = web.AppKey("sandbox", Sandbox)


class MailSink:
    """aiosmtpd's handler: keeps every message it is given (the sandbox's mail server)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        body = message.get_body(preferencelist=("plain",))
        self.sandbox.requests["mail"] += 1
        self.sandbox.mail.append(
            {
                "from": envelope.mail_from,
                "to": list(envelope.rcpt_tos),
                "subject": str(message["Subject"]),
                "message_id": str(message["Message-ID"]),
                "text": body.get_content() if body is not None else "",
            }
        )
        return "250 Message accepted for delivery"


STREAM_PIECE = 24
"""Characters of text per streamed chunk."""


async def streamed(request: web.Request, answer: dict[str, Any], pause_s: float) -> web.StreamResponse:
    """``answer`` (a completion) as OpenAI streams it: server-sent events of chunks, the text
    a few characters at a time (``pause_s`` apart), each tool call in one piece, the usage
    last (as ``stream_options.include_usage`` asks), then ``[DONE]``."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    [choice] = answer["choices"]
    message = choice["message"]
    head = {"id": answer["id"], "object": "chat.completion.chunk", "model": answer["model"]}

    async def send(chunk: dict[str, Any]) -> None:
        await response.write(b"data: " + json.dumps({**head, **chunk}).encode() + b"\n\n")

    text = message.get("content") or ""
    for start in range(0, len(text), STREAM_PIECE):
        if start and pause_s:
            await asyncio.sleep(pause_s)
        await send({"choices": [{"index": 0, "delta": {"content": text[start : start + STREAM_PIECE]}}]})
    for index, call in enumerate(message.get("tool_calls") or []):
        await send({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, **call}]}}]})
    await send({"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    await send({"choices": [], "usage": answer["usage"]})
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def completion(message: dict[str, Any], finish: str, usage: Usage) -> dict[str, Any]:
    """A chat completion as OpenAI's API answers it, usage included."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:10]}",
        "object": "chat.completion",
        "model": OFFLINE_MODEL_NAME,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.tokens,
        },
    }


def create_app(config: SandboxConfig) -> web.Application:
    sandbox = Sandbox(config)

    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        # What a traced system on the other side would join (tests check every call has it).
        if request.path not in ("/stats", "/mail"):
            sandbox.traces.append({"path": request.path, "traceparent": request.headers.get("traceparent")})
        return await handler(request)

    app = web.Application(middlewares=[traced])
    app[SANDBOX] = sandbox
    for name in config.plugins:
        plugin = importlib.import_module(name)
        skills: dict[str, Skill] = dict(getattr(plugin, "SKILLS", {}))
        taken = sorted(skills.keys() & sandbox.skills.keys())
        if taken:
            raise ValueError(f"sandbox plugin {name}: the model has skills {taken} already")
        sandbox.skills.update(skills)
        sandbox.tool_skills.update(getattr(plugin, "TOOL_SKILLS", {}))
        if hasattr(plugin, "setup"):
            plugin.setup(app)
    app.router.add_post("/payments", sandbox.pay)
    app.router.add_get("/sources/{name}", sandbox.source)
    app.router.add_post("/deliveries", sandbox.deliver)
    app.router.add_post("/hooks/{name}", sandbox.hook)
    app.router.add_post("/v1/chat/completions", sandbox.chat)
    app.router.add_put("/llm/outages/{model}", sandbox.outage)
    app.router.add_delete("/llm/outages/{model}", sandbox.outage)
    app.router.add_put("/payments/keys-ignored", sandbox.ignore_keys)
    app.router.add_delete("/payments/keys-ignored", sandbox.ignore_keys)
    app.router.add_get("/stats", sandbox.get_stats)
    app.router.add_post("/slack/{channel}", sandbox.slack_hook)
    app.router.add_get("/mail", sandbox.get_mail)
    if config.smtp_port is not None:
        smtp = Controller(MailSink(sandbox), hostname="127.0.0.1", port=config.smtp_port)

        async def start_smtp(_: web.Application) -> None:
            smtp.start()

        async def stop_smtp(_: web.Application) -> None:
            smtp.stop()

        app.on_startup.append(start_smtp)
        app.on_cleanup.append(stop_smtp)
    return app
