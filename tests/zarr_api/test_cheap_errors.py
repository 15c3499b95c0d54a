"""Issue #47, findings 4, 5 and 7, and "errors are cheap": a refusal repeats at most a prefix of
what it refuses, a body nested past the bound is refused before anything reads it, a host the
service does not answer for is a plain 400, and every traceback in every log format is plain
and bounded. (The same requests against live services: tests/production/test_hostile_walk_live.py.)
"""

from __future__ import annotations

import base64
import json
import logging
import sys
import time
from typing import Any

import pytest
import structlog
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from dandizarr_server.logging_config import TRACEBACK_CHARS, structured_logging
from dandizarr_server.zarr_api.edge.echo import (
    DETAIL_CHARS,
    FIELD_CHARS,
    FIELD_DEPTH,
    FIELDS_CHARS,
    LISTED_ITEMS,
)
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed, error_body
from dandizarr_server.zarr_api.parsers.json_body import MAX_BODY_NESTING
from tests.support.api import Actor, create_archive, db_snapshot
from tests.support.cost_bounds import cpu_scale

HUGE = 30 << 20  # a 30 MB path or shard name, as the attacker sent
# The largest refusal of one value: a few lines, and the 1,024 characters of a path it names.
REFUSAL_BYTES = 4 << 10
# The largest error body of all: its detail, then its fields within their budget (a field's key
# and its count past it, the one item a list always names), a little JSON around them.
ERROR_BYTES = DETAIL_CHARS + FIELDS_CHARS + FIELD_CHARS
MD5 = "0" * 32
# A client's value that is a list of 5,000,000 items (10 MB of JSON) where a path belongs, and
# a number no float holds: both were repeated by the refusal (a 10 MB 400, 1.6 CPU-s; a 500).
LIST_PATH = "[0" + ",0" * (5_000_000 - 1) + "]"


