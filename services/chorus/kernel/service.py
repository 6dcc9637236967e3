"""What a service author writes: handlers, and one declaration of the service.

A handler is a plain async function ``on_<event>(event, state, ctx)`` that returns
an :class:`Outcome`: the workflow's new state, the events to emit, the timers to
schedule. It never touches Kafka or SQL; the runtime loads the state, calls the
handler and persists its outcome in one transaction with the inbox and outbox.

Platform services whose state is not per-workflow (timers, dead letters, the
audit log) return :class:`Effect` objects: adapter code that runs inside that
same transaction.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import asyncpg
from fastapi import APIRouter
from pydantic import BaseModel

from chorus.base.clock import Clock
from chorus.base.db import rows_affected
from chorus.base.errors import NewerStateError, PersistentError
from chorus.contracts.base import EventModel, is_sealed
from chorus.contracts.edges import ServiceEdges
from chorus.contracts.envelope import Envelope, Priority
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.kernel.codec import Event

S = TypeVar("S", bound=BaseModel | None)
D = TypeVar("D")
T = TypeVar("T")


@dataclass(frozen=True)
class Emit:
    """An event to publish, with envelope overrides. A bare EventModel in ``Outcome.emit``
    means: same workflow, same priority, causation = the event being handled."""

    event: EventModel
    workflow_id: str | None = None
    workflow_type: str | None = None
    priority: Priority | None = None
    idempotency_key: str | None = None
    deadline: datetime | None = None
    subject_ref: str | None = None

    def overrides(self) -> dict[str, Any]:
        """All but the event: the envelope fields it sets, named as child_envelope's keywords."""
        return {name: getattr(self, name) for name in _EMIT_OVERRIDES}


# Read once: overrides() runs for every emitted event, on the record path.
_EMIT_OVERRIDES = tuple(f.name for f in fields(Emit) if f.name != "event")


@dataclass(frozen=True)
class ScheduleTimer:
    """Fire ``event`` (into its registry topic, for this workflow) at ``due_at``.

    ``timer_id`` is scoped to the service and workflow; scheduling the same id
    twice is one timer.
    """

    timer_id: str
    due_at: datetime
    event: EventModel
    purpose: str = "other"


@dataclass(frozen=True)
class CancelTimer:
    timer_id: str
    reason: str = ""


@dataclass(frozen=True)
class RescheduleTimer:
    timer_id: str
    due_at: datetime


TimerCommand = ScheduleTimer | CancelTimer | RescheduleTimer


class Effect(Protocol):
    """Adapter work that must commit atomically with the event's inbox row."""

    async def apply(self, conn: asyncpg.Connection) -> None: ...


@dataclass(frozen=True)
class Outcome(Generic[S]):
    state: S | None = None
    """The new checkpoint; None keeps the current one."""
    emit: Sequence[EventModel | Emit] = ()
    timers: Sequence[TimerCommand] = ()
    effects: Sequence[Effect] = ()
    ended: str | None = None
    """Set when this step ends the workflow ("completed", "rejected", "failed", ...)."""


async def _no_key_store(token: str) -> Any:
    raise PersistentError("sealed personal data, and no key store in this context")


@dataclass
class Context(Generic[D]):
    """What a handler may use besides its event and state."""

    service: str
    deps: D
    clock: Clock
    envelope: Envelope
    attempt: int
    feedback: list[str]
    """Validation errors of earlier tries of this delivery (for re-prompting)."""
    log: logging.LoggerAdapter[logging.Logger]
    _checkpoint: Callable[[BaseModel, Sequence[EventModel]], Awaitable[None]]
    _open: Callable[[str], Awaitable[Any]] = field(default=_no_key_store, repr=False)

    def idempotency_key(self, *parts: str) -> str:
        """A key for an external call that is the same on every retry of this step.

        It travels in an HTTP header, so it is visible ASCII of at most 255 characters:
        a key built from anything else (a submitter's non-ASCII key, a long one) is
        replaced by its SHA-256, which is just as stable."""
        key = ":".join([self.envelope.idempotency_key, self.service, *parts])
        if len(key) <= 255 and key.isascii() and key.isprintable() and " " not in key:
            return key
        return f"{self.service}:sha256:{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()}"

    async def open(self, value: T) -> T:
        """``value`` opened if it is sealed personal data this handler holds (a token its
        state kept, say); anything else as it is. The event's own personal fields come
        opened when the route declares ``On(..., personal=True)``."""
        if not is_sealed(value):
            return value
        opened: T = await self._open(str(value))
        return opened

    async def checkpoint(self, state: BaseModel, *, emit: Sequence[EventModel] = ()) -> None:
        """Commit ``state`` now, mid-handler (a step boundary).

        If the process dies later in this handler, the redelivered event sees
        this state, so finished steps are not repeated.

        ``emit``: events published with it, while the step still runs (how far a long step
        has got: an agent's partial output). They are what the step had done when it was
        kept, not its outcome: a retried step may say more, or otherwise, later.
        """
        await self._checkpoint(state, emit)


