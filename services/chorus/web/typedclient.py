"""HTTP between services, typed at both ends.

A client reads another service's answer into the model that service publishes
(``chorus.contracts.api.<service>``) with :func:`answer`: a malformed answer (not JSON,
a field missing or of the wrong type) is an :class:`UnexpectedAnswerError` naming the URL
and the field, which the caller turns into "that service is unavailable" (a 503, a page
saying so, an exit code), never a ``KeyError`` deep in its own code.

A service's routes are module-level functions on an ``APIRouter``; what they work with (the
runtime handle, the service's dependencies) reaches them through FastAPI's dependency
injection: :func:`bound` serves the router with values each request carries, and
:func:`provided` is the dependency that hands one of them to a route.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar, cast

import httpx
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, TypeAdapter, ValidationError

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class UnexpectedAnswerError(Exception):
    """Another service answered with something its published model does not allow: a bug
    or a version skew on its side, not the caller's input. Callers report the service as
    unavailable (its answer is unusable), naming what was wrong."""


def _what(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = "/" + "/".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}"


def answer(model: type[M], response: httpx.Response) -> M:
    """The body of ``response`` as ``model`` (:class:`UnexpectedAnswerError` when it is not)."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise UnexpectedAnswerError(
            f"{response.request.method} {response.request.url} answered {response.status_code} with "
            f"a body that is not its {model.__name__}: {_what(exc)}"
        ) from None


@cache
def _adapter(shape: Any) -> TypeAdapter[Any]:
    return TypeAdapter(shape)


def answer_as(shape: Any, response: httpx.Response) -> Any:
    """The body of ``response`` as any type pydantic validates (a union, a list of models)."""
    try:
        return _adapter(shape).validate_json(response.content)
    except ValidationError as exc:
        raise UnexpectedAnswerError(
            f"{response.request.method} {response.request.url} answered {response.status_code} with "
            f"a body that is not what its API publishes: {_what(exc)}"
        ) from None


def bound(router: APIRouter, **values: object) -> APIRouter:
    """``router`` served with ``values``: every request to one of its routes carries them
    (``request.state.<name>``) before any dependency of the route runs (FastAPI solves a
    router's dependencies first), so :func:`provided` finds them. Each call binds anew:
    two services in one process (tests) serve the same module-level router with their own."""

    async def carry(request: Request) -> None:
        for name, value in values.items():
            setattr(request.state, name, value)

    served = APIRouter()
    served.include_router(router, dependencies=[Depends(carry)])
    return served


def provided(name: str, kind: type[T]) -> Callable[[Request], T]:
    """A dependency handing a route the value :func:`bound` named ``name`` (of ``kind``)."""

    def value(request: Request) -> T:
        found = getattr(request.state, name, None)
        if found is None:
            raise RuntimeError(f"no {name} on this request: serve the router with bound(router, {name}=...)")
        return cast(T, found)

    value.__name__ = f"provided_{name}"
    return value
