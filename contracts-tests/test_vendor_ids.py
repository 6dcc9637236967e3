"""Vendor ids are compared and deduplicated by exact value: normalised, and never hiding characters."""

from __future__ import annotations

import re
import unicodedata

import pytest
from pydantic import TypeAdapter, ValidationError

from chorus.contracts.base import VendorId, invisible_characters

VENDOR: TypeAdapter[str] = TypeAdapter(VendorId)


def test_compatibility_forms_are_normalised_so_full_width_is_the_same_vendor() -> None:
    assert (
        VENDOR.validate_python("\uff56\uff45\uff4e\uff44\uff4f\uff52\uff0d\uff41\uff43\uff4d\uff45")
        == "vendor-acme"
    )
    assert VENDOR.validate_python("Müller & Söhne") == "Müller & Söhne"  # any script is welcome


@pytest.mark.parametrize(
    ("vendor", "named"),
    [
        ("vendor\u200b-acme", "U+200B ZERO WIDTH SPACE"),
        ("vendor-\u202eemca", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("\u2066vendor-acme\u2069", "U+2066 LEFT-TO-RIGHT ISOLATE"),
        ("vendor\u00ad-acme", "U+00AD SOFT HYPHEN"),
        ("vendor\ufeff", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
        ("vendor-acme\U000e0041", "U+E0041 TAG LATIN CAPITAL LETTER A"),
    ],
)
def test_an_id_with_invisible_or_bidi_control_characters_is_refused_naming_them(
    vendor: str, named: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        VENDOR.validate_python(vendor)
    assert named in str(refused.value)


def test_the_json_schema_pattern_refuses_what_the_model_refuses_in_the_basic_plane() -> None:
    """Consumers in other languages validate with the pattern; it must not let through
    what the model refuses, nor refuse what it accepts (surrogates aside: no text holds them)."""
    pattern = re.compile(VENDOR.json_schema()["pattern"])

    def accepted(char: str) -> bool:
        return not invisible_characters(unicodedata.normalize("NFKC", char))

    disagree = [
        f"U+{cp:04X}"
        for cp in range(0x10000)
        if not 0xD800 <= cp <= 0xDFFF and bool(pattern.match(chr(cp))) != accepted(chr(cp))
    ]
    assert disagree == []
