"""The JSON body parser of every API view (settings: DEFAULT_PARSER_CLASSES)."""

from __future__ import annotations

import codecs
import json
import math
from itertools import compress
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]
from rest_framework.utils.json import strict_constant

# The deepest a request body may nest (objects and lists): the service's own shapes nest four
# deep; a body deeper is refused before anything reads, checks or repeats its values (a path
# that was a list 990 deep overflowed the stack where a refusal named it).
MAX_BODY_NESTING = 32


def too_deep() -> ParseError:
    # DRF's ParseError, not a DomainError: DRF imports this module (DEFAULT_PARSER_CLASSES)
    # while edge.exceptions imports DRF. The handler answers it in the one error shape.
    return ParseError(f"the body nests deeper than {MAX_BODY_NESTING} levels", code="body_too_deep")


# What json.loads makes of objects and lists (these types exactly).
_CONTAINERS = (dict, list)


def check_nesting(value: Any) -> Any:
    """``value`` (a parsed body) once it nests at most ``MAX_BODY_NESTING`` deep; walked with a
    stack of its own, never by recursion."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        current, depth = pending.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth >= MAX_BODY_NESTING:
            raise too_deep()
        # The children that nest, picked in C: a list of 5,000,000 numbers where a path
        # belongs costs 0.05 CPU-s, not the half second of a Python loop over it.
        nested = compress(children, map(_CONTAINERS.__contains__, map(type, children)))
        pending += [(child, depth + 1) for child in nested]
    return value


def finite_float(text: str) -> float:
    """A JSON number with a fraction or an exponent, refused when no float holds it (``1e400``
    would be ``inf``, which no JSON answer can repeat: DRF's renderer failed on it with a 500),
    as the pack bodies' parser (yajl) refuses it."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:64]} is out of a float's range")
    return value


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, with a body nested deeper than ``MAX_BODY_NESTING`` a 400 (whether
    Python's parser reads it or runs out of stack first), and a number out of a float's range
    (``1e400``) a 400 as ``NaN`` and ``Infinity`` are."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        decoded = codecs.getreader(get_encoding(parser_context or {}))(stream)
        try:
            parsed = json.load(decoded, parse_constant=strict_constant, parse_float=finite_float)
        except RecursionError:
            raise too_deep() from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        return check_nesting(parsed)