def _refused(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert len(response.content) < REFUSAL_BYTES, len(response.content)
    body: dict[str, Any] = response.json()
    assert body["detail"] and body["code"]
    return body


@pytest.fixture
def archives(owner: Actor, dandiset: str, s3_storage: str) -> tuple[str, str]:
    return (
        create_archive(owner, dandiset, "loose.zarr", layout="loose"),
        create_archive(owner, dandiset, "sharded.zarr", layout="sharded"),
    )


def _pack_body(name: Any, path: bytes) -> bytes:
    return (
        b'{"shards": [{"name": ' + json.dumps(name).encode() + b', "etag": "' + MD5.encode()
        + b'", "size": 1, "members": [{"path": ' + path + b', "md5": "' + MD5.encode()
        + b'", "size": 1, "offset": 0}]}]}'
    )  # fmt: skip


@pytest.mark.parametrize("depth", [MAX_BODY_NESTING + 1, 990, 100_000])
def test_a_pack_start_nested_past_the_bound_is_refused_before_it_is_read(
    owner: Actor, archives: tuple[str, str], depth: int
) -> None:
    """Finding 4: a member path that is a list nested 990 deep was a 500 (the refusal's repr
    of it overflowed the stack) that took `dandizarr serve` down for 30 s."""
    before = db_snapshot()
    body = _pack_body("s0", b"[" * depth + b"]" * depth)
    started = time.process_time()
    response = owner.client.post(
        f"/api/zarr/{archives[1]}/upload/", body, content_type="application/json"
    )
    assert _refused(response)["code"] == "body_too_deep"
    assert time.process_time() - started < 0.5 * cpu_scale()
    assert db_snapshot() == before


def test_a_body_nested_at_the_bound_is_read(owner: Actor, archives: tuple[str, str]) -> None:
    """The bound refuses what nests deeper than it, not what reaches it: a path that is a list
    a few levels deep is the path rule's refusal (``invalid``), named by its kind."""
    body = _pack_body("s0", b"[[[1]]]")
    response = owner.client.post(
        f"/api/zarr/{archives[1]}/upload/", body, content_type="application/json"
    )
    assert _refused(response)["code"] == "invalid"


def test_a_json_body_nested_past_the_bound_is_refused(
    owner: Actor, archives: tuple[str, str]
) -> None:
    """The other bodies (json.loads through DRF's parser): the same bound, the same code."""
    nested = "[" * 990 + "]" * 990
    body = '[{"path": ' + nested + ', "base64md5": "AAAAAAAAAAAAAAAAAAAAAA=="}]'
    response = owner.client.post(
        f"/api/zarr/{archives[0]}/files/", body, content_type="application/json"
    )
    assert _refused(response)["code"] == "body_too_deep"


def _huge_path_requests(archives: tuple[str, str]) -> dict[str, tuple[str, str, Any]]:
    path = "a" * HUGE
    loose, sharded = archives
    b64 = base64.b64encode(bytes(16)).decode()
    return {
        "upload/": ("post", f"/api/zarr/{loose}/upload/", [{"path": path, "etag": MD5}]),
        "files/ POST": ("post", f"/api/zarr/{loose}/files/", [{"path": path, "base64md5": b64}]),
        "DELETE files/": ("delete", f"/api/zarr/{loose}/files/", [{"path": path}]),
        "pack shard name": (
            "post",
            f"/api/zarr/{sharded}/upload/",
            json.loads(_pack_body(path, b'"c/0"')),
        ),
    }


@pytest.mark.parametrize("what", ["upload/", "files/ POST", "DELETE files/", "pack shard name"])
def test_a_30_mb_value_is_refused_without_repeating_it(
    owner: Actor, archives: tuple[str, str], what: str
) -> None:
    """Finding 5: a 30 MB path was answered with a 60 MB 400, a 30 MB shard name a 180 MB one."""
    method, url, body = _huge_path_requests(archives)[what]
    before = db_snapshot()
    started = time.process_time()
    response = getattr(owner.client, method)(url, body, format="json")
    # Reading 30 MB of JSON costs a few tenths of a second; a 30 MB token in a streamed pack
    # body had cost 2 CPU-s more (yajl lexing it again with every 64 KiB block).
    assert time.process_time() - started < 1.0 * cpu_scale()
    refused = _refused(response)
    assert "a" * (FIELD_CHARS + 1) not in json.dumps(refused)
    assert db_snapshot() == before


def _value_requests(archives: tuple[str, str], value: str) -> dict[str, tuple[str, str, str]]:
    """The bodies of upload/, DANDI's files/ POST and DELETE files/ with ``value`` (raw JSON)
    where the one path belongs."""
    loose = archives[0]
    b64 = base64.b64encode(bytes(16)).decode()
    return {
        "upload/": (
            "post",
            f"/api/zarr/{loose}/upload/",
            f'[{{"path": {value}, "etag": "{MD5}"}}]',
        ),
        "files/ POST": (
            "post",
            f"/api/zarr/{loose}/files/",
            f'[{{"path": {value}, "base64md5": "{b64}"}}]',
        ),
        "DELETE files/": ("delete", f"/api/zarr/{loose}/files/", f'[{{"path": {value}}}]'),
    }


@pytest.mark.parametrize("what", ["upload/", "files/ POST", "DELETE files/"])
@pytest.mark.parametrize("value", [LIST_PATH, "1e400", "[1e400]"], ids=["list", "1e400", "[1e400]"])
def test_a_refused_value_of_any_kind_is_not_repeated(
    owner: Actor, archives: tuple[str, str], what: str, value: str
) -> None:
    """Finding 5 for what is not a string: a path that was a list of 5,000,000 items got a
    10 MB 400 (every item repeated in ``paths``), one that was ``1e400`` a 500 (no JSON answer
    can hold ``inf``, and the refusal repeated it)."""
    method, url, body = _value_requests(archives, value)[what]
    owner.client.raise_request_exception = False
    before = db_snapshot()
    started = time.process_time()
    response = getattr(owner.client, method)(url, body, content_type="application/json")
    assert time.process_time() - started < 1.0 * cpu_scale()
    refused = _refused(response)
    assert refused["code"] == ("invalid" if value == LIST_PATH else "parse_error")
    assert db_snapshot() == before


def test_a_pack_start_refusing_many_members_names_the_first_and_counts_them(
    owner: Actor, archives: tuple[str, str]
) -> None:
    """Finding 5 for lists: a pack start whose 25,000 member paths were each refused named every
    one, 1,000 characters each: a 27 MB 400. An error names its first items, within its budget,
    and how many there were."""
    count = 5_000
    members = [
        {"path": f"{i:05d}" + "a" * 1000 + "/", "md5": MD5, "size": 1, "offset": 0}
        for i in range(count)
    ]
    body = {"shards": [{"name": "s0", "etag": MD5, "size": 1, "members": members}]}
    response = owner.client.post(f"/api/zarr/{archives[1]}/upload/", body, format="json")
    assert response.status_code == 400
    assert len(response.content) < ERROR_BYTES, len(response.content)
    refused = response.json()
    assert refused["code"] == "invalid" and refused["paths_count"] == count
    assert 0 < len(refused["paths"]) <= LISTED_ITEMS
    assert [p["path"] for p in refused["paths"]] == [
        m["path"] for m in members[: len(refused["paths"])]
    ]  # each named whole: a client can tell which


def test_an_unknown_host_is_a_plain_400_with_one_log_line(
    db: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 7: an unknown Host header was logged with a rich traceback (77 ms of CPU and
    8.5 KB of log under `dandizarr serve`, against 2 ms for /healthz)."""
    with caplog.at_level(logging.INFO):
        response = Client(HTTP_HOST="attacker.example").get("/healthz")
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_host"
    assert "attacker.example" not in response.content.decode()
    assert [r for r in caplog.records if r.exc_info] == []
    assert sum(len(r.getMessage()) for r in caplog.records) < 1024


def _deep_recursion(depth: int) -> None:
    if depth:
        _deep_recursion(depth - 1)
    raise ValueError("x" * HUGE)  # a refused value in a message: the long part


def _formatted(log_format: str, exc_info: Any) -> str:
    """One plain logging record with ``exc_info`` (as Django's request logger makes one for a
    500), through the formatter the settings configure for ``log_format``."""
    spec = structured_logging(log_format, "INFO")["formatters"]["structured"]
    formatter = structlog.stdlib.ProcessorFormatter(
        processor=spec["processor"], foreign_pre_chain=spec["foreign_pre_chain"]
    )
    record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "boom", (), exc_info)
    return formatter.format(record)


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_a_traceback_is_plain_and_bounded_in_every_log_format(log_format: str) -> None:
    try:
        _deep_recursion(500)
    except ValueError:
        exc_info = sys.exc_info()
    started = time.process_time()
    text = _formatted(log_format, exc_info)
    assert time.process_time() - started < 0.5 * cpu_scale()
    assert len(text) < TRACEBACK_CHARS + 2048, len(text)
    assert "Traceback" in text and "_deep_recursion" in text
    assert not any(mark in text for mark in ("╭", "│", "╰", "locals"))


# Values a client may send, in any shape: deep, wide, huge strings and numbers.
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**300), max_value=2**300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=50),
    st.integers(min_value=FIELD_CHARS, max_value=5 * FIELD_CHARS).map(lambda n: "p" * n),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=200), inner),
    max_leaves=40,
)


def _depth_and_strings(value: Any) -> tuple[int, int]:
    """The deepest nesting of ``value`` and its longest string (keys included)."""
    deepest, longest = 0, 0
    pending = [(value, 0)]
    while pending:
        current, depth = pending.pop()
        deepest = max(deepest, depth)
        if isinstance(current, str):
            longest = max(longest, len(current))
        elif isinstance(current, list):
            pending += [(item, depth + 1) for item in current]
        elif isinstance(current, dict):
            longest = max([longest, *map(len, current)])
            pending += [(item, depth + 1) for item in current.values()]
    return deepest, longest


@given(
    detail=st.text(max_size=5000), fields=st.dictionaries(st.sampled_from(["paths", "x"]), _values)
)
def test_an_error_body_is_bounded_whatever_a_raise_site_puts_in(
    detail: str, fields: dict[str, Any]
) -> None:
    body = ValidationFailed(detail, **fields).body
    assert body == error_body(detail, code="invalid", **fields)
    assert len(body["detail"]) <= DETAIL_CHARS + 40
    deepest, longest = _depth_and_strings({k: v for k, v in body.items() if k != "detail"})
    assert deepest <= FIELD_DEPTH + 1
    assert longest <= FIELD_CHARS + 40
    # Renderable as JSON: no int too long to print, no inf or nan, no object of another kind.
    json.dumps(body, allow_nan=False)


# What a raise site may name in a field, long: a client's list or object of any length where a
# path belongs, a batch's every refused member, lists of lists.
_long_values = st.one_of(
    st.integers(0, 200_000).map(lambda n: [0] * n),
    st.integers(0, 5_000).map(lambda n: [{"path": "p" * FIELD_CHARS, "problem": "x"}] * n),
    st.integers(0, 5_000).map(lambda n: {f"k{i}": "v" * 300 for i in range(n)}),
    st.integers(0, 60).map(lambda n: [[["q" * 2000] * n] * n] * n),
    st.integers(0, 1_000).map(lambda n: [float("inf"), 2**100, "r" * 5000] * n),
)
_field_names = st.from_regex(r"[a-z]{1,30}", fullmatch=True).filter(
    lambda name: name not in {"code", "message"}
)


@given(
    detail=st.text(max_size=100) | st.integers(0, HUGE).map(lambda n: "d" * n),
    fields=st.dictionaries(
        _field_names, _values | _long_values | st.lists(_long_values, max_size=3), max_size=8
    ),
)
def test_any_error_body_is_bounded(detail: str, fields: dict[str, Any]) -> None:
    """Whatever a raise site passes (any detail, any fields of any length and shape), the body
    is JSON of a bounded size: a list names its first items and its count."""
    body = ValidationFailed(detail, **fields).body
    assert len(body["detail"]) <= DETAIL_CHARS + 40
    named = json.dumps({k: v for k, v in body.items() if k != "detail"}, allow_nan=False)
    assert len(named) < ERROR_BYTES - DETAIL_CHARS, len(named)
    for name, value in fields.items():
        if isinstance(value, list) and len(value) > LISTED_ITEMS:
            assert 0 < len(body[name]) <= LISTED_ITEMS
            assert body[f"{name}_count"] == len(value)
