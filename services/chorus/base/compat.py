"""What Python 3.11 added that Chorus uses, for Python 3.10 as well.

On 3.11 and later these are the standard library's own; on 3.10 a small equivalent.

- :class:`StrEnum`: an enum whose members are strings, and whose ``str()`` and
  ``format()`` are the value (an f-string, a CLI choice, a label).
- :func:`fromisoformat`: ``datetime.fromisoformat`` as 3.11 reads it. On 3.10 it also
  takes what 3.11 added that an operator or a JSON API writes: a trailing ``Z``, any
  number of fractional-second digits (``.5``, ``,25``), an offset without its colon or
  minutes (``+0200``, ``+02``). The basic format (``20260301T1030``) and week dates
  still need 3.11.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime

__all__ = ["StrEnum", "fromisoformat"]

if sys.version_info >= (3, 11):
    from enum import StrEnum

    fromisoformat = datetime.fromisoformat
else:
    from enum import Enum

    class StrEnum(str, Enum):
        """3.11's ``enum.StrEnum``: str() and format() give the value, auto() the lowercase name."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, format_spec: str) -> str:
            return str.__format__(str.__str__(self), format_spec)

        @staticmethod
        def _generate_next_value_(name: str, start: int, count: int, last_values: list[object]) -> str:
            return name.lower()

    # After the date (YYYY-MM-DD, which 3.10 reads) and the separator: the time, then an offset.
    _FRACTION = re.compile(r"(:\d{2})[.,](\d+)")
    _OFFSET = re.compile(r"([+-])(\d{2})(?::?(\d{2}))?$")

    def _fraction(match: re.Match[str]) -> str:
        return f"{match.group(1)}.{match.group(2)[:6].ljust(6, '0')}"

    def fromisoformat(date_string: str) -> datetime:
        """``datetime.fromisoformat`` with 3.11's ``Z``, fractions and offsets (module doc)."""
        try:
            return datetime.fromisoformat(date_string)
        except ValueError:
            # A separator and an hour at least after the date, or nothing 3.10 lacks.
            date, sep_hour, rest = date_string[:10], date_string[10:13], date_string[13:]
            if len(sep_hour) < 3 or not sep_hour[1:].isdigit():
                raise
        if rest.endswith("Z"):
            rest = rest[:-1] + "+00:00"
        rest = _FRACTION.sub(_fraction, rest)
        rest = _OFFSET.sub(lambda m: f"{m.group(1)}{m.group(2)}:{m.group(3) or '00'}", rest)
        return datetime.fromisoformat(date + sep_hour + rest)
