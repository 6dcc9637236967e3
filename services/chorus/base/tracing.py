"""W3C trace context across every hop, and a span per handled event when spans are built.

The ``traceparent`` travels in the envelope and in the Kafka header of the same
name, so tools that only read headers see it too. The trace id set by whoever
produced a workflow's first event stays on every later event of the workflow;
each hop gets a new span id whose parent is the span that handled the cause. A call to a
system outside Chorus (an LLM, the payment provider, a source, a webhook) is a client span
of the handling span, and its request carries that span's ``traceparent`` header, so the
other side's trace joins the workflow's.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    span_id: str
    flags: str = "01"

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    @classmethod
    def parse(cls, traceparent: str | None) -> TraceContext | None:
        match = _TRACEPARENT.match(traceparent or "")
        if not match or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
            return None
        return cls(match.group(1), match.group(2), match.group(3))

    @classmethod
    def new_root(cls) -> TraceContext:
        return cls(secrets.token_hex(16), secrets.token_hex(8))

    def child(self) -> TraceContext:
        return TraceContext(self.trace_id, secrets.token_hex(8), self.flags)


def child_traceparent(parent: str | None) -> str:
    """A new span in the parent's trace, or a new trace when there is no valid parent."""
    ctx = TraceContext.parse(parent)
    return (ctx.child() if ctx else TraceContext.new_root()).traceparent


SpanKind = Literal["internal", "server", "client", "consumer", "producer"]
Attributes = Mapping[str, str | int | float | bool]
"""A span's attributes, named by OpenTelemetry's semantic conventions where one applies
(messaging.*, http.*, gen_ai.*), else chorus.*."""


class Spans(Protocol):
    """Builds spans (chorus.observability.tracing: OpenTelemetry's); each yields the
    traceparent that names the span it opened."""

    def span(
        self, name: str, parent: str | None, kind: SpanKind, attributes: Attributes, links: Sequence[str] = ()
    ) -> AbstractContextManager[str]: ...

    def annotate(self, attributes: Attributes) -> None:
        """Add ``attributes`` to the span open in this task (what is known only at its end)."""

    def record(
        self,
        name: str,
        parent: str | None,
        kind: SpanKind,
        attributes: Attributes,
        start_ns: int,
        end_ns: int,
    ) -> None:
        """A span that already ended (``time.time_ns()`` at its start and end)."""


_spans: Spans | None = None
"""None: no span is built (no exporter); the trace context travels all the same."""
_handling: ContextVar[str | None] = ContextVar("chorus_handling_traceparent", default=None)
"""The traceparent of the event being handled in this task (its outbound calls' parent)."""


def building() -> bool:
    """Whether spans are built (an exporter is configured): what is worth computing for them."""
    return _spans is not None


def build_spans(spans: Spans) -> None:
    """Spans are built from now on (an exporter sends them somewhere)."""
    global _spans  # noqa: PLW0603 - one builder per process, set once at start
    _spans = spans


@contextmanager
def handling_span(
    name: str, traceparent: str, attributes: Attributes, links: Sequence[str] = ()
) -> Iterator[str]:
    """Handle one event as a new CONSUMER span in the trace of ``traceparent``; yields the
    traceparent of the new span, which the runtime puts into every emitted event. ``links``:
    the traceparents of other events it joins (a fan-in).

    Without an exporter no span object is built: one nobody reads cost ~15% of a hop's
    CPU (bench profile), and the chain only needs a new span id in the same trace.
    With one, a trace viewer shows the chain hop by hop.
    """
    with _working_span(name, traceparent, "consumer", attributes, links) as current:
        yield current


def ended_span(
    name: str, traceparent: str, kind: SpanKind, attributes: Attributes, start_ns: int, end_ns: int
) -> None:
    """A span that already ended, a child of ``traceparent`` (an event published: from its
    send to the broker's acknowledgement). A no-op without an exporter."""
    if _spans is not None and TraceContext.parse(traceparent) is not None:
        _spans.record(name, traceparent, kind, attributes, start_ns, end_ns)


def annotate(attributes: Attributes) -> None:
    """Add ``attributes`` to the span open in this task (an outbound call's answer: the
    tokens a model used). A no-op without an exporter."""
    if _spans is not None:
        _spans.annotate(attributes)


@contextmanager
def request_span(
    service: str, name: str, traceparent: str | None, *, method: str = "", route: str = ""
) -> Iterator[str]:
    """A request a service answers that starts work (the gateway accepting a workflow, a
    person's decision) as a SERVER span: a child of the caller's ``traceparent``, or the root
    of a new trace. Yields the traceparent of what it publishes. With the HTTP ``method`` and
    ``route`` (its template) the span is named and described by HTTP's conventions
    (``annotate`` adds the status once answered)."""
    if method and route:
        http = {"http.request.method": method, "http.route": route, "chorus.operation": f"{service} {name}"}
        with _working_span(f"{method} {route}", traceparent, "server", http) as current:
            yield current
        return
    with _working_span(f"{service} {name}", traceparent, "server", {}) as current:
        yield current


@contextmanager
def work_span(
    service: str, name: str, traceparent: str | None, attributes: Attributes | None = None
) -> Iterator[str]:
    """Work a service does on behalf of an event (a message its delivery loop sends, a tool
    an agent calls) as an INTERNAL span, a child of ``traceparent`` (or of the handling: a new
    trace outside one): the calls made inside are its children. Yields its traceparent."""
    with _working_span(
        f"{service} {name}", traceparent or _handling.get(), "internal", attributes or {}
    ) as current:
        yield current


@contextmanager
def _working_span(
    name: str, traceparent: str | None, kind: SpanKind, attributes: Attributes, links: Sequence[str] = ()
) -> Iterator[str]:
    """A span of work in the trace of ``traceparent`` (a new trace without one), current for
    the calls made inside (outbound_span); yields its traceparent."""
    if _spans is None:
        with _handling_as(child_traceparent(traceparent)) as current:
            yield current
        return
    with _spans.span(name, traceparent, kind, attributes, links) as opened, _handling_as(opened) as current:
        yield current


@contextmanager
def outbound_span(
    what: str, method: str, host: str, name: str = "", attributes: Attributes | None = None
) -> Iterator[str | None]:
    """A call outside Chorus, as a client span in the trace of the event being handled;
    yields the ``traceparent`` header to send (None outside a handling: no trace to join).
    ``name`` and ``attributes``: what a convention says of the call (a model's chat), beside
    HTTP's."""
    parent = _handling.get()
    if parent is None:
        yield None
        return
    if _spans is None:
        yield child_traceparent(parent)
        return
    named = {
        "http.request.method": method,
        "server.address": host,
        "chorus.call": what,
        **(attributes or {}),
    }
    with _spans.span(name or f"{what} {method}", parent, "client", named) as opened:
        yield opened


@contextmanager
def _handling_as(traceparent: str) -> Iterator[str]:
    token = _handling.set(traceparent)
    try:
        yield traceparent
    finally:
        _handling.reset(token)