Handler = Callable[[Event[Any], Any, Context[Any]], Awaitable[Outcome[Any]]]


@dataclass(frozen=True)
class RuntimeHandle:
    """What a platform service's background workers and HTTP routes get from the runtime."""

    service: str
    pool: asyncpg.Pool
    clock: Clock
    metrics: Any
    store: Any
    registry: Any
    settings: Any
    deps: Any
    producer: Any
    outbox: Any
    """chorus.kernel.outbox.OutboxWriter: how code outside handlers publishes (and wakes the relay)."""
    signer: Any = None
    """chorus.privacy.signing.Signer of the decision events this service produces (or None)."""
    verifier: Any = None
    """chorus.privacy.signing.Verifier: the runtime's check of signed types (a replay of the
    topics believes what the live consumer believed)."""
    sealer: Any = None
    """chorus.privacy.crypto.Sealer: opens the personal data an API shows (and logs the access)."""
    rollouts: Any = None
    """chorus.rollouts.RolloutView: the rollout policies (the gateway pins new workflows)."""


@dataclass(frozen=True)
class DataRequest:
    """The erasure or retirement a service's own tables answer: its id, and when."""

    request_id: str
    at: datetime


class OwnedData(Protocol):
    """Rows a service keeps per workflow in tables of its own (timers, dead letters,
    submissions, keys): removed with the runtime's own rows when the workflows are retired,
    or their subject is erased."""

    async def retire(
        self, conn: asyncpg.Connection, workflow_ids: Sequence[str], request: DataRequest
    ) -> dict[str, int]:
        """Remove the rows of ``workflow_ids`` (inside the retirement's transaction);
        ``"<schema>.<table>" -> rows removed``."""
        ...

    async def erase(
        self, conn: asyncpg.Connection, subject_hash: str, workflow_ids: Sequence[str], request: DataRequest
    ) -> dict[str, int]:
        """Remove (or redact) what is held of the subject and of ``workflow_ids`` (its
        workflows the audit projection knows), inside the erasure's transaction."""
        ...

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        """Remove what has outlived its own retention rule by ``now`` (rows no workflow's
        retirement reaches: fired timers, resolved dead letters, poison records); the
        runtime calls it every ``purge_interval_s``."""
        ...


class ErasedAsRetired:
    """For an OwnedData whose rows of an erased subject's workflows go as a retired
    workflow's do (they are all per workflow; none names the subject itself).

    A subclass names its ``workflow_tables`` (``schema.table``, each with a ``workflow_id``
    column): retiring deletes their rows of the workflows. One whose rows are reached
    otherwise overrides :meth:`retire`."""

    workflow_tables: ClassVar[tuple[str, ...]] = ()

    async def retire(
        self, conn: asyncpg.Connection, workflow_ids: Sequence[str], request: DataRequest
    ) -> dict[str, int]:
        if not self.workflow_tables:
            raise NotImplementedError
        removed = {}
        for table in self.workflow_tables:
            status = await conn.execute(
                f"DELETE FROM {table} WHERE workflow_id = ANY($1::text[])", list(workflow_ids)
            )
            removed[table] = rows_affected(status)
        return removed

    async def erase(
        self, conn: asyncpg.Connection, subject_hash: str, workflow_ids: Sequence[str], request: DataRequest
    ) -> dict[str, int]:
        return await self.retire(conn, workflow_ids, request)


Worker = Callable[[RuntimeHandle], Coroutine[Any, Any, None]]
Routes = Callable[[RuntimeHandle], APIRouter]


@dataclass(frozen=True)
class On:
    """Route ``event`` (a payload model class: type and the version the code reads) to ``handler``."""

    event: type[EventModel]
    handler: Handler
    timeout_s: float = 300.0
    max_attempts: int = 6
    """Transient failures are retried until this many attempts, then dead-lettered."""
    semantic_attempts: int = 3
    """Tries with validation feedback before a person is asked (review.requested)."""
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 300.0
    personal: bool = False
    """The handler reads the event's personal fields (``Personal[...]``): the runtime opens
    them first. Otherwise it finds them sealed (chorus.contracts.base.Sealed)."""


async def nothing_to_undo(event: Event[WorkflowEnded], state: Any, ctx: Context[Any]) -> Outcome[Any]:
    """The handler of ``workflow.ended`` for a service with nothing to compensate: the
    runtime records how the workflow ended, and drops (records, never handles) every later
    event of it; the timer service cancels its pending timers."""
    return Outcome()


WORKFLOW_END = On(WorkflowEnded, nothing_to_undo, timeout_s=30)
"""``handlers=[..., WORKFLOW_END]``: a service that keeps workflow state stops with it."""


