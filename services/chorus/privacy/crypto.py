"""Personal data sealed under per-subject keys: crypto-shredding.

A field its event model marks ``Personal[...]`` never leaves the service that wrote it in
clear. When the runtime builds an event it replaces each such value by a sealed token::

    chorus:sealed:v1:<key id>:<event id>:<base64url(nonce + AES-256-GCM ciphertext)>

under the data key of the envelope's subject (``subject_ref``), or of its workflow when it
names no subject, with the event id as associated data: a token copied into another event
does not open as that event's. The key id names the region whose key store holds the key
(``eu.3f2a…``). Erasing a subject destroys its keys in the key service (the ``key_service``
platform service): from then on every copy of its tokens — topics, dead letters, timers,
outbox rows, replays, backups — stays ciphertext, while the rest of every event (ids, types,
times, decisions, amounts) is replayable as before.

Handlers see tokens (:class:`~chorus.contracts.base.Sealed`) in personal fields unless they
declare ``On(..., personal=True)``; then the runtime opens the event's tokens first. Code
that holds a token (a checkpoint keeps one, an API shows one) opens it with
:meth:`Sealer.open`. A service reaches only the key stores of the regions it is configured
for (``CHORUS_KEY_STORES``): residency.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from chorus.base.errors import (
    KeyDestroyedError,
    KeyStoreUnavailableError,
    KeyUnknownError,
    KeyUnreachableError,
    PersistentError,
)
from chorus.contracts.base import CATALOG, KEYED_PATTERN, SEALED_PATTERN, SEALED_PREFIX, Sealed, is_sealed
from chorus.contracts.envelope import Envelope
from chorus.contracts.registry import Registry, personal_pointers
from chorus.contracts.strictjson import escape

log = logging.getLogger("chorus.privacy.crypto")
_TOKEN = re.compile(SEALED_PATTERN)
_KEYED = re.compile(KEYED_PATTERN)

KEYED_PREFIX = "hmac-sha256:"
POISON_SCOPE = "poison"
CACHE_SWEEP_AT = 10_000
"""Cached keys (of both kinds) beyond which expired ones are swept out."""
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
ERASED = "(erased)"
"""What a reader is shown in place of a value whose key was destroyed."""
ELSEWHERE = "(sealed in region {region})"
UNREADABLE = "(unreadable)"
"""What a reader is shown for a token that does not open (altered, or not a real one)."""
"""What a reader is shown for a value whose region's key store it cannot reach."""


