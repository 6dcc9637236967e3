"""Request heads bounded in size and in time, and idle connections that lock nobody out.

uvicorn (0.54) leaves a connection alone until its first request head is complete: no timer
runs before it, and ``limit_concurrency`` counts every open connection. So a hundred
connections that never send a byte made every API of a service answer 503, for as long as
they stayed open (measured: still 503 after 40 s). Its default parser (httptools) takes a
header block of any size, so ``h11_max_incomplete_event_size`` bounded nothing either.

:class:`BoundedHeads` is uvicorn's h11 protocol with three changes:

- a connection counts towards ``limit_concurrency`` once it sent a request head, so idle
  ones cannot take every slot;
- a request head (the first, or the next on a kept-alive connection) must arrive within
  ``HEAD_TIMEOUT_S``, else the answer is a 408 problem and the connection is closed;
- a head larger than the config's ``h11_max_incomplete_event_size`` is a 431 problem, and
  the connection is closed;
- a header line HTTP does not allow (a control character in its value, a name that is not
  a token) is a 400 problem naming the header, whether or not h11 would take it (it lets
  ``\x01`` through; for a NUL, uvicorn answered ``text/plain`` naming nothing), and any
  other head h11 refuses is a 400 problem too.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT_S = 10.0
"""How long a client has to send a complete request head."""
DEFAULT_HEAD_LIMIT = 16 * 1024
"""The largest request head, unless the config's ``h11_max_incomplete_event_size`` says."""


def problem_bytes(status: int, reason: str, detail: str, **extra: str) -> bytes:
    """A whole HTTP/1.1 response carrying an RFC 9457 problem, closing the connection."""
    problem = {"type": "about:blank", "title": reason, "status": status, "detail": detail, **extra}
    body = json.dumps(problem).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""What RFC 9110 refuses in a field value (HTAB is allowed)."""


def malformed_header(head: bytes) -> str | None:
    """The first header of ``head`` (a request head's bytes) that HTTP does not allow: its
    name, printable; None when every header line is well formed."""
    for line in head.split(b"\r\n")[1:]:
        if not line:
            break
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            return name[:60].decode("ascii", "backslashreplace")
        if _CONTROL.search(value):
            return name.decode("ascii")
    return None


class BoundedHeads(H11Protocol):
    head_timeout_s = HEAD_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Counted once it asks for something (see the module's doc).
        self.connections.discard(self)
        self._head_timer: asyncio.TimerHandle | None = None
        self._await_head()

    def data_received(self, data: bytes) -> None:
        if self._waiting_for_head():
            head, whole = self._head_so_far(data)
            if len(head) > self._head_limit():
                detail = f"the request head exceeds {self._head_limit()} bytes"
                self._refuse(431, "Request Header Fields Too Large", detail)
                return
            header = malformed_header(head) if whole else None
            if header is not None:
                self._refuse_header(header)
                return
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._head_arrived()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Idle again: not counted until its next head, which has the same time to arrive.
        self.connections.discard(self)
        if not self.transport.is_closing():
            self._await_head()

    def _head_limit(self) -> int:
        return int(self.config.h11_max_incomplete_event_size or DEFAULT_HEAD_LIMIT)

    def _head_so_far(self, data: bytes) -> tuple[bytes, bool]:
        """The request head as far as it has come: what h11 holds of it and this read, up to
        its blank line (a body may follow in the same read, and is never copied past the
        limit); and whether it is whole."""
        cut = data[: self._head_limit() + 4]
        buffered = self.conn.trailing_data[0]
        head = bytes(buffered) + cut if buffered else cut
        end = head.find(b"\r\n\r\n")
        return (head[:end], True) if end >= 0 else (head, False)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    # -- the head's clock ------------------------------------------------------------------

    def _waiting_for_head(self) -> bool:
        return self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)

    def send_400_response(self, msg: str) -> None:
        # h11 refused the request (its headers passed the check above): still a problem.
        self._refuse(400, "Bad Request", "the request is not valid HTTP/1.1")

    def _refuse_header(self, header: str) -> None:
        detail = f"header {header}: its name must be a token, its value may hold no control character"
        self._refuse(400, "Bad Request", detail, header=header)

    def _await_head(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _head_arrived(self) -> None:
        self._cancel_head_timer()
        self.connections.add(self)

    def _cancel_head_timer(self) -> None:
        timer: Any = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing() and self._waiting_for_head():
            # A kept-alive connection with nothing more to ask is closed quietly; one that
            # started a head and never finished it is told why.
            if self.conn.trailing_data[0]:
                detail = f"the request head did not arrive within {self.head_timeout_s:g} s"
                self._refuse(408, "Request Timeout", detail)
            else:
                self.transport.close()

    def _refuse(self, status: int, reason: str, detail: str, **extra: str) -> None:
        self._cancel_head_timer()
        self.transport.write(problem_bytes(status, reason, detail, **extra))
        self.transport.close()