@asynccontextmanager
async def no_deps(_: Any) -> AsyncIterator[None]:
    yield None


@dataclass(frozen=True)
class Reset:
    """What a service's ``on_reset`` is told when an operator resets a workflow to one of its
    events (chorus.resets): the request, and its checkpoint before and after the rollback
    (as stored: JSON, of the state version the service writes)."""

    envelope: Envelope
    """The request's (workflow.reset_requested): what the compensation's events follow."""
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    steps_undone: int
    now: datetime


@dataclass(frozen=True)
class ServiceSpec(Generic[S, D]):
    """The declaration of one deployable service (its ``service.py``)."""

    name: str
    version: str
    handlers: Sequence[On]
    produces: frozenset[str] = frozenset()
    """Event types the handlers may emit (runtime events such as retries are implicit)."""
    state: type[S] | None = None
    state_version: int = 1
    state_migrations: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)
    """from_version -> function producing from_version + 1, applied on load."""
    bootstrap: Callable[[Any], AbstractAsyncContextManager[D]] = no_deps  # type: ignore[assignment]
    """settings -> async context manager yielding the handlers' dependencies."""
    unexpected_max_attempts: int = 3
    migrations: Sequence[Callable[[asyncpg.Connection], Awaitable[None]]] = ()
    """DDL of the service's own tables, applied at start before any record is consumed."""
    workers: Sequence[Worker] = ()
    """Background loops beside the consumer (e.g. the timer service's firing loop)."""
    http_routes: Routes | None = None
    """The service's own API (a FastAPI router), served beside /health and /metrics; its
    routes declare their keys and roles (:mod:`chorus.web.apikeys`)."""
    owned_data: Sequence[OwnedData] = ()
    """The service's own per-workflow tables, retired with the workflow (retention)."""
    on_reset: Callable[[Reset, D], Awaitable[Outcome[Any]]] | None = None
    """How the service gives back what the steps a reset undid took (a reservation
    released): the events it emits and the effects it applies commit with the rollback.
    None: nothing to give back (the rollback of its checkpoint is all)."""
    per_workflow_order: bool = True
    """False for a stateless worker whose events of one workflow are independent of each
    other (the sub-tasks of a stage): they are handled at once, and one that is retrying
    does not hold the others back. Only without ``state``: order is what a state needs."""

    def __post_init__(self) -> None:
        if not self.per_workflow_order and self.state is not None:
            raise ValueError(f"{self.name}: per_workflow_order=False needs state=None")
        routes = {h.event.event_type: h for h in self.handlers}
        if len(routes) != len(self.handlers):
            raise ValueError(f"{self.name}: two handlers for one event type")
        object.__setattr__(self, "_route_table", routes)

    def edges(self) -> ServiceEdges:
        return ServiceEdges(
            name=self.name,
            consumes=frozenset(self.consumes()),
            produces=self.produces,
            runtime=True,
        )

    def upgraded(self, state: dict[str, Any], version: int) -> dict[str, Any]:
        """A checkpoint's ``state``, written at ``version``, brought up to this code's state
        version (forward only: NewerStateError for one a newer version wrote, PersistentError
        when a migration step is missing)."""
        if version > self.state_version:
            raise NewerStateError(
                f"the checkpoint of this workflow is state v{version}, written by a newer version of "
                f"{self.name}; this one ({self.version}) reads up to v{self.state_version}. Not "
                "handled and nothing written (its fields would be lost): run the newer version, "
                "then redrive"
            )
        while version < self.state_version:
            step = self.state_migrations.get(version)
            if step is None:
                raise PersistentError(f"no state migration from v{version} to v{version + 1} in {self.name}")
            state, version = step(state), version + 1
        return state

    def handler_for(self, event_type: str) -> On | None:
        table: dict[str, On] = self._route_table  # type: ignore[attr-defined]
        return table.get(event_type)

    def consumes(self) -> dict[str, int]:
        """event type -> version the service's code reads."""
        return {h.event.event_type: h.event.version for h in self.handlers}


def check_outcome(spec: ServiceSpec[Any, Any], outcome: object) -> None:
    """What the runtime refuses in a handler's answer (a code bug: dead letter at once):
    not an Outcome, or an event or timer of a type the service does not declare."""
    if not isinstance(outcome, Outcome):
        raise PersistentError(f"handler returned {type(outcome).__name__}, not an Outcome")
    for item in outcome.emit:
        event = item.event if isinstance(item, Emit) else item
        if event.event_type not in spec.produces:
            raise PersistentError(
                f"{spec.name} emitted {event.event_type}, which it does not declare "
                "in ServiceSpec.produces (and the registry does not list it as a producer)"
            )
    for timer in outcome.timers:
        if isinstance(timer, ScheduleTimer) and timer.event.event_type not in spec.produces:
            raise PersistentError(f"{spec.name} schedules {timer.event.event_type} without declaring it")
