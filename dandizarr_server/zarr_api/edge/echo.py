"""What an error may repeat of what it refuses: a short prefix of a string, the kind of any
other value, never the value whole, and of a list its first items and how many it had. Every
error body goes through ``bounded_fields`` (``error_body``), so no raise site can answer with
the 30 MB path it refused, the 5,000,000-item list a client sent as a path, or every one of a
batch's 100,000 refused members."""

from __future__ import annotations

import json
import math
from itertools import islice
from typing import Any

from dandizarr.objectstore.keys import MAX_KEY_BYTES

# A value a message names: this many characters of it, then how long it was.
ECHO_CHARS = 64
# A detail message as a whole.
DETAIL_CHARS = 2048
# A string in an error's fields (``paths``, ``missing``, ...): four times the longest key
# storage takes, so every path a client must act on (a missing file to send again) arrives
# whole, older ones included (names an archive holds stay readable past today's rules).
FIELD_CHARS = 4 * MAX_KEY_BYTES
# Containers in an error's fields: the service's own shapes nest three deep ({"paths": [{"path":
# ...}]}); deeper than this, a value is a client's, refused, and not repeated.
FIELD_DEPTH = 4
# Items of a list (keys of an object) an error repeats. A field that is a list (``paths``,
# ``missing``) names its first LISTED_ITEMS and, when it had more, says how many in
# ``<field>_count``; a longer list or object inside a field (a client's value) is named by its
# kind and length.
LISTED_ITEMS = 100
# A value an error's fields name as refused (each path of a batch's ``paths`` problems): up to
# the longest key storage takes, so a path refused for what it holds arrives whole and one
# refused for its length by that much of it and its length.
REFUSED_CHARS = MAX_KEY_BYTES
# An error's fields as a whole, in characters of JSON: eight of the longest keys, or about a
# hundred short paths each with a line about it. Past it a list names no more items (its count
# says how many it had; a client sends those again and asks again) and a value is named by its
# kind. An error body is then at most ~12 KB, whatever was refused.
FIELDS_CHARS = 8 * MAX_KEY_BYTES
_CUT = "…"


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}{_CUT} ({len(text):,} characters)"


def echo(value: object) -> str:
    """How a message names a value it refuses: a string's first ``ECHO_CHARS`` characters
    (quoted, as ``repr`` does), a number's first digits, and for anything else its kind."""
    if isinstance(value, str):
        return repr(value[:ECHO_CHARS]) + (
            f"{_CUT} ({len(value):,} characters)" if len(value) > ECHO_CHARS else ""
        )
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int | float):
        # An int of a million digits costs quadratic time to print: say its size instead.
        if isinstance(value, int) and value.bit_length() > 64:
            return f"an integer of {value.bit_length():,} bits"
        return cut(repr(value), ECHO_CHARS)
    if isinstance(value, list | tuple):
        return f"a list of {len(value):,} items"
    if isinstance(value, dict):
        return f"an object of {len(value):,} keys"
    return f"a {type(value).__name__}"


def refused(value: object) -> object:
    """How an error's fields name a value it refuses: a string up to ``REFUSED_CHARS``,
    anything else as ``bounded_fields`` will."""
    return cut(value, REFUSED_CHARS) if isinstance(value, str) else value


def bounded_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """An error's fields (``error_body``'s ``extra``) as they may be answered: every string cut
    to ``FIELD_CHARS``, every list to ``LISTED_ITEMS`` items, what nests deeper than
    ``FIELD_DEPTH`` or does not fit in ``FIELDS_CHARS`` named by ``echo``, a number JSON cannot
    hold (``inf``, an integer past 64 bits) named too. The walk stops at a constant depth and
    once the characters are spent, whatever the client sent."""
    budget = _Budget(FIELDS_CHARS)
    shown: dict[str, Any] = {}
    for name, value in islice(fields.items(), LISTED_ITEMS):
        key = budget.key(name)
        if isinstance(value, list | tuple):
            items = budget.items(value, 1)
            shown[key] = items
            if len(items) < len(value):
                shown[budget.key(f"{key}_count")] = budget.value(len(value), 1)
        else:
            shown[key] = budget.value(value, 1)
    return shown


class _Budget:
    """The characters of JSON an error's fields may still take."""

    def __init__(self, chars: int) -> None:
        self.left = chars

    def items(self, values: list[Any] | tuple[Any, ...], depth: int) -> list[Any]:
        """The first items of ``values`` that fit whole, at most ``LISTED_ITEMS``; the first
        always (its strings cut shorter when they do not fit)."""
        shown: list[Any] = []
        for item in islice(values, LISTED_ITEMS):
            if shown and self.left <= 0:
                break
            value = self.value(item, depth + 1)
            if shown and self.left < 0:
                break  # it did not fit whole: left to the count
            shown.append(value)
        return shown

    def key(self, name: object) -> str:
        key = cut(str(name), ECHO_CHARS)
        self.left -= len(json.dumps(key)) + 2
        return key

    def value(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            text = cut(value, min(FIELD_CHARS, max(self.left, ECHO_CHARS)))
            self.left -= len(json.dumps(text))
            return text
        if value is None or isinstance(value, bool) or _plain_number(value):
            self.left -= len(repr(value))
            return value
        if isinstance(value, list | tuple | dict) and depth < FIELD_DEPTH:
            whole = self._container(value, depth)
            if whole is not None:
                return whole
        named = echo(value)
        self.left -= len(named) + 2
        return named

    def _container(self, value: list[Any] | tuple[Any, ...] | dict[Any, Any], depth: int) -> Any:
        """``value`` with its items bounded, or None when it is longer than ``LISTED_ITEMS``
        or does not fit."""
        if len(value) > LISTED_ITEMS:
            return None
        self.left -= 2
        if not isinstance(value, dict):
            items = self.items(value, depth)
            return items if len(items) == len(value) else None
        shown: dict[str, Any] = {}
        for key, item in value.items():
            if self.left <= 0:
                return None
            shown[self.key(key)] = self.value(item, depth + 1)
        return shown if len(shown) == len(value) else None


def _plain_number(value: object) -> bool:
    """A number JSON holds as it is: an integer within 64 bits, a finite float."""
    if isinstance(value, int):
        return value.bit_length() <= 64
    return isinstance(value, float) and math.isfinite(value)
