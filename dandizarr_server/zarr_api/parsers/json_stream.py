"""A JSON request body read as a stream of parse events (ijson, its C backend) instead of one
``json.loads``: a pack batch body of 100,000 members is read member by member, never held as
Python objects all at once (docs/performance.md, "Service memory of a packed upload")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import ijson
from ijson.common import ObjectBuilder
from rest_framework.exceptions import ParseError

from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.json_body import MAX_BODY_NESTING, too_deep

# One parse event: ("start_map", None), ("map_key", "path"), ("string", "0/0"), ...
Event = tuple[str, Any]
OPENERS = frozenset(("start_map", "start_array"))
_CLOSERS = frozenset(("end_map", "end_array"))

# yajl turns an escaped lone surrogate into "?", or pairs it with the next \u escape whatever
# that is, where json.loads keeps it (and the path checks refuse it). A token is an escaped
# backslash (so that "\\ud800" is no escape), a valid pair, or a lone half (groups 1 and 2).
_SURROGATE_ESCAPES = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    rb"|(\\u[dD][89abAB][0-9a-fA-F]{2})|(\\u[dD][c-fC-F][0-9a-fA-F]{2})"
)
# What yajl reads in place of a lone half: an escape as long, of U+FFFD.
_REPLACEMENT = rb"\ufffd"
# The longest token: a pair, 12 bytes, held back to be scanned with the next block; a high
# half with fewer than 6 bytes after it may still be followed by its low half.
_PAIR_BYTES = 12
_HALF_BYTES = 6
_BLOCK_BYTES = 64 * 1024
# The longest run of a body between two quotes: longer than any value a batch holds (a key is at
# most 1,024 bytes, six times that escaped) and than any whitespace a client pads with. yajl
# lexes a token again with each block that extends it, so one 30 MB string cost 2 CPU-s in
# 64 KiB blocks; with this bound, a token costs what its bytes cost.
MAX_TOKEN_BYTES = 64 * 1024


class JsonBody:
    """The body's bytes for ijson: ``head`` (already read to see what the body is) then the rest
    of ``stream``. An escaped lone surrogate is handed to yajl as U+FFFD and noted in
    ``lone_surrogate``: the body is refused once it has been read as JSON (a body that is not
    JSON is a parse error first, as with json.loads)."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = head
        self._stream = stream
        self._pending = b""  # the end of the last block, scanned again with the next
        self._ended = False
        self.lone_surrogate = ""  # the first escaped lone surrogate, if any
        self._since_quote = 0  # bytes read since the last '"'

    def read(self, size: int = -1) -> bytes:
        while size != 0 and not self._ended:
            if self._head:
                block, self._head = self._head, b""
            else:
                block = self._stream.read(size if size > 0 else _BLOCK_BYTES)
            self._ended = not block
            self._bound_tokens(block)
            if passed := self._scanned(block):
                return passed
        return b""

    def lone_surrogate_refusal(self) -> None:
        if self.lone_surrogate:
            raise ValidationFailed(
                f"invalid body: the escape {self.lone_surrogate} is a lone surrogate; "
                "strings must be valid UTF-8"
            )

    def _bound_tokens(self, block: bytes) -> None:
        """Refuse the body once ``MAX_TOKEN_BYTES`` pass without a quote (before yajl sees them)."""
        runs = block.split(b'"')
        longest = max(self._since_quote + len(runs[0]), *map(len, runs[1:-1]), len(runs[-1]))
        self._since_quote = len(runs[-1]) if len(runs) > 1 else self._since_quote + len(block)
        if longest > MAX_TOKEN_BYTES:
            raise ValidationFailed(
                f"the body holds a value or a run of whitespace longer than {MAX_TOKEN_BYTES} "
                "bytes; no value of a batch is that long",
                code="value_too_long",
            )

    def _scanned(self, block: bytes) -> bytes:
        """What of the body so far can go to yajl: all but a tail that the next block may
        change the meaning of, lone surrogates replaced."""
        text = self._pending + block
        if b"\\" not in text:  # no escape at all (a client's usual body): nothing to scan
            self._pending = b""
            return text
        final = self._ended
        keep = len(text) if final else max(0, len(text) - _PAIR_BYTES)
        pieces: list[bytes] = []
        done = 0
        for token in _SURROGATE_ESCAPES.finditer(text):
            if not final and token.group(1) and token.end() + _HALF_BYTES > len(text):
                keep = token.start()  # its low half may be in the next block
                break
            lone = token.group(1) or token.group(2)
            if lone:
                self.lone_surrogate = self.lone_surrogate or lone.decode()
                pieces += [text[done : token.start()], _REPLACEMENT]
                done = token.end()
            keep = max(keep, token.end())
        keep = max(min(keep, len(text)), done)
        pieces.append(text[done:keep])
        self._pending = text[keep:]
        return b"".join(pieces)


@contextmanager
def json_parse_errors() -> Iterator[None]:
    """ijson's errors as DRF's ParseError: the 400 ``parse_error`` json.loads's give."""
    try:
        yield
    except ijson.JSONError as exc:
        message = exc.args[0] if exc.args else ""
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        raise ParseError(f"JSON parse error - {str(message).splitlines()[0]}") from None
    except UnicodeDecodeError as exc:
        raise ParseError(f"JSON parse error - {exc}") from None


def json_events(body: JsonBody) -> Iterator[Event]:
    """The body's parse events; numbers as json.loads makes them (int, or float)."""
    return ijson.basic_parse(body, use_float=True)


def _inside(events: Iterator[Event], event: str) -> Iterator[Event]:
    """The events of the container opened by ``event``, up to and with its closing one (none
    for a scalar): the depth walk ``value_of`` and ``skip_value`` share. A value nesting deeper
    than ``MAX_BODY_NESTING`` is refused as its events arrive, before it is built."""
    if event not in OPENERS:
        return
    depth = 1
    for event, value in events:
        yield event, value
        if event in OPENERS:
            depth += 1
            if depth > MAX_BODY_NESTING:
                raise too_deep()
        elif event in _CLOSERS:
            depth -= 1
            if depth == 0:
                return


def value_of(events: Iterator[Event], event: str, value: Any) -> Any:
    """The whole value starting with (``event``, ``value``): a scalar, or the container built
    from the events up to its end."""
    if event not in OPENERS:
        return value
    builder = ObjectBuilder()
    builder.event(event, value)
    for inner in _inside(events, event):
        builder.event(*inner)
    return builder.value


def skip_value(events: Iterator[Event], event: str) -> None:
    """Read past the value starting with ``event`` without building it."""
    for _ in _inside(events, event):
        pass
