"""What an error may repeat of what it refuses: a short prefix of a string, the kind of any
other value, never the value whole. Every error body goes through ``bounded`` (``error_body``),
so no raise site can answer with the 30 MB path it refused, or build it again in a message."""

from __future__ import annotations

import math
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


def bounded(value: Any, depth: int = 0) -> Any:
    """``value`` (an error's field) with every string cut to ``FIELD_CHARS`` and what nests
    deeper than ``FIELD_DEPTH`` named by ``echo``: the recursion stops at that constant depth,
    whatever the client sent."""
    if isinstance(value, str):
        return cut(value, FIELD_CHARS)
    if isinstance(value, float) and not math.isfinite(value):
        return echo(value)  # no JSON answer can hold it (a path of 1e400 parses as inf)
    if isinstance(value, bool | int | float) or value is None:
        return value if not isinstance(value, int) or value.bit_length() <= 64 else echo(value)
    if depth >= FIELD_DEPTH:
        return echo(value)
    if isinstance(value, list | tuple):
        return [bounded(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {cut(str(k), ECHO_CHARS): bounded(v, depth + 1) for k, v in value.items()}
    return echo(value)