def keyed_ref(secret: str, subject_ref: str) -> str:
    """The reference Chorus keeps for a data subject: HMAC-SHA256 of what the submitter
    named under a secret key (CHORUS_SUBJECT_KEY), so that neither the topics nor any
    ledger holds the reference itself, and a low-entropy one (an e-mail address, a customer
    number) cannot be recovered by guessing and hashing. Whatever the input (a submitter
    cannot pass a keyed reference off as its own to join another subject's data)."""
    digest = hmac.new(secret.encode(), subject_ref.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return KEYED_PREFIX + digest.hexdigest()


def as_keyed(secret: str, subject_ref: str) -> str:
    """What an operator names a subject by (erasure, access log): its reference, or the
    keyed form an envelope shows."""
    return subject_ref if _KEYED.match(subject_ref) else keyed_ref(secret, subject_ref)


def subject_hash(subject_ref: str) -> str:
    """How a subject is named outside the envelope (erasure requests, the key store):
    sha256 of its reference, which is itself a keyed reference (chorus.privacy.crypto.keyed_ref)."""
    return "sha256:" + hashlib.sha256(subject_ref.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class DataKey:
    kid: str
    key: bytes

    @property
    def region(self) -> str:
        return self.kid.split(".", 1)[0]


@dataclass(frozen=True)
class Scope:
    """Whose key seals a value: the subject's, or the workflow's when it names none."""

    region: str
    subject_hash: str | None
    workflow_id: str

    @property
    def cache_key(self) -> tuple[str, str]:
        return (self.region, self.subject_hash or f"workflow:{self.workflow_id}")


class KeyStore(Protocol):
    """One region's key store, as a service sees it (the key service's API; a cloud KMS could
    stand behind the same two calls)."""

    region: str

    async def data_key(self, scope: Scope) -> DataKey:
        """The scope's live data key, created on first use."""
        ...

    async def key(self, kid: str) -> bytes:
        """The key ``kid``; KeyDestroyedError once destroyed."""
        ...


@dataclass
class HttpKeyStore:
    """The key service's API (``POST /v1/data-keys``, ``GET /v1/data-keys/{kid}``)."""

    region: str
    url: str
    api_key: str
    client: httpx.AsyncClient

    async def data_key(self, scope: Scope) -> DataKey:
        body = {"region": scope.region, "subject_hash": scope.subject_hash, "workflow_id": scope.workflow_id}
        found = await self._call("POST", "/v1/data-keys", body)
        return DataKey(found["kid"], base64.b64decode(found["key"]))

    async def key(self, kid: str) -> bytes:
        found = await self._call("GET", f"/v1/data-keys/{kid}", None)
        return base64.b64decode(found["key"])

    async def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        try:
            response = await self.client.request(
                method,
                self.url.rstrip("/") + path,
                json=body,
                headers={"Authorization": f"Bearer {self.api_key}"},
            )
        except httpx.HTTPError as exc:
            raise KeyStoreUnavailableError(f"key store {self.region} ({self.url}): {exc!r}") from exc
        if response.status_code == 410:
            raise KeyDestroyedError(f"{path.rsplit('/', 1)[-1]}: erased ({response.text[:200]})")
        if response.status_code == 404 and method == "GET":
            raise KeyUnknownError(f"no data key {path.rsplit('/', 1)[-1]} in region {self.region}")
        if response.status_code >= 500:
            raise KeyStoreUnavailableError(f"key store {self.region} answered {response.status_code}")
        if response.status_code != 200:
            # 401/403/404/422: this service's configuration is wrong, not the record.
            raise KeyStoreUnavailableError(
                f"key store {self.region} refused {method} {path}: "
                f"{response.status_code} {response.text[:200]}"
            )
        found: dict[str, Any] = response.json()
        return found


@dataclass
class MemoryKeyStore:
    """A key store in memory, for handler tests and benchmarks of the sealing itself."""

    region: str = "local"
    keys: dict[str, bytes] = field(default_factory=dict)
    live: dict[tuple[str, str], str] = field(default_factory=dict)
    destroyed: set[str] = field(default_factory=set)

    async def data_key(self, scope: Scope) -> DataKey:
        kid = self.live.get(scope.cache_key)
        if kid is None:
            kid = f"{self.region}.{uuid.uuid4().hex}"
            self.keys[kid] = AESGCM.generate_key(bit_length=KEY_BYTES * 8)
            self.live[scope.cache_key] = kid
        return DataKey(kid, self.keys[kid])

    async def key(self, kid: str) -> bytes:
        if kid in self.destroyed or kid not in self.keys:
            raise KeyDestroyedError(f"key {kid} was destroyed")
        return self.keys[kid]

    def destroy(self, scope_key: tuple[str, str]) -> None:
        kid = self.live.pop(scope_key, None)
        if kid is not None:
            self.destroyed.add(kid)


def seal_value(key: DataKey, event_id: uuid.UUID | str, value: Any) -> Sealed:
    """``value`` (any JSON value) as a token bound to ``event_id``."""
    nonce = os.urandom(NONCE_BYTES)
    plain = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    sealed = AESGCM(key.key).encrypt(nonce, plain, str(event_id).encode())
    data = base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode()
    return Sealed(f"{SEALED_PREFIX}{key.kid}:{event_id}:{data}")


@dataclass(frozen=True)
class Token:
    kid: str
    event_id: str
    data: bytes

    @property
    def region(self) -> str:
        return self.kid.split(".", 1)[0]

    @classmethod
    def parse(cls, token: str) -> Token:
        """The token's parts; PersistentError for anything that is not one (it came from
        input: a dead letter or a clear 4xx, never an exception the caller did not expect)."""
        if not _TOKEN.match(token):
            raise PersistentError("a malformed sealed value (chorus:sealed:v1:<key id>:<event id>:<data>)")
        kid, event_id, data = token.removeprefix(SEALED_PREFIX).split(":", 2)
        try:
            raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        except (binascii.Error, ValueError):
            raise PersistentError("a sealed value whose data is not base64url") from None
        if len(raw) < NONCE_BYTES + TAG_BYTES:
            raise PersistentError("a sealed value too short to be AES-GCM ciphertext")
        return cls(kid, event_id, raw)

    def open(self, key: bytes) -> Any:
        try:
            plain = AESGCM(key).decrypt(
                self.data[:NONCE_BYTES], self.data[NONCE_BYTES:], self.event_id.encode()
            )
        except InvalidTag:
            raise PersistentError(
                f"a sealed value under {self.kid} does not open: altered, or not this event's"
            ) from None
        return json.loads(plain)


@dataclass(frozen=True)
class Opened:
    """A value with its tokens opened, and what that took."""

    value: Any
    pointers: list[str]
    """Where tokens were opened (JSON pointers): what the access log records."""
    erased: list[str]
    """Where tokens could not be opened (destroyed or unreachable keys)."""


class Sealer:
    """Seals an envelope's personal fields and opens tokens, with keys cached briefly.

    A data key is cached for ``ttl_s`` (a destroyed key stops sealing within that time at
    the latest; a service that reads the erasure request forgets it at once)."""

    def __init__(
        self,
        registry: Registry,
        stores: Mapping[str, KeyStore],
        *,
        region: str,
        regions: Mapping[str, str] | None = None,
        ttl_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.stores = dict(stores)
        self.region = region
        """Where this service creates keys for workflow types ``regions`` does not name."""
        self.regions = dict(regions or {})
        """workflow type -> region whose key store holds its subjects' keys (residency)."""
        self.ttl_s = ttl_s
        self.monotonic = monotonic
        self._data_keys: dict[tuple[str, str], tuple[float, DataKey]] = {}
        self._keys: dict[str, tuple[float, bytes | None]] = {}
        self._pointers: dict[tuple[str, int], list[str]] = {}
        self._pending: dict[tuple[str, str], asyncio.Future[DataKey]] = {}

    # -- sealing ---------------------------------------------------------------------------

    def pointers(self, event_type: str, version: int) -> list[str]:
        key = (event_type, version)
        found = self._pointers.get(key)
        if found is None:
            # The registry's schema, or the model's own when the registry has none (an event
            # type a test or a bench registers): a marked field is sealed either way.
            schema = self.registry.schemas.get(key)
            if schema is None and key in CATALOG:
                schema = CATALOG[key].model_json_schema()
            found = self._pointers[key] = personal_pointers(schema) if schema else []
        return found

    def scope(self, envelope: Envelope) -> Scope:
        # Dead letters of records that were no event (poison, read by position) share one
        # key: a flood of hostile records must not make a key each.
        workflow_id = POISON_SCOPE if envelope.workflow_id.startswith("poison:") else envelope.workflow_id
        return Scope(
            region=self.regions.get(envelope.workflow_type, self.region),
            subject_hash=subject_hash(envelope.subject_ref) if envelope.subject_ref else None,
            workflow_id=workflow_id,
        )

    async def seal(self, envelope: Envelope) -> Envelope:
        """``envelope`` with every personal value sealed under its scope's key, bound to its
        event id (values sealed for another event are opened and sealed again)."""
        pointers = self.pointers(envelope.event_type, envelope.schema_version)
        if not pointers:
            return envelope
        payload = envelope.payload
        changed: dict[str, Any] | None = None
        key: DataKey | None = None  # one per envelope, fetched when a field needs it
        for ptr in pointers:
            name = ptr.removeprefix("/")
            value = payload.get(name)
            if value is None or value == "" or "/" in name:
                continue  # nothing personal to hide (and marked fields are top-level ones)
            key = key or await self.data_key(self.scope(envelope))
            if is_sealed(value):
                token = Token.parse(value)
                if token.event_id == str(envelope.event_id):
                    continue
                # Only a token of this very scope is opened to be sealed again for this event
                # (a gate copying a reviewer's comment into its decision): anyone could paste
                # another subject's token, and opening it here would hand its data over.
                if token.kid != key.kid:
                    raise PersistentError(f"{ptr}: a value sealed for another subject or workflow")
                value = token.open(key.key)
            changed = changed if changed is not None else dict(payload)
            changed[name] = str(seal_value(key, envelope.event_id, value))
        return envelope if changed is None else envelope.model_copy(update={"payload": changed})

    def unbound(self, envelope: Envelope) -> list[str]:
        """The personal fields of ``envelope`` holding a token sealed for another event: a
        copy of someone else's data (only the runtime re-seals a copy, for its own scope)."""
        found = []
        for ptr in self.pointers(envelope.event_type, envelope.schema_version):
            value = envelope.payload.get(ptr.removeprefix("/"))
            if is_sealed(value) and f":{envelope.event_id}:" not in value:
                found.append(ptr)
        return found

    def misplaced(self, envelope: Envelope) -> list[str]:
        """Where ``envelope`` holds a sealed value outside its personal fields. Sealing puts
        a token only in a personal field of the event it is sealed for, so one anywhere else
        was pasted there; a reader shown the event would have it opened for them, someone
        else's data under another event's name. An envelope carried whole (the event a timer
        fires) is judged by its own type's personal fields."""
        return self._misplaced(envelope.event_type, envelope.schema_version, envelope.payload, "")

    def _misplaced(self, event_type: str, version: int, payload: Mapping[str, Any], prefix: str) -> list[str]:
        # Only a known type's pointers: a carried envelope may name any type and version,
        # and each would otherwise stay in the cache of pointers.
        known = (event_type, version) in self.registry.schemas or (event_type, version) in CATALOG
        personal = set(self.pointers(event_type, version)) if known else set()
        found: list[str] = []

        def walk(item: Any, where: str) -> None:
            if is_sealed(item):
                found.append(where)
            elif isinstance(item, dict) and _carried_envelope(item):
                found.extend(
                    self._misplaced(
                        item["event_type"], item["schema_version"], item["payload"], f"{where}/payload"
                    )
                )
            elif isinstance(item, dict):
                for k, v in item.items():
                    walk(v, f"{where}/{escape(str(k))}")
            elif isinstance(item, list):
                for i, v in enumerate(item):
                    walk(v, f"{where}/{i}")

        for name, value in payload.items():
            pointer = f"/{escape(str(name))}"
            if pointer not in personal:
                walk(value, prefix + pointer)
        return found

    async def data_key(self, scope: Scope) -> DataKey:
        cache_key = scope.cache_key
        cached = self._data_keys.get(cache_key)
        now = self.monotonic()
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        pending = self._pending.get(cache_key)
        if pending is not None:  # concurrent lanes of one workflow ask once
            return await asyncio.shield(pending)
        future: asyncio.Future[DataKey] = asyncio.get_running_loop().create_future()
        self._pending[cache_key] = future
        try:
            key = await self._store(scope.region).data_key(scope)
            future.set_result(key)
        except asyncio.CancelledError:
            # This caller was cancelled (a client went away): the others asking for the same
            # key are not; they see an outage and try again.
            future.set_exception(KeyStoreUnavailableError("the key request was cancelled"))
            future.exception()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody else need see it
            raise
        finally:
            del self._pending[cache_key]
        self._evict(now)
        self._data_keys[cache_key] = (now, key)
        self._keys[key.kid] = (now, key.key)
        return key

    def _evict(self, now: float) -> None:
        """Drop expired entries once the caches grow (one per subject seen, else for ever)."""
        if len(self._data_keys) + len(self._keys) < CACHE_SWEEP_AT:
            return
        for scope in [k for k, (at, _) in self._data_keys.items() if now - at >= self.ttl_s]:
            del self._data_keys[scope]
        for kid in [k for k, (at, _) in self._keys.items() if now - at >= self.ttl_s]:
            del self._keys[kid]

    # -- opening ---------------------------------------------------------------------------

    async def open(self, token: str) -> Any:
        """The value sealed in ``token`` (KeyDestroyedError once erased)."""
        parsed = Token.parse(token)
        return parsed.open(await self._key(parsed.kid))

    async def open_event(self, envelope: Envelope) -> dict[str, Any]:
        """The payload with its own tokens opened (those of its personal fields)."""
        payload = dict(envelope.payload)
        for ptr in self.pointers(envelope.event_type, envelope.schema_version):
            name = ptr.removeprefix("/")
            value = payload.get(name)
            if is_sealed(value):
                token = Token.parse(value)
                if token.event_id != str(envelope.event_id):
                    raise PersistentError(f"{ptr} is sealed for event {token.event_id}, not this one")
                payload[name] = token.open(await self._event_key(envelope, token))
        return payload

    async def _event_key(self, envelope: Envelope, token: Token) -> bytes:
        """The key of an event's own token: almost always its scope's live key, which the
        handler's answer is sealed under next, so one request serves both."""
        scope = self.scope(envelope)
        if scope.region == token.region and scope.region in self.stores:
            key = await self.data_key(scope)
            if key.kid == token.kid:
                return key.key
        return await self._key(token.kid)

    async def open_all(self, value: Any, pointer: str = "") -> Opened:
        """``value`` with every token in it opened, wherever it is (what an API shows):
        a token whose key was destroyed shows as ERASED, one of an unreachable region says
        so. Only the key store being down raises."""
        opened: list[str] = []
        erased: list[str] = []

        async def walk(item: Any, where: str) -> Any:
            if is_sealed(item):
                try:
                    result = await self.open(str(item))
                except KeyDestroyedError:
                    erased.append(where or "/")
                    return ERASED
                except KeyUnreachableError:
                    erased.append(where or "/")
                    return ELSEWHERE.format(region=str(item).split(":")[3].split(".")[0])
                except PersistentError:  # forged or garbled: the rest of the answer stands
                    erased.append(where or "/")
                    return UNREADABLE
                opened.append(where or "/")
                return await walk(result, where)
            if isinstance(item, dict):
                return {k: await walk(v, f"{where}/{escape(str(k))}") for k, v in item.items()}
            if isinstance(item, list):
                return [await walk(v, f"{where}/{i}") for i, v in enumerate(item)]
            return item

        return Opened(await walk(value, pointer), opened, erased)

    def forget(self, subject: str | None, workflow_ids: list[str]) -> None:
        """Drop cached keys of an erased subject and its workflows (the erasure request)."""
        names = {f"workflow:{w}" for w in workflow_ids} | ({subject} if subject else set())
        for cache_key in [k for k in self._data_keys if k[1] in names]:
            del self._data_keys[cache_key]
        # Keys fetched to open tokens do not say whose they are: all of them are fetched again.
        self._keys.clear()

    async def _key(self, kid: str) -> bytes:
        cached = self._keys.get(kid)
        now = self.monotonic()
        if cached is not None and now - cached[0] < self.ttl_s:
            if cached[1] is None:
                raise KeyDestroyedError(f"key {kid} was destroyed (its subject was erased)")
            return cached[1]
        try:
            key = await self._store(kid.split(".", 1)[0]).key(kid)
        except KeyDestroyedError:
            self._keys[kid] = (now, None)
            raise
        self._evict(now)
        self._keys[kid] = (now, key)
        return key

    def _store(self, region: str) -> KeyStore:
        store = self.stores.get(region)
        if store is None:
            raise KeyUnreachableError(
                f"personal data of region {region!r}: this service reaches the key stores of "
                f"{', '.join(sorted(self.stores)) or 'no region'} only (CHORUS_KEY_STORES)"
            )
        return store


SealFn = Callable[[Envelope], Awaitable[Envelope]]


def _carried_envelope(value: Mapping[str, Any]) -> bool:
    """``value`` is an envelope carried whole (a timer's fire), shaped enough to judge."""
    return (
        isinstance(value.get("event_type"), str)
        and isinstance(value.get("schema_version"), int)
        and isinstance(value.get("payload"), dict)
    )
