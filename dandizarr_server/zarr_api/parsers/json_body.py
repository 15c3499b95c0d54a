"""The JSON body parser of every API view (settings: DEFAULT_PARSER_CLASSES)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

# The deepest a request body may nest (objects and lists): the service's own shapes nest four
# deep; a body deeper is refused before anything reads, checks or repeats its values (a path
# that was a list 990 deep overflowed the stack where a refusal named it).
MAX_BODY_NESTING = 32


def too_deep() -> ParseError:
    # DRF's ParseError, not a DomainError: DRF imports this module (DEFAULT_PARSER_CLASSES)
    # while edge.exceptions imports DRF. The handler answers it in the one error shape.
    return ParseError(f"the body nests deeper than {MAX_BODY_NESTING} levels", code="body_too_deep")


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
        pending += [(child, depth + 1) for child in children if isinstance(child, dict | list)]
    return value


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, with a body nested deeper than ``MAX_BODY_NESTING`` a 400 (whether
    Python's parser reads it or runs out of stack first)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            parsed = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise too_deep() from None
        return check_nesting(parsed)
