"""What the key service decides, without I/O: key ids, wrapping data keys under a
region's master key, and the shape of its API's requests.

A data key never rests in clear: it is stored wrapped (AES-GCM under the region's master
key, with the key id as associated data, so a wrapped key moved to another id does not
unwrap). :class:`KeyWrapping` is the seam where a cloud KMS replaces the local master key:
``wrap``/``unwrap`` are its Encrypt/Decrypt with the key id as encryption context.
"""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import dataclass
from typing import Protocol

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel, ConfigDict, Field

from chorus.privacy.crypto import KEY_BYTES, NONCE_BYTES

REGION_PATTERN = r"^[a-z0-9-]{1,40}$"
KID_PATTERN = r"^[a-z0-9-]{1,40}\.[0-9a-f]{32}$"


class KeyWrapping(Protocol):
    """Wraps and unwraps data keys for the regions it holds (a master key each, or a KMS)."""

    def holds(self, region: str) -> bool: ...

    def wrap(self, kid: str, key: bytes) -> bytes: ...

    def unwrap(self, kid: str, wrapped: bytes) -> bytes: ...


@dataclass(frozen=True)
class MasterKeys:
    """Local master keys, one per region, from configuration (CHORUS_MASTER_KEYS)."""

    keys: dict[str, bytes]

    @classmethod
    def from_settings(cls, configured: dict[str, str]) -> MasterKeys:
        keys: dict[str, bytes] = {}
        for region, encoded in configured.items():
            key = base64.b64decode(encoded, validate=True)
            if len(key) != KEY_BYTES:
                raise ValueError(f"CHORUS_MASTER_KEYS[{region}] must be {KEY_BYTES} bytes, base64")
            keys[region] = key
        return cls(keys)

    def holds(self, region: str) -> bool:
        return region in self.keys

    def wrap(self, kid: str, key: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + AESGCM(self.keys[region_of(kid)]).encrypt(nonce, key, kid.encode())

    def unwrap(self, kid: str, wrapped: bytes) -> bytes:
        return AESGCM(self.keys[region_of(kid)]).decrypt(
            wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], kid.encode()
        )


def region_of(kid: str) -> str:
    return kid.split(".", 1)[0]


def new_kid(region: str) -> str:
    return f"{region}.{uuid.uuid4().hex}"


def new_data_key() -> bytes:
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


class DataKeyRequest(BaseModel):
    """POST /v1/data-keys: the live key of a subject (or of a workflow without one)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    region: str = Field(pattern=REGION_PATTERN)
    subject_hash: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    workflow_id: str = Field(min_length=1, max_length=200)


class DataKeyAnswer(BaseModel):
    kid: str
    key: str = Field(description="the data key, base64")
