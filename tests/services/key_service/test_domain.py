"""The key service's rules without I/O. It has no handlers (erasure reaches its table
through the runtime's data requests), so what it decides is here: data keys rest only
wrapped, each under its own region's master key and bound to its key id."""

from __future__ import annotations

import base64
import re

import pytest
from cryptography.exceptions import InvalidTag
from pydantic import ValidationError

from chorus.platform.key_service.domain import (
    KID_PATTERN,
    DataKeyRequest,
    MasterKeys,
    new_data_key,
    new_kid,
    region_of,
)

MASTERS = MasterKeys.from_settings(
    {"eu-west": base64.b64encode(b"e" * 32).decode(), "us-east": base64.b64encode(b"u" * 32).decode()}
)


def test_a_wrapped_key_unwraps_under_its_own_id_only() -> None:
    kid, other = new_kid("eu-west"), new_kid("eu-west")
    key = new_data_key()
    wrapped = MASTERS.wrap(kid, key)
    assert key not in wrapped  # never at rest in clear
    assert MASTERS.unwrap(kid, wrapped) == key
    with pytest.raises(InvalidTag):  # a wrapped key copied to another id does not open
        MASTERS.unwrap(other, wrapped)


def test_a_key_id_names_its_region_and_only_that_regions_master_opens_it() -> None:
    kid = new_kid("us-east")
    assert re.fullmatch(KID_PATTERN, kid) and region_of(kid) == "us-east"
    assert MASTERS.holds("us-east") and not MASTERS.holds("ap-south")
    wrapped = MASTERS.wrap(kid, new_data_key())
    elsewhere = MasterKeys({"us-east": MASTERS.keys["eu-west"]})  # the wrong master under that name
    with pytest.raises(InvalidTag):
        elsewhere.unwrap(kid, wrapped)


def test_a_master_key_of_the_wrong_size_is_refused_naming_its_region() -> None:
    with pytest.raises(ValueError, match=r"CHORUS_MASTER_KEYS\[eu-west\] must be 32 bytes"):
        MasterKeys.from_settings({"eu-west": base64.b64encode(b"short").decode()})


@pytest.mark.parametrize(
    "body",
    [
        {"region": "EU", "workflow_id": "wf-1"},  # not a region name
        {"region": "eu-west", "workflow_id": "wf-1", "subject_hash": "md5:abc"},
        {"region": "eu-west", "workflow_id": "wf-1", "subject": "sam"},  # unknown field
        {"region": "eu-west", "workflow_id": ""},
    ],
)
def test_a_request_for_a_data_key_it_cannot_read_exactly_is_refused(body: dict[str, str]) -> None:
    DataKeyRequest.model_validate({"region": "eu-west", "workflow_id": "wf-1"})  # what it reads
    with pytest.raises(ValidationError):
        DataKeyRequest.model_validate(body)
