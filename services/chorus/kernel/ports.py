"""What the kernel asks of the feature packages, without importing them: sealing personal
data (``chorus.privacy.crypto.Sealer``) and signing the events that carry authority
(``chorus.privacy.signing.Signer``). A service without them runs the kernel alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from chorus.contracts.envelope import Envelope


class Sealing(Protocol):
    """Seals the personal fields of what a service publishes; opens them for those that read them."""

    async def seal(self, envelope: Envelope) -> Envelope:
        """``envelope`` with every personal value sealed for it."""
        ...

    async def open_event(self, envelope: Envelope) -> dict[str, Any]:
        """The payload with the event's own sealed values opened (KeyDestroyedError: erased;
        KeyStoreUnavailableError: try again later)."""
        ...

    async def open(self, token: str) -> Any:
        """One sealed value a handler holds, opened."""
        ...


class Signer(Protocol):
    """Signs the records of the event types the registry says its service produces."""

    @property
    def service(self) -> str: ...

    def header(self, value: bytes) -> tuple[str, bytes]:
        """The signature header for a record whose value is ``value``."""
        ...


class Verifying(Protocol):
    """Checks that a record of a signed event type comes from the producer the registry
    names (UnauthorizedError otherwise); records of other types pass."""

    def check(
        self, envelope: Envelope, value: bytes | None, headers: Sequence[tuple[str, bytes]], /
    ) -> None: ...
