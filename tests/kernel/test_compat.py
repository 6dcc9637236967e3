"""chorus.base.compat behaves as Python 3.11's StrEnum and fromisoformat on every version."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from enum import auto

import pytest

from chorus.base.compat import StrEnum, fromisoformat


class Colour(StrEnum):
    RED = "red"
    DARK_BLUE = auto()


def test_a_str_enum_member_is_its_value_wherever_it_is_shown() -> None:
    assert isinstance(Colour.RED, str)
    assert {"red": 1}[Colour.RED] == 1  # equal to its value, and hashed as it is
    assert Colour("red") is Colour.RED
    assert str(Colour.RED) == f"{Colour.RED}" == format(Colour.RED) == "%s" % Colour.RED == "red"  # noqa: UP031
    assert f"[{Colour.RED:>5}]" == "[  red]"
    assert Colour.DARK_BLUE.value == "dark_blue"
    assert repr(Colour.RED) == "<Colour.RED: 'red'>"


UTC = timezone.utc
TWO = timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-03-01", datetime(2026, 3, 1)),
        ("2026-03-01T10", datetime(2026, 3, 1, 10)),
        ("2026-03-01T10:30:00+02:00", datetime(2026, 3, 1, 10, 30, tzinfo=TWO)),
        # What 3.11 added.
        ("2026-03-01T10:30:00Z", datetime(2026, 3, 1, 10, 30, tzinfo=UTC)),
        ("2026-03-01T10Z", datetime(2026, 3, 1, 10, tzinfo=UTC)),
        ("2026-03-01 10:30:00.5Z", datetime(2026, 3, 1, 10, 30, 0, 500000, tzinfo=UTC)),
        ("2026-03-01T10:30:00.1234567Z", datetime(2026, 3, 1, 10, 30, 0, 123456, tzinfo=UTC)),
        ("2026-03-01T10:30:00,25+02:00", datetime(2026, 3, 1, 10, 30, 0, 250000, tzinfo=TWO)),
        ("2026-03-01T10:30:00+0200", datetime(2026, 3, 1, 10, 30, tzinfo=TWO)),
        ("2026-03-01T10:30:00+02", datetime(2026, 3, 1, 10, 30, tzinfo=TWO)),
    ],
)
def test_an_iso_time_reads_as_python_3_11_reads_it(text: str, moment: datetime) -> None:
    parsed = fromisoformat(text)
    assert parsed == moment
    assert parsed.utcoffset() == moment.utcoffset()


@pytest.mark.parametrize(
    "text",
    ["", "x", "2026-03-01Z", "2026-03-01T10:30:00z", "2026-03-01T25:00Z", "2026-03-01T10:30:00+02:00Z"],
)
def test_what_python_3_11_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        fromisoformat(text)


def test_they_are_the_standard_librarys_wherever_it_has_them() -> None:
    """From 3.11 on the standard library's own; on 3.10 (which has no StrEnum and a
    narrower fromisoformat) the equivalents above."""
    import enum

    if sys.version_info >= (3, 11):
        assert StrEnum is enum.StrEnum  # type: ignore[attr-defined,unused-ignore]
        assert fromisoformat == datetime.fromisoformat
    else:
        assert not hasattr(enum, "StrEnum")
        assert fromisoformat != datetime.fromisoformat
